package ofproto

import (
	"sort"
	"sync/atomic"
	"time"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// A table keeps its rules in one slice sorted by priority (highest first,
// then oldest first) and scans it with early exit. Lookup cost is
// O(rules above the hit); see bench_test.go for the numbers. An index by
// (priority, match) makes identical-rule replacement O(1).

// table is one flow table.
type table struct {
	id      uint8
	rules   []*rule // priority desc, then age: stats order, and the reference scan
	byMatch map[ruleID]*rule
	cls     classifier // what lookups use (classifier.go)
	// clauses holds the clause flows (actions: only conjunction), which
	// never match on their own; conj indexes them by conjunction
	// (conjunction.go).
	clauses classifier
	conj    conjIndex
	ix      *ruleIndex // the pipeline's index by group and cookie (index.go)
	timed   int        // rules with an idle or hard timeout: Expire skips tables without

	lookups atomic.Uint64
	matched atomic.Uint64
}

// ruleID identifies a rule within a table: OpenFlow's "identical match
// and priority".
type ruleID struct {
	priority  uint16
	val, mask words
	never     bool
}

// rule is one flow entry.
type rule struct {
	table    uint8
	priority uint16
	match    openflow.Match
	cm       *compiledMatch
	cookie   uint64
	idle     uint16
	hard     uint16
	flags    uint16
	insts    openflow.Instructions
	groups   []uint32 // groups the instructions refer to
	meter    uint32   // the meter instruction's meter, 0 for none
	outPorts []uint32 // ports the instructions output to
	// conjs are the conjunction actions of a clause flow, nil for any
	// other rule (conjunction.go).
	conjs   []openflow.ActionNXConjunction
	miss    bool // the table-miss entry: priority 0, empty match
	seq     uint64
	created time.Time

	packets atomic.Uint64
	bytes   atomic.Uint64
	used    atomic.Int64 // unix ns of the last credited packet
	// modified is unix ns of the last add or learn refresh: the hard
	// timeout counts from it (Open vSwitch's rule->modified).
	modified atomic.Int64
	dead     atomic.Bool // removed from its table; stale refs ignore it
}

func (r *rule) id() ruleID { return r.cm.id(r.priority) }

// id is the identity of a rule with this match at priority.
func (cm *compiledMatch) id(priority uint16) ruleID {
	return ruleID{priority: priority, val: cm.val, mask: cm.mask, never: cm.never}
}

// lastUsed is the later of creation and the last credited packet.
func (r *rule) lastUsed() time.Time {
	u := r.used.Load()
	if u == 0 {
		return r.created
	}
	t := time.Unix(0, u)
	if t.Before(r.created) {
		return r.created
	}
	return t
}

func newTable(id uint8, ix *ruleIndex) *table {
	return &table{id: id, byMatch: map[ruleID]*rule{}, ix: ix}
}

// insert adds r, keeping the order: priority descending, then age.
func (t *table) insert(r *rule) {
	i := sort.Search(len(t.rules), func(i int) bool {
		o := t.rules[i]
		return o.priority < r.priority || (o.priority == r.priority && o.seq > r.seq)
	})
	t.rules = append(t.rules, nil)
	copy(t.rules[i+1:], t.rules[i:])
	t.rules[i] = r
	t.byMatch[r.id()] = r
	t.classify(r)
	t.ix.add(r)
	t.timed += r.timedCount()
}

// classify adds r to the classifier that looks it up: clause flows to
// t.clauses (and the conjunction index), other rules to t.cls.
func (t *table) classify(r *rule) {
	if r.conjs == nil {
		t.cls.add(r)
		return
	}
	t.clauses.add(r)
	t.conj.add(r, t.clauses.byMask[r.cm.mask])
}

// declassify undoes classify.
func (t *table) declassify(r *rule) {
	if r.conjs == nil {
		t.cls.remove(r)
		return
	}
	t.conj.remove(r, t.clauses.byMask[r.cm.mask])
	t.clauses.remove(r)
}

// timedCount is 1 for a rule with a timeout.
func (r *rule) timedCount() int {
	if r.idle != 0 || r.hard != 0 {
		return 1
	}
	return 0
}

// replace puts n in o's place (same priority, match and age).
func (t *table) replace(o, n *rule) {
	if i := indexOf(t.rules, o); i >= 0 {
		t.rules[i] = n
	}
	o.dead.Store(true)
	t.byMatch[n.id()] = n
	if o.conjs == nil && n.conjs == nil {
		t.cls.replace(o, n)
	} else {
		// A clause flow's conjunctions change, or a rule becomes a
		// clause flow or stops being one.
		t.declassify(o)
		t.classify(n)
	}
	t.ix.remove(o)
	t.ix.add(n)
	t.timed += n.timedCount() - o.timedCount()
}

// remove deletes r, found by its position in the order.
func (t *table) remove(r *rule) {
	i := indexOf(t.rules, r)
	if i < 0 {
		return
	}
	t.rules = removeAt(t.rules, i)
	t.forget(r)
}

// forget drops a rule taken out of t.rules from the other indexes.
func (t *table) forget(r *rule) {
	r.dead.Store(true)
	delete(t.byMatch, r.id())
	t.declassify(r)
	t.ix.remove(r)
	t.timed -= r.timedCount()
}

// indexOf finds r in rs, which is in priority-then-age order (as
// t.rules and every subtable's rules are), by binary search: -1 if absent.
func indexOf(rs []*rule, r *rule) int {
	i := sort.Search(len(rs), func(i int) bool { return !better(rs[i], r) })
	if i < len(rs) && rs[i] == r {
		return i
	}
	return -1
}

func removeAt(rs []*rule, i int) []*rule {
	copy(rs[i:], rs[i+1:])
	rs[len(rs)-1] = nil
	return rs[:len(rs)-1]
}

// removeIf deletes the rules for which del is true and returns them.
func (t *table) removeIf(del func(*rule) bool) []*rule {
	var out []*rule
	kept := t.rules[:0]
	for _, r := range t.rules {
		if del(r) {
			out = append(out, r)
			t.forget(r)
			continue
		}
		kept = append(kept, r)
	}
	clear(t.rules[len(kept):])
	t.rules = kept
	return out
}

// lookup finds the highest-priority rule matching the translation's
// current packet, with Open vSwitch's conjunctive matches
// (conjunction.go), and records in the megaflow mask what the decision
// depended on (mask.go).
func (x *xlate) lookup(t *table) *rule {
	hard := x.lookupHard(t)
	if len(t.clauses.subtables) == 0 {
		return hard
	}
	return x.lookupConj(t, hard)
}

// lookupHard finds the highest-priority rule that is not a clause flow.
func (x *xlate) lookupHard(t *table) *rule {
	if linearLookup {
		return x.lookupLinear(t)
	}
	return x.lookupTSS(&t.cls)
}

// linearLookup switches lookups to the reference scan (tests).
var linearLookup = false

// lookupLinear scans the rules in priority order.
func (x *xlate) lookupLinear(t *table) *rule {
	pw := x.packet()
	for _, r := range t.rules {
		if r.conjs != nil {
			continue // clause flows: lookupConj
		}
		if r.cm.matches(pw) {
			x.needRule(r.cm)
			return r
		}
		x.needMiss(r.cm, pw)
	}
	return nil
}
