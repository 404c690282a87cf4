package flow

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Format prints key k under mask m in the style of Open vSwitch's
// dpctl/dump-flows: only the fields the mask touches, a /mask suffix when a
// field is matched partially. Bits outside the mask are not shown.
func Format(k Key, m Mask) string {
	k = k.And(m)
	var parts []string
	add := func(s string) { parts = append(parts, s) }
	num := func(name string, v, mv, full uint64, hex bool) string {
		f := "%d"
		if hex {
			f = "0x%x"
		}
		s := name + "=" + fmt.Sprintf(f, v)
		if mv != full {
			s += "/" + fmt.Sprintf("0x%x", mv)
		}
		return s
	}
	group := func(name string, fields []string) {
		if len(fields) > 0 {
			add(name + "(" + strings.Join(fields, ",") + ")")
		}
	}

	if m.RecircID != 0 {
		add(num("recirc_id", uint64(k.RecircID), uint64(m.RecircID), 0xffffffff, true))
	}
	if m.DpHash != 0 {
		add(num("dp_hash", uint64(k.DpHash), uint64(m.DpHash), 0xffffffff, true))
	}
	if m.InPort != 0 {
		add(num("in_port", uint64(k.InPort), uint64(m.InPort), 0xffffffff, false))
	}
	if m.CtState != 0 {
		add("ct_state(" + CtStateString(k.CtState, m.CtState) + ")")
	}
	if m.CtZone != 0 {
		add(num("ct_zone", uint64(k.CtZone), uint64(m.CtZone), 0xffff, false))
	}
	if m.CtMark != 0 {
		add(num("ct_mark", uint64(k.CtMark), uint64(m.CtMark), 0xffffffff, true))
	}
	if !zero(m.CtLabel[:]) {
		s := "ct_label=0x" + fmt.Sprintf("%x", k.CtLabel[:])
		if m.CtLabel != [16]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff} {
			s += fmt.Sprintf("/0x%x", m.CtLabel[:])
		}
		add(s)
	}
	var ct []string
	if m.CtNwSrc != [4]byte{} {
		ct = append(ct, "src="+addrMasked(k.CtNwSrc[:], m.CtNwSrc[:]))
	}
	if m.CtNwDst != [4]byte{} {
		ct = append(ct, "dst="+addrMasked(k.CtNwDst[:], m.CtNwDst[:]))
	}
	if m.CtNwProto != 0 {
		ct = append(ct, num("proto", uint64(k.CtNwProto), uint64(m.CtNwProto), 0xff, false))
	}
	if m.CtTpSrc != 0 {
		ct = append(ct, num("tp_src", uint64(k.CtTpSrc), uint64(m.CtTpSrc), 0xffff, false))
	}
	if m.CtTpDst != 0 {
		ct = append(ct, num("tp_dst", uint64(k.CtTpDst), uint64(m.CtTpDst), 0xffff, false))
	}
	group("ct_tuple4", ct)
	var tun []string
	if m.TunID != 0 {
		tun = append(tun, num("vni", uint64(k.TunID), uint64(m.TunID), 0xffffffff, false))
	}
	if m.TunSrc != [4]byte{} {
		tun = append(tun, "src="+addrMasked(k.TunSrc[:], m.TunSrc[:]))
	}
	if m.TunDst != [4]byte{} {
		tun = append(tun, "dst="+addrMasked(k.TunDst[:], m.TunDst[:]))
	}
	if m.TunTOS != 0 {
		tun = append(tun, num("tos", uint64(k.TunTOS), uint64(m.TunTOS), 0xff, true))
	}
	if m.TunTTL != 0 {
		tun = append(tun, num("ttl", uint64(k.TunTTL), uint64(m.TunTTL), 0xff, false))
	}
	if m.TunFlags != 0 {
		tun = append(tun, num("flags", uint64(k.TunFlags), uint64(m.TunFlags), 0xff, true))
	}
	group("tunnel", tun)

	var eth []string
	if m.EthSrc != [6]byte{} {
		eth = append(eth, "src="+macMasked(k.EthSrc, m.EthSrc))
	}
	if m.EthDst != [6]byte{} {
		eth = append(eth, "dst="+macMasked(k.EthDst, m.EthDst))
	}
	group("eth", eth)
	if m.VlanTCI != 0 {
		add(num("vlan_tci", uint64(k.VlanTCI), uint64(m.VlanTCI), 0xffff, true))
	}
	if m.EthType != 0 {
		add(num("eth_type", uint64(k.EthType), uint64(m.EthType), 0xffff, true))
	}

	var l3 []string
	name := "ipv4"
	isARP := k.EthType == 0x0806
	switch k.EthType {
	case 0x86dd:
		name = "ipv6"
	case 0x0806:
		name = "arp"
	}
	v6 := k.EthType == 0x86dd
	if k.EthType == 0x8847 || k.EthType == 0x8848 {
		// MPLS: the top label stack entry lives in IPSrc[0:4].
		if lse, ml := k.MPLSLSE(), m.MPLSLSE(); ml != 0 {
			var f []string
			for _, x := range LSEFields {
				if mv := ml >> x.Shift & x.Bits; mv != 0 {
					f = append(f, num(x.Name, uint64(lse>>x.Shift&x.Bits), uint64(mv), uint64(x.Bits), false))
				}
			}
			group("mpls", f)
		}
		if len(parts) == 0 {
			return "any"
		}
		return strings.Join(parts, ",")
	}
	if !zero(m.IPSrc[:]) {
		l3 = append(l3, choose(isARP, "sip=", "src=")+ipMasked(k.IPSrc[:], m.IPSrc[:], v6))
	}
	if !zero(m.IPDst[:]) {
		l3 = append(l3, choose(isARP, "tip=", "dst=")+ipMasked(k.IPDst[:], m.IPDst[:], v6))
	}
	if m.IPv6Label != 0 {
		l3 = append(l3, num("label", uint64(k.IPv6Label), uint64(m.IPv6Label), 0xfffff, true))
	}
	if m.NwProto != 0 {
		l3 = append(l3, num(choose(isARP, "op", "proto"), uint64(k.NwProto), uint64(m.NwProto), 0xff, false))
	}
	if m.NwTOS != 0 {
		l3 = append(l3, num("tos", uint64(k.NwTOS), uint64(m.NwTOS), 0xff, true))
	}
	if m.NwTTL != 0 {
		l3 = append(l3, num("ttl", uint64(k.NwTTL), uint64(m.NwTTL), 0xff, false))
	}
	if m.NwFrag != 0 {
		l3 = append(l3, "frag="+fragName(k.NwFrag, m.NwFrag))
	}
	if isARP && m.ArpSHA != [6]byte{} {
		l3 = append(l3, "sha="+macMasked(k.ArpSHA, m.ArpSHA))
	}
	if isARP && m.ArpTHA != [6]byte{} {
		l3 = append(l3, "tha="+macMasked(k.ArpTHA, m.ArpTHA))
	}
	group(name, l3)
	var nd []string
	if !zero(m.NDTarget[:]) {
		nd = append(nd, "target="+ipMasked(k.NDTarget[:], m.NDTarget[:], true))
	}
	if !isARP && m.ArpSHA != [6]byte{} {
		nd = append(nd, "sll="+macMasked(k.ArpSHA, m.ArpSHA))
	}
	if !isARP && m.ArpTHA != [6]byte{} {
		nd = append(nd, "tll="+macMasked(k.ArpTHA, m.ArpTHA))
	}

	var l4 []string
	l4name := "l4"
	switch k.NwProto {
	case 6:
		l4name = "tcp"
	case 17:
		l4name = "udp"
	case 132:
		l4name = "sctp"
	case 1:
		l4name = "icmp"
	case 58:
		l4name = "icmpv6"
	}
	icmp := l4name == "icmp" || l4name == "icmpv6"
	if m.TpSrc != 0 {
		l4 = append(l4, num(choose(icmp, "type", "src"), uint64(k.TpSrc), uint64(m.TpSrc), 0xffff, false))
	}
	if m.TpDst != 0 {
		l4 = append(l4, num(choose(icmp, "code", "dst"), uint64(k.TpDst), uint64(m.TpDst), 0xffff, false))
	}
	if !isARP {
		group(l4name, l4)
	}
	group("nd", nd)
	if m.TCPFlags != 0 {
		add(num("tcp_flags", uint64(k.TCPFlags), uint64(m.TCPFlags), 0xfff, true))
	}
	if len(parts) == 0 {
		return "any"
	}
	return strings.Join(parts, ",")
}

// CtStateNames are the ct_state bits by name, in Open vSwitch's order.
var CtStateNames = []struct {
	Name string
	Bit  uint8
}{{"new", CtNew}, {"est", CtEst}, {"rel", CtRel}, {"rpl", CtRpl}, {"inv", CtInv}, {"trk", CtTrk}, {"snat", CtSNAT}, {"dnat", CtDNAT}}

// CtStateString prints ct_state bits under mask as Open vSwitch does:
// +bit for a bit matched set, -bit for one matched clear.
func CtStateString(v, m uint8) string {
	var b strings.Builder
	for _, n := range CtStateNames {
		if m&n.Bit == 0 {
			continue
		}
		if v&n.Bit != 0 {
			b.WriteByte('+')
		} else {
			b.WriteByte('-')
		}
		b.WriteString(n.Name)
	}
	return b.String()
}

func choose(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}

func zero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

func fragName(v, m uint8) string {
	switch {
	case v&FragAny == 0:
		return "no"
	case m&FragLater == 0:
		return "yes"
	case v&FragLater != 0:
		return "later"
	}
	return "first"
}

func macMasked(v, m [6]byte) string {
	s := net.HardwareAddr(v[:]).String()
	if m != [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff} {
		s += "/" + net.HardwareAddr(m[:]).String()
	}
	return s
}

func addrMasked(v, m []byte) string {
	return ipMasked(v, m, false)
}

func ipMasked(v, m []byte, v6 bool) string {
	var a, ma netip.Addr
	if v6 {
		a, ma = netip.AddrFrom16([16]byte(v[:16])), netip.AddrFrom16([16]byte(m[:16]))
	} else {
		a, ma = netip.AddrFrom4([4]byte(v[:4])), netip.AddrFrom4([4]byte(m[:4]))
	}
	ones := prefixLen(ma.AsSlice())
	switch {
	case ones == ma.BitLen():
		return a.String()
	case ones >= 0:
		return fmt.Sprintf("%s/%d", a, ones)
	}
	return a.String() + "/" + ma.String()
}

// prefixLen returns the number of leading one bits of a contiguous mask, or
// -1 when the mask is not contiguous.
func prefixLen(m []byte) int {
	n := 0
	for n < len(m)*8 && m[n/8]&(0x80>>(n%8)) != 0 {
		n++
	}
	for i := n; i < len(m)*8; i++ {
		if m[i/8]&(0x80>>(i%8)) != 0 {
			return -1
		}
	}
	return n
}

// Present returns the mask of the fields of k that are not zero, field by
// field (for showing a packet description).
func Present(k Key) Mask {
	var m Mask
	ones := func(b []byte) {
		for i := range b {
			b[i] = 0xff
		}
	}
	set32 := func(v uint32, m *uint32) {
		if v != 0 {
			*m = ^uint32(0)
		}
	}
	set16 := func(v uint16, m *uint16) {
		if v != 0 {
			*m = ^uint16(0)
		}
	}
	set8 := func(v uint8, m *uint8) {
		if v != 0 {
			*m = ^uint8(0)
		}
	}
	set32(k.InPort, &m.InPort)
	set32(k.TunID, &m.TunID)
	set32(k.IPv6Label, &m.IPv6Label)
	set32(k.RecircID, &m.RecircID)
	set32(k.CtMark, &m.CtMark)
	set32(k.DpHash, &m.DpHash)
	set16(k.CtZone, &m.CtZone)
	set16(k.CtTpSrc, &m.CtTpSrc)
	set16(k.CtTpDst, &m.CtTpDst)
	set8(k.CtState, &m.CtState)
	set8(k.CtNwProto, &m.CtNwProto)
	set16(k.VlanTCI, &m.VlanTCI)
	set16(k.EthType, &m.EthType)
	set16(k.TpSrc, &m.TpSrc)
	set16(k.TpDst, &m.TpDst)
	set16(k.TCPFlags, &m.TCPFlags)
	set8(k.TunTOS, &m.TunTOS)
	set8(k.TunTTL, &m.TunTTL)
	set8(k.TunFlags, &m.TunFlags)
	set8(k.NwFrag, &m.NwFrag)
	set8(k.NwProto, &m.NwProto)
	set8(k.NwTOS, &m.NwTOS)
	set8(k.NwTTL, &m.NwTTL)
	for _, f := range []struct{ v, m []byte }{
		{k.TunSrc[:], m.TunSrc[:]}, {k.TunDst[:], m.TunDst[:]}, {k.EthSrc[:], m.EthSrc[:]}, {k.EthDst[:], m.EthDst[:]},
		{k.IPSrc[:], m.IPSrc[:]}, {k.IPDst[:], m.IPDst[:]}, {k.ArpSHA[:], m.ArpSHA[:]}, {k.ArpTHA[:], m.ArpTHA[:]},
		{k.NDTarget[:], m.NDTarget[:]}, {k.CtLabel[:], m.CtLabel[:]}, {k.CtNwSrc[:], m.CtNwSrc[:]}, {k.CtNwDst[:], m.CtNwDst[:]},
	} {
		if !zero(f.v) {
			ones(f.m)
		}
	}
	// An IPv4 address occupies only the first 4 bytes.
	if k.EthType == 0x0800 || k.EthType == 0x0806 || k.EthType == 0x8847 || k.EthType == 0x8848 {
		clear(m.IPSrc[4:])
		clear(m.IPDst[4:])
	}
	return m
}
