package lab

import (
	"encoding/csv"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Captured from Open vSwitch 3.1 (Debian 12) in a lab topology: a few
// flows after ping, 35 269 flows after a flow-setup run, and the round
// right after an unrelated add-flow.
func TestParseUpcallShow(t *testing.T) {
	for _, tc := range []struct {
		file              string
		flows, max, limit int
		dump              time.Duration
		keys              []int
	}{
		{"ovs-upcall-show-small.txt", 14, 14, 2000000, time.Millisecond, []int{14}},
		{"ovs-upcall-show-35k.txt", 35269, 45785, 2000000, 25 * time.Millisecond, []int{35269}},
		{"ovs-upcall-show-35k-after-change.txt", 35269, 45785, 2000000, 123 * time.Millisecond, []int{35269}},
	} {
		u, err := ParseUpcallShow(readTestdata(t, tc.file))
		if err != nil {
			t.Errorf("%s: %v", tc.file, err)
			continue
		}
		if u.Flows != tc.flows || u.MaxFlows != tc.max || u.Limit != tc.limit || u.DumpDuration != tc.dump ||
			len(u.Keys) != len(tc.keys) || (len(u.Keys) > 0 && u.Keys[0] != tc.keys[0]) {
			t.Errorf("%s: parsed %+v, want flows %d max %d limit %d dump %v keys %v", tc.file, u, tc.flows, tc.max, tc.limit, tc.dump, tc.keys)
		}
	}
	for _, bad := range []string{"", readTestdata(t, "ovs-dpctl-show-35k.txt"),
		"netdev@ovs-netdev:\n  flows         : (current 1) (avg 1) (max 1) (limit 10000)\n  ufid enabled : true\n"} {
		if u, err := ParseUpcallShow(bad); err == nil {
			t.Errorf("parsed %q as %+v", bad, u)
		}
	}
}

func TestParseDpctlShowFlows(t *testing.T) {
	for file, want := range map[string]int{"ovs-dpctl-show-small.txt": 14, "ovs-dpctl-show-35k.txt": 35269} {
		n, err := ParseDpctlShowFlows(readTestdata(t, file))
		if err != nil || n != want {
			t.Errorf("%s: %d, %v; want %d", file, n, err, want)
		}
	}
	// upcall/show also says "flows", in another format: not a count here.
	if n, err := ParseDpctlShowFlows(readTestdata(t, "ovs-upcall-show-35k.txt")); err == nil {
		t.Errorf("upcall/show output parsed as dpctl/show: %d", n)
	}
}

func TestCountDumpedFlows(t *testing.T) {
	// 40 lines: the "flow-dump from the main thread:" header and 39 flows.
	if n := CountDumpedFlows(readTestdata(t, "ovs-dpctl-dump-flows-40.txt")); n != 39 {
		t.Errorf("counted %d flows, want 39", n)
	}
}

func TestFlowSetupPipelineReadsWholePorts(t *testing.T) {
	f := ovsFlowSetupFlow(1, 2)
	for _, part := range []string{"udp,in_port=1", "move:NXM_OF_UDP_SRC[]->NXM_NX_REG0[0..15]", "move:NXM_OF_UDP_DST[]->NXM_NX_REG1[0..15]", "output:2"} {
		if !strings.Contains(f, part) {
			t.Errorf("flow %q lacks %q", f, part)
		}
	}
}

func TestFlowSetupMetrics(t *testing.T) {
	// 10 000 flows; samples every 100 ms: 2 000 installed per interval up
	// to 8 000, then 1 600 (crossing 9 000 halfway), then flat.
	r := &FlowSetupResult{Flows: 10_000, Delivered: 9_500, Series: []FlowPoint{
		{-0.05, 0}, {0.05, 0}, {0.15, 2000}, {0.25, 4000}, {0.35, 6000}, {0.45, 8000}, {0.55, 9600}, {0.65, 9600}, {0.75, 9600},
	}}
	r.computeMetrics()
	nearRel := func(got, want float64) bool { return math.Abs(got-want) < 1e-6*math.Max(1, math.Abs(want)) }
	if r.Installed != 9600 || !nearRel(r.InstalledPct, 96) || !nearRel(r.DeliveredPct, 95) {
		t.Errorf("installed %d (%.1f %%), delivered %.1f %%", r.Installed, r.InstalledPct, r.DeliveredPct)
	}
	if !nearRel(r.PeakPerSec, 20_000) {
		t.Errorf("peak %.1f flows/s, want 20000", r.PeakPerSec)
	}
	// 9 000 is reached 1 000/1 600 of the way from 0.45 s to 0.55 s.
	if want := 0.45 + 0.1*1000/1600; !nearRel(r.T90, want) || !nearRel(r.Rate90, 9000/want) {
		t.Errorf("t90 %.4f s (%.0f flows/s), want %.4f s", r.T90, r.Rate90, want)
	}

	// Never reaching 90 %: no t90, but a peak.
	r = &FlowSetupResult{Flows: 10_000, Series: []FlowPoint{{0, 0}, {0.1, 500}, {0.2, 1500}, {0.3, 1500}}}
	r.computeMetrics()
	if r.T90 != 0 || r.Rate90 != 0 || !nearRel(r.PeakPerSec, 10_000) {
		t.Errorf("t90 %v rate90 %v peak %v", r.T90, r.Rate90, r.PeakPerSec)
	}

	// Samples closer than an interval are not divided by a tiny time.
	r = &FlowSetupResult{Flows: 1000, Series: []FlowPoint{{0, 0}, {0.001, 500}, {0.1, 600}}}
	r.computeMetrics()
	if !nearRel(r.PeakPerSec, 6000) {
		t.Errorf("peak %v over a 1 ms gap, want 6000 over 100 ms", r.PeakPerSec)
	}
}

func TestFlowSetupScenario(t *testing.T) {
	s, err := LoadScenario("flow-setup")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, m := range s.Measurements {
		kinds[m.Kind]++
		if m.Size != 64 || m.Flows < 1000 {
			t.Errorf("%s: size %d flows %d", m.Name, m.Size, m.Flows)
		}
	}
	if kinds[KindFlowSetup] < 3 || kinds[KindRevalidation] < 3 {
		t.Errorf("kinds %v: want several flow-setup rates and revalidation sizes", kinds)
	}
	flat := false
	for _, m := range s.Measurements {
		flat = flat || (m.Kind == KindFlowSetup && m.Rate == 0)
	}
	if !flat {
		t.Error("no flat-out flow-setup measurement")
	}

	bad := `
name: bad
nodes: [n1]
pods: [{name: a, node: n1}, {name: b, node: n1}]
dataplanes: [ovs-netdev]
reps: 1
measurements:
  - {name: m1, kind: flow-setup, client: a, server: b, flows: 0}
  - {name: m2, kind: flow-setup, client: a, server: a, flows: 10}
  - {name: m3, kind: revalidation, client: a, server: b, flows: 10, rate: -5}
  - {name: m4, kind: flow-setup, client: a, server: b, flows: 10, size: 40}
`
	_, err = ParseScenario([]byte(bad))
	if err == nil {
		t.Fatal("invalid flow-setup measurements accepted")
	}
	for _, want := range []string{`"m1": flows 0`, `"m2": flow-setup needs two pods`, `"m3": rate -5`, `"m4": size 40`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func flowSetupFakeResult(t *testing.T) *Result {
	t.Helper()
	s, err := ParseScenario([]byte(`
name: fake-fs
nodes: [n1]
pods: [{name: a, node: n1}, {name: b, node: n1}]
dataplanes: [ovs-netdev, veth]
reps: 1
measurements:
  - {name: fs, kind: flow-setup, client: a, server: b, flows: 10000, rate: 50000}
  - {name: rv, kind: revalidation, client: a, server: b, flows: 100000}
`))
	if err != nil {
		t.Fatal(err)
	}
	res := &Result{Scenario: s, Host: HostInfo{CPU: "test", CPUs: 2}, Planes: []PlaneInfo{
		{Name: "ovs-netdev", Scope: "intra-node"}, {Name: "veth", Scope: "intra-node"}}}
	fs := func(dp string, t90 float64) Sample {
		r := &FlowSetupResult{Flows: 10000, TargetPPS: 50000, OfferedPPS: 50000, Sent: 10000, Delivered: 10000,
			Series: []FlowPoint{{0, 0}, {t90 / 2, 4500}, {t90, 9000}, {t90 + 0.1, 10000}}}
		r.computeMetrics()
		return Sample{DataPlane: dp, Measurement: "fs", Kind: KindFlowSetup, Placement: CrossCore, Load: "none", Rep: 1,
			Status: StatusOK, FlowSetup: r, SwitchProcs: 1, CPU: &CPUUsage{SwitchCPUSeconds: 0.2}}
	}
	rv := func(dp string, change float64) Sample {
		return Sample{DataPlane: dp, Measurement: "rv", Kind: KindRevalidation, Placement: CrossCore, Load: "none", Rep: 1,
			Status: StatusOK, Revalidation: &RevalidationResult{Flows: 100000, SteadyMs: 40, ChangeMs: change}}
	}
	res.Samples = []Sample{fs("ovs-netdev", 0.4), fs("veth", 0.2), rv("ovs-netdev", 220), rv("veth", 110)}
	return res
}

func TestFlowSetupReport(t *testing.T) {
	res := flowSetupFakeResult(t)
	var md strings.Builder
	res.WriteMarkdown(&md)
	out := md.String()
	for _, want := range []string{
		"flow setup: 10k new UDP flows, one 64 B frame each, offered 50 kpps",
		"| ovs-netdev | 1/1 | 50 | 100.0 | 100.0 |",
		"| 0.40 | 22.5 |", // 90 % in 0.4 s = 22.5k flows/s
		"revalidation round time with 100k installed flows",
		"| 100000 | 40 | 0.40 | 220 | 2.20 |",
		"| fs | cross-core | kflows/s to 90 % | veth | 45.0 | 22.5 | 2.00× |",
		"| fs | cross-core | peak kflows/s | veth | ",
		"| fs | cross-core | flows installed % | veth | 100.0 | 100.0 | 1.00× |",
		"| rv | cross-core | round after table change ms | veth | 110.0 | 220.0 | 2.00× |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Cost over the floor") {
		t.Error("flow-setup measurements in the cost-over-floor table")
	}

	dir := t.TempDir()
	if err := res.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "samples.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	if got := recs[1][col["fs_rate90_flows_per_s"]]; got != "22500" {
		t.Errorf("fs_rate90_flows_per_s %q, want 22500", got)
	}
	if got := recs[3][col["reval_change_ms"]]; got != "220" {
		t.Errorf("reval_change_ms %q, want 220", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "flows-fs-cross-core.png")); err != nil {
		t.Errorf("no installed-flows plot: %v", err)
	}
	back, err := ReadResult(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r := back.Samples[0].FlowSetup; r == nil || len(r.Series) != 4 || r.Rate90 != 22500 {
		t.Errorf("results.json round trip lost the flow-setup result: %+v", r)
	}
}
