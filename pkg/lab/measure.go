package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// Ports: each measurement (by index) gets its own server port, background
// network load uses loadPort.
const (
	sockperfBasePort = 11111
	iperfBasePort    = 5201
	loadPort         = 5301
	// extraBasePort + 16*index + k is the server of a measurement's k-th
	// extra client (MeasurementSpec.Also or With, at most maxWith).
	extraBasePort = 5401
)

// extraFlow is one more client of a measurement (Also: to the same
// server pod; With: to its own), its iperf3 server started.
type extraFlow struct {
	spec     FlowSpec
	client   *Pod
	ip, port string
}

func (r *planeRun) measurementIndex(name string) int {
	for i, m := range r.s.Measurements {
		if m.Name == name {
			return i
		}
	}
	return 0
}

// runMeasurement starts the server of one measurement, pinned to the server
// CPU, then runs its client once per placement.
func (r *planeRun) runMeasurement(ctx context.Context, tests []test) []Sample {
	m := tests[0].m
	if isFlowSetupKind(m.Kind) {
		return r.runFlowSetup(ctx, tests) // no server process: flowsetup.go
	}
	if m.Kind == KindBookinfo {
		return r.runMesh(ctx, tests) // the application serves: mesh.go
	}
	if m.Kind == KindServiceScale {
		return r.runServiceScale(ctx, tests) // the probe listener serves: services.go
	}
	t := r.topo
	client, server := t.Pod(m.Client), t.Pod(m.Server)
	ip := server.IP
	if client == server {
		ip = "127.0.0.1"
	}
	target := ip // where the client sends: the server, or its Service
	if st, ok := r.svc[m.Name]; ok {
		target = st.host
	}
	idx := r.measurementIndex(m.Name)
	srvCPU := strconv.Itoa(r.s.CPUs.Server)
	var srvArgs []string
	var ready, port string
	switch m.Kind {
	case KindRTT:
		port = strconv.Itoa(sockperfBasePort + idx)
		srvArgs = []string{"sockperf", "server", "-i", ip, "-p", port}
		ready = "to block on socket"
	default:
		port = strconv.Itoa(iperfBasePort + idx)
		srvArgs = []string{"iperf3", "-s", "-B", ip, "-p", port, "--forceflush"}
		ready = "Server listening"
	}
	out := make([]Sample, 0, len(tests))
	fail := func(tc test, err error) {
		out = append(out, r.sample(tc, StatusFailed, err.Error()))
		r.bar.Add(1)
	}
	var srv *Proc
	var err error
	if m.Kind == KindConnRate {
		port = strconv.Itoa(httpPort)
		srv, err = r.startNginx(ctx, server, srvCPU)
	} else {
		args := append([]string{"ip", "netns", "exec", server.NS, "taskset", "-c", srvCPU}, srvArgs...)
		srv, err = r.sh.Start(t.Cleanup, ready, args...)
		if err == nil {
			err = srv.WaitReady(ctx, 10*time.Second)
		}
	}
	if err != nil {
		for _, tc := range tests {
			fail(tc, fmt.Errorf("server: %w", err))
		}
		return out
	}
	defer srv.Stop()
	var extra []extraFlow
	flows := m.With
	for _, c := range m.Also {
		flows = append(flows, FlowSpec{Client: c, Server: m.Server})
	}
	for k, f := range flows {
		sv := t.Pod(f.Server)
		ef := extraFlow{spec: f, client: t.Pod(f.Client), ip: sv.IP, port: strconv.Itoa(extraBasePort + 16*idx + k)}
		args := []string{"ip", "netns", "exec", sv.NS, "taskset", "-c", srvCPU, "iperf3", "-s", "-B", ef.ip, "-p", ef.port, "--forceflush"}
		es, err := r.sh.Start(t.Cleanup, ready, args...)
		if err == nil {
			err = es.WaitReady(ctx, 10*time.Second)
		}
		if err != nil {
			for _, tc := range tests {
				fail(tc, fmt.Errorf("server of %s → %s: %w", f.Client, f.Server, err))
			}
			return out
		}
		defer es.Stop()
		extra = append(extra, ef)
	}

	for _, tc := range tests {
		if ctx.Err() != nil {
			fail(tc, ctx.Err())
			continue
		}
		r.bar.Describe(fmt.Sprintf("rep %d/%d %-18s %s %s %s", r.rep, r.s.Reps, r.dp.Name(), m.Name, tc.placement, tc.load.Name))
		cport := port
		if st, ok := r.svc[m.Name]; ok {
			cport = st.port // a NodePort's differs from the server's
		}
		s, err := r.runClient(ctx, tc, client, target, cport, extra)
		if err != nil {
			fail(tc, err)
			continue
		}
		out = append(out, s)
		r.bar.Add(1)
	}
	return out
}

// runClient runs one client in one placement (with the clients of the
// extra flows, all at once) and samples host CPU, softirqs and interrupts
// around it.
func (r *planeRun) runClient(ctx context.Context, tc test, client *Pod, ip, port string, extra []extraFlow) (Sample, error) {
	m := tc.m
	cpu := r.s.CPUs.Client
	pids := r.dp.Processes()
	if tc.placement == SameCore {
		cpu = r.s.CPUs.Server
		for _, pid := range pids {
			r.sh.logf("# same-core: pin every thread of switch pid %d to CPU %d (taskset -a -p -c %d %d), restored after", pid, r.s.CPUs.Server, r.s.CPUs.Server, pid)
			restore, err := pinThreads(pid, []int{r.s.CPUs.Server})
			if err != nil {
				return Sample{}, fmt.Errorf("pinning switch process %d: %w", pid, err)
			}
			defer restore()
		}
	}
	secs := strconv.FormatFloat(m.Duration.Seconds(), 'f', -1, 64)
	// iperf3 of a tcp or udp-pps client, also the extra clients'.
	iperfArgs := func(ip, port string) []string {
		a := []string{"iperf3", "-c", ip, "-p", port, "-t", secs, "-J"}
		if m.Kind == KindUDPPPS {
			a = append(a, "-u", "-b", "0", "-l", strconv.Itoa(m.Size))
		}
		if m.Reverse {
			a = append(a, "-R")
		}
		if m.Streams > 1 {
			a = append(a, "-P", strconv.Itoa(m.Streams))
		}
		return a
	}
	args := []string{"ip", "netns", "exec", client.NS, "taskset", "-c", strconv.Itoa(cpu)}
	var fullLog string // sockperf's round trips, for the quiet p50
	switch m.Kind {
	case KindRTT:
		dir, err := os.MkdirTemp("", "nagare-lab-sockperf-")
		if err != nil {
			return Sample{}, err
		}
		defer os.RemoveAll(dir)
		fullLog = filepath.Join(dir, "full-log.csv")
		args = append(args, "sockperf", "ping-pong", "-i", ip, "-p", port, "-m", strconv.Itoa(m.Size), "-t", secs, "--full-log", fullLog)
	case KindTCP, KindUDPPPS:
		args = append(args, iperfArgs(ip, port)...)
	case KindConnRate:
		conns := m.Conns
		if conns == 0 {
			conns = defaultConns
		}
		// One request per connection: the client asks the server to close.
		args = append(args, "wrk", "-t1", "-c"+strconv.Itoa(conns), "-d"+secs+"s", "--latency",
			"-H", "Connection: close", "http://"+net.JoinHostPort(ip, port)+"/")
	}
	cctx, cancel := context.WithTimeout(ctx, time.Duration(m.Duration)+30*time.Second)
	defer cancel()
	type flowOut struct {
		out string
		err error
	}
	extraOut := make([]flowOut, len(extra))
	var wg sync.WaitGroup

	smp := r.sample(tc, StatusOK, "")
	smp.SwitchProcs = len(pids)
	dpuPids := dpuProcesses(r.dp)
	smp.DPUProcs = len(dpuPids)
	// Uplink counters are read outside the CPU window.
	var upBefore []UplinkBytes
	var err error
	if len(r.topo.Uplinks()) > 0 {
		if upBefore, err = r.topo.uplinkCounters(ctx); err != nil {
			return smp, err
		}
	}
	smp.Start = time.Now()
	before, err := takeSnapshot(pids, dpuPids...)
	if err != nil {
		return smp, err
	}
	for k, ef := range extra {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := append([]string{"ip", "netns", "exec", ef.client.NS, "taskset", "-c", strconv.Itoa(cpu)}, iperfArgs(ef.ip, ef.port)...)
			extraOut[k].out, extraOut[k].err = r.sh.Run(cctx, a...)
		}()
	}
	output, err := r.sh.Run(cctx, args...)
	wg.Wait()
	if err == nil {
		for k, ef := range extra {
			if extraOut[k].err != nil {
				err = errors.Join(err, fmt.Errorf("flow %s → %s: %w", ef.spec.Client, ef.spec.Server, extraOut[k].err))
			}
		}
	}
	window := time.Since(smp.Start).Seconds()
	after, serr := takeSnapshot(pids, dpuPids...)
	if err != nil {
		return smp, err
	}
	if serr != nil {
		return smp, serr
	}
	usage := usageBetween(before, after, window)
	smp.CPU = &usage
	if upBefore != nil {
		upAfter, err := r.topo.uplinkCounters(ctx)
		if err != nil {
			return smp, err
		}
		for k, a := range upAfter {
			b := upBefore[k]
			smp.Uplinks = append(smp.Uplinks, UplinkBytes{Uplink: a.Uplink, Rx: a.Rx - b.Rx, Tx: a.Tx - b.Tx})
		}
	}
	switch m.Kind {
	case KindRTT:
		v, err := ParseSockperf(output)
		if err != nil {
			return smp, err
		}
		f, err := os.Open(fullLog)
		if err != nil {
			return smp, fmt.Errorf("sockperf full log: %w", err)
		}
		v.P50QuietUs, v.QuietSlices, err = QuietP50(f)
		f.Close()
		if err != nil {
			return smp, err
		}
		smp.RTT = &v
	case KindTCP:
		v, err := ParseIperfTCP(output)
		if err != nil {
			return smp, err
		}
		// Also: the clients' results are summed (seed 004's "N VMs").
		for _, o := range extraOut {
			w, err := ParseIperfTCP(o.out)
			if err != nil {
				return smp, err
			}
			v.Gbps += w.Gbps
			v.Retransmits += w.Retransmits
		}
		smp.TCP = &v
	case KindConnRate:
		v, err := ParseWrk(output)
		if err != nil {
			return smp, err
		}
		smp.ConnRate = &v
	case KindUDPPPS:
		v, err := ParseIperfUDP(output)
		if err != nil {
			return smp, err
		}
		smp.UDP = &v
		if len(extra) > 0 {
			smp.Flows = append(smp.Flows, FlowResult{Client: m.Client, Server: m.Server, UDP: v})
		}
		for k, ef := range extra {
			fv, err := ParseIperfUDP(extraOut[k].out)
			if err != nil {
				return smp, fmt.Errorf("flow %s → %s: %w", ef.spec.Client, ef.spec.Server, err)
			}
			smp.Flows = append(smp.Flows, FlowResult{Client: ef.spec.Client, Server: ef.spec.Server, UDP: fv})
		}
	}
	return smp, nil
}

// startLoad starts a load step's background load; everything it starts or
// creates is registered with step. Each load process also ends by itself
// after budget, in case the lab is killed without a chance to clean up.
func (r *planeRun) startLoad(ctx context.Context, l LoadSpec, step *Cleanup, budget time.Duration) error {
	t := r.topo
	secs := strconv.Itoa(int(budget.Seconds()))
	// Load processes run inside the lab's namespaces, like everything else,
	// so that "no process left in our namespaces" covers them too.
	anyNS := t.Nodes[0].NS
	if c := l.CPU; c != nil {
		cpus := ""
		for i, n := range c.CPUs {
			if i > 0 {
				cpus += ","
			}
			cpus += strconv.Itoa(n)
		}
		p, err := r.sh.Start(step, "dispatching hogs", "ip", "netns", "exec", anyNS, "taskset", "-c", cpus,
			"stress-ng", "--cpu", strconv.Itoa(len(c.CPUs)), "--cpu-load", strconv.Itoa(c.Percent), "-t", secs, "--metrics-brief")
		if err != nil {
			return err
		}
		if err := p.WaitReady(ctx, 10*time.Second); err != nil {
			return err
		}
	}
	if n := l.Net; n != nil {
		cl, sv := t.Pod(n.Client), t.Pod(n.Server)
		port := strconv.Itoa(loadPort)
		s, err := r.sh.Start(step, "Server listening", "ip", "netns", "exec", sv.NS, "iperf3", "-s", "-B", sv.IP, "-p", port, "--forceflush")
		if err != nil {
			return err
		}
		if err := s.WaitReady(ctx, 10*time.Second); err != nil {
			return err
		}
		c, err := r.sh.Start(step, "connected to", "ip", "netns", "exec", cl.NS, "stdbuf", "-oL", "iperf3", "-c", sv.IP, "-p", port,
			"-b", n.Rate, "-P", strconv.Itoa(n.Streams), "-t", secs, "-i", "0")
		if err != nil {
			return err
		}
		if err := c.WaitReady(ctx, 10*time.Second); err != nil {
			return err
		}
	}
	if a := l.Attack; a != nil {
		if err := r.startAttack(ctx, a, step, budget); err != nil {
			return err
		}
	}
	if p := l.CPUPods; p != nil {
		// The CPU pods belong to p.Node conceptually; CPU time is shared by
		// the whole VM anyway, so they are not pinned.
		for k := 1; k <= p.Count; k++ {
			ns := fmt.Sprintf("%s-h%d", t.Prefix, k)
			// A CPU pod is a namespace on the node with one busy worker; it
			// needs no network to compete for the node's CPUs.
			sub := &Topology{Sh: r.sh, Cleanup: step}
			if err := sub.createNamespace(ctx, ns); err != nil {
				return err
			}
			pr, err := r.sh.Start(step, "dispatching hogs", "ip", "netns", "exec", ns,
				"stress-ng", "--cpu", "1", "--cpu-load", strconv.Itoa(p.Percent), "-t", secs)
			if err != nil {
				return err
			}
			if err := pr.WaitReady(ctx, 10*time.Second); err != nil {
				return err
			}
		}
	}
	return nil
}
