package switchd

import (
	"encoding/hex"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// udpFrame is an Ethernet/IPv4/UDP frame from pod i to pod j's port.
func udpFrame(t *testing.T, i, j, port int, payload string) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: mustMAC(podMAC(i)), DstMAC: mustMAC(podMAC(j)), EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.ParseIP(podIP(i)), DstIP: net.ParseIP(podIP(j))}
	udp := &layers.UDP{SrcPort: 1234, DstPort: layers.UDPPort(port)}
	_ = udp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, udp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// ruleCounts returns n_packets and n_bytes of the one rule dump-flows
// shows with cookie.
func (ts *testSwitch) ruleCounts(cookie string) (packets, bytes int) {
	ts.t.Helper()
	out := ts.ofctl("dump-flows", "cookie="+cookie+"/-1")
	m := regexp.MustCompile(`n_packets=(\d+), n_bytes=(\d+)`).FindAllStringSubmatch(out, -1)
	if len(m) != 1 {
		ts.t.Fatalf("dump-flows cookie=%s: want one rule\n%s", cookie, out)
	}
	packets, _ = strconv.Atoi(m[0][1])
	bytes, _ = strconv.Atoi(m[0][2])
	return packets, bytes
}

// TestPacketOutToTableCounts: a PACKET_OUT with output:TABLE goes through
// the tables as if it arrived on its in_port, and every rule it hits
// counts it, as the rules a packet from a port hits do (a controller's
// statistics, and idle timeouts, depend on it).
func TestPacketOutToTableCounts(t *testing.T) {
	ts := startSwitch(t, 2, nil)
	c := dialController(t, ts.Sock)
	var conn net.PacketConn
	var err error
	ts.Pods[1].In(t, func() { conn, err = net.ListenPacket("udp4", podIP(2)+":9999") })
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ts.ofctl("add-flow", "table=0,priority=10,cookie=0x70,udp,actions=goto_table:1")
	ts.ofctl("add-flow", "table=1,priority=10,cookie=0x71,udp,tp_dst=9999,actions=output:2")
	ts.ofctl("add-flow", "table=1,priority=0,cookie=0x7f,actions=CONTROLLER:65535")

	frame := udpFrame(t, 1, 2, 9999, "from the controller")
	const n = 3
	for i := 0; i < n; i++ {
		ts.ofctl("packet-out", "in_port=1,packet="+hex.EncodeToString(frame)+",actions=TABLE")
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 64)
	for i := 0; i < n; i++ {
		if k, _, err := conn.ReadFrom(b); err != nil || string(b[:k]) != "from the controller" {
			t.Fatalf("pod 2 received %q, %v (datagram %d)", b[:k], err, i)
		}
	}
	// ovs-ofctl packet-out ends with a BARRIER: the counts are there now.
	for _, cookie := range []string{"0x70", "0x71"} {
		if p, by := ts.ruleCounts(cookie); p != n || by != n*len(frame) {
			t.Errorf("rule cookie=%s: n_packets=%d n_bytes=%d, want %d and %d", cookie, p, by, n, n*len(frame))
		}
	}

	// The same through table 1's table-miss entry: a PACKET_IN that says
	// so, and the entry counts it.
	other := udpFrame(t, 1, 2, 7, "to the controller")
	ts.ofctl("packet-out", "in_port=1,packet="+hex.EncodeToString(other)+",actions=TABLE")
	pi := c.waitUDPPacketIn(t, 7)
	if pi.Reason != openflow.PacketInReasonNoMatch || pi.TableID != 1 || pi.Cookie != 0x7f || pi.Match.String() != "in_port=1" ||
		int(pi.TotalLen) != len(other) || string(pi.Data) != string(other) {
		t.Errorf("PACKET_IN of a packet-out through the tables: %s", fmt.Sprintf("reason=%d table=%d cookie=%#x match=%s total_len=%d data=%x",
			pi.Reason, pi.TableID, pi.Cookie, pi.Match, pi.TotalLen, pi.Data))
	}
	if p, _ := ts.ruleCounts("0x7f"); p != 1 {
		t.Errorf("table-miss entry: n_packets=%d, want 1", p)
	}
}
