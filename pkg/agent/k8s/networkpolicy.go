package k8s

import (
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/nagare-net/nagare/pkg/agent/netpol"
)

// NetworkPolicy input: the policies, the namespaces and every pod of the
// cluster (selectors are resolved by each agent, pods of other nodes are
// peers). The cluster-wide pod informer keeps only what policies look at
// (a transform drops the rest before it is cached): an agent's memory
// grows with the cluster's pods, not with their specs.

// Synced is closed once every informer, the policies' included, has synced.
func (s *Source) Synced() <-chan struct{} { return s.synced }

// WatchPolicies makes Run follow NetworkPolicies, Namespaces and all Pods
// into h. Call it before Run.
func (s *Source) WatchPolicies(h PolicyHandler) { s.policies = h }

// policyInformers feeds policies, namespaces and pods to s.policies.
func (s *Source) policyInformers(f informers.SharedInformerFactory) ([]cache.InformerSynced, error) {
	h := s.policies
	npi := f.Networking().V1().NetworkPolicies().Informer()
	if _, err := npi.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { withPolicy(o, h.SetPolicy) },
		UpdateFunc: func(_, o any) { withPolicy(o, h.SetPolicy) },
		DeleteFunc: func(o any) {
			withPolicy(o, func(np *networkingv1.NetworkPolicy) { h.DeletePolicy(np.Namespace, np.Name) })
		},
	}); err != nil {
		return nil, err
	}
	nsi := f.Core().V1().Namespaces().Informer()
	if _, err := nsi.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { withNamespace(o, func(ns *corev1.Namespace) { h.SetNamespace(ns.Name, ns.Labels) }) },
		UpdateFunc: func(_, o any) { withNamespace(o, func(ns *corev1.Namespace) { h.SetNamespace(ns.Name, ns.Labels) }) },
		DeleteFunc: func(o any) { withNamespace(o, func(ns *corev1.Namespace) { h.DeleteNamespace(ns.Name) }) },
	}); err != nil {
		return nil, err
	}
	pi := f.Core().V1().Pods().Informer()
	if err := pi.SetTransform(slimPod); err != nil {
		return nil, err
	}
	pod := func(o any) {
		withPod(o, func(p *corev1.Pod) {
			if np := PodFrom(p); np != nil {
				h.SetPod(np)
			} else {
				h.DeletePod(p.Namespace, p.Name)
			}
		})
	}
	if _, err := pi.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    pod,
		UpdateFunc: func(_, o any) { pod(o) },
		DeleteFunc: func(o any) { withPod(o, func(p *corev1.Pod) { h.DeletePod(p.Namespace, p.Name) }) },
	}); err != nil {
		return nil, err
	}
	return []cache.InformerSynced{npi.HasSynced, nsi.HasSynced, pi.HasSynced}, nil
}

// slimPod keeps what PodFrom reads of a pod.
func slimPod(o any) (any, error) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return o, nil
	}
	out := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, Labels: p.Labels,
		ResourceVersion: p.ResourceVersion},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork},
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs}}
	for _, c := range p.Spec.Containers {
		var ports []corev1.ContainerPort
		for _, cp := range c.Ports {
			if cp.Name != "" {
				ports = append(ports, corev1.ContainerPort{Name: cp.Name, Protocol: cp.Protocol, ContainerPort: cp.ContainerPort})
			}
		}
		if len(ports) > 0 {
			out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: c.Name, Ports: ports})
		}
	}
	return out, nil
}

// PodFrom is what policies look at of p; nil when p is finished (its
// address may be another pod's now). A pod the API server knows no
// address of yet (not started) comes without one: the agent selects it
// only if it attached the pod itself and so knows its address.
func PodFrom(p *corev1.Pod) *netpol.Pod {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return nil
	}
	var ip netip.Addr
	for _, a := range p.Status.PodIPs {
		if x, err := netip.ParseAddr(a.IP); err == nil && x.Is4() {
			ip = x
			break
		}
	}
	if !ip.IsValid() {
		if x, err := netip.ParseAddr(p.Status.PodIP); err == nil && x.Is4() {
			ip = x
		}
	}
	out := &netpol.Pod{Namespace: p.Namespace, Name: p.Name, Labels: p.Labels, IP: ip, Node: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork}
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == "" {
				continue
			}
			proto := netpol.ProtoTCP
			switch cp.Protocol {
			case corev1.ProtocolUDP:
				proto = netpol.ProtoUDP
			case corev1.ProtocolSCTP:
				proto = netpol.ProtoSCTP
			}
			out.Ports = append(out.Ports, netpol.NamedPort{Name: cp.Name, Proto: proto, Port: uint16(cp.ContainerPort)})
		}
	}
	return out
}

// ReportPolicyProblem logs a policy's bad input and records a Warning
// Event on the policy, so `kubectl describe networkpolicy` shows what is
// not enforced and how it fails closed.
func (s *Source) ReportPolicyProblem(p netpol.Problem) {
	namespace, name, _ := strings.Cut(p.Policy, "/")
	ev := s.recorder()
	s.log.Warn("network policy input refused", "policy", p.Policy, "problem", p.Msg)
	ref := &corev1.ObjectReference{Kind: "NetworkPolicy", APIVersion: "networking.k8s.io/v1", Namespace: namespace, Name: name}
	ev.Event(ref, corev1.EventTypeWarning, "PolicyInputRefused", p.Msg)
}

func withPolicy(o any, f func(*networkingv1.NetworkPolicy)) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	if np, ok := o.(*networkingv1.NetworkPolicy); ok {
		f(np)
	}
}

func withNamespace(o any, f func(*corev1.Namespace)) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	if ns, ok := o.(*corev1.Namespace); ok {
		f(ns)
	}
}

func withPod(o any, f func(*corev1.Pod)) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	if p, ok := o.(*corev1.Pod); ok {
		f(p)
	}
}
