package datapath

import (
	"net/netip"
	"os"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/flow"
)

// vxlanNode is one node of vxlanNodes: a fast path with a pod port (1)
// and a VXLAN device (vx0, port 10) on an underlay veth.
type vxlanNode struct {
	ns            nstest.NS
	pod, underlay string
	local, remote string
	d             *Datapath
}

// vxlanNodes builds two nodes whose pods (10.2.0.1 behind n1, 10.2.0.2
// behind n2) reach each other through VNI 5001 on an underlay veth
// (192.168.50.1 – .2).
func vxlanNodes(t *testing.T) (a, b nstest.NS, nodes []*vxlanNode) {
	n1, n2 := nstest.New(t, "n1"), nstest.New(t, "n2")
	a, b = nstest.New(t, "a"), nstest.New(t, "b")
	nstest.Veth(t, n1, "u1", n2, "u2", 1500)
	n1.IP(t, "addr", "add", "192.168.50.1/24", "dev", "u1")
	n2.IP(t, "addr", "add", "192.168.50.2/24", "dev", "u2")
	nstest.Veth(t, a, "eth0", n1, "va", 1450)
	nstest.Veth(t, b, "eth0", n2, "vb", 1450)
	a.IP(t, "addr", "add", "10.2.0.1/24", "dev", "eth0")
	b.IP(t, "addr", "add", "10.2.0.2/24", "dev", "eth0")

	nodes = []*vxlanNode{
		{ns: n1, pod: "va", underlay: "u1", local: "192.168.50.1", remote: "192.168.50.2"},
		{ns: n2, pod: "vb", underlay: "u2", local: "192.168.50.2", remote: "192.168.50.1"},
	}
	for _, nd := range nodes {
		nd.ns.IP(t, "link", "add", "vx0", "type", "vxlan", "external", "dstport", "4789")
		nd.ns.IP(t, "link", "set", "vx0", "up")
		d, err := Open(Config{Name: nd.ns.Name, PinRoot: testPinDir, NetNS: nd.ns.Path, MaxFlows: 1024})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Destroy() })
		nd.d = d
		if _, err := d.AttachPort(nd.pod, 1, PortPod); err != nil {
			t.Fatal(err)
		}
		if _, err := d.AttachPort("vx0", 10, PortTunnel); err != nil {
			t.Fatal(err)
		}
		out := flow.Flow{Key: flow.Key{InPort: 1}, Mask: flow.Mask{InPort: 0xffffffff}, Actions: []flow.Action{
			flow.SetTunnel{VNI: 5001, Remote: netip.MustParseAddr(nd.remote), Local: netip.MustParseAddr(nd.local)},
			flow.Output{Port: 10},
		}}
		for _, f := range []flow.Flow{out, nd.fromTunnel()} {
			if err := d.Put(f); err != nil {
				t.Fatal(err)
			}
		}
	}
	return a, b, nodes
}

// fromTunnel is nd's flow for VNI 5001 from its remote: to port 1.
func (nd *vxlanNode) fromTunnel() flow.Flow {
	return flow.Flow{
		Key:     flow.Key{InPort: 10, TunID: 5001, TunFlags: flow.TunPresent, TunSrc: netip.MustParseAddr(nd.remote).As4()},
		Mask:    flow.Mask{InPort: 0xffffffff, TunID: 0xffffffff, TunFlags: 0xff, TunSrc: [4]byte{0xff, 0xff, 0xff, 0xff}},
		Actions: []flow.Action{flow.Output{Port: 1}},
	}
}

func (nd *vxlanNode) native(t *testing.T) {
	t.Helper()
	if err := nd.d.SetNativeTunnel(NativeTunnel{OFPort: 10, Underlay: nd.underlay, Local: netip.MustParseAddr(nd.local), UDPPort: 4789}); err != nil {
		t.Fatal(err)
	}
}

// link is device dev of nd's namespace.
func (nd *vxlanNode) link(t *testing.T, dev string) netlink.Link {
	t.Helper()
	var l netlink.Link
	var err error
	nd.ns.In(t, func() { l, err = netlink.LinkByName(dev) })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// devStats are the kernel's counters of a device in nd's namespace.
func (nd *vxlanNode) devStats(t *testing.T, dev string) netlink.LinkStatistics {
	t.Helper()
	return *nd.link(t, dev).Attrs().Statistics
}

func (nd *vxlanNode) counters(t *testing.T) map[string]uint64 {
	t.Helper()
	c, err := nd.d.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestVXLANBetweenNodes(t *testing.T) {
	a, b, nodes := vxlanNodes(t)
	if err := a.Sh(t, "ping", "-c", "3", "-i", "0.2", "-W", "2", "10.2.0.2"); err != nil {
		t.Fatal(err)
	}
	nstest.UDPEcho(t, b, "10.2.0.2:7000")
	if n := nstest.UDPRoundTrips(t, a, "10.2.0.2:7000", 50); n != 50 {
		t.Fatalf("%d of 50 UDP round trips", n)
	}
	nstest.TCPTransfer(t, b, a, "10.2.0.2:7001", 16<<20)
	for _, nd := range nodes {
		fs, err := nd.d.Dump()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			if f.Stats.Packets == 0 {
				t.Errorf("%s: flow %s saw no packets", nd.ns.Name, f.Flow)
			}
		}
		if c := nd.counters(t); c["tunnel-encap"] != 0 || c["tunnel-decap"] != 0 {
			t.Errorf("%s: the fast path did VXLAN itself without being asked: %v", nd.ns.Name, c)
		}
	}
}

// TestNativeVXLAN: with the tunnel native on n1 only, n1's encapsulation
// must be VXLAN the kernel's driver on n2 takes, and n2's driver's packets
// must be what n1's decapsulation takes (interoperation both ways, on
// real veths, GSO included: the TCP streams); with both native the VXLAN
// devices carry nothing.
func TestNativeVXLAN(t *testing.T) {
	a, b, nodes := vxlanNodes(t)
	n1, n2 := nodes[0], nodes[1]
	n1.native(t)
	if got := n1.d.NativeTunnels(); len(got) != 1 || got[0].Underlay != "u1" || got[0].UDPPort != 4789 || got[0].Local != netip.MustParseAddr("192.168.50.1") {
		t.Fatalf("NativeTunnels = %+v", got)
	}
	if err := a.Sh(t, "ping", "-c", "3", "-i", "0.2", "-W", "2", "10.2.0.2"); err != nil {
		t.Fatal(err)
	}
	nstest.UDPEcho(t, b, "10.2.0.2:7000")
	nstest.UDPEcho(t, a, "10.2.0.1:7000")
	vx1, vx2 := n1.devStats(t, "vx0"), n2.devStats(t, "vx0")
	if n := nstest.UDPRoundTrips(t, a, "10.2.0.2:7000", 50); n != 50 {
		t.Fatalf("%d of 50 UDP round trips", n)
	}
	c1 := n1.counters(t)
	if c1["tunnel-encap"] < 50 || c1["tunnel-decap"] < 50 {
		t.Fatalf("n1 counters %v: the fast path did not do the tunnel", c1)
	}
	after1, after2 := n1.devStats(t, "vx0"), n2.devStats(t, "vx0")
	if d := after1.TxPackets + after1.RxPackets - vx1.TxPackets - vx1.RxPackets; d > 5 {
		t.Errorf("n1's VXLAN device carried %d packets with the tunnel native", d)
	}
	if d := after2.RxPackets - vx2.RxPackets; d < 50 {
		t.Errorf("n2's VXLAN device received %d packets: n1's encapsulation did not reach its driver", d)
	}
	nstest.TCPTransfer(t, b, a, "10.2.0.2:7001", 16<<20) // n1 encapsulates GSO packets, n2's driver decapsulates
	nstest.TCPTransfer(t, a, b, "10.2.0.1:7002", 16<<20) // n2's driver encapsulates, n1 decapsulates the ACKs, its driver the GSO data

	n2.native(t)
	vx1, vx2 = n1.devStats(t, "vx0"), n2.devStats(t, "vx0")
	if n := nstest.UDPRoundTrips(t, b, "10.2.0.1:7000", 50); n != 50 {
		t.Fatalf("%d of 50 UDP round trips, both native", n)
	}
	for _, nd := range []*vxlanNode{n1, n2} {
		st := nd.devStats(t, "vx0")
		before := vx1
		if nd == n2 {
			before = vx2
		}
		if d := st.TxPackets + st.RxPackets - before.TxPackets - before.RxPackets; d > 5 {
			t.Errorf("%s: the VXLAN device carried %d packets with both ends native", nd.ns.Name, d)
		}
	}
	vx1 = n1.devStats(t, "vx0")
	nstest.TCPTransfer(t, a, b, "10.2.0.1:7003", 16<<20)
	if st := n1.devStats(t, "vx0"); st.TxPackets+st.RxPackets-vx1.TxPackets-vx1.RxPackets > 5 {
		t.Errorf("n1's VXLAN device carried %d packets of a TCP stream into a pod with both ends native", st.TxPackets+st.RxPackets-vx1.TxPackets-vx1.RxPackets)
	}
	if drops, _ := n1.d.Drops(); len(drops) != 0 {
		t.Errorf("n1 drops %v", drops)
	}
	if drops, _ := n2.d.Drops(); len(drops) != 0 {
		t.Errorf("n2 drops %v", drops)
	}

	// Back to the devices: forwarding goes on, the underlay's hook is gone.
	if err := n1.d.ClearNativeTunnel(10); err != nil {
		t.Fatal(err)
	}
	before := n1.counters(t)
	if n := nstest.UDPRoundTrips(t, a, "10.2.0.2:7000", 20); n != 20 {
		t.Fatalf("%d of 20 UDP round trips after ClearNativeTunnel", n)
	}
	if c := n1.counters(t); c["tunnel-encap"] != before["tunnel-encap"] || c["tunnel-decap"] != before["tunnel-decap"] {
		t.Errorf("n1 still does the tunnel after ClearNativeTunnel: %v → %v", before, c)
	}
}

// TestNativeVXLANRestart: the native tunnel is pinned state like the
// ports: a restarted process finds it, re-points the underlay's hook at
// its program and keeps encapsulating; detaching the tunnel port gives
// the underlay its hook back.
func TestNativeVXLANRestart(t *testing.T) {
	a, b, nodes := vxlanNodes(t)
	n1, n2 := nodes[0], nodes[1]
	n1.native(t)
	n2.native(t)
	nstest.UDPEcho(t, b, "10.2.0.2:7000")
	if n := nstest.UDPRoundTrips(t, a, "10.2.0.2:7000", 20); n != 20 {
		t.Fatalf("%d of 20 UDP round trips", n)
	}
	cfg := n1.d.cfg
	if err := n1.d.Close(); err != nil {
		t.Fatal(err)
	}
	// No process owns n1's instance: its pinned hooks keep forwarding.
	if n := nstest.UDPRoundTrips(t, a, "10.2.0.2:7000", 20); n != 20 {
		t.Fatalf("%d of 20 UDP round trips with n1's switch stopped", n)
	}
	d, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n1.d = d
	got := d.NativeTunnels()
	if len(got) != 1 || got[0].OFPort != 10 || got[0].Underlay != "u1" {
		t.Fatalf("after the restart NativeTunnels = %+v", got)
	}
	before := n1.counters(t)
	if n := nstest.UDPRoundTrips(t, a, "10.2.0.2:7000", 20); n != 20 {
		t.Fatalf("%d of 20 UDP round trips after the restart", n)
	}
	after := n1.counters(t)
	if after["tunnel-encap"]-before["tunnel-encap"] < 20 || after["tunnel-decap"]-before["tunnel-decap"] < 20 {
		t.Fatalf("after the restart n1 counters %v → %v: the tunnel is no longer native", before, after)
	}

	if err := d.DetachPort(10); err != nil {
		t.Fatal(err)
	}
	if got := d.NativeTunnels(); len(got) != 0 {
		t.Fatalf("NativeTunnels after the tunnel port went: %+v", got)
	}
	var k uint32
	var v nagareNativeTunnel
	if it := d.objs.NativeTunnels.Iterate(); it.Next(&k, &v) {
		t.Fatalf("native_tunnels still holds %d → %+v", k, v)
	}
	u1 := n1.link(t, "u1").Attrs().Index
	if _, err := os.Stat(d.linkPin(u1)); !os.IsNotExist(err) {
		t.Fatalf("the underlay's hook is still pinned: %v", err)
	}

	// An underlay that goes while no process owns the instance takes its
	// tunnel's entries with it at the next Open.
	if _, err := d.AttachPort("vx0", 10, PortTunnel); err != nil {
		t.Fatal(err)
	}
	n1.native(t)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	n1.ns.IP(t, "link", "del", "u1")
	if d, err = Open(cfg); err != nil {
		t.Fatal(err)
	}
	n1.d = d
	if got := d.NativeTunnels(); len(got) != 0 {
		t.Fatalf("NativeTunnels with the underlay gone: %+v", got)
	}
	if it := d.objs.NativeTunnels.Iterate(); it.Next(&k, &v) {
		t.Fatalf("with the underlay gone native_tunnels still holds %d → %+v", k, v)
	}
	if _, err := os.Stat(d.linkPin(u1)); !os.IsNotExist(err) {
		t.Fatalf("the gone underlay's hook is still pinned: %v", err)
	}
}

// TestNativeVXLANGSONotIntoPod: a decapsulated GSO packet keeps its
// tunnel GSO state, so one whose flow does not deliver into a pod (here n2's
// pod port is an internal port: output transmits on it) goes back to the
// driver as it came (tunnel_undo), and the stream still arrives; the
// tracepoint that sees the transmit would show gso_type 0x403 otherwise.
func TestNativeVXLANGSONotIntoPod(t *testing.T) {
	a, b, nodes := vxlanNodes(t)
	n1, n2 := nodes[0], nodes[1]
	if _, err := n2.d.AttachPort("vb", 1, PortInternal); err != nil {
		t.Fatal(err)
	}
	if err := n2.d.Modify(n2.fromTunnel()); err != nil {
		t.Fatal(err)
	}
	n1.native(t)
	n2.native(t)
	if err := a.Sh(t, "ping", "-c", "2", "-i", "0.2", "-W", "2", "10.2.0.2"); err != nil {
		t.Fatal(err)
	}
	before, vx := n2.counters(t), n2.devStats(t, "vx0")
	nstest.TCPTransfer(t, b, a, "10.2.0.2:7001", 16<<20)
	after, st := n2.counters(t), n2.devStats(t, "vx0")
	if after["tunnel-undo"] == before["tunnel-undo"] || st.RxPackets == vx.RxPackets {
		t.Fatalf("n2 counters %v → %v, vx0 received %d: GSO packets for an internal port were not given back to the driver",
			before, after, st.RxPackets-vx.RxPackets)
	}
	if drops, _ := n2.d.Drops(); len(drops) != 0 {
		t.Errorf("n2 drops %v", drops)
	}
}
