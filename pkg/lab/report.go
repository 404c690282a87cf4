package lab

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// rowKey identifies one report row: a data plane in one measurement,
// placement and load step; its cell values aggregate the repetitions.
type rowKey struct {
	Measurement, Placement, Load, DataPlane string
}

// Row is the aggregate of one data plane's repetitions of one test.
type Row struct {
	rowKey
	Kind    string
	Runs    int // repetitions attempted
	OK      int
	Skipped string // reason, if the data plane did not run here
	Errors  []string
	// Values by column name, one entry per successful repetition.
	Values      map[string][]float64
	SwitchProcs int
	DPUProcs    int
}

// Cell returns the median (min–max) summary of a column.
func (r *Row) Cell(col string) Summary { return Summarize(r.Values[col]) }

// Rows aggregates the samples, in scenario order: measurement, placement,
// load step, data plane.
func (res *Result) Rows() []*Row {
	byKey := map[rowKey]*Row{}
	for _, s := range res.Samples {
		if s.Kind == KindBookinfo {
			continue // one test per proxy placement: writeMesh's tables
		}
		k := rowKey{s.Measurement, s.Placement, s.Load, s.DataPlane}
		row := byKey[k]
		if row == nil {
			row = &Row{rowKey: k, Kind: s.Kind, Values: map[string][]float64{}}
			byKey[k] = row
		}
		switch s.Status {
		case StatusSkipped:
			row.Skipped = s.Error
			continue
		case StatusFailed:
			row.Runs++
			row.Errors = append(row.Errors, fmt.Sprintf("rep %d: %s", s.Rep, s.Error))
			continue
		}
		row.Runs++
		row.OK++
		row.SwitchProcs = s.SwitchProcs
		row.DPUProcs = s.DPUProcs
		add := func(col string, v float64) { row.Values[col] = append(row.Values[col], v) }
		if r := s.RTT; r != nil {
			add("min", r.MinUs)
			add("avg", r.AvgUs)
			add("p50", r.P50Us)
			if r.QuietSlices > 0 {
				add("p50 quiet", r.P50QuietUs)
			}
			add("p90", r.P90Us)
			add("p99", r.P99Us)
			add("p99.9", r.P999Us)
			add("max", r.MaxUs)
			add("trans/s", r.TransPerSec)
			add("lost", float64(r.Sent-r.Received))
		}
		if r := s.TCP; r != nil {
			add("gbps", r.Gbps)
			add("retrans", float64(r.Retransmits))
		}
		if r := s.UDP; r != nil {
			add("rx kpps", r.RxPPS/1000)
			add("tx kpps", r.TxPPS/1000)
			add("loss %", r.LossPct)
			add("rx mbps", r.RxMbps)
		}
		var sumMbps float64
		for i, f := range s.Flows {
			add(flowColumn(i, "mbps"), f.UDP.RxMbps)
			add(flowColumn(i, "loss"), f.UDP.LossPct)
			sumMbps += f.UDP.RxMbps
		}
		if len(s.Flows) > 0 {
			add("flows mbps", sumMbps)
		}
		if c := s.CPU; c != nil && c.WindowSeconds > 0 {
			for _, u := range s.Uplinks {
				add(uplinkColumn(u.Uplink, "rx"), float64(u.Rx)*8/c.WindowSeconds/1e9)
				add(uplinkColumn(u.Uplink, "tx"), float64(u.Tx)*8/c.WindowSeconds/1e9)
			}
		}
		addFlowSetupValues(s, add)
		addServiceValues(s, add)
		if r := s.Isolation; r != nil {
			add("flows", float64(r.Flows))
			add("masks", float64(r.Masks))
			add("attacker flows", float64(r.AttackerFlows))
			add("attacker masks", float64(r.AttackerMasks))
			add("victim drops", float64(r.VictimDrops))
		}
		if s.BackgroundBusyPct >= 0 {
			add("bg busy", s.BackgroundBusyPct)
		}
		if c := s.CPU; c != nil {
			add("switch cpu", c.SwitchCPUSeconds)
			add(dpuCPUColumn, c.DPUCPUSeconds)
			add("host cpu", c.HostCPUSeconds)
			if c.FastPathRuns > 0 {
				add(fastPathColumn, c.FastPathNsPerPacket())
			}
			add("softirqs", float64(c.TotalSoftirqs()))
			add("interrupts", float64(c.TotalInterrupts()))
			for i, n := range c.NetRxPerCPU {
				add(netRxColumn(i), float64(n))
			}
			if c.WindowSeconds > 0 {
				add("softirqs/s", float64(c.TotalSoftirqs())/c.WindowSeconds)
				add("interrupts/s", float64(c.TotalInterrupts())/c.WindowSeconds)
			}
		}
	}
	var rows []*Row
	s := res.Scenario
	for _, m := range s.Measurements {
		for _, pl := range m.Placements {
			for _, l := range s.Loads {
				for _, p := range res.Planes {
					if row := byKey[rowKey{m.Name, pl, l.Name, p.Name}]; row != nil {
						rows = append(rows, row)
					}
				}
			}
		}
	}
	return rows
}

// noisyBackgroundPct is the background load above which the report warns.
const noisyBackgroundPct = 20

func (res *Result) maxBackgroundBusy() float64 {
	m := 0.0
	for _, s := range res.Samples {
		if s.Status == StatusOK && s.BackgroundBusyPct > m {
			m = s.BackgroundBusyPct
		}
	}
	return m
}

type column struct {
	title, key string
	prec       int
	// cpu marks the switch CPU column, shown as "–" for in-kernel planes
	// (and 0 for DPU planes: the host runs no switch process).
	cpu bool
}

// fastPathColumn is the fast path's own time per packet and switch
// (Scenario.BPFStats), "–" for planes without one.
const fastPathColumn = "fast path ns"

// dpuCPUColumn is the CPU time of a DPU domain's switch, "–" for planes
// without one.
const dpuCPUColumn = "dpu cpu"

func columnsFor(kind string) []column {
	common := []column{{"switch CPU-s", "switch cpu", 2, true}, {"DPU CPU-s", dpuCPUColumn, 2, false}, {"host CPU-s", "host cpu", 2, false},
		{"softirqs", "softirqs", 0, false}, {"interrupts", "interrupts", 0, false}, {"bg busy %", "bg busy", 0, false}}
	var cols []column
	switch kind {
	case KindRTT:
		cols = []column{{"RTT min", "min", 1, false}, {"RTT avg", "avg", 1, false}, {"RTT p50", "p50", 1, false},
			{"RTT p50 quiet", "p50 quiet", 1, false}, {"RTT p90", "p90", 1, false}, {"RTT p99", "p99", 1, false}, {"trans/s", "trans/s", 0, false}}
	case KindTCP:
		cols = []column{{"TCP Gbit/s", "gbps", 2, false}, {"retransmits", "retrans", 0, false}}
	case KindUDPPPS:
		cols = []column{{"rx kpps", "rx kpps", 0, false}, {"tx kpps", "tx kpps", 0, false}, {"rx Mbit/s", "rx mbps", 0, false}, {"loss %", "loss %", 1, false}}
	case KindFlowSetup, KindRevalidation:
		cols = flowSetupColumns(kind)
	}
	return append(cols, common...)
}

// formatMedian is a summary's median alone, "–" without values.
func formatMedian(s Summary, prec int) string {
	if s.N == 0 || math.IsNaN(s.Median) {
		return "–"
	}
	return strconv.FormatFloat(s.Median, 'f', prec, 64)
}

func formatSummary(s Summary, prec int) string {
	if s.N == 0 || math.IsNaN(s.Median) {
		return "–"
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	if s.N == 1 || s.Min == s.Max {
		return f(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.Median), f(s.Min), f(s.Max))
}

func (res *Result) measurementTitle(m MeasurementSpec, placement string) string {
	s := res.Scenario
	what := ""
	switch m.Kind {
	case KindRTT:
		what = fmt.Sprintf("%d B UDP ping-pong (sockperf), RTT µs = 2 × sockperf one-way", m.Size)
	case KindTCP:
		what = "TCP throughput, 1 stream (iperf3)"
		if n := len(m.Also); n > 0 {
			what = fmt.Sprintf("TCP throughput summed over %d clients (%s and %s), 1 stream each (iperf3)", n+1, m.Client, strings.Join(m.Also, ", "))
		}
		if n := len(m.With); n > 0 {
			fl := []string{m.Client + " → " + m.Server}
			for _, f := range m.With {
				fl = append(fl, f.Client+" → "+f.Server)
			}
			what = fmt.Sprintf("TCP throughput summed over %d flows (%s), 1 stream each (iperf3)", n+1, strings.Join(fl, ", "))
		}
		if m.Reverse {
			what += ", server sending (-R)"
		}
	case KindUDPPPS:
		what = fmt.Sprintf("UDP %d B flood packet rate (iperf3 -b 0)", m.Size)
	case KindFlowSetup, KindRevalidation:
		what = flowSetupWhat(m)
	case KindConnRate, KindServiceScale:
		what = serviceWhat(m)
	}
	if m.Streams > 1 {
		what = strings.Replace(what, "1 stream", fmt.Sprintf("%d streams", m.Streams), 1)
	}
	what += viaSuffix(m)
	cpus := fmt.Sprintf("client CPU %d, server CPU %d, switch unpinned", s.CPUs.Client, s.CPUs.Server)
	if placement == SameCore {
		cpus = fmt.Sprintf("client, server and switch on CPU %d", s.CPUs.Server)
	}
	return fmt.Sprintf("%s: %s → %s (%s), %s; %s (%s), %s per test",
		m.Name, m.Client, m.Server, s.scope(m.Client, m.Server), what, placement, cpus, formatSeconds(m.Duration.Seconds()))
}

func formatSeconds(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) + " s" }

// WriteMarkdown writes the results as Markdown tables, one per measurement
// and placement; cells are median (min–max) over repetitions.
func (res *Result) WriteMarkdown(w io.Writer) {
	s := res.Scenario
	fmt.Fprintf(w, "## Lab scenario %s\n\n", s.Name)
	fmt.Fprintf(w, "%s, %d CPUs, kernel %s; %d repetition(s), data planes interleaved; wall time %.0f s.\n",
		res.Host.CPU, res.Host.CPUs, res.Host.Kernel, s.Reps, res.WallSeconds)
	fmt.Fprintf(w, "Cells: median (min–max) over repetitions. RTT in µs = 2 × sockperf's one-way latency (sockperf prints RTT/2).\n")
	fmt.Fprintf(w, "RTT p50 quiet: the least p50 over the test's %.1f s slices, the data plane's cost outside the machine's slow periods (docs/lab.md, \"Quiet p50\").\n", QuietSlice)
	fmt.Fprintf(w, "CPU-s: CPU seconds during the client's run; switch = the data plane's processes (– = in-kernel, counted in host), host = whole VM.\n")
	fmt.Fprintf(w, "softirqs, interrupts: counts on all CPUs during the client's run. bg busy %%: VM load from others just before the data plane's run (high = noisy row).\n")
	if res.Interrupted {
		fmt.Fprintf(w, "\n**Interrupted: partial results.**\n")
	}
	if bg := res.maxBackgroundBusy(); bg >= noisyBackgroundPct {
		fmt.Fprintf(w, "\n**Warning: the VM was up to %.0f %% busy with other work before some runs (bg busy %% column); those rows are noisy, rerun on a quiet machine to compare.**\n", bg)
	}
	rows := res.Rows()
	multiLoad := len(s.Loads) > 1
	for _, m := range s.Measurements {
		if m.Kind == KindBookinfo {
			continue // writeMesh
		}
		for _, pl := range m.Placements {
			fmt.Fprintf(w, "\n### %s\n\n", res.measurementTitle(m, pl))
			cols := measurementColumns(m)
			if s.BPFStats {
				cols = append(cols, column{"fast path ns/pkt", fastPathColumn, 0, false})
			}
			hdr := []string{}
			if multiLoad {
				hdr = append(hdr, "load")
			}
			hdr = append(hdr, "data plane", "runs ok")
			for _, c := range cols {
				hdr = append(hdr, c.title)
			}
			fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(hdr, " | "), strings.Repeat("---|", len(hdr)))
			var na []string
			present := map[string]bool{}
			for _, row := range rows {
				if row.Measurement != m.Name || row.Placement != pl {
					continue
				}
				present[row.DataPlane] = true
				cells := []string{}
				if multiLoad {
					cells = append(cells, row.Load)
				}
				cells = append(cells, row.DataPlane)
				if row.Skipped != "" {
					cells = append(cells, "skipped: "+row.Skipped)
					for range cols {
						cells = append(cells, "–")
					}
				} else {
					cells = append(cells, fmt.Sprintf("%d/%d", row.OK, row.Runs))
					for _, c := range cols {
						if c.cpu && row.SwitchProcs == 0 && row.DPUProcs > 0 {
							cells = append(cells, "0 (none on host)")
							continue
						}
						if (c.cpu && row.SwitchProcs == 0) || (c.key == dpuCPUColumn && row.DPUProcs == 0) {
							cells = append(cells, "–")
							continue
						}
						cells = append(cells, formatSummary(row.Cell(c.key), c.prec))
					}
				}
				fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
			}
			for _, p := range res.Planes {
				if !present[p.Name] {
					na = append(na, fmt.Sprintf("%s (%s)", p.Name, p.Scope))
				}
			}
			if len(na) > 0 {
				why := "data plane scope"
				if m.throughService() {
					why = "no Service proxy, or data plane scope"
				}
				fmt.Fprintf(w, "\nNot applicable (%s): %s.\n", why, strings.Join(na, ", "))
			}
		}
	}
	res.writeFlows(w, rows)
	res.writeUplinks(w, rows)
	res.writeNetRx(w, rows)
	res.writeCost(w, rows)
	res.writePaper(w, rows)
	res.writeFlowSetupVsOVS(w, rows)
	res.writeServices(w, rows)
	res.writeMesh(w)
	res.writeIsolation(w, rows)
	res.writeNetpol(w, rows)
	var failures []string
	for _, row := range rows {
		for _, e := range row.Errors {
			failures = append(failures, fmt.Sprintf("- %s / %s / %s / %s: %s", row.DataPlane, row.Measurement, row.Placement, row.Load, e))
		}
	}
	if len(failures) > 0 {
		fmt.Fprintf(w, "\n### Failures\n\n%s\n", strings.Join(failures, "\n"))
	}
	fmt.Fprintf(w, "\n### Data planes\n\n")
	for _, p := range res.Planes {
		fmt.Fprintf(w, "- **%s** (%s): %s\n", p.Name, p.Scope, p.Description)
	}
}

// writePaper prints the source paper's numbers beside ours (the first
// load step, every placement), each also as a ratio to the first row of
// its measurement, since absolute microseconds on a VM are not a NIC's.
func (res *Result) writePaper(w io.Writer, rows []*Row) {
	s := res.Scenario
	res.writePaperUDP(w, rows)
	rtt := false
	for _, pr := range s.Paper {
		rtt = rtt || len(pr.RTT) == 5
	}
	if !rtt {
		return
	}
	load := s.Loads[0].Name
	fmt.Fprintf(w, "\n### The paper's numbers beside ours (load %s)\n\n", load)
	fmt.Fprintf(w, "RTT µs min / avg / p50 / p90 / p99; ×: p50 over the measurement's first row, paper and ours; interrupts and softirqs per second on all CPUs; CPU-s of the switch on the host and in the DPU domain.\n\n")
	fmt.Fprintf(w, "| measurement | paper's setup | paper | paper p50 × | ours | placement | ours | ours p50 × | interrupts/s | softirqs/s | host switch CPU-s | DPU CPU-s |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	cols := []string{"min", "avg", "p50", "p90", "p99"}
	base := map[string]float64{}    // measurement -> paper p50 of its first row
	ourBase := map[string]float64{} // measurement/placement -> our p50 of that row's plane
	for _, pr := range s.Paper {
		if len(pr.RTT) != 5 {
			continue
		}
		if _, ok := base[pr.Measurement]; !ok {
			base[pr.Measurement] = pr.RTT[2]
		}
		var m *MeasurementSpec
		for i := range s.Measurements {
			if s.Measurements[i].Name == pr.Measurement {
				m = &s.Measurements[i]
			}
		}
		if m == nil {
			continue
		}
		paper := make([]string, 5)
		for i, v := range pr.RTT {
			paper[i] = strconv.FormatFloat(v, 'f', -1, 64)
		}
		for _, pl := range m.Placements {
			var ours []string
			var p50 float64
			rates := []string{"–", "–", "–", "–"}
			for _, row := range rows {
				if row.Measurement == pr.Measurement && row.Placement == pl && row.Load == load && row.DataPlane == pr.DataPlane && row.OK > 0 {
					for _, c := range cols {
						ours = append(ours, strconv.FormatFloat(row.Cell(c).Median, 'f', 1, 64))
					}
					p50 = row.Cell("p50").Median
					rates[0] = formatMedian(row.Cell("interrupts/s"), 0)
					rates[1] = formatMedian(row.Cell("softirqs/s"), 0)
					switch {
					case row.SwitchProcs > 0:
						rates[2] = strconv.FormatFloat(row.Cell("switch cpu").Median, 'f', 2, 64)
					case row.DPUProcs > 0:
						rates[2] = "0 (none on host)"
					}
					if row.DPUProcs > 0 {
						rates[3] = strconv.FormatFloat(row.Cell(dpuCPUColumn).Median, 'f', 2, 64)
					}
				}
			}
			k := pr.Measurement + "/" + string(pl)
			ratio := "–"
			if ours == nil {
				ours = []string{"not run"}
			} else {
				if _, ok := ourBase[k]; !ok {
					ourBase[k] = p50
				}
				ratio = fmt.Sprintf("%.2f", p50/ourBase[k])
			}
			fmt.Fprintf(w, "| %s | %s | %s | %.2f | %s | %s | %s | %s | %s |\n", pr.Measurement, pr.Label, strings.Join(paper, " / "),
				pr.RTT[2]/base[pr.Measurement], pr.DataPlane, pl, strings.Join(ours, " / "), ratio, strings.Join(rates, " | "))
		}
	}
}

// writeCost writes what each data plane adds over the cheapest path of the
// same measurement (the first data plane in report order that has a result:
// veth intra-node, routed inter-node), in the first load step: one row per
// data plane, one column per measurement and placement.
func (res *Result) writeCost(w io.Writer, rows []*Row) {
	s := res.Scenario
	load := s.Loads[0].Name
	var hdr []string
	cells := map[string][]string{} // data plane -> cells
	for _, m := range s.Measurements {
		if isFlowSetupKind(m.Kind) || m.Kind == KindServiceScale {
			continue // their own tables compare them (flowsetup_report.go, services_report.go)
		}
		col, unit, prec := "p50", "p50 µs", 1
		switch m.Kind {
		case KindConnRate:
			col, unit, prec = "conn/s", "conn/s", 0
		case KindTCP:
			col, unit, prec = "gbps", "Gbit/s", 2
		case KindUDPPPS:
			col, unit, prec = "rx kpps", "rx kpps", 0
		}
		for _, pl := range m.Placements {
			var floor *Row
			for _, row := range rows {
				if row.Measurement != m.Name || row.Placement != pl || row.Load != load || row.OK == 0 {
					continue
				}
				if floor == nil {
					floor = row
				}
				v, f := row.Cell(col).Median, floor.Cell(col).Median
				cell := strconv.FormatFloat(v, 'f', prec, 64)
				switch {
				case row == floor:
					cell += " (floor)"
				case m.Kind == KindRTT:
					cell += fmt.Sprintf(" (%+.1f)", v-f)
				case f > 0:
					cell += fmt.Sprintf(" (%.0f %%)", 100*v/f)
				}
				for len(cells[row.DataPlane]) < len(hdr) {
					cells[row.DataPlane] = append(cells[row.DataPlane], "–")
				}
				cells[row.DataPlane] = append(cells[row.DataPlane], cell)
			}
			if floor != nil {
				hdr = append(hdr, fmt.Sprintf("%s %s %s", m.Name, pl, unit))
			}
		}
	}
	if len(hdr) == 0 {
		return
	}
	fmt.Fprintf(w, "\n### Cost over the floor (medians, load %s)\n\n", load)
	fmt.Fprintf(w, "RTT: value (µs added to the floor); throughput: value (%% of the floor). Floor: the first data plane with a result (veth intra-node, routed inter-node). Rank data planes by same-core RTT.\n\n")
	fmt.Fprintf(w, "| data plane | %s |\n|%s\n", strings.Join(hdr, " | "), strings.Repeat("---|", len(hdr)+1))
	for _, p := range res.Planes {
		c, ok := cells[p.Name]
		if !ok {
			continue
		}
		for len(c) < len(hdr) {
			c = append(c, "–")
		}
		fmt.Fprintf(w, "| %s | %s |\n", p.Name, strings.Join(c, " | "))
	}
}

// csvHeader lists samples.csv's columns.
var csvHeader = append([]string{"dataplane", "measurement", "kind", "client", "server", "scope", "placement", "load", "rep", "status", "error",
	"start", "rtt_min_us", "rtt_avg_us", "rtt_p50_us", "rtt_p90_us", "rtt_p99_us", "rtt_p99_9_us", "rtt_max_us", "trans_per_s", "rtt_p50_quiet_us",
	"tcp_gbps", "tcp_retransmits", "udp_rx_pps", "udp_tx_pps", "udp_loss_pct",
	"background_busy_pct", "window_s", "switch_procs", "switch_cpu_s", "host_cpu_s", "host_busy_per_cpu", "softirqs_per_cpu", "net_rx_softirqs", "interrupts_per_cpu"}, append(append(flowSetupCSVHeader, servicesCSVHeader...), meshCSVHeader...)...)

// WriteCSV writes one line per sample (per repetition, unaggregated).
func (res *Result) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write(csvHeader)
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, s := range res.Samples {
		rec := []string{s.DataPlane, s.Measurement, s.Kind, s.Client, s.Server, s.Scope, s.Placement, s.Load,
			strconv.Itoa(s.Rep), s.Status, s.Error, ""}
		if !s.Start.IsZero() {
			rec[11] = s.Start.UTC().Format("2006-01-02T15:04:05Z")
		}
		if r := s.RTT; r != nil {
			quiet := ""
			if r.QuietSlices > 0 {
				quiet = f(r.P50QuietUs)
			}
			rec = append(rec, f(r.MinUs), f(r.AvgUs), f(r.P50Us), f(r.P90Us), f(r.P99Us), f(r.P999Us), f(r.MaxUs), f(r.TransPerSec), quiet)
		} else {
			rec = append(rec, "", "", "", "", "", "", "", "", "")
		}
		if r := s.TCP; r != nil {
			rec = append(rec, f(r.Gbps), strconv.FormatInt(r.Retransmits, 10))
		} else {
			rec = append(rec, "", "")
		}
		if r := s.UDP; r != nil {
			rec = append(rec, f(r.RxPPS), f(r.TxPPS), f(r.LossPct))
		} else {
			rec = append(rec, "", "", "")
		}
		rec = append(rec, f(s.BackgroundBusyPct))
		if c := s.CPU; c != nil {
			busy := make([]string, len(c.HostBusyPerCPU))
			for i, b := range c.HostBusyPerCPU {
				busy[i] = strconv.FormatFloat(b, 'f', 3, 64)
			}
			rec = append(rec, f(c.WindowSeconds), strconv.Itoa(s.SwitchProcs), f(c.SwitchCPUSeconds), f(c.HostCPUSeconds),
				strings.Join(busy, " "), joinUints(c.Softirqs), strconv.FormatUint(c.NetRxSoftirqs, 10), joinUints(c.Interrupts))
		} else {
			rec = append(rec, "", strconv.Itoa(s.SwitchProcs), "", "", "", "", "", "")
		}
		rec = append(rec, flowSetupCSV(s)...)
		rec = append(rec, servicesCSV(s)...)
		for _, m := range meshCSV(s) {
			cw.Write(append(rec[:len(rec):len(rec)], m...))
		}
	}
	cw.Flush()
	return cw.Error()
}

func joinUints(v []uint64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(s, " ")
}

// ReadResult loads a run's results.json from dir.
func ReadResult(dir string) (*Result, error) {
	data, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		return nil, err
	}
	var res Result
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "results.json"), err)
	}
	if res.Scenario == nil {
		return nil, fmt.Errorf("%s: no scenario", filepath.Join(dir, "results.json"))
	}
	return &res, nil
}

// WriteFiles writes results.json, samples.csv, summary.md and the plots
// into dir.
func (res *Result) WriteFiles(dir string) error {
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), data, 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "samples.csv"))
	if err != nil {
		return err
	}
	if err := res.WriteCSV(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	var md strings.Builder
	res.WriteMarkdown(&md)
	fmt.Fprintf(&md, "\nCommand: `%s`\n", res.Command)
	if err := os.WriteFile(filepath.Join(dir, "summary.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	return res.WritePlots(dir)
}

// flowColumn is the Row column of the i-th flow of a multi-flow
// measurement (the measured flow is 0).
func flowColumn(i int, what string) string { return fmt.Sprintf("flow%d %s", i, what) }

// writeFlows prints, for each measurement with more flows, every flow's
// throughput and loss per data plane and load step: seed 001's Tables 5
// and 7 (who gets what when flows collide or overcommit the CPUs).
func (res *Result) writeFlows(w io.Writer, rows []*Row) {
	for _, m := range res.Scenario.Measurements {
		if len(m.With) == 0 || m.Kind != KindUDPPPS {
			continue // tcp: summed, the uplinks table splits them
		}
		flows := append([]FlowSpec{{Client: m.Client, Server: m.Server}}, m.With...)
		for _, pl := range m.Placements {
			fmt.Fprintf(w, "\n### %s, per flow (%d flows at once, %d B): rx Mbit/s (loss %%)\n\n", m.Name, len(flows), m.Size)
			hdr := []string{"load", "data plane"}
			for _, f := range flows {
				hdr = append(hdr, f.Client+" → "+f.Server)
			}
			hdr = append(hdr, "sum Mbit/s", "min/max")
			fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(hdr, " | "), strings.Repeat("---|", len(hdr)))
			for _, row := range rows {
				if row.Measurement != m.Name || row.Placement != pl || row.OK == 0 {
					continue
				}
				cells := []string{row.Load, row.DataPlane}
				lo, hi := math.Inf(1), 0.0
				for i := range flows {
					v := row.Cell(flowColumn(i, "mbps")).Median
					lo, hi = math.Min(lo, v), math.Max(hi, v)
					cells = append(cells, fmt.Sprintf("%s (%s)", formatMedian(row.Cell(flowColumn(i, "mbps")), 0), formatMedian(row.Cell(flowColumn(i, "loss")), 1)))
				}
				ratio := "–"
				if hi > 0 && !math.IsNaN(lo) {
					ratio = strconv.FormatFloat(lo/hi, 'f', 2, 64)
				}
				cells = append(cells, formatMedian(row.Cell("flows mbps"), 0), ratio)
				fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
			}
		}
	}
}

func uplinkColumn(uplink, dir string) string { return "uplink " + uplink + " " + dir }

// writeUplinks prints, for scenarios with uplink ports, what each uplink
// carried in every test, at the tester's end: Gbit/s received (the pods'
// sending) and sent, over the CPU window (a little longer than the test).
func (res *Result) writeUplinks(w io.Writer, rows []*Row) {
	var ups []string
	for _, p := range res.Scenario.Pods {
		if p.Uplink != "" {
			ups = append(ups, p.Name)
		}
	}
	if len(ups) == 0 {
		return
	}
	fmt.Fprintf(w, "\n### Uplink ports: Gbit/s at the tester, received / sent\n\n")
	hdr := []string{"measurement", "data plane"}
	hdr = append(hdr, ups...)
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(hdr, " | "), strings.Repeat("---|", len(hdr)))
	for _, row := range rows {
		if row.OK == 0 || len(row.Values[uplinkColumn(ups[0], "rx")]) == 0 {
			continue
		}
		cells := []string{row.Measurement, row.DataPlane}
		for _, u := range ups {
			cells = append(cells, formatMedian(row.Cell(uplinkColumn(u, "rx")), 2)+" / "+formatMedian(row.Cell(uplinkColumn(u, "tx")), 2))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
}

func netRxColumn(cpu int) string { return fmt.Sprintf("net_rx cpu%d", cpu) }

// writeNetRx prints the NET_RX softirqs each CPU ran during every udp-pps
// test (from /proc/softirqs before and after the client): on which CPU
// the receive path ran, per data plane (seed 001's receive models).
func (res *Result) writeNetRx(w io.Writer, rows []*Row) {
	ncpu := 0
	for _, row := range rows {
		for ncpu < 64 && row.Kind == KindUDPPPS && len(row.Values[netRxColumn(ncpu)]) > 0 {
			ncpu++
		}
	}
	if ncpu == 0 {
		return
	}
	fmt.Fprintf(w, "\n### NET_RX softirqs per CPU during each UDP test (/proc/softirqs deltas, median of runs)\n\n")
	fmt.Fprintf(w, "Work a cpumap redirect moves to another CPU runs in that CPU's cpumap kthread, which /proc/softirqs does not count as NET_RX.\n\n")
	hdr := []string{"measurement", "load", "data plane"}
	for i := 0; i < ncpu; i++ {
		hdr = append(hdr, fmt.Sprintf("CPU %d", i))
	}
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(hdr, " | "), strings.Repeat("---|", len(hdr)))
	for _, row := range rows {
		if row.Kind != KindUDPPPS || row.OK == 0 || row.Placement != CrossCore {
			continue
		}
		cells := []string{row.Measurement, row.Load, row.DataPlane}
		for i := 0; i < ncpu; i++ {
			cells = append(cells, formatMedian(row.Cell(netRxColumn(i)), 0))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
}

// writePaperUDP prints the paper's per-flow throughput and loss beside
// ours (every load step: the paper's load is its own, ours are steps).
func (res *Result) writePaperUDP(w io.Writer, rows []*Row) {
	s := res.Scenario
	var prs []PaperRow
	for _, pr := range s.Paper {
		if len(pr.Mbps)+len(pr.Loss) > 0 {
			prs = append(prs, pr)
		}
	}
	if len(prs) == 0 {
		return
	}
	fmt.Fprintf(w, "\n### The paper's UDP numbers beside ours\n\n")
	fmt.Fprintf(w, "Per flow, the measured flow first: Mbit/s (loss %%); – where the paper gives only the other.\n\n")
	fmt.Fprintf(w, "| measurement | paper's setup | paper | ours | load | ours |\n|---|---|---|---|---|---|\n")
	cell := func(mbps, loss []float64, i int, prec int) string {
		m, l := "–", "–"
		if i < len(mbps) && !math.IsNaN(mbps[i]) {
			m = strconv.FormatFloat(mbps[i], 'f', prec, 64)
		}
		if i < len(loss) && !math.IsNaN(loss[i]) {
			l = strconv.FormatFloat(loss[i], 'f', 1, 64)
		}
		return fmt.Sprintf("%s (%s)", m, l)
	}
	for _, pr := range prs {
		n := max(len(pr.Mbps), len(pr.Loss))
		paper := make([]string, n)
		for i := range paper {
			paper[i] = cell(pr.Mbps, pr.Loss, i, 1)
		}
		for _, l := range s.Loads {
			ours := "not run"
			for _, row := range rows {
				if row.Measurement != pr.Measurement || row.Load != l.Name || row.DataPlane != pr.DataPlane || row.OK == 0 || row.Placement != CrossCore {
					continue
				}
				mbps, loss := make([]float64, n), make([]float64, n)
				for i := range n {
					mc, lc := flowColumn(i, "mbps"), flowColumn(i, "loss")
					if n == 1 {
						mc, lc = "rx mbps", "loss %"
					}
					mbps[i], loss[i] = row.Cell(mc).Median, row.Cell(lc).Median
				}
				var parts []string
				for i := range n {
					parts = append(parts, cell(mbps, loss, i, 0))
				}
				ours = strings.Join(parts, ", ")
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", pr.Measurement, pr.Label, strings.Join(paper, ", "), pr.DataPlane, l.Name, ours)
		}
	}
}
