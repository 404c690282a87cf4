package switchd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestListenKeepsMgmtSocket: --listen adds listeners; the management
// socket <run-dir>/<bridge>.mgmt (0600) stays, and both sockets serve
// OpenFlow and the control protocol. Both go when the switch stops.
func TestListenKeepsMgmtSocket(t *testing.T) {
	extra := filepath.Join(t.TempDir(), "of.sock")
	ts := startSwitch(t, 2, func(c *Config) {
		c.Listen = []Target{{Passive: true, Network: "unix", Address: extra}}
	})
	for _, sock := range []string{ts.Sock, extra} {
		fi, err := os.Stat(sock)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want a socket with 0600", sock, fi.Mode())
		}
		if _, err := Call(t.Context(), sock, CtlRequest{Cmd: "list-ports"}); err != nil {
			t.Errorf("control protocol on %s: %v", sock, err)
		}
	}
	if out := ts.ofctl("show"); !strings.Contains(out, "1(v1)") {
		t.Errorf("ovs-ofctl show on the management socket:\n%s", out)
	}
	ts.stopRun()
	for _, sock := range []string{ts.Sock, extra} {
		if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after stop: %v, want it gone", sock, err)
		}
	}
}

// TestListenNamingMgmtSocket: --listen punix:<the management socket> is
// that socket, not a second bind that would unlink the first.
func TestListenNamingMgmtSocket(t *testing.T) {
	dir := t.TempDir()
	node, pods := newTopo(t, 1)
	ts := runSwitch(t, node, pods, dir, func(c *Config) {
		c.Listen = []Target{{Passive: true, Network: "unix", Address: filepath.Join(dir, "br0.mgmt")}}
	})
	cfg := ts.Config()
	if n := len(cfg.listenTargets()); n != 1 {
		t.Fatalf("%d listeners, want 1", n)
	}
	if _, err := Call(t.Context(), ts.Sock, CtlRequest{Cmd: "show"}); err != nil {
		t.Fatal(err)
	}
}

// TestSecondSwitchRefused: while a switch runs a bridge, another on the
// same run dir and bridge is refused with ErrBridgeBusy naming the holder
// (here: this process) before it touches the fast path, also when the run
// dir is reached through a symlink; another bridge in the same run dir is
// not. Once the first is closed, the bridge is free again.
func TestSecondSwitchRefused(t *testing.T) {
	ts := startSwitch(t, 1, nil)
	cfg := ts.Config()
	link := filepath.Join(t.TempDir(), "run")
	if err := os.Symlink(cfg.RunDir, link); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{cfg.RunDir, link} {
		c := cfg
		c.RunDir = dir
		sw, err := New(c)
		if err == nil {
			sw.Close()
			t.Fatalf("a second switch on bridge %s in %s started", c.Bridge, dir)
		}
		if !errors.Is(err, ErrBridgeBusy) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
			t.Fatalf("second switch in %s: %v, want ErrBridgeBusy naming pid %d", dir, err, os.Getpid())
		}
	}
	if _, err := Call(t.Context(), ts.Sock, CtlRequest{Cmd: "show"}); err != nil {
		t.Fatalf("first switch after the refusals: %v", err)
	}

	other := cfg
	other.Bridge = "br1"
	sw, err := New(other)
	if err != nil {
		t.Fatalf("bridge br1 beside br0: %v", err)
	}
	if err := sw.Destroy(); err != nil {
		t.Fatal(err)
	}

	ts.stop()
	sw, err = New(cfg)
	if err != nil {
		t.Fatalf("after the first switch closed: %v", err)
	}
	if err := sw.Destroy(); err != nil {
		t.Fatal(err)
	}
}
