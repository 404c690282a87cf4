// Package proxy turns Kubernetes Services and EndpointSlices into the
// service state one node's pipeline programs, in kube-proxy's sense of a
// proxy: per Service port, its protocol, its frontends (ClusterIPs,
// NodePort on the node's addresses, LoadBalancer ingress IPs, external
// IPs), its endpoints with their conditions and target ports, which of
// them internal and external traffic may use (traffic policies, as
// kube-proxy chooses), session affinity, and what to do when none is left
// (reject, or drop).
//
// It is plain Go: no kernel, no switch, no API server. Its input is the
// API's own objects (the Kubernetes source's informers hand them over; the
// cluster file builds the same objects for the lab), its output the
// Service values below, and a Tracker that coalesces updates and says
// which Services changed, so that programming ten thousand Services is
// incremental.
//
// Files: proxy.go (the state), service.go (a Service's ports and
// frontends), endpoints.go (EndpointSlices → endpoints, traffic policy),
// tracker.go (the change tracker).
package proxy

import (
	"fmt"
	"net/netip"
	"time"
)

// ServiceKey names a Service.
type ServiceKey struct {
	Namespace, Name string
}

func (k ServiceKey) String() string { return k.Namespace + "/" + k.Name }

// Protocol is a Service port's transport protocol.
type Protocol string

const (
	TCP  Protocol = "TCP"
	UDP  Protocol = "UDP"
	SCTP Protocol = "SCTP"
)

// Type is the Service's type (spec.type).
type Type string

const (
	TypeClusterIP    Type = "ClusterIP"
	TypeNodePort     Type = "NodePort"
	TypeLoadBalancer Type = "LoadBalancer"
)

// FrontendKind says where a frontend address comes from, and so which
// endpoints its traffic may use: ClusterIP traffic is internal, the
// others external.
type FrontendKind string

const (
	FrontendClusterIP    FrontendKind = "ClusterIP"    // spec.clusterIPs
	FrontendNodePort     FrontendKind = "NodePort"     // spec.ports[].nodePort on each of the node's addresses
	FrontendLoadBalancer FrontendKind = "LoadBalancer" // status.loadBalancer.ingress[].ip
	FrontendExternalIP   FrontendKind = "ExternalIP"   // spec.externalIPs
)

// External reports whether traffic to this frontend is external traffic
// (externalTrafficPolicy applies) rather than internal (internalTrafficPolicy).
func (k FrontendKind) External() bool { return k != FrontendClusterIP }

// Frontend is one address and port a Service port answers on.
type Frontend struct {
	Kind FrontendKind
	Addr netip.Addr
	Port uint16
}

func (f Frontend) String() string { return netip.AddrPortFrom(f.Addr, f.Port).String() }

// Endpoint is one backend of a Service port.
type Endpoint struct {
	Addr netip.Addr
	// Port is the target port for this endpoint: the number its
	// EndpointSlice gives under the Service port's name (a named
	// targetPort can be a different number on different pods).
	Port uint16
	// NodeName is the node the endpoint runs on ("" if unknown); Local
	// says it is this node.
	NodeName string
	Local    bool
	// Conditions, as in the EndpointSlice; a nil ready or serving counts
	// as true, a nil terminating as false (the API's rules).
	Ready, Serving, Terminating bool
	// Pod is the endpoint's targetRef, namespace/name, if it is a pod.
	Pod string
}

func (e Endpoint) String() string { return netip.AddrPortFrom(e.Addr, e.Port).String() }

// State is how kube-proxy would describe the endpoint's use.
func (e Endpoint) State() string {
	switch {
	case e.Ready:
		return "ready"
	case e.Serving && e.Terminating:
		return "serving-terminating"
	case e.Terminating:
		return "terminating"
	default:
		return "not-ready"
	}
}

// Verdict is what happens to a packet for a frontend.
type Verdict string

const (
	// Forward: load-balance over the endpoints.
	Forward Verdict = "forward"
	// Reject: the Service has no usable endpoint anywhere; answer with
	// ICMP unreachable (UDP) or a TCP RST, as kube-proxy does, so clients
	// fail at once instead of timing out.
	Reject Verdict = "reject"
	// Drop: endpoints exist, but the traffic policy is Local and none is
	// on this node (kube-proxy drops: the client's other paths, e.g.
	// another node behind a load balancer, may still work).
	Drop Verdict = "drop"
)

// Affinity is the Service's session affinity.
type Affinity struct {
	// ClientIP: a client's connections go to the same endpoint while it
	// keeps coming within Timeout.
	ClientIP bool
	Timeout  time.Duration
}

// DefaultAffinityTimeout is the API's default for sessionAffinity
// ClientIP without a timeout (three hours).
const DefaultAffinityTimeout = 10800 * time.Second

// Port is one port of a Service as the node programs it.
type Port struct {
	// Name is the Service port's name ("" for a lone unnamed port).
	Name     string
	Protocol Protocol
	// Port is the Service port (spec.ports[].port); NodePort, if any, is
	// also among the frontends, on each of the node's addresses.
	Port      uint16
	NodePort  uint16
	Frontends []Frontend
	// Endpoints is every endpoint the EndpointSlices give for this port,
	// with its conditions (for status); sorted by address and port.
	Endpoints []Endpoint
	// InternalEndpoints serve ClusterIP frontends: internalTrafficPolicy
	// applied, terminating endpoints only when no ready one is left.
	InternalEndpoints []Endpoint
	// ExternalEndpoints serve NodePort, LoadBalancer and external IP
	// frontends: externalTrafficPolicy applied likewise.
	ExternalEndpoints []Endpoint
	// Internal and External say what to do with such traffic; Forward
	// exactly when the matching endpoint list is not empty.
	Internal, External Verdict
}

// EndpointsFor returns the endpoints and verdict for traffic to f.
func (p *Port) EndpointsFor(f Frontend) ([]Endpoint, Verdict) {
	if f.Kind.External() {
		return p.ExternalEndpoints, p.External
	}
	return p.InternalEndpoints, p.Internal
}

// Service is one Service's desired state on this node.
type Service struct {
	Key      ServiceKey
	Type     Type
	Affinity Affinity
	// InternalLocal, ExternalLocal: the traffic policies are Local.
	InternalLocal, ExternalLocal bool
	Ports                        []*Port
}

// Problem is bad input the proxy refused or skipped, in words for a log
// line and a Kubernetes Event on Object.
type Problem struct {
	Service ServiceKey
	// Object is what the event is about: "Service" or "EndpointSlice",
	// and its name (the Service's own, or the slice's).
	Object, Name string
	// Reason is one CamelCase word (an Event's reason).
	Reason  string
	Message string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s %s/%s: %s: %s", p.Object, p.Service.Namespace, p.Name, p.Reason, p.Message)
}

// Problem reasons.
const (
	ReasonInvalidPort           = "InvalidServicePort"
	ReasonInvalidServiceIP      = "InvalidServiceIP"
	ReasonClusterIPInPodNetwork = "ClusterIPInPodNetwork"
	ReasonInvalidAddress        = "InvalidEndpointAddress"
	ReasonUnsupportedFamily     = "UnsupportedAddressType"
	ReasonInvalidEndpointPort   = "InvalidEndpointPort"
)
