package datapath

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/flow"
)

// The shortcut (bpf/lib/shortcut.h) must do what the walk does. These
// tests run the same packets through an instance with it (the exact-match
// cache on: shortcuts follow it) and one without (off), and compare
// everything a packet leaves behind: verdict, bytes out, outputs,
// connections, flow statistics.

// onePass installs the agent's one pass (conntrack_onepass.go) for the
// two test ports: committed in zone 7 with nat, the client's packets
// routed (both MACs, dec_ttl), the server's switched.
func onePass(d *testDP) {
	ct := flow.CT{Zone: 7, Flags: flow.CTCommit, NAT: &flow.NAT{}}
	d.put(flow.Flow{Key: flow.Key{InPort: portIn}, Mask: flow.Mask{InPort: 0xffffffff, RecircID: 0xffffffff},
		Actions: []flow.Action{ct, flow.SetEthSrc{MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0xc1}}, flow.SetEthDst{MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0xc2}},
			flow.DecTTL{}, flow.Output{Port: portOut}}})
	d.put(flow.Flow{Key: flow.Key{InPort: portOut}, Mask: flow.Mask{InPort: 0xffffffff, RecircID: 0xffffffff},
		Actions: []flow.Action{ct, flow.Output{Port: portIn}}})
}

// tcpAt is a TCP segment with the given flags byte (FIN 0x01 ... ACK 0x10).
func tcpAt(tb testing.TB, src, dst string, sport, dport uint16, flags uint8, ttl uint8) []byte {
	tb.Helper()
	tc := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), Seq: 7, Ack: 9, Window: 1000,
		FIN: flags&0x01 != 0, SYN: flags&0x02 != 0, RST: flags&0x04 != 0, PSH: flags&0x08 != 0, ACK: flags&0x10 != 0, ECE: flags&0x40 != 0}
	ip := ip4(layers.IPProtocolTCP, src, dst)
	ip.TTL = ttl
	return serialize(tb, eth(layers.EthernetTypeIPv4), ip, tc, gopacket.Payload("data"))
}

type scPacket struct {
	what string
	pkt  []byte
	dev  string
	// before runs on both instances first (a flow replaced, a connection
	// flushed).
	before func(d *testDP)
}

// shortcutScript is a UDP and a TCP connection's life, with the packets
// the shortcut must leave to the walk among them.
func shortcutScript(t *testing.T) []scPacket {
	cl, sv := "10.0.0.1", "10.0.0.2"
	u := func(src, dst string, sport, dport uint16) []byte { return udpPkt(t, src, dst, sport, dport, "ping") }
	ack, pshAck, syn, synAck, fin := uint8(0x10), uint8(0x18), uint8(0x02), uint8(0x12), uint8(0x11)
	var s []scPacket
	add := func(what string, pkt []byte, dev string) { s = append(s, scPacket{what: what, pkt: pkt, dev: dev}) }
	add("udp first", u(cl, sv, 1000, 2000), "lo")
	add("udp reply", u(sv, cl, 2000, 1000), "dummy0")
	for i := range 3 {
		add(fmt.Sprint("udp orig ", i), u(cl, sv, 1000, 2000), "lo")
		add(fmt.Sprint("udp reply ", i), u(sv, cl, 2000, 1000), "dummy0")
	}
	// Packets of the same connection another key away: each has its own
	// walk (and its own shortcut, once learnt).
	withOpts := u(cl, sv, 1000, 2000)
	opts := serialize(t, eth(layers.EthernetTypeIPv4), &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP,
		SrcIP: parseIP(cl), DstIP: parseIP(sv), Options: []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}},
		&layers.UDP{SrcPort: 1000, DstPort: 2000}, gopacket.Payload("ping"))
	add("udp with IP options", opts, "lo")
	add("udp with IP options again", opts, "lo")
	ttl1 := slices.Clone(withOpts)
	ttl1[14+8] = 1
	fixIPCsum(ttl1)
	add("udp ttl 1 (dec_ttl runs out)", ttl1, "lo")
	add("udp ttl 1 again", ttl1, "lo")
	s = append(s, scPacket{what: "udp after its connection was flushed", pkt: u(cl, sv, 1000, 2000), dev: "lo",
		before: func(d *testDP) {
			if _, err := d.FlushConntrack(ConnMatch{}); err != nil {
				t.Fatal(err)
			}
		}})
	add("udp reply after the flush", u(sv, cl, 2000, 1000), "dummy0")
	add("udp orig after the flush", u(cl, sv, 1000, 2000), "lo")
	add("udp orig after the flush again", u(cl, sv, 1000, 2000), "lo")

	add("syn", tcpAt(t, cl, sv, 3000, 80, syn, 64), "lo")
	add("syn-ack", tcpAt(t, sv, cl, 80, 3000, synAck, 64), "dummy0")
	add("ack", tcpAt(t, cl, sv, 3000, 80, ack, 64), "lo")
	for i := range 3 {
		add(fmt.Sprint("psh-ack ", i), tcpAt(t, cl, sv, 3000, 80, pshAck, 64), "lo")
		add(fmt.Sprint("ack back ", i), tcpAt(t, sv, cl, 80, 3000, ack, 64), "dummy0")
		add(fmt.Sprint("ack ", i), tcpAt(t, cl, sv, 3000, 80, ack, 64), "lo")
	}
	add("ece|ack (another flag)", tcpAt(t, cl, sv, 3000, 80, ack|0x40, 64), "lo")
	s = append(s, scPacket{what: "ack after the server's flow was replaced", pkt: tcpAt(t, sv, cl, 80, 3000, ack, 64), dev: "dummy0",
		before: func(d *testDP) {
			if err := d.Modify(flow.Flow{Key: flow.Key{InPort: portOut}, Mask: flow.Mask{InPort: 0xffffffff, RecircID: 0xffffffff},
				Actions: []flow.Action{flow.CT{Zone: 7, Flags: flow.CTCommit, NAT: &flow.NAT{}}, flow.Output{Port: portOut2}}}); err != nil {
				t.Fatal(err)
			}
		}})
	add("ack after the replacement again", tcpAt(t, sv, cl, 80, 3000, ack, 64), "dummy0")
	add("fin", tcpAt(t, cl, sv, 3000, 80, fin, 64), "lo")
	add("ack of the fin", tcpAt(t, sv, cl, 80, 3000, ack, 64), "dummy0")
	add("ack after the fin", tcpAt(t, cl, sv, 3000, 80, ack, 64), "lo")
	add("ack after the fin again", tcpAt(t, cl, sv, 3000, 80, ack, 64), "lo")
	add("fin back", tcpAt(t, sv, cl, 80, 3000, fin, 64), "dummy0")
	add("last ack", tcpAt(t, cl, sv, 3000, 80, ack, 64), "lo")
	return s
}

// fixIPCsum recomputes the IPv4 header checksum of an Ethernet frame.
func fixIPCsum(pkt []byte) {
	h := pkt[14 : 14+int(pkt[14]&0xf)*4]
	h[10], h[11] = 0, 0
	var sum uint32
	for i := 0; i < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(h[10:], ^uint16(sum))
}

// TestShortcutSameAsWalk: packet by packet, the instance with shortcuts
// and the one without forward, rewrite, drop, track and count alike,
// and the first one took shortcuts (so the comparison compared them).
func TestShortcutSameAsWalk(t *testing.T) {
	with := newCTTestNamed(t, "with")
	without := newCTTestNamed(t, "without")
	if err := without.SetEMC(false); err != nil {
		t.Fatal(err)
	}
	for _, d := range []*testDP{with.testDP, without.testDP} {
		onePass(d)
		d.pinCPU(t) // shortcuts, as the exact-match cache, are per CPU
	}
	hits := func() uint64 { return with.counters()["shortcut-hit"] }
	var took []string
	for _, p := range shortcutScript(t) {
		if p.before != nil {
			p.before(with.testDP)
			p.before(without.testDP)
		}
		h := hits()
		a, b := with.run(p.pkt, p.dev), without.run(p.pkt, p.dev)
		if a.verdict != b.verdict || !bytes.Equal(a.out, b.out) || !slices.Equal(a.outputs, b.outputs) {
			t.Fatalf("%s: with shortcuts verdict %d outputs %v, without %d %v; bytes equal %v",
				p.what, a.verdict, a.outputs, b.verdict, b.outputs, bytes.Equal(a.out, b.out))
		}
		if hits() != h {
			took = append(took, p.what)
		}
		ca, cb := connsSansDeadline(t, with), connsSansDeadline(t, without)
		if !slices.Equal(ca, cb) {
			t.Fatalf("%s: connections differ:\nwith    %v\nwithout %v", p.what, ca, cb)
		}
	}
	// What took the shortcut: established packets seen once before with
	// the same key, not the ones the tracker must see.
	want := []string{"udp reply 0", "udp orig 1", "udp reply 1", "udp orig 2", "udp reply 2",
		"udp orig after the flush", "udp orig after the flush again",
		"ack 0", "psh-ack 1", "ack back 1", "ack 1", "psh-ack 2", "ack back 2", "ack 2",
		"ack after the replacement again"}
	if !slices.Equal(took, want) {
		t.Errorf("packets that took the shortcut:\n%q\nwant\n%q", took, want)
	}
	if n := without.counters()["shortcut-hit"]; n != 0 {
		t.Errorf("shortcuts with the exact-match cache off: %d hits", n)
	}
	if a, b := statsByFlow(t, with.testDP), statsByFlow(t, without.testDP); !maps2Equal(a, b) {
		t.Errorf("flow statistics differ:\nwith    %v\nwithout %v", a, b)
	}
	if a, b := with.drops(), without.drops(); !maps2Equal(a, b) {
		t.Errorf("drops differ: with %v, without %v", a, b)
	}
}

func maps2Equal[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func connsSansDeadline(t *testing.T, c *ctTest) []string {
	var out []string
	for _, x := range c.conns() {
		x.Expires = 0
		out = append(out, fmt.Sprintf("%+v", x))
	}
	slices.Sort(out)
	return out
}

// statsByFlow is each installed flow's packets, bytes and TCP flags, by
// its actions (the two instances number flows alike, but say it plainly).
func statsByFlow(t *testing.T, d *testDP) map[string]string {
	fs, err := d.Dump()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range fs {
		out[fmt.Sprint(f.Key.InPort, f.Actions)] = fmt.Sprintf("%d packets %d bytes flags %#x", f.Stats.Packets, f.Stats.Bytes, f.Stats.TCPFlags)
	}
	return out
}

// TestShortcutRefreshesDeadline: a packet on the shortcut moves its
// connection's deadline as the tracker would (the walk never sees it).
func TestShortcutRefreshesDeadline(t *testing.T) {
	c := newCTTest(t, nil)
	onePass(c.testDP)
	c.pinCPU(t) // shortcuts are per CPU
	cl, sv := "10.0.0.1", "10.0.0.2"
	orig, reply := udpPkt(t, cl, sv, 1000, 2000, "x"), udpPkt(t, sv, cl, 2000, 1000, "x")
	for _, p := range [][]byte{orig, reply, orig, reply} { // committed, replied, both learnt
		c.run(p, map[bool]string{true: "lo", false: "dummy0"}[bytes.Equal(p, orig)])
	}
	for _, p := range []struct {
		pkt []byte
		dev string
	}{{orig, "lo"}, {reply, "dummy0"}} {
		// Bring the deadline near, as if the connection had been idle.
		var k ctKey
		var v ctValue
		it := c.objs.Conntrack.Iterate()
		for it.Next(&k, &v) {
			if v.kind() == ctKindConn {
				binary.NativeEndian.PutUint64(v[40:], monoCoarse()+uint64(5*time.Second))
				if err := c.objs.Conntrack.Put(k, v); err != nil {
					t.Fatal(err)
				}
			}
		}
		if x := connOf(t, c, 1000); !near(x.Expires, 5*time.Second) {
			t.Fatalf("deadline not brought near: %v", x.Expires)
		}
		// Not a way userspace writes entries (it deletes them): say so
		// as deleting would.
		if err := c.bumpCTEpoch(); err != nil {
			t.Fatal(err)
		}
		h := c.counters()["shortcut-hit"]
		if r := c.run(p.pkt, p.dev); r.verdict != tcActRedirect {
			t.Fatalf("verdict %d", r.verdict)
		}
		if c.counters()["shortcut-hit"] != h+1 {
			t.Fatalf("from %s: not on the shortcut (counters %v)", p.dev, c.counters())
		}
		if x := connOf(t, c, 1000); !near(x.Expires, 120*time.Second) {
			t.Fatalf("from %s: deadline %v after a packet, want UDP's 120 s", p.dev, x.Expires)
		}
	}
}

// TestShortcutNotForTranslated: a translated connection's packets always
// take the walk (nat rewrites them there).
func TestShortcutNotForTranslated(t *testing.T) {
	c := newCTTest(t, nil)
	c.put(flow.Flow{Key: flow.Key{InPort: portIn}, Mask: flow.Mask{InPort: 0xffffffff, RecircID: 0xffffffff},
		Actions: []flow.Action{flow.CT{Zone: 7, Flags: flow.CTCommit, NAT: &flow.NAT{Kind: flow.NATDst, AddrMin: netip.MustParseAddr("10.0.0.9")}}, flow.Output{Port: portOut}}})
	c.put(flow.Flow{Key: flow.Key{InPort: portOut}, Mask: flow.Mask{InPort: 0xffffffff, RecircID: 0xffffffff},
		Actions: []flow.Action{flow.CT{Zone: 7, Flags: flow.CTCommit, NAT: &flow.NAT{}}, flow.Output{Port: portIn}}})
	for range 3 {
		c.run(udpPkt(t, "10.0.0.1", "10.0.0.2", 1000, 2000, "x"), "lo")
		c.run(udpPkt(t, "10.0.0.9", "10.0.0.1", 2000, 1000, "x"), "dummy0")
	}
	if n := c.counters()["shortcut-learn"] + c.counters()["shortcut-hit"]; n != 0 {
		t.Fatalf("a translated connection got shortcuts: %v", c.counters())
	}
	if cs := c.conns(); len(cs) != 1 || !cs[0].DNAT || !cs[0].SeenReply {
		t.Fatalf("connections %v", cs)
	}
}

// TestShortcutOnVeth: a real TCP transfer between two pods through the
// one pass, over veths with the kernel's offloads on: the stream's GSO
// packets take their connection's shortcut (redirect_peer, as the walk's
// output) and arrive whole, and the closing FINs still reach the tracker
// (TIME_WAIT), which the shortcut leaves to the walk.
func TestShortcutOnVeth(t *testing.T) {
	_, a, b, d := podPair(t)
	_ = a.Sh(t, "ethtool", "-K", "eth0", "tso", "on", "gso", "on", "tx", "on")
	_ = b.Sh(t, "ethtool", "-K", "eth0", "tso", "on", "gso", "on", "tx", "on")
	arp := flow.Mask{InPort: 0xffffffff, EthType: 0xffff, RecircID: 0xffffffff}
	ct := flow.CT{Zone: 3, Flags: flow.CTCommit, NAT: &flow.NAT{}}
	for _, f := range []flow.Flow{
		{Key: flow.Key{InPort: 1, EthType: 0x0806}, Mask: arp, Actions: []flow.Action{flow.Output{Port: 2}}},
		{Key: flow.Key{InPort: 2, EthType: 0x0806}, Mask: arp, Actions: []flow.Action{flow.Output{Port: 1}}},
		{Key: flow.Key{InPort: 1, EthType: 0x0800}, Mask: arp, Actions: []flow.Action{ct, flow.Output{Port: 2}}},
		{Key: flow.Key{InPort: 2, EthType: 0x0800}, Mask: arp, Actions: []flow.Action{ct, flow.Output{Port: 1}}},
	} {
		if err := d.Put(f); err != nil {
			t.Fatal(err)
		}
	}
	nstest.TCPTransfer(t, b, a, "10.1.0.2:7001", 16<<20)
	cnt, err := d.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if cnt["shortcut-hit"] == 0 || cnt["shortcut-learn"] == 0 {
		t.Fatalf("no packet took a shortcut: %v", cnt)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		cs, _ := d.Conntrack()
		if len(cs) == 1 && cs[0].TCPState == "TIME_WAIT" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after close: %v (the FINs must reach the tracker)", cs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("shortcuts %d, learnt %d, emc hits %d", cnt["shortcut-hit"], cnt["shortcut-learn"], cnt["emc-hit"])
}
