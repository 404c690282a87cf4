package openflow

// PACKET_IN and PACKET_OUT: packets between the switch and the controller.

// Packet-in reasons (ofp_packet_in_reason).
const (
	PacketInReasonNoMatch    uint8 = 0 // table-miss flow entry
	PacketInReasonAction     uint8 = 1 // output:CONTROLLER
	PacketInReasonInvalidTTL uint8 = 2
)

// PacketIn is OFPT_PACKET_IN, a packet sent to the controller.
//
//	8 bytes: ofp_header
//	4 bytes: buffer_id (NoBuffer if the switch did not buffer it)
//	2 bytes: total_len, the full length of the frame
//	1 byte:  reason (PacketInReason*)
//	1 byte:  table_id of the flow that sent it
//	8 bytes: cookie of that flow
//	n bytes: match with the pipeline fields (in_port, metadata, tunnel_id), padded to 8
//	2 bytes: pad, so that the Ethernet frame's IP header is 4-byte aligned
//	rest:    the frame (possibly truncated to max_len/miss_send_len)
type PacketIn struct {
	MsgHeader
	BufferID uint32
	TotalLen uint16
	Reason   uint8
	TableID  uint8
	Cookie   uint64
	Match    Match
	Data     []byte
}

// MsgType returns TypePacketIn.
func (*PacketIn) MsgType() MsgType { return TypePacketIn }

// MarshalBinary encodes the PACKET_IN.
func (m *PacketIn) MarshalBinary() ([]byte, error) {
	b := m.start(TypePacketIn, 24)
	be.PutUint32(b[8:], m.BufferID)
	be.PutUint16(b[12:], m.TotalLen)
	b[14], b[15] = m.Reason, m.TableID
	be.PutUint64(b[16:], m.Cookie)
	b, err := m.Match.appendTo(b)
	if err != nil {
		return nil, err
	}
	b = append(b, 0, 0)
	return finish(append(b, m.Data...))
}

// UnmarshalBinary decodes a PACKET_IN.
func (m *PacketIn) UnmarshalBinary(b []byte) error {
	body, err := m.parse(b, TypePacketIn)
	if err != nil {
		return err
	}
	if len(body) < 16 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "packet in")
	}
	m.BufferID, m.TotalLen = be.Uint32(body), be.Uint16(body[4:])
	m.Reason, m.TableID, m.Cookie = body[6], body[7], be.Uint64(body[8:])
	n, err := m.Match.decode(body[16:])
	if err != nil {
		return err
	}
	rest := body[16+n:]
	if len(rest) < 2 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "packet in pad")
	}
	m.Data = append([]byte{}, rest[2:]...)
	return nil
}

// PacketOut is OFPT_PACKET_OUT, a packet the controller injects.
//
//	8 bytes: ofp_header
//	4 bytes: buffer_id (NoBuffer when the frame is in data)
//	4 bytes: in_port the actions see (PortController if none)
//	2 bytes: actions_len in bytes
//	6 bytes: pad
//	actions_len bytes: actions
//	rest:    the frame, only when buffer_id is NoBuffer
type PacketOut struct {
	MsgHeader
	BufferID uint32
	InPort   uint32
	Actions  Actions
	Data     []byte
}

// MsgType returns TypePacketOut.
func (*PacketOut) MsgType() MsgType { return TypePacketOut }

// MarshalBinary encodes the PACKET_OUT.
func (m *PacketOut) MarshalBinary() ([]byte, error) {
	b := m.start(TypePacketOut, 24)
	be.PutUint32(b[8:], m.BufferID)
	be.PutUint32(b[12:], m.InPort)
	b, err := m.Actions.appendTo(b)
	if err != nil {
		return nil, err
	}
	if len(b)-24 > 0xffff {
		return nil, errTooLong("packet out actions")
	}
	be.PutUint16(b[16:], uint16(len(b)-24))
	return finish(append(b, m.Data...))
}

// UnmarshalBinary decodes a PACKET_OUT.
func (m *PacketOut) UnmarshalBinary(b []byte) error {
	body, err := m.parse(b, TypePacketOut)
	if err != nil {
		return err
	}
	if len(body) < 16 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "packet out")
	}
	m.BufferID, m.InPort = be.Uint32(body), be.Uint32(body[4:])
	n := int(be.Uint16(body[8:]))
	if 16+n > len(body) {
		return short(ErrTypeBadRequest, BadRequestBadLen, "packet out actions")
	}
	if err := m.Actions.UnmarshalBinary(body[16 : 16+n]); err != nil {
		return err
	}
	m.Data = append([]byte{}, body[16+n:]...)
	return nil
}

// Validate checks the PACKET_OUT as a switch must: in_port must be a
// port number, LOCAL, CONTROLLER or ANY (else OFPBRC_BAD_PORT); nagare
// does not buffer packets, so any buffer_id other than NoBuffer is
// OFPBRC_BUFFER_UNKNOWN; and the actions must pass ValidateActions.
func (m *PacketOut) Validate() error {
	if !validInPort(m.InPort) && m.InPort != PortAny {
		return bad(ErrTypeBadRequest, BadRequestBadPort, "in_port %s", PortName(m.InPort))
	}
	if m.BufferID != NoBuffer {
		return bad(ErrTypeBadRequest, BadRequestBufferUnknown, "buffer %d", m.BufferID)
	}
	return ValidateActions(m.Actions, Match{})
}

func errTooLong(what string) error {
	return &Error{Type: ErrTypeBadRequest, Code: BadRequestBadLen, Reason: what + " too long to encode"}
}
