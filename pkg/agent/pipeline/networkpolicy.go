package pipeline

import (
	"context"
	"fmt"
	"net/netip"
	"sort"

	"github.com/nagare-net/nagare/pkg/agent/netpol"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// NetworkPolicy, as Antrea's pipeline enforces it: every IPv4 packet
// passes the policy stage after the Service stage (so a Service
// connection is judged by its endpoint, after DNAT) and before routing.
// Only new connections are judged: established and related packets
// (ct_state +est, +rel; replies are +est) pass at the stage's top. Egress
// is enforced at the source pod's node, ingress at the destination pod's;
// a pod-to-pod connection on one node passes both in one walk.
//
//	EgressRule      ip, +est+trk / +rel+trk → L3Forwarding (skip the stage)
//	                rule with applied-to only: in a local pod, nw_src=pod → IngressRule
//	                clauses (applied-to × peers × ports):
//	                  from a pod, nw_src=pod          → conjunction(id,1/n)
//	                  nw_dst=peer prefix              → conjunction(id,2/n)
//	                  ip_proto, tp_dst=port           → conjunction(id,n/n)
//	                conj_id=id (rule's cookie)        → IngressRule
//	                else → EgressDefault
//	EgressDefault   from a pod, nw_src=egress-isolated pod → drop
//	                else → IngressRule
//	IngressRule     from the gateway, nw_src=gateway address → ConntrackCommit
//	                (the node's own traffic: kubelet probes)
//	                rule with applied-to only: nw_dst=pod → ConntrackCommit
//	                clauses: nw_dst=pod, nw_src=peer, ports as above
//	                conj_id=id → ConntrackCommit
//	                else → IngressDefault
//	IngressDefault  nw_dst=ingress-isolated pod → drop
//	                else → ConntrackCommit
//	ConntrackCommit +new+trk-dnat → ct(commit, zone=CtZone, nat), goto L3Forwarding (no recirculation)
//
// N peers × M ports × P pods cost N+M+P flows, not their product: a rule
// is a conjunctive match (OVS's conjunction(id,k/n), conj_id). Clause
// flows with the same match (the same pod in two rules) are one flow
// carrying both rules' conjunction actions. A rule's conj_id flow carries
// the rule's cookie, so its counters are the rule's: the new connections
// it allowed. A drop flow's counters are the connections policy dropped
// for that pod and direction; its note (openflow.DropNote) makes the fast
// path count them under the drop reason policy, per port.
//
// Commit: a connection is committed once, in the node's zone: at
// EndpointDNAT for a Service connection (the translation must be
// committed to apply; if policy then drops the packet the entry stays
// unreplied, as in Antrea, and a retransmission is judged again because
// it is still +new), else at ConntrackCommit, after policy: a connection
// policy dropped leaves no entry, so nothing that looks like its reply
// passes as +est.
//
// Connections established before a policy that forbids them: their
// packets are +est and pass; they are not cut (Antrea and Cilium cut
// them). See docs/agent.md, NetworkPolicy.

// Priorities in the policy tables.
const (
	prioPolicyPass  = 250 // established/related: skip the stage
	prioPolicyNode  = 240 // the node's own traffic to its pods
	prioPolicyAllow = 210 // a rule that is its applied-to alone (any peer, any port)
	prioPolicyConj  = 200 // conjunction clauses and conj_id flows
)

// PolicyRule is what the pipeline programmed for one realized rule.
type PolicyRule struct {
	Rule   netpol.Rule
	Cookie uint64
	ConjID uint32 // 0: no conjunction (applied-to alone)
}

// programmedPolicies is what the pipeline installed for every policy,
// kept so that a change costs what it touches: each owner (a realized
// rule, or one pod's default deny in one direction) remembers the flows it
// contributes, and each flow (by table, priority and match) the owners
// contributing to it. A clause flow shared by many rules (an ipBlock, a
// port) is one flow whose conjunction actions are its owners'.
type programmedPolicies struct {
	owners map[string]*policyOwner      // by rule ID, or "isolated/<dir>/<pod>"
	merged map[string]*mergedPolicyFlow // by flowID
	drops  map[uint64]string            // drop flow cookie → "ingress 10.0.1.2"
	// isolated are the local pods isolated in either direction.
	isolated map[netip.Addr]bool
}

// policyOwner is one owner's part of the policy flows.
type policyOwner struct {
	print    string // what it was built from: the rule's Gen, or its content
	rule     *PolicyRule
	contribs []policyContribution
}

// policyContribution is one flow an owner wants: the flow itself, or (conj
// set) its conjunction action on a clause flow.
type policyContribution struct {
	id   string
	f    *openflow.FlowMod
	conj *openflow.ActionNXConjunction
}

// mergedPolicyFlow is one policy flow as sent, and who wants it.
type mergedPolicyFlow struct {
	f     *openflow.FlowMod
	value string
	by    map[string]policyContribution
}

func newProgrammedPolicies() *programmedPolicies {
	return &programmedPolicies{owners: map[string]*policyOwner{}, merged: map[string]*mergedPolicyFlow{}, drops: map[uint64]string{}}
}

// policyNodeFlows are the node-wide flows of the policy stage.
func policyNodeFlows(c uint64, n Node) []*openflow.FlowMod {
	ip := ethType(etherIPv4)
	fs := []*openflow.FlowMod{
		flow(TableEgressRule, prioPolicyPass, c, match(ip, openflow.CtState(openflow.CtStateEst|openflow.CtStateTrk, openflow.CtStateEst|openflow.CtStateTrk)),
			gotoTable(TableL3)),
		flow(TableEgressRule, prioPolicyPass, c, match(ip, openflow.CtState(openflow.CtStateRel|openflow.CtStateTrk, openflow.CtStateRel|openflow.CtStateTrk)),
			gotoTable(TableL3)),
	}
	if n.GatewayIP.IsValid() {
		fs = append(fs, ingressFromNode(c, n))
	}
	return fs
}

// ingressFromNode passes the node's own new connections to local pods (kubelet probes), as Antrea and Cilium do.
func ingressFromNode(c uint64, n Node) *openflow.FlowMod {
	return flow(TableIngressRule, prioPolicyNode, c, match(source(metaFromGateway), ethType(etherIPv4), openflow.Addr(openflow.FieldIPv4Src, n.GatewayIP)),
		gotoTable(TableCtCommit))
}

// policyObject is a realized rule's cookie.
func policyObject(ruleID string) uint64 { return objectID(cookiePolicy, ruleID) }

// policyDropObject is the cookie of one pod's default-deny flow in one direction.
func policyDropObject(dir netpol.Direction, a netip.Addr) uint64 {
	return objectID(cookiePolicy, "isolated/"+dir.String()+"/"+a.String())
}

// conjIDs keeps a rule's conjunction id while the rule exists.
type conjIDs struct {
	byRule map[string]uint32
	used   map[uint32]bool
	next   uint32
}

func (c *conjIDs) get(rule string) uint32 {
	if c.byRule == nil {
		c.byRule, c.used = map[string]uint32{}, map[uint32]bool{}
	}
	if id, ok := c.byRule[rule]; ok {
		return id
	}
	for {
		c.next++
		if c.next != 0 && !c.used[c.next] {
			break
		}
	}
	c.byRule[rule], c.used[c.next] = c.next, true
	return c.next
}

// keep releases the ids of rules not in live.
func (c *conjIDs) keep(live map[string]bool) {
	for r, id := range c.byRule {
		if !live[r] {
			delete(c.byRule, r)
			delete(c.used, id)
		}
	}
}

// ruleFlows are the flows (or clause contributions) of one realized rule.
func (p *Pipeline) ruleFlows(r netpol.Rule) (*PolicyRule, []policyContribution) {
	c := policyObject(r.ID)
	table, next := TableIngressRule, TableCtCommit
	if r.Direction == netpol.Egress {
		table, next = TableEgressRule, TableIngressRule
	}
	var dims [][]openflow.Match
	dims = append(dims, appliedMatches(r))
	if pm := peerMatches(r); pm != nil {
		dims = append(dims, pm)
	}
	if pm := portMatches(r); pm != nil {
		dims = append(dims, pm)
	}
	var out []policyContribution
	add := func(f *openflow.FlowMod, conj *openflow.ActionNXConjunction) {
		out = append(out, policyContribution{id: flowID(f.TableID, f.Priority, f.Match), f: f, conj: conj})
	}
	if len(dims) == 1 {
		for _, m := range dims[0] {
			add(flow(table, prioPolicyAllow, c, m, gotoTable(next)), nil)
		}
		return &PolicyRule{Rule: r, Cookie: c}, out
	}
	id := p.conjIDs.get(r.ID)
	for k, ms := range dims {
		for _, m := range ms {
			add(flow(table, prioPolicyConj, c, m), &openflow.ActionNXConjunction{ID: id, Clause: uint8(k + 1), NClauses: uint8(len(dims))})
		}
	}
	add(flow(table, prioPolicyConj, c, match(ethType(etherIPv4), openflow.NXUint(openflow.NXMConjID, uint64(id))), gotoTable(next)), nil)
	return &PolicyRule{Rule: r, Cookie: c, ConjID: id}, out
}

// isolationFlow is one pod's default deny in one direction.
func isolationFlow(dir netpol.Direction, a netip.Addr) policyContribution {
	c := policyDropObject(dir, a)
	// The note makes the switch count the drop as a policy drop, per
	// port (openflow.DropNote); to OVS it is a comment.
	deny := apply(openflow.DropNote("policy"))
	var f *openflow.FlowMod
	if dir == netpol.Egress {
		f = flow(TableEgressDefault, prioSpecific, c, match(source(metaFromPod), ethType(etherIPv4), openflow.Addr(openflow.FieldIPv4Src, a)), deny)
	} else {
		f = flow(TableIngressDefault, prioSpecific, c, match(ethType(etherIPv4), openflow.Addr(openflow.FieldIPv4Dst, a)), deny)
	}
	return policyContribution{id: flowID(f.TableID, f.Priority, f.Match), f: f}
}

// rulePrint says what a rule's flows were built from: its Gen when the
// engine set one, else its content.
func rulePrint(r netpol.Rule) string {
	if r.Gen != 0 {
		return fmt.Sprint("gen ", r.Gen)
	}
	return fmt.Sprintf("%+v", r)
}

// update makes pp hold st's flows and returns the flows that are new or
// changed and those no owner wants any more. Only the owners whose rule
// changed (or appeared, or went) are rebuilt, and only the flows they
// touch are compared.
func (p *Pipeline) updatePolicies(pp *programmedPolicies, st netpol.State) (changed, deleted []*openflow.FlowMod) {
	type want struct {
		print string
		rule  *netpol.Rule
		iso   netpol.Direction
		addr  netip.Addr
	}
	wants := make(map[string]want, len(st.Rules)+len(st.IsolatedIngress)+len(st.IsolatedEgress))
	live := map[string]bool{}
	for i := range st.Rules {
		r := &st.Rules[i]
		if len(r.AppliedTo) == 0 {
			continue
		}
		wants[r.ID] = want{print: rulePrint(*r), rule: r}
		live[r.ID] = true
	}
	for _, iso := range []struct {
		dir   netpol.Direction
		addrs []netip.Addr
	}{{netpol.Egress, st.IsolatedEgress}, {netpol.Ingress, st.IsolatedIngress}} {
		for _, a := range iso.addrs {
			wants["isolated/"+iso.dir.String()+"/"+a.String()] = want{print: "isolated", iso: iso.dir, addr: a}
		}
	}
	pp.isolated = map[netip.Addr]bool{}
	for _, a := range st.IsolatedIngress {
		pp.isolated[a] = true
	}
	for _, a := range st.IsolatedEgress {
		pp.isolated[a] = true
	}
	dirty := map[string]*mergedPolicyFlow{}
	for key, o := range pp.owners {
		if w, ok := wants[key]; ok && w.print == o.print {
			continue
		}
		for _, c := range o.contribs {
			m := pp.merged[c.id]
			delete(m.by, key)
			dirty[c.id] = m
		}
		delete(pp.owners, key)
	}
	p.conjIDs.keep(live)
	keys := make([]string, 0, len(wants))
	for key := range wants {
		if _, ok := pp.owners[key]; !ok {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys) // conjunction ids in rule order: the same state programs the same flows
	for _, key := range keys {
		w := wants[key]
		o := &policyOwner{print: w.print}
		if w.rule != nil {
			o.rule, o.contribs = p.ruleFlows(*w.rule)
		} else {
			c := isolationFlow(w.iso, w.addr)
			o.contribs = []policyContribution{c}
			pp.drops[c.f.Cookie] = w.iso.String() + " " + w.addr.String()
		}
		pp.owners[key] = o
		for _, c := range o.contribs {
			m := pp.merged[c.id]
			if m == nil {
				m = &mergedPolicyFlow{by: map[string]policyContribution{}}
				pp.merged[c.id] = m
			}
			m.by[key] = c
			dirty[c.id] = m
		}
	}
	for id, m := range dirty {
		if len(m.by) == 0 {
			if m.f != nil {
				deleted = append(deleted, m.f)
				if m.f.TableID == TableEgressDefault.ID || m.f.TableID == TableIngressDefault.ID {
					delete(pp.drops, m.f.Cookie)
				}
			}
			delete(pp.merged, id)
			continue
		}
		f := mergeFlow(m.by)
		v := flowValue(f.Cookie, f.Instructions)
		if m.f == nil || v != m.value {
			changed = append(changed, f)
		}
		m.f, m.value = f, v
	}
	sort.Slice(changed, func(i, j int) bool { return flowLess(changed[i], changed[j]) })
	sort.Slice(deleted, func(i, j int) bool { return flowLess(deleted[i], deleted[j]) })
	return changed, deleted
}

// mergeFlow is the flow its owners want: the first owner's (by key) flow
// and cookie, with every owner's conjunction action if it is a clause.
func mergeFlow(by map[string]policyContribution) *openflow.FlowMod {
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	first := by[keys[0]]
	if first.conj == nil {
		return first.f
	}
	f := *first.f
	as := make([]openflow.Action, 0, len(keys))
	for _, k := range keys {
		if c := by[k].conj; c != nil {
			as = append(as, *c)
		}
	}
	f.Instructions = []openflow.Instruction{apply(as...)}
	return &f
}

func flowLess(a, b *openflow.FlowMod) bool {
	return flowID(a.TableID, a.Priority, a.Match) < flowID(b.TableID, b.Priority, b.Match)
}

// flows are pp's flows, in flowID order.
func (pp *programmedPolicies) flows() []*openflow.FlowMod {
	ids := make([]string, 0, len(pp.merged))
	for id := range pp.merged {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([]*openflow.FlowMod, len(ids))
	for i, id := range ids {
		out[i] = pp.merged[id].f
	}
	return out
}

// rules are pp's programmed rules, by rule ID.
func (pp *programmedPolicies) rules() []PolicyRule {
	var out []PolicyRule
	for _, o := range pp.owners {
		if o.rule != nil {
			out = append(out, *o.rule)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rule.ID < out[j].Rule.ID })
	return out
}

// appliedMatches are the rule's local pods: sources (egress, from their own port) or destinations (ingress).
func appliedMatches(r netpol.Rule) []openflow.Match {
	out := make([]openflow.Match, 0, len(r.AppliedTo))
	for _, a := range r.AppliedTo {
		if r.Direction == netpol.Egress {
			out = append(out, match(source(metaFromPod), ethType(etherIPv4), openflow.Addr(openflow.FieldIPv4Src, a)))
		} else {
			out = append(out, match(ethType(etherIPv4), openflow.Addr(openflow.FieldIPv4Dst, a)))
		}
	}
	return out
}

// peerMatches are the rule's peer prefixes (nil: any peer). A rule with
// no IPv4 peer gets an empty, non-nil list: a clause no packet matches,
// so the rule allows nothing (never any peer).
func peerMatches(r netpol.Rule) []openflow.Match {
	if r.AnyPeer {
		return nil
	}
	field := openflow.FieldIPv4Src
	if r.Direction == netpol.Egress {
		field = openflow.FieldIPv4Dst
	}
	out := []openflow.Match{}
	for _, p := range r.Peers {
		if !p.Addr().Is4() {
			continue
		}
		if p.Bits() == 0 {
			return nil // 0.0.0.0/0: any peer
		}
		if p.IsSingleIP() {
			out = append(out, match(ethType(etherIPv4), openflow.Addr(field, p.Addr())))
		} else {
			out = append(out, match(ethType(etherIPv4), openflow.Prefix(field, p)))
		}
	}
	return out
}

// portMatches are the rule's protocols and ports (nil: any; empty,
// non-nil: none, as peerMatches).
func portMatches(r netpol.Rule) []openflow.Match {
	if r.AnyPort {
		return nil
	}
	out := []openflow.Match{}
	for _, pr := range r.Ports {
		proto := openflow.Uint(openflow.FieldIPProto, uint64(pr.Proto))
		if pr.Min == 0 && pr.Max == 65535 {
			out = append(out, match(ethType(etherIPv4), proto))
			continue
		}
		// One flow per port: OpenFlow 1.3's tcp_dst is not maskable and
		// nagare-switch takes no masked transport port yet (OVS does), so
		// a range costs its width (netpol caps it at MaxPortRange).
		for port := uint32(pr.Min); port <= uint32(pr.Max); port++ {
			out = append(out, match(ethType(etherIPv4), proto, openflow.Uint(tpDstField(pr.Proto), uint64(port))))
		}
	}
	return out
}

// SetPolicies replaces the realized policies without touching the
// switch (the agent's full state at a switch (re)connection); Sync
// applies them.
func (p *Pipeline) SetPolicies(st netpol.State) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.policies == nil {
		p.policies = newProgrammedPolicies()
	}
	p.updatePolicies(p.policies, st)
}

// PolicyResult says what UpdatePolicies sent.
type PolicyResult struct {
	FlowsAdded, FlowsDeleted int
}

// UpdatePolicies programs st and waits for the switch (one barrier):
// only the flows that differ from what is installed are sent, deletes
// (strict) before adds. An add replaces a flow with the same match, so a
// clause flow gaining a rule is never absent. In one batch behind one
// barrier, no order opens anything: a conj_id flow allows nothing until
// all its clauses are in, and a missing clause or a drop flow added first
// only denies, briefly.
func (p *Pipeline) UpdatePolicies(ctx context.Context, st netpol.State) (PolicyResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	first := p.policies == nil
	if first {
		p.policies = newProgrammedPolicies()
	}
	changed, deleted := p.updatePolicies(p.policies, st)
	if first {
		// The switch may hold a previous run's policy flows (Sync left
		// them): those st does not want go now, with st's in one batch.
		have, err := p.conn.DumpFlows(ctx, &openflow.FlowStatsRequest{TableID: openflow.TableAll, OutPort: openflow.PortAny,
			OutGroup: openflow.GroupAny, Cookie: cookiePolicy, CookieMask: cookieFeature})
		if err != nil {
			p.policies = nil
			return PolicyResult{}, fmt.Errorf("dump policy flows: %w", err)
		}
		for _, h := range have {
			if _, ok := p.policies.merged[flowID(h.TableID, h.Priority, h.Match)]; !ok {
				deleted = append(deleted, &openflow.FlowMod{TableID: h.TableID, Priority: h.Priority, Match: h.Match})
			}
		}
	}
	// The one pass's tracked addresses go in first and out last
	// (conntrack_onepass.go): a pod is tracked before it is isolated.
	opAdds, opDels := p.onePassChangesLocked()
	msgs := make([]openflow.Message, 0, len(opAdds)+len(changed)+len(deleted)+len(opDels))
	msgs = append(msgs, opAdds...)
	for _, f := range deleted {
		msgs = append(msgs, deleteStrict(f))
	}
	for _, f := range changed {
		msgs = append(msgs, f)
	}
	msgs = append(msgs, opDels...)
	return PolicyResult{FlowsAdded: len(changed), FlowsDeleted: len(deleted)}, p.send(ctx, msgs)
}

// Policies returns the programmed rules, sorted by rule ID.
func (p *Pipeline) Policies() []PolicyRule {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.policies == nil {
		return nil
	}
	return p.policies.rules()
}

// PolicyCounter is one rule's or one pod's default deny's counters.
type PolicyCounter struct {
	Rule      string `json:"rule,omitempty"` // realized rule ID; empty for a drop
	Drop      string `json:"drop,omitempty"` // "ingress 10.0.1.2": the pod's default-deny drops
	Direction string `json:"direction"`
	Cookie    uint64 `json:"cookie"` // the drop flow's (a drop's only)
	Packets   uint64 `json:"packets"`
	Bytes     uint64 `json:"bytes"`
}

// PolicyCounters reads the switch's counters of every rule's allowing
// flows (its conj_id flow, or its applied-to flows) and every pod's
// default-deny flow. Only new connections reach these flows, so a rule's
// packets are the new connections (and their retransmissions) it allowed.
func (p *Pipeline) PolicyCounters(ctx context.Context) ([]PolicyCounter, error) {
	p.mu.Lock()
	c := p.conn
	rules := map[uint64]PolicyRule{}
	drops := map[uint64]string{}
	if p.policies != nil {
		for _, r := range p.policies.rules() {
			rules[r.Cookie] = r
		}
		for k, v := range p.policies.drops {
			drops[k] = v
		}
	}
	p.mu.Unlock()
	fs, err := c.DumpFlows(ctx, &openflow.FlowStatsRequest{TableID: openflow.TableAll, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny,
		Cookie: cookiePolicy, CookieMask: cookieFeature})
	if err != nil {
		return nil, err
	}
	byRule := map[string]*PolicyCounter{}
	var out []*PolicyCounter
	for _, f := range fs {
		if d, ok := drops[f.Cookie]; ok {
			dir := "ingress"
			if f.TableID == TableEgressDefault.ID {
				dir = "egress"
			}
			out = append(out, &PolicyCounter{Drop: d, Direction: dir, Cookie: f.Cookie, Packets: f.PacketCount, Bytes: f.ByteCount})
			continue
		}
		r, ok := rules[f.Cookie]
		if !ok {
			continue
		}
		if r.ConjID != 0 && !isConjIDFlow(f.Match) {
			continue // a clause flow: its counts are any rule's candidates
		}
		pc := byRule[r.Rule.ID]
		if pc == nil {
			pc = &PolicyCounter{Rule: r.Rule.ID, Direction: r.Rule.Direction.String()}
			byRule[r.Rule.ID] = pc
			out = append(out, pc)
		}
		pc.Packets += f.PacketCount
		pc.Bytes += f.ByteCount
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Rule != out[j].Rule {
			return out[i].Rule < out[j].Rule
		}
		return out[i].Drop < out[j].Drop
	})
	res := make([]PolicyCounter, len(out))
	for i, x := range out {
		res[i] = *x
	}
	return res, nil
}

// isConjIDFlow says whether m is a conj_id flow's match.
func isConjIDFlow(m openflow.Match) bool {
	for _, o := range m.Fields {
		if o.Class == openflow.ClassNXM1 && o.Field == openflow.NXMConjID {
			return true
		}
	}
	return false
}

// String is a one-line summary of a rule for logs and nagarectl.
func (r PolicyRule) String() string {
	peers := fmt.Sprint(r.Rule.Peers)
	if r.Rule.AnyPeer {
		peers = "any"
	}
	ports := fmt.Sprint(r.Rule.Ports)
	if r.Rule.AnyPort {
		ports = "any"
	}
	return fmt.Sprintf("%s conj=%d pods=%v peers=%s ports=%s", r.Rule.ID, r.ConjID, r.Rule.AppliedTo, peers, ports)
}
