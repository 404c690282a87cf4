package ofproto

import (
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/openflow"
)

func flowCount(p *Pipeline) int {
	return len(p.FlowStats(&openflow.FlowStatsRequest{TableID: openflow.TableAll, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny}))
}

func TestFlowModErrors(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	if err := p.GroupMod(&openflow.GroupMod{Command: openflow.GroupAdd, GroupType: openflow.GroupTypeIndirect, GroupID: 1,
		Buckets: []openflow.Bucket{{WatchPort: openflow.PortAny, WatchGroup: openflow.GroupAny}}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		flow string
		typ  openflow.ErrorType
		code uint16
	}{
		{"table=8,actions=drop", openflow.ErrTypeFlowModFailed, openflow.FlowModBadTableID},
		{"table=2,actions=goto_table:1", openflow.ErrTypeBadInstruction, openflow.BadInstBadTableID},
		{"table=2,actions=goto_table:9", openflow.ErrTypeBadInstruction, openflow.BadInstBadTableID},
		{"actions=group:7", openflow.ErrTypeBadAction, openflow.BadActionBadOutGroup},
		{"actions=meter:1", openflow.ErrTypeMeterModFailed, openflow.MeterModUnknownMeter},
		{"actions=push_mpls:0x0800", openflow.ErrTypeBadAction, openflow.BadActionBadArgument},
		{"actions=push_pbb:0x8100", openflow.ErrTypeBadAction, openflow.BadActionBadArgument},
		{"actions=set_queue:1,output:2", openflow.ErrTypeBadAction, openflow.BadActionBadQueue},
		{"actions=write_actions(set_queue:0,output:2)", openflow.ErrTypeBadAction, openflow.BadActionBadQueue},
		{"arp,actions=set_field:1->arp_op", openflow.ErrTypeBadAction, openflow.BadActionBadSetType},
		{"ipv6,ipv6_exthdr=0x1/0x1,actions=drop", openflow.ErrTypeBadMatch, openflow.BadMatchBadField},
		{"actions=TABLE", openflow.ErrTypeBadAction, openflow.BadActionBadOutPort},
		{"tcp,tp_dst=80,actions=drop,set_field:1->udp_dst", openflow.ErrTypeBadAction, openflow.BadActionMatchInconsistent},
	}
	for _, tc := range tests {
		t.Run(tc.flow, func(t *testing.T) {
			fm, err := openflow.ParseFlow(tc.flow)
			if err != nil {
				t.Skipf("parser does not take %q: %v", tc.flow, err)
			}
			_, err = p.FlowMod(fm)
			wantErr(t, err, tc.typ, tc.code)
		})
	}
	// in_phy_port only equal to in_port.
	fm := flowMod(t, openflow.FlowAdd, "in_port=1,actions=drop")
	fm.Match = fm.Match.Add(openflow.Uint(openflow.FieldInPhyPort, 2))
	_, err := p.FlowMod(fm)
	wantErr(t, err, openflow.ErrTypeBadMatch, openflow.BadMatchBadField)
	fm.Match.Fields[1] = openflow.Uint(openflow.FieldInPhyPort, 1)
	if _, err := p.FlowMod(fm); err != nil {
		t.Fatalf("in_phy_port == in_port: %v", err)
	}
	// set_queue in a PACKET_OUT: refused as in a flow.
	_, err = p.TranslatePacketOut(tcpKey(0, "10.0.0.1", "10.0.0.2", 1, 2), openflow.PortController,
		openflow.Actions{openflow.ActionSetQueue{QueueID: 1}, openflow.ActionOutput{Port: 2}}, TranslateOptions{})
	wantErr(t, err, openflow.ErrTypeBadAction, openflow.BadActionBadQueue)
	// TABLE_FULL.
	q := New(Config{NumTables: 2, MaxRulesPerTable: 2})
	mustAdd(t, q, "priority=1,actions=drop", "priority=2,actions=drop", "priority=2,actions=output:1")
	_, err = q.FlowMod(flowMod(t, openflow.FlowAdd, "priority=3,actions=drop"))
	wantErr(t, err, openflow.ErrTypeFlowModFailed, openflow.FlowModTableFull)
	// TABLE_MOD.
	wantErr(t, p.TableMod(&openflow.TableMod{TableID: 9}), openflow.ErrTypeTableModFailed, openflow.TableModBadTable)
	if err := p.TableMod(&openflow.TableMod{TableID: openflow.TableAll}); err != nil {
		t.Fatal(err)
	}
}

func TestFlowModAddReplaceOverlap(t *testing.T) {
	p, c := newTestPipeline(t, 3)
	mustAdd(t, p, "priority=10,ip,nw_dst=10.0.0.0/8,actions=output:2")
	k := tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2)
	tr := translate(t, p, k)
	p.Credit(tr.Rules, 3, 300, c.now())
	c.advance(5 * time.Second)
	// Identical match and priority replaces, keeping counters.
	v := p.Version()
	mustAdd(t, p, "priority=10,ip,nw_dst=10.0.0.0/8,actions=output:3")
	if p.Version() == v {
		t.Fatal("version did not move")
	}
	st := p.FlowStats(&openflow.FlowStatsRequest{TableID: 0, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny})
	if len(st) != 1 || st[0].PacketCount != 3 || st[0].ByteCount != 300 || st[0].Instructions.String() != "output:3" {
		t.Fatalf("stats %+v", st)
	}
	if actions(translate(t, p, k)) != "output:3" {
		t.Fatal("not replaced")
	}
	// RESET_COUNTS clears them.
	mustAdd(t, p, "priority=10,ip,nw_dst=10.0.0.0/8,reset_counts,actions=output:3")
	st = p.FlowStats(&openflow.FlowStatsRequest{TableID: 0, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny})
	if st[0].PacketCount != 0 {
		t.Fatalf("reset_counts: %+v", st[0])
	}
	// CHECK_OVERLAP: same priority, overlapping → error; other priority or disjoint → fine.
	_, err := p.FlowMod(flowMod(t, openflow.FlowAdd, "priority=10,check_overlap,ip,nw_dst=10.1.0.0/16,actions=drop"))
	wantErr(t, err, openflow.ErrTypeFlowModFailed, openflow.FlowModOverlap)
	_, err = p.FlowMod(flowMod(t, openflow.FlowAdd, "priority=10,check_overlap,ip,nw_dst=10.0.0.0/8,actions=drop"))
	wantErr(t, err, openflow.ErrTypeFlowModFailed, openflow.FlowModOverlap)
	mustAdd(t, p, "priority=11,check_overlap,ip,nw_dst=10.1.0.0/16,actions=drop",
		"priority=10,check_overlap,ip,nw_dst=11.0.0.0/8,actions=drop",
		"priority=10,check_overlap,arp,actions=drop")
	if n := flowCount(p); n != 4 {
		t.Fatalf("%d flows", n)
	}
}

func TestFlowModModify(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	mustAdd(t, p,
		"priority=10,cookie=0x11,ip,nw_dst=10.0.0.0/8,actions=output:1",
		"priority=20,cookie=0x12,ip,nw_dst=10.1.0.0/16,actions=output:1",
		"priority=30,cookie=0x21,tcp,nw_dst=10.1.2.0/24,actions=output:1",
	)
	outs := func() map[uint64]string {
		m := map[uint64]string{}
		for _, s := range p.FlowStats(&openflow.FlowStatsRequest{TableID: openflow.TableAll, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny}) {
			m[s.Cookie] = s.Instructions.String()
		}
		return m
	}
	// Non-strict: every rule at least as specific as ip,nw_dst=10.1/16, cookie 0x1X.
	fm := flowMod(t, openflow.FlowModify, "cookie=0x10/0xf0,ip,nw_dst=10.1.0.0/16,actions=output:2")
	if _, err := p.FlowMod(fm); err != nil {
		t.Fatal(err)
	}
	if got := outs(); got[0x11] != "output:1" || got[0x12] != "output:2" || got[0x21] != "output:1" {
		t.Fatalf("after modify: %v", got)
	}
	// Strict: only exact match and priority; the cookie stays.
	fm = flowMod(t, openflow.FlowModifyStrict, "priority=30,cookie=0x99,tcp,nw_dst=10.1.2.0/24,actions=output:3")
	if _, err := p.FlowMod(fm); err != nil {
		t.Fatal(err)
	}
	if got := outs(); got[0x21] != "output:3" || len(got) != 3 {
		t.Fatalf("after modify_strict: %v", got)
	}
	// Modify of nothing adds nothing (OpenFlow 1.3).
	fm = flowMod(t, openflow.FlowModify, "ip,nw_dst=172.16.0.0/12,actions=output:3")
	if _, err := p.FlowMod(fm); err != nil || flowCount(p) != 3 {
		t.Fatalf("modify of nothing: %v, %d flows", err, flowCount(p))
	}
}

func TestFlowModDelete(t *testing.T) {
	setup := func() *Pipeline {
		p, _ := newTestPipeline(t, 3)
		if err := p.GroupMod(&openflow.GroupMod{Command: openflow.GroupAdd, GroupType: openflow.GroupTypeAll, GroupID: 5}); err != nil {
			t.Fatal(err)
		}
		mustAdd(t, p,
			"table=0,priority=10,cookie=0x1,send_flow_rem,ip,actions=output:1",
			"table=0,priority=20,cookie=0x2,tcp,actions=output:2",
			"table=1,priority=10,cookie=0x3,ip,actions=write_actions(output:2)",
			"table=1,priority=30,cookie=0x4,udp,actions=group:5",
		)
		return p
	}
	tests := []struct {
		cmd  uint8
		flow string
		want int // removed
	}{
		{openflow.FlowDelete, "table=0,ip", 2},
		{openflow.FlowDelete, "table=255", 4},
		{openflow.FlowDelete, "table=255,tcp", 1},
		{openflow.FlowDelete, "table=255,ip", 4},
		{openflow.FlowDelete, "table=255,out_port=2", 2},
		{openflow.FlowDelete, "table=255,out_group=5", 1},
		{openflow.FlowDelete, "table=255,cookie=0x2/0x2", 2}, // 0x2 and 0x3
		{openflow.FlowDelete, "table=255,cookie=0x2/0xff", 1},
		{openflow.FlowDeleteStrict, "table=0,ip", 0},
		{openflow.FlowDeleteStrict, "table=0,priority=10,ip", 1},
		{openflow.FlowDeleteStrict, "table=0,priority=10,ip,out_port=2", 0},
	}
	for _, tc := range tests {
		t.Run(tc.flow, func(t *testing.T) {
			p := setup()
			fm := flowMod(t, tc.cmd, tc.flow)
			rm, err := p.FlowMod(fm)
			if err != nil {
				t.Fatal(err)
			}
			if len(rm) != tc.want || flowCount(p) != 4-tc.want {
				t.Fatalf("removed %d (%d left), want %d", len(rm), flowCount(p), tc.want)
			}
			for _, r := range rm {
				if r.Reason != openflow.FlowRemovedDelete || r.SendFlowRem() != (r.Cookie == 1) {
					t.Fatalf("removed %+v", r)
				}
			}
		})
	}
}

func TestTimeoutsAndCounters(t *testing.T) {
	p, c := newTestPipeline(t, 3)
	mustAdd(t, p,
		"priority=10,cookie=0x1,idle_timeout=10,send_flow_rem,tcp,actions=output:2",
		"priority=10,cookie=0x2,hard_timeout=30,idle_timeout=5,udp,actions=output:2",
		"priority=0,cookie=0x3,actions=drop",
	)
	k := tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2)
	tr := translate(t, p, k)
	c.advance(8 * time.Second)
	p.Credit(tr.Rules, 2, 200, c.now()) // used at t+8: idle deadline t+18
	u := k
	u.NwProto = 17
	tru := translate(t, p, u)
	c.advance(6 * time.Second) // t+14: udp idle (5s since created t) expired
	rm := p.Expire()
	if len(rm) != 1 || rm[0].Cookie != 2 || rm[0].Reason != openflow.FlowRemovedIdleTimeout {
		t.Fatalf("expired %+v", rm)
	}
	c.advance(4 * time.Second) // t+18
	rm = p.Expire()
	if len(rm) != 1 || rm[0].Cookie != 1 || rm[0].Reason != openflow.FlowRemovedIdleTimeout || !rm[0].SendFlowRem() ||
		rm[0].PacketCount != 2 || rm[0].Duration != 18*time.Second {
		t.Fatalf("expired %+v", rm)
	}
	msg := rm[0].Message()
	if msg.DurationSec != 18 || msg.ByteCount != 200 || msg.Match.String() != "tcp" {
		t.Fatalf("flow removed %+v", msg)
	}
	// Credit of a removed rule is harmless.
	p.Credit(tru.Rules, 1, 1, c.now())
	// Hard timeout wins over use.
	mustAdd(t, p, "priority=5,cookie=0x4,hard_timeout=2,arp,actions=drop")
	c.advance(time.Second)
	p.Credit(nil, 0, 0, c.now())
	c.advance(time.Second)
	if rm = p.Expire(); len(rm) != 1 || rm[0].Reason != openflow.FlowRemovedHardTimeout {
		t.Fatalf("hard: %+v", rm)
	}
	// Table counters come from Credit: lookups and matches.
	ts := p.TableStats()
	if len(ts) != 8 || ts[0].ActiveCount != 1 || ts[0].LookupCount != 3 || ts[0].MatchedCount != 3 {
		t.Fatalf("table stats %+v", ts[0])
	}
	agg := p.AggregateStats(&openflow.AggregateStatsRequest{TableID: openflow.TableAll, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny})
	if agg.FlowCount != 1 {
		t.Fatalf("aggregate %+v", agg)
	}
}

func TestMissCountsLookup(t *testing.T) {
	p, c := newTestPipeline(t, 3)
	mustAdd(t, p, "table=0,actions=goto_table:1")
	tr := translate(t, p, tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2))
	p.Credit(tr.Rules, 4, 400, c.now())
	ts := p.TableStats()
	if ts[1].LookupCount != 4 || ts[1].MatchedCount != 0 || ts[0].MatchedCount != 4 {
		t.Fatalf("stats %+v %+v", ts[0], ts[1])
	}
}
