package k8s

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/nagare-net/nagare/pkg/agent/config"
	"github.com/nagare-net/nagare/pkg/agent/proxy"
)

func node(name, cidr, ip string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr}}
	if ip != "" {
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalIP, Address: ip}}
	}
	return n
}

func TestNodeFrom(t *testing.T) {
	for _, c := range []struct {
		n  *corev1.Node
		ok bool
	}{
		{node("a", "10.78.1.0/24", "192.168.1.1"), true},
		{node("b", "", "192.168.1.2"), false},             // no pod CIDR yet
		{node("c", "10.78.3.0/24", ""), false},            // no address yet
		{node("d", "10.78.4.0/24", "fd00::1"), false},     // IPv6 underlay: not supported
		{node("e", "10.78.5.1/24", "192.168.1.5"), false}, // host bits set
	} {
		got, err := NodeFrom(c.n)
		if (err == nil) != c.ok {
			t.Errorf("%s: %+v %v, want ok=%v", c.n.Name, got, err, c.ok)
		}
	}
}

type recorder struct {
	mu      sync.Mutex
	updated map[string]config.Node
	deleted []string
}

func (r *recorder) NodeUpdated(n config.Node) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.updated[n.Name] = n
}

func (r *recorder) NodeDeleted(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deleted = append(r.deleted, name)
	delete(r.updated, name)
}

func (r *recorder) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return
		}
	}
	t.Fatalf("%s: not seen (updated %v, deleted %v)", what, r.updated, r.deleted)
}

// TestSource follows nodes through the informers (client-go's fake
// clientset): usable nodes are reported, a node without a pod CIDR only
// once it has one, deletions too.
func TestSource(t *testing.T) {
	client := fake.NewSimpleClientset(node("me", "10.78.1.0/24", "192.168.1.1"), node("late", "", "192.168.1.2"))
	s := NewSource(client, "me", nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &recorder{updated: map[string]config.Node{}}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, r) }()
	r.wait(t, "this node", func() bool { _, ok := r.updated["me"]; return ok })
	if _, ok := r.updated["late"]; ok {
		t.Fatal("a node without a pod CIDR was reported")
	}
	me, err := s.LocalNode(ctx)
	if err != nil || me.PodCIDR.String() != "10.78.1.0/24" || me.Underlay.String() != "192.168.1.1" {
		t.Fatalf("LocalNode: %+v %v", me, err)
	}
	if _, err := client.CoreV1().Nodes().Update(ctx, node("late", "10.78.2.0/24", "192.168.1.2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "the late node with its pod CIDR", func() bool { return r.updated["late"].PodCIDR.String() == "10.78.2.0/24" })
	if err := client.CoreV1().Nodes().Delete(ctx, "late", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "the deletion", func() bool { return len(r.deleted) == 1 && r.deleted[0] == "late" })
	r.wait(t, "caches synced", func() bool { _, err := s.LocalPods(); return err == nil })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestSourceServices: Services and EndpointSlices, their updates and
// deletions, reach the tracker through the informers, and a refused
// Service becomes a Warning Event on it.
func TestSourceServices(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}
	thief := svc.DeepCopy()
	thief.Name, thief.Spec.ClusterIP, thief.Spec.ClusterIPs = "thief", "10.78.1.9", []string{"10.78.1.9"}
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-abc",
		Labels: map[string]string{discoveryv1.LabelServiceName: "web"}}, AddressType: discoveryv1.AddressTypeIPv4,
		Ports:     []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.78.1.5"}, NodeName: ptr.To("me")}}}
	client := fake.NewSimpleClientset(node("me", "10.78.1.0/24", "192.168.1.1"), svc, thief, es)
	s := NewSource(client, "me", nil)
	tr := proxy.NewTracker(proxy.Node{Name: "me", PodNetwork: []netip.Prefix{netip.MustParsePrefix("10.78.0.0/16")}}, s.ReportProblem)
	s.WatchServices(tr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx, &recorder{updated: map[string]config.Node{}})
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-tr.Changed():
			tr.Take()
		case <-time.After(50 * time.Millisecond):
		}
		ss := tr.Services()
		if len(ss) == 1 && len(ss[0].Ports) == 1 && len(ss[0].Ports[0].Endpoints) == 1 && len(tr.Problems()) == 1 {
			if e := ss[0].Ports[0].Endpoints[0]; !e.Local || e.Port != 8080 {
				t.Fatalf("endpoint %+v", e)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("services %v problems %v", ss, tr.Problems())
		}
	}
	// A deleted slice and Service reach the tracker too.
	if err := client.DiscoveryV1().EndpointSlices("ns").Delete(ctx, "web-abc", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Services("ns").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for len(tr.Services()) != 0 {
		select {
		case <-tr.Changed():
			tr.Take()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("deleted Service still there: %v", tr.Services())
		}
	}
	for {
		evs, err := client.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
		if err == nil && len(evs.Items) == 1 {
			if e := evs.Items[0]; e.Reason != proxy.ReasonClusterIPInPodNetwork || e.InvolvedObject.Name != "thief" || e.Type != corev1.EventTypeWarning {
				t.Fatalf("event %+v", e)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no event: %v %v", evs, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRESTConfigOverride: with kubeAPIServerOverride the agent's client
// goes to that address with the service account's token and CA, and
// never needs KUBERNETES_SERVICE_HOST (the Service it programs itself).
func TestRESTConfigOverride(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := RESTConfig("", true, "https://10.0.0.1:6443", dir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://10.0.0.1:6443" || cfg.BearerTokenFile != filepath.Join(dir, "token") || cfg.TLSClientConfig.CAFile != filepath.Join(dir, "ca.crt") {
		t.Errorf("config %+v", cfg)
	}
	if _, err := RESTConfig("", true, "", dir); err == nil {
		t.Error("in-cluster without the override and without KUBERNETES_SERVICE_HOST worked")
	}
	for _, bad := range []string{"10.0.0.1:6443", "http://10.0.0.1:6443", "https://"} {
		if _, err := RESTConfig("", true, bad, dir); err == nil {
			t.Errorf("override %q accepted", bad)
		}
	}
}

// TestMarkNetworkAvailable: the node's NetworkUnavailable condition
// becomes False (reason NagareIsUp); the node's other conditions stay.
func TestMarkNetworkAvailable(t *testing.T) {
	n := node("me", "10.78.1.0/24", "192.168.1.1")
	n.Status.Conditions = []corev1.NodeCondition{
		{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue, Reason: "NoRouteCreated"},
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"},
	}
	client := fake.NewSimpleClientset(n)
	s := NewSource(client, "me", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.MarkNetworkAvailable(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := client.CoreV1().Nodes().Get(ctx, "me", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conds := map[corev1.NodeConditionType]corev1.NodeCondition{}
	for _, c := range got.Status.Conditions {
		conds[c.Type] = c
	}
	if c := conds[corev1.NodeNetworkUnavailable]; c.Status != corev1.ConditionFalse || c.Reason != "NagareIsUp" {
		t.Errorf("NetworkUnavailable: %+v, want False/NagareIsUp", c)
	}
	if c := conds[corev1.NodeReady]; c.Status != corev1.ConditionTrue || len(got.Status.Conditions) != 2 {
		t.Errorf("conditions after the patch: %+v", got.Status.Conditions)
	}
}
