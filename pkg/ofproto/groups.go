package ofproto

import (
	"github.com/nagare-net/nagare/pkg/flow"
	"sort"
	"sync/atomic"
	"time"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// group is one group entry. Its type and buckets live in a groupBody that
// a GROUP_MOD MODIFY replaces whole, so references held by cached flows
// keep crediting the buckets they went through.
type group struct {
	id      uint32
	created time.Time
	body    *groupBody
	packets atomic.Uint64
	bytes   atomic.Uint64
}

type groupBody struct {
	g       *group
	typ     uint8
	buckets []openflow.Bucket
	counts  []bucketCount
}

type bucketCount struct{ packets, bytes atomic.Uint64 }

// refs returns the groups a bucket list forwards to (not watches).
func bucketGroups(bs []openflow.Bucket) []uint32 {
	var ids []uint32
	for _, b := range bs {
		for _, a := range b.Actions {
			if g, ok := a.(openflow.ActionGroup); ok {
				ids = append(ids, g.GroupID)
			}
		}
	}
	return ids
}

// GroupMod applies OFPT_GROUP_MOD. Errors are *openflow.Error:
// GROUP_EXISTS, UNKNOWN_GROUP (modify of a missing group), LOOP (a chain
// or watch leading back to the group), CHAINED_GROUP (delete of a group
// another group forwards to), BAD_WATCH (watch of a missing group),
// OFPET_BAD_ACTION/BAD_OUT_GROUP (bucket forwarding to a missing group)
// and the codes of Validate and of FLOW_MOD's action checks. Deleting a
// group removes the flows that use it (reason GROUP_DELETE); those are
// returned by the next Expire.
func (p *Pipeline) GroupMod(gm *openflow.GroupMod) error {
	if err := validateGroupMod(gm); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch gm.Command {
	case openflow.GroupDelete:
		return p.deleteGroup(gm.GroupID)
	case openflow.GroupAdd:
		if p.groups[gm.GroupID] != nil {
			return ofErr(openflow.ErrTypeGroupModFailed, openflow.GroupModGroupExists, "group %d exists", gm.GroupID)
		}
	case openflow.GroupModify:
		if p.groups[gm.GroupID] == nil {
			return ofErr(openflow.ErrTypeGroupModFailed, openflow.GroupModUnknownGroup, "group %d does not exist", gm.GroupID)
		}
	}
	for _, b := range gm.Buckets {
		if err := p.checkActions(b.Actions, false); err != nil {
			return err
		}
		if gm.GroupType == openflow.GroupTypeFF && b.WatchGroup != openflow.GroupAny && p.groups[b.WatchGroup] == nil {
			return ofErr(openflow.ErrTypeGroupModFailed, openflow.GroupModBadWatch, "watch_group %d does not exist", b.WatchGroup)
		}
	}
	if p.reaches(gm.Buckets, gm.GroupID, map[uint32]bool{}) {
		return ofErr(openflow.ErrTypeGroupModFailed, openflow.GroupModLoop, "group %d would reach itself", gm.GroupID)
	}
	g := p.groups[gm.GroupID]
	if g == nil {
		g = &group{id: gm.GroupID, created: p.cfg.Now()}
		p.groups[gm.GroupID] = g
	}
	body := &groupBody{g: g, typ: gm.GroupType, buckets: gm.Buckets, counts: make([]bucketCount, len(gm.Buckets))}
	var was []openflow.Bucket
	if g.body != nil {
		was = g.body.buckets
	}
	p.parents.set(gm.GroupID, was, gm.Buckets)
	p.setWatcher(gm.GroupID, gm.Buckets)
	g.body = body
	p.bumpWith(p.groupChange(gm.GroupID))
	return nil
}

// validateGroupMod runs the codec's checks. The codec validates bucket
// actions against an empty match, which would refuse every L3/L4
// set_field and every ct/nat (a group has no match to say the packet is
// IP); buckets are checked here at run time instead (a set_field the
// packet has no header for is skipped, the tracker marks what it cannot
// track), as Open vSwitch accepts them (OVN's load balancers put
// ct(commit,nat(dst=..)) in buckets). So set_field and the Nicira actions
// are left out of the codec's view: their structure was checked when they
// were decoded, and checkNX checks what the fast path can do.
func validateGroupMod(gm *openflow.GroupMod) error {
	c := *gm
	c.Buckets = make([]openflow.Bucket, len(gm.Buckets))
	for i, b := range gm.Buckets {
		c.Buckets[i] = b
		c.Buckets[i].Actions = nil
		for _, a := range b.Actions {
			if _, ok := a.(openflow.ActionSetField); !ok && a.Type() != openflow.ActionTypeExperimenter {
				c.Buckets[i].Actions = append(c.Buckets[i].Actions, a)
			}
		}
	}
	return c.Validate()
}

// reaches reports whether buckets lead (by group action or watch) to id.
func (p *Pipeline) reaches(bs []openflow.Bucket, id uint32, seen map[uint32]bool) bool {
	next := bucketGroups(bs)
	for _, b := range bs {
		if b.WatchGroup != openflow.GroupAny && b.WatchGroup <= openflow.GroupMax {
			next = append(next, b.WatchGroup)
		}
	}
	for _, n := range next {
		if n == id {
			return true
		}
		if seen[n] {
			continue
		}
		seen[n] = true
		if g := p.groups[n]; g != nil && p.reaches(g.body.buckets, id, seen) {
			return true
		}
	}
	return false
}

func (p *Pipeline) deleteGroup(id uint32) error {
	doomed := map[uint32]bool{}
	if id == openflow.GroupAll {
		for gid := range p.groups {
			doomed[gid] = true
		}
	} else if p.groups[id] != nil {
		doomed[id] = true
	}
	if len(doomed) == 0 {
		return nil
	}
	for gid := range doomed {
		for parent := range p.parents[gid] {
			if !doomed[parent] {
				return ofErr(openflow.ErrTypeGroupModFailed, openflow.GroupModChainedGroup, "group %d forwards to group %d", parent, gid)
			}
		}
	}
	seen := ruleSet{}
	var rs []*rule
	for gid := range doomed {
		for r := range p.index.byGroup[gid] {
			if _, dup := seen[r]; !dup {
				seen[r] = struct{}{}
				rs = append(rs, r)
			}
		}
	}
	sortRules(rs)
	p.removeRules(rs)
	now := p.cfg.Now()
	c := p.groupChange()
	for _, r := range rs {
		c.addRule(r)
		p.nrules--
		p.pending = append(p.pending, removedOf(r, openflow.FlowRemovedGroupDelete, now))
		p.releaseRule(r)
	}
	for gid := range doomed {
		p.parents.set(gid, p.groups[gid].body.buckets, nil)
		p.setWatcher(gid, nil)
		delete(p.groups, gid)
		c.addGroup(gid)
	}
	p.bumpWith(c)
	return nil
}

// groupLive reports whether a group has a live bucket (watch_group).
func (p *Pipeline) groupLive(id uint32, depth int) bool {
	g := p.groups[id]
	if g == nil || depth > maxDepth {
		return false
	}
	for i := range g.body.buckets {
		if p.bucketLive(&g.body.buckets[i], depth+1) {
			return true
		}
	}
	return false
}

// bucketLive: a bucket is live when its watched port exists and is up and
// its watched group has a live bucket; a bucket watching nothing is live.
func (p *Pipeline) bucketLive(b *openflow.Bucket, depth int) bool {
	if b.WatchPort != openflow.PortAny && b.WatchPort != 0 {
		pt := p.ports[b.WatchPort]
		if pt == nil || !pt.live() {
			return false
		}
	}
	if b.WatchGroup != openflow.GroupAny && b.WatchGroup <= openflow.GroupMax {
		if !p.groupLive(b.WatchGroup, depth) {
			return false
		}
	}
	return true
}

// group runs the packet through group id. Every bucket works on its own
// copy of the packet; the pipeline continues with the packet unchanged.
func (x *xlate) group(id uint32) {
	g := x.p.groups[id]
	if g == nil {
		x.tracef(TraceNote, x.tableID, "group:%d does not exist: drop", id)
		return
	}
	x.depth++
	defer func() { x.depth-- }()
	if x.depth > maxDepth {
		x.err = errDepth
		return
	}
	gb := g.body
	x.rules = append(x.rules, RuleRef{kind: refGroup, body: gb})
	switch gb.typ {
	case openflow.GroupTypeAll:
		x.tracef(TraceGroup, x.tableID, "group:%d all, %d buckets", id, len(gb.buckets))
		for i := range gb.buckets {
			x.bucket(gb, i)
		}
	case openflow.GroupTypeIndirect:
		x.tracef(TraceGroup, x.tableID, "group:%d indirect", id)
		x.bucket(gb, 0)
	case openflow.GroupTypeFF:
		for i := range gb.buckets {
			if x.p.bucketLive(&gb.buckets[i], 0) {
				x.tracef(TraceGroup, x.tableID, "group:%d fast_failover, bucket %d live", id, i)
				x.bucket(gb, i)
				return
			}
		}
		x.tracef(TraceGroup, x.tableID, "group:%d fast_failover, no live bucket: drop", id)
	case openflow.GroupTypeSelect:
		total, live, last := x.liveWeights(gb)
		var i int
		switch {
		case total == 0:
			x.tracef(TraceGroup, x.tableID, "group:%d select, no live bucket: drop", id)
			return
		case live == 1:
			// One choice: nothing to hash, so nothing un-wildcarded. A
			// Service with one endpoint then caches one flow for all its
			// new connections instead of one per connection (the 5-tuple).
			i = last
		case !x.opts.SlowSelect:
			x.freezeSelect(id) // the fast path hashes (groupByHash)
			return
		default:
			i = x.bucketAt(gb, x.selectHash()%total)
		}
		x.tracef(TraceGroup, x.tableID, "group:%d select, bucket %d", id, i)
		x.bucket(gb, i)
	}
}

func (x *xlate) bucket(gb *groupBody, i int) {
	x.rules = append(x.rules, RuleRef{kind: refBucket, body: gb, bucket: i})
	saved := x.save()
	x.apply(gb.buckets[i].Actions)
	x.restore(saved)
}

// liveWeights returns the total weight of a select group's live
// buckets, how many of them have a weight, and the last such one.
func (x *xlate) liveWeights(gb *groupBody) (total uint64, live, last int) {
	last = -1
	for i := range gb.buckets {
		if b := &gb.buckets[i]; b.Weight > 0 && x.p.bucketLive(b, 0) {
			total += uint64(b.Weight)
			live, last = live+1, i
		}
	}
	return total, live, last
}

// bucketAt returns the live bucket that pick (< the live total weight)
// falls in, each bucket taking as many values as its weight.
func (x *xlate) bucketAt(gb *groupBody, pick uint64) int {
	for i := range gb.buckets {
		b := &gb.buckets[i]
		if b.Weight == 0 || !x.p.bucketLive(b, 0) {
			continue
		}
		if pick < uint64(b.Weight) {
			return i
		}
		pick -= uint64(b.Weight)
	}
	return -1
}

// selectHash hashes the packet's identity (IP addresses, protocol and
// ports for IP, Ethernet addresses otherwise) for a select group chosen
// in the slow path; the hashed fields go into the megaflow mask, the
// choice is deterministic.
func (x *xlate) selectHash() uint64 {
	k := &x.cur
	x.need(&maskEthType)
	h := uint64(14695981039346656037)
	mix := func(b ...byte) {
		for _, c := range b {
			h ^= uint64(c)
			h *= 1099511628211
		}
	}
	mix(byte(k.EthType>>8), byte(k.EthType))
	if k.EthType == 0x0800 || k.EthType == 0x86dd {
		x.need(&maskIPSrc)
		x.need(&maskIPDst)
		x.need(&maskIPProto)
		mix(k.IPSrc[:]...)
		mix(k.IPDst[:]...)
		mix(k.NwProto)
		if k.NwProto == 6 || k.NwProto == 17 || k.NwProto == 132 {
			x.need(&maskTpSrc)
			x.need(&maskTpDst)
			mix(byte(k.TpSrc>>8), byte(k.TpSrc), byte(k.TpDst>>8), byte(k.TpDst))
		}
	} else {
		x.need(&maskEthSrc)
		x.need(&maskEthDst)
		mix(k.EthSrc[:]...)
		mix(k.EthDst[:]...)
	}
	// Final avalanche so that low bits depend on every input byte.
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return h
}

// GroupStats answers an OFPMP_GROUP request (GroupAll for every group).
func (p *Pipeline) GroupStats(req *openflow.GroupStatsRequest) []openflow.GroupStats {
	p.mu.RLock()
	defer p.mu.RUnlock()
	now := p.cfg.Now()
	var out []openflow.GroupStats
	for _, id := range p.groupIDs() {
		if req != nil && req.GroupID != openflow.GroupAll && req.GroupID != id {
			continue
		}
		g := p.groups[id]
		d := now.Sub(g.created)
		s := openflow.GroupStats{GroupID: id, RefCount: p.groupRefs(id), PacketCount: g.packets.Load(),
			ByteCount: g.bytes.Load(), DurationSec: uint32(d / time.Second), DurationNsec: uint32(d % time.Second)}
		for i := range g.body.counts {
			c := &g.body.counts[i]
			s.Buckets = append(s.Buckets, openflow.BucketCounter{PacketCount: c.packets.Load(), ByteCount: c.bytes.Load()})
		}
		out = append(out, s)
	}
	return out
}

// GroupDesc answers OFPMP_GROUP_DESC: every group, by id.
func (p *Pipeline) GroupDesc() []openflow.GroupDesc {
	p.mu.RLock()
	defer p.mu.RUnlock()
	var out []openflow.GroupDesc
	for _, id := range p.groupIDs() {
		g := p.groups[id]
		out = append(out, openflow.GroupDesc{GroupType: g.body.typ, GroupID: id, Buckets: g.body.buckets})
	}
	return out
}

// Group feature capability bits (ofp_group_capabilities).
const (
	groupCapSelectWeight   = 1 << 0
	groupCapSelectLiveness = 1 << 1
	groupCapChaining       = 1 << 2
	groupCapChainingChecks = 1 << 3
)

// GroupFeatures answers OFPMP_GROUP_FEATURES: all four types, weights,
// liveness, chaining with loop checks, and the actions buckets may use.
func (p *Pipeline) GroupFeatures() openflow.GroupFeaturesReply {
	var acts uint32
	for _, t := range []openflow.ActionType{openflow.ActionTypeOutput, openflow.ActionTypePushVLAN,
		openflow.ActionTypePopVLAN, openflow.ActionTypeGroup,
		openflow.ActionTypeSetNWTTL, openflow.ActionTypeDecNWTTL, openflow.ActionTypeSetField,
		openflow.ActionTypeCopyTTLOut, openflow.ActionTypeCopyTTLIn, openflow.ActionTypeSetMPLSTTL,
		openflow.ActionTypeDecMPLSTTL, openflow.ActionTypePushMPLS, openflow.ActionTypePopMPLS,
		openflow.ActionTypePushPBB, openflow.ActionTypePopPBB} {
		acts |= 1 << t
	}
	r := openflow.GroupFeaturesReply{
		Types:        1<<openflow.GroupTypeAll | 1<<openflow.GroupTypeSelect | 1<<openflow.GroupTypeIndirect | 1<<openflow.GroupTypeFF,
		Capabilities: groupCapSelectWeight | groupCapSelectLiveness | groupCapChaining | groupCapChainingChecks,
	}
	for i := range r.MaxGroups {
		r.MaxGroups[i] = openflow.GroupMax
		r.Actions[i] = acts
	}
	return r
}

func (p *Pipeline) groupIDs() []uint32 {
	ids := make([]uint32, 0, len(p.groups))
	for id := range p.groups {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// groupRefs counts the flows and groups that forward to group id.
func (p *Pipeline) groupRefs(id uint32) uint32 {
	return uint32(len(p.index.byGroup[id]) + len(p.parents[id]))
}

// setWatcher notes whether group id has a bucket that watches a group.
func (p *Pipeline) setWatcher(id uint32, bs []openflow.Bucket) {
	delete(p.watchers, id)
	for _, b := range bs {
		if b.WatchGroup != openflow.GroupAny {
			p.watchers[id] = true
		}
	}
}

// groupChange starts the change set of a group change: groups named;
// while any bucket watches a group, a group's liveness can change other
// groups' choices that recorded no reference to it, so it is full (nil).
func (p *Pipeline) groupChange(ids ...uint32) *changeSet {
	if len(p.watchers) > 0 {
		return nil
	}
	c := &changeSet{}
	for _, id := range ids {
		c.addGroup(id)
	}
	return c
}

// hashSlots is how many dp_hash values (a power of two) spread over n
// buckets: 16 per bucket at least, so that weights are kept within about
// 6 %, at most 2^16. A recirculated pass matches dp_hash on log2(slots)
// bits: one cached flow per slot used.
func hashSlots(n int) uint32 {
	s := uint32(64)
	for s < uint32(16*n) && s < 1<<16 {
		s <<= 1
	}
	return s
}

// groupByHash runs a recirculated packet through select group id by its
// dp_hash (freezeSelect): slot dp_hash mod slots, the slots spread over
// the live buckets by weight.
func (x *xlate) groupByHash(id uint32) {
	g := x.p.groups[id]
	if g == nil || g.body.typ != openflow.GroupTypeSelect {
		x.tracef(TraceNote, x.tableID, "group:%d is not a select group any more: drop", id)
		return
	}
	gb := g.body
	x.rules = append(x.rules, RuleRef{kind: refGroup, body: gb})
	total, live, _ := x.liveWeights(gb)
	if total == 0 {
		x.tracef(TraceGroup, x.tableID, "group:%d select, no live bucket: drop", id)
		return
	}
	slots := hashSlots(live)
	m := flow.Key{DpHash: slots - 1}
	mw := keyWords(&m)
	x.need(&mw)
	slot := x.cur.DpHash & (slots - 1)
	i := x.bucketAt(gb, uint64(slot)*total/uint64(slots))
	x.tracef(TraceGroup, x.tableID, "group:%d select by dp_hash slot %d of %d, bucket %d", id, slot, slots, i)
	x.bucket(gb, i)
}
