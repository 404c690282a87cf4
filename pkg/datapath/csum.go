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
	// The headers as the GSO code finds them (parseGSO), but only a
	// packet whose IP header says its length: the checksum covers exactly
	// those bytes.
	h, err := parseGSO(pkt)
	if err != nil || !h.sized {
		return
	}
	field := h.l4 + h.csumField()
	pseudo := h.pseudoSum(pkt, h.end-h.l4)
	if binary.BigEndian.Uint16(pkt[field:]) != fold(pseudo) {
		return
	}
	pkt[field], pkt[field+1] = 0, 0
	full := ^fold(pseudo + sum16(pkt[h.l4:h.end]))
	if h.proto == 17 && full == 0 {
		full = 0xffff
	}
	binary.BigEndian.PutUint16(pkt[field:], full)
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
