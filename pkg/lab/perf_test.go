package lab

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadQuotedFigures(t *testing.T) {
	md := `Figures make perf checks.

| figure | quoted | where |
|---|---|---|
| a ratio | 1.04× | docs/lab.md |
| a value | 12.5 | README |
| not yet | – | |
`
	q, err := ReadQuotedFigures(strings.NewReader(md))
	if err != nil {
		t.Fatal(err)
	}
	if len(q) != 2 || q["a ratio"] != 1.04 || q["a value"] != 12.5 {
		t.Fatalf("quoted %v", q)
	}
}

func TestReadBenchMetrics(t *testing.T) {
	out := `goos: linux
BenchmarkFlowSetup-2   	  100000	      9620 ns/op	      8709 cpu-ns/op	    1657 B/op	       7 allocs/op
BenchmarkFlowSetup-2   	  100000	      9000 ns/op	      8000 cpu-ns/op	    1657 B/op	       7 allocs/op
BenchmarkFlowSetup-2   	  100000	      9900 ns/op	      9500 cpu-ns/op	    1657 B/op	       7 allocs/op
BenchmarkMegaflowSearch/walk-1-masks-2         	       1	       193.0 ns/op	       191.0 min-ns/op
PASS
`
	m, err := ReadBenchMetrics(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if got := m["BenchmarkFlowSetup"]["cpu-ns/op"]; len(got) != 3 || Median(got) != 8709 {
		t.Fatalf("FlowSetup cpu-ns/op %v", got)
	}
	if got := m["BenchmarkMegaflowSearch/walk-1-masks"]["min-ns/op"]; len(got) != 1 || got[0] != 191 {
		t.Fatalf("walk-1-masks %v (all %v)", got, m)
	}
}

// TestPerfReport: figures from a lab run's results.json and bench.txt,
// beside their peer and the quote; a scenario not run leaves its figures
// empty instead of failing the report.
func TestPerfReport(t *testing.T) {
	dir := t.TempDir()
	res := &Result{Scenario: &Scenario{Name: "flow-setup", Loads: []LoadSpec{{Name: "none"}},
		Measurements: []MeasurementSpec{{Name: "setup-100k-200k", Kind: KindFlowSetup, Placements: []string{CrossCore}}}},
		Planes: []PlaneInfo{{Name: "ovs-netdev"}, {Name: "nagare-switch"}}}
	for rep, v := range []float64{90, 100, 95} {
		for _, plane := range []string{"nagare-switch", "ovs-netdev"} {
			inst := v
			if plane == "ovs-netdev" {
				inst = v / 2
			}
			res.Samples = append(res.Samples, Sample{DataPlane: plane, Measurement: "setup-100k-200k", Kind: KindFlowSetup, Placement: CrossCore, Load: "none",
				Rep: rep + 1, Status: StatusOK, FlowSetup: &FlowSetupResult{InstalledPct: inst, SwitchUsPerFlow: 10}})
		}
	}
	data, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "flow-setup"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "flow-setup", "results.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.txt"), []byte("BenchmarkFlowSetup-2 100 9000 ns/op 8000 cpu-ns/op\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rows, err := PerfReport(dir, map[string]float64{"flow-setup 100k at 200 kpps, installed %": 80, "bench FlowSetup cpu-ns/op": 10000})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]PerfRow{}
	for _, r := range rows {
		byName[r.Figure.Name] = r
	}
	if r := byName["flow-setup 100k at 200 kpps, installed %"]; r.Value != 95 || r.Peer != 47.5 || r.Headline != 95 || r.Quoted != 80 {
		t.Fatalf("installed %%: %+v", r)
	}
	if r := byName["bench FlowSetup cpu-ns/op"]; r.Value != 8000 || r.Quoted != 10000 {
		t.Fatalf("bench: %+v", r)
	}
	if r := byName["fastpath intra-rtt same-core p50, nagare ÷ veth"]; !math.IsNaN(r.Value) || !math.IsNaN(r.Headline) {
		t.Fatalf("fastpath not run, got %+v", r)
	}
	var b strings.Builder
	WritePerfReport(&b, rows)
	for _, want := range []string{
		"| flow-setup 100k at 200 kpps, installed % | 95.0 | 95.0 nagare-switch | 47.5 ovs-netdev | 80.0 | +19 % |",
		"| bench FlowSetup cpu-ns/op | 8000 | – | – | 10000 | -20 % |",
		"| fastpath intra-rtt same-core p50, nagare ÷ veth | – | – | – | – | – |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}
