package datapath

import "encoding/binary"

// A packet sent by a local socket through a veth usually has
// CHECKSUM_PARTIAL: its TCP/UDP checksum field holds only the folded
// pseudo-header sum, and the device (or the receiving veth) is trusted to
// finish the job. An upcall copies the bytes but not that promise, and a
// packet executed from userspace starts as CHECKSUM_NONE, so the receiver
// would drop it. completeChecksum recognises such a field (it equals the
// pseudo-header sum exactly) and writes the full checksum. Any other
// checksum, right or wrong, is left as it is.
func completeChecksum(pkt []byte) {
	off := 14
	if len(pkt) < off {
		return
	}
	typ := binary.BigEndian.Uint16(pkt[12:])
	if typ == 0x8100 || typ == 0x88a8 {
		if len(pkt) < off+4 {
			return
		}
		typ = binary.BigEndian.Uint16(pkt[16:])
		off += 4
	}
	var pseudo uint32
	var proto byte
	var l4 []byte
	switch typ {
	case 0x0800:
		if len(pkt) < off+20 {
			return
		}
		ip := pkt[off:]
		ihl := int(ip[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(ip[2:]))
		if ihl < 20 || total < ihl || len(ip) < total || binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 {
			return // fragments: the checksum covers bytes not here
		}
		proto = ip[9]
		l4 = ip[ihl:total]
		pseudo = sum16(ip[12:20])
	case 0x86dd:
		if len(pkt) < off+40 {
			return
		}
		ip := pkt[off:]
		plen := int(binary.BigEndian.Uint16(ip[4:]))
		if len(ip) < 40+plen {
			return
		}
		proto = ip[6] // extension headers: left alone
		l4 = ip[40 : 40+plen]
		pseudo = sum16(ip[8:40])
	default:
		return
	}
	var field int
	switch proto {
	case 6:
		field = 16
	case 17:
		field = 6
	default:
		return
	}
	if len(l4) < field+2 {
		return
	}
	pseudo += uint32(proto) + uint32(len(l4))
	got := binary.BigEndian.Uint16(l4[field:])
	if got != fold(pseudo) {
		return
	}
	l4[field], l4[field+1] = 0, 0
	full := ^fold(pseudo + sum16(l4))
	if proto == 17 && full == 0 {
		full = 0xffff
	}
	binary.BigEndian.PutUint16(l4[field:], full)
}

// sum16 is the one's-complement sum of b as big-endian 16-bit words,
// folded to 16 bits (callers add more words and fold again). Eight bytes
// a step: two 32-bit halves summed in 64 bits are the same sum modulo
// 0xffff, which is all a one's-complement sum is; the onload path sums
// every byte of the GSO packets it cuts.
func sum16(b []byte) uint32 {
	var s uint64
	for len(b) >= 8 {
		v := binary.BigEndian.Uint64(b)
		s += v>>32 + v&0xffffffff
		b = b[8:]
	}
	for len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint32(s)
}

func fold(s uint32) uint16 {
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}
