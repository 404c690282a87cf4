package ofproto

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// nxFlow parses s (ovs-ofctl syntax for the match and the basic actions)
// and adds extension match fields and, in front of the apply-actions,
// extension actions.
func nxFlow(t testing.TB, s string, match []openflow.OXM, acts ...openflow.Action) *openflow.FlowMod {
	t.Helper()
	fm := flowMod(t, openflow.FlowAdd, s)
	fm.Match.Fields = append(fm.Match.Fields, match...)
	for i, in := range fm.Instructions {
		if ap, ok := in.(openflow.InstApplyActions); ok {
			ap.Actions = append(append(openflow.Actions{}, acts...), ap.Actions...)
			fm.Instructions[i] = ap
			return fm
		}
	}
	if len(acts) > 0 {
		fm.Instructions = append(openflow.Instructions{openflow.InstApplyActions{Actions: acts}}, fm.Instructions...)
	}
	return fm
}

func mustAddNX(t testing.TB, p *Pipeline, fms ...*openflow.FlowMod) {
	t.Helper()
	for _, fm := range fms {
		if _, err := p.FlowMod(fm); err != nil {
			t.Fatalf("add %v: %v", fm, err)
		}
	}
}

func ctState(bits, mask uint32) openflow.OXM { return openflow.CtState(bits, mask) }

func ctAction(flags uint16, zone uint16, table uint8, nested ...openflow.Action) openflow.ActionNXCT {
	return openflow.ActionNXCT{Flags: flags, Zone: zone, Table: table, Actions: nested}
}

func regKey(i int) openflow.FieldKey {
	return openflow.FieldKey{Class: openflow.ClassNXM1, Field: openflow.NXMReg0 + openflow.Field(i)}
}

// A Service the way a controller programs one into Open vSwitch: every IP
// packet goes through the tracker (restoring an established connection's
// translation), a new connection to the VIP picks a backend in a select
// group and commits with DNAT, established ones go on to forwarding.
// Each pass is one cached flow; the tuple never enters the first pass's
// mask (the tracker reads it per packet).
func TestConntrackServicePasses(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	const zone = 5
	// A bucket loads the endpoint into registers and resubmits to the
	// endpoint table, which commits with DNAT, as Antrea does (a bucket
	// may also hold the ct itself, as OVN's do: test/ctdiff select_dnat).
	backend := func(ip uint32) openflow.Bucket {
		return openflow.Bucket{Weight: 1, WatchPort: openflow.PortAny, WatchGroup: openflow.GroupAny, Actions: openflow.Actions{
			openflow.ActionNXRegLoad{Dst: openflow.Subfield{Field: regKey(3), NBits: 32}, Value: uint64(ip)},
			openflow.ActionNXResubmit{InPort: openflow.PortInPort, Table: 3},
		}}
	}
	if err := p.GroupMod(&openflow.GroupMod{Command: openflow.GroupAdd, GroupType: openflow.GroupTypeSelect, GroupID: 1,
		Buckets: []openflow.Bucket{backend(0x0a080002), backend(0x0a080003)}}); err != nil {
		t.Fatal(err)
	}
	endpoint := func(reg3 uint32, ip string) *openflow.FlowMod {
		return nxFlow(t, "table=3,priority=100,tcp,actions=drop", []openflow.OXM{openflow.Reg(3, reg3)},
			ctAction(openflow.NXCTFlagCommit, zone, 2,
				openflow.ActionNXNAT{Flags: openflow.NXNATFlagDst, AddrMin: netip.MustParseAddr(ip), PortMin: 8080},
				openflow.ActionNXRegLoad2{Field: openflow.NXUintMasked(openflow.NXMCtMark, 1, 1)}))
	}
	mustAddNX(t, p, endpoint(0x0a080002, "10.8.0.2"), endpoint(0x0a080003, "10.8.0.3"),
		nxFlow(t, "table=0,priority=100,ip,actions=drop", []openflow.OXM{ctState(0, openflow.CtStateTrk)},
			ctAction(0, zone, 1, openflow.ActionNXNAT{})),
		nxFlow(t, "table=1,priority=100,tcp,nw_dst=10.96.0.10,tp_dst=80,actions=group:1",
			[]openflow.OXM{ctState(openflow.CtStateNew|openflow.CtStateTrk, openflow.CtStateNew|openflow.CtStateTrk)}),
		nxFlow(t, "table=1,priority=90,ip,actions=goto_table:2",
			[]openflow.OXM{ctState(openflow.CtStateEst|openflow.CtStateTrk, openflow.CtStateEst|openflow.CtStateTrk)}),
		nxFlow(t, "table=1,priority=0,actions=drop", nil),
		nxFlow(t, "table=2,priority=100,ip,nw_dst=10.8.0.2,actions=output:2", nil),
		nxFlow(t, "table=2,priority=100,ip,nw_dst=10.8.0.3,actions=output:3", nil),
		nxFlow(t, "table=2,priority=100,ip,nw_dst=10.8.0.1,actions=output:1", nil),
	)
	client := tcpKey(1, "10.8.0.1", "10.96.0.10", 40000, 80)

	// Pass 1: untracked → ct(zone=5,nat), recirculate.
	tr := translate(t, p, client)
	if len(tr.Actions) != 2 {
		t.Fatalf("pass 1: %s\n%s", actions(tr), FormatTrace(tr.Trace))
	}
	ct, ok1 := tr.Actions[0].(flow.CT)
	rc, ok2 := tr.Actions[1].(flow.Recirc)
	if !ok1 || !ok2 || ct.Zone != zone || ct.NAT == nil || ct.NAT.Kind != flow.NATNone || ct.Flags != 0 {
		t.Fatalf("pass 1: %s, want ct(zone=5,nat),recirc", actions(tr))
	}
	if tr.Mask.IPDst != ([16]byte{}) || tr.Mask.TpDst != 0 || tr.Mask.RecircID != ^uint32(0) || tr.Mask.CtState&flow.CtTrk == 0 {
		t.Fatalf("pass 1 mask %s: the tracker reads the tuple itself; recirc_id and ct_state must be in it",
			flow.Format(client, tr.Mask))
	}

	// Pass 2, a new connection: the group picks a backend and commits.
	k2 := client
	k2.RecircID, k2.CtState, k2.CtZone = rc.ID, flow.CtTrk|flow.CtNew, zone
	tr2 := translate(t, p, k2)
	if len(tr2.Actions) != 2 {
		t.Fatalf("pass 2: %s\n%s", actions(tr2), FormatTrace(tr2.Trace))
	}
	commit, _ := tr2.Actions[0].(flow.CT)
	rc2, _ := tr2.Actions[1].(flow.Recirc)
	if commit.Flags != flow.CTCommit || commit.Zone != zone || commit.Mark != 1 || commit.MarkMask != 1 ||
		commit.NAT == nil || commit.NAT.Kind != flow.NATDst || commit.NAT.PortMin != 8080 || rc2.ID == 0 || rc2.ID == rc.ID {
		t.Fatalf("pass 2: %s, want ct(commit,zone=5,mark=0x1/0x1,nat(dst=backend:8080)),recirc", actions(tr2))
	}
	if tr2.Mask.TpSrc != 0xffff || tr2.Mask.CtState&(flow.CtNew|flow.CtTrk) != flow.CtNew|flow.CtTrk {
		t.Fatalf("pass 2 mask %s: the select group hashes the 5-tuple", flow.Format(k2, tr2.Mask))
	}
	// The same connection picks the same backend every time.
	if again := translate(t, p, k2); actions(again) != actions(tr2) {
		t.Fatalf("pass 2 again: %s vs %s", actions(again), actions(tr2))
	}

	// Pass 3, after DNAT: forwarded to the backend the group chose.
	k3 := k2
	k3.RecircID = rc2.ID
	k3.CtState |= flow.CtDNAT
	k3.SetIPDst(commit.NAT.AddrMin)
	k3.TpDst = 8080
	want := map[string]string{"10.8.0.2": "output:2", "10.8.0.3": "output:3"}[commit.NAT.AddrMin.String()]
	if got := actions(translate(t, p, k3)); got != want {
		t.Fatalf("pass 3: %s, want %s", got, want)
	}

	// An established packet (already translated by pass 1's nat).
	est := tcpKey(1, "10.8.0.1", "10.8.0.3", 40000, 8080)
	est.RecircID, est.CtState, est.CtZone = rc.ID, flow.CtTrk|flow.CtEst|flow.CtDNAT, zone
	if got := actions(translate(t, p, est)); got != "output:3" {
		t.Fatalf("established: %s", got)
	}
	// Its reply, un-NATed by pass 1's nat: back to the client.
	rpl := tcpKey(3, "10.96.0.10", "10.8.0.1", 80, 40000)
	rpl.RecircID, rpl.CtState, rpl.CtZone = rc.ID, flow.CtTrk|flow.CtEst|flow.CtRpl|flow.CtDNAT, zone
	if got := actions(translate(t, p, rpl)); got != "output:1" {
		t.Fatalf("reply: %s", got)
	}
	// An invalid packet is dropped by the default.
	inv := k2
	inv.CtState = flow.CtTrk | flow.CtInv
	if got := actions(translate(t, p, inv)); got != "drop" {
		t.Fatalf("invalid: %s", got)
	}
	if n := p.RecircStates(); n < 2 || n > 3 {
		t.Fatalf("%d frozen states, want one per ct(table=) point and register values", n)
	}
}

// Registers: load and move write them, rules match them, a recirculation
// carries them; they never enter a megaflow (their values come from the
// actions), while the packet bits a move read do.
func TestRegistersLoadMoveMatchAndRecirculate(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	ipSrc := openflow.FieldKey{Class: openflow.ClassNXM0, Field: 7} // NXM_OF_IP_SRC
	mustAddNX(t, p,
		nxFlow(t, "table=0,priority=10,ip,actions=goto_table:1", nil,
			openflow.ActionNXRegLoad{Dst: openflow.Subfield{Field: regKey(0), Ofs: 0, NBits: 16}, Value: 5},
			openflow.ActionNXRegMove{Src: openflow.Subfield{Field: ipSrc, NBits: 32}, Dst: openflow.Subfield{Field: regKey(1), NBits: 32}},
			openflow.ActionNXRegLoad2{Field: openflow.NXUintMasked(openflow.NXMReg0+6, 7, 0xffff)}),
		nxFlow(t, "table=1,priority=10,ip,actions=drop", []openflow.OXM{openflow.Reg(0, 5), openflow.Reg(1, 0x0a080001)},
			openflow.ActionNXCT{Table: 2, ZoneSrc: &openflow.Subfield{Field: regKey(6), NBits: 16}}),
		nxFlow(t, "table=1,priority=0,actions=output:3", nil),
		nxFlow(t, "table=2,priority=10,actions=output:2", []openflow.OXM{openflow.Reg(0, 5), openflow.Reg(6, 7)}),
	)
	k := tcpKey(1, "10.8.0.1", "10.8.0.2", 1, 2)
	tr := translate(t, p, k)
	ct, ok := tr.Actions[0].(flow.CT)
	if !ok || ct.Zone != 7 || len(tr.Actions) != 2 {
		t.Fatalf("pass 1: %s, want ct(zone=7),recirc\n%s", actions(tr), FormatTrace(tr.Trace))
	}
	if tr.Mask.IPSrc[0] != 0xff || tr.Mask.IPSrc[3] != 0xff {
		t.Fatalf("mask %s: the move read ip_src", flow.Format(k, tr.Mask))
	}
	// Another source: reg1 differs, table 1's default.
	if got := actions(translate(t, p, tcpKey(1, "10.8.0.9", "10.8.0.2", 1, 2))); got != "output:3" {
		t.Fatalf("other source: %s", got)
	}
	k2 := k
	k2.RecircID, k2.CtState = tr.Actions[1].(flow.Recirc).ID, flow.CtTrk|flow.CtNew
	tr2 := translate(t, p, k2)
	if actions(tr2) != "output:2" {
		t.Fatalf("pass 2: %s, want the registers frozen with the pass\n%s", actions(tr2), FormatTrace(tr2.Trace))
	}
}

// ct_clear untracks the packet for the rest of the pass.
func TestCtClear(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	mustAddNX(t, p,
		nxFlow(t, "table=0,priority=10,ip,actions=goto_table:1", []openflow.OXM{ctState(openflow.CtStateTrk, openflow.CtStateTrk)},
			openflow.ActionNXCTClear{}),
		nxFlow(t, "table=1,priority=10,ip,actions=output:2", []openflow.OXM{ctState(0, openflow.CtStateTrk)}),
		nxFlow(t, "table=1,priority=0,actions=output:3", nil),
	)
	k := tcpKey(1, "10.8.0.1", "10.8.0.2", 1, 2)
	k.CtState, k.CtMark = flow.CtTrk|flow.CtEst, 9
	tr := translate(t, p, k)
	if got := actions(tr); got != "ct_clear,output:2" {
		t.Fatalf("%s\n%s", got, FormatTrace(tr.Trace))
	}
}

// ct(table=T) forks: actions for the untracked original after it are not
// something the fast path can do; the translation says so and is not cached.
func TestCtForkThenOutputIsRefusedAtTranslation(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	mustAddNX(t, p, nxFlow(t, "table=0,priority=10,ip,actions=output:2", nil, ctAction(0, 0, 1)))
	tr, err := p.Translate(tcpKey(1, "10.8.0.1", "10.8.0.2", 1, 2), TranslateOptions{Trace: true})
	if !errors.Is(err, errAfterRecirc) || !tr.NoCache || strings.Contains(actions(tr), "output") {
		t.Fatalf("%s err %v NoCache %v", actions(tr), err, tr.NoCache)
	}
}

// What translation cannot do is refused at FLOW_MOD with the error Open
// vSwitch sends for an action it does not implement.
func TestConntrackRefusals(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	for _, tc := range []struct {
		name string
		fm   *openflow.FlowMod
		typ  openflow.ErrorType
		code uint16
	}{
		{"alg", nxFlow(t, "tcp,actions=drop", nil, openflow.ActionNXCT{Flags: openflow.NXCTFlagCommit, Table: openflow.NXCTRecircNone, Alg: openflow.NXCTAlgFTP}),
			openflow.ErrTypeBadAction, openflow.BadActionBadArgument},
		{"ct_ipv6_src", nxFlow(t, "ipv6,actions=drop", []openflow.OXM{ctState(openflow.CtStateTrk, openflow.CtStateTrk|openflow.CtStateInv),
			openflow.NXAddr(openflow.NXMCtIPv6Src, netip.MustParseAddr("fd00::1"))}),
			openflow.ErrTypeBadMatch, openflow.BadMatchBadField},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.FlowMod(tc.fm)
			wantErr(t, err, tc.typ, tc.code)
		})
	}
}

// output:NXM_NX_REG1[] sends to the port a register holds (Antrea's L2
// forwarding loads the port, then outputs from the register).
func TestOutputFromRegister(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	fm, err := openflow.ParseFlow("table=0,priority=10,ip,actions=load:0x2->NXM_NX_REG1[],goto_table:1")
	if err != nil {
		t.Fatal(err)
	}
	mustAddNX(t, p, fm)
	fm, err = openflow.ParseFlow("table=1,priority=10,actions=output:NXM_NX_REG1[]")
	if err != nil {
		t.Fatal(err)
	}
	mustAddNX(t, p, fm)
	if got := actions(translate(t, p, tcpKey(1, "10.8.0.1", "10.8.0.2", 1, 2))); got != "output:2" {
		t.Fatalf("%s, want output:2", got)
	}
}

// TestFreeRecirc: frozen states no cached flow names are freed once no
// translation handed them out since the previous call; a freed state is
// registered again, under the same id, by the first pass that leads to it.
func TestFreeRecirc(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	ipSrc := openflow.FieldKey{Class: openflow.ClassNXM0, Field: 7} // NXM_OF_IP_SRC
	mustAddNX(t, p,
		nxFlow(t, "table=0,priority=10,ip,actions=drop", nil,
			openflow.ActionNXRegMove{Src: openflow.Subfield{Field: ipSrc, NBits: 32}, Dst: openflow.Subfield{Field: regKey(1), NBits: 32}},
			openflow.ActionNXCT{Table: 1, ZoneSrc: &openflow.Subfield{Field: regKey(6), NBits: 16}}),
		nxFlow(t, "table=1,priority=10,actions=output:2", nil),
	)
	// One frozen state per source (reg1 carries it).
	idOf := func(src string) uint32 {
		t.Helper()
		tr := translate(t, p, tcpKey(1, src, "10.8.0.2", 1, 2))
		rc, ok := tr.Actions[len(tr.Actions)-1].(flow.Recirc)
		if !ok {
			t.Fatalf("%s: %s, want a recirculation", src, actions(tr))
		}
		return rc.ID
	}
	a, b := idOf("10.8.0.1"), idOf("10.8.0.2")
	if p.RecircStates() != 2 || a == b {
		t.Fatalf("%d states, ids %#x %#x", p.RecircStates(), a, b)
	}
	// Both handed out since the last call: kept.
	if n := p.FreeRecirc(nil); n != 0 {
		t.Fatalf("freed %d states handed out just now", n)
	}
	// Then b only is named by a cached flow: a goes.
	if n := p.FreeRecirc(map[uint32]bool{b: true}); n != 1 || p.KnowsRecirc(a) || !p.KnowsRecirc(b) {
		t.Fatalf("freed %d; knows a %v, b %v", n, p.KnowsRecirc(a), p.KnowsRecirc(b))
	}
	// A second pass resuming b keeps it for one more call.
	k := tcpKey(1, "10.8.0.2", "10.8.0.2", 1, 2)
	k.RecircID, k.CtState = b, flow.CtTrk|flow.CtNew
	if got := actions(translate(t, p, k)); got != "output:2" {
		t.Fatalf("pass 2: %s", got)
	}
	if n := p.FreeRecirc(nil); n != 0 {
		t.Fatalf("freed %d, but b was just resumed", n)
	}
	if n := p.FreeRecirc(nil); n != 1 || p.RecircStates() != 0 {
		t.Fatalf("freed %d, %d states left", n, p.RecircStates())
	}
	// The first pass registers a again, under the same id.
	if got := idOf("10.8.0.1"); got != a || !p.KnowsRecirc(a) {
		t.Fatalf("a again: %#x, want %#x", got, a)
	}
}
