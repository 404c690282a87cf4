package datapath

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/nagare-net/nagare/pkg/flow"
)

// inPortFlow matches every packet from portIn.
func inPortFlow(acts ...flow.Action) flow.Flow {
	return flow.Flow{Key: flow.Key{InPort: portIn}, Mask: flow.Mask{InPort: 0xffffffff}, Actions: acts}
}

func decode(tb testing.TB, pkt []byte) gopacket.Packet {
	tb.Helper()
	p := gopacket.NewPacket(pkt, layers.LayerTypeEthernet, gopacket.Default)
	if el := p.ErrorLayer(); el != nil {
		tb.Fatalf("rewritten packet does not decode: %v", el.Error())
	}
	return p
}

// TestRewrites runs each header rewrite on IPv4 and IPv6, UDP and TCP
// packets, and checks the bytes and that every checksum is still right.
func TestRewrites(t *testing.T) {
	d := newTestDP(t)
	mac := net.HardwareAddr{0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee}
	type check func(t *testing.T, p gopacket.Packet)
	ip4of := func(p gopacket.Packet) *layers.IPv4 { return p.Layer(layers.LayerTypeIPv4).(*layers.IPv4) }
	ip6of := func(p gopacket.Packet) *layers.IPv6 { return p.Layer(layers.LayerTypeIPv6).(*layers.IPv6) }
	ports := func(p gopacket.Packet) (uint16, uint16) {
		if u, ok := p.Layer(layers.LayerTypeUDP).(*layers.UDP); ok {
			return uint16(u.SrcPort), uint16(u.DstPort)
		}
		tc := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
		return uint16(tc.SrcPort), uint16(tc.DstPort)
	}
	tests := []struct {
		name  string
		act   flow.Action
		check check
	}{
		{"eth-src", flow.SetEthSrc{MAC: mac}, func(t *testing.T, p gopacket.Packet) {
			if e := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet); !bytes.Equal(e.SrcMAC, mac) || !bytes.Equal(e.DstMAC, macB[:]) {
				t.Errorf("eth %v > %v", e.SrcMAC, e.DstMAC)
			}
		}},
		{"eth-dst", flow.SetEthDst{MAC: mac}, func(t *testing.T, p gopacket.Packet) {
			if e := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet); !bytes.Equal(e.DstMAC, mac) || !bytes.Equal(e.SrcMAC, macA[:]) {
				t.Errorf("eth %v > %v", e.SrcMAC, e.DstMAC)
			}
		}},
		{"tp-src", flow.SetTpSrc{Port: 4242}, func(t *testing.T, p gopacket.Packet) {
			if s, d := ports(p); s != 4242 || d != 3333 {
				t.Errorf("ports %d > %d", s, d)
			}
		}},
		{"tp-dst", flow.SetTpDst{Port: 8080}, func(t *testing.T, p gopacket.Packet) {
			if s, d := ports(p); s != 1001 || d != 8080 {
				t.Errorf("ports %d > %d", s, d)
			}
		}},
	}
	v4tests := append(tests, []struct {
		name  string
		act   flow.Action
		check check
	}{
		{"ip-src", flow.SetIPSrc{Addr: netip.MustParseAddr("192.168.7.7")}, func(t *testing.T, p gopacket.Packet) {
			if ip := ip4of(p); ip.SrcIP.String() != "192.168.7.7" || ip.DstIP.String() != "10.0.0.2" {
				t.Errorf("ip %v > %v", ip.SrcIP, ip.DstIP)
			}
		}},
		{"ip-dst", flow.SetIPDst{Addr: netip.MustParseAddr("192.168.8.8")}, func(t *testing.T, p gopacket.Packet) {
			if ip := ip4of(p); ip.DstIP.String() != "192.168.8.8" || ip.SrcIP.String() != "10.0.0.1" {
				t.Errorf("ip %v > %v", ip.SrcIP, ip.DstIP)
			}
		}},
		{"dscp", flow.SetDSCP{DSCP: 46}, func(t *testing.T, p gopacket.Packet) {
			if tos := ip4of(p).TOS; tos != 46<<2|1 {
				t.Errorf("tos 0x%x", tos)
			}
		}},
		{"ecn", flow.SetECN{ECN: 3}, func(t *testing.T, p gopacket.Packet) {
			if tos := ip4of(p).TOS; tos != 10<<2|3 {
				t.Errorf("tos 0x%x", tos)
			}
		}},
		{"dec-ttl", flow.DecTTL{}, func(t *testing.T, p gopacket.Packet) {
			if ttl := ip4of(p).TTL; ttl != 63 {
				t.Errorf("ttl %d", ttl)
			}
		}},
		{"set-ttl", flow.SetTTL{TTL: 5}, func(t *testing.T, p gopacket.Packet) {
			if ip := ip4of(p); ip.TTL != 5 || ip.TOS != 10<<2|1 || ip.Protocol == 0 {
				t.Errorf("ttl %d tos 0x%x proto %d", ip.TTL, ip.TOS, ip.Protocol)
			}
		}},
	}...)
	v6tests := append(tests, []struct {
		name  string
		act   flow.Action
		check check
	}{
		{"ip-src", flow.SetIPSrc{Addr: netip.MustParseAddr("fd00::77")}, func(t *testing.T, p gopacket.Packet) {
			if ip := ip6of(p); ip.SrcIP.String() != "fd00::77" || ip.DstIP.String() != "fd00::2" {
				t.Errorf("ip %v > %v", ip.SrcIP, ip.DstIP)
			}
		}},
		{"ip-dst", flow.SetIPDst{Addr: netip.MustParseAddr("fd00::88")}, func(t *testing.T, p gopacket.Packet) {
			if ip := ip6of(p); ip.DstIP.String() != "fd00::88" {
				t.Errorf("ip %v > %v", ip.SrcIP, ip.DstIP)
			}
		}},
		{"dscp", flow.SetDSCP{DSCP: 46}, func(t *testing.T, p gopacket.Packet) {
			if ip := ip6of(p); ip.TrafficClass != 46<<2|1 || ip.FlowLabel != 0xabcde {
				t.Errorf("tclass 0x%x label 0x%x", ip.TrafficClass, ip.FlowLabel)
			}
		}},
		{"dec-ttl", flow.DecTTL{}, func(t *testing.T, p gopacket.Packet) {
			if hl := ip6of(p).HopLimit; hl != 63 {
				t.Errorf("hop limit %d", hl)
			}
		}},
		{"set-ttl", flow.SetTTL{TTL: 5}, func(t *testing.T, p gopacket.Packet) {
			if ip := ip6of(p); ip.HopLimit != 5 || ip.TrafficClass != 10<<2|1 || ip.FlowLabel != 0xabcde {
				t.Errorf("hop limit %d tclass 0x%x label 0x%x", ip.HopLimit, ip.TrafficClass, ip.FlowLabel)
			}
		}},
	}...)

	build := func(v6, tcp bool) []byte {
		var l3 gopacket.SerializableLayer
		typ := layers.EthernetTypeIPv4
		proto := layers.IPProtocolUDP
		if tcp {
			proto = layers.IPProtocolTCP
		}
		if v6 {
			ip := ip6(proto, "fd00::1", "fd00::2")
			ip.TrafficClass, ip.FlowLabel = 10<<2|1, 0xabcde
			l3, typ = ip, layers.EthernetTypeIPv6
		} else {
			ip := ip4(proto, "10.0.0.1", "10.0.0.2")
			ip.TOS = 10<<2 | 1
			l3 = ip
		}
		var l4 gopacket.SerializableLayer = &layers.UDP{SrcPort: 1001, DstPort: 3333}
		if tcp {
			l4 = &layers.TCP{SrcPort: 1001, DstPort: 3333, ACK: true, Seq: 5, Window: 100}
		}
		return serialize(t, eth(typ), l3, l4, gopacket.Payload("some payload bytes"))
	}
	for _, fam := range []struct {
		name  string
		v6    bool
		tests []struct {
			name  string
			act   flow.Action
			check check
		}
	}{{"ipv4", false, v4tests}, {"ipv6", true, v6tests}} {
		for _, l4 := range []string{"udp", "tcp"} {
			for _, tc := range fam.tests {
				t.Run(fam.name+"-"+l4+"-"+tc.name, func(t *testing.T) {
					if err := d.Flush(); err != nil {
						t.Fatal(err)
					}
					d.put(inPortFlow(tc.act, flow.Output{Port: portOut}))
					r := d.run(build(fam.v6, l4 == "tcp"), "lo")
					if r.verdict != tcActRedirect {
						t.Fatalf("verdict %d, drops %v", r.verdict, d.drops())
					}
					p := decode(t, r.out)
					tc.check(t, p)
					checksumsOK(t, r.out)
				})
			}
		}
	}
}

func TestUDPZeroChecksumStaysZero(t *testing.T) {
	d := newTestDP(t)
	pkt := udpPkt(t, "10.0.0.1", "10.0.0.2", 1000, 2000, "abc")
	pkt[14+20+6], pkt[14+20+7] = 0, 0 // no UDP checksum
	d.put(inPortFlow(flow.SetIPDst{Addr: netip.MustParseAddr("10.9.9.9")}, flow.SetTpDst{Port: 53}, flow.Output{Port: portOut}))
	r := d.run(pkt, "lo")
	if got := binary.BigEndian.Uint16(r.out[14+20+6:]); got != 0 {
		t.Fatalf("UDP checksum became 0x%04x", got)
	}
	if got := netip.AddrFrom4([4]byte(r.out[30:34])); got.String() != "10.9.9.9" {
		t.Fatalf("dst %v", got)
	}
}

func TestDecTTLExpires(t *testing.T) {
	d := newTestDP(t)
	for _, v6 := range []bool{false, true} {
		src, dst := "10.0.0.1", "10.0.0.2"
		if v6 {
			src, dst = "fd00::1", "fd00::2"
		}
		pkt := udpPkt(t, src, dst, 1, 2, "x")
		if v6 {
			pkt[14+7] = 1
		} else {
			pkt[14+8] = 1
			checksumFix(pkt)
		}
		if err := d.Flush(); err != nil {
			t.Fatal(err)
		}
		d.put(inPortFlow(flow.DecTTL{}, flow.Output{Port: portOut}))
		before := d.drops()[DropTTLExceeded]
		if r := d.run(pkt, "lo"); r.verdict != tcActShot || len(r.outputs) != 0 {
			t.Fatalf("v6=%v: verdict %d outputs %v, want a drop", v6, r.verdict, r.outputs)
		}
		if got := d.drops()[DropTTLExceeded]; got != before+1 {
			t.Fatalf("v6=%v: ttl-exceeded count %d, want %d", v6, got, before+1)
		}
	}
}

// TestSetTTLLeavesNonIPAlone: set_nw_ttl on an ARP packet forwards it
// unchanged, as Open vSwitch does.
func TestSetTTLLeavesNonIPAlone(t *testing.T) {
	d := newTestDP(t)
	pkt := serialize(t, eth(layers.EthernetTypeARP), &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
		HwAddressSize: 6, ProtAddressSize: 4, Operation: layers.ARPRequest,
		SourceHwAddress: []byte{2, 0, 0, 0, 0, 1}, SourceProtAddress: []byte{10, 0, 0, 1},
		DstHwAddress: make([]byte, 6), DstProtAddress: []byte{10, 0, 0, 2}})
	d.put(inPortFlow(flow.SetTTL{TTL: 5}, flow.Output{Port: portOut}))
	r := d.run(pkt, "lo")
	if r.verdict != tcActRedirect {
		t.Fatalf("verdict %d, drops %v", r.verdict, d.drops())
	}
	if !bytes.Equal(r.out, pkt) {
		t.Fatalf("ARP packet changed:\n got %x\nwant %x", r.out, pkt)
	}
}

// checksumFix recomputes the IPv4 header checksum of an Ethernet frame.
func checksumFix(pkt []byte) {
	h := pkt[14:34]
	h[10], h[11] = 0, 0
	var s uint32
	for i := 0; i < 20; i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	binary.BigEndian.PutUint16(h[10:], ^uint16(s))
}

func TestVLAN(t *testing.T) {
	d := newTestDP(t)
	tagged := serialize(t, eth(layers.EthernetTypeDot1Q), &layers.Dot1Q{VLANIdentifier: 100, Type: layers.EthernetTypeIPv4},
		ip4(layers.IPProtocolUDP, "10.0.0.1", "10.0.0.2"), &layers.UDP{SrcPort: 1, DstPort: 2}, gopacket.Payload("vlan"))
	untagged := udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, "vlan")

	t.Run("pop-in-data-then-rewrite", func(t *testing.T) {
		if err := d.Flush(); err != nil {
			t.Fatal(err)
		}
		// The rewrite after the pop must land on the moved IP header.
		d.put(inPortFlow(flow.PopVLAN{}, flow.SetIPDst{Addr: netip.MustParseAddr("10.7.7.7")}, flow.Output{Port: portOut}))
		r := d.run(tagged, "lo")
		p := decode(t, r.out)
		if p.Layer(layers.LayerTypeDot1Q) != nil {
			t.Fatal("tag still there")
		}
		if ip := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ip.DstIP.String() != "10.7.7.7" {
			t.Fatalf("dst %v", ip.DstIP)
		}
		checksumsOK(t, r.out)
	})
	t.Run("push", func(t *testing.T) {
		if err := d.Flush(); err != nil {
			t.Fatal(err)
		}
		// The kernel keeps a pushed tag in skb metadata until a second push
		// moves it into the packet: push twice and find the first in the data.
		d.put(inPortFlow(flow.PushVLAN{TCI: 3<<13 | 42}, flow.PushVLAN{TCI: 7}, flow.Output{Port: portOut}))
		r := d.run(untagged, "lo")
		p := decode(t, r.out)
		q, ok := p.Layer(layers.LayerTypeDot1Q).(*layers.Dot1Q)
		if !ok || q.VLANIdentifier != 42 || q.Priority != 3 {
			t.Fatalf("no tag 42/pcp 3 in %x", r.out)
		}
	})
	t.Run("push-onto-tagged-then-rewrite", func(t *testing.T) {
		if err := d.Flush(); err != nil {
			t.Fatal(err)
		}
		// The second push moves the first tag from skb metadata into the
		// packet (as a push onto a tagged packet at tc ingress does): the
		// rewrites after it must land 4 bytes further in.
		d.put(inPortFlow(flow.PushVLAN{TCI: 42}, flow.PushVLAN{TCI: 7},
			flow.SetIPDst{Addr: netip.MustParseAddr("10.7.7.7")}, flow.SetTpDst{Port: 99}, flow.Output{Port: portOut}))
		r := d.run(untagged, "lo")
		p := decode(t, r.out)
		if q, ok := p.Layer(layers.LayerTypeDot1Q).(*layers.Dot1Q); !ok || q.VLANIdentifier != 42 {
			t.Fatalf("no tag 42 in %x", r.out)
		}
		ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if ip == nil || udp == nil || ip.DstIP.String() != "10.7.7.7" || udp.DstPort != 99 {
			t.Fatalf("rewrites missed the moved headers: %x", r.out)
		}
		checksumsOK(t, r.out)
	})
}

func TestOutputs(t *testing.T) {
	d := newTestDP(t)
	d.fakePort(portPod, "dummy1", PortPod)
	pkt := udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, "x")
	tests := []struct {
		name    string
		acts    []flow.Action
		verdict uint32
		outs    []traceOut
		drop    DropReason
	}{
		{"one", []flow.Action{flow.Output{Port: portOut}}, tcActRedirect,
			[]traceOut{{d.ifindex["dummy0"], outLast}}, 0},
		{"pod-uses-peer", []flow.Action{flow.Output{Port: portPod}}, tcActRedirect,
			[]traceOut{{d.ifindex["dummy1"], outLast | outPeer}}, 0},
		{"two-clone-then-redirect", []flow.Action{flow.Output{Port: portOut}, flow.Output{Port: portOut2}}, tcActRedirect,
			[]traceOut{{d.ifindex["dummy0"], 0}, {d.ifindex["dummy1"], outLast}}, 0},
		{"local", []flow.Action{flow.Local{}}, tcActOK,
			[]traceOut{{d.ifindex["lo"], outIngress}}, 0},
		{"drop", []flow.Action{flow.Drop{}}, tcActShot, nil, DropAction},
		{"drop-policy", []flow.Action{flow.Drop{Reason: flow.DropReasonPolicy}}, tcActShot, nil, DropPolicy},
		{"drop-unknown-reason", []flow.Action{flow.Drop{Reason: 999}}, tcActShot, nil, DropAction},
		{"empty", nil, tcActShot, nil, DropAction},
		{"rewrite-without-output", []flow.Action{flow.DecTTL{}}, tcActShot, nil, DropAction},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := d.Flush(); err != nil {
				t.Fatal(err)
			}
			d.put(inPortFlow(tc.acts...))
			before := d.drops()
			pdBefore, err := d.PortDrops()
			if err != nil {
				t.Fatal(err)
			}
			r := d.run(pkt, "lo")
			if r.verdict != tc.verdict {
				t.Fatalf("verdict %d, want %d", r.verdict, tc.verdict)
			}
			if len(r.outputs) != len(tc.outs) {
				t.Fatalf("outputs %v, want %v", r.outputs, tc.outs)
			}
			for i := range tc.outs {
				if r.outputs[i] != tc.outs[i] {
					t.Fatalf("outputs %v, want %v", r.outputs, tc.outs)
				}
			}
			if tc.drop != 0 && d.drops()[tc.drop] != before[tc.drop]+1 {
				t.Fatalf("drop %v not counted", tc.drop)
			}
			if tc.drop != 0 {
				pd, err := d.PortDrops()
				if err != nil {
					t.Fatal(err)
				}
				if lo := d.ifindex["lo"]; pd[lo][tc.drop] != pdBefore[lo][tc.drop]+1 {
					t.Fatalf("drop %v not counted for port lo: %v", tc.drop, pd[lo])
				}
			}
		})
	}
}

func TestUnknownPortIsRefused(t *testing.T) {
	d := newTestDP(t)
	if err := d.Put(inPortFlow(flow.Output{Port: 77})); err == nil {
		t.Fatal("flow with an output to an unknown port was installed")
	}
	// Outputs beyond 16 go into an output set (flood_test.go); other
	// actions do not.
	acts := make([]flow.Action, MaxActions+1)
	for i := range acts {
		acts[i] = flow.DecTTL{}
	}
	acts[len(acts)-1] = flow.Output{Port: portOut}
	if err := d.Put(inPortFlow(acts...)); !errors.Is(err, ErrTooManyActs) {
		t.Fatalf("flow with %d actions: %v, want %v", len(acts), err, ErrTooManyActs)
	}
}

// TestRoutedHopMACsInOneSlot: a routed hop's two MAC rewrites, in either
// order, take one slot (one store in the fast path), rewrite both, and
// decode back in the flow's order (what a restarted switch reads).
func TestRoutedHopMACsInOneSlot(t *testing.T) {
	d := newTestDP(t)
	src := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x5a}
	dst := net.HardwareAddr{0x02, 0, 0, 0, 0, 0xda}
	pkt := udpPkt(t, "10.0.0.1", "10.0.0.2", 5001, 5002, "abc")
	for _, acts := range [][]flow.Action{
		{flow.SetEthSrc{MAC: src}, flow.SetEthDst{MAC: dst}, flow.DecTTL{}, flow.Output{Port: portOut}},
		{flow.SetEthDst{MAC: dst}, flow.SetEthSrc{MAC: src}, flow.Output{Port: portOut}},
		{flow.SetEthSrc{MAC: src}, flow.SetEthSrc{MAC: src}, flow.SetEthDst{MAC: dst}, flow.Output{Port: portOut}},
	} {
		d.mu.Lock()
		raw, err := d.compileActions(acts)
		var back []flow.Action
		if err == nil {
			back = d.decodeActions(raw)
		}
		d.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if len(raw) != len(acts)-1 {
			t.Errorf("%v: %d slots, want %d (the pair in one)", acts, len(raw), len(acts)-1)
		}
		if fmt.Sprint(back) != fmt.Sprint(acts) {
			t.Errorf("decoded %v, want %v", back, acts)
		}
		if err := d.Flush(); err != nil {
			t.Fatal(err)
		}
		d.put(inPortFlow(acts...))
		r := d.run(pkt, "lo")
		if r.verdict != tcActRedirect {
			t.Fatalf("%v: verdict %d, drops %v", acts, r.verdict, d.drops())
		}
		e := decode(t, r.out).Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		if !bytes.Equal(e.SrcMAC, src) || !bytes.Equal(e.DstMAC, dst) {
			t.Errorf("%v: eth %v > %v, want %v > %v", acts, e.SrcMAC, e.DstMAC, src, dst)
		}
		checksumsOK(t, r.out)
	}
}
