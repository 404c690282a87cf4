package k8s

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nagare-net/nagare/pkg/agent/config"
	"github.com/nagare-net/nagare/pkg/agent/netpol"
)

func pod(ns, name, nodeName, ip string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "agnhost",
			Env:   []corev1.EnvVar{{Name: "BIG", Value: "dropped by the transform"}},
			Ports: []corev1.ContainerPort{{Name: "serve-80", ContainerPort: 80, Protocol: corev1.ProtocolTCP}, {ContainerPort: 81}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}}
}

// TestSourcePolicies: policies, namespaces and pods of every node reach
// the engine; a policy with a malformed CIDR gets a Warning Event; a
// label change on a pod of another node changes the realized peers.
func TestSourcePolicies(t *testing.T) {
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "allow-b"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "b"}}},
				{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/40"}}}}}}}
	client := fake.NewSimpleClientset(node("me", "10.78.1.0/24", "192.168.1.1"),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "y", Labels: map[string]string{"team": "b"}}},
		pod("x", "a", "me", "10.78.1.2", map[string]string{"app": "a"}),
		pod("y", "b", "other", "10.78.2.2", map[string]string{"app": "b"}),
		np)
	s := NewSource(client, "me", nil)
	e := netpol.NewEngine("me")
	s.WatchPolicies(e)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx, &recorder{updated: map[string]config.Node{}})
	waitRules := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			st, _, _ := e.Realize()
			got := ""
			for _, r := range st.Rules {
				got += fmt.Sprintf("%s %v %v;", r.ID, r.AppliedTo, r.Peers)
			}
			if got == want {
				for _, p := range e.Problems() {
					s.ReportPolicyProblem(p)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("rules %q, want %q", got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitRules("x/allow-b/ingress/0 [10.78.1.2] [10.78.2.2/32];")
	// Namespace y loses its label: no peer left, the rule allows nothing.
	if _, err := client.CoreV1().Namespaces().Update(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "y"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRules("")
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs, err := client.CoreV1().Events("x").List(ctx, metav1.ListOptions{})
		if err == nil && len(evs.Items) > 0 {
			if ev := evs.Items[0]; ev.InvolvedObject.Kind != "NetworkPolicy" || ev.InvolvedObject.Name != "allow-b" || ev.Type != corev1.EventTypeWarning {
				t.Fatalf("event %+v", ev)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no event: %v %v", evs, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPodFrom(t *testing.T) {
	p := pod("x", "a", "me", "10.78.1.2", map[string]string{"app": "a"})
	slim, _ := slimPod(p)
	got := PodFrom(slim.(*corev1.Pod))
	if got == nil || got.IP.String() != "10.78.1.2" || got.Node != "me" || len(got.Ports) != 1 || got.Ports[0] != (netpol.NamedPort{Name: "serve-80", Proto: netpol.ProtoTCP, Port: 80}) {
		t.Fatalf("%+v", got)
	}
	if c := slim.(*corev1.Pod).Spec.Containers; len(c) != 1 || len(c[0].Env) != 0 {
		t.Fatalf("slim pod kept %+v", c)
	}
	p.Status.Phase = corev1.PodSucceeded
	if PodFrom(p) != nil {
		t.Fatal("a finished pod is selectable")
	}
}
