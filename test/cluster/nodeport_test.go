package cluster

import (
	"bufio"
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

// TestServicesNodePort: NodePort Services of the cluster file, reached
// from a pod (on any node's address), from the node itself, from the
// other node over the underlay, and from the external host on a node's
// external address; and who the endpoint sees as the client.
// np-cluster (externalTrafficPolicy Cluster, nodePort 30090) spreads over
// the endpoints on both nodes and the endpoint sees the node's gateway
// address (masqueraded, so an endpoint on the other node answers through
// this one); np-local (Local, 30091) uses only the endpoint on the node
// that was addressed and the endpoint sees the client's own address —
// except from a pod, whose connections use every endpoint (kube-proxy's
// short-circuit of pod traffic to external frontends).
func TestServicesNodePort(t *testing.T) {
	cc := config.Default()
	port := func(np int) []config.ServicePort {
		return []config.ServicePort{{Name: "tcp", Protocol: "TCP", Port: 80, TargetPort: 9090, NodePort: np}}
	}
	cc.Services = append(cc.Services,
		config.Service{Name: "np-cluster", Type: "NodePort", ClusterIP: "10.96.0.20", Ports: port(30090), Endpoints: []string{"10.77.1.2", "10.77.2.2"}},
		config.Service{Name: "np-local", Type: "NodePort", ClusterIP: "10.96.0.21", ExternalTrafficPolicy: "Local", Ports: port(30091), Endpoints: []string{"10.77.1.2", "10.77.2.2"}},
		config.Service{Name: "lb-cluster", Type: "LoadBalancer", ClusterIP: "10.96.0.22", LoadBalancerIPs: []string{"203.0.113.9"},
			Ports: port(30092), Endpoints: []string{"10.77.1.2", "10.77.2.2"}},
		config.Service{Name: "lb-local", Type: "LoadBalancer", ClusterIP: "10.96.0.23", ExternalIPs: []string{"203.0.113.10"}, ExternalTrafficPolicy: "Local",
			Ports: port(30093), Endpoints: []string{"10.77.1.2", "10.77.2.2"}})
	c := newCluster(t, cc)
	ctx := ctxT(t, 3*time.Minute)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	add := func(n *nscluster.Node, name string) *nscluster.Pod {
		p, err := n.AddPod(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	srv1, srv2 := add(n1, "srv1"), add(n2, "srv2")
	if srv1.IP.String() != "10.77.1.2" || srv2.IP.String() != "10.77.2.2" {
		t.Fatalf("endpoint pods got %s and %s, the cluster file names 10.77.1.2 and 10.77.2.2", srv1.IP, srv2.IP)
	}
	serveWho(t, podNS(srv1), "srv1")
	serveWho(t, podNS(srv2), "srv2")
	cli := add(n1, "cli1")
	ext := nstest.NS{Name: c.External, Path: "/var/run/netns/" + c.External}
	gw1, gw2 := n1.Config.Gateway().String(), n2.Config.Gateway().String()
	ul1, ul2 := n1.Config.Underlay.String(), n2.Config.Underlay.String()
	// The external host's router sends the balancer's addresses to node 1
	// (TEST-NET-3: these namespaces are the whole network).
	ext.IP(t, "route", "add", "203.0.113.0/24", "via", n1.ExtAddr)

	cases := []struct {
		name      string
		from      nstest.NS
		to        string
		endpoints []string // the ones that must all answer, and no other
		client    string   // the source the endpoint sees; "" = not checked
	}{
		{"pod to its own node's address, Cluster", podNS(cli), ul1 + ":30090", []string{"srv1", "srv2"}, ""},
		{"pod to the other node's address, Cluster", podNS(cli), ul2 + ":30090", []string{"srv1", "srv2"}, ""},
		// kube-proxy's short-circuit: a pod's traffic to a Local NodePort uses every endpoint.
		{"pod to the other node's address, Local", podNS(cli), ul2 + ":30091", []string{"srv1", "srv2"}, ""},
		{"node itself, Cluster", nodeNS(n1), ul1 + ":30090", []string{"srv1", "srv2"}, gw1},
		{"node itself, Local", nodeNS(n1), ul1 + ":30091", []string{"srv1"}, ul1},
		{"other node over the underlay, Cluster", nodeNS(n2), ul1 + ":30090", []string{"srv1", "srv2"}, gw1},
		{"other node over the underlay, Local", nodeNS(n2), ul1 + ":30091", []string{"srv1"}, ul2},
		{"external host to node 1, Cluster", ext, n1.ExtAddr + ":30090", []string{"srv1", "srv2"}, gw1},
		{"external host to node 2, Cluster", ext, n2.ExtAddr + ":30090", []string{"srv1", "srv2"}, gw2},
		{"external host to node 1, Local", ext, n1.ExtAddr + ":30091", []string{"srv1"}, nscluster.ExternalHost},
		{"external host to node 2, Local", ext, n2.ExtAddr + ":30091", []string{"srv2"}, nscluster.ExternalHost},
		{"external host to a LoadBalancer IP, Cluster", ext, "203.0.113.9:80", []string{"srv1", "srv2"}, gw1},
		{"external host to an external IP, Local", ext, "203.0.113.10:80", []string{"srv1"}, nscluster.ExternalHost},
		{"pod to a LoadBalancer IP", podNS(cli), "203.0.113.9:80", []string{"srv1", "srv2"}, ""},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "-"), func(t *testing.T) {
			got := map[string]int{}
			for i := 0; i < 16; i++ {
				name, client, err := tcpWho(t, tc.from, tc.to)
				if err != nil {
					r, _ := exec.Command("ip", "netns", "exec", n1.NS, "nft", "list", "table", "ip", "nagare-nodeport").CombinedOutput()
					t.Fatalf("connection %d to %s: %v\nnode 1's NodePort table:\n%s", i, tc.to, err, r)
				}
				if tc.client != "" && client != tc.client {
					t.Fatalf("%s saw the client as %s, want %s", name, client, tc.client)
				}
				got[name]++
			}
			for _, e := range tc.endpoints {
				if got[e] == 0 {
					t.Errorf("connections per endpoint %v: want all of %v", got, tc.endpoints)
				}
			}
			if len(got) != len(tc.endpoints) {
				t.Errorf("connections per endpoint %v: want only %v", got, tc.endpoints)
			}
			t.Logf("%s → %s: %v, client seen as %s", tc.name, tc.to, got, tc.client)
		})
	}
}

// serveWho answers TCP 9090 in ns with "name client-address", then echoes
// what it reads until the client closes.
func serveWho(t *testing.T, ns nstest.NS, name string) {
	var ln net.Listener
	var err error
	ns.In(t, func() { ln, err = net.Listen("tcp4", "0.0.0.0:9090") })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintln(c, name, c.RemoteAddr().(*net.TCPAddr).IP)
				io.Copy(c, c) // until the client closes (TestProxyRedirect's long connections)
			}()
		}
	}()
}

// tcpWho connects from ns to addr and returns the endpoint's name and
// the client address it saw.
func tcpWho(t *testing.T, ns nstest.NS, addr string) (string, string, error) {
	var c net.Conn
	var err error
	ns.In(t, func() { c, err = net.DialTimeout("tcp4", addr, 3*time.Second) })
	if err != nil {
		return "", "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	f := strings.Fields(line)
	if len(f) != 2 {
		return "", "", fmt.Errorf("answer %q: %v", line, err)
	}
	return f[0], f[1], nil
}
