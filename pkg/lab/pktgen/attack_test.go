package pktgen

import (
	"encoding/binary"
	"math/bits"
	"net"
	"testing"
)

// Random tuples do not repeat; TSE tuple i differs from the allowed tuple
// first in bit i mod 96 of one field, and only in that field.
func TestAttackTuples(t *testing.T) {
	base := tuple{src: 0x0a630003, dst: 0x0a60000a, sport: 40000, dport: 53}
	seen := map[tuple]bool{}
	for i := range uint64(20000) {
		tu := attackTuple(PatternRandom, base, i)
		if seen[tu] {
			t.Fatalf("random tuple %d repeats: %+v", i, tu)
		}
		seen[tu] = true
	}
	for i := range uint64(96 * 3) {
		tu := attackTuple(PatternTSE, base, i)
		k := int(i % 96)
		diffs := []struct {
			x     uint32
			width int
		}{{tu.dst ^ base.dst, 32}, {tu.src ^ base.src, 32}, {uint32(tu.dport ^ base.dport), 16}, {uint32(tu.sport ^ base.sport), 16}}
		field, first := 0, k
		for _, w := range []int{32, 32, 16, 16} {
			if first < w {
				break
			}
			first -= w
			field++
		}
		for f, d := range diffs {
			switch {
			case f != field && d.x != 0:
				t.Fatalf("tse %d: field %d changed too", i, f)
			case f == field && bits.LeadingZeros32(d.x)-(32-d.width) != first:
				t.Fatalf("tse %d: field %d first differs at bit %d, want %d", i, f, bits.LeadingZeros32(d.x)-(32-d.width), first)
			}
		}
	}
}

// BuildTuple writes valid IPv4 and UDP checksums.
func TestBuildTupleChecksums(t *testing.T) {
	tmpl, err := NewTemplate(Header{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2},
		SrcIP: net.IPv4(10, 99, 0, 3), DstIP: net.IPv4(10, 99, 0, 4)}, 64)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	for i := range uint64(1000) {
		tu := attackTuple(PatternRandom, tuple{}, i)
		f := tmpl.BuildTuple(buf, uint32(i), tu)
		ip := f[ethLen:]
		if fold(sum16(ip[:ipv4Len])) != 0xffff {
			t.Fatalf("frame %d: bad IPv4 checksum", i)
		}
		udp := ip[ipv4Len:]
		if fold(sum16(ip[12:20])+17+uint32(len(udp))+sum16(udp)) != 0xffff {
			t.Fatalf("frame %d: bad UDP checksum", i)
		}
		if binary.BigEndian.Uint32(ip[12:16]) != tu.src || binary.BigEndian.Uint16(udp[2:4]) != tu.dport {
			t.Fatalf("frame %d: tuple not written", i)
		}
	}
}

// A scan keeps the pod's addresses and source port and walks the
// destination ports 1-65535, then again.
func TestScanTuples(t *testing.T) {
	base := tuple{src: 0x0a630003, dst: 0x0a630004, sport: 40000, dport: 53}
	for _, i := range []uint64{0, 1, 52, 65534, 65535, 70000} {
		tu := attackTuple(PatternScan, base, i)
		if want := uint16(i%65535 + 1); tu.dport != want || tu.src != base.src || tu.dst != base.dst || tu.sport != base.sport {
			t.Errorf("scan %d: %+v, want dport %d and the rest of %+v", i, tu, want, base)
		}
	}
}
