package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
)

// testHookBuilt, if set, is called once a run's namespaces exist.
var testHookBuilt func(*Topology)

// cleanupTimeout bounds each teardown command, which runs even after the
// run's context was cancelled.
const cleanupTimeout = 30 * time.Second

// Options change how a scenario runs.
type Options struct {
	// OutDir receives results.json, samples.csv, summary.md, commands.log
	// and the plots; "" means lab-results/<scenario>-<timestamp>.
	OutDir string
	// Reps, if > 0, overrides the scenario's repetitions.
	Reps int
	// Duration, if > 0, overrides every measurement's duration.
	Duration time.Duration
	// Prefix names the run's namespaces (<prefix>-<node|pod>); "" means
	// nl<pid>.
	Prefix string
	// Progress receives the progress bar; nil means os.Stderr.
	Progress io.Writer
	// NoFiles skips writing the output directory (tests).
	NoFiles bool
}

// Sample is one measurement of one data plane in one repetition.
type Sample struct {
	DataPlane   string `json:"dataplane"`
	Measurement string `json:"measurement"`
	Kind        string `json:"kind"`
	Client      string `json:"client"`
	Server      string `json:"server"`
	Scope       string `json:"scope"`
	Placement   string `json:"placement"`
	Load        string `json:"load"`
	Rep         int    `json:"rep"`
	// Status is ok, failed or skipped (data plane not available here).
	Status string     `json:"status"`
	Error  string     `json:"error,omitempty"`
	RTT    *RTTResult `json:"rtt,omitempty"`
	TCP    *TCPResult `json:"tcp,omitempty"`
	UDP    *UDPResult `json:"udp,omitempty"`
	// Flows is, for a measurement with more flows (MeasurementSpec.With),
	// every flow's result, the measured one first.
	Flows []FlowResult `json:"flows,omitempty"`
	// FlowSetup and Revalidation are the flow-setup kinds' results.
	FlowSetup    *FlowSetupResult    `json:"flow_setup,omitempty"`
	Revalidation *RevalidationResult `json:"revalidation,omitempty"`
	// ConnRate and Scale are the Service kinds' results (services.go).
	ConnRate *ConnRateResult `json:"conn_rate,omitempty"`
	Scale    []ScaleStep     `json:"scale,omitempty"`
	// Proxy is a bookinfo test's proxy placement, Mesh its result (mesh.go).
	Proxy string      `json:"proxy,omitempty"`
	Mesh  *MeshResult `json:"mesh,omitempty"`
	// Isolation is the switch's cache after the sample's load step.
	Isolation *IsolationResult `json:"isolation,omitempty"`
	CPU       *CPUUsage        `json:"cpu,omitempty"`
	// SwitchProcs is how many switch processes were accounted (0 = the data
	// plane is in the kernel and its cost is inside host CPU).
	SwitchProcs int `json:"switch_procs"`
	// DPUProcs is how many switch processes ran in a DPU domain (DPU CPU).
	DPUProcs int       `json:"dpu_procs,omitempty"`
	Start    time.Time `json:"start"`
	// Uplinks are the bytes each uplink port (PodSpec.Uplink) carried
	// during the test, counted at the tester's end.
	Uplinks []UplinkBytes `json:"uplinks,omitempty"`
	// BackgroundBusyPct is how busy the VM was (percent of all CPUs) in the
	// half second before this data plane's run started, i.e. with none of
	// the run's processes alive: load from other users of the machine;
	// -1 if it could not be sampled.
	BackgroundBusyPct float64 `json:"background_busy_pct"`
}

// FlowResult is one flow of a multi-flow measurement.
type FlowResult struct {
	Client string    `json:"client"`
	Server string    `json:"server"`
	UDP    UDPResult `json:"udp"`
}

// Sample statuses.
const (
	StatusOK      = "ok"
	StatusFailed  = "failed"
	StatusSkipped = "skipped"
)

// PlaneInfo describes a compared data plane in the results.
type PlaneInfo struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Scope       string `json:"scope"`
	// Skipped is the reason the data plane did not run here, if it did not.
	Skipped string `json:"skipped,omitempty"`
}

// Result is a whole lab run.
type Result struct {
	Scenario    *Scenario   `json:"scenario"`
	Command     string      `json:"command"`
	Started     time.Time   `json:"started"`
	WallSeconds float64     `json:"wall_s"`
	Host        HostInfo    `json:"host"`
	Planes      []PlaneInfo `json:"dataplanes"`
	Samples     []Sample    `json:"samples"`
	// Interrupted is set when the run was cancelled before it finished.
	Interrupted bool   `json:"interrupted,omitempty"`
	OutDir      string `json:"-"`
}

// HostInfo records where the run happened.
type HostInfo struct {
	Kernel string `json:"kernel"`
	CPU    string `json:"cpu"`
	CPUs   int    `json:"cpus"`
}

// test is one measurement under one load step in one placement.
type test struct {
	m         MeasurementSpec
	load      LoadSpec
	placement string
	// proxy is a bookinfo test's proxy placement.
	proxy string
}

// Run runs scenario s: for each repetition, each data plane in turn builds
// its topology from scratch, runs every applicable measurement under every
// load step, and is torn down. It returns the results gathered so far also
// when ctx is cancelled (with ctx's error); everything created is removed
// in every case.
func Run(ctx context.Context, s *Scenario, opts Options) (*Result, error) {
	// The overrides apply to a copy; the caller's scenario is left alone.
	sc := *s
	sc.Measurements = append([]MeasurementSpec(nil), s.Measurements...)
	s = &sc
	if opts.Reps > 0 {
		s.Reps = opts.Reps
	}
	if opts.Duration > 0 {
		for i := range s.Measurements {
			s.Measurements[i].Duration = Duration(opts.Duration)
		}
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if err := CheckHost(s); err != nil {
		return nil, err
	}
	if opts.Prefix == "" {
		opts.Prefix = fmt.Sprintf("nl%d", os.Getpid())
	}
	if left := ListNamespaces(opts.Prefix); len(left) > 0 {
		return nil, fmt.Errorf("namespaces %v exist already; another run with prefix %s is active or was killed (delete them with ip netns del)", left, opts.Prefix)
	}
	res := &Result{Scenario: s, Started: time.Now(), Host: hostInfo(), Command: strings.Join(os.Args, " ")}
	if !opts.NoFiles {
		if opts.OutDir == "" {
			opts.OutDir = filepath.Join("lab-results", s.Name+"-"+res.Started.Format("20060102-150405"))
		}
		if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
			return nil, err
		}
		res.OutDir = opts.OutDir
	}
	var cmdLog io.Writer = io.Discard
	if res.OutDir != "" {
		f, err := os.Create(filepath.Join(res.OutDir, "commands.log"))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		cmdLog = f
	}
	sh := NewShell(cmdLog)
	if s.BPFStats {
		st, err := enableBPFStats()
		if err != nil {
			return nil, fmt.Errorf("bpfStats: the kernel's BPF run-time statistics: %w", err)
		}
		bpfStatsOn.Store(true)
		defer func() { bpfStatsOn.Store(false); st.Close() }()
	}
	tmp, err := os.MkdirTemp("", "nagare-lab-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	type plane struct {
		name  string
		dp    DataPlane
		tests []test
	}
	var planes []plane
	total := 0
	for _, name := range s.PlaneNames() {
		dp, err := NewDataPlane(name)
		if err != nil {
			return nil, err
		}
		info := PlaneInfo{Name: name, Description: dp.Description(), Scope: dp.Scope().String()}
		tests, notYet := serviceTests(s, dp, applicableTests(s, dp.Scope()))
		res.Samples = append(res.Samples, notYet...)
		// A plane without uplink ports is skipped for that, whether it
		// could run here or not.
		if s.HasUplinks() {
			err = uplinkSupport(dp)
		}
		if err == nil {
			err = dp.Available()
		}
		if err != nil {
			info.Skipped = err.Error()
			for _, tc := range tests {
				res.Samples = append(res.Samples, newSample(s, name, tc, 0, StatusSkipped, err.Error()))
			}
		} else {
			planes = append(planes, plane{name, dp, tests})
			total += len(tests) * s.Reps
		}
		res.Planes = append(res.Planes, info)
	}

	progress := opts.Progress
	if progress == nil {
		progress = os.Stderr
	}
	bar := progressbar.NewOptions(total, progressbar.OptionSetWriter(progress), progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true), progressbar.OptionSetElapsedTime(true), progressbar.OptionSetWidth(24),
		progressbar.OptionSetDescription(s.Name), progressbar.OptionThrottle(100*time.Millisecond))
	var runErr error
reps:
	for rep := 1; rep <= s.Reps; rep++ {
		// Each rep starts one plane further (A B C, B C A, C A B ...): a
		// plane's place in the rep — after which plane's teardown, how
		// long into the run — is not always the same, so it does not
		// bias that plane's numbers.
		for i := range planes {
			p := planes[(i+rep-1)%len(planes)]
			if ctx.Err() != nil {
				break reps
			}
			dp, _ := NewDataPlane(p.name) // fresh state per run
			r := &planeRun{s: s, dp: dp, tests: p.tests, rep: rep, prefix: opts.Prefix, sh: sh,
				tmp: filepath.Join(tmp, fmt.Sprintf("%s-%d", strings.ReplaceAll(p.name, "+", "-"), rep)), bar: bar}
			samples, err := r.run(ctx)
			res.Samples = append(res.Samples, samples...)
			if err != nil {
				// Teardown failures leave state behind: stop, do not pile up.
				runErr = err
				break reps
			}
		}
	}
	bar.Finish()
	fmt.Fprintln(progress)
	res.WallSeconds = time.Since(res.Started).Seconds()
	if ctx.Err() != nil {
		res.Interrupted = true
		if runErr == nil {
			runErr = ctx.Err()
		}
	}
	if res.OutDir != "" {
		if err := res.WriteFiles(res.OutDir); err != nil && runErr == nil {
			runErr = err
		}
	}
	return res, runErr
}

func hostInfo() HostInfo {
	h := HostInfo{CPUs: numCPU()}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.Kernel = strings.TrimSpace(string(data))
	}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				h.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if h.CPU == "" {
		h.CPU = runtime.GOARCH
	}
	return h
}

// applicableTests lists, in report order (load step, measurement,
// placement), the tests a data plane of scope sc can carry: both the
// measured pair and the step's network-load pair must be in its scope.
func applicableTests(s *Scenario, sc Scope) []test {
	var out []test
	for _, l := range s.Loads {
		if l.Net != nil && !sc.Has(s.scope(l.Net.Client, l.Net.Server)) {
			continue
		}
		for _, m := range s.Measurements {
			if ms := s.scope(m.Client, m.Server); ms != ScopeLocal && !sc.Has(ms) {
				continue
			}
			for _, pl := range m.Placements {
				tc := test{m: m, load: l, placement: pl}
				if m.Kind == KindBookinfo {
					out = append(out, meshTests(tc)...)
					continue
				}
				out = append(out, tc)
			}
		}
	}
	return out
}

func newSample(s *Scenario, plane string, tc test, rep int, status, errText string) Sample {
	return Sample{
		DataPlane: plane, Measurement: tc.m.Name, Kind: tc.m.Kind, Client: tc.m.Client, Server: tc.m.Server,
		Scope: s.scope(tc.m.Client, tc.m.Server).String(), Placement: tc.placement, Load: tc.load.Name,
		Rep: rep, Status: status, Error: errText, Proxy: tc.proxy,
	}
}

// planeRun is one data plane in one repetition.
type planeRun struct {
	s      *Scenario
	dp     DataPlane
	tests  []test
	rep    int
	prefix string
	sh     *Shell
	tmp    string
	bar    *progressbar.ProgressBar
	topo   *Topology
	bgBusy float64
	// svc is where each measurement through a Service sends (services.go).
	svc map[string]serviceTarget
}

// backgroundWindow is how long the VM's load is sampled before each data
// plane's run, while none of the lab's processes exist.
const backgroundWindow = 500 * time.Millisecond

// backgroundBusy returns the VM's busy percentage (all CPUs) over window,
// or -1.
// A data plane run starts once the VM is quiet: busy below quietPct over
// one backgroundWindow, or after settleWindows windows (and the row then
// shows the load it ran with). The previous run's teardown (processes
// exiting, the kernel freeing maps and namespaces) must not run into the
// next data plane's measurements: with data planes interleaved, that
// would penalise whichever plane follows a heavy teardown.
const (
	quietPct      = 5
	settleWindows = 10
)

func settleBusy(ctx context.Context) float64 {
	v := backgroundBusy(ctx, backgroundWindow)
	for i := 1; i < settleWindows && v > quietPct && ctx.Err() == nil; i++ {
		v = backgroundBusy(ctx, backgroundWindow)
	}
	return v
}

// BackgroundBusyPct is how busy the machine is (percent of all CPUs) over
// the lab's half-second window, as Sample.BackgroundBusyPct records it
// before a data plane's run; -1 if it cannot be read.
func BackgroundBusyPct(ctx context.Context) float64 { return backgroundBusy(ctx, backgroundWindow) }

func backgroundBusy(ctx context.Context, window time.Duration) float64 {
	a, err := takeSnapshot(nil)
	if err != nil {
		return -1
	}
	select {
	case <-ctx.Done():
	case <-time.After(window): // the measurement window itself
	}
	b, err := takeSnapshot(nil)
	if err != nil {
		return -1
	}
	busy := float64(b.stat.Total.Busy() - a.stat.Total.Busy())
	idle := float64(b.stat.Total.Idle + b.stat.Total.IOWait - a.stat.Total.Idle - a.stat.Total.IOWait)
	if busy+idle <= 0 {
		return -1
	}
	return 100 * busy / (busy + idle)
}

// run builds the topology, measures, and tears everything down. The error
// is only for a failed teardown; measurement failures are in the samples.
func (r *planeRun) run(ctx context.Context) (samples []Sample, teardownErr error) {
	pods := map[string]bool{}
	var pairs [][2]string
	seenPair := map[[2]string]bool{}
	addPair := func(a, b string) {
		pods[a], pods[b] = true, true
		if a != b && !seenPair[[2]string{a, b}] {
			seenPair[[2]string{a, b}] = true
			pairs = append(pairs, [2]string{a, b})
		}
	}
	for _, tc := range r.tests {
		addPair(tc.m.Client, tc.m.Server)
		for _, c := range tc.m.Also {
			addPair(c, tc.m.Server)
		}
		for _, f := range tc.m.With {
			addPair(f.Client, f.Server)
		}
		if n := tc.load.Net; n != nil {
			addPair(n.Client, n.Server)
		}
		if a := tc.load.Attack; a != nil {
			addPair(a.From, a.To)
		}
		if b := tc.m.Bookinfo; b != nil {
			for _, p := range b.pairs(tc.m.Client, tc.m.Server) {
				addPair(p[0], p[1])
			}
		}
	}
	c := &Cleanup{}
	t := newTopology(r.s, r.prefix, pods, r.sh, c)
	for _, p := range pairs {
		t.Pairs = append(t.Pairs, [2]*Pod{t.Pod(p[0]), t.Pod(p[1])})
	}
	t.TempDir = r.tmp
	r.topo = t
	c.Add("remove "+r.tmp, func() error { return os.RemoveAll(r.tmp) })
	if err := os.MkdirAll(r.tmp, 0o755); err != nil {
		return r.failAll(err), nil
	}
	defer func() {
		tctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		var errs []error
		if err := r.dp.Teardown(tctx, t); err != nil {
			errs = append(errs, err)
		}
		r.sh.logf("# teardown of %s", r.dp.Name())
		if err := c.RunAll(); err != nil {
			errs = append(errs, err)
		}
		if len(errs) > 0 {
			teardownErr = fmt.Errorf("teardown of %s (rep %d): %w", r.dp.Name(), r.rep, errors.Join(errs...))
		}
	}()

	r.bar.Describe(fmt.Sprintf("rep %d/%d %-18s setup", r.rep, r.s.Reps, r.dp.Name()))
	r.sh.logf("# ==== rep %d/%d: data plane %s ====", r.rep, r.s.Reps, r.dp.Name())
	r.bgBusy = settleBusy(ctx)
	if err := t.build(ctx); err != nil {
		return r.failAll(fmt.Errorf("building namespaces: %w", err)), nil
	}
	if testHookBuilt != nil {
		testHookBuilt(t)
	}
	for _, tc := range r.tests {
		t.Services = t.Services || tc.m.throughService()
		if b := tc.m.Bookinfo; b != nil && t.ClusterServices == nil {
			t.ClusterServices = meshServices(b, tc.m.Server)
		}
	}
	pp, enforcing := r.dp.(policyPlane)
	if enforcing {
		t.NetworkPolicies = labNetworkPolicies(r.measuredAllows(), r.s.Policies, pp.OtherPolicies())
	}
	if err := r.dp.Setup(ctx, t); err != nil {
		return r.failAll(fmt.Errorf("%s setup: %w", r.dp.Name(), err)), nil
	}
	if err := t.setupTesters(ctx); err != nil {
		return r.failAll(fmt.Errorf("tester namespaces: %w", err)), nil
	}
	if len(r.s.Flows) > 0 {
		fp, ok := r.dp.(FlowTablePlane)
		if !ok {
			return r.failAll(fmt.Errorf("%s cannot take the scenario's OpenFlow table", r.dp.Name())), nil
		}
		if err := fp.ReplaceFlows(ctx, t, r.s.Flows); err != nil {
			return r.failAll(fmt.Errorf("installing the scenario's flows: %w", err)), nil
		}
	}
	for _, p := range t.Pairs {
		a, b := p[0], p[1]
		if enforcing {
			a, b = b, a // policies let no ICMP in; the reply is established
		}
		if err := r.waitConnected(ctx, a, b); err != nil {
			return r.failAll(err), nil
		}
	}
	if r.s.usesPolicyPlanes() {
		if err := r.checkPolicy(ctx, enforcing); err != nil {
			return r.failAll(err), nil
		}
	}
	if t.Services {
		if err := r.setupServices(ctx); err != nil {
			return r.failAll(fmt.Errorf("Services: %w", err)), nil
		}
	}

	// Group the tests by load step (they are in load-step order).
	for i := 0; i < len(r.tests); {
		j := i
		for j < len(r.tests) && r.tests[j].load.Name == r.tests[i].load.Name {
			j++
		}
		samples = append(samples, r.runLoadStep(ctx, r.tests[i:j])...)
		i = j
	}
	return samples, nil
}

func (r *planeRun) failAll(err error) []Sample {
	var out []Sample
	for _, tc := range r.tests {
		out = append(out, r.sample(tc, StatusFailed, err.Error()))
		r.bar.Add(1)
	}
	return out
}

// sample starts a Sample of this run.
func (r *planeRun) sample(tc test, status, errText string) Sample {
	s := newSample(r.s, r.dp.Name(), tc, r.rep, status, errText)
	s.BackgroundBusyPct = r.bgBusy
	return s
}

// waitConnected pings b from a until it answers (switches may need a moment
// to bring ports up), for at most 10 seconds.
func (r *planeRun) waitConnected(ctx context.Context, a, b *Pod) error {
	var lastErr error
	for try := 0; try < 10; try++ {
		// ping -W1 waits up to one second for the reply: the loop paces itself.
		_, lastErr = r.sh.NS(ctx, a.NS, "ping", "-c1", "-W1", "-q", b.IP)
		if lastErr == nil || ctx.Err() != nil {
			return lastErr
		}
	}
	return fmt.Errorf("no connectivity from %s to %s (%s): %w", a.Name, b.Name, b.IP, lastErr)
}

// runLoadStep starts one load step's background load, runs its tests and
// stops the load.
func (r *planeRun) runLoadStep(ctx context.Context, tests []test) []Sample {
	step := &Cleanup{}
	defer step.RunAll()
	undo := r.topo.Cleanup.Add("stop load "+tests[0].load.Name, step.RunAll)
	defer undo.Run()

	var budget time.Duration
	for _, tc := range tests {
		budget += time.Duration(tc.m.Duration) + 10*time.Second
	}
	r.sh.logf("# ---- load step %s ----", tests[0].load.Name)
	iso := r.sampleIsolation(ctx, tests, nil, nil)
	if err := r.startLoad(ctx, tests[0].load, step, budget+60*time.Second); err != nil {
		var out []Sample
		for _, tc := range tests {
			out = append(out, r.sample(tc, StatusFailed, "starting load: "+err.Error()))
			r.bar.Add(1)
		}
		return out
	}

	var out []Sample
	// Tests of one measurement share its server.
	for i := 0; i < len(tests); {
		j := i
		for j < len(tests) && tests[j].m.Name == tests[i].m.Name {
			j++
		}
		out = append(out, r.runMeasurement(ctx, tests[i:j])...)
		i = j
	}
	if iso != nil {
		r.sampleIsolation(ctx, tests, out, iso)
	}
	return out
}
