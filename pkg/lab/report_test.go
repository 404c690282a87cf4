package lab

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func fakeResult(t *testing.T) *Result {
	t.Helper()
	s, err := ParseScenario([]byte(`
name: fake
nodes: [n1, n2]
pods: [{name: a, node: n1}, {name: b, node: n1}, {name: c, node: n2}]
dataplanes: [veth, ovs-netdev, routed]
reps: 2
measurements:
  - {name: intra, kind: rtt, client: a, server: b, placements: [cross-core, same-core]}
  - {name: inter, kind: tcp, client: a, server: c}
loads: [{name: none}, {name: cpu, cpu: {percent: 50, cpus: [0, 1]}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	res := &Result{Scenario: s, Host: HostInfo{CPU: "test", CPUs: 2, Kernel: "6.x"}, Planes: []PlaneInfo{
		{Name: "veth", Scope: "intra-node"}, {Name: "ovs-netdev", Scope: "intra-node"}, {Name: "routed", Scope: "intra+inter-node"}}}
	rtt := func(dp, pl, load string, rep int, p50 float64) Sample {
		return Sample{DataPlane: dp, Measurement: "intra", Kind: KindRTT, Placement: pl, Load: load, Rep: rep, Status: StatusOK,
			RTT: &RTTResult{MinUs: p50 - 1, AvgUs: p50, P50Us: p50, P90Us: p50 + 1, P99Us: p50 + 5, TransPerSec: 1e6 / p50},
			CPU: &CPUUsage{HostCPUSeconds: 1, Softirqs: []uint64{1, 2}, Interrupts: []uint64{3, 4}}}
	}
	for _, load := range []string{"none", "cpu"} {
		for _, pl := range []string{CrossCore, SameCore} {
			res.Samples = append(res.Samples, rtt("veth", pl, load, 1, 4.6), rtt("veth", pl, load, 2, 5.0),
				rtt("routed", pl, load, 1, 5.2), rtt("routed", pl, load, 2, 5.4))
		}
		res.Samples = append(res.Samples,
			Sample{DataPlane: "routed", Measurement: "inter", Kind: KindTCP, Placement: CrossCore, Load: load, Rep: 1, Status: StatusOK,
				TCP: &TCPResult{Gbps: 14.2, Retransmits: 100}, CPU: &CPUUsage{}},
			Sample{DataPlane: "routed", Measurement: "inter", Kind: KindTCP, Placement: CrossCore, Load: load, Rep: 2, Status: StatusFailed,
				Error: "iperf3: unable to connect"})
	}
	res.Samples = append(res.Samples,
		Sample{DataPlane: "ovs-netdev", Measurement: "intra", Kind: KindRTT, Placement: CrossCore, Load: "none", Status: StatusSkipped, Error: "not available: missing ovs-vswitchd"})
	return res
}

func TestMarkdownReport(t *testing.T) {
	var b strings.Builder
	fakeResult(t).WriteMarkdown(&b)
	md := b.String()
	for _, want := range []string{
		"| load | data plane | runs ok | RTT min |",
		"| none | veth | 2/2 | 3.8 (3.6–4.0) | 4.8 (4.6–5.0) | 4.8 (4.6–5.0) |", // medians of 2 reps, with min–max
		"| none | ovs-netdev | skipped: not available: missing ovs-vswitchd |",
		"| cpu | routed | 1/2 | 14.20 | 100 |",
		"Not applicable (data plane scope): veth (intra-node), ovs-netdev (intra-node).",
		"routed / inter / cross-core / none: rep 2: iperf3: unable to connect",
		"2 × sockperf",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	// In-kernel data planes have no switch process: "–", not "0.00".
	if strings.Contains(md, "| 0.00 | 1.00 |") {
		t.Errorf("switch CPU shown as 0.00 for an in-kernel plane:\n%s", md)
	}
}

func TestCSVAndFiles(t *testing.T) {
	res := fakeResult(t)
	dir := t.TempDir()
	res.Command = "nagarectl lab run fake"
	if err := res.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "samples.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll() // also checks equal field counts
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(res.Samples)+1 || len(recs[0]) != len(csvHeader) {
		t.Errorf("%d records of %d fields, want %d of %d", len(recs), len(recs[0]), len(res.Samples)+1, len(csvHeader))
	}
	back, err := ReadResult(dir)
	if err != nil {
		t.Fatal(err)
	}
	var a, b strings.Builder
	res.WriteMarkdown(&a)
	back.WriteMarkdown(&b)
	if a.String() != b.String() {
		t.Errorf("report from results.json differs:\n%s\n---\n%s", a.String(), b.String())
	}
	for _, name := range []string{"results.json", "summary.md", "rtt-intra-cross-core.png", "rtt-intra-same-core.png",
		"intra-cross-core-vs-load.png", "inter-cross-core-vs-load.png"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestMarkdownWarnsWhenVMWasBusy(t *testing.T) {
	res := fakeResult(t)
	var quiet strings.Builder
	res.WriteMarkdown(&quiet)
	if strings.Contains(quiet.String(), "Warning: the VM was") {
		t.Error("warning on a quiet VM")
	}
	res.Samples[0].BackgroundBusyPct = 87
	var busy strings.Builder
	res.WriteMarkdown(&busy)
	if !strings.Contains(busy.String(), "up to 87 % busy") {
		t.Errorf("no warning:\n%s", busy.String())
	}
}

func TestCostOverFloor(t *testing.T) {
	var b strings.Builder
	fakeResult(t).WriteMarkdown(&b)
	md := b.String()
	for _, want := range []string{
		"| data plane | intra cross-core p50 µs | intra same-core p50 µs | inter cross-core Gbit/s |",
		"| veth | 4.8 (floor) | 4.8 (floor) | – |",
		"| routed | 5.3 (+0.5) | 5.3 (+0.5) | 14.20 (floor) |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

// TestPaperBesideOurs: a scenario's paper block is printed beside our rows
// of the data planes that stand for it, with p50 ratios, rates per second
// and the host's and the DPU's switch CPU.
func TestPaperBesideOurs(t *testing.T) {
	res := fakeResult(t)
	res.Scenario.Paper = []PaperRow{
		{Label: "no offload", Measurement: "intra", DataPlane: "veth", RTT: []float64{12, 15.6, 15, 16, 31}},
		{Label: "full offload", Measurement: "intra", DataPlane: "routed", RTT: []float64{18, 25.3, 24, 29, 45}},
		{Label: "direct forward", Measurement: "intra", DataPlane: "nagare-dpu-df", RTT: []float64{9, 13, 13, 13, 30}},
	}
	if err := res.Scenario.Validate(); err != nil {
		t.Fatal(err)
	}
	for i := range res.Samples {
		if s := &res.Samples[i]; s.DataPlane == "routed" && s.CPU != nil {
			s.DPUProcs, s.CPU.DPUCPUSeconds, s.CPU.WindowSeconds = 1, 0.25, 2
		}
	}
	var b strings.Builder
	res.WriteMarkdown(&b)
	md := b.String()
	for _, want := range []string{
		"### The paper's numbers beside ours (load none)",
		"| intra | no offload | 12 / 15.6 / 15 / 16 / 31 | 1.00 | veth | cross-core | 3.8 / 4.8 / 4.8 / 5.8 / 9.8 | 1.00 | – | – | – | – |",
		// routed's p50 5.3 over veth's 4.8; 7 interrupts and 3 softirqs in 2 s; no switch on the host, 0.25 DPU CPU-s.
		"| intra | full offload | 18 / 25.3 / 24 / 29 / 45 | 1.60 | routed | cross-core | 4.3 / 5.3 / 5.3 / 6.3 / 10.3 | 1.10 | 4 | 2 | 0 (none on host) | 0.25 |",
		"| intra | direct forward | 9 / 13 / 13 / 13 / 30 | 0.87 | nagare-dpu-df | same-core | not run | – |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	bad := *res.Scenario
	bad.Paper = []PaperRow{{Label: "x", Measurement: "inter", DataPlane: "veth", RTT: []float64{1, 2}}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "not an rtt or udp-pps measurement") || !strings.Contains(err.Error(), "want 5 numbers") {
		t.Errorf("a paper row on a TCP measurement with 2 numbers: %v", err)
	}
}
