package proxy

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The tests build API objects the way kube-proxy's own tests do
// (makeTestService, makeTestEndpointSlice) and read the state back.

const thisNode = "node1"

var testNode = Node{
	Name:       thisNode,
	Addresses:  []netip.Addr{netip.MustParseAddr("192.168.77.1")},
	PodNetwork: []netip.Prefix{netip.MustParsePrefix("10.77.0.0/16")},
}

func makeTestService(ns, name string, fn func(*corev1.Service)) *corev1.Service {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []corev1.ServicePort{{Name: "p80", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	if fn != nil {
		fn(svc)
	}
	return svc
}

type ep struct {
	ip, node                    string
	ready, serving, terminating *bool
}

func readyEP(ip, node string) ep { return ep{ip: ip, node: node} }
func terminatingEP(ip, node string, serving bool) ep {
	return ep{ip: ip, node: node, ready: ptr.To(false), serving: ptr.To(serving), terminating: ptr.To(true)}
}
func notReadyEP(ip, node string) ep {
	return ep{ip: ip, node: node, ready: ptr.To(false), serving: ptr.To(false)}
}

func makeTestEndpointSlice(ns, svc, name string, portName string, port int32, eps ...ep) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(portName), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(port)}}}
	for _, e := range eps {
		d := discoveryv1.Endpoint{Addresses: []string{e.ip}, Conditions: discoveryv1.EndpointConditions{Ready: e.ready, Serving: e.serving, Terminating: e.terminating}}
		if e.node != "" {
			d.NodeName = ptr.To(e.node)
		}
		es.Endpoints = append(es.Endpoints, d)
	}
	return es
}

// state runs a tracker over the objects and returns the state and the
// problems reported.
func state(t *testing.T, objs ...any) (map[string]*Service, []Problem) {
	t.Helper()
	var reported []Problem
	tr := NewTracker(testNode, func(p Problem) { reported = append(reported, p) })
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Service:
			tr.UpdateService(o)
		case *discoveryv1.EndpointSlice:
			tr.UpdateEndpointSlice(o)
		default:
			t.Fatalf("unknown object %T", o)
		}
	}
	tr.Take()
	out := map[string]*Service{}
	for _, s := range tr.Services() {
		out[s.Key.String()] = s
	}
	if !reflect.DeepEqual(reported, tr.Problems()) && !(len(reported) == 0 && len(tr.Problems()) == 0) {
		t.Errorf("reported %v, Problems() %v", reported, tr.Problems())
	}
	return out, reported
}

func addrs(eps []Endpoint) string {
	var s []string
	for _, e := range eps {
		s = append(s, e.String())
	}
	return strings.Join(s, " ")
}

func frontends(fs []Frontend) string {
	var s []string
	for _, f := range fs {
		s = append(s, string(f.Kind)+":"+f.String())
	}
	return strings.Join(s, " ")
}

// TestFrontends: each Service type gets the frontends kube-proxy gives it.
func TestFrontends(t *testing.T) {
	for _, c := range []struct {
		name string
		fn   func(*corev1.Service)
		want string
	}{
		{"ClusterIP", nil, "ClusterIP:10.96.0.10:80"},
		{"NodePort on the node's addresses", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = 30080
		}, "ClusterIP:10.96.0.10:80 NodePort:192.168.77.1:30080"},
		{"LoadBalancer ingress IPs, hostnames left to the balancer", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.Ports[0].NodePort = 30080
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.7"}, {Hostname: "lb.example"}}
		}, "ClusterIP:10.96.0.10:80 NodePort:192.168.77.1:30080 LoadBalancer:203.0.113.7:80"},
		{"externalIPs on a ClusterIP Service", func(s *corev1.Service) {
			s.Spec.ExternalIPs = []string{"198.51.100.1"}
		}, "ClusterIP:10.96.0.10:80 ExternalIP:198.51.100.1:80"},
		{"dual-stack: the IPv6 ClusterIP is the other family's", func(s *corev1.Service) {
			s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00::10"}
		}, "ClusterIP:10.96.0.10:80"},
		{"ingress IPs of a ClusterIP Service are ignored", func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.7"}}
		}, "ClusterIP:10.96.0.10:80"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, problems := state(t, makeTestService("ns", "svc", c.fn))
			s := st["ns/svc"]
			if s == nil || len(s.Ports) != 1 || len(problems) > 0 {
				t.Fatalf("state %v problems %v", s, problems)
			}
			if got := frontends(s.Ports[0].Frontends); got != c.want {
				t.Errorf("frontends %s, want %s", got, c.want)
			}
		})
	}
}

// TestHeadlessNotProgrammed: clusterIP None is DNS only.
func TestHeadlessNotProgrammed(t *testing.T) {
	st, problems := state(t, makeTestService("ns", "headless", func(s *corev1.Service) {
		s.Spec.ClusterIP, s.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	}), makeTestEndpointSlice("ns", "headless", "headless-1", "p80", 8080, readyEP("10.77.1.2", thisNode)))
	if len(st) != 0 || len(problems) != 0 {
		t.Errorf("headless Service programmed: %v %v", st, problems)
	}
}

// TestProtocolsAndAffinity: TCP, UDP and SCTP ports; ClientIP affinity
// with its timeout, and the API's default without one.
func TestProtocolsAndAffinity(t *testing.T) {
	st, _ := state(t,
		makeTestService("ns", "dns", func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
				{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53},
				{Name: "sig", Protocol: corev1.ProtocolSCTP, Port: 2905},
			}
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}
		}),
		makeTestService("ns", "sticky", func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP }))
	var got []string
	for _, p := range st["ns/dns"].Ports {
		got = append(got, fmt.Sprintf("%s/%s/%d", p.Name, p.Protocol, p.Port))
	}
	if want := "dns/UDP/53 dns-tcp/TCP/53 sig/SCTP/2905"; strings.Join(got, " ") != want {
		t.Errorf("ports %v, want %s", got, want)
	}
	if a := st["ns/dns"].Affinity; !a.ClientIP || a.Timeout != time.Minute {
		t.Errorf("affinity %+v, want ClientIP 1m", a)
	}
	if a := st["ns/sticky"].Affinity; !a.ClientIP || a.Timeout != DefaultAffinityTimeout {
		t.Errorf("affinity %+v, want ClientIP %v", a, DefaultAffinityTimeout)
	}
}

// TestNamedTargetPort: a named targetPort is resolved per endpoint from
// the slices (pods of one Service may listen on different numbers); a
// slice port of another name or protocol belongs to another Service port.
func TestNamedTargetPort(t *testing.T) {
	svc := makeTestService("ns", "web", func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("web")},
			{Name: "metrics", Port: 9090, TargetPort: intstr.FromInt32(9090)}}
	})
	a := makeTestEndpointSlice("ns", "web", "web-a", "http", 8080, readyEP("10.77.1.2", thisNode))
	b := makeTestEndpointSlice("ns", "web", "web-b", "http", 8081, readyEP("10.77.2.2", "node2"))
	b.Ports = append(b.Ports, discoveryv1.EndpointPort{Name: ptr.To("metrics"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To[int32](9090)})
	st, _ := state(t, svc, a, b)
	ports := st["ns/web"].Ports
	if got := addrs(ports[0].Endpoints); got != "10.77.1.2:8080 10.77.2.2:8081" {
		t.Errorf("http endpoints %s", got)
	}
	if len(ports[1].Endpoints) != 0 || ports[1].Internal != Reject {
		t.Errorf("metrics (TCP) took a UDP slice port: %v %s", ports[1].Endpoints, ports[1].Internal)
	}
}

// TestCategorizeEndpoints follows kube-proxy's TestCategorizeEndpoints
// (topology hints aside): which endpoints internal and external traffic
// use, and the verdict when none.
func TestCategorizeEndpoints(t *testing.T) {
	for _, c := range []struct {
		name             string
		itpLocal         bool
		etpLocal         bool
		eps              []ep
		internal, extern string
		iv, ev           Verdict
	}{
		{name: "Cluster policies, ready endpoints everywhere",
			eps:      []ep{readyEP("10.77.1.2", thisNode), readyEP("10.77.2.2", "node2"), notReadyEP("10.77.2.3", "node2")},
			internal: "10.77.1.2:80 10.77.2.2:80", extern: "10.77.1.2:80 10.77.2.2:80", iv: Forward, ev: Forward},
		{name: "externalTrafficPolicy Local, local endpoints: external uses them only",
			etpLocal: true,
			eps:      []ep{readyEP("10.77.1.2", thisNode), readyEP("10.77.2.2", "node2")},
			internal: "10.77.1.2:80 10.77.2.2:80", extern: "10.77.1.2:80", iv: Forward, ev: Forward},
		{name: "externalTrafficPolicy Local, no local endpoints: external drops, internal forwards",
			etpLocal: true,
			eps:      []ep{readyEP("10.77.2.2", "node2")},
			internal: "10.77.2.2:80", iv: Forward, ev: Drop},
		{name: "internalTrafficPolicy Local, no local endpoints: internal drops",
			itpLocal: true,
			eps:      []ep{readyEP("10.77.2.2", "node2")},
			extern:   "10.77.2.2:80", iv: Drop, ev: Forward},
		{name: "both Local, local endpoints",
			itpLocal: true, etpLocal: true,
			eps:      []ep{readyEP("10.77.1.2", thisNode), readyEP("10.77.2.2", "node2")},
			internal: "10.77.1.2:80", extern: "10.77.1.2:80", iv: Forward, ev: Forward},
		{name: "no ready endpoints: serving terminating ones are used",
			eps:      []ep{terminatingEP("10.77.1.2", thisNode, true), terminatingEP("10.77.2.2", "node2", true), terminatingEP("10.77.2.3", "node2", false)},
			internal: "10.77.1.2:80 10.77.2.2:80", extern: "10.77.1.2:80 10.77.2.2:80", iv: Forward, ev: Forward},
		{name: "a ready endpoint left: terminating ones are not used",
			eps:      []ep{readyEP("10.77.2.2", "node2"), terminatingEP("10.77.1.2", thisNode, true)},
			internal: "10.77.2.2:80", extern: "10.77.2.2:80", iv: Forward, ev: Forward},
		{name: "Local: a remote ready one does not stop the local serving terminating one",
			etpLocal: true,
			eps:      []ep{readyEP("10.77.2.2", "node2"), terminatingEP("10.77.1.2", thisNode, true)},
			internal: "10.77.2.2:80", extern: "10.77.1.2:80", iv: Forward, ev: Forward},
		{name: "only not-serving terminating endpoints: reject",
			eps: []ep{terminatingEP("10.77.1.2", thisNode, false)}, iv: Reject, ev: Reject},
		{name: "no endpoints at all: reject, under Local too",
			itpLocal: true, etpLocal: true, iv: Reject, ev: Reject},
		{name: "not-ready endpoints only: reject",
			eps: []ep{notReadyEP("10.77.1.2", thisNode)}, iv: Reject, ev: Reject},
	} {
		t.Run(c.name, func(t *testing.T) {
			svc := makeTestService("ns", "svc", func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeNodePort
				s.Spec.Ports[0].NodePort = 30080
				if c.etpLocal {
					s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				}
				if c.itpLocal {
					s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
				}
			})
			st, _ := state(t, svc, makeTestEndpointSlice("ns", "svc", "svc-1", "p80", 80, c.eps...))
			p := st["ns/svc"].Ports[0]
			if got := addrs(p.InternalEndpoints); got != c.internal || p.Internal != c.iv {
				t.Errorf("internal: %q %s, want %q %s", got, p.Internal, c.internal, c.iv)
			}
			if got := addrs(p.ExternalEndpoints); got != c.extern || p.External != c.ev {
				t.Errorf("external: %q %s, want %q %s", got, p.External, c.extern, c.ev)
			}
			if eps, v := p.EndpointsFor(p.Frontends[1]); addrs(eps) != c.extern || v != c.ev {
				t.Errorf("EndpointsFor(NodePort) = %q %s", addrs(eps), v)
			}
		})
	}
}

// TestExternalPolicyOnlyWhenExternallyAccessible: kube-proxy ignores
// externalTrafficPolicy on a Service nobody reaches from outside.
func TestExternalPolicyOnlyWhenExternallyAccessible(t *testing.T) {
	st, _ := state(t, makeTestService("ns", "svc", func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}))
	if st["ns/svc"].ExternalLocal {
		t.Error("ClusterIP Service without external IPs has externalTrafficPolicy Local")
	}
}

// TestEndpointConditions: nil ready and serving are true, nil terminating
// false; an endpoint in two slices counts once; its pod and node are kept.
func TestEndpointConditions(t *testing.T) {
	a := makeTestEndpointSlice("ns", "svc", "svc-a", "p80", 8080, ep{ip: "10.77.2.2", node: "node2"})
	a.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "web-0"}
	b := makeTestEndpointSlice("ns", "svc", "svc-b", "p80", 8080, ep{ip: "10.77.2.2", node: "node2"}, terminatingEP("10.77.1.9", thisNode, true))
	st, _ := state(t, makeTestService("ns", "svc", nil), a, b)
	eps := st["ns/svc"].Ports[0].Endpoints
	if len(eps) != 2 {
		t.Fatalf("endpoints %v", eps)
	}
	if e := eps[1]; !e.Ready || !e.Serving || e.Terminating || e.Pod != "ns/web-0" || e.NodeName != "node2" || e.Local || e.State() != "ready" {
		t.Errorf("endpoint %+v", e)
	}
	if e := eps[0]; e.Ready || !e.Serving || !e.Terminating || !e.Local || e.State() != "serving-terminating" {
		t.Errorf("endpoint %+v", e)
	}
}
