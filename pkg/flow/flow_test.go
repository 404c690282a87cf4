package flow

import (
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
)

func sampleKey() Key {
	k := Key{InPort: 3, TunID: 77, TunSrc: [4]byte{192, 168, 1, 1}, TunFlags: TunPresent, VlanTCI: VLANCFI | 10,
		EthType: 0x0800, EthSrc: [6]byte{2, 0, 0, 0, 0, 1}, EthDst: [6]byte{2, 0, 0, 0, 0, 2},
		NwProto: 6, NwTOS: 0xb8, NwTTL: 64, TpSrc: 1234, TpDst: 80, TCPFlags: 0x12}
	k.SetIPSrc(netip.MustParseAddr("10.0.0.1"))
	k.SetIPDst(netip.MustParseAddr("10.0.0.2"))
	return k
}

func TestKeyRoundTrip(t *testing.T) {
	k := sampleKey()
	b, err := k.MarshalBinary()
	if err != nil || len(b) != KeySize {
		t.Fatalf("%d bytes, %v", len(b), err)
	}
	var got Key
	if err := got.UnmarshalBinary(b); err != nil || got != k {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if KeyFromWords(k.Words()) != k {
		t.Fatal("words round trip differs")
	}
	if err := got.UnmarshalBinary(b[:KeySize-1]); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short key: %v", err)
	}
	// Network-order fields are big-endian on the wire side of the layout.
	if b[offTpDst] != 0 || b[offTpDst+1] != 80 || b[offEthType] != 0x08 {
		t.Fatalf("byte order wrong: % x", b)
	}
}

func TestMaskOps(t *testing.T) {
	k := sampleKey()
	m := Mask{InPort: 0xffffffff, EthType: 0xffff}
	m.IPDst = [16]byte{255, 255, 255, 0}
	masked := k.And(m)
	if masked.TpDst != 0 || masked.InPort != 3 || masked.IPv4Dst().String() != "10.0.0.0" {
		t.Fatalf("And: %+v", masked)
	}
	other := k
	other.IPDst[3] = 99
	other.TpDst = 22
	if !masked.Matches(m, other) {
		t.Fatal("packet in the same /24 does not match")
	}
	other.IPDst[2] = 1
	if masked.Matches(m, other) {
		t.Fatal("packet in another /24 matches")
	}
	if !ExactMask().Covers(m) || m.Covers(ExactMask()) {
		t.Fatal("Covers is wrong")
	}
}

func TestFormat(t *testing.T) {
	k := sampleKey()
	m := Mask{InPort: 0xffffffff, EthType: 0xffff, NwProto: 0xff, TpDst: 0xffff}
	m.IPDst = [16]byte{255, 255, 255, 0}
	got := Format(k.And(m), m)
	want := "in_port=3,eth_type=0x800,ipv4(dst=10.0.0.0/24,proto=6),tcp(dst=80)"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if Format(Key{}, Mask{}) != "any" {
		t.Fatal("empty mask")
	}
	f := Flow{Key: k, Mask: m, Actions: []Action{SetTunnel{VNI: 5, Remote: netip.MustParseAddr("192.168.0.2"), InheritTOS: true}, Output{Port: 9}}}
	if s := f.String(); s != want+" actions:set(tunnel(vni=5,dst=192.168.0.2,tos=inherit)),output:9" {
		t.Fatalf("flow string %s", s)
	}
}

// TestFlowLogValue: a *Flow in a log record is written as String writes
// it, and only when the record is written (slog.LogValuer): the upcall
// handler passes one to a debug record for every refused install.
func TestFlowLogValue(t *testing.T) {
	f := &Flow{Key: Key{InPort: 3}, Mask: Mask{InPort: 0xffffffff}, Actions: []Action{Output{Port: 2}}}
	var b strings.Builder
	log := slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug}))
	log.Debug("install", "flow", f)
	if want := "flow=\"" + f.String() + "\""; !strings.Contains(b.String(), want) {
		t.Fatalf("record %q, want %s", b.String(), want)
	}
}
