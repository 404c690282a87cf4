package k8s

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nagare-net/nagare/pkg/agent/config"
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
