package lab

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// `make perf` runs the lab's fastpath and flow-setup scenarios and the
// fast-path and flow-setup benchmarks into one directory, then
// `nagarectl lab perf DIR` prints each figure below beside its peer of the
// same run and beside the value the docs quote (docs/perf-figures.md), so
// that a regression shows before it lands. Not in CI: two shared cores
// are too noisy for a threshold; a reader compares.

// PerfFigure is one figure make perf reports: a lab cell (a data plane's
// median in one row of a scenario's results, beside its peer's) or a
// benchmark metric (median over the -count runs).
type PerfFigure struct {
	// Name is the figure's key in the figures table.
	Name string
	// Lab cell: scenario (its results are in DIR/<Scenario>), measurement,
	// placement, column key (as in results.json), data plane and peer.
	Scenario, Measurement, Placement, Column, Plane, Peer string
	// Ratio: the quoted figure is Plane's value ÷ Peer's.
	Ratio bool
	// Benchmark: its name as go test prints it without the -GOMAXPROCS
	// suffix, and the metric's unit (ns/op, cpu-ns/op, min-ns/op ...),
	// read from DIR/bench.txt.
	Bench, Metric string
}

// PerfFigures are the figures make perf checks, in the order printed.
var PerfFigures = []PerfFigure{
	{Name: "fastpath intra-rtt same-core p50, nagare ÷ veth", Scenario: "fastpath", Measurement: "intra-rtt", Placement: SameCore, Column: "p50", Plane: "nagare", Peer: "veth", Ratio: true},
	{Name: "fastpath intra-rtt cross-core p50, nagare ÷ veth", Scenario: "fastpath", Measurement: "intra-rtt", Placement: CrossCore, Column: "p50", Plane: "nagare", Peer: "veth", Ratio: true},
	{Name: "fastpath intra-rtt same-core p50 quiet, nagare ÷ veth", Scenario: "fastpath", Measurement: "intra-rtt", Placement: SameCore, Column: "p50 quiet", Plane: "nagare", Peer: "veth", Ratio: true},
	{Name: "fastpath intra-rtt cross-core p50 quiet, nagare ÷ veth", Scenario: "fastpath", Measurement: "intra-rtt", Placement: CrossCore, Column: "p50 quiet", Plane: "nagare", Peer: "veth", Ratio: true},
	{Name: "fastpath intra-rtt same-core p50 quiet, tc-redirect ÷ veth", Scenario: "fastpath", Measurement: "intra-rtt", Placement: SameCore, Column: "p50 quiet", Plane: "tc-redirect", Peer: "veth", Ratio: true},
	{Name: "fastpath intra-rtt same-core p50, tc-redirect ÷ veth (the tc hop's floor)", Scenario: "fastpath", Measurement: "intra-rtt", Placement: SameCore, Column: "p50", Plane: "tc-redirect", Peer: "veth", Ratio: true},
	{Name: "fastpath intra-rtt same-core p50, nagare-switch ÷ veth", Scenario: "fastpath", Measurement: "intra-rtt", Placement: SameCore, Column: "p50", Plane: "nagare-switch", Peer: "veth", Ratio: true},
	{Name: "fastpath inter-rtt same-core p50, nagare ÷ bridge+vxlan", Scenario: "fastpath", Measurement: "inter-rtt", Placement: SameCore, Column: "p50", Plane: "nagare", Peer: "linux-bridge+vxlan", Ratio: true},
	{Name: "fastpath inter-rtt same-core p99, nagare ÷ bridge+vxlan", Scenario: "fastpath", Measurement: "inter-rtt", Placement: SameCore, Column: "p99", Plane: "nagare", Peer: "linux-bridge+vxlan", Ratio: true},
	{Name: "fastpath inter-rtt cross-core p50, nagare ÷ bridge+vxlan", Scenario: "fastpath", Measurement: "inter-rtt", Placement: CrossCore, Column: "p50", Plane: "nagare", Peer: "linux-bridge+vxlan", Ratio: true},
	{Name: "fastpath inter-rtt cross-core p99, nagare ÷ bridge+vxlan", Scenario: "fastpath", Measurement: "inter-rtt", Placement: CrossCore, Column: "p99", Plane: "nagare", Peer: "linux-bridge+vxlan", Ratio: true},
	{Name: "fastpath inter-tcp Gbit/s, nagare ÷ bridge+vxlan", Scenario: "fastpath", Measurement: "inter-tcp", Placement: CrossCore, Column: "gbps", Plane: "nagare", Peer: "linux-bridge+vxlan", Ratio: true},
	{Name: "fastpath inter-rtt same-core p50, nagare-switch ÷ bridge+vxlan", Scenario: "fastpath", Measurement: "inter-rtt", Placement: SameCore, Column: "p50", Plane: "nagare-switch", Peer: "linux-bridge+vxlan", Ratio: true},
	{Name: "fastpath inter-rtt cross-core p50, nagare-switch ÷ bridge+vxlan", Scenario: "fastpath", Measurement: "inter-rtt", Placement: CrossCore, Column: "p50", Plane: "nagare-switch", Peer: "linux-bridge+vxlan", Ratio: true},
	{Name: "fastpath inter-rtt cross-core p99, nagare-switch ÷ bridge+vxlan", Scenario: "fastpath", Measurement: "inter-rtt", Placement: CrossCore, Column: "p99", Plane: "nagare-switch", Peer: "linux-bridge+vxlan", Ratio: true},
	{Name: "fastpath intra-tcp Gbit/s, nagare ÷ veth", Scenario: "fastpath", Measurement: "intra-tcp", Placement: CrossCore, Column: "gbps", Plane: "nagare", Peer: "veth", Ratio: true},
	{Name: "fastpath inter-tcp Gbit/s, nagare-switch ÷ bridge+vxlan", Scenario: "fastpath", Measurement: "inter-tcp", Placement: CrossCore, Column: "gbps", Plane: "nagare-switch", Peer: "linux-bridge+vxlan", Ratio: true},
	{Name: "flow-setup 100k at 100 kpps, installed %", Scenario: "flow-setup", Measurement: "setup-100k-100k", Placement: CrossCore, Column: "installed %", Plane: "nagare-switch", Peer: "ovs-netdev"},
	{Name: "flow-setup 100k at 200 kpps, installed %", Scenario: "flow-setup", Measurement: "setup-100k-200k", Placement: CrossCore, Column: "installed %", Plane: "nagare-switch", Peer: "ovs-netdev"},
	{Name: "flow-setup 100k flat out, peak kflows/s ÷ ovs-netdev", Scenario: "flow-setup", Measurement: "setup-100k-max", Placement: CrossCore, Column: "peak kflows/s", Plane: "nagare-switch", Peer: "ovs-netdev", Ratio: true},
	{Name: "flow-setup 100k at 200 kpps, switch µs/flow", Scenario: "flow-setup", Measurement: "setup-100k-200k", Placement: CrossCore, Column: "switch µs/flow", Plane: "nagare-switch", Peer: "ovs-netdev"},
	{Name: "flow-setup 10k at 20 kpps, switch µs/flow", Scenario: "flow-setup", Measurement: "setup-10k-20k", Placement: CrossCore, Column: "switch µs/flow", Plane: "nagare-switch", Peer: "ovs-netdev"},
	{Name: "bench FlowSetup cpu-ns/op", Bench: "BenchmarkFlowSetup", Metric: "cpu-ns/op"},
	{Name: "bench FlowSetupOne cpu-ns/op", Bench: "BenchmarkFlowSetupOne", Metric: "cpu-ns/op"},
	{Name: "bench MegaflowSearch walk 1 mask min-ns/op", Bench: "BenchmarkMegaflowSearch/walk-1-masks", Metric: "min-ns/op"},
	{Name: "bench MegaflowSearch walk 64 masks min-ns/op", Bench: "BenchmarkMegaflowSearch/walk-64-masks", Metric: "min-ns/op"},
	{Name: "bench MegaflowSearch cache 64 masks min-ns/op", Bench: "BenchmarkMegaflowSearch/cache-64-masks", Metric: "min-ns/op"},
	{Name: "bench one pass, orig, shortcut min-ns/op", Bench: "BenchmarkCTRecirc/ct-one-pass-orig", Metric: "min-ns/op"},
	{Name: "bench one pass, orig, walk min-ns/op", Bench: "BenchmarkCTRecirc/ct-one-pass-orig-walk", Metric: "min-ns/op"},
	{Name: "bench one pass, reply, shortcut min-ns/op", Bench: "BenchmarkCTRecirc/ct-one-pass-reply", Metric: "min-ns/op"},
	{Name: "bench one pass, reply, walk min-ns/op", Bench: "BenchmarkCTRecirc/ct-one-pass-reply-walk", Metric: "min-ns/op"},
}

// ReadQuotedFigures reads the figures table: the rows of a Markdown table
// whose first cell is a figure name and second the value the docs quote
// ("–" or empty: none yet). Other lines are ignored.
func ReadQuotedFigures(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		cells := strings.Split(strings.TrimSpace(sc.Text()), "|")
		if len(cells) < 4 || cells[0] != "" {
			continue // not a table row with two cells
		}
		name, val := strings.TrimSpace(cells[1]), strings.TrimSpace(cells[2])
		v, err := strconv.ParseFloat(strings.TrimSuffix(val, "×"), 64)
		if err != nil {
			continue // the header, the separator, or no quote yet
		}
		out[name] = v
	}
	return out, sc.Err()
}

// benchLine is a line of go test -bench output: name-N, iterations, then
// value unit pairs.
var benchLine = regexp.MustCompile(`^(Benchmark\S*?)(?:-\d+)?\s+\d+\s+(.*)$`)

// ReadBenchMetrics reads go test -bench output: for each benchmark and
// unit, its values over the runs (-count).
func ReadBenchMetrics(r io.Reader) (map[string]map[string][]float64, error) {
	out := map[string]map[string][]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			if out[m[1]] == nil {
				out[m[1]] = map[string][]float64{}
			}
			out[m[1]][f[i+1]] = append(out[m[1]][f[i+1]], v)
		}
	}
	return out, sc.Err()
}

// PerfRow is one figure as measured now.
type PerfRow struct {
	Figure PerfFigure
	// Value and Peer are medians (NaN: not measured; Peer NaN for
	// benchmarks); Headline is Value ÷ Peer for ratio figures, else Value.
	Value, Peer, Headline float64
	// Quoted is what the docs quote (NaN: nothing yet).
	Quoted float64
}

// PerfReport measures every figure from the results in dir (see
// PerfFigures) against the quoted values.
func PerfReport(dir string, quoted map[string]float64) ([]PerfRow, error) {
	results := map[string]*Result{}
	var bench map[string]map[string][]float64
	var rows []PerfRow
	for _, f := range PerfFigures {
		row := PerfRow{Figure: f, Value: math.NaN(), Peer: math.NaN(), Headline: math.NaN(), Quoted: math.NaN()}
		if q, ok := quoted[f.Name]; ok {
			row.Quoted = q
		}
		switch {
		case f.Bench != "":
			if bench == nil {
				bench = map[string]map[string][]float64{}
				b, err := os.Open(filepath.Join(dir, "bench.txt"))
				switch {
				case errors.Is(err, fs.ErrNotExist): // benchmarks not run: their figures stay empty
				case err != nil:
					return nil, err
				default:
					bench, err = ReadBenchMetrics(b)
					b.Close()
					if err != nil {
						return nil, err
					}
				}
			}
			if vs := bench[f.Bench][f.Metric]; len(vs) > 0 {
				row.Value = Median(vs)
			}
		default:
			res, ok := results[f.Scenario]
			if !ok {
				var err error
				if res, err = ReadResult(filepath.Join(dir, f.Scenario)); err != nil {
					res = nil // a scenario not run: its figures stay empty
				}
				results[f.Scenario] = res
			}
			if res != nil {
				row.Value, row.Peer = labMedian(res, f, f.Plane), labMedian(res, f, f.Peer)
			}
		}
		row.Headline = row.Value
		if f.Ratio {
			row.Headline = row.Value / row.Peer
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// labMedian is plane's median of f's cell, NaN if it has none.
func labMedian(res *Result, f PerfFigure, plane string) float64 {
	for _, r := range res.Rows() {
		if r.Measurement == f.Measurement && r.Placement == f.Placement && r.DataPlane == plane && r.Load == noLoad(res) {
			if s := r.Cell(f.Column); s.N > 0 {
				return s.Median
			}
		}
	}
	return math.NaN()
}

// noLoad is the load step of runs without load: the scenario's first.
func noLoad(res *Result) string {
	if len(res.Scenario.Loads) > 0 {
		return res.Scenario.Loads[0].Name
	}
	return "none"
}

// WritePerfReport prints the rows as a Markdown table: the figure now
// (a ratio for ratio figures), the two medians it comes from, the quote,
// and the change from the quote.
func WritePerfReport(w io.Writer, rows []PerfRow) {
	fmt.Fprintln(w, "| figure | now | data plane | peer (same run) | docs quote | now vs quote |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	num := func(v float64) string {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return "–"
		}
		prec := 2
		switch a := math.Abs(v); {
		case a >= 100:
			prec = 0
		case a >= 10:
			prec = 1
		}
		return strconv.FormatFloat(v, 'f', prec, 64)
	}
	named := func(v float64, plane string) string {
		if math.IsNaN(v) {
			return "–"
		}
		return num(v) + " " + plane
	}
	for _, r := range rows {
		f := r.Figure
		now, quoted := num(r.Headline), num(r.Quoted)
		if f.Ratio {
			now, quoted = ratioText(now), ratioText(quoted)
		}
		plane, peer := "–", "–"
		if f.Plane != "" {
			plane, peer = named(r.Value, f.Plane), named(r.Peer, f.Peer)
		}
		vs := "–"
		if d := r.Headline/r.Quoted - 1; !math.IsNaN(d) && !math.IsInf(d, 0) {
			vs = fmt.Sprintf("%+.0f %%", 100*d)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", f.Name, now, plane, peer, quoted, vs)
	}
}

// ratioText marks a formatted ratio ("1.04×"), not "–".
func ratioText(s string) string {
	if s == "–" {
		return s
	}
	return s + "×"
}
