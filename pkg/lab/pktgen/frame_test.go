package pktgen

import (
	"errors"
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

var testHeader = Header{
	SrcMAC: net.HardwareAddr{0x02, 0x99, 0, 0, 0, 0x01},
	DstMAC: net.HardwareAddr{0x02, 0x99, 0, 0, 0, 0x02},
	SrcIP:  net.IPv4(10, 99, 0, 1),
	DstIP:  net.IPv4(10, 99, 0, 2),
}

// TestFrameDecodes builds frames across the flow space (port and flow
// number extremes, odd and even lengths) and has gopacket decode them and
// recompute both checksums.
func TestFrameDecodes(t *testing.T) {
	space := FlowSpace{Flows: 1_000_000, DstPortBase: DefaultDstPort}
	for _, frameLen := range []int{MinFrameLen, 60, 64, 65, 128, 1514} {
		tmpl, err := NewTemplate(testHeader, frameLen)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, tmpl.Len())
		for _, flow := range []int{0, 1, 2, 0xffff, 0x10000, srcPortSpan - 1, srcPortSpan, 123_457, space.Flows - 1} {
			src, dst := space.Ports(flow)
			f := tmpl.Build(buf, uint32(flow), src, dst)
			if len(f) != frameLen {
				t.Fatalf("frame of %d bytes, want %d", len(f), frameLen)
			}
			pkt := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
			if el := pkt.ErrorLayer(); el != nil {
				t.Fatalf("len %d flow %d: decode: %v", frameLen, flow, el.Error())
			}
			eth, _ := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
			ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
			udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
			if eth == nil || ip == nil || udp == nil {
				t.Fatalf("len %d flow %d: layers %v", frameLen, flow, pkt.Layers())
			}
			if eth.SrcMAC.String() != testHeader.SrcMAC.String() || eth.DstMAC.String() != testHeader.DstMAC.String() {
				t.Errorf("MACs %v → %v", eth.SrcMAC, eth.DstMAC)
			}
			if !ip.SrcIP.Equal(testHeader.SrcIP) || !ip.DstIP.Equal(testHeader.DstIP) || ip.TTL != 64 || ip.Flags != layers.IPv4DontFragment {
				t.Errorf("IPv4 header %+v", ip)
			}
			if int(ip.Length) != frameLen-ethLen || int(udp.Length) != frameLen-ethLen-ipv4Len {
				t.Errorf("lengths: IP %d UDP %d for a %d-byte frame", ip.Length, udp.Length, frameLen)
			}
			if uint16(udp.SrcPort) != src || uint16(udp.DstPort) != dst {
				t.Errorf("ports %d→%d, want %d→%d", udp.SrcPort, udp.DstPort, src, dst)
			}
			if got, ok := FlowOf(udp.Payload); !ok || got != uint32(flow) {
				t.Errorf("payload names flow %d, want %d", got, flow)
			}
			// Actual == Correct, not only Valid: Valid also accepts an
			// absent (zero) UDP checksum.
			if err, r := ip.VerifyChecksum(); err != nil || r.Actual != r.Correct {
				t.Errorf("len %d flow %d: IPv4 checksum %#04x, want %#04x (%v)", frameLen, flow, r.Actual, r.Correct, err)
			}
			if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
				t.Fatal(err)
			}
			if err, r := udp.VerifyChecksum(); err != nil || r.Actual != r.Correct || r.Actual == 0 {
				t.Errorf("len %d flow %d: UDP checksum %#04x, want %#04x (%v)", frameLen, flow, r.Actual, r.Correct, err)
			}
		}
	}
}

func TestTemplateRejects(t *testing.T) {
	for _, n := range []int{0, MinFrameLen - 1, MaxFrameLen + 1} {
		if _, err := NewTemplate(testHeader, n); !errors.Is(err, ErrFrameLen) {
			t.Errorf("frame length %d: err %v, want ErrFrameLen", n, err)
		}
	}
	h := testHeader
	h.DstIP = net.ParseIP("2001:db8::1")
	if _, err := NewTemplate(h, 64); err == nil {
		t.Error("IPv6 destination accepted")
	}
}

func TestFlowSpace(t *testing.T) {
	s := FlowSpace{Flows: 200_000, DstPortBase: 30000}
	if s.DstPorts() != 4 {
		t.Errorf("DstPorts %d, want 4", s.DstPorts())
	}
	seen := map[[2]uint16]bool{}
	for i := 0; i < s.Flows; i++ {
		src, dst := s.Ports(i)
		if seen[[2]uint16{src, dst}] {
			t.Fatalf("flow %d repeats ports %d→%d", i, src, dst)
		}
		seen[[2]uint16{src, dst}] = true
		if j := s.Index(src, dst); j != i {
			t.Fatalf("Index(Ports(%d)) = %d", i, j)
		}
	}
	for _, p := range [][2]uint16{{SrcPortMin - 1, 30000}, {SrcPortMin, 29999}, {65535, 30003}, {SrcPortMin, 30004}} {
		if j := s.Index(p[0], p[1]); j != -1 {
			t.Errorf("Index(%d, %d) = %d, want -1", p[0], p[1], j)
		}
	}
	if err := (FlowSpace{Flows: 1_000_000, DstPortBase: 65530}).Validate(); err == nil {
		t.Error("space running past port 65535 accepted")
	}
}

func TestParseSNMP(t *testing.T) {
	const text = "Icmp: InMsgs InErrors\nIcmp: 3 0\n" +
		"Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n" +
		"Udp: 100000 2 7 1 5 0 2 0 0\nUdpLite: InDatagrams\nUdpLite: 0\n"
	c := ParseSNMP(text, "Udp")
	if c["InDatagrams"] != 100000 || c["RcvbufErrors"] != 5 || c["InCsumErrors"] != 2 || c["InErrors"] != 7 {
		t.Errorf("parsed %v", c)
	}
}
