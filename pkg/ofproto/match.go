package ofproto

import (
	"encoding/binary"
	"fmt"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// Matches are compiled from OXM lists into the datapath key's own word
// layout (flow.Key.Words) plus words for the pipeline's registers: the
// metadata register, then reg0..reg15 (fields.go). A packet is then
// classified with a few masked word compares, and the bits a rule looked
// at are already in the megaflow mask's units.

// nWords is the flow key's words plus the metadata register, eight
// words of Nicira registers and the conj_id word (conjunction.go).
const nWords = flow.KeyWords + 1 + nRegs/2 + 1

// metaWord is the index of the metadata register.
const metaWord = flow.KeyWords

// words is a packet, a rule's value or mask, or a megaflow mask.
type words [nWords]uint64

func keyWords(k *flow.Key) words {
	var w words
	kw := k.Words()
	copy(w[:], kw[:])
	return w
}

func (w *words) key() flow.Key {
	var kw [flow.KeyWords]uint64
	copy(kw[:], w[:flow.KeyWords])
	return flow.KeyFromWords(kw)
}

func (w *words) or(o *words) {
	for i := range w {
		w[i] |= o[i]
	}
}

func (w *words) isZero() bool {
	for _, v := range w {
		if v != 0 {
			return false
		}
	}
	return true
}

// fieldNX stands for any extension field in fieldBits (no prefix ladder:
// a miss un-wildcards the whole field).
const fieldNX openflow.Field = 0xff

// fieldBits are the key bits of one field of one rule, in word units.
type fieldBits struct {
	field  openflow.Field
	ladder prefixLadder // nil: a miss un-wildcards the whole field
	n      uint8
	idx    [3]uint8
	bits   [3]uint64
}

func newFieldBits(f openflow.Field, m *words) fieldBits {
	fb := fieldBits{field: f, ladder: ladderOf(f)}
	for i, v := range m {
		if v != 0 {
			fb.idx[fb.n], fb.bits[fb.n] = uint8(i), v
			fb.n++
		}
	}
	return fb
}

// supported reports whether the datapath key carries field f.
func supported(f openflow.Field) bool {
	switch f {
	case openflow.FieldInPhyPort, openflow.FieldIPv6ExtHdr:
		return false
	}
	return f < openflow.FieldIPv6ExtHdr
}

// place writes the big-endian field bytes b (a value or a mask) into key k
// (or the metadata word) at the field's position. It returns false if the
// value cannot exist in a key (arp_op above 255, tunnel_id above 32 bits):
// a rule matching such a value never matches.
func place(k *flow.Key, meta *uint64, f openflow.Field, b []byte) bool {
	u := func() uint64 {
		var v uint64
		for _, c := range b {
			v = v<<8 | uint64(c)
		}
		return v
	}
	switch f {
	case openflow.FieldInPort:
		k.InPort = uint32(u())
	case openflow.FieldMetadata:
		*meta = u()
	case openflow.FieldEthDst:
		copy(k.EthDst[:], b)
	case openflow.FieldEthSrc:
		copy(k.EthSrc[:], b)
	case openflow.FieldEthType:
		k.EthType = uint16(u())
	case openflow.FieldVLANVID:
		k.VlanTCI = k.VlanTCI&^0x1fff | uint16(u())&0x1fff
	case openflow.FieldVLANPCP:
		k.VlanTCI = k.VlanTCI&^0xe000 | uint16(u()&7)<<13
	case openflow.FieldIPDSCP:
		k.NwTOS = k.NwTOS&3 | uint8(u()&0x3f)<<2
	case openflow.FieldIPECN:
		k.NwTOS = k.NwTOS&^3 | uint8(u()&3)
	case openflow.FieldIPProto:
		k.NwProto = uint8(u())
	case openflow.FieldARPOp:
		v := u()
		k.NwProto = uint8(v)
		return v <= 0xff
	case openflow.FieldIPv4Src, openflow.FieldARPSPA:
		copy(k.IPSrc[:4], b)
	case openflow.FieldIPv4Dst, openflow.FieldARPTPA:
		copy(k.IPDst[:4], b)
	case openflow.FieldIPv6Src:
		copy(k.IPSrc[:], b)
	case openflow.FieldIPv6Dst:
		copy(k.IPDst[:], b)
	case openflow.FieldTCPSrc, openflow.FieldUDPSrc, openflow.FieldSCTPSrc, openflow.FieldICMPv4Type, openflow.FieldICMPv6Type:
		k.TpSrc = uint16(u())
	case openflow.FieldTCPDst, openflow.FieldUDPDst, openflow.FieldSCTPDst, openflow.FieldICMPv4Code, openflow.FieldICMPv6Code:
		k.TpDst = uint16(u())
	case openflow.FieldARPSHA, openflow.FieldIPv6NDSLL:
		copy(k.ArpSHA[:], b)
	case openflow.FieldARPTHA, openflow.FieldIPv6NDTLL:
		copy(k.ArpTHA[:], b)
	case openflow.FieldIPv6NDTarget:
		copy(k.NDTarget[:], b)
	case openflow.FieldPBBISID:
		copy(k.IPSrc[1:4], b) // the I-TAG's I-SID
	case openflow.FieldMPLSLabel, openflow.FieldMPLSTC, openflow.FieldMPLSBOS:
		sh, bits := lseField(f)
		k.SetMPLSLSE(k.MPLSLSE()&^(bits<<sh) | uint32(u())&bits<<sh)
	case openflow.FieldIPv6FLabel:
		k.IPv6Label = uint32(u()) & 0xfffff
	case openflow.FieldTunnelID:
		v := u()
		k.TunID = uint32(v)
		return v>>32 == 0
	}
	return true
}

// lseField returns where an MPLS field sits in the label stack entry.
func lseField(f openflow.Field) (shift uint, bits uint32) {
	switch f {
	case openflow.FieldMPLSLabel:
		return 12, 0xfffff
	case openflow.FieldMPLSTC:
		return 9, 7
	}
	return 8, 1 // mpls_bos
}

// fieldMask returns the key bits of field f when fully matched.
func fieldMask(f openflow.Field) words {
	var k flow.Key
	var meta uint64
	b := make([]byte, f.Len())
	for i := range b {
		b[i] = 0xff
	}
	place(&k, &meta, f, b)
	w := keyWords(&k)
	w[metaWord] = meta
	return w
}

// Frequently used masks, computed once.
var (
	maskInPort  = fieldMask(openflow.FieldInPort)
	maskEthType = fieldMask(openflow.FieldEthType)
	maskEthSrc  = fieldMask(openflow.FieldEthSrc)
	maskEthDst  = fieldMask(openflow.FieldEthDst)
	maskIPProto = fieldMask(openflow.FieldIPProto)
	maskVID     = fieldMask(openflow.FieldVLANVID) // VID + VLANCFI
	maskTCI     = func() words { k := flow.Key{VlanTCI: 0xffff}; return keyWords(&k) }()
	maskCFI     = func() words { k := flow.Key{VlanTCI: flow.VLANCFI}; return keyWords(&k) }()
	maskTunID   = fieldMask(openflow.FieldTunnelID)
	maskIPSrc   = fieldMask(openflow.FieldIPv6Src)
	maskIPDst   = fieldMask(openflow.FieldIPv6Dst)
	maskTpSrc   = fieldMask(openflow.FieldTCPSrc)
	maskTpDst   = fieldMask(openflow.FieldTCPDst)
	// maskL3L4 is every key bit above L2: when a megaflow looks at any of
	// them it must pin eth_type too.
	maskL3L4 = func() words {
		k := flow.Key{NwProto: 0xff, NwTOS: 0xff, NwTTL: 0xff, IPv6Label: 0xfffff, TpSrc: 0xffff, TpDst: 0xffff,
			TCPFlags: 0xffff, NwFrag: 0xff}
		for i := range k.IPSrc {
			k.IPSrc[i], k.IPDst[i] = 0xff, 0xff
		}
		for i := range k.ArpSHA {
			k.ArpSHA[i], k.ArpTHA[i] = 0xff, 0xff
		}
		for i := range k.NDTarget {
			k.NDTarget[i] = 0xff
		}
		return keyWords(&k)
	}()
)

// compiledMatch is a Match in key words.
type compiledMatch struct {
	val, mask words
	nz        []uint8     // indexes of non-zero mask words
	fields    []fieldBits // per field, in matchFieldOrder
	never     bool        // no packet can match (value outside the key's range)
}

// matchFieldOrder is the order in which a missing rule's fields are tried
// when choosing the one to un-wildcard: cheap, usually-already-pinned
// fields first.
var matchFieldOrder = []openflow.Field{
	openflow.FieldInPort, openflow.FieldMetadata, openflow.FieldEthType, openflow.FieldVLANVID,
	openflow.FieldMPLSLabel, openflow.FieldMPLSBOS, openflow.FieldMPLSTC, openflow.FieldPBBISID,
	openflow.FieldIPProto, openflow.FieldARPOp, openflow.FieldTunnelID, openflow.FieldEthDst, openflow.FieldEthSrc,
	openflow.FieldVLANPCP, openflow.FieldIPv4Dst, openflow.FieldIPv6Dst, openflow.FieldIPv4Src, openflow.FieldIPv6Src,
	openflow.FieldTCPDst, openflow.FieldUDPDst, openflow.FieldSCTPDst, openflow.FieldICMPv4Code, openflow.FieldICMPv6Code,
	openflow.FieldTCPSrc, openflow.FieldUDPSrc, openflow.FieldSCTPSrc, openflow.FieldICMPv4Type, openflow.FieldICMPv6Type,
	openflow.FieldIPDSCP, openflow.FieldIPECN, openflow.FieldIPv6FLabel, openflow.FieldARPSPA, openflow.FieldARPTPA,
	openflow.FieldARPSHA, openflow.FieldARPTHA, openflow.FieldIPv6NDTarget, openflow.FieldIPv6NDSLL,
	openflow.FieldIPv6NDTLL,
}

// compileMatch validates m for this datapath and compiles it. Fields the
// datapath key lacks are refused with OFPBMC_BAD_FIELD; in_phy_port is
// accepted only equal to in_port (our ports are all physical).
func compileMatch(m openflow.Match) (*compiledMatch, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	cm := &compiledMatch{}
	present := m.Present()
	for _, f := range matchFieldOrder {
		if !present.Has(f) {
			continue
		}
		o, _ := m.Get(f)
		var vk, mk flow.Key
		var vmeta, mmeta uint64
		mb := o.Mask
		if mb == nil {
			mb = make([]byte, len(o.Value))
			for i := range mb {
				mb[i] = 0xff
			}
		}
		if !place(&vk, &vmeta, f, o.Value) {
			cm.never = true
		}
		place(&mk, &mmeta, f, mb)
		vw, mw := keyWords(&vk), keyWords(&mk)
		vw[metaWord], mw[metaWord] = vmeta, mmeta
		for i := range vw {
			cm.val[i] |= vw[i] & mw[i]
			cm.mask[i] |= mw[i]
		}
		if !mw.isZero() {
			cm.fields = append(cm.fields, newFieldBits(f, &mw))
		}
	}
	for _, o := range m.Fields {
		if !o.IsBasic() {
			if err := nxPrereq(m, o); err != nil {
				return nil, err
			}
			f := lookupNX(o)
			var vw, mw words
			mb := o.Mask
			if mb == nil {
				mb = allOnes(f.len)
			}
			f.placeNX(&vw, o.Value)
			f.placeNX(&mw, mb)
			for i := range vw {
				cm.val[i] |= vw[i] & mw[i]
				cm.mask[i] |= mw[i]
			}
			if !mw.isZero() {
				cm.fields = append(cm.fields, newFieldBits(fieldNX, &mw))
			}
			continue
		}
		if supported(o.Field) {
			continue
		}
		if o.Field == openflow.FieldInPhyPort {
			in, ok := m.Get(openflow.FieldInPort)
			if ok && in.Uint() == o.Uint() {
				continue
			}
		}
		return nil, ofErr(openflow.ErrTypeBadMatch, openflow.BadMatchBadField,
			"%s is not in the datapath flow key", o.Field)
	}
	for i, v := range cm.mask {
		if v != 0 {
			cm.nz = append(cm.nz, uint8(i))
		}
	}
	return cm, nil
}

// matches reports whether packet words pw match.
func (cm *compiledMatch) matches(pw *words) bool {
	for _, i := range cm.nz {
		if (pw[i]^cm.val[i])&cm.mask[i] != 0 {
			return false
		}
	}
	return !cm.never
}

// sameAs reports whether two compiled matches admit exactly the same packets.
func (cm *compiledMatch) sameAs(o *compiledMatch) bool {
	return cm.val == o.val && cm.mask == o.mask && cm.never == o.never
}

// overlaps reports whether some packet could match both.
func (cm *compiledMatch) overlaps(o *compiledMatch) bool {
	if cm.never || o.never {
		return false
	}
	for i := range cm.val {
		if (cm.val[i]^o.val[i])&cm.mask[i]&o.mask[i] != 0 {
			return false
		}
	}
	return true
}

// within reports whether every packet matching cm matches filter f, the
// non-strict selection of MODIFY, DELETE and flow stats.
func (cm *compiledMatch) within(f *compiledMatch) bool {
	if f.never {
		return false
	}
	for i := range cm.val {
		if f.mask[i]&^cm.mask[i] != 0 || (cm.val[i]^f.val[i])&f.mask[i] != 0 {
			return false
		}
	}
	return true
}

func ofErr(t openflow.ErrorType, code uint16, format string, args ...any) *openflow.Error {
	return &openflow.Error{Type: t, Code: code, Reason: fmt.Sprintf(format, args...)}
}

var be = binary.BigEndian

// PacketKey is the key of a packet described by match values (masks are
// ignored), each field placed where the fast path's key keeps it. nagarectl
// trace uses it to build the packet a description names.
func PacketKey(m openflow.Match) flow.Key {
	var k flow.Key
	var meta uint64
	for _, o := range m.Fields {
		if o.IsBasic() && supported(o.Field) {
			place(&k, &meta, o.Field, o.Value)
		}
	}
	return k
}
