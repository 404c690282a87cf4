package datapath

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nagare-net/nagare/internal/nstest"

	"github.com/nagare-net/nagare/pkg/flow"
)

// podPair builds node N with pods A (10.1.0.1) and B (10.1.0.2) attached to
// a fast-path instance in N as ports 1 and 2.
func podPair(t testing.TB) (n, a, b nstest.NS, d *Datapath) { return podPairWith(t, 1, nil) }

// podPairQueues is podPair with veths of that many queues each way.
func podPairQueues(t testing.TB, queues int) (n, a, b nstest.NS, d *Datapath) {
	return podPairWith(t, queues, nil)
}

// podPairWith is podPairQueues with the instance's Config changed.
func podPairWith(t testing.TB, queues int, change func(*Config)) (n, a, b nstest.NS, d *Datapath) {
	n, a, b = nstest.New(t, "node"), nstest.New(t, "a"), nstest.New(t, "b")
	for _, v := range []struct {
		pod  nstest.NS
		host string
	}{{a, "va"}, {b, "vb"}} {
		q := fmt.Sprint(queues)
		if err := nstest.Sh("ip", "link", "add", "eth0", "netns", v.pod.Name, "numtxqueues", q, "numrxqueues", q, "type", "veth",
			"peer", "name", v.host, "netns", n.Name, "numtxqueues", q, "numrxqueues", q); err != nil {
			t.Fatal(err)
		}
		v.pod.IP(t, "link", "set", "eth0", "up")
		n.IP(t, "link", "set", v.host, "up")
	}
	a.IP(t, "addr", "add", "10.1.0.1/24", "dev", "eth0")
	b.IP(t, "addr", "add", "10.1.0.2/24", "dev", "eth0")
	cfg := Config{Name: n.Name, PinRoot: testPinDir, NetNS: n.Path, MaxFlows: 1024}
	if change != nil {
		change(&cfg)
	}
	d, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if d.objs.Ports != nil && d.objs.Ports.FD() >= 0 {
			_ = d.Destroy()
		}
	})
	for _, p := range []struct {
		dev string
		no  uint32
	}{{"va", 1}, {"vb", 2}} {
		if _, err := d.AttachPort(p.dev, p.no, PortPod); err != nil {
			t.Fatal(err)
		}
	}
	return n, a, b, d
}

func crossConnect(t *testing.T, d *Datapath, p1, p2 uint32) {
	t.Helper()
	for _, f := range []flow.Flow{
		{Key: flow.Key{InPort: p1}, Mask: flow.Mask{InPort: 0xffffffff}, Actions: []flow.Action{flow.Output{Port: p2}}},
		{Key: flow.Key{InPort: p2}, Mask: flow.Mask{InPort: 0xffffffff}, Actions: []flow.Action{flow.Output{Port: p1}}},
	} {
		if err := d.Put(f); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPodsThroughFastPath(t *testing.T) {
	_, a, b, d := podPair(t)
	crossConnect(t, d, 1, 2)
	if err := a.Sh(t, "ping", "-c", "3", "-i", "0.2", "-W", "2", "10.1.0.2"); err != nil {
		t.Fatal(err)
	}
	nstest.UDPEcho(t, b, "10.1.0.2:7000")
	if n := nstest.UDPRoundTrips(t, a, "10.1.0.2:7000", 50); n != 50 {
		t.Fatalf("%d of 50 UDP round trips", n)
	}
	nstest.TCPTransfer(t, b, a, "10.1.0.2:7001", 32<<20)
	fs, err := d.Dump()
	if err != nil {
		t.Fatal(err)
	}
	// Every byte of the TCP stream crossed the fast path (GSO packets are
	// counted once each, so compare bytes, not packets).
	var bytes uint64
	for _, f := range fs {
		bytes += f.Stats.Bytes
	}
	if bytes < 32<<20 {
		t.Fatalf("flows counted %d bytes, the TCP stream alone was %d", bytes, 32<<20)
	}
}

// TestFirstPacketDelivered runs a minimal slow path: on each miss it
// installs an exact flow to the other pod and executes the packet. A single
// datagram sent once must arrive, and the flows must land in the cache.
func TestFirstPacketDelivered(t *testing.T) {
	_, a, b, d := podPair(t)
	r, err := d.Upcalls()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	go func() {
		for {
			u, err := r.Read()
			if err != nil {
				return
			}
			other := uint32(3) - u.Key.InPort
			mask := flow.ExactMask()
			mask.TCPFlags = 0
			f := flow.Flow{Key: u.Key, Mask: mask, Actions: []flow.Action{flow.Output{Port: other}}}
			_ = d.Put(f) // may exist already: a packet raced its flow
			if err := d.Execute(u.Packet, u.Key.InPort, f.Actions); err != nil {
				t.Error(err)
			}
		}
	}()
	// The ARP exchange and the datagram each start as misses.
	if msg := nstest.UDPOnce(t, a, b, "10.1.0.2:7100", "only once"); msg != "only once" {
		c, _ := d.Counters()
		dr, _ := d.Drops()
		t.Fatalf("received %q; counters %v drops %v", msg, c, dr)
	}
	cnt, err := d.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if cnt["executed"] < 3 || len(d.Flows()) < 3 {
		t.Fatalf("counters %v, %d flows: the slow path did not run", cnt, len(d.Flows()))
	}
}

// TestExecBatch: packets whose actions are plain outputs go out in one
// sendmmsg; others (here a port rewrite) through BPF_PROG_RUN; all arrive,
// and a bad action list is an error, not a lost batch.
func TestExecBatch(t *testing.T) {
	n, _, b, d := podPair(t)
	// The host end of b's veth takes frames up to 1000 B from a packet
	// socket; the fast path's redirect does not check its MTU.
	n.IP(t, "link", "set", "vb", "mtu", "1000")
	big := "big" + strings.Repeat("x", 1100)
	var mac net.HardwareAddr
	var srv net.PacketConn
	b.In(t, func() {
		ifc, err := net.InterfaceByName("eth0")
		if err != nil {
			t.Error(err)
			return
		}
		mac = ifc.HardwareAddr
		srv, err = net.ListenPacket("udp4", "10.1.0.2:7200")
		if err != nil {
			t.Error(err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	defer srv.Close()
	frame := func(dport uint16, payload string) []byte {
		p := udpPkt(t, "10.1.0.1", "10.1.0.2", 4000, dport, payload)
		copy(p[0:6], mac)
		return p
	}
	out := []flow.Action{flow.Output{Port: 2}}
	var sent uint64
	var addErr, badErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		restore, err := d.LockToNetns()
		if err != nil {
			addErr = err
			return
		}
		defer restore()
		eb, err := d.NewExecBatch()
		if err != nil {
			addErr = err
			return
		}
		defer eb.Close()
		for i := 0; i < 10 && addErr == nil; i++ {
			addErr = eb.Add(frame(7200, fmt.Sprintf("p%d", i)), 1, out)
			if i == 4 && addErr == nil {
				addErr = eb.Add(frame(7999, "rewritten"), 1, []flow.Action{flow.SetTpDst{Port: 7200}, flow.Output{Port: 2}})
			}
		}
		if addErr == nil {
			addErr = eb.Add(frame(7200, big), 1, out)
		}
		badErr = eb.Add(frame(7200, "nowhere"), 1, []flow.Action{flow.Output{Port: 99}})
		if addErr == nil {
			addErr = eb.Flush()
		}
		sent = eb.Sent
		// Without a packet socket every packet takes BPF_PROG_RUN.
		fallback := &ExecBatch{d: d, fd: -1}
		if addErr == nil {
			addErr = fallback.Add(frame(7200, "fallback"), 1, out)
		}
		if addErr == nil && fallback.Sent != 0 {
			addErr = fmt.Errorf("fallback batch sent %d with sendmmsg", fallback.Sent)
		}
	}()
	<-done
	if addErr != nil {
		t.Fatal(addErr)
	}
	if !errors.Is(badErr, ErrUnknownPort) {
		t.Errorf("output to an unknown port: %v", badErr)
	}
	if sent != 10 {
		t.Errorf("sendmmsg sent %d packets, want the 10 plain outputs that fit the device", sent)
	}
	got := map[string]bool{}
	buf := make([]byte, 2048)
	_ = srv.SetReadDeadline(time.Now().Add(10 * time.Second))
	for len(got) < 13 {
		n, _, err := srv.ReadFrom(buf)
		if err != nil {
			t.Fatalf("received %v: %v", got, err)
		}
		got[string(buf[:n])] = true
	}
	if !got["rewritten"] || !got["p0"] || !got["p9"] || !got["fallback"] || !got[big] {
		t.Fatalf("received %v", got)
	}
}

// TestTunnelInheritsRewrittenTOS: a tunnel output with InheritTOS copies
// the inner ToS as the actions left it (a set_field ip_dscp before it),
// not as the packet arrived: VS-extend's flow control field is set by the
// sender's switch and must reach the outer header (real veth, real VXLAN
// device).
func TestTunnelInheritsRewrittenTOS(t *testing.T) {
	n1, n2 := nstest.New(t, "n1"), nstest.New(t, "n2")
	a := nstest.New(t, "a")
	nstest.Veth(t, n1, "u1", n2, "u2", 1500)
	n1.IP(t, "addr", "add", "192.168.51.1/24", "dev", "u1")
	n2.IP(t, "addr", "add", "192.168.51.2/24", "dev", "u2")
	nstest.Veth(t, a, "eth0", n1, "va", 1450)
	a.IP(t, "addr", "add", "10.3.0.1/24", "dev", "eth0")
	a.IP(t, "neigh", "add", "10.3.0.2", "lladdr", "02:00:00:00:00:02", "dev", "eth0")
	n1.IP(t, "link", "add", "vx0", "type", "vxlan", "external", "dstport", "4789")
	n1.IP(t, "link", "set", "vx0", "up")
	d, err := Open(Config{Name: n1.Name, PinRoot: testPinDir, NetNS: n1.Path, MaxFlows: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Destroy() })
	if _, err := d.AttachPort("va", 1, PortPod); err != nil {
		t.Fatal(err)
	}
	if _, err := d.AttachPort("vx0", 10, PortTunnel); err != nil {
		t.Fatal(err)
	}
	// FCF id 8 with priority (the default layout): ToS 0x11 = DSCP 4,
	// ECN 1. (ECN 3, CE, would read back as 2: the kernel's encapsulation
	// turns an inner CE into an outer ECT(0), RFC 6040; docs/steering.md.)
	out := flow.Flow{Key: flow.Key{InPort: 1, EthType: 0x0800}, Mask: flow.Mask{InPort: 0xffffffff, EthType: 0xffff}, Actions: []flow.Action{
		flow.SetDSCP{DSCP: 0x11 >> 2}, flow.SetECN{ECN: 0x11 & 3},
		flow.SetTunnel{VNI: 7, Remote: netip.MustParseAddr("192.168.51.2"), Local: netip.MustParseAddr("192.168.51.1"), InheritTOS: true},
		flow.Output{Port: 10},
	}}
	if err := d.Put(out); err != nil {
		t.Fatal(err)
	}
	fd := nstest.RawSocket(t, n2, "u2")
	var c net.Conn
	a.In(t, func() { c, err = net.Dial("udp4", "10.3.0.2:9") })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("fcf-probe")); err != nil {
		t.Fatal(err)
	}
	f := nstest.ReadFrame(t, fd, []byte("fcf-probe"), 5*time.Second)
	// Outer Ethernet (14) + IPv4: ToS at byte 15.
	if f[12] != 0x08 || f[13] != 0x00 || f[15] != 0x11 {
		t.Fatalf("outer ToS %#x (ethertype %x%x), want 0x11 from the rewritten inner header", f[15], f[12], f[13])
	}
}
