package openflow

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// Fuzz targets, one per decoder family. Each asserts more than "no
// panic": decode errors are *Error values, and whatever decodes re-encodes
// to bytes that decode to an equal value and re-encode identically.

// seedMessages adds every golden message and our own replies to f.
func seedMessages(f *testing.F) []Message {
	var msgs []Message
	for _, name := range goldenNames(f) {
		for _, raw := range goldenMessages(f, name) {
			f.Add(raw)
			if m, err := Unmarshal(raw); err == nil {
				msgs = append(msgs, m)
			}
		}
	}
	for _, m := range []Message{
		&MultipartReply{Body: &FlowStatsReply{Stats: []FlowStats{{Priority: 1, Match: Match{}.Add(ipv4),
			Instructions: Instructions{InstGotoTable{TableID: 1}}}}}},
		&MultipartReply{Body: &TableFeaturesBody{Reply: true, Tables: []TableFeatures{testTableFeatures()}}},
		&MultipartReply{Body: &PortDescReply{Ports: testPorts}},
		&MultipartReply{Body: &GroupStatsReply{Stats: []GroupStats{{GroupID: 1, Buckets: []BucketCounter{{1, 2}}}}}},
		&MultipartReply{Body: &GroupDescReply{Groups: []GroupDesc{{GroupID: 1, Buckets: []Bucket{{Actions: Actions{ActionOutput{Port: 1}}}}}}}},
		&PacketIn{Match: Match{}.Add(Uint(FieldInPort, 1)), Data: []byte{1, 2, 3}},
		&PortStatus{Port: testPorts[0]},
		&FlowRemoved{Match: Match{}.Add(ipv4)},
		&ErrorMsg{Type: ErrTypeExperimenter, Code: 1, Experimenter: 2, Data: []byte{3}},
		&Experimenter{Experimenter: ExperimenterNicira, ExpType: 16, Data: []byte{0, 0, 0, 2}},
		&RoleRequest{Role: Role{Role: RoleMaster, GenerationID: 7}},
		&SetAsync{AsyncConfig: AsyncConfig{PacketInMask: [2]uint32{1, 2}}},
		&TableMod{TableID: 1, Config: 3},
	} {
		if b, err := Marshal(m); err == nil {
			f.Add(b)
		}
	}
	return msgs
}

func mustBeOFError(t *testing.T, err error) {
	t.Helper()
	var oe *Error
	if !errors.As(err, &oe) {
		t.Fatalf("decode error %v (%T) is not an *Error", err, err)
	}
}

func FuzzUnmarshal(f *testing.F) {
	seedMessages(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Unmarshal(b)
		if err != nil {
			mustBeOFError(t, err)
			ErrorReply(err, b)
			return
		}
		if v, ok := m.(interface{ Validate() error }); ok {
			if err := v.Validate(); err != nil {
				mustBeOFError(t, err)
			}
		}
		if s, ok := m.(interface{ String() string }); ok {
			_ = s.String()
		}
		out, err := Marshal(m)
		if err != nil {
			// Only growth past 64 KiB (e.g. padding a bare HELLO
			// element) may stop re-encoding.
			if len(b) < MaxMessageLen-8 {
				t.Fatalf("%s decoded but does not encode: %v", m.MsgType(), err)
			}
			return
		}
		m2, err := Unmarshal(out)
		if err != nil {
			t.Fatalf("%s re-encoding does not decode: %v\nin  %x\nout %x", m.MsgType(), err, b, out)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("%s round trip changed the value:\n%#v\n%#v", m.MsgType(), m, m2)
		}
		out2, err := Marshal(m2)
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("%s encoding is not stable: %v\n%x\n%x", m.MsgType(), err, out, out2)
		}
	})
}

func FuzzMatch(f *testing.F) {
	for _, m := range seedMessages(f) {
		var match Match
		switch m := m.(type) {
		case *FlowMod:
			match = m.Match
		case *MultipartRequest:
			if r, ok := m.Body.(*FlowStatsRequest); ok {
				match = r.Match
			}
		}
		if b, err := match.MarshalBinary(); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Match
		if err := m.UnmarshalBinary(b); err != nil {
			mustBeOFError(t, err)
			return
		}
		if err := m.Validate(); err != nil {
			mustBeOFError(t, err)
		}
		_ = m.String()
		_ = m.Present()
		out, err := m.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded match does not encode: %v", err)
		}
		// Padding bytes are not kept, so compare the unpadded part.
		if n := int(be.Uint16(b[2:])); !bytes.Equal(out[:n], b[:n]) {
			t.Fatalf("match re-encodes differently:\n%x\n%x", b, out)
		}
		var m2 Match
		if err := m2.UnmarshalBinary(out); err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip: %v\n%#v\n%#v", err, m, m2)
		}
	})
}

func FuzzActions(f *testing.F) {
	for _, m := range seedMessages(f) {
		var lists []Actions
		switch m := m.(type) {
		case *FlowMod:
			for _, in := range m.Instructions {
				switch in := in.(type) {
				case InstApplyActions:
					lists = append(lists, in.Actions)
				case InstWriteActions:
					lists = append(lists, in.Actions)
				}
			}
		case *PacketOut:
			lists = append(lists, m.Actions)
		case *GroupMod:
			for _, bk := range m.Buckets {
				lists = append(lists, bk.Actions)
			}
		}
		for _, as := range lists {
			if b, err := as.MarshalBinary(); err == nil {
				f.Add(b)
			}
		}
	}
	f.Add(mustHex("ffff00100000232000010203040506070000000000000000"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var as Actions
		if err := as.UnmarshalBinary(b); err != nil {
			mustBeOFError(t, err)
			return
		}
		if err := ValidateActions(as, Match{}.Add(ipv4, tcp)); err != nil {
			mustBeOFError(t, err)
		}
		_ = as.String()
		if as.Len() != len(b) {
			t.Fatalf("Len() = %d for %d bytes", as.Len(), len(b))
		}
		out, err := as.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded actions do not encode: %v", err)
		}
		var as2 Actions
		if err := as2.UnmarshalBinary(out); err != nil || !reflect.DeepEqual(as, as2) {
			t.Fatalf("round trip: %v\n%#v\n%#v", err, as, as2)
		}
		out2, _ := as2.MarshalBinary()
		if !bytes.Equal(out, out2) {
			t.Fatalf("encoding not stable:\n%x\n%x", out, out2)
		}
	})
}

func FuzzInstructions(f *testing.F) {
	for _, m := range seedMessages(f) {
		if fm, ok := m.(*FlowMod); ok {
			if b, err := fm.Instructions.MarshalBinary(); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var is Instructions
		if err := is.UnmarshalBinary(b); err != nil {
			mustBeOFError(t, err)
			return
		}
		if err := ValidateInstructions(is, 0, Match{}); err != nil {
			mustBeOFError(t, err)
		}
		_ = is.String()
		if is.Len() != len(b) {
			t.Fatalf("Len() = %d for %d bytes", is.Len(), len(b))
		}
		out, err := is.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var is2 Instructions
		if err := is2.UnmarshalBinary(out); err != nil || !reflect.DeepEqual(is, is2) {
			t.Fatalf("round trip: %v\n%#v\n%#v", err, is, is2)
		}
	})
}

// FuzzReader frames a stream of messages; it must never panic and must
// return every complete message intact.
func FuzzReader(f *testing.F) {
	var stream []byte
	for _, raw := range goldenMessages(f, "add_flow_tcp") {
		stream = append(stream, raw...)
	}
	f.Add(stream)
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewReader(bytes.NewReader(b))
		off := 0
		for {
			raw, err := r.ReadRaw()
			if err != nil {
				return
			}
			if !bytes.Equal(raw, b[off:off+len(raw)]) || int(be.Uint16(raw[2:])) != len(raw) {
				t.Fatalf("framed %x at offset %d", raw, off)
			}
			off += len(raw)
		}
	})
}

// FuzzParseFlow feeds the ovs-ofctl syntax parser: whatever parses must
// encode, decode to the same flow, and print to text that parses back to
// the same bytes.
func FuzzParseFlow(f *testing.F) {
	for _, c := range goldenCommands {
		if spec, ok := strings.CutPrefix(c.args, "add-flow SOCK "); ok {
			f.Add(spec)
		}
	}
	f.Add("priority=1,ip,nw_dst=10.0.0.0/255.0.255.0,vlan_tci=0x1000/0x1000,actions=CONTROLLER,copy_ttl_in,push_pbb,pop_pbb")
	f.Fuzz(func(t *testing.T, s string) {
		fm, err := ParseFlow(s)
		if err != nil {
			return
		}
		_ = fm.Validate()
		b, err := fm.MarshalBinary()
		if err != nil {
			return // e.g. more instructions than fit in 64 KiB
		}
		m, err := Unmarshal(b)
		if err != nil {
			t.Fatalf("ParseFlow(%q) encodes to undecodable %x: %v", s, b, err)
		}
		if !reflect.DeepEqual(m.(*FlowMod).Match, fm.Match) {
			t.Fatalf("match changed through the wire: %q", s)
		}
		fm2, err := ParseFlow(fm.String())
		if err != nil {
			t.Fatalf("ParseFlow(%q).String() = %q does not parse: %v", s, fm.String(), err)
		}
		// The text form does not say whether an all-ones mask was sent,
		// so compare with such masks dropped.
		b1, _ := normalizeMasks(fm).MarshalBinary()
		b2, err := normalizeMasks(fm2).MarshalBinary()
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("ParseFlow(%q) and ParseFlow(String()=%q) differ:\n%x\n%x", s, fm.String(), b1, b2)
		}
	})
}

func normalizeMasks(fm *FlowMod) *FlowMod {
	c := *fm
	c.Match = Match{}
	for _, o := range fm.Match.Fields {
		if o.Mask != nil && allOnes(o.Mask) {
			o.Mask = nil
		}
		c.Match.Fields = append(c.Match.Fields, o)
	}
	return &c
}
