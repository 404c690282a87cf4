package pipeline

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nagare-net/nagare/pkg/agent/netpol"
)

// TestPolicyChangeLatency measures NetworkPolicy realization at scale:
// NAGARE_POLICIES policies (default 1000) over NAGARE_POLICY_PODS pods on
// this node (default 1000; API objects, as the issue allows), then
// NAGARE_CHANGES (default 200) changes one after the other, each timed
// from the change handed to the engine to the switch's barrier after its
// flows (Realize + UpdatePolicies: what the agent's policyLoop does, less
// its 10 ms coalescing). Against a real nagare-switch when NAGARE_OF names
// its OpenFlow socket (as TestServiceChangeLatency), else against
// nagare-switch's pipeline in process. Only with NAGARE_POLICY_SCALE=1.
//
// Policy i, in namespace ns-(i%10): pods app=i%1000 accept TCP port
// 1000+i%50 from pods role=client-(i%50) in namespaces team=t-(i%5), and
// from 10.200.0.0/16 except 10.200.1.0/24. Pod j: namespace ns-(j%10),
// app=j, role=client-(j%50), 10.77.(1+j/250).(j%250+2) on this node.
func TestPolicyChangeLatency(t *testing.T) {
	if os.Getenv("NAGARE_POLICY_SCALE") != "1" {
		t.Skip("NAGARE_POLICY_SCALE=1 (and NAGARE_OF=unix:PATH for a real switch)")
	}
	np, npods, changes := 1000, 1000, 200
	for env, v := range map[string]*int{"NAGARE_POLICIES": &np, "NAGARE_POLICY_PODS": &npods, "NAGARE_CHANGES": &changes} {
		if s := os.Getenv(env); s != "" {
			fmt.Sscan(s, v)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var p *Pipeline
	where := "nagare-switch's pipeline in process"
	if target := os.Getenv("NAGARE_OF"); target != "" {
		c, err := Dial(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		p = representativePipeline()
		p.SetConn(c)
		p.SetServices(nil)
		if _, err := p.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		where = "nagare-switch at " + target
	} else {
		p, _ = serviceNode(t)
	}

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	e := netpol.NewEngine("node1")
	for i := 0; i < 10; i++ {
		e.SetNamespace(fmt.Sprint("ns-", i), map[string]string{"team": fmt.Sprint("t-", i%5)})
	}
	for j := 0; j < npods; j++ {
		e.SetPod(scalePod(j, 0))
	}
	for i := 0; i < np; i++ {
		e.SetPolicy(scalePolicy(i, 0))
	}
	start := time.Now()
	st, probs, _ := e.Realize()
	realized := time.Since(start)
	res, err := p.UpdatePolicies(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("%s: %d policies, %d pods: %d rules, %d flows (realized in %v, programmed to the barrier in %v), %d problems; heap for engine+pipeline state %.1f MiB",
		where, np, npods, len(st.Rules), res.FlowsAdded, realized.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), len(probs),
		float64(after.HeapAlloc-before.HeapAlloc)/(1<<20))

	type kind struct {
		name   string
		change func(i int)
	}
	for _, k := range []kind{
		{"a policy's port changed", func(i int) { e.SetPolicy(scalePolicy(i*7%np, 1+i)) }},
		{"a pod's role label changed (it leaves one rule's peers, joins another's)", func(i int) { e.SetPod(scalePod(i*13%npods, 1+i)) }},
		{"a policy added and deleted", func(i int) {
			if i%2 == 0 {
				e.SetPolicy(scalePolicy(np+i, 0))
			} else {
				e.DeletePolicy(fmt.Sprint("ns-", (np+i-1)%10), fmt.Sprint("p-", np+i-1))
			}
		}},
	} {
		var took []time.Duration
		for i := 0; i < changes; i++ {
			start := time.Now()
			k.change(i)
			st, _, _ := e.Realize()
			if _, err := p.UpdatePolicies(ctx, st); err != nil {
				t.Fatal(err)
			}
			took = append(took, time.Since(start))
		}
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		t.Logf("%s: p50 %v, p99 %v, max %v (%d changes, to the barrier)", k.name,
			took[len(took)/2].Round(10*time.Microsecond), took[len(took)*99/100].Round(10*time.Microsecond), took[len(took)-1].Round(10*time.Microsecond), changes)
	}
}

// scalePod is pod j of TestPolicyChangeLatency; v shifts its role label.
func scalePod(j, v int) *netpol.Pod {
	return &netpol.Pod{Namespace: fmt.Sprint("ns-", j%10), Name: fmt.Sprint("pod-", j), Node: "node1",
		Labels: map[string]string{"app": fmt.Sprint(j), "role": fmt.Sprint("client-", (j+v)%50)},
		IP:     netip.AddrFrom4([4]byte{10, 77, byte(1 + j/250), byte(j%250 + 2)})}
}

// scalePolicy is policy i of TestPolicyChangeLatency; v shifts its port.
func scalePolicy(i, v int) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	port := intstr.FromInt32(int32(1000 + (i+v)%50))
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprint("ns-", i%10), Name: fmt.Sprint("p-", i)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprint(i % 1000)}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{
					{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": fmt.Sprint("client-", i%50)}},
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprint("t-", i%5)}}},
					{IPBlock: &networkingv1.IPBlock{CIDR: "10.200.0.0/16", Except: []string{"10.200.1.0/24"}}},
				},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
			}},
		}}
}
