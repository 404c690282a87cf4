package datapath

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket/layers"

	"github.com/nagare-net/nagare/pkg/flow"
)

// icmp6ChecksumOK verifies the ICMPv6 checksum of an untagged IPv6 frame
// without extension headers.
func icmp6ChecksumOK(pkt []byte) bool {
	ip := pkt[14:]
	plen := int(binary.BigEndian.Uint16(ip[4:]))
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(ip[8:40])
	sum += uint32(plen) + 58
	add(ip[40 : 40+plen])
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return sum == 0xffff
}

// TestNDRewrites: set(nd_target) and set(nd_ll) rewrite a neighbour
// solicitation's target and source link-layer option and an
// advertisement's target link-layer option, ICMPv6 checksum fixed; a
// message without the option is forwarded unchanged by set(nd_ll).
func TestNDRewrites(t *testing.T) {
	d := newTestDP(t)
	v6 := func(p layers.IPProtocol) *layers.IPv6 { return ip6(p, "fd00::1", "ff02::1:ff00:99") }
	newMAC := net.HardwareAddr{0x02, 0xee, 0xdd, 0xcc, 0xbb, 0xaa}
	newTarget := netip.MustParseAddr("fd00::abcd")
	sll := "\x01\x01\x02\x00\x00\x00\x00\x0a"
	tll := "\x02\x01\x02\x00\x00\x00\x00\x0b"
	for _, tc := range []struct {
		name    string
		pkt     []byte
		acts    []flow.Action
		target  string
		llaOff  int // offset of the option's address in the frame, 0: none
		wantLLA net.HardwareAddr
	}{
		{"ns-target-and-sll", ndPacket(t, v6, 135, "fd00::99", sll), []flow.Action{flow.SetNDTarget{Addr: newTarget}, flow.SetNDLL{MAC: newMAC}},
			"fd00::abcd", 14 + 40 + 24 + 2, newMAC},
		{"na-tll-after-another-option", ndPacket(t, v6, 136, "fd00::98", "\x05\x01\x00\x00\x00\x00\x05\xdc"+tll),
			[]flow.Action{flow.SetNDLL{MAC: newMAC}}, "fd00::98", 14 + 40 + 24 + 8 + 2, newMAC},
		{"ns-without-option", ndPacket(t, v6, 135, "fd00::97", ""), []flow.Action{flow.SetNDLL{MAC: newMAC}}, "fd00::97", 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !icmp6ChecksumOK(tc.pkt) {
				t.Fatal("test packet's ICMPv6 checksum is wrong")
			}
			r := runResult{out: d.forward(t, tc.pkt, tc.acts...)}
			if got := netip.AddrFrom16([16]byte(r.out[14+40+8:])); got.String() != tc.target {
				t.Errorf("target %v, want %s", got, tc.target)
			}
			if tc.llaOff != 0 && !bytes.Equal(r.out[tc.llaOff:tc.llaOff+6], tc.wantLLA) {
				t.Errorf("link-layer option %x, want %v", r.out[tc.llaOff:tc.llaOff+6], tc.wantLLA)
			}
			if tc.llaOff == 0 && !bytes.Equal(r.out, tc.pkt) {
				t.Errorf("packet changed:\n got %x\nwant %x", r.out, tc.pkt)
			}
			if !icmp6ChecksumOK(r.out) {
				t.Errorf("ICMPv6 checksum wrong after the rewrite")
			}
		})
	}
}
