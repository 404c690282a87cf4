package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/nagare-net/nagare/pkg/agent/netpol"
	"github.com/nagare-net/nagare/pkg/agent/pipeline"
	"github.com/nagare-net/nagare/pkg/ctlproto"
)

// NetworkPolicy: the Kubernetes source feeds policies, namespaces and
// every pod of the cluster into a netpol.Engine (policyFeed wakes
// policyLoop on each change); policyLoop realizes what changed and the
// pipeline (pipeline/networkpolicy.go) programs the difference. A
// (re)connection's Sync carries the whole realized state, so a switch
// restart never leaves pods unprotected after the sync.

// policyCoalesce is how long policyLoop lets changes gather after the
// first: a namespace created with its pods, or a rollout, arrives as many
// events within milliseconds. Well under the 200 ms realization target.
const policyCoalesce = 10 * time.Millisecond

// policyFeed is the engine behind the source's PolicyHandler: every change
// wakes policyLoop. With Kubernetes it also holds what the API server does
// not know yet: the address of a pod this node has just attached. The API
// learns a pod's IP only when kubelet reports the sandbox, a moment after
// CNI ADD; policies that select the pod must hold from its first packet,
// so the ADD tells the feed (attach) and the pod is realized with the
// address the agent gave it (Antrea's agent does the same from its
// interface cache).
type policyFeed struct {
	*netpol.Engine
	kick chan struct{}

	mu    sync.Mutex
	known map[string]*netpol.Pod // the source's last word on each pod, address or not
	local map[string]netip.Addr  // pods attached on this node: namespace/name → address
	node  string
}

func newPolicyFeed(node string) *policyFeed {
	return &policyFeed{Engine: netpol.NewEngine(node), kick: make(chan struct{}, 1),
		known: map[string]*netpol.Pod{}, local: map[string]netip.Addr{}, node: node}
}

func (f *policyFeed) wake() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

func (f *policyFeed) SetPolicy(np *networkingv1.NetworkPolicy) { f.Engine.SetPolicy(np); f.wake() }
func (f *policyFeed) DeletePolicy(ns, name string)             { f.Engine.DeletePolicy(ns, name); f.wake() }

// SetPod takes the source's view of a pod; one without an address is
// selectable only if this node attached it (attach).
func (f *policyFeed) SetPod(p *netpol.Pod) {
	k := p.Namespace + "/" + p.Name
	f.mu.Lock()
	f.known[k] = p
	f.setLocked(k)
	f.mu.Unlock()
	f.wake()
}

func (f *policyFeed) DeletePod(ns, name string) {
	f.mu.Lock()
	delete(f.known, ns+"/"+name)
	f.mu.Unlock()
	f.Engine.DeletePod(ns, name)
	f.wake()
}

// setLocked gives the engine pod k as known, with the address this node
// gave it when the source has none yet.
func (f *policyFeed) setLocked(k string) {
	p := f.known[k]
	if p == nil {
		return
	}
	if !p.IP.IsValid() {
		ip, ok := f.local[k]
		if !ok {
			f.Engine.DeletePod(p.Namespace, p.Name)
			return
		}
		q := *p
		q.IP, q.Node = ip, f.node
		p = &q
	}
	f.Engine.SetPod(p)
}

// attach records the address of a pod this node attaches and says
// whether the source knows the pod (its labels) yet.
func (f *policyFeed) attach(ns, name string, ip netip.Addr) bool {
	k := ns + "/" + name
	f.mu.Lock()
	defer f.mu.Unlock()
	f.local[k] = ip
	f.setLocked(k)
	return f.known[k] != nil
}

// detach forgets a pod this node detached (the source's word stands).
func (f *policyFeed) detach(ns, name string) {
	k := ns + "/" + name
	f.mu.Lock()
	delete(f.local, k)
	f.setLocked(k)
	f.mu.Unlock()
	f.wake()
}

func (f *policyFeed) SetNamespace(name string, l map[string]string) {
	f.Engine.SetNamespace(name, l)
	f.wake()
}
func (f *policyFeed) DeleteNamespace(name string) { f.Engine.DeleteNamespace(name); f.wake() }

// startPolicies makes the engine and connects it to the Kubernetes
// source, or feeds it the cluster file's policies (the lab and the tests,
// without Kubernetes: feedClusterPolicies).
func (a *Agent) startPolicies() {
	a.policyReported = map[string]string{}
	switch {
	case a.cfg.Kube != nil:
		a.policies = newPolicyFeed(a.cfg.NodeName)
		a.policiesSynced = a.cfg.Kube.Synced()
		a.cfg.Kube.WatchPolicies(a.policies)
	case len(a.cfg.Cluster.NetworkPolicies) > 0:
		a.policies = newPolicyFeed(a.cfg.NodeName)
		synced := make(chan struct{})
		close(synced) // the file is the whole input, and the pods were loaded before
		a.policiesSynced = synced
		for i := range a.cfg.Cluster.NetworkPolicies {
			a.policies.SetPolicy(&a.cfg.Cluster.NetworkPolicies[i].NetworkPolicy)
		}
		a.feedClusterPolicies()
	}
}

// feedClusterPolicies gives the engine the pods attached on this node
// (with the cluster file's labels) and their namespaces, when the
// policies come from the cluster file. Only what changed since the last
// feed goes in: the engine marks the policies that look at every pod or
// namespace it is given, changed or not, and a pod's ADD feeds before its
// forwarding (enforceBeforeForwarding) and again after (podsChanged).
func (a *Agent) feedClusterPolicies() {
	if a.policies == nil || a.cfg.Kube != nil {
		return
	}
	a.filePolicyMu.Lock()
	defer a.filePolicyMu.Unlock()
	a.mu.Lock()
	var pods []netpol.Pod
	for _, p := range a.pods {
		ns, name, ok := strings.Cut(p.Pod, "/")
		if ok && p.IP.IsValid() {
			pods = append(pods, netpol.Pod{Namespace: ns, Name: name, IP: p.IP, Node: a.cfg.NodeName, Labels: a.cfg.Cluster.PodLabels[p.Pod]})
		}
	}
	a.mu.Unlock()
	if a.filePolicyPods == nil {
		a.filePolicyPods, a.filePolicyNS = map[string]netip.Addr{}, map[string]bool{}
	}
	setNS := func(ns string) {
		if !a.filePolicyNS[ns] {
			a.filePolicyNS[ns] = true
			a.policies.SetNamespace(ns, map[string]string{"kubernetes.io/metadata.name": ns})
		}
	}
	for i := range a.cfg.Cluster.NetworkPolicies {
		setNS(a.cfg.Cluster.NetworkPolicies[i].Namespace)
	}
	seen := make(map[string]netip.Addr, len(pods))
	for i := range pods {
		setNS(pods[i].Namespace)
		key := pods[i].Namespace + "/" + pods[i].Name
		seen[key] = pods[i].IP
		if ip, ok := a.filePolicyPods[key]; !ok || ip != pods[i].IP {
			a.policies.SetPod(&pods[i]) // labels are the file's, fixed for the agent's life
		}
	}
	for key := range a.filePolicyPods {
		if _, ok := seen[key]; !ok {
			ns, name, _ := strings.Cut(key, "/")
			a.policies.DeletePod(ns, name)
		}
	}
	a.filePolicyPods = seen
}

// policyLoop realizes and programs policy changes as they come.
func (a *Agent) policyLoop(ctx context.Context) {
	if a.policies == nil {
		return
	}
	// Nothing is programmed before the informers have synced: a partial
	// view (a policy before the pods it allows) would drop allowed
	// connections, and the pipeline keeps the switch's policy flows of a
	// previous run until the first full state replaces them.
	select {
	case <-ctx.Done():
		return
	case <-a.policiesSynced:
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.policies.kick:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(policyCoalesce):
		}
		a.realizePolicies(ctx)
	}
}

// realizePolicies realizes what changed and programs the difference: one
// caller at a time (policyLoop, and a pod's ADD before its forwarding).
func (a *Agent) realizePolicies(ctx context.Context) {
	a.policyMu.Lock()
	defer a.policyMu.Unlock()
	start := time.Now()
	st, problems, changed := a.policies.Realize()
	if !changed {
		// A (re)connection's Sync programmed the policies: cut
		// what they deny now (syncPolicies).
		if p := a.pendingCut.Swap(nil); p != nil {
			a.cutDeniedConnections(ctx, *p)
		}
		return
	}
	a.pendingCut.Store(nil)
	a.reportPolicyProblems(problems, a.policyReported)
	res, err := a.programPolicies(ctx, st)
	if err != nil {
		a.log.Warn("network policies: programming the switch failed (the next sync repairs it)", "err", err)
		return
	}
	took := time.Since(start)
	a.cutDeniedConnections(ctx, st)
	a.met.policyRealize.Observe(took.Seconds())
	a.met.policyRules.Set(float64(len(st.Rules)))
	if res.FlowsAdded+res.FlowsDeleted > 0 {
		a.log.Info("network policies changed", "rules", len(st.Rules), "isolated_ingress", len(st.IsolatedIngress),
			"isolated_egress", len(st.IsolatedEgress), "flows_added", res.FlowsAdded, "flows_deleted", res.FlowsDeleted, "took", took)
	}
}

// podPolicyWait bounds how long a pod's ADD waits for the policy input
// to be whole (the informers' first sync after an agent start).
const podPolicyWait = 10 * time.Second

// enforceBeforeForwarding programs the policies that concern a pod being
// attached before its forwarding flows go in, so that no packet reaches
// or leaves it unprotected by a policy the agent knows: Kubernetes allows
// a plugin to start a pod before its policies hold, and nagare does not.
// Until the policy input is whole (an agent just started) the ADD waits
// up to podPolicyWait, then attaches the pod and says it is unprotected
// until the policies are programmed.
func (a *Agent) enforceBeforeForwarding(ctx context.Context, rec *podRecord, log *slog.Logger) {
	if a.policies == nil {
		return
	}
	select {
	case <-a.policiesSynced:
	case <-ctx.Done():
		return
	case <-time.After(podPolicyWait):
		log.Warn("network policies: not known yet; the pod is attached without them until they are", "waited", podPolicyWait)
		return
	}
	if a.cfg.Kube != nil {
		ns, name, _ := strings.Cut(rec.Pod, "/")
		if !a.policies.attach(ns, name, rec.IP) {
			log.Warn("network policies: the pod is not in the API server's list yet; policies selecting it hold once it is")
		}
	} else {
		a.feedClusterPolicies()
	}
	a.realizePolicies(ctx)
}

// reportPolicyProblems reports each policy's problems once per change of them.
func (a *Agent) reportPolicyProblems(problems []netpol.Problem, reported map[string]string) {
	byPolicy := map[string][]netpol.Problem{}
	for _, p := range problems {
		byPolicy[p.Policy] = append(byPolicy[p.Policy], p)
	}
	for pol, ps := range byPolicy {
		var msgs []string
		for _, p := range ps {
			msgs = append(msgs, p.Msg)
		}
		joined := strings.Join(msgs, "\n")
		if reported[pol] == joined {
			continue
		}
		reported[pol] = joined
		for _, p := range ps {
			if a.cfg.Kube != nil {
				a.cfg.Kube.ReportPolicyProblem(p)
			} else {
				a.log.Warn("network policy problem", "policy", p.Policy, "problem", p.Msg)
			}
		}
	}
}

// programPolicies hands the realized state to the pipeline if the switch
// is connected (else the connection's Sync programs it), under swMu as
// programServices.
func (a *Agent) programPolicies(ctx context.Context, st netpol.State) (pipeline.PolicyResult, error) {
	a.swMu.Lock()
	defer a.swMu.Unlock()
	pl, err := a.connected()
	if err != nil {
		return pipeline.PolicyResult{}, nil
	}
	return pl.UpdatePolicies(ctx, st)
}

// syncPolicies gives a (re)connecting pipeline the whole realized state before its Sync.
func (a *Agent) syncPolicies() {
	if a.policies == nil {
		// No policy source (no Kubernetes, none in the cluster file): the
		// state is known, and empty.
		a.pl.SetPolicies(netpol.State{})
		return
	}
	select {
	case <-a.policiesSynced:
	default:
		return // not known yet: the Sync keeps the switch's policy flows
	}
	st, _, _ := a.policies.Realize()
	a.pl.SetPolicies(st)
	a.pendingCut.Store(&st)
	a.policies.wake()
}

// policyStatus fills st's policy rows: the programmed rules with their
// counters and the default-deny drops per pod.
func (a *Agent) policyStatus(ctx context.Context, st *Status, pl *pipeline.Pipeline, ready bool) {
	if pl == nil {
		return
	}
	counts := map[string]pipeline.PolicyCounter{}
	if ready {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		pcs, err := pl.PolicyCounters(tctx)
		cancel()
		if err == nil {
			for _, c := range pcs {
				if c.Drop != "" {
					dir, pod, _ := strings.Cut(c.Drop, " ")
					st.PolicyDrops = append(st.PolicyDrops, PolicyDropStatus{Pod: pod, Direction: dir, Cookie: c.Cookie, Packets: c.Packets, Bytes: c.Bytes})
					continue
				}
				counts[c.Rule] = c
			}
		}
	}
	for _, r := range pl.Policies() {
		rs := PolicyRuleStatus{Rule: r.Rule.ID, Direction: r.Rule.Direction.String(), ConjID: r.ConjID, Cookie: r.Cookie, Peers: "any", Ports: "any"}
		for _, p := range r.Rule.AppliedTo {
			rs.Pods = append(rs.Pods, p.String())
		}
		if !r.Rule.AnyPeer {
			var ps []string
			for _, p := range r.Rule.Peers {
				ps = append(ps, p.String())
			}
			rs.Peers = strings.Join(ps, ",")
		}
		if !r.Rule.AnyPort {
			var ps []string
			for _, p := range r.Rule.Ports {
				ps = append(ps, p.String())
			}
			rs.Ports = strings.Join(ps, ",")
		}
		if c, ok := counts[r.Rule.ID]; ok {
			rs.Packets, rs.Bytes = &c.Packets, &c.Bytes
		}
		st.Policies = append(st.Policies, rs)
	}
	if a.policies != nil {
		for _, p := range a.policies.Problems() {
			st.PolicyProblems = append(st.PolicyProblems, p.String())
		}
	}
}

// PolicyCookies names the policy flows of st by cookie, for nagarectl
// trace: a rule's allowing flows (its conj_id flow, or its applied-to
// flows) and each isolated pod's default deny in one direction.
func (st *Status) PolicyCookies() map[uint64]string {
	out := map[uint64]string{}
	applying := map[string][]string{} // "ingress 10.0.1.2" → rules applying to the pod
	for _, r := range st.Policies {
		out[r.Cookie] = fmt.Sprintf("allowed by rule %s of policy %s", r.Rule, policyOfRule(r.Rule))
		for _, p := range r.Pods {
			k := r.Direction + " " + p
			applying[k] = append(applying[k], r.Rule)
		}
	}
	for _, d := range st.PolicyDrops {
		s := fmt.Sprintf("dropped by policy: %s is isolated for %s and no rule allows this", d.Pod, d.Direction)
		if rs := applying[d.Direction+" "+d.Pod]; len(rs) > 0 {
			s += " (rules for it: " + strings.Join(rs, ", ") + ")"
		} else {
			s += " (no rule for it: a deny-all policy)"
		}
		out[d.Cookie] = s
	}
	return out
}

// policyOfRule is the namespace/name part of a rule ID (namespace/name/direction/index...).
func policyOfRule(id string) string {
	parts := strings.SplitN(id, "/", 3)
	if len(parts) < 3 {
		return id
	}
	return parts[0] + "/" + parts[1]
}

// cutDeniedConnections deletes from the switch's tracker (the node's
// zone) the connections st no longer allows, after st's flows are in: a
// connection established before a policy that forbids it is cut, as
// Cilium does and kube-network-policies' strict mode does. Its next
// packet finds no entry, is judged as a new connection and dropped by
// the policy; the server's packets, which the policy may allow as a new
// connection the other way, are dropped by a guard flow added first
// (pipeline/networkpolicy_cut.go). Each connection is judged as the
// pipeline judged its first packet: from the original source to the
// endpoint it reached (after DNAT, Reply.Src) on that port; the node's
// own connections (from the gateway address: kubelet probes) are never
// cut, as the pipeline always lets them in. A failure is logged: the
// connections then live until they end or time out, as they would
// without this.
func (a *Agent) cutDeniedConnections(ctx context.Context, st netpol.State) {
	zone := pipeline.CtZone
	resp, err := a.call(ctx, ctlproto.Request{Cmd: "conntrack", Zone: &zone})
	if err != nil {
		a.log.Warn("network policies: listing connections to cut the denied ones", "err", err)
		return
	}
	var conns []ctlproto.Conn
	if err := json.Unmarshal(resp.Data, &conns); err != nil {
		a.log.Warn("network policies: listing connections to cut the denied ones", "err", err)
		return
	}
	deny := deniedConnections(conns, netpol.NewVerdicts(st), a.node.Gateway())
	if len(deny) == 0 {
		return
	}
	guards := make([]pipeline.CutConnection, len(deny))
	tuples := make([]ctlproto.ConnTuple, len(deny))
	for i, c := range deny {
		guards[i] = pipeline.CutConnection{Proto: c.Reply.Proto,
			Server: netip.AddrPortFrom(c.Reply.Src, c.Reply.SrcPort), Client: netip.AddrPortFrom(c.Reply.Dst, c.Reply.DstPort)}
		tuples[i] = c.Orig
	}
	if err := a.guardCutConnections(ctx, guards); err != nil {
		a.log.Warn("network policies: guarding connections before cutting them (not cut)", "connections", len(deny), "err", err)
		return
	}
	resp, err = a.call(ctx, ctlproto.Request{Cmd: "conntrack-flush", Zone: &zone, Conns: tuples})
	if err != nil {
		a.log.Warn("network policies: cutting connections they now deny", "connections", len(deny), "err", err)
		return
	}
	a.met.policyCut.Add(float64(len(deny)))
	o := deny[0].Orig
	a.log.Info("network policies: cut established connections they now deny", "connections", len(deny),
		"first", fmt.Sprintf("%v:%d → %v:%d proto %d", o.Src, o.SrcPort, o.Dst, o.DstPort, o.Proto),
		"result", strings.Join(resp.Lines, "; "))
}

// guardCutConnections adds the guard flows under swMu, as programPolicies.
func (a *Agent) guardCutConnections(ctx context.Context, cs []pipeline.CutConnection) error {
	a.swMu.Lock()
	defer a.swMu.Unlock()
	pl, err := a.connected()
	if err != nil {
		return err
	}
	return pl.GuardCutConnections(ctx, cs)
}

// deniedConnections are the connections v denies.
func deniedConnections(conns []ctlproto.Conn, v *netpol.Verdicts, gateway netip.Addr) []ctlproto.Conn {
	var out []ctlproto.Conn
	for _, c := range conns {
		src, dst := c.Orig.Src, c.Reply.Src
		if !src.Is4() || src == gateway {
			continue
		}
		port := c.Reply.SrcPort
		if c.Orig.Proto == 1 {
			port = 0 // ICMP: the id, not a port
		}
		if !v.Allows(src, dst, c.Orig.Proto, port) {
			out = append(out, c)
		}
	}
	return out
}
