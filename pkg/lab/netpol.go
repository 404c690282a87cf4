package lab

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nagare-net/nagare/pkg/agent/netpol"
)

// NetworkPolicy in the lab (issue 20): what enforcing policies costs the
// measured traffic. A policy plane is a data plane variant that runs with
// Kubernetes NetworkPolicies made by the run (Topology.NetworkPolicies):
//
//   - the measured traffic allowed: each measured server pod isolated for
//     ingress with a rule from its clients on the measured ports, each
//     client isolated for egress with a rule to its servers on them (both
//     ends judge a new connection, as on a real cluster where both pods
//     are selected); plus the scenario's own allows (Scenario.Policies,
//     ingress only);
//   - Others more policies, each over a pod of its own that is not on this
//     node (a label no lab pod has) and over the first measured server,
//     with a rule from an ipBlock (a /30) on one TCP port of its own: the
//     server is isolated by Others+1 policies whose rules are all in the
//     datapath (nagare: 3 flows each, conjunctions sharing the server's
//     clause flow; nftables: Others more rules in the server's ingress
//     chain, after the allowing one, which sorts first), while the
//     policies' other pods exist only in them.
//
// nagare's agents take them from their cluster file (networkPolicies,
// podLabels); the Linux bridge takes the same policies realized by the
// agent's engine (pkg/agent/netpol) as an nftables ruleset
// (NftPolicyRuleset) through br_netfilter. Pods carry the label
// lab.nagare.io/pod=<name>, in namespace default.
//
// With policies, a pair's connectivity is checked by pinging from the
// server to the client (the policies allow no ICMP to a server; replies
// are established), and after it checkPolicy dials a port no policy
// allows: an enforcing plane must not connect, its base plane must.

// labPodLabel is the label that names a lab pod for policy selectors.
const labPodLabel = "lab.nagare.io/pod"

// labPolicyNamespace is the lab pods' namespace (nscluster's CNI args).
const labPolicyNamespace = "default"

// deniedPort is the TCP port checkPolicy dials: no policy allows it.
const deniedPort = 5998

// PolicyAllow is a scenario's allow beyond the measured traffic: To is
// isolated for ingress and From may reach it on Ports ("udp/53",
// "tcp/80"; none: every port).
type PolicyAllow struct {
	From  string   `yaml:"from"`
	To    string   `yaml:"to"`
	Ports []string `yaml:"ports"`
}

// policyPlane is a data plane variant enforcing the run's policies.
type policyPlane interface {
	DataPlane
	// PolicyBase is the same plane without policies: the reference of
	// its ratios.
	PolicyBase() string
	// OtherPolicies is how many policies besides the allowing ones it
	// gets.
	OtherPolicies() int
}

// policyPlaneName is base's variant with policies: "+netpol" for nagare,
// "+nft" for the bridge, with the count of other policies when there are.
func policyPlaneName(base, kind string, others int) string {
	if others == 0 {
		return base + "+" + kind
	}
	return fmt.Sprintf("%s+%s%d", base, kind, others)
}

// validatePolicies checks the scenario's allows.
func validatePolicies(s *Scenario, pods map[string]PodSpec, bad func(string, ...any)) {
	for i, a := range s.Policies {
		where := fmt.Sprintf("policies[%d]", i)
		_, from := pods[a.From]
		_, to := pods[a.To]
		if !from || !to || a.From == a.To {
			bad("%s: from %q and to %q must be two pods", where, a.From, a.To)
		}
		for _, p := range a.Ports {
			if _, _, err := parsePolicyPort(p); err != nil {
				bad("%s: %v", where, err)
			}
		}
	}
}

// parsePolicyPort reads "udp/53".
func parsePolicyPort(s string) (corev1.Protocol, int32, error) {
	proto, port, ok := strings.Cut(s, "/")
	n, err := strconv.Atoi(port)
	if !ok || err != nil || n < 1 || n > 65535 {
		return "", 0, fmt.Errorf("port %q: want tcp/N, udp/N or sctp/N", s)
	}
	switch p := corev1.Protocol(strings.ToUpper(proto)); p {
	case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		return p, int32(n), nil
	}
	return "", 0, fmt.Errorf("port %q: want tcp/N, udp/N or sctp/N", s)
}

// policyPair is a client allowed to reach a server on ports.
type policyPair struct {
	client, server string
	ports          []networkingv1.NetworkPolicyPort
}

// measuredAllows are the measured traffic's pairs: each measurement's
// client to its server on the measured port (servicePorts' measured one:
// rtt, tcp and conn-rate).
func (r *planeRun) measuredAllows() []policyPair {
	byPair := map[[2]string]*policyPair{}
	var out []*policyPair
	seen := map[string]bool{}
	for _, tc := range r.tests {
		m := tc.m
		if m.Client == m.Server {
			continue
		}
		k := [2]string{m.Client, m.Server}
		pp := byPair[k]
		if pp == nil {
			pp = &policyPair{client: m.Client, server: m.Server}
			byPair[k] = pp
			out = append(out, pp)
		}
		for _, sp := range r.servicePorts(m) {
			key := fmt.Sprint(k, sp.Protocol, sp.Port)
			if sp.Name != "measured" || seen[key] {
				continue
			}
			seen[key] = true
			pp.ports = append(pp.ports, policyPort(sp.Protocol, sp.Port))
		}
	}
	var res []policyPair
	for _, p := range out {
		// A rule without ports would allow every port: a pair whose
		// kinds have no measured port (not rtt, tcp or conn-rate) gets
		// no allowing rule at all.
		if len(p.ports) > 0 {
			res = append(res, *p)
		}
	}
	return res
}

func policyPort(proto corev1.Protocol, port int32) networkingv1.NetworkPolicyPort {
	pr := proto
	p := intstr.FromInt32(port)
	return networkingv1.NetworkPolicyPort{Protocol: &pr, Port: &p}
}

// labNetworkPolicies are the run's policies: the measured pairs allowed
// both ways (ingress at the server, egress at the client), the
// scenario's allows (ingress), and others more policies on the first
// measured server.
func labNetworkPolicies(measured []policyPair, extra []PolicyAllow, others int) []networkingv1.NetworkPolicy {
	sel := func(pod string) metav1.LabelSelector {
		return metav1.LabelSelector{MatchLabels: map[string]string{labPodLabel: pod}}
	}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: labPolicyNamespace}
	}
	ingress := map[string][]networkingv1.NetworkPolicyIngressRule{}
	egress := map[string][]networkingv1.NetworkPolicyEgressRule{}
	var servers, clients []string
	addIngress := func(from, to string, ports []networkingv1.NetworkPolicyPort) {
		if _, ok := ingress[to]; !ok {
			servers = append(servers, to)
		}
		ingress[to] = append(ingress[to], networkingv1.NetworkPolicyIngressRule{
			From: []networkingv1.NetworkPolicyPeer{{PodSelector: ptr.To(sel(from))}}, Ports: ports})
	}
	for _, p := range measured {
		addIngress(p.client, p.server, p.ports)
		if _, ok := egress[p.client]; !ok {
			clients = append(clients, p.client)
		}
		egress[p.client] = append(egress[p.client], networkingv1.NetworkPolicyEgressRule{
			To: []networkingv1.NetworkPolicyPeer{{PodSelector: ptr.To(sel(p.server))}}, Ports: p.ports})
	}
	for _, a := range extra {
		var ports []networkingv1.NetworkPolicyPort
		for _, s := range a.Ports {
			proto, n, _ := parsePolicyPort(s) // validated
			ports = append(ports, policyPort(proto, n))
		}
		addIngress(a.From, a.To, ports)
	}
	var out []networkingv1.NetworkPolicy
	for _, s := range servers {
		out = append(out, networkingv1.NetworkPolicy{ObjectMeta: meta("lab-ingress-" + s), Spec: networkingv1.NetworkPolicySpec{
			PodSelector: sel(s), PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, Ingress: ingress[s]}})
	}
	for _, c := range clients {
		out = append(out, networkingv1.NetworkPolicy{ObjectMeta: meta("lab-egress-" + c), Spec: networkingv1.NetworkPolicySpec{
			PodSelector: sel(c), PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}, Egress: egress[c]}})
	}
	also := "" // the first measured server, selected by every other policy
	if len(servers) > 0 {
		also = servers[0]
	}
	for i := 0; i < others; i++ {
		own := metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: labPodLabel,
			Operator: metav1.LabelSelectorOpIn, Values: []string{fmt.Sprintf("other-%04d", i)}}}}
		if also != "" {
			own.MatchExpressions[0].Values = append(own.MatchExpressions[0].Values, also)
		}
		// A /30 of 10.98.0.0/16 per policy, one TCP port each.
		block := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 98, byte(i / 12), byte(i % 12 * 20)}), 30)
		out = append(out, networkingv1.NetworkPolicy{ObjectMeta: meta(fmt.Sprintf("lab-other-%04d", i)), Spec: networkingv1.NetworkPolicySpec{
			PodSelector: own, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: block.String()}}},
				Ports: []networkingv1.NetworkPolicyPort{policyPort(corev1.ProtocolTCP, int32(8000+i))}}}}})
	}
	return out
}

// labPodLabels are the cluster file's podLabels for the run's pods.
func labPodLabels(t *Topology) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, p := range t.Pods {
		out[labPolicyNamespace+"/"+p.Name] = map[string]string{labPodLabel: p.Name}
	}
	return out
}

// labPolicyState realizes t's policies for its pods (all on node n) as
// nagare's agent does: what the bridge's nftables ruleset expresses.
func labPolicyState(t *Topology, n *Node) (netpol.State, []netpol.Problem, error) {
	e := netpol.NewEngine(n.Name)
	e.SetNamespace(labPolicyNamespace, map[string]string{"kubernetes.io/metadata.name": labPolicyNamespace})
	for _, p := range t.NodePods(n) {
		ip, err := netip.ParseAddr(p.IP)
		if err != nil {
			return netpol.State{}, nil, fmt.Errorf("pod %s: %w", p.Name, err)
		}
		e.SetPod(&netpol.Pod{Namespace: labPolicyNamespace, Name: p.Name, IP: ip, Node: n.Name, Labels: map[string]string{labPodLabel: p.Name}})
	}
	for i := range t.NetworkPolicies {
		e.SetPolicy(&t.NetworkPolicies[i])
	}
	st, problems, _ := e.Realize()
	return st, problems, nil
}

// applyNftPolicies loads t's policies as nftables rules in each node of
// the bridge plane, with br_netfilter on, so bridged IPv4 packets pass
// the ip family's forward hook and the kernel's conntrack.
func applyNftPolicies(ctx context.Context, t *Topology) error {
	for _, n := range t.NodesWithPods() {
		st, problems, err := labPolicyState(t, n)
		if err != nil {
			return err
		}
		if len(problems) > 0 {
			return fmt.Errorf("policies refused: %v", problems)
		}
		if _, err := t.Sh.NS(ctx, n.NS, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1"); err != nil {
			return fmt.Errorf("br_netfilter in %s: %w", n.Name, err)
		}
		f := filepath.Join(t.TempDir, n.Name+"-netpol.nft")
		rs := NftPolicyRuleset(st, "netpol", netip.Addr{})
		if err := os.WriteFile(f, []byte(rs), 0o644); err != nil {
			return err
		}
		t.Sh.logf("# %s: %d policies realized as %d rules, %d pods isolated for ingress, %d for egress: nftables table ip netpol (%d bytes, %s)",
			n.Name, len(t.NetworkPolicies), len(st.Rules), len(st.IsolatedIngress), len(st.IsolatedEgress), len(rs), f)
		if _, err := t.Sh.NS(ctx, n.NS, "nft", "-f", f); err != nil {
			return err
		}
	}
	return nil
}

// checkPolicy dials deniedPort of every measured server from its client:
// a plane that enforces the policies must not connect within a second,
// any other plane must (so the probe is known to reach the server).
func (r *planeRun) checkPolicy(ctx context.Context, enforced bool) error {
	t := r.topo
	for _, p := range r.measuredAllows() {
		client, server := t.Pod(p.client), t.Pod(p.server)
		l, err := acceptAndClose(server, deniedPort)
		if err != nil {
			return fmt.Errorf("denied-port listener in %s: %w", server.Name, err)
		}
		addr := net.JoinHostPort(server.IP, strconv.Itoa(deniedPort))
		if enforced {
			var c net.Conn
			err = ns.WithNetNSPath(netnsPath(client.NS), func(ns.NetNS) error {
				var err error
				c, err = (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
				return err
			})
			if err == nil {
				c.Close()
				err = fmt.Errorf("policy not enforced: %s connected to %s, a port no policy allows", client.Name, addr)
			} else {
				r.sh.logf("# policy check: %s → %s refused as it must be (%v)", client.Name, addr, err)
				err = nil
			}
		} else {
			err = waitServing(ctx, client, []string{addr}, 5*time.Second)
			if err == nil {
				r.sh.logf("# policy check: %s → %s connects without policies", client.Name, addr)
			}
		}
		l.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// usesPolicyPlanes says whether any of the scenario's planes enforces
// policies (then every plane runs checkPolicy).
func (s *Scenario) usesPolicyPlanes() bool {
	for _, name := range s.PlaneNames() {
		if dp, err := NewDataPlane(name); err == nil {
			if _, ok := dp.(policyPlane); ok {
				return true
			}
		}
	}
	return false
}

// writeNetpol writes, per policy plane, each measured number against its
// base plane's (no policy) in the same run, with issue 20's targets.
func (res *Result) writeNetpol(w io.Writer, rows []*Row) {
	type pp struct{ name, base string }
	var planes []pp
	for _, p := range res.Planes {
		if dp, err := NewDataPlane(p.Name); err == nil {
			if x, ok := dp.(policyPlane); ok {
				planes = append(planes, pp{p.Name, x.PolicyBase()})
			}
		}
	}
	if len(planes) == 0 || res.Scenario.hasAttacks() {
		return
	}
	sort.SliceStable(planes, func(i, j int) bool { return planes[i].base < planes[j].base })
	find := func(m, load, plane string) *Row {
		for _, r := range rows {
			if r.Measurement == m && r.Load == load && r.DataPlane == plane && r.OK > 0 {
				return r
			}
		}
		return nil
	}
	type col struct {
		name, unit string
		prec       int
		target     string
		ok         func(x float64) bool
	}
	// The fast path's own time per packet (Scenario.BPFStats), when
	// measured: what a policy adds to a packet, without the spread of the
	// kernel and the applications around it.
	fp := col{fastPathColumn, "ns/pkt", 0, "", nil}
	cols := map[string][]col{
		KindRTT:      {{"p50", "µs", 1, "≤ 1.05×", func(x float64) bool { return x <= 1.05 }}, {"p99", "µs", 1, "", nil}, fp},
		KindTCP:      {{"gbps", "Gbit/s", 2, "≥ 0.97×", func(x float64) bool { return x >= 0.97 }}, fp},
		KindConnRate: {{"conn/s", "conn/s", 0, "≥ 0.95×", func(x float64) bool { return x >= 0.95 }}, fp},
	}
	fmt.Fprintf(w, "\n### NetworkPolicy: each policy plane against the same plane without policies\n\n")
	fmt.Fprintf(w, "Medians over the reps (interleaved: every plane once per rep); × is the policy plane's median over its base plane's. "+
		"+netpol/+nft: the measured pods under policies that allow the measured traffic (ingress at the server, egress at the client); "+
		"a number after it: that many other policies present, each over a pod not on this node and over the server, with a rule from an ipBlock on a port of its own. Targets of issue 20 for nagare.\n\n")
	fmt.Fprintf(w, "| measurement | data plane | value | base plane | base value | × | target |\n|---|---|---|---|---|---|---|\n")
	for _, m := range res.Scenario.Measurements {
		for _, c := range cols[m.Kind] {
			for _, l := range res.Scenario.Loads {
				for _, p := range planes {
					r, b := find(m.Name, l.Name, p.name), find(m.Name, l.Name, p.base)
					if r == nil || len(r.Values[c.name]) == 0 {
						continue
					}
					v := r.Cell(c.name).Median
					bv, ratio, verdict := "–", "–", c.target
					if b != nil && len(b.Values[c.name]) > 0 {
						base := b.Cell(c.name).Median
						bv = strconv.FormatFloat(base, 'f', c.prec, 64)
						if base > 0 {
							x := v / base
							ratio = strconv.FormatFloat(x, 'f', 3, 64)
							if c.ok != nil {
								verdict = c.target + " met"
								if !c.ok(x) {
									verdict = c.target + " **missed**"
								}
							}
						}
					}
					fmt.Fprintf(w, "| %s %s (%s) | %s | %s | %s | %s | %s | %s |\n", m.Name, c.name, c.unit, p.name,
						strconv.FormatFloat(v, 'f', c.prec, 64), p.base, bv, ratio, verdict)
				}
			}
		}
	}
}

// hasAttacks says whether a load step runs an attacker.
func (s *Scenario) hasAttacks() bool {
	for _, l := range s.Loads {
		if l.Attack != nil {
			return true
		}
	}
	return false
}
