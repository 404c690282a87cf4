package openflow

import (
	"fmt"
	"slices"
)

// HelloElemVersionBitmap is OFPHET_VERSIONBITMAP.
const HelloElemVersionBitmap uint16 = 1

// Hello is OFPT_HELLO. Its header version is the highest version the sender
// speaks; the optional version-bitmap element lists every version it speaks.
//
//	8 bytes: ofp_header (version = sender's highest version)
//	then elements, each padded to a multiple of 8 bytes:
//	  2 bytes: type (OFPHET_VERSIONBITMAP = 1)
//	  2 bytes: length, including this 4-byte element header, excluding padding
//	  length-4 bytes: for VERSIONBITMAP, 32-bit words; bit n of word i set
//	                  means version i*32+n is supported
type Hello struct {
	MsgHeader
	Elements []HelloElem
}

// HelloElem is one ofp_hello_elem. Bitmaps holds the words of a
// VERSIONBITMAP element; Data holds the body of any other element type
// (which receivers must ignore, but we keep to re-encode faithfully).
type HelloElem struct {
	Type    uint16
	Bitmaps []uint32
	Data    []byte
}

// NewHello returns the HELLO announcing versions (e.g. []uint8{4}).
func NewHello(xid uint32, versions ...uint8) *Hello {
	var words []uint32
	for _, v := range versions {
		for int(v/32) >= len(words) {
			words = append(words, 0)
		}
		words[v/32] |= 1 << (v % 32)
	}
	h := &Hello{MsgHeader: MsgHeader{Version: slices.Max(versions), Xid: xid}}
	h.Elements = []HelloElem{{Type: HelloElemVersionBitmap, Bitmaps: words}}
	return h
}

// MsgType returns TypeHello.
func (*Hello) MsgType() MsgType { return TypeHello }

// MarshalBinary encodes the HELLO.
func (m *Hello) MarshalBinary() ([]byte, error) {
	b := m.start(TypeHello, HeaderLen)
	for _, e := range m.Elements {
		body := e.Data
		if e.Type == HelloElemVersionBitmap {
			body = make([]byte, 4*len(e.Bitmaps))
			for i, w := range e.Bitmaps {
				be.PutUint32(body[4*i:], w)
			}
		}
		n := 4 + len(body)
		if n > 0xffff {
			return nil, fmt.Errorf("openflow: hello element too long")
		}
		el := make([]byte, pad8(n))
		be.PutUint16(el[0:], e.Type)
		be.PutUint16(el[2:], uint16(n))
		copy(el[4:], body)
		b = append(b, el...)
	}
	return finish(b)
}

// UnmarshalBinary decodes a HELLO of any version.
func (m *Hello) UnmarshalBinary(b []byte) error {
	body, err := m.parse(b, TypeHello)
	if err != nil {
		return err
	}
	m.Elements = nil
	for len(body) > 0 {
		if len(body) < 4 {
			return short(ErrTypeBadRequest, BadRequestBadLen, "hello element header")
		}
		t, n := be.Uint16(body[0:]), int(be.Uint16(body[2:]))
		if n < 4 {
			return bad(ErrTypeBadRequest, BadRequestBadLen, "hello element length %d", n)
		}
		if n > len(body) {
			return short(ErrTypeBadRequest, BadRequestBadLen, "hello element")
		}
		e := HelloElem{Type: t}
		if t == HelloElemVersionBitmap {
			if (n-4)%4 != 0 {
				return bad(ErrTypeBadRequest, BadRequestBadLen, "version bitmap length %d", n)
			}
			e.Bitmaps = make([]uint32, (n-4)/4)
			for i := range e.Bitmaps {
				e.Bitmaps[i] = be.Uint32(body[4+4*i:])
			}
		} else {
			e.Data = append([]byte{}, body[4:n]...)
		}
		m.Elements = append(m.Elements, e)
		// The padding of the last element may be missing in the wild.
		body = body[min(pad8(n), len(body)):]
	}
	return nil
}

// Versions returns the versions the sender supports: the bitmap if the
// HELLO has one, otherwise nil (only the header version is known).
func (m *Hello) Versions() []uint8 {
	var vs []uint8
	for _, e := range m.Elements {
		if e.Type != HelloElemVersionBitmap {
			continue
		}
		for i, w := range e.Bitmaps {
			for bit := range 32 {
				if w&(1<<bit) != 0 && i*32+bit < 256 {
					vs = append(vs, uint8(i*32+bit))
				}
			}
		}
	}
	return vs
}

// Negotiate implements the spec's version negotiation (section 6.3.1) from
// our supported versions and the peer's HELLO. It returns the agreed
// version, or the OFPET_HELLO_FAILED/OFPHFC_INCOMPATIBLE error to send
// before closing the connection.
//
// If both sides sent a version bitmap the agreed version is the highest
// common one; otherwise it is the smaller of the two header versions, which
// we must support.
func Negotiate(ours []uint8, peer *Hello) (uint8, *ErrorMsg) {
	if len(ours) == 0 {
		return 0, helloFailed(peer, "no local versions")
	}
	ourMax := slices.Max(ours)
	if pv := peer.Versions(); pv != nil {
		best, found := uint8(0), false
		for _, v := range pv {
			if slices.Contains(ours, v) && (!found || v > best) {
				best, found = v, true
			}
		}
		if !found {
			return 0, helloFailed(peer, fmt.Sprintf("no common version: ours %v, peer's %v", ours, pv))
		}
		return best, nil
	}
	v := min(ourMax, peer.Version)
	if !slices.Contains(ours, v) {
		return 0, helloFailed(peer, fmt.Sprintf("peer version 0x%02x not supported, ours %v", peer.Version, ours))
	}
	return v, nil
}

func helloFailed(peer *Hello, why string) *ErrorMsg {
	v := Version
	if peer.Version != 0 && peer.Version < v {
		v = peer.Version
	}
	return &ErrorMsg{MsgHeader: MsgHeader{Version: v, Xid: peer.Xid},
		Type: ErrTypeHelloFailed, Code: HelloFailedIncompatible, Data: []byte(why)}
}

// pad8 rounds n up to a multiple of 8.
func pad8(n int) int { return (n + 7) &^ 7 }
