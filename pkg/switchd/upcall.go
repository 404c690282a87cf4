package switchd

import (
	"context"
	"errors"
	"hash/maphash"
	"net/netip"
	"os"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/nagare-net/nagare/pkg/datapath"
	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/ofproto"
	"github.com/nagare-net/nagare/pkg/openflow"
	"github.com/nagare-net/nagare/pkg/placement"
)

// slowStats are the slow path's counters (nagarectl show).
type slowStats struct {
	upcalls, misses, actionUpcalls  atomic.Uint64
	installed, installErrs, limited atomic.Uint64
	executed, execErrs, truncated   atomic.Uint64
	segmented                       atomic.Uint64 // GSO first packets delivered as segments
	xlateErrs, packetIns            atomic.Uint64
	badUpcalls                      atomic.Uint64 // ring records that did not decode
	repeats                         atomic.Uint64 // misses whose key an earlier miss of the batch had: translated once
	recircRecovered                 atomic.Uint64 // frozen states made again from cached first passes
}

// upcallBatch is the most upcalls handled together: their flows are
// installed with one map update per map, their packets sent with one
// sendmmsg (see datapath.InstallBatch, datapath.ExecBatch).
const upcallBatch = 64

// upcallWindow is the most upcalls taken from the ring at once. The ring
// is first come, first served; the handler's time is not: a window is
// handled round-robin by ingress port (fairOrder), so a port's first
// packet waits behind at most a batch's share of another port's, not
// behind everything that port put in the ring before it.
const upcallWindow = 1024

// upcallLoop reads the fast path's upcalls until ctx ends. It runs on a
// thread of its own that stays in the ports' namespace, so executing an
// upcalled packet needs no hand-off to another thread.
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
	eb, err := s.dp.NewExecBatch()
	if err != nil {
		s.log.Warn("upcall handler", "err", err)
	}
	defer eb.Close()
	go func() {
		<-ctx.Done()
		r.Close()
	}()
	h := newUpcallHandler(s, eb)
	ups := make([]datapath.Upcall, upcallWindow)
	var fo fairOrder
	for {
		n, err := r.ReadBatch(ups)
		s.stats.badUpcalls.Store(r.Malformed)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, os.ErrClosed) {
				return
			}
			s.log.Warn("reading upcall", "err", err)
			continue
		}
		w := fo.order(ups[:n])
		for len(w) > 0 {
			b := w[:min(len(w), upcallBatch)]
			h.handle(b)
			w = w[len(b):]
		}
	}
}

// fairOrder orders a window of upcalls round-robin by ingress port, each
// port's own upcalls in their order (a flow's packets stay in sequence).
type fairOrder struct {
	out   []datapath.Upcall
	byIn  map[uint32][]int
	ports []uint32
}

func (f *fairOrder) order(ups []datapath.Upcall) []datapath.Upcall {
	if f.byIn == nil {
		f.byIn = map[uint32][]int{}
	}
	f.ports = f.ports[:0]
	for i := range ups {
		in := ups[i].Key.InPort
		l, ok := f.byIn[in]
		if !ok || len(l) == 0 {
			f.ports = append(f.ports, in)
		}
		f.byIn[in] = append(l, i)
	}
	if len(f.ports) <= 1 {
		clear(f.byIn)
		return ups
	}
	f.out = f.out[:0]
	for round := 0; len(f.out) < len(ups); round++ {
		for _, in := range f.ports {
			if l := f.byIn[in]; round < len(l) {
				f.out = append(f.out, ups[l[round]])
			}
		}
	}
	for _, in := range f.ports {
		f.byIn[in] = f.byIn[in][:0]
	}
	return f.out
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
func (s *Switch) translate(key flow.Key, trace bool) (xlate, error) {
	pkey, extra := s.pipelineKey(key)
	version := s.pl.Version()
	t, err := s.pl.Translate(pkey, ofproto.TranslateOptions{Trace: trace})
	if err != nil {
		return xlate{}, err
	}
	// (By value: the upcall handler keeps it in its batch, the revalidator
	// for a moment; an allocation per new flow is work for the GC.)
	return xlate{Translation: t, actions: s.lower(t.Actions), mask: t.Mask.Or(extra), version: version}, nil
}

// recoverRecirc registers the frozen state behind id again by translating
// the cached flows that recirculate to it: after a restart the fast path
// still holds first passes (recirc(id)) from the previous process, whose
// frozen states this process has not made yet until the revalidator gets
// to them, and an established connection's next packet must not wait for
// that. Ids are hashes of the frozen state, so a first pass translated
// against the same tables gives the same id. It reports whether id is
// known now.
func (s *Switch) recoverRecirc(id uint32) bool { return s.recoverRecircDepth(id, 0) }

// maxRecoverDepth bounds how many passes back recoverRecircDepth goes:
// the fast path's own bound on recirculations (RECIRC_MAX, recirc.h).
const maxRecoverDepth = 8

func (s *Switch) recoverRecircDepth(id uint32, depth int) bool {
	if s.pl.KnowsRecirc(id) {
		return true
	}
	if depth >= maxRecoverDepth {
		return false
	}
	var keys []flow.Key
	s.cache.mu.Lock()
	for _, uk := range s.cache.ukeys {
		if uk == nil {
			continue
		}
		for _, a := range uk.actions {
			if rc, ok := a.(flow.Recirc); ok && rc.ID == id {
				keys = append(keys, uk.packet)
				break
			}
		}
	}
	s.cache.mu.Unlock()
	for _, k := range keys {
		// A pass that is itself recirculated recovers its own
		// predecessor first (bounded by the recirculation depth): a
		// Service behind a select group is three passes (ct, hash,
		// ct commit), and a new connection's first two are usually
		// cached, so its third pass's miss must reach back two.
		if k.RecircID != 0 && !s.recoverRecircDepth(k.RecircID, depth+1) {
			continue
		}
		if _, err := s.translate(k, false); err == nil && s.pl.KnowsRecirc(id) {
			s.stats.recircRecovered.Add(1)
			return true
		}
	}
	return s.pl.KnowsRecirc(id)
}

// pipelineKey is key as the OpenFlow pipeline sees it (a packet from a
// tunnel device comes in on the virtual port of its remote endpoint), and
// the mask bits that mapping depends on.
func (s *Switch) pipelineKey(key flow.Key) (flow.Key, flow.Mask) {
	var extra flow.Mask
	extra.InPort = 0xffffffff
	if key.TunFlags&flow.TunPresent != 0 && s.ports.hasCarriers() {
		if vp, ok := s.ports.endpointFor(key.InPort, netip.AddrFrom4(key.TunSrc)); ok {
			key.InPort = vp
		}
		extra.TunSrc = [4]byte{0xff, 0xff, 0xff, 0xff}
		extra.TunFlags = 0xff
	}
	return key, extra
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
	if !slices.ContainsFunc(acts, func(a flow.Action) bool { _, ok := a.(flow.Userspace); return ok }) {
		return acts
	}
	out := acts[:0:0]
	for _, a := range acts {
		if _, ok := a.(flow.Userspace); !ok {
			out = append(out, a)
		}
	}
	return out
}

// upcallHandler handles batches of upcalls on the upcall thread.
type upcallHandler struct {
	s      *Switch
	eb     *datapath.ExecBatch
	misses []miss
	byKey  map[uint64]int // index in misses of each packet key's first miss, by keyHash
	seed   maphash.Seed
	flows  []flow.Flow
	ids    []uint32
	errs   []error
}

// miss is an upcalled packet and its translation.
type miss struct {
	u       *datapath.Upcall
	x       xlate
	install int            // index in flows, or -1
	mode    placement.Mode // the placement it asks for
}

func newUpcallHandler(s *Switch, eb *datapath.ExecBatch) *upcallHandler {
	return &upcallHandler{s: s, eb: eb, byKey: map[uint64]int{}, seed: maphash.MakeSeed()}
}

// keyHash hashes a packet key's memory (fixed-size fields, no pointers).
// A map keyed by the 160-byte key itself would allocate a copy of every
// key it stores (Go keeps keys over 128 bytes out of line). Keys equal
// field by field but not in their padding hash apart: the repeat is then
// translated again, as it would be without the shortcut; equal hashes
// are confirmed with ==.
func (h *upcallHandler) keyHash(k *flow.Key) uint64 {
	return maphash.Bytes(h.seed, unsafe.Slice((*byte)(unsafe.Pointer(k)), unsafe.Sizeof(*k)))
}

// handle sets up the flows of a batch of missed packets and delivers the
// packets (and turns userspace actions into PACKET_INs): translate each,
// install the flows together, then execute the packets in order.
func (h *upcallHandler) handle(ups []datapath.Upcall) {
	s := h.s
	s.place.seats.Lock() // admissions below count on the seats taken now
	defer s.place.seats.Unlock()
	h.misses, h.flows = h.misses[:0], h.flows[:0]
	room := s.cfg.FlowLimit - s.cache.len()
	offloaded := s.cache.offloaded()
	for i := range ups {
		u := &ups[i]
		s.stats.upcalls.Add(1)
		switch u.Reason {
		case datapath.UpcallMiss:
			s.stats.misses.Add(1)
		case datapath.UpcallAction:
			s.stats.actionUpcalls.Add(1)
			h.flush() // keep the packets in order
			room = s.cfg.FlowLimit - s.cache.len()
			offloaded = s.cache.offloaded()
			s.handleActionUpcall(u)
			continue
		default:
			continue
		}
		kh := h.keyHash(&u.Key)
		if j, ok := h.byKey[kh]; ok && h.misses[j].u.Key == u.Key {
			// The same packet key again in this batch (packets of a new
			// flow that came before its flow was in): its translation
			// is the first's, and so is its flow, installed once.
			s.stats.repeats.Add(1)
			h.misses = append(h.misses, miss{u: u, x: h.misses[j].x, install: -1, mode: h.misses[j].mode})
			continue
		}
		x, err := s.translate(u.Key, false)
		if err != nil && ofproto.IsUnknownRecirc(err) && s.recoverRecirc(u.Key.RecircID) {
			x, err = s.translate(u.Key, false)
		}
		if err != nil {
			s.stats.xlateErrs.Add(1)
			s.log.Debug("translation failed", "key", flow.Format(u.Key, flow.ExactMask()), "err", err)
			continue
		}
		m := miss{u: u, x: x, install: -1}
		if !x.NoCache {
			if len(h.flows) < room {
				mask := x.mask
				if s.cfg.DisableMegaflows {
					mask = exactMask
				}
				m.install = len(h.flows)
				m.mode = s.place.resolve(u.Key.InPort, x.Rules)
				onload := !s.place.stopped && !s.place.policy.Admit(m.mode, offloaded)
				if !onload {
					offloaded++
				}
				// (The datapath masks the key.)
				h.flows = append(h.flows, flow.Flow{Key: u.Key, Mask: mask, Actions: x.actions, Onload: onload})
			} else {
				s.stats.limited.Add(1)
				s.refused.add(u.Key.InPort, refusedFlowLimit)
			}
		}
		if _, taken := h.byKey[kh]; !taken {
			h.byKey[kh] = len(h.misses)
		}
		h.misses = append(h.misses, m)
	}
	h.flush()
}

// flush installs and delivers the misses gathered so far.
func (h *upcallHandler) flush() {
	s := h.s
	if len(h.misses) == 0 {
		return
	}
	if n := len(h.flows); n > 0 {
		h.ids, h.errs = slices.Grow(h.ids[:0], n)[:n], slices.Grow(h.errs[:0], n)[:n]
		s.dp.InstallBatch(h.flows, h.ids, h.errs)
		now := time.Now()
		s.cache.mu.Lock()
		for _, m := range h.misses {
			if m.install < 0 {
				continue
			}
			f := &h.flows[m.install]
			err := h.errs[m.install]
			if err == nil || errors.Is(err, datapath.ErrPortFlowLimit) || errors.Is(err, datapath.ErrPortMaskLimit) {
				// What the port's cache budget takes paces its misses.
				s.missPacer.record(f.Key.InPort, err == nil, now)
			}
			switch {
			case err == nil:
				s.stats.installed.Add(1)
				s.cache.set(h.ids[m.install], &ukey{packet: m.u.Key, mask: f.Mask, actions: m.x.actions, rules: m.x.Rules, macDeps: m.x.MACDeps, version: m.x.version, created: now,
					onload: f.Onload, mode: m.mode})
			case errors.Is(err, datapath.ErrFlowExists):
				// Another packet of the same megaflow got there first.
			default:
				s.stats.installErrs.Add(1)
				s.refused.add(f.Key.InPort, refusalOf(err))
				s.log.Debug("install", "flow", f, "err", err)
			}
		}
		s.cache.mu.Unlock()
	}
	now := time.Now()
	failed := h.eb.Failed
	before := s.pl.Version()
	defer func() {
		if s.pl.Version() != before && s.rv != nil {
			s.rv.soon() // a learn action changed the tables
		}
	}()
	for _, m := range h.misses {
		u, x := m.u, m.x
		// The missed packet never counts in the fast path (the flow did
		// not exist yet); credit it here, or every rule's n_packets and the
		// table-miss rule's count of PACKET_INs would be one per megaflow
		// short.
		s.pl.Credit(x.Rules, 1, uint64(u.Len), now)
		acts, pins := withoutUserspace(x.actions), x.PacketIns
		if len(pins) > 0 && rewrites(x.actions) && !u.Truncated() {
			// The controller must get the packet as rewritten up to its
			// output:CONTROLLER: run the userspace actions in the fast
			// path too, whose upcalls become the PACKET_INs (as they do
			// for the flow's later packets).
			acts, pins = x.actions, nil
		}
		if len(acts) > 0 {
			segs := [][]byte{u.Packet}
			if u.GSOSize > 0 && !u.Truncated() {
				// A GSO super-packet (a pod with TSO): no device takes
				// it whole, so it goes out as the segments the pod's
				// device would have sent.
				var err error
				if segs, err = datapath.Segment(u.Packet, u.GSOSize); err != nil {
					s.stats.execErrs.Add(1)
					s.log.Debug("segment", "err", err)
					segs = nil
				} else {
					s.stats.segmented.Add(1)
				}
			}
			for _, seg := range segs {
				if u.Truncated() {
					s.stats.truncated.Add(1)
				} else if err := h.eb.Add(seg, u.Key.InPort, acts); err != nil {
					s.stats.execErrs.Add(1)
					s.log.Debug("execute", "err", err)
				} else {
					s.stats.executed.Add(1)
				}
			}
		}
		for _, pi := range pins {
			s.sendPacketIn(pi, u.Packet, u.Len, u.Key)
		}
	}
	if err := h.eb.Flush(); err != nil {
		s.log.Debug("execute", "err", err)
	}
	s.stats.execErrs.Add(h.eb.Failed - failed) // copies a device refused
	h.misses, h.flows = h.misses[:0], h.flows[:0]
	clear(h.byKey)
}

// rewrites reports whether acts change the packet's bytes.
func rewrites(acts []flow.Action) bool {
	for _, a := range acts {
		switch a.(type) {
		case flow.Output, flow.Local, flow.Userspace, flow.SetTunnel:
		default:
			return true
		}
	}
	return false
}

// exactMask matches every key field but the TCP flags (which change
// within a connection).
var exactMask = func() flow.Mask {
	m := flow.ExactMask()
	m.TCPFlags = 0
	return m
}()

// handleActionUpcall turns a cached flow's Userspace action into a
// PACKET_IN.
func (s *Switch) handleActionUpcall(u *datapath.Upcall) {
	pi, ok := s.pl.ControllerCookie(u.Cookie)
	if !ok {
		return
	}
	key, _ := s.pipelineKey(u.Key) // in_port: the tunnel endpoint's port
	sent := s.sendPacketIn(pi, u.Packet, u.Len, key)
	s.actionPacer.record(u.Key.InPort, sent, time.Now())
}

// sendPacketIn sends pkt to the controllers that want this reason. It
// reports whether at least one connection took it.
func (s *Switch) sendPacketIn(pi ofproto.PacketIn, pkt []byte, total int, key flow.Key) bool {
	// The rate limits first: a PACKET_IN no connection takes is not built
	// (most of an attacker's, whose upcalls share the handler's core).
	targets := s.packetInTargets(pi.Reason, key.InPort)
	if len(targets) == 0 {
		return false
	}
	data := pkt
	if pi.MaxLen != openflow.ControllerNoBuffer && int(pi.MaxLen) < len(data) {
		data = data[:pi.MaxLen]
	}
	match := pi.Match
	if len(match.Fields) == 0 {
		match = pi.MatchFor(key)
	}
	s.stats.packetIns.Add(1)
	b, err := openflow.Marshal(&openflow.PacketIn{
		BufferID: openflow.NoBuffer, TotalLen: uint16(min(total, 0xffff)), Reason: pi.Reason,
		TableID: pi.TableID, Cookie: pi.Cookie, Match: match, Data: data,
	})
	if err != nil {
		for _, c := range targets {
			c.pins.release(key.InPort)
		}
		s.log.Warn("encoding PACKET_IN", "err", err)
		return false
	}
	sent := false
	for _, c := range targets {
		if dropped := c.queuePacketIn(b, key.InPort); dropped != "" {
			s.refused.add(key.InPort, dropped)
		} else {
			sent = true
		}
	}
	return sent
}

// packetInTargets are the connections that want a PACKET_IN of this reason,
// whose rate limit lets one through now and whose queue has room for one
// of port's (the others count it, and the port, as rate-limited or
// queue-full). Each returned connection holds a queue slot for port,
// given back when the PACKET_IN is written or not queued after all.
func (s *Switch) packetInTargets(reason uint8, port uint32) []*ofConn {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	var out []*ofConn
	now := time.Now()
	for c := range s.conns {
		if !c.wants(openflow.TypePacketIn, reason) {
			continue
		}
		// The queue slot first: a PACKET_IN that cannot be queued must
		// not spend a rate token (a controller that reads slowly would
		// otherwise eat the budget and then get nothing once it reads).
		if !c.pins.reserve(port, len(c.txq)) { // a controller that is not reading
			c.drops.packetInQueue.Add(1)
			s.refused.add(port, refusedPacketInQ)
			continue
		}
		if !c.pins.take(port, now) {
			c.pins.release(port)
			c.drops.packetInRate.Add(1)
			s.refused.add(port, refusedPacketInCap)
			continue
		}
		out = append(out, c)
	}
	return out
}
