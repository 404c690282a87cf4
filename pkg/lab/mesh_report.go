package lab

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The bookinfo measurements' report: one table per measurement (data
// plane × proxy placement × connections), the proxies' request counts,
// the paper's numbers beside ours, and seed 002's Fig. 2 (p90 latency vs
// connections, one line per placement).

// meshKey is one line of the bookinfo table.
type meshKey struct {
	measurement, plane, proxy string
	conns                     int
}

// meshCell aggregates one line's repetitions, and meshTest one test's
// (data plane × placement).
type meshCell struct{ values map[string][]float64 }

type meshTest struct {
	runs, ok      int
	skipped       string
	errors        []string
	perPage, size []float64
	bg            []float64
}

// meshColumns are the bookinfo table's value columns.
var meshColumns = []column{
	{"req/s", "req/s", 0, false}, {"p50 ms", "p50", 2, false}, {"p90 ms", "p90", 2, false}, {"p99 ms", "p99", 2, false},
	{"errors", "errors", 0, false}, {"host CPU ms/req", "host ms/req", 3, false},
	{"proxy CPU ms/req", "proxy ms/req", 3, false}, {"app CPU ms/req", "app ms/req", 3, false},
}

// meshAggregate gathers the bookinfo samples.
func (res *Result) meshAggregate() (map[meshKey]*meshCell, map[meshKey]*meshTest) {
	cells, tests := map[meshKey]*meshCell{}, map[meshKey]*meshTest{}
	for _, s := range res.Samples {
		if s.Kind != KindBookinfo {
			continue
		}
		tk := meshKey{s.Measurement, s.DataPlane, s.Proxy, 0}
		mt := tests[tk]
		if mt == nil {
			mt = &meshTest{}
			tests[tk] = mt
		}
		switch s.Status {
		case StatusSkipped:
			mt.skipped = s.Error
			continue
		case StatusFailed:
			mt.runs++
			mt.errors = append(mt.errors, fmt.Sprintf("rep %d: %s", s.Rep, s.Error))
			continue
		}
		mt.runs++
		mt.ok++
		if s.BackgroundBusyPct >= 0 {
			mt.bg = append(mt.bg, s.BackgroundBusyPct)
		}
		r := s.Mesh
		if r == nil {
			continue
		}
		mt.size = append(mt.size, float64(r.PageBytes))
		if r.ProxyRequests >= 0 && r.Requests > 0 {
			mt.perPage = append(mt.perPage, float64(r.ProxyRequests)/float64(r.Requests))
		}
		for _, st := range r.Steps {
			k := meshKey{s.Measurement, s.DataPlane, s.Proxy, st.Connections}
			c := cells[k]
			if c == nil {
				c = &meshCell{values: map[string][]float64{}}
				cells[k] = c
			}
			add := func(col string, v float64) { c.values[col] = append(c.values[col], v) }
			add("req/s", st.ReqPerSec)
			add("p50", st.P50Ms)
			add("p90", st.P90Ms)
			add("p99", st.P99Ms)
			add("errors", float64(st.Errors))
			if st.Requests > 0 {
				n := float64(st.Requests)
				add("host ms/req", 1e3*st.HostCPUs/n)
				add("proxy ms/req", 1e3*st.ProxyCPUs/n)
				add("app ms/req", 1e3*st.AppCPUs/n)
			}
		}
	}
	return cells, tests
}

// meshCSVHeader are samples.csv's bookinfo columns: a bookinfo sample has
// one line per connection count.
var meshCSVHeader = []string{"proxy", "connections", "req_per_s", "requests", "p50_ms", "p90_ms", "p99_ms", "wrk_errors",
	"step_window_s", "step_host_cpu_s", "proxy_cpu_s", "app_cpu_s", "proxy_requests", "pages"}

// meshCSV are the bookinfo columns of sample s, one line per step (one
// empty line for other kinds).
func meshCSV(s Sample) [][]string {
	if s.Mesh == nil || len(s.Mesh.Steps) == 0 {
		line := make([]string, len(meshCSVHeader))
		line[0] = s.Proxy
		return [][]string{line}
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	var out [][]string
	for _, st := range s.Mesh.Steps {
		out = append(out, []string{s.Proxy, strconv.Itoa(st.Connections), f(st.ReqPerSec), strconv.Itoa(st.Requests),
			f(st.P50Ms), f(st.P90Ms), f(st.P99Ms), strconv.Itoa(st.Errors), f(st.WindowSeconds), f(st.HostCPUs),
			f(st.ProxyCPUs), f(st.AppCPUs), strconv.FormatInt(s.Mesh.ProxyRequests, 10), strconv.FormatInt(s.Mesh.Requests, 10)})
	}
	return out
}

// writeMesh writes the bookinfo measurements' tables.
func (res *Result) writeMesh(w io.Writer) {
	s := res.Scenario
	cells, tests := res.meshAggregate()
	for _, m := range s.Measurements {
		if m.Kind != KindBookinfo {
			continue
		}
		fmt.Fprintf(w, "\n### %s: Bookinfo product page, %s → %s's Service (ClusterIP :9080), wrk -t1 keep-alive on CPU %d, %s per step\n\n",
			m.Name, m.Client, m.Server, s.CPUs.Client, formatSeconds(m.Duration.Seconds()))
		hdr := []string{"data plane", "proxies", "conns", "runs ok"}
		for _, c := range meshColumns {
			hdr = append(hdr, c.title)
		}
		hdr = append(hdr, "bg busy %")
		fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(hdr, " | "), strings.Repeat("---|", len(hdr)))
		var failures []string
		for _, p := range res.Planes {
			for _, proxy := range m.Proxies {
				mt := tests[meshKey{m.Name, p.Name, proxy, 0}]
				if mt == nil {
					continue
				}
				if mt.skipped != "" {
					fmt.Fprintf(w, "| %s | %s | – | skipped: %s |%s\n", p.Name, proxy, mt.skipped, strings.Repeat(" – |", len(meshColumns)+1))
					continue
				}
				for _, e := range mt.errors {
					failures = append(failures, fmt.Sprintf("- %s / %s / %s: %s", p.Name, m.Name, proxy, e))
				}
				for _, conns := range m.Connections {
					line := []string{p.Name, proxy, strconv.Itoa(conns), fmt.Sprintf("%d/%d", mt.ok, mt.runs)}
					var vals map[string][]float64
					if c := cells[meshKey{m.Name, p.Name, proxy, conns}]; c != nil {
						vals = c.values
					}
					for _, col := range meshColumns {
						line = append(line, formatSummary(Summarize(vals[col.key]), col.prec))
					}
					line = append(line, formatSummary(Summarize(mt.bg), 0))
					fmt.Fprintf(w, "| %s |\n", strings.Join(line, " | "))
				}
			}
		}
		res.writeMeshProxies(w, m, tests)
		res.writeMeshPaper(w, m, cells)
		if len(failures) > 0 {
			fmt.Fprintf(w, "\nFailures:\n\n%s\n", strings.Join(failures, "\n"))
		}
		fmt.Fprintf(w, "\nProxy placements:\n\n")
		for _, proxy := range m.Proxies {
			if f, ok := proxyPlacements[proxy]; ok {
				fmt.Fprintf(w, "- **%s**: %s\n", proxy, f().Description())
			}
		}
	}
}

// writeMeshProxies shows that the proxies sat in the path: the requests
// they counted per product page, and the page's size.
func (res *Result) writeMeshProxies(w io.Writer, m MeasurementSpec, tests map[meshKey]*meshTest) {
	fmt.Fprintf(w, "\nRequests the proxies counted per product page (their own counters over the whole test; a page is 1 call to productpage, 1 to details, 1 to reviews and, from v2 and v3, 1 to ratings: each crosses one proxy per side captured), and the page's size:\n\n")
	fmt.Fprintf(w, "| data plane | proxies | proxied requests per page | page bytes |\n|---|---|---|---|\n")
	for _, p := range res.Planes {
		for _, proxy := range m.Proxies {
			mt := tests[meshKey{m.Name, p.Name, proxy, 0}]
			if mt == nil || mt.ok == 0 {
				continue
			}
			per := "– (no proxy)"
			if len(mt.perPage) > 0 {
				per = formatSummary(Summarize(mt.perPage), 2)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", p.Name, proxy, per, formatSummary(Summarize(mt.size), 0))
		}
	}
}

// writeMeshPaper prints seed 002's p90 at one connection beside ours,
// each also as a ratio to its own first row (the paper's setup without
// proxies): absolute milliseconds of Envoy on the paper's machines and of
// NGINX on a shared 2-vCPU VM are not comparable, the ratios are.
func (res *Result) writeMeshPaper(w io.Writer, m MeasurementSpec, cells map[meshKey]*meshCell) {
	var rows []PaperRow
	for _, pr := range res.Scenario.Paper {
		if pr.Measurement == m.Name && pr.P90Ms > 0 {
			rows = append(rows, pr)
		}
	}
	if len(rows) == 0 || len(m.Connections) == 0 {
		return
	}
	conns := m.Connections[0]
	ours := func(pr PaperRow) float64 {
		if c := cells[meshKey{m.Name, pr.DataPlane, pr.Proxy, conns}]; c != nil {
			return Summarize(c.values["p90"]).Median
		}
		return math.NaN()
	}
	fmt.Fprintf(w, "\nThe paper's numbers beside ours (seed 002, Fig. 2: p90 latency of the product page at 1 connection; ours at %d; × = ratio to the first row):\n\n", conns)
	fmt.Fprintf(w, "| paper's setup | paper p90 ms | × | ours | our p90 ms | × |\n|---|---|---|---|---|---|\n")
	base, ourBase := rows[0].P90Ms, ours(rows[0])
	ratio := func(v, b float64) string {
		if math.IsNaN(v) || math.IsNaN(b) || b == 0 {
			return "–"
		}
		return strconv.FormatFloat(v/b, 'f', 2, 64)
	}
	for _, pr := range rows {
		o := ours(pr)
		our := "–"
		if !math.IsNaN(o) {
			our = strconv.FormatFloat(o, 'f', 2, 64)
		}
		fmt.Fprintf(w, "| %s | %.2f | %s | %s, %s | %s | %s |\n", pr.Label, pr.P90Ms, ratio(pr.P90Ms, base), pr.DataPlane, pr.Proxy, our, ratio(o, ourBase))
	}
}

// proxyColors are the placements' colours in the bookinfo plots, the
// paper's Fig. 2 where it has them (green: no proxy, black: inbound,
// yellow: inbound + outbound); others a spare colour by name.
var proxyColors = map[string]color.RGBA{
	"none":          {0x59, 0xa1, 0x4f, 0xff}, // green
	"sidecar-in":    {0x33, 0x33, 0x33, 0xff}, // near black
	"sidecar-inout": {0xed, 0xc9, 0x48, 0xff}, // yellow
	"node":          {0x4e, 0x79, 0xa7, 0xff}, // blue
	"dpu":           {0xe1, 0x57, 0x59, 0xff}, // red
}

func proxyColor(name string) color.Color {
	if c, ok := proxyColors[name]; ok {
		return c
	}
	return planeColor(name)
}

// meshPlots writes, per bookinfo measurement, seed 002's Fig. 2 —
// bookinfo-<m>-p90-vs-connections.png, p90 latency (ms) against wrk's
// connections, one line per data plane and placement — and the host CPU
// per request the same way (bookinfo-<m>-host-cpu-vs-connections.png).
func (res *Result) meshPlots(dir string) error {
	cells, _ := res.meshAggregate()
	multiPlane := len(res.Planes) > 1
	for _, m := range res.Scenario.Measurements {
		if m.Kind != KindBookinfo {
			continue
		}
		for _, c := range []struct{ col, label, title, file string }{
			{"p90", "p90 latency (ms)", "90th percentile latency vs connections", "p90"},
			{"host ms/req", "host CPU per request (ms)", "host CPU per product page vs connections", "host-cpu"},
		} {
			p := plot.New()
			p.Title.Text = fmt.Sprintf("Bookinfo %s: %s", m.Name, c.title)
			p.X.Label.Text = "connections (wrk)"
			p.Y.Label.Text = c.label
			leg := newLegend()
			lines := 0
			for _, pi := range res.Planes {
				for _, proxy := range m.Proxies {
					var xys plotter.XYs
					for _, n := range m.Connections {
						if cell := cells[meshKey{m.Name, pi.Name, proxy, n}]; cell != nil {
							if v := Summarize(cell.values[c.col]).Median; !math.IsNaN(v) {
								xys = append(xys, plotter.XY{X: float64(n), Y: v})
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
					l.Color, pts.Color, pts.Shape = proxyColor(proxy), proxyColor(proxy), draw.CircleGlyph{}
					label := proxy
					if multiPlane {
						label = pi.Name + ", " + proxy
					}
					p.Add(l, pts)
					leg.Add(label, l)
					lines++
				}
			}
			if lines == 0 {
				continue
			}
			p.Add(plotter.NewGrid())
			p.Y.Min = 0
			if err := savePlot(p, leg, 20*vg.Centimeter, 12*vg.Centimeter, filepath.Join(dir, fmt.Sprintf("bookinfo-%s-%s-vs-connections.png", m.Name, c.file))); err != nil {
				return err
			}
		}
	}
	return nil
}
