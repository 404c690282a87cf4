package openflow

import (
	"bufio"
	"encoding"
	"encoding/binary"
	"fmt"
	"io"
)

var be = binary.BigEndian

// Version is the OpenFlow wire version this package speaks (1.3 = 0x04).
const Version uint8 = 0x04

// HeaderLen is the size of ofp_header; MaxMessageLen the largest message
// the 16-bit length field can describe.
const (
	HeaderLen     = 8
	MaxMessageLen = 0xffff
)

// MsgType is ofp_type, the second byte of every message.
type MsgType uint8

// OpenFlow 1.3 message types (ofp_type).
const (
	TypeHello                 MsgType = 0
	TypeError                 MsgType = 1
	TypeEchoRequest           MsgType = 2
	TypeEchoReply             MsgType = 3
	TypeExperimenter          MsgType = 4
	TypeFeaturesRequest       MsgType = 5
	TypeFeaturesReply         MsgType = 6
	TypeGetConfigRequest      MsgType = 7
	TypeGetConfigReply        MsgType = 8
	TypeSetConfig             MsgType = 9
	TypePacketIn              MsgType = 10
	TypeFlowRemoved           MsgType = 11
	TypePortStatus            MsgType = 12
	TypePacketOut             MsgType = 13
	TypeFlowMod               MsgType = 14
	TypeGroupMod              MsgType = 15
	TypePortMod               MsgType = 16
	TypeTableMod              MsgType = 17
	TypeMultipartRequest      MsgType = 18
	TypeMultipartReply        MsgType = 19
	TypeBarrierRequest        MsgType = 20
	TypeBarrierReply          MsgType = 21
	TypeQueueGetConfigRequest MsgType = 22
	TypeQueueGetConfigReply   MsgType = 23
	TypeRoleRequest           MsgType = 24
	TypeRoleReply             MsgType = 25
	TypeGetAsyncRequest       MsgType = 26
	TypeGetAsyncReply         MsgType = 27
	TypeSetAsync              MsgType = 28
	TypeMeterMod              MsgType = 29
)

var msgTypeNames = [...]string{"HELLO", "ERROR", "ECHO_REQUEST", "ECHO_REPLY",
	"EXPERIMENTER", "FEATURES_REQUEST", "FEATURES_REPLY", "GET_CONFIG_REQUEST",
	"GET_CONFIG_REPLY", "SET_CONFIG", "PACKET_IN", "FLOW_REMOVED", "PORT_STATUS",
	"PACKET_OUT", "FLOW_MOD", "GROUP_MOD", "PORT_MOD", "TABLE_MOD",
	"MULTIPART_REQUEST", "MULTIPART_REPLY", "BARRIER_REQUEST", "BARRIER_REPLY",
	"QUEUE_GET_CONFIG_REQUEST", "QUEUE_GET_CONFIG_REPLY", "ROLE_REQUEST",
	"ROLE_REPLY", "GET_ASYNC_REQUEST", "GET_ASYNC_REPLY", "SET_ASYNC", "METER_MOD"}

// String returns the spec name without the OFPT_ prefix.
func (t MsgType) String() string {
	if int(t) < len(msgTypeNames) {
		return msgTypeNames[t]
	}
	return fmt.Sprintf("TYPE_%d", uint8(t))
}

// Header is ofp_header, the 8 bytes in front of every message.
//
//	1 byte:  version (0x04 for OpenFlow 1.3)
//	1 byte:  type (MsgType)
//	2 bytes: length of the whole message, including this header
//	4 bytes: xid, echoed in replies
type Header struct {
	Version uint8
	Type    MsgType
	Length  uint16
	Xid     uint32
}

// MarshalBinary encodes the 8-byte header.
func (h Header) MarshalBinary() ([]byte, error) {
	b := make([]byte, HeaderLen)
	b[0], b[1] = h.Version, uint8(h.Type)
	be.PutUint16(b[2:], h.Length)
	be.PutUint32(b[4:], h.Xid)
	return b, nil
}

// UnmarshalBinary decodes the first 8 bytes of b. It does not check the
// length field against len(b); see Unmarshal and Reader for that.
func (h *Header) UnmarshalBinary(b []byte) error {
	if len(b) < HeaderLen {
		return short(ErrTypeBadRequest, BadRequestBadLen, "header")
	}
	h.Version, h.Type = b[0], MsgType(b[1])
	h.Length = be.Uint16(b[2:])
	h.Xid = be.Uint32(b[4:])
	return nil
}

// Message is one OpenFlow message. MarshalBinary returns the whole message
// including its header (type and length are filled in); UnmarshalBinary
// takes the whole message and checks the type byte matches.
type Message interface {
	encoding.BinaryMarshaler
	encoding.BinaryUnmarshaler
	// MsgType is the ofp_type this Go type encodes.
	MsgType() MsgType
	// Hdr gives access to the version and xid every message carries.
	Hdr() *MsgHeader
}

// MsgHeader is the part of ofp_header a message owns: the version (zero
// means Version when marshaling) and the transaction id. Type and length
// are derived from the Go type and the encoded body.
type MsgHeader struct {
	Version uint8
	Xid     uint32
}

// Hdr returns h itself, so that embedding MsgHeader implements Message.Hdr.
func (h *MsgHeader) Hdr() *MsgHeader { return h }

// start returns a buffer of n bytes (n ≥ 8) with the header written for type t.
func (h *MsgHeader) start(t MsgType, n int) []byte {
	b := make([]byte, n)
	v := h.Version
	if v == 0 {
		v = Version
	}
	b[0], b[1] = v, uint8(t)
	be.PutUint32(b[4:], h.Xid)
	return b
}

// finish writes the final length into b's header.
func finish(b []byte) ([]byte, error) {
	if len(b) > MaxMessageLen {
		return nil, fmt.Errorf("openflow: %s message of %d bytes exceeds %d", MsgType(b[1]), len(b), MaxMessageLen)
	}
	be.PutUint16(b[2:], uint16(len(b)))
	return b, nil
}

// parse checks b holds exactly one message of type t and fills h from it.
// It returns the body (the bytes after the header).
func (h *MsgHeader) parse(b []byte, t MsgType) ([]byte, error) {
	var hd Header
	if err := hd.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	if hd.Type != t {
		return nil, bad(ErrTypeBadRequest, BadRequestBadType, "message type %s, want %s", hd.Type, t)
	}
	if hd.Version == 0 {
		// No OpenFlow version 0 exists, and MsgHeader uses 0 for "Version".
		return nil, bad(ErrTypeBadRequest, BadRequestBadVersion, "version 0")
	}
	switch {
	case int(hd.Length) < HeaderLen:
		return nil, bad(ErrTypeBadRequest, BadRequestBadLen, "header length %d", hd.Length)
	case int(hd.Length) > len(b):
		return nil, short(ErrTypeBadRequest, BadRequestBadLen, fmt.Sprintf("%s of %d bytes, have %d", t, hd.Length, len(b)))
	case int(hd.Length) < len(b):
		return nil, bad(ErrTypeBadRequest, BadRequestBadLen, "%s length %d but %d bytes given", t, hd.Length, len(b))
	}
	h.Version, h.Xid = hd.Version, hd.Xid
	return b[HeaderLen:], nil
}

// Marshal encodes m, header included.
func Marshal(m Message) ([]byte, error) { return m.MarshalBinary() }

// New returns an empty message of type t, or an OFPBRC_BAD_TYPE error for
// types this package does not decode (QUEUE_GET_CONFIG_*).
func New(t MsgType) (Message, error) {
	var m Message
	switch t {
	case TypeHello:
		m = &Hello{}
	case TypeError:
		m = &ErrorMsg{}
	case TypeEchoRequest:
		m = &EchoRequest{}
	case TypeEchoReply:
		m = &EchoReply{}
	case TypeExperimenter:
		m = &Experimenter{}
	case TypeFeaturesRequest:
		m = &FeaturesRequest{}
	case TypeFeaturesReply:
		m = &FeaturesReply{}
	case TypeGetConfigRequest:
		m = &GetConfigRequest{}
	case TypeGetConfigReply:
		m = &GetConfigReply{}
	case TypeSetConfig:
		m = &SetConfig{}
	case TypePacketIn:
		m = &PacketIn{}
	case TypeFlowRemoved:
		m = &FlowRemoved{}
	case TypePortStatus:
		m = &PortStatus{}
	case TypePacketOut:
		m = &PacketOut{}
	case TypeFlowMod:
		m = &FlowMod{}
	case TypeGroupMod:
		m = &GroupMod{}
	case TypePortMod:
		m = &PortMod{}
	case TypeTableMod:
		m = &TableMod{}
	case TypeMultipartRequest:
		m = &MultipartRequest{}
	case TypeMultipartReply:
		m = &MultipartReply{}
	case TypeBarrierRequest:
		m = &BarrierRequest{}
	case TypeBarrierReply:
		m = &BarrierReply{}
	case TypeRoleRequest:
		m = &RoleRequest{}
	case TypeRoleReply:
		m = &RoleReply{}
	case TypeGetAsyncRequest:
		m = &GetAsyncRequest{}
	case TypeGetAsyncReply:
		m = &GetAsyncReply{}
	case TypeSetAsync:
		m = &SetAsync{}
	case TypeMeterMod:
		m = &MeterMod{}
	default:
		return nil, bad(ErrTypeBadRequest, BadRequestBadType, "unsupported message type %s", t)
	}
	return m, nil
}

// Unmarshal decodes one whole message (header included; len(b) must equal
// the header's length) into its concrete type. Messages other than HELLO
// and ERROR must carry version 0x04 (else OFPBRC_BAD_VERSION).
func Unmarshal(b []byte) (Message, error) {
	var h Header
	if err := h.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	if h.Version != Version && h.Type != TypeHello && h.Type != TypeError {
		return nil, bad(ErrTypeBadRequest, BadRequestBadVersion, "version 0x%02x", h.Version)
	}
	m, err := New(h.Type)
	if err != nil {
		return nil, err
	}
	if err := m.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	return m, nil
}

// Reader frames OpenFlow messages from a byte stream (a TCP or Unix
// connection to the peer).
type Reader struct {
	r *bufio.Reader
}

// NewReader returns a Reader framing messages from r.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 64<<10)}
}

// ReadRaw returns the next message's bytes, header included. A header
// length below 8 is an *Error (OFPBRC_BAD_LEN) after which the stream cannot
// be resynchronised and should be closed. EOF before a message starts is
// io.EOF; EOF inside a message is io.ErrUnexpectedEOF.
func (r *Reader) ReadRaw() ([]byte, error) {
	var hb [HeaderLen]byte
	if _, err := io.ReadFull(r.r, hb[:]); err != nil {
		return nil, err
	}
	n := int(be.Uint16(hb[2:]))
	if n < HeaderLen {
		return nil, bad(ErrTypeBadRequest, BadRequestBadLen, "header length %d < 8", n)
	}
	// n > 65535 cannot be expressed by the 16-bit field; MaxMessageLen is
	// enforced by construction.
	b := make([]byte, n)
	copy(b, hb[:])
	if _, err := io.ReadFull(r.r, b[HeaderLen:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

// ReadMessage reads and decodes the next message. When decoding fails the
// raw bytes are still returned so that the caller can answer with
// ErrorReply(err, raw) and carry on with the next message.
func (r *Reader) ReadMessage() (Message, []byte, error) {
	b, err := r.ReadRaw()
	if err != nil {
		return nil, b, err
	}
	m, err := Unmarshal(b)
	return m, b, err
}

// WriteMessage encodes m and writes it to w in one Write call.
func WriteMessage(w io.Writer, m Message) error {
	b, err := m.MarshalBinary()
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
