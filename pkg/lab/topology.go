package lab

import (
	"context"
	"encoding/json"
	"fmt"
	networkingv1 "k8s.io/api/networking/v1"
	"os"
	"strings"
	"time"

	"github.com/nagare-net/nagare/pkg/agent/config"
)

// Address plan (see docs/lab.md). All of it lives only inside the lab's own
// namespaces; nothing is added to the host's namespace.
//
//	pod i (1-based, scenario order)  eth0 10.99.0.i/24, MAC 02:99:00:00:00:ii (hex)
//	node j (1-based)                 underlay ul0 192.168.99.j/24, MAC 02:00:00:00:99:jj
//	routed plane gateway             169.254.1.1, MAC ee:ee:ee:ee:ee:ee (every node)
//	VXLAN                            VNI 1, UDP 4789, pod MTU 1450
const (
	podSubnet      = "10.99.0."
	podPrefixLen   = 24
	underlaySubnet = "192.168.99."
	// VXLANPodMTU leaves room for the 50-byte VXLAN/UDP/IP/Ethernet header on
	// a 1500-byte underlay.
	VXLANPodMTU = 1450
)

// Topology is what one run builds: namespaces named Prefix-<name>, an
// underlay between the nodes, and the pods that must reach each other.
type Topology struct {
	// Prefix makes every namespace name unique to the run (nl<pid> by default).
	Prefix string
	Nodes  []*Node
	Pods   []*Pod
	// Pairs are the pods that must reach each other (measured and
	// background-load traffic), client first.
	Pairs [][2]*Pod
	// UnderlayMTU is the MTU of the links between nodes.
	UnderlayMTU int
	// Cleanup undoes everything the run created, newest first.
	Cleanup *Cleanup
	// Sh runs and logs commands.
	Sh *Shell
	// TempDir is a scratch directory of this run (removed by Cleanup).
	TempDir string
	// Services says the scenario measures through Services: the data
	// plane must run a Service proxy fed by the run's Kubernetes API
	// server (KubeAPI).
	Services bool
	// ClusterServices are Services a MeshPlane programs from its cluster
	// file (the bookinfo application's, mesh.go); nil: none.
	ClusterServices []config.Service
	// NetworkPolicies are what a policy plane enforces (netpol.go); nil
	// for the other planes.
	NetworkPolicies []networkingv1.NetworkPolicy
	kubeAPI         *kubeAPI
}

// Node is a node network namespace.
type Node struct {
	Name  string
	NS    string
	Index int // 1-based
	// UnderlayIP (without prefix length) and UnderlayMAC are on UnderlayDev.
	UnderlayIP  string
	UnderlayMAC string
	UnderlayDev string
}

// Pod is a pod network namespace on a node.
type Pod struct {
	Name  string
	NS    string
	Node  *Node
	Index int // 1-based, fixes IP and MAC
	IP    string
	MAC   string
	// HostIf is the name of the pod's veth peer in the node namespace
	// (set by AddPodLink).
	HostIf string
	// Dev is the pod's interface in NS: eth0, or for an uplink port its
	// name (several share the tester's namespace).
	Dev string
	// Tester is, for an uplink port (PodSpec.Uplink), the name of the
	// tester whose namespace NS is; "" for a pod.
	Tester string
}

// Uplinks returns the uplink ports of the topology (PodSpec.Uplink).
func (t *Topology) Uplinks() []*Pod {
	var ups []*Pod
	for _, p := range t.Pods {
		if p.Tester != "" {
			ups = append(ups, p)
		}
	}
	return ups
}

// CIDR returns the pod's address with the pod subnet's prefix length.
func (p *Pod) CIDR() string { return fmt.Sprintf("%s/%d", p.IP, podPrefixLen) }

// Node returns the node of that name, or nil.
func (t *Topology) Node(name string) *Node {
	for _, n := range t.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Pod returns the pod of that name, or nil.
func (t *Topology) Pod(name string) *Pod {
	for _, p := range t.Pods {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// NodePods returns the pods on node n.
func (t *Topology) NodePods(n *Node) []*Pod {
	var ps []*Pod
	for _, p := range t.Pods {
		if p.Node == n {
			ps = append(ps, p)
		}
	}
	return ps
}

// NodesWithPods returns the nodes that have at least one pod.
func (t *Topology) NodesWithPods() []*Node {
	var ns []*Node
	for _, n := range t.Nodes {
		if len(t.NodePods(n)) > 0 {
			ns = append(ns, n)
		}
	}
	return ns
}

// newTopology lays out (but does not create) the namespaces for the given
// pods of s. Only the pods listed are part of the topology; their addresses
// still follow their position in the scenario.
func newTopology(s *Scenario, prefix string, podNames map[string]bool, sh *Shell, c *Cleanup) *Topology {
	t := &Topology{Prefix: prefix, UnderlayMTU: s.Underlay.MTU, Sh: sh, Cleanup: c}
	for j, name := range s.Nodes {
		t.Nodes = append(t.Nodes, &Node{
			Name: name, NS: prefix + "-" + name, Index: j + 1,
			UnderlayIP:  fmt.Sprintf("%s%d", underlaySubnet, j+1),
			UnderlayMAC: fmt.Sprintf("02:00:00:00:99:%02x", j+1),
			UnderlayDev: "ul0",
		})
	}
	for i, ps := range s.Pods {
		if !podNames[ps.Name] {
			continue
		}
		p := &Pod{
			Name: ps.Name, NS: prefix + "-" + ps.Name, Node: t.Node(ps.Node), Index: i + 1,
			IP:  fmt.Sprintf("%s%d", podSubnet, i+1),
			MAC: fmt.Sprintf("02:99:00:00:00:%02x", i+1),
			Dev: "eth0",
		}
		if ps.Uplink != "" {
			p.NS, p.Dev, p.Tester = prefix+"-"+ps.Uplink, ps.Name, ps.Uplink
		}
		t.Pods = append(t.Pods, p)
	}
	return t
}

// createNamespace adds a network namespace with loopback up and IPv6 off
// (no router solicitations or MLD reports in the measurements), and
// registers its deletion.
func (t *Topology) createNamespace(ctx context.Context, ns string) error {
	if _, err := os.Stat("/run/netns/" + ns); err == nil {
		return fmt.Errorf("network namespace %s exists already (left over from a killed run? delete it with: ip netns del %s)", ns, ns)
	}
	// Registered first: a cancelled `ip netns add` may still have created it.
	t.Cleanup.Add("delete netns "+ns, func() error { return deleteNamespace(t.Sh, ns) })
	if _, err := t.Sh.Run(ctx, "ip", "netns", "add", ns); err != nil {
		return err
	}
	if _, err := t.Sh.Run(ctx, "ip", "-n", ns, "link", "set", "lo", "up"); err != nil {
		return err
	}
	_, err := t.Sh.NS(ctx, ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	return err
}

func deleteNamespace(sh *Shell, ns string) error {
	if _, err := os.Lstat("/run/netns/" + ns); err != nil {
		return nil // never created
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	// A process still inside would keep the namespace (and its links)
	// alive after the name is gone: report it, it is a bug in the lab.
	pids := pidsInNamespace(ns)
	// Give processes that are exiting (their teardown just signalled
	// them) a moment to be gone.
	for deadline := time.Now().Add(3 * time.Second); len(pids) > 0 && time.Now().Before(deadline); pids = pidsInNamespace(ns) {
		time.Sleep(20 * time.Millisecond) // polling other processes' exit; nothing to wait on
	}
	_, err := sh.Run(ctx, "ip", "netns", "del", ns)
	if len(pids) > 0 {
		return fmt.Errorf("processes %v were still running in %s", pids, ns)
	}
	return err
}

// pidsInNamespace lists processes whose network namespace is /run/netns/ns.
func pidsInNamespace(ns string) []int {
	ino, err := nsInode("/run/netns/" + ns)
	if err != nil {
		return nil
	}
	return pidsWithNetnsInode(map[uint64]bool{ino: true})
}

// build creates every namespace and the underlay.
func (t *Topology) build(ctx context.Context) error {
	for _, n := range t.Nodes {
		if err := t.createNamespace(ctx, n.NS); err != nil {
			return err
		}
	}
	made := map[string]bool{}
	for _, p := range t.Pods {
		if made[p.NS] { // a tester's namespace holds several uplinks
			continue
		}
		made[p.NS] = true
		if err := t.createNamespace(ctx, p.NS); err != nil {
			return err
		}
	}
	return t.buildUnderlay(ctx)
}

// buildUnderlay joins the nodes: two nodes by one veth pair (ul0 in each),
// more by a bridge in namespace Prefix-ul. The links are created directly
// inside the lab's namespaces, never in the host's.
func (t *Topology) buildUnderlay(ctx context.Context) error {
	mtu := fmt.Sprint(t.UnderlayMTU)
	sh := t.Sh
	switch len(t.Nodes) {
	case 0, 1:
		return nil
	case 2:
		a, b := t.Nodes[0], t.Nodes[1]
		if _, err := sh.Run(ctx, "ip", "link", "add", a.UnderlayDev, "netns", a.NS, "mtu", mtu, "address", a.UnderlayMAC,
			"type", "veth", "peer", "name", b.UnderlayDev, "netns", b.NS, "mtu", mtu, "address", b.UnderlayMAC); err != nil {
			return err
		}
	default:
		ul := t.Prefix + "-ul"
		if err := t.createNamespace(ctx, ul); err != nil {
			return err
		}
		if _, err := sh.Run(ctx, "ip", "-n", ul, "link", "add", "br0", "mtu", mtu, "type", "bridge", "stp_state", "0", "forward_delay", "0"); err != nil {
			return err
		}
		if _, err := sh.Run(ctx, "ip", "-n", ul, "link", "set", "br0", "up"); err != nil {
			return err
		}
		for _, n := range t.Nodes {
			port := fmt.Sprintf("p%d", n.Index)
			if _, err := sh.Run(ctx, "ip", "link", "add", n.UnderlayDev, "netns", n.NS, "mtu", mtu, "address", n.UnderlayMAC,
				"type", "veth", "peer", "name", port, "netns", ul, "mtu", mtu); err != nil {
				return err
			}
			if _, err := sh.Run(ctx, "ip", "-n", ul, "link", "set", port, "master", "br0", "up"); err != nil {
				return err
			}
		}
	}
	for _, n := range t.Nodes {
		if _, err := sh.Run(ctx, "ip", "-n", n.NS, "addr", "add", n.UnderlayIP+"/24", "dev", n.UnderlayDev); err != nil {
			return err
		}
		if _, err := sh.Run(ctx, "ip", "-n", n.NS, "link", "set", n.UnderlayDev, "up"); err != nil {
			return err
		}
	}
	return nil
}

// PodLinkOptions tune AddPodLink.
type PodLinkOptions struct {
	// MTU of both ends; 0 means the underlay's (default 1500): a scenario
	// with underlay mtu 9000 gets jumbo pods, as seed 004 measured.
	MTU int
	// Addr is the address to put on eth0; "" means p.CIDR().
	Addr string
	// TxOff disables transmit checksum offload (and with it TSO) on the
	// pod's eth0, as Open vSwitch's userspace datapath needs.
	TxOff bool
}

// AddPodLink gives pod p its eth0 (an uplink port its Dev in the tester's
// namespace), a veth whose peer HostIf ("v-<pod>") is in the node
// namespace, both up. The host side has no address.
func (t *Topology) AddPodLink(ctx context.Context, p *Pod, o PodLinkOptions) error {
	if o.MTU == 0 {
		o.MTU = t.UnderlayMTU
	}
	if o.MTU == 0 {
		o.MTU = 1500
	}
	if o.Addr == "" {
		o.Addr = p.CIDR()
	}
	p.HostIf = "v-" + p.Name
	mtu := fmt.Sprint(o.MTU)
	sh := t.Sh
	cmds := [][]string{
		{"ip", "link", "add", p.Dev, "netns", p.NS, "mtu", mtu, "address", p.MAC, "type", "veth", "peer", "name", p.HostIf, "netns", p.Node.NS, "mtu", mtu},
		{"ip", "-n", p.NS, "addr", "add", o.Addr, "dev", p.Dev},
		{"ip", "-n", p.NS, "link", "set", p.Dev, "up"},
		{"ip", "-n", p.Node.NS, "link", "set", p.HostIf, "up"},
	}
	if o.TxOff {
		cmds = append(cmds, []string{"ip", "netns", "exec", p.NS, "ethtool", "-K", p.Dev, "tx", "off"})
	}
	for _, c := range cmds {
		if _, err := sh.Run(ctx, c...); err != nil {
			return err
		}
	}
	return nil
}

// setupTesters makes each tester namespace with several uplinks answer on
// the right one: ARP only for the address of the interface asked on
// (arp_ignore 1, arp_announce 2), no reverse-path filter, and a routing
// table per uplink chosen by source address, so a connection to one
// uplink's address is answered, and its data sent, over that uplink only.
// Called after the data plane's Setup made the uplinks.
func (t *Topology) setupTesters(ctx context.Context) error {
	byNS := map[string][]*Pod{}
	var order []string
	for _, u := range t.Uplinks() {
		if byNS[u.NS] == nil {
			order = append(order, u.NS)
		}
		byNS[u.NS] = append(byNS[u.NS], u)
	}
	for _, ns := range order {
		if _, err := t.Sh.NS(ctx, ns, "sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.all.arp_announce=2",
			"net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"); err != nil {
			return err
		}
		for k, u := range byNS[ns] {
			table := fmt.Sprint(100 + k)
			cmds := [][]string{
				{"sysctl", "-qw", "net.ipv4.conf." + u.Dev + ".rp_filter=0"},
				{"ip", "rule", "add", "from", u.IP, "lookup", table},
				{"ip", "route", "add", podSubnet + "0/" + fmt.Sprint(podPrefixLen), "dev", u.Dev, "src", u.IP, "table", table},
			}
			for _, c := range cmds {
				if _, err := t.Sh.NS(ctx, ns, c...); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// UplinkBytes are the bytes an uplink port carried, counted at its
// tester's end: Rx the tester received (the pods' sending), Tx it sent.
type UplinkBytes struct {
	Uplink string `json:"uplink"`
	Rx     uint64 `json:"rx_bytes"`
	Tx     uint64 `json:"tx_bytes"`
}

// uplinkCounters reads every uplink's byte counters in its tester's
// namespace (`ip -s -j link show`).
func (t *Topology) uplinkCounters(ctx context.Context) ([]UplinkBytes, error) {
	var out []UplinkBytes
	for _, u := range t.Uplinks() {
		js, err := t.Sh.Run(ctx, "ip", "-n", u.NS, "-s", "-j", "link", "show", "dev", u.Dev)
		if err != nil {
			return nil, err
		}
		b, err := ParseIPLinkBytes(js)
		if err != nil {
			return nil, fmt.Errorf("uplink %s: %w", u.Name, err)
		}
		b.Uplink = u.Name
		out = append(out, b)
	}
	return out, nil
}

// ParseIPLinkBytes reads the byte counters of the one link in `ip -s -j
// link show dev X`.
func ParseIPLinkBytes(js string) (UplinkBytes, error) {
	var links []struct {
		Stats struct {
			Rx struct {
				Bytes *uint64 `json:"bytes"`
			} `json:"rx"`
			Tx struct {
				Bytes *uint64 `json:"bytes"`
			} `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal([]byte(js), &links); err != nil {
		return UplinkBytes{}, fmt.Errorf("ip -s -j link: %w", err)
	}
	if len(links) != 1 || links[0].Stats.Rx.Bytes == nil || links[0].Stats.Tx.Bytes == nil {
		return UplinkBytes{}, fmt.Errorf("ip -s -j link: want one link with stats64 rx/tx bytes, got %q", js)
	}
	return UplinkBytes{Rx: *links[0].Stats.Rx.Bytes, Tx: *links[0].Stats.Tx.Bytes}, nil
}

// AddDirectLink joins pods a and b with one veth pair (eth0 in each).
func (t *Topology) AddDirectLink(ctx context.Context, a, b *Pod) error {
	sh := t.Sh
	cmds := [][]string{
		{"ip", "link", "add", "eth0", "netns", a.NS, "address", a.MAC, "type", "veth", "peer", "name", "eth0", "netns", b.NS, "address", b.MAC},
		{"ip", "-n", a.NS, "addr", "add", a.CIDR(), "dev", "eth0"},
		{"ip", "-n", b.NS, "addr", "add", b.CIDR(), "dev", "eth0"},
		{"ip", "-n", a.NS, "link", "set", "eth0", "up"},
		{"ip", "-n", b.NS, "link", "set", "eth0", "up"},
	}
	for _, c := range cmds {
		if _, err := sh.Run(ctx, c...); err != nil {
			return err
		}
	}
	return nil
}

// IP runs `ip -n ns ARGS...`.
func (t *Topology) IP(ctx context.Context, ns string, args ...string) error {
	_, err := t.Sh.Run(ctx, append([]string{"ip", "-n", ns}, args...)...)
	return err
}

// namespaces lists the names of all namespaces of the topology.
func (t *Topology) namespaces() []string {
	var out []string
	for _, n := range t.Nodes {
		out = append(out, n.NS)
	}
	seen := map[string]bool{}
	for _, p := range t.Pods {
		if !seen[p.NS] {
			seen[p.NS] = true
			out = append(out, p.NS)
		}
	}
	if len(t.Nodes) > 2 {
		out = append(out, t.Prefix+"-ul")
	}
	return out
}

// ListNamespaces returns the names in /run/netns that start with prefix+"-".
func ListNamespaces(prefix string) []string {
	ents, _ := os.ReadDir("/run/netns")
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			out = append(out, e.Name())
		}
	}
	return out
}
