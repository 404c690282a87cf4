package switchd

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/nagare-net/nagare/pkg/datapath"
	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/ofproto"
)

// revalidator keeps the fast path honest. Each round it dumps the cached
// flows with their counters and
//   - credits the new packets and bytes to the OpenFlow rules each flow
//     came from (so dump-flows counters are true, and idle timeouts see use),
//   - removes flows unused for IdleTimeout (ARP's: NeighborIdleTimeout),
//   - if the pipeline changed since a flow was checked, translates the
//     flow's packet again (after changes of the NORMAL learning table
//     alone, only flows whose NORMAL lookups would now answer otherwise:
//     one new address must not re-translate every cached flow): same actions and a mask no wider than the
//     installed one → keep; other actions under a covering mask → modify
//     in place; otherwise delete (the next packet is upcalled afresh),
//   - expires OpenFlow rules whose timeouts passed (FLOW_REMOVED).
type revalidator struct {
	s    *Switch
	kick chan kick
	// poke asks for a round soon without waiting for it: a learn action
	// added a flow (upcall.go), and the cached flows it changes (a
	// client's next connection, whose first pass no longer goes to the
	// select group) should follow now, not at the next tick.
	poke chan struct{}
	// roundMu is held for a whole round, and by flushCache: a flush
	// between a round's dump and its bookkeeping would have the round
	// re-create ukeys (or flows) for what the flush deleted.
	roundMu sync.Mutex

	mu           sync.Mutex
	lastVersion  uint64
	lastChange   time.Time
	rounds       uint64
	lastDuration time.Duration
	maxDuration  time.Duration
	lastFlows    int
	idleDeleted  uint64
	staleDeleted uint64
	modified     uint64
	revalidated  uint64
	macSkipped   uint64
	unaffected   uint64
	recircFreed  uint64
	ruleExpired  uint64
}

// revalidatorLockRun is how many flows a round judges per hold of the
// flow cache's lock (a RangeStats chunk is 4096): ~50 µs, the longest the
// upcall handler waits to record its installs.
const revalidatorLockRun = 512

// orphanSettle is how long the pipeline must stay unchanged before flows
// inherited from a previous process are judged against it: a controller
// re-programming a restarted switch should finish first, or its traffic
// would stop while the tables are half full.
const orphanSettle = 2 * time.Second

func newRevalidator(s *Switch) *revalidator {
	return &revalidator{s: s, kick: make(chan kick), poke: make(chan struct{}, 1), lastVersion: s.pl.Version()}
}

// conntrackSweepInterval is how often expired connections are deleted.
const conntrackSweepInterval = 5 * time.Second

// kick asks the revalidator's goroutine for a round now; done is closed
// when it has run.
type kick struct {
	done chan struct{}
	all  bool // translate every cached flow again, as after a table change
}

func (r *revalidator) run(ctx context.Context) {
	t := time.NewTicker(r.s.cfg.RevalidateInterval)
	defer t.Stop()
	expire := time.NewTicker(time.Second)
	defer expire.Stop()
	// Expired connections are already gone for the fast path; the sweep
	// gives their room back (an unswept table fills up at the rate of
	// new connections, not of live ones).
	sweep := time.NewTicker(conntrackSweepInterval)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.round()
		case k := <-r.kick:
			r.roundOf(k.all)
			close(k.done)
		case <-r.poke:
			r.round()
		case now := <-expire.C:
			r.expireRules()
			r.s.actionPacer.expire(now, false)
			r.s.missPacer.expire(now, false)
		case <-sweep.C:
			if n, err := r.s.dp.SweepConntrack(); err != nil {
				r.s.log.Warn("conntrack sweep", "err", err)
			} else if n > 0 {
				r.s.log.Debug("conntrack sweep", "expired", n)
			}
		}
	}
}

// soon asks for a round without waiting (never blocks).
func (r *revalidator) soon() {
	select {
	case r.poke <- struct{}{}:
	default: // one is pending already
	}
}

// sync returns once the fast path agrees with the pipeline as it is now
// (a round ran after the last change). Used by BARRIER.
func (r *revalidator) sync() {
	r.mu.Lock()
	current := r.lastVersion == r.s.pl.Version()
	r.mu.Unlock()
	if current {
		return
	}
	done := make(chan struct{})
	select {
	case r.kick <- kick{done: done}:
		<-done
	case <-time.After(5 * time.Second):
		// The revalidator is not running (switch stopping): do not hang.
	}
}

// force runs a round now (through the revalidator's goroutine when it is
// running, so rounds never overlap). With all, the round translates every
// cached flow again and compares, the work a table change causes, without
// changing the tables: benchmarks time it on a live switch (nagarectl
// revalidate --change) and must leave its tables as they were.
func (r *revalidator) force(all bool) {
	done := make(chan struct{})
	select {
	case r.kick <- kick{done: done, all: all}:
		<-done
	case <-time.After(5 * time.Second):
	}
}

func (r *revalidator) round() { r.roundOf(false) }

// roundOf is one round; all re-translates flows whose version is current
// too.
func (r *revalidator) roundOf(all bool) {
	r.roundMu.Lock()
	defer r.roundMu.Unlock()
	s := r.s
	start := time.Now()
	version, full := s.pl.Versions()
	r.mu.Lock()
	if version != r.lastVersion {
		r.lastChange = start
	}
	settled := start.Sub(r.lastChange) >= orphanSettle
	r.mu.Unlock()

	var idle, stale, modified, checked, unaffected uint64
	// What changed since a flow's version, per version (flows checked in
	// the same round share it): nil means anything may have.
	since := map[uint64]*ofproto.Changes{}
	changesSince := func(v uint64) *ofproto.Changes {
		c, ok := since[v]
		if !ok {
			c = s.pl.ChangesSince(v)
			since[v] = c
		}
		return c
	}
	var recheck []*ukey // to translate again
	var macOnly []*ukey // changed since: the learning table only
	var deletes []*ukey // idle, then stale: deleted together at the end
	var missing []uint32
	total := 0
	err := s.dp.RangeStats(func(ids []uint32, stats []datapath.Stats) {
		total += len(ids)
		s.cache.mu.Lock()
		defer s.cache.mu.Unlock()
		for i, id := range ids {
			if i%revalidatorLockRun == 0 && i > 0 {
				// Let the upcall handler record the flows it
				// installed meanwhile (it waits for s.cache.mu).
				s.cache.mu.Unlock()
				s.cache.mu.Lock()
			}
			uk := s.cache.get(id)
			if uk == nil {
				missing = append(missing, id)
				continue
			}
			st := &stats[i]
			uk.meter.Sample(st.Packets, start)
			if st.Packets > uk.packets {
				dp, db := st.Packets-uk.packets, st.Bytes-uk.bytes
				uk.packets, uk.bytes = st.Packets, st.Bytes
				if len(uk.rules) > 0 {
					s.pl.Credit(uk.rules, dp, db, st.Used)
				}
			}
			last := uk.created
			if st.Used.After(last) {
				last = st.Used
			}
			switch {
			case start.Sub(last) > s.cfg.idleTimeout(uk):
				deletes = append(deletes, uk)
			case all || uk.orphan:
				if !uk.orphan || settled {
					recheck = append(recheck, uk)
				}
			case uk.version < full:
				// Only what a change touched (a table the flow looked
				// up, a rule it hit, a group it ran) can change its
				// translation (ofproto/changes.go).
				if c := changesSince(uk.version); c == nil || c.Affects(uk.rules) {
					recheck = append(recheck, uk)
				} else {
					unaffected++
					macOnly = append(macOnly, uk) // learning table changes may remain
				}
			case uk.version != version:
				macOnly = append(macOnly, uk)
			}
		}
	})
	if err != nil {
		s.log.Warn("revalidator dump", "err", err)
		return
	}
	// A flow without a ukey was left by an earlier process after adopt ran,
	// or its install is still being recorded: judge it from the fast path's
	// own record (an install in progress overwrites this orphan ukey).
	if len(missing) > 0 {
		s.cache.mu.Lock()
		for _, id := range missing {
			if f, ok := s.dp.FlowByID(id); ok && s.cache.get(id) == nil {
				s.cache.set(id, &ukey{packet: f.Key, mask: f.Mask, actions: f.Actions, created: start, orphan: true, onload: f.Onload})
			}
		}
		s.cache.mu.Unlock()
	}
	idle = uint64(len(deletes))
	// Flows that saw only learning table changes since their last check
	// stay as they are while their NORMAL lookups answer the same.
	var skipped uint64
	for _, uk := range macOnly {
		if s.pl.MACDepsHold(uk.macDeps) {
			uk.version = version
			skipped++
		} else {
			recheck = append(recheck, uk)
		}
	}
	// Translating again is the costly part of a round after a table
	// change: spread it over the CPUs (the pipeline is safe for
	// concurrent translations, the fast path for concurrent updates).
	checked = uint64(len(recheck))
	var mu sync.Mutex
	// First passes before recirculated ones: a recirculated flow's
	// frozen state is registered again by translating the first pass
	// that leads to it (after a restart, recirc.go in pkg/ofproto).
	first, second := recheck[:0:0], recheck[:0:0]
	for _, uk := range recheck {
		if uk.packet.RecircID == 0 {
			first = append(first, uk)
		} else {
			second = append(second, uk)
		}
	}
	for _, batch := range [][]*ukey{first, second} {
		var wg sync.WaitGroup
		workers := min(runtime.NumCPU(), 1+len(batch)/512)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				var mod uint64
				var del []*ukey
				for j := w; j < len(batch); j += workers {
					switch r.check(batch[j], version) {
					case verdictDelete:
						del = append(del, batch[j])
					case verdictModified:
						mod++
					}
				}
				mu.Lock()
				stale += uint64(len(del))
				deletes = append(deletes, del...)
				modified += mod
				mu.Unlock()
			}(w)
		}
		wg.Wait()
	}
	r.deleteAll(deletes)
	r.place()
	dur := time.Since(start)
	r.mu.Lock()
	r.lastVersion = version
	r.rounds++
	r.lastDuration, r.lastFlows = dur, total
	r.maxDuration = max(r.maxDuration, dur)
	r.idleDeleted += idle
	r.staleDeleted += stale
	r.modified += modified
	r.revalidated += checked
	r.macSkipped += skipped
	r.unaffected += unaffected
	free := r.rounds%recircFreeRounds == 0
	r.mu.Unlock()
	if free {
		r.freeRecirc()
	}
}

// recircFreeRounds is how often (in rounds) frozen recirculation states
// that no cached flow names are freed.
const recircFreeRounds = 20

// freeRecirc frees the pipeline's frozen recirculation states that no
// cached flow names, as a recirculation (a first pass) or as its
// recirc_id (a later pass), and returns how many (ofproto/recirc.go: a
// state handed out since the previous call stays, for a flow being
// installed now).
func (r *revalidator) freeRecirc() int {
	s := r.s
	inUse := map[uint32]bool{}
	s.cache.mu.Lock()
	for _, uk := range s.cache.ukeys {
		if uk == nil {
			continue
		}
		if uk.packet.RecircID != 0 {
			inUse[uk.packet.RecircID] = true
		}
		for _, a := range uk.actions {
			if rc, ok := a.(flow.Recirc); ok {
				inUse[rc.ID] = true
			}
		}
	}
	s.cache.mu.Unlock()
	n := s.pl.FreeRecirc(inUse)
	r.mu.Lock()
	r.recircFreed += uint64(n)
	r.mu.Unlock()
	return n
}

type verdict int

const (
	verdictKeep verdict = iota
	verdictModified
	verdictDelete
)

// check re-translates one cached flow against the current pipeline.
func (r *revalidator) check(uk *ukey, version uint64) verdict {
	s := r.s
	x, err := s.translate(uk.packet, false)
	if err != nil || x.NoCache || !uk.mask.Covers(x.mask) {
		return verdictDelete
	}
	uk.rules, uk.macDeps, uk.version, uk.orphan = x.Rules, x.MACDeps, version, false
	if actionsEqual(x.actions, uk.actions) {
		return verdictKeep
	}
	if err := s.dp.Modify(flow.Flow{Key: uk.packet.And(uk.mask), Mask: uk.mask, Actions: x.actions, Onload: uk.onload}); err != nil {
		return verdictDelete
	}
	uk.actions = x.actions
	return verdictModified
}

// deleteAll removes cached flows and their ukeys, a few thousand per
// datapath call.
func (r *revalidator) deleteAll(uks []*ukey) {
	s := r.s
	const chunk = 4096
	fs := make([]flow.Flow, 0, min(chunk, len(uks)))
	errs := make([]error, min(chunk, len(uks)))
	for i := 0; i < len(uks); i += chunk {
		part := uks[i:min(i+chunk, len(uks))]
		fs = fs[:0]
		for _, uk := range part {
			fs = append(fs, flow.Flow{Key: uk.packet, Mask: uk.mask})
		}
		s.dp.DeleteBatch(fs, errs[:len(part)])
		s.cache.mu.Lock()
		for j, uk := range part {
			if err := errs[j]; err != nil && !errors.Is(err, datapath.ErrNoFlow) {
				s.log.Debug("revalidator delete", "flow", flow.Format(uk.packet, uk.mask), "err", err)
				continue
			}
			if s.cache.get(uk.id) == uk {
				s.cache.del(uk.id)
			}
		}
		s.cache.mu.Unlock()
	}
}

func actionsEqual(a, b []flow.Action) bool {
	return slices.EqualFunc(a, b, actionEqual)
}

// actionEqual compares two actions; the MAC rewrites hold slices, every
// other action is a comparable value.
func actionEqual(x, y flow.Action) bool {
	switch a := x.(type) {
	case flow.SetEthSrc:
		b, ok := y.(flow.SetEthSrc)
		return ok && bytes.Equal(a.MAC, b.MAC)
	case flow.SetEthDst:
		b, ok := y.(flow.SetEthDst)
		return ok && bytes.Equal(a.MAC, b.MAC)
	}
	switch y.(type) {
	case flow.SetEthSrc, flow.SetEthDst:
		return false
	}
	return x == y
}

// expireRules removes OpenFlow rules whose timeouts passed.
func (r *revalidator) expireRules() {
	s := r.s
	removed := s.pl.Expire()
	r.mu.Lock()
	r.ruleExpired += uint64(len(removed))
	r.mu.Unlock()
	for _, rm := range removed {
		s.sendFlowRemoved(rm)
	}
}

// RevalidatorStats is what the revalidator reports.
type RevalidatorStats struct {
	Rounds       uint64        `json:"rounds"`
	LastDuration time.Duration `json:"last_duration_ns"`
	MaxDuration  time.Duration `json:"max_duration_ns"`
	LastFlows    int           `json:"last_flows"`
	IdleDeleted  uint64        `json:"idle_deleted"`
	StaleDeleted uint64        `json:"stale_deleted"`
	Modified     uint64        `json:"modified"`
	Revalidated  uint64        `json:"revalidated"`
	// MACSkipped counts flows not translated again after learning table
	// changes, because none of their NORMAL lookups changed.
	MACSkipped   uint64 `json:"mac_skipped"`
	RulesExpired uint64 `json:"rules_expired"`
	// Unaffected counts flows not translated again after a table or
	// group change, because it touched nothing their translation
	// depended on.
	Unaffected uint64 `json:"unaffected"`
	// RecircFreed counts frozen recirculation states freed because no
	// cached flow named them any more.
	RecircFreed uint64 `json:"recirc_freed"`
}

func (r *revalidator) stats() RevalidatorStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return RevalidatorStats{r.rounds, r.lastDuration, r.maxDuration, r.lastFlows, r.idleDeleted, r.staleDeleted, r.modified, r.revalidated, r.macSkipped, r.ruleExpired, r.unaffected, r.recircFreed}
}

// idleTimeout is how long uk's flow may go unused before a round removes
// it: NeighborIdleTimeout for ARP, whose flows a stopped switch's pods
// need to keep their neighbours (the flows a neighbour's refresh takes
// were made when it was first resolved, and refreshes come every 15-45 s
// while a pair talks: idle 10 s, each refresh would be an upcall, and one
// while the switch is stopped or restarting would fail and leave the pair
// without a neighbour).
const ethTypeARP = 0x0806

func (c *Config) idleTimeout(uk *ukey) time.Duration {
	if uk.packet.EthType == ethTypeARP {
		return c.NeighborIdleTimeout
	}
	return c.IdleTimeout
}
