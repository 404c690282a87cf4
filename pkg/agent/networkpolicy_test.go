package agent

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nagare-net/nagare/pkg/agent/config"
	"github.com/nagare-net/nagare/pkg/agent/netpol"
	"github.com/nagare-net/nagare/pkg/agent/pipeline"
	"github.com/nagare-net/nagare/pkg/ctlproto"
)

// TestDeniedConnections: tracked connections judged as the pipeline
// judged their first packet: to the endpoint a Service connection
// reached, on its port; the node's own connections are never cut.
func TestDeniedConnections(t *testing.T) {
	a := netip.MustParseAddr
	web, db, gw, vip := a("10.77.1.2"), a("10.77.1.3"), a("10.77.1.1"), a("10.96.0.10")
	st := netpol.State{
		Rules: []netpol.Rule{{ID: "x/db/ingress/0", Direction: netpol.Ingress, AppliedTo: []netip.Addr{db},
			Peers: []netip.Prefix{netip.PrefixFrom(web, 32)}, Ports: []netpol.PortRange{{Proto: netpol.ProtoTCP, Min: 5432, Max: 5432}}}},
		IsolatedIngress: []netip.Addr{db},
	}
	tuple := func(src, dst netip.Addr, sport, dport uint16, proto uint8) ctlproto.ConnTuple {
		return ctlproto.ConnTuple{Src: src, Dst: dst, SrcPort: sport, DstPort: dport, Proto: proto}
	}
	conn := func(orig ctlproto.ConnTuple, endpoint netip.Addr, port uint16) ctlproto.Conn {
		return ctlproto.Conn{Zone: 65520, Orig: orig, Reply: tuple(endpoint, orig.Src, port, orig.SrcPort, orig.Proto)}
	}
	allowed := conn(tuple(web, db, 40000, 5432, 6), db, 5432)
	wrongPort := conn(tuple(web, db, 40001, 22, 6), db, 22)
	viaService := conn(tuple(web, vip, 40002, 80, 6), db, 8080) // DNAT to db:8080: denied
	viaServiceOK := conn(tuple(web, vip, 40003, 80, 6), db, 5432)
	probe := conn(tuple(gw, db, 40004, 8080, 6), db, 8080)
	ping := conn(tuple(web, db, 7, 7, 1), db, 7)
	got := deniedConnections([]ctlproto.Conn{allowed, wrongPort, viaService, viaServiceOK, probe, ping}, netpol.NewVerdicts(st), gw)
	want := []ctlproto.ConnTuple{wrongPort.Orig, viaService.Orig, ping.Orig}
	if len(got) != len(want) {
		t.Fatalf("denied %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Orig != want[i] {
			t.Fatalf("denied %v, want %v", got, want)
		}
	}
}

// TestPodIsolatedBeforeForwarding: a pod that a known policy isolates is
// isolated when its ADD returns: the policy's flows for its address are
// in the switch before its forwarding flows. The agent's policy loop does
// not run here, so only the ADD itself can have programmed them; before,
// the ADD installed the pod's forwarding and left its policies to the
// loop, and the lab saw a port no policy allows answer in 4 runs of 8
// with 1000 policies (the loop still realizing them).
func TestPodIsolatedBeforeForwarding(t *testing.T) {
	ta := newTestAgent(t, func(c *config.Cluster) {
		var np config.NetworkPolicy
		np.Namespace, np.Name = "default", "isolate-a"
		np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		c.NetworkPolicies = append(c.NetworkPolicies, np)
		c.PodLabels = map[string]map[string]string{"default/a": {"app": "a"}}
	})
	ta.startPolicies()
	ctx := context.Background()
	if _, err := ta.Add(ctx, addReq("c1", "default/a")); err != nil {
		t.Fatal(err)
	}
	ip := ta.pods[podKey("c1", "eth0")].IP
	st, _, _ := ta.policies.Realize()
	if len(st.IsolatedIngress) != 1 || st.IsolatedIngress[0] != ip {
		t.Fatalf("isolated for ingress: %v, want [%s]", st.IsolatedIngress, ip)
	}
	var isolation []string
	for _, f := range ta.flowsNaming("nw_dst=" + ip.String()) {
		if strings.Contains(f, fmt.Sprintf("table=%d ", pipeline.TableIngressDefault.ID)) {
			isolation = append(isolation, f)
		}
	}
	if len(isolation) == 0 {
		t.Fatalf("ADD returned with pod %s forwarded and not isolated; flows:\n%s", ip, strings.Join(ta.sw.flows(), "\n"))
	}
}

// TestPolicyFeedLocalAddress: with Kubernetes, a pod this node attached
// is selectable with the address the agent gave it while the API server
// knows none; the source's later word (with or without one) keeps it,
// and detaching leaves the source's word alone.
func TestPolicyFeedLocalAddress(t *testing.T) {
	f := newPolicyFeed("node1")
	var np networkingv1.NetworkPolicy
	np.Namespace, np.Name = "default", "isolate-a"
	np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}
	np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	f.SetPolicy(&np)
	ip := netip.MustParseAddr("10.77.1.9")
	pod := func() *netpol.Pod {
		return &netpol.Pod{Namespace: "default", Name: "a", Node: "node1", Labels: map[string]string{"app": "a"}}
	}
	has := func() netip.Addr { // the address the policy isolates
		st, _, _ := f.Realize()
		if len(st.IsolatedIngress) == 1 {
			return st.IsolatedIngress[0]
		}
		return netip.Addr{}
	}
	if f.attach("default", "a", ip) {
		t.Fatal("attach: the source knows a pod it never sent")
	}
	f.SetPod(pod()) // the informer: scheduled, no address yet
	if got := has(); got != ip {
		t.Fatalf("pod selectable as %v, want the local %s", got, ip)
	}
	f.detach("default", "a")
	if got := has(); got.IsValid() {
		t.Fatalf("detached pod without an API address still selectable as %s", got)
	}
	p := pod()
	p.IP = netip.MustParseAddr("10.77.1.10")
	f.SetPod(p)
	if got := has(); got != p.IP {
		t.Fatalf("the API's address %s not taken: %v", p.IP, got)
	}
}
