package cluster

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/agent/config"
	"github.com/nagare-net/nagare/pkg/nscluster"
)

// TestUnderlayMTU: on a 1400-byte underlay with no mtu in the cluster file
// pods get 1350 (the underlay device's MTU less VXLAN's 50), a large TCP
// transfer between nodes works, and when a router in the middle of the
// underlay narrows the path to node2 to 1300 bytes, pod1's TCP learns the
// inner path MTU (1250) from the ICMP frag-needed the tunnel translates
// and finishes its transfer instead of stalling (docs/agent.md#mtu).
func TestUnderlayMTU(t *testing.T) {
	cc := config.Default()
	cc.MTU = 0 // derived from the underlay device
	c := newClusterWith(t, func(o *nscluster.Options) { o.Cluster, o.UnderlayMTU = cc, 1400 })
	n1, n2 := c.Nodes[0], c.Nodes[1]
	ctx := ctxT(t, 90*time.Second)
	p1, p2 := addPod(ctx, t, n1, "mtu1"), addPod(ctx, t, n2, "mtu2")
	for _, p := range []*nscluster.Pod{p1, p2} {
		if mtu := linkMTU(t, p.NS, "eth0"); mtu != 1350 {
			t.Fatalf("%s: eth0 MTU %d, want 1350 (underlay 1400 - 50)", p.Name, mtu)
		}
	}
	for _, dev := range []string{"nagare-gw0", "nagare-vx0"} {
		if mtu := linkMTU(t, n1.NS, dev); mtu != 1350 {
			t.Fatalf("node1 %s: MTU %d, want 1350", dev, mtu)
		}
	}
	// Full-size segments both ways on the 1400-byte underlay.
	addr := p2.IP.String() + ":9100"
	if err := transfer(t, podNS(p2), podNS(p1), addr, 8<<20, 20*time.Second); err != nil {
		t.Fatalf("pod1 -> pod2 on a 1400-byte underlay: %v", err)
	}
	if err := transfer(t, podNS(p1), podNS(p2), p1.IP.String()+":9101", 8<<20, 20*time.Second); err != nil {
		t.Fatalf("pod2 -> pod1 on a 1400-byte underlay: %v", err)
	}
	if got := routeMTU(t, p1.NS, p2.IP.String()); got != 0 {
		t.Fatalf("pod1 has a path MTU %d to pod2 before any narrowing", got)
	}

	// A router between the underlay bridge and node2 whose link to node2
	// carries 1300 bytes: node1's outer packets of 1400 bytes with DF get
	// an ICMP frag-needed (mtu 1300) from it.
	before := switchCounters(t, n1)
	narrowPath(t, c, n1, n2, 1300)
	// 10 s: the transfer takes milliseconds when the pod learns the path
	// MTU at once, ~25 s when only TCP's blackhole detection gets it
	// through (a fast path that kept sending 1400-byte outer packets).
	if err := transfer(t, podNS(p2), podNS(p1), p2.IP.String()+":9102", 8<<20, 10*time.Second); err != nil {
		t.Fatalf("pod1 -> pod2 across a 1300-byte hop: %v (the pod's TCP did not learn the path MTU)", err)
	}
	// The fast path's tunnel (datapath.NativeTunnel) sees the PMTU
	// exception and leaves the endpoint's packets to the VXLAN driver,
	// which answers the pod.
	if after := switchCounters(t, n1); after["tunnel-kernel"] == before["tunnel-kernel"] {
		t.Errorf("node1's fast path did not hand the narrowed endpoint to the driver: %v → %v", before, after)
	}
	if got := routeMTU(t, p1.NS, p2.IP.String()); got != 1250 {
		t.Fatalf("pod1's path MTU to pod2: %d, want 1250 (1300 - 50)", got)
	}
	// The other way needs nothing: node2's outer packets leave over ul0
	// (1400) and the router's way to node1 is 1400 too.
	if err := transfer(t, podNS(p1), podNS(p2), p1.IP.String()+":9103", 4<<20, 30*time.Second); err != nil {
		t.Fatalf("pod2 -> pod1 across the router: %v", err)
	}
}

// narrowPath puts a router namespace between the underlay bridge and to's
// underlay link, with an MTU of mtu towards to. It answers ARP for both
// sides (proxy ARP), so the nodes keep their /24 and their addresses.
func narrowPath(t *testing.T, c *nscluster.Cluster, from, to *nscluster.Node, mtu int) {
	t.Helper()
	rt := c.Underlay + "-rt"
	toPort := fmt.Sprintf("u%d", nodeIndex(c, to)+1) // to's port on the underlay bridge
	sh := func(args ...string) {
		t.Helper()
		if err := nstest.Sh(args...); err != nil {
			t.Fatal(err)
		}
	}
	sh("ip", "netns", "add", rt)
	t.Cleanup(func() { _ = nstest.Sh("ip", "netns", "del", rt) })
	for _, cmd := range [][]string{
		{"ip", "-n", rt, "link", "set", "lo", "up"},
		{"ip", "-n", c.Underlay, "link", "set", toPort, "nomaster"},
		{"ip", "-n", c.Underlay, "link", "set", toPort, "netns", rt},
		{"ip", "-n", c.Underlay, "link", "add", "rtul", "type", "veth", "peer", "name", "r0", "netns", rt},
		{"ip", "-n", c.Underlay, "link", "set", "rtul", "mtu", "1400", "master", "ul", "up"},
		{"ip", "-n", rt, "link", "set", "r0", "mtu", "1400", "up"},
		{"ip", "-n", rt, "link", "set", toPort, "mtu", fmt.Sprint(mtu), "up"},
		{"ip", "-n", rt, "addr", "add", "192.168.77.254/24", "dev", "r0"},
		{"ip", "-n", rt, "route", "add", to.Config.Underlay.String() + "/32", "dev", toPort},
		{"ip", "netns", "exec", rt, "sysctl", "-qw", "net.ipv4.ip_forward=1",
			"net.ipv4.conf.r0.proxy_arp=1", "net.ipv4.conf." + toPort + ".proxy_arp=1",
			"net.ipv4.neigh.r0.proxy_delay=0", "net.ipv4.neigh." + toPort + ".proxy_delay=0"},
		// The nodes ask again: their neighbours are now the router.
		{"ip", "-n", from.NS, "neigh", "flush", "dev", "ul0"},
		{"ip", "-n", to.NS, "neigh", "flush", "dev", "ul0"},
	} {
		sh(cmd...)
	}
}

func nodeIndex(c *nscluster.Cluster, n *nscluster.Node) int {
	for i, m := range c.Nodes {
		if m == n {
			return i
		}
	}
	return -1
}

func linkMTU(t *testing.T, ns, dev string) int {
	t.Helper()
	b, err := exec.Command("ip", "netns", "exec", ns, "cat", "/sys/class/net/"+dev+"/mtu").Output()
	if err != nil {
		t.Fatalf("%s %s: %v", ns, dev, err)
	}
	var mtu int
	fmt.Sscan(string(b), &mtu)
	return mtu
}

// routeMTU is the path MTU ns's routing holds for dst (a PMTU exception),
// 0 if none.
func routeMTU(t *testing.T, ns, dst string) int {
	t.Helper()
	b, err := exec.Command("ip", "-n", ns, "route", "get", dst).Output()
	if err != nil {
		t.Fatalf("route get %s in %s: %v", dst, ns, err)
	}
	f := strings.Fields(string(b))
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "mtu" {
			var mtu int
			fmt.Sscan(f[i+1], &mtu)
			return mtu
		}
	}
	return 0
}

// transfer sends size bytes from client to a listener on addr in server
// and checks they arrive intact within limit (a stalled stream is an
// error, not a hang).
func transfer(t *testing.T, server, client nstest.NS, addr string, size int, limit time.Duration) error {
	t.Helper()
	var l net.Listener
	var err error
	server.In(t, func() { l, err = net.Listen("tcp4", addr) })
	if err != nil {
		return err
	}
	defer l.Close()
	got := make(chan [32]byte, 1)
	go func() {
		defer close(got)
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(limit))
		h := sha256.New()
		if _, err := io.Copy(h, c); err == nil {
			got <- [32]byte(h.Sum(nil))
		}
	}()
	var c net.Conn
	client.In(t, func() { c, err = net.DialTimeout("tcp4", addr, 5*time.Second) })
	if err != nil {
		return err
	}
	start := time.Now()
	c.SetDeadline(start.Add(limit))
	data := bytes.Repeat([]byte("nagare mtu! "), size/12)
	if _, err := c.Write(data); err != nil {
		c.Close()
		return fmt.Errorf("write after %v: %w", time.Since(start).Round(time.Millisecond), err)
	}
	c.Close()
	h, ok := <-got
	if !ok || h != sha256.Sum256(data) {
		return fmt.Errorf("stream arrived damaged or not in %v", limit)
	}
	t.Logf("%d bytes %s in %v", len(data), addr, time.Since(start).Round(time.Millisecond))
	return nil
}
