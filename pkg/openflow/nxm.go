package openflow

import (
	"fmt"
	"net/netip"
	"strings"
)

// Open vSwitch's match fields outside the OpenFlow-basic class, as
// ovs-ofctl -O OpenFlow13 writes them (Nicira extensible match, NXM, in
// class ClassNXM1; the 64-bit packet registers in ClassPacketRegs). They
// travel in the same OXM TLV as the basic fields, so they decode into OXM
// with Class set; the constants below name their field numbers.
//
// What ovs-ofctl 3.1 sends in an OF1.3 match (captured in
// testdata/golden/nx_*.hex):
//
//   - reg0..reg15: NXM_NX_REG<n>, class 0x0001, field n, 4 bytes.
//   - xreg0..xreg7 and xxreg0..xxreg3 are *not* sent as themselves in a
//     match: ovs-ofctl splits them into the 32-bit NXM_NX_REG pieces
//     (xreg<i> = reg<2i>:reg<2i+1>, xxreg<i> = reg<4i>..reg<4i+3>, the
//     lower-numbered register holding the more significant bits), and
//     dump-flows prints them as regs. Other controllers may send
//     OXM_OF_PKT_REG<i> (class 0x8001, 8 bytes) or NXM_NX_XXREG<i>
//     (class 0x0001, field 111+i, 16 bytes); both decode and validate
//     here. In actions ovs-ofctl does use both: set_field:v->xreg1 is an
//     OXM_OF_PKT_REG1 set_field, set_field:v->xxreg1 an NXM_NX_XXREG1 one.
//   - ct_state 105, ct_zone 106, ct_mark 107, ct_label 108 (16 bytes),
//     ct_nw_proto 119, ct_nw_src 120, ct_nw_dst 121, ct_ipv6_src 122,
//     ct_ipv6_dst 123, ct_tp_src 124, ct_tp_dst 125, conj_id 37: class
//     0x0001. ct_state is always sent with a mask.
//   - tun_id and metadata: the OpenFlow-basic OXM_OF_TUNNEL_ID and
//     OXM_OF_METADATA (FieldTunnelID, FieldMetadata); NXM_NX_TUN_ID is
//     known here only to decode and name it.

// NXM field numbers in ClassNXM1 (NXM_NX_*).
const (
	NXMReg0      Field = 0 // NXM_NX_REG0; NXMReg0+n is reg<n>, n < 16
	NXMTunID     Field = 16
	NXMConjID    Field = 37
	NXMCtState   Field = 105
	NXMCtZone    Field = 106
	NXMCtMark    Field = 107
	NXMCtLabel   Field = 108
	NXMXXReg0    Field = 111 // NXM_NX_XXREG0; NXMXXReg0+n is xxreg<n>, n < 4
	NXMCtNWProto Field = 119
	NXMCtNWSrc   Field = 120
	NXMCtNWDst   Field = 121
	NXMCtIPv6Src Field = 122
	NXMCtIPv6Dst Field = 123
	NXMCtTPSrc   Field = 124
	NXMCtTPDst   Field = 125

	NumRegs   = 16 // reg0..reg15
	NumXRegs  = 8  // xreg0..xreg7, ClassPacketRegs fields 0..7
	NumXXRegs = 4  // xxreg0..xxreg3
)

// PktReg0 is OXM_OF_PKT_REG0 (xreg0) in ClassPacketRegs; PktReg0+n is xreg<n>.
const PktReg0 Field = 0

// ct_state bits (ovs-fields(7)).
const (
	CtStateNew  uint32 = 0x01
	CtStateEst  uint32 = 0x02
	CtStateRel  uint32 = 0x04
	CtStateRpl  uint32 = 0x08
	CtStateInv  uint32 = 0x10
	CtStateTrk  uint32 = 0x20
	CtStateSNAT uint32 = 0x40
	CtStateDNAT uint32 = 0x80
	// ctStateKnown is every bit above; any other is OFPBMC_BAD_VALUE.
	ctStateKnown uint32 = 0xff
)

var ctStateNames = []string{"new", "est", "rel", "rpl", "inv", "trk", "snat", "dnat"}

// FieldKey identifies a match field of any class.
type FieldKey struct {
	Class uint16
	Field Field
}

// Key returns o's class and field.
func (o OXM) Key() FieldKey { return FieldKey{o.Class, o.Field} }

// nxFieldInfo describes a field outside the basic class.
type nxFieldInfo struct {
	name     string // ovs-fields(7) name, as dump-flows prints it in a match
	nxm      string // NXM/OXM name, as move/load print it
	len      int
	maskable bool
	// matchable fields are accepted in a match; the NXM_OF_* aliases of
	// the basic fields are known only as move/load operands.
	matchable bool
	writable  bool // may be the destination of set_field, load or move
	ctValid   bool // prerequisite: the match shows a valid conntrack entry
	ctOnly    bool // writable only inside ct(exec(...))
	basic     Field
	hasBasic  bool // the field is basic field `basic` under another header
}

var nxFields = map[FieldKey]nxFieldInfo{}

func init() {
	for i := 0; i < NumRegs; i++ {
		nxFields[FieldKey{ClassNXM1, NXMReg0 + Field(i)}] = nxFieldInfo{name: fmt.Sprintf("reg%d", i),
			nxm: fmt.Sprintf("NXM_NX_REG%d", i), len: 4, maskable: true, matchable: true, writable: true}
	}
	for i := 0; i < NumXRegs; i++ {
		nxFields[FieldKey{ClassPacketRegs, PktReg0 + Field(i)}] = nxFieldInfo{name: fmt.Sprintf("xreg%d", i),
			nxm: fmt.Sprintf("OXM_OF_PKT_REG%d", i), len: 8, maskable: true, matchable: true, writable: true}
	}
	for i := 0; i < NumXXRegs; i++ {
		nxFields[FieldKey{ClassNXM1, NXMXXReg0 + Field(i)}] = nxFieldInfo{name: fmt.Sprintf("xxreg%d", i),
			nxm: fmt.Sprintf("NXM_NX_XXREG%d", i), len: 16, maskable: true, matchable: true, writable: true}
	}
	for _, x := range []struct {
		f     Field
		name  string
		nxm   string
		len   int
		flags string // m: maskable, w: writable, v: needs a valid ct entry, c: written only in ct()
	}{
		{NXMConjID, "conj_id", "NXM_NX_CONJ_ID", 4, ""},
		{NXMCtState, "ct_state", "NXM_NX_CT_STATE", 4, "m"},
		{NXMCtZone, "ct_zone", "NXM_NX_CT_ZONE", 2, ""},
		{NXMCtMark, "ct_mark", "NXM_NX_CT_MARK", 4, "mwc"},
		{NXMCtLabel, "ct_label", "NXM_NX_CT_LABEL", 16, "mwc"},
		{NXMCtNWProto, "ct_nw_proto", "NXM_NX_CT_NW_PROTO", 1, "v"},
		{NXMCtNWSrc, "ct_nw_src", "NXM_NX_CT_NW_SRC", 4, "mv"},
		{NXMCtNWDst, "ct_nw_dst", "NXM_NX_CT_NW_DST", 4, "mv"},
		{NXMCtIPv6Src, "ct_ipv6_src", "NXM_NX_CT_IPV6_SRC", 16, "mv"},
		{NXMCtIPv6Dst, "ct_ipv6_dst", "NXM_NX_CT_IPV6_DST", 16, "mv"},
		{NXMCtTPSrc, "ct_tp_src", "NXM_NX_CT_TP_SRC", 2, "mv"},
		{NXMCtTPDst, "ct_tp_dst", "NXM_NX_CT_TP_DST", 2, "mv"},
	} {
		nxFields[FieldKey{ClassNXM1, x.f}] = nxFieldInfo{name: x.name, nxm: x.nxm, len: x.len,
			maskable: strings.Contains(x.flags, "m"), matchable: true, writable: strings.Contains(x.flags, "w"),
			ctValid: strings.Contains(x.flags, "v"), ctOnly: strings.Contains(x.flags, "c")}
	}
	// NXM_OF_* (class 0) and NXM_NX_* aliases of basic fields: move and
	// load name fields this way. Only operands, not match fields here.
	for _, x := range []struct {
		class uint16
		f     Field
		nxm   string
		basic Field
	}{
		{ClassNXM0, 1, "NXM_OF_ETH_DST", FieldEthDst}, {ClassNXM0, 2, "NXM_OF_ETH_SRC", FieldEthSrc},
		{ClassNXM0, 3, "NXM_OF_ETH_TYPE", FieldEthType}, {ClassNXM0, 6, "NXM_OF_IP_PROTO", FieldIPProto},
		{ClassNXM0, 7, "NXM_OF_IP_SRC", FieldIPv4Src}, {ClassNXM0, 8, "NXM_OF_IP_DST", FieldIPv4Dst},
		{ClassNXM0, 9, "NXM_OF_TCP_SRC", FieldTCPSrc}, {ClassNXM0, 10, "NXM_OF_TCP_DST", FieldTCPDst},
		{ClassNXM0, 11, "NXM_OF_UDP_SRC", FieldUDPSrc}, {ClassNXM0, 12, "NXM_OF_UDP_DST", FieldUDPDst},
		{ClassNXM0, 13, "NXM_OF_ICMP_TYPE", FieldICMPv4Type}, {ClassNXM0, 14, "NXM_OF_ICMP_CODE", FieldICMPv4Code},
		{ClassNXM0, 15, "NXM_OF_ARP_OP", FieldARPOp}, {ClassNXM0, 16, "NXM_OF_ARP_SPA", FieldARPSPA},
		{ClassNXM0, 17, "NXM_OF_ARP_TPA", FieldARPTPA},
		{ClassNXM1, 17, "NXM_NX_ARP_SHA", FieldARPSHA}, {ClassNXM1, 18, "NXM_NX_ARP_THA", FieldARPTHA},
		{ClassNXM1, 19, "NXM_NX_IPV6_SRC", FieldIPv6Src}, {ClassNXM1, 20, "NXM_NX_IPV6_DST", FieldIPv6Dst},
		{ClassNXM1, 21, "NXM_NX_ICMPV6_TYPE", FieldICMPv6Type}, {ClassNXM1, 22, "NXM_NX_ICMPV6_CODE", FieldICMPv6Code},
		{ClassNXM1, 23, "NXM_NX_ND_TARGET", FieldIPv6NDTarget}, {ClassNXM1, 24, "NXM_NX_ND_SLL", FieldIPv6NDSLL},
		{ClassNXM1, 25, "NXM_NX_ND_TLL", FieldIPv6NDTLL}, {ClassNXM1, 27, "NXM_NX_IPV6_LABEL", FieldIPv6FLabel},
		{ClassNXM1, 28, "NXM_NX_IP_ECN", FieldIPECN},
	} {
		fi := fieldInfos[x.basic]
		nxFields[FieldKey{x.class, x.f}] = nxFieldInfo{name: fi.name, nxm: x.nxm, len: fi.len, maskable: fi.maskable,
			writable: basicWritable(x.basic), basic: x.basic, hasBasic: true}
	}
	for _, v := range nxFields {
		if v.hasBasic {
			basicNXMName[v.basic] = v.nxm
		}
	}
	nxFields[FieldKey{ClassNXM1, NXMTunID}] = nxFieldInfo{name: "tun_id", nxm: "NXM_NX_TUN_ID", len: 8, maskable: true,
		writable: true, basic: FieldTunnelID, hasBasic: true}
	// Open vSwitch's in_port is the 16-bit NXM_OF_IN_PORT (OpenFlow 1.0
	// numbering), not the 32-bit OXM in_port; move and load name it so.
	nxFields[FieldKey{ClassNXM0, 0}] = nxFieldInfo{name: "in_port", nxm: "NXM_OF_IN_PORT", len: 2, writable: true}
	basicNXMName[FieldTunnelID] = "NXM_NX_TUN_ID"
	initNXMNames()
}

// basicNXMName is the name move/load print for a basic field: its NXM
// alias where Open vSwitch has one, else OXM_OF_<NAME>.
var basicNXMName = map[Field]string{}

// basicWritable reports whether Open vSwitch lets set_field, load or move
// write basic field f.
func basicWritable(f Field) bool {
	switch f {
	case FieldInPhyPort, FieldEthType, FieldIPProto, FieldMPLSBOS, FieldIPv6ExtHdr:
		return false
	}
	return int(f) < numFields
}

// nxInfo returns the description of a non-basic field.
func nxInfo(k FieldKey) (nxFieldInfo, bool) {
	fi, ok := nxFields[k]
	return fi, ok
}

// fieldBits is the width in bits, where Open vSwitch's is less than the
// field's bytes, of the basic fields move and load can address.
var fieldBits = map[Field]int{
	FieldIPDSCP: 6, FieldIPECN: 2, FieldVLANVID: 13, FieldVLANPCP: 3, FieldMPLSLabel: 20, FieldMPLSTC: 3,
	FieldMPLSBOS: 1, FieldIPv6FLabel: 20, FieldIPv6ExtHdr: 9,
}

// fieldWidth returns the width in bits of a known field of any class, as
// move and load address it (ip_ecn is 2 bits in its 1-byte value).
func fieldWidth(k FieldKey) (int, bool) {
	n, ok := fieldBytes(k)
	if !ok {
		return 0, false
	}
	f, basic := k.Field, k.Class == ClassOpenFlowBasic
	if fi, ok := nxFields[k]; ok && fi.hasBasic {
		f, basic = fi.basic, true
	}
	if b, ok := fieldBits[f]; ok && basic {
		return b, true
	}
	return 8 * n, true
}

// fieldBytes returns the value length in bytes of a known field.
func fieldBytes(k FieldKey) (int, bool) {
	if k.Class == ClassOpenFlowBasic {
		if int(k.Field) < numFields {
			return fieldInfos[k.Field].len, true
		}
		return 0, false
	}
	if fi, ok := nxFields[k]; ok {
		return fi.len, true
	}
	return 0, false
}

// FieldName returns the ovs-fields(7) name of a field of any class
// ("reg3", "ct_state", "eth_dst"), or "" when unknown.
func FieldName(k FieldKey) string {
	if k.Class == ClassOpenFlowBasic {
		if int(k.Field) < numFields {
			return fieldInfos[k.Field].name
		}
		return ""
	}
	return nxFields[k].name
}

// nxmName is the name move and load print, e.g. "NXM_NX_REG0".
func nxmName(k FieldKey) string {
	if k.Class == ClassOpenFlowBasic {
		if n, ok := basicNXMName[k.Field]; ok {
			return n
		}
		if int(k.Field) < numFields {
			return "OXM_OF_" + strings.ToUpper(fieldInfos[k.Field].name)
		}
	}
	if fi, ok := nxFields[k]; ok {
		return fi.nxm
	}
	return fmt.Sprintf("field_0x%04x_%d", k.Class, k.Field)
}

// NX returns an exact-match OXM of class ClassNXM1 (NXM_NX_*).
func NX(f Field, value []byte) OXM { return OXM{Class: ClassNXM1, Field: f, Value: value} }

// NXMasked returns a masked OXM of class ClassNXM1.
func NXMasked(f Field, value, mask []byte) OXM {
	return OXM{Class: ClassNXM1, Field: f, Value: value, Mask: mask}
}

// NXUint returns an exact NXM_NX field whose value is v over the field's
// length (fields up to 8 bytes).
func NXUint(f Field, v uint64) OXM {
	return NX(f, putUint(v, nxFields[FieldKey{ClassNXM1, f}].len))
}

// NXUintMasked is NXUint with a mask.
func NXUintMasked(f Field, v, mask uint64) OXM {
	n := nxFields[FieldKey{ClassNXM1, f}].len
	return NXMasked(f, putUint(v, n), putUint(mask, n))
}

// Reg returns the match reg<i>=v (NXM_NX_REG<i>).
func Reg(i int, v uint32) OXM { return NXUint(NXMReg0+Field(i), uint64(v)) }

// RegMasked returns the match reg<i>=v/mask.
func RegMasked(i int, v, mask uint32) OXM {
	return NXUintMasked(NXMReg0+Field(i), uint64(v), uint64(mask))
}

// XReg returns the OXM_OF_PKT_REG<i> (xreg<i>) field with value v.
func XReg(i int, v uint64) OXM {
	return OXM{Class: ClassPacketRegs, Field: PktReg0 + Field(i), Value: putUint(v, 8)}
}

// CtState returns the match ct_state=bits/mask as ovs-ofctl sends it
// ("+trk+est-new" is bits CtStateTrk|CtStateEst, mask that plus CtStateNew).
func CtState(bits, mask uint32) OXM {
	return NXUintMasked(NXMCtState, uint64(bits), uint64(mask))
}

// NXAddr returns an NXM_NX field holding address a (ct_nw_src, ct_ipv6_dst...).
func NXAddr(f Field, a netip.Addr) OXM { return NX(f, a.AsSlice()) }

// NXPrefix returns the NXM_NX address field matching prefix p.
func NXPrefix(f Field, p netip.Prefix) OXM {
	o := Prefix(FieldIPv4Src, p)
	o.Class, o.Field = ClassNXM1, f
	return o
}

// validateNXOXM is validateOXM for the fields of other classes.
func validateNXOXM(o OXM) error {
	fi, ok := nxFields[o.Key()]
	if !ok || !fi.matchable || o.Class == ClassExperimenter {
		if o.Class == ClassExperimenter {
			return bad(ErrTypeBadMatch, BadMatchBadField, "experimenter 0x%08x oxm field %d", o.Experimenter, o.Field)
		}
		return bad(ErrTypeBadMatch, BadMatchBadField, "oxm class 0x%04x field %d", o.Class, o.Field)
	}
	if len(o.Value) != fi.len || (o.Mask != nil && len(o.Mask) != fi.len) {
		return bad(ErrTypeBadMatch, BadMatchBadLen, "%s value of %d bytes, want %d", fi.name, len(o.Value), fi.len)
	}
	if o.Mask != nil {
		if !fi.maskable {
			return bad(ErrTypeBadMatch, BadMatchBadMask, "%s is not maskable", fi.name)
		}
		if !withinMask(o.Value, o.Mask) {
			return bad(ErrTypeBadMatch, BadMatchBadWildcards, "%s value has bits outside its mask", fi.name)
		}
	}
	if o.Key() == (FieldKey{ClassNXM1, NXMCtState}) && uint32(o.Uint())&^ctStateKnown != 0 {
		return bad(ErrTypeBadMatch, BadMatchBadValue, "ct_state=%#x has unknown bits", o.Uint())
	}
	return nil
}

// regSpan returns the 32-bit registers (reg<n>) a register field covers:
// reg<i> is [i,i+1), xreg<i> [2i,2i+2), xxreg<i> [4i,4i+4).
func regSpan(k FieldKey) (lo, hi int, ok bool) {
	switch {
	case k.Class == ClassNXM1 && k.Field < NXMReg0+NumRegs:
		return int(k.Field), int(k.Field) + 1, true
	case k.Class == ClassPacketRegs && k.Field < PktReg0+NumXRegs:
		return 2 * int(k.Field), 2*int(k.Field) + 2, true
	case k.Class == ClassNXM1 && k.Field >= NXMXXReg0 && k.Field < NXMXXReg0+NumXXRegs:
		i := int(k.Field - NXMXXReg0)
		return 4 * i, 4*i + 4, true
	}
	return 0, 0, false
}

// ctValid reports whether the match admits only packets with a valid
// conntrack entry, the prerequisite Open vSwitch sets for the ct_nw_*,
// ct_ipv6_* and ct_tp_* fields: ct_state matches one of
// +new/+est/+rel/+rpl/+snat/+dnat, or +trk together with -inv.
func (m Match) ctValid() bool {
	o, ok := m.getKey(FieldKey{ClassNXM1, NXMCtState})
	if !ok || len(o.Value) != 4 {
		return false
	}
	v, mask := uint32(o.Uint()), uint32(o.MaskUint())
	v &= mask
	if v&(CtStateNew|CtStateEst|CtStateRel|CtStateRpl|CtStateSNAT|CtStateDNAT) != 0 {
		return true
	}
	return v&CtStateTrk != 0 && mask&CtStateInv != 0 && v&CtStateInv == 0
}

// getKey returns the first OXM of the given class and field.
func (m Match) getKey(k FieldKey) (OXM, bool) {
	for _, o := range m.Fields {
		if o.Key() == k {
			return o, true
		}
	}
	return OXM{}, false
}

// Lookup returns the first OXM of any class with the given key, e.g.
// m.Lookup(FieldKey{ClassNXM1, NXMCtState}).
func (m Match) Lookup(k FieldKey) (OXM, bool) { return m.getKey(k) }

// NonBasic returns the match's fields of classes other than OpenFlow-basic.
func (m Match) NonBasic() []OXM {
	var out []OXM
	for _, o := range m.Fields {
		if o.Class != ClassOpenFlowBasic {
			out = append(out, o)
		}
	}
	return out
}

// formatCtState prints ct_state as ovs-ofctl does: "+est+trk-new" style
// (bits in order, + for 1 and - for 0 under the mask), or "est|trk" when
// the mask covers every known bit.
func formatCtState(v, mask uint32, exact bool) string {
	var b strings.Builder
	if exact {
		if v == 0 {
			return "0"
		}
		for i, n := range ctStateNames {
			if v&(1<<i) != 0 {
				if b.Len() > 0 {
					b.WriteByte('|')
				}
				b.WriteString(n)
			}
		}
		if rest := v &^ ctStateKnown; rest != 0 {
			if b.Len() > 0 {
				b.WriteByte('|')
			}
			fmt.Fprintf(&b, "0x%x", rest)
		}
		return b.String()
	}
	for i, n := range ctStateNames {
		if mask&(1<<i) == 0 {
			continue
		}
		if v&(1<<i) != 0 {
			b.WriteString("+" + n)
		} else {
			b.WriteString("-" + n)
		}
	}
	if rest := mask &^ ctStateKnown; rest != 0 {
		fmt.Fprintf(&b, "+0x%x/0x%x", v&rest, rest)
	}
	return b.String()
}

// cHex formats v as C's "%#x" does: "0" for zero, "0x1f" otherwise.
func cHex(v uint64) string {
	if v == 0 {
		return "0"
	}
	return fmt.Sprintf("%#x", v)
}

// hexBytes prints a big-endian value of any length as 0x<hex> without
// leading zeros ("0" for zero), as OVS prints ct_label.
func hexBytes(b []byte) string {
	i := 0
	for i < len(b) && b[i] == 0 {
		i++
	}
	if i == len(b) {
		return "0"
	}
	s := fmt.Sprintf("%x", b[i:])
	return "0x" + strings.TrimLeft(s, "0")
}

// formatNXMatch returns the ovs-ofctl text of the match's non-basic fields
// in two groups, as Open vSwitch's match_format orders them: before the
// eth_type shorthand (conj_id and the conntrack fields) and after it
// (registers, in reg<n> pieces).
func formatNXMatch(m Match) (before, after []string) {
	get := func(f Field) (OXM, bool) {
		o, ok := m.getKey(FieldKey{ClassNXM1, f})
		if !ok {
			return o, false
		}
		fi := nxFields[o.Key()]
		return o, len(o.Value) == fi.len && (o.Mask == nil || len(o.Mask) == fi.len)
	}
	if o, ok := get(NXMConjID); ok {
		before = append(before, fmt.Sprintf("conj_id=%d", o.Uint()))
	}
	if o, ok := get(NXMCtState); ok {
		// With every known bit under the mask (ovs-ofctl's "trk|est" sends
		// mask 0xff) Open vSwitch prints the flags joined by '|'.
		before = append(before, "ct_state="+formatCtState(uint32(o.Uint()), uint32(o.MaskUint()), uint32(o.MaskUint())&ctStateKnown == ctStateKnown))
	}
	if o, ok := get(NXMCtZone); ok {
		if o.Mask == nil || allOnes(o.Mask) {
			before = append(before, fmt.Sprintf("ct_zone=%d", o.Uint()))
		} else {
			before = append(before, "ct_zone="+cHex(o.Uint())+"/"+cHex(o.MaskUint()))
		}
	}
	if o, ok := get(NXMCtMark); ok {
		before = append(before, "ct_mark="+uintMasked(o))
	}
	if o, ok := get(NXMCtLabel); ok {
		s := "ct_label=" + hexBytes(o.Value)
		if o.Mask != nil && !allOnes(o.Mask) {
			s += "/" + hexBytes(o.Mask)
		}
		before = append(before, s)
	}
	for _, x := range []struct {
		f    Field
		name string
	}{{NXMCtNWSrc, "ct_nw_src"}, {NXMCtNWDst, "ct_nw_dst"}, {NXMCtIPv6Src, "ct_ipv6_src"}, {NXMCtIPv6Dst, "ct_ipv6_dst"}} {
		if o, ok := get(x.f); ok {
			before = append(before, x.name+"="+formatAddrMasked(o))
		}
	}
	if o, ok := get(NXMCtNWProto); ok {
		before = append(before, fmt.Sprintf("ct_nw_proto=%d", o.Uint()))
	}
	for _, x := range []struct {
		f    Field
		name string
	}{{NXMCtTPSrc, "ct_tp_src"}, {NXMCtTPDst, "ct_tp_dst"}} {
		if o, ok := get(x.f); ok {
			if o.Mask == nil || allOnes(o.Mask) {
				before = append(before, fmt.Sprintf("%s=%d", x.name, o.Uint()))
			} else {
				before = append(before, x.name+"="+cHex(o.Uint())+"/"+cHex(o.MaskUint()))
			}
		}
	}
	// Registers: Open vSwitch keeps 32-bit regs and prints those, however
	// the controller named them (reg, xreg or xxreg).
	var val, mask [NumRegs]uint32
	var set [NumRegs]bool
	for _, o := range m.Fields {
		lo, hi, ok := regSpan(o.Key())
		if !ok || len(o.Value) != 4*(hi-lo) || (o.Mask != nil && len(o.Mask) != len(o.Value)) {
			continue
		}
		for r := lo; r < hi; r++ {
			i := 4 * (r - lo)
			v := uint32(getUint(o.Value[i : i+4]))
			mk := ^uint32(0)
			if o.Mask != nil {
				mk = uint32(getUint(o.Mask[i : i+4]))
			}
			val[r], mask[r], set[r] = val[r]|v&mk, mask[r]|mk, true
		}
	}
	for r := 0; r < NumRegs; r++ {
		if !set[r] || mask[r] == 0 {
			continue
		}
		s := fmt.Sprintf("reg%d=%s", r, cHex(uint64(val[r])))
		if mask[r] != ^uint32(0) {
			s += "/" + cHex(uint64(mask[r]))
		}
		after = append(after, s)
	}
	return before, after
}

// uintMasked prints a 32-bit field as OVS's format_uint32_masked.
func uintMasked(o OXM) string {
	if o.Mask == nil || allOnes(o.Mask) {
		return cHex(o.Uint())
	}
	return cHex(o.Uint()) + "/" + cHex(o.MaskUint())
}

// formatAddrMasked prints an address with an optional mask, as a prefix
// when the mask is one.
func formatAddrMasked(o OXM) string {
	a := o.Addr()
	if o.Mask == nil || allOnes(o.Mask) {
		return a.String()
	}
	if bits, ok := prefixLen(o.Mask); ok && withinMask(o.Value, o.Mask) {
		return netip.PrefixFrom(a, bits).String()
	}
	return a.String() + "/" + OXM{Value: o.Mask}.Addr().String()
}

// knownNX reports whether o is a well-formed field formatNXMatch prints.
func knownNX(o OXM) bool {
	fi, ok := nxFields[o.Key()]
	return ok && fi.matchable && len(o.Value) == fi.len && (o.Mask == nil || len(o.Mask) == fi.len)
}

// String returns the field's ovs-fields(7) name, or "oxm(0xCLASS:FIELD)"
// for a field this package does not know.
func (k FieldKey) String() string {
	if n := FieldName(k); n != "" {
		return n
	}
	return fmt.Sprintf("oxm(0x%04x:%d)", k.Class, k.Field)
}

// BasicOf returns the OpenFlow-basic field a field key names: the field
// itself for the basic class, or the basic field behind an NXM alias
// (NXM_OF_IP_DST is ipv4_dst) that move and load use as operands.
func BasicOf(k FieldKey) (Field, bool) {
	if k.Class == ClassOpenFlowBasic {
		return k.Field, true
	}
	if fi, ok := nxFields[k]; ok && fi.hasBasic {
		return fi.basic, true
	}
	return 0, false
}
