package openflow

import (
	"errors"
	"io"
	"testing"
)

// TestShortInput cuts encodings of every decoder short at every length and
// demands an error that wraps io.ErrUnexpectedEOF and carries an
// OpenFlow error code.
func TestShortInput(t *testing.T) {
	check := func(t *testing.T, what string, full []byte, decode func([]byte) error) {
		t.Helper()
		if err := decode(full); err != nil {
			t.Fatalf("%s: full input: %v", what, err)
		}
		for n := range len(full) {
			err := decode(full[:n])
			var oe *Error
			if !errors.Is(err, io.ErrUnexpectedEOF) || !errors.As(err, &oe) {
				t.Fatalf("%s cut to %d of %d bytes: %v, want an *Error wrapping io.ErrUnexpectedEOF", what, n, len(full), err)
			}
		}
	}
	// Whole messages, golden and our own replies.
	var msgs [][]byte
	for _, name := range goldenNames(t) {
		msgs = append(msgs, goldenMessages(t, name)...)
	}
	for _, m := range []Message{
		&MultipartReply{Body: &FlowStatsReply{Stats: goldenFlowStats(t)}},
		&MultipartReply{Body: &TableFeaturesBody{Reply: true, Tables: []TableFeatures{testTableFeatures()}}},
		&MultipartReply{Body: &DescReply{MfrDesc: "x"}},
		&PortStatus{Port: testPorts[0]},
		&PacketIn{Match: Match{}.Add(Uint(FieldInPort, 1)), Data: []byte{1}},
	} {
		b, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, b)
	}
	for _, raw := range msgs {
		check(t, MsgType(raw[1]).String(), raw, func(b []byte) error { _, err := Unmarshal(b); return err })
	}
	// Sub-decoders on their own.
	fm := goldenOf(t, "add_flow_tcp", TypeFlowMod)[0].(*FlowMod)
	mb, _ := fm.Match.MarshalBinary()
	check(t, "match", mb, func(b []byte) error { var m Match; return m.UnmarshalBinary(b) })
	ob, _ := fm.Match.Fields[2].MarshalBinary()
	check(t, "oxm", ob, func(b []byte) error { var o OXM; return o.UnmarshalBinary(b) })
	for _, a := range fm.Instructions[0].(InstApplyActions).Actions {
		ab, _ := a.MarshalBinary()
		check(t, "action "+a.String(), ab, func(b []byte) error { _, _, err := ParseAction(b); return err })
	}
	for _, in := range (Instructions{fm.Instructions[0], InstWriteMetadata{Metadata: 1, Mask: 1}, InstGotoTable{TableID: 1}}) {
		ib, _ := in.MarshalBinary()
		check(t, "instruction "+in.String(), ib, func(b []byte) error { _, _, err := ParseInstruction(b); return err })
	}
	pb, _ := testPorts[0].MarshalBinary()
	check(t, "port", pb, func(b []byte) error { var p Port; return p.UnmarshalBinary(b) })
	gm := goldenOf(t, "add_group_select", TypeGroupMod)[0].(*GroupMod)
	bb, _ := gm.Buckets[0].MarshalBinary()
	check(t, "bucket", bb, func(b []byte) error { var bk Bucket; return bk.UnmarshalBinary(b) })
	hb, _ := Header{Version: 4}.MarshalBinary()
	check(t, "header", hb, func(b []byte) error { var h Header; return h.UnmarshalBinary(b) })
}

// TestReaderFraming checks stream framing: messages back to back, EOF
// between messages, EOF inside one, and a length below 8.
func TestReaderFraming(t *testing.T) {
	var stream []byte
	raws := goldenMessages(t, "show")
	for _, raw := range raws {
		stream = append(stream, raw...)
	}
	r := NewReader(bytesReader(stream))
	for i, want := range raws {
		m, raw, err := r.ReadMessage()
		if err != nil || string(raw) != string(want) || m.MsgType() != MsgType(want[1]) {
			t.Fatalf("message %d: %v %v", i, m, err)
		}
	}
	if _, err := r.ReadRaw(); err != io.EOF {
		t.Fatalf("after the last message: %v, want io.EOF", err)
	}
	if _, err := NewReader(bytesReader(stream[:len(stream)-1])).ReadRaw(); err != nil {
		t.Fatal(err) // the first message is complete
	}
	r = NewReader(bytesReader(raws[0][:10]))
	if _, err := r.ReadRaw(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut inside a message: %v", err)
	}
	_, err := NewReader(bytesReader(mustHex("0402000400000001"))).ReadRaw()
	wantErr(t, err, ErrTypeBadRequest, BadRequestBadLen)
}

type sliceReader struct{ b []byte }

func (s *sliceReader) Read(p []byte) (int, error) {
	if len(s.b) == 0 {
		return 0, io.EOF
	}
	// Hand out at most 5 bytes per call to exercise partial reads.
	n := copy(p, s.b[:min(5, len(s.b))])
	s.b = s.b[n:]
	return n, nil
}

func bytesReader(b []byte) io.Reader { return &sliceReader{b: b} }
