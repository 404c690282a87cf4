package ofproto

import (
	"testing"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// TestRefuseUntranslated: the codec decodes Open vSwitch's Nicira
// extensions, the pipeline does not translate them yet, so FLOW_MOD,
// GROUP_MOD and PACKET_OUT carrying them are refused with the error Open
// vSwitch sends for what it does not implement (refuseUntranslated).
func TestRefuseUntranslated(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	mustAdd(t, p, "priority=1,in_port=1,actions=output:2")
	ip := openflow.Match{}.Add(openflow.Uint(openflow.FieldEthType, 0x0800))
	apply := func(as ...openflow.Action) openflow.Instructions {
		return openflow.Instructions{openflow.InstApplyActions{Actions: as}}
	}
	fm := func(m openflow.Match, is openflow.Instructions) *openflow.FlowMod {
		return &openflow.FlowMod{Command: openflow.FlowAdd, Priority: 5, BufferID: openflow.NoBuffer,
			OutPort: openflow.PortAny, OutGroup: openflow.GroupAny, Match: m, Instructions: is}
	}
	ct := openflow.ActionNXCT{Flags: openflow.NXCTFlagCommit, Zone: 1, Table: 2}
	cases := []struct {
		name string
		fm   *openflow.FlowMod
		typ  openflow.ErrorType
		code uint16
	}{
		// reg0 is field 0 of class NXM1: without the refusal it would
		// compile as in_port.
		{"match reg0", fm(openflow.Match{}.Add(openflow.Reg(0, 1)), nil), openflow.ErrTypeBadMatch, openflow.BadMatchBadField},
		{"match ct_state", fm(openflow.Match{}.Add(openflow.CtState(openflow.CtStateTrk, openflow.CtStateTrk)), nil),
			openflow.ErrTypeBadMatch, openflow.BadMatchBadField},
		{"ct", fm(ip, apply(ct)), openflow.ErrTypeBadAction, openflow.BadActionBadExpType},
		{"ct in write_actions", fm(ip, openflow.Instructions{openflow.InstWriteActions{Actions: openflow.Actions{ct}}}),
			openflow.ErrTypeBadAction, openflow.BadActionBadExpType},
		{"resubmit", fm(ip, apply(openflow.ActionNXResubmit{InPort: openflow.PortInPort, Table: 1})),
			openflow.ErrTypeBadAction, openflow.BadActionBadExpType},
		{"ct_clear", fm(ip, apply(openflow.ActionNXCTClear{})), openflow.ErrTypeBadAction, openflow.BadActionBadExpType},
		{"set_field reg0", fm(ip, apply(openflow.ActionSetField{Field: openflow.Reg(0, 1)})),
			openflow.ErrTypeBadAction, openflow.BadActionBadSetType},
		{"delete by reg0", &openflow.FlowMod{Command: openflow.FlowDelete, TableID: openflow.TableAll,
			OutPort: openflow.PortAny, OutGroup: openflow.GroupAny, Match: openflow.Match{}.Add(openflow.Reg(0, 1))},
			openflow.ErrTypeBadMatch, openflow.BadMatchBadField},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := p.FlowMod(c.fm)
			wantErr(t, err, c.typ, c.code)
		})
	}
	if n := flowCount(p); n != 1 {
		t.Fatalf("%d flows after refusals, want 1", n)
	}
	// A flow stats request filtering on reg0 selects nothing rather than
	// reading reg0 as in_port=1.
	if got := p.FlowStats(&openflow.FlowStatsRequest{TableID: openflow.TableAll, OutPort: openflow.PortAny,
		OutGroup: openflow.GroupAny, Match: openflow.Match{}.Add(openflow.Reg(0, 1))}); len(got) != 0 {
		t.Fatalf("dump-flows reg0=1 selected %d flows", len(got))
	}
	err := p.GroupMod(&openflow.GroupMod{Command: openflow.GroupAdd, GroupType: openflow.GroupTypeSelect, GroupID: 9,
		Buckets: []openflow.Bucket{{Weight: 1, WatchPort: openflow.PortAny, WatchGroup: openflow.GroupAny,
			Actions: openflow.Actions{openflow.ActionNXResubmit{InPort: openflow.PortInPort, Table: 1}}}}})
	wantErr(t, err, openflow.ErrTypeBadAction, openflow.BadActionBadExpType)
}
