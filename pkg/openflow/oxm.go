package openflow

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
)

// OXM classes (ofp_oxm_class).
const (
	ClassNXM0              uint16 = 0x0000 // Nicira extensible match, legacy OF1.0 fields
	ClassNXM1              uint16 = 0x0001 // Nicira extensible match, OVS extensions
	ClassOpenFlowBasic     uint16 = 0x8000 // OFPXMC_OPENFLOW_BASIC, the fields below
	ClassPacketRegs        uint16 = 0x8001 // OFPXMC_PACKET_REGS (OF1.5)
	ClassExperimenter      uint16 = 0xffff // OFPXMC_EXPERIMENTER: a 4-byte experimenter id leads the payload
	ExperimenterNicira     uint32 = 0x00002320
	ExperimenterONF        uint32 = 0x4f4e4600
	oxmExperimenterIDBytes        = 4
)

// Field is an OpenFlow-basic OXM field number (OFPXMT_OFB_*).
type Field uint8

// OpenFlow 1.3 basic match fields.
const (
	FieldInPort       Field = 0
	FieldInPhyPort    Field = 1
	FieldMetadata     Field = 2
	FieldEthDst       Field = 3
	FieldEthSrc       Field = 4
	FieldEthType      Field = 5
	FieldVLANVID      Field = 6
	FieldVLANPCP      Field = 7
	FieldIPDSCP       Field = 8
	FieldIPECN        Field = 9
	FieldIPProto      Field = 10
	FieldIPv4Src      Field = 11
	FieldIPv4Dst      Field = 12
	FieldTCPSrc       Field = 13
	FieldTCPDst       Field = 14
	FieldUDPSrc       Field = 15
	FieldUDPDst       Field = 16
	FieldSCTPSrc      Field = 17
	FieldSCTPDst      Field = 18
	FieldICMPv4Type   Field = 19
	FieldICMPv4Code   Field = 20
	FieldARPOp        Field = 21
	FieldARPSPA       Field = 22
	FieldARPTPA       Field = 23
	FieldARPSHA       Field = 24
	FieldARPTHA       Field = 25
	FieldIPv6Src      Field = 26
	FieldIPv6Dst      Field = 27
	FieldIPv6FLabel   Field = 28
	FieldICMPv6Type   Field = 29
	FieldICMPv6Code   Field = 30
	FieldIPv6NDTarget Field = 31
	FieldIPv6NDSLL    Field = 32
	FieldIPv6NDTLL    Field = 33
	FieldMPLSLabel    Field = 34
	FieldMPLSTC       Field = 35
	FieldMPLSBOS      Field = 36
	FieldPBBISID      Field = 37
	FieldTunnelID     Field = 38
	FieldIPv6ExtHdr   Field = 39
	numFields               = 40
)

// VLAN_VID special values (ofp_vlan_id): the OFPVID_PRESENT bit says a
// VLAN tag exists; vlan_vid=OFPVID_NONE matches untagged packets only.
const (
	VIDPresent uint16 = 0x1000
	VIDNone    uint16 = 0x0000
)

// fieldInfo describes one basic field: its ovs-ofctl name, value length in
// bytes, whether it may carry a mask, and the largest legal value (0 means
// any value of that length).
type fieldInfo struct {
	name     string
	len      int
	maskable bool
	max      uint64
}

var fieldInfos = [numFields]fieldInfo{
	FieldInPort:       {"in_port", 4, false, 0},
	FieldInPhyPort:    {"in_phy_port", 4, false, 0},
	FieldMetadata:     {"metadata", 8, true, 0},
	FieldEthDst:       {"eth_dst", 6, true, 0},
	FieldEthSrc:       {"eth_src", 6, true, 0},
	FieldEthType:      {"eth_type", 2, false, 0},
	FieldVLANVID:      {"vlan_vid", 2, true, 0x1fff},
	FieldVLANPCP:      {"vlan_pcp", 1, false, 7},
	FieldIPDSCP:       {"ip_dscp", 1, false, 63},
	FieldIPECN:        {"ip_ecn", 1, false, 3},
	FieldIPProto:      {"ip_proto", 1, false, 0},
	FieldIPv4Src:      {"ipv4_src", 4, true, 0},
	FieldIPv4Dst:      {"ipv4_dst", 4, true, 0},
	FieldTCPSrc:       {"tcp_src", 2, false, 0},
	FieldTCPDst:       {"tcp_dst", 2, false, 0},
	FieldUDPSrc:       {"udp_src", 2, false, 0},
	FieldUDPDst:       {"udp_dst", 2, false, 0},
	FieldSCTPSrc:      {"sctp_src", 2, false, 0},
	FieldSCTPDst:      {"sctp_dst", 2, false, 0},
	FieldICMPv4Type:   {"icmpv4_type", 1, false, 0},
	FieldICMPv4Code:   {"icmpv4_code", 1, false, 0},
	FieldARPOp:        {"arp_op", 2, false, 0},
	FieldARPSPA:       {"arp_spa", 4, true, 0},
	FieldARPTPA:       {"arp_tpa", 4, true, 0},
	FieldARPSHA:       {"arp_sha", 6, true, 0},
	FieldARPTHA:       {"arp_tha", 6, true, 0},
	FieldIPv6Src:      {"ipv6_src", 16, true, 0},
	FieldIPv6Dst:      {"ipv6_dst", 16, true, 0},
	FieldIPv6FLabel:   {"ipv6_label", 4, true, 0xfffff},
	FieldICMPv6Type:   {"icmpv6_type", 1, false, 0},
	FieldICMPv6Code:   {"icmpv6_code", 1, false, 0},
	FieldIPv6NDTarget: {"nd_target", 16, false, 0},
	FieldIPv6NDSLL:    {"nd_sll", 6, false, 0},
	FieldIPv6NDTLL:    {"nd_tll", 6, false, 0},
	FieldMPLSLabel:    {"mpls_label", 4, false, 0xfffff},
	FieldMPLSTC:       {"mpls_tc", 1, false, 7},
	FieldMPLSBOS:      {"mpls_bos", 1, false, 1},
	FieldPBBISID:      {"pbb_isid", 3, true, 0},
	FieldTunnelID:     {"tun_id", 8, true, 0},
	FieldIPv6ExtHdr:   {"ipv6_exthdr", 2, true, 0x1ff},
}

// String returns the field's ovs-ofctl (OXM) name, e.g. "eth_dst".
func (f Field) String() string {
	if int(f) < numFields {
		return fieldInfos[f].name
	}
	return fmt.Sprintf("field%d", uint8(f))
}

// Len returns the value length of a known basic field, or 0.
func (f Field) Len() int {
	if int(f) < numFields {
		return fieldInfos[f].len
	}
	return 0
}

// Maskable reports whether the spec allows a mask on f.
func (f Field) Maskable() bool { return int(f) < numFields && fieldInfos[f].maskable }

// OXM is one OpenFlow Extensible Match TLV.
//
//	2 bytes: oxm_class (ClassOpenFlowBasic for the fields above)
//	7 bits:  oxm_field
//	1 bit:   oxm_hasmask
//	1 byte:  oxm_length, bytes of payload that follow
//	4 bytes: experimenter id, only for ClassExperimenter (counted in oxm_length)
//	n bytes: value
//	n bytes: mask, only if oxm_hasmask (1 bits are compared, 0 bits wildcarded)
//
// Value and Mask are big-endian as on the wire. Mask is nil when the TLV has
// no mask. For a class other than OpenFlow-basic the payload is kept
// verbatim so that it can be re-encoded, and Validate reports
// OFPBMC_BAD_FIELD.
type OXM struct {
	Class        uint16
	Field        Field
	Experimenter uint32 // ClassExperimenter only
	Value        []byte
	Mask         []byte
}

// Basic returns an exact-match OXM of the OpenFlow-basic class.
func Basic(f Field, value []byte) OXM {
	return OXM{Class: ClassOpenFlowBasic, Field: f, Value: value}
}

// BasicMasked returns a masked OXM of the OpenFlow-basic class. A mask of
// all ones is kept as given (it still encodes with hasmask set).
func BasicMasked(f Field, value, mask []byte) OXM {
	return OXM{Class: ClassOpenFlowBasic, Field: f, Value: value, Mask: mask}
}

// Uint returns a basic OXM whose value is v encoded big-endian over the
// field's length (1, 2, 3, 4 or 8 bytes).
func Uint(f Field, v uint64) OXM { return Basic(f, putUint(v, f.Len())) }

// UintMasked is Uint with a mask.
func UintMasked(f Field, v, mask uint64) OXM {
	return BasicMasked(f, putUint(v, f.Len()), putUint(mask, f.Len()))
}

// MAC returns a basic OXM for an Ethernet address field.
func MAC(f Field, hw net.HardwareAddr) OXM { return Basic(f, append([]byte{}, hw...)) }

// MACMasked returns a masked Ethernet address OXM.
func MACMasked(f Field, hw, mask net.HardwareAddr) OXM {
	return BasicMasked(f, append([]byte{}, hw...), append([]byte{}, mask...))
}

// Addr returns a basic OXM for an IPv4 or IPv6 address field.
func Addr(f Field, a netip.Addr) OXM { return Basic(f, a.AsSlice()) }

// Prefix returns the OXM matching prefix p: exact when p is a full-length
// prefix, masked otherwise.
func Prefix(f Field, p netip.Prefix) OXM {
	p = p.Masked()
	if p.Bits() == p.Addr().BitLen() {
		return Addr(f, p.Addr())
	}
	mask := make([]byte, p.Addr().BitLen()/8)
	for i := 0; i < p.Bits(); i++ {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	return BasicMasked(f, p.Addr().AsSlice(), mask)
}

func putUint(v uint64, n int) []byte {
	b := make([]byte, n)
	for i := n - 1; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
	return b
}

func getUint(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

// IsBasic reports whether o is of the OpenFlow-basic class.
func (o OXM) IsBasic() bool { return o.Class == ClassOpenFlowBasic }

// Masked reports whether o carries a mask.
func (o OXM) Masked() bool { return o.Mask != nil }

// Uint returns the value as an unsigned integer (fields up to 8 bytes).
func (o OXM) Uint() uint64 { return getUint(o.Value) }

// MaskUint returns the mask as an integer, all ones of the value's length
// when there is no mask.
func (o OXM) MaskUint() uint64 {
	if o.Mask == nil {
		if len(o.Value) >= 8 {
			return ^uint64(0)
		}
		return 1<<(8*len(o.Value)) - 1
	}
	return getUint(o.Mask)
}

// HardwareAddr returns a 6-byte value as a MAC address.
func (o OXM) HardwareAddr() net.HardwareAddr { return net.HardwareAddr(o.Value) }

// Addr returns a 4- or 16-byte value as an IP address.
func (o OXM) Addr() netip.Addr {
	a, _ := netip.AddrFromSlice(o.Value)
	return a
}

// Equal reports whether two OXMs encode identically.
func (o OXM) Equal(p OXM) bool {
	return o.Class == p.Class && o.Field == p.Field && o.Experimenter == p.Experimenter &&
		bytes.Equal(o.Value, p.Value) && (o.Mask == nil) == (p.Mask == nil) && bytes.Equal(o.Mask, p.Mask)
}

// payloadLen is oxm_length.
func (o OXM) payloadLen() int {
	n := len(o.Value) + len(o.Mask)
	if o.Class == ClassExperimenter {
		n += oxmExperimenterIDBytes
	}
	return n
}

// Len returns the encoded size of o: 4-byte header plus payload.
func (o OXM) Len() int { return 4 + o.payloadLen() }

// MarshalBinary encodes one OXM TLV.
func (o OXM) MarshalBinary() ([]byte, error) { return o.appendTo(nil) }

func (o OXM) appendTo(b []byte) ([]byte, error) {
	n := o.payloadLen()
	if n > 0xff {
		return nil, fmt.Errorf("openflow: oxm %s payload of %d bytes", o.Field, n)
	}
	if o.Field > 0x7f {
		return nil, fmt.Errorf("openflow: oxm field %d does not fit 7 bits", o.Field)
	}
	if o.Mask != nil && len(o.Mask) != len(o.Value) {
		return nil, fmt.Errorf("openflow: oxm %s mask length %d != value length %d", o.Field, len(o.Mask), len(o.Value))
	}
	hasmask := byte(0)
	if o.Mask != nil {
		hasmask = 1
	}
	b = append(b, byte(o.Class>>8), byte(o.Class), byte(o.Field)<<1|hasmask, byte(n))
	if o.Class == ClassExperimenter {
		b = be.AppendUint32(b, o.Experimenter)
	}
	b = append(b, o.Value...)
	return append(b, o.Mask...), nil
}

// UnmarshalBinary decodes exactly one OXM TLV.
func (o *OXM) UnmarshalBinary(b []byte) error {
	n, err := o.decode(b, ErrTypeBadMatch, BadMatchBadLen)
	if err == nil && n != len(b) {
		return bad(ErrTypeBadMatch, BadMatchBadLen, "%d bytes after oxm", len(b)-n)
	}
	return err
}

// decode reads one OXM from the front of b and returns its size. Length
// problems are reported with the given error type/code (BAD_MATCH/BAD_LEN in
// a match, BAD_ACTION/BAD_SET_LEN in a set_field action).
func (o *OXM) decode(b []byte, et ErrorType, lenCode uint16) (int, error) {
	if len(b) < 4 {
		return 0, short(et, lenCode, "oxm header")
	}
	class, field, hasmask, n := be.Uint16(b), Field(b[2]>>1), b[2]&1 == 1, int(b[3])
	if 4+n > len(b) {
		return 0, short(et, lenCode, fmt.Sprintf("oxm %d:%d payload", class, field))
	}
	p := b[4 : 4+n]
	*o = OXM{Class: class, Field: field}
	if class == ClassExperimenter {
		if len(p) < 4 {
			return 0, bad(et, lenCode, "experimenter oxm of %d bytes", n)
		}
		o.Experimenter = be.Uint32(p)
		p = p[4:]
	}
	if class == ClassOpenFlowBasic && int(field) < numFields {
		want := fieldInfos[field].len
		if hasmask {
			want *= 2
		}
		if len(p) != want {
			return 0, bad(et, lenCode, "oxm %s length %d, want %d", field, len(p), want)
		}
	} else if fi, ok := nxFields[FieldKey{class, field}]; ok && fi.matchable {
		want := fi.len
		if hasmask {
			want *= 2
		}
		if len(p) != want {
			return 0, bad(et, lenCode, "oxm %s length %d, want %d", fi.name, len(p), want)
		}
	}
	if hasmask {
		if len(p)%2 != 0 {
			return 0, bad(et, lenCode, "masked oxm %d:%d with odd length %d", class, field, len(p))
		}
		o.Value = append([]byte{}, p[:len(p)/2]...)
		o.Mask = append([]byte{}, p[len(p)/2:]...)
	} else {
		o.Value = append([]byte{}, p...)
	}
	return 4 + n, nil
}

// Match types (ofp_match_type).
const (
	MatchTypeStandard uint16 = 0 // OF1.1 fixed match, rejected
	MatchTypeOXM      uint16 = 1
)

// Match is ofp_match of type OFPMT_OXM: an ordered list of OXM TLVs. The
// order is the sender's and is kept for faithful re-encoding; it carries no
// meaning. A switch tests presence with Present and reads fields with Get.
//
//	2 bytes: type (OFPMT_OXM = 1)
//	2 bytes: length of type+length+OXMs, excluding padding
//	n bytes: OXM TLVs
//	0-7 bytes: zero padding to a multiple of 8
type Match struct {
	Fields []OXM
}

// FieldSet is a bitmap of basic fields, bit n for Field n.
type FieldSet uint64

// Has reports whether f is in the set.
func (s FieldSet) Has(f Field) bool { return f < 64 && s&(1<<f) != 0 }

// Present returns the set of basic fields the match constrains.
func (m Match) Present() FieldSet {
	var s FieldSet
	for _, o := range m.Fields {
		if o.Class == ClassOpenFlowBasic && o.Field < 64 {
			s |= 1 << o.Field
		}
	}
	return s
}

// Get returns the first basic OXM for field f.
func (m Match) Get(f Field) (OXM, bool) {
	for _, o := range m.Fields {
		if o.Class == ClassOpenFlowBasic && o.Field == f {
			return o, true
		}
	}
	return OXM{}, false
}

// Add appends fields to the match and returns it, for building matches in
// one expression: openflow.Match{}.Add(openflow.Uint(openflow.FieldInPort, 1)).
func (m Match) Add(o ...OXM) Match {
	m.Fields = append(append([]OXM{}, m.Fields...), o...)
	return m
}

// Equal reports whether two matches encode identically.
func (m Match) Equal(n Match) bool {
	if len(m.Fields) != len(n.Fields) {
		return false
	}
	for i := range m.Fields {
		if !m.Fields[i].Equal(n.Fields[i]) {
			return false
		}
	}
	return true
}

// Len returns the encoded size of the match including padding.
func (m Match) Len() int { return pad8(m.unpaddedLen()) }

func (m Match) unpaddedLen() int {
	n := 4
	for _, o := range m.Fields {
		n += o.Len()
	}
	return n
}

// MarshalBinary encodes the match with its padding.
func (m Match) MarshalBinary() ([]byte, error) { return m.appendTo(nil) }

func (m Match) appendTo(b []byte) ([]byte, error) {
	n := m.unpaddedLen()
	if n > 0xffff {
		return nil, fmt.Errorf("openflow: match of %d bytes", n)
	}
	b = be.AppendUint16(b, MatchTypeOXM)
	b = be.AppendUint16(b, uint16(n))
	var err error
	for _, o := range m.Fields {
		if b, err = o.appendTo(b); err != nil {
			return nil, err
		}
	}
	return append(b, make([]byte, pad8(n)-n)...), nil
}

// UnmarshalBinary decodes exactly one match with its padding.
func (m *Match) UnmarshalBinary(b []byte) error {
	n, err := m.decode(b)
	if err == nil && n != len(b) {
		return bad(ErrTypeBadMatch, BadMatchBadLen, "%d bytes after match", len(b)-n)
	}
	return err
}

// decode reads a match from the front of b and returns its padded size.
func (m *Match) decode(b []byte) (int, error) {
	if len(b) < 4 {
		return 0, short(ErrTypeBadMatch, BadMatchBadLen, "match header")
	}
	t, n := be.Uint16(b), int(be.Uint16(b[2:]))
	if t != MatchTypeOXM {
		return 0, bad(ErrTypeBadMatch, BadMatchBadType, "match type %d", t)
	}
	if n < 4 {
		return 0, bad(ErrTypeBadMatch, BadMatchBadLen, "match length %d", n)
	}
	if pad8(n) > len(b) {
		return 0, short(ErrTypeBadMatch, BadMatchBadLen, "match")
	}
	m.Fields = nil
	p := b[4:n]
	for len(p) > 0 {
		var o OXM
		k, err := o.decode(p, ErrTypeBadMatch, BadMatchBadLen)
		if err != nil {
			return 0, err
		}
		m.Fields = append(m.Fields, o)
		p = p[k:]
	}
	return pad8(n), nil
}
