package switchd

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// slowController connects to sock, says HELLO and then reads nothing: a
// controller that has stopped reading. Its receive buffer is small, so
// the switch's writes to it block after a few messages.
func slowController(t *testing.T, sock string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.UnixConn).SetReadBuffer(4096)
	if err := openflow.WriteMessage(c, openflow.NewHello(1, 0x04)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// floodController sends UDP datagrams from pod 1 to pod 2 until stop is
// closed; with in_port=1 → CONTROLLER each becomes a PACKET_IN.
func floodController(t *testing.T, ts *testSwitch, stop chan struct{}) *sync.WaitGroup {
	t.Helper()
	var c net.Conn
	var err error
	ts.Pods[0].In(t, func() { c, err = net.Dial("udp4", podIP(2)+":5000") })
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.Pods[0].Sh(t, "ip", "neigh", "replace", podIP(2), "lladdr", podMAC(2), "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer c.Close()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = c.Write([]byte("to the controller"))
			if i%32 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	return &wg
}

// A controller that stops reading must not stall flow setup for other
// ports (PACKET_INs were written from the upcall thread), nor FLOW_MODs
// and barriers of other connections (the revalidator's round): its
// messages queue, and what does not fit is dropped and counted.
func TestSlowControllerDoesNotStallFlowSetup(t *testing.T) {
	ts := startSwitch(t, 3, func(c *Config) { c.PacketInRate = -1 }) // the queue, not the rate limit, must hold
	fast := dialController(t, ts.Sock)
	fast.flow(t, "priority=10,in_port=1,actions=CONTROLLER:128")
	fast.flow(t, "priority=5,actions=NORMAL")
	fast.barrier(t)
	slowController(t, ts.Sock)

	stop := make(chan struct{})
	wg := floodController(t, ts, stop)
	defer func() { close(stop); wg.Wait() }()
	waitFor(t, "PACKET_INs dropped for the slow controller", func() bool {
		for _, c := range ts.refused.snapshot() {
			if c.Port == 1 && c.Reason == refusedPacketInQ && c.N > 0 {
				return true
			}
		}
		return false
	})
	// Pods 2 and 3 still set up new flows (ARP, ICMP both ways) at once,
	// and a FLOW_MOD + BARRIER (a revalidator round) still completes.
	start := time.Now()
	if err := ts.ping(2, 3); err != nil {
		t.Fatalf("ping between two other pods while a controller stalls: %v", err)
	}
	fast.flow(t, "priority=1,in_port=3,actions=NORMAL")
	fast.barrier(t)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("flow setup and a barrier took %v beside a stalled controller", d)
	}
}

// A controller that stops reading: the PACKET_INs a flooding port fills
// its send queue with must leave room for another port's (the queue's
// slots are shared by port, pinSched.reserve). Before, the light port's
// PACKET_INs found the queue full and were refused; now they are queued
// and arrive once the controller reads again.
func TestPacketInQueueSharedByPorts(t *testing.T) {
	ts := startSwitch(t, 3, func(c *Config) {
		c.PacketInRate = -1                // the queue, not the rate limit, must hold
		c.ProbeInterval = 30 * time.Second // the silent controller stays connected
	})
	fast := dialController(t, ts.Sock)
	fast.flow(t, "priority=10,in_port=1,actions=CONTROLLER:128")
	fast.flow(t, "priority=10,in_port=2,udp,actions=CONTROLLER:128")
	fast.flow(t, "priority=5,actions=NORMAL")
	fast.barrier(t)
	slow := slowController(t, ts.Sock)

	stop := make(chan struct{})
	wg := floodController(t, ts, stop)
	stopped := false
	stopFlood := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopFlood()
	refusedQ := func(port uint32) uint64 {
		for _, r := range ts.refused.snapshot() {
			if r.Port == port && r.Reason == refusedPacketInQ {
				return r.N
			}
		}
		return 0
	}
	waitFor(t, "the flooding port's PACKET_INs refused by the full queue", func() bool { return refusedQ(1) > 0 })
	if err := ts.Pods[1].Sh(t, "ip", "neigh", "replace", podIP(3), "lladdr", podMAC(3), "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	const light = 5
	for i := range light {
		ts.udpFrom(2, 3, 7100+i, []byte("light"))
	}
	fast.waitUDPPacketIn(t, 7100+light-1) // the last one has been handled
	before := refusedQ(1)
	waitFor(t, "the flood still refused", func() bool { return refusedQ(1) > before })
	if n := refusedQ(2); n != 0 {
		t.Fatalf("light port: %d PACKET_INs refused by the queue the flooding port filled", n)
	}
	// The controller reads again: the light port's PACKET_INs are there.
	stopFlood()
	_ = slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := openflow.NewReader(slow)
	got := map[int]bool{}
	for len(got) < light {
		m, raw, err := r.ReadMessage()
		if err != nil && raw == nil {
			t.Fatalf("reading the slow controller's queue: %v (light PACKET_INs seen: %v)", err, got)
		}
		pi, ok := m.(*openflow.PacketIn)
		if !ok {
			continue
		}
		if in, ok := pi.Match.Get(openflow.FieldInPort); !ok || in.Uint() != 2 {
			continue
		}
		pkt := gopacket.NewPacket(pi.Data, layers.LayerTypeEthernet, gopacket.Default)
		if udp, ok := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP); ok {
			got[int(udp.DstPort)] = true
		}
	}
}

// PACKET_INs to a connection are limited to its rate and burst; the rest
// is counted, per connection and per port.
func TestPacketInRateLimit(t *testing.T) {
	const rate, burst = 50, 20
	ts := startSwitch(t, 2, func(c *Config) { c.PacketInRate, c.PacketInBurst = rate, burst })
	c := dialController(t, ts.Sock)
	c.flow(t, "priority=10,in_port=1,actions=CONTROLLER:128")
	c.barrier(t)
	var got atomic.Int64
	stop := make(chan struct{})
	start := time.Now()
	wg := floodController(t, ts, stop)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	c.barrier(t) // everything sent before it has arrived
	c.mu.Lock()
	for _, m := range c.msgs {
		if _, ok := m.(*openflow.PacketIn); ok {
			got.Add(1)
		}
	}
	c.mu.Unlock()
	max := int64(burst + rate*elapsed.Seconds() + 5)
	var limited uint64
	for _, r := range ts.refused.snapshot() {
		if r.Port == 1 && r.Reason == refusedPacketInCap {
			limited = r.N
		}
	}
	if got.Load() < burst || got.Load() > max || limited == 0 {
		t.Fatalf("%d PACKET_INs in %v (burst %d, %d/s: at most %d), %d counted as limited", got.Load(), elapsed, burst, rate, max, limited)
	}
}

// One port whose packets all go to the controller must not take the
// connection's whole PACKET_IN budget (Open vSwitch's pinsched): a port
// sending well within its share gets every PACKET_IN while the heavy port
// (table-miss traffic at many times the connection's limit) is cut, and
// the refusals are counted for the heavy port only.
func TestPacketInFairBetweenPorts(t *testing.T) {
	const rate, burst = 100, 20
	ts := startSwitch(t, 3, func(c *Config) { c.PacketInRate, c.PacketInBurst = rate, burst })
	c := dialController(t, ts.Sock)
	c.flow(t, "priority=0,actions=CONTROLLER:128") // the table-miss entry
	c.barrier(t)
	if err := ts.Pods[1].Sh(t, "ip", "neigh", "replace", podIP(3), "lladdr", podMAC(3), "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	wg := floodController(t, ts, stop) // pod 1, flat out: thousands a second
	defer func() { close(stop); wg.Wait() }()
	waitFor(t, "the heavy port past the connection's limit", func() bool {
		for _, r := range ts.refused.snapshot() {
			if r.Port == 1 && r.Reason == refusedPacketInCap {
				return true
			}
		}
		return false
	})
	// Pod 2: 10 a second (its share: a third of 100), a new flow each.
	const light = 20
	for i := range light {
		ts.udpFrom(2, 3, 7000+i, []byte("light"))
		time.Sleep(100 * time.Millisecond)
	}
	c.barrier(t) // every PACKET_IN sent before it has arrived
	byPort := map[uint64]int{}
	c.mu.Lock()
	for _, m := range c.msgs {
		if pi, ok := m.(*openflow.PacketIn); ok {
			if in, ok := pi.Match.Get(openflow.FieldInPort); ok {
				byPort[in.Uint()]++
			}
		}
	}
	c.mu.Unlock()
	refused := map[uint32]uint64{}
	for _, r := range ts.refused.snapshot() {
		if r.Reason == refusedPacketInCap {
			refused[r.Port] = r.N
		}
	}
	t.Logf("PACKET_INs: heavy port %d, light port %d of %d; refused by the rate limit: heavy %d, light %d",
		byPort[1], byPort[2], light, refused[1], refused[2])
	if byPort[2] < light || refused[2] != 0 {
		t.Errorf("light port: %d of its %d PACKET_INs, %d refused", byPort[2], light, refused[2])
	}
	if byPort[1] == 0 || refused[1] == 0 {
		t.Errorf("heavy port: %d PACKET_INs, %d refused: it should be cut, not silenced", byPort[1], refused[1])
	}
	// What the connection refuses is fed back to the fast path: the heavy
	// port's controller-action upcalls are paced there (Switch.actionPacer), the
	// light port's are not.
	reps, err := ts.portReports()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reps {
		switch r.OFPort {
		case 1:
			if r.ControllerUpcallLimit == 0 || r.ControllerUpcallLimit > 2*rate || r.Drops["controller-upcall-budget"] == 0 {
				t.Errorf("heavy port: fast path paced to %d/s (connection limit %d/s), %d dropped there",
					r.ControllerUpcallLimit, rate, r.Drops["controller-upcall-budget"])
			}
		case 2:
			if r.ControllerUpcallLimit != 0 || r.Drops["controller-upcall-budget"] != 0 {
				t.Errorf("light port paced to %d/s, %d dropped", r.ControllerUpcallLimit, r.Drops["controller-upcall-budget"])
			}
		}
	}
}
