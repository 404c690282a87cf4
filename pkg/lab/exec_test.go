package lab

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestStartStopKillsWholeProcessGroup(t *testing.T) {
	var c Cleanup
	sh := NewShell(nil)
	// The child forks a grandchild and reports its PID, then waits.
	p, err := sh.Start(&c, "ready", "sh", "-c", `sleep 300 & echo "child $!"; echo ready; wait`)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(context.Background(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	var child int
	for _, line := range strings.Split(p.Output(), "\n") {
		if v, ok := strings.CutPrefix(line, "child "); ok {
			child, _ = strconv.Atoi(v)
		}
	}
	if child == 0 || !alive(child) {
		t.Fatalf("grandchild not running: %q", p.Output())
	}
	if err := c.RunAll(); err != nil { // runs p.Stop
		t.Fatal(err)
	}
	if !p.Exited() {
		t.Error("leader still running after cleanup")
	}
	// The grandchild got SIGTERM with the group; it is not our child, so
	// poll for its exit briefly.
	deadline := time.Now().Add(5 * time.Second)
	for alive(child) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if alive(child) {
		syscall.Kill(child, syscall.SIGKILL)
		t.Errorf("grandchild %d survived Stop", child)
	}
}

func TestWaitReadyReportsEarlyExit(t *testing.T) {
	var c Cleanup
	defer c.RunAll()
	p, err := NewShell(nil).Start(&c, "never", "sh", "-c", "echo oops; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	err = p.WaitReady(context.Background(), 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "oops") {
		t.Errorf("err = %v", err)
	}
}

func TestRunReportsCommandAndOutput(t *testing.T) {
	_, err := NewShell(nil).Run(context.Background(), "sh", "-c", "echo bad thing >&2; exit 1")
	if err == nil || !strings.Contains(err.Error(), "bad thing") || !strings.Contains(err.Error(), "sh -c") {
		t.Errorf("err = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := NewShell(nil).Run(ctx, "sleep", "30"); err == nil {
		t.Error("cancelled command returned nil")
	}
	if time.Since(start) > 10*time.Second {
		t.Error("cancel did not kill the command")
	}
}
