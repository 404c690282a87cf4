package datapath

import (
	"encoding/binary"
	"errors"
)

// ErrNotSegmentable is returned by Segment for a GSO packet it cannot cut
// (not TCP or UDP over IPv4/IPv6 without extension headers, or malformed).
var ErrNotSegmentable = errors.New("datapath: GSO packet cannot be segmented")

// maxSegments bounds what Segment makes of one packet: a 64 KiB TCP
// super-packet at the smallest MSS the kernel uses (88) is 745 segments;
// UDP GSO sends at most 128.
const maxSegments = 1024

// Segment cuts a GSO super-packet (as a pod with TSO or UDP_SEGMENT hands
// it to its veth) into the frames the device would have sent: TCP into
// segments of gsoSize payload bytes (sequence numbers advanced, FIN/PSH on
// the last only, CWR on the first only), UDP into datagrams of gsoSize
// payload bytes each with its own header; IPv4 ids counted up, lengths and
// every checksum computed. The slow path delivers a missed first packet
// larger than BPF_PROG_RUN takes this way, instead of losing it.
func Segment(pkt []byte, gsoSize int) ([][]byte, error) {
	_, segs, err := SegmentAppend(nil, nil, pkt, gsoSize)
	return segs, err
}

// SegmentAppend is Segment writing the segments into arena (grown as
// needed) and appending them to segs, so a caller that cuts many packets
// reuses one buffer: the Onloader, once per batch. Segments stay valid
// when arena grows (they keep the array they were written in).
func SegmentAppend(arena []byte, segs [][]byte, pkt []byte, gsoSize int) ([]byte, [][]byte, error) {
	out, err := segment(&arena, segs, pkt, gsoSize)
	return arena, out, err
}

func segment(arena *[]byte, out [][]byte, pkt []byte, gsoSize int) ([][]byte, error) {
	if gsoSize <= 0 || len(pkt) < 14 {
		return nil, ErrNotSegmentable
	}
	l3 := 14
	typ := binary.BigEndian.Uint16(pkt[12:])
	if typ == 0x8100 || typ == 0x88a8 {
		if len(pkt) < 18 {
			return nil, ErrNotSegmentable
		}
		typ, l3 = binary.BigEndian.Uint16(pkt[16:]), 18
	}
	var proto byte
	var l4, end int
	switch typ {
	case 0x0800:
		if len(pkt) < l3+20 {
			return nil, ErrNotSegmentable
		}
		ip := pkt[l3:]
		ihl, total := int(ip[0]&0xf)*4, int(binary.BigEndian.Uint16(ip[2:]))
		if ihl < 20 || binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 {
			return nil, ErrNotSegmentable
		}
		// A GSO packet's total length may say 0 (over 64 KiB): the frame's length counts.
		end = len(pkt)
		if total >= ihl && l3+total <= len(pkt) && total != 0 {
			end = l3 + total
		}
		proto, l4 = ip[9], l3+ihl
	case 0x86dd:
		if len(pkt) < l3+40 {
			return nil, ErrNotSegmentable
		}
		ip := pkt[l3:]
		end = len(pkt)
		if plen := int(binary.BigEndian.Uint16(ip[4:])); plen != 0 && l3+40+plen <= len(pkt) {
			end = l3 + 40 + plen
		}
		proto, l4 = ip[6], l3+40
	default:
		return nil, ErrNotSegmentable
	}
	var hdr int
	switch proto {
	case 6:
		if len(pkt) < l4+20 {
			return nil, ErrNotSegmentable
		}
		hdr = l4 + int(pkt[l4+12]>>4)*4
	case 17:
		hdr = l4 + 8
	default:
		return nil, ErrNotSegmentable
	}
	if hdr > end {
		return nil, ErrNotSegmentable
	}
	payload := pkt[hdr:end]
	if (len(payload)+gsoSize-1)/gsoSize > maxSegments {
		return nil, ErrNotSegmentable
	}
	for i, off := 0, 0; off < len(payload) || i == 0; i, off = i+1, off+gsoSize {
		n := min(gsoSize, len(payload)-off)
		a := *arena
		if cap(a)-len(a) < hdr+n {
			a = make([]byte, 0, max(2*cap(a), hdr+n, 64<<10))
		}
		seg := a[len(a) : len(a)+hdr+n : len(a)+hdr+n]
		*arena = a[:len(a)+hdr+n]
		copy(seg, pkt[:hdr])
		copy(seg[hdr:], payload[off:off+n])
		last := off+n >= len(payload)
		l4len := len(seg) - l4
		if typ == 0x0800 {
			ip := seg[l3:]
			binary.BigEndian.PutUint16(ip[2:], uint16(len(seg)-l3))
			binary.BigEndian.PutUint16(ip[4:], binary.BigEndian.Uint16(pkt[l3+4:])+uint16(i))
			ip[10], ip[11] = 0, 0
			ihl := int(ip[0]&0xf) * 4
			binary.BigEndian.PutUint16(ip[10:], ^fold(sum16(ip[:ihl])))
		} else {
			binary.BigEndian.PutUint16(seg[l3+4:], uint16(len(seg)-l3-40))
		}
		var field int
		if proto == 6 {
			t := seg[l4:]
			binary.BigEndian.PutUint32(t[4:], binary.BigEndian.Uint32(pkt[l4+4:])+uint32(off))
			flags := pkt[l4+13]
			if !last {
				flags &^= 0x01 | 0x08 // FIN, PSH
			}
			if i > 0 {
				flags &^= 0x80 // CWR
			}
			t[13] = flags
			field = l4 + 16
		} else {
			binary.BigEndian.PutUint16(seg[l4+4:], uint16(l4len))
			field = l4 + 6
		}
		var pseudo uint32
		if typ == 0x0800 {
			pseudo = sum16(seg[l3+12 : l3+20])
		} else {
			pseudo = sum16(seg[l3+8 : l3+40])
		}
		seg[field], seg[field+1] = 0, 0
		c := ^fold(pseudo + uint32(proto) + uint32(l4len) + sum16(seg[l4:]))
		if proto == 17 && c == 0 {
			c = 0xffff
		}
		binary.BigEndian.PutUint16(seg[field:], c)
		out = append(out, seg)
		if last {
			break
		}
	}
	return out, nil
}
