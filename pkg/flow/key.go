// Package flow describes cached datapath flows as plain Go values: the key
// a packet is looked up by, the mask saying which key bits a flow matches
// on, and the actions it replays. Nothing here touches the kernel; the
// datapath package installs these values (see docs/architecture.md).
package flow

import (
	"encoding/binary"
	"io"
	"net/netip"
)

// KeySize is the size of the kernel's struct flow_key (bpf/lib/flow_key.h).
const KeySize = 160

// KeyWords is KeySize in 64-bit words: masks are applied word by word.
const KeyWords = KeySize / 8

// Fragment bits of Key.NwFrag.
const (
	FragAny   = 1 << 0 // any IP fragment
	FragLater = 1 << 1 // a fragment with non-zero offset (no L4 header)
)

// TunPresent is set in Key.TunFlags for packets received from a tunnel.
const TunPresent = 1 << 0

// VLANCFI is set in Key.VlanTCI when the packet carries an 802.1Q tag.
const VLANCFI = 0x1000

// Connection tracking state bits of Key.CtState, as Open vSwitch's ct_state.
const (
	CtNew  = 0x01 // the first packet of a connection not yet committed
	CtEst  = 0x02 // part of a connection that has seen packets both ways
	CtRel  = 0x04 // related to a connection (an ICMP error about it)
	CtRpl  = 0x08 // in the reply direction
	CtInv  = 0x10 // invalid: conntrack could not make sense of it
	CtTrk  = 0x20 // the packet went through the connection tracker
	CtSNAT = 0x40 // the connection has a source translation
	CtDNAT = 0x80 // ... a destination translation
)

// Key is the flow key of one packet, the Go twin of struct flow_key. Fields
// are in host byte order; MarshalBinary writes the kernel layout. A Mask is a
// Key whose set bits say which key bits a flow matches.
//
// Conventions (shared with Open vSwitch's datapath): ICMP type/code live in
// TpSrc/TpDst; ARP keeps its opcode in NwProto, SPA/TPA in IPSrc/IPDst and
// SHA/THA in ArpSHA/ArpTHA; IPv4 addresses use the first 4 bytes of IPSrc/IPDst.
// IPv6 ND keeps its target in NDTarget and the source (solicitation) or
// target (advertisement) link-layer address in ArpSHA / ArpTHA; MPLS its
// top label stack entry in IPSrc[0:4] (MPLSLSE / SetMPLSLSE), PBB its
// I-TAG there (flags in IPSrc[0], I-SID in IPSrc[1:4]).
type Key struct {
	InPort    uint32   // OpenFlow port number of the ingress port
	TunID     uint32   // tunnel VNI
	TunSrc    [4]byte  // outer IPv4 source
	TunDst    [4]byte  // outer IPv4 destination
	TunTOS    uint8    // outer ToS
	TunTTL    uint8    // outer TTL
	TunFlags  uint8    // TunPresent
	NwFrag    uint8    // FragAny | FragLater
	VlanTCI   uint16   // TCI | VLANCFI when tagged
	EthType   uint16   // after the VLAN tag
	EthSrc    [6]byte  //
	EthDst    [6]byte  //
	NwProto   uint8    // IP protocol, or ARP opcode
	NwTOS     uint8    // DSCP<<2 | ECN
	NwTTL     uint8    // TTL or hop limit
	IPv6Label uint32   // 20-bit flow label
	IPSrc     [16]byte // IPv4 in [0:4]; ARP SPA
	IPDst     [16]byte // ARP TPA
	TpSrc     uint16   // L4 source port, ICMP type
	TpDst     uint16   // L4 destination port, ICMP code
	TCPFlags  uint16   // 12 bits
	ArpSHA    [6]byte  // ND source link-layer address
	ArpTHA    [6]byte  // ND target link-layer address
	NDTarget  [16]byte // IPv6 ND target address

	// Recirculation and connection tracking (bpf/lib/conntrack.h). Zero for
	// a packet fresh from a port; a ct action fills the Ct* fields, a recirc
	// action sets RecircID and looks the packet up again (Open vSwitch's
	// recirc_id: the slow path knows where translation resumes).
	RecircID  uint32   // 0: the packet's first pass
	CtMark    uint32   // ct_mark of the connection
	CtZone    uint16   // zone of the last ct action
	CtState   uint8    // Ct* bits
	CtNwProto uint8    // original direction tuple: IP protocol
	CtTpSrc   uint16   // ... L4 source port (ICMP: type)
	CtTpDst   uint16   // ... L4 destination port (ICMP: code)
	CtLabel   [16]byte // ct_label, big-endian 128 bits
	CtNwSrc   [4]byte  // original direction tuple, IPv4 source
	CtNwDst   [4]byte  // ... IPv4 destination
	DpHash    uint32   // a hash of the packet's 5-tuple set by a hash action (select groups)
}

// Mask selects the key bits a flow matches on. It has Key's layout.
type Mask = Key

// Kernel layout, offsets in bytes (bpf/lib/flow_key.h):
//
//	 0 in_port u32      4 tun_id u32       8 tun_src be32   12 tun_dst be32
//	16 tun_tos u8      17 tun_ttl u8      18 tun_flags u8   19 nw_frag u8
//	20 vlan_tci be16   22 eth_type be16   24 eth_src [6]    30 eth_dst [6]
//	36 nw_proto u8     37 nw_tos u8       38 nw_ttl u8      39 pad
//	40 ipv6_label be32 44 ip_src [16]     60 ip_dst [16]
//	76 tp_src be16     78 tp_dst be16     80 tcp_flags be16 82 pad
//	84 arp_sha [6]     90 arp_tha [6]     96 nd_target [16]
//	112 recirc_id u32 116 ct_mark u32     120 ct_zone u16   122 ct_state u8
//	123 ct_nw_proto u8 124 ct_tp_src be16 126 ct_tp_dst be16
//	128 ct_label [16] 144 ct_nw_src be32  148 ct_nw_dst be32 152 dp_hash u32 156 pad
const (
	offInPort   = 0
	offTunID    = 4
	offTunSrc   = 8
	offTunDst   = 12
	offTunTOS   = 16
	offTunTTL   = 17
	offTunFlags = 18
	offNwFrag   = 19
	offVlanTCI  = 20
	offEthType  = 22
	offEthSrc   = 24
	offEthDst   = 30
	offNwProto  = 36
	offNwTOS    = 37
	offNwTTL    = 38
	offLabel    = 40
	offIPSrc    = 44
	offIPDst    = 60
	offTpSrc    = 76
	offTpDst    = 78
	offTCPFlags = 80
	offArpSHA   = 84
	offArpTHA   = 90
	offNDTarget = 96
	offRecircID = 112
	offCtMark   = 116
	offCtZone   = 120
	offCtState  = 122
	offCtProto  = 123
	offCtTpSrc  = 124
	offCtTpDst  = 126
	offCtLabel  = 128
	offCtNwSrc  = 144
	offCtNwDst  = 148
	offDpHash   = 152
)

// Put writes k in the kernel layout into b, which must hold KeySize bytes.
func (k *Key) Put(b []byte) {
	_ = b[KeySize-1]
	clear(b[:KeySize])
	binary.NativeEndian.PutUint32(b[offInPort:], k.InPort)
	binary.NativeEndian.PutUint32(b[offTunID:], k.TunID)
	copy(b[offTunSrc:], k.TunSrc[:])
	copy(b[offTunDst:], k.TunDst[:])
	b[offTunTOS] = k.TunTOS
	b[offTunTTL] = k.TunTTL
	b[offTunFlags] = k.TunFlags
	b[offNwFrag] = k.NwFrag
	binary.BigEndian.PutUint16(b[offVlanTCI:], k.VlanTCI)
	binary.BigEndian.PutUint16(b[offEthType:], k.EthType)
	copy(b[offEthSrc:], k.EthSrc[:])
	copy(b[offEthDst:], k.EthDst[:])
	b[offNwProto] = k.NwProto
	b[offNwTOS] = k.NwTOS
	b[offNwTTL] = k.NwTTL
	binary.BigEndian.PutUint32(b[offLabel:], k.IPv6Label)
	copy(b[offIPSrc:], k.IPSrc[:])
	copy(b[offIPDst:], k.IPDst[:])
	binary.BigEndian.PutUint16(b[offTpSrc:], k.TpSrc)
	binary.BigEndian.PutUint16(b[offTpDst:], k.TpDst)
	binary.BigEndian.PutUint16(b[offTCPFlags:], k.TCPFlags)
	copy(b[offArpSHA:], k.ArpSHA[:])
	copy(b[offArpTHA:], k.ArpTHA[:])
	copy(b[offNDTarget:], k.NDTarget[:])
	binary.NativeEndian.PutUint32(b[offRecircID:], k.RecircID)
	binary.NativeEndian.PutUint32(b[offCtMark:], k.CtMark)
	binary.NativeEndian.PutUint16(b[offCtZone:], k.CtZone)
	b[offCtState] = k.CtState
	b[offCtProto] = k.CtNwProto
	binary.BigEndian.PutUint16(b[offCtTpSrc:], k.CtTpSrc)
	binary.BigEndian.PutUint16(b[offCtTpDst:], k.CtTpDst)
	copy(b[offCtLabel:], k.CtLabel[:])
	copy(b[offCtNwSrc:], k.CtNwSrc[:])
	copy(b[offCtNwDst:], k.CtNwDst[:])
	binary.NativeEndian.PutUint32(b[offDpHash:], k.DpHash)
}

// MarshalBinary returns k in the kernel layout.
func (k Key) MarshalBinary() ([]byte, error) {
	b := make([]byte, KeySize)
	k.Put(b)
	return b, nil
}

// UnmarshalBinary reads a key in the kernel layout.
func (k *Key) UnmarshalBinary(b []byte) error {
	if len(b) < KeySize {
		return io.ErrUnexpectedEOF
	}
	*k = Key{
		InPort:    binary.NativeEndian.Uint32(b[offInPort:]),
		TunID:     binary.NativeEndian.Uint32(b[offTunID:]),
		TunTOS:    b[offTunTOS],
		TunTTL:    b[offTunTTL],
		TunFlags:  b[offTunFlags],
		NwFrag:    b[offNwFrag],
		VlanTCI:   binary.BigEndian.Uint16(b[offVlanTCI:]),
		EthType:   binary.BigEndian.Uint16(b[offEthType:]),
		NwProto:   b[offNwProto],
		NwTOS:     b[offNwTOS],
		NwTTL:     b[offNwTTL],
		IPv6Label: binary.BigEndian.Uint32(b[offLabel:]),
		TpSrc:     binary.BigEndian.Uint16(b[offTpSrc:]),
		TpDst:     binary.BigEndian.Uint16(b[offTpDst:]),
		TCPFlags:  binary.BigEndian.Uint16(b[offTCPFlags:]),
		RecircID:  binary.NativeEndian.Uint32(b[offRecircID:]),
		CtMark:    binary.NativeEndian.Uint32(b[offCtMark:]),
		CtZone:    binary.NativeEndian.Uint16(b[offCtZone:]),
		CtState:   b[offCtState],
		CtNwProto: b[offCtProto],
		CtTpSrc:   binary.BigEndian.Uint16(b[offCtTpSrc:]),
		CtTpDst:   binary.BigEndian.Uint16(b[offCtTpDst:]),
		DpHash:    binary.NativeEndian.Uint32(b[offDpHash:]),
	}
	copy(k.CtLabel[:], b[offCtLabel:])
	copy(k.CtNwSrc[:], b[offCtNwSrc:])
	copy(k.CtNwDst[:], b[offCtNwDst:])
	copy(k.TunSrc[:], b[offTunSrc:])
	copy(k.TunDst[:], b[offTunDst:])
	copy(k.EthSrc[:], b[offEthSrc:])
	copy(k.EthDst[:], b[offEthDst:])
	copy(k.IPSrc[:], b[offIPSrc:])
	copy(k.IPDst[:], b[offIPDst:])
	copy(k.ArpSHA[:], b[offArpSHA:])
	copy(k.ArpTHA[:], b[offArpTHA:])
	copy(k.NDTarget[:], b[offNDTarget:])
	return nil
}

// Words returns k in the kernel layout as KeyWords native-endian words, the unit
// in which the fast path masks and hashes keys.
func (k *Key) Words() [KeyWords]uint64 {
	var b [KeySize]byte
	k.Put(b[:])
	var w [KeyWords]uint64
	for i := range w {
		w[i] = binary.NativeEndian.Uint64(b[i*8:])
	}
	return w
}

// KeyFromWords is the inverse of Words.
func KeyFromWords(w [KeyWords]uint64) Key {
	var b [KeySize]byte
	for i := range w {
		binary.NativeEndian.PutUint64(b[i*8:], w[i])
	}
	var k Key
	_ = k.UnmarshalBinary(b[:])
	return k
}

// And returns k with only the bits set in m kept.
func (k Key) And(m Mask) Key {
	kw, mw := k.Words(), m.Words()
	for i := range kw {
		kw[i] &= mw[i]
	}
	return KeyFromWords(kw)
}

// Covers reports whether every bit set in m is also set in c: a flow under
// mask c is at least as specific as one under m.
func (c Mask) Covers(m Mask) bool {
	cw, mw := c.Words(), m.Words()
	for i := range cw {
		if mw[i]&^cw[i] != 0 {
			return false
		}
	}
	return true
}

// Matches reports whether packet key p matches flow key k under mask m.
func (k Key) Matches(m Mask, p Key) bool {
	kw, mw, pw := k.Words(), m.Words(), p.Words()
	for i := range kw {
		if (kw[i]^pw[i])&mw[i] != 0 {
			return false
		}
	}
	return true
}

// MPLSLSE returns the top MPLS label stack entry of an MPLS packet's key.
func (k *Key) MPLSLSE() uint32 { return binary.BigEndian.Uint32(k.IPSrc[:4]) }

// SetMPLSLSE stores the top MPLS label stack entry.
func (k *Key) SetMPLSLSE(lse uint32) { binary.BigEndian.PutUint32(k.IPSrc[:4], lse) }

// IPv4Src returns IPSrc as an IPv4 address.
func (k *Key) IPv4Src() netip.Addr { return netip.AddrFrom4([4]byte(k.IPSrc[:4])) }

// IPv4Dst returns IPDst as an IPv4 address.
func (k *Key) IPv4Dst() netip.Addr { return netip.AddrFrom4([4]byte(k.IPDst[:4])) }

// SetIPSrc stores a (IPv4 or IPv6) as the source address.
func (k *Key) SetIPSrc(a netip.Addr) { k.IPSrc = addrBytes(a) }

// SetIPDst stores a (IPv4 or IPv6) as the destination address.
func (k *Key) SetIPDst(a netip.Addr) { k.IPDst = addrBytes(a) }

func addrBytes(a netip.Addr) [16]byte {
	var b [16]byte
	if a.Is4() {
		v := a.As4()
		copy(b[:], v[:])
		return b
	}
	return a.As16()
}

// ExactMask returns the mask that matches every bit of a key.
func ExactMask() Mask {
	var w [KeyWords]uint64
	for i := range w {
		w[i] = ^uint64(0)
	}
	m := KeyFromWords(w)
	return m
}

// Or returns the union of the bits of m and o.
func (m Mask) Or(o Mask) Mask {
	mw, ow := m.Words(), o.Words()
	for i := range mw {
		mw[i] |= ow[i]
	}
	return KeyFromWords(mw)
}
