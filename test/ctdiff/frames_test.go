package ctdiff

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// pkt is a frame to send: either from an endpoint with the addresses
// given, or built from an earlier packet as it arrived (reply, quote), so
// that an answer goes from wherever that switch delivered the packet, to
// the addresses and ports that switch wrote (a DNAT's backend, a SNAT's
// port).
type pkt struct {
	proto    string // "tcp", "udp", "icmp"
	from     string // endpoint sending it (not for reply, quote)
	src, dst string // "ip:port" ("ip" for icmp)
	flags    string // TCP flags: letters of S, A, F, R, P
	seq, ack uint32
	// ICMP: type, code; echo id and sequence number.
	icmpType, icmpCode uint8
	icmpID, icmpSeq    uint16
	payload            string
	// reply > 0: answer packet #reply (1-based) as it arrived: sent from
	// the endpoint it arrived at, addresses and ports swapped.
	reply int
	// quote > 0: an ICMP error (icmpType, icmpCode) about packet #quote as
	// it arrived, from the endpoint it arrived at to its source, quoting
	// its IP header and all of its UDP/TCP/ICMP part.
	quote int
	// badCsum: the UDP/TCP checksum is made wrong after it was computed.
	badCsum bool
	// fragment > 0: the datagram is sent as IPv4 fragments carrying this
	// many payload bytes each (a multiple of 8).
	fragment int
}

// tcp is a TCP segment from endpoint `from`.
func tcp(from, src, dst, flags string, seq, ack uint32) pkt {
	return pkt{proto: "tcp", from: from, src: src, dst: dst, flags: flags, seq: seq, ack: ack}
}

// tcpReply answers packet #n with a TCP segment.
func tcpReply(n int, flags string, seq, ack uint32) pkt {
	return pkt{proto: "tcp", reply: n, flags: flags, seq: seq, ack: ack}
}

// udp is a UDP datagram from endpoint `from`.
func udp(from, src, dst, payload string) pkt {
	return pkt{proto: "udp", from: from, src: src, dst: dst, payload: payload}
}

// udpReply answers packet #n with a UDP datagram.
func udpReply(n int, payload string) pkt {
	return pkt{proto: "udp", reply: n, payload: payload}
}

// ping is an ICMP echo request from endpoint `from`.
func ping(from, src, dst string, id, seq uint16) pkt {
	return pkt{proto: "icmp", from: from, src: src, dst: dst, icmpType: 8, icmpID: id, icmpSeq: seq, payload: "ctdiff ping"}
}

// pong answers echo request #n.
func pong(n int) pkt { return pkt{proto: "icmp", reply: n, icmpType: 0, payload: "ctdiff ping"} }

// icmpError is an ICMP error about packet #n (e.g. 3/3, port unreachable).
func icmpError(n int, typ, code uint8) pkt {
	return pkt{proto: "icmp", quote: n, icmpType: typ, icmpCode: code}
}

// gatewayMAC is the destination MAC of frames to an address no endpoint
// has (a VIP, an external host behind the node).
const gatewayMAC = "02:00:00:00:00:fe"

// macOf is the MAC of the endpoint with address ip, else gatewayMAC.
func macOf(ip net.IP) net.HardwareAddr {
	for _, e := range endpoints {
		if net.ParseIP(e.ip).Equal(ip) || net.ParseIP(e.ip6).Equal(ip) {
			return mustMAC(e.mac)
		}
	}
	return mustMAC(gatewayMAC)
}

func endpointMAC(name string) net.HardwareAddr {
	for _, e := range endpoints {
		if e.name == name {
			return mustMAC(e.mac)
		}
	}
	panic("no endpoint " + name)
}

// splitHostPort reads "ip:port", "[ip6]:port", or an address alone.
func splitHostPort(s string) (net.IP, uint16, error) {
	host, port := s, "0"
	if h, p, err := net.SplitHostPort(s); err == nil {
		host, port = h, p
	}
	ip := net.ParseIP(host)
	p, err := strconv.ParseUint(port, 10, 16)
	if ip == nil || err != nil {
		return nil, 0, fmt.Errorf("bad address %q", s)
	}
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	return ip, uint16(p), nil
}

// build makes the frame of p with IPv4 identification id. prior holds,
// for each earlier packet of the case, what this switch delivered of it.
// It returns the sending endpoint.
func (p pkt) build(id uint16, prior [][]arrival) (string, []byte, error) {
	var from string
	var sip, dip net.IP
	var sport, dport uint16
	var quoted []byte
	switch {
	case p.reply > 0 || p.quote > 0:
		n := max(p.reply, p.quote)
		if n > len(prior) || len(prior[n-1]) == 0 {
			return "", nil, fmt.Errorf("packet #%d was not delivered: nothing to answer", n)
		}
		got := prior[n-1][0]
		pk := gopacket.NewPacket(got.frame, layers.LayerTypeEthernet, gopacket.Default)
		ip4, _ := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if ip6, ok := pk.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok && p.quote == 0 {
			from, sip, dip = got.at, ip6.DstIP, ip6.SrcIP
		} else if ip4 == nil {
			return "", nil, fmt.Errorf("packet #%d arrived without an IPv4 header", n)
		} else {
			from, sip, dip = got.at, ip4.DstIP, ip4.SrcIP
		}
		switch l4 := pk.TransportLayer().(type) {
		case *layers.TCP:
			sport, dport = uint16(l4.DstPort), uint16(l4.SrcPort)
		case *layers.UDP:
			sport, dport = uint16(l4.DstPort), uint16(l4.SrcPort)
		}
		if ic, ok := pk.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4); ok && p.reply > 0 {
			p.icmpID, p.icmpSeq = ic.Id, ic.Seq
		}
		if p.quote > 0 {
			sport, dport = 0, 0
			quoted = got.frame[14 : 14+int(ip4.Length)]
		}
	default:
		var err error
		from = p.from
		if sip, sport, err = splitHostPort(p.src); err != nil {
			return "", nil, err
		}
		if dip, dport, err = splitHostPort(p.dst); err != nil {
			return "", nil, err
		}
	}
	eth := &layers.Ethernet{SrcMAC: endpointMAC(from), DstMAC: macOf(dip), EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Id: id, SrcIP: sip, DstIP: dip}
	var netLayer gopacket.NetworkLayer = ip
	ls := []gopacket.SerializableLayer{eth, ip}
	if sip.To4() == nil {
		if p.proto == "icmp" {
			return "", nil, fmt.Errorf("ICMPv6 frames are not built")
		}
		eth.EthernetType = layers.EthernetTypeIPv6
		ip6 := &layers.IPv6{Version: 6, HopLimit: 64, FlowLabel: uint32(id), SrcIP: sip, DstIP: dip}
		netLayer = ip6
		ls = []gopacket.SerializableLayer{eth, ip6}
		switch p.proto {
		case "tcp":
			ip6.NextHeader = layers.IPProtocolTCP
		case "udp":
			ip6.NextHeader = layers.IPProtocolUDP
		}
	}
	switch p.proto {
	case "tcp":
		ip.Protocol = layers.IPProtocolTCP
		t := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), Seq: p.seq, Ack: p.ack, Window: 64240,
			SYN: strings.Contains(p.flags, "S"), ACK: strings.Contains(p.flags, "A"), FIN: strings.Contains(p.flags, "F"),
			RST: strings.Contains(p.flags, "R"), PSH: strings.Contains(p.flags, "P")}
		_ = t.SetNetworkLayerForChecksum(netLayer)
		ls = append(ls, t)
	case "udp":
		ip.Protocol = layers.IPProtocolUDP
		u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
		_ = u.SetNetworkLayerForChecksum(netLayer)
		ls = append(ls, u)
	case "icmp":
		ip.Protocol = layers.IPProtocolICMPv4
		ls = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(p.icmpType, p.icmpCode), Id: p.icmpID, Seq: p.icmpSeq})
		if quoted != nil {
			ls = append(ls, gopacket.Payload(quoted))
		}
	default:
		return "", nil, fmt.Errorf("unknown protocol %q", p.proto)
	}
	if p.payload != "" && quoted == nil {
		ls = append(ls, gopacket.Payload(p.payload))
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		return "", nil, err
	}
	frame := buf.Bytes()
	if p.badCsum {
		at := map[string]int{"tcp": 16, "udp": 6, "icmp": 2}[p.proto]
		hdr := 20
		if sip.To4() == nil {
			hdr = 40
		}
		frame[14+hdr+at] ^= 0x5a
	}
	return from, frame, nil
}

// String says what p is, for messages.
func (p pkt) String() string {
	var s string
	switch {
	case p.reply > 0:
		s = fmt.Sprintf("reply to #%d", p.reply)
	case p.quote > 0:
		return fmt.Sprintf("ICMP %d/%d about #%d", p.icmpType, p.icmpCode, p.quote)
	default:
		s = fmt.Sprintf("%s %s→%s", p.from, p.src, p.dst)
	}
	switch p.proto {
	case "tcp":
		return fmt.Sprintf("%s tcp %s seq=%d ack=%d", s, p.flags, p.seq, p.ack)
	case "icmp":
		return fmt.Sprintf("%s icmp %d/%d", s, p.icmpType, p.icmpCode)
	}
	return s + " " + p.proto
}

// stampPrefix is the source MAC the pipeline writes after a recirculation:
// its last byte is the ct_state bits the packet had (stampTable). A
// second stamp, later in a pipeline (after ct_clear, or a second ct),
// goes into the destination MAC with stamp2Prefix.
const (
	stampPrefix  = "02:c7:00:00:00:"
	stamp2Prefix = "02:c8:00:00:00:"
)

// ctFlags are ct_state's bits in Open vSwitch's order.
var ctFlags = []struct {
	name string
	bit  uint8
}{{"new", 0x01}, {"est", 0x02}, {"rel", 0x04}, {"rpl", 0x08}, {"inv", 0x10}, {"trk", 0x20}, {"snat", 0x40}, {"dnat", 0x80}}

// ctStateString prints ct_state bits as +flag+flag ("-trk" for none).
func ctStateString(bits uint8) string {
	if bits == 0 {
		return "-trk"
	}
	var s string
	for _, f := range ctFlags {
		if bits&f.bit != 0 {
			s += "+" + f.name
		}
	}
	return s
}

// parseCTState reads +flag+flag (or "-trk") into bits.
func parseCTState(s string) (uint8, error) {
	if s == "-trk" {
		return 0, nil
	}
	var bits uint8
	for _, part := range strings.Split(strings.TrimPrefix(s, "+"), "+") {
		found := false
		for _, f := range ctFlags {
			if f.name == part {
				bits |= f.bit
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown ct_state flag %q in %q", part, s)
		}
	}
	return bits, nil
}

// field is one decoded header field of a delivered frame.
type field struct{ name, value string }

// describe decodes a frame into its fields, checksums as "ok" or what
// was wrong, the ct_state stamp as ct_state.
func describe(f []byte) []field {
	var fs []field
	add := func(name string, v any) { fs = append(fs, field{name, fmt.Sprint(v)}) }
	pk := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := pk.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if eth == nil {
		return []field{{"undecodable", hex.EncodeToString(f)}}
	}
	if s := eth.SrcMAC.String(); strings.HasPrefix(s, stampPrefix) {
		add("ct_state", ctStateString(eth.SrcMAC[5]))
	} else {
		add("ct_state", "(not stamped)")
	}
	if s := eth.DstMAC.String(); strings.HasPrefix(s, stamp2Prefix) {
		add("ct_state2", ctStateString(eth.DstMAC[5]))
	}
	add("eth_src", eth.SrcMAC)
	add("eth_dst", eth.DstMAC)
	add("eth_type", eth.EthernetType)
	if ip6, ok := pk.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
		add("ip_src", ip6.SrcIP)
		add("ip_dst", ip6.DstIP)
		add("ip_id", ip6.FlowLabel) // the flow label names the packet
		add("ip_ttl", ip6.HopLimit)
		add("ip_tos", ip6.TrafficClass)
		add("ip_len", ip6.Length)
		add("ip_proto", ip6.NextHeader)
		l4 := f[14+40 : min(len(f), 14+40+int(ip6.Length))]
		return append(fs, describeL4("", ip6.SrcIP, ip6.DstIP, ip6.NextHeader, l4, true)...)
	}
	ip, _ := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	if ip == nil {
		add("payload", hex.EncodeToString(eth.Payload))
		return fs
	}
	add("ip_src", ip.SrcIP)
	add("ip_dst", ip.DstIP)
	add("ip_id", ip.Id)
	add("ip_ttl", ip.TTL)
	add("ip_tos", ip.TOS)
	add("ip_len", ip.Length)
	add("ip_frag", fmt.Sprintf("%v/%d", ip.Flags, ip.FragOffset))
	add("ip_proto", ip.Protocol)
	add("ip_csum", ipv4HeaderCsum(f[14:14+int(ip.IHL)*4]))
	l4 := f[14+int(ip.IHL)*4 : min(len(f), 14+int(ip.Length))]
	if ip.Flags&layers.IPv4MoreFragments != 0 || ip.FragOffset != 0 {
		// A fragment: only the first has the L4 header, none the whole
		// datagram to check a checksum over.
		if ip.FragOffset == 0 {
			fs = append(fs, describeL4("", ip.SrcIP, ip.DstIP, ip.Protocol, l4, false)...)
		}
		add("fragment_bytes", len(l4))
		return fs
	}
	fs = append(fs, describeL4("", ip.SrcIP, ip.DstIP, ip.Protocol, l4, true)...)
	if ic, ok := pk.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4); ok {
		switch ic.TypeCode.Type() {
		case 3, 4, 5, 11, 12: // errors quote an IP header
			fs = append(fs, describeInner(ic.Payload)...)
			return fs
		}
	}
	return fs
}

// describeL4 decodes a TCP, UDP or ICMP header; whole tells whether l4 is
// the complete segment (its checksum can be verified).
func describeL4(prefix string, src, dst net.IP, proto layers.IPProtocol, l4 []byte, whole bool) []field {
	var fs []field
	add := func(name string, v any) { fs = append(fs, field{prefix + name, fmt.Sprint(v)}) }
	csum := func() string {
		if !whole {
			return "(partial)"
		}
		return l4Csum(src, dst, proto, l4)
	}
	switch proto {
	case layers.IPProtocolTCP:
		if len(l4) < 20 {
			add("tcp", "short: "+hex.EncodeToString(l4))
			return fs
		}
		add("tp_src", binary.BigEndian.Uint16(l4[0:]))
		add("tp_dst", binary.BigEndian.Uint16(l4[2:]))
		add("tcp_seq", binary.BigEndian.Uint32(l4[4:]))
		add("tcp_ack", binary.BigEndian.Uint32(l4[8:]))
		add("tcp_flags", tcpFlags(l4[13]))
		add("tcp_win", binary.BigEndian.Uint16(l4[14:]))
		add("l4_csum", csum())
		add("payload", fmt.Sprintf("%q", l4[int(l4[12]>>4)*4:]))
	case layers.IPProtocolUDP:
		if len(l4) < 8 {
			add("udp", "short: "+hex.EncodeToString(l4))
			return fs
		}
		add("tp_src", binary.BigEndian.Uint16(l4[0:]))
		add("tp_dst", binary.BigEndian.Uint16(l4[2:]))
		add("udp_len", binary.BigEndian.Uint16(l4[4:]))
		add("l4_csum", csum())
		add("payload", fmt.Sprintf("%q", l4[8:]))
	case layers.IPProtocolICMPv4:
		if len(l4) < 8 {
			add("icmp", "short: "+hex.EncodeToString(l4))
			return fs
		}
		add("icmp_type", l4[0])
		add("icmp_code", l4[1])
		add("icmp_csum", csum())
		if l4[0] == 0 || l4[0] == 8 {
			add("icmp_id", binary.BigEndian.Uint16(l4[4:]))
			add("icmp_seq", binary.BigEndian.Uint16(l4[6:]))
			add("payload", fmt.Sprintf("%q", l4[8:]))
		}
	default:
		add("l4", hex.EncodeToString(l4))
	}
	return fs
}

// describeInner decodes the IP packet an ICMP error quotes.
func describeInner(b []byte) []field {
	if len(b) < 20 || b[0]>>4 != 4 {
		return []field{{"inner", hex.EncodeToString(b)}}
	}
	ihl := int(b[0]&0xf) * 4
	tot := int(binary.BigEndian.Uint16(b[2:]))
	src, dst := net.IP(b[12:16]), net.IP(b[16:20])
	fs := []field{
		{"inner_ip_src", src.String()}, {"inner_ip_dst", dst.String()},
		{"inner_ip_id", fmt.Sprint(binary.BigEndian.Uint16(b[4:]))},
		{"inner_ip_proto", fmt.Sprint(layers.IPProtocol(b[9]))},
		{"inner_ip_csum", ipv4HeaderCsum(b[:ihl])},
	}
	whole := len(b) >= tot
	l4 := b[ihl:min(len(b), tot)]
	return append(fs, describeL4("inner_", src, dst, layers.IPProtocol(b[9]), l4, whole)...)
}

func tcpFlags(b byte) string {
	var s string
	for i, c := range "FSRPAUEC" {
		if b&(1<<i) != 0 {
			s += string(c)
		}
	}
	return s
}

// onesSum is the ones' complement sum of b (RFC 1071), folded.
func onesSum(sum uint32, b []byte) uint32 {
	for len(b) >= 2 {
		sum += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return sum
}

// ipv4HeaderCsum checks an IPv4 header's checksum: "ok" or what is wrong.
func ipv4HeaderCsum(h []byte) string {
	if onesSum(0, h) == 0xffff {
		return "ok"
	}
	return fmt.Sprintf("BAD(0x%04x)", binary.BigEndian.Uint16(h[10:]))
}

// l4Csum checks a whole TCP, UDP or ICMP message's checksum.
func l4Csum(src, dst net.IP, proto layers.IPProtocol, l4 []byte) string {
	var sum uint32
	at := 0
	switch proto {
	case layers.IPProtocolTCP:
		at = 16
	case layers.IPProtocolUDP:
		at = 6
		if binary.BigEndian.Uint16(l4[6:]) == 0 {
			return "none"
		}
	case layers.IPProtocolICMPv4:
		at = 2
	}
	if proto != layers.IPProtocolICMPv4 {
		if s4, d4 := src.To4(), dst.To4(); s4 != nil && d4 != nil {
			sum = onesSum(0, s4)
			sum = onesSum(sum, d4)
		} else {
			sum = onesSum(0, src.To16())
			sum = onesSum(sum, dst.To16())
		}
		sum += uint32(proto) + uint32(len(l4))
	}
	if onesSum(sum, l4) == 0xffff {
		return "ok"
	}
	return fmt.Sprintf("BAD(0x%04x)", binary.BigEndian.Uint16(l4[at:]))
}

// summary prints a frame's fields on one line.
func summary(fs []field) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = f.name + "=" + f.value
	}
	return strings.Join(parts, " ")
}

// value is field name of fs ("" if absent).
func value(fs []field, name string) string {
	for _, f := range fs {
		if f.name == name {
			return f.value
		}
	}
	return ""
}

// fragments cuts an untagged IPv4 frame into fragments carrying size
// bytes of its payload each (the last one the rest).
func fragments(frame []byte, size int) [][]byte {
	ihl := int(frame[14]&0xf) * 4
	hdr := frame[:14+ihl]
	payload := frame[14+ihl : 14+int(binary.BigEndian.Uint16(frame[16:]))]
	var out [][]byte
	for off := 0; off < len(payload); off += size {
		end := min(off+size, len(payload))
		f := append(append([]byte(nil), hdr...), payload[off:end]...)
		ip := f[14:]
		binary.BigEndian.PutUint16(ip[2:], uint16(ihl+end-off))
		fo := uint16(off / 8)
		if end < len(payload) {
			fo |= 0x2000 // more fragments
		}
		binary.BigEndian.PutUint16(ip[6:], fo)
		ip[10], ip[11] = 0, 0
		binary.BigEndian.PutUint16(ip[10:], ^uint16(onesSum(0, ip[:ihl])))
		out = append(out, f)
	}
	return out
}
