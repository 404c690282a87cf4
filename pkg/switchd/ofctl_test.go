package switchd

import (
	"encoding/hex"
	"net"
	"regexp"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"strconv"
	"strings"
	"testing"
)

// TestOvsOfctlBasics drives the switch with the real ovs-ofctl: flows are
// added, forward traffic, count it, and are deleted strictly and not.
func TestOvsOfctlBasics(t *testing.T) {
	ts := startSwitch(t, 2, nil)
	if out := ts.ofctl("show"); !strings.Contains(out, "1(v1)") || !strings.Contains(out, "2(v2)") {
		t.Fatalf("show:\n%s", out)
	}
	ts.ofctl("add-flow", "priority=10,in_port=1,actions=output:2")
	ts.ofctl("add-flow", "priority=10,in_port=2,actions=output:1")
	if err := ts.ping(1, 2); err != nil {
		t.Fatal(err)
	}
	packets := regexp.MustCompile(`n_packets=(\d+)`)
	waitFor(t, "dump-flows counters to rise", func() bool {
		out := ts.ofctl("dump-flows")
		m := packets.FindAllStringSubmatch(out, -1)
		if len(m) != 2 {
			return false
		}
		for _, x := range m {
			if n, _ := strconv.Atoi(x[1]); n < 2 {
				return false
			}
		}
		return true
	})
}

// TestOvsOfctlFamilies adds a flow of every supported match and action
// family with the real ovs-ofctl and reads them back.
func TestOvsOfctlFamilies(t *testing.T) {
	ts := startSwitch(t, 2, nil)
	ts.ofctl("add-group", "group_id=5,type=select,bucket=output:1,bucket=output:2")
	ts.ofctl("add-group", "group_id=6,type=all,bucket=output:1,bucket=output:2")
	ts.ofctl("add-group", "group_id=7,type=indirect,bucket=output:2")
	ts.ofctl("add-group", "group_id=8,type=ff,bucket=watch_port:1,output:1,bucket=watch_port:2,output:2")
	flows := []string{
		"table=0,priority=100,dl_src=02:00:00:00:00:01,dl_dst=02:00:00:00:00:02/ff:ff:ff:00:00:00,actions=output:2",
		"table=0,priority=90,ip,nw_src=10.8.0.0/24,nw_dst=10.8.0.2,nw_tos=32,actions=dec_ttl,output:2",
		"table=0,priority=80,tcp,tp_src=1000,tp_dst=80,actions=set_field:10.8.0.9->ip_dst,set_field:8080->tcp_dst,output:2",
		"table=0,priority=80,udp,udp_dst=53,actions=set_field:02:00:00:00:00:09->eth_dst,group:5",
		"table=0,priority=70,icmp,icmp_type=8,icmp_code=0,actions=group:6",
		"table=0,priority=70,arp,arp_op=1,arp_spa=10.8.0.1,arp_tpa=10.8.0.2,actions=group:7",
		"table=0,priority=60,ipv6,ipv6_src=fd00::1/64,ipv6_dst=fd00::2,actions=output:2",
		"table=0,priority=60,icmp6,icmp_type=135,actions=group:8",
		"table=0,priority=50,dl_vlan=10,actions=pop_vlan,output:2",
		"table=0,priority=50,in_port=2,actions=push_vlan:0x8100,set_field:4106->vlan_vid,output:1",
		"table=0,priority=40,tun_id=0x5,actions=write_metadata:0x1/0xff,goto_table:3",
		"table=3,priority=10,metadata=0x1/0xff,actions=write_actions(output:1)",
		"table=3,priority=5,actions=output:controller,clear_actions",
		"table=0,priority=0,actions=drop",
	}
	for _, f := range flows {
		ts.ofctl("add-flow", f)
	}
	out := ts.ofctl("dump-flows")
	if got := strings.Count(out, "cookie="); got != len(flows) {
		t.Fatalf("%d flows dumped, %d added:\n%s", got, len(flows), out)
	}
	for _, want := range []string{"nw_src=10.8.0.0/24", "set_field:8080->tcp_dst", "group:5", "goto_table:3", "write_actions(output:1)", "pop_vlan"} {
		if !strings.Contains(out, want) {
			t.Errorf("dump-flows lacks %q:\n%s", want, out)
		}
	}
	if g := ts.ofctl("dump-groups"); strings.Count(g, "group_id=") != 4 {
		t.Fatalf("dump-groups:\n%s", g)
	}
	if d := ts.ofctl("dump-tables"); !strings.Contains(d, "table 0") || !strings.Contains(d, "active=12") {
		t.Fatalf("dump-tables:\n%s", d)
	}
	if d := ts.ofctl("dump-ports-desc"); !strings.Contains(d, "1(v1)") {
		t.Fatalf("dump-ports-desc:\n%s", d)
	}
	if d := ts.ofctl("dump-ports"); !strings.Contains(d, "port  1") || !strings.Contains(d, "port  2") {
		t.Fatalf("dump-ports:\n%s", d)
	}

	// del-flows --strict removes exactly one rule; without it, a match
	// removes every rule it covers.
	ts.ofctl("--strict", "del-flows", "table=0,priority=70,icmp,icmp_type=8,icmp_code=0")
	if out := ts.ofctl("dump-flows"); strings.Count(out, "cookie=") != len(flows)-1 || strings.Contains(out, "icmp_type=8") {
		t.Fatalf("after strict delete:\n%s", out)
	}
	ts.ofctl("del-flows", "table=3")
	if out := ts.ofctl("dump-flows"); strings.Contains(out, "table=3") {
		t.Fatalf("table 3 still has rules:\n%s", out)
	}
	ts.ofctl("del-flows")
	if out := ts.ofctl("dump-flows"); strings.Contains(out, "cookie=") {
		t.Fatalf("rules left after del-flows:\n%s", out)
	}
}

// TestOvsOfctlErrors: bad requests get an OpenFlow error that ovs-ofctl
// prints, and change nothing.
func TestOvsOfctlErrors(t *testing.T) {
	ts := startSwitch(t, 2, nil)
	for _, c := range []struct{ flow, want string }{
		{"table=1,actions=goto_table:0", "OFPBIC_BAD_TABLE_ID"},
		{"actions=group:99", "OFPBAC_BAD_OUT_GROUP"},
		{"actions=meter:1,output:1", "OFPMMFC_UNKNOWN_METER"},
		{"actions=set_queue:1,output:2", "OFPBAC_BAD_QUEUE"},
	} {
		out, err := ts.ofctlErr("add-flow", c.flow)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("add-flow %s: err %v, output:\n%s\nwant %s", c.flow, err, out, c.want)
		}
	}
	ts.ofctl("add-flow", "priority=5,in_port=1,actions=output:2")
	if out, err := ts.ofctlErr("add-flow", "check_overlap,priority=5,in_port=1,ip,actions=output:2"); err == nil || !strings.Contains(out, "OFPFMFC_OVERLAP") {
		t.Errorf("overlapping add: err %v:\n%s", err, out)
	}
	if out, err := ts.ofctlErr("add-group", "group_id=1,type=indirect,bucket=output:1,bucket=output:2"); err == nil {
		t.Errorf("indirect group with two buckets accepted:\n%s", out)
	}
	if out := ts.ofctl("dump-flows"); strings.Count(out, "cookie=") != 1 {
		t.Fatalf("failed requests changed the tables:\n%s", out)
	}
	// What is refused is not advertised: no set_queue in the tables' or
	// the groups' actions.
	for _, cmd := range []string{"dump-table-features", "dump-group-features"} {
		out := ts.ofctl(cmd)
		if strings.Contains(out, "set_queue") || !strings.Contains(out, "mod_nw_ttl") {
			t.Errorf("%s advertises set_queue or lacks mod_nw_ttl:\n%s", cmd, out)
		}
	}
}

// TestPacketOut sends a frame from the controller side with ovs-ofctl
// packet-out; pod 2 must receive it.
func TestPacketOut(t *testing.T) {
	ts := startSwitch(t, 2, nil)
	var conn net.PacketConn
	var err error
	ts.Pods[1].In(t, func() { conn, err = net.ListenPacket("udp4", podIP(2)+":9999") })
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	eth := &layers.Ethernet{SrcMAC: mustMAC(podMAC(1)), DstMAC: mustMAC(podMAC(2)), EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.ParseIP(podIP(1)), DstIP: net.ParseIP(podIP(2))}
	udp := &layers.UDP{SrcPort: 1234, DstPort: 9999}
	_ = udp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, udp, gopacket.Payload("hello")); err != nil {
		t.Fatal(err)
	}
	ts.ofctl("packet-out", "in_port=controller,packet="+hex.EncodeToString(buf.Bytes())+",actions=output:2")
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 64)
	n, _, err := conn.ReadFrom(b)
	if err != nil || string(b[:n]) != "hello" {
		t.Fatalf("pod 2 received %q, %v", b[:n], err)
	}
}

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}
