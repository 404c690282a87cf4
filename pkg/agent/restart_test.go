package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/nagare-net/nagare/pkg/agent/cniserver"
	"github.com/nagare-net/nagare/pkg/agent/podnet"
)

// TestAgentRestart: a restarted agent knows its pods from the IPAM
// database alone and its sync changes nothing on the switch (the pods'
// ports and flows stay as they were).
func TestAgentRestart(t *testing.T) {
	ta := newTestAgent(t, nil)
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		if _, err := ta.Add(ctx, addReq(fmt.Sprint("c", i), fmt.Sprint("default/p", i))); err != nil {
			t.Fatal(err)
		}
	}
	before := ta.sw.flows()
	nt := ta.restartAgent(t)
	if n := nt.podCount(); n != 3 {
		t.Fatalf("restarted agent knows %d pods, want 3", n)
	}
	if st := nt.lastSync; st.Added != 0 || st.Deleted != 0 {
		t.Errorf("restart sync changed the switch: %+v", st)
	}
	if after := nt.sw.flows(); !slices.Equal(before, after) {
		t.Errorf("flows changed across the restart:\nbefore %v\nafter  %v", before, after)
	}
}

// TestSwitchRestartKeepsPodPorts: after the switch restarts empty, the
// agent adds every pod's port again under its old number, so the pod's
// flows are the same as before.
func TestSwitchRestartKeepsPodPorts(t *testing.T) {
	ta := newTestAgent(t, nil)
	if _, err := ta.Add(context.Background(), addReq("c1", "default/a")); err != nil {
		t.Fatal(err)
	}
	host := podnet.HostIfName("c1", "eth0")
	was, _ := ta.sw.port(host)
	ta.sw.restart(40)
	ta.reconnect(t)
	if now, ok := ta.sw.port(host); !ok || now != was {
		t.Errorf("pod port %d after the switch restart (present %v), want %d", now, ok, was)
	}
	if f := ta.flowsNaming(fmt.Sprintf("in_port=%d", was)); len(f) == 0 {
		t.Error("no flows from the pod's port after the switch restart")
	}
}

// TestCheckAndRepeatedAdd: CHECK passes for an attached pod and fails
// once its port is gone; a repeated ADD keeps the address and the port;
// DEL of an unknown container is success.
func TestCheckAndRepeatedAdd(t *testing.T) {
	ta := newTestAgent(t, nil)
	ctx := context.Background()
	req := addReq("c1", "default/a")
	r1, err := ta.Add(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := ta.Check(ctx, req); err != nil {
		t.Fatalf("CHECK of an attached pod: %v", err)
	}
	r2, err := ta.Add(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	b1, _ := json.Marshal(r1)
	b2, _ := json.Marshal(r2)
	if string(b1) != string(b2) {
		t.Errorf("repeated ADD answered differently:\n%s\n%s", b1, b2)
	}
	if used, _ := ta.store.Stats(); used != 1 {
		t.Errorf("%d addresses after a repeated ADD", used)
	}
	if _, err := ta.control(ctx, switchdPortDel(podnet.HostIfName("c1", "eth0"))); err != nil {
		t.Fatal(err)
	}
	if err := ta.Check(ctx, req); err == nil {
		t.Error("CHECK passed with the pod's switch port gone")
	}
	var te *types.Error
	if err := ta.Check(ctx, addReq("nope", "default/x")); !errors.As(err, &te) || te.Code != types.ErrUnknownContainer {
		t.Errorf("CHECK of an unknown container: %v", err)
	}
	if err := ta.Del(ctx, addReq("nope", "default/x")); err != nil {
		t.Errorf("DEL of an unknown container: %v", err)
	}
}

// TestCNIGC: the runtime's GC releases every attachment not in its list
// of valid ones, and only those.
func TestCNIGC(t *testing.T) {
	ta := newTestAgent(t, nil)
	ctx := context.Background()
	for _, id := range []string{"keep", "gone"} {
		if _, err := ta.Add(ctx, addReq(id, "default/"+id)); err != nil {
			t.Fatal(err)
		}
	}
	conf := `{"cniVersion":"1.1.0","name":"nagare","type":"nagare-cni","cni.dev/valid-attachments":[{"containerID":"keep","ifname":"eth0"}]}`
	if err := ta.GC(ctx, &cniserver.Request{Config: []byte(conf)}); err != nil {
		t.Fatal(err)
	}
	ta.mu.Lock()
	_, keep := ta.pods[podKey("keep", "eth0")]
	_, gone := ta.pods[podKey("gone", "eth0")]
	ta.mu.Unlock()
	if !keep || gone {
		t.Errorf("after GC: valid one kept %v, other kept %v", keep, gone)
	}
	if _, ok := ta.sw.port(podnet.HostIfName("gone", "eth0")); ok {
		t.Error("the released pod's port stayed")
	}
}
