package switchd

import (
	"bytes"
	"encoding/binary"
	"net"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// ipFrame is a UDP datagram from pod 1 to pod 2 (DSCP 46, TTL 33)
// carrying payload, optionally tagged with VLAN vid.
func ipFrame(t *testing.T, vid uint16, payload string) []byte {
	t.Helper()
	ip := &layers.IPv4{Version: 4, TTL: 33, TOS: 46 << 2, Protocol: layers.IPProtocolUDP,
		SrcIP: net.ParseIP(podIP(1)).To4(), DstIP: net.ParseIP(podIP(2)).To4()}
	udp := &layers.UDP{SrcPort: 5000, DstPort: 7000}
	_ = udp.SetNetworkLayerForChecksum(ip)
	ls := []gopacket.SerializableLayer{&layers.Ethernet{SrcMAC: mustMAC(podMAC(1)), DstMAC: mustMAC(podMAC(2)), EthernetType: layers.EthernetTypeIPv4}}
	if vid != 0 {
		ls = []gopacket.SerializableLayer{&layers.Ethernet{SrcMAC: mustMAC(podMAC(1)), DstMAC: mustMAC(podMAC(2)), EthernetType: layers.EthernetTypeDot1Q},
			&layers.Dot1Q{VLANIdentifier: vid, Type: layers.EthernetTypeIPv4}}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		append(ls, ip, udp, gopacket.Payload(payload))...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// withLSE inserts a label stack entry behind the L2 header (l2 bytes) of
// frame and makes its EtherType MPLS.
func withLSE(frame []byte, l2 int, lse uint32) []byte {
	b := append([]byte(nil), frame[:l2-2]...)
	b = binary.BigEndian.AppendUint16(b, 0x8847)
	b = binary.BigEndian.AppendUint32(b, lse)
	return append(b, frame[l2:]...)
}

// TestMPLSOnTheWire: ovs-ofctl's push_mpls/set_field mpls_label and
// mpls_label match/dec_mpls_ttl/pop_mpls are accepted and dumped back, and
// the frames leave as Open vSwitch would send them, from the slow path
// and the fast path; the pop also keeps a VLAN tag the receiving kernel
// holds in skb metadata.
func TestMPLSOnTheWire(t *testing.T) {
	ts := startSwitch(t, 2, nil)
	ts.ofctl("add-flow", "priority=10,in_port=1,udp,actions=push_mpls:0x8847,set_field:100->mpls_label,output:2")
	ts.ofctl("add-flow", "priority=10,in_port=1,mpls,mpls_label=200,actions=dec_mpls_ttl,pop_mpls:0x0800,output:2")
	ts.ofctl("add-flow", "priority=5,actions=drop")
	out := ts.ofctl("dump-flows")
	for _, want := range []string{"push_mpls:0x8847", "100->mpls_label", "mpls_label=200", "dec_mpls_ttl", "pop_mpls:0x0800"} {
		if !strings.Contains(out, want) {
			t.Fatalf("dump-flows lacks %s:\n%s", want, out)
		}
	}
	// push: label 100, TC = DSCP 46 & 7 = 6, BOS, TTL = IP TTL 33.
	for what, got := range ts.forwardTwice(t, func(what string) []byte { return ipFrame(t, 0, what) }) {
		want := withLSE(ipFrame(t, 0, what), 14, 100<<12|6<<9|1<<8|33)
		if !bytes.Equal(got, want) {
			t.Errorf("push, %s:\n got %x\nwant %x", what, got, want)
		}
	}
	// pop, untagged and tagged (the kernel keeps the tag in metadata).
	for _, vid := range []uint16{0, 10} {
		l2 := 14
		if vid != 0 {
			l2 = 18
		}
		for what, got := range ts.forwardTwice(t, func(what string) []byte { return withLSE(ipFrame(t, vid, what), l2, 200<<12|1<<8|9) }) {
			if want := ipFrame(t, vid, what); !bytes.Equal(got, want) {
				t.Errorf("pop (vid %d), %s:\n got %x\nwant %x", vid, what, got, want)
			}
		}
	}
}
