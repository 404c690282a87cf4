package proxy

import (
	"math"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nagare-net/nagare/pkg/agent/config"
)

// PodAddresses finds a pod's address by namespace/name; the agent answers
// for the pods attached on its node.
type PodAddresses func(namespacedName string) (netip.Addr, bool)

// FromClusterFile turns the cluster file's Services into the API objects
// the Kubernetes source would hand the Tracker: each Service, and one
// EndpointSlice of its endpoints (named <service>-file). An endpoint's
// node is the one whose pod CIDR holds its address. Pod names this node
// cannot resolve are returned in unresolved (namespace/name), not guessed.
func FromClusterFile(c *config.Cluster, pods PodAddresses) (svcs []*corev1.Service, slices []*discoveryv1.EndpointSlice, unresolved []string) {
	nodeOf := func(a netip.Addr) string {
		for _, n := range c.Nodes {
			if n.PodCIDR.Contains(a) {
				return n.Name
			}
		}
		return ""
	}
	for _, s := range c.Services {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceType(s.Type), ClusterIP: s.ClusterIP, ExternalIPs: s.ExternalIPs,
				ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicy(s.ExternalTrafficPolicy),
				SessionAffinity:       corev1.ServiceAffinity(s.SessionAffinity)}}
		if svc.Spec.Type == "" {
			svc.Spec.Type = corev1.ServiceTypeClusterIP
		}
		if s.ClusterIP != "" {
			svc.Spec.ClusterIPs = []string{s.ClusterIP}
		}
		if s.InternalTrafficPolicy != "" {
			p := corev1.ServiceInternalTrafficPolicy(s.InternalTrafficPolicy)
			svc.Spec.InternalTrafficPolicy = &p
		}
		if s.SessionAffinityTimeout > 0 {
			t := clampInt32(s.SessionAffinityTimeout)
			svc.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &t}}
		}
		for _, ip := range s.LoadBalancerIPs {
			svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
		es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name + "-file",
			Labels: map[string]string{discoveryv1.LabelServiceName: s.Name}}, AddressType: discoveryv1.AddressTypeIPv4}
		for _, p := range s.Ports {
			target := p.TargetPort
			if target == 0 {
				target = p.Port
			}
			proto := corev1.Protocol(p.Protocol)
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: p.Name, Protocol: proto, Port: clampInt32(p.Port),
				NodePort: clampInt32(p.NodePort), TargetPort: intstr.FromInt32(clampInt32(target))})
			name, port := p.Name, clampInt32(target)
			if port < 1 || port > 65535 {
				continue // the Service's port is reported and skipped; not twice
			}
			es.Ports = append(es.Ports, discoveryv1.EndpointPort{Name: &name, Protocol: &proto, Port: &port})
		}
		for _, e := range s.Endpoints {
			ep := discoveryv1.Endpoint{Addresses: []string{e}}
			if a, err := netip.ParseAddr(e); err == nil {
				if n := nodeOf(a); n != "" {
					ep.NodeName = &n
				}
			} else if looksLikeAddress(e) {
				// Left as written: the proxy reports it as a bad address.
			} else {
				pod := e
				if !strings.Contains(pod, "/") {
					pod = s.Namespace + "/" + pod
				}
				a, ok := pods(pod)
				if !ok {
					unresolved = append(unresolved, pod)
					continue
				}
				ns, name, _ := strings.Cut(pod, "/")
				n := nodeOf(a)
				ep = discoveryv1.Endpoint{Addresses: []string{a.String()}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: name}}
				if n != "" {
					ep.NodeName = &n
				}
			}
			es.Endpoints = append(es.Endpoints, ep)
		}
		svcs, slices = append(svcs, svc), append(slices, es)
	}
	return svcs, slices, unresolved
}

// looksLikeAddress: digits, dots and colons only (a mistyped address, not
// a pod name; pod names start with a letter or digit but hold letters).
func looksLikeAddress(s string) bool {
	return s != "" && strings.Trim(s, "0123456789.:") == ""
}

// clampInt32 keeps out-of-range numbers out of range (the proxy reports
// them) instead of letting them wrap into valid ones.
func clampInt32(v int) int32 {
	if v > math.MaxInt32 || v < math.MinInt32 {
		return -1
	}
	return int32(v)
}
