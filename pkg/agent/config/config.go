// Package config is the node agent's view of the cluster: the settings
// every node shares (VNI, MTU, cluster CIDR, external interface), the
// nodes themselves (name, underlay address, pod CIDR) and, for the lab and
// the tests, Services (pkg/agent/proxy turns them into the same API
// objects the Kubernetes source hands it).
//
// Without Kubernetes the whole of it comes from a cluster file (YAML, the
// embedded Default unless --cluster-file names another); under Kubernetes
// the same file, minus its nodes and Services, comes from the ConfigMap and
// the nodes and Services come from the API server (pkg/agent/k8s).
package config

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"

	"gopkg.in/yaml.v3"
	networkingv1 "k8s.io/api/networking/v1"
)

// VXLANOverhead is what VXLAN adds to a frame on the underlay: outer
// Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8.
const VXLANOverhead = 50

// MinMTU is the smallest underlay MTU the agent accepts: pods keep IPv4's
// 576 bytes.
const MinMTU = 576 + VXLANOverhead

// Cluster is a cluster file.
type Cluster struct {
	// VNI is the VXLAN network identifier of the pod network (default 1).
	VNI uint32 `yaml:"vni"`
	// MTU is the underlay's MTU; pods get MTU - VXLANOverhead. Zero (the
	// default): the agent reads it from the node's device that holds the
	// node's underlay address (UnderlayMTU), so a 1400-byte underlay gives
	// pods 1350 without a setting. Set it to override what the device says
	// (a path whose MTU is smaller than the first hop's).
	MTU int `yaml:"mtu"`
	// ClusterCIDR covers every node's pod CIDR; traffic to it never leaves
	// through SNAT. Default: the smallest prefix covering the nodes' pod
	// CIDRs is not guessed; an empty ClusterCIDR means "the union of the
	// pod CIDRs of the known nodes".
	ClusterCIDR netip.Prefix `yaml:"clusterCIDR"`
	// ExternalInterface is the node's interface towards the outside
	// (masquerade); a node can override it.
	ExternalInterface string `yaml:"externalInterface"`
	// ServiceCIDR is the Services' ClusterIP range: the node's own packets
	// to it are routed into the switch (through the gateway), so that the
	// node reaches ClusterIPs as pods do. Empty: no such route.
	ServiceCIDR netip.Prefix `yaml:"serviceCIDR"`
	// VXLANPort is the UDP port of the tunnel (default 4789).
	VXLANPort uint16 `yaml:"vxlanPort"`
	// KubeAPIServerOverride is the API server's address for the agent's
	// own client (e.g. https://10.0.0.1:6443), used instead of the
	// kubernetes Service (KUBERNETES_SERVICE_HOST): that Service is
	// reached through the Service datapath the agent itself programs, so
	// an agent that needs it to start would wait forever on a fresh node.
	// Kubernetes only; default: in-cluster configuration.
	KubeAPIServerOverride string `yaml:"kubeAPIServerOverride,omitempty"`
	Nodes                 []Node `yaml:"nodes"`
	// ProxyRedirect, when set, sends pods' selected TCP connections to a
	// proxy on each node, transparently (docs/agent.md "Transparent
	// redirection to the node's proxy").
	ProxyRedirect *ProxyRedirect `yaml:"proxyRedirect,omitempty"`
	// Services, without Kubernetes (ignored with --kubernetes).
	Services []Service `yaml:"services,omitempty"`
	// NetworkPolicies, without Kubernetes (ignored with --kubernetes):
	// Kubernetes NetworkPolicy objects (their JSON field names), enforced
	// as under Kubernetes for the pods attached on this node (peers on
	// other nodes: by ipBlock). PodLabels gives those pods ("namespace/
	// name") the labels selectors look at; a namespace's only label is
	// kubernetes.io/metadata.name.
	NetworkPolicies []NetworkPolicy              `yaml:"networkPolicies,omitempty"`
	PodLabels       map[string]map[string]string `yaml:"podLabels,omitempty"`
}

// NetworkPolicy is a Kubernetes NetworkPolicy in a cluster file: written
// and read with its API (JSON) field names, as kubectl shows it.
type NetworkPolicy struct{ networkingv1.NetworkPolicy }

// UnmarshalYAML reads the policy through its JSON form (the API types
// name their fields in json tags only).
func (p *NetworkPolicy) UnmarshalYAML(n *yaml.Node) error {
	var v any
	if err := n.Decode(&v); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("networkPolicies: %w", err)
	}
	if err := json.Unmarshal(b, &p.NetworkPolicy); err != nil {
		return fmt.Errorf("networkPolicies: %w", err)
	}
	return nil
}

// MarshalYAML writes the policy with its JSON field names.
func (p NetworkPolicy) MarshalYAML() (any, error) {
	b, err := json.Marshal(p.NetworkPolicy)
	if err != nil {
		return nil, err
	}
	var v any
	return v, json.Unmarshal(b, &v)
}

// Service is a Service in the cluster file: the fields of a Kubernetes
// Service the proxy reads, and its endpoints. Values are checked by the
// proxy, as the API server's would be: a bad port or address is reported
// and skipped there, so one bad Service never keeps the agent from
// starting.
type Service struct {
	Name      string `yaml:"name"`
	Namespace string `yaml:"namespace,omitempty"` // default "default"
	// Type is ClusterIP (default), NodePort or LoadBalancer.
	Type      string `yaml:"type,omitempty"`
	ClusterIP string `yaml:"clusterIP"`
	// ExternalIPs are spec.externalIPs; LoadBalancerIPs stand for
	// status.loadBalancer.ingress (what a cloud's controller would write).
	ExternalIPs     []string `yaml:"externalIPs,omitempty"`
	LoadBalancerIPs []string `yaml:"loadBalancerIPs,omitempty"`
	// ExternalTrafficPolicy and InternalTrafficPolicy: Cluster (default) or Local.
	ExternalTrafficPolicy string `yaml:"externalTrafficPolicy,omitempty"`
	InternalTrafficPolicy string `yaml:"internalTrafficPolicy,omitempty"`
	// SessionAffinity: None (default) or ClientIP, for
	// SessionAffinityTimeout seconds (default 10800).
	SessionAffinity        string        `yaml:"sessionAffinity,omitempty"`
	SessionAffinityTimeout int           `yaml:"sessionAffinityTimeout,omitempty"`
	Ports                  []ServicePort `yaml:"ports"`
	// Endpoints are pod addresses (their node is the one whose pod CIDR
	// holds them) or pod names, namespace/name or a name in the Service's
	// namespace: a name resolves only on the node the pod runs on (the
	// agent knows its own pods), so give addresses for pods elsewhere.
	Endpoints []string `yaml:"endpoints,omitempty"`
}

// ServicePort is one port of a cluster-file Service.
type ServicePort struct {
	Name     string `yaml:"name,omitempty"`
	Protocol string `yaml:"protocol,omitempty"` // TCP (default), UDP, SCTP
	Port     int    `yaml:"port"`
	// TargetPort is the endpoints' port (default: Port). Only numbers:
	// without Kubernetes there are no container ports to resolve a name.
	TargetPort int `yaml:"targetPort,omitempty"`
	NodePort   int `yaml:"nodePort,omitempty"`
}

// ProxyRedirect is transparent redirection to the node's proxy.
type ProxyRedirect struct {
	// Ports are the TCP destination ports redirected (at least one).
	Ports []uint16 `yaml:"ports"`
	// Destinations limit redirection to connections to these prefixes
	// (e.g. the serviceCIDR); empty: any destination.
	Destinations []netip.Prefix `yaml:"destinations,omitempty"`
	// FailMode is what new selected connections get while the proxy does
	// not answer: "open" (default: they go direct) or "closed" (refused
	// with ICMP port unreachable).
	FailMode string `yaml:"failMode,omitempty"`
	// HealthAddr is what the agent dials (TCP, in the node's namespace)
	// every HealthInterval to know the proxy is up (default 127.0.0.1:15021).
	HealthAddr string `yaml:"healthAddr,omitempty"`
	// HealthIntervalMS is that period in milliseconds (default 500).
	HealthIntervalMS int `yaml:"healthIntervalMS,omitempty"`
	// OptOut are pods (namespace/name) never redirected; under
	// Kubernetes, the annotation nagare.io/proxy-redirect: "false" too.
	OptOut []string `yaml:"optOut,omitempty"`
}

// FailClosed says whether new connections are refused while the proxy is down.
func (r *ProxyRedirect) FailClosed() bool { return r.FailMode == "closed" }

func (r *ProxyRedirect) complete() error {
	if len(r.Ports) == 0 {
		return errors.New("proxyRedirect: ports: at least one TCP port")
	}
	switch r.FailMode {
	case "":
		r.FailMode = "open"
	case "open", "closed":
	default:
		return fmt.Errorf("proxyRedirect: failMode %q: want open or closed", r.FailMode)
	}
	for _, d := range r.Destinations {
		if !d.Addr().Is4() {
			return fmt.Errorf("proxyRedirect: destination %s: only IPv4", d)
		}
	}
	if r.HealthAddr == "" {
		r.HealthAddr = "127.0.0.1:15021"
	}
	if r.HealthIntervalMS <= 0 {
		r.HealthIntervalMS = 500
	}
	return nil
}

// Node is one node of the cluster.
type Node struct {
	Name string `yaml:"name"`
	// Underlay is the node's address on the network between nodes: the
	// tunnel's endpoint.
	Underlay netip.Addr `yaml:"underlay"`
	// PodCIDR is the node's pod subnet; its first address is the node's
	// gateway.
	PodCIDR           netip.Prefix `yaml:"podCIDR"`
	ExternalInterface string       `yaml:"externalInterface,omitempty"`
}

// Gateway is the node's gateway address: the pod CIDR's first address.
func (n Node) Gateway() netip.Addr { return n.PodCIDR.Masked().Addr().Next() }

//go:embed default.yaml
var defaultYAML []byte

// Default is the embedded cluster file: the namespace cluster the lab, the
// tests and the README's main job use.
func Default() *Cluster {
	c, err := Parse(defaultYAML)
	if err != nil {
		panic("config: embedded default.yaml: " + err.Error())
	}
	return c
}

// Load reads a cluster file; "" is the embedded default.
func Load(path string) (*Cluster, error) {
	if path == "" {
		return Default(), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse decodes and checks a cluster file and fills in defaults.
func Parse(b []byte) (*Cluster, error) {
	var c Cluster
	if err := yaml.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	if err := c.Complete(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Complete fills in defaults and checks the file: unique node names,
// underlay addresses and non-overlapping IPv4 pod CIDRs.
func (c *Cluster) Complete() error {
	if c.VNI == 0 {
		c.VNI = 1
	}
	if c.VNI >= 1<<24 {
		return fmt.Errorf("vni %d: must fit in 24 bits", c.VNI)
	}
	if c.MTU != 0 && (c.MTU < MinMTU || c.MTU > 65535) {
		return fmt.Errorf("mtu %d: want %d..65535, or 0 for the underlay device's", c.MTU, MinMTU)
	}
	if c.VXLANPort == 0 {
		c.VXLANPort = 4789
	}
	if c.ServiceCIDR.IsValid() && (!c.ServiceCIDR.Addr().Is4() || (c.ClusterCIDR.IsValid() && c.ServiceCIDR.Overlaps(c.ClusterCIDR))) {
		return fmt.Errorf("serviceCIDR %s: want IPv4 outside clusterCIDR %s", c.ServiceCIDR, c.ClusterCIDR)
	}
	if c.ClusterCIDR.IsValid() && !c.ClusterCIDR.Addr().Is4() {
		return fmt.Errorf("clusterCIDR %s: only IPv4 is supported", c.ClusterCIDR)
	}
	if c.ProxyRedirect != nil {
		if err := c.ProxyRedirect.complete(); err != nil {
			return err
		}
	}
	names := map[string]bool{}
	underlays := map[netip.Addr]string{}
	for i, n := range c.Nodes {
		if err := n.check(); err != nil {
			return fmt.Errorf("nodes[%d]: %w", i, err)
		}
		if names[n.Name] {
			return fmt.Errorf("nodes[%d]: node %q appears twice", i, n.Name)
		}
		names[n.Name] = true
		if o, ok := underlays[n.Underlay]; ok {
			return fmt.Errorf("nodes[%d]: underlay %s is also node %q's", i, n.Underlay, o)
		}
		underlays[n.Underlay] = n.Name
		for _, m := range c.Nodes[:i] {
			if m.PodCIDR.Overlaps(n.PodCIDR) {
				return fmt.Errorf("nodes[%d]: podCIDR %s overlaps node %q's %s", i, n.PodCIDR, m.Name, m.PodCIDR)
			}
		}
		if c.ClusterCIDR.IsValid() && !(c.ClusterCIDR.Contains(n.PodCIDR.Addr()) && c.ClusterCIDR.Bits() <= n.PodCIDR.Bits()) {
			return fmt.Errorf("nodes[%d]: podCIDR %s is outside clusterCIDR %s", i, n.PodCIDR, c.ClusterCIDR)
		}
	}
	// Services: only what makes the file ambiguous is refused here (no
	// name, the same name twice); values are the proxy's to judge.
	svcs := map[string]bool{}
	for i := range c.Services {
		s := &c.Services[i]
		if s.Namespace == "" {
			s.Namespace = "default"
		}
		if s.Name == "" {
			return fmt.Errorf("services[%d]: a Service needs a name", i)
		}
		if svcs[s.Namespace+"/"+s.Name] {
			return fmt.Errorf("services[%d]: Service %s/%s appears twice", i, s.Namespace, s.Name)
		}
		svcs[s.Namespace+"/"+s.Name] = true
	}
	return nil
}

// PodNetwork is the cluster CIDR (if set) and every known node's pod CIDR.
func (c *Cluster) PodNetwork() []netip.Prefix {
	var out []netip.Prefix
	if c.ClusterCIDR.IsValid() {
		out = append(out, c.ClusterCIDR)
	}
	for _, n := range c.Nodes {
		out = append(out, n.PodCIDR)
	}
	return out
}

// Check checks one node's own fields (also for nodes from the API server).
func (n Node) check() error {
	if n.Name == "" {
		return errors.New("a node needs a name")
	}
	if !n.Underlay.Is4() {
		return fmt.Errorf("node %q: underlay %v: want an IPv4 address", n.Name, n.Underlay)
	}
	if !n.PodCIDR.IsValid() || !n.PodCIDR.Addr().Is4() {
		return fmt.Errorf("node %q: podCIDR %v: want an IPv4 prefix", n.Name, n.PodCIDR)
	}
	if n.PodCIDR.Masked() != n.PodCIDR {
		return fmt.Errorf("node %q: podCIDR %s has host bits set", n.Name, n.PodCIDR)
	}
	if n.PodCIDR.Bits() > 29 {
		return fmt.Errorf("node %q: podCIDR %s is too small (at most /29)", n.Name, n.PodCIDR)
	}
	return nil
}

// Check checks one node's fields.
func (n Node) Check() error { return n.check() }

// Node returns the node called name.
func (c *Cluster) Node(name string) (Node, bool) {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// PodMTU is the MTU pods get on an underlay of MTU underlay: the
// configured MTU if set, else underlay; less room for VXLAN.
func (c *Cluster) PodMTU(underlay int) int {
	if c.MTU != 0 {
		underlay = c.MTU
	}
	return underlay - VXLANOverhead
}
