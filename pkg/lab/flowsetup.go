package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nagare-net/nagare/pkg/lab/pktgen"
)

// Flow-setup measurement kinds: the slow path of a caching switch.
const (
	// KindFlowSetup pushes Flows never-seen 5-tuples (one packet each) from
	// client to server at Rate packets/s (0 = flat out) and follows the
	// switch's installed flows over time: miss → translate → install rate,
	// first packets delivered, switch CPU per flow.
	KindFlowSetup = "flow-setup"
	// KindRevalidation fills the switch with Flows flows and times full
	// revalidation rounds, steady and right after an OpenFlow table change.
	KindRevalidation = "revalidation"
)

// FlowSetupPlane is implemented by data planes with a flow cache filled on
// misses (Open vSwitch's datapath, nagare's fast path). Measurements of the
// flow-setup kinds on other data planes are reported as skipped.
//
// The runner calls PrepareFlowSetup first, then FlushFlows, and then the
// other methods; a topology may see several flow-setup measurements, each
// starting with PrepareFlowSetup and FlushFlows again.
type FlowSetupPlane interface {
	DataPlane
	// PrepareFlowSetup programs the pipeline so that every new UDP 5-tuple
	// from client to server (and back) is a miss that installs its own
	// exact datapath flow, and lifts whatever would evict or refuse up to
	// maxFlows installed flows (flow limits, idle timeouts) for the rest
	// of the run. ARP and ICMP between the pods must keep working.
	PrepareFlowSetup(ctx context.Context, t *Topology, client, server *Pod, maxFlows int) error
	// InstalledFlows returns how many flows the datapath holds now. It is
	// sampled every FlowSampleInterval while packets are sent, so it must
	// be cheap (a counter, not a dump).
	InstalledFlows(ctx context.Context) (int, error)
	// FlushFlows removes every installed flow (and any state that would
	// make a re-sent 5-tuple anything but a miss).
	FlushFlows(ctx context.Context) error
	// RevalidationRound times one complete revalidation round over the
	// installed flows, one that starts after the call. With tableChange
	// it first makes an OpenFlow table change that matches none of the
	// measured packets, so that the round re-translates every flow.
	RevalidationRound(ctx context.Context, tableChange bool) (RevalidationRound, error)
}

// RevalidationRound is one timed revalidation round.
type RevalidationRound struct {
	// Flows is the number of flows the round covered.
	Flows int `json:"flows"`
	// Duration is the round's length.
	Duration time.Duration `json:"duration_ns"`
}

// FlowSampleInterval is how often the installed flows are sampled.
const FlowSampleInterval = 100 * time.Millisecond

// PktgenCommand returns the command that runs the packet generator
// (pktgen.Main); the lab runs it inside pod namespaces as
// `ip netns exec POD <cmd> send|recv ...`. By default it is this very
// executable, nagarectl, as `nagarectl lab pktgen`.
var PktgenCommand = func() ([]string, error) {
	exe, err := os.Executable()
	return []string{exe, "lab", "pktgen"}, err
}

// FlowPoint is one sample of the installed flows.
type FlowPoint struct {
	// T is seconds since the sender started.
	T float64 `json:"t"`
	// Flows is the datapath's flow count minus the count before sending.
	Flows int `json:"flows"`
}

// FlowSetupResult is one flow-setup measurement.
type FlowSetupResult struct {
	Flows int `json:"flows"`
	// TargetPPS is the configured rate (0 = flat out), OfferedPPS what the
	// generator achieved; TxDropped frames never left the client's veth.
	TargetPPS  float64 `json:"target_pps"`
	OfferedPPS float64 `json:"offered_pps"`
	Sent       int     `json:"sent"`
	TxDropped  uint64  `json:"tx_dropped"`
	// SenderStalls counts times the generator fell behind its schedule
	// (descheduled) and restarted it rather than send a burst.
	SenderStalls int `json:"sender_stalls"`
	// Delivered is the number of distinct flows whose packet reached the
	// server; ReceiverDrops counts packets the server's own sockets
	// dropped (should be 0: then every loss is the switch's).
	Delivered     int     `json:"delivered"`
	DeliveredPct  float64 `json:"delivered_pct"`
	ReceiverDrops uint64  `json:"receiver_drops"`
	// Installed is the most new flows seen installed; InstalledPct of Flows.
	Installed    int     `json:"installed"`
	InstalledPct float64 `json:"installed_pct"`
	// PeakPerSec is the highest install rate over any FlowSampleInterval.
	PeakPerSec float64 `json:"peak_flows_per_s"`
	// T90 is the time from the first packet sent until 90 % of Flows were
	// installed (0: never); Rate90 = 0.9 · Flows / T90.
	T90    float64 `json:"t90_s"`
	Rate90 float64 `json:"rate90_flows_per_s"`
	// SwitchUsPerFlow is switch CPU time per installed flow (µs).
	SwitchUsPerFlow float64     `json:"switch_us_per_flow"`
	Series          []FlowPoint `json:"series"`
}

// RevalidationResult is one revalidation measurement: median round times.
type RevalidationResult struct {
	// Flows is the number of flows installed for the rounds.
	Flows        int                 `json:"flows"`
	SteadyMs     float64             `json:"steady_ms"`
	ChangeMs     float64             `json:"change_ms"`
	SteadyRounds []RevalidationRound `json:"steady_rounds"`
	ChangeRounds []RevalidationRound `json:"change_rounds"`
	// FillPasses is how many times the flows were sent to install them all.
	FillPasses int `json:"fill_passes"`
}

// usPerFlow returns microseconds per flow of a round time in ms.
func usPerFlow(ms float64, flows int) float64 {
	if flows <= 0 {
		return math.NaN()
	}
	return ms * 1000 / float64(flows)
}

// computeMetrics fills the install-rate and percentage fields of r from
// its Series, Flows and Delivered.
func (r *FlowSetupResult) computeMetrics() {
	r.Installed, r.PeakPerSec, r.T90, r.Rate90 = 0, 0, 0, 0
	s := r.Series
	for _, p := range s {
		r.Installed = max(r.Installed, p.Flows)
	}
	if r.Flows > 0 {
		r.InstalledPct = 100 * float64(r.Installed) / float64(r.Flows)
		r.DeliveredPct = 100 * float64(r.Delivered) / float64(r.Flows)
	}
	// Peak: the steepest rise between a sample and the first one at least
	// an interval later (samples are not exactly periodic).
	minDT := FlowSampleInterval.Seconds() * 0.9
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if dt := s[j].T - s[i].T; dt >= minDT {
				r.PeakPerSec = max(r.PeakPerSec, float64(s[j].Flows-s[i].Flows)/dt)
				break
			}
		}
	}
	target := 0.9 * float64(r.Flows)
	for i, p := range s {
		if float64(p.Flows) < target || p.T <= 0 {
			continue
		}
		// Interpolate between the samples around the crossing.
		t := p.T
		if i > 0 && s[i-1].Flows < p.Flows && float64(s[i-1].Flows) < target {
			q := s[i-1]
			t = q.T + (target-float64(q.Flows))/float64(p.Flows-q.Flows)*(p.T-q.T)
		}
		r.T90 = max(t, 1e-6)
		r.Rate90 = target / r.T90
		break
	}
}

// flowSampler polls InstalledFlows until stopped.
type flowSampler struct {
	mu     sync.Mutex
	points []flowStamp
	err    error
	stop   chan struct{}
	done   chan struct{}
}

type flowStamp struct {
	at    time.Time
	flows int
}

func startFlowSampler(ctx context.Context, fp FlowSetupPlane) *flowSampler {
	s := &flowSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(FlowSampleInterval)
		defer tick.Stop()
		for {
			t0 := time.Now()
			n, err := fp.InstalledFlows(ctx)
			t1 := time.Now()
			s.mu.Lock()
			if err != nil {
				if s.err == nil {
					s.err = err
				}
			} else {
				// The count is from somewhere inside the call: take the middle.
				s.points = append(s.points, flowStamp{t0.Add(t1.Sub(t0) / 2), n})
			}
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// finish stops the sampler and returns its samples.
func (s *flowSampler) finish() ([]flowStamp, error) {
	close(s.stop)
	<-s.done
	return s.points, s.err
}

// series turns samples into flows above baseline over seconds since start.
func series(stamps []flowStamp, start time.Time, baseline int) []FlowPoint {
	out := make([]FlowPoint, 0, len(stamps))
	for _, p := range stamps {
		out = append(out, FlowPoint{T: p.at.Sub(start).Seconds(), Flows: p.flows - baseline})
	}
	return out
}

// runFlowSetup runs the tests of one flow-setup or revalidation measurement.
func (r *planeRun) runFlowSetup(ctx context.Context, tests []test) []Sample {
	var out []Sample
	for _, tc := range tests {
		r.bar.Describe(fmt.Sprintf("rep %d/%d %-18s %s %s %s", r.rep, r.s.Reps, r.dp.Name(), tc.m.Name, tc.placement, tc.load.Name))
		fp, ok := r.dp.(FlowSetupPlane)
		var s Sample
		var err error
		switch {
		case !ok:
			s = r.sample(tc, StatusSkipped, r.dp.Name()+" does not implement FlowSetupPlane")
		case ctx.Err() != nil:
			err = ctx.Err()
		case tc.m.Kind == KindRevalidation:
			s, err = r.revalidationTest(ctx, tc, fp)
		default:
			s, err = r.flowSetupTest(ctx, tc, fp)
		}
		if err != nil {
			s = r.sample(tc, StatusFailed, err.Error())
		}
		out = append(out, s)
		r.bar.Add(1)
	}
	return out
}

// flowSetupCPUs returns the client and server CPUs of a placement and pins
// the switch for same-core (restore undoes it).
func (r *planeRun) flowSetupCPUs(tc test) (client, server string, restore func(), err error) {
	c, sv := r.s.CPUs.Client, r.s.CPUs.Server
	var undo []func()
	restore = func() {
		for _, u := range undo {
			u()
		}
	}
	if tc.placement == SameCore {
		c = sv
		for _, pid := range r.dp.Processes() {
			r.sh.logf("# same-core: pin every thread of switch pid %d to CPU %d, restored after", pid, sv)
			u, err := pinThreads(pid, []int{sv})
			if err != nil {
				restore()
				return "", "", nil, fmt.Errorf("pinning switch process %d: %w", pid, err)
			}
			undo = append(undo, u)
		}
	}
	return strconv.Itoa(c), strconv.Itoa(sv), restore, nil
}

func (r *planeRun) prepareFlows(ctx context.Context, tc test, fp FlowSetupPlane) (baseline int, err error) {
	t := r.topo
	if err := fp.PrepareFlowSetup(ctx, t, t.Pod(tc.m.Client), t.Pod(tc.m.Server), tc.m.Flows); err != nil {
		return 0, fmt.Errorf("prepare flow setup: %w", err)
	}
	if err := fp.FlushFlows(ctx); err != nil {
		return 0, fmt.Errorf("flush flows: %w", err)
	}
	return fp.InstalledFlows(ctx)
}

func (r *planeRun) senderArgs(tc test, cpu string, rate float64, out string) ([]string, error) {
	gen, err := PktgenCommand()
	if err != nil {
		return nil, err
	}
	t := r.topo
	client, server := t.Pod(tc.m.Client), t.Pod(tc.m.Server)
	args := append([]string{"ip", "netns", "exec", client.NS, "taskset", "-c", cpu}, gen...)
	return append(args, "send", "--flows", strconv.Itoa(tc.m.Flows), "--rate", strconv.FormatFloat(rate, 'f', -1, 64),
		"--frame-len", strconv.Itoa(tc.m.Size), "--dst-mac", server.MAC, "--src-ip", client.IP, "--dst-ip", server.IP, "--out", out), nil
}

// sendBudget bounds one sender run: the time the flows take at the rate
// (flat out: a million flows per second is far above any generator here),
// plus slack.
func sendBudget(flows int, rate float64) time.Duration {
	if rate <= 0 {
		rate = 1e6
	}
	return time.Duration(float64(flows)/rate*float64(time.Second)) + 30*time.Second
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

func (r *planeRun) reportPath(tc test, what string) string {
	return filepath.Join(r.tmp, fmt.Sprintf("%s-%s-%s-%s.json", what, tc.m.Name, tc.placement, tc.load.Name))
}

// flowSetupTest: receiver up, sampler on, flows sent, wait until nothing
// arrives any more, then the numbers.
func (r *planeRun) flowSetupTest(ctx context.Context, tc test, fp FlowSetupPlane) (Sample, error) {
	m := tc.m
	t := r.topo
	smp := r.sample(tc, StatusOK, "")
	baseline, err := r.prepareFlows(ctx, tc, fp)
	if err != nil {
		return smp, err
	}
	cliCPU, srvCPU, restore, err := r.flowSetupCPUs(tc)
	if err != nil {
		return smp, err
	}
	defer restore()
	gen, err := PktgenCommand()
	if err != nil {
		return smp, err
	}
	budget := sendBudget(m.Flows, float64(m.Rate))
	recvPath, sendPath := r.reportPath(tc, "recv"), r.reportPath(tc, "send")
	args := append([]string{"ip", "netns", "exec", t.Pod(m.Server).NS, "taskset", "-c", srvCPU}, gen...)
	args = append(args, "recv", "--flows", strconv.Itoa(m.Flows), "--idle", "1s",
		"--timeout", (budget + time.Duration(m.Duration)).String(), "--out", recvPath)
	recv, err := r.sh.Start(t.Cleanup, pktgen.ReadyMarker, args...)
	if err != nil {
		return smp, err
	}
	defer recv.Stop()
	if err := recv.WaitReady(ctx, 10*time.Second); err != nil {
		return smp, fmt.Errorf("receiver: %w", err)
	}
	send, err := r.senderArgs(tc, cliCPU, float64(m.Rate), sendPath)
	if err != nil {
		return smp, err
	}
	pids := r.dp.Processes()
	smp.SwitchProcs = len(pids)
	before, err := takeSnapshot(pids)
	if err != nil {
		return smp, err
	}
	smp.Start = time.Now()
	sampler := startFlowSampler(ctx, fp)
	sctx, cancel := context.WithTimeout(ctx, budget)
	_, sendErr := r.sh.Run(sctx, send...)
	cancel()
	var recvErr error
	if sendErr == nil {
		// The receiver ends one idle second after the last packet.
		wctx, cancel := context.WithTimeout(ctx, budget+time.Duration(m.Duration)+10*time.Second)
		recvErr = recv.Wait(wctx)
		cancel()
	}
	// One more sample after the traffic has ended.
	select {
	case <-time.After(2 * FlowSampleInterval):
	case <-ctx.Done():
	}
	stamps, sampleErr := sampler.finish()
	window := time.Since(smp.Start).Seconds()
	after, snapErr := takeSnapshot(pids)
	switch {
	case sendErr != nil:
		return smp, fmt.Errorf("sender: %w", sendErr)
	case recvErr != nil:
		return smp, fmt.Errorf("receiver: %w: %s", recvErr, lastLines(recv.Output(), 3))
	case sampleErr != nil:
		return smp, fmt.Errorf("installed flows: %w", sampleErr)
	case snapErr != nil:
		return smp, snapErr
	}
	usage := usageBetween(before, after, window)
	smp.CPU = &usage
	var sr pktgen.SendReport
	var rr pktgen.RecvReport
	if err := readJSON(sendPath, &sr); err != nil {
		return smp, fmt.Errorf("sender report: %w", err)
	}
	if err := readJSON(recvPath, &rr); err != nil {
		return smp, fmt.Errorf("receiver report: %w", err)
	}
	res := &FlowSetupResult{Flows: m.Flows, TargetPPS: float64(m.Rate), OfferedPPS: sr.OfferedPPS, Sent: sr.Sent, TxDropped: sr.TxDropped, SenderStalls: sr.Stalls,
		Delivered: rr.Distinct, ReceiverDrops: rr.RcvbufErrors,
		Series: series(stamps, time.Unix(0, sr.StartNs), baseline)}
	res.computeMetrics()
	if res.Installed > 0 && len(pids) > 0 {
		res.SwitchUsPerFlow = usage.SwitchCPUSeconds * 1e6 / float64(res.Installed)
	}
	smp.FlowSetup = res
	return smp, nil
}

// revalidationFillRate is the rate at which revalidation measurements fill
// the switch unless the measurement gives one: low enough that Open
// vSwitch installs nearly every flow on the first pass.
const revalidationFillRate = 50_000

// revalidationRounds is how many rounds of each sort are timed.
const revalidationRounds = 3

// revalidationTest installs the flows (re-sending the flow set until 99 %
// are in, at most 8 times, and only while a pass still adds 0.5 %), then
// times steady rounds and rounds after a table change.
func (r *planeRun) revalidationTest(ctx context.Context, tc test, fp FlowSetupPlane) (Sample, error) {
	m := tc.m
	smp := r.sample(tc, StatusOK, "")
	baseline, err := r.prepareFlows(ctx, tc, fp)
	if err != nil {
		return smp, err
	}
	cliCPU, _, restore, err := r.flowSetupCPUs(tc)
	if err != nil {
		return smp, err
	}
	defer restore()
	rate := float64(m.Rate)
	if rate == 0 {
		rate = revalidationFillRate
	}
	smp.Start = time.Now()
	res := &RevalidationResult{}
	installed := 0
	for pass, gained := 1, m.Flows; pass <= 8 && float64(installed) < 0.99*float64(m.Flows) && gained > m.Flows/200; pass++ {
		send, err := r.senderArgs(tc, cliCPU, rate, r.reportPath(tc, fmt.Sprintf("fill%d", pass)))
		if err != nil {
			return smp, err
		}
		sctx, cancel := context.WithTimeout(ctx, sendBudget(m.Flows, rate))
		_, err = r.sh.Run(sctx, send...)
		cancel()
		if err != nil {
			return smp, fmt.Errorf("fill pass %d: %w", pass, err)
		}
		res.FillPasses = pass
		// Let the last upcalls land: wait until two samples agree.
		prev := -1
		for try := 0; try < 50; try++ {
			n, err := fp.InstalledFlows(ctx)
			if err != nil {
				return smp, err
			}
			if n == prev {
				break
			}
			prev = n
			select {
			case <-time.After(FlowSampleInterval):
			case <-ctx.Done():
				return smp, ctx.Err()
			}
		}
		gained = prev - baseline - installed
		installed = prev - baseline
		r.sh.logf("# fill pass %d: %d of %d flows installed", pass, installed, m.Flows)
	}
	res.Flows = installed
	for _, change := range []bool{false, true} {
		var ms []float64
		for i := 0; i < revalidationRounds; i++ {
			rd, err := fp.RevalidationRound(ctx, change)
			if err != nil {
				return smp, fmt.Errorf("revalidation round: %w", err)
			}
			ms = append(ms, float64(rd.Duration)/float64(time.Millisecond))
			if change {
				res.ChangeRounds = append(res.ChangeRounds, rd)
			} else {
				res.SteadyRounds = append(res.SteadyRounds, rd)
			}
		}
		if change {
			res.ChangeMs = Median(ms)
		} else {
			res.SteadyMs = Median(ms)
		}
	}
	smp.Revalidation = res
	return smp, nil
}

// validateFlowSetup checks the fields of the flow-setup kinds.
func validateFlowSetup(m MeasurementSpec, where string, bad func(string, ...any)) {
	if m.Client == m.Server {
		bad("%s: %s needs two pods (client and server are both %q)", where, m.Kind, m.Client)
	}
	if m.Flows < 1 || m.Flows > 4_000_000 {
		bad("%s: flows %d, want 1-4000000", where, m.Flows)
	}
	if m.Rate < 0 {
		bad("%s: rate %d, want packets/s or 0 for flat out", where, m.Rate)
	}
	if m.Size < pktgen.MinFrameLen || m.Size > pktgen.MaxFrameLen {
		bad("%s: size %d (the frame length), want %d-%d", where, m.Size, pktgen.MinFrameLen, pktgen.MaxFrameLen)
	}
}

// isFlowSetupKind reports whether kind is run by runFlowSetup.
func isFlowSetupKind(kind string) bool { return kind == KindFlowSetup || kind == KindRevalidation }

// rateLabel writes a packet rate for titles: "50 kpps" or "flat out".
func rateLabel(pps int) string {
	if pps == 0 {
		return "flat out"
	}
	if pps%1000 == 0 {
		return fmt.Sprintf("%d kpps", pps/1000)
	}
	return fmt.Sprintf("%d pps", pps)
}

// flowCount writes 100000 as 100k.
func flowCount(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return strconv.Itoa(n)
}
