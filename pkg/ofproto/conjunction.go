package ofproto

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"strings"
)

// Conjunctive matches, as Open vSwitch has them (ovs-fields(7),
// "Conjunctive Match Fields"; ovs-actions(7), "conjunction"). A flow whose
// actions are only conjunction(id,k/n) (and notes) is a clause flow: it
// never matches by itself. Lookup in a table (Open vSwitch's classifier.c,
// classifier_lookup__):
//
//  1. the best matching rule that is not a clause flow is the hard match,
//     at priority h (none: h below every priority);
//  2. the clause flows that match the packet at priorities above h are
//     taken priority by priority, highest first. At priority p,
//     conjunction id completes when, for each clause 1..n, a flow of
//     priority p with conjunction(id,k/n) matches (and at least n flows
//     match at p, as Open vSwitch counts them);
//  3. for a completed id, the table is looked up again with the packet's
//     conj_id set to id, clause flows ignored: whatever that finds (the
//     conj_id=id flow, or a normal flow of higher priority than it, or
//     the hard match) is the result. conj_id is zero again afterwards, in
//     every later lookup. If it finds nothing, the next completed id, then
//     the next lower priority, is tried;
//  4. nothing completes: the hard match.
//
// So a conjunction of higher priority than the normal flow that matches
// wins only if it completes, and clause flows are invisible otherwise. When
// several ids complete at one priority Open vSwitch takes one it leaves
// undefined; nagare takes the lowest id.
//
// The megaflow mask. The hard match and the lookup with conj_id add their
// bits as any lookup does (mask.go). Each subtable of clause flows above h
// is probed; one where no flow matches adds the bits that prove it (its
// staged or prefix miss, or each rule's miss), as Open vSwitch's probe does.
// A subtable where flows match would add its whole mask (the source
// address of 10.0.0.1/32 to prove which of 100 sources matched): it is
// held back and added only when the decision needs it:
//
//   - the conjunction taken needs one matching flow per clause (a witness),
//     so the subtables of its witnesses;
//   - every conjunction above it (or above h when none is taken) needs a
//     proof that it failed: one clause none of whose flows matched, with
//     each of that clause's flows shown not to match. A clause whose flows
//     all sit in subtables that matched nothing costs no bit; else the
//     cheapest clause's held subtables are added.
//
// A packet that matches the sources of a policy but none of its ports
// thus caches a flow that pins the port (or the prefix of it that proves
// the miss), not the source. Conjunctions whose clauses lie in the same
// subtables form a group (conjGroup) and get one proof per group and set
// of matched clauses, so a table of a thousand policies costs a lookup
// O(groups), not O(policies); past maxProvedConjs proofs every held
// subtable is added instead (what Open vSwitch un-wildcards).

// maxProvedConjs bounds the conjunctions and groups whose failure a
// lookup proves one by one (proveConj); a variable so that tests can
// change it.
var maxProvedConjs = 64

// conjKey names a conjunction: its id at one priority (flows of one id at
// other priorities are other conjunctions), as priority<<32 | id (a
// map key that hashes fast).
type conjKey uint64

func mkConjKey(priority uint16, id uint32) conjKey { return conjKey(priority)<<32 | conjKey(id) }

func (k conjKey) priority() uint16 { return uint16(k >> 32) }
func (k conjKey) id() uint32       { return uint32(k) }

// conjunction is the clause flows of one conjunction.
type conjunction struct {
	// n is the clause count of the first flow added (flows of one id
	// that disagree on n are undefined in Open vSwitch).
	n uint8
	// subs[k-1] counts clause k's flows by the subtable that holds them.
	subs  []map[*subtable]int
	flows int
	group *conjGroup
}

// conjGroup is the conjunctions of one priority whose clauses lie in the
// same subtables (a NetworkPolicy table's thousand rules: sources in one
// subtable, ports in another, destinations in a third). Which clause
// proves that one of them failed, when none of its flows matched, is the
// same for all: a lookup works it out once per group.
type conjGroup struct {
	key      string
	priority uint16
	subs     [][]*subtable // clause k's subtables are subs[k-1]
	members  int
}

// conjIndex is a table's clause flows by conjunction, the conjunctions by
// group, and the groups with flows in each subtable of clause flows.
type conjIndex struct {
	conjs  map[conjKey]*conjunction
	groups map[string]*conjGroup
	bySub  map[*subtable]map[*conjGroup]int
}

func (ix *conjIndex) add(r *rule, st *subtable) {
	if ix.conjs == nil {
		ix.conjs, ix.groups, ix.bySub = map[conjKey]*conjunction{}, map[string]*conjGroup{}, map[*subtable]map[*conjGroup]int{}
	}
	for _, c := range r.conjs {
		k := mkConjKey(r.priority, c.ID)
		cj := ix.conjs[k]
		if cj == nil {
			cj = &conjunction{n: c.NClauses}
			ix.conjs[k] = cj
		}
		for len(cj.subs) < int(c.Clause) {
			cj.subs = append(cj.subs, map[*subtable]int{})
		}
		cj.subs[c.Clause-1][st]++
		cj.flows++
		ix.regroup(k, cj)
	}
}

func (ix *conjIndex) remove(r *rule, st *subtable) {
	for _, c := range r.conjs {
		k := mkConjKey(r.priority, c.ID)
		cj := ix.conjs[k]
		if cj == nil {
			continue
		}
		m := cj.subs[c.Clause-1]
		if m[st]--; m[st] <= 0 {
			delete(m, st)
		}
		if cj.flows--; cj.flows <= 0 {
			delete(ix.conjs, k)
		}
		ix.regroup(k, cj)
	}
}

// regroup moves cj to the group of its clauses' subtables now.
func (ix *conjIndex) regroup(k conjKey, cj *conjunction) {
	if g := cj.group; g != nil {
		cj.group = nil
		if g.members--; g.members == 0 {
			delete(ix.groups, g.key)
			for _, sts := range g.subs {
				for _, st := range sts {
					if m := ix.bySub[st]; m != nil {
						if m[g]--; m[g] <= 0 {
							delete(m, g)
						}
						if len(m) == 0 {
							delete(ix.bySub, st)
						}
					}
				}
			}
		}
	}
	if cj.flows <= 0 {
		return
	}
	subs := make([][]*subtable, cj.n)
	var key strings.Builder
	fmt.Fprintf(&key, "%d", k.priority())
	for c := range subs {
		if c < len(cj.subs) {
			for st := range cj.subs[c] {
				subs[c] = append(subs[c], st)
			}
		}
		slices.SortFunc(subs[c], func(a, b *subtable) int { return cmp.Compare(a.id, b.id) })
		key.WriteByte('|')
		for _, st := range subs[c] {
			fmt.Fprintf(&key, "%d,", st.id)
		}
	}
	g := ix.groups[key.String()]
	if g == nil {
		g = &conjGroup{key: key.String(), priority: k.priority(), subs: subs}
		ix.groups[g.key] = g
		for _, sts := range subs {
			for _, st := range sts {
				m := ix.bySub[st]
				if m == nil {
					m = map[*conjGroup]int{}
					ix.bySub[st] = m
				}
				m[g]++
			}
		}
	}
	g.members++
	cj.group = g
}

// clauseProbe is one subtable of clause flows where flows match.
type clauseProbe struct {
	st     *subtable
	chain  []*rule // its matching clause flows above the hard match, priority desc
	proof  words   // the mask bits that prove what matches in it
	needed bool
}

// softMatch is a matching clause flow and the probe that found it.
type softMatch struct {
	r     *rule
	probe int
}

// probeClauses finds the clause flows above priority above that match
// the packet. Subtables where none does add their proof to the mask at
// once; the others are returned with theirs held back.
func (x *xlate) probeClauses(c *classifier, above int) []clauseProbe {
	pw := x.packet()
	held := make([]clauseProbe, 0, min(len(c.subtables), 8))
	for _, st := range c.subtables {
		if int(st.maxPri) <= above {
			break
		}
		saved := x.mask
		x.mask = words{}
		var chain []*rule
		if len(st.rules) <= smallSubtable {
			for _, r := range st.rules {
				if int(r.priority) <= above {
					break
				}
				if r.cm.matches(pw) {
					x.needRule(r.cm)
					chain = append(chain, r)
				} else {
					x.needMiss(r.cm, pw)
				}
			}
		} else if !x.stagedMiss(st, pw) {
			x.need(&st.mask)
			for _, r := range st.byVal[st.key(pw)] {
				if int(r.priority) <= above {
					break
				}
				if !r.cm.never {
					chain = append(chain, r)
				}
			}
		}
		proof := x.mask
		x.mask = saved
		if len(chain) == 0 {
			x.mask.or(&proof)
			continue
		}
		held = append(held, clauseProbe{st: st, chain: chain, proof: proof})
	}
	return held
}

// allClauses is the clause bit set of a complete n-clause conjunction.
func allClauses(n uint8) uint64 {
	if n >= 64 {
		return ^uint64(0)
	}
	return 1<<n - 1
}

// conjAcc is what the matching clause flows of one priority gave one id.
type conjAcc struct {
	id   uint32
	n    uint8
	bits uint64
}

// completed appends to ids the ids that the clause flows of one priority
// complete, lowest first.
func (x *xlate) completed(level []softMatch, ids []uint32) []uint32 {
	var buf [8]conjAcc
	few := buf[:0]
	var many map[uint32]conjAcc // past len(buf) ids (policies sharing a flow)
	for _, s := range level {
		for _, c := range s.r.conjs {
			if int(c.NClauses) > len(level) {
				continue // too few flows match to complete it (Open vSwitch's count)
			}
			if many != nil {
				a, ok := many[c.ID]
				if !ok {
					a = conjAcc{id: c.ID, n: c.NClauses}
				}
				a.bits |= 1 << (c.Clause - 1)
				many[c.ID] = a
				continue
			}
			i := 0
			for i < len(few) && few[i].id != c.ID {
				i++
			}
			if i < len(few) || len(few) < cap(few) {
				if i == len(few) {
					few = append(few, conjAcc{id: c.ID, n: c.NClauses})
				}
				few[i].bits |= 1 << (c.Clause - 1)
				continue
			}
			if x.conjAcc == nil {
				x.conjAcc = map[uint32]conjAcc{}
			}
			many = x.conjAcc
			clear(many)
			for _, a := range few {
				many[a.id] = a
			}
			many[c.ID] = conjAcc{id: c.ID, n: c.NClauses, bits: 1 << (c.Clause - 1)}
		}
	}
	done := func(a conjAcc) {
		if all := allClauses(a.n); a.bits&all == all {
			ids = append(ids, a.id)
		}
	}
	if many != nil {
		for _, a := range many {
			done(a)
		}
	} else {
		for _, a := range few {
			done(a)
		}
	}
	slices.Sort(ids)
	return ids
}

// lookupConj finishes a lookup in a table with clause flows, given its
// hard match (see the top of this file).
func (x *xlate) lookupConj(t *table, hard *rule) *rule {
	above := -1
	if hard != nil {
		above = int(hard.priority)
	}
	if int(t.clauses.subtables[0].maxPri) <= above {
		return hard
	}
	held := x.probeClauses(&t.clauses, above)
	soft := make([]softMatch, 0, 2*len(held))
	for i := range held {
		for _, r := range held[i].chain {
			soft = append(soft, softMatch{r, i})
		}
	}
	slices.SortStableFunc(soft, func(a, b softMatch) int { return int(b.r.priority) - int(a.r.priority) })
	var void map[conjKey]bool // completed, but the conj_id lookup found nothing
	var idBuf [4]uint32
	for i := 0; i < len(soft); {
		p := soft[i].r.priority
		j := i
		for j < len(soft) && soft[j].r.priority == p {
			j++
		}
		ids := x.completed(soft[i:j], idBuf[:0])
		x.traceLevel(t, soft[i:j], ids)
		for _, id := range ids {
			x.curW[conjWord] = uint64(id) << 32
			x.tracef(TraceNote, t.id, "conjunction(%d) complete at priority %d: lookup with conj_id=%d", id, p, id)
			r := x.lookupHard(t)
			x.curW[conjWord] = 0
			if r != nil {
				win := mkConjKey(p, id)
				x.proveConj(t, held, soft, above, &win, void)
				return r
			}
			if void == nil {
				void = map[conjKey]bool{}
			}
			void[mkConjKey(p, id)] = true
		}
		i = j
	}
	x.proveConj(t, held, soft, above, nil, void)
	return hard
}

// proveConj adds to the mask the held subtables the decision needs: the
// taken conjunction's witnesses (win, nil for none) and a failed clause of
// every conjunction tried before it. Conjunctions in void completed
// without changing the result and need nothing.
func (x *xlate) proveConj(t *table, held []clauseProbe, soft []softMatch, above int, win *conjKey, void map[conjKey]bool) {
	if len(held) == 0 {
		return
	}
	heldAt := func(st *subtable) int {
		for i := range held {
			if held[i].st == st {
				return i
			}
		}
		return -1
	}
	if win != nil {
		for k := uint8(1); k <= t.conj.conjs[*win].n; k++ {
			w := -1
			for si, s := range soft {
				if s.r.priority == win.priority() && hasClause(s.r, win.id(), k) && (w < 0 || held[s.probe].needed && !held[soft[w].probe].needed) {
					w = si
				}
			}
			if w < 0 {
				continue // flows of the id disagree on n (undefined, as in Open vSwitch)
			}
			held[soft[w].probe].needed = true
			x.rules = append(x.rules, RuleRef{kind: refClause, table: t, rule: soft[w].r})
			x.tracef(TraceNote, t.id, "  clause %d/%d: priority=%d,%s cookie=%#x", k, t.conj.conjs[*win].n, soft[w].r.priority, soft[w].r.match, soft[w].r.cookie)
		}
	}
	// The conjunctions that need a proof of failure: each one some of
	// whose flows matched (by itself), and every group with flows in a
	// held subtable (once, for its members none of whose flows matched;
	// a proof for members that need none only adds bits). Conjunctions
	// with no flow in a held subtable failed on subtables whose proof is
	// in the mask already.
	tried := func(pri uint16, id uint32) bool {
		if int(pri) <= above {
			return false
		}
		return win == nil || pri > win.priority() || pri == win.priority() && id < win.id()
	}
	type proof struct {
		g   *conjGroup
		got uint64 // the clauses with a matching flow
	}
	var proofs []proof
	if x.conjGot == nil {
		x.conjGot = map[conjKey]uint64{}
	}
	matched := x.conjGot
	clear(matched)
	for _, s := range soft {
		for _, c := range s.r.conjs {
			matched[mkConjKey(s.r.priority, c.ID)] |= 1 << (c.Clause - 1)
		}
	}
	for k, got := range matched {
		cj := t.conj.conjs[k]
		if !tried(k.priority(), k.id()) || void[k] || cj == nil {
			continue
		}
		// Members of one group with the same clauses matched need
		// the same proof.
		if !slices.Contains(proofs, proof{cj.group, got}) {
			if proofs = append(proofs, proof{cj.group, got}); len(proofs) > maxProvedConjs {
				break
			}
		}
	}
	var groups []*conjGroup
	for i := range held {
		for g := range t.conj.bySub[held[i].st] {
			if tried(g.priority, 0) && !slices.Contains(groups, g) {
				groups = append(groups, g)
			}
		}
	}
	if len(proofs)+len(groups) > maxProvedConjs {
		for i := range held {
			held[i].needed = true
		}
		x.addNeeded(held)
		return
	}
	for _, g := range groups {
		proofs = append(proofs, proof{g, 0})
	}
	slices.SortFunc(proofs, func(a, b proof) int {
		if c := strings.Compare(a.g.key, b.g.key); c != 0 {
			return c
		}
		return cmp.Compare(a.got, b.got)
	})
	for _, pf := range proofs {
		best, bestCost := -1, 0
		for c, sts := range pf.g.subs {
			if pf.got&(1<<c) != 0 {
				continue
			}
			cost := 0
			for _, st := range sts {
				if i := heldAt(st); i >= 0 && !held[i].needed {
					cost++
				}
			}
			if best < 0 || cost < bestCost {
				best, bestCost = c, cost
			}
			if cost == 0 {
				break
			}
		}
		if best < 0 {
			// Every clause has a matching flow, yet the conjunction did
			// not complete: fewer flows matched at its priority than it
			// has clauses (one flow with several of its clauses). That
			// count depends on every flow of the priority.
			for i := range held {
				for _, r := range held[i].chain {
					if r.priority == pf.g.priority {
						held[i].needed = true
					}
				}
			}
			continue
		}
		for _, st := range pf.g.subs[best] {
			if i := heldAt(st); i >= 0 {
				held[i].needed = true
			}
		}
	}
	x.addNeeded(held)
}

// addNeeded adds the proofs of the needed held subtables to the mask.
func (x *xlate) addNeeded(held []clauseProbe) {
	for i := range held {
		if held[i].needed {
			x.mask.or(&held[i].proof)
		}
	}
}

// hasClause reports whether r is clause k of conjunction id.
func hasClause(r *rule, id uint32, k uint8) bool {
	for _, c := range r.conjs {
		if c.ID == id && c.Clause == k {
			return true
		}
	}
	return false
}

// traceLevel notes, in a trace, the conjunctions the matching clause
// flows of one priority reached.
func (x *xlate) traceLevel(t *table, level []softMatch, complete []uint32) {
	if !x.opts.Trace {
		return
	}
	got := map[uint32]uint64{}
	ns := map[uint32]uint8{}
	var ids []uint32
	for _, s := range level {
		for _, c := range s.r.conjs {
			if _, ok := ns[c.ID]; !ok {
				ns[c.ID] = c.NClauses
				ids = append(ids, c.ID)
			}
			got[c.ID] |= 1 << (c.Clause - 1)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		done := false
		for _, c := range complete {
			done = done || c == id
		}
		if done {
			continue
		}
		var have []string
		for b := got[id]; b != 0; b &= b - 1 {
			have = append(have, fmt.Sprint(bits.TrailingZeros64(b)+1))
		}
		x.tracef(TraceNote, t.id, "conjunction(%d) at priority %d: clauses %s of %d matched, not complete: not taken",
			id, level[0].r.priority, strings.Join(have, ","), ns[id])
	}
}
