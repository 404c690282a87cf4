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
