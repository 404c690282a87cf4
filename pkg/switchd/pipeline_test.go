package switchd

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/flow"
)

// TestLearningSwitch: actions=NORMAL makes the bridge a MAC-learning
// switch; once the hosts are learned, unicast goes to one port (the
// cached flows match the destination MAC and output once).
func TestLearningSwitch(t *testing.T) {
	ts := startSwitch(t, 3, nil)
	ts.ofctl("add-flow", "priority=0,actions=NORMAL")
	for _, p := range [][2]int{{1, 2}, {2, 3}, {1, 3}} {
		if err := ts.ping(p[0], p[1]); err != nil {
			t.Fatal(err)
		}
	}
	fs, err := ts.Datapath().Dump()
	if err != nil {
		t.Fatal(err)
	}
	unicast := 0
	for _, f := range fs {
		outs := 0
		for _, a := range f.Actions {
			if _, ok := a.(flow.Output); ok {
				outs++
			}
		}
		if f.Mask.EthDst == [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff} && f.Key.EthDst[0] == 0x02 && outs == 1 && f.Stats.Packets > 0 {
			unicast++
		}
	}
	if unicast < 3 {
		for _, f := range fs {
			t.Log(f.Flow.String())
		}
		t.Fatalf("%d learned unicast flows in the cache, want at least 3", unicast)
	}
}

// TestMultiTablePipeline: table 0 classifies (ARP to NORMAL, IPv4 to
// table 1), table 1 routes by destination address.
func TestMultiTablePipeline(t *testing.T) {
	ts := startSwitch(t, 3, nil)
	ts.ofctl("add-flow", "table=0,priority=10,arp,actions=NORMAL")
	ts.ofctl("add-flow", "table=0,priority=10,ip,actions=goto_table:1")
	for i := 1; i <= 3; i++ {
		ts.ofctl("add-flow", fmt.Sprintf("table=1,priority=10,ip,nw_dst=%s,actions=output:%d", podIP(i), i))
	}
	if err := ts.ping(1, 3); err != nil {
		t.Fatal(err)
	}
	out := ts.ofctl("dump-flows", "table=1")
	if !strings.Contains(out, "nw_dst=10.8.0.3") || strings.Contains(out, "nw_dst=10.8.0.3 actions=output:3") && !strings.Contains(out, "n_packets=") {
		t.Fatalf("table 1:\n%s", out)
	}
	// Pod 2 is unreachable once its route goes: the revalidator must drop
	// the cached flow, not keep forwarding.
	if err := ts.ping(1, 2); err != nil {
		t.Fatal(err)
	}
	ts.ofctl("--strict", "del-flows", "table=1,priority=10,ip,nw_dst=10.8.0.2")
	if err := ts.ping(1, 2); err == nil {
		t.Fatal("pod 2 still reachable after its route was deleted")
	}
}

// TestGroupSelectSpreads: a SELECT group spreads flows over its buckets
// (each flow sticks to one bucket).
func TestGroupSelectSpreads(t *testing.T) {
	ts := startSwitch(t, 3, nil)
	const vip = "10.8.0.100"
	for i := 2; i <= 3; i++ {
		ts.Pods[i-1].IP(t, "addr", "add", vip+"/32", "dev", "eth0")
	}
	ts.Pods[0].IP(t, "neigh", "add", vip, "lladdr", "02:00:00:00:00:aa", "dev", "eth0", "nud", "permanent")
	ts.ofctl("add-group", "group_id=1,type=select,bucket=set_field:"+podMAC(2)+"->eth_dst,output:2,bucket=set_field:"+podMAC(3)+"->eth_dst,output:3")
	ts.ofctl("add-flow", "priority=10,udp,nw_dst="+vip+",actions=group:1")
	ts.ofctl("add-flow", "priority=0,actions=NORMAL")

	var mu sync.Mutex
	got := map[int]int{}
	for i := 2; i <= 3; i++ {
		var c net.PacketConn
		var err error
		ts.Pods[i-1].In(t, func() { c, err = net.ListenPacket("udp4", vip+":9000") })
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go func(pod int, c net.PacketConn) {
			b := make([]byte, 64)
			for {
				if _, _, err := c.ReadFrom(b); err != nil {
					return
				}
				mu.Lock()
				got[pod]++
				mu.Unlock()
			}
		}(i, c)
	}
	const flows = 64
	for i := 0; i < flows; i++ {
		var c net.Conn
		var err error
		ts.Pods[0].In(t, func() {
			c, err = net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(podIP(1)), Port: 20000 + i}, &net.UDPAddr{IP: net.ParseIP(vip), Port: 9000})
		})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("x"))
		c.Close()
	}
	waitFor(t, "every datagram to arrive", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got[2]+got[3] == flows
	})
	if got[2] < flows/8 || got[3] < flows/8 {
		t.Fatalf("select group spread %d flows as %v", flows, got)
	}
}

// TestIdleTimeoutFlowRemoved: a rule with idle_timeout and send_flow_rem
// expires once its traffic stops, and the controller gets FLOW_REMOVED.
func TestIdleTimeoutFlowRemoved(t *testing.T) {
	ts := startSwitch(t, 2, nil)
	c := dialController(t, ts.Sock)
	ts.ofctl("add-flow", "priority=0,actions=NORMAL")
	ts.ofctl("add-flow", "cookie=0x77,priority=10,icmp,idle_timeout=1,send_flow_rem,actions=NORMAL")
	if err := ts.ping(1, 2); err != nil {
		t.Fatal(err)
	}
	fr := c.waitFlowRemoved(t, 10*time.Second)
	if fr.Cookie != 0x77 || fr.Reason != 0 /* IDLE_TIMEOUT */ || fr.PacketCount == 0 {
		t.Fatalf("FLOW_REMOVED %+v", fr)
	}
	if out := ts.ofctl("dump-flows"); strings.Contains(out, "cookie=0x77") {
		t.Fatalf("expired rule still there:\n%s", out)
	}
}

var _ = nstest.Sh
