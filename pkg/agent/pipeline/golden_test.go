package pipeline

import (
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/agent/netpol"
	"github.com/nagare-net/nagare/pkg/agent/proxy"
	"github.com/nagare-net/nagare/pkg/openflow"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/*.golden from the current code")

// representativePipeline is a node with what every feature programs: two
// local pods, the gateway, two remote nodes, a Service with a TCP and a
// UDP port, one endpoint here and one on node2.
func representativePipeline() *Pipeline {
	gwMAC, _ := net.ParseMAC("02:00:00:00:01:01")
	p := New(nil, Node{Name: "node1", PodCIDR: netip.MustParsePrefix("10.77.1.0/24"), ClusterCIDR: netip.MustParsePrefix("10.77.0.0/16"),
		GatewayIP: netip.MustParseAddr("10.77.1.1"), GatewayMAC: gwMAC, GatewayPort: 2, VNI: 1}, nil)
	m1, _ := net.ParseMAC("0a:58:0a:4d:01:02")
	m2, _ := net.ParseMAC("0a:58:0a:4d:01:03")
	p.SetState([]Pod{
		{Key: "3f2a9c/eth0", Name: "default/web", Port: 5, MAC: m1, IP: netip.MustParseAddr("10.77.1.2")},
		{Key: "7b01de/eth0", Name: "default/db", Port: 6, MAC: m2, IP: netip.MustParseAddr("10.77.1.3")},
	}, []RemoteNode{
		{Name: "node2", PodCIDR: netip.MustParsePrefix("10.77.2.0/24"), Underlay: netip.MustParseAddr("192.168.77.2"), Port: 3},
		{Name: "node3", PodCIDR: netip.MustParsePrefix("10.77.3.0/24"), Underlay: netip.MustParseAddr("192.168.77.3"), Port: 4},
	})
	p.SetServices([]*proxy.Service{representativeService()})
	return p
}

// representativeService is default/web: ClusterIP 10.96.0.10, TCP 80 → 8080
// and UDP 53 → 5353, endpoints 10.77.1.2 (here) and 10.77.2.5 (node2).
// withAffinityService adds affinityService to p (the golden file and
// TestDesired hold it; the Service tests keep one Service).
func withAffinityService(p *Pipeline) *Pipeline {
	p.SetServices([]*proxy.Service{representativeService(), affinityService()})
	return p
}

func representativeService() *proxy.Service {
	eps := func(port uint16) []proxy.Endpoint {
		return []proxy.Endpoint{
			{Addr: netip.MustParseAddr("10.77.1.2"), Port: port, NodeName: "node1", Local: true, Ready: true, Serving: true},
			{Addr: netip.MustParseAddr("10.77.2.5"), Port: port, NodeName: "node2", Ready: true, Serving: true},
		}
	}
	vip := netip.MustParseAddr("10.96.0.10")
	return &proxy.Service{Key: proxy.ServiceKey{Namespace: "default", Name: "web"}, Type: proxy.TypeClusterIP, Ports: []*proxy.Port{
		{Name: "http", Protocol: proxy.TCP, Port: 80, Frontends: []proxy.Frontend{{Kind: proxy.FrontendClusterIP, Addr: vip, Port: 80}},
			Endpoints: eps(8080), InternalEndpoints: eps(8080), ExternalEndpoints: eps(8080), Internal: proxy.Forward, External: proxy.Forward},
		{Name: "dns", Protocol: proxy.UDP, Port: 53, Frontends: []proxy.Frontend{{Kind: proxy.FrontendClusterIP, Addr: vip, Port: 53}},
			Endpoints: eps(5353), InternalEndpoints: eps(5353), ExternalEndpoints: eps(5353), Internal: proxy.Forward, External: proxy.Forward},
	}}
}

// affinityService is default/sticky: ClusterIP 10.96.0.20, TCP 80 → 8080
// on the same endpoints, sessionAffinity ClientIP for 600 s.
func affinityService() *proxy.Service {
	s := representativeService()
	vip := netip.MustParseAddr("10.96.0.20")
	s.Key.Name = "sticky"
	s.Affinity = proxy.Affinity{ClientIP: true, Timeout: 600 * time.Second}
	s.Ports = s.Ports[:1]
	s.Ports[0].Frontends = []proxy.Frontend{{Kind: proxy.FrontendClusterIP, Addr: vip, Port: 80}}
	return s
}

// TestDesiredGolden pins the complete flow set of a representative node,
// byte for byte on the wire and in ovs-ofctl's words, in the order Desired
// gives it. It was written before the pipeline's files were reshaped from
// one per table to one per feature, to prove that move changed no flow;
// any later change to a flow shows up here and is reviewed as such
// (go test -run TestDesiredGolden -update rewrites the file).
func TestDesiredGolden(t *testing.T) {
	var got bytes.Buffer
	p := withAffinityService(representativePipeline())
	p.SetPolicies(netpol.State{}) // known, none: the one pass is in (conntrack_onepass.go)
	for _, f := range p.Desired() {
		b, err := openflow.Marshal(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		fmt.Fprintf(&got, "%s\n  %s\n", f, hex.EncodeToString(b))
	}
	for _, g := range p.DesiredGroups() {
		b, err := openflow.Marshal(g)
		if err != nil {
			t.Fatalf("group %d: %v", g.GroupID, err)
		}
		fmt.Fprintf(&got, "group_id=%d,type=select,%d buckets\n  %s\n", g.GroupID, len(g.Buckets), hex.EncodeToString(b))
	}
	path := filepath.Join("testdata", "representative-node.golden")
	if *updateGolden {
		if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("the flow set differs from %s:\n--- got\n%s\n--- want\n%s", path, got.Bytes(), want)
	}
}
