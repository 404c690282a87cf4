package proxy

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func keys(ss []*Service) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Key.String())
	}
	return out
}

// TestTrackerCoalesces: many updates between two Takes are one change per
// Service; an update that changes nothing computed is not reported; a
// deletion is reported once, only for what was reported before.
func TestTrackerCoalesces(t *testing.T) {
	tr := NewTracker(testNode, nil)
	for i := range 100 {
		tr.UpdateService(makeTestService("ns", "a", func(s *corev1.Service) { s.ResourceVersion = fmt.Sprint(i) }))
	}
	tr.UpdateService(makeTestService("ns", "b", func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.96.0.11"} }))
	tr.UpdateEndpointSlice(makeTestEndpointSlice("ns", "a", "a-1", "p80", 8080, readyEP("10.77.1.2", thisNode)))
	select {
	case <-tr.Changed():
	default:
		t.Fatal("Changed did not fire")
	}
	if n := tr.Pending(); n != 2 {
		t.Fatalf("Pending before the first Take: %d, want 2 (a and b)", n)
	}
	ch := tr.Take()
	if got := fmt.Sprint(keys(ch.Updated), ch.Deleted); got != "[ns/a ns/b] []" {
		t.Fatalf("first Take: %s", got)
	}
	if n := tr.Pending(); n != 0 {
		t.Fatalf("Pending after Take: %d", n)
	}
	if ch := tr.Take(); len(ch.Updated)+len(ch.Deleted) != 0 {
		t.Fatalf("nothing changed, Take says %v", ch)
	}

	// A new resourceVersion, same content: computed, not reported.
	tr.UpdateEndpointSlice(func() *discoveryv1.EndpointSlice {
		es := makeTestEndpointSlice("ns", "a", "a-1", "p80", 8080, readyEP("10.77.1.2", thisNode))
		es.ResourceVersion = "2"
		return es
	}())
	if ch := tr.Take(); len(ch.Updated)+len(ch.Deleted) != 0 {
		t.Fatalf("unchanged state reported: %v", ch)
	}

	// An endpoint goes: only a changes.
	tr.UpdateEndpointSlice(makeTestEndpointSlice("ns", "a", "a-1", "p80", 8080))
	ch = tr.Take()
	if got := fmt.Sprint(keys(ch.Updated), ch.Deleted); got != "[ns/a] []" || ch.Updated[0].Ports[0].Internal != Reject {
		t.Fatalf("endpoint removed: %s", got)
	}

	// Deleted, and a Service added and deleted between two Takes.
	tr.DeleteService(ServiceKey{"ns", "b"})
	tr.UpdateService(makeTestService("ns", "c", nil))
	tr.DeleteService(ServiceKey{"ns", "c"})
	ch = tr.Take()
	if got := fmt.Sprint(keys(ch.Updated), ch.Deleted); got != "[] [ns/b]" {
		t.Fatalf("deletions: %s", got)
	}
	if got := keys(tr.Services()); fmt.Sprint(got) != "[ns/a]" {
		t.Fatalf("Services: %v", got)
	}

	// A slice deleted, and one relabelled to another Service.
	tr.UpdateService(makeTestService("ns", "d", func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.96.0.12"} }))
	tr.UpdateEndpointSlice(makeTestEndpointSlice("ns", "a", "a-2", "p80", 8080, readyEP("10.77.2.2", "node2")))
	tr.Take()
	tr.UpdateEndpointSlice(makeTestEndpointSlice("ns", "d", "a-2", "p80", 8080, readyEP("10.77.2.2", "node2")))
	ch = tr.Take()
	if got := fmt.Sprint(keys(ch.Updated)); got != "[ns/a ns/d]" || len(ch.Updated[0].Ports[0].Endpoints) != 0 || len(ch.Updated[1].Ports[0].Endpoints) != 1 {
		t.Fatalf("relabelled slice: %s", got)
	}
	tr.DeleteEndpointSlice(makeTestEndpointSlice("ns", "d", "a-2", "p80", 8080))
	if ch := tr.Take(); fmt.Sprint(keys(ch.Updated)) != "[ns/d]" || ch.Updated[0].Ports[0].Internal != Reject {
		t.Fatalf("deleted slice: %v", keys(ch.Updated))
	}
}

// TestTrackerSetNode: a new node address moves every NodePort frontend.
func TestTrackerSetNode(t *testing.T) {
	tr := NewTracker(testNode, nil)
	tr.UpdateService(makeTestService("ns", "np", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = 30080
	}))
	tr.UpdateService(makeTestService("ns", "cip", func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.96.0.11"} }))
	tr.Take()
	n := testNode
	n.Addresses = []netip.Addr{netip.MustParseAddr("192.168.77.9")}
	tr.SetNode(n)
	ch := tr.Take()
	if fmt.Sprint(keys(ch.Updated)) != "[ns/np]" || frontends(ch.Updated[0].Ports[0].Frontends) != "ClusterIP:10.96.0.10:80 NodePort:192.168.77.9:30080" {
		t.Fatalf("after SetNode: %v", keys(ch.Updated))
	}
}

// TestBadServicePort: a port out of range or of an unknown protocol is
// skipped with a problem; the Service's other ports, and other Services,
// stand.
func TestBadServicePort(t *testing.T) {
	st, problems := state(t,
		makeTestService("ns", "bad", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports = []corev1.ServicePort{
				{Name: "ok", Port: 80, NodePort: 30080},
				{Name: "big", Port: 70000},
				{Name: "zero", Port: 0},
				{Name: "icmp", Protocol: "ICMP", Port: 7},
				{Name: "bignode", Port: 81, NodePort: 99999},
				{Name: "target", Port: 82, TargetPort: intstr.FromInt32(-1)},
			}
		}),
		makeTestService("ns", "good", func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.96.0.11"} }))
	if len(st["ns/bad"].Ports) != 1 || st["ns/bad"].Ports[0].Name != "ok" {
		t.Errorf("bad Service's ports: %v", st["ns/bad"].Ports)
	}
	if st["ns/good"] == nil {
		t.Error("the good Service was disturbed")
	}
	if len(problems) != 5 {
		t.Fatalf("%d problems, want 5: %v", len(problems), problems)
	}
	for _, p := range problems {
		if p.Reason != ReasonInvalidPort || p.Object != "Service" || p.Name != "bad" {
			t.Errorf("problem %v", p)
		}
	}
	t.Log(problems[0])
}

// TestBadEndpointSlices: an FQDN slice, unparsable addresses and a port
// without a number are skipped with one problem each; the other endpoints
// of the same Service stand.
func TestBadEndpointSlices(t *testing.T) {
	fqdn := makeTestEndpointSlice("ns", "svc", "svc-fqdn", "p80", 8080, readyEP("db.example.com", ""))
	fqdn.AddressType = discoveryv1.AddressTypeFQDN
	garbage := makeTestEndpointSlice("ns", "svc", "svc-garbage", "p80", 8080,
		readyEP("10.77.1.300", ""), readyEP("not-an-ip", ""), readyEP("10.77.2.4", "node2"))
	noPort := makeTestEndpointSlice("ns", "svc", "svc-noport", "p80", 8080, readyEP("10.77.2.5", "node2"))
	noPort.Ports[0].Port = nil
	good := makeTestEndpointSlice("ns", "svc", "svc-good", "p80", 8080, readyEP("10.77.1.2", thisNode))
	v6 := makeTestEndpointSlice("ns", "svc", "svc-v6", "p80", 8080, readyEP("fd00::2", ""))
	v6.AddressType = discoveryv1.AddressTypeIPv6
	st, problems := state(t, makeTestService("ns", "svc", nil), fqdn, garbage, noPort, good, v6)
	if got := addrs(st["ns/svc"].Ports[0].InternalEndpoints); got != "10.77.1.2:8080 10.77.2.4:8080" {
		t.Errorf("endpoints %s", got)
	}
	want := map[string]string{"svc-fqdn": ReasonUnsupportedFamily, "svc-garbage": ReasonInvalidAddress, "svc-noport": ReasonInvalidEndpointPort}
	if len(problems) != len(want) {
		t.Fatalf("problems %v", problems)
	}
	for _, p := range problems {
		if want[p.Name] != p.Reason || p.Object != "EndpointSlice" {
			t.Errorf("problem %v", p)
		}
		t.Log(p)
	}
}

// TestClusterIPInPodNetwork: a Service whose ClusterIP would take a pod's
// address is refused (one problem, nothing programmed, a deletion if it
// was programmed before); the other Services stand.
func TestClusterIPInPodNetwork(t *testing.T) {
	var reported []Problem
	tr := NewTracker(testNode, func(p Problem) { reported = append(reported, p) })
	tr.UpdateService(makeTestService("ns", "thief", func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.77.1.2"} }))
	tr.UpdateService(makeTestService("ns", "good", nil))
	ch := tr.Take()
	if fmt.Sprint(keys(ch.Updated)) != "[ns/good]" || len(reported) != 1 || reported[0].Reason != ReasonClusterIPInPodNetwork {
		t.Fatalf("updated %v, reported %v", keys(ch.Updated), reported)
	}
	t.Log(reported[0])
	// The same problem again is not reported again (no event storm on resync).
	tr.UpdateService(makeTestService("ns", "thief", func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.77.1.2"}; s.ResourceVersion = "9" }))
	tr.Take()
	if len(reported) != 1 {
		t.Fatalf("reported again: %v", reported)
	}
	// A programmed Service moved into the pod network goes away.
	tr.UpdateService(makeTestService("ns", "good", func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.77.3.3"} }))
	ch = tr.Take()
	if fmt.Sprint(ch.Deleted) != "[ns/good]" || len(tr.Services()) != 0 || len(tr.Problems()) != 2 {
		t.Fatalf("deleted %v, services %v, problems %v", ch.Deleted, tr.Services(), tr.Problems())
	}
}

// TestSixThousandEndpoints: one Service with 6000 endpoints in six slices
// (the API's 1000 per slice) is taken whole: the switch must handle at
// least 5000 endpoints in one Service, so the proxy sets no cap below it.
func TestSixThousandEndpoints(t *testing.T) {
	objs := []any{makeTestService("ns", "big", nil)}
	for s := range 6 {
		var eps []ep
		for i := range 1000 {
			n := s*1000 + i
			eps = append(eps, readyEP(fmt.Sprintf("10.77.%d.%d", 100+n/250, 2+n%250), "node2"))
		}
		objs = append(objs, makeTestEndpointSlice("ns", "big", fmt.Sprintf("big-%d", s), "p80", 8080, eps...))
	}
	st, problems := state(t, objs...)
	p := st["ns/big"].Ports[0]
	if len(p.Endpoints) != 6000 || len(p.InternalEndpoints) != 6000 || len(problems) != 0 {
		t.Fatalf("%d endpoints, %d internal, problems %v", len(p.Endpoints), len(p.InternalEndpoints), problems)
	}
}

// BenchmarkTrackerIncremental: with 10 000 Services of 10 endpoints
// known, one endpoint change costs one Service's computation, not ten
// thousand (go test -run '^$' -bench Tracker ./pkg/agent/proxy/).
func BenchmarkTrackerIncremental(b *testing.B) {
	tr := NewTracker(testNode, nil)
	for i := range 10000 {
		name := fmt.Sprintf("svc-%d", i)
		ip := fmt.Sprintf("10.96.%d.%d", i/250, 1+i%250)
		tr.UpdateService(makeTestService("ns", name, func(s *corev1.Service) { s.Spec.ClusterIPs = []string{ip} }))
		var eps []ep
		for j := range 10 {
			eps = append(eps, readyEP(fmt.Sprintf("10.77.%d.%d", 2+j, 2+i%250), "node2"))
		}
		tr.UpdateEndpointSlice(makeTestEndpointSlice("ns", name, name+"-1", "p80", 8080, eps...))
	}
	if ch := tr.Take(); len(ch.Updated) != 10000 {
		b.Fatalf("%d updated", len(ch.Updated))
	}
	b.ResetTimer()
	for i := range b.N {
		n := i % 10000
		name := fmt.Sprintf("svc-%d", n)
		tr.UpdateEndpointSlice(makeTestEndpointSlice("ns", name, name+"-1", "p80", 8080, readyEP(fmt.Sprintf("10.77.1.%d", 2+i%250), thisNode)))
		if ch := tr.Take(); len(ch.Updated) != 1 {
			b.Fatalf("%d updated", len(ch.Updated))
		}
	}
}
