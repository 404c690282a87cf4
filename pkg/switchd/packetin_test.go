package switchd

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// wantPacketIn is what a controller must read in a PACKET_IN (OpenFlow
// 1.3.5, 7.4.1): the table and cookie of the rule whose output:CONTROLLER
// sent it, OFPR_NO_MATCH when that rule is the table-miss entry
// (priority 0, empty match) and OFPR_ACTION otherwise; the pipeline
// fields in the match; the whole frame's length; no buffer.
type wantPacketIn struct {
	reason uint8
	table  uint8
	cookie uint64
	match  string // openflow.Match.String()
	maxLen int    // bytes of data expected; 0 = the whole frame
	vlan   uint16 // VLAN ID the data must carry (the frame is 4 bytes longer)
}

// udpFrom sends one UDP datagram with payload from pod i to pod j's port
// and returns the frame's length on the wire.
func (ts *testSwitch) udpFrom(i, j, port int, payload []byte) int {
	ts.t.Helper()
	var conn net.Conn
	var err error
	ts.Pods[i-1].In(ts.t, func() { conn, err = net.Dial("udp4", net.JoinHostPort(podIP(j), strconv.Itoa(port))) })
	if err != nil {
		ts.t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(payload); err != nil {
		ts.t.Fatal(err)
	}
	return 14 + 20 + 8 + len(payload)
}

// waitUDPPacketIn waits for a PACKET_IN of a UDP datagram to port (p2
// answers the others with ICMP, which may reach the controller too).
func (tc *testController) waitUDPPacketIn(t *testing.T, port int) *openflow.PacketIn {
	t.Helper()
	return tc.wait(t, 10*time.Second, func(m openflow.Message) bool {
		pi, ok := m.(*openflow.PacketIn)
		if !ok {
			return false
		}
		pkt := gopacket.NewPacket(pi.Data, layers.LayerTypeEthernet, gopacket.Default)
		udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		return udp != nil && int(udp.DstPort) == port
	}).(*openflow.PacketIn)
}

// checkPacketIn compares pi with want for a frame of n bytes whose UDP
// payload is payload.
func checkPacketIn(t *testing.T, what string, pi *openflow.PacketIn, want wantPacketIn, n int, payload []byte) {
	t.Helper()
	var errs []string
	if pi.Reason != want.reason {
		errs = append(errs, fmt.Sprintf("reason %d, want %d", pi.Reason, want.reason))
	}
	if pi.TableID != want.table {
		errs = append(errs, fmt.Sprintf("table_id %d, want %d", pi.TableID, want.table))
	}
	if pi.Cookie != want.cookie {
		errs = append(errs, fmt.Sprintf("cookie %#x, want %#x", pi.Cookie, want.cookie))
	}
	if got := pi.Match.String(); got != want.match {
		errs = append(errs, fmt.Sprintf("match %q, want %q", got, want.match))
	}
	if len(pi.Match.Fields) == 0 || pi.Match.Fields[0].Field != openflow.FieldInPort {
		errs = append(errs, "in_port is not the match's first field") // as Open vSwitch sends it
	}
	if pi.BufferID != openflow.NoBuffer {
		errs = append(errs, fmt.Sprintf("buffer_id %#x, want OFP_NO_BUFFER", pi.BufferID))
	}
	if want.vlan != 0 {
		n += 4 // the packet as sent to the controller, with its tag
	}
	if int(pi.TotalLen) != n {
		errs = append(errs, fmt.Sprintf("total_len %d, want %d", pi.TotalLen, n))
	}
	dataLen := n
	if want.maxLen != 0 {
		dataLen = want.maxLen
	}
	if len(pi.Data) != dataLen {
		errs = append(errs, fmt.Sprintf("%d bytes of data, want %d", len(pi.Data), dataLen))
	}
	pkt := gopacket.NewPacket(pi.Data, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if eth == nil || eth.SrcMAC.String() != podMAC(1) || eth.DstMAC.String() != podMAC(2) {
		errs = append(errs, fmt.Sprintf("data is not p1's frame to p2: %v", pkt))
	} else if want.maxLen == 0 && !bytes.HasSuffix(pi.Data, payload) {
		errs = append(errs, "data does not end with the datagram's payload")
	}
	if want.vlan != 0 {
		if tag, _ := pkt.Layer(layers.LayerTypeDot1Q).(*layers.Dot1Q); tag == nil || tag.VLANIdentifier != want.vlan {
			errs = append(errs, fmt.Sprintf("data lacks VLAN %d: %v", want.vlan, pkt))
		}
	}
	if len(errs) > 0 {
		t.Errorf("%s: %s", what, strings.Join(errs, "; "))
	}
}

// TestPacketInFields: what a controller reads in a PACKET_IN across a
// multi-table pipeline, for a flow's first packet (translated in
// userspace) and its second one (the cached flow's userspace action).
func TestPacketInFields(t *testing.T) {
	ts := startSwitch(t, 2, nil)
	c := dialController(t, ts.Sock)
	// Static neighbours: no ARP in between, the datagrams are the flows'
	// first packets.
	for i, j := range []int{2, 1} {
		if err := ts.Pods[i].Sh(t, "ip", "neigh", "replace", podIP(j), "lladdr", podMAC(j), "dev", "eth0"); err != nil {
			t.Fatal(err)
		}
	}
	payload := bytes.Repeat([]byte("nagare"), 40)
	cases := []struct {
		name  string
		flows []string
		want  wantPacketIn
	}{{
		// A table-0 miss handled by its table-miss entry going on to
		// table 1, whose rule sends to the controller: the sender is
		// table 1's rule, an OFPR_ACTION.
		name: "table 0 miss, goto table 1, output:CONTROLLER in table 1",
		flows: []string{
			"table=0,priority=0,cookie=0xa0,actions=goto_table:1",
			"table=1,priority=10,cookie=0xb1,udp,actions=CONTROLLER:65535",
		},
		want: wantPacketIn{reason: openflow.PacketInReasonAction, table: 1, cookie: 0xb1, match: "in_port=1"},
	}, {
		// Table 2's table-miss entry sends it: OFPR_NO_MATCH, with that
		// entry's cookie; data cut at its max_len.
		name: "table-miss entry in table 2 with output:CONTROLLER",
		flows: []string{
			"table=0,priority=5,cookie=0xa0,in_port=1,actions=goto_table:1",
			"table=1,priority=5,cookie=0xa1,udp,actions=goto_table:2",
			"table=2,priority=9,cookie=0xa2,tcp,actions=output:2",
			"table=2,priority=0,cookie=0xc2,actions=CONTROLLER:64",
		},
		want: wantPacketIn{reason: openflow.PacketInReasonNoMatch, table: 2, cookie: 0xc2, match: "in_port=1", maxLen: 64},
	}, {
		// A learning pipeline: table 1 knows p1's MAC (a learned rule,
		// so no learning packet-in from its miss entry), table 2's
		// learned destination rule forwards and copies to the
		// controller; metadata written on the way is reported.
		name: "learned rule in a later table",
		flows: []string{
			"table=0,priority=0,cookie=0x10,actions=write_metadata:0x5/0xff,goto_table:1",
			"table=1,priority=0,cookie=0x11,actions=CONTROLLER:65535,goto_table:2",
			"table=1,priority=100,cookie=0x21,in_port=1,dl_src=" + podMAC(1) + ",actions=goto_table:2",
			"table=2,priority=0,cookie=0x12,actions=FLOOD",
			"table=2,priority=100,cookie=0x22,dl_dst=" + podMAC(2) + ",actions=output:2,CONTROLLER:65535",
		},
		want: wantPacketIn{reason: openflow.PacketInReasonAction, table: 2, cookie: 0x22, match: "metadata=0x5,in_port=1"},
	}, {
		// A VLAN table (Faucet's habit): untagged ports get their VLAN
		// pushed in table 0, the learning table sends to the controller,
		// which reads the VLAN from the data.
		name: "tag pushed in table 0, output:CONTROLLER in table 1",
		flows: []string{
			"table=0,priority=9,cookie=0xa0,in_port=1,vlan_tci=0/0x1000,actions=push_vlan:0x8100,set_field:4196->vlan_vid,goto_table:1",
			"table=1,priority=9,cookie=0xb1,dl_vlan=100,actions=CONTROLLER:65535,goto_table:2",
			"table=2,priority=0,dl_vlan=100,actions=pop_vlan,output:2",
		},
		want: wantPacketIn{reason: openflow.PacketInReasonAction, table: 1, cookie: 0xb1, match: "in_port=1", vlan: 100},
	}}
	for i, tc := range cases {
		ts.ofctl("del-flows")
		for _, f := range tc.flows {
			ts.ofctl("add-flow", f)
		}
		c.barrier(t) // the revalidator has caught up: no flow of a previous case is cached
		for _, which := range []string{"first packet", "cached flow"} {
			n := ts.udpFrom(1, 2, 6000+i, payload)
			pi := c.waitUDPPacketIn(t, 6000+i)
			checkPacketIn(t, tc.name+", "+which, pi, tc.want, n, payload)
		}
	}
}
