package k8s

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestPodAnnotation: a pod the cache has not seen is asked of the API
// server (only when a wait is given); unknown pods and annotations are "".
func TestPodAnnotation(t *testing.T) {
	cs := fake.NewSimpleClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart",
		Annotations: map[string]string{"nagare.io/proxy-redirect": "false"}}})
	s := NewSource(cs, "node1", nil)
	ctx := context.Background()
	if got := s.PodAnnotation(ctx, "shop", "cart", "nagare.io/proxy-redirect", time.Second); got != "false" {
		t.Errorf("annotated pod: %q", got)
	}
	if got := s.PodAnnotation(ctx, "shop", "cart", "nagare.io/proxy-redirect", 0); got != "" {
		t.Errorf("no wait, no cache: %q, want \"\"", got)
	}
	if got := s.PodAnnotation(ctx, "shop", "gone", "nagare.io/proxy-redirect", time.Second); got != "" {
		t.Errorf("unknown pod: %q", got)
	}
}
