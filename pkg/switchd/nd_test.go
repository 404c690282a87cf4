package switchd

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// nsFrame is an IPv6 neighbour solicitation from pod 1 for target, with a
// source link-layer address option, then marker (as an unknown option
// would be: ND receivers skip it).
func nsFrame(t *testing.T, target, marker string) []byte {
	t.Helper()
	tg := netip.MustParseAddr(target).As16()
	body := append(make([]byte, 4), tg[:]...)
	body = append(body, 1, 1)
	body = append(body, mustMAC(podMAC(1))...)
	opt := append([]byte{99, byte((len(marker) + 2 + 7) / 8)}, marker...)
	opt = append(opt, make([]byte, int(opt[1])*8-len(opt))...)
	body = append(body, opt...)
	ip := &layers.IPv6{Version: 6, HopLimit: 255, NextHeader: layers.IPProtocolICMPv6,
		SrcIP: net.ParseIP("fd00::1"), DstIP: net.ParseIP("ff02::1:ff00:99")}
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(135, 0)}
	_ = icmp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.Ethernet{SrcMAC: mustMAC(podMAC(1)), DstMAC: mustMAC(podMAC(2)), EthernetType: layers.EthernetTypeIPv6},
		ip, icmp, gopacket.Payload(body))
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestNDOnTheWire: ovs-ofctl's nd_target match and nd_target/nd_sll
// set_field are accepted and dumped back; a matching solicitation leaves
// rewritten with a valid checksum, by the slow path and the fast path, and
// one for another target takes the lower rule.
func TestNDOnTheWire(t *testing.T) {
	ts := startSwitch(t, 2, nil)
	ts.ofctl("add-flow", "priority=10,in_port=1,icmp6,icmp_type=135,nd_target=fd00::99,"+
		"actions=set_field:fd00::1234->nd_target,set_field:02:00:00:00:00:ee->nd_sll,output:2")
	ts.ofctl("add-flow", "priority=5,actions=drop")
	out := ts.ofctl("dump-flows")
	for _, want := range []string{"nd_target=fd00::99", "fd00::1234->nd_target", "02:00:00:00:00:ee->nd_sll"} {
		if !strings.Contains(out, want) {
			t.Fatalf("dump-flows lacks %s:\n%s", want, out)
		}
	}
	for what, got := range ts.forwardTwice(t, func(what string) []byte { return nsFrame(t, "fd00::99", what) }) {
		p := gopacket.NewPacket(got, layers.LayerTypeEthernet, gopacket.Default)
		ns, ok := p.Layer(layers.LayerTypeICMPv6NeighborSolicitation).(*layers.ICMPv6NeighborSolicitation)
		if !ok {
			t.Fatalf("%s: not a neighbour solicitation: %v", what, p)
		}
		if ns.TargetAddress.String() != "fd00::1234" {
			t.Errorf("%s: target %v", what, ns.TargetAddress)
		}
		if len(ns.Options) == 0 || !bytes.Equal(ns.Options[0].Data, mustMAC("02:00:00:00:00:ee")) {
			t.Errorf("%s: options %v", what, ns.Options)
		}
		icmp := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
		ip := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		want := icmp.Checksum
		_ = icmp.SetNetworkLayerForChecksum(ip)
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true}, icmp, gopacket.Payload(icmp.Payload)); err != nil {
			t.Fatal(err)
		}
		if icmp.Checksum != want {
			t.Errorf("%s: ICMPv6 checksum %#04x, want %#04x", what, want, icmp.Checksum)
		}
	}
}
