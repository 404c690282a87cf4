package datapath

import (
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/nagare-net/nagare/pkg/flow"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sctpPacket is an SCTP packet (common header + one DATA chunk of n
// payload bytes) with a correct CRC32c, stored little-endian as Linux does.
func sctpPacket(sport, dport uint16, n int) []byte {
	b := make([]byte, 12+16+n)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint32(b[4:], 0xdeadbeef) // verification tag
	b[12] = 0                                     // DATA
	b[13] = 3                                     // B+E
	binary.BigEndian.PutUint16(b[14:], uint16(16+n))
	for i := 28; i < len(b); i++ {
		b[i] = byte(i * 7)
	}
	binary.LittleEndian.PutUint32(b[8:], crc32.Checksum(b, castagnoli))
	return b
}

// sctpCRCOK checks the CRC32c of the SCTP packet in b.
func sctpCRCOK(b []byte) bool {
	c := append([]byte(nil), b...)
	want := binary.LittleEndian.Uint32(c[8:])
	clear(c[8:12])
	return crc32.Checksum(c, castagnoli) == want
}

// TestSCTPPortRewrite: set(tp_src)/set(tp_dst) on SCTP rewrite the port and
// keep the CRC32c right (it covers the whole packet, so a stale one makes
// the receiver drop it), for IPv4 and IPv6, a frame padded past the IP
// length, and a long packet.
func TestSCTPPortRewrite(t *testing.T) {
	d := newTestDP(t)
	for _, tc := range []struct {
		name string
		v6   bool
		n    int
		pad  int
	}{
		{"ipv4", false, 100, 0}, {"ipv6", true, 100, 0}, {"ipv4-padded-frame", false, 0, 14},
		{"ipv4-long", false, 1400, 0}, {"ipv6-long", true, 1400, 0}, {"ipv4-odd", false, 37, 0},
	} {
		for _, act := range []flow.Action{flow.SetTpSrc{Port: 4242}, flow.SetTpDst{Port: 8080}} {
			t.Run(tc.name+"-"+act.String(), func(t *testing.T) {
				sc := sctpPacket(1001, 3333, tc.n)
				var pkt []byte
				if tc.v6 {
					pkt = serialize(t, eth(layers.EthernetTypeIPv6), ip6(layers.IPProtocolSCTP, "fd00::1", "fd00::2"), gopacket.Payload(sc))
				} else {
					pkt = serialize(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolSCTP, "10.0.0.1", "10.0.0.2"), gopacket.Payload(sc))
				}
				pkt = append(pkt, make([]byte, tc.pad)...)
				if err := d.Flush(); err != nil {
					t.Fatal(err)
				}
				d.put(inPortFlow(act, flow.Output{Port: portOut}))
				r := d.run(pkt, "lo")
				if r.verdict != tcActRedirect {
					t.Fatalf("verdict %d, drops %v", r.verdict, d.drops())
				}
				l4 := 14 + 20
				if tc.v6 {
					l4 = 14 + 40
				}
				out := r.out[l4 : len(r.out)-tc.pad]
				sp, dp := binary.BigEndian.Uint16(out), binary.BigEndian.Uint16(out[2:])
				want := [2]uint16{1001, 3333}
				if s, ok := act.(flow.SetTpSrc); ok {
					want[0] = s.Port
				} else {
					want[1] = act.(flow.SetTpDst).Port
				}
				if sp != want[0] || dp != want[1] {
					t.Fatalf("ports %d > %d, want %d > %d", sp, dp, want[0], want[1])
				}
				if !sctpCRCOK(out) {
					t.Fatalf("CRC32c wrong after the rewrite: %08x", binary.LittleEndian.Uint32(out[8:]))
				}
			})
		}
	}
}
