package ofproto

import (
	"sort"

	"github.com/nagare-net/nagare/pkg/flow"
)

// The classifier of one table is a tuple space: rules are grouped into
// subtables by their match mask, subtables are probed in order of their
// highest priority, and probing stops once no remaining subtable can hold
// a better rule than the one found.
//
// Within a subtable:
//   - with few rules (≤ smallSubtable), each rule is compared in turn and a
//     miss un-wildcards one differing field of that rule (mask.go), which
//     gives the narrowest megaflows;
//   - with more, a hash of the packet under the subtable's mask finds the
//     candidates in O(1). A miss must then rule out every rule of the
//     subtable at once; staged lookup (as in Open vSwitch) keeps that
//     narrow: the mask is split into stages (ports and metadata, then L2,
//     L3, L4), each stage keeps the hashes of its rules' values, and the
//     first stage whose hash is absent ends the probe having un-wildcarded
//     only that stage's bits and the ones before it;
//   - before the L3 stage, prefix indexes do the same for addresses and L4
//     ports at the lengths of their ladders (mask.go, "Prefix misses"):
//     the shortest prefix of one field that no rule of the subtable has
//     ends the probe with only that prefix un-wildcarded, so a miss on an
//     address costs a byte of it, not all of it.
//
// The result is the same rule the priority-ordered scan of table.rules
// would find (classifier_test.go checks it); masks may differ, both
// correct (mask_test.go).

// smallSubtable is the size up to which a subtable is scanned rule by
// rule (a variable so that tests can force hashing everywhere).
var smallSubtable = 8

// stageMasks are the cumulative stage masks: ports, tunnel id and
// metadata; then L2; then L3; then everything.
var stageMasks = func() [4]words {
	var s [4]words
	k := flow.Key{InPort: ^uint32(0), TunID: ^uint32(0)}
	s[0] = keyWords(&k)
	s[0].or(&maskRecircID)
	s[0].or(&maskCtFields)
	for i := metaWord; i < nWords; i++ {
		s[0][i] = ^uint64(0) // metadata and registers
	}
	k.EthSrc, k.EthDst = [6]byte{255, 255, 255, 255, 255, 255}, [6]byte{255, 255, 255, 255, 255, 255}
	k.VlanTCI, k.EthType = 0xffff, 0xffff
	s[1] = keyWords(&k)
	s[1].or(&s[0])
	s[2] = s[1]
	s[2].or(&maskL3L4)
	l4 := maskTpSrc
	l4.or(&maskTpDst)
	for i := range s[2] {
		s[2][i] &^= l4[i]
	}
	for i := range s[3] {
		s[3][i] = ^uint64(0)
	}
	return s
}()

// subtable holds the rules of one table that share a match mask.
type subtable struct {
	mask   words
	nz     []uint8
	stages []stage
	rules  []*rule           // priority desc, then age
	byVal  map[words][]*rule // masked value → rules, same order
	prios  map[uint16]int
	maxPri uint16
	// prefixes are checked when the probe reaches stages[prefixAt] (or
	// the final lookup).
	prefixes []prefixIndex
	prefixAt int
}

// prefixIndex holds, for one ladder field of a subtable, the hashes of
// its rules' values at each ladder level.
type prefixIndex struct {
	levels []words // ladder ∩ subtable mask, distinct, shortest first
	hashes []map[uint64]int32
}

type stage struct {
	mask   words // cumulative
	hashes map[uint64]int32
}

func hashWords(w *words, m *words) uint64 {
	h := uint64(0x9e3779b97f4a7c15)
	for i := range w {
		h ^= w[i] & m[i]
		h *= 0xff51afd7ed558ccd
		h ^= h >> 29
	}
	return h
}

// better reports whether a wins over b (nil loses).
func better(a, b *rule) bool {
	if b == nil {
		return true
	}
	return a.priority > b.priority || (a.priority == b.priority && a.seq < b.seq)
}

func newSubtable(m words) *subtable {
	st := &subtable{mask: m, byVal: map[words][]*rule{}, prios: map[uint16]int{}}
	for i, v := range m {
		if v != 0 {
			st.nz = append(st.nz, uint8(i))
		}
	}
	var prev words
	for _, sm := range stageMasks[:3] {
		var cum words
		for i := range cum {
			cum[i] = m[i] & sm[i]
		}
		if cum == prev || cum == m {
			continue
		}
		st.stages = append(st.stages, stage{mask: cum, hashes: map[uint64]int32{}})
		prev = cum
	}
	st.prefixAt = len(st.stages)
	for i := len(st.stages) - 1; i >= 0; i-- {
		if hasAny(&st.stages[i].mask, &maskL3L4) {
			st.prefixAt = i
		}
	}
	for _, l := range []prefixLadder{ipDstLadder, ipSrcLadder, tpDstLadder, tpSrcLadder} {
		var pi prefixIndex
		var prev words
		for _, lv := range l {
			var w words
			for i := range w {
				w[i] = lv[i] & m[i]
			}
			if w.isZero() || w == prev {
				continue
			}
			pi.levels = append(pi.levels, w)
			pi.hashes = append(pi.hashes, map[uint64]int32{})
			prev = w
		}
		if len(pi.levels) > 0 {
			st.prefixes = append(st.prefixes, pi)
		}
	}
	return st
}

func hasAny(a, b *words) bool {
	for i := range a {
		if a[i]&b[i] != 0 {
			return true
		}
	}
	return false
}

// count adds delta to the prefix hashes of value v.
func (st *subtable) countPrefixes(v *words, delta int32) {
	for _, pi := range st.prefixes {
		for l := range pi.levels {
			h := hashWords(v, &pi.levels[l])
			if pi.hashes[l][h] += delta; pi.hashes[l][h] <= 0 {
				delete(pi.hashes[l], h)
			}
		}
	}
}

// prefixMiss reports whether some field's prefix proves that no rule of
// st matches pw, and if so un-wildcards that prefix.
func (x *xlate) prefixMiss(st *subtable, pw *words) bool {
	for _, pi := range st.prefixes {
		for l := range pi.levels {
			if _, ok := pi.hashes[l][hashWords(pw, &pi.levels[l])]; !ok {
				x.need(&pi.levels[l])
				return true
			}
		}
	}
	return false
}

func insertSorted(rs []*rule, r *rule) []*rule {
	i := sort.Search(len(rs), func(i int) bool { return better(r, rs[i]) })
	rs = append(rs, nil)
	copy(rs[i+1:], rs[i:])
	rs[i] = r
	return rs
}

func removeRule(rs []*rule, r *rule) []*rule {
	if i := indexOf(rs, r); i >= 0 {
		return removeAt(rs, i)
	}
	return rs
}

func (st *subtable) add(r *rule) {
	st.rules = insertSorted(st.rules, r)
	st.byVal[r.cm.val] = insertSorted(st.byVal[r.cm.val], r)
	for i := range st.stages {
		st.stages[i].hashes[hashWords(&r.cm.val, &st.stages[i].mask)]++
	}
	st.countPrefixes(&r.cm.val, 1)
	st.prios[r.priority]++
	if len(st.rules) == 1 || r.priority > st.maxPri {
		st.maxPri = r.priority
	}
}

func (st *subtable) remove(r *rule) {
	st.rules = removeRule(st.rules, r)
	if l := removeRule(st.byVal[r.cm.val], r); len(l) == 0 {
		delete(st.byVal, r.cm.val)
	} else {
		st.byVal[r.cm.val] = l
	}
	for i := range st.stages {
		h := hashWords(&r.cm.val, &st.stages[i].mask)
		if st.stages[i].hashes[h]--; st.stages[i].hashes[h] <= 0 {
			delete(st.stages[i].hashes, h)
		}
	}
	st.countPrefixes(&r.cm.val, -1)
	if st.prios[r.priority]--; st.prios[r.priority] <= 0 {
		delete(st.prios, r.priority)
	}
	if len(st.rules) > 0 {
		st.maxPri = st.rules[0].priority
	}
}

// classifier is the tuple-space index of a table.
type classifier struct {
	subtables []*subtable // by maxPri desc
	byMask    map[words]*subtable
}

func (c *classifier) add(r *rule) {
	if c.byMask == nil {
		c.byMask = map[words]*subtable{}
	}
	st := c.byMask[r.cm.mask]
	if st == nil {
		st = newSubtable(r.cm.mask)
		c.byMask[r.cm.mask] = st
		c.subtables = append(c.subtables, st)
	}
	st.add(r)
	c.sort()
}

func (c *classifier) remove(r *rule) {
	st := c.byMask[r.cm.mask]
	if st == nil {
		return
	}
	st.remove(r)
	if len(st.rules) == 0 {
		delete(c.byMask, r.cm.mask)
		for i, s := range c.subtables {
			if s == st {
				c.subtables = append(c.subtables[:i], c.subtables[i+1:]...)
				break
			}
		}
	}
	c.sort()
}

func (c *classifier) replace(o, n *rule) {
	st := c.byMask[o.cm.mask]
	if i := indexOf(st.rules, o); i >= 0 {
		st.rules[i] = n
	}
	l := st.byVal[o.cm.val]
	if i := indexOf(l, o); i >= 0 {
		l[i] = n
	}
}

func (c *classifier) sort() {
	sort.SliceStable(c.subtables, func(i, j int) bool { return c.subtables[i].maxPri > c.subtables[j].maxPri })
}

// lookup finds the best rule for the current packet, recording in the
// megaflow mask what the decision depended on.
func (x *xlate) lookupTSS(c *classifier) *rule {
	pw := x.packet()
	var best *rule
	for _, st := range c.subtables {
		if best != nil && st.maxPri < best.priority {
			break
		}
		if len(st.rules) <= smallSubtable {
			for _, r := range st.rules {
				if best != nil && !better(r, best) {
					break
				}
				if r.cm.matches(pw) {
					x.needRule(r.cm)
					best = r
					break
				}
				x.needMiss(r.cm, pw)
			}
			continue
		}
		if x.stagedMiss(st, pw) {
			continue
		}
		x.need(&st.mask)
		for _, r := range st.byVal[st.key(pw)] {
			if r.cm.never {
				continue
			}
			if better(r, best) {
				best = r
			}
			break
		}
	}
	return best
}

// stagedMiss reports whether the stages or the prefix indexes of a hashed
// subtable prove that none of its rules matches pw, and if so
// un-wildcards the bits that prove it.
func (x *xlate) stagedMiss(st *subtable, pw *words) bool {
	for i := range st.stages {
		if i == st.prefixAt && x.prefixMiss(st, pw) {
			return true
		}
		sg := &st.stages[i]
		if _, ok := sg.hashes[hashWords(pw, &sg.mask)]; !ok {
			x.need(&sg.mask)
			return true
		}
	}
	return st.prefixAt == len(st.stages) && x.prefixMiss(st, pw)
}

// key is pw under the subtable's mask: the key of byVal.
func (st *subtable) key(pw *words) words {
	var key words
	for _, i := range st.nz {
		key[i] = pw[i] & st.mask[i]
	}
	return key
}
