package lab

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Reports of the flow-setup kinds: their cells, titles, CSV columns, the
// comparison with Open vSwitch and the installed-flows plot.

// addFlowSetupValues adds a sample's flow-setup values to its report row.
func addFlowSetupValues(s Sample, add func(col string, v float64)) {
	if r := s.FlowSetup; r != nil {
		add("offered kpps", r.OfferedPPS/1000)
		add("delivered %", r.DeliveredPct)
		add("installed %", r.InstalledPct)
		add("peak kflows/s", r.PeakPerSec/1000)
		if r.T90 > 0 {
			add("t90 s", r.T90)
			add("kflows/s 90%", r.Rate90/1000)
		}
		if r.SwitchUsPerFlow > 0 {
			add("switch µs/flow", r.SwitchUsPerFlow)
		}
		add("lost before switch", float64(r.TxDropped))
		add("receiver drops", float64(r.ReceiverDrops))
	}
	if r := s.Revalidation; r != nil {
		add("flows", float64(r.Flows))
		add("steady ms", r.SteadyMs)
		add("change ms", r.ChangeMs)
		if v := usPerFlow(r.SteadyMs, r.Flows); !math.IsNaN(v) {
			add("steady µs/flow", v)
		}
		if v := usPerFlow(r.ChangeMs, r.Flows); !math.IsNaN(v) {
			add("change µs/flow", v)
		}
	}
}

func flowSetupColumns(kind string) []column {
	if kind == KindRevalidation {
		return []column{{"flows installed", "flows", 0, false}, {"steady round ms", "steady ms", 0, false},
			{"steady µs/flow", "steady µs/flow", 2, false}, {"after table change ms", "change ms", 0, false},
			{"after change µs/flow", "change µs/flow", 2, false}}
	}
	return []column{{"offered kpps", "offered kpps", 0, false}, {"first pkts delivered %", "delivered %", 1, false},
		{"installed %", "installed %", 1, false}, {"peak kflows/s", "peak kflows/s", 1, false},
		{"90 % installed in s", "t90 s", 2, false}, {"kflows/s to 90 %", "kflows/s 90%", 1, false},
		{"switch µs/flow", "switch µs/flow", 1, true}, {"lost before switch", "lost before switch", 0, false},
		{"receiver drops", "receiver drops", 0, false}}
}

func flowSetupWhat(m MeasurementSpec) string {
	if m.Kind == KindRevalidation {
		fill := m.Rate
		if fill == 0 {
			fill = revalidationFillRate
		}
		return fmt.Sprintf("revalidation round time with %s installed flows (filled at %s; median of %d rounds each)",
			flowCount(m.Flows), rateLabel(fill), revalidationRounds)
	}
	return fmt.Sprintf("flow setup: %s new UDP flows, one %d B frame each, offered %s (miss → translate → install)",
		flowCount(m.Flows), m.Size, rateLabel(m.Rate))
}

// flowSetupCSVHeader are samples.csv's columns for the flow-setup kinds.
var flowSetupCSVHeader = []string{"fs_flows", "fs_target_pps", "fs_offered_pps", "fs_sent", "fs_tx_dropped", "fs_delivered",
	"fs_receiver_drops", "fs_installed", "fs_peak_flows_per_s", "fs_t90_s", "fs_rate90_flows_per_s", "fs_switch_us_per_flow",
	"reval_flows", "reval_steady_ms", "reval_change_ms"}

func flowSetupCSV(s Sample) []string {
	rec := make([]string, len(flowSetupCSVHeader))
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	if r := s.FlowSetup; r != nil {
		copy(rec, []string{strconv.Itoa(r.Flows), f(r.TargetPPS), f(r.OfferedPPS), strconv.Itoa(r.Sent), strconv.FormatUint(r.TxDropped, 10),
			strconv.Itoa(r.Delivered), strconv.FormatUint(r.ReceiverDrops, 10), strconv.Itoa(r.Installed), f(r.PeakPerSec), f(r.T90),
			f(r.Rate90), f(r.SwitchUsPerFlow)})
	}
	if r := s.Revalidation; r != nil {
		copy(rec[12:], []string{strconv.Itoa(r.Flows), f(r.SteadyMs), f(r.ChangeMs)})
	}
	return rec
}

// ovsReference is the data plane the flow-setup targets are stated against.
const ovsReference = "ovs-netdev"

// vsOVSMetrics are the columns compared with ovs-netdev, per kind: the
// install rate three ways (peak; to 90 % installed, which a switch that
// drops first packets never reaches; share of the offered flows installed
// by the end) and the revalidation round after a table change.
var vsOVSMetrics = map[string][]struct {
	col, unit string
	better    float64 // +1: higher is better, -1: lower
}{
	KindFlowSetup: {
		{"peak kflows/s", "peak kflows/s", 1},
		{"kflows/s 90%", "kflows/s to 90 %", 1},
		{"installed %", "flows installed %", 1},
	},
	KindRevalidation: {{"change ms", "round after table change ms", -1}},
}

// writeFlowSetupVsOVS writes each data plane's install rate and
// revalidation cost relative to ovs-netdev's in the same run (first load
// step); nothing if ovs-netdev has no result.
func (res *Result) writeFlowSetupVsOVS(w io.Writer, rows []*Row) {
	load := res.Scenario.Loads[0].Name
	var lines []string
	for _, m := range res.Scenario.Measurements {
		if !isFlowSetupKind(m.Kind) {
			continue
		}
		for _, pl := range m.Placements {
			var ovs *Row
			for _, row := range rows {
				if row.Measurement == m.Name && row.Placement == pl && row.Load == load && row.DataPlane == ovsReference && row.OK > 0 {
					ovs = row
				}
			}
			if ovs == nil {
				continue
			}
			for _, row := range rows {
				if row.Measurement != m.Name || row.Placement != pl || row.Load != load || row.OK == 0 || row == ovs {
					continue
				}
				for _, met := range vsOVSMetrics[m.Kind] {
					o, v := ovs.Cell(met.col).Median, row.Cell(met.col).Median
					ratio := "–"
					if o > 0 && v > 0 && !math.IsNaN(o) && !math.IsNaN(v) {
						if met.better > 0 {
							ratio = fmt.Sprintf("%.2f×", v/o)
						} else {
							ratio = fmt.Sprintf("%.2f×", o/v)
						}
					}
					lines = append(lines, fmt.Sprintf("| %s | %s | %s | %s | %.1f | %.1f | %s |", m.Name, pl, met.unit, row.DataPlane, v, o, ratio))
				}
			}
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "\n### Flow setup and revalidation against %s (medians, load %s)\n\n", ovsReference, load)
	fmt.Fprintf(w, "Speed-up: > 1 is better than %s (install rate: higher; round time: lower). Targets: ≥ 2× install rate; ≤ 200 ms per round at 100k flows.\n\n", ovsReference)
	fmt.Fprintf(w, "| measurement | placement | metric | data plane | value | %s | speed-up |\n|---|---|---|---|---|---|---|\n%s\n", ovsReference, strings.Join(lines, "\n"))
}

// flowSetupPlots writes flows-<measurement>-<placement>.png for each
// flow-setup measurement: installed flows over time since the first packet
// was sent, one line per data plane and repetition (first load step).
func (res *Result) flowSetupPlots(dir string) error {
	s := res.Scenario
	load := s.Loads[0].Name
	for _, m := range s.Measurements {
		if m.Kind != KindFlowSetup {
			continue
		}
		for _, pl := range m.Placements {
			p := plot.New()
			p.Title.Text = fmt.Sprintf("%s (%s): %s new flows, offered %s", m.Name, pl, flowCount(m.Flows), rateLabel(m.Rate))
			p.X.Label.Text = "seconds since the first packet was sent"
			p.Y.Label.Text = "datapath flows installed"
			leg := newLegend()
			lines := 0
			for _, pi := range res.Planes {
				labelled := false
				for _, smp := range res.Samples {
					if smp.Measurement != m.Name || smp.Placement != pl || smp.Load != load || smp.DataPlane != pi.Name ||
						smp.Status != StatusOK || smp.FlowSetup == nil || len(smp.FlowSetup.Series) == 0 {
						continue
					}
					xys := make(plotter.XYs, len(smp.FlowSetup.Series))
					for k, pt := range smp.FlowSetup.Series {
						xys[k] = plotter.XY{X: pt.T, Y: float64(pt.Flows)}
					}
					l, err := plotter.NewLine(xys)
					if err != nil {
						return err
					}
					l.Color = planeColor(pi.Name)
					p.Add(l)
					if !labelled {
						leg.Add(pi.Name, l)
						labelled = true
					}
					lines++
				}
			}
			if lines == 0 {
				continue
			}
			p.Add(plotter.NewGrid())
			if err := savePlot(p, leg, 22*vg.Centimeter, 12*vg.Centimeter, filepath.Join(dir, fmt.Sprintf("flows-%s-%s.png", m.Name, pl))); err != nil {
				return err
			}
		}
	}
	return nil
}
