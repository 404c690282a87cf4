package datapath

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nagare-net/nagare/pkg/flow"
)

// One port's misses past its upcall budget are dropped before the ring and
// counted for that port; another port's budget is untouched.
func TestUpcallPortBudget(t *testing.T) {
	d := newTestDP(t)
	const burst, sent = 100, 2000
	// 1 upcall per second: within the test the burst is all a port gets.
	if err := d.SetUpcallBudget(1, burst); err != nil {
		t.Fatal(err)
	}
	pkt := udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, "x")
	err := d.inNetns(func() error {
		_, _, err := d.objs.NagarePortIngress.Benchmark(pkt, sent, nil) // arrives on lo (port 1)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	c, drops := d.counters(), d.drops()
	if c["upcall"] < burst || c["upcall"] > burst+2 || drops[DropUpcallBudget]+c["upcall"] != sent {
		t.Fatalf("%d misses from one port: %d upcalls, %d budget drops (burst %d)", sent, c["upcall"], drops[DropUpcallBudget], burst)
	}
	pd, err := d.PortDrops()
	if err != nil {
		t.Fatal(err)
	}
	if got := pd[d.ifindex["lo"]][DropUpcallBudget]; got != drops[DropUpcallBudget] {
		t.Fatalf("port drops %v, want %d upcall-port-budget on lo", pd, drops[DropUpcallBudget])
	}
	// The other port still has its whole burst.
	d.fakePort(7, "dummy0", PortUplink)
	for range 10 {
		if r := d.run(pkt, "dummy0"); r.verdict != tcActShot {
			t.Fatalf("verdict %d", r.verdict)
		}
	}
	if c2 := d.counters(); c2["upcall"] != c["upcall"]+10 {
		t.Fatalf("the second port got %d of 10 upcalls", c2["upcall"]-c["upcall"])
	}
	// No limit: every miss is an upcall again.
	if err := d.SetUpcallBudget(0, 0); err != nil {
		t.Fatal(err)
	}
	if got := newUpcalls(d, pkt, "lo", 10); got != 10 {
		t.Fatalf("unlimited: %d of 10 upcalls", got)
	}
}

// newUpcalls runs n copies of pkt in on dev and returns the upcalls they made.
func newUpcalls(d *testDP, pkt []byte, dev string, n int) uint64 {
	before := d.counters()["upcall"]
	for range n {
		d.run(pkt, dev)
	}
	return d.counters()["upcall"] - before
}

// A cached flow's controller (userspace) action shares its port's upcall
// budget: a flow to the controller is no way around it.
func TestUserspaceActionUpcallBudget(t *testing.T) {
	d := newTestDP(t)
	const burst, sent = 10, 200
	if err := d.SetUpcallBudget(1, burst); err != nil {
		t.Fatal(err)
	}
	m := flow.Mask{InPort: ^uint32(0)}
	d.put(flow.Flow{Key: flow.Key{InPort: portIn}, Mask: m, Actions: []flow.Action{flow.Userspace{Cookie: 7}}})
	pkt := udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, "x")
	if err := d.inNetns(func() error {
		_, _, err := d.objs.NagarePortIngress.Benchmark(pkt, sent, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	c, drops := d.counters(), d.drops()
	if c["upcall"] < burst || c["upcall"] > burst+2 || c["upcall"]+drops[DropUpcallBudget] != sent {
		t.Fatalf("%d packets to a userspace action: %d upcalls, %d budget drops (burst %d)", sent, c["upcall"], drops[DropUpcallBudget], burst)
	}
}

// A port's controller-action rate (what its controllers accept, set by the
// switch's feedback) drops the action upcalls past it before they spend the
// port's upcall budget: the port's misses keep all of it. The packet's
// other actions still run.
func TestActionUpcallRate(t *testing.T) {
	d := newTestDP(t)
	const burst, sent = 100, 200
	if err := d.SetUpcallBudget(1, burst); err != nil {
		t.Fatal(err)
	}
	if err := d.SetActionUpcallRate(portIn, 1, 5); err != nil { // 1/s: the burst of 5 is all
		t.Fatal(err)
	}
	m := flow.Mask{InPort: ^uint32(0), EthType: 0xffff, NwProto: 0xff}
	d.put(flow.Flow{Key: flow.Key{InPort: portIn, EthType: 0x0800, NwProto: 17}, Mask: m,
		Actions: []flow.Action{flow.Userspace{Cookie: 7}, flow.Output{Port: portOut}}})
	pkt := udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, "x")
	for range sent {
		if r := d.run(pkt, "lo"); r.verdict == tcActShot {
			t.Fatal("a packet past the controller budget lost its output")
		}
	}
	c, drops := d.counters(), d.drops()
	if c["upcall"] != 5 || drops[DropControllerBudget] != sent-5 || drops[DropUpcallBudget] != 0 {
		t.Fatalf("%d packets to a userspace action at 1/s, burst 5: %d upcalls, %d controller-budget drops, %d port-budget drops",
			sent, c["upcall"], drops[DropControllerBudget], drops[DropUpcallBudget])
	}
	// The port's misses still have its upcall burst, less the 5 action
	// upcalls admitted (the 195 past the controllers' rate spent nothing).
	miss := tcpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, true) // no cached flow
	if got := newUpcalls(d, miss, "lo", burst); got < burst-5 {
		t.Fatalf("%d of the port's %d-miss burst were upcalls after its action upcalls were cut", got, burst)
	}
	// Rate 0 lifts the limit.
	if err := d.SetActionUpcallRate(portIn, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.SetUpcallBudget(0, 0); err != nil {
		t.Fatal(err)
	}
	if got := newUpcalls(d, pkt, "lo", 10); got != 10 {
		t.Fatalf("no limit: %d of 10 action upcalls", got)
	}
}

// A port's flows and new masks stop at its budgets; other ports' do not,
// and a port at its mask budget may still use a mask others brought.
func TestPortFlowAndMaskBudgets(t *testing.T) {
	d := newTestDP(t)
	d.cfg.PortFlowLimit, d.cfg.PortMaskLimit = 5, 2
	mk := func(in uint32, dst byte, maskBytes int) flow.Flow {
		m := flow.Mask{InPort: ^uint32(0), EthType: 0xffff}
		for i := range maskBytes {
			m.IPDst[i] = 0xff
		}
		k := flow.Key{InPort: in, EthType: 0x0800, IPDst: [16]byte{10, 0, 0, dst}}
		return flow.Flow{Key: k.And(m), Mask: m, Actions: []flow.Action{flow.Output{Port: portOut}}}
	}
	// Port 1: two masks (/32 and /24 of ip_dst).
	for i := range 3 {
		if _, err := d.Install(mk(1, byte(i), 4)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Install(mk(1, 0, 3)); err != nil {
		t.Fatal(err)
	}
	// A third new mask: refused.
	if _, err := d.Install(mk(1, 0, 2)); !errors.Is(err, ErrPortMaskLimit) {
		t.Fatalf("third mask for port 1: %v", err)
	}
	// Port 2 brings the /16 mask; port 1 may then use it.
	if _, err := d.Install(mk(2, 0, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Install(mk(1, 0, 2)); err != nil {
		t.Fatalf("mask another port brought: %v", err)
	}
	if f, m := d.PortUse(1); f != 5 || m != 3 {
		t.Fatalf("port 1 uses %d flows, %d masks", f, m)
	}
	// Flow budget: the sixth flow of port 1 is refused, port 2's is not.
	if _, err := d.Install(mk(1, 9, 4)); !errors.Is(err, ErrPortFlowLimit) {
		t.Fatalf("sixth flow of port 1: %v", err)
	}
	if _, err := d.Install(mk(2, 9, 4)); err != nil {
		t.Fatal(err)
	}
	// Deleting gives the budget back.
	f := mk(1, 0, 4)
	if _, err := d.Delete(f.Key, f.Mask); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Install(mk(1, 9, 4)); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
}

// Controller-action upcalls right after one that woke the reader are
// submitted without a wakeup (bpf/lib/upcall.h, ACTION_WAKE_GAP_NS); the
// reader's linger after a batch with action upcalls still finds them.
func TestThrottledActionUpcallsAreRead(t *testing.T) {
	d := newTestDP(t)
	r, err := d.Upcalls()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	m := flow.Mask{InPort: ^uint32(0)}
	d.put(flow.Flow{Key: flow.Key{InPort: portIn}, Mask: m, Actions: []flow.Action{flow.Userspace{Cookie: 7}}})
	quietWakeups(t, d)
	pkt := udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, "x")
	if err := d.inNetns(func() error {
		_, _, err := d.objs.NagarePortIngress.Benchmark(pkt, 5, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	r.lingerUntil = time.Now().Add(upcallLinger) // as after a batch with action upcalls
	got := make(chan int, 1)
	go func() {
		ups := make([]Upcall, 16)
		n := 0
		for n < 5 {
			k, err := r.ReadBatch(ups)
			if err != nil {
				break
			}
			n += k
		}
		got <- n
	}()
	select {
	case n := <-got:
		if n != 5 {
			t.Fatalf("read %d of 5 upcalls", n)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("upcalls submitted without a wakeup were never read")
	}
}

// cilium's ring reader returns the deadline error of a wait that timed out
// but found a record once more, at the next read of an empty ring, without
// waiting. The reader must not take it for the end of its linger: a
// throttled action upcall submitted after it (no wakeup) would wait for
// the next wakeup. It did, about one upcall in thirty on a loaded machine
// (a Service reject answered only at the client's retransmission).
func TestThrottledActionUpcallAfterStaleDeadline(t *testing.T) {
	d := newTestDP(t)
	r, err := d.Upcalls()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	m := flow.Mask{InPort: ^uint32(0)}
	d.put(flow.Flow{Key: flow.Key{InPort: portIn}, Mask: m, Actions: []flow.Action{flow.Userspace{Cookie: 7}}})
	send := func() {
		pkt := udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, "x")
		if err := d.inNetns(func() error {
			_, _, err := d.objs.NagarePortIngress.Benchmark(pkt, 1, nil)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	// One record without a wakeup, read by a wait whose deadline has
	// passed: the wait times out, finds the record, keeps the error.
	quietWakeups(t, d)
	send()
	r.lingerUntil = time.Now().Add(-time.Millisecond)
	ups := make([]Upcall, 16)
	if n, err := r.ReadBatch(ups); n != 1 || err != nil {
		t.Fatalf("first read: %d upcalls, %v", n, err)
	}
	got := make(chan int, 1)
	go func() {
		n, err := r.ReadBatch(ups) // the ring is empty: the stale error comes now
		if err != nil {
			n = -1
		}
		got <- n
	}()
	// Give the reader a moment to reach its wait, then the second record,
	// within ACTION_WAKE_GAP_NS (4 ms) of the CPUs' last wakeup, so again
	// without one: only the linger (8 ms from the first record's read)
	// finds it. Later than 4 ms it would wake the reader, and the test
	// would pass whatever the reader does: it cannot fail wrongly.
	time.Sleep(time.Millisecond)
	send()
	select {
	case n := <-got:
		if n != 1 {
			t.Fatalf("second read: %d upcalls", n)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("an action upcall submitted without a wakeup after a stale deadline was never read")
	}
}

// quietWakeups makes every CPU have woken the upcall reader just now: the
// next action upcalls are submitted without a wakeup (ACTION_WAKE_GAP_NS).
func quietWakeups(t *testing.T, d *testDP) {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	now := make([]uint64, d.ncpu)
	for i := range now {
		now[i] = uint64(ts.Nano())
	}
	if err := d.objs.UpcallWake.Put(uint32(0), now); err != nil {
		t.Fatal(err)
	}
}
