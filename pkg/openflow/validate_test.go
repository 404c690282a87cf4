package openflow

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func wantErr(t *testing.T, err error, et ErrorType, code uint16) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s", errorName(et, code))
	}
	var oe *Error
	if !errors.As(err, &oe) {
		t.Fatalf("error %v (%T) is not an *Error", err, err)
	}
	if oe.Type != et || oe.Code != code {
		t.Fatalf("error %v, want %s", err, errorName(et, code))
	}
	if !errors.Is(err, &Error{Type: et, Code: code}) {
		t.Fatalf("errors.Is does not match %s", errorName(et, code))
	}
}

var (
	ipv4   = Uint(FieldEthType, 0x0800)
	ipv6   = Uint(FieldEthType, 0x86dd)
	arp    = Uint(FieldEthType, 0x0806)
	tcp    = Uint(FieldIPProto, 6)
	udp    = Uint(FieldIPProto, 17)
	tagged = Uint(FieldVLANVID, uint64(VIDPresent)|10)
)

func TestMatchValidate(t *testing.T) {
	ok := []struct {
		name string
		m    Match
	}{
		{"empty", Match{}},
		{"tcp", Match{}.Add(ipv4, tcp, Uint(FieldTCPDst, 80), Prefix(FieldIPv4Src, prefix("10.0.0.0/8")))},
		{"tcp6 prereq after field", Match{}.Add(Uint(FieldTCPSrc, 1), tcp, ipv6)},
		{"vlan_pcp with vid", Match{}.Add(tagged, Uint(FieldVLANPCP, 7))},
		{"vlan_pcp with any tag", Match{}.Add(UintMasked(FieldVLANVID, 0x1000, 0x1000), Uint(FieldVLANPCP, 1))},
		{"untagged", Match{}.Add(Uint(FieldVLANVID, 0))},
		{"vid bits masked, as ovs-ofctl sends vlan_vid=0x60/0xf0", Match{}.Add(UintMasked(FieldVLANVID, 0x60, 0xf0))},
		{"tagged, vid bits masked", Match{}.Add(UintMasked(FieldVLANVID, 0x1060, 0x10f0))},
		{"arp", Match{}.Add(arp, Uint(FieldARPOp, 1), Prefix(FieldARPSPA, prefix("10.0.0.0/24")))},
		{"nd_target", Match{}.Add(ipv6, Uint(FieldIPProto, 58), Uint(FieldICMPv6Type, 135), Addr(FieldIPv6NDTarget, addr("fe80::1")))},
		{"in_port LOCAL", Match{}.Add(Uint(FieldInPort, uint64(PortLocal)))},
		{"in_phy_port", Match{}.Add(Uint(FieldInPort, 1), Uint(FieldInPhyPort, 1))},
		{"metadata masked", Match{}.Add(UintMasked(FieldMetadata, 0x5, 0xff))},
		{"tunnel_id", Match{}.Add(UintMasked(FieldTunnelID, 0x10, 0xff))},
		{"mpls", Match{}.Add(Uint(FieldEthType, 0x8847), Uint(FieldMPLSLabel, 0xfffff))},
	}
	for _, c := range ok {
		t.Run(c.name, func(t *testing.T) {
			if err := c.m.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
	bad := []struct {
		name string
		m    Match
		code uint16
	}{
		{"tcp without ip_proto", Match{}.Add(ipv4, Uint(FieldTCPDst, 80)), BadMatchBadPrereq},
		{"tcp with udp proto", Match{}.Add(ipv4, udp, Uint(FieldTCPDst, 80)), BadMatchBadPrereq},
		{"tcp without eth_type", Match{}.Add(tcp, Uint(FieldTCPDst, 80)), BadMatchBadPrereq},
		{"ip_proto on arp", Match{}.Add(arp, tcp), BadMatchBadPrereq},
		{"ipv4_src on ipv6", Match{}.Add(ipv6, Addr(FieldIPv4Src, addr("1.2.3.4"))), BadMatchBadPrereq},
		{"ipv6_src on ipv4", Match{}.Add(ipv4, Addr(FieldIPv6Src, addr("::1"))), BadMatchBadPrereq},
		{"eth_type masked prereq", Match{}.Add(BasicMasked(FieldEthType, []byte{8, 0}, []byte{0xff, 0})), BadMatchBadMask},
		{"vlan_pcp without vid", Match{}.Add(Uint(FieldVLANPCP, 3)), BadMatchBadPrereq},
		{"vlan_pcp untagged", Match{}.Add(Uint(FieldVLANVID, 0), Uint(FieldVLANPCP, 3)), BadMatchBadPrereq},
		{"icmpv4 on ipv6", Match{}.Add(ipv6, Uint(FieldIPProto, 1), Uint(FieldICMPv4Type, 8)), BadMatchBadPrereq},
		{"nd_sll with NA", Match{}.Add(ipv6, Uint(FieldIPProto, 58), Uint(FieldICMPv6Type, 136), MAC(FieldIPv6NDSLL, mustMAC("00:00:00:00:00:01"))), BadMatchBadPrereq},
		{"arp_sha without arp", Match{}.Add(MAC(FieldARPSHA, mustMAC("00:00:00:00:00:01"))), BadMatchBadPrereq},
		{"in_phy_port alone", Match{}.Add(Uint(FieldInPhyPort, 1)), BadMatchBadPrereq},
		{"mpls on ip", Match{}.Add(ipv4, Uint(FieldMPLSTC, 1)), BadMatchBadPrereq},
		{"dup field", Match{}.Add(Uint(FieldInPort, 1), Uint(FieldInPort, 2)), BadMatchDupField},
		{"dup eth_type", Match{}.Add(ipv4, ipv4), BadMatchDupField},
		{"mask on in_port", Match{}.Add(UintMasked(FieldInPort, 1, 1)), BadMatchBadMask},
		{"mask on tcp_dst", Match{}.Add(ipv4, tcp, UintMasked(FieldTCPDst, 80, 0xff00)), BadMatchBadMask},
		{"value outside mask", Match{}.Add(ipv4, BasicMasked(FieldIPv4Dst, []byte{10, 0, 0, 1}, []byte{255, 0, 0, 0})), BadMatchBadWildcards},
		{"metadata outside mask", Match{}.Add(UintMasked(FieldMetadata, 0x100, 0xff)), BadMatchBadWildcards},
		{"vlan_pcp 8", Match{}.Add(tagged, Uint(FieldVLANPCP, 8)), BadMatchBadValue},
		{"ip_dscp 64", Match{}.Add(ipv4, Uint(FieldIPDSCP, 64)), BadMatchBadValue},
		{"ip_ecn 4", Match{}.Add(ipv4, Uint(FieldIPECN, 4)), BadMatchBadValue},
		{"vlan_vid > 0x1fff", Match{}.Add(Uint(FieldVLANVID, 0x2000)), BadMatchBadValue},
		{"vlan_vid without PRESENT", Match{}.Add(Uint(FieldVLANVID, 10)), BadMatchBadValue},
		{"flabel 21 bits", Match{}.Add(ipv6, Uint(FieldIPv6FLabel, 0x100000)), BadMatchBadValue},
		{"in_port 0", Match{}.Add(Uint(FieldInPort, 0)), BadMatchBadValue},
		{"in_port ANY", Match{}.Add(Uint(FieldInPort, uint64(PortAny))), BadMatchBadValue},
		{"unknown basic field", Match{}.Add(OXM{Class: ClassOpenFlowBasic, Field: 40, Value: []byte{1}}), BadMatchBadField},
		{"unknown nicira field", Match{}.Add(OXM{Class: ClassNXM1, Field: 90, Value: []byte{0, 0, 0, 1}}), BadMatchBadField},
		{"nxm0 alias in a match", Match{}.Add(OXM{Class: ClassNXM0, Field: 1, Value: make([]byte, 6)}), BadMatchBadField},
		{"experimenter class", Match{}.Add(OXM{Class: ClassExperimenter, Experimenter: ExperimenterONF, Field: 1, Value: []byte{1}}), BadMatchBadField},
		{"short value", Match{}.Add(Basic(FieldInPort, []byte{0, 1})), BadMatchBadLen},
		{"short mask", Match{}.Add(BasicMasked(FieldMetadata, make([]byte, 8), make([]byte, 4))), BadMatchBadLen},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			wantErr(t, c.m.Validate(), ErrTypeBadMatch, c.code)
		})
	}
}

// TestMatchDecodeErrors feeds malformed match encodings.
func TestMatchDecodeErrors(t *testing.T) {
	cases := []struct {
		name  string
		hex   string
		code  uint16
		short bool
	}{
		{"standard match type", "0000000800000000", BadMatchBadType, false},
		{"length < 4", "0001000200000000", BadMatchBadLen, false},
		{"missing padding", "0001000c80000004000000", BadMatchBadLen, true},
		{"oxm overruns match", "0001000a800000040000000000000000", BadMatchBadLen, true},
		{"in_port 2 bytes", "0001000a80000002000100000000000000", BadMatchBadLen, false},
		{"masked in_port odd", "00010009800001010000000000000000", BadMatchBadLen, false},
		{"eth_dst masked wrong len", "000100108000070800000000000000000", BadMatchBadLen, false},
		{"experimenter oxm too short", "0001000affff02020000000000000000", BadMatchBadLen, false},
		{"truncated header", "0001", BadMatchBadLen, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := mustHexLoose(c.hex)
			var m Match
			err := m.UnmarshalBinary(b)
			wantErr(t, err, ErrTypeBadMatch, c.code)
			if got := errors.Is(err, io.ErrUnexpectedEOF); got != c.short {
				t.Errorf("errors.Is(err, io.ErrUnexpectedEOF) = %v, want %v (%v)", got, c.short, err)
			}
		})
	}
	// Unknown Nicira NXM fields decode (so a controller can print them)
	// and are rejected by Validate; known ones (reg0 here) validate.
	var m Match
	if err := m.UnmarshalBinary(mustHex("0001000c0001000400000001")); err == nil {
		t.Fatal("want short-padding error")
	}
	if err := m.UnmarshalBinary(mustHex("0001000c00010004000000010000000000")[:16]); err != nil {
		t.Fatal(err)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	if s := m.String(); s != "reg0=0x1" {
		t.Errorf("String = %q", s)
	}
	if err := m.UnmarshalBinary(mustHex("0001000c0001b404000000010000000000")[:16]); err != nil {
		t.Fatal(err)
	}
	wantErr(t, m.Validate(), ErrTypeBadMatch, BadMatchBadField)
	if s := m.String(); s != "oxm(0x0001:90=00000001)" {
		t.Errorf("String = %q", s)
	}
}

func mustHexLoose(s string) []byte {
	if len(s)%2 == 1 {
		s += "0"
	}
	return mustHex(s)
}

func TestActionDecodeErrors(t *testing.T) {
	cases := []struct {
		name  string
		hex   string
		code  uint16
		short bool
	}{
		{"length 4", "00000004", BadActionBadLen, false},
		{"length not multiple of 8", "0000000c000000000000000000000000", BadActionBadLen, false},
		{"output length 8", "0000000800000001", BadActionBadLen, false},
		{"pop_vlan length 16", "00120010000000000000000000000000", BadActionBadLen, false},
		{"overruns input", "0000001000000001ffff", BadActionBadLen, true},
		{"unknown type", "00070008 00000000", BadActionBadType, false},
		{"set_field oxm overruns action", "0019000880000404", BadActionBadSetLen, false},
		{"set_field wrong padding", "00190018 80000606 001122334455 00000000000000000000", BadActionBadSetLen, false},
		{"set_field in_port short value", "00190008800000020001000000000000", BadActionBadSetLen, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var as Actions
			b := mustHexLoose(removeSpaces(c.hex))
			err := as.UnmarshalBinary(b)
			wantErr(t, err, ErrTypeBadAction, c.code)
			if got := errors.Is(err, io.ErrUnexpectedEOF); got != c.short {
				t.Errorf("errors.Is(err, io.ErrUnexpectedEOF) = %v, want %v", got, c.short)
			}
		})
	}
}

func removeSpaces(s string) string {
	out := []byte{}
	for i := range len(s) {
		if s[i] != ' ' {
			out = append(out, s[i])
		}
	}
	return string(out)
}

func TestActionValidate(t *testing.T) {
	tcpMatch := Match{}.Add(ipv4, tcp)
	cases := []struct {
		name string
		as   Actions
		m    Match
		code uint16 // 0xffff: valid
	}{
		{"output ok", Actions{ActionOutput{Port: 1}}, Match{}, 0xffff},
		{"output reserved", Actions{ActionOutput{Port: PortController, MaxLen: ControllerNoBuffer}, ActionOutput{Port: PortFlood}}, Match{}, 0xffff},
		{"output 0", Actions{ActionOutput{Port: 0}}, Match{}, BadActionBadOutPort},
		{"output ANY", Actions{ActionOutput{Port: PortAny}}, Match{}, BadActionBadOutPort},
		{"output 0xffffff01", Actions{ActionOutput{Port: 0xffffff01}}, Match{}, BadActionBadOutPort},
		{"group ALL", Actions{ActionGroup{GroupID: GroupAll}}, Match{}, BadActionBadOutGroup},
		{"push_vlan 0x0800", Actions{ActionPushVLAN{EtherType: 0x0800}}, Match{}, BadActionBadArgument},
		{"push_vlan 0x88a8", Actions{ActionPushVLAN{EtherType: 0x88a8}}, Match{}, 0xffff},
		{"push_mpls 0x0800", Actions{ActionPushMPLS{EtherType: 0x0800}}, Match{}, BadActionBadArgument},
		{"push_pbb 0x8100", Actions{ActionPushPBB{EtherType: 0x8100}}, Match{}, BadActionBadArgument},
		{"set_field tcp_dst on tcp", Actions{ActionSetField{Field: Uint(FieldTCPDst, 80)}}, tcpMatch, 0xffff},
		{"set_field tcp_dst on any", Actions{ActionSetField{Field: Uint(FieldTCPDst, 80)}}, Match{}, BadActionMatchInconsistent},
		{"set_field ipv6 on ipv4", Actions{ActionSetField{Field: Addr(FieldIPv6Dst, addr("::1"))}}, tcpMatch, BadActionMatchInconsistent},
		{"set_field vlan_vid untagged", Actions{ActionSetField{Field: Uint(FieldVLANVID, 0x1001)}}, Match{}, BadActionMatchInconsistent},
		{"set_field vlan_vid after push", Actions{ActionPushVLAN{EtherType: 0x8100}, ActionSetField{Field: Uint(FieldVLANVID, 0x1001)}}, Match{}, 0xffff},
		{"set_field vlan_vid without PRESENT", Actions{ActionPushVLAN{EtherType: 0x8100}, ActionSetField{Field: Uint(FieldVLANVID, 1)}}, Match{}, BadActionBadSetArgument},
		{"set_field mpls after push_mpls", Actions{ActionPushMPLS{EtherType: 0x8847}, ActionSetField{Field: Uint(FieldMPLSLabel, 5)}}, tcpMatch, 0xffff},
		{"set_field tcp after push_mpls", Actions{ActionPushMPLS{EtherType: 0x8847}, ActionSetField{Field: Uint(FieldTCPDst, 5)}}, tcpMatch, BadActionMatchInconsistent},
		{"set_field in_port", Actions{ActionSetField{Field: Uint(FieldInPort, 1)}}, Match{}, BadActionBadSetType},
		{"set_field metadata", Actions{ActionSetField{Field: Uint(FieldMetadata, 1)}}, Match{}, BadActionBadSetType},
		{"set_field unknown nicira field", Actions{ActionSetField{Field: OXM{Class: ClassNXM1, Field: 90, Value: []byte{1, 2, 3, 4}}}}, Match{}, BadActionBadSetType},
		{"set_field unknown basic", Actions{ActionSetField{Field: OXM{Class: ClassOpenFlowBasic, Field: 99, Value: []byte{1}}}}, Match{}, BadActionBadSetType},
		{"set_field masked", Actions{ActionSetField{Field: MACMasked(FieldEthDst, mustMAC("00:00:00:00:00:01"), mustMAC("ff:ff:ff:ff:ff:ff"))}}, Match{}, BadActionBadSetArgument},
		{"set_field wrong length", Actions{ActionSetField{Field: Basic(FieldEthDst, []byte{1, 2})}}, Match{}, BadActionBadSetLen},
		{"set_field dscp 64", Actions{ActionSetField{Field: Uint(FieldIPDSCP, 64)}}, tcpMatch, BadActionBadSetArgument},
		{"experimenter", Actions{ActionExperimenter{Experimenter: ExperimenterONF, Data: []byte{0, 1}}}, Match{}, BadActionBadExperimenter},
		{"nicira unknown subtype", Actions{ActionExperimenter{Experimenter: ExperimenterNicira, Data: []byte{0, 99}}}, Match{}, BadActionBadExpType},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := ValidateActions(c.as, c.m)
			if c.code == 0xffff {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantErr(t, err, ErrTypeBadAction, c.code)
		})
	}
}

func TestInstructionErrors(t *testing.T) {
	out := Actions{ActionOutput{Port: 1}}
	cases := []struct {
		name  string
		is    Instructions
		table uint8
		et    ErrorType
		code  uint16 // 0xffff: valid
	}{
		{"ok", Instructions{InstMeter{MeterID: 1}, InstApplyActions{Actions: out}, InstClearActions{},
			InstWriteActions{Actions: out}, InstWriteMetadata{Metadata: 1, Mask: 1}, InstGotoTable{TableID: 1}}, 0, 0, 0xffff},
		{"goto backwards", Instructions{InstGotoTable{TableID: 1}}, 1, ErrTypeBadInstruction, BadInstBadTableID},
		{"goto 0xff", Instructions{InstGotoTable{TableID: 0xff}}, 0, ErrTypeBadInstruction, BadInstBadTableID},
		{"twice", Instructions{InstClearActions{}, InstClearActions{}}, 0, ErrTypeBadInstruction, BadInstUnsupInst},
		{"experimenter", Instructions{InstExperimenter{Experimenter: 1}}, 0, ErrTypeBadInstruction, BadInstBadExperimenter},
		{"bad nested action", Instructions{InstApplyActions{Actions: Actions{ActionOutput{Port: 0}}}}, 0, ErrTypeBadAction, BadActionBadOutPort},
		{"bad write action", Instructions{InstWriteActions{Actions: Actions{ActionGroup{GroupID: GroupAny}}}}, 0, ErrTypeBadAction, BadActionBadOutGroup},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := ValidateInstructions(c.is, c.table, Match{})
			if c.code == 0xffff {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantErr(t, err, c.et, c.code)
		})
	}
	dec := []struct {
		name string
		hex  string
		et   ErrorType
		code uint16
	}{
		{"unknown type", "00070008 00000000", ErrTypeBadInstruction, BadInstUnknownInst},
		{"length 4", "00010004", ErrTypeBadInstruction, BadInstBadLen},
		{"goto length 16", "00010010 01000000 00000000 00000000", ErrTypeBadInstruction, BadInstBadLen},
		{"write_metadata length 8", "00020008 00000000", ErrTypeBadInstruction, BadInstBadLen},
		{"apply with bad action", "00040010 00000000 00000008 00000001", ErrTypeBadAction, BadActionBadLen},
		{"overrun", "00040018 00000000", ErrTypeBadInstruction, BadInstBadLen},
	}
	for _, c := range dec {
		t.Run("decode "+c.name, func(t *testing.T) {
			var is Instructions
			wantErr(t, is.UnmarshalBinary(mustHex(removeSpaces(c.hex))), c.et, c.code)
		})
	}
}

func TestModValidate(t *testing.T) {
	okFlow := func() *FlowMod {
		return &FlowMod{Command: FlowAdd, BufferID: NoBuffer, OutPort: PortAny, OutGroup: GroupAny,
			Match:        Match{}.Add(ipv4, tcp, Uint(FieldTCPDst, 80)),
			Instructions: Instructions{InstApplyActions{Actions: Actions{ActionOutput{Port: 1}}}}}
	}
	if err := okFlow().Validate(); err != nil {
		t.Fatal(err)
	}
	fm := okFlow()
	fm.Command = 9
	wantErr(t, fm.Validate(), ErrTypeFlowModFailed, FlowModBadCommand)
	fm = okFlow()
	fm.Flags = 0x100
	wantErr(t, fm.Validate(), ErrTypeFlowModFailed, FlowModBadFlags)
	fm = okFlow()
	fm.TableID = TableAll
	wantErr(t, fm.Validate(), ErrTypeFlowModFailed, FlowModBadTableID)
	fm.Command = FlowDelete // delete in all tables is fine
	if err := fm.Validate(); err != nil {
		t.Fatal(err)
	}
	fm = okFlow()
	fm.Match = Match{}.Add(Uint(FieldTCPDst, 80))
	wantErr(t, fm.Validate(), ErrTypeBadMatch, BadMatchBadPrereq)

	gm := func() *GroupMod {
		return &GroupMod{Command: GroupAdd, GroupType: GroupTypeSelect, GroupID: 1,
			Buckets: []Bucket{{Weight: 1, WatchPort: PortAny, WatchGroup: GroupAny, Actions: Actions{ActionOutput{Port: 1}}}}}
	}
	if err := gm().Validate(); err != nil {
		t.Fatal(err)
	}
	g := gm()
	g.Command = 7
	wantErr(t, g.Validate(), ErrTypeGroupModFailed, GroupModBadCommand)
	g = gm()
	g.GroupType = 9
	wantErr(t, g.Validate(), ErrTypeGroupModFailed, GroupModBadType)
	g = gm()
	g.GroupID = GroupAll
	wantErr(t, g.Validate(), ErrTypeGroupModFailed, GroupModInvalidGroup)
	g.Command = GroupDelete
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	g = gm()
	g.GroupType = GroupTypeIndirect
	g.Buckets = append(g.Buckets, g.Buckets[0])
	wantErr(t, g.Validate(), ErrTypeGroupModFailed, GroupModBadBucket)
	g = gm()
	g.GroupType = GroupTypeAll
	wantErr(t, g.Validate(), ErrTypeGroupModFailed, GroupModBadBucket) // weight outside select
	g = gm()
	g.GroupType, g.Buckets[0].Weight = GroupTypeFF, 0
	wantErr(t, g.Validate(), ErrTypeGroupModFailed, GroupModBadWatch)
	g = gm()
	g.Buckets[0].Actions = Actions{ActionOutput{Port: 0}}
	wantErr(t, g.Validate(), ErrTypeBadAction, BadActionBadOutPort)

	po := &PacketOut{BufferID: NoBuffer, InPort: PortController, Actions: Actions{ActionOutput{Port: PortTable}}}
	if err := po.Validate(); err != nil {
		t.Fatal(err)
	}
	po.InPort = 0
	wantErr(t, po.Validate(), ErrTypeBadRequest, BadRequestBadPort)
	po.InPort, po.BufferID = 1, 7
	wantErr(t, po.Validate(), ErrTypeBadRequest, BadRequestBufferUnknown)
}

// TestMessageErrors covers framing and header errors of whole messages.
func TestMessageErrors(t *testing.T) {
	cases := []struct {
		name  string
		hex   string
		et    ErrorType
		code  uint16
		short bool
	}{
		{"short header", "040000", ErrTypeBadRequest, BadRequestBadLen, true},
		{"length beyond input", "0402001000000001", ErrTypeBadRequest, BadRequestBadLen, true},
		{"length below 8", "0402000400000001", ErrTypeBadRequest, BadRequestBadLen, false},
		{"trailing bytes", "040200080000000100", ErrTypeBadRequest, BadRequestBadLen, false},
		{"bad version", "0102000800000001", ErrTypeBadRequest, BadRequestBadVersion, false},
		{"unknown type", "041e000800000001", ErrTypeBadRequest, BadRequestBadType, false},
		{"queue get config", "0416000800000001", ErrTypeBadRequest, BadRequestBadType, false},
		{"barrier with body", "0414000c0000000100000000", ErrTypeBadRequest, BadRequestBadLen, false},
		{"short features reply", "0406000c0000000100000000", ErrTypeBadRequest, BadRequestBadLen, true},
		{"flow mod bad match", "040e003800000001" + strings.Repeat("00", 40) + "0000000800000000",
			ErrTypeBadMatch, BadMatchBadType, false},
		{"multipart desc with body", "04120018000000010000000000000000" + "0000000000000000", ErrTypeBadRequest, BadRequestBadLen, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := mustHex(c.hex)
			_, err := Unmarshal(b)
			wantErr(t, err, c.et, c.code)
			if got := errors.Is(err, io.ErrUnexpectedEOF); got != c.short {
				t.Errorf("errors.Is(err, io.ErrUnexpectedEOF) = %v, want %v", got, c.short)
			}
			// The reply a switch sends back echoes the request.
			reply := ErrorReply(err, b)
			if reply.Type != c.et || reply.Code != c.code {
				t.Errorf("ErrorReply = %s", errorName(reply.Type, reply.Code))
			}
		})
	}
}

// TestErrorReply checks the OFPT_ERROR built for a request.
func TestErrorReply(t *testing.T) {
	req := goldenMessages(t, "add_flow_tcp")[5] // 144-byte FLOW_MOD, xid 6
	e := &Error{Type: ErrTypeBadMatch, Code: BadMatchBadPrereq}
	m := e.Reply(req)
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	want := append(mustHex("0401004c00000006"+"0004"+"0009"), req[:64]...)
	if string(b) != string(want) {
		t.Fatalf("error reply\n got %x\nwant %x", b, want)
	}
	// Non-*Error errors still produce something sensible.
	if r := ErrorReply(io.ErrUnexpectedEOF, req); r.Type != ErrTypeBadRequest || r.Code != BadRequestBadLen {
		t.Errorf("EOF → %v", r.Err())
	}
	if r := ErrorReply(errors.New("x"), req[:3]); r.Xid != 0 || len(r.Data) != 3 {
		t.Errorf("short request → %+v", r)
	}
	// Experimenter errors carry their id.
	x := &ErrorMsg{Type: ErrTypeExperimenter, Code: 5, Experimenter: ExperimenterNicira, Data: []byte{1}}
	xb, _ := x.MarshalBinary()
	var y ErrorMsg
	if err := y.UnmarshalBinary(xb); err != nil || y.Experimenter != ExperimenterNicira || y.Code != 5 {
		t.Fatalf("experimenter error round trip: %+v %v", y, err)
	}
}

func TestOtherValidate(t *testing.T) {
	cases := []struct {
		name string
		m    interface{ Validate() error }
		et   ErrorType
		code uint16 // 0xffff: valid
	}{
		{"set_config ok", &SetConfig{SwitchConfig: SwitchConfig{Flags: ConfigFragReasm}}, 0, 0xffff},
		{"set_config flags", &SetConfig{SwitchConfig: SwitchConfig{Flags: 4}}, ErrTypeSwitchConfigFailed, SwitchConfigBadFlags},
		{"role ok", &RoleRequest{Role: Role{Role: RoleSlave}}, 0, 0xffff},
		{"role 4", &RoleRequest{Role: Role{Role: 4}}, ErrTypeRoleRequestFailed, RoleRequestBadRole},
		{"table_mod all", &TableMod{TableID: TableAll}, 0, 0xffff},
		{"table_mod config", &TableMod{TableID: 1, Config: 8}, ErrTypeTableModFailed, TableModBadConfig},
		{"port_mod ok", &PortMod{PortNo: 1, Config: PortConfigNoFwd, Mask: PortConfigNoFwd}, 0, 0xffff},
		{"port_mod LOCAL", &PortMod{PortNo: PortLocal}, ErrTypePortModFailed, PortModBadPort},
		{"port_mod config", &PortMod{PortNo: 1, Mask: 1 << 3}, ErrTypePortModFailed, PortModBadConfig},
		{"meter ok", &MeterMod{Command: MeterAdd, Flags: MeterFlagKbps, MeterID: 1,
			Bands: []MeterBand{{Type: MeterBandDrop, Rate: 1}}}, 0, 0xffff},
		{"meter command", &MeterMod{Command: 3, MeterID: 1}, ErrTypeMeterModFailed, MeterModBadCommand},
		{"meter id 0", &MeterMod{Command: MeterAdd, Flags: MeterFlagKbps}, ErrTypeMeterModFailed, MeterModInvalidMeter},
		{"meter delete all", &MeterMod{Command: MeterDelete, MeterID: MeterAll}, 0, 0xffff},
		{"meter kbps and pktps", &MeterMod{Command: MeterAdd, MeterID: 1, Flags: MeterFlagKbps | MeterFlagPktps}, ErrTypeMeterModFailed, MeterModBadFlags},
		{"meter band type", &MeterMod{Command: MeterAdd, MeterID: 1, Flags: MeterFlagPktps,
			Bands: []MeterBand{{Type: 3, Rate: 1}}}, ErrTypeMeterModFailed, MeterModBadBand},
		{"meter rate 0", &MeterMod{Command: MeterAdd, MeterID: 1, Flags: MeterFlagPktps,
			Bands: []MeterBand{{Type: MeterBandDrop}}}, ErrTypeMeterModFailed, MeterModBadRate},
		{"multipart queue", &MultipartRequest{Body: &RawBody{Type: MPQueue}}, ErrTypeBadRequest, BadRequestBadMultipart},
		{"multipart flow bad table", &MultipartRequest{Body: &FlowStatsRequest{TableID: 0xfe + 0}}, 0, 0xffff},
		{"multipart flow bad match", &MultipartRequest{Body: &AggregateStatsRequest{TableID: TableAll,
			Match: Match{}.Add(Uint(FieldTCPDst, 1))}}, ErrTypeBadMatch, BadMatchBadPrereq},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.m.Validate()
			if c.code == 0xffff {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantErr(t, err, c.et, c.code)
		})
	}
}
