package datapath

import (
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/nagare-net/nagare/pkg/flow"
)

// upcallRecord lays out a ring record as bpf/lib/upcall.h does.
func upcallRecord(reason, ifindex, pktLen uint32, vlan uint32, key flow.Key, pkt []byte) []byte {
	b := make([]byte, upcallHeader+len(pkt))
	binary.NativeEndian.PutUint32(b[0:], reason)
	binary.NativeEndian.PutUint32(b[4:], ifindex)
	binary.NativeEndian.PutUint32(b[8:], pktLen)
	binary.NativeEndian.PutUint32(b[12:], uint32(len(pkt)))
	binary.NativeEndian.PutUint64(b[16:], 7)
	binary.NativeEndian.PutUint32(b[24:], vlan)
	kb, _ := key.MarshalBinary()
	copy(b[32:], kb)
	copy(b[upcallHeader:], pkt)
	return b
}

// FuzzUpcallUnmarshal feeds arbitrary ring records to the decoder: it must
// return (no panic) with io.ErrUnexpectedEOF for short records, never
// claim more packet bytes than the record holds or than the packet had,
// and put a metadata VLAN tag back into the packet. No root.
func FuzzUpcallUnmarshal(f *testing.F) {
	frame := make([]byte, 60)
	copy(frame[12:], []byte{0x08, 0x00})
	f.Add(upcallRecord(1, 3, 60, 0, flow.Key{InPort: 1}, frame))
	f.Add(upcallRecord(2, 3, 60, 0x8100<<16|10, flow.Key{VlanTCI: 10 | flow.VLANCFI}, frame))
	f.Add(upcallRecord(1, 3, 9000, 0, flow.Key{}, frame))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		var u Upcall
		err := u.UnmarshalBinary(b)
		if len(b) < upcallHeader {
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("short record: %v", err)
			}
			return
		}
		if err != nil {
			return
		}
		capLen := int(binary.NativeEndian.Uint32(b[12:]))
		vlan := binary.NativeEndian.Uint32(b[24:])
		want := capLen
		if vlan != 0 && capLen >= 12 {
			want += 4
			if got := binary.BigEndian.Uint32(u.Packet[12:]); got != vlan {
				t.Fatalf("tag %08x in the packet, record says %08x", got, vlan)
			}
		}
		if len(u.Packet) != want || len(u.Packet) > u.Len || capLen > len(b)-upcallHeader {
			t.Fatalf("packet %d bytes (want %d) of %d; record holds %d", len(u.Packet), want, u.Len, len(b)-upcallHeader)
		}
		// Decoding again into the same Upcall (the reader reuses it) gives
		// the same packet.
		first := append([]byte(nil), u.Packet...)
		if err := u.UnmarshalBinary(b); err != nil || string(u.Packet) != string(first) {
			t.Fatalf("second decode differs: %v", err)
		}
	})
}

// FuzzSegment feeds arbitrary frames and segment sizes to Segment: it
// must not panic, and whatever it returns must be whole frames no longer
// than the super-packet's headers plus gsoSize. No root.
func FuzzSegment(f *testing.F) {
	tcp := make([]byte, 14+20+20+3000)
	copy(tcp[12:], []byte{0x08, 0x00, 0x45})
	binary.BigEndian.PutUint16(tcp[16:], uint16(len(tcp)-14))
	tcp[14+9], tcp[14+20+12] = 6, 5<<4
	f.Add(tcp, 1448)
	f.Add(tcp[:40], 100)
	f.Add([]byte{1, 2, 3}, 0)
	f.Fuzz(func(t *testing.T, b []byte, gsoSize int) {
		segs, err := Segment(b, gsoSize)
		if err != nil {
			return
		}
		for _, s := range segs {
			if len(s) > len(b) || len(s) > 14+4+60+60+gsoSize {
				t.Fatalf("segment of %d bytes from %d with gso_size %d", len(s), len(b), gsoSize)
			}
		}
	})
}
