package lab

import (
	"fmt"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// WritePlots writes PNG plots into dir:
//   - rtt-<measurement>-<placement>.png: RTT min/p50/p90/p99 bars per data
//     plane (first load step; medians over repetitions);
//   - <measurement>-<placement>-vs-load.png, when the scenario has more than
//     one load step: p50 and p99 RTT (or throughput) per data plane across
//     the load steps.
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
	p.Legend.Top = true
	p.Legend.Left = true
	w := vg.Points(60 / float64(len(planes)+1))
	for i, r := range planes {
		vals := make(plotter.Values, len(stats))
		for j, st := range stats {
			vals[j] = r.Cell(st).Median
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		b.Color = plotutil.Color(i)
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(float64(i)-float64(len(planes)-1)/2)
		p.Add(b)
		p.Legend.Add(r.DataPlane, b)
	}
	p.NominalX("min", "p50", "p90", "p99")
	p.Add(plotter.NewGrid())
	return p.Save(18*vg.Centimeter, 11*vg.Centimeter, filepath.Join(dir, fmt.Sprintf("rtt-%s-%s.png", m.Name, pl)))
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
	p.Legend.Top = true
	names := make([]string, len(s.Loads))
	for i, l := range s.Loads {
		names[i] = l.Name
	}
	lines := 0
	for i, pi := range res.Planes {
		for _, se := range ss {
			var xys plotter.XYs
			for x, l := range s.Loads {
				if r := find(m.Name, pl, l.Name, pi.Name); r != nil {
					if v := r.Cell(se.col).Median; !math.IsNaN(v) {
						xys = append(xys, plotter.XY{X: float64(x), Y: v})
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
			l.Color = plotutil.Color(i)
			pts.Color = plotutil.Color(i)
			pts.Shape = draw.CircleGlyph{}
			if se.dashed {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			p.Add(l, pts)
			label := pi.Name
			if len(ss) > 1 {
				label += " " + se.name
			}
			p.Legend.Add(label, l)
			lines++
		}
	}
	if lines == 0 {
		return nil
	}
	p.NominalX(names...)
	p.Add(plotter.NewGrid())
	return p.Save(20*vg.Centimeter, 12*vg.Centimeter, filepath.Join(dir, fmt.Sprintf("%s-%s-vs-load.png", m.Name, pl)))
}
