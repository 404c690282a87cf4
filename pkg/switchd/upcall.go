package switchd

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"github.com/nagare-net/nagare/pkg/datapath"
	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/ofproto"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// slowStats are the slow path's counters (nagarectl show).
type slowStats struct {
	upcalls, misses, actionUpcalls  atomic.Uint64
	installed, installErrs, limited atomic.Uint64
	executed, execErrs, truncated   atomic.Uint64
	xlateErrs, packetIns            atomic.Uint64
}

// upcallLoop reads the fast path's upcalls until ctx ends. It runs on a
// thread of its own that stays in the ports' namespace, so executing an
// upcalled packet is a direct BPF_PROG_RUN.
func (s *Switch) upcallLoop(ctx context.Context) {
	restore, err := s.dp.LockToNetns()
	if err != nil {
		s.log.Error("upcall handler", "err", err)
		return
	}
	defer restore()
	r, err := s.dp.Upcalls()
	if err != nil {
		s.log.Error("upcall ring", "err", err)
		return
	}
	go func() {
		<-ctx.Done()
		r.Close()
	}()
	for {
		u, err := r.Read()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, os.ErrClosed) {
				return
			}
			s.log.Warn("reading upcall", "err", err)
			continue
		}
		s.stats.upcalls.Add(1)
		switch u.Reason {
		case datapath.UpcallMiss:
			s.stats.misses.Add(1)
			s.handleMiss(u)
		case datapath.UpcallAction:
			s.stats.actionUpcalls.Add(1)
			s.handleActionUpcall(u)
		}
	}
}

// xlate is a translation lowered to what the fast path can install.
type xlate struct {
	*ofproto.Translation
	actions []flow.Action // with virtual tunnel ports replaced by their device
	mask    flow.Mask
	version uint64 // pipeline version translated against
}

// translate runs key through the pipeline. Packets from a tunnel device are
// presented as coming from the virtual port of their remote endpoint, which
// makes the outer source part of the mask.
func (s *Switch) translate(key flow.Key, trace bool) (*xlate, error) {
	pkey := key
	var extra flow.Mask
	extra.InPort = 0xffffffff
	if key.TunFlags&flow.TunPresent != 0 && s.ports.hasCarriers() {
		if vp, ok := s.ports.endpointFor(key.InPort, netip.AddrFrom4(key.TunSrc)); ok {
			pkey.InPort = vp
		}
		extra.TunSrc = [4]byte{0xff, 0xff, 0xff, 0xff}
		extra.TunFlags = 0xff
	}
	version := s.pl.Version()
	t, err := s.pl.Translate(pkey, ofproto.TranslateOptions{Trace: trace})
	if err != nil {
		return nil, err
	}
	return &xlate{Translation: t, actions: s.lower(t.Actions), mask: t.Mask.Or(extra), version: version}, nil
}

// lower replaces outputs to virtual tunnel ports by outputs to the device
// that carries them (the SetTunnel before each output names the remote).
func (s *Switch) lower(acts []flow.Action) []flow.Action {
	if !s.ports.hasCarriers() {
		return acts
	}
	out := make([]flow.Action, len(acts))
	for i, a := range acts {
		if o, ok := a.(flow.Output); ok {
			if c, ok := s.ports.carrierPort(o.Port); ok {
				a = flow.Output{Port: c}
			}
		}
		out[i] = a
	}
	return out
}

// withoutUserspace drops the Userspace actions: the first packet's
// PACKET_INs come straight from its translation.
func withoutUserspace(acts []flow.Action) []flow.Action {
	out := acts[:0:0]
	for _, a := range acts {
		if _, ok := a.(flow.Userspace); !ok {
			out = append(out, a)
		}
	}
	return out
}

// handleMiss sets up the flow of a missed packet and delivers it. It runs
// on a thread in the ports' namespace (upcallLoop's, see LockToNetns).
func (s *Switch) handleMiss(u *datapath.Upcall) {
	x, err := s.translate(u.Key, false)
	if err != nil {
		s.stats.xlateErrs.Add(1)
		s.log.Debug("translation failed", "key", flow.Format(u.Key, flow.ExactMask()), "err", err)
		return
	}
	if !x.NoCache {
		s.install(u.Key, x)
	}
	// The missed packet never counts in the fast path (the flow did not
	// exist yet); credit it here, or every rule's n_packets and the
	// table-miss rule's count of PACKET_INs would be one per megaflow short.
	s.pl.Credit(x.Rules, 1, uint64(u.Len), time.Now())
	if acts := withoutUserspace(x.actions); len(acts) > 0 {
		if u.Truncated() {
			s.stats.truncated.Add(1)
		} else if err := s.dp.ExecuteLocal(u.Packet, u.Key.InPort, acts); err != nil {
			s.stats.execErrs.Add(1)
			s.log.Debug("execute", "err", err)
		} else {
			s.stats.executed.Add(1)
		}
	}
	for _, pi := range x.PacketIns {
		s.sendPacketIn(pi, u.Packet, u.Len, u.Key)
	}
}

// exactMask matches every key field but the TCP flags (which change
// within a connection).
var exactMask = func() flow.Mask {
	m := flow.ExactMask()
	m.TCPFlags = 0
	return m
}()

// install caches a translation as a megaflow, within the flow limit.
func (s *Switch) install(key flow.Key, x *xlate) {
	if s.cache.len() >= s.cfg.FlowLimit {
		s.stats.limited.Add(1)
		return
	}
	mask := x.mask
	if s.cfg.DisableMegaflows {
		mask = exactMask
	}
	f := flow.Flow{Key: key.And(mask), Mask: mask, Actions: x.actions}
	id, err := s.dp.Install(f)
	switch {
	case err == nil:
		s.stats.installed.Add(1)
		s.cache.mu.Lock()
		s.cache.ukeys[id] = &ukey{packet: key, mask: mask, actions: x.actions, rules: x.Rules, version: x.version, created: time.Now()}
		s.cache.mu.Unlock()
	case errors.Is(err, datapath.ErrFlowExists):
		// Another packet of the same megaflow got there first.
	default:
		s.stats.installErrs.Add(1)
		s.log.Debug("install", "flow", f.String(), "err", err)
	}
}

// handleActionUpcall turns a cached flow's Userspace action into a
// PACKET_IN.
func (s *Switch) handleActionUpcall(u *datapath.Upcall) {
	pi, ok := s.pl.ControllerCookie(u.Cookie)
	if !ok {
		return
	}
	s.sendPacketIn(pi, u.Packet, u.Len, u.Key)
}

// sendPacketIn sends pkt to the controllers that want this reason.
func (s *Switch) sendPacketIn(pi ofproto.PacketIn, pkt []byte, total int, key flow.Key) {
	data := pkt
	if pi.MaxLen != openflow.ControllerNoBuffer && int(pi.MaxLen) < len(data) {
		data = data[:pi.MaxLen]
	}
	match := pi.Match
	if len(match.Fields) == 0 {
		match = pi.MatchFor(key)
	}
	s.stats.packetIns.Add(1)
	s.broadcast(&openflow.PacketIn{
		BufferID: openflow.NoBuffer, TotalLen: uint16(min(total, 0xffff)), Reason: pi.Reason,
		TableID: pi.TableID, Cookie: pi.Cookie, Match: match, Data: data,
	}, pi.Reason)
}
