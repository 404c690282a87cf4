package pktgen

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Attack patterns: the 5-tuples a hostile pod sends to make a caching
// switch work (the lab's isolation scenario).
//
//   - random: never-repeating random 5-tuples (source and destination
//     anywhere in IPv4, random ports): every packet a new flow;
//   - tse: tuple-space explosion (Csikor et al., CoNEXT 2019) against an
//     allow-list: packet i takes the allowed tuple (SrcIP, DstIP, source
//     port 40000, DstPort), flips one bit — bit i mod 96 of destination
//     address, source address, destination port, source port in turn — and
//     randomises the bits after it. Each bit position needs its own
//     megaflow mask in a classifier that proves misses by the exact
//     prefix; the random tail makes each packet a new exact-match key.
const (
	PatternFlows  = "flows" // FlowSpace: one packet per (src port, dst port) flow
	PatternRandom = "random"
	PatternTSE    = "tse"
	// PatternScan is a port scan: the pod's own address and source port
	// to the target address, destination ports 1-65535 in turn.
	PatternScan = "scan"
)

// tuple is one packet's addresses and ports.
type tuple struct {
	src, dst     uint32
	sport, dport uint16
}

// splitmix64 is a bijection on uint64: distinct i give distinct outputs,
// so random tuples never repeat within 2^64 packets.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// attackTuple returns packet i's tuple under pattern, around base.
func attackTuple(pattern string, base tuple, i uint64) tuple {
	r := splitmix64(i)
	switch pattern {
	case PatternRandom:
		r2 := splitmix64(r)
		return tuple{src: uint32(r >> 32), dst: uint32(r), sport: uint16(r2 >> 16), dport: uint16(r2)}
	case PatternTSE:
		t := base
		k := int(i % 96)
		switch {
		case k < 32:
			t.dst = flipTail(t.dst, 32, k, r)
		case k < 64:
			t.src = flipTail(t.src, 32, k-32, r)
		case k < 80:
			t.dport = uint16(flipTail(uint32(t.dport), 16, k-64, r))
		default:
			t.sport = uint16(flipTail(uint32(t.sport), 16, k-80, r))
		}
		return t
	case PatternScan:
		t := base
		t.dport = uint16(i%65535 + 1)
		return t
	}
	return base
}

// flipTail flips bit k (0 = most significant) of a width-bit value and
// replaces the bits after it with random ones.
func flipTail(v uint32, width, k int, r uint64) uint32 {
	bit := uint32(1) << (width - 1 - k)
	tail := bit - 1
	return (v^bit)&^tail | uint32(r)&tail
}

// BuildTuple writes a frame with its own addresses and ports (checksums
// computed in full) into dst and returns it.
func (t *Template) BuildTuple(dst []byte, flow uint32, tu tuple) []byte {
	f := dst[:len(t.buf)]
	copy(f, t.buf)
	ip := f[ethLen:]
	binary.BigEndian.PutUint16(ip[4:6], uint16(flow))
	binary.BigEndian.PutUint32(ip[12:16], tu.src)
	binary.BigEndian.PutUint32(ip[16:20], tu.dst)
	binary.BigEndian.PutUint16(ip[10:12], 0)
	binary.BigEndian.PutUint16(ip[10:12], ^fold(sum16(ip[:ipv4Len])))
	udp := ip[ipv4Len:]
	binary.BigEndian.PutUint16(udp[0:2], tu.sport)
	binary.BigEndian.PutUint16(udp[2:4], tu.dport)
	binary.BigEndian.PutUint32(udp[8:12], flow)
	binary.BigEndian.PutUint16(udp[6:8], 0)
	l := len(udp)
	s := sum16(ip[12:20]) + 17 + uint32(l) + sum16(udp)
	c := ^fold(s)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(udp[6:8], c)
	return f
}

// AttackConfig is a timed run of an attack pattern.
type AttackConfig struct {
	SendConfig
	Pattern  string
	Duration time.Duration
}

// Attack sends c.Pattern's tuples at c.Rate until c.Duration has passed.
func (s *Sender) Attack(c AttackConfig, p *Pacer) (SendReport, error) {
	if c.Pattern != PatternRandom && c.Pattern != PatternTSE && c.Pattern != PatternScan {
		return SendReport{}, fmt.Errorf("pattern %q: want %s, %s or %s", c.Pattern, PatternRandom, PatternTSE, PatternScan)
	}
	src, dst := c.SrcIP.To4(), c.DstIP.To4()
	base := tuple{src: binary.BigEndian.Uint32(src), dst: binary.BigEndian.Uint32(dst), sport: 40000, dport: c.Space.DstPortBase}
	i := uint64(0)
	build := func(b []byte, tmpl *Template) {
		tmpl.BuildTuple(b, uint32(i), attackTuple(c.Pattern, base, i))
		i++
	}
	return s.send(c.SendConfig, p, c.Duration, build)
}
