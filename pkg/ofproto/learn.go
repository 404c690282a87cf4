package ofproto

import (
	"bytes"
	"time"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// learn(...) in translation (Open vSwitch's learn_execute and its xlate
// cache entry XC_LEARN).
//
// Translating learn reads the packet's fields the specs name (so they
// join the megaflow mask: every packet of the megaflow learns the same
// flow) and builds the flow mod, but does not touch the tables: a lookup
// in progress must see the tables as they were. The flow mod rides in
// the translation's Rules as a refLearnFlow reference, and Credit applies
// it when the packets it stands for are counted: the upcall's own packet
// right after translation, then every revalidator round in which the
// cached megaflow saw traffic. So a learned flow that expired comes back
// while its megaflow keeps being used, and a hard_timeout restarts with
// each round of traffic, as kube-proxy's affinity timer restarts with
// each new connection of the client.
//
// Applying a learned flow: a new one is added (the tables change, cached
// megaflows are revalidated); one identical to an installed flow (same
// table, priority, match, cookie, timeouts, actions) only restarts its
// hard timeout and changes nothing else. A translation that went through
// a rule since removed (the learning rule, or a learned flow that
// expired) learns nothing: its megaflow is stale until the revalidator
// translates it again.
//
// delete_learned: while at least one rule carries a learn with
// delete_learned for a (table, cookie), that pair is "held"; when the last
// such rule leaves (deleted, expired, modified to other actions), every
// flow of that table with that cookie is deleted with it (Open vSwitch's
// learned_cookies).

// learn builds the flow a learn action adds for the current packet.
func (x *xlate) learn(a openflow.ActionNXLearn) {
	fm := a.FlowMod(func(s openflow.Subfield) []byte {
		r := subfield(s)
		return shiftDown(x.readField(r.field), r.ofs, r.nbits)
	})
	if int(fm.TableID) >= len(x.p.tables) {
		return
	}
	x.tracef(TraceNote, x.tableID, "learn: table=%d priority=%d,%s actions=%s", fm.TableID, fm.Priority, fm.Match, fm.Instructions)
	x.rules = append(x.rules, RuleRef{kind: refLearnFlow, rule: x.rule, learned: fm, p: x.p})
}

// Learned returns the flows the translation's learn actions add when the
// translated packets are credited.
func (t *Translation) Learned() []*openflow.FlowMod {
	var out []*openflow.FlowMod
	for _, r := range t.Rules {
		if r.kind == refLearnFlow {
			out = append(out, r.learned)
		}
	}
	return out
}

// throughDeadRule reports whether a translation went through a rule that
// has left its table since: then what it learned may be wrong (a packet
// of a cached megaflow that went through a learned flow since expired
// would learn that flow's endpoint again and never let it expire), and
// nothing is learned until the revalidator translates it again.
func throughDeadRule(refs []RuleRef) bool {
	for _, r := range refs {
		if r.kind == refRule && r.rule.dead.Load() {
			return true
		}
	}
	return false
}

// applyLearned adds or refreshes a learned flow (see the banner).
// by is the learning rule; nil for a packet-out's own actions.
func (p *Pipeline) applyLearned(by *rule, fm *openflow.FlowMod) {
	if by != nil && by.dead.Load() {
		return
	}
	if fm.Validate() != nil {
		return
	}
	cm, err := compileMatch(fm.Match)
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if by != nil && by.dead.Load() {
		return
	}
	t := p.tables[fm.TableID]
	probe := rule{priority: fm.Priority, cm: cm}
	if old := t.byMatch[probe.id()]; old != nil && old.cookie == fm.Cookie && old.idle == fm.IdleTimeout &&
		old.hard == fm.HardTimeout && old.flags == fm.Flags && sameInstructions(old.insts, fm.Instructions) {
		old.modified.Store(p.cfg.Now().UnixNano())
		return
	}
	if p.checkInstructions(fm) != nil {
		return
	}
	_ = p.addFlow(fm, cm) // a full table refuses it, as Open vSwitch's learn fails then
}

func sameInstructions(a, b openflow.Instructions) bool {
	ab, err1 := a.MarshalBinary()
	bb, err2 := b.MarshalBinary()
	return err1 == nil && err2 == nil && bytes.Equal(ab, bb)
}

// learnKeys are the (table, cookie) pairs r's delete_learned learns hold.
func learnKeys(r *rule) []ruleCookie {
	var out []ruleCookie
	for _, in := range r.insts {
		var as openflow.Actions
		switch in := in.(type) {
		case openflow.InstApplyActions:
			as = in.Actions
		case openflow.InstWriteActions:
			as = in.Actions
		}
		for _, a := range as {
			if l, ok := a.(openflow.ActionNXLearn); ok && l.Flags&openflow.NXLearnFlagDeleteLearned != 0 {
				out = append(out, ruleCookie{l.Table, l.Cookie})
			}
		}
	}
	return out
}

// holdRule counts a rule entering a table: its controller cookie and
// its delete_learned learns. Callers hold p.mu.
func (p *Pipeline) holdRule(r *rule) {
	p.cookies.hold(r)
	for _, k := range learnKeys(r) {
		p.learners[k]++
	}
}

// releaseRule counts a rule leaving a table and deletes the flows a
// delete_learned learn of it held when it was the last to hold them.
// Callers hold p.mu and have finished iterating the table r left.
func (p *Pipeline) releaseRule(r *rule) {
	p.cookies.release(r)
	p.releaseLearners(r)
}

func (p *Pipeline) releaseLearners(r *rule) {
	for _, k := range learnKeys(r) {
		if p.learners[k]--; p.learners[k] > 0 {
			continue
		}
		delete(p.learners, k)
		p.flushLearned(k)
	}
}

// flushLearned deletes the flows of table k.table with cookie k.cookie;
// their FLOW_REMOVED (reason DELETE) goes out with the next Expire.
func (p *Pipeline) flushLearned(k ruleCookie) {
	if int(k.table) >= len(p.tables) {
		return
	}
	now := p.cfg.Now()
	gone := p.tables[k.table].removeIf(func(r *rule) bool { return r.cookie == k.cookie })
	for _, r := range gone {
		p.pending = append(p.pending, removedOf(r, openflow.FlowRemovedDelete, now))
		p.nrules--
	}
	var c changeSet
	for _, r := range gone {
		c.addRule(r)
		p.releaseRule(r)
	}
	if c.rules != nil {
		p.bumpWith(&c)
	}
}

// hardExpired reports whether r's hard timeout ran out: it counts from
// the rule's last add or learn refresh.
func (r *rule) hardExpired(now time.Time) bool {
	return r.hard != 0 && !now.Before(time.Unix(0, r.modified.Load()).Add(time.Duration(r.hard)*time.Second))
}
