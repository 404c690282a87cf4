package steering

import (
	"encoding/binary"
	"net/netip"
)

// Limits of the datapath (bpf/lib/steer.h).
const (
	MaxCPUs    = 64   // STEER_MAX_CPUS
	MaxMasks   = 16   // STEER_MAX_MASKS
	MaxEntries = 4096 // STEER_MAX_ENTRIES
	keySize    = 48   // sizeof(struct steer_key)
)

// wire lays k out as struct steer_key: addresses and ports in network
// order, the VNI in host order, the FCF as id << 1 | priority.
//
//	 0 o_src  4 o_dst  8 spi  12 vni  16 i_src  20 i_dst
//	24 i_sport 26 i_dport 28 o_dport 30 i_eth_type
//	32 i_eth_src[6] 38 i_eth_dst[6] 44 o_proto 45 i_proto 46 fcf 47 flags
func (k Key) wire() [keySize]byte {
	var b [keySize]byte
	put4 := func(off int, a netip.Addr) {
		if a.Is4() {
			x := a.As4()
			copy(b[off:], x[:])
		}
	}
	put4(0, k.OuterSrc)
	put4(4, k.OuterDst)
	binary.BigEndian.PutUint32(b[8:], k.SPI)
	binary.LittleEndian.PutUint32(b[12:], k.VNI)
	put4(16, k.InnerSrc)
	put4(20, k.InnerDst)
	binary.BigEndian.PutUint16(b[24:], k.InnerSrcPort)
	binary.BigEndian.PutUint16(b[26:], k.InnerDstPort)
	binary.BigEndian.PutUint16(b[28:], k.OuterDstPort)
	binary.BigEndian.PutUint16(b[30:], k.InnerEthType)
	copy(b[32:], k.InnerEthSrc[:])
	copy(b[38:], k.InnerEthDst[:])
	b[44] = k.OuterProto
	b[45] = k.InnerProto
	b[46] = k.FCFID << 1
	if k.FCFPrio {
		b[46] |= 1
	}
	b[47] = k.Flags
	return b
}

// keyFromWire is wire's inverse.
func keyFromWire(b [keySize]byte) Key {
	get4 := func(off int) netip.Addr { return netip.AddrFrom4([4]byte(b[off : off+4])) }
	return Key{
		OuterSrc: get4(0), OuterDst: get4(4),
		SPI: binary.BigEndian.Uint32(b[8:]), VNI: binary.LittleEndian.Uint32(b[12:]),
		InnerSrc: get4(16), InnerDst: get4(20),
		InnerSrcPort: binary.BigEndian.Uint16(b[24:]), InnerDstPort: binary.BigEndian.Uint16(b[26:]),
		OuterDstPort: binary.BigEndian.Uint16(b[28:]), InnerEthType: binary.BigEndian.Uint16(b[30:]),
		InnerEthSrc: [6]byte(b[32:38]), InnerEthDst: [6]byte(b[38:44]),
		OuterProto: b[44], InnerProto: b[45], FCFID: b[46] >> 1, FCFPrio: b[46]&1 != 0, Flags: b[47],
	}
}

// masked returns the match's key with the mask applied, in wire form.
func (m Match) masked() (key, mask [keySize]byte) {
	key, mask = m.Key.wire(), m.Mask.wire()
	for i := range key {
		key[i] &= mask[i]
	}
	return key, mask
}

// FCF is the layout of the flow control field in the IP ToS byte: a pod/VM
// id of IDBits bits starting at bit IDShift, and a priority bit at PrioBit
// (8 or more: none). The default is the paper's: the whole byte, id in
// bits 7..1, priority in bit 0 (FCF = id << 1 | priority). It collides
// with DSCP and ECN; a network that uses those can move the id, e.g.
// IDShift 2, IDBits 5, PrioBit 8 keeps ECN free.
type FCF struct {
	IDShift uint8
	IDBits  uint8
	PrioBit uint8
}

// DefaultFCF is the paper's layout.
var DefaultFCF = FCF{IDShift: 1, IDBits: 7, PrioBit: 0}

// ToS returns the ToS byte that carries id and prio under the layout
// (what a sender sets with set_field ip_dscp/ip_ecn or IP_TOS).
func (f FCF) ToS(id uint8, prio bool) uint8 {
	tos := (id & (1<<f.IDBits - 1)) << f.IDShift
	if prio && f.PrioBit < 8 {
		tos |= 1 << f.PrioBit
	}
	return tos
}

// Valid reports whether the layout fits in a byte without overlap.
func (f FCF) Valid() bool {
	if f.IDBits == 0 || f.IDBits > 7 || int(f.IDShift)+int(f.IDBits) > 8 {
		return false
	}
	if f.PrioBit < 8 && f.PrioBit >= f.IDShift && f.PrioBit < f.IDShift+f.IDBits {
		return false
	}
	return true
}

// Wire returns the match as the datapath lays it out: key (already
// masked) and mask, 48 bytes each (the body of a VS-extend flow mod).
func (m Match) Wire() (key, mask [keySize]byte) { return m.masked() }

// MatchFromWire is Wire's inverse; the key is masked on the way in.
func MatchFromWire(key, mask [keySize]byte) Match {
	for i := range key {
		key[i] &= mask[i]
	}
	m := Match{Key: keyFromWire(key), Mask: keyFromWire(mask)}
	// Flags are the datapath's, not matchable.
	m.Key.Flags, m.Mask.Flags = 0, 0
	return m
}
