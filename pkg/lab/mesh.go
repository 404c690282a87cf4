package lab

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nagare-net/nagare/pkg/agent/config"
	"github.com/nagare-net/nagare/pkg/lab/bookinfo"
)

// Seed 002's study: a Bookinfo-shaped application (pkg/lab/bookinfo) whose
// services reach each other through ClusterIP Services, measured with an
// L7 proxy in different places on its path (ProxyPlacement): none, a
// sidecar per pod on the inbound side, sidecars inbound and outbound
// (mesh_sidecar.go); one per node and one in the DPU domain are the next
// placements (registered by their own files, the same way).
//
// A bookinfo measurement is one test per proxy placement (Sample.Proxy):
// the placement's proxies and capture rules are set up, the application
// is started in its pods, and wrk runs against the product page's
// ClusterIP at each connection count (MeasurementSpec.Connections),
// keep-alive connections as seed 002's load tool held them. Each step
// records wrk's latency percentiles, the requests served, and the CPU of
// the whole host, of the proxies and of the application.

// KindBookinfo is seed 002's measurement (above).
const KindBookinfo = "bookinfo"

// BookinfoSpec names the pods of the application; the measurement's
// server pod is productpage, its client runs wrk.
type BookinfoSpec struct {
	Details string `yaml:"details"`
	// Reviews are the pods of reviews v1, v2, v3 (in that order; fewer
	// leave the later versions out), all behind the reviews Service.
	Reviews []string `yaml:"reviews"`
	Ratings string   `yaml:"ratings"`
}

// ProxyPlacement puts the L7 proxy somewhere on the application's path.
// A fresh instance serves one test (one placement in one repetition).
// To add one: a file with a type implementing it and an init calling
// RegisterProxyPlacement; scenarios then list it in `proxies:`.
type ProxyPlacement interface {
	// Name is what scenarios list (`proxies: [none, sidecar-in, ...]`).
	Name() string
	// Description is one line for the report.
	Description() string
	// Available says whether the placement can run with data plane dp
	// here: nil, or an error wrapping ErrNotAvailable (the test is then
	// skipped with that reason).
	Available(dp DataPlane) error
	// Setup starts the proxies and steers the application's traffic
	// through them, before the application starts. Everything it makes
	// is registered with cleanup, undone when the test ends.
	Setup(ctx context.Context, app *MeshApp, cleanup *Cleanup) error
	// Processes are the proxies' PIDs on the host (their CPU is the
	// "proxy CPU"); nil if none run on the host.
	Processes() []int
	// Requests is how many requests the proxies have taken so far,
	// read from their own counters (-1: no proxies): the evidence that
	// they sit in the path.
	Requests(ctx context.Context) (int64, error)
}

var proxyPlacements = map[string]func() ProxyPlacement{}

// RegisterProxyPlacement makes a placement known to scenarios by its Name.
func RegisterProxyPlacement(f func() ProxyPlacement) { proxyPlacements[f().Name()] = f }

// NewProxyPlacement makes a fresh placement by its name.
func NewProxyPlacement(name string) (ProxyPlacement, error) {
	f, ok := proxyPlacements[name]
	if !ok {
		return nil, fmt.Errorf("unknown proxy placement %q (known: %s)", name, strings.Join(ProxyPlacementNames(), ", "))
	}
	return f(), nil
}

// ProxyPlacementNames lists the known placements, sorted.
func ProxyPlacementNames() []string {
	var n []string
	for k := range proxyPlacements {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// MeshPlane is a data plane that programs the application's Services
// given as cluster-file Services (Topology.ClusterServices): the nagare
// planes, whose agents read them from their cluster file. Others are not
// applicable to bookinfo measurements.
type MeshPlane interface {
	// MeshServices is nil, or why this plane cannot carry the
	// application here (wrapping ErrNotAvailable).
	MeshServices() error
}

// MeshApp is the application of one bookinfo test, as the placements see
// it: its pods by role, its Services' ClusterIPs, the run it belongs to.
type MeshApp struct {
	Topo *Topology
	// Plane is the data plane the test runs on.
	Plane DataPlane
	// Client runs the load tool; ProductPage, Details, Ratings and
	// Reviews (v1, v2, v3) run the services.
	Client, ProductPage, Details, Ratings *Pod
	Reviews                               []*Pod
	// ClusterIP of each Service by role (bookinfo.Role*); every Service
	// has port bookinfo.Port, its endpoints' port too.
	ClusterIP map[string]string
}

// ServicePods are the pods that serve (every pod of the application but
// the client), callers first.
func (a *MeshApp) ServicePods() []*Pod {
	return append([]*Pod{a.ProductPage, a.Details}, append(append([]*Pod(nil), a.Reviews...), a.Ratings)...)
}

// Callers are the pods that call other services: productpage, and the
// reviews versions that call ratings (v2, v3).
func (a *MeshApp) Callers() []*Pod {
	out := []*Pod{a.ProductPage}
	if len(a.Reviews) > 1 {
		out = append(out, a.Reviews[1:]...)
	}
	return out
}

// meshServiceCIDR holds the application's ClusterIPs (meshClusterIP).
const meshServiceCIDR = "10.96.0.0/16"

// meshClusterIP is the ClusterIP of a role's Service: 10.96.80.10 +
// the role's index in bookinfo.Roles.
func meshClusterIP(role string) string {
	for i, r := range bookinfo.Roles {
		if r == role {
			return fmt.Sprintf("10.96.80.%d", 10+i)
		}
	}
	panic("unknown role " + role)
}

// meshServices are the application's Services, as a cluster file has
// them: one per role, port 9080, endpoints by pod name (all pods on one
// node: a name resolves on the pod's own node).
func meshServices(b *BookinfoSpec, productPage string) []config.Service {
	eps := map[string][]string{bookinfo.RoleProductPage: {productPage}, bookinfo.RoleDetails: {b.Details},
		bookinfo.RoleReviews: b.Reviews, bookinfo.RoleRatings: {b.Ratings}}
	var out []config.Service
	for _, role := range bookinfo.Roles {
		out = append(out, config.Service{Name: role, ClusterIP: meshClusterIP(role),
			Ports:     []config.ServicePort{{Name: "http", Protocol: "TCP", Port: bookinfo.Port}},
			Endpoints: append([]string(nil), eps[role]...)})
	}
	return out
}

// meshPairs are the application's calls, caller first: the pods that
// must reach each other.
func (b *BookinfoSpec) pairs(client, productPage string) [][2]string {
	p := [][2]string{{client, productPage}, {productPage, b.Details}}
	for i, r := range b.Reviews {
		p = append(p, [2]string{productPage, r})
		if i > 0 {
			p = append(p, [2]string{r, b.Ratings})
		}
	}
	return p
}

// validateMesh checks a measurement's bookinfo fields.
func validateMesh(m MeasurementSpec, where string, pods map[string]PodSpec, bad func(string, ...any)) {
	if m.Kind != KindBookinfo {
		if m.Bookinfo != nil || len(m.Proxies) > 0 || len(m.Connections) > 0 {
			bad("%s: bookinfo, proxies and connections are for kind bookinfo", where)
		}
		return
	}
	b := m.Bookinfo
	if b == nil {
		bad("%s: bookinfo: name the pods of details, reviews (v1, v2, v3) and ratings", where)
		return
	}
	if len(b.Reviews) < 1 || len(b.Reviews) > 3 {
		bad("%s: bookinfo.reviews: %d pods, want 1-3 (v1, v2, v3)", where, len(b.Reviews))
	}
	seen := map[string]string{m.Client: "client", m.Server: "productpage"}
	if m.Client == m.Server {
		bad("%s: client and productpage are the same pod", where)
	}
	roles := []struct{ role, pod string }{{"details", b.Details}, {"ratings", b.Ratings}}
	for i, r := range b.Reviews {
		roles = append(roles, struct{ role, pod string }{fmt.Sprintf("reviews[%d]", i), r})
	}
	var node string
	for _, r := range append(roles, struct{ role, pod string }{"client", m.Client}, struct{ role, pod string }{"productpage", m.Server}) {
		p, ok := pods[r.pod]
		if !ok {
			bad("%s: bookinfo %s %q is not a pod", where, r.role, r.pod)
			continue
		}
		if node == "" {
			node = p.Node
		} else if p.Node != node {
			// Cluster-file endpoints by pod name resolve on their own node only.
			bad("%s: bookinfo %s %q is on %s: the application's pods must share one node (its Services name their endpoints by pod)", where, r.role, r.pod, p.Node)
		}
		if p.Uplink != "" {
			bad("%s: bookinfo %s %q is an uplink port", where, r.role, r.pod)
		}
	}
	for _, r := range roles {
		if what, dup := seen[r.pod]; dup && r.pod != "" {
			bad("%s: bookinfo %s %q is already the %s", where, r.role, r.pod, what)
		}
		seen[r.pod] = r.role
	}
	if len(m.Proxies) == 0 {
		bad("%s: proxies: list the proxy placements (known: %s)", where, strings.Join(ProxyPlacementNames(), ", "))
	}
	dup := map[string]bool{}
	for _, p := range m.Proxies {
		if _, ok := proxyPlacements[p]; !ok {
			bad("%s: proxies: unknown placement %q (known: %s)", where, p, strings.Join(ProxyPlacementNames(), ", "))
		}
		if dup[p] {
			bad("%s: proxies: %q listed twice", where, p)
		}
		dup[p] = true
	}
	if len(m.Connections) == 0 {
		bad("%s: connections: list wrk's connection counts, e.g. [1, 2, 4, 8]", where)
	}
	seenConns := map[int]bool{}
	for _, c := range m.Connections {
		if c < 1 || c > 1024 {
			bad("%s: connections: %d, want 1-1024", where, c)
		}
		if seenConns[c] {
			bad("%s: connections: %d listed twice (the report has one line per count)", where, c)
		}
		seenConns[c] = true
	}
	for _, p := range m.Placements {
		if p != CrossCore {
			bad("%s: placement %s: bookinfo runs cross-core only (wrk on the client CPU, the application and proxies unpinned)", where, p)
		}
	}
}

// meshTests expands a bookinfo measurement's test into one per proxy
// placement.
func meshTests(tc test) []test {
	var out []test
	for _, p := range tc.m.Proxies {
		t := tc
		t.proxy = p
		out = append(out, t)
	}
	return out
}

// MeshStep is one connection count of a bookinfo test.
type MeshStep struct {
	Connections int     `json:"connections"`
	Requests    int     `json:"requests"`
	ReqPerSec   float64 `json:"req_per_s"`
	// Errors are wrk's socket errors and non-2xx/3xx responses.
	Errors int     `json:"errors"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	// CPU seconds over wrk's run: the whole VM, the proxies, the
	// application's processes.
	WindowSeconds float64 `json:"window_s"`
	HostCPUs      float64 `json:"host_cpu_s"`
	ProxyCPUs     float64 `json:"proxy_cpu_s"`
	AppCPUs       float64 `json:"app_cpu_s"`
}

// MeshResult is a bookinfo test's result.
type MeshResult struct {
	Steps []MeshStep `json:"steps"`
	// PageBytes is the product page's size as the client received it.
	PageBytes int `json:"page_bytes"`
	// ProxyRequests is how many requests the proxies counted over the
	// whole test (-1: no proxies); Requests how many product pages the
	// client asked for in that time (wrk's and the checks').
	ProxyRequests int64 `json:"proxy_requests"`
	Requests      int64 `json:"requests"`
}

// BookinfoBinary finds nagare-bookinfo (next to nagarectl, else PATH).
// Tests replace it with a freshly built one.
var BookinfoBinary = func() (string, error) { return nagareBinary("nagare-bookinfo") }

// meshApp is the application of test tc on this run.
func (r *planeRun) meshApp(m MeasurementSpec) *MeshApp {
	t := r.topo
	a := &MeshApp{Topo: t, Plane: r.dp, Client: t.Pod(m.Client), ProductPage: t.Pod(m.Server),
		Details: t.Pod(m.Bookinfo.Details), Ratings: t.Pod(m.Bookinfo.Ratings), ClusterIP: map[string]string{}}
	for _, rv := range m.Bookinfo.Reviews {
		a.Reviews = append(a.Reviews, t.Pod(rv))
	}
	for _, role := range bookinfo.Roles {
		a.ClusterIP[role] = meshClusterIP(role)
	}
	return a
}

// runMesh runs a bookinfo measurement's tests, one per proxy placement.
func (r *planeRun) runMesh(ctx context.Context, tests []test) []Sample {
	var out []Sample
	for _, tc := range tests {
		r.bar.Describe(fmt.Sprintf("rep %d/%d %-18s %s %s", r.rep, r.s.Reps, r.dp.Name(), tc.m.Name, tc.proxy))
		out = append(out, r.meshTest(ctx, tc))
		r.bar.Add(1)
	}
	return out
}

func (r *planeRun) meshTest(ctx context.Context, tc test) (s Sample) {
	s = r.sample(tc, StatusOK, "")
	s.Start = time.Now()
	pl, err := NewProxyPlacement(tc.proxy)
	if err != nil {
		s.Status, s.Error = StatusFailed, err.Error()
		return s
	}
	if err := pl.Available(r.dp); err != nil {
		s.Status, s.Error = StatusSkipped, err.Error()
		return s
	}
	// The application and the proxies stop with the test; what cannot be
	// undone fails it (the next placement would run beside leftovers).
	step := &Cleanup{}
	undo := r.topo.Cleanup.Add("stop bookinfo ("+tc.proxy+")", step.RunAll)
	defer func() {
		if err := undo.Run(); err != nil && s.Status == StatusOK {
			s.Status, s.Error = StatusFailed, "stopping the application and proxies: "+err.Error()
		}
	}()
	res, err := r.meshRun(ctx, tc, pl, step)
	s.Mesh = res
	if err != nil {
		s.Status, s.Error = StatusFailed, err.Error()
	}
	return s
}

func (r *planeRun) meshRun(ctx context.Context, tc test, pl ProxyPlacement, step *Cleanup) (*MeshResult, error) {
	m := tc.m
	app := r.meshApp(m)
	r.sh.logf("# bookinfo %s: proxies %s (%s)", m.Name, pl.Name(), pl.Description())
	if err := pl.Setup(ctx, app, step); err != nil {
		return nil, fmt.Errorf("proxies %s: %w", pl.Name(), err)
	}
	appPids, err := r.startBookinfo(ctx, app, step)
	if err != nil {
		return nil, err
	}
	res := &MeshResult{ProxyRequests: -1}
	before, err := pl.Requests(ctx)
	if err != nil {
		return res, fmt.Errorf("proxy counters: %w", err)
	}
	url := "http://" + net.JoinHostPort(app.ClusterIP[bookinfo.RoleProductPage], strconv.Itoa(bookinfo.Port)) + "/productpage"
	n, size, err := CheckProductPage(ctx, netnsPath(app.Client.NS), url, 30*time.Second)
	res.Requests += n
	res.PageBytes = size
	if err != nil {
		return res, err
	}
	for _, conns := range m.Connections {
		wrk := func(ctx context.Context, args []string) (string, error) {
			return r.sh.NS(ctx, app.Client.NS, append([]string{"taskset", "-c", strconv.Itoa(r.s.CPUs.Client)}, args...)...)
		}
		st, err := MeasureMeshStep(ctx, conns, time.Duration(m.Duration), url, wrk, pl.Processes(), appPids)
		if err != nil {
			return res, err
		}
		res.Requests += int64(st.Requests)
		r.sh.logf("#   %d connections: %d requests, %.0f/s, p50 %.2f p90 %.2f p99 %.2f ms, %d errors; CPU s host %.2f proxies %.2f app %.2f",
			conns, st.Requests, st.ReqPerSec, st.P50Ms, st.P90Ms, st.P99Ms, st.Errors, st.HostCPUs, st.ProxyCPUs, st.AppCPUs)
		res.Steps = append(res.Steps, st)
	}
	after, err := pl.Requests(ctx)
	if err != nil {
		return res, fmt.Errorf("proxy counters: %w", err)
	}
	if before >= 0 {
		res.ProxyRequests = after - before
		r.sh.logf("#   the proxies counted %d requests for %d product pages", res.ProxyRequests, res.Requests)
	}
	return res, nil
}

// MeasureMeshStep is one connection count of a bookinfo test: wrk
// (-t1 -cN -dD --latency URL, keep-alive) run by wrk where the client
// is (the lab: in the client pod's namespace, pinned; Kubernetes: kubectl
// exec in the client pod), its latency percentiles and rate, and the CPU
// seconds over its run of the whole host, of the proxies' and of the
// application's processes (PIDs on this host).
func MeasureMeshStep(ctx context.Context, conns int, d time.Duration, url string,
	wrk func(ctx context.Context, args []string) (string, error), proxies, app []int) (MeshStep, error) {
	st := MeshStep{Connections: conns}
	b, err := takeMeshSnapshot(proxies, app)
	if err != nil {
		return st, err
	}
	secs := strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	out, err := wrk(cctx, []string{"wrk", "-t1", "-c" + strconv.Itoa(conns), "-d" + secs + "s", "--latency", url})
	cancel()
	st.WindowSeconds = time.Since(start).Seconds()
	if err != nil {
		return st, err
	}
	a, err := takeMeshSnapshot(proxies, app)
	if err != nil {
		return st, err
	}
	w, err := ParseWrk(out)
	if err != nil {
		return st, err
	}
	st.Requests, st.ReqPerSec, st.Errors = w.Requests, w.ConnPerSec, w.Errors
	st.P50Ms, st.P90Ms, st.P99Ms = w.LatP50Us/1e3, w.LatP90Us/1e3, w.LatP99Us/1e3
	st.HostCPUs = usageBetween(b.host, a.host, st.WindowSeconds).HostCPUSeconds
	st.ProxyCPUs, st.AppCPUs = cpuSecondsBetween(b.proxy, a.proxy), cpuSecondsBetween(b.app, a.app)
	return st, nil
}

// startBookinfo starts one nagare-bookinfo per service pod, each calling
// the others by their ClusterIPs, and waits until each listens. TIME_WAIT
// reuse is on in their pods: every call is a new connection (as
// Bookinfo's), thousands a second to the same Service.
func (r *planeRun) startBookinfo(ctx context.Context, app *MeshApp, step *Cleanup) (pids []int, err error) {
	bin, err := BookinfoBinary()
	if err != nil {
		return nil, notAvailable("%v; build it: make build", err)
	}
	base := func(role string) string {
		return "http://" + net.JoinHostPort(app.ClusterIP[role], strconv.Itoa(bookinfo.Port))
	}
	type svc struct {
		pod  *Pod
		args []string
	}
	svcs := []svc{
		{app.ProductPage, []string{"--role", bookinfo.RoleProductPage, "--details", base(bookinfo.RoleDetails), "--reviews", base(bookinfo.RoleReviews)}},
		{app.Details, []string{"--role", bookinfo.RoleDetails}},
		{app.Ratings, []string{"--role", bookinfo.RoleRatings}},
	}
	for i, p := range app.Reviews {
		svcs = append(svcs, svc{p, []string{"--role", bookinfo.RoleReviews, "--version", strconv.Itoa(i + 1), "--ratings", base(bookinfo.RoleRatings)}})
	}
	for _, s := range svcs {
		if _, err := r.sh.NS(ctx, s.pod.NS, "sysctl", "-qw", "net.ipv4.tcp_tw_reuse=1"); err != nil {
			return nil, err
		}
		args := append([]string{"ip", "netns", "exec", s.pod.NS, bin, "--listen", fmt.Sprintf("0.0.0.0:%d", bookinfo.Port)}, s.args...)
		p, err := r.sh.Start(step, "listening on", args...)
		if err != nil {
			return nil, err
		}
		if err := p.WaitReady(ctx, 10*time.Second); err != nil {
			return nil, fmt.Errorf("bookinfo %s in %s: %w: %s", s.args[1], s.pod.Name, err, lastLines(p.Output(), 3))
		}
		pids = append(pids, p.Pid)
	}
	return pids, nil
}

// CheckProductPage asks for the product page from network namespace
// netns (a path: the client pod's) until it answers
// 200 (the Services and the proxies are programmed), then a few times
// more so that every reviews version is reached; it returns how many
// pages it asked for and the page's size. A page of the wrong size is an
// error: something other than productpage answered.
func CheckProductPage(ctx context.Context, netns, url string, timeout time.Duration) (n int64, size int, err error) {
	client := netnsHTTPClient(netns)
	get := func() (int, error) {
		n++
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return 0, err
		}
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("%s: %s", resp.Status, lastLines(string(body), 2))
		}
		return len(body), nil
	}
	deadline := time.Now().Add(timeout)
	for {
		size, err = get()
		if err == nil {
			break
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return n, 0, fmt.Errorf("product page %s from %s: no answer after %s: %w", url, netns, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := 0; i < 9; i++ {
		if size, err = get(); err != nil {
			return n, size, fmt.Errorf("product page %s from %s: %w", url, netns, err)
		}
	}
	if size != bookinfo.ProductPageBytes {
		return n, size, fmt.Errorf("product page %s from %s: %d bytes, want %d", url, netns, size, bookinfo.ProductPageBytes)
	}
	return n, size, nil
}

// writeFileIn writes a file under the run's temp dir and returns its path.
func writeFileIn(t *Topology, name, content string) (string, error) {
	p := filepath.Join(t.TempDir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", err
	}
	return p, os.WriteFile(p, []byte(content), 0o644)
}

// SetProxies makes every bookinfo measurement of s compare placements
// instead of its own, and keeps only the paper's rows beside them
// (nagarectl lab run --proxies). Run validates the names.
func (s *Scenario) SetProxies(placements []string) {
	keep := map[string]bool{}
	for _, p := range placements {
		keep[p] = true
	}
	for i := range s.Measurements {
		if s.Measurements[i].Kind == KindBookinfo {
			s.Measurements[i].Proxies = placements
		}
	}
	var rows []PaperRow
	for _, pr := range s.Paper {
		if pr.Proxy == "" || keep[pr.Proxy] {
			rows = append(rows, pr)
		}
	}
	s.Paper = rows
}

// validateMeshPaper checks a paper row of a bookinfo measurement; false
// if pr is not one (the other kinds' rules apply).
func validateMeshPaper(s *Scenario, i int, pr PaperRow, bad func(string, ...any)) bool {
	var m *MeasurementSpec
	for k := range s.Measurements {
		if s.Measurements[k].Name == pr.Measurement {
			m = &s.Measurements[k]
		}
	}
	if m == nil || m.Kind != KindBookinfo {
		if pr.Proxy != "" || pr.P90Ms != 0 {
			bad("paper[%d]: proxy and p90_ms are for bookinfo measurements", i)
		}
		return false
	}
	if pr.Label == "" || pr.DataPlane == "" {
		bad("paper[%d]: label and dataplane are required", i)
	}
	if pr.P90Ms <= 0 {
		bad("paper[%d]: p90_ms: the paper's p90 latency at one connection, in ms", i)
	}
	found := false
	for _, p := range m.Proxies {
		found = found || p == pr.Proxy
	}
	if !found {
		bad("paper[%d]: proxy %q is not one of %q's proxies (%s)", i, pr.Proxy, m.Name, strings.Join(m.Proxies, ", "))
	}
	if len(pr.RTT)+len(pr.Mbps)+len(pr.Loss) > 0 {
		bad("paper[%d]: %q is bookinfo: give p90_ms, not rtt, mbps or loss", i, pr.Measurement)
	}
	return true
}

// netnsHTTPClient is an HTTP client whose connections are made in the
// network namespace at path netns, one per request, each request bounded
// to 2 s.
func netnsHTTPClient(netns string) *http.Client {
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialInNetns(ctx, netns, network, addr)
		}}}
}

// netnsGet is the body of a GET of url from the network namespace at
// path netns (a proxy's counters on its loopback).
func netnsGet(ctx context.Context, netns, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := netnsHTTPClient(netns).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// meshSnapshot is the CPU counters around one wrk step: the host's, the
// proxies', the application's.
type meshSnapshot struct {
	host       cpuSnapshot
	proxy, app map[int]uint64
}

func takeMeshSnapshot(proxies, app []int) (s meshSnapshot, err error) {
	if s.host, err = takeSnapshot(nil); err != nil {
		return s, err
	}
	if s.proxy, err = pidTicks("proxy", proxies); err != nil {
		return s, err
	}
	s.app, err = pidTicks("application", app)
	return s, err
}
