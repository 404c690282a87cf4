package lab

import (
	"fmt"
	"hash/fnv"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Plots are read at a glance: every data plane has its own colour, the
// same in every plot (planeColor); the legend sits in a column right of
// the plot area, never over bars or lines (savePlot); and when the values
// of one plot span ten times or more, its value axis is logarithmic
// (logScaleIfSpread), so a 12 µs bar stays readable beside a 150 µs one.

// planeColors are the colours of the known data planes (Tableau 10):
// the floor in grey, nagare's own planes in the warm colours.
var planeColors = map[string]color.RGBA{
	"veth":               {0x7f, 0x7f, 0x7f, 0xff}, // grey: the floor
	"linux-bridge":       {0x4e, 0x79, 0xa7, 0xff}, // blue
	"routed":             {0x59, 0xa1, 0x4f, 0xff}, // green
	"ovs-netdev":         {0xb0, 0x7a, 0xa1, 0xff}, // purple
	"linux-bridge+vxlan": {0x76, 0xb7, 0xb2, 0xff}, // teal
	"ovs-vxlan":          {0x9c, 0x75, 0x5f, 0xff}, // brown
	"nagare":             {0xe1, 0x57, 0x59, 0xff}, // red
	"nagare-switch":      {0xf2, 0x8e, 0x2b, 0xff}, // orange
	// seed 001's receive models (nagare-switch across nodes).
	"nagare-switch+default":        {0xb6, 0x99, 0x2d, 0xff}, // olive
	"nagare-switch+rps":            {0xa0, 0xcb, 0xe8, 0xff}, // light blue
	"nagare-switch+vs-extend":      {0xd3, 0x72, 0x95, 0xff}, // magenta
	"nagare-switch+vs-extend-prio": {0xfa, 0xbf, 0xd2, 0xff}, // light pink
}

// spareColors are for data planes not in planeColors, chosen by a hash of
// the name so that a plane keeps its colour from plot to plot and run to
// run.
var spareColors = []color.RGBA{
	{0xed, 0xc9, 0x48, 0xff}, // yellow
	{0xff, 0x9d, 0xa7, 0xff}, // pink
	{0x33, 0x33, 0x33, 0xff}, // near black
	{0x1f, 0x3b, 0x73, 0xff}, // navy
}

// planeColor is data plane name's colour in every plot.
func planeColor(name string) color.Color {
	if c, ok := planeColors[name]; ok {
		return c
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	return spareColors[h.Sum32()%uint32(len(spareColors))]
}

// logSpread is the ratio of largest to smallest value from which a plot's
// value axis is logarithmic.
const logSpread = 10

// logScaleIfSpread makes p's Y axis logarithmic when the positive values
// in vals span logSpread times or more, and says whether it did. Call it
// after every p.Add: it sets the axis range (bars start at zero, which a
// log axis cannot show; they start at the axis' bottom instead).
func logScaleIfSpread(p *plot.Plot, vals []float64) bool {
	lo, hi := math.Inf(1), 0.0
	for _, v := range vals {
		if v > 0 && !math.IsInf(v, 0) {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if hi == 0 || hi/lo < logSpread {
		p.Y.Max = math.Max(p.Y.Max, hi*1.05) // room above the tallest bar
		return false
	}
	p.Y.Scale = clampedLogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min = math.Pow(10, math.Floor(math.Log10(lo)))
	p.Y.Max = math.Pow(10, math.Ceil(math.Log10(hi*1.05)))
	// In the title: the Y label is drawn along the axis, and a longer
	// one squeezes the plot.
	p.Title.Text += " (log scale)"
	return true
}

// clampedLogScale is a log scale that draws values below the axis' minimum
// (the zero a bar starts from) at the minimum instead of failing.
type clampedLogScale struct{}

func (clampedLogScale) Normalize(min, max, x float64) float64 {
	return plot.LogScale{}.Normalize(min, max, math.Max(x, min))
}

// legendGap is the space between the plot area and the legend column.
const legendGap = 4 * vg.Millimeter

// layoutWithLegend splits c into the plot area (left) and the legend
// column (right, as wide as the legend's longest entry, with a gap on
// either side).
func layoutWithLegend(c draw.Canvas, leg *plot.Legend) (plotArea, legendArea draw.Canvas) {
	w := leg.Rectangle(c).Size().X
	plotArea = draw.Crop(c, 0, -(w + 2*legendGap), 0, 0)
	legendArea = draw.Crop(c, plotArea.Max.X-c.Min.X+legendGap, -legendGap, 0, 0)
	return plotArea, legendArea
}

// newLegend is a legend for the column right of a plot: entries top-down
// from the top, left-aligned.
func newLegend() plot.Legend {
	leg := plot.NewLegend()
	leg.Top, leg.Left = true, true
	return leg
}

// savePlot writes p as a PNG of w×h with leg in a column right of the plot
// area, its first entry level with the top of the plot.
func savePlot(p *plot.Plot, leg plot.Legend, w, h vg.Length, file string) (err error) {
	img := vgimg.New(w, h)
	c := draw.New(img)
	c.SetColor(color.White)
	c.Fill(c.Rectangle.Path())
	plotArea, legendArea := layoutWithLegend(c, &leg)
	p.Draw(plotArea)
	if p.Title.Text != "" {
		legendArea.Max.Y -= p.Title.TextStyle.Rectangle(p.Title.Text).Size().Y + p.Title.Padding
	}
	leg.Draw(legendArea)
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(f)
	return err
}

// WritePlots writes PNG plots into dir:
//   - rtt-<measurement>-<placement>.png: RTT min/p50/p90/p99 bars per data
//     plane (first load step; medians over repetitions);
//   - udp-mbps-<load>.png (udp-mbps-<n>flows-<load>.png), when the
//     scenario has udp-pps measurements of one flow (of n flows) at two or
//     more datagram sizes: receiver Mbit/s (summed over the flows) per data
//     plane per size (seed 001's Fig. 6);
//   - <measurement>-<placement>-vs-load.png, when the scenario has more than
//     one load step: p50 and p99 RTT (or throughput) per data plane across
//     the load steps;
//   - tcp-<send|recv>[-<n>port]-<gbps|switch-cpu|host-cpu>-vs-pods.png,
//     when TCP measurements differ in their number of client pods (vsPods;
//     one file per number of uplink ports the flows cross).
func (res *Result) WritePlots(dir string) error {
	rows := res.Rows()
	s := res.Scenario
	find := func(m, pl, load, dp string) *Row {
		for _, r := range rows {
			if r.Measurement == m && r.Placement == pl && r.Load == load && r.DataPlane == dp && r.OK > 0 {
				return r
			}
		}
		return nil
	}
	if err := res.flowSetupPlots(dir); err != nil {
		return err
	}
	if err := res.servicePlots(dir, find); err != nil {
		return err
	}
	if err := res.meshPlots(dir); err != nil {
		return err
	}
	if err := res.vsPods(dir, find); err != nil {
		return err
	}
	for _, l := range s.Loads {
		if err := res.udpSizeBars(dir, l.Name, find); err != nil {
			return err
		}
	}
	for _, m := range s.Measurements {
		for _, pl := range m.Placements {
			if m.Kind == KindRTT {
				if err := res.rttBars(dir, m, pl, s.Loads[0].Name, find); err != nil {
					return err
				}
			}
			if len(s.Loads) > 1 {
				if err := res.vsLoad(dir, m, pl, find); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

type rowFinder func(m, pl, load, dp string) *Row

func (res *Result) rttBars(dir string, m MeasurementSpec, pl, load string, find rowFinder) error {
	stats := []string{"min", "p50", "p90", "p99"}
	var planes []*Row
	for _, p := range res.Planes {
		if r := find(m.Name, pl, load, p.Name); r != nil {
			planes = append(planes, r)
		}
	}
	if len(planes) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s, %s, load %s: %d B UDP round trip", m.Name, pl, load, m.Size)
	p.Y.Label.Text = "RTT (µs, median of runs)"
	leg := newLegend()
	w := vg.Points(60 / float64(len(planes)+1))
	var all []float64
	for i, r := range planes {
		vals := make(plotter.Values, len(stats))
		for j, st := range stats {
			vals[j] = r.Cell(st).Median
			if math.IsNaN(vals[j]) {
				vals[j] = 0
			}
		}
		all = append(all, vals...)
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		b.Color = planeColor(r.DataPlane)
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(float64(i)-float64(len(planes)-1)/2)
		p.Add(b)
		leg.Add(r.DataPlane, b)
	}
	p.NominalX("min", "p50", "p90", "p99")
	p.Add(plotter.NewGrid())
	logScaleIfSpread(p, all)
	return savePlot(p, leg, 20*vg.Centimeter, 11*vg.Centimeter, filepath.Join(dir, fmt.Sprintf("rtt-%s-%s.png", m.Name, pl)))
}

func (res *Result) vsLoad(dir string, m MeasurementSpec, pl string, find rowFinder) error {
	s := res.Scenario
	type series struct {
		name, col string
		dashed    bool
	}
	var ss []series
	yLabel := ""
	switch m.Kind {
	case KindRTT:
		ss = []series{{"p50", "p50", false}, {"p99", "p99", true}}
		yLabel = "RTT (µs)"
	case KindTCP:
		ss = []series{{"Gbit/s", "gbps", false}}
		yLabel = "TCP throughput (Gbit/s)"
	case KindUDPPPS:
		ss = []series{{"rx kpps", "rx kpps", false}}
		yLabel = "UDP rx (kpps)"
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s (%s) vs background load", m.Name, pl)
	p.Y.Label.Text = yLabel
	p.X.Label.Text = "load step"
	leg := newLegend()
	var all []float64
	names := make([]string, len(s.Loads))
	for i, l := range s.Loads {
		names[i] = l.Name
	}
	lines := 0
	for _, pi := range res.Planes {
		for _, se := range ss {
			var xys plotter.XYs
			for x, l := range s.Loads {
				if r := find(m.Name, pl, l.Name, pi.Name); r != nil {
					if v := r.Cell(se.col).Median; !math.IsNaN(v) {
						xys = append(xys, plotter.XY{X: float64(x), Y: v})
						all = append(all, v)
					}
				}
			}
			if len(xys) == 0 {
				continue
			}
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			l.Color = planeColor(pi.Name)
			pts.Color = planeColor(pi.Name)
			pts.Shape = draw.CircleGlyph{}
			if se.dashed {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			p.Add(l, pts)
			label := pi.Name
			if len(ss) > 1 {
				label += " " + se.name
			}
			leg.Add(label, l)
			lines++
		}
	}
	if lines == 0 {
		return nil
	}
	p.NominalX(names...)
	p.Add(plotter.NewGrid())
	logScaleIfSpread(p, all)
	return savePlot(p, leg, 22*vg.Centimeter, 12*vg.Centimeter, filepath.Join(dir, fmt.Sprintf("%s-%s-vs-load.png", m.Name, pl)))
}

// vsPods writes, for scenarios whose TCP measurements differ in the number
// of client pods (seed 004's 1, 2, 4, 8 VMs), tcp-<send|recv>-<column>-vs-pods.png:
// throughput, switch CPU and host CPU per data plane against the number
// of pods, one file per direction and column (the paper's figures). When
// the flows cross uplink ports (PodSpec.Uplink), one file per number of
// uplinks too: tcp-<send|recv>-<n>port-<column>-vs-pods.png.
func (res *Result) vsPods(dir string, find rowFinder) error {
	s := res.Scenario
	type group struct {
		reverse bool
		ports   int
	}
	var groups []group
	byGroup := map[group][]MeasurementSpec{}
	for _, m := range s.Measurements {
		if m.Kind != KindTCP || m.Client == m.Server {
			continue
		}
		_, ups := s.flowPods(m)
		g := group{m.Reverse, len(ups)}
		if byGroup[g] == nil {
			groups = append(groups, g)
		}
		byGroup[g] = append(byGroup[g], m)
	}
	for _, g := range groups {
		ms := byGroup[g]
		counts := map[int]bool{}
		for _, m := range ms {
			n, _ := s.flowPods(m)
			counts[n] = true
		}
		if len(counts) < 2 {
			continue
		}
		dirName := "send"
		if g.reverse {
			dirName = "recv"
		}
		name, ports := dirName, ""
		if g.ports > 0 {
			name = fmt.Sprintf("%s-%dport", dirName, g.ports)
			ports = fmt.Sprintf(", %d uplink port", g.ports)
			if g.ports > 1 {
				ports += "s"
			}
		}
		for _, c := range []struct{ col, label, file string }{
			{"gbps", "TCP throughput, all pods (Gbit/s)", "gbps"},
			{"switch cpu", "switch processes' CPU (s per test)", "switch-cpu"},
			{"host cpu", "whole VM busy (CPU s per test)", "host-cpu"},
		} {
			p := plot.New()
			p.Title.Text = fmt.Sprintf("TCP %s%s: %s vs pods", dirName, ports, c.col)
			p.Y.Label.Text = c.label
			p.X.Label.Text = "pods sending at once"
			if g.reverse {
				p.X.Label.Text = "pods receiving at once"
			}
			leg := newLegend()
			lines := 0
			for _, pi := range res.Planes {
				var xys plotter.XYs
				for _, m := range ms {
					n, _ := s.flowPods(m)
					for _, pl := range m.Placements {
						if r := find(m.Name, pl, s.Loads[0].Name, pi.Name); r != nil {
							if v := r.Cell(c.col).Median; !math.IsNaN(v) {
								xys = append(xys, plotter.XY{X: float64(n), Y: v})
							}
						}
					}
				}
				if len(xys) == 0 {
					continue
				}
				l, pts, err := plotter.NewLinePoints(xys)
				if err != nil {
					return err
				}
				l.Color, pts.Color, pts.Shape = planeColor(pi.Name), planeColor(pi.Name), draw.CircleGlyph{}
				p.Add(l, pts)
				leg.Add(pi.Name, l)
				lines++
			}
			if lines == 0 {
				continue
			}
			p.Add(plotter.NewGrid())
			p.Y.Min = 0
			if err := savePlot(p, leg, 20*vg.Centimeter, 12*vg.Centimeter, filepath.Join(dir, fmt.Sprintf("tcp-%s-%s-vs-pods.png", name, c.file))); err != nil {
				return err
			}
		}
	}
	return nil
}

// udpSizeBars plots, for one load step, each data plane's UDP goodput at
// every datagram size of the scenario's udp-pps measurements (cross-core)
// that carry the same number of flows: seed 001's Fig. 6, the two VMs'
// total throughput per receive model per size. One flow:
// udp-mbps-<load>.png; n flows (their sum): udp-mbps-<n>flows-<load>.png.
func (res *Result) udpSizeBars(dir, load string, find rowFinder) error {
	byFlows := map[int][]MeasurementSpec{}
	for _, m := range res.Scenario.Measurements {
		if m.Kind == KindUDPPPS && slices.Contains(m.Placements, CrossCore) {
			byFlows[1+len(m.With)] = append(byFlows[1+len(m.With)], m)
		}
	}
	for n, ms := range byFlows {
		if err := res.udpSizeBarsOf(dir, load, n, ms, find); err != nil {
			return err
		}
	}
	return nil
}

func (res *Result) udpSizeBarsOf(dir, load string, flows int, ms []MeasurementSpec, find rowFinder) error {
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].Size < ms[j].Size })
	if len(ms) < 2 {
		return nil
	}
	col, file, what := "rx mbps", fmt.Sprintf("udp-mbps-%s.png", load), "one flow"
	if flows > 1 {
		col, file, what = "flows mbps", fmt.Sprintf("udp-mbps-%dflows-%s.png", flows, load), fmt.Sprintf("%d flows, total", flows)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("UDP goodput per datagram size (%s), load %s", what, load)
	p.Y.Label.Text = "rx Mbit/s (median of runs)"
	p.X.Label.Text = "datagram size"
	leg := newLegend()
	var planes []string
	for _, pi := range res.Planes {
		for _, m := range ms {
			if find(m.Name, CrossCore, load, pi.Name) != nil {
				planes = append(planes, pi.Name)
				break
			}
		}
	}
	if len(planes) == 0 {
		return nil
	}
	w := vg.Points(80 / float64(len(planes)+1))
	var all []float64
	for i, name := range planes {
		vals := make(plotter.Values, len(ms))
		for j, m := range ms {
			if r := find(m.Name, CrossCore, load, name); r != nil {
				if v := r.Cell(col).Median; !math.IsNaN(v) {
					vals[j] = v
				}
			}
		}
		all = append(all, vals...)
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		b.Color = planeColor(name)
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(float64(i)-float64(len(planes)-1)/2)
		p.Add(b)
		leg.Add(name, b)
	}
	names := make([]string, len(ms))
	for j, m := range ms {
		names[j] = fmt.Sprintf("%d B", m.Size)
	}
	p.NominalX(names...)
	p.Add(plotter.NewGrid())
	logScaleIfSpread(p, all)
	return savePlot(p, leg, 22*vg.Centimeter, 12*vg.Centimeter, filepath.Join(dir, file))
}
