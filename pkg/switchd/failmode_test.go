package switchd

import (
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// TestFailSecure: with the controller gone, the flows it installed keep
// forwarding, and packets no flow covers are dropped (not flooded).
func TestFailSecure(t *testing.T) {
	addr, accept := listenController(t)
	ts := startSwitch(t, 3, func(c *Config) {
		c.FailMode = FailSecure
		c.Controllers = []Target{{Network: "tcp", Address: addr}}
	})
	ctl := accept()
	ctl.flow(t, "priority=10,in_port=1,actions=output:2")
	ctl.flow(t, "priority=10,in_port=2,actions=output:1")
	ctl.barrier(t)
	if err := ts.ping(1, 2); err != nil {
		t.Fatal(err)
	}
	ctl.c.Close()
	waitFor(t, "the switch to notice the controller left", func() bool {
		ts.connMu.Lock()
		defer ts.connMu.Unlock()
		return ts.controllers == 0
	})
	if err := ts.ping(1, 2); err != nil {
		t.Fatalf("installed flows stopped forwarding without the controller: %v", err)
	}
	if err := ts.ping(1, 3); err == nil {
		t.Fatal("secure mode forwarded a packet no flow allows")
	}
}

// TestFailStandalone: without a controller the bridge learns and forwards
// like a normal switch; a connected controller takes over again.
func TestFailStandalone(t *testing.T) {
	addr, accept := listenController(t)
	ts := startSwitch(t, 3, func(c *Config) {
		c.FailMode = FailStandalone
		c.Controllers = []Target{{Network: "tcp", Address: addr}}
	})
	if err := ts.ping(1, 3); err != nil {
		t.Fatalf("standalone without controller: %v", err)
	}
	ctl := accept()
	// The controller's policy: only pods 1 and 2 may talk.
	ctl.flow(t, "priority=10,in_port=1,actions=output:2")
	ctl.flow(t, "priority=10,in_port=2,actions=output:1")
	ctl.barrier(t)
	if err := ts.ping(1, 2); err != nil {
		t.Fatal(err)
	}
	if err := ts.ping(1, 3); err == nil {
		t.Fatal("pod 3 reachable although the controller's flows do not allow it")
	}
	// Controller messages work meanwhile: a role request is answered.
	ctl.send(t, &openflow.RoleRequest{Role: openflow.Role{Role: openflow.RoleMaster, GenerationID: 1}})
	ctl.wait(t, 5*time.Second, func(m openflow.Message) bool { _, ok := m.(*openflow.RoleReply); return ok })
}
