package cluster

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/nagare-net/nagare/internal/nstest"
)

// TestSwitchStoppedKeepsForwarding is deploy/README.md's promise on
// removal: with every agent and switch stopped by SIGTERM (deleting the
// DaemonSet), established flows keep forwarding from the pinned fast
// path, ARP included. Across nodes: a UDP ping-pong, a TCP stream and a
// ping (one ICMP identifier: an established flow) for 45 s, longer than the pods' neighbour entries stay fresh; at
// 20 s every pod forgets its neighbours, so the pings and streams go on
// only if ARP is answered without the switch. A new connection is a new
// flow and needs the switch (as with Open vSwitch without its daemon):
// not part of the promise.
func TestSwitchStoppedKeepsForwarding(t *testing.T) { switchStoppedKeepsForwarding(t, false) }

// TestSwitchStoppedKeepsForwardingWithinNode is the same within a node.
// It fails today: established flows between two pods of one node stop
// some 10 s after the switch stops (a ping within the node loses most
// echoes, the stream stalls), while the same flows across nodes go on;
// the pods' neighbours stay REACHABLE, the drops map counts nothing and
// the misses counter grows: the packets miss the megaflow table.
// Skipped until that is fixed (docs: deploy/README.md, removal).
func TestSwitchStoppedKeepsForwardingWithinNode(t *testing.T) {
	if testing.Short() || !knownDefects() {
		t.Skip("known defect: intra-node established flows stop ~10 s after the switch stops (NAGARE_KNOWN_DEFECTS=1 runs it)")
	}
	switchStoppedKeepsForwarding(t, true)
}

func switchStoppedKeepsForwarding(t *testing.T, withinNode bool) {
	c := newCluster(t, nil)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	ctx := ctxT(t, 3*time.Minute)
	p1, p2, p3 := addPod(ctx, t, n1, "keep1"), addPod(ctx, t, n1, "keep2"), addPod(ctx, t, n2, "keep3")
	for _, dst := range []string{p2.IP.String(), p3.IP.String(), n1.Config.Gateway().String()} {
		if err := ping(p1.NS, dst, 3); err != nil {
			t.Fatal(err)
		}
	}
	peer := p3
	if withinNode {
		peer = p2
	}
	lv := startLiveness(t, podNS(p1), podNS(peer), peer.IP.String(), 9300)
	lv.waitTraffic(t)
	const count = 225 // 45 s at 5 a second
	pings := map[string]chan string{}
	for _, dst := range []string{peer.IP.String()} {
		ch := make(chan string, 1)
		pings[dst] = ch
		go func() {
			out, _ := exec.Command("ip", "netns", "exec", p1.NS, "ping", "-n", "-q", "-c", fmt.Sprint(count), "-i", "0.2", "-W", "2", dst).CombinedOutput()
			ch <- string(bytes.TrimSpace(out))
		}()
	}
	time.Sleep(time.Second)

	for _, n := range c.Nodes {
		n.Agent.Stop()
		n.Switch.Stop()
	}
	t.Log("agents and switches stopped (SIGTERM)")
	time.Sleep(20 * time.Second)
	for _, p := range []string{p1.NS, p2.NS, p3.NS} {
		if err := nstest.Sh("ip", "-n", p, "neigh", "flush", "all"); err != nil {
			t.Fatal(err)
		}
	}
	t.Log("pods' neighbours flushed")
	received := regexp.MustCompile(`(\d+) received`)
	for dst, ch := range pings {
		out := <-ch
		m := received.FindStringSubmatch(out)
		// One echo may be lost while a flushed neighbour is resolved again.
		if m == nil || m[1] != fmt.Sprint(count) && m[1] != fmt.Sprint(count-1) {
			t.Errorf("ping %s from pod1 with the switches stopped: %s", dst, out)
		} else {
			t.Logf("ping %s: %s of %d answered", dst, m[1], count)
		}
	}
	lv.waitTraffic(t)
	udpGap, tcpGap, udpOK, tcpBytes := lv.finish()
	t.Logf("pod1 -> %s with the switches stopped: UDP %d answers, longest gap %v; TCP %d bytes, longest gap %v", peer.Name, udpOK, udpGap, tcpBytes, tcpGap)
	if udpGap > time.Second || tcpGap > time.Second {
		t.Errorf("gaps with the switches stopped: UDP %v, TCP %v; want ≤ 1s", udpGap, tcpGap)
	}
}

func knownDefects() bool { return os.Getenv("NAGARE_KNOWN_DEFECTS") == "1" }
