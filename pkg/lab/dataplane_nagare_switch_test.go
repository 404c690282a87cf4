package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const nagareSwitchTinyScenario = `
name: nsw-tiny
nodes: [n1, n2]
pods:
  - {name: a, node: n1}
  - {name: b, node: n1}
  - {name: c, node: n2}
dataplanes: [nagare-switch]
reps: 1
measurements:
  - {name: intra, kind: rtt, client: a, server: b, duration: 1s, placements: [same-core]}
  - {name: inter, kind: rtt, client: a, server: c, duration: 1s, placements: [same-core]}
  - {name: setup, kind: flow-setup, client: a, server: b, flows: 3000, rate: 10000, duration: 1s}
  - {name: reval, kind: revalidation, client: a, server: b, flows: 3000, rate: 10000}
`

// TestNagareSwitchPlane runs the real nagare-switch daemon (built here)
// as the lab's data plane: round trips intra- and inter-node (VXLAN tunnel
// ports), flow setup and revalidation over its control socket; afterwards
// no namespace, switch process or fast-path pin of its bridges is left.
func TestNagareSwitchPlane(t *testing.T) {
	skipUnlessLab(t, "sockperf", "ovs-ofctl")
	bin, exe := useBuiltNagareSwitch(t)
	savedGen := PktgenCommand
	PktgenCommand = func() ([]string, error) { return []string{exe}, nil }
	defer func() { PktgenCommand = savedGen }()

	s, err := ParseScenario([]byte(nagareSwitchTinyScenario))
	if err != nil {
		t.Fatal(err)
	}
	pinsBefore := nagareSwitchPins()
	prefix := fmt.Sprintf("nlsw%d", os.Getpid())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	res, _ := runScenario(ctx, t, s, prefix, true)
	if pids := processesOf(bin); len(pids) > 0 {
		t.Errorf("nagare-switch processes left behind: %v", pids)
	}
	for p := range nagareSwitchPins() {
		if !pinsBefore[p] {
			t.Errorf("fast-path pins left behind: /sys/fs/bpf/nagare/%s", p)
		}
	}
	if len(res.Samples) != 4 {
		t.Fatalf("%d samples, want 4", len(res.Samples))
	}
	for _, smp := range res.Samples {
		if smp.Status != StatusOK {
			t.Errorf("%s: %s: %s", smp.Measurement, smp.Status, smp.Error)
		}
		if smp.SwitchProcs == 0 && smp.Measurement != "reval" {
			t.Errorf("%s: no switch processes accounted", smp.Measurement)
		}
	}
	for _, r := range res.Rows() {
		if (r.Measurement == "intra" || r.Measurement == "inter") && (r.OK != 1 || r.Cell("p50").Median <= 0) {
			t.Errorf("%s: %d/%d ok, p50 %v: %v", r.Measurement, r.OK, r.Runs, r.Cell("p50").Median, r.Errors)
		}
	}
	for _, smp := range res.Samples {
		if fs := smp.FlowSetup; fs != nil {
			// Exact-match caching: one cached flow per delivered key.
			if fs.DeliveredPct < 90 || fs.Installed < fs.Delivered || fs.Installed > fs.Flows+10 {
				t.Errorf("flow setup: delivered %d (%.1f %%), installed %d of %d", fs.Delivered, fs.DeliveredPct, fs.Installed, fs.Flows)
			}
		}
		if rv := smp.Revalidation; rv != nil {
			if rv.Flows < 2970 || len(rv.ChangeRounds) != revalidationRounds {
				t.Errorf("revalidation: %d flows, %d change rounds", rv.Flows, len(rv.ChangeRounds))
			}
			for _, rd := range append(rv.SteadyRounds, rv.ChangeRounds...) {
				if rd.Flows < rv.Flows-10 || rd.Duration <= 0 {
					t.Errorf("a round covered %d flows of %d in %v", rd.Flows, rv.Flows, rd.Duration)
				}
			}
		}
	}
}

// nagareSwitchPins lists the fast-path pin directories of lab switches
// (bridges br-<node>).
func nagareSwitchPins() map[string]bool {
	ents, _ := os.ReadDir("/sys/fs/bpf/nagare")
	out := map[string]bool{}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "br-") {
			out[e.Name()] = true
		}
	}
	return out
}

// processesOf returns the PIDs running the executable at path.
func processesOf(path string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && strings.TrimSuffix(exe, " (deleted)") == path {
			pids = append(pids, pid)
		}
	}
	return pids
}

// useBuiltNagareSwitch builds nagare-switch, makes the lab start that
// binary for the rest of the test, and returns it with this test
// executable (which stands in for pktgen and the slow controller).
func useBuiltNagareSwitch(t *testing.T) (bin, exe string) {
	t.Helper()
	bin = filepath.Join(buildNagare(t, "nagare-switch"), "nagare-switch")
	savedBin := NagareSwitchBinary
	NagareSwitchBinary = func() (string, error) { return bin, nil }
	t.Cleanup(func() { NagareSwitchBinary = savedBin })
	t.Setenv(pktgenTestEnv, "1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return bin, exe
}
