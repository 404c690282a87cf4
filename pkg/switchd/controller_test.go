package switchd

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// testController is a minimal OpenFlow controller built on pkg/openflow:
// enough to program the switch and watch its asynchronous messages.
type testController struct {
	c    net.Conn
	mu   sync.Mutex
	msgs []openflow.Message
	cond *sync.Cond
	xid  uint32
}

func newTestController(t *testing.T, c net.Conn) *testController {
	t.Helper()
	tc := &testController{c: c}
	tc.cond = sync.NewCond(&tc.mu)
	if err := openflow.WriteMessage(c, openflow.NewHello(1, 0x04)); err != nil {
		t.Fatal(err)
	}
	r := openflow.NewReader(c)
	go func() {
		for {
			m, _, err := r.ReadMessage()
			if err != nil {
				tc.mu.Lock()
				tc.c = nil
				tc.cond.Broadcast()
				tc.mu.Unlock()
				return
			}
			if e, ok := m.(*openflow.EchoRequest); ok {
				_ = openflow.WriteMessage(c, e.Reply())
				continue
			}
			tc.mu.Lock()
			tc.msgs = append(tc.msgs, m)
			tc.cond.Broadcast()
			tc.mu.Unlock()
		}
	}()
	t.Cleanup(func() { c.Close() })
	return tc
}

// dialController connects to the switch's socket as a controller would.
func dialController(t *testing.T, sock string) *testController {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	tc := newTestController(t, c)
	tc.barrier(t)
	return tc
}

// listenController accepts the switch's active connection on loopback.
func listenController(t *testing.T) (addr string, accept func() *testController) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().String(), func() *testController {
		_ = l.(*net.TCPListener).SetDeadline(time.Now().Add(15 * time.Second))
		c, err := l.Accept()
		if err != nil {
			t.Fatalf("switch did not connect: %v", err)
		}
		tc := newTestController(t, c)
		tc.barrier(t)
		return tc
	}
}

func (tc *testController) send(t *testing.T, m openflow.Message) {
	t.Helper()
	tc.mu.Lock()
	tc.xid++
	m.Hdr().Xid = tc.xid + 100
	tc.mu.Unlock()
	if err := openflow.WriteMessage(tc.c, m); err != nil {
		t.Fatal(err)
	}
}

// flow sends an ovs-ofctl style FLOW_MOD.
func (tc *testController) flow(t *testing.T, spec string) {
	t.Helper()
	fm, err := openflow.ParseFlow(spec)
	if err != nil {
		t.Fatal(err)
	}
	tc.send(t, fm)
}

// barrier waits for the switch to have handled everything sent so far;
// errors received meanwhile fail the test.
func (tc *testController) barrier(t *testing.T) {
	t.Helper()
	tc.send(t, &openflow.BarrierRequest{})
	tc.wait(t, 10*time.Second, func(m openflow.Message) bool {
		if e, ok := m.(*openflow.ErrorMsg); ok {
			t.Fatalf("switch answered with an error: %+v", e)
		}
		_, ok := m.(*openflow.BarrierReply)
		return ok
	})
}

// wait returns the first message (received so far or later) that
// satisfies pred, consuming it.
func (tc *testController) wait(t *testing.T, d time.Duration, pred func(openflow.Message) bool) openflow.Message {
	t.Helper()
	deadline := time.Now().Add(d)
	timer := time.AfterFunc(d, func() { tc.mu.Lock(); tc.cond.Broadcast(); tc.mu.Unlock() })
	defer timer.Stop()
	tc.mu.Lock()
	defer tc.mu.Unlock()
	for {
		for i, m := range tc.msgs {
			if pred(m) {
				tc.msgs = append(tc.msgs[:i], tc.msgs[i+1:]...)
				return m
			}
		}
		if tc.c == nil || time.Now().After(deadline) {
			t.Fatalf("timed out waiting for a message (%d others received)", len(tc.msgs))
		}
		tc.cond.Wait()
	}
}

func (tc *testController) waitFlowRemoved(t *testing.T, d time.Duration) *openflow.FlowRemoved {
	t.Helper()
	return tc.wait(t, d, func(m openflow.Message) bool { _, ok := m.(*openflow.FlowRemoved); return ok }).(*openflow.FlowRemoved)
}

func (tc *testController) waitPacketIn(t *testing.T, d time.Duration) *openflow.PacketIn {
	t.Helper()
	return tc.wait(t, d, func(m openflow.Message) bool { _, ok := m.(*openflow.PacketIn); return ok }).(*openflow.PacketIn)
}

// TestPacketInAfterRewrite: a rule that rewrites and then sends to the
// controller hands over the rewritten packet, for the flow's first packet
// (translated in userspace) as for the later ones (the cached flow's
// userspace action).
func TestPacketInAfterRewrite(t *testing.T) {
	ts := startSwitch(t, 2, nil)
	c := dialController(t, ts.Sock)
	ts.ofctl("add-flow", "priority=10,udp,in_port=1,actions=set_field:10.9.9.9->ip_dst,set_field:7777->udp_dst,controller,output:2")
	ts.ofctl("add-flow", "priority=0,actions=NORMAL")
	var conn net.Conn
	var err error
	ts.Pods[0].In(t, func() { conn, err = net.Dial("udp4", podIP(2)+":5000") })
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Static neighbour entry: the datagrams are the flow's first packets.
	if err := ts.Pods[0].Sh(t, "ip", "neigh", "replace", podIP(2), "lladdr", podMAC(2), "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	for i, what := range []string{"first packet", "cached flow"} {
		if _, err := conn.Write([]byte(what)); err != nil {
			t.Fatal(err)
		}
		pi := c.waitPacketIn(t, 10*time.Second)
		pkt := gopacket.NewPacket(pi.Data, layers.LayerTypeEthernet, gopacket.Default)
		ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if ip == nil || udp == nil || ip.DstIP.String() != "10.9.9.9" || udp.DstPort != 7777 || string(udp.Payload) != what {
			t.Fatalf("PACKET_IN %d (%s): %v", i, what, pkt)
		}
	}
}
