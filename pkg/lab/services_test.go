package lab

import (
	"encoding/csv"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg"
)

// wrkOut is wrk 4.1.0's report (Debian 12) of a 2 s run with --latency.
const wrkOut = `Running 2s test @ http://10.96.25.160:80/
  1 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   250.58ms  431.24ms   1.50s    81.87%
    Req/Sec     7.31k     5.53k   17.32k    71.43%
  Latency Distribution
     50%    1.12ms
     75%  368.39ms
     90%    1.05s 
     99%    1.46s 
  5450 requests in 2.23s, 771.73KB read
  Socket errors: connect 0, read 3, write 0, timeout 12
  Non-2xx or 3xx responses: 2
Requests/sec:   2443.96
Transfer/sec:    346.07KB
`

func TestParseWrk(t *testing.T) {
	r, err := ParseWrk(wrkOut)
	if err != nil {
		t.Fatal(err)
	}
	want := ConnRateResult{ConnPerSec: 2443.96, Requests: 5450, Errors: 17, LatP50Us: 1120, LatP90Us: 1.05e6, LatP99Us: 1.46e6}
	if r != want {
		t.Errorf("ParseWrk = %+v, want %+v", r, want)
	}
	if _, err := ParseWrk("unable to connect to 10.96.0.9:80 Connection refused\n"); err == nil {
		t.Error("no Requests/sec line: want an error")
	}
	// wrk prints a rate even when nothing completed: that is a failure.
	if _, err := ParseWrk("  0 requests in 2.00s, 0.00B read\nRequests/sec:      0.00\n"); err == nil {
		t.Error("0 requests: want an error")
	}
}

func TestPercentileNearestRank(t *testing.T) {
	v := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, c := range []struct{ p, want float64 }{{50, 5}, {99, 10}, {10, 1}, {0, 1}} {
		if got := percentile(v, c.p); got != c.want {
			t.Errorf("percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if percentile(nil, 50) != 0 {
		t.Error("empty: want 0")
	}
}

func TestServiceScenarioValidation(t *testing.T) {
	base := `
name: s
nodes: [n1]
pods: [{name: a, node: n1}, {name: b, node: n1}]
dataplanes: [kube-proxy-iptables]
reps: 1
measurements:
`
	for _, c := range []struct{ meas, want string }{
		{`  - {name: m, kind: rtt, client: a, server: b, via: loadbalancer}`, `via "loadbalancer", want pod, clusterip or nodeport`},
		{`  - {name: m, kind: udp-pps, client: a, server: b, via: nodeport}`, "via nodeport: for rtt, tcp and conn-rate"},
		{`  - {name: m, kind: rtt, client: a, server: a, via: clusterip}`, "needs a client other than the server"},
		{`  - {name: m, kind: rtt, client: a, server: b, streams: 4}`, "streams 4: for tcp"},
		{`  - {name: m, kind: tcp, client: a, server: b, conns: 4}`, "conns 4: for conn-rate"},
		{`  - {name: m, kind: service-scale, client: a, server: b}`, "services: list the Service counts"},
		{`  - {name: m, kind: service-scale, client: a, server: b, services: [0, 40000]}`, "services: 0, want 1-30000"},
		{`  - {name: m, kind: tcp, client: a, server: b, services: [10]}`, "services: for service-scale only"},
		{"  - {name: p, kind: rtt, client: a, server: b}\n  - {name: m, kind: tcp, client: a, server: b, via: clusterip, baseline: p}", `baseline "p" is not a pod-to-pod measurement of the same kind`},
		{`  - {name: m, kind: tcp, client: a, server: b, baseline: p}`, "baseline is for measurements through a Service"},
	} {
		_, err := ParseScenario([]byte(base + c.meas + "\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to contain %q", c.meas, err, c.want)
		}
	}
	s, err := LoadScenario("services")
	if err != nil {
		t.Fatal(err)
	}
	if !s.usesServices() {
		t.Error("the services scenario does not use Services")
	}
	if q, _ := LoadScenario("quickstart"); q.usesServices() {
		t.Error("quickstart uses Services")
	}
}

func fakeServicesResult(t *testing.T) *Result {
	t.Helper()
	s, err := ParseScenario([]byte(`
name: svc
nodes: [n1]
pods: [{name: c, node: n1}, {name: s, node: n1}]
dataplanes: [nagare, kube-proxy-iptables, kube-proxy-nftables]
reps: 1
measurements:
  - {name: pod-tcp, kind: tcp, client: c, server: s}
  - {name: svc-tcp, kind: tcp, client: c, server: s, via: clusterip, baseline: pod-tcp}
  - {name: svc-conn, kind: conn-rate, client: c, server: s, via: clusterip}
  - {name: scale, kind: service-scale, client: c, server: s, services: [1, 10000]}
`))
	if err != nil {
		t.Fatal(err)
	}
	res := &Result{Scenario: s, Host: HostInfo{CPU: "test", CPUs: 2}}
	for _, p := range []string{"nagare", "kube-proxy-iptables", "kube-proxy-nftables"} {
		res.Planes = append(res.Planes, PlaneInfo{Name: p, Scope: "intra-node"})
	}
	smp := func(dp, m, kind string) Sample {
		return Sample{DataPlane: dp, Measurement: m, Kind: kind, Placement: CrossCore, Load: "none", Rep: 1, Status: StatusOK, CPU: &CPUUsage{}}
	}
	for _, c := range []struct {
		dp                  string
		pod, svc, conn      float64
		fp1, fp10k, prog10k float64
	}{
		{"nagare", 10, 9.8, 6000, 50, 52, 4},
		{"kube-proxy-iptables", 10, 9, 3000, 70, 140, 12},
		{"kube-proxy-nftables", 10, 9.5, 5000, 70, 72, 8},
	} {
		a, b, cr, sc := smp(c.dp, "pod-tcp", KindTCP), smp(c.dp, "svc-tcp", KindTCP), smp(c.dp, "svc-conn", KindConnRate), smp(c.dp, "scale", KindServiceScale)
		a.TCP, b.TCP = &TCPResult{Gbps: c.pod}, &TCPResult{Gbps: c.svc}
		cr.ConnRate = &ConnRateResult{ConnPerSec: c.conn, Requests: int(c.conn) * 5}
		sc.Scale = []ScaleStep{{Services: 1, Connects: 100, P50Us: c.fp1, P99Us: 2 * c.fp1},
			{Services: 10000, Changed: 9999, APISeconds: 3, ProgrammedSeconds: c.prog10k, Connects: 100, P50Us: c.fp10k, P99Us: 2 * c.fp10k}}
		res.Samples = append(res.Samples, a, b, cr, sc)
	}
	return res
}

func TestServicesReport(t *testing.T) {
	res := fakeServicesResult(t)
	var b strings.Builder
	res.WriteMarkdown(&b)
	md := b.String()
	for _, want := range []string{
		"### Services side by side",
		"| data plane | svc-tcp Gbit/s (× pod-tcp) | svc-conn conn/s (× kube-proxy-iptables) | svc-conn conn/s (× kube-proxy-nftables) | scale first RTT p50 µs @10000 (× @1) | scale programmed s @10000 (× kube-proxy-nftables) | scale s after the last write @10000 (× kube-proxy-nftables) |",
		"| nagare | 9.80 (0.98×) | 6000 (2.00×) | 6000 (1.20×) | 52.0 (1.04×) | 4.0 (0.50×) | 1.00 (0.20×) |",
		"| kube-proxy-iptables | 9.00 (0.90×) | 3000 (1.00×) | 3000 (0.60×) | 140.0 (2.00×) | 12.0 (1.50×) | 9.00 (1.80×) |",
		"| data plane | runs ok | first RTT p50 µs @1 | p99 @1 | failed @1 | API s @1 | programmed s @1 | after last write s @1 | first RTT p50 µs @10000 |",
		"| nagare | 1/1 | 50.0 | 100.0 | 0 | – | – | – | 52.0 | 104.0 | 0 | 3.0 | 4.0 | 1.00 |",
		"| nagare | 1/1 | 6000 | 0 |",
		"through a ClusterIP (its one endpoint the server)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	var c strings.Builder
	if err := res.WriteCSV(&c); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(strings.NewReader(c.String())).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	hdr := recs[0]
	col := func(name string) int {
		for i, h := range hdr {
			if h == name {
				return i
			}
		}
		t.Fatalf("no column %s", name)
		return -1
	}
	if got := recs[4][col("scale_steps")]; got != "1:50:100:0 10000:52:104:4" {
		t.Errorf("scale_steps = %q", got)
	}
	if got := recs[3][col("conn_per_s")]; got != "6000" {
		t.Errorf("conn_per_s = %q", got)
	}
	if math.IsNaN(res.Rows()[0].Cell("gbps").Median) {
		t.Error("no gbps")
	}
}

func TestServicePlot(t *testing.T) {
	dir := t.TempDir()
	if err := fakeServicesResult(t).WritePlots(dir); err != nil {
		t.Fatal(err)
	}
	checkPlaneColours(t, filepath.Join(dir, "firstpacket-scale.png"), 20*vg.Centimeter, 11*vg.Centimeter,
		"nagare", "kube-proxy-iptables", "kube-proxy-nftables")
}

// TestServiceTestsPerPlane: planes without a Service proxy get no tests
// through Services (not applicable); nagare, without NodePorts in the
// lab yet, gets its NodePort tests as skipped samples saying so.
func TestServiceTestsPerPlane(t *testing.T) {
	s, err := ParseScenario([]byte(`
name: s
nodes: [n1]
pods: [{name: a, node: n1}, {name: b, node: n1}]
dataplanes: [veth, nagare, kube-proxy-iptables]
reps: 1
measurements:
  - {name: pod, kind: tcp, client: a, server: b}
  - {name: cip, kind: tcp, client: a, server: b, via: clusterip}
  - {name: np, kind: tcp, client: a, server: b, via: nodeport}
`))
	if err != nil {
		t.Fatal(err)
	}
	names := func(ts []test) (out []string) {
		for _, tc := range ts {
			out = append(out, tc.m.Name)
		}
		return out
	}
	for _, c := range []struct {
		plane   string
		keep    string
		skipped int
	}{{"veth", "pod", 0}, {"nagare", "pod cip np", 0}, {"kube-proxy-iptables", "pod cip np", 0}} {
		dp, err := NewDataPlane(c.plane)
		if err != nil {
			t.Fatal(err)
		}
		keep, skipped := serviceTests(s, dp, applicableTests(s, dp.Scope()))
		if got := strings.Join(names(keep), " "); got != c.keep || len(skipped) != c.skipped {
			t.Errorf("%s: runs %q, %d skipped; want %q, %d", c.plane, got, len(skipped), c.keep, c.skipped)
		}
		for _, smp := range skipped {
			if smp.Measurement != "np" || smp.Status != StatusSkipped || !strings.Contains(smp.Error, "not yet") {
				t.Errorf("%s: skipped sample %+v", c.plane, smp)
			}
		}
	}
}
