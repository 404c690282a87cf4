package netpol

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// cluster: namespaces x (team=a) and y (team=b); pods x/a (app=a, node1,
// named port "serve-80" TCP 80), x/b (app=b, node1, "serve-80" TCP 81),
// y/a (app=a, node2), y/c (app=c, node1, no named port).
func testEngine() *Engine {
	e := NewEngine("node1")
	e.SetNamespace("x", map[string]string{"team": "a"})
	e.SetNamespace("y", map[string]string{"team": "b"})
	e.SetPod(&Pod{Namespace: "x", Name: "a", Labels: map[string]string{"app": "a"}, IP: ip("10.0.1.2"), Node: "node1",
		Ports: []NamedPort{{"serve-80", ProtoTCP, 80}}})
	e.SetPod(&Pod{Namespace: "x", Name: "b", Labels: map[string]string{"app": "b"}, IP: ip("10.0.1.3"), Node: "node1",
		Ports: []NamedPort{{"serve-80", ProtoTCP, 81}}})
	e.SetPod(&Pod{Namespace: "y", Name: "a", Labels: map[string]string{"app": "a"}, IP: ip("10.0.2.2"), Node: "node2"})
	e.SetPod(&Pod{Namespace: "y", Name: "c", Labels: map[string]string{"app": "c"}, IP: ip("10.0.1.4"), Node: "node1"})
	return e
}

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

func sel(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

func policy(ns, name string, applied *metav1.LabelSelector, types ...networkingv1.PolicyType) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: *applied, PolicyTypes: types}}
}

func tcp(port int) networkingv1.NetworkPolicyPort {
	p := corev1.ProtocolTCP
	v := intstr.FromInt32(int32(port))
	return networkingv1.NetworkPolicyPort{Protocol: &p, Port: &v}
}

func named(name string) networkingv1.NetworkPolicyPort {
	v := intstr.FromString(name)
	return networkingv1.NetworkPolicyPort{Port: &v}
}

// summary prints rules as "id: applied <- peers ports".
func summary(st State) string {
	var b strings.Builder
	for _, r := range st.Rules {
		peers := fmt.Sprint(r.Peers)
		if r.AnyPeer {
			peers = "any"
		}
		ports := fmt.Sprint(r.Ports)
		if r.AnyPort {
			ports = "any"
		}
		fmt.Fprintf(&b, "%s: %v %s %s\n", r.ID, r.AppliedTo, peers, ports)
	}
	fmt.Fprintf(&b, "isolated in %v eg %v\n", st.IsolatedIngress, st.IsolatedEgress)
	return b.String()
}

func realize(t *testing.T, e *Engine) (State, []Problem) {
	t.Helper()
	st, probs, _ := e.Realize()
	return st, probs
}

func TestSelectors(t *testing.T) {
	for _, tc := range []struct {
		name string
		np   *networkingv1.NetworkPolicy
		want string
	}{
		{"default-deny-ingress", policy("x", "deny", sel()),
			"isolated in [10.0.1.2 10.0.1.3] eg []\n"},
		{"default-deny-egress", policy("x", "deny", sel(), networkingv1.PolicyTypeEgress),
			"isolated in [] eg [10.0.1.2 10.0.1.3]\n"},
		{"pod-selector", func() *networkingv1.NetworkPolicy {
			np := policy("x", "p", sel("app", "a"))
			np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", "b")}}, Ports: []networkingv1.NetworkPolicyPort{tcp(80)}}}
			return np
		}(), "x/p/ingress/0: [10.0.1.2] [10.0.1.3/32] [tcp/80]\nisolated in [10.0.1.2] eg []\n"},
		{"namespace-selector", func() *networkingv1.NetworkPolicy {
			np := policy("x", "p", sel("app", "a"))
			np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", "b")}}}}
			return np
		}(), "x/p/ingress/0: [10.0.1.2] [10.0.1.4/32 10.0.2.2/32] any\nisolated in [10.0.1.2] eg []\n"},
		{"both-selectors", func() *networkingv1.NetworkPolicy {
			np := policy("x", "p", sel("app", "a"))
			np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel(), PodSelector: sel("app", "a")}}}}
			return np
		}(), "x/p/ingress/0: [10.0.1.2] [10.0.1.2/32 10.0.2.2/32] any\nisolated in [10.0.1.2] eg []\n"},
		{"ipblock-except", func() *networkingv1.NetworkPolicy {
			np := policy("x", "p", sel("app", "a"), networkingv1.PolicyTypeEgress)
			np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/22", Except: []string{"10.0.1.0/24"}}}}}}
			return np
		}(), "x/p/egress/0: [10.0.1.2] [10.0.0.0/24 10.0.2.0/23] any\nisolated in [] eg [10.0.1.2]\n"},
		{"end-port-udp-sctp", func() *networkingv1.NetworkPolicy {
			np := policy("x", "p", sel("app", "a"))
			udp, sctp := corev1.ProtocolUDP, corev1.ProtocolSCTP
			p := tcp(8000)
			end := int32(8080)
			p.EndPort = &end
			np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{p, {Protocol: &udp}, {Protocol: &sctp, Port: tcp(9).Port}}}}
			return np
		}(), "x/p/ingress/0: [10.0.1.2] any [tcp/8000-8080 udp sctp/9]\nisolated in [10.0.1.2] eg []\n"},
		{"named-port-ingress", func() *networkingv1.NetworkPolicy {
			np := policy("x", "p", sel())
			np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{named("serve-80")}}}
			return np
		}(), "x/p/ingress/0/port=tcp/80: [10.0.1.2] any [tcp/80]\nx/p/ingress/0/port=tcp/81: [10.0.1.3] any [tcp/81]\nisolated in [10.0.1.2 10.0.1.3] eg []\n"},
		{"named-port-egress", func() *networkingv1.NetworkPolicy {
			np := policy("y", "p", sel("app", "c"), networkingv1.PolicyTypeEgress)
			np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", "a")}}, Ports: []networkingv1.NetworkPolicyPort{named("serve-80")}}}
			return np
		}(), "y/p/egress/0/port=tcp/80: [10.0.1.4] [10.0.1.2/32] [tcp/80]\ny/p/egress/0/port=tcp/81: [10.0.1.4] [10.0.1.3/32] [tcp/81]\nisolated in [] eg [10.0.1.4]\n"},
		{"named-port-egress-any-peer", func() *networkingv1.NetworkPolicy {
			// Kubernetes' "should allow egress access on one named port": no to, a named port: every pod that defines it.
			np := policy("y", "p", sel("app", "c"), networkingv1.PolicyTypeEgress)
			np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{named("serve-80")}}}
			return np
		}(), "y/p/egress/0/port=tcp/80: [10.0.1.4] [10.0.1.2/32] [tcp/80]\ny/p/egress/0/port=tcp/81: [10.0.1.4] [10.0.1.3/32] [tcp/81]\nisolated in [] eg [10.0.1.4]\n"},
		{"other-node-pods-not-applied", policy("y", "p", sel("app", "a")), "isolated in [] eg []\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := testEngine()
			e.SetPolicy(tc.np)
			st, _ := realize(t, e)
			if got := summary(st); got != tc.want {
				t.Errorf("got\n%swant\n%s", got, tc.want)
			}
		})
	}
}

// TestUnion: two policies on one pod are both realized; deleting one leaves the other.
func TestUnion(t *testing.T) {
	e := testEngine()
	p1 := policy("x", "p1", sel("app", "a"))
	p1.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{tcp(80)}}}
	p2 := policy("x", "p2", sel())
	p2.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{tcp(443)}}}
	e.SetPolicy(p1)
	e.SetPolicy(p2)
	st, _ := realize(t, e)
	want := "x/p1/ingress/0: [10.0.1.2] any [tcp/80]\nx/p2/ingress/0: [10.0.1.2 10.0.1.3] any [tcp/443]\nisolated in [10.0.1.2 10.0.1.3] eg []\n"
	if got := summary(st); got != want {
		t.Fatalf("got\n%swant\n%s", got, want)
	}
	e.DeletePolicy("x", "p2")
	st, _ = realize(t, e)
	want = "x/p1/ingress/0: [10.0.1.2] any [tcp/80]\nisolated in [10.0.1.2] eg []\n"
	if got := summary(st); got != want {
		t.Fatalf("after delete got\n%swant\n%s", got, want)
	}
}

// TestIncremental: a label change marks only the policies that select the
// pod or namespace before or after, and the result follows the change.
func TestIncremental(t *testing.T) {
	e := testEngine()
	for i := 0; i < 50; i++ {
		np := policy("x", fmt.Sprintf("other%02d", i), sel("app", fmt.Sprintf("none%d", i)))
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", fmt.Sprintf("none%d", i))}}}}
		e.SetPolicy(np)
	}
	np := policy("x", "p", sel("app", "a"))
	np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", "b"), PodSelector: sel("role", "client")}}}}
	e.SetPolicy(np)
	realize(t, e)

	// y/c gains role=client: only x/p looks at it.
	e.SetPod(&Pod{Namespace: "y", Name: "c", Labels: map[string]string{"app": "c", "role": "client"}, IP: ip("10.0.1.4"), Node: "node1"})
	if len(e.dirty) != 1 || !e.dirty["x/p"] {
		t.Fatalf("dirty after pod label change: %v, want only x/p", e.dirty)
	}
	st, _ := realize(t, e)
	if got, want := summary(st), "x/p/ingress/0: [10.0.1.2] [10.0.1.4/32] any\n"; !strings.HasPrefix(got, want) {
		t.Fatalf("got\n%swant prefix\n%s", got, want)
	}
	// Namespace y loses team=b: x/p's peer goes.
	e.SetNamespace("y", map[string]string{"team": "c"})
	if len(e.dirty) != 1 || !e.dirty["x/p"] {
		t.Fatalf("dirty after namespace label change: %v, want only x/p", e.dirty)
	}
	st, _ = realize(t, e)
	if got, want := summary(st), "isolated in [10.0.1.2] eg []\n"; got != want {
		t.Fatalf("got\n%swant\n%s", got, want)
	}
	// A pod anywhere marks a policy whose egress goes to anyone on a named port.
	np2 := policy("x", "named-any", sel("app", "a"), networkingv1.PolicyTypeEgress)
	np2.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{named("serve-80")}}}
	e.SetPolicy(np2)
	realize(t, e)
	e.SetPod(&Pod{Namespace: "y", Name: "w", Labels: map[string]string{"app": "w"}, IP: ip("10.0.2.8"), Node: "node2",
		Ports: []NamedPort{{"serve-80", ProtoTCP, 8080}}})
	if len(e.dirty) != 1 || !e.dirty["x/named-any"] {
		t.Fatalf("dirty after a pod with the named port: %v, want x/named-any", e.dirty)
	}
	st, _ = realize(t, e)
	if got := summary(st); !strings.Contains(got, "x/named-any/egress/0/port=tcp/8080: [10.0.1.2] [10.0.2.8/32] [tcp/8080]") {
		t.Fatalf("got\n%s", got)
	}
	e.DeletePolicy("x", "named-any")
	realize(t, e)
	// An unrelated pod change marks nothing.
	e.SetPod(&Pod{Namespace: "y", Name: "z", Labels: map[string]string{"app": "z"}, IP: ip("10.0.2.9"), Node: "node2"})
	if len(e.dirty) != 0 {
		t.Fatalf("dirty after unrelated pod: %v", e.dirty)
	}
	if _, _, changed := e.Realize(); changed {
		t.Fatal("Realize says changed with nothing dirty")
	}
}

// TestBadInput: bad peers and too many rules are reported and fail closed;
// the rest of the policy and other policies still apply.
func TestBadInput(t *testing.T) {
	e := testEngine()
	np := policy("x", "bad", sel("app", "a"))
	np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{
		{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/33"}}}},
		{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/16", Except: []string{"192.168.0.0/24"}}}}},
		{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", "b")}}, Ports: []networkingv1.NetworkPolicyPort{named("nope")}},
		{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", "b")}}, Ports: []networkingv1.NetworkPolicyPort{tcp(22)}},
	}
	huge := policy("x", "huge", sel("app", "b"))
	for i := 0; i < 10000; i++ {
		huge.Spec.Ingress = append(huge.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{Ports: []networkingv1.NetworkPolicyPort{tcp(1 + i%60000)}})
	}
	e.SetPolicy(np)
	e.SetPolicy(huge)
	st, probs := realize(t, e)
	want := "x/bad/ingress/3: [10.0.1.2] [10.0.1.3/32] [tcp/22]\nisolated in [10.0.1.2 10.0.1.3] eg []\n"
	if got := summary(st); got != want {
		t.Errorf("got\n%swant\n%s", got, want)
	}
	var msgs []string
	for _, p := range probs {
		msgs = append(msgs, p.String())
	}
	all := strings.Join(msgs, "\n")
	for _, w := range []string{`malformed CIDR "10.0.0.0/33"`, "except 192.168.0.0/24 is not inside 10.0.0.0/16", "named port nope", "x/huge: 10000 rules"} {
		if !strings.Contains(all, w) {
			t.Errorf("problems lack %q:\n%s", w, all)
		}
	}
}

func TestSubtract(t *testing.T) {
	got := subtract([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, netip.MustParsePrefix("10.0.0.0/8"))
	if len(got) != 8 {
		t.Fatalf("0/0 minus 10/8: %v", got)
	}
	for _, p := range got {
		if p.Overlaps(netip.MustParsePrefix("10.0.0.0/8")) {
			t.Errorf("%v overlaps the except", p)
		}
	}
}
