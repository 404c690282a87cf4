package ofproto

import (
	"encoding/binary"
	"errors"
	"hash/fnv"
	"sync"
	"sync/atomic"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// Recirculation, as Open vSwitch does it. Some decisions need the fast
// path to act on the packet first and the pipeline to go on afterwards:
// conntrack (ct(table=T): the connection's state is known only once the
// tracker saw the packet) and a lookup after pop_mpls / pop_pbb (the
// headers behind the popped ones are not in the key until the fast path
// parses the packet again). Translation then stops, "freezing" what it
// needs to resume — the table to go on in, the metadata and registers,
// the action set — under a recirculation id, and emits Recirc{id}: the
// fast path looks the packet up again with recirc_id = id (and the ct
// fields its tracker filled). That second lookup misses once, and the
// slow path translates it from the frozen state: two cached flows, both
// replayed by the fast path alone from then on.
//
// Ids are a hash of the frozen state, so the same state gets the same id
// after a switch restart: the cached second halves stay valid while the
// revalidator re-translates their first halves (it does those first).
// There is one frozen state per distinct (table, registers, action set)
// at a freezing point: a few per Service endpoint in Antrea's pipeline or
// nagare's agent's, so a node whose Services churn would accumulate them.
// FreeRecirc drops those no cached flow names any more (the switch's
// revalidator calls it with the ids its cached flows carry) and that no
// translation handed out since the previous call (a translation in flight
// may not have installed its flow yet). A packet the fast path
// recirculated with a freed id meanwhile finds it again the way a
// restarted switch does (Switch.recoverRecirc: the first pass translated
// again registers the same id). The number is in Stats.

// frozen is the state a recirculated packet resumes with.
type frozen struct {
	table uint8
	// group: the pass froze at this select group (groups.go): the
	// recirculated pass picks its bucket by the fast path's dp_hash.
	group uint32
	regs  [nWords - flow.KeyWords]uint64 // metadata, reg0..reg15
	set   openflow.Actions               // the action set, in execution order
	enc   string
	seen  atomic.Uint64 // the recircs epoch it was last handed out or resumed in
}

// recircs maps ids to frozen states.
type recircs struct {
	mu    sync.RWMutex
	byID  map[uint32]*frozen
	byEnc map[string]uint32
	epoch atomic.Uint64 // advanced by each FreeRecirc
}

func (r *recircs) init() {
	r.byID = map[uint32]*frozen{}
	r.byEnc = map[string]uint32{}
}

// encode is the frozen state's identity.
func (f *frozen) encode() string {
	b := []byte{f.table}
	for _, w := range f.regs {
		b = binary.BigEndian.AppendUint64(b, w)
	}
	for _, a := range f.set {
		ab, err := a.MarshalBinary()
		if err != nil {
			ab = []byte(a.String())
		}
		b = append(b, ab...)
	}
	if f.group != 0 {
		// Only such states carry it: the ids of the others stay what
		// they were (a restart keeps their cached flows).
		b = append(b, 'G')
		b = binary.BigEndian.AppendUint32(b, f.group)
	}
	return string(b)
}

// id returns the id of f, registering it if new.
func (r *recircs) id(f *frozen) uint32 {
	f.enc = f.encode()
	r.mu.RLock()
	id, ok := r.byEnc[f.enc]
	if ok {
		r.byID[id].seen.Store(r.epoch.Load())
	}
	r.mu.RUnlock()
	if ok {
		return id
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if id, ok := r.byEnc[f.enc]; ok {
		r.byID[id].seen.Store(r.epoch.Load())
		return id
	}
	f.seen.Store(r.epoch.Load())
	h := fnv.New32a()
	h.Write([]byte(f.enc))
	id = h.Sum32()
	for id == 0 || r.byID[id] != nil {
		id++ // a collision: the next free id
	}
	r.byID[id] = f
	r.byEnc[f.enc] = id
	return id
}

func (r *recircs) get(id uint32) *frozen {
	r.mu.RLock()
	defer r.mu.RUnlock()
	f := r.byID[id]
	if f != nil {
		f.seen.Store(r.epoch.Load())
	}
	return f
}

// FreeRecirc drops the frozen states whose id inUse does not name and that
// were neither handed out nor resumed since the previous call, and
// returns how many it dropped.
func (p *Pipeline) FreeRecirc(inUse map[uint32]bool) int {
	r := &p.recirc
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.epoch.Load()
	n := 0
	for id, f := range r.byID {
		if !inUse[id] && f.seen.Load() < e {
			delete(r.byID, id)
			delete(r.byEnc, f.enc)
			n++
		}
	}
	r.epoch.Add(1)
	return n
}

// RecircStates is the number of frozen states the pipeline holds.
func (p *Pipeline) RecircStates() int {
	p.recirc.mu.RLock()
	defer p.recirc.mu.RUnlock()
	return len(p.recirc.byID)
}

// IsUnknownRecirc reports whether err says a recirculated packet's id is
// not known to this pipeline (yet: see Switch.recoverRecirc).
func IsUnknownRecirc(err error) bool { return errors.Is(err, errUnknownRecirc) }

// KnowsRecirc reports whether id names a frozen state of this pipeline.
func (p *Pipeline) KnowsRecirc(id uint32) bool { return p.recirc.get(id) != nil }

// errUnknownRecirc: a recirculated packet whose id this switch never
// handed out (a fast-path flow from before a restart whose first half has
// not been translated again yet).
var errUnknownRecirc = errors.New("ofproto: recirculation id unknown to this switch")

// errAfterRecirc: ct(table=T) forks the packet; actions after it act on
// the untracked original, which the fast path cannot do after handing the
// packet to the recirculated lookup.
var errAfterRecirc = errors.New("ofproto: datapath actions after ct(table=...) in the same pipeline pass are not supported")

// freeze stops translation at this point: the pipeline resumes in table
// with the current registers and action set after the fast path looked
// the packet up again.
func (x *xlate) freeze(table uint8) {
	id := x.freezeAs(&frozen{table: table})
	x.tracef(TraceNote, x.tableID, "recirculate to table %d as recirc_id=0x%x", table, id)
}

// freezeAs completes f with the registers and action set, registers it,
// and ends this pass's actions with pre..., recirc(id); the action set
// belongs to the recirculated pass.
func (x *xlate) freezeAs(f *frozen, pre ...flow.Action) uint32 {
	x.commit()
	copy(f.regs[:], x.packet()[flow.KeyWords:])
	if x.set != nil && !x.set.empty() {
		f.set = x.set.actions()
	}
	id := x.p.recirc.id(f)
	x.acts = append(append(x.acts, pre...), flow.Recirc{ID: id})
	x.recircAt = len(x.acts)
	if x.set != nil {
		*x.set = actionSet{} // executed by the second pass
	}
	return id
}

// thaw starts the translation of a recirculated packet.
func (x *xlate) thaw() {
	id := x.in.RecircID
	f := x.p.recirc.get(id)
	if f == nil {
		x.tracef(TraceNote, 0, "recirc_id=0x%x unknown: drop", id)
		x.err = errUnknownRecirc
		return
	}
	copy(x.curW[flow.KeyWords:], f.regs[:])
	var set actionSet
	set.write(f.set)
	if f.group != 0 {
		x.tracef(TraceNote, f.table, "resume recirc_id=0x%x at select group %d by dp_hash", id, f.group)
		x.tableID = f.table
		x.set = &set
		x.groupByHash(f.group)
		x.set = nil
		if !set.empty() && x.err == nil {
			x.apply(set.actions())
		}
		return
	}
	x.tracef(TraceNote, f.table, "resume recirc_id=0x%x in table %d", id, f.table)
	x.pipelineFrom(f.table, set)
}

// freezeSelect stops translation at select group id: the fast path
// hashes the packet (dp_hash, with the group as the basis) and looks it
// up again, and the recirculated pass picks the bucket by dp_hash bits
// (groupByHash), so a cached flow serves every connection whose hash
// falls in its slot rather than one 5-tuple.
func (x *xlate) freezeSelect(id uint32) {
	rid := x.freezeAs(&frozen{table: x.tableID, group: id}, flow.Hash{Basis: id})
	x.tracef(TraceNote, x.tableID, "select group %d: hash, recirculate as recirc_id=0x%x", id, rid)
	x.selectFrozen = true
}
