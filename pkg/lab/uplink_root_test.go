package lab

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// seed4-offload in small: pods on n1, a tester reached over two uplink
// ports of the switch, one and two pods sending and receiving.
const uplinkTinyScenario = `
name: uplink-tiny
nodes: [n1]
underlay: {mtu: 9000}
pods:
  - {name: a1, node: n1}
  - {name: a2, node: n1}
  - {name: u1, node: n1, uplink: tb}
  - {name: u2, node: n1, uplink: tb}
dataplanes: [nagare, nagare-switch, nagare-switch-onload]
reps: 1
measurements:
  - {name: send-1, kind: tcp, client: a1, server: u1, duration: 1s}
  - {name: send-2, kind: tcp, client: a1, server: u1, duration: 1s, with: [{client: a2, server: u2}]}
  - {name: recv-1, kind: tcp, client: a1, server: u1, duration: 1s, reverse: true}
  - {name: recv-2, kind: tcp, client: a1, server: u1, duration: 1s, reverse: true, with: [{client: a2, server: u2}]}
`

// TestUplinksTiny runs seed 004's topology in small with nagare-switch
// offloaded and onloaded: every test's rows are there with throughput,
// and the uplink counters at the tester prove each pod's traffic crossed
// its own uplink (a1's u1, a2's u2) and nothing else did; nagare (the
// CNI), which has no uplink ports, is skipped with its reason.
func TestUplinksTiny(t *testing.T) {
	skipUnlessLab(t, "iperf3", "ovs-ofctl")
	useBuiltNagareSwitch(t)
	s, err := ParseScenario([]byte(uplinkTinyScenario))
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("nls4u%d", os.Getpid())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, _ := runScenario(ctx, t, s, prefix, true)

	for _, pi := range res.Planes {
		if pi.Name == "nagare" && !strings.Contains(pi.Skipped, "uplink") {
			t.Errorf("nagare: skipped %q, want the reason it has no uplink ports", pi.Skipped)
		}
	}
	rows := 0
	for _, r := range res.Rows() {
		if r.DataPlane == "nagare" {
			continue
		}
		rows++
		if r.OK != 1 || !(r.Cell("gbps").Median > 0) {
			t.Errorf("%s %s: %d/%d ok, %v Gbit/s: %v", r.DataPlane, r.Measurement, r.OK, r.Runs, r.Cell("gbps").Median, r.Errors)
		}
	}
	if rows != 8 {
		t.Errorf("%d result rows of the two switch planes, want 8", rows)
	}
	for _, smp := range res.Samples {
		if smp.Status != StatusOK || smp.TCP == nil {
			continue
		}
		reverse := strings.HasPrefix(smp.Measurement, "recv")
		// Payload bytes go tester-ward (Rx at the tester) when the pods
		// send, pod-ward (Tx) when they receive.
		payload := map[string]uint64{}
		for _, u := range smp.Uplinks {
			payload[u.Uplink] = u.Rx
			if reverse {
				payload[u.Uplink] = u.Tx
			}
		}
		if len(payload) != 2 {
			t.Errorf("%s %s: uplink counters %+v, want u1 and u2", smp.DataPlane, smp.Measurement, smp.Uplinks)
			continue
		}
		goodput := smp.TCP.Gbps * 1e9 / 8 * 1 // 1 s tests
		sum := float64(payload["u1"] + payload["u2"])
		where := fmt.Sprintf("%s %s: %.2f Gbit/s, uplink payload bytes u1 %d u2 %d", smp.DataPlane, smp.Measurement, smp.TCP.Gbps, payload["u1"], payload["u2"])
		if sum < 0.9*goodput {
			t.Errorf("%s: the uplinks carried less than the pods' goodput (%.0f bytes)", where, goodput)
		}
		if strings.HasSuffix(smp.Measurement, "-1") {
			// One pod: u1 only (u2 may carry an ARP or two).
			if payload["u1"] < 1<<20 || payload["u2"] > 64<<10 {
				t.Errorf("%s: want a1's traffic on u1 only", where)
			}
		} else if float64(payload["u1"]) < 0.1*sum || float64(payload["u2"]) < 0.1*sum {
			// Two pods, one per uplink: each carries its pod's share.
			t.Errorf("%s: want a1's traffic on u1 and a2's on u2", where)
		}
	}
}
