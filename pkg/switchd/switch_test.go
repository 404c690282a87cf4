package switchd

import (
	"errors"
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
	if n := len(ts.listeners); n != 1 {
		t.Fatalf("%d listeners, want 1", n)
	}
	if _, err := Call(t.Context(), ts.Sock, CtlRequest{Cmd: "show"}); err != nil {
		t.Fatal(err)
	}
}
