package lab

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/nagare-net/nagare/pkg/agent/netpol"
)

// The run's policies, realized by the agent's engine for c (client) and s
// (server): the measured ports are allowed c → s, at both ends, and
// nothing else; each other policy adds one rule on s from its own block
// and port; the scenario's allow makes x reach s on udp/53.
func TestLabNetworkPolicies(t *testing.T) {
	sc, err := ParseScenario([]byte(`
name: np
nodes: [n1]
reps: 1
pods: [{name: c, node: n1}, {name: s, node: n1}, {name: x, node: n1}]
dataplanes: [nagare+netpol]
policies: [{from: x, to: s, ports: [udp/53]}]
measurements:
  - {name: rtt, kind: rtt, client: c, server: s}
  - {name: tcp, kind: tcp, client: c, server: s}
  - {name: conn, kind: conn-rate, client: c, server: s}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := &planeRun{s: sc}
	for _, m := range sc.Measurements {
		r.tests = append(r.tests, test{m: m, load: LoadSpec{Name: "none"}, placement: m.Placements[0]})
	}
	pairs := r.measuredAllows()
	if len(pairs) != 1 || pairs[0].client != "c" || pairs[0].server != "s" || len(pairs[0].ports) != 3 {
		t.Fatalf("measured pairs %+v, want c → s on 3 ports", pairs)
	}
	for _, others := range []int{0, 1000} {
		topo := &Topology{Nodes: []*Node{{Name: "n1"}}, NetworkPolicies: labNetworkPolicies(pairs, sc.Policies, others)}
		for i, name := range []string{"c", "s", "x"} {
			topo.Pods = append(topo.Pods, &Pod{Name: name, Node: topo.Nodes[0], IP: "10.99.0." + string(rune('2'+i))})
		}
		if len(topo.NetworkPolicies) != 2+others {
			t.Fatalf("%d others: %d policies", others, len(topo.NetworkPolicies))
		}
		st, problems, err := labPolicyState(topo, topo.Nodes[0])
		if err != nil || len(problems) > 0 {
			t.Fatalf("%d others: %v %v", others, err, problems)
		}
		c, s, x := netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("10.99.0.3"), netip.MustParseAddr("10.99.0.4")
		if len(st.IsolatedIngress) != 1 || st.IsolatedIngress[0] != s || len(st.IsolatedEgress) != 1 || st.IsolatedEgress[0] != c {
			t.Errorf("%d others: isolated in %v, eg %v: want s for ingress, c for egress", others, st.IsolatedIngress, st.IsolatedEgress)
		}
		allows := func(dir netpol.Direction, applied, peer netip.Addr, proto uint8, port uint16) bool {
			for _, rl := range st.Rules {
				if rl.Direction != dir || len(rl.AppliedTo) != 1 || rl.AppliedTo[0] != applied {
					continue
				}
				okPeer := rl.AnyPeer
				for _, p := range rl.Peers {
					okPeer = okPeer || p.Contains(peer)
				}
				for _, pr := range rl.Ports {
					if okPeer && pr.Proto == proto && pr.Min <= port && port <= pr.Max {
						return true
					}
				}
			}
			return false
		}
		for _, p := range []struct {
			proto uint8
			port  uint16
		}{{netpol.ProtoUDP, sockperfBasePort}, {netpol.ProtoTCP, iperfBasePort + 1}, {netpol.ProtoTCP, httpPort}} {
			if !allows(netpol.Ingress, s, c, p.proto, p.port) || !allows(netpol.Egress, c, s, p.proto, p.port) {
				t.Errorf("%d others: c → s %d/%d not allowed at both ends", others, p.proto, p.port)
			}
		}
		if allows(netpol.Ingress, s, c, netpol.ProtoTCP, deniedPort) || allows(netpol.Egress, c, s, netpol.ProtoTCP, deniedPort) {
			t.Errorf("%d others: the denied port is allowed", others)
		}
		if !allows(netpol.Ingress, s, x, netpol.ProtoUDP, 53) || allows(netpol.Ingress, s, x, netpol.ProtoTCP, iperfBasePort+1) {
			t.Errorf("%d others: x → s: want udp/53 only", others)
		}
		if want := 3 + others; len(st.Rules) != want {
			t.Errorf("%d others: %d rules, want %d (every other policy selects s)", others, len(st.Rules), want)
		}
		if others > 0 && !allows(netpol.Ingress, s, netip.MustParseAddr("10.98.0.1"), netpol.ProtoTCP, 8000) {
			t.Errorf("other policy 0 does not apply to s")
		}
		rs := NftPolicyRuleset(st, "netpol", netip.Addr{})
		if n := strings.Count(rs, " accept\n"); n < 3+others {
			t.Errorf("%d others: %d accepting nft rules", others, n)
		}
	}
}

func TestPolicyScenarioValidation(t *testing.T) {
	for _, tc := range []struct{ policies, want string }{
		{`[{from: c, to: nope, ports: [udp/53]}]`, "must be two pods"},
		{`[{from: c, to: c}]`, "must be two pods"},
		{`[{from: c, to: s, ports: [icmp/1]}]`, "want tcp/N"},
		{`[{from: c, to: s, ports: [udp/70000]}]`, "want tcp/N"},
	} {
		_, err := ParseScenario([]byte(`
name: np
nodes: [n1]
reps: 1
pods: [{name: c, node: n1}, {name: s, node: n1}]
dataplanes: [nagare+netpol]
policies: ` + tc.policies + `
measurements: [{name: rtt, kind: rtt, client: c, server: s}]
`))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.policies, err, tc.want)
		}
	}
	_, err := ParseScenario([]byte(`
name: np
nodes: [n1]
reps: 1
pods: [{name: c, node: n1}, {name: s, node: n1}, {name: x, node: n1}]
dataplanes: [nagare+netpol]
measurements: [{name: rtt, kind: rtt, client: c, server: s}]
loads: [{name: scan, attack: {from: x, to: s, pattern: scan, rate: 1000, target: "s:53"}}]
`))
	if err != nil {
		t.Errorf("an attack on a policy plane needs no flows: %v", err)
	}
}

// The report puts each policy plane against its own base plane and says
// which targets are missed.
func TestNetpolReport(t *testing.T) {
	sc, err := ParseScenario([]byte(`
name: np
nodes: [n1]
reps: 1
pods: [{name: c, node: n1}, {name: s, node: n1}]
dataplanes: [nagare, nagare+netpol1000, linux-bridge, linux-bridge+nft]
measurements:
  - {name: rtt, kind: rtt, client: c, server: s}
  - {name: tcp, kind: tcp, client: c, server: s}
`))
	if err != nil {
		t.Fatal(err)
	}
	res := &Result{Scenario: sc}
	for _, p := range sc.DataPlanes {
		res.Planes = append(res.Planes, PlaneInfo{Name: p})
	}
	sc.BPFStats = true
	add := func(plane string, p50, gbps float64, fpRuns uint64) {
		// The fast path's time per packet, with BPF statistics: 300 ns
		// per packet on every plane that has one.
		cpu := &CPUUsage{WindowSeconds: 1, FastPathNs: 300 * fpRuns, FastPathRuns: fpRuns}
		res.Samples = append(res.Samples,
			Sample{DataPlane: plane, Measurement: "rtt", Kind: KindRTT, Placement: "cross-core", Load: "none", Status: StatusOK, RTT: &RTTResult{P50Us: p50, P99Us: 2 * p50}, CPU: cpu},
			Sample{DataPlane: plane, Measurement: "tcp", Kind: KindTCP, Placement: "cross-core", Load: "none", Status: StatusOK, TCP: &TCPResult{Gbps: gbps}, CPU: cpu})
	}
	add("nagare", 20, 10, 1000)
	add("nagare+netpol1000", 20.5, 9.5, 2000)
	add("linux-bridge", 30, 8, 0)
	add("linux-bridge+nft", 36, 8, 0)
	var b strings.Builder
	res.WriteMarkdown(&b)
	md := b.String()
	for _, want := range []string{
		"### NetworkPolicy: each policy plane against the same plane without policies",
		"| rtt p50 (µs) | nagare+netpol1000 | 20.5 | nagare | 20.0 | 1.025 | ≤ 1.05× met |",
		"| rtt p50 (µs) | linux-bridge+nft | 36.0 | linux-bridge | 30.0 | 1.200 | ≤ 1.05× **missed** |",
		"| tcp gbps (Gbit/s) | nagare+netpol1000 | 9.50 | nagare | 10.00 | 0.950 | ≥ 0.97× **missed** |",
		"| tcp fast path ns (ns/pkt) | nagare+netpol1000 | 300 | nagare | 300 | 1.000 |  |",
		"| nagare | 1/1 | 10.00 | 0 | – | – | 0.00 | 0 | 0 | 0 | 300 |",
		"| linux-bridge | 1/1 | 8.00 | 0 | – | – | 0.00 | 0 | 0 | 0 | – |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
