package pipeline

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/nagare-net/nagare/pkg/agent/proxy"
)

// TestPodToLocalNodePortUsesAllEndpoints: a NodePort of
// externalTrafficPolicy Local whose only endpoint is on node 2. From the
// node's stack (a NodePort it DNATed to the virtual address) a new
// connection drops, as Local wants; from a pod, to this node's address
// or another's, it reaches node 2's endpoint (kube-proxy's short-circuit
// of pod traffic to the Cluster endpoints). With internalTrafficPolicy
// Local too, the pod's connection drops (no local endpoint either way).
func TestPodToLocalNodePortUsesAllEndpoints(t *testing.T) {
	remote := proxy.Endpoint{Addr: netip.MustParseAddr("10.77.2.5"), Port: 8080, Ready: true, Serving: true}
	fe := func(k proxy.FrontendKind, a string, port uint16) proxy.Frontend {
		return proxy.Frontend{Kind: k, Addr: netip.MustParseAddr(a), Port: port}
	}
	svc := func(internalLocal bool) *proxy.Service {
		s := &proxy.Service{Key: proxy.ServiceKey{Namespace: "default", Name: "np"}, Type: proxy.TypeNodePort,
			ExternalLocal: true, InternalLocal: internalLocal, Ports: []*proxy.Port{{
				Protocol: proxy.TCP, Port: 80, NodePort: 30080,
				Frontends: []proxy.Frontend{fe(proxy.FrontendClusterIP, "10.96.0.30", 80),
					fe(proxy.FrontendNodePort, "192.168.77.1", 30080), fe(proxy.FrontendNodePort, "192.168.77.2", 30080),
					fe(proxy.FrontendNodePort, "169.254.0.252", 30080)},
				Endpoints: []proxy.Endpoint{remote}, InternalEndpoints: []proxy.Endpoint{remote}, Internal: proxy.Forward, External: proxy.Drop}}}
		if internalLocal {
			s.Ports[0].InternalEndpoints, s.Ports[0].Internal = nil, proxy.Drop
		}
		return s
	}
	p, sw := serviceNode(t)
	if _, err := p.UpdateServices(context.Background(), []*proxy.Service{svc(false)}, nil); err != nil {
		t.Fatal(err)
	}
	for _, dst := range []string{"192.168.77.1", "192.168.77.2"} {
		var ct conntrack
		out, k := ct.walk(t, sw.pl, ipKey(6, 6, dbMAC, gatewayMAC, "10.77.1.3", dst, 40000, 30080))
		if got := netip.AddrFrom4([4]byte(k.IPDst[:4])).String(); got != "10.77.2.5" || k.TpDst != 8080 || !strings.Contains(out, "output:3") {
			t.Fatalf("pod to %s:30080: to %s:%d, %s; want node 2's endpoint through the tunnel", dst, got, k.TpDst, out)
		}
	}
	var host conntrack
	if out, _ := host.walk(t, sw.pl, ipKey(6, 2, gatewayMAC, [6]byte(RemoteGatewayMAC), "172.31.77.100", "169.254.0.252", 40001, 30080)); out != "drop" {
		t.Fatalf("outside client through the node's stack: %s, want drop (Local, no endpoint here)", out)
	}

	if _, err := p.UpdateServices(context.Background(), []*proxy.Service{svc(true)}, nil); err != nil {
		t.Fatal(err)
	}
	var ct conntrack
	if out, _ := ct.walk(t, sw.pl, ipKey(6, 6, dbMAC, gatewayMAC, "10.77.1.3", "192.168.77.2", 40002, 30080)); out != "drop" {
		t.Fatalf("both policies Local: pod to the NodePort: %s, want drop", out)
	}
}
