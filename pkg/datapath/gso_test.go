package datapath

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// TestSegment cuts TCP and UDP super-packets over IPv4 and IPv6 (and
// behind a VLAN tag) and checks what the segments carry with gopacket:
// the payload in order, sequence numbers, flags on the right segment,
// lengths and checksums.
func TestSegment(t *testing.T) {
	data := make([]byte, 10000)
	for i := range data {
		data[i] = byte(i * 13)
	}
	for _, tc := range []struct {
		name string
		v6   bool
		udp  bool
		vlan bool
	}{{"tcp4", false, false, false}, {"tcp6", true, false, false}, {"udp4", false, true, false}, {"udp6", true, true, false},
		{"tcp4-vlan", false, false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var ls []gopacket.SerializableLayer
			l3 := layers.EthernetTypeIPv4
			if tc.v6 {
				l3 = layers.EthernetTypeIPv6
			}
			if tc.vlan {
				ls = append(ls, eth(layers.EthernetTypeDot1Q), &layers.Dot1Q{VLANIdentifier: 5, Type: l3})
			} else {
				ls = append(ls, eth(l3))
			}
			proto := layers.IPProtocolTCP
			if tc.udp {
				proto = layers.IPProtocolUDP
			}
			if tc.v6 {
				ls = append(ls, ip6(proto, "fd00::1", "fd00::2"))
			} else {
				ip := ip4(proto, "10.0.0.1", "10.0.0.2")
				ip.Id = 100
				ls = append(ls, ip)
			}
			if tc.udp {
				ls = append(ls, &layers.UDP{SrcPort: 40000, DstPort: 9})
			} else {
				ls = append(ls, &layers.TCP{SrcPort: 40000, DstPort: 9, Seq: 1000, ACK: true, PSH: true, FIN: true, CWR: true, Window: 100,
					Options: []layers.TCPOption{{OptionType: layers.TCPOptionKindNop}, {OptionType: layers.TCPOptionKindNop},
						{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: make([]byte, 8)}}})
			}
			super := serialize(t, append(ls, gopacket.Payload(data))...)
			segs, err := Segment(super, 1448)
			if err != nil {
				t.Fatal(err)
			}
			if want := (len(data) + 1447) / 1448; len(segs) != want {
				t.Fatalf("%d segments, want %d", len(segs), want)
			}
			var got []byte
			for i, s := range segs {
				checksumsOK(t, s)
				p := decode(t, s)
				if tcp, ok := p.Layer(layers.LayerTypeTCP).(*layers.TCP); ok {
					last := i == len(segs)-1
					if tcp.Seq != 1000+uint32(len(got)) || tcp.FIN != last || tcp.PSH != last || tcp.CWR != (i == 0) || !tcp.ACK {
						t.Fatalf("segment %d: seq %d fin %v psh %v cwr %v", i, tcp.Seq, tcp.FIN, tcp.PSH, tcp.CWR)
					}
				}
				if ip, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok && ip.Id != 100+uint16(i) {
					t.Fatalf("segment %d: IP id %d", i, ip.Id)
				}
				if len(s) > 14+4+40+32+1448 {
					t.Fatalf("segment %d is %d bytes", i, len(s))
				}
				got = append(got, p.ApplicationLayer().Payload()...)
			}
			if !bytes.Equal(got, data) {
				t.Fatal("the segments' payloads are not the super-packet's")
			}
		})
	}
	if _, err := Segment(udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, "x")[:20], 100); err == nil {
		t.Fatal("a cut-off packet was segmented")
	}
}

// TestSum16Wide: the eight-bytes-a-step sum folds to what the plain
// word-by-word one's-complement sum gives, for every length and content.
func TestSum16Wide(t *testing.T) {
	plain := func(b []byte) uint16 {
		var s uint32
		for ; len(b) >= 2; b = b[2:] {
			s += uint32(b[0])<<8 | uint32(b[1])
		}
		if len(b) == 1 {
			s += uint32(b[0]) << 8
		}
		return fold(s)
	}
	b := make([]byte, 70000)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	for n := 0; n < 80; n++ {
		if got, want := fold(sum16(b[:n])), plain(b[:n]); got != want {
			t.Fatalf("%d bytes: %#x, want %#x", n, got, want)
		}
	}
	for i := range b {
		b[i] = 0xff
	}
	for _, n := range []int{8, 9, 1500, 65536, 70000} {
		if got, want := fold(sum16(b[:n])), plain(b[:n]); got != want {
			t.Fatalf("all ones, %d bytes: %#x, want %#x", n, got, want)
		}
	}
}

// BenchmarkSegment64K cuts a 64 KiB TCP GSO packet into 8948-byte
// segments (MTU 9000), reusing one arena as the Onloader does.
func BenchmarkSegment64K(b *testing.B) {
	ip := ip4(layers.IPProtocolTCP, "10.0.0.1", "10.0.0.2")
	super := serialize(b, eth(layers.EthernetTypeIPv4), ip, &layers.TCP{SrcPort: 1, DstPort: 2, Seq: 1, ACK: true},
		gopacket.Payload(make([]byte, 65000)))
	var arena []byte
	var segs [][]byte
	b.SetBytes(int64(len(super)))
	for b.Loop() {
		var err error
		if arena, segs, err = SegmentAppend(arena[:0], segs[:0], super, 8948); err != nil {
			b.Fatal(err)
		}
	}
}

// TestVnetGSOHeader: the virtio_net_hdr of a GSO packet whose checksum
// field holds the pseudo-header sum (as a sender with TSO leaves it), and
// no header for one with a full checksum, a VLAN tag or trailing bytes.
func TestVnetGSOHeader(t *testing.T) {
	payload := gopacket.Payload(make([]byte, 5000))
	partial := func(pkt []byte) []byte {
		g, err := parseGSO(pkt)
		if err != nil {
			t.Fatal(err)
		}
		binary.BigEndian.PutUint16(pkt[g.l4+g.csumField():], fold(g.pseudoSum(pkt, g.end-g.l4)))
		return pkt
	}
	tcp := func(cwr bool) *layers.TCP {
		return &layers.TCP{SrcPort: 1, DstPort: 2, ACK: true, CWR: cwr, Window: 100}
	}
	for _, tc := range []struct {
		name          string
		pkt           []byte
		ok            bool
		typ           byte
		start, offset uint16
		hdrLen        uint16
	}{
		{"tcp4", partial(serialize(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolTCP, "10.0.0.1", "10.0.0.2"), tcp(false), payload)), true, vnetGSOTCPv4, 34, 16, 54},
		{"tcp4-cwr", partial(serialize(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolTCP, "10.0.0.1", "10.0.0.2"), tcp(true), payload)), true, vnetGSOTCPv4 | vnetGSOECN, 34, 16, 54},
		{"tcp6", partial(serialize(t, eth(layers.EthernetTypeIPv6), ip6(layers.IPProtocolTCP, "fd00::1", "fd00::2"), tcp(false), payload)), true, vnetGSOTCPv6, 54, 16, 74},
		{"udp4", partial(serialize(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolUDP, "10.0.0.1", "10.0.0.2"), &layers.UDP{SrcPort: 1, DstPort: 2}, payload)), true, vnetGSOUDPL4, 34, 6, 42},
		{"tcp4-full-checksum", serialize(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolTCP, "10.0.0.1", "10.0.0.2"), tcp(false), payload), false, 0, 0, 0, 0},
		{"tcp4-vlan", partial(serialize(t, eth(layers.EthernetTypeDot1Q), &layers.Dot1Q{VLANIdentifier: 5, Type: layers.EthernetTypeIPv4},
			ip4(layers.IPProtocolTCP, "10.0.0.1", "10.0.0.2"), tcp(false), payload)), false, 0, 0, 0, 0},
		{"tcp4-trailer", append(partial(serialize(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolTCP, "10.0.0.1", "10.0.0.2"), tcp(false), payload)), 0, 0), false, 0, 0, 0, 0},
	} {
		h, ok := vnetGSOHeader(tc.pkt, 1448)
		if ok != tc.ok {
			t.Errorf("%s: ok %v, want %v", tc.name, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		ne := binary.NativeEndian
		if h[0] != vnetFlagNeedsCsum || h[1] != tc.typ || ne.Uint16(h[2:]) != tc.hdrLen || ne.Uint16(h[4:]) != 1448 ||
			ne.Uint16(h[6:]) != tc.start || ne.Uint16(h[8:]) != tc.offset {
			t.Errorf("%s: header % x, want flags 1 type %#x hdr_len %d gso_size 1448 csum %d+%d", tc.name, h, tc.typ, tc.hdrLen, tc.start, tc.offset)
		}
	}
}
