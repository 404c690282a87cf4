package proxy

import (
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Node is what the proxy needs of its node and of the pod network.
type Node struct {
	Name string
	// Addresses are the node's own addresses: NodePort frontends (as
	// kube-proxy's default nodePortAddresses, every node IP).
	Addresses []netip.Addr
	// PodNetwork is the cluster CIDR and the nodes' pod CIDRs: a ClusterIP
	// inside it would steal a pod's address, so such a Service is refused.
	PodNetwork []netip.Prefix
}

// serviceFrom turns a Service object into its ports and frontends, without
// endpoints. A port that cannot be programmed (bad protocol, port out of
// range) is skipped with a Problem and the rest of the Service stands; a
// ClusterIP in the pod network refuses the whole Service (refused true):
// programming it would take traffic from a pod.
func serviceFrom(svc *corev1.Service, node Node) (s *Service, problems []Problem, refused bool) {
	key := ServiceKey{svc.Namespace, svc.Name}
	bad := func(reason, format string, args ...any) {
		problems = append(problems, Problem{Service: key, Object: "Service", Name: svc.Name, Reason: reason, Message: fmt.Sprintf(format, args...)})
	}
	s = &Service{Key: key, Type: TypeClusterIP}
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort:
		s.Type = TypeNodePort
	case corev1.ServiceTypeLoadBalancer:
		s.Type = TypeLoadBalancer
	}
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		s.Affinity = Affinity{ClientIP: true, Timeout: DefaultAffinityTimeout}
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil && *c.ClientIP.TimeoutSeconds > 0 {
			s.Affinity.Timeout = time.Duration(*c.ClientIP.TimeoutSeconds) * time.Second
		}
	}

	// Frontend addresses. Only IPv4: nagare's pod network is IPv4, and an
	// IPv6 ClusterIP of a dual-stack Service belongs to the other family's
	// proxy (kube-proxy runs one per family); not a problem of the input.
	var clusterIPs []netip.Addr
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, ip := range ips {
		if ip == corev1.ClusterIPNone {
			continue // headless: DNS only, nothing to proxy
		}
		a, err := netip.ParseAddr(ip)
		if err != nil {
			bad(ReasonInvalidServiceIP, "clusterIP %q is not an address; ignored", ip)
			continue
		}
		if !a.Is4() {
			continue
		}
		for _, p := range node.PodNetwork {
			if p.Contains(a) {
				bad(ReasonClusterIPInPodNetwork, "clusterIP %s lies in the pod network %s; the Service is not programmed (it would take a pod's traffic)", a, p)
				return nil, problems, true
			}
		}
		clusterIPs = append(clusterIPs, a)
	}
	externals := func(field string, list []string) []netip.Addr {
		var out []netip.Addr
		for _, ip := range list {
			a, err := netip.ParseAddr(ip)
			if err != nil {
				bad(ReasonInvalidServiceIP, "%s %q is not an address; ignored", field, ip)
				continue
			}
			if a.Is4() {
				out = append(out, a)
			}
		}
		return out
	}
	externalIPs := externals("externalIPs", svc.Spec.ExternalIPs)
	var lbIPs []netip.Addr
	if s.Type == TypeLoadBalancer {
		var list []string
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if in.IP != "" { // a hostname-only ingress is the load balancer's business
				list = append(list, in.IP)
			}
		}
		lbIPs = externals("status.loadBalancer.ingress.ip", list)
	}
	if len(clusterIPs) == 0 && len(externalIPs) == 0 && len(lbIPs) == 0 && s.Type == TypeClusterIP {
		return nil, problems, false // headless, or nothing of our family: nothing to program
	}

	// kube-proxy's ExternallyAccessible: a traffic policy of Local for
	// external traffic means something only if there is external traffic.
	externallyAccessible := s.Type != TypeClusterIP || len(externalIPs) > 0
	s.ExternalLocal = externallyAccessible && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	s.InternalLocal = svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal

	seen := map[string]bool{}
	for i, sp := range svc.Spec.Ports {
		name := sp.Name
		if name == "" {
			name = fmt.Sprintf("#%d", i)
		}
		proto, ok := protocolOf(sp.Protocol)
		if !ok {
			bad(ReasonInvalidPort, "port %s: protocol %q: want TCP, UDP or SCTP; port skipped", name, sp.Protocol)
			continue
		}
		if sp.Port < 1 || sp.Port > 65535 {
			bad(ReasonInvalidPort, "port %s: port %d out of range 1-65535; port skipped", name, sp.Port)
			continue
		}
		if sp.NodePort < 0 || sp.NodePort > 65535 {
			bad(ReasonInvalidPort, "port %s: nodePort %d out of range 1-65535; port skipped", name, sp.NodePort)
			continue
		}
		if sp.TargetPort.Type == 0 && (sp.TargetPort.IntVal < 0 || sp.TargetPort.IntVal > 65535) {
			bad(ReasonInvalidPort, "port %s: targetPort %d out of range 1-65535; port skipped", name, sp.TargetPort.IntVal)
			continue
		}
		id := fmt.Sprintf("%s/%d", proto, sp.Port)
		if seen[id] || seen["name/"+sp.Name] {
			bad(ReasonInvalidPort, "port %s: %s %d or the name %q appears twice; port skipped", name, proto, sp.Port, sp.Name)
			continue
		}
		seen[id], seen["name/"+sp.Name] = true, true
		p := &Port{Name: sp.Name, Protocol: proto, Port: uint16(sp.Port)}
		for _, a := range clusterIPs {
			p.Frontends = append(p.Frontends, Frontend{FrontendClusterIP, a, p.Port})
		}
		if s.Type != TypeClusterIP && sp.NodePort != 0 {
			p.NodePort = uint16(sp.NodePort)
			for _, a := range node.Addresses {
				if a.Is4() {
					p.Frontends = append(p.Frontends, Frontend{FrontendNodePort, a, p.NodePort})
				}
			}
		}
		for _, a := range lbIPs {
			p.Frontends = append(p.Frontends, Frontend{FrontendLoadBalancer, a, p.Port})
		}
		for _, a := range externalIPs {
			p.Frontends = append(p.Frontends, Frontend{FrontendExternalIP, a, p.Port})
		}
		s.Ports = append(s.Ports, p)
	}
	return s, problems, false
}

// protocolOf maps the API's protocol (empty means TCP) to ours.
func protocolOf(p corev1.Protocol) (Protocol, bool) {
	switch p {
	case "", corev1.ProtocolTCP:
		return TCP, true
	case corev1.ProtocolUDP:
		return UDP, true
	case corev1.ProtocolSCTP:
		return SCTP, true
	}
	return "", false
}
