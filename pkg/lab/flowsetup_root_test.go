package lab

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/nagare-net/nagare/pkg/lab/pktgen"
)

// pktgenTestEnv makes this test binary act as `nagarectl lab pktgen` when
// the lab re-executes it inside a pod namespace (no nagarectl build needed).
const pktgenTestEnv = "NAGARE_LAB_TEST_PKTGEN"

func init() {
	if os.Getenv(pktgenTestEnv) != "1" {
		return
	}
	if err := pktgen.Main(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "pktgen:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

const flowSetupTinyScenario = `
name: fs-tiny
nodes: [n1]
pods:
  - {name: a, node: n1}
  - {name: b, node: n1}
dataplanes: [ovs-netdev, linux-bridge]
reps: 1
measurements:
  - {name: setup, kind: flow-setup, client: a, server: b, flows: 5000, rate: 10000, duration: 2s}
  - {name: reval, kind: revalidation, client: a, server: b, flows: 5000, rate: 10000}
`

// TestFlowSetupOVSEndToEnd runs both flow-setup kinds against Open
// vSwitch: 5 000 new flows at 10 kpps (far below what it installs, so
// nearly all must arrive and be installed, one datapath flow each), then
// revalidation rounds over them; linux-bridge has no flow cache and must
// be reported as skipped.
func TestFlowSetupOVSEndToEnd(t *testing.T) {
	skipUnlessLab(t, "ovs-vswitchd", "ovsdb-server", "ovs-vsctl", "ovs-appctl", "ovs-ofctl", "iperf3")
	if err := ovsAvailable(); err != nil {
		t.Skip(err)
	}
	s, err := ParseScenario([]byte(flowSetupTinyScenario))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(pktgenTestEnv, "1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	saved := PktgenCommand
	PktgenCommand = func() ([]string, error) { return []string{exe}, nil }
	defer func() { PktgenCommand = saved }()

	prefix := fmt.Sprintf("nlf%d", os.Getpid())
	res, _ := runScenario(context.Background(), t, s, prefix, true)
	var fs *FlowSetupResult
	var rv *RevalidationResult
	for _, smp := range res.Samples {
		switch {
		case smp.DataPlane == "linux-bridge":
			if smp.Status != StatusSkipped || !strings.Contains(smp.Error, "FlowSetupPlane") {
				t.Errorf("linux-bridge %s: %s %q, want skipped (no FlowSetupPlane)", smp.Measurement, smp.Status, smp.Error)
			}
		case smp.Status != StatusOK:
			t.Errorf("%s %s: %s: %s", smp.DataPlane, smp.Measurement, smp.Status, smp.Error)
		case smp.Measurement == "setup":
			fs = smp.FlowSetup
		case smp.Measurement == "reval":
			rv = smp.Revalidation
		}
	}
	if fs == nil || rv == nil {
		t.Fatalf("missing results: flow setup %v, revalidation %v", fs, rv)
	}
	// Never faster than asked (+10 %); slower only far below it, as in
	// pktgen's TestVethRoot: a sender descheduled on a busy machine is
	// not a pacer bug.
	if fs.Sent != 5000 || fs.OfferedPPS < 2000 || fs.OfferedPPS > 11000 {
		t.Errorf("sent %d at %.0f pps, want 5000 at 10 kpps (at most 11 000, not under 2000)", fs.Sent, fs.OfferedPPS)
	}
	// Even a busy 2-vCPU VM installs 10k flows/s; each delivered first
	// packet had a miss that installed its own flow.
	if fs.DeliveredPct < 90 || fs.Installed < fs.Delivered || fs.Installed > fs.Flows+10 {
		t.Errorf("delivered %d (%.1f %%), installed %d of %d: want ≥ 90 %% and one flow per delivered key", fs.Delivered, fs.DeliveredPct, fs.Installed, fs.Flows)
	}
	if fs.PeakPerSec <= 0 || len(fs.Series) < 5 {
		t.Errorf("peak %.0f flows/s over %d samples", fs.PeakPerSec, len(fs.Series))
	}
	// The fill is 5000 first packets; on a busy VM Open vSwitch drops a few
	// in its socket queue (4941 seen), so ask for 90 % of them.
	if rv.Flows < 4500 || len(rv.SteadyRounds) != revalidationRounds || len(rv.ChangeRounds) != revalidationRounds {
		t.Errorf("revalidation: %d flows, %d steady and %d change rounds", rv.Flows, len(rv.SteadyRounds), len(rv.ChangeRounds))
	}
	for _, rd := range append(rv.SteadyRounds, rv.ChangeRounds...) {
		if rd.Flows < rv.Flows-10 {
			t.Errorf("a round covered %d flows of %d installed", rd.Flows, rv.Flows)
		}
	}
}
