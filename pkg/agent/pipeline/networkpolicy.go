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
//	ConntrackCommit +new+trk-dnat → ct(commit, zone=CtZone, table=L3Forwarding)
//
// N peers × M ports × P pods cost N+M+P flows, not their product: a rule
// is a conjunctive match (OVS's conjunction(id,k/n), conj_id). Clause
// flows with the same match (the same pod in two rules) are one flow
// carrying both rules' conjunction actions. A rule's conj_id flow carries
// the rule's cookie, so its counters are the rule's: the new connections
// it allowed. A drop flow's counters are the connections policy dropped
// for that pod and direction (the fast path counts them as action-drop;
// `nagarectl agent policies` names them policy drops).
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

// programmedPolicies is what the pipeline installed for every policy.
type programmedPolicies struct {
	state  netpol.State
	flows  []*openflow.FlowMod
	values map[string]string // flowID → flowValue
	rules  []PolicyRule
	drops  map[uint64]string // drop flow cookie → "ingress 10.0.1.2"
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

// policyFlows builds every flow of st (rules and default deny), merging
// clause flows with equal matches.
func (p *Pipeline) policyFlows(st netpol.State) *programmedPolicies {
	pp := &programmedPolicies{state: st, values: map[string]string{}, drops: map[uint64]string{}}
	byID := map[string]*openflow.FlowMod{}
	add := func(f *openflow.FlowMod) {
		id := flowID(f.TableID, f.Priority, f.Match)
		if old, ok := byID[id]; ok {
			// Another rule's clause with the same match: one flow, both conjunctions.
			if conj, isConj := conjActions(f); isConj {
				if have, ok := conjActions(old); ok {
					old.Instructions = []openflow.Instruction{apply(append(have, conj...)...)}
				}
			}
			return
		}
		byID[id] = f
		pp.flows = append(pp.flows, f)
	}
	live := map[string]bool{}
	for _, r := range st.Rules {
		if len(r.AppliedTo) == 0 {
			continue
		}
		live[r.ID] = true
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
		if len(dims) == 1 {
			for _, m := range dims[0] {
				add(flow(table, prioPolicyAllow, c, m, gotoTable(next)))
			}
			pp.rules = append(pp.rules, PolicyRule{Rule: r, Cookie: c})
			continue
		}
		id := p.conjIDs.get(r.ID)
		for k, ms := range dims {
			for _, m := range ms {
				add(flow(table, prioPolicyConj, c, m,
					apply(openflow.ActionNXConjunction{ID: id, Clause: uint8(k + 1), NClauses: uint8(len(dims))})))
			}
		}
		add(flow(table, prioPolicyConj, c, match(ethType(etherIPv4), openflow.NXUint(openflow.NXMConjID, uint64(id))), gotoTable(next)))
		pp.rules = append(pp.rules, PolicyRule{Rule: r, Cookie: c, ConjID: id})
	}
	p.conjIDs.keep(live)
	for _, a := range st.IsolatedEgress {
		c := policyDropObject(netpol.Egress, a)
		pp.drops[c] = "egress " + a.String()
		add(flow(TableEgressDefault, prioSpecific, c, match(source(metaFromPod), ethType(etherIPv4), openflow.Addr(openflow.FieldIPv4Src, a))))
	}
	for _, a := range st.IsolatedIngress {
		c := policyDropObject(netpol.Ingress, a)
		pp.drops[c] = "ingress " + a.String()
		add(flow(TableIngressDefault, prioSpecific, c, match(ethType(etherIPv4), openflow.Addr(openflow.FieldIPv4Dst, a))))
	}
	for _, f := range pp.flows {
		pp.values[flowID(f.TableID, f.Priority, f.Match)] = flowValue(f.Cookie, f.Instructions)
	}
	return pp
}

// conjActions returns f's actions if they are all conjunction actions.
func conjActions(f *openflow.FlowMod) ([]openflow.Action, bool) {
	if len(f.Instructions) != 1 {
		return nil, false
	}
	a, ok := f.Instructions[0].(openflow.InstApplyActions)
	if !ok || len(a.Actions) == 0 {
		return nil, false
	}
	for _, x := range a.Actions {
		if _, ok := x.(openflow.ActionNXConjunction); !ok {
			return nil, false
		}
	}
	return append([]openflow.Action(nil), a.Actions...), true
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

// peerMatches are the rule's peer prefixes (nil: any peer).
func peerMatches(r netpol.Rule) []openflow.Match {
	if r.AnyPeer {
		return nil
	}
	field := openflow.FieldIPv4Src
	if r.Direction == netpol.Egress {
		field = openflow.FieldIPv4Dst
	}
	var out []openflow.Match
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

// portMatches are the rule's protocols and ports (nil: any).
func portMatches(r netpol.Rule) []openflow.Match {
	if r.AnyPort {
		return nil
	}
	var out []openflow.Match
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
	p.policies = p.policyFlows(st)
}

// PolicyResult says what UpdatePolicies sent.
type PolicyResult struct {
	FlowsAdded, FlowsDeleted int
}

// UpdatePolicies programs st and waits for the switch (one barrier):
// only the flows that differ from what is installed are sent, deletes
// (strict) before adds. An add replaces a flow with the same match, so
// a clause flow gaining a rule is never absent.
func (p *Pipeline) UpdatePolicies(ctx context.Context, st netpol.State) (PolicyResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.policyFlows(st)
	old := p.policies
	var res PolicyResult
	var msgs []openflow.Message
	if old != nil {
		for _, f := range old.flows {
			if _, ok := now.values[flowID(f.TableID, f.Priority, f.Match)]; !ok {
				msgs = append(msgs, deleteStrict(f))
				res.FlowsDeleted++
			}
		}
	}
	for _, f := range now.flows {
		id := flowID(f.TableID, f.Priority, f.Match)
		if old != nil && old.values[id] == now.values[id] {
			continue
		}
		msgs = append(msgs, f)
		res.FlowsAdded++
	}
	// In one batch behind one barrier. No order opens anything: a
	// conj_id flow allows nothing until all its clauses are in, and a
	// missing clause or a drop flow added first only denies, briefly.
	p.policies = now
	return res, p.send(ctx, msgs)
}

// Policies returns the programmed rules, sorted by rule ID.
func (p *Pipeline) Policies() []PolicyRule {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.policies == nil {
		return nil
	}
	return append([]PolicyRule(nil), p.policies.rules...)
}

// PolicyCounter is one rule's or one pod's default deny's counters.
type PolicyCounter struct {
	Rule      string `json:"rule,omitempty"` // realized rule ID; empty for a drop
	Drop      string `json:"drop,omitempty"` // "ingress 10.0.1.2": the pod's default-deny drops
	Direction string `json:"direction"`
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
		for _, r := range p.policies.rules {
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
			out = append(out, &PolicyCounter{Drop: d, Direction: dir, Packets: f.PacketCount, Bytes: f.ByteCount})
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
