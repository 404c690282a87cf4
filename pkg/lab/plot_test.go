package lab

import (
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

func TestPlaneColorsDistinctAndStable(t *testing.T) {
	seen := map[color.Color]string{}
	for _, name := range append(DataPlaneNames(), "a-plane-from-the-future") {
		c := planeColor(name)
		if c != planeColor(name) {
			t.Errorf("%s: colour changes between calls", name)
		}
		if _, known := planeColors[name]; !known {
			continue // spare colours may repeat among unknown planes
		}
		if other, dup := seen[c]; dup {
			t.Errorf("%s and %s share colour %v", name, other, c)
		}
		seen[c] = name
	}
	for _, reg := range []string{"veth", "linux-bridge", "routed", "ovs-netdev", "linux-bridge+vxlan", "ovs-vxlan", "nagare", "nagare-switch"} {
		if _, ok := planeColors[reg]; !ok {
			t.Errorf("%s has no colour of its own", reg)
		}
	}
	for _, sc := range spareColors {
		if name, clash := seen[sc]; clash {
			t.Errorf("spare colour %v is also %s's", sc, name)
		}
	}
}

func TestLogScaleIfSpread(t *testing.T) {
	for _, c := range []struct {
		vals     []float64
		log      bool
		min, max float64
	}{
		{[]float64{10.5, 11.6, 13}, false, 0, 0},
		{[]float64{10, 99}, false, 0, 0},
		{[]float64{10, 100}, true, 10, 1000},
		{[]float64{0, 12, 578.7, math.NaN()}, true, 10, 1000}, // zero and NaN ignored
		{[]float64{0.9, 20}, true, 0.1, 100},
		{nil, false, 0, 0},
	} {
		p := plot.New()
		b, err := plotter.NewBarChart(plotter.Values{1, 2}, vg.Points(10))
		if err != nil {
			t.Fatal(err)
		}
		p.Add(b)
		got := logScaleIfSpread(p, c.vals)
		if got != c.log {
			t.Errorf("%v: log %v, want %v", c.vals, got, c.log)
			continue
		}
		if !c.log {
			if _, lin := p.Y.Scale.(plot.LinearScale); !lin {
				t.Errorf("%v: scale %T, want linear", c.vals, p.Y.Scale)
			}
			continue
		}
		if p.Y.Min != c.min || p.Y.Max != c.max {
			t.Errorf("%v: axis %v..%v, want %v..%v", c.vals, p.Y.Min, p.Y.Max, c.min, c.max)
		}
		// Bars start at zero; the log axis must draw them from its bottom.
		p.Draw(draw.New(vgimg.New(10*vg.Centimeter, 6*vg.Centimeter)))
	}
}

func TestLegendBesideThePlotArea(t *testing.T) {
	c := draw.New(vgimg.New(20*vg.Centimeter, 11*vg.Centimeter))
	leg := newLegend()
	b, _ := plotter.NewBarChart(plotter.Values{1}, vg.Points(5))
	leg.Add("linux-bridge+vxlan", b)
	leg.Add("nagare", b)
	plotArea, legendArea := layoutWithLegend(c, &leg)
	if plotArea.Max.X+legendGap > legendArea.Min.X {
		t.Errorf("legend column starts at %v, inside the plot area (ends at %v)", legendArea.Min.X, plotArea.Max.X)
	}
	if w := leg.Rectangle(c).Size().X; legendArea.Size().X+0.01 < w || legendArea.Max.X > c.Max.X {
		t.Errorf("legend column %v..%v cannot hold the legend (%v wide) within the image (%v)", legendArea.Min.X, legendArea.Max.X, w, c.Max.X)
	}
	if plotArea.Size().X < c.Size().X/2 {
		t.Errorf("plot area only %v of %v", plotArea.Size().X, c.Size().X)
	}
}

// TestRTTPlotColoursAndLegend renders a bar plot and finds each plane's
// colour in the plot area (its bars) and in the legend column right of it
// (its thumbnail).
func TestRTTPlotColoursAndLegend(t *testing.T) {
	res := fakeResult(t)
	dir := t.TempDir()
	if err := res.WritePlots(dir); err != nil {
		t.Fatal(err)
	}
	checkPlaneColours(t, filepath.Join(dir, "rtt-intra-same-core.png"), 20*vg.Centimeter, 11*vg.Centimeter, "veth", "routed")
}

// checkPlaneColours finds each plane's colour in file's plot area and in
// its legend column (laid out as savePlot does for a w×h plot with these
// legend entries), and nowhere between them.
func checkPlaneColours(t *testing.T, file string, w, h vg.Length, planes ...string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	leg := newLegend()
	b, _ := plotter.NewBarChart(plotter.Values{1}, vg.Points(5))
	for _, p := range planes {
		leg.Add(p, b)
	}
	c := draw.New(vgimg.New(w, h))
	plotArea, legendArea := layoutWithLegend(c, &leg)
	px := func(l vg.Length) int { return int(l.Dots(vgimg.DefaultDPI)) }
	if d := img.Bounds().Dx() - px(c.Max.X); d < -1 || d > 1 {
		t.Fatalf("%s: image %d px wide, want %d", file, img.Bounds().Dx(), px(c.Max.X))
	}
	for _, plane := range planes {
		want := planeColors[plane]
		inPlot, inLegend := 0, 0
		for x := 0; x < img.Bounds().Dx(); x++ {
			for y := 0; y < img.Bounds().Dy(); y++ {
				r, g, b, _ := img.At(x, y).RGBA()
				if uint8(r>>8) != want.R || uint8(g>>8) != want.G || uint8(b>>8) != want.B {
					continue
				}
				switch {
				case x < px(plotArea.Max.X):
					inPlot++
				case x >= px(legendArea.Min.X)-1:
					inLegend++
				default:
					t.Errorf("%s: %s: colour at x=%d, between the plot area and the legend", file, plane, x)
				}
			}
		}
		if inPlot == 0 || inLegend == 0 {
			t.Errorf("%s: %s: %d pixels of its colour in the plot area, %d in the legend column; want both", file, plane, inPlot, inLegend)
		}
	}
}

// TestVsPodsPlots: TCP measurements with 1, 2 and 4 client pods, each
// direction, give one plot per direction and column, with each plane's
// line in its colour; a scenario without such measurements gives none.
func TestVsPodsPlots(t *testing.T) {
	s, err := ParseScenario([]byte(`
name: pods
nodes: [n1]
pods: [{name: a, node: n1}, {name: s, node: n1}, {name: b, node: n1}, {name: c, node: n1}, {name: d, node: n1}]
dataplanes: [ovs-netdev, nagare]
reps: 1
measurements:
  - {name: send-1, kind: tcp, client: a, server: s}
  - {name: send-2, kind: tcp, client: a, server: s, also: [b]}
  - {name: send-4, kind: tcp, client: a, server: s, also: [b, c, d]}
  - {name: recv-1, kind: tcp, client: a, server: s, reverse: true}
  - {name: recv-4, kind: tcp, client: a, server: s, reverse: true, also: [b, c, d]}
`))
	if err != nil {
		t.Fatal(err)
	}
	res := &Result{Scenario: s, Planes: []PlaneInfo{{Name: "ovs-netdev"}, {Name: "nagare"}}}
	for _, m := range s.Measurements {
		for i, dp := range []string{"ovs-netdev", "nagare"} {
			res.Samples = append(res.Samples, Sample{DataPlane: dp, Measurement: m.Name, Kind: KindTCP, Placement: CrossCore, Load: "none",
				Rep: 1, Status: StatusOK, TCP: &TCPResult{Gbps: float64((i + 1) * (1 + len(m.Also)))},
				CPU: &CPUUsage{SwitchCPUSeconds: float64(2 - i), HostCPUSeconds: float64(2 + i)}})
		}
	}
	dir := t.TempDir()
	if err := res.WritePlots(dir); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"send", "recv"} {
		for _, c := range []string{"gbps", "switch-cpu", "host-cpu"} {
			f, err := os.Open(filepath.Join(dir, "tcp-"+d+"-"+c+"-vs-pods.png"))
			if err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			// Left of the legend column: the line and its points.
			found := 0
			want := planeColors["nagare"]
			for x := 0; x < img.Bounds().Dx()*2/3; x++ {
				for y := 0; y < img.Bounds().Dy(); y++ {
					r, g, b, _ := img.At(x, y).RGBA()
					near := func(v uint32, w uint8) bool { d := int(v>>8) - int(w); return d > -24 && d < 24 }
					if near(r, want.R) && near(g, want.G) && near(b, want.B) { // anti-aliased lines too
						found++
					}
				}
			}
			if found < 20 {
				t.Errorf("tcp-%s-%s: nagare's colour on %d pixels of the plot area", d, c, found)
			}
		}
	}
	empty := t.TempDir()
	if err := fakeResult(t).WritePlots(empty); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(empty, "*-vs-pods.png")); len(m) != 0 {
		t.Errorf("vs-pods plots for a scenario without pod counts: %v", m)
	}
}
