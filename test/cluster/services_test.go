package cluster

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/agent"
	"github.com/nagare-net/nagare/pkg/agent/config"
	"github.com/nagare-net/nagare/pkg/nscluster"
)

// TestServicesClusterIP: the cluster file's Services through nagare's own
// pipeline (no kube-proxy). echo (10.96.0.10, TCP 80 → 8080, UDP 53 →
// 5353) has one endpoint on each node; a pod on each node reaches the
// ClusterIP over TCP and UDP, its connections spread over both endpoints,
// and replies come from the ClusterIP. local (10.96.0.11) names its node-1
// endpoint by pod name, so deleting that pod removes the endpoint there:
// new connections from node 1 all go to the one left.
func TestServicesClusterIP(t *testing.T) {
	cc := config.Default()
	cc.Services = append(cc.Services, config.Service{Name: "local", ClusterIP: "10.96.0.11",
		Ports: []config.ServicePort{{Name: "tcp", Protocol: "TCP", Port: 80, TargetPort: 8080},
			{Name: "udp", Protocol: "UDP", Port: 53, TargetPort: 5353}}, Endpoints: []string{"default/srv1", "10.77.2.2"}})
	c := newCluster(t, cc)
	ctx := ctxT(t, 3*time.Minute)
	n1, n2 := c.Nodes[0], c.Nodes[1]

	// The endpoints first, then a client on each node.
	add := func(n *nscluster.Node, name string) *nscluster.Pod { return addPod(ctx, t, n, name) }
	srv1, _ := endpointPods(ctx, t, n1, n2)
	clients := []*nscluster.Pod{add(n1, "cli1"), add(n2, "cli2")}

	t.Run("pod-to-pod-tcp", func(t *testing.T) {
		// Every packet now goes through the tracker: plain pod traffic must not notice.
		for _, cl := range clients {
			for _, to := range []string{"10.77.1.2:8080", "10.77.2.2:8080"} {
				if name, err := tcpName(t, podNS(cl), to); err != nil {
					t.Errorf("%s to %s: %v", cl.Name, to, err)
				} else {
					t.Logf("%s to %s: %s", cl.Name, to, name)
				}
			}
		}
	})
	for _, cl := range clients {
		t.Run("tcp-from-"+cl.Name, func(t *testing.T) {
			got := map[string]int{}
			for i := 0; i < 24; i++ {
				name, err := tcpName(t, podNS(cl), "10.96.0.10:80")
				if err != nil {
					t.Fatalf("connection %d: %v", i, err)
				}
				got[name]++
			}
			if got["srv1"] == 0 || got["srv2"] == 0 {
				t.Fatalf("connections per endpoint %v: want both", got)
			}
			t.Logf("TCP connections per endpoint from %s: %v", cl.Name, got)
		})
		t.Run("udp-from-"+cl.Name, func(t *testing.T) {
			got := map[string]int{}
			for i := 0; i < 24; i++ {
				name, from, err := udpName(t, podNS(cl), "10.96.0.10:53")
				if err != nil {
					t.Fatalf("exchange %d: %v", i, err)
				}
				if from != "10.96.0.10:53" {
					t.Fatalf("reply from %s, want the ClusterIP", from)
				}
				got[name]++
			}
			if got["srv1"] == 0 || got["srv2"] == 0 {
				t.Fatalf("exchanges per endpoint %v: want both", got)
			}
			t.Logf("UDP exchanges per endpoint from %s: %v", cl.Name, got)
		})
	}

	for _, n := range []*nscluster.Node{n1, n2} {
		t.Run("tcp-from-node-"+n.Config.Name, func(t *testing.T) {
			// The node's route to serviceCIDR goes through the switch.
			got := map[string]int{}
			for i := 0; i < 24; i++ {
				name, err := tcpName(t, nodeNS(n), "10.96.0.10:80")
				if err != nil {
					r, _ := exec.Command("ip", "netns", "exec", n.NS, "ip", "route", "get", "10.96.0.10").CombinedOutput()
					nb, _ := exec.Command("ip", "netns", "exec", n.NS, "ip", "neigh").CombinedOutput()
					t.Logf("the node's route: %s neighbours: %s\n%s", r, nb, ofctl(t, n.SwitchSocket(), "dump-flows"))
					t.Fatalf("connection %d: %v", i, err)
				}
				got[name]++
			}
			if got["srv1"] == 0 || got["srv2"] == 0 {
				t.Fatalf("connections per endpoint %v: want both", got)
			}
			t.Logf("TCP connections per endpoint from %s: %v", n.Config.Name, got)
		})
	}

	t.Run("endpoint-deleted-moves-new-connections", func(t *testing.T) {
		got := map[string]int{}
		for i := 0; i < 16; i++ {
			name, err := tcpName(t, podNS(clients[0]), "10.96.0.11:80")
			if err != nil {
				t.Fatal(err)
			}
			got[name]++
		}
		if got["srv1"] == 0 || got["srv2"] == 0 {
			t.Fatalf("before: %v, want both endpoints", got)
		}
		// A UDP flow (one socket, one source port) that the tracker
		// sends to srv1: UDP has no end, so only the agent's flush of
		// the gone endpoint's connections lets it move to srv2 (a
		// resolver whose DNS pod went), instead of waiting out the
		// tracker's 120 s.
		var flow *udpFlow
		for i := 0; i < 32 && flow == nil; i++ {
			f := newUDPFlow(t, podNS(clients[0]), "10.96.0.11:53")
			if name, err := f.ask(); err == nil && name == "srv1" {
				flow = f
			} else {
				f.c.Close()
			}
		}
		if flow == nil {
			t.Fatal("no UDP flow went to srv1 in 32 tries")
		}
		defer flow.c.Close()
		if err := srv1.Del(ctx); err != nil {
			t.Fatal(err)
		}
		udpDeadline := time.Now().Add(10 * time.Second)
		for {
			name, err := flow.ask()
			if err == nil && name == "srv2" {
				break
			}
			if time.Now().After(udpDeadline) {
				t.Fatalf("the UDP flow to srv1 did not move to srv2 after srv1 went: %q %v (its connection was not flushed)", name, err)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			got = map[string]int{}
			var errs int
			for i := 0; i < 16; i++ {
				name, err := tcpName(t, podNS(clients[0]), "10.96.0.11:80")
				if err != nil {
					errs++
					continue
				}
				got[name]++
			}
			if errs == 0 && got["srv2"] == 16 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after deleting srv1: %v, %d failed; want all 16 on srv2", got, errs)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

// addPod adds pod name on n.
func addPod(ctx context.Context, t *testing.T, n *nscluster.Node, name string) *nscluster.Pod {
	t.Helper()
	p, err := n.AddPod(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// endpointPods adds srv1 on n1 and srv2 on n2, the first address of each
// pod CIDR (10.77.1.2 and 10.77.2.2, as the test cluster files name
// them), answering their names on TCP 8080 and UDP 5353.
func endpointPods(ctx context.Context, t *testing.T, n1, n2 *nscluster.Node) (srv1, srv2 *nscluster.Pod) {
	t.Helper()
	srv1, srv2 = addPod(ctx, t, n1, "srv1"), addPod(ctx, t, n2, "srv2")
	if srv1.IP.String() != "10.77.1.2" || srv2.IP.String() != "10.77.2.2" {
		t.Fatalf("endpoint pods got %s and %s, the cluster file names 10.77.1.2 and 10.77.2.2", srv1.IP, srv2.IP)
	}
	for _, s := range []*nscluster.Pod{srv1, srv2} {
		serveName(t, podNS(s), s.Name)
	}
	// The cluster file names srv1 as an endpoint: its ADD put it in node
	// 1's desired state, which the agent programs after coalescing.
	waitServicesProgrammed(t, n1)
	return srv1, srv2
}

// waitServicesProgrammed waits until n's agent has programmed every
// Service change it knows of.
func waitServicesProgrammed(t *testing.T, n *nscluster.Node) {
	t.Helper()
	waitStatus(t, n, 10*time.Second, "Service changes programmed", func(st *agent.Status) bool {
		return st.Switch.Connected && st.ServicesPending == 0
	})
}

// waitStatus polls n's agent status every 20 ms until ok holds, for at
// most limit, then fails saying what it waited for.
func waitStatus(t *testing.T, n *nscluster.Node, limit time.Duration, what string, ok func(*agent.Status) bool) {
	t.Helper()
	if err := n.WaitStatus(context.Background(), limit, what, ok); err != nil {
		t.Fatal(err)
	}
}

// serveName answers on TCP 8080 and UDP 5353 in ns with name.
func serveName(t *testing.T, ns nstest.NS, name string) { serveNameOn(t, ns, name, 8080, 5353) }

// serveNameOn answers on TCP tcpPort and UDP udpPort in ns with name.
func serveNameOn(t *testing.T, ns nstest.NS, name string, tcpPort, udpPort int) {
	var ln net.Listener
	var pc net.PacketConn
	var err1, err2 error
	ns.In(t, func() {
		ln, err1 = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", tcpPort))
		pc, err2 = net.ListenPacket("udp4", fmt.Sprintf("0.0.0.0:%d", udpPort))
	})
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	t.Cleanup(func() { ln.Close(); pc.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, name)
			c.Close()
		}
	}()
	go func() {
		b := make([]byte, 1500)
		for {
			_, from, err := pc.ReadFrom(b)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(name), from)
		}
	}()
}

// tcpName opens a new connection from ns to addr and reads the server's name.
func tcpName(t *testing.T, ns nstest.NS, addr string) (string, error) {
	c, err := dialIn(t, ns, addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// dialIn opens a TCP connection from ns to addr, both dial and use
// bounded by 3 s.
func dialIn(t *testing.T, ns nstest.NS, addr string) (net.Conn, error) {
	var c net.Conn
	var err error
	ns.In(t, func() {
		d := net.Dialer{Timeout: 3 * time.Second}
		c, err = d.DialContext(context.Background(), "tcp4", addr)
	})
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(3 * time.Second))
	return c, nil
}

// udpFlow is one UDP socket in a namespace talking to one address: every
// datagram is the same connection for the tracker.
type udpFlow struct {
	c  net.PacketConn
	to net.Addr
}

func newUDPFlow(t *testing.T, ns nstest.NS, addr string) *udpFlow {
	t.Helper()
	var c net.PacketConn
	var err error
	ns.In(t, func() { c, err = net.ListenPacket("udp4", "0.0.0.0:0") })
	if err != nil {
		t.Fatal(err)
	}
	to, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	return &udpFlow{c: c, to: to}
}

// ask sends one datagram and returns the name that answers within 500 ms.
func (f *udpFlow) ask() (string, error) {
	if _, err := f.c.WriteTo([]byte("who"), f.to); err != nil {
		return "", err
	}
	b := make([]byte, 1500)
	f.c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	n, _, err := f.c.ReadFrom(b)
	if err != nil {
		return "", err
	}
	return string(b[:n]), nil
}

// udpName sends one datagram from a new socket in ns to addr and reads the answer and where it came from.
func udpName(t *testing.T, ns nstest.NS, addr string) (string, string, error) {
	var c net.PacketConn
	var err error
	ns.In(t, func() { c, err = net.ListenPacket("udp4", "0.0.0.0:0") })
	if err != nil {
		return "", "", err
	}
	defer c.Close()
	to, _ := net.ResolveUDPAddr("udp4", addr)
	b := make([]byte, 1500)
	for try := 0; try < 3; try++ {
		if _, err := c.WriteTo([]byte("who"), to); err != nil {
			return "", "", err
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		n, from, err := c.ReadFrom(b)
		if err == nil {
			return string(b[:n]), from.String(), nil
		}
	}
	return "", "", fmt.Errorf("no answer from %s", addr)
}
