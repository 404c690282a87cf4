package netpol

import "net/netip"

// Verdicts says what the pipeline built from a State does with a new
// connection, without the switch: the agent asks it of every tracked
// connection after policies change, and cuts those it would now drop
// (docs/agent.md, NetworkPolicy, connections established before a policy).
// It follows pkg/agent/pipeline/networkpolicy.go: egress is judged for a
// source that is an egress-isolated local pod, ingress for a destination
// that is an ingress-isolated local pod; a rule allows when the pod is
// one it applies to, the other end is one of its peers (IPv4) and the
// protocol and destination port one of its ports.
type Verdicts struct {
	isoIn, isoEg map[netip.Addr]bool
	in, eg       map[netip.Addr][]*Rule // rules by the local pod they apply to
}

// NewVerdicts indexes st (which must not change while v is used).
func NewVerdicts(st State) *Verdicts {
	v := &Verdicts{isoIn: map[netip.Addr]bool{}, isoEg: map[netip.Addr]bool{}, in: map[netip.Addr][]*Rule{}, eg: map[netip.Addr][]*Rule{}}
	for _, a := range st.IsolatedIngress {
		v.isoIn[a] = true
	}
	for _, a := range st.IsolatedEgress {
		v.isoEg[a] = true
	}
	for i := range st.Rules {
		r := &st.Rules[i]
		by := v.in
		if r.Direction == Egress {
			by = v.eg
		}
		for _, a := range r.AppliedTo {
			by[a] = append(by[a], r)
		}
	}
	return v
}

// Allows reports whether a new connection from src to dst (after DNAT)
// with protocol proto and destination port dport passes this node's
// policies in both directions.
func (v *Verdicts) Allows(src, dst netip.Addr, proto uint8, dport uint16) bool {
	if v.isoEg[src] && !anyAllows(v.eg[src], dst, proto, dport) {
		return false
	}
	if v.isoIn[dst] && !anyAllows(v.in[dst], src, proto, dport) {
		return false
	}
	return true
}

func anyAllows(rs []*Rule, peer netip.Addr, proto uint8, dport uint16) bool {
	for _, r := range rs {
		if r.allows(peer, proto, dport) {
			return true
		}
	}
	return false
}

// allows says whether r lets a new connection with peer at the other end through.
func (r *Rule) allows(peer netip.Addr, proto uint8, dport uint16) bool {
	if !r.AnyPeer {
		ok := false
		for _, p := range r.Peers {
			if p.Addr().Is4() && p.Contains(peer) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if r.AnyPort {
		return true
	}
	for _, pr := range r.Ports {
		if pr.Proto == proto && pr.Min <= dport && dport <= pr.Max {
			return true
		}
	}
	return false
}
