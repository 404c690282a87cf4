// Package netpol computes what Kubernetes NetworkPolicies mean on one
// node: for every policy and direction, the local pods it applies to,
// each rule's peer addresses and ports, and which local pods are isolated
// (default deny) in each direction. It is pure Go over plain data (the
// agent feeds it from informers); pkg/agent/pipeline turns its State into
// flows (networkpolicy.go there).
//
// Selectors are resolved cluster-wide by each agent (pods of every node
// are peers), as the issue allows at this size: no central controller.
//
// Incremental: a policy is realized again only when something it looks
// at changed: the policy itself, a pod its applied-to or peer selectors
// match (before or after the change), or a namespace whose labels its
// namespaceSelectors match (before or after). Realize returns the union
// of every policy's cached rules.
//
// Bad input never opens anything: a peer that cannot be parsed (a
// malformed CIDR, an except outside its block, an invalid selector)
// contributes no address, a policy with more than MaxRulesPerPolicy rules
// isolates its pods and enforces none of its rules, and each case is
// reported as a Problem (the agent logs it and records an Event on the
// policy).
package netpol

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// MaxPortRange is the widest endPort range a rule may have (short of
// every port, which is the protocol alone): the switch matches one port
// per flow. A wider range allows nothing and is reported.
const MaxPortRange = 4096

// MaxRulesPerPolicy is the most rules (ingress plus egress) one policy may
// have; past it the policy fails closed (its pods isolated, no rule).
const MaxRulesPerPolicy = 1000

// Direction is ingress (to the applied-to pods) or egress (from them).
type Direction uint8

const (
	Ingress Direction = iota
	Egress
)

func (d Direction) String() string {
	if d == Egress {
		return "egress"
	}
	return "ingress"
}

// IP protocol numbers.
const (
	ProtoTCP  uint8 = 6
	ProtoUDP  uint8 = 17
	ProtoSCTP uint8 = 132
)

// PortRange is a protocol's destination ports Min..Max (both included);
// Min 0, Max 65535 is every port of the protocol.
type PortRange struct {
	Proto    uint8
	Min, Max uint16
}

func (r PortRange) String() string {
	name := map[uint8]string{ProtoTCP: "tcp", ProtoUDP: "udp", ProtoSCTP: "sctp"}[r.Proto]
	switch {
	case r.Min == 0 && r.Max == 65535:
		return name
	case r.Min == r.Max:
		return fmt.Sprintf("%s/%d", name, r.Min)
	}
	return fmt.Sprintf("%s/%d-%d", name, r.Min, r.Max)
}

// Rule is one realized rule: new connections between AppliedTo (local
// pods: destinations for ingress, sources for egress) and Peers on Ports
// are allowed.
type Rule struct {
	// ID names the rule: namespace/name/direction/index, with a
	// "/port=..." part when named ports split it by resolved number.
	ID        string
	Policy    string // namespace/name
	Direction Direction
	Index     int
	AppliedTo []netip.Addr   // sorted
	AnyPeer   bool           // no from/to: every address
	Peers     []netip.Prefix // sorted; pods are /32
	AnyPort   bool           // no ports: every protocol and port
	Ports     []PortRange
	// Gen changes whenever the rule's policy is realized again (and only
	// then): a consumer keeps what it built for a rule of the same Gen.
	Gen uint64
}

// State is what every policy means on this node.
type State struct {
	Rules []Rule // sorted by ID
	// Isolated are the local pods some policy selects, per direction:
	// what no rule allows is dropped for them.
	IsolatedIngress, IsolatedEgress []netip.Addr
}

// NamedPort is a container port with a name.
type NamedPort struct {
	Name  string
	Proto uint8
	Port  uint16
}

// Pod is what policies look at of a pod.
type Pod struct {
	Namespace, Name string
	Labels          map[string]string
	IP              netip.Addr // invalid: no address yet (not selectable)
	Node            string
	HostNetwork     bool
	Ports           []NamedPort
}

func (p *Pod) key() string { return p.Namespace + "/" + p.Name }

// Problem is bad input found while realizing a policy.
type Problem struct {
	Policy string // namespace/name
	Msg    string
}

func (p Problem) String() string { return p.Policy + ": " + p.Msg }

// Engine holds the cluster's policies, pods and namespaces and each
// policy's realized rules.
type Engine struct {
	node string

	mu         sync.Mutex
	policies   map[string]*compiled
	pods       map[string]*Pod            // namespace/name
	podsByNS   map[string]map[string]*Pod // namespace → name → pod
	namespaces map[string]labels.Set
	dirty      map[string]bool // policies to realize again
	gen        uint64          // realizations so far (Rule.Gen)
}

// NewEngine makes an engine for the node named node.
func NewEngine(node string) *Engine {
	return &Engine{node: node, policies: map[string]*compiled{}, pods: map[string]*Pod{},
		podsByNS: map[string]map[string]*Pod{}, namespaces: map[string]labels.Set{}, dirty: map[string]bool{}}
}

// compiled is a policy with its selectors parsed and its realized rules.
type compiled struct {
	key      string
	np       *networkingv1.NetworkPolicy
	applied  labels.Selector // nil: invalid
	peers    []peerSel       // every podSelector/namespaceSelector peer of every rule
	allPods  bool            // an egress rule to anyone on a named port: every pod is a peer
	rules    []Rule          // realized
	isoIn    []netip.Addr
	isoEg    []netip.Addr
	problems []Problem
}

// peerSel is one selector peer: pods in the policy's namespace (ns nil)
// or in the namespaces ns selects.
type peerSel struct {
	ns, pods labels.Selector // pods nil: every pod
}

// SetPolicy adds or replaces a policy.
func (e *Engine) SetPolicy(np *networkingv1.NetworkPolicy) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := compile(np)
	e.policies[c.key] = c
	e.dirty[c.key] = true
}

// DeletePolicy removes a policy.
func (e *Engine) DeletePolicy(namespace, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := namespace + "/" + name
	delete(e.policies, k)
	e.dirty[k] = true
}

// SetPod adds or replaces a pod (of any node).
func (e *Engine) SetPod(p *Pod) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := p.key()
	if old := e.pods[k]; old != nil {
		e.markPod(old)
	}
	e.pods[k] = p
	if e.podsByNS[p.Namespace] == nil {
		e.podsByNS[p.Namespace] = map[string]*Pod{}
	}
	e.podsByNS[p.Namespace][p.Name] = p
	e.markPod(p)
}

// DeletePod removes a pod.
func (e *Engine) DeletePod(namespace, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := namespace + "/" + name
	if old := e.pods[k]; old != nil {
		e.markPod(old)
		delete(e.pods, k)
		delete(e.podsByNS[namespace], name)
	}
}

// SetNamespace adds a namespace or changes its labels.
func (e *Engine) SetNamespace(name string, l map[string]string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if old, ok := e.namespaces[name]; ok {
		if labels.Equals(old, l) {
			return
		}
		e.markNamespace(old)
	}
	e.namespaces[name] = labels.Set(l)
	e.markNamespace(labels.Set(l))
}

// DeleteNamespace removes a namespace.
func (e *Engine) DeleteNamespace(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if old, ok := e.namespaces[name]; ok {
		e.markNamespace(old)
		delete(e.namespaces, name)
	}
}

// markPod marks the policies whose applied-to or peers select p.
func (e *Engine) markPod(p *Pod) {
	l := labels.Set(p.Labels)
	nsl := e.namespaces[p.Namespace]
	for k, c := range e.policies {
		if e.dirty[k] {
			continue
		}
		if c.allPods || c.np.Namespace == p.Namespace && (c.applied == nil || c.applied.Matches(l)) {
			e.dirty[k] = true
			continue
		}
		for _, ps := range c.peers {
			if ps.ns == nil && c.np.Namespace != p.Namespace {
				continue
			}
			if ps.ns != nil && (nsl == nil || !ps.ns.Matches(nsl)) {
				continue
			}
			if ps.pods == nil || ps.pods.Matches(l) {
				e.dirty[k] = true
				break
			}
		}
	}
}

// markNamespace marks the policies with a namespaceSelector matching l.
func (e *Engine) markNamespace(l labels.Set) {
	for k, c := range e.policies {
		for _, ps := range c.peers {
			if ps.ns != nil && ps.ns.Matches(l) {
				e.dirty[k] = true
				break
			}
		}
	}
}

// Realize realizes the policies marked since the last call and returns
// the whole state, the problems of the policies realized now, and whether
// anything was realized (false: the state is the last one).
func (e *Engine) Realize() (State, []Problem, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.dirty) == 0 {
		return e.stateLocked(), nil, false
	}
	var problems []Problem
	keys := make([]string, 0, len(e.dirty))
	for k := range e.dirty {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if c := e.policies[k]; c != nil {
			e.gen++
			e.realize(c)
			for i := range c.rules {
				c.rules[i].Gen = e.gen
			}
			problems = append(problems, c.problems...)
		}
	}
	e.dirty = map[string]bool{}
	return e.stateLocked(), problems, true
}

// Problems are the current problems of every policy.
func (e *Engine) Problems() []Problem {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Problem
	for _, k := range e.sortedPolicies() {
		out = append(out, e.policies[k].problems...)
	}
	return out
}

func (e *Engine) sortedPolicies() []string {
	keys := make([]string, 0, len(e.policies))
	for k := range e.policies {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (e *Engine) stateLocked() State {
	var st State
	in, eg := map[netip.Addr]bool{}, map[netip.Addr]bool{}
	for _, k := range e.sortedPolicies() {
		c := e.policies[k]
		st.Rules = append(st.Rules, c.rules...)
		for _, a := range c.isoIn {
			in[a] = true
		}
		for _, a := range c.isoEg {
			eg[a] = true
		}
	}
	sort.Slice(st.Rules, func(i, j int) bool { return st.Rules[i].ID < st.Rules[j].ID })
	st.IsolatedIngress, st.IsolatedEgress = sortedAddrs(in), sortedAddrs(eg)
	return st
}

func sortedAddrs(m map[netip.Addr]bool) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}

// compile parses np's selectors.
func compile(np *networkingv1.NetworkPolicy) *compiled {
	c := &compiled{key: np.Namespace + "/" + np.Name, np: np}
	if s, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); err == nil {
		c.applied = s
	}
	add := func(peers []networkingv1.NetworkPolicyPeer) {
		for _, p := range peers {
			if p.PodSelector == nil && p.NamespaceSelector == nil {
				continue
			}
			var ps peerSel
			if p.NamespaceSelector != nil {
				ps.ns, _ = metav1.LabelSelectorAsSelector(p.NamespaceSelector)
				if ps.ns == nil {
					ps.ns = labels.Everything() // invalid: marks broadly, realizes nothing
				}
			}
			if p.PodSelector != nil {
				ps.pods, _ = metav1.LabelSelectorAsSelector(p.PodSelector)
			}
			c.peers = append(c.peers, ps)
		}
	}
	for _, r := range np.Spec.Ingress {
		add(r.From)
	}
	for _, r := range np.Spec.Egress {
		add(r.To)
		if len(r.To) == 0 {
			for _, p := range r.Ports {
				if p.Port != nil && p.Port.Type != 0 {
					c.allPods = true
				}
			}
		}
	}
	return c
}

// directions are the policy's policyTypes, defaulted as the API does:
// Ingress always, Egress when it has egress rules.
func directions(np *networkingv1.NetworkPolicy) (in, eg bool) {
	if len(np.Spec.PolicyTypes) == 0 {
		return true, len(np.Spec.Egress) > 0
	}
	for _, t := range np.Spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			in = true
		case networkingv1.PolicyTypeEgress:
			eg = true
		}
	}
	return in, eg
}

// realize computes c's rules and isolated pods.
func (e *Engine) realize(c *compiled) {
	c.rules, c.isoIn, c.isoEg, c.problems = nil, nil, nil, nil
	np := c.np
	problem := func(format string, a ...any) {
		c.problems = append(c.problems, Problem{Policy: c.key, Msg: fmt.Sprintf(format, a...)})
	}
	if c.applied == nil {
		problem("invalid podSelector: the policy selects no pod")
		return
	}
	var applied []*Pod
	for _, p := range e.podsByNS[np.Namespace] {
		if p.Node == e.node && p.IP.IsValid() && !p.HostNetwork && c.applied.Matches(labels.Set(p.Labels)) {
			applied = append(applied, p)
		}
	}
	sort.Slice(applied, func(i, j int) bool { return applied[i].IP.Less(applied[j].IP) })
	in, eg := directions(np)
	if len(applied) == 0 {
		return
	}
	addrs := make([]netip.Addr, len(applied))
	for i, p := range applied {
		addrs[i] = p.IP
	}
	if in {
		c.isoIn = addrs
	}
	if eg {
		c.isoEg = addrs
	}
	if n := len(np.Spec.Ingress) + len(np.Spec.Egress); n > MaxRulesPerPolicy {
		problem("%d rules, more than %d: its pods are isolated and none of its rules is enforced (fails closed)", n, MaxRulesPerPolicy)
		return
	}
	if in {
		for i, r := range np.Spec.Ingress {
			c.rules = append(c.rules, e.realizeRule(c, Ingress, i, applied, r.From, r.Ports, problem)...)
		}
	}
	if eg {
		for i, r := range np.Spec.Egress {
			c.rules = append(c.rules, e.realizeRule(c, Egress, i, applied, r.To, r.Ports, problem)...)
		}
	}
}

// realizeRule realizes one rule; named ports may split it into several
// (one per resolved port set).
func (e *Engine) realizeRule(c *compiled, dir Direction, idx int, applied []*Pod, peers []networkingv1.NetworkPolicyPeer,
	ports []networkingv1.NetworkPolicyPort, problem func(string, ...any)) []Rule {
	base := Rule{ID: fmt.Sprintf("%s/%s/%d", c.key, dir, idx), Policy: c.key, Direction: dir, Index: idx}
	// Ports: numbers and ranges here, names resolved per pod below.
	var numeric []PortRange
	var named []namedRef
	anyPort := len(ports) == 0
	for _, p := range ports {
		proto := ProtoTCP
		if p.Protocol != nil {
			switch *p.Protocol {
			case "UDP":
				proto = ProtoUDP
			case "SCTP":
				proto = ProtoSCTP
			case "TCP":
			default:
				problem("%s rule %d: unknown protocol %q: the port is skipped", dir, idx, *p.Protocol)
				continue
			}
		}
		switch {
		case p.Port == nil:
			numeric = append(numeric, PortRange{proto, 0, 65535})
		case p.Port.Type == 0: // int
			lo := p.Port.IntVal
			hi := lo
			if p.EndPort != nil {
				hi = *p.EndPort
			}
			if lo < 1 || lo > 65535 || hi < lo || hi > 65535 {
				problem("%s rule %d: bad port range %d-%d: the port is skipped", dir, idx, lo, hi)
				continue
			}
			if lo == 1 && hi == 65535 {
				lo = 0 // every port: the protocol alone
			} else if hi-lo+1 > MaxPortRange {
				problem("%s rule %d: port range %d-%d is wider than %d ports: the port is skipped (allows nothing)", dir, idx, lo, hi, MaxPortRange)
				continue
			}
			numeric = append(numeric, PortRange{proto, uint16(lo), uint16(hi)})
		default:
			named = append(named, namedRef{p.Port.StrVal, proto})
		}
	}
	if !anyPort && len(numeric) == 0 && len(named) == 0 {
		return nil // every port was bad: the rule allows nothing
	}
	// Peers.
	var prefixes []netip.Prefix
	var pods []*Pod
	anyPeer := len(peers) == 0
	for _, p := range peers {
		if p.IPBlock != nil {
			ps, err := ipBlock(p.IPBlock)
			if err != nil {
				problem("%s rule %d: %v: the ipBlock allows nothing", dir, idx, err)
				continue
			}
			prefixes = append(prefixes, ps...)
			continue
		}
		pods = append(pods, e.selectPeers(c, p, dir, idx, problem)...)
	}
	if !anyPeer && len(prefixes) == 0 && len(pods) == 0 {
		return nil
	}
	if len(named) == 0 {
		r := base
		r.AppliedTo = podAddrs(applied)
		r.AnyPort, r.Ports = anyPort, sortPorts(numeric)
		r.AnyPeer = anyPeer
		r.Peers = sortPrefixes(append(prefixes, podPrefixes(pods)...))
		return []Rule{r}
	}
	// Named ports: resolved on the destination pod: the applied-to pod
	// for ingress, the peer pod for egress. Pods are grouped by the port
	// set they resolve to, one rule per group.
	var out []Rule
	unresolved := map[string]bool{}
	resolve := func(p *Pod) []PortRange {
		rs := append([]PortRange(nil), numeric...)
		for _, n := range named {
			found := false
			for _, cp := range p.Ports {
				if cp.Name == n.name && cp.Proto == n.proto {
					rs = append(rs, PortRange{n.proto, cp.Port, cp.Port})
					found = true
				}
			}
			if !found {
				unresolved[n.name] = true
			}
		}
		return sortPorts(rs)
	}
	if dir == Ingress {
		groups := map[string][]*Pod{}
		sets := map[string][]PortRange{}
		for _, p := range applied {
			rs := resolve(p)
			k := portsKey(rs)
			groups[k] = append(groups[k], p)
			sets[k] = rs
		}
		for _, k := range sortedKeys(groups) {
			if len(sets[k]) == 0 {
				continue
			}
			r := base
			r.ID += "/port=" + k
			r.AppliedTo = podAddrs(groups[k])
			r.Ports = sets[k]
			r.AnyPeer = anyPeer
			r.Peers = sortPrefixes(append(prefixes, podPrefixes(pods)...))
			out = append(out, r)
		}
	} else {
		groups := map[string][]netip.Prefix{}
		sets := map[string][]PortRange{}
		if anyPeer {
			// Every pod of the cluster is a destination: each resolves
			// the name itself (what resolves nothing keeps the numbers).
			pods = e.allPods()
		}
		if anyPeer || len(prefixes) > 0 { // addresses that are no pod: numbers only
			k := portsKey(numeric)
			groups[k] = append(groups[k], prefixes...)
			sets[k] = sortPorts(numeric)
		}
		for _, p := range pods {
			rs := resolve(p)
			k := portsKey(rs)
			groups[k] = append(groups[k], netip.PrefixFrom(p.IP, p.IP.BitLen()))
			sets[k] = rs
		}
		for _, k := range sortedKeys(groups) {
			if len(sets[k]) == 0 {
				continue
			}
			r := base
			r.ID += "/port=" + k
			r.AppliedTo = podAddrs(applied)
			r.Ports = sets[k]
			if anyPeer && portsKey(numeric) == k {
				r.AnyPeer = true
			} else {
				r.Peers = sortPrefixes(groups[k])
			}
			out = append(out, r)
		}
	}
	if len(unresolved) > 0 {
		names := sortedKeys(unresolved)
		problem("%s rule %d: named port %s not defined on every selected pod: those pods are not allowed on it", dir, idx, strings.Join(names, ","))
	}
	return out
}

type namedRef struct {
	name  string
	proto uint8
}

// allPods are the cluster's selectable pods, in key order.
func (e *Engine) allPods() []*Pod {
	out := make([]*Pod, 0, len(e.pods))
	for _, p := range e.pods {
		if p.IP.IsValid() && !p.HostNetwork {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out
}

// selectPeers returns the pods a podSelector/namespaceSelector peer selects.
func (e *Engine) selectPeers(c *compiled, p networkingv1.NetworkPolicyPeer, dir Direction, idx int, problem func(string, ...any)) []*Pod {
	podSel := labels.Everything()
	if p.PodSelector != nil {
		s, err := metav1.LabelSelectorAsSelector(p.PodSelector)
		if err != nil {
			problem("%s rule %d: invalid podSelector: %v: the peer selects nothing", dir, idx, err)
			return nil
		}
		podSel = s
	}
	var nss []string
	if p.NamespaceSelector == nil {
		nss = []string{c.np.Namespace}
	} else {
		s, err := metav1.LabelSelectorAsSelector(p.NamespaceSelector)
		if err != nil {
			problem("%s rule %d: invalid namespaceSelector: %v: the peer selects nothing", dir, idx, err)
			return nil
		}
		for ns, l := range e.namespaces {
			if s.Matches(l) {
				nss = append(nss, ns)
			}
		}
	}
	var out []*Pod
	for _, ns := range nss {
		for _, pod := range e.podsByNS[ns] {
			if pod.IP.IsValid() && !pod.HostNetwork && podSel.Matches(labels.Set(pod.Labels)) {
				out = append(out, pod)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out
}

// ipBlock returns the prefixes of b's CIDR minus its excepts.
func ipBlock(b *networkingv1.IPBlock) ([]netip.Prefix, error) {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return nil, fmt.Errorf("malformed CIDR %q", b.CIDR)
	}
	cidr = cidr.Masked()
	if !cidr.Addr().Is4() {
		return nil, nil // IPv6: nagare pods have no IPv6 address
	}
	out := []netip.Prefix{cidr}
	for _, x := range b.Except {
		ex, err := netip.ParsePrefix(x)
		if err != nil {
			return nil, fmt.Errorf("malformed except %q", x)
		}
		ex = ex.Masked()
		if ex.Addr().Is4() != cidr.Addr().Is4() || !cidr.Contains(ex.Addr()) || ex.Bits() < cidr.Bits() {
			return nil, fmt.Errorf("except %s is not inside %s", ex, cidr)
		}
		out = subtract(out, ex)
	}
	return out, nil
}

// subtract removes ex from the prefixes ps.
func subtract(ps []netip.Prefix, ex netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		switch {
		case ex.Bits() <= p.Bits() && ex.Contains(p.Addr()):
			// p lies inside ex: gone
		case p.Bits() < ex.Bits() && p.Contains(ex.Addr()):
			// split p down to ex: at each level keep the half without ex
			cur := p
			for cur.Bits() < ex.Bits() {
				lo, hi := halves(cur)
				if lo.Contains(ex.Addr()) {
					out = append(out, hi)
					cur = lo
				} else {
					out = append(out, lo)
					cur = hi
				}
			}
		default:
			out = append(out, p)
		}
	}
	return out
}

// halves splits p into its two prefixes one bit longer.
func halves(p netip.Prefix) (netip.Prefix, netip.Prefix) {
	bits := p.Bits() + 1
	lo := netip.PrefixFrom(p.Addr(), bits)
	a := p.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v |= 1 << (32 - bits)
	hi := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), bits)
	return lo, hi
}

func podAddrs(ps []*Pod) []netip.Addr {
	out := make([]netip.Addr, len(ps))
	for i, p := range ps {
		out[i] = p.IP
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}

func podPrefixes(ps []*Pod) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ps))
	for _, p := range ps {
		if p.IP.Is4() {
			out = append(out, netip.PrefixFrom(p.IP, 32))
		}
	}
	return out
}

// sortPrefixes sorts and removes duplicates and prefixes inside others.
func sortPrefixes(ps []netip.Prefix) []netip.Prefix {
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Bits() != ps[j].Bits() {
			return ps[i].Bits() < ps[j].Bits()
		}
		return ps[i].Addr().Less(ps[j].Addr())
	})
	var out []netip.Prefix
	for _, p := range ps {
		covered := false
		for _, q := range out {
			if q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Addr() != out[j].Addr() {
			return out[i].Addr().Less(out[j].Addr())
		}
		return out[i].Bits() < out[j].Bits()
	})
	return out
}

func sortPorts(rs []PortRange) []PortRange {
	rs = append([]PortRange(nil), rs...)
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].Proto != rs[j].Proto {
			return rs[i].Proto < rs[j].Proto
		}
		if rs[i].Min != rs[j].Min {
			return rs[i].Min < rs[j].Min
		}
		return rs[i].Max < rs[j].Max
	})
	var out []PortRange
	for _, r := range rs {
		if n := len(out); n > 0 && out[n-1] == r {
			continue
		}
		out = append(out, r)
	}
	return out
}

func portsKey(rs []PortRange) string {
	var b strings.Builder
	for i, r := range sortPorts(rs) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(r.String())
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
