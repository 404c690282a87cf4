package cluster

import (
	"bytes"
	"fmt"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/nscluster"
)

// TestSwitchStoppedKeepsForwarding is deploy/README.md's promise on
// removal: with every agent and switch stopped by SIGTERM (deleting the
// DaemonSet), established flows keep forwarding from the pinned fast
// path, ARP included, within a node and across nodes. From one pod to a
// pod of its node and to one of the other node at once: a UDP ping-pong,
// a TCP stream and a ping (one ICMP identifier: an established flow) for
// 45 s, longer than the pods' neighbour entries stay fresh, the switches
// stopped 12 s after the pods last resolved each other; at 20 s every
// pod forgets its neighbours, so the pings and streams go on only if ARP
// is answered without the switch (the ARP flows a neighbour's refresh
// takes are kept NeighborIdleTimeout, not the 10 s of other flows: with
// 10 s, the pair within the node lost its neighbours some 10 s after the
// switch stopped, its refresh missing in the fast path). A new connection
// is a new flow and needs the switch (as with Open vSwitch without its
// daemon): not part of the promise.
func TestSwitchStoppedKeepsForwarding(t *testing.T) {
	c := newCluster(t, nil)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	ctx := ctxT(t, 3*time.Minute)
	p1, p2, p3 := addPod(ctx, t, n1, "keep1"), addPod(ctx, t, n1, "keep2"), addPod(ctx, t, n2, "keep3")
	for _, dst := range []string{p2.IP.String(), p3.IP.String(), n1.Config.Gateway().String()} {
		if err := ping(p1.NS, dst, 3); err != nil {
			t.Fatal(err)
		}
	}
	peers := []*nscluster.Pod{p2, p3} // within the node, across nodes
	// Each side resolves the other once, as pods that talk do within a
	// minute (a refresh every 15-45 s): the fast path cannot answer an
	// ARP request no one asked while the switch ran.
	for _, p := range peers {
		if err := nstest.Sh("ip", "-n", p.NS, "neigh", "flush", "all"); err != nil {
			t.Fatal(err)
		}
		if err := ping(p.NS, p1.IP.String(), 1); err != nil {
			t.Fatal(err)
		}
	}
	var lvs []*liveness
	for i, peer := range peers {
		lv := startLiveness(t, podNS(p1), podNS(peer), peer.IP.String(), 9300+10*i)
		lv.waitTraffic(t)
		lvs = append(lvs, lv)
	}
	const count = 225 // 45 s at 5 a second
	pings := map[string]chan string{}
	for _, peer := range peers {
		dst := peer.IP.String()
		ch := make(chan string, 1)
		pings[dst] = ch
		go func() {
			out, _ := exec.Command("ip", "netns", "exec", p1.NS, "ping", "-n", "-q", "-c", fmt.Sprint(count), "-i", "0.2", "-W", "2", dst).CombinedOutput()
			ch <- string(bytes.TrimSpace(out))
		}()
	}
	// Longer than IdleTimeout (10 s) and shorter than the pods' shortest
	// reachable time (15 s): the ARP flows are idle past IdleTimeout when
	// the switches stop, as they are in a cluster between refreshes.
	time.Sleep(12 * time.Second)

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
	for i, lv := range lvs {
		lv.waitTraffic(t)
		udpGap, tcpGap, udpOK, tcpBytes := lv.finish()
		t.Logf("pod1 -> %s with the switches stopped: UDP %d answers, longest gap %v; TCP %d bytes, longest gap %v", peers[i].Name, udpOK, udpGap, tcpBytes, tcpGap)
		if udpGap > time.Second || tcpGap > time.Second {
			t.Errorf("pod1 -> %s, gaps with the switches stopped: UDP %v, TCP %v; want ≤ 1s", peers[i].Name, udpGap, tcpGap)
		}
	}
}
