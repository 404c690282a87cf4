package cluster

import (
	"context"
	"os"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nagare-net/nagare/pkg/agent"
	"github.com/nagare-net/nagare/pkg/agent/config"
	"github.com/nagare-net/nagare/pkg/nscluster"
	"github.com/nagare-net/nagare/pkg/switchd"
)

// TestNetworkPolicyCutsEstablished: connections established before a
// policy that denies them are cut (docs/agent.md, NetworkPolicy). cli and
// friend each keep a TCP stream and a UDP ping-pong to srv (node 1) going;
// then node 1's agent restarts with a cluster file whose policy isolates
// srv for ingress and allows only friend (by label). friend's traffic
// goes on; cli's stops both ways (its packets are policy drops on its
// port), and a new connection from cli is refused. Pods and flows are
// real (namespaces, nagare-switch, the agent); the policy comes from the
// cluster file, as Services do.
func TestNetworkPolicyCutsEstablished(t *testing.T) {
	c := newCluster(t, nil)
	ctx := ctxT(t, 3*time.Minute)
	n1 := c.Nodes[0]
	add := func(name string) *nscluster.Pod { return addPod(ctx, t, n1, name) }
	srv, cli, friend := add("srv"), add("cli"), add("friend")
	cut := startLiveness(t, podNS(cli), podNS(srv), srv.IP.String(), 9000)
	kept := startLiveness(t, podNS(friend), podNS(srv), srv.IP.String(), 9100)
	cut.waitTraffic(t)
	kept.waitTraffic(t)

	// The policy, through the cluster file the agent reads at start.
	cc, err := config.Load(c.ClusterFile())
	if err != nil {
		t.Fatal(err)
	}
	cc.PodLabels = map[string]map[string]string{"default/srv": {"app": "srv"}, "default/friend": {"app": "friend"}}
	cc.NetworkPolicies = []config.NetworkPolicy{{NetworkPolicy: networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "srv-from-friend"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "srv"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "friend"}}}}}},
		}}}}
	b, err := yaml.Marshal(cc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.ClusterFile(), b, 0o644); err != nil {
		t.Fatal(err)
	}
	n1.Agent.Stop()
	if err := n1.StartAgent(ctx); err != nil {
		t.Fatal(err)
	}

	// cli's streams stop (once the cut is in, nothing more arrives);
	// friend's go on.
	deadline := time.Now().Add(15 * time.Second)
	var u0 int
	var b0 int64
	stopped := false
	for !stopped && time.Now().Before(deadline) {
		u0, b0 = cut.snapshot()
		time.Sleep(2 * time.Second)
		u1, b1 := cut.snapshot()
		stopped = u1 == u0 && b1 == b0
	}
	if !stopped {
		u, b := cut.snapshot()
		t.Fatalf("cli's connections to srv were not cut: %d UDP exchanges, %d TCP bytes and counting", u, b)
	}
	kept.waitTraffic(t)
	time.Sleep(2 * time.Second)
	if u, b := cut.snapshot(); u != u0 || b != b0 {
		t.Fatalf("cli's traffic came back after the cut: %d→%d UDP exchanges, %d→%d TCP bytes", u0, u, b0, b)
	}
	kept.waitTraffic(t)
	if _, err := tcpName(t, podNS(cli), srv.IP.String()+":9101"); err == nil {
		t.Fatal("a new connection from cli to srv was let through")
	}

	// The agent says so, and cli's port counts policy drops.
	m, err := agent.FetchMetrics(ctx, n1.AgentSocket())
	if err != nil {
		t.Fatal(err)
	}
	if v := metricSum(m, "nagare_agent_policy_cut_connections_total"); v < 2 {
		t.Errorf("nagare_agent_policy_cut_connections_total = %v, want the TCP and the UDP connection", v)
	}
	if n := portPolicyDrops(ctx, t, n1, cli.IP.String()); n == 0 {
		t.Error("no policy drops counted on cli's port")
	}
}

// portPolicyDrops is the fast path's policy drop count of the port of
// the pod with address ip.
func portPolicyDrops(ctx context.Context, t *testing.T, n *nscluster.Node, ip string) uint64 {
	t.Helper()
	st, err := n.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var port uint32
	for _, p := range st.Pods {
		if p.IP == ip {
			port = p.OFPort
		}
	}
	var show struct {
		Ports []switchd.PortReport `json:"ports"`
	}
	switchShow(ctx, t, n, &show)
	for _, p := range show.Ports {
		if p.OFPort == port {
			return p.Drops["policy"]
		}
	}
	t.Fatalf("no port %d (pod %s) in the switch's report", port, ip)
	return 0
}
