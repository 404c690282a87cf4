package lab

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// slowctlTestEnv makes this test binary act as `nagarectl lab slowctl`.
const slowctlTestEnv = "NAGARE_LAB_TEST_SLOWCTL"

func init() {
	if os.Getenv(slowctlTestEnv) != "1" {
		return
	}
	if err := SlowControllerMain(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "slowctl:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

const isolationTinyScenario = `
name: iso-tiny
nodes: [n1]
pods:
  - {name: a, node: n1}
  - {name: b, node: n1}
  - {name: x, node: n1}
  - {name: y, node: n1}
dataplanes: [nagare-switch]
reps: 1
flows:
  - priority=200,arp,actions=NORMAL
  - priority=100,ip,nw_src=10.99.0.0/24,nw_dst=10.99.0.0/24,actions=NORMAL
  - priority=100,udp,nw_dst=10.96.0.10,tp_dst=53,actions=NORMAL
  - priority=0,actions=drop
measurements:
  - {name: rtt, kind: rtt, client: a, server: b, duration: 1s, placements: [same-core]}
loads:
  - {name: none}
  - {name: tse, attack: {from: x, to: y, pattern: tse, rate: 2000}}
  - {name: random, attack: {from: x, to: y, pattern: random, rate: 20000}}
  - {name: slow-ctl, attack: {from: x, to: y, pattern: random, rate: 5000, flows: ["priority=1,ip,actions=CONTROLLER:128"], slow_controller: 10ms}}
`

// TestIsolationScenario runs the isolation machinery on the real
// nagare-switch: the scenario's ACL is installed, attackers run (a TSE
// sender, a random one, one whose misses go to a slow controller), and
// after each step the attacker's cached flows and masks stay within the
// switch's per-port budgets and the victims' ports dropped nothing.
func TestIsolationScenario(t *testing.T) {
	skipUnlessLab(t, "sockperf", "ovs-ofctl")
	_, exe := useBuiltNagareSwitch(t)
	savedGen, savedCtl := PktgenCommand, SlowControllerCommand
	PktgenCommand = func() ([]string, error) { return []string{"env", pktgenTestEnv + "=1", exe}, nil }
	SlowControllerCommand = func() ([]string, error) { return []string{"env", pktgenTestEnv + "=", slowctlTestEnv + "=1", exe}, nil }
	defer func() { PktgenCommand, SlowControllerCommand = savedGen, savedCtl }()

	s, err := ParseScenario([]byte(isolationTinyScenario))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, _ := runScenario(ctx, t, s, fmt.Sprintf("nli%d", os.Getpid()), true)
	seen := map[string]bool{}
	for _, smp := range res.Samples {
		if smp.Status != StatusOK {
			t.Errorf("%s %s: %s: %s", smp.Load, smp.Measurement, smp.Status, smp.Error)
			continue
		}
		iso := smp.Isolation
		if iso == nil {
			t.Errorf("%s: no cache sample", smp.Load)
			continue
		}
		seen[smp.Load] = true
		if iso.VictimDrops != 0 {
			t.Errorf("%s: %d drops on the victims' ports", smp.Load, iso.VictimDrops)
		}
		if smp.Load == "none" {
			continue
		}
		// Defaults: half of the 200000 flow limit, 16 masks per port.
		if iso.AttackerFlows == 0 || iso.AttackerFlows > 100000 || iso.AttackerMasks > 16 {
			t.Errorf("%s: attacker holds %d flows, %d masks", smp.Load, iso.AttackerFlows, iso.AttackerMasks)
		}
	}
	if len(seen) != 4 {
		t.Errorf("cache samples for %v, want all 4 steps", seen)
	}
}
