package switchd

import (
	"encoding/binary"
	"hash/crc32"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/nagare-net/nagare/internal/nstest"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sctpFrame is an SCTP packet from pod 1 to pod 2 (one DATA chunk
// carrying payload) with a correct CRC32c, as a raw socket sends it.
func sctpFrame(t *testing.T, sport, dport uint16, payload string) []byte {
	t.Helper()
	sc := make([]byte, 12+16+len(payload))
	binary.BigEndian.PutUint16(sc[0:], sport)
	binary.BigEndian.PutUint16(sc[2:], dport)
	binary.BigEndian.PutUint32(sc[4:], 0x01020304)
	sc[13] = 3
	binary.BigEndian.PutUint16(sc[14:], uint16(16+len(payload)))
	copy(sc[28:], payload)
	binary.LittleEndian.PutUint32(sc[8:], crc32.Checksum(sc, castagnoli))
	buf := gopacket.NewSerializeBuffer()
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolSCTP, SrcIP: net.ParseIP(podIP(1)).To4(), DstIP: net.ParseIP(podIP(2)).To4()}
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.Ethernet{SrcMAC: mustMAC(podMAC(1)), DstMAC: mustMAC(podMAC(2)), EthernetType: layers.EthernetTypeIPv4},
		ip, gopacket.Payload(sc))
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestSCTPPortRewriteOnTheWire: ovs-ofctl's set_field on sctp_dst is
// accepted and dumped back, and both the first packet (slow path) and the
// next (fast path) arrive with the new port and a CRC32c the receiver
// accepts.
func TestSCTPPortRewriteOnTheWire(t *testing.T) {
	ts := startSwitch(t, 2, nil)
	ts.ofctl("add-flow", "priority=10,in_port=1,sctp,actions=set_field:4242->sctp_dst,output:2")
	ts.ofctl("add-flow", "priority=5,actions=drop")
	if out := ts.ofctl("dump-flows"); !strings.Contains(out, "4242->sctp_dst") {
		t.Fatalf("dump-flows lacks the sctp_dst rewrite:\n%s", out)
	}
	for what, got := range ts.forwardTwice(t, func(what string) []byte { return sctpFrame(t, 5000, 7000, what) }) {
		ipLen := int(binary.BigEndian.Uint16(got[14+2:]))
		sc := append([]byte(nil), got[14+20:14+ipLen]...)
		if dp := binary.BigEndian.Uint16(sc[2:]); dp != 4242 {
			t.Errorf("%s: destination port %d, want 4242", what, dp)
		}
		crc := binary.LittleEndian.Uint32(sc[8:])
		clear(sc[8:12])
		if want := crc32.Checksum(sc, castagnoli); crc != want {
			t.Errorf("%s: CRC32c %08x, want %08x", what, crc, want)
		}
	}
}

// forwardTwice sends two raw frames built by frame from pod 1 and returns
// each as pod 2 received it, keyed by the marker it carries: the first
// goes through the slow path (upcall, translation, execution), the second
// through the flow the first installed.
func (ts *testSwitch) forwardTwice(t *testing.T, frame func(marker string) []byte) map[string][]byte {
	t.Helper()
	rx := nstest.RawSocket(t, ts.Pods[1], "eth0")
	tx := nstest.RawSocket(t, ts.Pods[0], "eth0")
	out := map[string][]byte{}
	for _, what := range []string{"first packet, by the slow path", "second packet, by the fast path"} {
		if _, err := unix.Write(tx, frame(what)); err != nil {
			t.Fatal(err)
		}
		out[what] = nstest.ReadFrame(t, rx, []byte(what), 5*time.Second)
	}
	return out
}
