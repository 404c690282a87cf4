package ofproto

import (
	"fmt"
	"time"

	"github.com/nagare-net/nagare/pkg/openflow"
)

type refKind uint8

const (
	refRule      refKind = iota + 1 // a rule hit
	refMiss                         // a table lookup without a hit
	refGroup                        // a group
	refBucket                       // a group bucket
	refLearn                        // a NORMAL learning entry to refresh
	refLearnFlow                    // a flow a learn action adds (learn.go)
	// refClause: a clause flow that completed the conjunction a lookup
	// took (conjunction.go). Revalidation depends on it; statistics go
	// to the conj_id flow, as in Open vSwitch.
	refClause
)

// RuleRef is a stable handle on something a packet went through: a rule,
// a table miss, a group or bucket, a NORMAL learning entry. It stays safe
// to Credit after the rule or group is gone (the credit is then dropped).
type RuleRef struct {
	kind   refKind
	table  *table
	rule   *rule
	body   *groupBody
	bucket int
	mac    macKey
	port   uint32
	p      *Pipeline
	// learned is the flow of a refLearnFlow; rule is then the learning rule.
	learned *openflow.FlowMod
}

// String describes the reference, e.g. "table 0 priority 100 cookie 0x1".
func (r RuleRef) String() string {
	switch r.kind {
	case refRule:
		return fmt.Sprintf("table %d priority %d cookie %#x", r.rule.table, r.rule.priority, r.rule.cookie)
	case refClause:
		return fmt.Sprintf("table %d priority %d cookie %#x (clause)", r.rule.table, r.rule.priority, r.rule.cookie)
	case refMiss:
		return fmt.Sprintf("table %d miss", r.table.id)
	case refGroup:
		return fmt.Sprintf("group %d", r.body.g.id)
	case refBucket:
		return fmt.Sprintf("group %d bucket %d", r.body.g.id, r.bucket)
	case refLearn:
		return fmt.Sprintf("normal learn %x vlan %#x port %d", r.mac.mac, r.mac.vlan, r.port)
	case refLearnFlow:
		return fmt.Sprintf("learn table %d priority %d %s", r.learned.TableID, r.learned.Priority, r.learned.Match)
	}
	return "none"
}

// Credit attributes datapath statistics (packets, bytes, last used) to
// the rules, tables, groups and buckets a cached flow came from,
// refreshes idle timeouts and NORMAL learning entries, and adds or
// refreshes the flows its learn actions learned (learn.go). Call it for every
// packet the pipeline decided, including the translated one.
func (p *Pipeline) Credit(refs []RuleRef, packets, bytes uint64, used time.Time) {
	ns := used.UnixNano()
	for _, r := range refs {
		switch r.kind {
		case refRule:
			r.table.lookups.Add(packets)
			r.table.matched.Add(packets)
			if r.rule.dead.Load() {
				continue
			}
			r.rule.packets.Add(packets)
			r.rule.bytes.Add(bytes)
			for {
				old := r.rule.used.Load()
				if old >= ns || r.rule.used.CompareAndSwap(old, ns) {
					break
				}
			}
		case refMiss:
			r.table.lookups.Add(packets)
		case refGroup:
			r.body.g.packets.Add(packets)
			r.body.g.bytes.Add(bytes)
		case refBucket:
			r.body.counts[r.bucket].packets.Add(packets)
			r.body.counts[r.bucket].bytes.Add(bytes)
		case refLearn:
			if packets > 0 {
				r.p.macs.refresh(r.mac, r.port, used)
			}
		case refLearnFlow:
			if packets > 0 && !throughDeadRule(refs) {
				r.p.applyLearned(r.rule, r.learned)
			}
		}
	}
}

// Expire removes the rules whose hard timeout passed, or whose idle
// timeout passed since their last credited use, as of Config.Now, ages
// the NORMAL learning table, and returns the removed rules together with
// those a group delete removed since the last call. The daemon calls it
// every second and sends FLOW_REMOVED for those with SendFlowRem.
func (p *Pipeline) Expire() []Removed {
	now := p.cfg.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.pending
	p.pending = nil
	var c changeSet
	for _, t := range p.tables {
		if t.timed == 0 {
			continue // nothing to expire: no scan under the write lock
		}
		reasons := map[*rule]uint8{}
		for _, r := range t.removeIf(func(r *rule) bool {
			if r.hardExpired(now) {
				reasons[r] = openflow.FlowRemovedHardTimeout
				return true
			}
			if r.idle != 0 && !now.Before(r.lastUsed().Add(time.Duration(r.idle)*time.Second)) {
				reasons[r] = openflow.FlowRemovedIdleTimeout
				return true
			}
			return false
		}) {
			out = append(out, removedOf(r, reasons[r], now))
			c.addRule(r)
			p.releaseRule(r)
			p.nrules--
		}
	}
	if c.rules != nil {
		p.bumpWith(&c)
	}
	if p.macs.age(now, p.cfg.MACAging) > 0 {
		p.bumpMAC()
	}
	return out
}

// forEachSelected calls fn for the rules a flow or aggregate stats
// request selects (non-strict match, cookie, out_port, out_group).
func (p *Pipeline) forEachSelected(req *openflow.FlowStatsRequest, fn func(*rule)) {
	cm, err := compileMatch(req.Match)
	if err != nil {
		return // a field we cannot have matched on: no rule has it
	}
	if rs, ok := p.candidatesRead(req.TableID, cm, req.Cookie, req.CookieMask, req.OutGroup); ok {
		for _, r := range rs {
			if selected(r, cm, false, 0, req.Cookie, req.CookieMask, req.OutPort, req.OutGroup) {
				fn(r)
			}
		}
		return
	}
	for _, t := range p.tables {
		if req.TableID != openflow.TableAll && t.id != req.TableID {
			continue
		}
		for _, r := range t.rules {
			if selected(r, cm, false, 0, req.Cookie, req.CookieMask, req.OutPort, req.OutGroup) {
				fn(r)
			}
		}
	}
}

// FlowStats answers OFPMP_FLOW, in table then priority order.
func (p *Pipeline) FlowStats(req *openflow.FlowStatsRequest) []openflow.FlowStats {
	p.mu.RLock()
	defer p.mu.RUnlock()
	now := p.cfg.Now()
	var out []openflow.FlowStats
	p.forEachSelected(req, func(r *rule) {
		d := now.Sub(r.created)
		out = append(out, openflow.FlowStats{TableID: r.table, DurationSec: uint32(d / time.Second),
			DurationNsec: uint32(d % time.Second), Priority: r.priority, IdleTimeout: r.idle, HardTimeout: r.hard,
			Flags: r.flags, Cookie: r.cookie, PacketCount: r.packets.Load(), ByteCount: r.bytes.Load(),
			Match: r.match, Instructions: r.insts})
	})
	return out
}

// AggregateStats answers OFPMP_AGGREGATE.
func (p *Pipeline) AggregateStats(req *openflow.AggregateStatsRequest) openflow.AggregateStatsReply {
	p.mu.RLock()
	defer p.mu.RUnlock()
	var a openflow.AggregateStatsReply
	p.forEachSelected((*openflow.FlowStatsRequest)(req), func(r *rule) {
		a.PacketCount += r.packets.Load()
		a.ByteCount += r.bytes.Load()
		a.FlowCount++
	})
	return a
}

// TableStats answers OFPMP_TABLE: one entry per table.
func (p *Pipeline) TableStats() []openflow.TableStats {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]openflow.TableStats, len(p.tables))
	for i, t := range p.tables {
		out[i] = openflow.TableStats{TableID: t.id, ActiveCount: uint32(len(t.rules)),
			LookupCount: t.lookups.Load(), MatchedCount: t.matched.Load()}
	}
	return out
}

// Cookie returns the cookie of the rule r refers to (false for table
// misses, groups and learning entries).
func (r RuleRef) Cookie() (uint64, bool) {
	if r.kind != refRule || r.rule == nil {
		return 0, false
	}
	return r.rule.cookie, true
}
