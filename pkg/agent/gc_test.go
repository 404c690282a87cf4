package agent

import (
	"context"
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/agent/k8s"
)

// TestGCByUID: the periodic GC matches records to the API server's pods
// by UID. A StatefulSet's pod deleted and created again under its name
// has a new UID and a new sandbox: the old sandbox's record goes (before:
// matched by namespace/name it was kept forever, its address leaked).
func TestGCByUID(t *testing.T) {
	ta := newTestAgent(t, nil)
	ctx := context.Background()
	for _, id := range []string{"old", "kept"} {
		if _, err := ta.Add(ctx, addReq(id, "default/web-"+id)); err != nil {
			t.Fatal(err)
		}
	}
	// An agent before this change kept no UID: matched by name.
	ta.mu.Lock()
	ta.pods[podKey("kept", "eth0")].PodUID = ""
	ta.mu.Unlock()
	api := []k8s.PodRef{
		{Namespace: "default", Name: "web-old", UID: "uid-new"}, // re-created
		{Namespace: "default", Name: "web-kept", UID: "uid-whatever"},
	}
	n, err := ta.collect(ctx, "test", livePods(api, time.Now().Add(time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("released %d, want 1", n)
	}
	ta.mu.Lock()
	_, old := ta.pods[podKey("old", "eth0")]
	_, kept := ta.pods[podKey("kept", "eth0")]
	ta.mu.Unlock()
	if old || !kept {
		t.Errorf("old sandbox's record kept %v, UID-less record kept %v", old, kept)
	}
	if used, _ := ta.store.Stats(); used != 1 {
		t.Errorf("%d addresses allocated, want 1", used)
	}
}
