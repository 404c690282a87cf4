package ofproto

import (
	"strings"
	"testing"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

func bucket(t testing.TB, weight uint16, watchPort, watchGroup uint32, acts string) openflow.Bucket {
	t.Helper()
	as, err := openflow.ParseActions(acts)
	if err != nil {
		t.Fatal(err)
	}
	return openflow.Bucket{Weight: weight, WatchPort: watchPort, WatchGroup: watchGroup, Actions: as}
}

func addGroup(t testing.TB, p *Pipeline, id uint32, typ uint8, bs ...openflow.Bucket) {
	t.Helper()
	if err := p.GroupMod(&openflow.GroupMod{Command: openflow.GroupAdd, GroupType: typ, GroupID: id, Buckets: bs}); err != nil {
		t.Fatalf("group %d: %v", id, err)
	}
}

const anyP, anyG = openflow.PortAny, openflow.GroupAny

// Every bucket of an ALL group sees the packet as the group got it; the
// pipeline continues with the packet unchanged.
func TestGroupAllBucketsAreCopies(t *testing.T) {
	p, _ := newTestPipeline(t, 4)
	addGroup(t, p, 1, openflow.GroupTypeAll,
		bucket(t, 0, anyP, anyG, "set_field:10.9.9.9->ip_dst,output:2"),
		bucket(t, 0, anyP, anyG, "output:3"))
	mustAdd(t, p, "tcp,actions=group:1,output:4")
	tr := translate(t, p, tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2))
	want := "set(ip_dst=10.9.9.9),output:2,set(ip_dst=10.0.0.2),output:3,output:4"
	if got := actions(tr); got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
	// The restored ip_dst came from the packet: it is in the mask.
	if tr.Mask.IPDst[0] != 0xff || tr.Mask.IPDst[3] != 0xff {
		t.Fatalf("mask ip_dst %v", tr.Mask.IPDst[:4])
	}
}

func TestGroupSelect(t *testing.T) {
	p, _ := newTestPipeline(t, 4)
	addGroup(t, p, 1, openflow.GroupTypeSelect,
		bucket(t, 1, anyP, anyG, "output:2"),
		bucket(t, 3, anyP, anyG, "output:3"),
		bucket(t, 0, anyP, anyG, "output:4"))
	mustAdd(t, p, "actions=group:1")
	counts := map[string]int{}
	for sport := uint16(1000); sport < 5000; sport++ {
		k := tcpKey(1, "10.0.0.1", "10.0.0.2", sport, 80)
		tr := translate(t, p, k)
		a := actions(tr)
		if again := actions(translate(t, p, k)); again != a {
			t.Fatal("select is not deterministic")
		}
		counts[a]++
		if sport == 1000 {
			m := tr.Mask
			if m.TpSrc != 0xffff || m.TpDst != 0xffff || m.NwProto != 0xff || m.IPSrc[0] != 0xff || m.EthSrc != ([6]byte{}) {
				t.Fatalf("select mask %s", flow.Format(flow.ExactMask(), m))
			}
		}
	}
	if counts["output:4"] != 0 {
		t.Fatal("weight-0 bucket chosen")
	}
	if r := float64(counts["output:3"]) / float64(counts["output:2"]); r < 2.5 || r > 3.5 {
		t.Fatalf("weights 1:3, got %v", counts)
	}
	// Non-IP: Ethernet addresses are hashed instead.
	k := flow.Key{InPort: 1, EthType: 0x0806, EthSrc: mac("00:00:00:00:00:01"), EthDst: mac("00:00:00:00:00:02")}
	m := translate(t, p, k).Mask
	if m.EthSrc != mac("ff:ff:ff:ff:ff:ff") || m.TpSrc != 0 || m.IPSrc != ([16]byte{}) {
		t.Fatalf("arp select mask %s", flow.Format(flow.ExactMask(), m))
	}
}

func TestGroupIndirectAndFastFailover(t *testing.T) {
	p, _ := newTestPipeline(t, 4)
	addGroup(t, p, 1, openflow.GroupTypeIndirect, bucket(t, 0, anyP, anyG, "output:4"))
	addGroup(t, p, 2, openflow.GroupTypeFF,
		bucket(t, 0, 2, anyG, "output:2"),
		bucket(t, 0, anyP, 1, "group:1"),
	)
	addGroup(t, p, 3, openflow.GroupTypeFF, bucket(t, 0, anyP, 2, "output:3"))
	mustAdd(t, p, "actions=group:2")
	k := tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2)
	if got := actions(translate(t, p, k)); got != "output:2" {
		t.Fatalf("primary: %s", got)
	}
	v := p.Version()
	p.SetPorts([]Port{{No: 1}, {No: 2, State: openflow.PortStateLinkDown}, {No: 3}, {No: 4}})
	if p.Version() == v {
		t.Fatal("port change did not move the version")
	}
	if got := actions(translate(t, p, k)); got != "output:4" {
		t.Fatalf("failover: %s", got)
	}
	p.SetPorts([]Port{{No: 1}, {No: 2, Config: openflow.PortConfigPortDown}, {No: 3}, {No: 4}})
	if got := actions(translate(t, p, k)); got != "output:4" {
		t.Fatalf("port-down failover: %s", got)
	}
	// watch_group: group 3's bucket watches group 2, which has a live bucket.
	mustAdd(t, p, "priority=40000,actions=group:3")
	if got := actions(translate(t, p, k)); got != "output:3" {
		t.Fatalf("watch_group: %s", got)
	}
	// Without port 2 and with the indirect group's watcher dead: no live bucket.
	p.SetPorts([]Port{{No: 1}, {No: 3}, {No: 4}})
	if err := p.GroupMod(&openflow.GroupMod{Command: openflow.GroupModify, GroupType: openflow.GroupTypeFF, GroupID: 2,
		Buckets: []openflow.Bucket{bucket(t, 0, 2, anyG, "output:2")}}); err != nil {
		t.Fatal(err)
	}
	if got := actions(translate(t, p, k)); got != "drop" {
		t.Fatalf("dead watch_group: %s", got)
	}
}

func TestGroupModErrorsAndDelete(t *testing.T) {
	p, c := newTestPipeline(t, 3)
	addGroup(t, p, 1, openflow.GroupTypeAll, bucket(t, 0, anyP, anyG, "output:1"))
	addGroup(t, p, 2, openflow.GroupTypeAll, bucket(t, 0, anyP, anyG, "group:1"))
	gm := func(cmd uint16, id uint32, typ uint8, bs ...openflow.Bucket) error {
		return p.GroupMod(&openflow.GroupMod{Command: cmd, GroupType: typ, GroupID: id, Buckets: bs})
	}
	wantErr(t, gm(openflow.GroupAdd, 1, openflow.GroupTypeAll), openflow.ErrTypeGroupModFailed, openflow.GroupModGroupExists)
	wantErr(t, gm(openflow.GroupModify, 9, openflow.GroupTypeAll), openflow.ErrTypeGroupModFailed, openflow.GroupModUnknownGroup)
	wantErr(t, gm(openflow.GroupModify, 1, openflow.GroupTypeAll, bucket(t, 0, anyP, anyG, "group:2")),
		openflow.ErrTypeGroupModFailed, openflow.GroupModLoop)
	wantErr(t, gm(openflow.GroupModify, 1, openflow.GroupTypeAll, bucket(t, 0, anyP, anyG, "group:1")),
		openflow.ErrTypeGroupModFailed, openflow.GroupModLoop)
	wantErr(t, gm(openflow.GroupModify, 1, openflow.GroupTypeFF, bucket(t, 0, anyP, 2, "output:1")),
		openflow.ErrTypeGroupModFailed, openflow.GroupModLoop)
	wantErr(t, gm(openflow.GroupAdd, 3, openflow.GroupTypeAll, bucket(t, 0, anyP, anyG, "group:8")),
		openflow.ErrTypeBadAction, openflow.BadActionBadOutGroup)
	wantErr(t, gm(openflow.GroupAdd, 3, openflow.GroupTypeFF, bucket(t, 0, anyP, 8, "output:1")),
		openflow.ErrTypeGroupModFailed, openflow.GroupModBadWatch)
	wantErr(t, gm(openflow.GroupAdd, 3, openflow.GroupTypeIndirect), openflow.ErrTypeGroupModFailed, openflow.GroupModBadBucket)
	wantErr(t, gm(openflow.GroupAdd, 3, openflow.GroupTypeAll, bucket(t, 0, anyP, anyG, "push_pbb:0x8100")),
		openflow.ErrTypeBadAction, openflow.BadActionBadArgument)
	wantErr(t, gm(openflow.GroupAdd, 3, openflow.GroupTypeAll, bucket(t, 0, anyP, anyG, "set_queue:1,output:2")),
		openflow.ErrTypeBadAction, openflow.BadActionBadQueue)
	if acts := p.GroupFeatures().Actions[openflow.GroupTypeAll]; acts&(1<<openflow.ActionTypeSetQueue) != 0 || acts&(1<<openflow.ActionTypeSetNWTTL) == 0 {
		t.Fatalf("group features advertise actions %#x: want set_nw_ttl and no set_queue", acts)
	}
	// A bucket may rewrite L3 (checked per packet, not against a match).
	if err := gm(openflow.GroupAdd, 3, openflow.GroupTypeAll, bucket(t, 0, anyP, anyG, "set_field:10.0.0.9->ip_dst,output:2")); err != nil {
		t.Fatal(err)
	}
	if got := actions(translate(t, p, flow.Key{InPort: 1, EthType: 0x0806})); got != "drop" {
		t.Fatalf("no rule yet: %s", got)
	}
	// Delete of a chained group is refused; of a group used by flows
	// removes them, reported by the next Expire.
	wantErr(t, gm(openflow.GroupDelete, 1, 0), openflow.ErrTypeGroupModFailed, openflow.GroupModChainedGroup)
	mustAdd(t, p, "priority=5,send_flow_rem,actions=group:2", "priority=6,arp,actions=write_actions(group:3)", "priority=1,actions=output:3")
	k := tcpKey(2, "10.0.0.1", "10.0.0.2", 1, 2)
	tr := translate(t, p, k)
	if actions(tr) != "output:1" {
		t.Fatalf("chain: %s", actions(tr))
	}
	p.Credit(tr.Rules, 2, 120, c.now())
	st := p.GroupStats(&openflow.GroupStatsRequest{GroupID: openflow.GroupAll})
	if len(st) != 3 || st[0].GroupID != 1 || st[0].PacketCount != 2 || st[0].Buckets[0].ByteCount != 120 || st[0].RefCount != 1 || st[1].RefCount != 1 {
		t.Fatalf("group stats %+v", st)
	}
	if d := p.GroupDesc(); len(d) != 3 || d[2].GroupID != 3 || d[2].Buckets[0].Actions.String() != "set_field:10.0.0.9->ip_dst,output:2" {
		t.Fatalf("group desc %+v", d)
	}
	if f := p.GroupFeatures(); f.Types != 0xf || f.Actions[0]&(1<<openflow.ActionTypeSetField) == 0 {
		t.Fatalf("features %+v", f)
	}
	if err := gm(openflow.GroupDelete, 2, 0); err != nil {
		t.Fatal(err)
	}
	rm := p.Expire()
	if len(rm) != 1 || rm[0].Reason != openflow.FlowRemovedGroupDelete || !rm[0].SendFlowRem() {
		t.Fatalf("removed %+v", rm)
	}
	if got := actions(translate(t, p, k)); got != "output:3" {
		t.Fatalf("after group delete: %s", got)
	}
	if err := gm(openflow.GroupDelete, openflow.GroupAll, 0); err != nil {
		t.Fatal(err)
	}
	if len(p.GroupDesc()) != 0 || len(p.Expire()) != 1 || flowCount(p) != 1 {
		t.Fatal("GroupAll delete")
	}
}

// TestGroupSelectByDpHash: without a trace, a select group of several
// live buckets leaves the choice to the fast path: the first pass hashes
// (dp_hash, basis = the group) and recirculates, with no 5-tuple in its
// megaflow; the recirculated pass picks the bucket by dp_hash bits, in
// proportion to the weights over the slots, and matches only those bits.
// A pipeline that goes on after the group is translated the old way.
func TestGroupSelectByDpHash(t *testing.T) {
	p, _ := newTestPipeline(t, 4)
	addGroup(t, p, 1, openflow.GroupTypeSelect,
		bucket(t, 1, anyP, anyG, "output:2"),
		bucket(t, 3, anyP, anyG, "output:3"),
		bucket(t, 0, anyP, anyG, "output:4"))
	mustAdd(t, p, "table=0,priority=10,tcp,actions=group:1")
	mustAdd(t, p, "table=0,priority=10,udp,actions=group:1,output:4")
	k := tcpKey(1, "10.0.0.1", "10.0.0.2", 1000, 80)
	tr, err := p.Translate(k, TranslateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	acts := tr.Actions
	if len(acts) != 2 {
		t.Fatalf("first pass %s, want hash, recirc", flow.FormatActions(acts))
	}
	h, ok1 := acts[0].(flow.Hash)
	rc, ok2 := acts[1].(flow.Recirc)
	if !ok1 || !ok2 || h.Basis != 1 {
		t.Fatalf("first pass %s, want hash(basis 1), recirc", flow.FormatActions(acts))
	}
	if m := tr.Mask; m.TpSrc != 0 || m.IPSrc != ([16]byte{}) {
		t.Fatalf("first pass mask %s: the 5-tuple must stay wildcarded", flow.Format(flow.ExactMask(), m))
	}
	counts := map[string]int{}
	slots := hashSlots(2)
	for v := uint32(0); v < slots; v++ {
		k2 := k
		k2.RecircID, k2.DpHash = rc.ID, v|0xabc00000 // bits above the slot do not matter
		tr2, err := p.Translate(k2, TranslateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if tr2.Mask.DpHash != slots-1 || tr2.Mask.TpSrc != 0 {
			t.Fatalf("second pass mask %s", flow.Format(flow.ExactMask(), tr2.Mask))
		}
		counts[flow.FormatActions(tr2.Actions)]++
	}
	if counts["output:4"] != 0 || counts["output:2"]+counts["output:3"] != int(slots) {
		t.Fatalf("slots per bucket %v", counts)
	}
	if r := float64(counts["output:3"]) / float64(counts["output:2"]); r < 2.8 || r > 3.2 {
		t.Fatalf("weights 1:3, slots %v", counts)
	}
	// output:4 after the group: one pass, the 5-tuple hashed here.
	u := k
	u.NwProto = 17
	tr3, err := p.Translate(u, TranslateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := flow.FormatActions(tr3.Actions); !strings.HasSuffix(a, "output:4") || strings.Contains(a, "recirc") {
		t.Fatalf("group then output: %s", a)
	}
	if tr3.Mask.TpSrc != 0xffff {
		t.Fatalf("group then output: mask %s", flow.Format(flow.ExactMask(), tr3.Mask))
	}
}
