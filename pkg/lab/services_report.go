package lab

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Reports of the Service measurements: their cells and titles, the
// comparison through a ClusterIP against pod to pod and against
// kube-proxy, and the first-packet plot.

// Column keys of a service-scale step.
func scaleColumn(what string, services int) string { return fmt.Sprintf("%s @%d", what, services) }

// addServiceValues adds a sample's Service results to its report row.
func addServiceValues(s Sample, add func(col string, v float64)) {
	if r := s.ConnRate; r != nil {
		add("conn/s", r.ConnPerSec)
		add("conn errors", float64(r.Errors))
		add("req p50", r.LatP50Us)
		add("req p99", r.LatP99Us)
	}
	for _, st := range s.Scale {
		if st.Connects > 0 {
			add(scaleColumn("first p50", st.Services), st.P50Us)
			add(scaleColumn("first p99", st.Services), st.P99Us)
		}
		add(scaleColumn("failed", st.Services), float64(st.Failed))
		if st.Changed != 0 {
			add(scaleColumn("api s", st.Services), st.APISeconds)
		}
		if st.ProgrammedSeconds > 0 {
			add(scaleColumn("programmed s", st.Services), st.ProgrammedSeconds)
			// What the proxy adds once the API server has everything.
			add(scaleColumn("lag s", st.Services), st.ProgrammedSeconds-st.APISeconds)
		}
	}
}

// measurementColumns are the report's columns for m.
func measurementColumns(m MeasurementSpec) []column {
	switch m.Kind {
	case KindConnRate:
		return append([]column{{"conn/s", "conn/s", 0, false}, {"errors", "conn errors", 0, false},
			{"request p50 µs", "req p50", 0, false}, {"request p99 µs", "req p99", 0, false}}, columnsFor(m.Kind)...)
	case KindServiceScale:
		var cols []column
		for _, n := range m.Services {
			cols = append(cols, column{fmt.Sprintf("first RTT p50 µs @%d", n), scaleColumn("first p50", n), 1, false},
				column{fmt.Sprintf("p99 @%d", n), scaleColumn("first p99", n), 1, false},
				column{fmt.Sprintf("failed @%d", n), scaleColumn("failed", n), 0, false},
				column{fmt.Sprintf("API s @%d", n), scaleColumn("api s", n), 1, false},
				column{fmt.Sprintf("programmed s @%d", n), scaleColumn("programmed s", n), 1, false},
				column{fmt.Sprintf("after last write s @%d", n), scaleColumn("lag s", n), 2, false})
		}
		return append(cols, column{"bg busy %", "bg busy", 0, false})
	}
	return columnsFor(m.Kind)
}

// serviceWhat describes a Service measurement for its table title.
func serviceWhat(m MeasurementSpec) string {
	switch m.Kind {
	case KindConnRate:
		conns := m.Conns
		if conns == 0 {
			conns = defaultConns
		}
		return fmt.Sprintf("HTTP connections/s (wrk -c%d, one request per connection) to nginx", conns)
	case KindServiceScale:
		counts := make([]string, len(m.Services))
		for i, n := range m.Services {
			counts[i] = strconv.Itoa(n)
		}
		return fmt.Sprintf("Services programmed in turn: %s (each step adds or removes Services pointing at the server; "+
			"API s = writing them, programmed s = first write until the last written and 8 others answer through their ClusterIPs, "+
			"after last write = programmed − API: what the proxy adds once the API server has every object); "+
			"first RTT = connect() time of new TCP connections to the measured ClusterIP (up to %d per step)",
			strings.Join(counts, " → "), firstPacketConnects)
	}
	return ""
}

// viaSuffix says where the client sends, for titles.
func viaSuffix(m MeasurementSpec) string {
	switch m.Via {
	case ViaClusterIP:
		return ", through a ClusterIP (its one endpoint the server)"
	case ViaNodePort:
		return ", through a NodePort on the node's address (its one endpoint the server)"
	}
	return ""
}

// kube-proxy planes the Services summary compares nagare with.
var kubeProxyPlanes = []string{"kube-proxy-iptables", "kube-proxy-nftables"}

// writeServices writes the Services summary (first load step, first
// placement): each data plane through a ClusterIP as a ratio to the same
// test pod to pod (MeasurementSpec.Baseline), connections/s through a
// ClusterIP as a ratio to each kube-proxy, first-packet latency at the
// largest Service count over the smallest, and the programming time of
// the largest step against kube-proxy's.
func (res *Result) writeServices(w io.Writer, rows []*Row) {
	s := res.Scenario
	load := s.Loads[0].Name
	cell := func(m MeasurementSpec, dp, col string) float64 {
		for _, r := range rows {
			if r.Measurement == m.Name && r.Placement == m.Placements[0] && r.Load == load && r.DataPlane == dp && r.OK > 0 {
				return r.Cell(col).Median
			}
		}
		return math.NaN()
	}
	byName := map[string]MeasurementSpec{}
	for _, m := range s.Measurements {
		byName[m.Name] = m
	}
	var hdr []string
	type metric struct {
		value func(dp string) (v float64, ref float64)
		prec  int
	}
	var metrics []metric
	for _, m := range s.Measurements {
		if m.Baseline == "" {
			continue
		}
		base := byName[m.Baseline]
		col, unit, prec := "p50", "RTT p50 µs", 1
		switch m.Kind {
		case KindTCP:
			col, unit, prec = "gbps", "Gbit/s", 2
		case KindConnRate:
			col, unit, prec = "conn/s", "conn/s", 0
		}
		hdr = append(hdr, fmt.Sprintf("%s %s (× %s)", m.Name, unit, base.Name))
		metrics = append(metrics, metric{func(dp string) (float64, float64) { return cell(m, dp, col), cell(base, dp, col) }, prec})
	}
	for _, m := range s.Measurements {
		if m.Kind == KindConnRate && m.Via != "" && m.Via != ViaPod {
			for _, kp := range kubeProxyPlanes {
				hdr = append(hdr, fmt.Sprintf("%s conn/s (× %s)", m.Name, kp))
				metrics = append(metrics, metric{func(dp string) (float64, float64) { return cell(m, dp, "conn/s"), cell(m, kp, "conn/s") }, 0})
			}
		}
		if m.Kind == KindServiceScale && len(m.Services) > 0 {
			lo, hi := m.Services[0], m.Services[0]
			for _, n := range m.Services {
				lo, hi = min(lo, n), max(hi, n)
			}
			hdr = append(hdr, fmt.Sprintf("%s first RTT p50 µs @%d (× @%d)", m.Name, hi, lo))
			metrics = append(metrics, metric{func(dp string) (float64, float64) {
				return cell(m, dp, scaleColumn("first p50", hi)), cell(m, dp, scaleColumn("first p50", lo))
			}, 1})
			hdr = append(hdr, fmt.Sprintf("%s programmed s @%d (× kube-proxy-nftables)", m.Name, hi))
			metrics = append(metrics, metric{func(dp string) (float64, float64) {
				return cell(m, dp, scaleColumn("programmed s", hi)), cell(m, "kube-proxy-nftables", scaleColumn("programmed s", hi))
			}, 1})
			hdr = append(hdr, fmt.Sprintf("%s s after the last write @%d (× kube-proxy-nftables)", m.Name, hi))
			metrics = append(metrics, metric{func(dp string) (float64, float64) {
				return cell(m, dp, scaleColumn("lag s", hi)), cell(m, "kube-proxy-nftables", scaleColumn("lag s", hi))
			}, 2})
		}
	}
	if len(metrics) == 0 {
		return
	}
	fmt.Fprintf(w, "\n### Services side by side (medians, load %s)\n\n", load)
	fmt.Fprintf(w, "Each cell: value (× its reference: the same test pod to pod, the kube-proxy plane named, or the smallest Service count). Targets for nagare: TCP through a ClusterIP ≥ 0.97× pod to pod, RTT p50 ≤ 1.05×, conn/s ≥ 1.5× kube-proxy iptables and ≥ 1× nftables, first RTT at the most Services ≤ 1.1× the fewest, programming faster than kube-proxy nftables (× < 1).\n\n")
	fmt.Fprintf(w, "| data plane | %s |\n|%s\n", strings.Join(hdr, " | "), strings.Repeat("---|", len(hdr)+1))
	for _, p := range res.Planes {
		var cells []string
		any := false
		for _, mt := range metrics {
			v, ref := mt.value(p.Name)
			if math.IsNaN(v) {
				cells = append(cells, "–")
				continue
			}
			any = true
			c := strconv.FormatFloat(v, 'f', mt.prec, 64)
			if !math.IsNaN(ref) && ref > 0 {
				c += fmt.Sprintf(" (%.2f×)", v/ref)
			}
			cells = append(cells, c)
		}
		if any {
			fmt.Fprintf(w, "| %s | %s |\n", p.Name, strings.Join(cells, " | "))
		}
	}
}

// servicesCSVHeader are samples.csv's columns for the Service kinds; a
// scale step is "services:first_p50_us:first_p99_us:programmed_s", steps
// separated by spaces.
var servicesCSVHeader = []string{"conn_per_s", "conn_errors", "scale_steps"}

func servicesCSV(s Sample) []string {
	rec := make([]string, len(servicesCSVHeader))
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	if r := s.ConnRate; r != nil {
		rec[0], rec[1] = f(r.ConnPerSec), strconv.Itoa(r.Errors)
	}
	var steps []string
	for _, st := range s.Scale {
		steps = append(steps, fmt.Sprintf("%d:%s:%s:%s", st.Services, f(st.P50Us), f(st.P99Us), f(st.ProgrammedSeconds)))
	}
	rec[2] = strings.Join(steps, " ")
	return rec
}

// servicePlots writes firstpacket-<measurement>.png for each
// service-scale measurement: first-RTT p50 against the Service count, one
// line per data plane (first load step, medians over repetitions).
func (res *Result) servicePlots(dir string, find rowFinder) error {
	s := res.Scenario
	load := s.Loads[0].Name
	for _, m := range s.Measurements {
		if m.Kind != KindServiceScale {
			continue
		}
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s: a new connection's first round trip through a ClusterIP", m.Name)
		p.X.Label.Text = "Services programmed"
		p.Y.Label.Text = "connect() p50 (µs, median of runs)"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		leg := newLegend()
		lines := 0
		for _, pi := range res.Planes {
			r := find(m.Name, m.Placements[0], load, pi.Name)
			if r == nil {
				continue
			}
			var xys plotter.XYs
			for _, n := range sortedInts(m.Services) {
				if v := r.Cell(scaleColumn("first p50", n)).Median; !math.IsNaN(v) {
					xys = append(xys, plotter.XY{X: float64(n), Y: v})
				}
			}
			if len(xys) == 0 {
				continue
			}
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			l.Color, pts.Color = planeColor(pi.Name), planeColor(pi.Name)
			l.Width, pts.Radius = vg.Points(3), vg.Points(4)
			pts.Shape = draw.CircleGlyph{}
			p.Add(l, pts)
			leg.Add(pi.Name, l, pts)
			lines++
		}
		if lines == 0 {
			continue
		}
		p.Y.Min = 0
		p.Add(plotter.NewGrid())
		if err := savePlot(p, leg, 20*vg.Centimeter, 11*vg.Centimeter, filepath.Join(dir, fmt.Sprintf("firstpacket-%s.png", m.Name))); err != nil {
			return err
		}
	}
	return nil
}

func sortedInts(v []int) []int {
	s := slices.Clone(v)
	slices.Sort(s)
	return s
}
