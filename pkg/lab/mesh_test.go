package lab

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSeed2SidecarScenario: the built-in scenario parses, its one
// bookinfo measurement becomes one test per proxy placement, and its
// Services are Bookinfo's four, reviews with its three versions.
func TestSeed2SidecarScenario(t *testing.T) {
	s, err := LoadScenario("seed2-sidecar")
	if err != nil {
		t.Fatal(err)
	}
	tests := applicableTests(s, ScopeIntraNode|ScopeInterNode)
	var proxies []string
	for _, tc := range tests {
		if tc.m.Kind != KindBookinfo {
			t.Fatalf("test of kind %s", tc.m.Kind)
		}
		proxies = append(proxies, tc.proxy)
	}
	if got := strings.Join(proxies, ","); got != "none,sidecar-in,sidecar-inout,node,dpu" {
		t.Errorf("tests per placement %s, want none,sidecar-in,sidecar-inout,node,dpu", got)
	}
	if got := newSample(s, "nagare", tests[1], 1, StatusOK, "").Proxy; got != "sidecar-in" {
		t.Errorf("sample's proxy %q", got)
	}
	if tools := strings.Join(s.requiredTools(), " "); !strings.Contains(tools, "wrk nginx nft setpriv haproxy") || strings.Contains(tools, "iperf3") {
		t.Errorf("required tools %s", tools)
	}
	m := s.Measurements[0]
	svcs := meshServices(m.Bookinfo, m.Server)
	cidr := netip.MustParsePrefix(meshServiceCIDR)
	seen := map[string]bool{}
	for _, sv := range svcs {
		ip := netip.MustParseAddr(sv.ClusterIP)
		if !cidr.Contains(ip) || seen[sv.ClusterIP] {
			t.Errorf("Service %s: ClusterIP %s outside %s or taken twice", sv.Name, ip, cidr)
		}
		seen[sv.ClusterIP] = true
		if len(sv.Ports) != 1 || sv.Ports[0].Port != 9080 {
			t.Errorf("Service %s: ports %+v", sv.Name, sv.Ports)
		}
	}
	if len(svcs) != 4 || strings.Join(svcs[2].Endpoints, ",") != "reviews1,reviews2,reviews3" || svcs[0].Endpoints[0] != "product" {
		t.Errorf("Services %+v", svcs)
	}
	pairs := m.Bookinfo.pairs(m.Client, m.Server)
	if len(pairs) != 1+1+3+2 {
		t.Errorf("calls %v: want client→product, product→details, product→3 reviews, reviews v2, v3→ratings", pairs)
	}
}

// TestSetProxies: --proxies replaces the placements and drops the
// paper's rows of the others, so the scenario stays valid.
func TestSetProxies(t *testing.T) {
	s, err := LoadScenario("seed2-sidecar")
	if err != nil {
		t.Fatal(err)
	}
	s.SetProxies([]string{"none", "sidecar-inout"})
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.Measurements[0].Proxies, ","); got != "none,sidecar-inout" {
		t.Errorf("proxies %s", got)
	}
	if len(s.Paper) != 2 || s.Paper[1].Proxy != "sidecar-inout" {
		t.Errorf("paper rows %+v", s.Paper)
	}
	s.SetProxies([]string{"none", "elsewhere"})
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), `unknown placement "elsewhere"`) {
		t.Errorf("unknown placement: %v", err)
	}
}

func TestBookinfoValidation(t *testing.T) {
	base := `
name: s
nodes: [n1, n2]
pods: [{name: c, node: n1}, {name: p, node: n1}, {name: d, node: n1}, {name: r1, node: n1}, {name: ra, node: n1}, {name: far, node: n2}]
dataplanes: [nagare]
reps: 1
measurements:
`
	ok := `bookinfo: {details: d, reviews: [r1], ratings: ra}, proxies: [none], connections: [1]`
	for _, c := range []struct{ meas, want string }{
		{`  - {name: m, kind: bookinfo, client: c, server: p, proxies: [none], connections: [1]}`, "bookinfo: name the pods"},
		{`  - {name: m, kind: bookinfo, client: c, server: p, bookinfo: {details: d, reviews: [], ratings: ra}, proxies: [none], connections: [1]}`, "bookinfo.reviews: 0 pods, want 1-3"},
		{`  - {name: m, kind: bookinfo, client: c, server: p, bookinfo: {details: x, reviews: [r1], ratings: ra}, proxies: [none], connections: [1]}`, `bookinfo details "x" is not a pod`},
		{`  - {name: m, kind: bookinfo, client: c, server: p, bookinfo: {details: far, reviews: [r1], ratings: ra}, proxies: [none], connections: [1]}`, "must share one node"},
		{`  - {name: m, kind: bookinfo, client: c, server: p, bookinfo: {details: d, reviews: [r1], ratings: d}, proxies: [none], connections: [1]}`, `bookinfo ratings "d" is already the details`},
		{`  - {name: m, kind: bookinfo, client: c, server: p, bookinfo: {details: d, reviews: [r1], ratings: ra}, proxies: [gateway], connections: [1]}`, `unknown placement "gateway"`},
		{`  - {name: m, kind: bookinfo, client: c, server: p, bookinfo: {details: d, reviews: [r1], ratings: ra}, proxies: [none, none], connections: [1]}`, `"none" listed twice`},
		{`  - {name: m, kind: bookinfo, client: c, server: p, bookinfo: {details: d, reviews: [r1], ratings: ra}, proxies: [], connections: [1]}`, "proxies: list the proxy placements"},
		{`  - {name: m, kind: bookinfo, client: c, server: p, bookinfo: {details: d, reviews: [r1], ratings: ra}, proxies: [none], connections: [0]}`, "connections: 0, want 1-1024"},
		{`  - {name: m, kind: bookinfo, client: c, server: p, bookinfo: {details: d, reviews: [r1], ratings: ra}, proxies: [none], connections: [1, 2, 1]}`, "connections: 1 listed twice"},
		{`  - {name: m, kind: bookinfo, client: c, server: p, ` + ok + `, placements: [same-core]}`, "bookinfo runs cross-core only"},
		{`  - {name: m, kind: tcp, client: c, server: p, proxies: [none]}`, "proxies and connections are for kind bookinfo"},
		{"  - {name: m, kind: bookinfo, client: c, server: p, " + ok + "}\npaper:\n  - {label: x, measurement: m, dataplane: nagare, proxy: sidecar-in, p90_ms: 1}", `proxy "sidecar-in" is not one of "m"'s proxies`},
		{"  - {name: m, kind: bookinfo, client: c, server: p, " + ok + "}\npaper:\n  - {label: x, measurement: m, dataplane: nagare, proxy: none}", "p90_ms: the paper's p90"},
		{"  - {name: m, kind: bookinfo, client: c, server: p, " + ok + "}\n  - {name: v, kind: rtt, client: c, server: p, via: clusterip}", "bookinfo cannot share a scenario"},
		{"  - {name: m, kind: bookinfo, client: c, server: p, " + ok + "}\n  - {name: m2, kind: bookinfo, client: c, server: p, " + ok + "}", "2 bookinfo measurements, at most one"},
		{"  - {name: m, kind: rtt, client: c, server: p}\npaper:\n  - {label: x, measurement: m, dataplane: nagare, rtt: [1, 2, 3, 4, 5], p90_ms: 3}", "proxy and p90_ms are for bookinfo measurements"},
	} {
		_, err := ParseScenario([]byte(base + c.meas + "\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to contain %q", c.meas, err, c.want)
		}
	}
	if _, err := ParseScenario([]byte(base + "  - {name: m, kind: bookinfo, client: c, server: p, " + ok + "}\n")); err != nil {
		t.Errorf("valid bookinfo measurement refused: %v", err)
	}
}

func TestParseStubStatus(t *testing.T) {
	// nginx 1.22's stub_status page.
	page := "Active connections: 3 \nserver accepts handled requests\n 12 12 4711 \nReading: 0 Writing: 1 Waiting: 2 \n"
	if n, err := ParseStubStatus(page); err != nil || n != 4711 {
		t.Errorf("ParseStubStatus = %d, %v, want 4711", n, err)
	}
	if _, err := ParseStubStatus("<html>404</html>"); err == nil {
		t.Error("a page without counters parsed")
	}
}

// TestSidecarCapture: inbound only captures the service port in
// prerouting; with outbound, the application's connections to the
// Services are captured in output, except the sidecar's own (its uid),
// and the sidecar routes each Service's ClusterIP to that Service.
func TestSidecarCapture(t *testing.T) {
	in, inout := SidecarRules(false), SidecarRules(true)
	if !strings.Contains(in, "tcp dport 9080 redirect to :15006") || strings.Contains(in, "hook output") {
		t.Errorf("inbound rules:\n%s", in)
	}
	if !strings.Contains(inout, "meta skuid 1337 return") || !strings.Contains(inout, "ip daddr 10.96.0.0/16 tcp dport 9080 redirect to :15001") ||
		strings.Index(inout, "skuid") > strings.Index(inout, "redirect to :15001") {
		t.Errorf("inbound + outbound rules (the sidecar's own connections must be returned first):\n%s", inout)
	}
	ips := map[string]string{"productpage": "10.96.80.10", "details": "10.96.80.11", "reviews": "10.96.80.12", "ratings": "10.96.80.13"}
	conf := SidecarNginxConf("/d", ips, true)
	for _, want := range []string{"10.96.80.12 svc_reviews;", "upstream svc_reviews { server 10.96.80.12:9080; keepalive 64; }",
		"listen 15001", "listen 15006", "server 127.0.0.1:9080", "stub_status", "master_process off"} {
		if !strings.Contains(conf, want) {
			t.Errorf("sidecar config lacks %q:\n%s", want, conf)
		}
	}
	if c := SidecarNginxConf("/d", ips, false); strings.Contains(c, "15001") || strings.Contains(c, "map ") {
		t.Errorf("inbound-only sidecar has an outbound listener:\n%s", c)
	}
}

// TestMeshReport renders a made-up run: the table per placement and
// connection count (CPU per request from the step's CPU seconds), the
// requests per page through the proxies, the paper's p90 beside ours as
// ratios, a skipped placement, and the p90-vs-connections plot.
func TestMeshReport(t *testing.T) {
	s, err := LoadScenario("seed2-sidecar")
	if err != nil {
		t.Fatal(err)
	}
	s.Measurements[0].Connections = []int{1, 8}
	s.Measurements[0].Proxies = append(s.Measurements[0].Proxies, "test-nowhere")
	res := &Result{Scenario: s, Host: HostInfo{CPU: "test", CPUs: 2}, Planes: []PlaneInfo{{Name: "nagare", Scope: "intra-node"}}}
	add := func(proxy string, p90 float64, proxied int64) {
		res.Samples = append(res.Samples, Sample{DataPlane: "nagare", Measurement: "productpage", Kind: KindBookinfo, Proxy: proxy,
			Placement: CrossCore, Load: "none", Rep: 1, Status: StatusOK, Mesh: &MeshResult{PageBytes: 5500, Requests: 1000, ProxyRequests: proxied,
				Steps: []MeshStep{
					{Connections: 1, Requests: 500, ReqPerSec: 250, P50Ms: p90 / 2, P90Ms: p90, P99Ms: 2 * p90, HostCPUs: 1, ProxyCPUs: 0.25, AppCPUs: 0.5},
					{Connections: 8, Requests: 500, ReqPerSec: 250, P50Ms: 4 * p90, P90Ms: 8 * p90, P99Ms: 16 * p90, HostCPUs: 1},
				}}})
	}
	add("none", 2, -1)
	add("sidecar-in", 4, 3670)
	add("sidecar-inout", 6, 6330)
	res.Samples = append(res.Samples, Sample{DataPlane: "nagare", Measurement: "productpage", Kind: KindBookinfo, Proxy: "test-nowhere",
		Placement: CrossCore, Load: "none", Status: StatusSkipped, Error: "no DPU here"})
	var b strings.Builder
	res.WriteMarkdown(&b)
	md := b.String()
	for _, want := range []string{
		"| nagare | none | 1 | 1/1 | 250 | 1.00 | 2.00 | 4.00 | 0 | 2.000 | 0.500 | 1.000 |",
		"| nagare | sidecar-inout | 8 | 1/1 | 250 | 24.00 | 48.00 | 96.00 | 0 | 2.000 | 0.000 | 0.000 |",
		"| nagare | sidecar-in | 3.67 | 5500 |",
		"| nagare | none | – (no proxy) | 5500 |",
		"| docker-compose, Envoy inbound + outbound | 58.75 | 3.56 | nagare, sidecar-inout | 6.00 | 3.00 |",
		"| nagare | test-nowhere | – | skipped: no DPU here |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "### productpage: productpage") {
		t.Error("the bookinfo measurement also got a generic table")
	}
	var csvOut strings.Builder
	if err := res.WriteCSV(&csvOut); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(csvOut.String()), "\n")
	if len(lines) != 1+3*2+1 { // header, 3 placements × 2 steps, the skipped one
		t.Errorf("%d CSV lines, want 8:\n%s", len(lines), csvOut.String())
	}
	if !strings.HasSuffix(lines[3], ",sidecar-in,1,250,500,2,4,8,0,0,1,0.25,0.5,3670,1000") {
		t.Errorf("CSV line of sidecar-in at 1 connection: %s", lines[3])
	}
	dir := t.TempDir()
	if err := res.WritePlots(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"bookinfo-productpage-p90-vs-connections.png", "bookinfo-productpage-host-cpu-vs-connections.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("plot %s: %v", f, err)
		}
	}
}

// testNowhere is a placement that is never available, for the report's
// skipped line.
type testNowhere struct{ noProxy }

func (testNowhere) Name() string              { return "test-nowhere" }
func (testNowhere) Available(DataPlane) error { return notAvailable("no DPU here") }

func init() { RegisterProxyPlacement(func() ProxyPlacement { return testNowhere{} }) }
