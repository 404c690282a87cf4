package openflow

import (
	"fmt"
	"net/netip"
	"strings"
)

// ovs-ofctl style printing of matches and flows, for dump-flows and tests.

// ovsName is the ovs-ofctl field name used in matches and set_field.
var ovsName = [numFields]string{
	FieldInPort: "in_port", FieldInPhyPort: "in_phy_port", FieldMetadata: "metadata",
	FieldEthDst: "dl_dst", FieldEthSrc: "dl_src", FieldEthType: "dl_type",
	FieldVLANVID: "dl_vlan", FieldVLANPCP: "dl_vlan_pcp", FieldIPDSCP: "nw_tos",
	FieldIPECN: "nw_ecn", FieldIPProto: "nw_proto", FieldIPv4Src: "nw_src", FieldIPv4Dst: "nw_dst",
	FieldTCPSrc: "tp_src", FieldTCPDst: "tp_dst", FieldUDPSrc: "tp_src", FieldUDPDst: "tp_dst",
	FieldSCTPSrc: "tp_src", FieldSCTPDst: "tp_dst", FieldICMPv4Type: "icmp_type",
	FieldICMPv4Code: "icmp_code", FieldARPOp: "arp_op", FieldARPSPA: "arp_spa", FieldARPTPA: "arp_tpa",
	FieldARPSHA: "arp_sha", FieldARPTHA: "arp_tha", FieldIPv6Src: "ipv6_src", FieldIPv6Dst: "ipv6_dst",
	FieldIPv6FLabel: "ipv6_label", FieldICMPv6Type: "icmp_type", FieldICMPv6Code: "icmp_code",
	FieldIPv6NDTarget: "nd_target", FieldIPv6NDSLL: "nd_sll", FieldIPv6NDTLL: "nd_tll",
	FieldMPLSLabel: "mpls_label", FieldMPLSTC: "mpls_tc", FieldMPLSBOS: "mpls_bos",
	FieldPBBISID: "pbb_isid", FieldTunnelID: "tun_id", FieldIPv6ExtHdr: "ipv6_exthdr",
}

// setFieldName is the OVS field name in "set_field:v->name".
var setFieldName = map[Field]string{
	FieldEthDst: "eth_dst", FieldEthSrc: "eth_src", FieldEthType: "eth_type", FieldVLANVID: "vlan_vid",
	FieldVLANPCP: "vlan_pcp", FieldIPDSCP: "ip_dscp", FieldIPECN: "nw_ecn", FieldIPProto: "nw_proto",
	FieldIPv4Src: "ip_src", FieldIPv4Dst: "ip_dst", FieldTCPSrc: "tcp_src", FieldTCPDst: "tcp_dst",
	FieldUDPSrc: "udp_src", FieldUDPDst: "udp_dst", FieldSCTPSrc: "sctp_src", FieldSCTPDst: "sctp_dst",
	FieldICMPv4Type: "icmp_type", FieldICMPv4Code: "icmp_code", FieldICMPv6Type: "icmpv6_type",
	FieldICMPv6Code: "icmpv6_code", FieldIPv6FLabel: "ipv6_label",
}

// shorthand names for eth_type (and ip_proto) as ovs-ofctl prints them.
func shorthand(m Match) (name string, coversProto bool) {
	et, ok := m.exact(FieldEthType)
	if !ok {
		return "", false
	}
	proto, hasProto := m.exact(FieldIPProto)
	switch et {
	case 0x0800, 0x86dd:
		names := map[uint64]string{1: "icmp", 6: "tcp", 17: "udp", 132: "sctp"}
		suffix, base := "", "ip"
		if et == 0x86dd {
			names[1], names[58] = "", "icmp6"
			suffix, base = "6", "ipv6"
		}
		if n := names[proto]; hasProto && n != "" {
			if n != "icmp6" {
				n += suffix
			}
			return n, true
		}
		return base, false
	case 0x0806:
		return "arp", false
	case 0x8035:
		return "rarp", false
	case 0x8847:
		return "mpls", false
	case 0x8848:
		return "mplsm", false
	}
	return "", false
}

// printOrder is the order in which ovs-ofctl prints match fields.
var printOrder = []Field{
	FieldTunnelID, FieldMetadata, FieldInPort, FieldInPhyPort, FieldVLANVID, FieldVLANPCP,
	FieldEthSrc, FieldEthDst, FieldEthType, FieldIPv6Src, FieldIPv6Dst, FieldIPv6FLabel,
	FieldIPv4Src, FieldIPv4Dst, FieldARPSPA, FieldARPTPA, FieldIPProto, FieldARPOp, FieldARPSHA,
	FieldARPTHA, FieldIPDSCP, FieldIPECN, FieldMPLSLabel, FieldMPLSTC, FieldMPLSBOS,
	FieldTCPSrc, FieldUDPSrc, FieldSCTPSrc, FieldTCPDst, FieldUDPDst, FieldSCTPDst,
	FieldICMPv4Type, FieldICMPv6Type, FieldICMPv4Code, FieldICMPv6Code,
	FieldIPv6NDTarget, FieldIPv6NDSLL, FieldIPv6NDTLL, FieldPBBISID, FieldIPv6ExtHdr,
}

// String formats the match as ovs-ofctl does, e.g.
// "tcp,in_port=1,nw_src=10.0.0.0/8,tp_dst=80"; the empty match is "".
// Fields of other classes print as "oxm(class:field=value/mask)".
func (m Match) String() string {
	var out []string
	sh, coversProto := shorthand(m)
	before, after := formatNXMatch(m)
	out = append(out, before...)
	if sh != "" {
		out = append(out, sh)
	}
	out = append(out, after...)
	for _, f := range printOrder {
		o, ok := m.Get(f)
		if !ok || len(o.Value) != f.Len() || (o.Mask != nil && len(o.Mask) != len(o.Value)) {
			continue
		}
		if (f == FieldEthType && sh != "") || (f == FieldIPProto && coversProto) {
			continue
		}
		out = append(out, formatMatchField(m, o))
	}
	for _, o := range m.Fields {
		if o.Class == ClassOpenFlowBasic && int(o.Field) < numFields &&
			len(o.Value) == o.Field.Len() && (o.Mask == nil || len(o.Mask) == len(o.Value)) {
			continue
		}
		if knownNX(o) {
			continue
		}
		s := fmt.Sprintf("oxm(0x%04x:%d=%x", o.Class, o.Field, o.Value)
		if o.Mask != nil {
			s += fmt.Sprintf("/%x", o.Mask)
		}
		out = append(out, s+")")
	}
	return strings.Join(out, ",")
}

// formatMatchField prints one field; m gives the context ovs-ofctl's
// protocol-dependent names (tp_src, icmp_type) need, and fields whose
// context does not pin the protocol print under their own OXM name so
// that the text parses back to the same field.
func formatMatchField(m Match, o OXM) string {
	name := ovsName[o.Field]
	et, _ := m.exact(FieldEthType)
	proto, _ := m.exact(FieldIPProto)
	switch o.Field {
	case FieldVLANVID:
		// ovs-ofctl shows vlan_vid as the 802.1Q TCI it matches: an exact
		// VID with OFPVID_PRESENT is dl_vlan=N, anything else a masked TCI.
		v, mask := o.Uint(), o.MaskUint()
		if v > 0x1fff || mask&^0x1fff != 0 && mask != 0xffff {
			return "vlan_vid=" + formatOXMValue(o)
		}
		mask &= 0x1fff
		if mask == 0x1fff && v&uint64(VIDPresent) != 0 {
			return fmt.Sprintf("dl_vlan=%d", v&0xfff)
		}
		return fmt.Sprintf("vlan_tci=0x%04x/0x%04x", v, mask)
	case FieldIPDSCP:
		if o.Uint() > 63 {
			return fmt.Sprintf("ip_dscp=%d", o.Uint())
		}
		return fmt.Sprintf("nw_tos=%d", o.Uint()<<2)
	case FieldTCPSrc, FieldTCPDst, FieldUDPSrc, FieldUDPDst, FieldSCTPSrc, FieldSCTPDst:
		want := map[Field]uint64{FieldTCPSrc: 6, FieldTCPDst: 6, FieldUDPSrc: 17, FieldUDPDst: 17,
			FieldSCTPSrc: 132, FieldSCTPDst: 132}[o.Field]
		if proto != want {
			name = o.Field.String()
		}
	case FieldICMPv4Type, FieldICMPv4Code:
		if et == 0x86dd {
			name = o.Field.String()
		}
	case FieldICMPv6Type, FieldICMPv6Code:
		if et != 0x86dd {
			name = o.Field.String()
		}
	case FieldInPort, FieldInPhyPort:
		return name + "=" + PortName(uint32(o.Uint()))
	}
	return name + "=" + formatOXMValue(o)
}

// formatOXMValue formats the value (and mask) of a basic field the way
// ovs-ofctl does: addresses in their notation, prefixes as /len, metadata
// and tunnel ids in hex, the rest in decimal.
func formatOXMValue(o OXM) string {
	if o.Class != ClassOpenFlowBasic || int(o.Field) >= numFields || len(o.Value) != o.Field.Len() ||
		(o.Mask != nil && len(o.Mask) != len(o.Value)) {
		s := fmt.Sprintf("0x%x", o.Value)
		if o.Mask != nil {
			s += fmt.Sprintf("/0x%x", o.Mask)
		}
		return s
	}
	switch o.Field {
	case FieldEthDst, FieldEthSrc, FieldARPSHA, FieldARPTHA, FieldIPv6NDSLL, FieldIPv6NDTLL:
		s := o.HardwareAddr().String()
		if o.Mask != nil && !allOnes(o.Mask) {
			s += "/" + OXM{Value: o.Mask}.HardwareAddr().String()
		}
		return s
	case FieldIPv4Src, FieldIPv4Dst, FieldARPSPA, FieldARPTPA, FieldIPv6Src, FieldIPv6Dst, FieldIPv6NDTarget:
		a := o.Addr()
		if o.Mask == nil || allOnes(o.Mask) {
			return a.String()
		}
		if bits, ok := prefixLen(o.Mask); ok && withinMask(o.Value, o.Mask) {
			return netip.PrefixFrom(a, bits).String()
		}
		return a.String() + "/" + OXM{Value: o.Mask}.Addr().String()
	case FieldEthType:
		return fmt.Sprintf("0x%04x", o.Uint())
	case FieldMetadata, FieldTunnelID, FieldIPv6FLabel, FieldPBBISID, FieldIPv6ExtHdr:
		if o.Mask != nil && !allOnes(o.Mask) {
			return fmt.Sprintf("%#x/%#x", o.Uint(), o.MaskUint())
		}
		return fmt.Sprintf("%#x", o.Uint())
	}
	if o.Mask != nil && !allOnes(o.Mask) {
		return fmt.Sprintf("%d/%#x", o.Uint(), o.MaskUint())
	}
	return fmt.Sprint(o.Uint())
}

func allOnes(b []byte) bool {
	for _, c := range b {
		if c != 0xff {
			return false
		}
	}
	return true
}

// prefixLen returns n if mask is n leading one bits followed by zeros.
func prefixLen(mask []byte) (int, bool) {
	n, zero := 0, false
	for _, c := range mask {
		for i := 7; i >= 0; i-- {
			if c&(1<<i) != 0 {
				if zero {
					return 0, false
				}
				n++
			} else {
				zero = true
			}
		}
	}
	return n, true
}

// String formats the flow in ovs-ofctl add-flow syntax:
// "table=0,priority=100,<match>,actions=<instructions>".
func (m *FlowMod) String() string {
	parts := []string{fmt.Sprintf("table=%d", m.TableID)}
	if m.Cookie != 0 {
		parts = append(parts, fmt.Sprintf("cookie=%#x", m.Cookie))
	}
	if m.IdleTimeout != 0 {
		parts = append(parts, fmt.Sprintf("idle_timeout=%d", m.IdleTimeout))
	}
	if m.HardTimeout != 0 {
		parts = append(parts, fmt.Sprintf("hard_timeout=%d", m.HardTimeout))
	}
	parts = append(parts, fmt.Sprintf("priority=%d", m.Priority))
	if ms := m.Match.String(); ms != "" {
		parts = append(parts, ms)
	}
	return strings.Join(parts, ",") + ",actions=" + m.Instructions.String()
}

// defaultPriority is OFP_DEFAULT_PRIORITY, which ovs-ofctl does not print.
const defaultPriority = 0x8000

// String formats the entry exactly like one line of
// "ovs-ofctl --no-stats dump-flows" (without the leading space), e.g.
// "cookie=0x10, table=1, priority=5,in_port=1 actions=output:2".
func (s FlowStats) String() string {
	var b strings.Builder
	if s.Cookie != 0 {
		fmt.Fprintf(&b, "cookie=%#x, ", s.Cookie)
	}
	if s.TableID != 0 {
		fmt.Fprintf(&b, "table=%d, ", s.TableID)
	}
	if s.IdleTimeout != 0 {
		fmt.Fprintf(&b, "idle_timeout=%d, ", s.IdleTimeout)
	}
	if s.HardTimeout != 0 {
		fmt.Fprintf(&b, "hard_timeout=%d, ", s.HardTimeout)
	}
	for _, f := range []struct {
		bit  uint16
		name string
	}{{FlowFlagSendFlowRem, "send_flow_rem"}, {FlowFlagCheckOverlap, "check_overlap"},
		{FlowFlagResetCounts, "reset_counts"}, {FlowFlagNoPktCounts, "no_packet_counts"},
		{FlowFlagNoBytCounts, "no_byte_counts"}} {
		if s.Flags&f.bit != 0 {
			b.WriteString(f.name + " ")
		}
	}
	var ms []string
	if s.Priority != defaultPriority {
		ms = append(ms, fmt.Sprintf("priority=%d", s.Priority))
	}
	if m := s.Match.String(); m != "" {
		ms = append(ms, m)
	}
	b.WriteString(strings.Join(ms, ","))
	if b.Len() > 0 && !strings.HasSuffix(b.String(), " ") {
		b.WriteByte(' ')
	}
	return b.String() + "actions=" + s.Instructions.String()
}

// withinMask reports whether value has no bits set outside mask.
func withinMask(value, mask []byte) bool {
	for i := range value {
		if value[i]&^mask[i] != 0 {
			return false
		}
	}
	return true
}
