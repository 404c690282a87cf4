package openflow

import (
	"fmt"
	"net"
	"strings"
)

// Port numbers (ofp_port_no). Numbers 1..PortMax are physical or logical
// ports; the rest are reserved.
const (
	PortMax        uint32 = 0xffffff00
	PortInPort     uint32 = 0xfffffff8
	PortTable      uint32 = 0xfffffff9
	PortNormal     uint32 = 0xfffffffa
	PortFlood      uint32 = 0xfffffffb
	PortAll        uint32 = 0xfffffffc
	PortController uint32 = 0xfffffffd
	PortLocal      uint32 = 0xfffffffe
	PortAny        uint32 = 0xffffffff
)

// Group numbers (ofp_group).
const (
	GroupMax uint32 = 0xffffff00
	GroupAll uint32 = 0xfffffffc
	GroupAny uint32 = 0xffffffff
)

// NoBuffer is OFP_NO_BUFFER: the packet is not buffered on the switch.
const NoBuffer uint32 = 0xffffffff

var portNames = map[uint32]string{
	PortInPort: "IN_PORT", PortTable: "TABLE", PortNormal: "NORMAL", PortFlood: "FLOOD",
	PortAll: "ALL", PortController: "CONTROLLER", PortLocal: "LOCAL", PortAny: "ANY",
}

// PortName returns the ovs-ofctl name of a port: its number, or the
// reserved name ("LOCAL", "CONTROLLER", ...).
func PortName(p uint32) string {
	if s, ok := portNames[p]; ok {
		return s
	}
	return fmt.Sprint(p)
}

// Port config bits (ofp_port_config).
const (
	PortConfigPortDown   uint32 = 1 << 0
	PortConfigNoRecv     uint32 = 1 << 2
	PortConfigNoFwd      uint32 = 1 << 5
	PortConfigNoPacketIn uint32 = 1 << 6
)

// Port state bits (ofp_port_state).
const (
	PortStateLinkDown uint32 = 1 << 0
	PortStateBlocked  uint32 = 1 << 1
	PortStateLive     uint32 = 1 << 2
)

// Port feature bits (ofp_port_features), for curr/advertised/supported/peer.
const (
	PortFeature10MbHD    uint32 = 1 << 0
	PortFeature10MbFD    uint32 = 1 << 1
	PortFeature100MbHD   uint32 = 1 << 2
	PortFeature100MbFD   uint32 = 1 << 3
	PortFeature1GbHD     uint32 = 1 << 4
	PortFeature1GbFD     uint32 = 1 << 5
	PortFeature10GbFD    uint32 = 1 << 6
	PortFeature40GbFD    uint32 = 1 << 7
	PortFeature100GbFD   uint32 = 1 << 8
	PortFeature1TbFD     uint32 = 1 << 9
	PortFeatureOther     uint32 = 1 << 10
	PortFeatureCopper    uint32 = 1 << 11
	PortFeatureFiber     uint32 = 1 << 12
	PortFeatureAutoneg   uint32 = 1 << 13
	PortFeaturePause     uint32 = 1 << 14
	PortFeaturePauseAsym uint32 = 1 << 15
)

// PortLen is the size of ofp_port.
const PortLen = 64

// Port is ofp_port (64 bytes), as carried in PORT_STATUS and PORT_DESC.
//
//	4 bytes:  port_no
//	4 bytes:  pad
//	6 bytes:  hw_addr
//	2 bytes:  pad
//	16 bytes: name, NUL-terminated
//	4 bytes:  config (PortConfig* bits)
//	4 bytes:  state (PortState* bits)
//	4 bytes:  curr features (PortFeature* bits)
//	4 bytes:  advertised features
//	4 bytes:  supported features
//	4 bytes:  peer features
//	4 bytes:  curr_speed, kbps
//	4 bytes:  max_speed, kbps
type Port struct {
	PortNo     uint32
	HWAddr     net.HardwareAddr
	Name       string
	Config     uint32
	State      uint32
	Curr       uint32
	Advertised uint32
	Supported  uint32
	Peer       uint32
	CurrSpeed  uint32
	MaxSpeed   uint32
}

// MarshalBinary encodes the 64-byte port.
func (p Port) MarshalBinary() ([]byte, error) { return p.appendTo(nil), nil }

func (p Port) appendTo(b []byte) []byte {
	o := len(b)
	b = append(b, make([]byte, PortLen)...)
	be.PutUint32(b[o:], p.PortNo)
	copy(b[o+8:o+14], p.HWAddr)
	putString(b[o+16:o+32], p.Name)
	for i, v := range [8]uint32{p.Config, p.State, p.Curr, p.Advertised, p.Supported, p.Peer, p.CurrSpeed, p.MaxSpeed} {
		be.PutUint32(b[o+32+4*i:], v)
	}
	return b
}

// UnmarshalBinary decodes a 64-byte port.
func (p *Port) UnmarshalBinary(b []byte) error {
	if len(b) < PortLen {
		return short(ErrTypeBadRequest, BadRequestBadLen, "port")
	}
	w := func(i int) uint32 { return be.Uint32(b[32+4*i:]) }
	*p = Port{
		PortNo: be.Uint32(b), HWAddr: append(net.HardwareAddr{}, b[8:14]...), Name: getString(b[16:32]),
		Config: w(0), State: w(1), Curr: w(2), Advertised: w(3), Supported: w(4), Peer: w(5),
		CurrSpeed: w(6), MaxSpeed: w(7),
	}
	if len(b) != PortLen {
		return bad(ErrTypeBadRequest, BadRequestBadLen, "port of %d bytes", len(b))
	}
	return nil
}

// putString writes s NUL-terminated into the fixed field b, truncating.
func putString(b []byte, s string) {
	n := copy(b[:len(b)-1], s)
	clear(b[n:])
}

// getString reads a NUL-terminated fixed-size string. Like OVS, it keeps
// at most len(b)-1 bytes even if the peer left out the terminator, so that
// what we decode is what putString can encode.
func getString(b []byte) string {
	b = b[:len(b)-1]
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// Port status reasons (ofp_port_reason).
const (
	PortReasonAdd    uint8 = 0
	PortReasonDelete uint8 = 1
	PortReasonModify uint8 = 2
)

// PortStatus is OFPT_PORT_STATUS (80 bytes).
//
//	8 bytes:  ofp_header
//	1 byte:   reason (PortReason*)
//	7 bytes:  pad
//	64 bytes: ofp_port
type PortStatus struct {
	MsgHeader
	Reason uint8
	Port   Port
}

// MsgType returns TypePortStatus.
func (*PortStatus) MsgType() MsgType { return TypePortStatus }

// MarshalBinary encodes the PORT_STATUS.
func (m *PortStatus) MarshalBinary() ([]byte, error) {
	b := m.start(TypePortStatus, 16)
	b[8] = m.Reason
	return finish(m.Port.appendTo(b))
}

// UnmarshalBinary decodes a PORT_STATUS.
func (m *PortStatus) UnmarshalBinary(b []byte) error {
	body, err := m.parse(b, TypePortStatus)
	if err != nil {
		return err
	}
	if len(body) < 8+PortLen {
		return short(ErrTypeBadRequest, BadRequestBadLen, "port status")
	}
	m.Reason = body[0]
	return m.Port.UnmarshalBinary(body[8:])
}

// PortMod is OFPT_PORT_MOD (40 bytes).
//
//	8 bytes: ofp_header
//	4 bytes: port_no
//	4 bytes: pad
//	6 bytes: hw_addr, must match the port's (sanity check)
//	2 bytes: pad
//	4 bytes: config (PortConfig* bits)
//	4 bytes: mask, which config bits to change
//	4 bytes: advertise (PortFeature* bits; 0 leaves it unchanged)
//	4 bytes: pad
type PortMod struct {
	MsgHeader
	PortNo    uint32
	HWAddr    net.HardwareAddr
	Config    uint32
	Mask      uint32
	Advertise uint32
}

// MsgType returns TypePortMod.
func (*PortMod) MsgType() MsgType { return TypePortMod }

// MarshalBinary encodes the PORT_MOD.
func (m *PortMod) MarshalBinary() ([]byte, error) {
	b := m.start(TypePortMod, 40)
	be.PutUint32(b[8:], m.PortNo)
	copy(b[16:22], m.HWAddr)
	be.PutUint32(b[24:], m.Config)
	be.PutUint32(b[28:], m.Mask)
	be.PutUint32(b[32:], m.Advertise)
	return finish(b)
}

// UnmarshalBinary decodes a PORT_MOD.
func (m *PortMod) UnmarshalBinary(b []byte) error {
	body, err := m.parse(b, TypePortMod)
	if err != nil {
		return err
	}
	if len(body) < 32 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "port mod")
	}
	m.PortNo = be.Uint32(body)
	m.HWAddr = append(net.HardwareAddr{}, body[8:14]...)
	m.Config, m.Mask, m.Advertise = be.Uint32(body[16:]), be.Uint32(body[20:]), be.Uint32(body[24:])
	return nil
}

// Validate checks a PORT_MOD: the port must be a number (OFPPMFC_BAD_PORT)
// and only defined config bits may be set or masked (OFPPMFC_BAD_CONFIG).
// Whether the port exists and the hardware address matches is for the
// switch to check (OFPPMFC_BAD_PORT / OFPPMFC_BAD_HW_ADDR).
func (m *PortMod) Validate() error {
	if m.PortNo == 0 || m.PortNo > PortMax {
		return bad(ErrTypePortModFailed, PortModBadPort, "port %s", PortName(m.PortNo))
	}
	const known = PortConfigPortDown | PortConfigNoRecv | PortConfigNoFwd | PortConfigNoPacketIn
	if (m.Config|m.Mask)&^known != 0 {
		return bad(ErrTypePortModFailed, PortModBadConfig, "config %#x mask %#x", m.Config, m.Mask)
	}
	return nil
}
