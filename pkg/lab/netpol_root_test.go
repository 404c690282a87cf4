package lab

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

const netpolTinyScenario = `
name: netpol-tiny
nodes: [n1]
pods: [{name: c, node: n1}, {name: s, node: n1}]
dataplanes: [nagare, nagare+netpol1000, linux-bridge, linux-bridge+nft1000]
reps: 1
measurements:
  - {name: rtt, kind: rtt, client: c, server: s, size: 128, duration: 1s}
  - {name: tcp, kind: tcp, client: c, server: s, duration: 1s}
  - {name: conn, kind: conn-rate, client: c, server: s, duration: 1s}
`

// TestNetpolScenario runs the netpol scenario small: nagare (built here)
// and the Linux bridge, each without policies and with the measured
// traffic allowed among 1000 other policies. Every plane passes the
// run's policy check (a port no policy allows refused with policies,
// reached without), and the allowed traffic is measured through the
// policies. About a minute: NAGARE_LAB_NETPOL=1 (make lab-netpol-check).
func TestNetpolScenario(t *testing.T) {
	if os.Getenv("NAGARE_LAB_NETPOL") == "" {
		t.Skip("NAGARE_LAB_NETPOL=1 runs it (about a minute; make lab-netpol-check)")
	}
	skipUnlessLab(t, "sockperf", "iperf3", "wrk", "nginx", "nft")
	useBuiltNagare(t)

	s, err := ParseScenario([]byte(netpolTinyScenario))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, md := runScenario(ctx, t, s, fmt.Sprintf("nlnp%d", os.Getpid()), true)
	if len(res.Samples) != 12 {
		t.Fatalf("%d samples, want 12 (3 tests × 4 planes)", len(res.Samples))
	}
	for _, smp := range res.Samples {
		if smp.Status != StatusOK {
			t.Errorf("%s %s: %s: %s", smp.DataPlane, smp.Measurement, smp.Status, smp.Error)
			continue
		}
		switch {
		case smp.RTT != nil && smp.RTT.Received == 0,
			smp.TCP != nil && smp.TCP.Gbps <= 0,
			smp.ConnRate != nil && smp.ConnRate.ConnPerSec <= 0:
			t.Errorf("%s %s: no traffic through the allowing policies", smp.DataPlane, smp.Measurement)
		}
	}
	if want := "| rtt p50 (µs) | nagare+netpol1000 |"; !strings.Contains(md, want) {
		t.Errorf("report lacks %q", want)
	}
}
