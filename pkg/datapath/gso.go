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

// gsoHeaders are the offsets of a GSO packet's headers.
type gsoHeaders struct {
	typ   uint16 // ethertype of the IP header: 0x0800 or 0x86dd
	proto byte   // 6 (TCP) or 17 (UDP)
	l3    int    // IP header
	l4    int    // TCP or UDP header
	hdr   int    // payload (end of the L4 header)
	end   int    // end of the IP packet (the frame may be longer)
	// sized: end is what the IP header's length field says (a GSO
	// packet's may say 0 or less than it holds: then the frame counts).
	sized bool
}

// parseGSO finds the headers of a TCP or UDP packet over IPv4 or IPv6
// (one VLAN tag allowed, no IPv6 extension headers, no IPv4 fragment).
func parseGSO(pkt []byte) (gsoHeaders, error) {
	var h gsoHeaders
	if len(pkt) < 14 {
		return h, ErrNotSegmentable
	}
	h.l3 = 14
	h.typ = binary.BigEndian.Uint16(pkt[12:])
	if h.typ == 0x8100 || h.typ == 0x88a8 {
		if len(pkt) < 18 {
			return h, ErrNotSegmentable
		}
		h.typ, h.l3 = binary.BigEndian.Uint16(pkt[16:]), 18
	}
	l3 := h.l3
	switch h.typ {
	case 0x0800:
		if len(pkt) < l3+20 {
			return h, ErrNotSegmentable
		}
		ip := pkt[l3:]
		ihl, total := int(ip[0]&0xf)*4, int(binary.BigEndian.Uint16(ip[2:]))
		if ihl < 20 || binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 {
			return h, ErrNotSegmentable
		}
		// A GSO packet's total length may say 0 (over 64 KiB): the frame's length counts.
		h.end = len(pkt)
		if total >= ihl && l3+total <= len(pkt) && total != 0 {
			h.end, h.sized = l3+total, true
		}
		h.proto, h.l4 = ip[9], l3+ihl
	case 0x86dd:
		if len(pkt) < l3+40 {
			return h, ErrNotSegmentable
		}
		ip := pkt[l3:]
		h.end = len(pkt)
		if plen := int(binary.BigEndian.Uint16(ip[4:])); plen != 0 && l3+40+plen <= len(pkt) {
			h.end, h.sized = l3+40+plen, true
		}
		h.proto, h.l4 = ip[6], l3+40
	default:
		return h, ErrNotSegmentable
	}
	switch h.proto {
	case 6:
		if len(pkt) < h.l4+20 {
			return h, ErrNotSegmentable
		}
		h.hdr = h.l4 + int(pkt[h.l4+12]>>4)*4
	case 17:
		h.hdr = h.l4 + 8
	default:
		return h, ErrNotSegmentable
	}
	if h.hdr > h.end {
		return h, ErrNotSegmentable
	}
	return h, nil
}

// pseudoSum is the one's-complement sum of the pseudo-header of the TCP
// or UDP packet of h in pkt, for an L4 length of l4len.
func (h *gsoHeaders) pseudoSum(pkt []byte, l4len int) uint32 {
	var s uint32
	if h.typ == 0x0800 {
		s = sum16(pkt[h.l3+12 : h.l3+20])
	} else {
		s = sum16(pkt[h.l3+8 : h.l3+40])
	}
	return s + uint32(h.proto) + uint32(l4len)
}

// csumField is the offset of the L4 checksum field in the L4 header.
func (h *gsoHeaders) csumField() int {
	if h.proto == 6 {
		return 16
	}
	return 6
}

func segment(arena *[]byte, out [][]byte, pkt []byte, gsoSize int) ([][]byte, error) {
	if gsoSize <= 0 {
		return nil, ErrNotSegmentable
	}
	h, err := parseGSO(pkt)
	if err != nil {
		return nil, err
	}
	typ, proto, l3, l4, hdr, end := h.typ, h.proto, h.l3, h.l4, h.hdr, h.end
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
		} else {
			binary.BigEndian.PutUint16(seg[l4+4:], uint16(l4len))
		}
		field := l4 + h.csumField()
		seg[field], seg[field+1] = 0, 0
		c := ^fold(h.pseudoSum(seg, l4len) + sum16(seg[l4:]))
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
