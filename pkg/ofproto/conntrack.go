package ofproto

import (
	"encoding/binary"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// Connection tracking in translation: Open vSwitch's ct() and ct_clear.
// The fast path owns the tracker (bpf/lib/conntrack.h); translation only
// says which zone, whether to commit, which NAT and which mark/label to
// set, then recirculates (recirc.go) so that the pipeline goes on with
// the ct fields the tracker filled. None of this depends on the packet's
// tuple at translation time: the tracker reads it per packet, so a ct
// action adds nothing to the megaflow mask.

// ctSpec is one ct action as translation uses it.
type ctSpec struct {
	commit, force bool
	zone          uint16
	zoneSrc       *fieldRange // the zone from a field's bits, when set
	table         int         // resume in this table after recirculation; -1: no recirculation
	nat           *flow.NAT
	mark          uint32
	markMask      uint32
	label         [16]byte
	labelMask     [16]byte
}

// fieldRange is bits [ofs, ofs+nbits) of a field (OVS's FIELD[ofs..end]).
type fieldRange struct {
	field openflow.FieldKey
	ofs   int
	nbits int
}

// conntrack translates a ct action: the datapath CT, then (with a table)
// Recirc. Without a table the pipeline goes on with the ct fields as they
// were (Open vSwitch: ct without table= does not update them).
func (x *xlate) conntrack(c *ctSpec) {
	zone := c.zone
	if c.zoneSrc != nil {
		zone = uint16(bitsValue(x.readField(c.zoneSrc.field), c.zoneSrc.ofs, c.zoneSrc.nbits))
	}
	x.commit()
	a := flow.CT{Zone: zone, NAT: c.nat, Mark: c.mark, MarkMask: c.markMask, Label: c.label, LabelMask: c.labelMask}
	if c.commit {
		a.Flags |= flow.CTCommit
	}
	if c.force {
		a.Flags |= flow.CTForce
	}
	x.acts = append(x.acts, a)
	x.tracef(TraceNote, x.tableID, "%s", a)
	if c.table >= 0 {
		x.freeze(uint8(c.table))
	}
}

// ctClear translates ct_clear: the packet is untracked again, for the
// rest of this pass and for a later recirculation.
func (x *xlate) ctClear() {
	k := &x.cur
	if k.CtState == 0 && k.CtZone == 0 && k.CtMark == 0 && k.CtLabel == [16]byte{} && k.CtNwProto == 0 &&
		k.CtTpSrc == 0 && k.CtTpDst == 0 && k.CtNwSrc == [4]byte{} && k.CtNwDst == [4]byte{} &&
		x.written.covers(&maskCtFields) {
		return
	}
	k.CtState, k.CtZone, k.CtMark, k.CtLabel = 0, 0, 0, [16]byte{}
	k.CtNwProto, k.CtTpSrc, k.CtTpDst, k.CtNwSrc, k.CtNwDst = 0, 0, 0, [4]byte{}, [4]byte{}
	x.written.or(&maskCtFields)
	x.stale = true
	x.acts = append(x.acts, flow.CTClear{})
}

// covers reports whether every bit of m is set in w.
func (w *words) covers(m *words) bool {
	for i := range w {
		if m[i]&^w[i] != 0 {
			return false
		}
	}
	return true
}

// readField returns the big-endian bytes of a field of the current packet
// (or register). Bits of the packet read this way join the mask.
func (x *xlate) readField(id openflow.FieldKey) []byte {
	pw := x.packet()
	if f := nxFields[id]; f != nil {
		m := f.words()
		x.need(&m)
		return f.readNX(pw)
	}
	fl, ok := openflow.BasicOf(id)
	if !ok {
		return nil // refused at FLOW_MOD
	}
	m := fieldMask(fl)
	x.need(&m)
	return basicValue(&x.cur, pw[metaWord], fl)
}

// writeBits sets bits [ofs, ofs+nbits) of a field to the low bits of v
// (big-endian, any length): a register, the metadata, or a packet field
// (then as set_field would, with the field's other bits kept).
func (x *xlate) writeBits(dst fieldRange, v []byte) {
	pw := x.packet()
	if f := nxFields[dst.field]; f != nil {
		if f.key {
			return // ct_* are read-only outside ct(exec(...)): refused at FLOW_MOD
		}
		old := f.readNX(pw)
		f.placeNX(&x.curW, setBits(old, dst.ofs, dst.nbits, v))
		return
	}
	fl, ok := openflow.BasicOf(dst.field)
	if !ok {
		return // refused at FLOW_MOD
	}
	if fl == openflow.FieldMetadata {
		var m uint64 = ^uint64(0)
		if dst.nbits < 64 {
			m = (1<<dst.nbits - 1) << dst.ofs
		}
		x.curW[metaWord] = x.curW[metaWord]&^m | bitsValue(v, 0, dst.nbits)<<dst.ofs&m
		return
	}
	old := basicValue(&x.cur, pw[metaWord], fl)
	if dst.nbits < len(old)*8 {
		// Bits of the field that stay come from the packet.
		m := fieldMask(fl)
		x.need(&m)
	}
	x.setField(openflow.OXM{Class: openflow.ClassOpenFlowBasic, Field: fl, Value: setBits(old, dst.ofs, dst.nbits, v)})
}

// move copies bits of one field into another (NXAST_REG_MOVE).
func (x *xlate) move(src, dst fieldRange) {
	v := x.readField(src.field)
	x.writeBits(dst, shiftDown(v, src.ofs, src.nbits))
}

// bitsValue returns bits [ofs, ofs+nbits) of big-endian b (nbits <= 64).
func bitsValue(b []byte, ofs, nbits int) uint64 {
	var v uint64
	for i := 0; i < nbits && i < 64; i++ {
		if bit(b, ofs+i) {
			v |= 1 << i
		}
	}
	return v
}

// shiftDown returns bits [ofs, ofs+nbits) of b as a big-endian value.
func shiftDown(b []byte, ofs, nbits int) []byte {
	out := make([]byte, (nbits+7)/8)
	for i := 0; i < nbits; i++ {
		if bit(b, ofs+i) {
			out[len(out)-1-i/8] |= 1 << (i % 8)
		}
	}
	return out
}

// setBits returns old with bits [ofs, ofs+nbits) replaced by the low bits
// of big-endian v.
func setBits(old []byte, ofs, nbits int, v []byte) []byte {
	out := append([]byte(nil), old...)
	for i := 0; i < nbits; i++ {
		j := ofs + i
		byteIdx := len(out) - 1 - j/8
		if byteIdx < 0 {
			break
		}
		if bit(v, i) {
			out[byteIdx] |= 1 << (j % 8)
		} else {
			out[byteIdx] &^= 1 << (j % 8)
		}
	}
	return out
}

// bit is bit i (0 = least significant) of big-endian b.
func bit(b []byte, i int) bool {
	idx := len(b) - 1 - i/8
	return idx >= 0 && b[idx]>>(i%8)&1 != 0
}

// basicValue returns an OpenFlow basic field of key k as big-endian bytes.
func basicValue(k *flow.Key, meta uint64, f openflow.Field) []byte {
	u := func(v uint64, n int) []byte {
		b := make([]byte, 8)
		binary.BigEndian.PutUint64(b, v)
		return b[8-n:]
	}
	switch f {
	case openflow.FieldInPort:
		return u(uint64(k.InPort), 4)
	case openflow.FieldMetadata:
		return u(meta, 8)
	case openflow.FieldEthDst:
		return append([]byte(nil), k.EthDst[:]...)
	case openflow.FieldEthSrc:
		return append([]byte(nil), k.EthSrc[:]...)
	case openflow.FieldEthType:
		return u(uint64(k.EthType), 2)
	case openflow.FieldVLANVID:
		return u(uint64(k.VlanTCI&0x1fff), 2)
	case openflow.FieldVLANPCP:
		return u(uint64(k.VlanTCI>>13), 1)
	case openflow.FieldIPDSCP:
		return u(uint64(k.NwTOS>>2), 1)
	case openflow.FieldIPECN:
		return u(uint64(k.NwTOS&3), 1)
	case openflow.FieldIPProto, openflow.FieldARPOp:
		if f == openflow.FieldARPOp {
			return u(uint64(k.NwProto), 2)
		}
		return u(uint64(k.NwProto), 1)
	case openflow.FieldIPv4Src, openflow.FieldARPSPA:
		return append([]byte(nil), k.IPSrc[:4]...)
	case openflow.FieldIPv4Dst, openflow.FieldARPTPA:
		return append([]byte(nil), k.IPDst[:4]...)
	case openflow.FieldIPv6Src:
		return append([]byte(nil), k.IPSrc[:]...)
	case openflow.FieldIPv6Dst:
		return append([]byte(nil), k.IPDst[:]...)
	case openflow.FieldTCPSrc, openflow.FieldUDPSrc, openflow.FieldSCTPSrc:
		return u(uint64(k.TpSrc), 2)
	case openflow.FieldTCPDst, openflow.FieldUDPDst, openflow.FieldSCTPDst:
		return u(uint64(k.TpDst), 2)
	case openflow.FieldICMPv4Type, openflow.FieldICMPv6Type:
		return u(uint64(k.TpSrc), 1)
	case openflow.FieldICMPv4Code, openflow.FieldICMPv6Code:
		return u(uint64(k.TpDst), 1)
	case openflow.FieldARPSHA, openflow.FieldIPv6NDSLL:
		return append([]byte(nil), k.ArpSHA[:]...)
	case openflow.FieldARPTHA, openflow.FieldIPv6NDTLL:
		return append([]byte(nil), k.ArpTHA[:]...)
	case openflow.FieldIPv6NDTarget:
		return append([]byte(nil), k.NDTarget[:]...)
	case openflow.FieldTunnelID:
		return u(uint64(k.TunID), 8)
	case openflow.FieldIPv6FLabel:
		return u(uint64(k.IPv6Label), 4)
	}
	return make([]byte, f.Len())
}

// subfield converts the codec's bit range.
func subfield(s openflow.Subfield) fieldRange {
	return fieldRange{field: s.Field, ofs: int(s.Ofs), nbits: int(s.NBits)}
}

// ctSpecOf reads an NXAST_CT action: its flags, zone, table, the nat and
// the ct_mark / ct_label writes nested in exec(...).
func ctSpecOf(a openflow.ActionNXCT) *ctSpec {
	c := &ctSpec{commit: a.Flags&openflow.NXCTFlagCommit != 0, force: a.Flags&openflow.NXCTFlagForce != 0,
		zone: a.Zone, table: -1}
	if a.Table != openflow.NXCTRecircNone {
		c.table = int(a.Table)
	}
	if a.ZoneSrc != nil {
		r := subfield(*a.ZoneSrc)
		c.zoneSrc = &r
	}
	for _, n := range a.Actions {
		switch n := n.(type) {
		case openflow.ActionNXNAT:
			c.nat = natOf(n)
		case openflow.ActionSetField:
			c.setCT(n.Field.Key(), 0, 0, n.Field.Value, n.Field.Mask)
		case openflow.ActionNXRegLoad2:
			c.setCT(n.Field.Key(), 0, 0, n.Field.Value, n.Field.Mask)
		case openflow.ActionNXRegLoad:
			v := binary.BigEndian.AppendUint64(nil, n.Value)
			c.setCT(n.Dst.Field, int(n.Dst.Ofs), int(n.Dst.NBits), v, nil)
		}
	}
	return c
}

// setCT records a write to ct_mark or ct_label inside ct(exec(...)):
// either a whole value under an optional mask, or (nbits > 0) the low
// bits of v into bits [ofs, ofs+nbits).
func (c *ctSpec) setCT(k openflow.FieldKey, ofs, nbits int, v, mask []byte) {
	width := 4
	if k.Field == openflow.NXMCtLabel {
		width = 16
	}
	val := make([]byte, width)
	msk := make([]byte, width)
	if nbits > 0 {
		val = setBits(val, ofs, nbits, v)
		msk = setBits(msk, ofs, nbits, allOnes(8))
	} else {
		copy(val[width-min(width, len(v)):], v)
		if mask == nil {
			mask = allOnes(width)
		}
		copy(msk[width-min(width, len(mask)):], mask)
	}
	switch k.Field {
	case openflow.NXMCtMark:
		m := binary.BigEndian.Uint32(msk)
		c.mark = c.mark&^m | binary.BigEndian.Uint32(val)&m
		c.markMask |= m
	case openflow.NXMCtLabel:
		for i := range c.label {
			c.label[i] = c.label[i]&^msk[i] | val[i]&msk[i]
			c.labelMask[i] |= msk[i]
		}
	}
}

// natOf converts nat(...) to the datapath's form.
func natOf(n openflow.ActionNXNAT) *flow.NAT {
	nat := &flow.NAT{AddrMin: n.AddrMin, AddrMax: n.AddrMax, PortMin: n.PortMin, PortMax: n.PortMax}
	switch {
	case n.Flags&openflow.NXNATFlagSrc != 0:
		nat.Kind = flow.NATSrc
	case n.Flags&openflow.NXNATFlagDst != 0:
		nat.Kind = flow.NATDst
	}
	if !nat.AddrMax.IsValid() {
		nat.AddrMax = nat.AddrMin
	}
	if nat.PortMax == 0 {
		nat.PortMax = nat.PortMin
	}
	if n.Flags&openflow.NXNATFlagPersistent != 0 {
		nat.Flags |= flow.NATPersistent
	}
	if n.Flags&openflow.NXNATFlagProtoHash != 0 {
		nat.Flags |= flow.NATHash
	}
	if n.Flags&openflow.NXNATFlagProtoRandom != 0 {
		nat.Flags |= flow.NATRandom
	}
	return nat
}

// load sets a field, or the bits of it under a mask (set_field with a
// mask, NXAST_REG_LOAD2): registers, metadata or a packet field.
func (x *xlate) load(o openflow.OXM) {
	k := o.Key()
	if f := nxFields[k]; f != nil {
		if f.key {
			return // ct_mark / ct_label: only inside ct(exec(...)), refused elsewhere
		}
		old := f.readNX(x.packet())
		f.placeNX(&x.curW, maskedMerge(old, o.Value, o.Mask))
		return
	}
	fl, ok := openflow.BasicOf(k)
	if !ok {
		return
	}
	if fl == openflow.FieldMetadata {
		v := binary.BigEndian.Uint64(maskedMerge(make([]byte, 8), o.Value, allOnes(8)))
		m := ^uint64(0)
		if o.Mask != nil {
			m = binary.BigEndian.Uint64(maskedMerge(make([]byte, 8), o.Mask, allOnes(8)))
		}
		x.curW[metaWord] = x.curW[metaWord]&^m | v&m
		return
	}
	if o.Mask == nil {
		x.setField(openflow.OXM{Class: openflow.ClassOpenFlowBasic, Field: fl, Value: o.Value})
		return
	}
	old := basicValue(&x.cur, x.packet()[metaWord], fl)
	m := fieldMask(fl)
	x.need(&m) // the bits outside the mask come from the packet
	x.setField(openflow.OXM{Class: openflow.ClassOpenFlowBasic, Field: fl, Value: maskedMerge(old, o.Value, o.Mask)})
}

// maskedMerge returns old with the bits of v under mask (all when mask is
// nil); v and mask are right-aligned to old's length.
func maskedMerge(old, v, mask []byte) []byte {
	out := append([]byte(nil), old...)
	n := len(out)
	for i := 0; i < n; i++ {
		var vb, mb byte = 0, 0xff
		if j := len(v) - n + i; j >= 0 && j < len(v) {
			vb = v[j]
		}
		if mask != nil {
			mb = 0
			if j := len(mask) - n + i; j >= 0 && j < len(mask) {
				mb = mask[j]
			}
		}
		out[i] = out[i]&^mb | vb&mb
	}
	return out
}
