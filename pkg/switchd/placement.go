package switchd

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/ofproto"
	"github.com/nagare-net/nagare/pkg/placement"
)

// Flow placement: every cached flow is offloaded (the fast path runs its
// actions) or onloaded (the fast path classifies and counts its packets,
// the Onloader executes them with its cached actions). What a flow asks
// for comes from, in order:
//   - the OpenFlow rules it went through: a placement set for a cookie
//     (value/mask) applies to the flows of every rule whose cookie
//     matches it; the last such rule on the flow's way wins;
//   - its ingress port (a pod);
//   - otherwise auto.
// The policy (pkg/placement) then decides within the fast path's
// capacity, each revalidator round, from the rates the round measured.

// placements is the switch's placement table and policy.
type placements struct {
	policy placement.Policy
	// seats is held while flows take or leave fast-path seats: by the
	// upcall handler for a batch of installs, by the revalidator while it
	// moves flows, so the capacity holds at every instant.
	seats   sync.Mutex
	stopped bool // under seats: the switch is stopping, everything stays offloaded

	mu      sync.Mutex
	ports   map[uint32]placement.Mode
	cookies []cookiePlacement
	any     atomic.Bool // a non-auto placement is set

	toFast, toSlow atomic.Uint64 // moves, each way
}

// cookiePlacement is the placement of the rules whose cookie & mask == value.
type cookiePlacement struct {
	value, mask uint64
	mode        placement.Mode
}

func newPlacements(cfg *Config) *placements {
	return &placements{
		policy: placement.Policy{Capacity: cfg.FastpathCapacity, Hysteresis: cfg.PlacementHysteresis, MinGain: cfg.PlacementMinPPS},
		ports:  map[uint32]placement.Mode{},
	}
}

// resolve is the mode a flow from inPort through rules asks for.
func (p *placements) resolve(inPort uint32, rules []ofproto.RuleRef) placement.Mode {
	if !p.any.Load() {
		return placement.Auto
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	mode, found := placement.Auto, false
	for _, r := range rules {
		c, ok := r.Cookie()
		if !ok {
			continue
		}
		for _, cp := range p.cookies {
			if c&cp.mask == cp.value {
				mode, found = cp.mode, true
			}
		}
	}
	if found {
		return mode
	}
	return p.ports[inPort]
}

// setPort sets the placement of the flows entering on port no.
func (p *placements) setPort(no uint32, m placement.Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m == placement.Auto {
		delete(p.ports, no)
	} else {
		p.ports[no] = m
	}
	p.updateAny()
}

// setCookie sets the placement of the rules whose cookie matches value/mask.
func (p *placements) setCookie(value, mask uint64, m placement.Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	value &= mask
	out := p.cookies[:0]
	for _, cp := range p.cookies {
		if cp.value != value || cp.mask != mask {
			out = append(out, cp)
		}
	}
	p.cookies = out
	if m != placement.Auto {
		p.cookies = append(p.cookies, cookiePlacement{value: value, mask: mask, mode: m})
	}
	p.updateAny()
}

func (p *placements) updateAny() { p.any.Store(len(p.ports) > 0 || len(p.cookies) > 0) }

// parseCookieTarget parses cookie=V[/M] (mask default: all ones).
func parseCookieTarget(s string) (value, mask uint64, err error) {
	v, ok := strings.CutPrefix(s, "cookie=")
	if !ok {
		return 0, 0, fmt.Errorf("placement target %q: want a port (name or number) or cookie=VALUE[/MASK]", s)
	}
	vs, ms, hasMask := strings.Cut(v, "/")
	if value, err = strconv.ParseUint(vs, 0, 64); err != nil {
		return 0, 0, fmt.Errorf("placement target %q: %w", s, err)
	}
	mask = ^uint64(0)
	if hasMask {
		if mask, err = strconv.ParseUint(ms, 0, 64); err != nil {
			return 0, 0, fmt.Errorf("placement target %q: %w", s, err)
		}
	}
	return value, mask, nil
}

// setPlacement is `nagarectl placement set TARGET MODE`.
func (s *Switch) setPlacement(target, mode string) (string, error) {
	m, err := placement.ParseMode(mode)
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(target, "cookie=") {
		v, mask, err := parseCookieTarget(target)
		if err != nil {
			return "", err
		}
		s.place.setCookie(v, mask, m)
		s.rv.force(false) // move the cached flows now
		return fmt.Sprintf("rules with cookie %#x/%#x: %s", v&mask, mask, m), nil
	}
	var no uint32
	found := false
	for _, p := range s.ports.list() {
		if p.name == target || strconv.FormatUint(uint64(p.no), 10) == target {
			no, found = p.no, true
			if p.carrier != 0 {
				no = p.carrier // a tunnel endpoint's packets enter on its device
			}
		}
	}
	if !found {
		return "", fmt.Errorf("placement: no port %q", target)
	}
	s.place.setPort(no, m)
	s.rv.force(false)
	return fmt.Sprintf("port %s (%d): %s", target, no, m), nil
}

// placementLines lists the placement table (nagarectl placement show).
func (s *Switch) placementLines() []string {
	p := s.place
	p.mu.Lock()
	defer p.mu.Unlock()
	var lines []string
	for no, m := range p.ports {
		lines = append(lines, fmt.Sprintf("port %d: %s", no, m))
	}
	for _, cp := range p.cookies {
		lines = append(lines, fmt.Sprintf("cookie=%#x/%#x: %s", cp.value, cp.mask, cp.mode))
	}
	return lines
}

// place runs the policy over the cached flows (after a revalidator round
// sampled their rates) and moves the flows it says to move. Nothing to do
// while the capacity is unlimited, no placement is set and no flow is
// onloaded: every flow is then offloaded, as it was installed.
func (r *revalidator) place() {
	s := r.s
	p := s.place
	p.seats.Lock()
	defer p.seats.Unlock()
	if p.stopped {
		return
	}
	s.syncXDP()
	s.cache.mu.Lock()
	if p.policy.Capacity <= 0 && !p.any.Load() && s.cache.onloaded == 0 {
		s.cache.mu.Unlock()
		return
	}
	flows := make([]placement.Flow, 0, s.cache.n)
	for _, uk := range s.cache.ukeys {
		if uk == nil {
			continue
		}
		uk.mode = p.resolve(uk.packet.InPort, uk.rules)
		flows = append(flows, placement.Flow{ID: uk.id, Mode: uk.mode, Rate: uk.meter.Rate, Offloaded: !uk.onload})
	}
	s.cache.mu.Unlock()
	moves := p.policy.Decide(flows)
	// Out of the fast path first: the capacity holds between moves too.
	slices.SortStableFunc(moves, func(a, b placement.Move) int {
		if a.Offload == b.Offload {
			return 0
		}
		if b.Offload {
			return -1
		}
		return 1
	})
	for _, m := range moves {
		s.cache.mu.Lock()
		uk := s.cache.get(m.ID)
		var f flow.Flow
		if uk != nil {
			f = flow.Flow{Key: uk.packet.And(uk.mask), Mask: uk.mask, Actions: uk.actions, Onload: !m.Offload}
		}
		s.cache.mu.Unlock()
		if uk == nil {
			continue
		}
		if err := s.dp.Modify(f); err != nil {
			s.log.Debug("placement", "flow", f.String(), "err", err)
			continue
		}
		s.cache.mu.Lock()
		if s.cache.get(m.ID) == uk {
			s.cache.setOnload(uk, !m.Offload)
		}
		s.cache.mu.Unlock()
		if m.Offload {
			p.toFast.Add(1)
		} else {
			p.toSlow.Add(1)
		}
	}
}

// PlacementStats is what show reports about placement.
type PlacementStats struct {
	Capacity  int    `json:"capacity"` // 0: unlimited
	Offloaded int    `json:"offloaded"`
	Onloaded  int    `json:"onloaded"`
	ToFast    uint64 `json:"to_fast_path"` // moves onload → offload
	ToSlow    uint64 `json:"to_userspace"` // moves offload → onload
	// The onload path (datapath.Onloader).
	OnloadPackets, OnloadBytes, OnloadBatches, OnloadFailed, OnloadUnknown uint64
	OnloadSegmented                                                        uint64 // GSO packets cut into segments
	OnloadWhole                                                            uint64 // GSO packet copies sent whole (vnet header)
	OnloadVnetHdr                                                          string // "on", "off", or why the packet socket refused it
	// Which path (xdp.go): ring or afxdp, the ports on AF_XDP, the ports
	// where it was refused (why), packets through AF_XDP, socket drops.
	OnloadPath            string            `json:"onload_path"`
	XDPPorts              []uint32          `json:"xdp_ports,omitempty"`
	XDPRefused            map[uint32]string `json:"xdp_refused,omitempty"`
	OnloadXDP, OnloadLost uint64
}

func (s *Switch) placementStats() PlacementStats {
	s.cache.mu.Lock()
	st := PlacementStats{Capacity: s.place.policy.Capacity, Offloaded: s.cache.n - s.cache.onloaded, Onloaded: s.cache.onloaded}
	s.cache.mu.Unlock()
	st.ToFast, st.ToSlow = s.place.toFast.Load(), s.place.toSlow.Load()
	if o := s.onloader.Load(); o != nil {
		st.OnloadPackets, st.OnloadBytes, st.OnloadBatches = o.Stats.Packets.Load(), o.Stats.Bytes.Load(), o.Stats.Batches.Load()
		st.OnloadFailed, st.OnloadUnknown = o.Stats.Failed.Load(), o.Stats.Unknown.Load()
		st.OnloadSegmented, st.OnloadWhole = o.Stats.Segmented.Load(), o.Stats.Whole.Load()
		st.OnloadVnetHdr = o.Stats.VnetHdr
		st.OnloadPath = string(o.Path())
		st.XDPPorts, st.XDPRefused = o.XDPPorts()
		st.OnloadXDP, st.OnloadLost = o.Stats.XDP.Load(), o.Stats.Lost.Load()
	}
	return st
}

// onloadLoop executes the packets of onloaded flows until ctx ends, on a
// thread of its own in the ports' namespace.
func (s *Switch) onloadLoop(ctx context.Context) {
	restore, err := s.dp.LockToNetns()
	if err != nil {
		s.log.Error("onload", "err", err)
		return
	}
	defer restore()
	o, err := s.dp.NewOnloaderPath(s.cfg.OnloadPath)
	if err != nil {
		s.log.Warn("onload", "err", err)
	}
	if o == nil {
		return
	}
	s.log.Info("onload path", "asked", s.cfg.OnloadPath, "path", o.Path())
	s.onloader.Store(o)
	stop := context.AfterFunc(ctx, func() {
		s.offloadAll()
		o.Close()
	})
	defer stop()
	if err := o.Run(); err != nil && ctx.Err() == nil {
		s.log.Error("onload", "err", err)
	}
}

// offloadAll moves every onloaded flow to the fast path and waits (up to
// 2 s) until the Onloader has sent on the packets already handed up. A
// stopped switch leaves its flows forwarding in the fast path, onloaded
// ones too, and none waits for a reader that is gone (a flow with packets
// in userspace keeps sending its packets there). After a crash, the next
// switch's Onloader drains what was left (packets of flow generations it
// does not know are dropped and counted as unknown).
func (s *Switch) offloadAll() {
	// No revalidator round may re-install a flow onloaded meanwhile
	// (check() writes the placement it read).
	s.rv.roundMu.Lock()
	defer s.rv.roundMu.Unlock()
	p := s.place
	p.seats.Lock()
	defer p.seats.Unlock()
	p.stopped = true
	var fs []flow.Flow
	var uks []*ukey
	s.cache.mu.Lock()
	for _, uk := range s.cache.ukeys {
		if uk != nil && uk.onload {
			uks = append(uks, uk)
			fs = append(fs, flow.Flow{Key: uk.packet.And(uk.mask), Mask: uk.mask, Actions: uk.actions})
		}
	}
	s.cache.mu.Unlock()
	for i, f := range fs {
		if err := s.dp.Modify(f); err != nil {
			s.log.Debug("offloading at stop", "flow", f.String(), "err", err)
			continue
		}
		s.cache.mu.Lock()
		s.cache.setOnload(uks[i], false)
		s.cache.mu.Unlock()
	}
	deadline := time.Now().Add(2 * time.Second)
	for _, uk := range uks {
		for s.dp.OnloadPending(uk.id) > 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
}
