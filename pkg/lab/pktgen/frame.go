package pktgen

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
)

// Frame layout (no VLAN, no IP options):
//
//	 0 Ethernet: 6 dst MAC, 6 src MAC, 2 EtherType 0x0800
//	14 IPv4: 1 version+IHL (0x45), 1 TOS, 2 total length, 2 ID, 2 flags+fragment
//	   offset (DF), 1 TTL, 1 protocol (17), 2 header checksum, 4 src, 4 dst
//	34 UDP: 2 src port, 2 dst port, 2 length, 2 checksum
//	42 payload: 4 flow number (big endian), then zeros
const (
	ethLen     = 14
	ipv4Len    = 20
	udpLen     = 8
	headersLen = ethLen + ipv4Len + udpLen
	// MinFrameLen is the smallest frame Build accepts: the headers and the
	// 4-byte flow number. (The NIC, or here the veth, pads nothing: frames
	// shorter than 60 bytes are legal on a veth.)
	MinFrameLen = headersLen + 4
	// MaxFrameLen keeps a frame inside a 1500-byte MTU.
	MaxFrameLen = ethLen + 1500
)

// Header is what all frames of a run share.
type Header struct {
	SrcMAC, DstMAC net.HardwareAddr
	SrcIP, DstIP   net.IP
}

// ErrFrameLen is returned for a frame length outside MinFrameLen..MaxFrameLen.
var ErrFrameLen = errors.New("frame length out of range")

// Template is a frame with everything but the per-flow fields filled in.
type Template struct {
	buf []byte
	// ipSum is the one's-complement sum of the IPv4 header without the ID
	// and checksum fields; pseudoSum the UDP pseudo header plus the UDP
	// length field plus the zero payload (which adds nothing).
	ipSum, pseudoSum uint32
}

// NewTemplate builds the fixed part of frames of length frameLen (bytes
// from the destination MAC to the end of the payload, without FCS).
func NewTemplate(h Header, frameLen int) (*Template, error) {
	if frameLen < MinFrameLen || frameLen > MaxFrameLen {
		return nil, fmt.Errorf("%w: %d, want %d-%d", ErrFrameLen, frameLen, MinFrameLen, MaxFrameLen)
	}
	src, dst := h.SrcIP.To4(), h.DstIP.To4()
	if src == nil || dst == nil {
		return nil, fmt.Errorf("need IPv4 addresses, got %v and %v", h.SrcIP, h.DstIP)
	}
	if len(h.SrcMAC) != 6 || len(h.DstMAC) != 6 {
		return nil, fmt.Errorf("need 6-byte MAC addresses, got %v and %v", h.SrcMAC, h.DstMAC)
	}
	b := make([]byte, frameLen)
	copy(b[0:6], h.DstMAC)
	copy(b[6:12], h.SrcMAC)
	binary.BigEndian.PutUint16(b[12:14], 0x0800)
	ip := b[ethLen:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:4], uint16(frameLen-ethLen))
	binary.BigEndian.PutUint16(ip[6:8], 0x4000) // DF
	ip[8] = 64
	ip[9] = 17
	copy(ip[12:16], src)
	copy(ip[16:20], dst)
	udpLength := uint16(frameLen - ethLen - ipv4Len)
	binary.BigEndian.PutUint16(b[ethLen+ipv4Len+4:], udpLength)
	t := &Template{buf: b}
	t.ipSum = sum16(ip[:ipv4Len])
	t.pseudoSum = sum16(src) + sum16(dst) + 17 + uint32(udpLength) + uint32(udpLength)
	return t, nil
}

// Len is the frame length.
func (t *Template) Len() int { return len(t.buf) }

// Build writes the frame of flow number flow, with the given ports, into
// dst (which must be at least Len bytes) and returns it.
func (t *Template) Build(dst []byte, flow uint32, srcPort, dstPort uint16) []byte {
	f := dst[:len(t.buf)]
	copy(f, t.buf)
	ip := f[ethLen:]
	id := uint16(flow)
	binary.BigEndian.PutUint16(ip[4:6], id)
	binary.BigEndian.PutUint16(ip[10:12], ^fold(t.ipSum+uint32(id)))
	udp := ip[ipv4Len:]
	binary.BigEndian.PutUint16(udp[0:2], srcPort)
	binary.BigEndian.PutUint16(udp[2:4], dstPort)
	binary.BigEndian.PutUint32(udp[8:12], flow)
	s := t.pseudoSum + uint32(srcPort) + uint32(dstPort) + flow>>16 + flow&0xffff
	c := ^fold(s)
	if c == 0 {
		c = 0xffff // 0 means "no checksum" in UDP over IPv4
	}
	binary.BigEndian.PutUint16(udp[6:8], c)
	return f
}

// FlowOf returns the flow number carried in a UDP payload built by Build.
func FlowOf(payload []byte) (uint32, bool) {
	if len(payload) < 4 {
		return 0, false
	}
	return binary.BigEndian.Uint32(payload), true
}

// sum16 is the unfolded one's-complement sum of b as big-endian 16-bit words.
func sum16(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}
