package datapath

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/flow"
)

// rawSocket opens an AF_PACKET socket on dev inside n.
func rawSocket(t *testing.T, n nstest.NS, dev string) int {
	t.Helper()
	var fd int
	var err error
	n.In(t, func() {
		var ifc *net.Interface
		if ifc, err = net.InterfaceByName(dev); err != nil {
			return
		}
		proto := int(htons(unix.ETH_P_ALL))
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, proto); err != nil {
			return
		}
		err = unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifc.Index})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

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
	rx := rawSocket(t, b, "eth0")
	tx := rawSocket(t, a, "eth0")
	payload := []byte("tagged-at-ingress")
	frame := serialize(t, eth(layers.EthernetTypeDot1Q), &layers.Dot1Q{VLANIdentifier: 10, Type: layers.EthernetTypeIPv4},
		ip4(layers.IPProtocolUDP, "10.1.0.1", "10.1.0.2"), &layers.UDP{SrcPort: 5000, DstPort: 7000}, gopacket.Payload(payload))
	if _, err := unix.Write(tx, frame); err != nil {
		t.Fatal(err)
	}
	tv := unix.NsecToTimeval(int64(3 * time.Second))
	if err := unix.SetsockoptTimeval(rx, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	for {
		n, err := unix.Read(rx, buf)
		if err != nil {
			t.Fatalf("nothing arrived at B: %v", err)
		}
		got := buf[:n]
		if !bytes.Contains(got, payload) {
			continue // other traffic (IPv6 ND, ...)
		}
		// B's kernel took the outer tag (20) into metadata again; the
		// inner one (10) is in the data.
		p := decode(t, got)
		q, _ := p.Layer(layers.LayerTypeDot1Q).(*layers.Dot1Q)
		udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if q == nil || q.VLANIdentifier != 10 || udp == nil || udp.DstPort != 99 || udp.SrcPort != 5000 {
			t.Fatalf("frame at B: %x", got)
		}
		checksumsOK(t, got)
		return
	}
}
