package lab

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/nagare-net/nagare/pkg/agent/netpol"
)

// NetworkPolicy on the Linux bridge peer: the same realized policies
// (netpol.State, what nagare's agent programs as flows) written as an
// nftables ruleset, so that a netpol benchmark
// compares nagare with the bridge plus a real firewall expressing the
// same rules. The table is of the ip family: bridged packets reach its
// forward hook through br_netfilter (built in and on in every namespace
// of the lab's kernel, as for the kube-proxy planes), with the kernel's
// conntrack; this kernel has no bridge-family conntrack
// (CONFIG_NF_CONNTRACK_BRIDGE). It mirrors pkg/agent/pipeline/networkpolicy.go:
//
//	forward: established/related accept (only new connections are judged)
//	         source an egress-isolated pod → its egress chain (return: allowed)
//	         the node's gateway address → accept (kubelet probes)
//	         destination an ingress-isolated pod → its ingress chain (accept: allowed)
//	         else accept
//	egress chain of pod A:  per rule applied to A: peers × ports → return; else drop
//	ingress chain of pod B: per rule applied to B: peers × ports → accept; else drop
//
// Pods are found by verdict maps (one lookup, whatever the number of
// pods), each rule's peers and ports by anonymous sets (nftables' interval
// sets): the nftables way of writing N peers × M ports as N+M elements,
// as nagare's conjunctions do.

// NftPolicyRuleset returns the nftables ruleset (for nft -f) enforcing
// st in the ip-family table named table; gateway, when valid, is let
// in to every pod.
func NftPolicyRuleset(st netpol.State, table string, gateway netip.Addr) string {
	var b strings.Builder
	fmt.Fprintf(&b, "table ip %s {\n", table)
	chains := map[string][]string{}
	byPod := func(dir netpol.Direction, a netip.Addr) string {
		return fmt.Sprintf("%s_%s", map[netpol.Direction]string{netpol.Ingress: "in", netpol.Egress: "eg"}[dir], strings.ReplaceAll(a.String(), ".", "_"))
	}
	for _, r := range st.Rules {
		verdict := "accept"
		if r.Direction == netpol.Egress {
			verdict = "return"
		}
		for _, line := range nftRuleLines(r, verdict) {
			for _, a := range r.AppliedTo {
				c := byPod(r.Direction, a)
				chains[c] = append(chains[c], line)
			}
		}
	}
	vmap := func(dir netpol.Direction, as []netip.Addr) string {
		var es []string
		for _, a := range as {
			es = append(es, fmt.Sprintf("%s : jump %s", a, byPod(dir, a)))
			if _, ok := chains[byPod(dir, a)]; !ok {
				chains[byPod(dir, a)] = nil
			}
		}
		return "{ " + strings.Join(es, ", ") + " }"
	}
	b.WriteString("\tchain forward {\n\t\ttype filter hook forward priority 0; policy accept;\n")
	b.WriteString("\t\tct state established,related accept\n")
	if len(st.IsolatedEgress) > 0 {
		fmt.Fprintf(&b, "\t\tip saddr vmap %s\n", vmap(netpol.Egress, st.IsolatedEgress))
	}
	if gateway.IsValid() {
		fmt.Fprintf(&b, "\t\tip saddr %s accept\n", gateway)
	}
	if len(st.IsolatedIngress) > 0 {
		fmt.Fprintf(&b, "\t\tip daddr vmap %s\n", vmap(netpol.Ingress, st.IsolatedIngress))
	}
	b.WriteString("\t}\n")
	names := make([]string, 0, len(chains))
	for c := range chains {
		names = append(names, c)
	}
	sort.Strings(names)
	for _, c := range names {
		fmt.Fprintf(&b, "\tchain %s {\n", c)
		for _, l := range chains[c] {
			b.WriteString("\t\t" + l + "\n")
		}
		b.WriteString("\t\tdrop\n\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// nftRuleLines are a rule's nftables rules, one per protocol of its ports
// (or one: any port), ending in verdict.
func nftRuleLines(r netpol.Rule, verdict string) []string {
	peer := ""
	if !r.AnyPeer {
		ps := nftPrefixes(r.Peers)
		if len(ps) == 0 {
			return nil // no IPv4 peer: allows nothing
		}
		dir := "saddr"
		if r.Direction == netpol.Egress {
			dir = "daddr"
		}
		peer = fmt.Sprintf("ip %s { %s } ", dir, strings.Join(ps, ", "))
	}
	if r.AnyPort {
		return []string{peer + verdict}
	}
	byProto := map[uint8][]netpol.PortRange{}
	var protos []uint8
	for _, pr := range r.Ports {
		if _, ok := byProto[pr.Proto]; !ok {
			protos = append(protos, pr.Proto)
		}
		byProto[pr.Proto] = append(byProto[pr.Proto], pr)
	}
	var out []string
	for _, p := range protos {
		name := map[uint8]string{netpol.ProtoTCP: "tcp", netpol.ProtoUDP: "udp", netpol.ProtoSCTP: "sctp"}[p]
		if name == "" {
			continue
		}
		ports := nftPorts(byProto[p])
		if ports == "" {
			out = append(out, fmt.Sprintf("%smeta l4proto %s %s", peer, name, verdict))
			continue
		}
		out = append(out, fmt.Sprintf("%smeta l4proto %s th dport { %s } %s", peer, name, ports, verdict))
	}
	return out
}

// nftPrefixes are ps's IPv4 prefixes without those inside another (an
// anonymous nftables set refuses overlapping intervals).
func nftPrefixes(ps []netip.Prefix) []string {
	var v4 []netip.Prefix
	for _, p := range ps {
		if p.Addr().Is4() {
			v4 = append(v4, p.Masked())
		}
	}
	sort.Slice(v4, func(i, j int) bool { return v4[i].Bits() < v4[j].Bits() })
	var keep []netip.Prefix
	var out []string
next:
	for _, p := range v4 {
		for _, k := range keep {
			if k.Contains(p.Addr()) {
				continue next
			}
		}
		keep = append(keep, p)
		out = append(out, p.String())
	}
	return out
}

// nftPorts is rs merged into disjoint ranges ("80, 8000-8003"), or ""
// when they cover every port.
func nftPorts(rs []netpol.PortRange) string {
	sort.Slice(rs, func(i, j int) bool { return rs[i].Min < rs[j].Min })
	type span struct{ lo, hi int }
	var m []span
	for _, r := range rs {
		lo, hi := int(r.Min), int(r.Max)
		if n := len(m); n > 0 && lo <= m[n-1].hi+1 {
			m[n-1].hi = max(m[n-1].hi, hi)
			continue
		}
		m = append(m, span{lo, hi})
	}
	if len(m) == 1 && m[0].lo <= 1 && m[0].hi == 65535 {
		return ""
	}
	out := make([]string, len(m))
	for i, s := range m {
		if s.lo == s.hi {
			out[i] = fmt.Sprint(s.lo)
		} else {
			out[i] = fmt.Sprintf("%d-%d", s.lo, s.hi)
		}
	}
	return strings.Join(out, ", ")
}
