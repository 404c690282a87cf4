package datapath

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/nagare-net/nagare/pkg/flow"
)

// The parser is tested through probe_parse (bpf/probe_parse.c), which runs
// parse_packet on a packet and stores the key it built, so every parse
// path can be checked with BPF_PROG_RUN.

type parseResult struct {
	ret  int32
	l3   uint8
	l3o  uint16
	l4o  uint16
	vlan bool
	key  flow.Key
}

var (
	probeOnce sync.Once
	probeObjs probeObjects
	probeErr  error
)

func parse(tb testing.TB, pkt []byte) parseResult {
	tb.Helper()
	r, err := tryParse(tb, pkt)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// tryParse returns an error when BPF_PROG_RUN refuses the frame itself (it
// rejects IP frames shorter than an IP header, for one).
func tryParse(tb testing.TB, pkt []byte) (parseResult, error) {
	tb.Helper()
	requireRoot(tb)
	probeOnce.Do(func() { probeErr = loadProbeObjects(&probeObjs, nil) })
	if probeErr != nil {
		tb.Fatal(probeErr)
	}
	if _, err := probeObjs.ProbeParse.Run(&ebpf.RunOptions{Data: pkt}); err != nil {
		return parseResult{}, err
	}
	// Layout from the generated twin: the parse state also carries
	// run_actions' verdict (actions.h), which the parser leaves alone.
	raw := make([]byte, binary.Size(probeProbeResult{}))
	if err := probeObjs.ProbeOut.Lookup(uint32(0), &raw); err != nil {
		tb.Fatal(err)
	}
	r := parseResult{
		ret:  int32(binary.NativeEndian.Uint32(raw[0:])),
		l3o:  binary.NativeEndian.Uint16(raw[8:]),
		l4o:  binary.NativeEndian.Uint16(raw[10:]),
		l3:   raw[12],
		vlan: raw[13] != 0,
	}
	if err := r.key.UnmarshalBinary(raw[unsafe.Offsetof(probeProbeResult{}.Key):]); err != nil {
		tb.Fatal(err)
	}
	return r, nil
}

func ip4b(s string) [16]byte {
	var b [16]byte
	a := netip.MustParseAddr(s).As4()
	copy(b[:], a[:])
	return b
}

func ip6b(s string) [16]byte { return netip.MustParseAddr(s).As16() }

func TestParse(t *testing.T) {
	requireRoot(t)
	udp := &layers.UDP{SrcPort: 1000, DstPort: 2000}
	tcp := &layers.TCP{SrcPort: 3000, DstPort: 80, SYN: true, ECE: true, Window: 100}
	v4 := func(p layers.IPProtocol) *layers.IPv4 {
		ip := ip4(p, "10.0.0.1", "10.0.0.2")
		ip.TOS = 0xb9 // DSCP 46, ECN 1
		ip.TTL = 17
		return ip
	}
	v6 := func(p layers.IPProtocol) *layers.IPv6 {
		ip := ip6(p, "fd00::1", "fd00::2")
		ip.TrafficClass = 0xb9
		ip.FlowLabel = 0x12345
		ip.HopLimit = 9
		return ip
	}
	base4 := flow.Key{EthSrc: macA, EthDst: macB, EthType: 0x0800, NwTOS: 0xb9, NwTTL: 17, IPSrc: ip4b("10.0.0.1"), IPDst: ip4b("10.0.0.2")}
	base6 := flow.Key{EthSrc: macA, EthDst: macB, EthType: 0x86dd, NwTOS: 0xb9, NwTTL: 9, IPv6Label: 0x12345, IPSrc: ip6b("fd00::1"), IPDst: ip6b("fd00::2")}
	with := func(k flow.Key, f func(*flow.Key)) flow.Key { f(&k); return k }

	frag := func(flags layers.IPv4Flag, off uint16) *layers.IPv4 {
		ip := v4(layers.IPProtocolUDP)
		ip.Flags, ip.FragOffset = flags, off
		return ip
	}
	hbh := &layers.IPv6HopByHop{}
	hbh.NextHeader = layers.IPProtocolIPv6Destination
	hbh.Options = []*layers.IPv6HopByHopOption{{OptionType: 1, OptionLength: 4, OptionData: []byte{0, 0, 0, 0}}}
	dst := &layers.IPv6Destination{}
	dst.NextHeader = layers.IPProtocolUDP
	dst.Options = []*layers.IPv6DestinationOption{{OptionType: 1, OptionLength: 4, OptionData: []byte{0, 0, 0, 0}}}

	tests := []struct {
		name string
		pkt  []byte
		ret  DropReason
		key  flow.Key
		l4   bool
	}{
		{"ipv4-udp", serialize(t, eth(layers.EthernetTypeIPv4), v4(layers.IPProtocolUDP), udp, gopacket.Payload("x")), 0,
			with(base4, func(k *flow.Key) { k.NwProto, k.TpSrc, k.TpDst = 17, 1000, 2000 }), true},
		{"ipv4-tcp-flags", serialize(t, eth(layers.EthernetTypeIPv4), v4(layers.IPProtocolTCP), tcp), 0,
			with(base4, func(k *flow.Key) { k.NwProto, k.TpSrc, k.TpDst, k.TCPFlags = 6, 3000, 80, 0x42 }), true},
		{"ipv4-icmp", serialize(t, eth(layers.EthernetTypeIPv4), v4(layers.IPProtocolICMPv4),
			&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(8, 0), Id: 1, Seq: 1}), 0,
			with(base4, func(k *flow.Key) { k.NwProto, k.TpSrc, k.TpDst = 1, 8, 0 }), true},
		{"ipv4-sctp", serialize(t, eth(layers.EthernetTypeIPv4), v4(layers.IPProtocolSCTP),
			&layers.SCTP{SrcPort: 5000, DstPort: 6000}), 0,
			with(base4, func(k *flow.Key) { k.NwProto, k.TpSrc, k.TpDst = 132, 5000, 6000 }), true},
		{"ipv4-options", serialize(t, eth(layers.EthernetTypeIPv4), func() *layers.IPv4 {
			ip := v4(layers.IPProtocolUDP)
			ip.Options = []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}
			return ip
		}(), udp), 0, with(base4, func(k *flow.Key) { k.NwProto, k.TpSrc, k.TpDst = 17, 1000, 2000 }), true},
		{"ipv4-first-fragment", serialize(t, eth(layers.EthernetTypeIPv4), frag(layers.IPv4MoreFragments, 0), udp), 0,
			with(base4, func(k *flow.Key) { k.NwProto, k.TpSrc, k.TpDst, k.NwFrag = 17, 1000, 2000, flow.FragAny }), true},
		{"ipv4-later-fragment", serialize(t, eth(layers.EthernetTypeIPv4), frag(0, 100), gopacket.Payload("12345678")), 0,
			with(base4, func(k *flow.Key) { k.NwProto, k.NwFrag = 17, flow.FragAny|flow.FragLater }), false},
		// BPF_PROG_RUN refuses IPv4/IPv6 frames shorter than the IP header, so
		// the truncated-header cases travel behind a VLAN tag.
		{"ipv4-short-header", rawEth(0x8100, "\x00\x64\x08\x00\x45\x00\x00\x20\x00\x00"), DropShortIP, flow.Key{}, false},
		{"ipv4-ihl-too-small", patch(serialize(t, eth(layers.EthernetTypeIPv4), v4(layers.IPProtocolUDP), udp), 14, 0x44), DropBadIPHeader, flow.Key{}, false},
		{"ipv4-wrong-version", patch(serialize(t, eth(layers.EthernetTypeIPv4), v4(layers.IPProtocolUDP), udp), 14, 0x65), DropBadIPHeader, flow.Key{}, false},
		{"ipv4-total-length-short", patch(patch(serialize(t, eth(layers.EthernetTypeIPv4), v4(layers.IPProtocolUDP), udp), 16, 0), 17, 10), DropBadIPHeader, flow.Key{}, false},
		{"ipv4-ihl-past-end", patch(patch(trim(serialize(t, eth(layers.EthernetTypeIPv4), v4(layers.IPProtocolTCP)), 34), 14, 0x4f), 17, 100), DropShortIP, flow.Key{}, false},
		{"ipv4-short-udp", trim(serialize(t, eth(layers.EthernetTypeIPv4), v4(layers.IPProtocolUDP), gopacket.Payload("abc")), 37), DropShortL4, flow.Key{}, false},
		{"ipv4-short-tcp", trim(serialize(t, eth(layers.EthernetTypeIPv4), v4(layers.IPProtocolTCP), gopacket.Payload("0123456789abcdef")), 50), DropShortL4, flow.Key{}, false},
		{"ipv4-unknown-proto", serialize(t, eth(layers.EthernetTypeIPv4), v4(layers.IPProtocol(99)), gopacket.Payload("abc")), 0,
			with(base4, func(k *flow.Key) { k.NwProto = 99 }), false},
		{"vlan-in-data", serialize(t, eth(layers.EthernetTypeDot1Q), &layers.Dot1Q{Priority: 5, VLANIdentifier: 100, Type: layers.EthernetTypeIPv4},
			v4(layers.IPProtocolUDP), udp), 0,
			with(base4, func(k *flow.Key) { k.NwProto, k.TpSrc, k.TpDst, k.VlanTCI = 17, 1000, 2000, 5<<13|flow.VLANCFI|100 }), true},
		{"vlan-short", rawEth(0x8100, "\x00"), DropShortVLAN, flow.Key{}, false},
		{"arp-request", serialize(t, eth(layers.EthernetTypeARP), &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
			HwAddressSize: 6, ProtAddressSize: 4, Operation: 1, SourceHwAddress: macA[:], SourceProtAddress: []byte{10, 0, 0, 1},
			DstHwAddress: make([]byte, 6), DstProtAddress: []byte{10, 0, 0, 2}}), 0,
			flow.Key{EthSrc: macA, EthDst: macB, EthType: 0x0806, NwProto: 1, IPSrc: ip4b("10.0.0.1"), IPDst: ip4b("10.0.0.2"), ArpSHA: macA}, false},
		{"arp-short", rawEth(0x0806, "\x00\x01\x08\x00\x06\x04"), DropShortARP, flow.Key{}, false},
		{"ipv6-udp", serialize(t, eth(layers.EthernetTypeIPv6), v6(layers.IPProtocolUDP), udp), 0,
			with(base6, func(k *flow.Key) { k.NwProto, k.TpSrc, k.TpDst = 17, 1000, 2000 }), true},
		{"ipv6-tcp", serialize(t, eth(layers.EthernetTypeIPv6), v6(layers.IPProtocolTCP), tcp), 0,
			with(base6, func(k *flow.Key) { k.NwProto, k.TpSrc, k.TpDst, k.TCPFlags = 6, 3000, 80, 0x42 }), true},
		{"ipv6-icmpv6", serialize(t, eth(layers.EthernetTypeIPv6), v6(layers.IPProtocolICMPv6),
			&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(135, 0)}, gopacket.Payload("\x00\x00\x00\x00")), 0,
			with(base6, func(k *flow.Key) { k.NwProto, k.TpSrc, k.TpDst = 58, 135, 0 }), true},
		{"ipv6-nd-ns-sll", ndPacket(t, v6, 135, "fd00::99", "\x01\x01\x02\x00\x00\x00\x00\x0a"), 0,
			with(base6, func(k *flow.Key) {
				k.NwProto, k.TpSrc, k.TpDst, k.NDTarget, k.ArpSHA = 58, 135, 0, ip6b("fd00::99"), macA
			}), true},
		{"ipv6-nd-na-tll-after-other-option", ndPacket(t, v6, 136, "fd00::98",
			"\x05\x01\x00\x00\x00\x00\x05\xdc\x02\x01\x02\x00\x00\x00\x00\x0b"), 0,
			with(base6, func(k *flow.Key) {
				k.NwProto, k.TpSrc, k.TpDst, k.NDTarget, k.ArpTHA = 58, 136, 0, ip6b("fd00::98"), macB
			}), true},
		{"ipv6-nd-ns-without-option", ndPacket(t, v6, 135, "fd00::97", ""), 0,
			with(base6, func(k *flow.Key) { k.NwProto, k.TpSrc, k.TpDst, k.NDTarget = 58, 135, 0, ip6b("fd00::97") }), true},
		{"ipv6-nd-option-length-0", ndPacket(t, v6, 135, "fd00::96", "\x01\x00\x02\x00\x00\x00\x00\x0a"), 0,
			with(base6, func(k *flow.Key) { k.NwProto, k.TpSrc, k.TpDst = 58, 135, 0 }), true},
		{"ipv6-nd-sll-twice", ndPacket(t, v6, 135, "fd00::95",
			"\x01\x01\x02\x00\x00\x00\x00\x0a\x01\x01\x02\x00\x00\x00\x00\x0b"), 0,
			with(base6, func(k *flow.Key) { k.NwProto, k.TpSrc, k.TpDst = 58, 135, 0 }), true},
		{"ipv6-ext-headers", serialize(t, eth(layers.EthernetTypeIPv6), v6(layers.IPProtocolIPv6HopByHop), hbh, dst, udp), 0,
			with(base6, func(k *flow.Key) { k.NwProto, k.TpSrc, k.TpDst = 17, 1000, 2000 }), true},
		{"ipv6-first-fragment", serialize(t, eth(layers.EthernetTypeIPv6), v6(layers.IPProtocolIPv6Fragment),
			&layers.IPv6Fragment{NextHeader: layers.IPProtocolUDP, MoreFragments: true, Identification: 7}, udp), 0,
			with(base6, func(k *flow.Key) { k.NwProto, k.TpSrc, k.TpDst, k.NwFrag = 17, 1000, 2000, flow.FragAny }), true},
		{"ipv6-later-fragment", serialize(t, eth(layers.EthernetTypeIPv6), v6(layers.IPProtocolIPv6Fragment),
			&layers.IPv6Fragment{NextHeader: layers.IPProtocolUDP, FragmentOffset: 10, Identification: 7}, gopacket.Payload("12345678")), 0,
			with(base6, func(k *flow.Key) { k.NwProto, k.NwFrag = 17, flow.FragAny|flow.FragLater }), false},
		{"ipv6-ext-chain-too-long", ext6Chain(t, 5), DropIPv6ExtChain, flow.Key{}, false},
		{"ipv6-ext-chain-max", ext6Chain(t, 4), 0,
			with(base6, func(k *flow.Key) {
				k.NwTOS, k.NwTTL, k.IPv6Label, k.NwProto, k.TpSrc, k.TpDst = 0, 64, 0, 17, 1000, 2000
			}), true},
		{"ipv6-short", rawEth(0x8100, "\x00\x64\x86\xdd\x60\x00\x00\x00\x00\x08\x11\x40"), DropShortIP, flow.Key{}, false},
		{"ipv6-short-ext", serialize(t, eth(layers.EthernetTypeIPv6), v6(layers.IPProtocolIPv6HopByHop)), DropShortIP, flow.Key{}, false},
		{"mpls", mplsFrame(serialize(t, eth(layers.EthernetTypeIPv4), v4(layers.IPProtocolUDP), udp), lse(100, 5, 1, 7)), 0,
			flow.Key{EthSrc: macA, EthDst: macB, EthType: 0x8847, IPSrc: [16]byte{0x00, 0x06, 0x4b, 0x07}}, false},
		{"mpls-short", rawEth(0x8847, "\x00\x06"), DropShortMPLS, flow.Key{}, false},
		{"unknown-ethertype", serialize(t, eth(layers.EthernetType(0x88cc)), gopacket.Payload("lldp.......")), 0,
			flow.Key{EthSrc: macA, EthDst: macB, EthType: 0x88cc}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := parse(t, tc.pkt)
			if DropReason(-r.ret) != tc.ret {
				t.Fatalf("parse returned %d (%v), want %v", r.ret, DropReason(-r.ret), tc.ret)
			}
			if tc.ret != 0 {
				if _, err := flow.ParsePacket(tc.pkt); err == nil {
					t.Errorf("flow.ParsePacket accepts what the fast path drops (%v)", tc.ret)
				}
				return
			}
			if r.key != tc.key {
				t.Errorf("key\n got %s\nwant %s", flow.Format(r.key, flow.ExactMask()), flow.Format(tc.key, flow.ExactMask()))
			}
			sameAsGo(t, tc.pkt, r)
			if tc.l4 != (r.l4o != 0) {
				t.Errorf("l4 offset %d, want L4 header %v", r.l4o, tc.l4)
			}
		})
	}
}

// rawEth builds a frame without the padding to 60 bytes that gopacket
// adds, so truncated headers really end where the test says.
func rawEth(typ uint16, payload string) []byte {
	b := append(append([]byte{}, macB[:]...), macA[:]...)
	b = binary.BigEndian.AppendUint16(b, typ)
	return append(b, payload...)
}

// trim cuts a frame to n bytes (removing gopacket's Ethernet padding, or
// truncating a header).
func trim(b []byte, n int) []byte { return b[:n] }

// patch returns b with b[i] = v.
func patch(b []byte, i int, v byte) []byte {
	b = append([]byte(nil), b...)
	b[i] = v
	return b
}

// ext6Chain builds an IPv6/UDP packet behind n destination-options headers.
func ext6Chain(tb testing.TB, n int) []byte {
	ls := []gopacket.SerializableLayer{eth(layers.EthernetTypeIPv6), ip6(layers.IPProtocolIPv6Destination, "fd00::1", "fd00::2")}
	for i := 0; i < n; i++ {
		d := &layers.IPv6Destination{}
		d.NextHeader = layers.IPProtocolIPv6Destination
		if i == n-1 {
			d.NextHeader = layers.IPProtocolUDP
		}
		d.Options = []*layers.IPv6DestinationOption{{OptionType: 1, OptionLength: 4, OptionData: []byte{0, 0, 0, 0}}}
		ls = append(ls, d)
	}
	ls = append(ls, &layers.UDP{SrcPort: 1000, DstPort: 2000})
	return serialize(tb, ls...)
}

// FuzzParse feeds arbitrary frames to the parser: it must never fail to
// return, must return 0 or a known drop reason, and must copy the Ethernet
// addresses of every frame it accepts.
func FuzzParse(f *testing.F) {
	f.Add(udpPkt(f, "10.0.0.1", "10.0.0.2", 1, 2, "x"))
	f.Add(tcpPkt(f, "fd00::1", "fd00::2", 1, 2, true))
	f.Add(ext6Chain(f, 3))
	f.Fuzz(func(t *testing.T, pkt []byte) {
		if len(pkt) < 14 || len(pkt) > 3000 {
			t.Skip() // BPF_PROG_RUN's limits for tc programs
		}
		r, err := tryParse(t, pkt)
		if errors.Is(err, unix.EINVAL) {
			t.Skip("BPF_PROG_RUN refuses this frame")
		}
		if err != nil {
			t.Fatal(err)
		}
		if r.ret > 0 || -r.ret >= 32 {
			t.Fatalf("parse returned %d", r.ret)
		}
		if r.ret == 0 && (r.key.EthDst != [6]byte(pkt[0:6]) || r.key.EthSrc != [6]byte(pkt[6:12])) {
			t.Fatalf("ethernet addresses not copied: %+v", r.key)
		}
		if r.ret == 0 && r.l4o != 0 && int(r.l4o) >= len(pkt) {
			t.Fatalf("L4 offset %d past the end of %d bytes", r.l4o, len(pkt))
		}
		if r.ret == 0 {
			sameAsGo(t, pkt, r)
		} else if _, err := flow.ParsePacket(pkt); err == nil {
			t.Fatalf("flow.ParsePacket accepts what the fast path drops (%v)", DropReason(-r.ret))
		}
	})
}

// sameAsGo checks that pkg/flow's Go parser (used for packet-out and
// trace) builds the key the fast path built.
func sameAsGo(t *testing.T, pkt []byte, r parseResult) {
	t.Helper()
	k, err := flow.ParsePacket(pkt)
	if err != nil {
		t.Fatalf("flow.ParsePacket: %v (the fast path accepted the packet)", err)
	}
	if k != r.key {
		t.Fatalf("Go parser disagrees with the fast path:\n  go %s\nbpf %s", flow.Format(k, flow.ExactMask()), flow.Format(r.key, flow.ExactMask()))
	}
}

// ndPacket is an IPv6 neighbour solicitation (135) or advertisement (136)
// for target with the given raw options.
func ndPacket(t *testing.T, v6 func(layers.IPProtocol) *layers.IPv6, typ uint8, target, opts string) []byte {
	t.Helper()
	tg := ip6b(target)
	body := append(make([]byte, 4), tg[:]...)
	return serialize(t, eth(layers.EthernetTypeIPv6), v6(layers.IPProtocolICMPv6),
		&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}, gopacket.Payload(append(body, opts...)))
}
