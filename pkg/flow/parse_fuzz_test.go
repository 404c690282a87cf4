package flow

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// FuzzParsePacket feeds arbitrary frames to the Go parser (packet-out,
// trace, the slow path's view of a packet): it must return, copy the
// Ethernet addresses of every frame it accepts, give the same key twice,
// and its keys must survive the fast path's binary layout. No root: the
// BPF twin is FuzzParse in pkg/datapath.
func FuzzParsePacket(f *testing.F) {
	for _, h := range []string{
		// UDP over IPv4
		"02000000000202000000000108004500001c0000000040110000" + "0a0000010a000002" + "0001000200080000",
		// VLAN-tagged ARP request
		"ffffffffffff0200000000018100000a08060001080006040001020000000001" + "0a000001000000000000" + "0a000002",
		// IPv6 TCP with a hop-by-hop header
		"0200000000020200000000018" + "6dd6000000000140001fd000000000000000000000000000001fd000000000000000000000000000002" + "0600000000000000" + "0001000200000000000000005002000000000000",
	} {
		b, err := hex.DecodeString(h)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		k, err := ParsePacket(pkt)
		if err != nil {
			return
		}
		if !bytes.Equal(k.EthDst[:], pkt[0:6]) || !bytes.Equal(k.EthSrc[:], pkt[6:12]) {
			t.Fatalf("Ethernet addresses not copied: %s", Format(k, ExactMask()))
		}
		again, err := ParsePacket(pkt)
		if err != nil || again != k {
			t.Fatalf("second parse differs: %v", err)
		}
		b, err := k.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var back Key
		if err := back.UnmarshalBinary(b); err != nil || back != k {
			t.Fatalf("key does not survive its binary layout: %v", err)
		}
	})
}
