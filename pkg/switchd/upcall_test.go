package switchd

import (
	"fmt"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/nagare-net/nagare/pkg/datapath"
	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// udpUpcalls makes n miss upcalls of distinct UDP flows from port 1.
func udpUpcalls(tb testing.TB, n, first int) []datapath.Upcall {
	ups := make([]datapath.Upcall, n)
	for i := range ups {
		eth := &layers.Ethernet{SrcMAC: mustMAC(podMAC(1)), DstMAC: mustMAC(podMAC(2)), EthernetType: layers.EthernetTypeIPv4}
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: []byte{10, 8, 0, 1}, DstIP: []byte{10, 8, 0, 2}}
		j := first + i
		udp := &layers.UDP{SrcPort: layers.UDPPort(1024 + j%60000), DstPort: layers.UDPPort(1 + j/60000)}
		_ = udp.SetNetworkLayerForChecksum(ip)
		buf := gopacket.NewSerializeBuffer()
		_ = gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, udp, gopacket.Payload("0123456789"))
		pkt := buf.Bytes()
		k, err := flow.ParsePacket(pkt)
		if err != nil {
			tb.Fatal(err)
		}
		k.InPort = 1
		ups[i] = datapath.Upcall{Reason: datapath.UpcallMiss, Key: k, Len: len(pkt), Packet: pkt}
	}
	return ups
}

// TestFlowLimitInBatches: a batch installs flows only up to the flow limit
// (counting the ones installed earlier in the batch), delivers every
// packet all the same, and counts the flows it did not install.
func TestFlowLimitInBatches(t *testing.T) {
	node, _ := newTopo(t, 2)
	sw, err := New(Config{Bridge: "br0", RunDir: t.TempDir(), NetNS: node.Path, PinRoot: testPinRoot, FlowLimit: 10, DisableMegaflows: true, IdleTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sw.Destroy() })
	for i := 1; i <= 2; i++ {
		if _, err := sw.AddPort(PortSpec{Name: fmt.Sprintf("v%d", i), OFPort: uint32(i)}); err != nil {
			t.Fatal(err)
		}
	}
	fm, _ := openflow.ParseFlow("priority=100,in_port=1,actions=output:2")
	if _, err := sw.pl.FlowMod(fm); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		restore, err := sw.dp.LockToNetns()
		if err != nil {
			t.Error(err)
			return
		}
		defer restore()
		eb, err := sw.dp.NewExecBatch()
		if err != nil {
			t.Error(err)
			return
		}
		defer eb.Close()
		h := newUpcallHandler(sw, eb)
		h.handle(udpUpcalls(t, 64, 0))
		h.handle(udpUpcalls(t, 5, 64))
	}()
	<-done
	st := &sw.stats
	if n := sw.cache.len(); n != 10 || st.installed.Load() != 10 || st.limited.Load() != 59 {
		t.Fatalf("cached %d, installed %d, limited %d; want 10, 10, 59", n, st.installed.Load(), st.limited.Load())
	}
	if st.executed.Load() != 69 || st.execErrs.Load() != 0 {
		t.Fatalf("executed %d (errors %d), want all 69 packets", st.executed.Load(), st.execErrs.Load())
	}
	if fs := sw.dp.Flows(); len(fs) != 10 {
		t.Fatalf("%d flows in the fast path, want 10", len(fs))
	}
}
