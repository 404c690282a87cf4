package pipeline

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/nagare-net/nagare/pkg/agent/proxy"
	dp "github.com/nagare-net/nagare/pkg/flow"
)

// sameportService is default/multi: ClusterIP 10.96.0.30, TCP 80 and UDP
// 80 both to port 80 of pod web (10.77.1.2), as the conformance spec
// "should serve endpoints on same port and different protocols" builds it.
func sameportService() *proxy.Service {
	vip := netip.MustParseAddr("10.96.0.30")
	ep := []proxy.Endpoint{{Addr: netip.MustParseAddr("10.77.1.2"), Port: 80, NodeName: "node1", Local: true, Ready: true, Serving: true}}
	port := func(name string, proto proxy.Protocol) *proxy.Port {
		return &proxy.Port{Name: name, Protocol: proto, Port: 80,
			Frontends: []proxy.Frontend{{Kind: proxy.FrontendClusterIP, Addr: vip, Port: 80}},
			Endpoints: ep, InternalEndpoints: ep, ExternalEndpoints: ep, Internal: proxy.Forward, External: proxy.Forward}
	}
	return &proxy.Service{Key: proxy.ServiceKey{Namespace: "default", Name: "multi"}, Type: proxy.TypeClusterIP,
		Ports: []*proxy.Port{port("tcp-port", proxy.TCP), port("udp-port", proxy.UDP)}}
}

// TestServiceSamePortTwoProtocols: TCP and UDP on the same Service port
// both reach the endpoint and both replies come back from the ClusterIP,
// whichever protocol opened first.
func TestServiceSamePortTwoProtocols(t *testing.T) {
	p, sw := serviceNode(t)
	// First without endpoints (a new Service before its pod is ready), then with.
	empty := sameportService()
	for _, port := range empty.Ports {
		port.Endpoints, port.InternalEndpoints, port.ExternalEndpoints = nil, nil, nil
		port.Internal, port.External = proxy.Reject, proxy.Reject
	}
	for _, s := range []*proxy.Service{empty, sameportService()} {
		if _, err := p.UpdateServices(context.Background(), []*proxy.Service{s}, nil); err != nil {
			t.Fatal(err)
		}
	}
	var ct conntrack
	for i, proto := range []uint8{6, 17, 17, 6} {
		sport := uint16(41000 + i)
		k := fromDB(proto, sport, 80)
		k.SetIPDst(netip.MustParseAddr("10.96.0.30"))
		out, k2 := ct.walk(t, sw.pl, k)
		if dst := netip.AddrFrom4([4]byte(k2.IPDst[:4])); dst.String() != "10.77.1.2" || k2.TpDst != 80 || !strings.HasSuffix(out, "output:5") {
			t.Fatalf("proto %d: to %s:%d, actions %s", proto, dst, k2.TpDst, out)
		}
		rep := ipKey(proto, 5, webMAC, dbMAC, "10.77.1.2", "10.77.1.3", 80, sport)
		out3, k3 := ct.walk(t, sw.pl, rep)
		if !strings.HasSuffix(out3, "output:6") || netip.AddrFrom4([4]byte(k3.IPSrc[:4])).String() != "10.96.0.30" || k3.TpSrc != 80 || k3.CtState&dp.CtRpl == 0 {
			t.Fatalf("proto %d reply: %s, source %v:%d", proto, out3, k3.IPSrc[:4], k3.TpSrc)
		}
	}
}

// TestServiceSamePortDropUDP: the conformance spec's next step, the UDP
// port taken off the Service (and then off its endpoints): TCP keeps
// reaching the endpoint after each update.
func TestServiceSamePortDropUDP(t *testing.T) {
	p, sw := serviceNode(t)
	ctx := context.Background()
	if _, err := p.UpdateServices(ctx, []*proxy.Service{sameportService()}, nil); err != nil {
		t.Fatal(err)
	}
	var ct conntrack
	sport := uint16(42000)
	reach := func(step string) {
		t.Helper()
		sport++
		k := fromDB(6, sport, 80)
		k.SetIPDst(netip.MustParseAddr("10.96.0.30"))
		out, k2 := ct.walk(t, sw.pl, k)
		if dst := netip.AddrFrom4([4]byte(k2.IPDst[:4])); dst.String() != "10.77.1.2" || !strings.HasSuffix(out, "output:5") {
			t.Fatalf("%s: TCP to %s:%d, actions %s", step, dst, k2.TpDst, out)
		}
	}
	reach("both ports")
	tcpOnly := sameportService()
	tcpOnly.Ports = tcpOnly.Ports[:1]
	res, err := p.UpdateServices(ctx, []*proxy.Service{tcpOnly}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("UDP port removed: %+v", res)
	reach("UDP port removed")
	for i := 0; i < 3; i++ { // the same state again, as a later EndpointSlice event
		if _, err := p.UpdateServices(ctx, []*proxy.Service{tcpOnly}, nil); err != nil {
			t.Fatal(err)
		}
		reach("again")
	}
}
