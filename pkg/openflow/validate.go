package openflow

import "fmt"

// Match validation: the checks of OpenFlow 1.3.5 section 7.2.3 that a
// switch must make before installing a flow, each mapped to the
// OFPET_BAD_MATCH code the spec names.

// prereq is one prerequisite: field f must be matched exactly to one of
// the values (or, for vlanPresent, vlan_vid must say a tag is present).
type prereq struct {
	f      Field
	values []uint64
}

var (
	ethIP      = prereq{FieldEthType, []uint64{0x0800, 0x86dd}}
	ethIPv4    = prereq{FieldEthType, []uint64{0x0800}}
	ethIPv6    = prereq{FieldEthType, []uint64{0x86dd}}
	ethARP     = prereq{FieldEthType, []uint64{0x0806}}
	ethMPLS    = prereq{FieldEthType, []uint64{0x8847, 0x8848}}
	ethPBB     = prereq{FieldEthType, []uint64{0x88e7}}
	protoTCP   = prereq{FieldIPProto, []uint64{6}}
	protoUDP   = prereq{FieldIPProto, []uint64{17}}
	protoSCTP  = prereq{FieldIPProto, []uint64{132}}
	protoICMP4 = prereq{FieldIPProto, []uint64{1}}
	protoICMP6 = prereq{FieldIPProto, []uint64{58}}
)

// prereqs lists, per field, every condition that must hold (all of them).
// ip_proto-dependent fields also need an IP eth_type, which the ip_proto
// field's own prerequisite enforces; for ICMP we also pin the IP version.
var prereqs = [numFields][]prereq{
	FieldIPDSCP:       {ethIP},
	FieldIPECN:        {ethIP},
	FieldIPProto:      {ethIP},
	FieldIPv4Src:      {ethIPv4},
	FieldIPv4Dst:      {ethIPv4},
	FieldTCPSrc:       {ethIP, protoTCP},
	FieldTCPDst:       {ethIP, protoTCP},
	FieldUDPSrc:       {ethIP, protoUDP},
	FieldUDPDst:       {ethIP, protoUDP},
	FieldSCTPSrc:      {ethIP, protoSCTP},
	FieldSCTPDst:      {ethIP, protoSCTP},
	FieldICMPv4Type:   {ethIPv4, protoICMP4},
	FieldICMPv4Code:   {ethIPv4, protoICMP4},
	FieldARPOp:        {ethARP},
	FieldARPSPA:       {ethARP},
	FieldARPTPA:       {ethARP},
	FieldARPSHA:       {ethARP},
	FieldARPTHA:       {ethARP},
	FieldIPv6Src:      {ethIPv6},
	FieldIPv6Dst:      {ethIPv6},
	FieldIPv6FLabel:   {ethIPv6},
	FieldICMPv6Type:   {ethIPv6, protoICMP6},
	FieldICMPv6Code:   {ethIPv6, protoICMP6},
	FieldIPv6NDTarget: {ethIPv6, protoICMP6, {FieldICMPv6Type, []uint64{135, 136}}},
	FieldIPv6NDSLL:    {ethIPv6, protoICMP6, {FieldICMPv6Type, []uint64{135}}},
	FieldIPv6NDTLL:    {ethIPv6, protoICMP6, {FieldICMPv6Type, []uint64{136}}},
	FieldMPLSLabel:    {ethMPLS},
	FieldMPLSTC:       {ethMPLS},
	FieldMPLSBOS:      {ethMPLS},
	FieldPBBISID:      {ethPBB},
	FieldIPv6ExtHdr:   {ethIPv6},
}

// Validate checks the match as a switch must before accepting it, and
// returns the first violation as an *Error:
//
//   - a field of another class (Nicira NXM, experimenter) or an unknown
//     basic field: OFPBMC_BAD_FIELD
//   - a value or mask of the wrong length: OFPBMC_BAD_LEN
//   - the same field twice: OFPBMC_DUP_FIELD
//   - a mask on a field the spec does not make maskable: OFPBMC_BAD_MASK
//   - value bits set where the mask is 0: OFPBMC_BAD_WILDCARDS
//   - a value out of the field's range (vlan_pcp > 7, ip_dscp > 63, in_port
//     0, a vlan_vid id without OFPVID_PRESENT, ...): OFPBMC_BAD_VALUE
//   - a prerequisite not matched exactly (tcp_dst without eth_type
//     0x0800/0x86dd and ip_proto 6, vlan_pcp without a tag, ...):
//     OFPBMC_BAD_PREREQ
//
// Prerequisites may appear anywhere in the list, as OVS accepts.
//
// Open vSwitch's fields of class NXM1 and PACKET_REGS (nxm.go) are
// checked the same way; in addition a register must not be matched twice
// under different names (reg0 and xreg0: OFPBMC_DUP_FIELD), ct_state must
// use only its eight known bits (OFPBMC_BAD_VALUE), and the conntrack
// tuple fields (ct_nw_*, ct_ipv6_*, ct_tp_*) need a ct_state that shows a
// valid connection (OFPBMC_BAD_PREREQ), as Open vSwitch decodes them.
func (m Match) Validate() error {
	seen := map[FieldKey]bool{}
	var regs uint32
	for _, o := range m.Fields {
		if err := validateOXM(o); err != nil {
			return err
		}
		if seen[o.Key()] {
			return bad(ErrTypeBadMatch, BadMatchDupField, "%s twice", oxmName(o))
		}
		seen[o.Key()] = true
		if lo, hi, ok := regSpan(o.Key()); ok {
			span := uint32(1)<<hi - uint32(1)<<lo
			if regs&span != 0 {
				return bad(ErrTypeBadMatch, BadMatchDupField, "%s overlaps a register matched before", oxmName(o))
			}
			regs |= span
		}
	}
	for _, o := range m.Fields {
		if o.Class != ClassOpenFlowBasic {
			if nxFields[o.Key()].ctValid && !m.ctValid() {
				return bad(ErrTypeBadMatch, BadMatchBadPrereq, "%s needs ct_state to show a valid connection", oxmName(o))
			}
			continue
		}
		if err := m.checkPrereqs(o.Field); err != nil {
			return err
		}
	}
	return nil
}

// oxmName names o for error messages.
func oxmName(o OXM) string {
	if n := FieldName(o.Key()); n != "" {
		return n
	}
	return fmt.Sprintf("oxm 0x%04x:%d", o.Class, o.Field)
}

func validateOXM(o OXM) error {
	if o.Class != ClassOpenFlowBasic {
		return validateNXOXM(o)
	}
	if int(o.Field) >= numFields {
		return bad(ErrTypeBadMatch, BadMatchBadField, "unknown basic field %d", o.Field)
	}
	fi := fieldInfos[o.Field]
	if len(o.Value) != fi.len || (o.Mask != nil && len(o.Mask) != fi.len) {
		return bad(ErrTypeBadMatch, BadMatchBadLen, "%s value of %d bytes, want %d", fi.name, len(o.Value), fi.len)
	}
	if o.Mask != nil {
		if !fi.maskable {
			return bad(ErrTypeBadMatch, BadMatchBadMask, "%s is not maskable", fi.name)
		}
		for i := range o.Value {
			if o.Value[i]&^o.Mask[i] != 0 {
				return bad(ErrTypeBadMatch, BadMatchBadWildcards, "%s value has bits outside its mask", fi.name)
			}
		}
	}
	if fi.len <= 8 {
		v := o.Uint()
		if fi.max != 0 && v > fi.max {
			return bad(ErrTypeBadMatch, BadMatchBadValue, "%s=%#x exceeds %#x", fi.name, v, fi.max)
		}
		switch o.Field {
		case FieldInPort, FieldInPhyPort:
			if !validInPort(uint32(v)) {
				return bad(ErrTypeBadMatch, BadMatchBadValue, "%s=%s", fi.name, PortName(uint32(v)))
			}
		case FieldVLANVID:
			// Without OFPVID_PRESENT the only meaningful exact value is
			// OFPVID_NONE (untagged); a VID without the bit is ambiguous.
			// A masked value (0x60/0xf0) matches the VID bits under
			// the mask whatever the bit, as in Open vSwitch: an
			// untagged packet's VID is 0.
			if o.Mask == nil && v&uint64(VIDPresent) == 0 && v&0xfff != 0 {
				return bad(ErrTypeBadMatch, BadMatchBadValue, "vlan_vid=%#x lacks OFPVID_PRESENT", v)
			}
		}
	}
	return nil
}

// validInPort reports whether p can be a packet's ingress port.
func validInPort(p uint32) bool {
	return (p > 0 && p <= PortMax) || p == PortLocal || p == PortController
}

// exact returns the value of f when the match pins it exactly.
func (m Match) exact(f Field) (uint64, bool) {
	o, ok := m.Get(f)
	if !ok || (o.Mask != nil && o.MaskUint() != (OXM{Value: o.Value}).MaskUint()) {
		return 0, false
	}
	return o.Uint(), true
}

// checkPrereqs returns OFPBMC_BAD_PREREQ unless every prerequisite of f holds.
func (m Match) checkPrereqs(f Field) error {
	if f == FieldInPhyPort {
		if _, ok := m.Get(FieldInPort); !ok {
			return bad(ErrTypeBadMatch, BadMatchBadPrereq, "in_phy_port needs in_port")
		}
		return nil
	}
	if f == FieldVLANPCP {
		if !m.vlanTagged() {
			return bad(ErrTypeBadMatch, BadMatchBadPrereq, "vlan_pcp needs vlan_vid != NONE")
		}
		return nil
	}
	if int(f) >= numFields {
		return nil
	}
	for _, p := range prereqs[f] {
		v, ok := m.exact(p.f)
		if !ok || !containsU64(p.values, v) {
			return bad(ErrTypeBadMatch, BadMatchBadPrereq, "%s needs %s", f, describePrereq(p))
		}
	}
	return nil
}

// vlanTagged reports whether the match only admits VLAN-tagged packets.
func (m Match) vlanTagged() bool {
	o, ok := m.Get(FieldVLANVID)
	return ok && len(o.Value) == 2 && o.Uint()&uint64(VIDPresent) != 0 && o.MaskUint()&uint64(VIDPresent) != 0
}

func containsU64(s []uint64, v uint64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func describePrereq(p prereq) string {
	s := p.f.String() + "="
	for i, v := range p.values {
		if i > 0 {
			s += "|"
		}
		if p.f == FieldEthType {
			s += fmt.Sprintf("0x%04x", v)
		} else {
			s += fmt.Sprint(v)
		}
	}
	return s
}
