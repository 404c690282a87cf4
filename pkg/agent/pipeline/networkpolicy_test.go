package pipeline

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nagare-net/nagare/pkg/agent/netpol"
	"github.com/nagare-net/nagare/pkg/ofproto"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// Policies on representativePipeline's node: web (10.77.1.2) and db
// (10.77.1.3) are local.
var (
	webIP = netip.MustParseAddr("10.77.1.2")
	dbIP  = netip.MustParseAddr("10.77.1.3")
)

// representativePolicies: web accepts TCP 80 and 8000-8003 from db and
// from 10.77.2.0/24 (node2's pods); db accepts anything from anyone; db
// may send only to web and to 10.77.2.0/24 but not 10.77.2.128/25;
// web and db are isolated for ingress, db for egress.
func representativePolicies() netpol.State {
	return netpol.State{
		Rules: []netpol.Rule{
			{ID: "default/db-all/ingress/0", Policy: "default/db-all", Direction: netpol.Ingress, AppliedTo: []netip.Addr{dbIP}, AnyPeer: true, AnyPort: true},
			{ID: "default/db-out/egress/0", Policy: "default/db-out", Direction: netpol.Egress, AppliedTo: []netip.Addr{dbIP},
				Peers: []netip.Prefix{netip.MustParsePrefix("10.77.1.2/32"), netip.MustParsePrefix("10.77.2.0/25")}, AnyPort: true},
			{ID: "default/web/ingress/0", Policy: "default/web", Direction: netpol.Ingress, AppliedTo: []netip.Addr{webIP},
				Peers: []netip.Prefix{netip.MustParsePrefix("10.77.1.3/32"), netip.MustParsePrefix("10.77.2.0/24")},
				Ports: []netpol.PortRange{{Proto: netpol.ProtoTCP, Min: 80, Max: 80}, {Proto: netpol.ProtoTCP, Min: 8000, Max: 8003}}},
			{ID: "default/web/ingress/1", Policy: "default/web", Direction: netpol.Ingress, AppliedTo: []netip.Addr{webIP},
				AnyPeer: true, Ports: []netpol.PortRange{{Proto: netpol.ProtoUDP, Min: 0, Max: 65535}}},
		},
		IsolatedIngress: []netip.Addr{webIP, dbIP},
		IsolatedEgress:  []netip.Addr{dbIP},
	}
}

// TestPolicyGolden pins the policy flows of representativePolicies, byte
// for byte and in ovs-ofctl's words (-update rewrites the file).
func TestPolicyGolden(t *testing.T) {
	p := representativePipeline()
	p.SetPolicies(representativePolicies())
	var got bytes.Buffer
	for _, f := range p.Desired() {
		if f.TableID < TableEgressRule.ID || f.TableID > TableCtCommit.ID {
			continue
		}
		b, err := openflow.Marshal(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if err := f.Validate(); err != nil {
			t.Errorf("invalid flow %s: %v", f, err)
		}
		fmt.Fprintf(&got, "%s\n  %s\n", f, hex.EncodeToString(b))
	}
	path := filepath.Join("testdata", "networkpolicy.golden")
	if *updateGolden {
		if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("the policy flows differ from %s:\n--- got\n%s\n--- want\n%s", path, got.Bytes(), want)
	}
}

// TestPolicyConjunctionCost: a rule over N peers, M ports and P pods
// costs N+M+P clause flows and one conj_id flow, not N×M×P; a second rule
// on the same pods shares their clause flows.
func TestPolicyConjunctionCost(t *testing.T) {
	const n, m, pods = 50, 20, 30
	r := netpol.Rule{ID: "ns/p/ingress/0", Direction: netpol.Ingress}
	for i := 0; i < pods; i++ {
		r.AppliedTo = append(r.AppliedTo, netip.AddrFrom4([4]byte{10, 77, 1, byte(10 + i)}))
	}
	for i := 0; i < n; i++ {
		r.Peers = append(r.Peers, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 77, 2, byte(10 + i)}), 32))
	}
	for i := 0; i < m; i++ {
		r.Ports = append(r.Ports, netpol.PortRange{Proto: netpol.ProtoTCP, Min: uint16(1000 + 2*i), Max: uint16(1000 + 2*i)})
	}
	r2 := r
	r2.ID, r2.Peers, r2.Ports, r2.AnyPort = "ns/q/ingress/0", r.Peers[:1], nil, true
	p := representativePipeline()
	pp := newProgrammedPolicies()
	p.updatePolicies(pp, netpol.State{Rules: []netpol.Rule{r, r2}})
	fs := pp.flows()
	if want := (n + m + pods + 1) + 1; len(fs) != want { // r2 adds its conj_id flow only
		t.Fatalf("%d flows, want %d", len(fs), want)
	}
	shared := 0
	for _, f := range fs {
		if as, ok := conjActions(f); ok && len(as) == 2 {
			shared++
			c0, c1 := as[0].(openflow.ActionNXConjunction), as[1].(openflow.ActionNXConjunction)
			if c0.ID == c1.ID || c0.NClauses != 3 || c1.NClauses != 2 {
				t.Errorf("shared clause %s: conjunctions %v", f, as)
			}
		}
	}
	if shared != pods+1 { // every pod and the first peer
		t.Errorf("%d shared clause flows, want %d", shared, pods+1)
	}
}

// switchHasConjunction says whether nagare-switch's pipeline takes a
// conjunction flow (pkg/ofproto before OVS's conjunctive match refuses it).
func switchHasConjunction() error {
	pl := ofproto.New(ofproto.Config{})
	_, err := pl.FlowMod(flow(TableIngressRule, prioPolicyConj, 0, match(ethType(etherIPv4)),
		apply(openflow.ActionNXConjunction{ID: 1, Clause: 1, NClauses: 2})))
	return err
}

// policyNode is serviceNode with st programmed by UpdatePolicies.
func policyNode(t *testing.T, st netpol.State) (*Pipeline, *fakeSwitch) {
	t.Helper()
	p, sw := serviceNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.UpdatePolicies(ctx, st); err != nil {
		t.Fatalf("update policies: %v", err)
	}
	return p, sw
}

// TestPolicyDefaultDenyWalk walks packets through the switch with
// policies that need no conjunction: db isolated for ingress with no
// rule, web allowed from anyone on any port.
func TestPolicyDefaultDenyWalk(t *testing.T) {
	st := netpol.State{
		Rules:           []netpol.Rule{{ID: "default/web/ingress/0", Direction: netpol.Ingress, AppliedTo: []netip.Addr{webIP}, AnyPeer: true, AnyPort: true}},
		IsolatedIngress: []netip.Addr{webIP, dbIP},
	}
	p, sw := policyNode(t, st)
	var ct conntrack
	// web → db: db is isolated, nothing allows it: dropped, not committed.
	out, _ := ct.walk(t, sw.pl, ipKey(6, 5, webMAC, dbMAC, "10.77.1.2", "10.77.1.3", 40000, 80))
	if out != "drop(policy)" {
		t.Fatalf("web → db under default deny: %s, want drop(policy) (counted as a policy drop)", out)
	}
	if len(ct.orig) != 0 {
		t.Fatalf("a denied connection was committed: %v", ct.orig)
	}
	// db's "reply" from port 80 to web:40000 is a new connection to web, which web's rule allows.
	// db → web: allowed, committed, delivered; its reply passes (+est) though db is isolated.
	out, _ = ct.walk(t, sw.pl, ipKey(6, 6, dbMAC, webMAC, "10.77.1.3", "10.77.1.2", 41000, 80))
	if !strings.HasSuffix(out, "output:5") || len(ct.orig) != 1 {
		t.Fatalf("db → web allowed: %s, %d committed", out, len(ct.orig))
	}
	out, _ = ct.walk(t, sw.pl, ipKey(6, 5, webMAC, dbMAC, "10.77.1.2", "10.77.1.3", 80, 41000))
	if !strings.HasSuffix(out, "output:6") {
		t.Fatalf("reply web → db: %s", out)
	}
	// The node's own connections (kubelet probes) reach isolated pods.
	out, _ = ct.walk(t, sw.pl, ipKey(6, 2, gatewayMAC, dbMAC, "10.77.1.1", "10.77.1.3", 42000, 8080))
	if !strings.Contains(out, "output:6") {
		t.Fatalf("node → db: %s", out)
	}
	// From node2's pod through the tunnel to db: dropped; to web: delivered.
	k := ipKey(6, 3, [6]byte{2}, [6]byte{3}, "10.77.2.5", "10.77.1.3", 43000, 80)
	k.TunID = 1
	if out, _ = ct.walk(t, sw.pl, k); out != "drop(policy)" {
		t.Fatalf("node2 pod → db: %s", out)
	}
	k = ipKey(6, 3, [6]byte{2}, [6]byte{3}, "10.77.2.5", "10.77.1.2", 43000, 80)
	k.TunID = 1
	if out, _ = ct.walk(t, sw.pl, k); !strings.HasSuffix(out, "output:5") {
		t.Fatalf("node2 pod → web: %s", out)
	}

	// Lifting db's isolation sends its drop flow's delete and, db being
	// plain now, its two tracked flows' (conntrack_onepass.go); nothing else.
	before := sw.msgs
	st.IsolatedIngress = []netip.Addr{webIP}
	res, err := p.UpdatePolicies(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	if res.FlowsAdded != 0 || res.FlowsDeleted != 1 || sw.msgs-before != 3 {
		t.Fatalf("lifting one isolation: %+v, %d messages", res, sw.msgs-before)
	}
	if out, _ = ct.walk(t, sw.pl, ipKey(6, 5, webMAC, dbMAC, "10.77.1.2", "10.77.1.3", 40001, 80)); !strings.HasSuffix(out, "output:6") {
		t.Fatalf("web → db without isolation: %s", out)
	}
}

// TestPolicyConjunctionWalk walks representativePolicies' rules, which
// are conjunctive matches, through the switch.
func TestPolicyConjunctionWalk(t *testing.T) {
	if err := switchHasConjunction(); err != nil {
		t.Skipf("the switch has no conjunctive match yet (branch conj): %v", err)
	}
	_, sw := policyNode(t, representativePolicies())
	var ct conntrack
	for _, tc := range []struct {
		name  string
		proto uint8
		dport uint16
		want  string // "" drop
	}{
		{"db→web tcp/80", 6, 80, "output:5"},
		{"db→web tcp/8003", 6, 8003, "output:5"},
		{"db→web tcp/8004", 6, 8004, ""},
		{"db→web tcp/7999", 6, 7999, ""},
		{"db→web udp/53", 17, 53, "output:5"},
	} {
		out, _ := ct.walk(t, sw.pl, ipKey(tc.proto, 6, dbMAC, webMAC, "10.77.1.3", "10.77.1.2", 45000+tc.dport, tc.dport))
		if tc.want == "" && strings.Contains(out, "output") || tc.want != "" && !strings.HasSuffix(out, tc.want) {
			t.Errorf("%s: %s", tc.name, out)
		}
	}
	// db's egress: to 10.77.2.5 (in 10.77.2.0/25) allowed into the tunnel, to 10.77.2.200 dropped.
	if out, _ := ct.walk(t, sw.pl, ipKey(6, 6, dbMAC, gatewayMAC, "10.77.1.3", "10.77.2.5", 46000, 80)); !strings.Contains(out, "output:3") {
		t.Errorf("db → 10.77.2.5: %s", out)
	}
	if out, _ := ct.walk(t, sw.pl, ipKey(6, 6, dbMAC, gatewayMAC, "10.77.1.3", "10.77.2.200", 46001, 80)); strings.Contains(out, "output") {
		t.Errorf("db → 10.77.2.200: %s", out)
	}
	// From node2's pods to web: tcp/80 allowed, tcp/22 dropped.
	k := ipKey(6, 3, [6]byte{2}, [6]byte{3}, "10.77.2.9", "10.77.1.2", 47000, 80)
	k.TunID = 1
	if out, _ := ct.walk(t, sw.pl, k); !strings.HasSuffix(out, "output:5") {
		t.Errorf("node2 → web tcp/80: %s", out)
	}
	k.TpDst, k.TpSrc = 22, 47001
	if out, _ := ct.walk(t, sw.pl, k); strings.Contains(out, "output") {
		t.Errorf("node2 → web tcp/22: %s", out)
	}
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

// TestPolicyRestart: a restarted agent's Sync (no policy state yet) keeps
// the switch's policy flows, so pods stay isolated while its informers
// sync; its first UpdatePolicies then removes what the new state does not
// want and leaves the rest.
func TestPolicyRestart(t *testing.T) {
	st := netpol.State{IsolatedIngress: []netip.Addr{webIP, dbIP}}
	p, sw := policyNode(t, st)
	ctx := context.Background()
	q := representativePipeline()
	q.SetConn(p.conn)
	if _, err := q.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	var ct conntrack
	if out, _ := ct.walk(t, sw.pl, ipKey(6, 5, webMAC, dbMAC, "10.77.1.2", "10.77.1.3", 40000, 80)); strings.Contains(out, "output") {
		t.Fatalf("after a restart's Sync, web → db (isolated): %s", out)
	}
	res, err := q.UpdatePolicies(ctx, netpol.State{IsolatedIngress: []netip.Addr{webIP}})
	if err != nil {
		t.Fatal(err)
	}
	if res.FlowsDeleted != 1 {
		t.Fatalf("first update after the restart: %+v, want db's isolation deleted", res)
	}
	if out, _ := ct.walk(t, sw.pl, ipKey(6, 5, webMAC, dbMAC, "10.77.1.2", "10.77.1.3", 40001, 80)); !strings.HasSuffix(out, "output:6") {
		t.Fatalf("web → db no longer isolated: %s", out)
	}
	if out, _ := ct.walk(t, sw.pl, ipKey(6, 6, dbMAC, webMAC, "10.77.1.3", "10.77.1.2", 40002, 80)); strings.Contains(out, "output") {
		t.Fatalf("db → web (still isolated): %s", out)
	}
}

// TestPolicyRuleWithoutPeersAllowsNothing: a rule left with no IPv4 peer
// (only IPv6 blocks) or no port is a clause nothing matches: it allows
// nothing, never everything (bad input must not fail open).
func TestPolicyRuleWithoutPeersAllowsNothing(t *testing.T) {
	if err := switchHasConjunction(); err != nil {
		t.Skip(err)
	}
	st := netpol.State{
		Rules: []netpol.Rule{
			{ID: "default/v6/ingress/0", Direction: netpol.Ingress, AppliedTo: []netip.Addr{dbIP},
				Peers: []netip.Prefix{netip.MustParsePrefix("fd00::/64")}, AnyPort: true},
			{ID: "default/noport/ingress/0", Direction: netpol.Ingress, AppliedTo: []netip.Addr{dbIP}, AnyPeer: true},
		},
		IsolatedIngress: []netip.Addr{dbIP},
	}
	_, sw := policyNode(t, st)
	var ct conntrack
	if out, _ := ct.walk(t, sw.pl, ipKey(6, 5, webMAC, dbMAC, "10.77.1.2", "10.77.1.3", 40000, 80)); out != "drop(policy)" {
		t.Fatalf("web → db with rules that allow nothing: %s", out)
	}
	// The same rules with their peer and port made real do allow.
	st.Rules[0].Peers = append(st.Rules[0].Peers, netip.MustParsePrefix("10.77.1.2/32"))
	_, sw = policyNode(t, st)
	if out, _ := ct.walk(t, sw.pl, ipKey(6, 5, webMAC, dbMAC, "10.77.1.2", "10.77.1.3", 40001, 80)); !strings.HasSuffix(out, "output:6") {
		t.Fatalf("web → db allowed by the v4 peer: %s", out)
	}
}

// TestPolicyBadInputWalk: Kubernetes policies with bad parts, realized by
// the engine and walked through the switch: what a bad part would have
// allowed stays dropped, the good rules still allow, and every bad part
// is a Problem. A rule whose only port is skipped (a range wider than
// netpol.MaxPortRange) allows nothing, not every port.
func TestPolicyBadInputWalk(t *testing.T) {
	if err := switchHasConjunction(); err != nil {
		t.Skip(err)
	}
	e := netpol.NewEngine("node1")
	e.SetNamespace("default", nil)
	e.SetPod(&netpol.Pod{Namespace: "default", Name: "web", Labels: map[string]string{"app": "web"}, IP: webIP, Node: "node1"})
	e.SetPod(&netpol.Pod{Namespace: "default", Name: "db", Labels: map[string]string{"app": "db"}, IP: dbIP, Node: "node1"})
	tcp := corev1.ProtocolTCP
	port := func(p, end int32) networkingv1.NetworkPolicyPort {
		pp := networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: &intstr.IntOrString{IntVal: p}}
		if end != 0 {
			pp.EndPort = &end
		}
		return pp
	}
	named := intstr.FromString("nope")
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db-bad"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{Ports: []networkingv1.NetworkPolicyPort{port(1, 60000)}},                                                                         // too wide: skipped
				{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.77.1.0/33"}}}},                                  // malformed
				{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/16", Except: []string{"10.77.1.0/24"}}}}}, // except outside
				{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &named}}},                                                         // unknown named port
				{Ports: []networkingv1.NetworkPolicyPort{port(5432, 0)}},                                                                          // the good one
			}}}
	e.SetPolicy(np)
	// 10 000 rules in one policy (on web): over netpol.MaxRulesPerPolicy,
	// it fails closed (web isolated, none of its rules) and is reported;
	// db's policy is still enforced.
	huge := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-huge"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	for i := 0; i < 10000; i++ {
		huge.Spec.Ingress = append(huge.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{Ports: []networkingv1.NetworkPolicyPort{port(int32(1+i%60000), 0)}})
	}
	e.SetPolicy(huge)
	st, problems, _ := e.Realize()
	if len(problems) < 5 {
		t.Errorf("problems %v, want one per bad part and one for the 10 000 rules", problems)
	}
	_, sw := policyNode(t, st)
	var ct conntrack
	for _, dport := range []uint16{80, 5433, 60000} {
		if out, _ := ct.walk(t, sw.pl, ipKey(6, 5, webMAC, dbMAC, "10.77.1.2", "10.77.1.3", 40000+dport%1000, dport)); out != "drop(policy)" {
			t.Errorf("web → db:%d: %s, want drop(policy)", dport, out)
		}
	}
	if out, _ := ct.walk(t, sw.pl, ipKey(6, 5, webMAC, dbMAC, "10.77.1.2", "10.77.1.3", 41000, 5432)); !strings.HasSuffix(out, "output:6") {
		t.Errorf("web → db:5432 (the good rule): %s", out)
	}
	if out, _ := ct.walk(t, sw.pl, ipKey(6, 6, dbMAC, webMAC, "10.77.1.3", "10.77.1.2", 42000, 5)); out != "drop(policy)" {
		t.Errorf("db → web:5 under the 10 000-rule policy: %s, want drop(policy) (fail closed)", out)
	}
}

// TestPolicyCutGuard: after a connection is cut, the server's packets
// to the client are dropped while they are new (not picked up as a
// connection the other way), other traffic between them is not, and the
// guard goes by itself (idle timeout), untouched by Sync.
func TestPolicyCutGuard(t *testing.T) {
	// web's connection to db:5432 was cut when a policy isolated db.
	p, sw := policyNode(t, netpol.State{IsolatedIngress: []netip.Addr{dbIP}})
	ctx := context.Background()
	cut := CutConnection{Proto: 6, Server: netip.AddrPortFrom(dbIP, 5432), Client: netip.AddrPortFrom(webIP, 40000)}
	if err := p.GuardCutConnections(ctx, []CutConnection{cut}); err != nil {
		t.Fatal(err)
	}
	var ct conntrack
	if out, _ := ct.walk(t, sw.pl, ipKey(6, 6, dbMAC, webMAC, "10.77.1.3", "10.77.1.2", 5432, 40000)); out != "drop(policy)" {
		t.Fatalf("the cut connection's server packet: %s, want drop(policy)", out)
	}
	if len(ct.orig) != 0 {
		t.Fatalf("the server's packet was committed: %v", ct.orig)
	}
	if out, _ := ct.walk(t, sw.pl, ipKey(6, 6, dbMAC, webMAC, "10.77.1.3", "10.77.1.2", 5432, 40001)); !strings.HasSuffix(out, "output:5") {
		t.Fatalf("another connection between them: %s", out)
	}
	st, err := p.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := p.conn.DumpFlows(ctx, &openflow.FlowStatsRequest{TableID: TableCtCommit.ID, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny,
		Cookie: cookiePolicyCut, CookieMask: cookieFeature})
	if err != nil || len(fs) != 1 || fs[0].IdleTimeout != policyCutIdle {
		t.Fatalf("guard flows after Sync (%+v): %+v %v, want one with idle_timeout %d", st, fs, err, policyCutIdle)
	}
}
