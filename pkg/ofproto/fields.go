package ofproto

import (
	"encoding/binary"
	"fmt"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// Fields beyond OpenFlow's basic class: Open vSwitch's Nicira extensions
// that connection-tracking pipelines (Antrea's, ovs-ofctl's) use.
//
//   - reg0..reg15 (NXM_NX_REG0..15), xreg0..xreg7 (OXM_OF_PKT_REG0..7) and
//     xxreg0..xxreg3 are one register file: xreg<i> = reg<2i>:reg<2i+1>,
//     xxreg<i> = xreg<2i>:xreg<2i+1> (the lower-numbered half is the more
//     significant). They live in pipeline words past the datapath key, like
//     the metadata register: never in a megaflow's key. Their values are
//     always "written" by the translation (from zero at the first pass, or
//     from the frozen state a recirculation resumes, which recirc_id
//     names exactly), so they never widen or narrow a megaflow.
//   - ct_state, ct_zone, ct_mark, ct_label and the original-direction tuple
//     (ct_nw_proto, ct_nw_src/dst, ct_tp_src/dst) are in the datapath key:
//     the fast path's connection tracker fills them before a recirculation.
//     ct_ipv6_src/dst are not (the key keeps the IPv4 tuple only): refused.

// nxField is one extension field as the pipeline keeps it.
type nxField struct {
	name     string
	len      int  // bytes on the wire
	maskable bool // a mask may be given
	// key is set for fields in the datapath key; put/get then work on a
	// flow.Key, else on the pipeline's register words.
	key bool
	// reg is the first 32-bit register the field covers (reg fields).
	reg int
	// put writes the field's big-endian bytes b into k.
	put func(k *flow.Key, b []byte)
	// get reads them.
	get func(k *flow.Key) []byte
}

// Register words: regWord0+i holds xreg<i>.
const (
	regWord0 = flow.KeyWords + 1
	nRegs    = 16
)

var nxFields = func() map[openflow.FieldKey]*nxField {
	m := map[openflow.FieldKey]*nxField{}
	for i := 0; i < nRegs; i++ {
		m[openflow.FieldKey{Class: openflow.ClassNXM1, Field: openflow.NXMReg0 + openflow.Field(i)}] = &nxField{name: fmt.Sprintf("reg%d", i), len: 4, maskable: true, reg: i}
	}
	for i := 0; i < nRegs/2; i++ {
		m[openflow.FieldKey{Class: openflow.ClassPacketRegs, Field: openflow.PktReg0 + openflow.Field(i)}] = &nxField{name: fmt.Sprintf("xreg%d", i), len: 8, maskable: true, reg: 2 * i}
	}
	for i := 0; i < nRegs/4; i++ {
		m[openflow.FieldKey{Class: openflow.ClassNXM1, Field: openflow.NXMXXReg0 + openflow.Field(i)}] = &nxField{name: fmt.Sprintf("xxreg%d", i), len: 16, maskable: true, reg: 4 * i}
	}
	key := func(n openflow.Field, name string, l int, maskable bool, put func(k *flow.Key, b []byte), get func(k *flow.Key) []byte) {
		m[openflow.FieldKey{Class: openflow.ClassNXM1, Field: n}] = &nxField{name: name, len: l, maskable: maskable, key: true, put: put, get: get}
	}
	key(openflow.NXMCtState, "ct_state", 4, true,
		func(k *flow.Key, b []byte) { k.CtState = uint8(binary.BigEndian.Uint32(b)) },
		func(k *flow.Key) []byte { return binary.BigEndian.AppendUint32(nil, uint32(k.CtState)) })
	key(openflow.NXMCtZone, "ct_zone", 2, false,
		func(k *flow.Key, b []byte) { k.CtZone = binary.BigEndian.Uint16(b) },
		func(k *flow.Key) []byte { return binary.BigEndian.AppendUint16(nil, k.CtZone) })
	key(openflow.NXMCtMark, "ct_mark", 4, true,
		func(k *flow.Key, b []byte) { k.CtMark = binary.BigEndian.Uint32(b) },
		func(k *flow.Key) []byte { return binary.BigEndian.AppendUint32(nil, k.CtMark) })
	key(openflow.NXMCtLabel, "ct_label", 16, true,
		func(k *flow.Key, b []byte) { copy(k.CtLabel[:], b) },
		func(k *flow.Key) []byte { return append([]byte(nil), k.CtLabel[:]...) })
	key(openflow.NXMCtNWProto, "ct_nw_proto", 1, false,
		func(k *flow.Key, b []byte) { k.CtNwProto = b[0] },
		func(k *flow.Key) []byte { return []byte{k.CtNwProto} })
	key(openflow.NXMCtNWSrc, "ct_nw_src", 4, true,
		func(k *flow.Key, b []byte) { copy(k.CtNwSrc[:], b) },
		func(k *flow.Key) []byte { return append([]byte(nil), k.CtNwSrc[:]...) })
	key(openflow.NXMCtNWDst, "ct_nw_dst", 4, true,
		func(k *flow.Key, b []byte) { copy(k.CtNwDst[:], b) },
		func(k *flow.Key) []byte { return append([]byte(nil), k.CtNwDst[:]...) })
	key(openflow.NXMCtTPSrc, "ct_tp_src", 2, true,
		func(k *flow.Key, b []byte) { k.CtTpSrc = binary.BigEndian.Uint16(b) },
		func(k *flow.Key) []byte { return binary.BigEndian.AppendUint16(nil, k.CtTpSrc) })
	key(openflow.NXMCtTPDst, "ct_tp_dst", 2, true,
		func(k *flow.Key, b []byte) { k.CtTpDst = binary.BigEndian.Uint16(b) },
		func(k *flow.Key) []byte { return binary.BigEndian.AppendUint16(nil, k.CtTpDst) })
	return m
}()

// conjIDField is conj_id, matched but never written by an action: a
// pipeline word (conjWord) that is zero except while a table is looked
// up again for a completed conjunction (conjunction.go). It is kept out
// of nxFields, which lists the fields actions may read and write.
var conjIDField = &nxField{name: "conj_id", len: 4, reg: nRegs}

// conjWord is the pipeline word that holds conj_id (upper 32 bits).
const conjWord = regWord0 + nRegs/2

// lookupNX returns the extension field an OXM names for matching, or nil.
func lookupNX(o openflow.OXM) *nxField {
	if k := o.Key(); k.Class == openflow.ClassNXM1 && k.Field == openflow.NXMConjID {
		return conjIDField
	}
	return nxFields[o.Key()]
}

// placeNX writes the field bytes b (a value or a mask) into w.
func (f *nxField) placeNX(w *words, b []byte) {
	if f.key {
		k := w.key()
		f.put(&k, b)
		kw := k.Words()
		copy(w[:flow.KeyWords], kw[:])
		return
	}
	// Registers: 32 bits each, big-endian across the field.
	for i := 0; i < f.len/4; i++ {
		setReg(w, f.reg+i, binary.BigEndian.Uint32(b[4*i:]))
	}
}

// readNX returns the field's bytes from w.
func (f *nxField) readNX(w *words) []byte {
	if f.key {
		k := w.key()
		return f.get(&k)
	}
	b := make([]byte, 0, f.len)
	for i := 0; i < f.len/4; i++ {
		b = binary.BigEndian.AppendUint32(b, reg(w, f.reg+i))
	}
	return b
}

// words returns the pipeline bits the field occupies.
func (f *nxField) words() words {
	var w words
	f.placeNX(&w, allOnes(f.len))
	return w
}

func reg(w *words, i int) uint32 {
	v := w[regWord0+i/2]
	if i%2 == 0 {
		return uint32(v >> 32)
	}
	return uint32(v)
}

func setReg(w *words, i int, v uint32) {
	p := &w[regWord0+i/2]
	if i%2 == 0 {
		*p = *p&0xffffffff | uint64(v)<<32
	} else {
		*p = *p&^0xffffffff | uint64(v)
	}
}

func allOnes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 0xff
	}
	return b
}

// pipelineOnly reports whether word i is a pipeline register (metadata,
// reg*), not part of the datapath key.
func pipelineOnly(i int) bool { return i >= flow.KeyWords }

// Masks of the datapath key's recirculation and conntrack fields.
var (
	maskRecircID = func() words { k := flow.Key{RecircID: ^uint32(0)}; return keyWords(&k) }()
	maskCtFields = func() words {
		k := flow.Key{CtState: 0xff, CtZone: 0xffff, CtMark: ^uint32(0), CtNwProto: 0xff, CtTpSrc: 0xffff, CtTpDst: 0xffff,
			CtNwSrc: [4]byte{255, 255, 255, 255}, CtNwDst: [4]byte{255, 255, 255, 255}}
		for i := range k.CtLabel {
			k.CtLabel[i] = 0xff
		}
		return keyWords(&k)
	}()
)

// nxPrereq checks an extension field's prerequisites as Open vSwitch
// does: the conntrack original tuple needs an IPv4 packet (ct_tp_* also a
// connection protocol with ports). ct_ipv6_* are refused: the key has no
// room for an IPv6 original tuple.
func nxPrereq(m openflow.Match, o openflow.OXM) error {
	id := o.Key()
	if id.Class == openflow.ClassNXM1 && (id.Field == openflow.NXMCtIPv6Src || id.Field == openflow.NXMCtIPv6Dst) {
		return ofErr(openflow.ErrTypeBadMatch, openflow.BadMatchBadField,
			"ct_ipv6_src/ct_ipv6_dst are not in the datapath flow key (IPv4 original tuples only)")
	}
	f := lookupNX(o)
	if f == nil {
		return ofErr(openflow.ErrTypeBadMatch, openflow.BadMatchBadField, "class 0x%04x field %d is not in the datapath flow key", o.Class, o.Field)
	}
	if len(o.Value) != f.len || (o.Mask != nil && (len(o.Mask) != f.len || !f.maskable)) {
		return ofErr(openflow.ErrTypeBadMatch, openflow.BadMatchBadLen, "%s: %d bytes", f.name, len(o.Value))
	}
	return nil
}
