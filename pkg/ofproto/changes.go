package ofproto

// Which cached flows a change can affect. After a table change the
// revalidator used to translate every cached flow again: with 100 000
// cached flows that is 130 ms per change on 2 vCPUs, paid by every
// Service change an agent makes (its barrier waits for the round). Most
// changes touch little of what a cached flow went through. A translation
// records what it depended on (Translation.Rules: one reference per table
// lookup, the rule hit or the miss, and every group it executed), and a
// FLOW_MOD or GROUP_MOD records what it changed:
//
//   - a rule added to table T (not replacing one): flows whose translation
//     looked T up may now hit it; flows that never looked at T cannot;
//   - a rule removed, modified, or replaced by an identical-match ADD:
//     only flows that hit that rule (a rule that lost a lookup losing
//     again changes nothing; the installed mask stays valid, only wider
//     than needed);
//   - a group added, modified or deleted: flows that executed it.
//
// Anything else (ports, meters, fallback to NORMAL, groups while any
// bucket watches a group, a log that no longer reaches back) is a full
// change: every flow is translated again, as before. NORMAL learning
// table changes keep their own, narrower path (MACDeps).

// maxChangeLog is how many narrow changes are kept; a revalidator that
// falls further behind translates everything.
const maxChangeLog = 4096

// changeSet is what one pipeline version changed.
type changeSet struct {
	full   bool
	tables map[uint8]bool  // a rule was added
	rules  map[*rule]bool  // removed, modified or replaced
	groups map[uint32]bool // added, modified or deleted
}

func (c *changeSet) addTable(id uint8) {
	if c == nil {
		return // a full change already
	}
	if c.tables == nil {
		c.tables = map[uint8]bool{}
	}
	c.tables[id] = true
}

func (c *changeSet) addRule(r *rule) {
	if c == nil {
		return // a full change already
	}
	if c.rules == nil {
		c.rules = map[*rule]bool{}
	}
	c.rules[r] = true
}

func (c *changeSet) addGroup(id uint32) {
	if c == nil {
		return // a full change already
	}
	if c.groups == nil {
		c.groups = map[uint32]bool{}
	}
	c.groups[id] = true
}

type loggedChange struct {
	version uint64
	set     *changeSet
}

// changeLog holds the narrow changes after floor, oldest first; floor is
// the last version that was a full change or fell off the log. Guarded
// by Pipeline.versionMu.
type changeLog struct {
	entries []loggedChange
	floor   uint64
}

func (l *changeLog) record(version uint64, c *changeSet) {
	if c == nil || c.full {
		l.entries, l.floor = l.entries[:0], version
		return
	}
	if len(l.entries) >= maxChangeLog {
		l.floor = l.entries[0].version
		l.entries = append(l.entries[:0], l.entries[1:]...)
	}
	l.entries = append(l.entries, loggedChange{version, c})
}

// Changes is what changed in the pipeline between two versions, as far as
// translations of cached flows can tell (ChangesSince).
type Changes struct{ sets []*changeSet }

// ChangesSince returns the changes after version v, or nil when they
// cannot be told apart from a full change (every translation made at v
// must be made again).
func (p *Pipeline) ChangesSince(v uint64) *Changes {
	p.versionMu.Lock()
	defer p.versionMu.Unlock()
	l := &p.changes
	if v < l.floor {
		return nil
	}
	c := &Changes{}
	for i := len(l.entries) - 1; i >= 0 && l.entries[i].version > v; i-- {
		c.sets = append(c.sets, l.entries[i].set)
	}
	return c
}

// Affects reports whether a translation that depended on refs may come
// out otherwise after these changes.
func (c *Changes) Affects(refs []RuleRef) bool {
	for _, s := range c.sets {
		for _, r := range refs {
			switch r.kind {
			case refRule, refClause:
				if s.rules[r.rule] || s.tables[r.table.id] {
					return true
				}
			case refMiss:
				if s.tables[r.table.id] {
					return true
				}
			case refGroup, refBucket:
				if s.groups[r.body.g.id] {
					return true
				}
			}
		}
	}
	return false
}
