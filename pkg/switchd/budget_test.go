package switchd

import (
	"testing"

	"github.com/nagare-net/nagare/pkg/datapath"
)

// One port's new flows stop at its flow budget, counted for that port by
// reason; its packets are still delivered, and another port's flows are
// still cached.
func TestPortFlowBudget(t *testing.T) {
	sw, handle := handlerSwitch(t, func(c *Config) { c.FlowLimit, c.PortFlowLimit, c.DisableMegaflows = 1000, 20, true })
	addFlow(t, sw, "priority=100,in_port=2,actions=output:1")
	handle(udpUpcalls(t, 100, 0))
	if n := sw.cache.len(); n != 20 {
		t.Fatalf("port 1 cached %d flows, budget 20", n)
	}
	if st := &sw.stats; st.executed.Load() != 100 {
		t.Fatalf("executed %d of 100 packets", st.executed.Load())
	}
	victim := udpUpcalls(t, 10, 500)
	for i := range victim {
		victim[i].Key.InPort = 2
	}
	handle(victim)
	if f, _ := sw.dp.PortUse(2); f != 10 {
		t.Fatalf("port 2 cached %d of 10 flows", f)
	}
	got := map[portReason]uint64{}
	for _, c := range sw.refused.snapshot() {
		got[c.portReason] = c.N
	}
	if got[portReason{1, refusedPortFlows}] != 80 || len(got) != 1 {
		t.Fatalf("refusals %v, want 80 port-flow-budget on port 1", got)
	}
}

// The handler serves a window round-robin by port, each port's upcalls in
// their order.
func TestFairOrder(t *testing.T) {
	var ups []datapath.Upcall
	for i := range 10 {
		u := datapath.Upcall{Len: i}
		u.Key.InPort = 1
		if i >= 7 {
			u.Key.InPort = uint32(i - 5) // ports 2, 3, 4 arrive last
		}
		ups = append(ups, u)
	}
	var fo fairOrder
	for round := range 2 { // the state is reused between windows
		var got []int
		for _, u := range fo.order(ups) {
			got = append(got, int(u.Key.InPort)*100+u.Len)
		}
		want := []int{100, 207, 308, 409, 101, 102, 103, 104, 105, 106}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("round %d: order %v, want %v", round, got, want)
			}
		}
	}
}
