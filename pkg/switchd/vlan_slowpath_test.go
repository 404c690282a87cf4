package switchd

import (
	"net"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/nagare-net/nagare/internal/nstest"
)

// vlanIDs lists the VLAN ids of a frame, outermost first.
func vlanIDs(frame []byte) []uint16 {
	var ids []uint16
	for _, l := range gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default).Layers() {
		if q, ok := l.(*layers.Dot1Q); ok {
			ids = append(ids, q.VLANIdentifier)
		}
	}
	return ids
}

// TestTaggedFirstPacketKeepsItsTag: at tc ingress of a real device the
// kernel holds a frame's VLAN tag in skb metadata, beside the bytes an
// upcall copies. The first packet of a tagged flow (delivered by the slow
// path) and its PACKET_IN must still carry the tag, like the packets the
// fast path forwards afterwards.
func TestTaggedFirstPacketKeepsItsTag(t *testing.T) {
	ts := startSwitch(t, 2, nil)
	c := dialController(t, ts.Sock)
	ts.ofctl("add-flow", "priority=10,in_port=1,dl_vlan=10,actions=controller,output:2")
	rx := nstest.RawSocket(t, ts.Pods[1], "eth0")
	tx := nstest.RawSocket(t, ts.Pods[0], "eth0")
	for _, what := range []string{"first packet, by the slow path", "second packet, by the fast path"} {
		frame := taggedFrame(t, 10, what)
		if _, err := unix.Write(tx, frame); err != nil {
			t.Fatal(err)
		}
		got := nstest.ReadFrame(t, rx, []byte(what), 5*time.Second)
		if ids := vlanIDs(got); len(ids) != 1 || ids[0] != 10 {
			t.Errorf("%s arrived with VLAN ids %v: %x", what, ids, got)
		}
		pi := c.waitPacketIn(t, 10*time.Second)
		if ids := vlanIDs(pi.Data); len(ids) != 1 || ids[0] != 10 {
			t.Errorf("PACKET_IN of the %s has VLAN ids %v: %x", what, ids, pi.Data)
		}
	}
}

// taggedFrame is a UDP datagram from pod 1 to pod 2 in a frame tagged
// with VLAN vid, as a raw socket sends it.
func taggedFrame(t *testing.T, vid uint16, payload string) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.ParseIP(podIP(1)).To4(), DstIP: net.ParseIP(podIP(2)).To4()}
	udp := &layers.UDP{SrcPort: 5000, DstPort: 7000}
	_ = udp.SetNetworkLayerForChecksum(ip)
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.Ethernet{SrcMAC: mustMAC(podMAC(1)), DstMAC: mustMAC(podMAC(2)), EthernetType: layers.EthernetTypeDot1Q},
		&layers.Dot1Q{VLANIdentifier: vid, Type: layers.EthernetTypeIPv4}, ip, udp, gopacket.Payload(payload))
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
