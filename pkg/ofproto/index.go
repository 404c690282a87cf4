package ofproto

import (
	"sort"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// Selecting rules without scanning every table. A controller that names
// its flows by cookie (Antrea, nagare's agent: one cookie per feature and
// object) deletes an object's flows with one FLOW_MOD DELETE over
// table_id=ALL with a cookie_mask, and a group delete removes the flows
// that forward to the group. Answered by a scan, each costs O(rules): with
// 10 000 Services (40 000 rules, 10 000 groups) deleting all of them took
// 27 s. Open vSwitch keeps a hash of rules by cookie for the same reason.
//
// The pipeline keeps, beside the tables:
//   - byGroup: group id → the rules whose instructions forward to it (for
//     out_group selection, group deletes and group reference counts);
//   - byCookie: for each cookie_mask a request has used (up to
//     maxCookieMasks of them, built on first use), cookie&mask → rules.
//     A full mask is one such mask; a partial mask (the agent's object
//     bits without the feature byte) another.
//
// Strict selection needs no new index: a table's byMatch finds the rule
// with the request's match and priority. Whatever an index returns is a
// superset that `selected` still filters, so OpenFlow semantics (non-strict
// subsumption, out_port, out_group, table_id=ALL) stay those of the scan.

// maxCookieMasks bounds how many distinct cookie_masks are indexed; a
// request with another mask scans.
const maxCookieMasks = 8

type ruleSet map[*rule]struct{}

// cookieIndex indexes the rules by cookie under one mask.
type cookieIndex struct {
	mask  uint64
	rules map[uint64]ruleSet
}

// ruleIndex holds the pipeline's rules by group and by cookie.
type ruleIndex struct {
	byGroup  map[uint32]ruleSet
	byCookie []*cookieIndex
}

func (ix *ruleIndex) init() { ix.byGroup = map[uint32]ruleSet{} }

func setAdd[K comparable](m map[K]ruleSet, k K, r *rule) {
	s := m[k]
	if s == nil {
		s = ruleSet{}
		m[k] = s
	}
	s[r] = struct{}{}
}

func setRemove[K comparable](m map[K]ruleSet, k K, r *rule) {
	if s := m[k]; s != nil {
		delete(s, r)
		if len(s) == 0 {
			delete(m, k)
		}
	}
}

func (ix *ruleIndex) add(r *rule) {
	for _, g := range r.groups {
		setAdd(ix.byGroup, g, r)
	}
	for _, ci := range ix.byCookie {
		setAdd(ci.rules, r.cookie&ci.mask, r)
	}
}

func (ix *ruleIndex) remove(r *rule) {
	for _, g := range r.groups {
		setRemove(ix.byGroup, g, r)
	}
	for _, ci := range ix.byCookie {
		setRemove(ci.rules, r.cookie&ci.mask, r)
	}
}

// cookie returns the rules whose cookie&mask is cookie&mask; false when
// mask is not indexed. With build (the caller holds p.mu for writing) a
// new mask's index is built from the tables on first use.
func (ix *ruleIndex) cookie(tables []*table, cookie, mask uint64, build bool) (ruleSet, bool) {
	for _, ci := range ix.byCookie {
		if ci.mask == mask {
			return ci.rules[cookie&mask], true
		}
	}
	if !build || len(ix.byCookie) >= maxCookieMasks {
		return nil, false
	}
	ci := &cookieIndex{mask: mask, rules: map[uint64]ruleSet{}}
	for _, t := range tables {
		for _, r := range t.rules {
			setAdd(ci.rules, r.cookie&mask, r)
		}
	}
	ix.byCookie = append(ix.byCookie, ci)
	return ci.rules[cookie&mask], true
}

// candidates returns, in table then priority order, the rules of table
// tableID (or every table for TableAll) an index says a request may
// select: a superset of what `selected` accepts. ok is false when no
// index narrows the request (the caller scans). The caller holds p.mu for
// writing.
func (p *Pipeline) candidates(tableID uint8, cm *compiledMatch, strict bool, priority uint16, cookie, cookieMask uint64, outGroup uint32) (rs []*rule, ok bool) {
	return p.selectIndexed(tableID, cm, strict, priority, cookie, cookieMask, outGroup, true)
}

// candidatesRead is candidates for a non-strict read under p.mu held for
// reading: it uses the cookie masks already indexed, builds none.
func (p *Pipeline) candidatesRead(tableID uint8, cm *compiledMatch, cookie, cookieMask uint64, outGroup uint32) ([]*rule, bool) {
	return p.selectIndexed(tableID, cm, false, 0, cookie, cookieMask, outGroup, false)
}

func (p *Pipeline) selectIndexed(tableID uint8, cm *compiledMatch, strict bool, priority uint16, cookie, cookieMask uint64, outGroup uint32, build bool) (rs []*rule, ok bool) {
	if scanSelection {
		return nil, false
	}
	inTable := func(r *rule) bool { return tableID == openflow.TableAll || r.table == tableID }
	if strict {
		id := cm.id(priority)
		tables := p.tables
		if tableID != openflow.TableAll {
			tables = tables[tableID : tableID+1]
		}
		for _, t := range tables {
			if r := t.byMatch[id]; r != nil {
				rs = append(rs, r)
			}
		}
		return rs, true
	}
	var set ruleSet
	if outGroup != openflow.GroupAny {
		set, ok = p.index.byGroup[outGroup], true
	}
	if cookieMask != 0 {
		if cs, cok := p.index.cookie(p.tables, cookie, cookieMask, build); cok && (!ok || len(cs) < len(set)) {
			set, ok = cs, true
		}
	}
	if !ok {
		return nil, false
	}
	for r := range set {
		if inTable(r) {
			rs = append(rs, r)
		}
	}
	sortRules(rs)
	return rs, true
}

// sortRules orders rules as stats and deletes report them: by table, then
// as within a table (priority descending, then age).
func sortRules(rs []*rule) {
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].table != rs[j].table {
			return rs[i].table < rs[j].table
		}
		return better(rs[i], rs[j])
	})
}

// removeRules takes rs (in table order, all in their tables) out of the
// tables: one by one by position when few, else in one pass per table.
func (p *Pipeline) removeRules(rs []*rule) {
	for i := 0; i < len(rs); {
		j := i
		for j < len(rs) && rs[j].table == rs[i].table {
			j++
		}
		t := p.tables[rs[i].table]
		if j-i <= 16 {
			for _, r := range rs[i:j] {
				t.remove(r)
			}
		} else {
			doomed := make(ruleSet, j-i)
			for _, r := range rs[i:j] {
				doomed[r] = struct{}{}
			}
			t.removeIf(func(r *rule) bool { _, ok := doomed[r]; return ok })
		}
		i = j
	}
}

// groupParents indexes group chaining: child group → the groups whose
// buckets forward to it (for CHAINED_GROUP checks and reference counts).
type groupParents map[uint32]map[uint32]struct{}

func (gp groupParents) set(parent uint32, old, now []openflow.Bucket) {
	for _, c := range bucketGroups(old) {
		if s := gp[c]; s != nil {
			delete(s, parent)
			if len(s) == 0 {
				delete(gp, c)
			}
		}
	}
	for _, c := range bucketGroups(now) {
		if gp[c] == nil {
			gp[c] = map[uint32]struct{}{}
		}
		gp[c][parent] = struct{}{}
	}
}

// scanSelection makes FLOW_MOD and stats selection scan the tables as if
// there were no index (tests compare both).
var scanSelection = false
