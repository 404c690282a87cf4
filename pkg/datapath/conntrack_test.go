package datapath

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/nagare-net/nagare/pkg/flow"
)

// Connection tracking and recirculation through the real entry programs:
// a first-pass flow (recirc_id 0) runs ct and recirculates; the second
// pass misses, so its upcall shows the key the second lookup used (ct_*
// fields) and the packet as the first pass left it (NAT).

// ctTest is a test instance with its upcall reader.
type ctTest struct {
	*testDP
	r *UpcallReader
	t *testing.T
}

func newCTTest(t *testing.T, change func(*Config)) *ctTest {
	d := newTestDPWith(t, change)
	r, err := d.Upcalls()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return &ctTest{testDP: d, r: r, t: t}
}

// firstPass installs the flow every packet from in_port takes on its
// first pass (recirc_id 0, matched exactly as Open vSwitch's datapath
// does): acts.
func (c *ctTest) firstPass(inPort uint32, acts ...flow.Action) {
	c.t.Helper()
	c.put(flow.Flow{Key: flow.Key{InPort: inPort}, Mask: flow.Mask{InPort: 0xffffffff, RecircID: 0xffffffff}, Actions: acts})
}

// second runs pkt in on dev, expects the second pass to miss, and returns
// the upcall: the key of the second lookup and the packet as it is now.
func (c *ctTest) second(pkt []byte, dev string) *Upcall {
	c.t.Helper()
	if v := c.run(pkt, dev); v.verdict != tcActShot {
		c.t.Fatalf("verdict %d, want shot (a miss after recirculation); drops %v", v.verdict, c.drops())
	}
	u := readUpcall(c.t, c.r)
	if u.Reason != UpcallMiss || u.Key.RecircID != 1 {
		c.t.Fatalf("upcall %v with recirc_id %d, want a miss with recirc_id 1", u.Reason, u.Key.RecircID)
	}
	return u
}

func (c *ctTest) state(pkt []byte, dev string) uint8 {
	c.t.Helper()
	return c.second(pkt, dev).Key.CtState
}

func (c *ctTest) conns() []Conn {
	c.t.Helper()
	cs, err := c.Conntrack()
	if err != nil {
		c.t.Fatal(err)
	}
	return cs
}

func wantState(t *testing.T, what string, got, want uint8) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: ct_state %s, want %s", what, flow.CtStateString(got, 0xff), flow.CtStateString(want, 0xff))
	}
}

type tcpFlags struct{ syn, ack, fin, rst bool }

func tcpSeg(tb testing.TB, src, dst string, sport, dport uint16, f tcpFlags) []byte {
	tb.Helper()
	tc := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), SYN: f.syn, ACK: f.ack, FIN: f.fin, RST: f.rst, Seq: 1, Window: 1000}
	return serialize(tb, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolTCP, src, dst), tc, gopacket.Payload("hello"))
}

var (
	synF    = tcpFlags{syn: true}
	synAckF = tcpFlags{syn: true, ack: true}
	ackF    = tcpFlags{ack: true}
	finF    = tcpFlags{fin: true, ack: true}
	rstF    = tcpFlags{rst: true, ack: true}
)

const (
	trk = flow.CtTrk
	nw  = flow.CtNew
	est = flow.CtEst
	rpl = flow.CtRpl
	inv = flow.CtInv
	rel = flow.CtRel
)

func a4(s string) [4]byte { return netip.MustParseAddr(s).As4() }

// TestCTNewCommitReply: new → commit → reply is +est+rpl, the original
// direction +est afterwards; an uncommitted +new leaves nothing behind;
// the key carries the zone and the original tuple.
func TestCTNewCommitReply(t *testing.T) {
	c := newCTTest(t, nil)
	c.firstPass(portIn, flow.CT{Zone: 5, Flags: flow.CTCommit}, flow.Recirc{ID: 1})
	c.firstPass(portOut, flow.CT{Zone: 5}, flow.Recirc{ID: 1})

	out := udpPkt(t, "10.0.0.1", "10.0.0.2", 1000, 53, "q")
	back := udpPkt(t, "10.0.0.2", "10.0.0.1", 53, 1000, "a")

	u := c.second(out, "lo")
	wantState(t, "first packet", u.Key.CtState, trk|nw)
	if u.Key.CtZone != 5 || u.Key.CtNwSrc != a4("10.0.0.1") || u.Key.CtNwDst != a4("10.0.0.2") ||
		u.Key.CtNwProto != 17 || u.Key.CtTpSrc != 1000 || u.Key.CtTpDst != 53 {
		t.Fatalf("key %s", flow.Format(u.Key, flow.ExactMask()))
	}
	// The rest of the key is the packet's, parsed again.
	if u.Key.InPort != portIn || u.Key.TpDst != 53 || !bytes.Equal(u.Packet, out) {
		t.Fatalf("second pass key %s", flow.Format(u.Key, flow.ExactMask()))
	}
	wantState(t, "original again, unreplied", c.state(out, "lo"), trk|nw)
	u = c.second(back, "dummy0")
	wantState(t, "reply", u.Key.CtState, trk|est|rpl)
	if u.Key.CtNwSrc != a4("10.0.0.1") || u.Key.CtTpSrc != 1000 {
		t.Fatalf("reply carries the original tuple: %s", flow.Format(u.Key, flow.ExactMask()))
	}
	wantState(t, "original after the reply", c.state(out, "lo"), trk|est)

	// Not committed: +new, the tuple reported, nothing kept.
	other := udpPkt(t, "10.0.0.2", "10.0.0.9", 7, 7, "x")
	u = c.second(other, "dummy0")
	wantState(t, "uncommitted", u.Key.CtState, trk|nw)
	if u.Key.CtNwDst != a4("10.0.0.9") {
		t.Fatalf("uncommitted tuple: %s", flow.Format(u.Key, flow.ExactMask()))
	}
	if cs := c.conns(); len(cs) != 1 || cs[0].Zone != 5 || !cs[0].SeenReply || cs[0].Orig.Dst != netip.MustParseAddr("10.0.0.2") {
		t.Fatalf("conntrack %v", cs)
	}
	// A SYN+ACK cannot start a connection; a bad flag combination is +inv.
	wantState(t, "syn+ack", c.state(tcpSeg(t, "10.0.0.1", "10.0.0.2", 5, 6, synAckF), "lo"), trk|inv)
	wantState(t, "syn+fin", c.state(tcpSeg(t, "10.0.0.1", "10.0.0.2", 5, 6, tcpFlags{syn: true, fin: true}), "lo"), trk|inv)
}

// TestCTExecuteRecirc: the first packet executed by userspace (BPF_PROG_RUN)
// runs the real ct, then the lookup; its miss is an upcall too.
func TestCTExecuteRecirc(t *testing.T) {
	c := newCTTest(t, nil)
	pkt := udpPkt(t, "10.0.0.1", "10.0.0.2", 1000, 53, "q")
	if err := c.Execute(pkt, portIn, []flow.Action{flow.CT{Zone: 2, Flags: flow.CTCommit}, flow.Recirc{ID: 1}}); err != nil {
		t.Fatal(err)
	}
	u := readUpcall(t, c.r)
	if u.Key.RecircID != 1 || u.Key.CtState != trk|nw || u.Key.CtZone != 2 || u.Key.InPort != portIn {
		t.Fatalf("executed packet's second pass: %s", flow.Format(u.Key, flow.ExactMask()))
	}
	if cs := c.conns(); len(cs) != 1 {
		t.Fatalf("conntrack %v", cs)
	}
	// A cached second pass runs in execute mode too: its output is sent.
	c.put(flow.Flow{Key: flow.Key{RecircID: 1, CtState: trk | nw}, Mask: flow.Mask{RecircID: 0xffffffff, CtState: 0xff}, Actions: []flow.Action{flow.Output{Port: portOut}}})
	if err := c.Execute(pkt, portIn, []flow.Action{flow.CT{Zone: 2, Flags: flow.CTCommit}, flow.Recirc{ID: 1}}); err != nil {
		t.Fatal(err)
	}
	if fs := c.Flows(); len(fs) != 1 {
		t.Fatalf("flows %v", fs)
	}
	if c.counters()["megaflow-hit"]+c.counters()["emc-hit"] == 0 {
		t.Fatalf("second pass of an executed packet did not hit: %v", c.counters())
	}
}

// TestCTDNAT: a new connection to a virtual address is translated to its
// backend, replies back to the virtual address, checksums valid.
func TestCTDNAT(t *testing.T) {
	c := newCTTest(t, nil)
	nat := &flow.NAT{Kind: flow.NATDst, AddrMin: netip.MustParseAddr("10.1.0.5"), PortMin: 8080}
	c.firstPass(portIn, flow.CT{Zone: 1, Flags: flow.CTCommit, NAT: nat}, flow.Recirc{ID: 1})
	c.firstPass(portOut, flow.CT{Zone: 1, NAT: &flow.NAT{}}, flow.Recirc{ID: 1})

	u := c.second(tcpSeg(t, "10.0.0.1", "10.96.0.10", 40000, 80, synF), "lo")
	wantState(t, "syn", u.Key.CtState, trk|nw|flow.CtDNAT)
	if u.Key.IPDst != [16]byte{10, 1, 0, 5} || u.Key.TpDst != 8080 || u.Key.CtNwDst != a4("10.96.0.10") || u.Key.CtTpDst != 80 {
		t.Fatalf("translated key %s", flow.Format(u.Key, flow.ExactMask()))
	}
	checksumsOK(t, u.Packet)

	u = c.second(tcpSeg(t, "10.1.0.5", "10.0.0.1", 8080, 40000, synAckF), "dummy0")
	// +snat: the translation done to this packet (its source), as Open vSwitch reports it.
	wantState(t, "syn+ack", u.Key.CtState, trk|est|rpl|flow.CtSNAT)
	if u.Key.IPSrc != [16]byte{10, 96, 0, 10} || u.Key.TpSrc != 80 {
		t.Fatalf("reply not translated back: %s", flow.Format(u.Key, flow.ExactMask()))
	}
	checksumsOK(t, u.Packet)
	cs := c.conns()
	if len(cs) != 1 || !cs[0].DNAT || cs[0].Reply.Src != netip.MustParseAddr("10.1.0.5") || cs[0].Reply.SrcPort != 8080 {
		t.Fatalf("conntrack %v", cs)
	}

	// A UDP packet whose sender left the checksum to offload
	// (CHECKSUM_PARTIAL is what BPF_PROG_RUN cannot make; a zero UDP
	// checksum, "none", must stay zero).
	p := udpPkt(t, "10.0.0.1", "10.96.0.10", 5353, 80, "q")
	p[14+20+6], p[14+20+7] = 0, 0
	u = c.second(p, "lo")
	if u.Packet[14+20+6] != 0 || u.Packet[14+20+7] != 0 || u.Key.IPDst != [16]byte{10, 1, 0, 5} {
		t.Fatalf("zero UDP checksum after DNAT: %x", u.Packet[:50])
	}
}

// TestCTDNATClash: a client reaches an endpoint directly and through a
// Service from the same source port (the kernel picks ports per
// destination, so this happens; wrk with "Connection: close" does it at
// once, pod to pod then through a ClusterIP). The Service connection's
// reply tuple is then the direct one's: as netfilter's NAT does, it moves
// the client's port, so the endpoint sees a new 4-tuple — live or closed
// (the endpoint may hold the closed one in TIME_WAIT and answer a SYN on
// it with a challenge ACK). A privileged client port is not moved: a
// closed connection's tuple is taken over (as Linux's NAT does for
// TIME_WAIT), a live one's refused.
func TestCTDNATClash(t *testing.T) {
	c := newCTTest(t, nil)
	cl, ep, vip := "10.0.0.1", "10.1.0.5", "10.96.0.10"
	first := func(acts ...flow.Action) { // portIn's first pass, replaced
		if _, err := c.Delete(flow.Key{InPort: portIn}, flow.Mask{InPort: 0xffffffff, RecircID: 0xffffffff}); err != nil && !errors.Is(err, ErrNoFlow) {
			t.Fatal(err)
		}
		c.firstPass(portIn, acts...)
	}
	direct := func() { first(flow.CT{Zone: 1, Flags: flow.CTCommit}, flow.Recirc{ID: 1}) }
	viaService := func() {
		nat := &flow.NAT{Kind: flow.NATDst, AddrMin: netip.MustParseAddr(ep), PortMin: 80}
		first(flow.CT{Zone: 1, Flags: flow.CTCommit, NAT: nat}, flow.Recirc{ID: 1})
	}
	c.firstPass(portOut, flow.CT{Zone: 1, NAT: &flow.NAT{}}, flow.Recirc{ID: 1})
	open := func(sport uint16) {
		direct()
		c.second(tcpSeg(t, cl, ep, sport, 80, synF), "lo")
		c.second(tcpSeg(t, ep, cl, 80, sport, synAckF), "dummy0")
		c.second(tcpSeg(t, cl, ep, sport, 80, ackF), "lo")
	}
	closeConn := func(sport uint16) {
		c.second(tcpSeg(t, cl, ep, sport, 80, finF), "lo")
		c.second(tcpSeg(t, ep, cl, 80, sport, ackF), "dummy0")
		c.second(tcpSeg(t, ep, cl, 80, sport, finF), "dummy0")
		for _, x := range c.conns() {
			if x.Orig.SrcPort == sport && x.Orig.Dst == netip.MustParseAddr(ep) && x.TCPState != "TIME_WAIT" {
				t.Fatalf("direct connection: %v", x)
			}
		}
	}
	// moved: a Service SYN from sport leaves with another source port,
	// and the endpoint's answer to that port comes back as the Service's
	// to sport.
	moved := func(what string, sport uint16) {
		t.Helper()
		viaService()
		u := c.second(tcpSeg(t, cl, vip, sport, 80, synF), "lo")
		wantState(t, what, u.Key.CtState, trk|nw|flow.CtDNAT|flow.CtSNAT)
		if u.Key.IPDst != [16]byte{10, 1, 0, 5} || u.Key.TpSrc == sport || u.Key.TpSrc < 1024 {
			t.Fatalf("%s: SYN left as %s, want to the endpoint from another port", what, flow.Format(u.Key, flow.ExactMask()))
		}
		u = c.second(tcpSeg(t, ep, cl, 80, u.Key.TpSrc, synAckF), "dummy0")
		if u.Key.IPSrc != [16]byte{10, 96, 0, 10} || u.Key.TpSrc != 80 || u.Key.TpDst != sport {
			t.Fatalf("%s: reply not translated back: %s", what, flow.Format(u.Key, flow.ExactMask()))
		}
	}

	open(4000)
	moved("Service SYN onto a live connection's reply tuple", 4000)
	closeConn(4000)
	// The Service connection from 4000 is live too now; another port.
	open(4001)
	closeConn(4001)
	moved("Service SYN onto a TIME_WAIT tuple", 4001)

	// The other way round: the Service connection from 4002 is live, a
	// direct one from 4002 commits with bare nat (the null binding) and
	// moves; without nat it is refused (no translation asked for).
	viaService()
	c.second(tcpSeg(t, cl, vip, 4002, 80, synF), "lo")
	first(flow.CT{Zone: 1, Flags: flow.CTCommit}, flow.Recirc{ID: 1})
	if v := c.run(tcpSeg(t, cl, ep, 4002, 80, synF), "lo"); v.verdict != tcActShot || c.drops()[DropNATNoPort] != 1 {
		t.Fatalf("a direct connection onto a Service connection's reply tuple, no nat: verdict %d, drops %v", v.verdict, c.drops())
	}
	first(flow.CT{Zone: 1, Flags: flow.CTCommit, NAT: &flow.NAT{}}, flow.Recirc{ID: 1})
	u0 := c.second(tcpSeg(t, cl, ep, 4002, 80, synF), "lo")
	wantState(t, "direct SYN with bare nat onto a live reply tuple", u0.Key.CtState, trk|nw|flow.CtSNAT)
	if u0.Key.TpSrc == 4002 || u0.Key.TpSrc < 1024 || u0.Key.IPDst != [16]byte{10, 1, 0, 5} {
		t.Fatalf("direct SYN left as %s, want from another port", flow.Format(u0.Key, flow.ExactMask()))
	}
	u0 = c.second(tcpSeg(t, ep, cl, 80, u0.Key.TpSrc, synAckF), "dummy0")
	if u0.Key.IPSrc != [16]byte{10, 1, 0, 5} || u0.Key.TpDst != 4002 {
		t.Fatalf("direct reply not translated back: %s", flow.Format(u0.Key, flow.ExactMask()))
	}
	// Bare nat without a clash translates nothing.
	u0 = c.second(tcpSeg(t, cl, ep, 4003, 80, synF), "lo")
	wantState(t, "direct SYN with bare nat, no clash", u0.Key.CtState, trk|nw)
	if u0.Key.TpSrc != 4003 {
		t.Fatalf("port 4003 moved to %d without a clash", u0.Key.TpSrc)
	}

	// A privileged port stays: taken over when closed, refused when live.
	open(900)
	viaService()
	if v := c.run(tcpSeg(t, cl, vip, 900, 80, synF), "lo"); v.verdict != tcActShot || c.drops()[DropNATNoPort] != 2 {
		t.Fatalf("a Service connection from port 900 onto a live connection's reply tuple: verdict %d, drops %v", v.verdict, c.drops())
	}
	closeConn(900)
	viaService()
	u := c.second(tcpSeg(t, cl, vip, 900, 80, synF), "lo")
	wantState(t, "Service SYN from port 900 onto a TIME_WAIT tuple", u.Key.CtState, trk|nw|flow.CtDNAT)
	if u.Key.TpSrc != 900 {
		t.Fatalf("port 900 moved to %d", u.Key.TpSrc)
	}
	u = c.second(tcpSeg(t, ep, cl, 80, 900, synAckF), "dummy0")
	if u.Key.IPSrc != [16]byte{10, 96, 0, 10} {
		t.Fatalf("reply not translated to the Service: %s", flow.Format(u.Key, flow.ExactMask()))
	}
	// Reset (CLOSE) too.
	open(901)
	c.second(tcpSeg(t, ep, cl, 80, 901, rstF), "dummy0")
	viaService()
	wantState(t, "Service SYN from port 901 onto a reset tuple", c.state(tcpSeg(t, cl, vip, 901, 80, synF), "lo"), trk|nw|flow.CtDNAT)
}

// TestCTSNATPorts: SNAT keeps the source port while it is free, picks
// another when the reply tuple would collide, and drops when the range is
// used up.
func TestCTSNATPorts(t *testing.T) {
	c := newCTTest(t, nil)
	nat := &flow.NAT{Kind: flow.NATSrc, AddrMin: netip.MustParseAddr("192.168.0.1")}
	c.firstPass(portIn, flow.CT{Flags: flow.CTCommit, NAT: nat}, flow.Recirc{ID: 1})
	c.firstPass(portOut, flow.CT{NAT: &flow.NAT{}}, flow.Recirc{ID: 1})

	u := c.second(udpPkt(t, "10.0.0.1", "8.8.8.8", 1234, 5300, "q"), "lo")
	if u.Key.IPSrc != [16]byte{192, 168, 0, 1} || u.Key.TpSrc != 1234 || u.Key.CtState != trk|nw|flow.CtSNAT {
		t.Fatalf("first SNAT: %s", flow.Format(u.Key, flow.ExactMask()))
	}
	checksumsOK(t, u.Packet)
	u = c.second(udpPkt(t, "10.0.0.2", "8.8.8.8", 1234, 5300, "q"), "lo")
	if u.Key.IPSrc != [16]byte{192, 168, 0, 1} || u.Key.TpSrc == 1234 || u.Key.TpSrc < 1024 {
		t.Fatalf("second SNAT must move off port 1234: %s", flow.Format(u.Key, flow.ExactMask()))
	}
	checksumsOK(t, u.Packet)
	port2 := u.Key.TpSrc
	// Replies find their own connection.
	u = c.second(udpPkt(t, "8.8.8.8", "192.168.0.1", 5300, port2, "a"), "dummy0")
	if u.Key.IPDst != [16]byte{10, 0, 0, 2} || u.Key.TpDst != 1234 || u.Key.CtState != trk|est|rpl|flow.CtDNAT { // a reply of SNAT: its destination translated
		t.Fatalf("reply to the moved port: %s", flow.Format(u.Key, flow.ExactMask()))
	}
	checksumsOK(t, u.Packet)

	// A range of two ports holds two connections to one server.
	c2 := newCTTestNamed(t, "narrow")
	c2.firstPass(portIn, flow.CT{Flags: flow.CTCommit, NAT: &flow.NAT{Kind: flow.NATSrc, AddrMin: netip.MustParseAddr("192.168.0.1"), PortMin: 5000, PortMax: 5001}}, flow.Recirc{ID: 1})
	seen := map[uint16]bool{}
	for _, src := range []string{"10.0.0.1", "10.0.0.2"} {
		u := c2.second(udpPkt(t, src, "8.8.8.8", 1234, 5300, "q"), "lo")
		if p := u.Key.TpSrc; p < 5000 || p > 5001 || seen[p] {
			t.Fatalf("port %d from %s (had %v)", p, src, seen)
		}
		seen[u.Key.TpSrc] = true
	}
	if v := c2.run(udpPkt(t, "10.0.0.3", "8.8.8.8", 1234, 5300, "q"), "lo"); v.verdict != tcActShot || c2.drops()[DropNATNoPort] != 1 {
		t.Fatalf("third connection: verdict %d drops %v", v.verdict, c2.drops())
	}
}

// newCTTestNamed opens a second instance in the same test.
func newCTTestNamed(t *testing.T, name string) *ctTest {
	return newCTTest(t, func(c *Config) { c.Name += "-" + name })
}

// icmpErr builds an ICMP destination unreachable from src to dst that
// embeds the first bytes of inner.
func icmpErr(t *testing.T, src, dst string, inner []byte) []byte {
	ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(3, 3)}
	return serialize(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolICMPv4, src, dst), ic, gopacket.Payload(inner[14:14+28]))
}

// TestCTRelated: an ICMP error about a connection is +rel (+rpl from the
// reply side); about no connection, +inv.
func TestCTRelated(t *testing.T) {
	c := newCTTest(t, nil)
	c.firstPass(portIn, flow.CT{Flags: flow.CTCommit}, flow.Recirc{ID: 1})
	c.firstPass(portOut, flow.CT{}, flow.Recirc{ID: 1})
	out := udpPkt(t, "10.0.0.1", "10.0.0.2", 1000, 53, "q")
	c.second(out, "lo")
	wantState(t, "port unreachable", c.state(icmpErr(t, "10.0.0.2", "10.0.0.1", out), "dummy0"), trk|rel|rpl)
	stray := udpPkt(t, "10.0.0.1", "10.0.0.2", 1001, 53, "q")
	wantState(t, "error of no connection", c.state(icmpErr(t, "10.0.0.2", "10.0.0.1", stray), "dummy0"), trk|inv)
	// ICMP echo: the id is the port; a reply without a request is +inv.
	echo := func(src, dst string, typ uint8) []byte {
		ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, 0), Id: 77, Seq: 1}
		return serialize(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolICMPv4, src, dst), ic, gopacket.Payload("ping"))
	}
	wantState(t, "echo reply first", c.state(echo("10.0.0.2", "10.0.0.1", 0), "dummy0"), trk|inv)
	wantState(t, "echo request", c.state(echo("10.0.0.1", "10.0.0.2", 8), "lo"), trk|nw)
	wantState(t, "echo reply", c.state(echo("10.0.0.2", "10.0.0.1", 0), "dummy0"), trk|est|rpl)
}

func connOf(t *testing.T, c *ctTest, sport uint16) Conn {
	t.Helper()
	for _, x := range c.conns() {
		if x.Orig.SrcPort == sport {
			return x
		}
	}
	t.Fatalf("no connection from port %d in %v", sport, c.conns())
	return Conn{}
}

func near(d, want time.Duration) bool { return d > want-3*time.Second && d <= want+time.Second }

// TestCTTCPTimeouts: the TCP states a connection goes through, with the
// kernel's timeouts; FIN both ways and RST close it; the sweep deletes
// what expired and nothing else.
func TestCTTCPTimeouts(t *testing.T) {
	c := newCTTest(t, nil)
	c.firstPass(portIn, flow.CT{Flags: flow.CTCommit}, flow.Recirc{ID: 1})
	c.firstPass(portOut, flow.CT{}, flow.Recirc{ID: 1})
	cl, sv := "10.0.0.1", "10.0.0.2"
	steps := []struct {
		from  string
		flags tcpFlags
		state string
		to    time.Duration
	}{
		{cl, synF, "SYN_SENT", 120 * time.Second},
		{sv, synAckF, "SYN_RECV", 60 * time.Second},
		{cl, ackF, "ESTABLISHED", 432000 * time.Second},
		{cl, finF, "FIN_WAIT", 120 * time.Second},
		{sv, ackF, "CLOSE_WAIT", 60 * time.Second},
		{sv, finF, "TIME_WAIT", 120 * time.Second},
	}
	for _, s := range steps {
		if s.from == cl {
			c.second(tcpSeg(t, cl, sv, 4000, 80, s.flags), "lo")
		} else {
			c.second(tcpSeg(t, sv, cl, 80, 4000, s.flags), "dummy0")
		}
		x := connOf(t, c, 4000)
		if x.TCPState != s.state || !near(x.Expires, s.to) {
			t.Fatalf("after %+v from %s: %s, expires in %v; want %s, %v", s.flags, s.from, x.TCPState, x.Expires, s.state, s.to)
		}
	}
	// A new SYN on the closed connection starts it anew.
	wantState(t, "syn after close", c.state(tcpSeg(t, cl, sv, 4000, 80, synF), "lo"), trk|nw)
	if x := connOf(t, c, 4000); x.TCPState != "SYN_SENT" || x.SeenReply {
		t.Fatalf("reopened: %v", x)
	}

	c.second(tcpSeg(t, cl, sv, 4001, 80, synF), "lo")
	c.second(tcpSeg(t, sv, cl, 80, 4001, rstF), "dummy0")
	if x := connOf(t, c, 4001); x.TCPState != "CLOSE" || !near(x.Expires, 10*time.Second) {
		t.Fatalf("after RST: %v", x)
	}
	n, err := c.sweepConntrackAt(monoCoarse() + uint64(11*time.Second))
	if err != nil || n != 1 {
		t.Fatalf("sweep 11 s ahead removed %d (%v), want the reset connection", n, err)
	}
	if cs := c.conns(); len(cs) != 1 || cs[0].Orig.SrcPort != 4000 {
		t.Fatalf("after sweep: %v", cs)
	}
	var k ctKey
	var v ctValue
	entries := 0
	for it := c.objs.Conntrack.Iterate(); it.Next(&k, &v); {
		entries++
	}
	if entries != 2 {
		t.Fatalf("%d table entries for one connection", entries)
	}
	// Timeouts come from userspace.
	if err := c.SetConntrackTimeouts(ConntrackTimeouts{TCPSynSent: 7 * time.Second}); err != nil {
		t.Fatal(err)
	}
	c.second(tcpSeg(t, cl, sv, 4002, 80, synF), "lo")
	if x := connOf(t, c, 4002); !near(x.Expires, 7*time.Second) {
		t.Fatalf("configured syn_sent timeout: %v", x)
	}
}

// TestCTZones: zones do not see each other's connections.
func TestCTZones(t *testing.T) {
	c := newCTTest(t, nil)
	c.firstPass(portIn, flow.CT{Zone: 1, Flags: flow.CTCommit}, flow.Recirc{ID: 1})
	c.firstPass(portOut, flow.CT{Zone: 2}, flow.Recirc{ID: 1})
	c.firstPass(portOut2, flow.CT{Zone: 1}, flow.Recirc{ID: 1})
	c.second(udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, "q"), "lo")
	back := udpPkt(t, "10.0.0.2", "10.0.0.1", 2, 1, "a")
	wantState(t, "reply in zone 2", c.state(back, "dummy0"), trk|nw)
	u := c.second(back, "dummy1")
	wantState(t, "reply in zone 1", u.Key.CtState, trk|est|rpl)
	if u.Key.CtZone != 1 {
		t.Fatalf("ct_zone %d", u.Key.CtZone)
	}
	zone := uint16(2)
	if n, _ := c.FlushConntrack(ConnMatch{Zone: &zone}); n != 0 {
		t.Fatalf("flushed %d in an empty zone", n)
	}
	zone = 1
	if n, _ := c.FlushConntrack(ConnMatch{Zone: &zone}); n != 1 || len(c.conns()) != 0 {
		t.Fatalf("flush zone 1: %d, left %v", n, c.conns())
	}
}

// TestCTMarkLabel: mark and label are set under their masks on commit,
// also on an existing connection, and a cached flow matches them.
func TestCTMarkLabel(t *testing.T) {
	c := newCTTest(t, nil)
	var label, lmask [16]byte
	label[15], lmask[15] = 0x5a, 0xff
	label[0], lmask[0] = 0xee, 0x0f
	c.firstPass(portIn, flow.CT{Flags: flow.CTCommit, Mark: 0x1234, MarkMask: 0xff, Label: label, LabelMask: lmask}, flow.Recirc{ID: 1})
	c.firstPass(portOut, flow.CT{Flags: flow.CTCommit, Mark: 0x100, MarkMask: 0xff00}, flow.Recirc{ID: 1})
	out := udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, "q")
	u := c.second(out, "lo")
	if u.Key.CtMark != 0x34 || u.Key.CtLabel[15] != 0x5a || u.Key.CtLabel[0] != 0x0e {
		t.Fatalf("mark/label: %s", flow.Format(u.Key, flow.ExactMask()))
	}
	u = c.second(udpPkt(t, "10.0.0.2", "10.0.0.1", 2, 1, "a"), "dummy0")
	if u.Key.CtMark != 0x134 || u.Key.CtLabel[15] != 0x5a {
		t.Fatalf("mark updated on the existing connection: %s", flow.Format(u.Key, flow.ExactMask()))
	}
	// A cached second pass on ct_mark and ct_label.
	k := flow.Key{InPort: portIn, RecircID: 1, CtMark: 0x134}
	k.CtLabel[15] = 0x5a
	m := flow.Mask{InPort: 0xffffffff, RecircID: 0xffffffff, CtMark: 0xffffffff}
	m.CtLabel[15] = 0xff
	c.put(flow.Flow{Key: k, Mask: m, Actions: []flow.Action{flow.Output{Port: portOut2}}})
	r := c.run(out, "lo")
	if r.verdict != tcActRedirect || len(r.outputs) != 1 || r.outputs[0].ifindex != c.ifindex["dummy1"] {
		t.Fatalf("flow on ct_mark/ct_label: verdict %d outputs %v drops %v", r.verdict, r.outputs, c.drops())
	}
	// Twice: the second through the exact-match cache.
	if r := c.run(out, "lo"); r.verdict != tcActRedirect || c.counters()["emc-hit"] == 0 {
		t.Fatalf("recirculated EMC hit: verdict %d counters %v", r.verdict, c.counters())
	}
	if fs := c.Flows(); len(fs) != 3 {
		t.Fatalf("flows %d", len(fs))
	}
}

// TestCTTableFull: a full table refuses new connections (counted), and
// established ones keep flowing.
func TestCTTableFull(t *testing.T) {
	c := newCTTest(t, func(cfg *Config) { cfg.ConntrackMax = 4; cfg.ConntrackPortMax = -1 })
	c.firstPass(portIn, flow.CT{Flags: flow.CTCommit}, flow.Recirc{ID: 1})
	c.firstPass(portOut, flow.CT{}, flow.Recirc{ID: 1})
	for p := uint16(1); p <= 4; p++ {
		c.second(udpPkt(t, "10.0.0.1", "10.0.0.2", p, 53, "q"), "lo")
	}
	if v := c.run(udpPkt(t, "10.0.0.1", "10.0.0.2", 5, 53, "q"), "lo"); v.verdict != tcActShot || c.drops()[DropCTTableFull] != 1 {
		t.Fatalf("fifth connection: verdict %d drops %v", v.verdict, c.drops())
	}
	wantState(t, "established, table full", c.state(udpPkt(t, "10.0.0.2", "10.0.0.1", 53, 1, "a"), "dummy0"), trk|est|rpl)
	wantState(t, "original, table full", c.state(udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 53, "q"), "lo"), trk|est)
	st, err := c.ConntrackStats()
	if err != nil || st.Conns != 4 || st.Max != 4 {
		t.Fatalf("stats %+v %v", st, err)
	}
}

// TestCTPortBudget: one port cannot commit past its share; another port
// still can; a flush gives the share back.
func TestCTPortBudget(t *testing.T) {
	c := newCTTest(t, func(cfg *Config) { cfg.ConntrackPortMax = 2 })
	c.firstPass(portIn, flow.CT{Flags: flow.CTCommit}, flow.Recirc{ID: 1})
	c.firstPass(portOut, flow.CT{Flags: flow.CTCommit}, flow.Recirc{ID: 1})
	c.second(udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 53, "q"), "lo")
	c.second(udpPkt(t, "10.0.0.1", "10.0.0.2", 2, 53, "q"), "lo")
	if v := c.run(udpPkt(t, "10.0.0.1", "10.0.0.2", 3, 53, "q"), "lo"); v.verdict != tcActShot || c.drops()[DropCTPortBudget] != 1 {
		t.Fatalf("third connection of port 1: verdict %d drops %v", v.verdict, c.drops())
	}
	c.second(udpPkt(t, "10.0.0.5", "10.0.0.2", 3, 53, "q"), "dummy0")
	st, _ := c.ConntrackStats()
	if st.ByPort[portIn] != 2 || st.ByPort[portOut] != 1 || st.PortMax != 2 {
		t.Fatalf("stats %+v", st)
	}
	if n, err := c.FlushConntrack(ConnMatch{Proto: 17, Addr: netip.MustParseAddr("10.0.0.1"), Port: 1}); n != 1 || err != nil {
		t.Fatalf("flush by endpoint: %d %v", n, err)
	}
	wantState(t, "after flush", c.state(udpPkt(t, "10.0.0.1", "10.0.0.2", 3, 53, "q"), "lo"), trk|nw)
}

// TestCTPortForgotten: a detached port's connections go with its counts,
// so that a pod that gets the same port number later starts with its full
// budget, and the old connections' expiry never counts against it (that
// wrapped the fast path's unsigned live count: every commit refused).
func TestCTPortForgotten(t *testing.T) {
	c := newCTTest(t, func(cfg *Config) { cfg.ConntrackPortMax = 2 })
	c.firstPass(portIn, flow.CT{Flags: flow.CTCommit}, flow.Recirc{ID: 1})
	c.second(udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 53, "q"), "lo")
	c.second(udpPkt(t, "10.0.0.1", "10.0.0.2", 2, 53, "q"), "lo")
	c.forgetConntrackPort(portIn)
	if st, err := c.ConntrackStats(); err != nil || st.Conns != 0 || st.ByPort[portIn] != 0 {
		t.Fatalf("after the port went: %+v %v, want its connections gone", st, err)
	}
	// The next pod on that port: two connections, the third refused.
	c.second(udpPkt(t, "10.0.0.1", "10.0.0.2", 3, 53, "q"), "lo")
	c.second(udpPkt(t, "10.0.0.1", "10.0.0.2", 4, 53, "q"), "lo")
	if v := c.run(udpPkt(t, "10.0.0.1", "10.0.0.2", 5, 53, "q"), "lo"); v.verdict != tcActShot || c.drops()[DropCTPortBudget] != 1 {
		t.Fatalf("third connection of the new pod: verdict %d drops %v", v.verdict, c.drops())
	}
	// Its connections flushed (released), it commits again.
	if n, err := c.FlushConntrack(ConnMatch{Proto: 17, Addr: netip.MustParseAddr("10.0.0.1")}); n != 2 || err != nil {
		t.Fatalf("flush: %d %v", n, err)
	}
	wantState(t, "after flush", c.state(udpPkt(t, "10.0.0.1", "10.0.0.2", 6, 53, "q"), "lo"), trk|nw)
}

// TestCTPortReusedStaleUDPFlush is Kubernetes' conformance spec "should
// serve endpoints on same port and different protocols" as the fast path
// saw it: its exec pod got the port number of a pod gone before (ports
// take the lowest free number), which had left UDP connections to the
// same endpoint; the exec pod reached the endpoint by TCP and UDP; the
// UDP port taken off the Service flushed the endpoint's UDP connections,
// the old pod's among them. Counted against the exec pod's port, they
// took its live count below zero, which the fast path read as a full
// budget: every new TCP connection refused (ct-port-budget), the spec's
// 30 s of timeouts (docs/k8s-conformance.md).
func TestCTPortReusedStaleUDPFlush(t *testing.T) {
	c := newCTTest(t, func(cfg *Config) { cfg.ConntrackPortMax = 16 })
	c.firstPass(portIn, flow.CT{Flags: flow.CTCommit}, flow.Recirc{ID: 1})
	endpoint := netip.MustParseAddr("10.0.0.2")
	// The pod before: two UDP connections to the endpoint, then gone.
	c.second(udpPkt(t, "10.0.0.7", "10.0.0.2", 1, 80, "q"), "lo")
	c.second(udpPkt(t, "10.0.0.7", "10.0.0.2", 2, 80, "q"), "lo")
	c.forgetConntrackPort(portIn)
	// The exec pod on the same port number: TCP and UDP to the endpoint.
	c.second(tcpPkt(t, "10.0.0.1", "10.0.0.2", 3, 80, true), "lo")
	c.second(udpPkt(t, "10.0.0.1", "10.0.0.2", 4, 80, "q"), "lo")
	// The UDP port goes: the agent flushes the endpoint's UDP connections.
	if _, err := c.FlushConntrack(ConnMatch{Proto: 17, Addr: endpoint, Port: 80}); err != nil {
		t.Fatal(err)
	}
	// The exec pod's next TCP connections are committed.
	for sport := uint16(5); sport < 8; sport++ {
		c.run(tcpPkt(t, "10.0.0.1", "10.0.0.2", sport, 80, true), "lo")
		if d := c.drops()[DropCTPortBudget]; d != 0 {
			t.Fatalf("new TCP connection from port %d after the flush refused: ct-port-budget drops %d", sport, d)
		}
		wantState(t, "new TCP connection after the flush", readUpcall(t, c.r).Key.CtState, trk|nw)
	}
	if st, err := c.ConntrackStats(); err != nil || st.ByPort[portIn] != 4 {
		t.Fatalf("stats %+v %v: want the exec pod's 4 TCP connections live on its port", st, err)
	}
}

// TestRecircDepth: flows that recirculate forever (a first-pass flow that
// does not match recirc_id) are cut at RECIRC_MAX passes.
func TestRecircDepth(t *testing.T) {
	c := newCTTest(t, nil)
	c.put(flow.Flow{Key: flow.Key{InPort: portIn}, Mask: flow.Mask{InPort: 0xffffffff}, Actions: []flow.Action{flow.Hash{Basis: 1}, flow.Recirc{ID: 1}}})
	if v := c.run(udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, "q"), "lo"); v.verdict != tcActShot || c.drops()[DropRecircDepth] != 1 {
		t.Fatalf("verdict %d drops %v", v.verdict, c.drops())
	}
	if fs, err := c.Dump(); err != nil || len(fs) != 1 || fs[0].Stats.Packets != 8 {
		t.Fatalf("the looping flow's stats %+v (%v), want 8 passes", fs, err)
	}
}

// TestRecircOutputsAndHash: outputs before a recirc are copies, the
// second pass decides the verdict; hash sets dp_hash for it.
func TestRecircOutputsAndHash(t *testing.T) {
	c := newCTTest(t, nil)
	c.firstPass(portIn, flow.Output{Port: portOut2}, flow.CTClear{}, flow.Hash{Basis: 7}, flow.Recirc{ID: 1})
	u := c.second(udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, "q"), "lo")
	if u.Key.DpHash == 0 || u.Key.CtState != 0 {
		t.Fatalf("dp_hash %#x ct_state %#x", u.Key.DpHash, u.Key.CtState)
	}
	h := u.Key.DpHash
	c.put(flow.Flow{Key: flow.Key{RecircID: 1, DpHash: h & 1}, Mask: flow.Mask{RecircID: 0xffffffff, DpHash: 1}, Actions: []flow.Action{flow.Output{Port: portOut}}})
	r := c.run(udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, "q"), "lo")
	if r.verdict != tcActRedirect || len(r.outputs) != 2 || r.outputs[0].ifindex != c.ifindex["dummy1"] || r.outputs[1].ifindex != c.ifindex["dummy0"] {
		t.Fatalf("verdict %d outputs %v", r.verdict, r.outputs)
	}
	// Recirc must end its list.
	if err := c.Put(flow.Flow{Key: flow.Key{InPort: 9}, Mask: flow.Mask{InPort: 0xffffffff}, Actions: []flow.Action{flow.Recirc{ID: 2}, flow.Output{Port: portOut}}}); err == nil {
		t.Fatal("actions after recirc accepted")
	}
}

// TestCTRestart: connections survive a restart of the switch process.
func TestCTRestart(t *testing.T) {
	// The restart loads and verifies the programs again, which took more
	// than the 30 s a UDP connection without a reply lives on a loaded
	// 2-CPU machine: the reply then rightly started a new connection.
	c := newCTTest(t, func(cfg *Config) { cfg.ConntrackTimeouts.UDPFirst = time.Hour })
	c.firstPass(portIn, flow.CT{Flags: flow.CTCommit}, flow.Recirc{ID: 1})
	c.firstPass(portOut, flow.CT{}, flow.Recirc{ID: 1})
	c.second(udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 53, "q"), "lo")
	cfg := c.cfg
	c.r.Close()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	d2, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.testDP.Datapath = d2 // destroyed at the end
	r, err := d2.Upcalls()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c.r = r
	if cs := c.conns(); len(cs) != 1 {
		t.Fatalf("after restart: %v", cs)
	}
	u := c.second(udpPkt(t, "10.0.0.2", "10.0.0.1", 53, 1, "a"), "dummy0")
	wantState(t, "reply after restart", u.Key.CtState, trk|est|rpl)
}

// TestCTActionEncoding: CT round-trips through the kernel encoding, and
// says what it costs in slots.
func TestCTActionEncoding(t *testing.T) {
	var lbl [16]byte
	lbl[3] = 1
	for _, tc := range []struct {
		a     flow.CT
		slots int
	}{
		{flow.CT{Zone: 3, Flags: flow.CTCommit | flow.CTForce, Mark: 1, MarkMask: 0xff}, 1},
		{flow.CT{Label: lbl, LabelMask: lbl}, 3},
		{flow.CT{NAT: &flow.NAT{}}, 1},
		{flow.CT{Flags: flow.CTCommit, NAT: &flow.NAT{Kind: flow.NATDst, AddrMin: netip.MustParseAddr("10.0.0.1"), AddrMax: netip.MustParseAddr("10.0.0.9"), PortMin: 80, PortMax: 88}}, 3},
		{flow.CT{Flags: flow.CTCommit, NAT: &flow.NAT{Kind: flow.NATSrc, Flags: flow.NATRandom, AddrMin: netip.MustParseAddr("fd00::1"), AddrMax: netip.MustParseAddr("fd00::1")}}, 3},
	} {
		var r rawAction
		ext, err := encodeCT(tc.a, &r)
		if err != nil {
			t.Fatal(err)
		}
		if len(ext)+1 != tc.slots {
			t.Errorf("%v: %d slots, want %d", tc.a, len(ext)+1, tc.slots)
		}
		got := decodeCT(r, ext)
		if got.String() != tc.a.String() {
			t.Errorf("round trip: %v, want %v", got, tc.a)
		}
	}
}

// TestCTIPv6: IPv6 connections, and DNAT of IPv6 with the UDP checksum
// (mandatory in IPv6) fixed.
func TestCTIPv6(t *testing.T) {
	c := newCTTest(t, nil)
	nat := &flow.NAT{Kind: flow.NATDst, AddrMin: netip.MustParseAddr("fd00::5"), PortMin: 9999}
	c.firstPass(portIn, flow.CT{Zone: 4, Flags: flow.CTCommit, NAT: nat}, flow.Recirc{ID: 1})
	c.firstPass(portOut, flow.CT{Zone: 4, NAT: &flow.NAT{}}, flow.Recirc{ID: 1})
	u := c.second(udpPkt(t, "fd00::1", "fd00::100", 40000, 5300, "q"), "lo")
	wantState(t, "v6 new", u.Key.CtState, trk|nw|flow.CtDNAT)
	if netip.AddrFrom16(u.Key.IPDst) != netip.MustParseAddr("fd00::5") || u.Key.TpDst != 9999 || u.Key.CtNwProto != 17 {
		t.Fatalf("v6 DNAT: %s", flow.Format(u.Key, flow.ExactMask()))
	}
	checksumsOK(t, u.Packet)
	u = c.second(udpPkt(t, "fd00::5", "fd00::1", 9999, 40000, "a"), "dummy0")
	wantState(t, "v6 reply", u.Key.CtState, trk|est|rpl|flow.CtSNAT)
	if netip.AddrFrom16(u.Key.IPSrc) != netip.MustParseAddr("fd00::100") || u.Key.TpSrc != 5300 {
		t.Fatalf("v6 reply: %s", flow.Format(u.Key, flow.ExactMask()))
	}
	checksumsOK(t, u.Packet)
	if cs := c.conns(); len(cs) != 1 || cs[0].Orig.Src != netip.MustParseAddr("fd00::1") || cs[0].Reply.Src != netip.MustParseAddr("fd00::5") {
		t.Fatalf("conntrack %v", cs)
	}
}

// TestCTRelatedNAT: an ICMP error from a DNAT backend goes back to the
// client as if the virtual address had sent it, about the packet the
// client sent: outer source, embedded destination address and port, and
// every checksum (ICMP, embedded IP, embedded UDP) fixed.
func TestCTRelatedNAT(t *testing.T) {
	c := newCTTest(t, nil)
	nat := &flow.NAT{Kind: flow.NATDst, AddrMin: netip.MustParseAddr("10.1.0.5"), PortMin: 9999}
	c.firstPass(portIn, flow.CT{Flags: flow.CTCommit, NAT: nat}, flow.Recirc{ID: 1})
	c.firstPass(portOut, flow.CT{NAT: &flow.NAT{}}, flow.Recirc{ID: 1})
	sent := udpPkt(t, "10.0.0.1", "10.96.0.10", 40000, 5300, "q")
	u := c.second(sent, "lo")
	translated := u.Packet // what the backend got
	u = c.second(icmpErr(t, "10.1.0.5", "10.0.0.1", translated), "dummy0")
	wantState(t, "error from the backend", u.Key.CtState, trk|rel|rpl|flow.CtSNAT)
	p := u.Packet
	checksumsOK(t, p) // outer IP and ICMP checksums
	inner := p[14+20+8:]
	if u.Key.IPSrc != [16]byte{10, 96, 0, 10} || !bytes.Equal(inner[12:20], []byte{10, 0, 0, 1, 10, 96, 0, 10}) ||
		!bytes.Equal(inner[20:24], sent[14+20:14+24]) {
		t.Fatalf("error not translated back: %x", p)
	}
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(inner[i])<<8 | uint32(inner[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	if sum != 0xffff {
		t.Fatalf("embedded IP checksum wrong: %x", inner[:20])
	}
	// The embedded UDP checksum is the one the client computed.
	if !bytes.Equal(inner[26:28], sent[14+26:14+28]) {
		t.Fatalf("embedded UDP checksum %x, the client sent %x", inner[26:28], sent[14+26:14+28])
	}
}

// TestCTClosedReleaseBudget: a TCP connection that closed (FIN both ways,
// or a reset) keeps its entry for TIME_WAIT but no longer counts against
// its port's budget — a client making short connections faster than the
// budget over 120 s (16 384 by default: 137 a second) is not refused —
// and closing, reaping and sweeping it count it once. Past three quarters
// of the table, the sweep deletes closed connections before they expire.
func TestCTClosedReleaseBudget(t *testing.T) {
	c := newCTTest(t, func(cfg *Config) { cfg.ConntrackMax = 6; cfg.ConntrackPortMax = 2 })
	c.firstPass(portIn, flow.CT{Flags: flow.CTCommit}, flow.Recirc{ID: 1})
	c.firstPass(portOut, flow.CT{}, flow.Recirc{ID: 1})
	c.firstPass(portOut2, flow.CT{Flags: flow.CTCommit}, flow.Recirc{ID: 1})
	cl, sv := "10.0.0.1", "10.0.0.2"
	open := func(sp uint16) {
		t.Helper()
		c.second(tcpSeg(t, cl, sv, sp, 80, synF), "lo")
		c.second(tcpSeg(t, sv, cl, 80, sp, synAckF), "dummy0")
		c.second(tcpSeg(t, cl, sv, sp, 80, ackF), "lo")
	}
	byPort := func() uint64 {
		t.Helper()
		st, err := c.ConntrackStats()
		if err != nil {
			t.Fatal(err)
		}
		return st.ByPort[portIn]
	}
	open(1)
	open(2)
	if v := c.run(tcpSeg(t, cl, sv, 3, 80, synF), "lo"); v.verdict != tcActShot || c.drops()[DropCTPortBudget] != 1 {
		t.Fatalf("third live connection: verdict %d drops %v", v.verdict, c.drops())
	}
	// Closing: FIN both ways (twice, as retransmissions do), and a reset.
	for i := 0; i < 2; i++ {
		c.second(tcpSeg(t, cl, sv, 1, 80, finF), "lo")
		c.second(tcpSeg(t, sv, cl, 80, 1, finF), "dummy0")
	}
	c.second(tcpSeg(t, sv, cl, 80, 2, rstF), "dummy0")
	c.second(tcpSeg(t, sv, cl, 80, 2, rstF), "dummy0")
	if n := byPort(); n != 0 {
		t.Fatalf("port 1 holds %d live connections after both closed, want 0: %v", n, c.conns())
	}
	open(3)
	open(4)
	if n := byPort(); n != 2 {
		t.Fatalf("port 1 holds %d live connections, want 2", n)
	}
	// A SYN reopening a closed connection's tuple (ct_free), and the
	// sweep of closed ones: each counted once.
	c.second(tcpSeg(t, sv, cl, 80, 3, rstF), "dummy0")
	open(1)
	if n := byPort(); n != 2 {
		t.Fatalf("port 1 holds %d live connections after 3 reset and 1 reopened, want 2", n)
	}
	if cs := c.conns(); len(cs) != 4 {
		t.Fatalf("%d connections, want 4: %v", len(cs), cs)
	}
	// 4 of 6: no pressure, the closed ones (2, 3) stay until they expire.
	if n, err := c.SweepConntrack(); err != nil || n != 0 {
		t.Fatalf("sweep without pressure: %d %v", n, err)
	}
	c.second(tcpSeg(t, "10.0.0.9", sv, 5, 80, synF), "dummy1")
	// 5 of 6 now: past three quarters, closed connections go.
	if n, err := c.SweepConntrack(); err != nil || n != 2 {
		t.Fatalf("sweep under pressure deleted %d (%v), want the two reset connections", n, err)
	}
	if n := byPort(); n != 2 {
		t.Fatalf("port 1 holds %d after the sweep, want 2 (the swept ones were released when they closed)", n)
	}
}

// TestCTFlushByTuple: a flush naming original tuples deletes exactly
// those connections (what the agent does to cut the connections a new
// NetworkPolicy denies); the others keep their state.
func TestCTFlushByTuple(t *testing.T) {
	c := newCTTest(t, nil)
	c.firstPass(portIn, flow.CT{Flags: flow.CTCommit}, flow.Recirc{ID: 1})
	c.firstPass(portOut, flow.CT{}, flow.Recirc{ID: 1})
	for p := uint16(1); p <= 3; p++ {
		c.second(udpPkt(t, "10.0.0.1", "10.0.0.2", p, 53, "q"), "lo")
	}
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	m := ConnMatch{Origs: map[ConnTuple]bool{
		{Src: a, Dst: b, SrcPort: 2, DstPort: 53, Proto: 17}: true,
		{Src: a, Dst: b, SrcPort: 9, DstPort: 53, Proto: 17}: true, // no such connection
	}}
	if n, err := c.FlushConntrack(m); n != 1 || err != nil {
		t.Fatalf("flush by tuple: %d %v, want 1", n, err)
	}
	// A reply tells: it is +est+rpl only while its connection is there.
	wantState(t, "flushed", c.state(udpPkt(t, "10.0.0.2", "10.0.0.1", 53, 2, "a"), "dummy0"), trk|nw)
	wantState(t, "kept", c.state(udpPkt(t, "10.0.0.2", "10.0.0.1", 53, 1, "a"), "dummy0"), trk|est|rpl)
	wantState(t, "kept", c.state(udpPkt(t, "10.0.0.2", "10.0.0.1", 53, 3, "a"), "dummy0"), trk|est|rpl)
}

// TestRecircKeyAfterRewrites: the second pass looks up the packet as the
// first pass left it. A pass whose actions changed nothing of the packet
// (ct without a translation, ct_clear, hash) hands its key on without a
// new parse (nagare_recirc); any rewrite makes the next pass parse again,
// and its key shows the rewrite.
func TestRecircKeyAfterRewrites(t *testing.T) {
	pkt := func() []byte { return udpPkt(t, "10.0.0.1", "10.0.0.2", 1000, 53, "q") }
	// The key the packet has on its first pass.
	c := newCTTest(t, nil)
	if v := c.run(pkt(), "lo"); v.verdict != tcActShot {
		t.Fatalf("verdict %d, want a miss", v.verdict)
	}
	first := readUpcall(t, c.r).Key
	mac := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99}
	for _, tc := range []struct {
		name string
		acts []flow.Action
		want func(k *flow.Key) // the first pass's key as the second should see it
	}{
		{"ct", []flow.Action{flow.CT{Zone: 5, Flags: flow.CTCommit}}, nil},
		{"ct-nat-untranslated", []flow.Action{flow.CT{Zone: 5, Flags: flow.CTCommit, NAT: &flow.NAT{}}}, nil},
		{"ct-clear-hash", []flow.Action{flow.CTClear{}, flow.Hash{Basis: 3}}, nil},
		{"set-ip-dst", []flow.Action{flow.SetIPDst{Addr: netip.MustParseAddr("10.9.9.9")}},
			func(k *flow.Key) { copy(k.IPDst[:], []byte{10, 9, 9, 9}) }},
		{"set-tp-dst", []flow.Action{flow.SetTpDst{Port: 4242}}, func(k *flow.Key) { k.TpDst = 4242 }},
		{"set-eth-dst", []flow.Action{flow.SetEthDst{MAC: mac}}, func(k *flow.Key) { copy(k.EthDst[:], mac) }},
		{"dec-ttl", []flow.Action{flow.DecTTL{}}, func(k *flow.Key) { k.NwTTL-- }},
		{"ct-dnat", []flow.Action{flow.CT{Zone: 5, Flags: flow.CTCommit, NAT: &flow.NAT{Kind: flow.NATDst,
			AddrMin: netip.MustParseAddr("10.1.0.5"), AddrMax: netip.MustParseAddr("10.1.0.5"), PortMin: 8080, PortMax: 8080}}},
			func(k *flow.Key) { copy(k.IPDst[:], []byte{10, 1, 0, 5}); k.TpDst = 8080 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// One case's connection (zone 5) is not the next one's.
			if _, err := c.FlushConntrack(ConnMatch{}); err != nil {
				t.Fatal(err)
			}
			c.firstPass(portIn, append(tc.acts, flow.Recirc{ID: 1})...)
			defer c.Delete(flow.Key{InPort: portIn}, flow.Mask{InPort: 0xffffffff, RecircID: 0xffffffff})
			got := c.second(pkt(), "lo").Key
			want := first
			if tc.want != nil {
				tc.want(&want)
			}
			// The words a pass hands on (recirc.h) are the actions'.
			got.RecircID, got.CtMark, got.CtZone, got.CtState, got.CtNwProto = 0, 0, 0, 0, 0
			got.CtTpSrc, got.CtTpDst, got.CtLabel, got.CtNwSrc, got.CtNwDst, got.DpHash = 0, 0, [16]byte{}, [4]byte{}, [4]byte{}, 0
			if got != want {
				t.Fatalf("second pass key\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

// ctPair is connection i (UDP 10.1.i → 10.2.0.1:53) as ctEntries
// makes it.
func ctPair(i int, expires uint64) (orig ctKey, conn ctValue, reply ctKey, alias ctValue) {
	return ctEntries([4]byte{10, 1, byte(i >> 8), byte(i)}, [4]byte{10, 2, 0, 1}, uint16(1024+i), 53, expires)
}

// ctEntries is a UDP connection src:sport → dst:dport entering on port 7
// as a commit leaves it in the table: the connection's entry under its
// original tuple and the reply entry naming it, expiring at expires.
func ctEntries(src, dst [4]byte, sport, dport uint16, expires uint64) (orig ctKey, conn ctValue, reply ctKey, alias ctValue) {
	copy(orig[0:], src[:])
	copy(orig[16:], dst[:])
	binary.BigEndian.PutUint16(orig[32:], sport)
	binary.BigEndian.PutUint16(orig[34:], dport)
	orig[38], orig[39] = 17, 4
	copy(reply[0:], dst[:])
	copy(reply[16:], src[:])
	binary.BigEndian.PutUint16(reply[32:], dport)
	binary.BigEndian.PutUint16(reply[34:], sport)
	reply[38], reply[39] = 17, 4
	copy(conn[:], reply[:])
	binary.NativeEndian.PutUint64(conn[40:], expires)
	binary.NativeEndian.PutUint32(conn[52:], 7)
	conn[72] = ctKindConn
	copy(alias[:], orig[:])
	alias[72] = ctKindReply
	return orig, conn, reply, alias
}

// TestCTSweepPairs: a sweep deletes an expired connection with its reply
// entry, and reply entries no live connection names back (left by a
// connection deleted before them, or by a connection now paired with
// another reply); it keeps live connections and their replies.
func TestCTSweepPairs(t *testing.T) {
	d := newTestDP(t)
	now := monoCoarse()
	put := func(k ctKey, v ctValue) {
		t.Helper()
		if err := d.objs.Conntrack.Put(k, v); err != nil {
			t.Fatal(err)
		}
	}
	live, liveConn, liveReply, liveAlias := ctPair(1, now+uint64(time.Hour))
	put(live, liveConn)
	put(liveReply, liveAlias)
	dead, deadConn, deadReply, deadAlias := ctPair(2, now-1)
	put(dead, deadConn)
	put(deadReply, deadAlias)
	_, _, orphan, orphanAlias := ctPair(3, 0) // its connection is gone
	put(orphan, orphanAlias)
	// A reply entry naming the live connection, which names another.
	_, _, stale, _ := ctPair(4, 0)
	staleAlias := liveAlias
	put(stale, staleAlias)
	n, err := d.SweepConntrack()
	if err != nil || n != 1 {
		t.Fatalf("swept %d connections (%v), want the expired one", n, err)
	}
	var left []ctKey
	if err := d.rangeConntrack(func(k *ctKey, _ *ctValue) { left = append(left, *k) }); err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 || !slices.Contains(left, live) || !slices.Contains(left, liveReply) {
		t.Fatalf("%d entries left, want the live connection's two", len(left))
	}
}
