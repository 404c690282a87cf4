package switchd

import (
	"testing"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// TestRevalidatorRetranslatesOnlyAffected: after a table or group change a
// round translates again only the cached flows whose translation the
// change can reach (a table they looked up, a rule they hit, a group they
// ran), and those come out right.
func TestRevalidatorRetranslatesOnlyAffected(t *testing.T) {
	const n = 64 // per destination port
	sw := idleSwitch(t, nil)
	groupMod := func(cmd uint16, id, port uint32) { // port 0: the bucket drops
		t.Helper()
		var as openflow.Actions
		if port != 0 {
			as = openflow.Actions{openflow.ActionOutput{Port: port}}
		}
		if err := sw.pl.GroupMod(&openflow.GroupMod{Command: cmd, GroupType: openflow.GroupTypeIndirect, GroupID: id,
			Buckets: []openflow.Bucket{{WatchPort: openflow.PortAny, WatchGroup: openflow.GroupAny, Actions: as}}}); err != nil {
			t.Fatal(err)
		}
	}
	groupMod(openflow.GroupAdd, 1, 0)
	groupMod(openflow.GroupAdd, 2, 2)
	addFlow(t, sw, "table=0,priority=10,udp,tp_dst=1,actions=group:1")
	addFlow(t, sw, "table=0,priority=10,udp,tp_dst=2,actions=goto_table:1")
	addFlow(t, sw, "table=1,priority=10,udp,actions=output:2")
	var keys []flow.Key
	for dst := uint16(1); dst <= 2; dst++ {
		for i := range n {
			keys = append(keys, flow.Key{InPort: 1, EthType: 0x0800, NwProto: 17, NwTTL: 64, TpSrc: uint16(1000 + i), TpDst: dst})
		}
	}
	cacheFlows(t, sw, keys)
	last := sw.rv.stats()
	// want < 0: every cached flow.
	step := func(what string, change func(), want int) {
		t.Helper()
		cached := uint64(sw.cache.len())
		rechecked := uint64(want)
		if want < 0 {
			rechecked = cached
		}
		change()
		sw.rv.round()
		st := sw.rv.stats()
		if got := st.Revalidated - last.Revalidated; got != rechecked {
			t.Errorf("%s: %d flows translated again, want %d", what, got, rechecked)
		}
		if got := st.Unaffected - last.Unaffected; got+rechecked != cached {
			t.Errorf("%s: %d flows counted unaffected, want %d", what, got, cached-rechecked)
		}
		last = st
	}
	actionsOf := func(dst uint16) string {
		sw.cache.mu.Lock()
		defer sw.cache.mu.Unlock()
		out := ""
		for _, uk := range sw.cache.ukeys {
			if uk != nil && uk.packet.TpDst == dst {
				if a := flow.FormatActions(uk.actions); out == "" {
					out = a
				} else if a != out {
					return "mixed: " + out + " / " + a
				}
			}
		}
		return out
	}
	step("a rule in a table no flow looked up", func() { addFlow(t, sw, "table=3,priority=5,tcp,actions=drop") }, 0)
	if got := actionsOf(1); got != "drop" {
		t.Fatalf("flows through group 1 before its change: %s", got)
	}
	step("a group no flow ran", func() { groupMod(openflow.GroupModify, 2, 0) }, 0)
	step("the group half of them ran", func() { groupMod(openflow.GroupModify, 1, 2) }, n)
	if got := actionsOf(1); got != "output:2" {
		t.Errorf("flows through group 1 after its change: %s", got)
	}
	step("a rule in table 1, which half of them looked up", func() { addFlow(t, sw, "table=1,priority=20,udp,tp_src=1000,actions=output:1") }, n)
	step("the rule the other half hit, deleted", func() {
		fm, _ := openflow.ParseFlow("table=0,priority=10,udp,tp_dst=1")
		fm.Command = openflow.FlowDeleteStrict
		if _, err := sw.pl.FlowMod(fm); err != nil {
			t.Fatal(err)
		}
	}, n)
	step("a rule in table 0, which all looked up", func() { addFlow(t, sw, "table=0,priority=1,actions=drop") }, -1)
	// A port change may alter anything: every flow again.
	step("a port change", func() { sw.pl.SetPorts(sw.pl.Ports()) }, -1)
}

// TestRevalidatorFreesRecircStates: a frozen recirculation state stays
// while a cached flow recirculates to it and is freed once none does.
func TestRevalidatorFreesRecircStates(t *testing.T) {
	sw := idleSwitch(t, nil)
	addFlow(t, sw, "table=0,priority=100,ip,actions=ct(table=1,zone=5)")
	addFlow(t, sw, "table=1,priority=10,ip,actions=output:2")
	cacheFlows(t, sw, []flow.Key{{InPort: 1, EthType: 0x0800, NwProto: 17, NwTTL: 64, TpSrc: 1, TpDst: 2}})
	if n := sw.pl.RecircStates(); n != 1 {
		t.Fatalf("%d frozen states, want 1", n)
	}
	for i := 0; i < 3; i++ {
		if n := sw.rv.freeRecirc(); n != 0 {
			t.Fatalf("freed %d states a cached flow recirculates to", n)
		}
	}
	if err := sw.flushCache(); err != nil {
		t.Fatal(err)
	}
	if n := sw.rv.freeRecirc(); n != 1 || sw.pl.RecircStates() != 0 {
		t.Fatalf("after the flush: freed %d, %d states left", n, sw.pl.RecircStates())
	}
	if st := sw.rv.stats(); st.RecircFreed != 1 {
		t.Errorf("stats: %d freed", st.RecircFreed)
	}
}
