package datapath

import (
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/flow"
)

// TestPushVLANOntoTaggedOnVeth sends a VLAN-tagged frame from pod A over
// a real veth: the kernel moves the tag into skb metadata before tc
// ingress, so the fast path's push_vlan moves it back into the packet and
// the set_tp_dst after it must write 4 bytes further in than the parser
// found. BPF_PROG_RUN keeps the tag in the data and cannot show this.
func TestPushVLANOntoTaggedOnVeth(t *testing.T) {
	_, a, b, d := podPair(t)
	if err := d.Put(flow.Flow{Key: flow.Key{InPort: 1}, Mask: flow.Mask{InPort: 0xffffffff},
		Actions: []flow.Action{flow.PushVLAN{TCI: 20}, flow.SetTpDst{Port: 99}, flow.Output{Port: 2}}}); err != nil {
		t.Fatal(err)
	}
	rx := nstest.RawSocket(t, b, "eth0")
	tx := nstest.RawSocket(t, a, "eth0")
	payload := []byte("tagged-at-ingress")
	frame := serialize(t, eth(layers.EthernetTypeDot1Q), &layers.Dot1Q{VLANIdentifier: 10, Type: layers.EthernetTypeIPv4},
		ip4(layers.IPProtocolUDP, "10.1.0.1", "10.1.0.2"), &layers.UDP{SrcPort: 5000, DstPort: 7000}, gopacket.Payload(payload))
	if _, err := unix.Write(tx, frame); err != nil {
		t.Fatal(err)
	}
	got := nstest.ReadFrame(t, rx, payload, 3*time.Second)
	var tags []uint16
	p := decode(t, got)
	for _, l := range p.Layers() {
		if q, ok := l.(*layers.Dot1Q); ok {
			tags = append(tags, q.VLANIdentifier)
		}
	}
	udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if len(tags) != 2 || tags[0] != 20 || tags[1] != 10 || udp == nil || udp.DstPort != 99 || udp.SrcPort != 5000 {
		t.Fatalf("frame at B (tags %v): %x", tags, got)
	}
	checksumsOK(t, got)
}
