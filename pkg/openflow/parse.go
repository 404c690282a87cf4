package openflow

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// A parser for the ovs-ofctl flow syntax, for nagarectl and tests:
//
//	table=0,priority=100,in_port=1,tcp,nw_src=10.0.0.0/8,tp_dst=80,actions=set_field:00:11:22:33:44:55->eth_dst,dec_ttl,output:2
//
// It produces the OXM fields in the order ovs-ofctl encodes them, so that
// ParseFlow of an ovs-ofctl command line marshals to the same bytes.

// ParseFlow parses an ovs-ofctl flow ("add-flow" syntax) into a FLOW_MOD
// with command FlowAdd. Unset fields take ovs-ofctl's defaults: table 0,
// priority 32768, no buffer, out_port ANY, out_group ANY.
func ParseFlow(s string) (*FlowMod, error) {
	fm := &FlowMod{Command: FlowAdd, Priority: defaultPriority, BufferID: NoBuffer, OutPort: PortAny, OutGroup: GroupAny}
	matchPart, actPart, hasActions := cutActions(s)
	var matchTokens []string
	for _, tok := range splitTop(matchPart) {
		k, v, _ := strings.Cut(tok, "=")
		var err error
		switch k {
		case "table":
			var n uint64
			n, err = parseUint(v, 8)
			fm.TableID = uint8(n)
		case "priority":
			var n uint64
			n, err = parseUint(v, 16)
			fm.Priority = uint16(n)
		case "cookie":
			c, m, hasMask := strings.Cut(v, "/")
			if fm.Cookie, err = parseUint(c, 64); err == nil && hasMask {
				fm.CookieMask, err = parseUint(m, 64)
			}
		case "idle_timeout", "hard_timeout":
			var n uint64
			n, err = parseUint(v, 16)
			if k == "idle_timeout" {
				fm.IdleTimeout = uint16(n)
			} else {
				fm.HardTimeout = uint16(n)
			}
		case "out_port":
			fm.OutPort, err = parsePort(v)
		case "out_group":
			var n uint64
			n, err = parseUint(v, 32)
			fm.OutGroup = uint32(n)
		case "send_flow_rem":
			fm.Flags |= FlowFlagSendFlowRem
		case "check_overlap":
			fm.Flags |= FlowFlagCheckOverlap
		case "reset_counts":
			fm.Flags |= FlowFlagResetCounts
		case "no_packet_counts":
			fm.Flags |= FlowFlagNoPktCounts
		case "no_byte_counts":
			fm.Flags |= FlowFlagNoBytCounts
		default:
			matchTokens = append(matchTokens, tok)
		}
		if err != nil {
			return nil, fmt.Errorf("openflow: %s: %w", tok, err)
		}
	}
	m, err := parseMatchTokens(matchTokens)
	if err != nil {
		return nil, err
	}
	fm.Match = m
	if hasActions {
		if fm.Instructions, err = ParseInstructions(actPart); err != nil {
			return nil, err
		}
	}
	return fm, nil
}

// cutActions splits "match,actions=..." (or "match actions=...").
func cutActions(s string) (match, actions string, ok bool) {
	s = strings.TrimSpace(s)
	i := strings.Index(s, "actions=")
	if i < 0 {
		return s, "", false
	}
	return strings.TrimRight(s[:i], ", \t"), s[i+len("actions="):], true
}

// splitTop splits on commas (and blanks) outside parentheses.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) {
			switch s[i] {
			case '(':
				depth++
				continue
			case ')':
				depth--
				continue
			case ',', ' ', '\t':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
		}
		if tok := strings.TrimSpace(s[start:i]); tok != "" {
			out = append(out, tok)
		}
		start = i + 1
	}
	return out
}

// ParseMatch parses the match part of an ovs-ofctl flow, e.g.
// "tcp,in_port=1,nw_src=10.0.0.0/8,tp_dst=80".
func ParseMatch(s string) (Match, error) { return parseMatchTokens(splitTop(s)) }

// shorthands maps ovs-ofctl protocol keywords to eth_type and ip_proto.
var shorthands = map[string][2]uint64{
	"ip": {0x0800, 0}, "ipv4": {0x0800, 0}, "icmp": {0x0800, 1}, "tcp": {0x0800, 6}, "udp": {0x0800, 17},
	"sctp": {0x0800, 132}, "ipv6": {0x86dd, 0}, "icmp6": {0x86dd, 58}, "tcp6": {0x86dd, 6},
	"udp6": {0x86dd, 17}, "sctp6": {0x86dd, 132}, "arp": {0x0806, 0}, "rarp": {0x8035, 0},
	"mpls": {0x8847, 0}, "mplsm": {0x8848, 0},
}

// fieldAliases maps every accepted field name to its basic field. tp_*
// and icmp_* depend on the protocol and are resolved later.
var fieldAliases = map[string]Field{
	"in_port": FieldInPort, "in_phy_port": FieldInPhyPort, "metadata": FieldMetadata,
	"dl_dst": FieldEthDst, "eth_dst": FieldEthDst, "dl_src": FieldEthSrc, "eth_src": FieldEthSrc,
	"dl_type": FieldEthType, "eth_type": FieldEthType, "vlan_vid": FieldVLANVID,
	"dl_vlan_pcp": FieldVLANPCP, "vlan_pcp": FieldVLANPCP, "ip_dscp": FieldIPDSCP,
	"nw_ecn": FieldIPECN, "ip_ecn": FieldIPECN, "nw_proto": FieldIPProto, "ip_proto": FieldIPProto,
	"nw_src": FieldIPv4Src, "ip_src": FieldIPv4Src, "ipv4_src": FieldIPv4Src,
	"nw_dst": FieldIPv4Dst, "ip_dst": FieldIPv4Dst, "ipv4_dst": FieldIPv4Dst,
	"tcp_src": FieldTCPSrc, "tcp_dst": FieldTCPDst, "udp_src": FieldUDPSrc, "udp_dst": FieldUDPDst,
	"sctp_src": FieldSCTPSrc, "sctp_dst": FieldSCTPDst, "icmpv4_type": FieldICMPv4Type,
	"icmpv4_code": FieldICMPv4Code, "arp_op": FieldARPOp, "arp_spa": FieldARPSPA, "arp_tpa": FieldARPTPA,
	"arp_sha": FieldARPSHA, "arp_tha": FieldARPTHA, "ipv6_src": FieldIPv6Src, "ipv6_dst": FieldIPv6Dst,
	"ipv6_label": FieldIPv6FLabel, "ipv6_flabel": FieldIPv6FLabel, "icmpv6_type": FieldICMPv6Type,
	"icmpv6_code": FieldICMPv6Code, "nd_target": FieldIPv6NDTarget, "nd_sll": FieldIPv6NDSLL,
	"nd_tll": FieldIPv6NDTLL, "mpls_label": FieldMPLSLabel, "mpls_tc": FieldMPLSTC, "mpls_bos": FieldMPLSBOS,
	"pbb_isid": FieldPBBISID, "tun_id": FieldTunnelID, "tunnel_id": FieldTunnelID, "ipv6_exthdr": FieldIPv6ExtHdr,
}

// encodeOrder is the order ovs-ofctl puts OXMs on the wire.
var encodeOrder = []Field{
	FieldInPort, FieldInPhyPort, FieldEthSrc, FieldEthDst, FieldEthType, FieldVLANVID, FieldVLANPCP,
	FieldMPLSTC, FieldMPLSBOS, FieldMPLSLabel,
	FieldIPv4Src, FieldIPv4Dst, FieldIPv6Src, FieldIPv6Dst, FieldIPDSCP, FieldIPECN, FieldIPv6FLabel,
	FieldIPProto, FieldTCPSrc, FieldTCPDst, FieldUDPSrc, FieldUDPDst, FieldSCTPSrc, FieldSCTPDst,
	FieldICMPv4Type, FieldICMPv4Code, FieldICMPv6Type, FieldICMPv6Code,
	FieldIPv6NDTarget, FieldIPv6NDSLL, FieldIPv6NDTLL,
	FieldARPOp, FieldARPSPA, FieldARPTPA, FieldARPSHA, FieldARPTHA,
	FieldTunnelID, FieldMetadata, FieldPBBISID, FieldIPv6ExtHdr,
}

func parseMatchTokens(tokens []string) (Match, error) {
	var fields [numFields]*OXM
	nx := map[FieldKey]OXM{} // Nicira fields (nxparse.go)
	set := func(f Field, o OXM) error {
		if fields[f] != nil {
			return fmt.Errorf("openflow: %s given twice", f)
		}
		fields[f] = &o
		return nil
	}
	var deferred [][2]string // tp_src/tp_dst/icmp_type/icmp_code
	for _, tok := range tokens {
		k, v, hasValue := strings.Cut(tok, "=")
		if sh, ok := shorthands[k]; ok && !hasValue {
			if err := set(FieldEthType, Uint(FieldEthType, sh[0])); err != nil {
				return Match{}, err
			}
			if sh[1] != 0 {
				if err := set(FieldIPProto, Uint(FieldIPProto, sh[1])); err != nil {
					return Match{}, err
				}
			}
			continue
		}
		if !hasValue {
			return Match{}, fmt.Errorf("openflow: unknown keyword %q", tok)
		}
		var o OXM
		var err error
		switch k {
		case "tp_src", "tp_dst", "icmp_type", "icmp_code":
			deferred = append(deferred, [2]string{k, v})
			continue
		case "dl_vlan":
			var n uint64
			if n, err = parseUint(v, 12); err == nil {
				o = Uint(FieldVLANVID, uint64(VIDPresent)|n)
			}
		case "vlan_tci":
			var val, mask uint64
			if val, mask, err = parseMasked(v, 16); err == nil {
				o = UintMasked(FieldVLANVID, val&0x1fff, mask&0x1fff)
				if mask&0x1fff == 0x1fff {
					o = Uint(FieldVLANVID, val&0x1fff)
				}
				if mask&0xe000 == 0xe000 && val&uint64(VIDPresent) != 0 {
					if err = set(FieldVLANPCP, Uint(FieldVLANPCP, val>>13)); err != nil {
						return Match{}, err
					}
				}
			}
		case "nw_tos":
			var n uint64
			if n, err = parseUint(v, 8); err == nil {
				o = Uint(FieldIPDSCP, n>>2)
			}
		default:
			f, ok := fieldAliases[k]
			if !ok {
				os, isNX, err := parseNXMatch(k, v)
				if !isNX {
					return Match{}, fmt.Errorf("openflow: unknown match field %q", k)
				}
				if err != nil {
					return Match{}, fmt.Errorf("openflow: %s: %w", tok, err)
				}
				for _, o := range os {
					if _, dup := nx[o.Key()]; dup {
						return Match{}, fmt.Errorf("openflow: %s given twice", o.Key())
					}
					nx[o.Key()] = o
				}
				continue
			}
			if o, err = parseFieldValue(f, v, true); err != nil {
				return Match{}, fmt.Errorf("openflow: %s: %w", tok, err)
			}
		}
		if err != nil {
			return Match{}, fmt.Errorf("openflow: %s: %w", tok, err)
		}
		if err := set(o.Field, o); err != nil {
			return Match{}, err
		}
	}
	for _, d := range deferred {
		proto, et := uint64(0), uint64(0)
		if fields[FieldIPProto] != nil {
			proto = fields[FieldIPProto].Uint()
		}
		if fields[FieldEthType] != nil {
			et = fields[FieldEthType].Uint()
		}
		var f Field
		switch {
		case d[0] == "tp_src" || d[0] == "tp_dst":
			fs := map[uint64][2]Field{6: {FieldTCPSrc, FieldTCPDst}, 17: {FieldUDPSrc, FieldUDPDst},
				132: {FieldSCTPSrc, FieldSCTPDst}}[proto]
			if fs[0] == fs[1] {
				return Match{}, fmt.Errorf("openflow: %s needs tcp, udp or sctp", d[0])
			}
			f = fs[0]
			if d[0] == "tp_dst" {
				f = fs[1]
			}
		case et == 0x86dd:
			f = map[string]Field{"icmp_type": FieldICMPv6Type, "icmp_code": FieldICMPv6Code}[d[0]]
		default:
			f = map[string]Field{"icmp_type": FieldICMPv4Type, "icmp_code": FieldICMPv4Code}[d[0]]
		}
		o, err := parseFieldValue(f, d[1], true)
		if err != nil {
			return Match{}, fmt.Errorf("openflow: %s=%s: %w", d[0], d[1], err)
		}
		if err := set(f, o); err != nil {
			return Match{}, err
		}
	}
	var m Match
	addNX := func(f Field) {
		if o, ok := nx[FieldKey{ClassNXM1, f}]; ok {
			m.Fields = append(m.Fields, o)
		}
	}
	addNX(NXMConjID)
	for _, f := range encodeOrder {
		if f == FieldMetadata {
			// ovs-ofctl puts the registers and the conntrack fields
			// between tun_id and metadata.
			for i := 0; i < NumRegs; i++ {
				addNX(NXMReg0 + Field(i))
			}
			for _, f := range nxCtOrder {
				addNX(f)
			}
		}
		if fields[f] != nil {
			m.Fields = append(m.Fields, *fields[f])
		}
	}
	return m, nil
}

// parseFieldValue parses "value[/mask]" for field f in ovs-ofctl notation.
func parseFieldValue(f Field, v string, allowMask bool) (OXM, error) {
	val, mask, hasMask := strings.Cut(v, "/")
	if hasMask && !allowMask {
		return OXM{}, fmt.Errorf("mask not allowed")
	}
	switch f {
	case FieldEthDst, FieldEthSrc, FieldARPSHA, FieldARPTHA, FieldIPv6NDSLL, FieldIPv6NDTLL:
		hw, err := net.ParseMAC(val)
		if err != nil || len(hw) != 6 {
			return OXM{}, fmt.Errorf("bad MAC %q", val)
		}
		if !hasMask {
			return MAC(f, hw), nil
		}
		mhw, err := net.ParseMAC(mask)
		if err != nil || len(mhw) != 6 {
			return OXM{}, fmt.Errorf("bad MAC mask %q", mask)
		}
		return MACMasked(f, hw, mhw), nil
	case FieldIPv4Src, FieldIPv4Dst, FieldARPSPA, FieldARPTPA, FieldIPv6Src, FieldIPv6Dst, FieldIPv6NDTarget:
		a, err := netip.ParseAddr(val)
		if err != nil || a.BitLen() != 8*f.Len() {
			return OXM{}, fmt.Errorf("bad address %q", val)
		}
		if !hasMask {
			return Addr(f, a), nil
		}
		if bits, err := strconv.Atoi(mask); err == nil {
			p, err := a.Prefix(bits)
			if err != nil {
				return OXM{}, err
			}
			return Prefix(f, p), nil
		}
		ma, err := netip.ParseAddr(mask)
		if err != nil || ma.BitLen() != a.BitLen() {
			return OXM{}, fmt.Errorf("bad mask %q", mask)
		}
		return BasicMasked(f, a.AsSlice(), ma.AsSlice()), nil
	case FieldInPort, FieldInPhyPort:
		p, err := parsePort(val)
		return Uint(f, uint64(p)), err
	}
	if f.Len() == 0 || f.Len() > 8 {
		return OXM{}, fmt.Errorf("cannot parse %s", f)
	}
	n, err := parseUint(val, 8*f.Len())
	if err != nil {
		return OXM{}, err
	}
	if !hasMask {
		return Uint(f, n), nil
	}
	m, err := parseUint(mask, 8*f.Len())
	if err != nil {
		return OXM{}, err
	}
	return UintMasked(f, n, m), nil
}

func parseMasked(v string, bits int) (val, mask uint64, err error) {
	a, b, hasMask := strings.Cut(v, "/")
	if val, err = parseUint(a, bits); err != nil {
		return 0, 0, err
	}
	mask = 1<<bits - 1
	if hasMask {
		mask, err = parseUint(b, bits)
	}
	return val, mask, err
}

func parseUint(s string, bits int) (uint64, error) {
	return strconv.ParseUint(s, 0, bits)
}

// parsePort parses a port number or a reserved name (LOCAL, CONTROLLER, ...).
func parsePort(s string) (uint32, error) {
	for p, name := range portNames {
		if strings.EqualFold(s, name) {
			return p, nil
		}
	}
	n, err := parseUint(s, 32)
	return uint32(n), err
}

// ParseInstructions parses the part after "actions=": apply-actions
// inline, plus write_actions(...), clear_actions, write_metadata:V[/M],
// goto_table:N and meter:N. Instructions are returned in the order
// ovs-ofctl encodes them (meter, apply, clear, write, metadata, goto).
func ParseInstructions(s string) (Instructions, error) {
	var (
		meter    *InstMeter
		apply    Actions
		clear    bool
		write    *InstWriteActions
		metadata *InstWriteMetadata
		gotoTbl  *InstGotoTable
		applied  bool
	)
	for _, tok := range splitTop(s) {
		k, v, _ := strings.Cut(tok, ":")
		switch {
		case tok == "drop":
		case tok == "clear_actions":
			clear = true
		case strings.HasPrefix(tok, "write_actions(") && strings.HasSuffix(tok, ")"):
			as, err := ParseActions(tok[len("write_actions(") : len(tok)-1])
			if err != nil {
				return nil, err
			}
			write = &InstWriteActions{Actions: as}
		case k == "write_metadata":
			val, mask, err := parseMasked(v, 64)
			if err != nil {
				return nil, fmt.Errorf("openflow: %s: %w", tok, err)
			}
			metadata = &InstWriteMetadata{Metadata: val, Mask: mask}
		case k == "goto_table":
			n, err := parseUint(v, 8)
			if err != nil {
				return nil, fmt.Errorf("openflow: %s: %w", tok, err)
			}
			gotoTbl = &InstGotoTable{TableID: uint8(n)}
		case k == "meter":
			n, err := parseUint(v, 32)
			if err != nil {
				return nil, fmt.Errorf("openflow: %s: %w", tok, err)
			}
			meter = &InstMeter{MeterID: uint32(n)}
		default:
			as, err := parseActionToken(tok)
			if err != nil {
				return nil, err
			}
			apply = append(apply, as...)
			applied = true
		}
	}
	var is Instructions
	if meter != nil {
		is = append(is, *meter)
	}
	if applied {
		is = append(is, InstApplyActions{Actions: apply})
	}
	if clear {
		is = append(is, InstClearActions{})
	}
	if write != nil {
		is = append(is, *write)
	}
	if metadata != nil {
		is = append(is, *metadata)
	}
	if gotoTbl != nil {
		is = append(is, *gotoTbl)
	}
	return is, nil
}

// ParseActions parses a comma-separated ovs-ofctl action list.
func ParseActions(s string) (Actions, error) {
	var as Actions
	for _, tok := range splitTop(s) {
		if tok == "drop" {
			continue
		}
		a, err := parseActionToken(tok)
		if err != nil {
			return nil, err
		}
		as = append(as, a...)
	}
	return as, nil
}

// cutAction splits "name:arg" or "name(arg)", whichever delimiter comes
// first (ct(...) and nat(...) hold colons inside).
func cutAction(tok string) (k, v string, hasArg bool) {
	i, j := strings.IndexByte(tok, ':'), strings.IndexByte(tok, '(')
	if j > 0 && (i < 0 || j < i) && strings.HasSuffix(tok, ")") {
		return tok[:j], tok[j+1 : len(tok)-1], true
	}
	return strings.Cut(tok, ":")
}

// parseActionToken parses one action token, which may stand for several
// actions on the wire (load of more than 64 bits, masked set_field).
func parseActionToken(tok string) ([]Action, error) {
	k, v, hasArg := cutAction(tok)
	as, isNX, err := parseNXActionText(strings.ToLower(k), v, tok, hasArg)
	if err != nil {
		return nil, fmt.Errorf("openflow: %s: %w", tok, err)
	}
	if isNX {
		// Refuse here what the switch would refuse while decoding (a ct
		// zone from other than 16 bits, a conjunction clause out of
		// range...), as ovs-ofctl refuses it while parsing.
		for _, a := range as {
			b, err := a.MarshalBinary()
			if err == nil {
				_, _, err = ParseAction(b)
			}
			if err != nil {
				return nil, fmt.Errorf("openflow: %s: %w", tok, err)
			}
		}
		return as, nil
	}
	a, err := parseAction(tok)
	if err != nil {
		return nil, err
	}
	return []Action{a}, nil
}

func parseAction(tok string) (Action, error) {
	k, v, hasArg := cutAction(tok)
	num := func(bits int) (uint64, error) { return parseUint(v, bits) }
	var a Action
	var err error
	switch strings.ToLower(k) {
	case "output":
		var p uint32
		p, err = parsePort(v)
		a = ActionOutput{Port: p}
		if p == PortController {
			a = ActionOutput{Port: p, MaxLen: ControllerNoBuffer}
		}
	case "controller":
		maxLen := uint64(ControllerNoBuffer)
		if hasArg {
			maxLen, err = num(16)
		}
		a = ActionOutput{Port: PortController, MaxLen: uint16(maxLen)}
	case "in_port", "table", "normal", "flood", "all", "local":
		p, _ := parsePort(k)
		a = ActionOutput{Port: p}
	case "dec_ttl":
		a = ActionDecNWTTL{}
	case "mod_nw_ttl", "set_nw_ttl":
		var n uint64
		n, err = num(8)
		a = ActionSetNWTTL{TTL: uint8(n)}
	case "set_queue":
		var n uint64
		n, err = num(32)
		a = ActionSetQueue{QueueID: uint32(n)}
	case "group":
		var n uint64
		n, err = num(32)
		a = ActionGroup{GroupID: uint32(n)}
	case "push_vlan":
		var n uint64
		n, err = num(16)
		a = ActionPushVLAN{EtherType: uint16(n)}
	case "pop_vlan", "strip_vlan":
		a = ActionPopVLAN{}
	case "push_mpls":
		var n uint64
		n, err = num(16)
		a = ActionPushMPLS{EtherType: uint16(n)}
	case "pop_mpls":
		var n uint64
		n, err = num(16)
		a = ActionPopMPLS{EtherType: uint16(n)}
	case "set_mpls_ttl":
		var n uint64
		n, err = num(8)
		a = ActionSetMPLSTTL{TTL: uint8(n)}
	case "dec_mpls_ttl":
		a = ActionDecMPLSTTL{}
	case "copy_ttl_in":
		a = ActionCopyTTLIn{}
	case "copy_ttl_out":
		a = ActionCopyTTLOut{}
	case "push_pbb":
		n := uint64(0x88e7)
		if hasArg {
			n, err = num(16)
		}
		a = ActionPushPBB{EtherType: uint16(n)}
	case "pop_pbb":
		a = ActionPopPBB{}
	case "set_field":
		val, name, ok := strings.Cut(v, "->")
		if !ok {
			return nil, fmt.Errorf("openflow: %s: want set_field:value->field", tok)
		}
		f, ok := setFieldByName(name)
		if !ok {
			return nil, fmt.Errorf("openflow: %s: unknown field %q", tok, name)
		}
		var o OXM
		o, err = parseFieldValue(f, val, false)
		a = ActionSetField{Field: o}
	default:
		if !hasArg {
			if p, perr := parseUint(k, 32); perr == nil {
				return ActionOutput{Port: uint32(p)}, nil
			}
		}
		return nil, fmt.Errorf("openflow: unknown action %q", tok)
	}
	if err != nil {
		return nil, fmt.Errorf("openflow: %s: %w", tok, err)
	}
	return a, nil
}

func setFieldByName(name string) (Field, bool) {
	for f, n := range setFieldName {
		if n == name {
			return f, true
		}
	}
	if f, ok := fieldAliases[name]; ok {
		return f, true
	}
	switch name {
	case "icmp_type":
		return FieldICMPv4Type, true
	case "icmp_code":
		return FieldICMPv4Code, true
	}
	return 0, false
}
