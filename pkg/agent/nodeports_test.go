package agent

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/nagare-net/nagare/pkg/agent/config"
	"github.com/nagare-net/nagare/pkg/agent/nodeport"
	"github.com/nagare-net/nagare/pkg/agent/proxy"
)

// TestNodePortAddresses: this node's address first, then the other
// nodes' in order, then the virtual address its stack DNATs to.
func TestNodePortAddresses(t *testing.T) {
	c := config.Default()
	a := &Agent{cfg: Config{NodeName: "node2", Cluster: c}, remotes: map[string]*remote{}}
	a.node, _ = c.Node("node2")
	n1, _ := c.Node("node1")
	a.remotes["node1"] = &remote{node: n1}
	got := a.nodePortAddresses()
	want := []netip.Addr{netip.MustParseAddr("192.168.77.2"), netip.MustParseAddr("192.168.77.1"), nodeport.Address}
	if !slices.Equal(got, want) {
		t.Fatalf("addresses %v, want %v", got, want)
	}
}

// TestWantNodePorts: each NodePort once with its Service's external
// policy; LoadBalancer and external IPs with their ports, but not an
// address of the node's own (its stack answers for those).
func TestWantNodePorts(t *testing.T) {
	own := []netip.Addr{netip.MustParseAddr("192.168.77.1"), nodeport.Address}
	fe := func(k proxy.FrontendKind, a string, port uint16) proxy.Frontend {
		return proxy.Frontend{Kind: k, Addr: netip.MustParseAddr(a), Port: port}
	}
	svcs := []*proxy.Service{
		{Ports: []*proxy.Port{
			{Protocol: proxy.TCP, Port: 80, NodePort: 30080, Frontends: []proxy.Frontend{fe(proxy.FrontendClusterIP, "10.96.0.10", 80),
				fe(proxy.FrontendLoadBalancer, "203.0.113.9", 80), fe(proxy.FrontendExternalIP, "192.168.77.1", 80)}},
			{Protocol: proxy.UDP, Port: 53, NodePort: 30053},
		}},
		{ExternalLocal: true, Ports: []*proxy.Port{{Protocol: proxy.SCTP, Port: 9, NodePort: 30009,
			Frontends: []proxy.Frontend{fe(proxy.FrontendExternalIP, "198.51.100.1", 9)}}}},
	}
	got := wantNodePorts(svcs, own)
	want := []nodeport.Port{
		{Proto: 6, Port: 30080}, {Proto: 17, Port: 30053}, {Proto: 132, Port: 30009, Local: true},
		{Addr: netip.MustParseAddr("198.51.100.1"), Proto: 132, Port: 9, Local: true},
		{Addr: netip.MustParseAddr("203.0.113.9"), Proto: 6, Port: 80},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}
