package lab

import (
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg"
)

func TestScenarioWithFlowsValidation(t *testing.T) {
	_, err := ParseScenario([]byte(`
name: bad
nodes: [n1, n2]
pods: [{name: a, node: n1}, {name: b, node: n2}, {name: c, node: n1}, {name: d, node: n1}]
dataplanes: [veth]
reps: 1
measurements:
  - {name: r, kind: rtt, client: a, server: b, with: [{client: c, server: d}]}
  - {name: u, kind: udp-pps, client: a, server: b, with: [{client: c, server: zz}, {client: c, server: c}, {client: c, server: d}]}
`))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		`"r": with: more flows are for udp-pps and tcp measurements only`,
		`"u": with[0].server "zz" is not a pod`,
		`"u": with[1]: client and server are the same pod`,
		`"u": with[2]: c → d is not inter-node like the measured flow`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// flowsResult is a seed1-steering-like run: one flow at two sizes, and a
// two-flow measurement, under two models.
func flowsResult(t *testing.T) *Result {
	t.Helper()
	s, err := ParseScenario([]byte(`
name: flows
nodes: [n1, n2]
pods: [{name: a, node: n1}, {name: b, node: n2}, {name: c, node: n1}, {name: d, node: n2}]
dataplanes: [nagare-switch+default, nagare-switch+vs-extend]
reps: 1
measurements:
  - {name: udp-64, kind: udp-pps, client: a, server: b, size: 64}
  - {name: udp-1400, kind: udp-pps, client: a, server: b, size: 1400}
  - {name: two, kind: udp-pps, client: a, server: b, size: 1400, with: [{client: c, server: d}]}
  - {name: two64, kind: udp-pps, client: a, server: b, size: 64, with: [{client: c, server: d}]}
paper:
  - {label: proposal, measurement: two, dataplane: nagare-switch+vs-extend, mbps: [850, 850.5], loss: [0.2, 0.3]}
  - {label: rss, measurement: udp-64, dataplane: nagare-switch+default, loss: [0.8]}
`))
	if err != nil {
		t.Fatal(err)
	}
	res := &Result{Scenario: s, Host: HostInfo{CPU: "test", CPUs: 2}, Planes: []PlaneInfo{
		{Name: "nagare-switch+default", Scope: "inter-node"}, {Name: "nagare-switch+vs-extend", Scope: "inter-node"}}}
	one := func(dp, m string, mbps float64, netRx []uint64) Sample {
		return Sample{DataPlane: dp, Measurement: m, Kind: KindUDPPPS, Placement: CrossCore, Load: "none", Rep: 1, Status: StatusOK,
			UDP: &UDPResult{RxPPS: 1000, TxPPS: 1000, RxMbps: mbps}, CPU: &CPUUsage{NetRxPerCPU: netRx}}
	}
	two := func(dp, m string, b, d, lossD float64) Sample {
		s := one(dp, m, b, []uint64{500, 7})
		s.Flows = []FlowResult{{Client: "a", Server: "b", UDP: UDPResult{RxMbps: b}}, {Client: "c", Server: "d", UDP: UDPResult{RxMbps: d, LossPct: lossD}}}
		return s
	}
	res.Samples = append(res.Samples,
		one("nagare-switch+default", "udp-64", 60, []uint64{900, 3}), one("nagare-switch+vs-extend", "udp-64", 50, []uint64{10, 0}),
		one("nagare-switch+default", "udp-1400", 1200, []uint64{800, 2}), one("nagare-switch+vs-extend", "udp-1400", 900, []uint64{12, 1}),
		two("nagare-switch+default", "two", 800, 200, 60), two("nagare-switch+vs-extend", "two", 500, 500, 2.5),
		two("nagare-switch+default", "two64", 80, 20, 0), two("nagare-switch+vs-extend", "two64", 50, 50, 0))
	return res
}

func TestMarkdownPerFlow(t *testing.T) {
	var b strings.Builder
	flowsResult(t).WriteMarkdown(&b)
	md := b.String()
	for _, want := range []string{
		"### two, per flow (2 flows at once, 1400 B): rx Mbit/s (loss %)",
		"| load | data plane | a → b | c → d | sum Mbit/s | min/max |",
		"| none | nagare-switch+default | 800 (0.0) | 200 (60.0) | 1000 | 0.25 |",
		"| none | nagare-switch+vs-extend | 500 (0.0) | 500 (2.5) | 1000 | 1.00 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	for _, want := range []string{
		"| measurement | load | data plane | CPU 0 | CPU 1 |",
		"| udp-64 | none | nagare-switch+default | 900 | 3 |",
		"| udp-1400 | none | nagare-switch+vs-extend | 12 | 1 |",
		"| two | none | nagare-switch+default | 500 | 7 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("NET_RX table lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "udp-64, per flow") {
		t.Error("per-flow table for a one-flow measurement")
	}
}

// TestUDPSizePlot renders seed 001's Fig. 6 shape, one flow and two
// flows' total, and finds each model's fixed colour in the plot area
// (bars) and in the legend column.
func TestUDPSizePlot(t *testing.T) {
	res := flowsResult(t)
	dir := t.TempDir()
	if err := res.WritePlots(dir); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"udp-mbps-none.png", "udp-mbps-2flows-none.png"} {
		checkPlaneColours(t, filepath.Join(dir, file), 22*vg.Centimeter, 12*vg.Centimeter, "nagare-switch+default", "nagare-switch+vs-extend")
	}
	if planeColors["nagare-switch+default"] == planeColors["nagare-switch+vs-extend"] {
		t.Error("two models share a colour")
	}
}

func TestPaperUDPBesideOurs(t *testing.T) {
	var b strings.Builder
	flowsResult(t).WriteMarkdown(&b)
	md := b.String()
	for _, want := range []string{
		"### The paper's UDP numbers beside ours",
		"| two | proposal | 850.0 (0.2), 850.5 (0.3) | nagare-switch+vs-extend | none | 500 (0.0), 500 (2.5) |",
		"| udp-64 | rss | – (0.8) | nagare-switch+default | none | 60 (0.0) |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "RTT µs min / avg") {
		t.Error("RTT paper table without RTT rows")
	}
}

func TestPaperUDPValidation(t *testing.T) {
	_, err := ParseScenario([]byte(`
name: bad
nodes: [n1, n2]
pods: [{name: a, node: n1}, {name: b, node: n2}, {name: c, node: n1}, {name: d, node: n2}]
dataplanes: [veth]
reps: 1
measurements:
  - {name: u, kind: udp-pps, client: a, server: b, with: [{client: c, server: d}]}
  - {name: t, kind: tcp, client: a, server: b}
paper:
  - {label: x, measurement: u, dataplane: veth, mbps: [1]}
  - {label: y, measurement: u, dataplane: veth}
  - {label: z, measurement: t, dataplane: veth, mbps: [1]}
`))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		"paper[0]: mbps: want one number per flow (2), got 1",
		`paper[1]: "u" is udp-pps: give mbps and/or loss, not rtt`,
		`paper[2]: "t" is not an rtt or udp-pps measurement`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
