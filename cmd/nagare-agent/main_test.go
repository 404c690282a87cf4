package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nagare-net/nagare/pkg/agent/cniserver"
)

// TestUsageLinesParse: every usage line of the package comment (and the
// flags deploy/ and the docs use) parses; each call then fails, if at
// all, on what it meets (no namespace, no file), never on its flags.
func TestUsageLinesParse(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"cleanup", "--node-name", "n1", "--netns", "/nonexistent/ns"},
		{"cleanup", "--node-name", "n1", "--netns", "/nonexistent/ns", "--state-dir", dir, "--bin-dir", dir, "--conf-dir", dir, "--keep-cni"},
		{"--node-name", "n1", "--cluster-file", "/nonexistent/cluster.yaml", "--netns", "n1"},
		{"--kubernetes", "--node-name", "n1", "--config", "/nonexistent/cluster.yaml", "--switch", "unix:/var/run/nagare/br-int.mgmt",
			"--cni-socket", "/var/run/nagare/cni.sock", "--agent-socket", "/var/run/nagare/agent.sock", "--state-dir", dir,
			"--metrics-addr", "127.0.0.1:9475", "--proc-sys", "/host/proc/sys"},
		{"--mode", "dpu", "--dpu-netns", "d1", "--dpu-switch", "ssl:169.254.100.2:6653", "--cluster-file", "/nonexistent/cluster.yaml"},
	} {
		err := run(args)
		if err == nil || strings.Contains(err.Error(), "flag provided but not defined") || strings.Contains(err.Error(), "unexpected arguments") {
			t.Errorf("%v: %v, want a failure past the flags", args, err)
		}
	}
	// install-cni as the DaemonSet's init container runs it.
	plugin := filepath.Join(dir, "nagare-cni-src")
	if err := os.WriteFile(plugin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	bin, conf := filepath.Join(dir, "bin"), filepath.Join(dir, "conf")
	for _, d := range []string{bin, conf} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := run([]string{"install-cni", "--bin-dir", bin, "--conf-dir", conf, "--cni-socket", "/var/run/nagare/cni.sock",
		"--plugin", plugin, "--portmap", "none"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(conf, cniserver.ConflistName)); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"cleanup", "--extra-arg"}); err == nil || !strings.Contains(err.Error(), "flag provided but not defined") {
		t.Errorf("cleanup --extra-arg: %v", err)
	}
}
