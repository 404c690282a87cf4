// Package ctdiff is a differential test of nagare-switch against Open
// vSwitch: the same OpenFlow 1.3 pipeline (written with the real
// ovs-ofctl) in both, the same frames sent through both from raw sockets,
// and what comes out compared: where each frame was delivered (or that it
// was dropped), its bytes after the rewrites (addresses, ports, checksums
// valid), and the conntrack state it had on its recirculated pass, which
// the pipeline itself stamps into the frame's source MAC (stampTable).
//
// Open vSwitch runs its userspace datapath (datapath_type=netdev) with
// its own conntrack, started as the lab starts it (lab.StartOVS); the
// switch under test is nagare-switch (pkg/switchd) in this process. Each
// runs on its own copy of one topology (bench_test.go). The cases are a
// table (cases_test.go); the first difference in a case fails it with
// both switches' frames decoded and in hex, their traces of the packet,
// their flow caches and connection tables. Run one case with
//
//	go test -count=1 -v -run 'TestDiff/dnat$' ./test/ctdiff/
//
// CTDIFF_KEEP_GOING=1 reports every differing packet of a case, not only
// the first; CTDIFF_SWITCHES=ovs (or nagare) runs one switch against the
// expectations alone (how a new case's expectations are checked against
// the reference first).
package ctdiff

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/nagare-net/nagare/pkg/lab"
)

// skipReason is why this host cannot run the comparison ("" when it can).
var skipReason string

// pinRoot is the BPF filesystem directory nagare-switch pins under.
var pinRoot string

func TestMain(m *testing.M) {
	code := func() int {
		flag.Parse()
		switch {
		case testing.Short():
		case os.Geteuid() != 0:
			skipReason = "needs root (network namespaces, BPF, Open vSwitch)"
		case lab.OVSAvailable() != nil:
			skipReason = fmt.Sprintf("Open vSwitch cannot run here: %v (make deps installs it)", lab.OVSAvailable())
		}
		if _, err := exec.LookPath("ovs-ofctl"); err != nil && skipReason == "" {
			skipReason = "no ovs-ofctl (Debian package openvswitch-common)"
		}
		if skipReason == "" && !testing.Short() {
			_ = exec.Command("mountpoint", "-q", "/sys/fs/bpf").Run()
			dir, err := os.MkdirTemp("/sys/fs/bpf", "nagare-ctdiff-")
			if err != nil {
				skipReason = fmt.Sprintf("no BPF filesystem at /sys/fs/bpf: %v", err)
			} else {
				pinRoot = dir
				defer os.RemoveAll(dir)
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// requireHost skips t when the host cannot run both switches.
func requireHost(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("ctdiff: skipped in -short mode (needs root, namespaces, Open vSwitch)")
	}
	if skipReason != "" {
		t.Skip("ctdiff: " + skipReason)
	}
}
