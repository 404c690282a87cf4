package switchd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nagare-net/nagare/pkg/openflow"
	"github.com/nagare-net/nagare/pkg/steering"
)

// VS-extend (seed 001): the switch owns the uplinks' steering program
// (pkg/steering), reports its host and its ports' workloads to
// controllers in experimenter messages, and takes Flow Table entries and
// Core Table pins from controllers (OpenFlow) and nagarectl (the control
// socket).

// openSteering loads the steering program and attaches it to the
// configured devices, in the ports' namespace.
func (s *Switch) openSteering() error {
	if len(s.cfg.SteerDevices) == 0 {
		return nil
	}
	u, err := steering.New(s.cfg.Steering)
	if err != nil {
		return err
	}
	for _, dev := range s.cfg.SteerDevices {
		var mode string
		err := s.dp.InNetns(func() error {
			var err error
			mode, err = u.Attach(dev)
			return err
		})
		if err != nil {
			u.Close()
			return err
		}
		s.rps = steering.RPSState(dev)
		s.log.Info("steering attached", "device", dev, "xdp", mode, "rps", s.rps)
	}
	s.steer = u
	return nil
}

// runSteering samples CPU loads into the Core Table until ctx ends, and
// serves /metrics when configured.
func (s *Switch) runSteering(ctx context.Context) {
	if s.steer == nil {
		return
	}
	if err := s.steer.Sample(ctx, s.cfg.SteerPeriod, ""); err != nil && !errors.Is(err, context.Canceled) {
		s.log.Warn("steering: load sampler stopped", "err", err)
	}
}

// Steering is the switch's VS-extend datapath, nil when no device steers.
func (s *Switch) Steering() *steering.Uplink { return s.steer }

// serveMetrics serves Prometheus /metrics on cfg.MetricsAddr until ctx ends.
func (s *Switch) serveMetrics(ctx context.Context) error {
	if s.cfg.MetricsAddr == "" {
		return nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(switchCollector{s})
	if s.steer != nil {
		reg.MustRegister(steering.NewCollector(s.steer))
	}
	l, err := net.Listen("tcp", s.cfg.MetricsAddr)
	if err != nil {
		return fmt.Errorf("switchd: metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		<-ctx.Done()
		srv.Close()
	}()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = srv.Serve(l)
	}()
	addr := l.Addr().String()
	s.metricsAddr.Store(&addr)
	s.log.Info("metrics", "addr", addr)
	return nil
}

// hostReport is the VS-extend host report: CPUs, XDP mode, RPS, FCF layout.
func (s *Switch) hostReport() *openflow.Experimenter {
	h := openflow.VSXHost{RPS: openflow.VSXRPSUnknown, MaxEntries: steering.MaxEntries}
	if s.steer != nil {
		cfg := s.steer.Config()
		h.CPUs = uint32(cfg.CPUs)
		h.FCFIDShift, h.FCFIDBits, h.FCFPrioBit, h.Threshold = cfg.FCF.IDShift, cfg.FCF.IDBits, cfg.FCF.PrioBit, uint8(cfg.Threshold)
		switch s.steer.Mode() {
		case steering.ModeNative:
			h.XDPMode = openflow.VSXModeNative
		case "none":
		default:
			h.XDPMode = openflow.VSXModeGeneric
		}
		switch s.rps {
		case "on":
			h.RPS = openflow.VSXRPSOn
		case "off":
			h.RPS = openflow.VSXRPSOff
		}
	}
	m, _ := openflow.VSXMessage(openflow.VSXHostReport, h)
	return m
}

// portReport tells controllers a port's workload, tenant and pinned CPU
// (only ports that have a workload).
func (s *Switch) portReport(p *port, reason uint8) {
	if s.steer == nil || p.workload == 0 {
		return
	}
	m, _ := openflow.VSXMessage(openflow.VSXPortReport, openflow.VSXPort{PortNo: p.no, Workload: p.workload,
		Tenant: p.tenant, PinnedCPU: p.pinnedCPU, Reason: reason})
	s.sendToControllers(m)
}

// sendToControllers sends m to every connection that is not a slave.
func (s *Switch) sendToControllers(m openflow.Message) {
	s.connMu.Lock()
	targets := make([]*ofConn, 0, len(s.conns))
	for c := range s.conns {
		targets = append(targets, c)
	}
	s.connMu.Unlock()
	for _, c := range targets {
		if !c.isSlave() {
			_ = c.send(m)
		}
	}
}

// pinPort records a port's pinned CPU in the Core Table.
func (s *Switch) pinPort(p *port, pin bool) {
	if s.steer == nil || p.pinnedCPU == openflow.VSXNoCPU {
		return
	}
	id := p.workload
	if !pin {
		id = 0
	}
	if id == 0 && pin {
		id = p.no | 1<<31 // pinned, workload unknown: the port stands in for it
	}
	if err := s.steer.SetPin(p.pinnedCPU, id); err != nil {
		s.log.Warn("steering: pin", "port", p.name, "cpu", p.pinnedCPU, "err", err)
	}
}

// vsx handles a VS-extend experimenter message from a controller.
func (s *Switch) vsx(oc *ofConn, m *openflow.Experimenter, fail func(error), reply func(openflow.Message)) {
	if s.steer == nil {
		fail(&openflow.Error{Type: openflow.ErrTypeBadRequest, Code: openflow.BadRequestBadExperimenter})
		return
	}
	// An empty host report is a controller asking for one.
	if m.ExpType == openflow.VSXHostReport && len(m.Data) == 0 {
		reply(s.hostReport())
		return
	}
	body, err := openflow.DecodeVSX(m)
	if err != nil {
		fail(err)
		return
	}
	if oc.isSlave() {
		fail(&openflow.Error{Type: openflow.ErrTypeBadRequest, Code: openflow.BadRequestIsSlave})
		return
	}
	switch b := body.(type) {
	case *openflow.VSXFlow:
		e := steering.Entry{Priority: b.Priority, Match: steering.MatchFromWire(b.Key, b.Mask),
			CPU: b.CPU, PriorityFlow: b.Flags&openflow.VSXFlagPriorityFlow != 0}
		if b.Action == openflow.VSXActionChoose {
			e.Action = steering.ActionChoose
		}
		if b.Command == openflow.VSXFlowDelete {
			// As an OpenFlow delete: no entry is not an error.
			if err := s.steer.Delete(e.Match); err != nil && !errors.Is(err, steering.ErrNoEntry) {
				fail(&openflow.Error{Type: openflow.ErrTypeFlowModFailed, Code: 0})
			}
			return
		}
		if err := s.steer.Add(e); err != nil {
			s.log.Info("steering: flow mod refused", "entry", e.String(), "err", err)
			fail(&openflow.Error{Type: openflow.ErrTypeFlowModFailed, Code: 1 /* TABLE_FULL or out of range */})
		}
	case *openflow.VSXCore:
		if err := s.steer.SetPin(b.CPU, b.Workload); err != nil {
			fail(&openflow.Error{Type: openflow.ErrTypeBadRequest, Code: openflow.BadRequestEPerm})
		}
	default:
		// Reports go from the switch to controllers, not back.
		fail(&openflow.Error{Type: openflow.ErrTypeBadRequest, Code: openflow.BadRequestBadExpType})
	}
}

// steeringControl serves nagarectl steering show|add|del|pin.
func (s *Switch) steeringControl(req CtlRequest) ([]string, any, error) {
	if s.steer == nil {
		return nil, nil, errors.New("steering is off (nagare-switch --steer-dev DEVICE)")
	}
	switch req.Cmd {
	case "steering-add":
		e, err := steering.ParseEntry(req.Entry)
		if err != nil {
			return nil, nil, err
		}
		if err := s.steer.Add(e); err != nil {
			return nil, nil, err
		}
		return []string{"added " + e.String()}, nil, nil
	case "steering-del":
		m, err := steering.ParseMatch(req.Entry)
		if err != nil {
			return nil, nil, err
		}
		return nil, nil, s.steer.Delete(m)
	case "steering-pin":
		return nil, nil, s.steer.SetPin(req.CPU, req.Workload)
	}
	return s.steeringShow()
}

// SteeringState is steering-show's data.
type SteeringState struct {
	Devices map[string]string      `json:"devices"` // device → XDP mode
	RPS     string                 `json:"rps"`
	Cores   []steering.Core        `json:"cores"`
	CPUs    []steering.CPUCounters `json:"cpus"`
	Entries []steering.EntryStatus `json:"entries"`
	Events  map[string]uint64      `json:"events"`
	Config  steering.Config        `json:"config"`
	Text    []string               `json:"-"`
}

func (s *Switch) steeringShow() ([]string, any, error) {
	st := SteeringState{Devices: s.steer.Attached(), RPS: s.rps, Config: s.steer.Config()}
	var err error
	if st.Cores, err = s.steer.Cores(); err != nil {
		return nil, nil, err
	}
	if st.CPUs, err = s.steer.CPUCounters(); err != nil {
		return nil, nil, err
	}
	if st.Entries, err = s.steer.Entries(); err != nil {
		return nil, nil, err
	}
	if st.Events, err = s.steer.Events(); err != nil {
		return nil, nil, err
	}
	var lines []string
	for dev, mode := range st.Devices {
		lines = append(lines, fmt.Sprintf("device %s: xdp %s, rps %s", dev, mode, st.RPS))
	}
	lines = append(lines, fmt.Sprintf("threshold %d%%, FCF id bits %d<<%d, priority bit %d",
		st.Config.Threshold, st.Config.FCF.IDBits, st.Config.FCF.IDShift, st.Config.FCF.PrioBit))
	lines = append(lines, "cpu  online load pinned flows prio-flows steered-packets steered-bytes")
	for i, c := range st.Cores {
		var pk, by uint64
		if i < len(st.CPUs) {
			pk, by = st.CPUs[i].Packets, st.CPUs[i].Bytes
		}
		lines = append(lines, fmt.Sprintf("%-4d %-6v %3d%% %6d %5d %10d %15d %13d", c.CPU, c.Online, c.Load, c.Pinned, c.Flows, c.PrioFlows, pk, by))
	}
	if n := len(st.CPUs); n > 0 {
		lines = append(lines, fmt.Sprintf("stayed on the receiving CPU: %d packets, %d bytes", st.CPUs[n-1].Packets, st.CPUs[n-1].Bytes))
	}
	for _, e := range st.Entries {
		lines = append(lines, fmt.Sprintf("%s cpu=%s changes=%d n_packets=%d n_bytes=%d", e.Entry, steering.CPUString(e.CPU), e.Changes, e.Packets, e.Bytes))
	}
	return lines, st, nil
}
