package datapath

import (
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/nagare-net/nagare/pkg/flow"
)

const filterMul = 0x9E3779B97F4A7C15

// filterHash is the Go twin of filter_hash in bpf/lib/megaflow.h: a
// multiplicative hash of the masked key's non-zero mask words.
func filterHash(k, m *[flow.KeyWords]uint64, words uint32) uint32 {
	var h uint64
	for w := 0; w < flow.KeyWords; w++ {
		if words&(1<<w) != 0 {
			h = (h ^ (k[w] & m[w])) * filterMul
		}
	}
	return uint32(h >> (64 - filterBits))
}

func maskWords(m *[flow.KeyWords]uint64) uint32 {
	var words uint32
	for w, v := range m {
		if v != 0 {
			words |= 1 << w
		}
	}
	return words
}

func makeMegaflowID(slot int, masked *flow.Key) megaflowID {
	w := masked.Words()
	return megaflowIDOf(slot, &w)
}

// megaflowIDOf is makeMegaflowID of a masked key in words (Words lays the
// key out as Put does, a word at a time).
func megaflowIDOf(slot int, masked *[flow.KeyWords]uint64) megaflowID {
	var id megaflowID
	binary.NativeEndian.PutUint32(id[0:], uint32(slot))
	for i, w := range masked {
		binary.NativeEndian.PutUint64(id[8+8*i:], w)
	}
	return id
}

// Put installs a megaflow (see Install).
func (d *Datapath) Put(f flow.Flow) error {
	_, err := d.Install(f)
	return err
}

// Install installs a megaflow and returns its flow id (FlowStats.ID in
// dumps; reused after the flow is deleted). Its mask takes a slot in the
// mask list if no installed flow uses the same mask yet (at most MaxMasks
// masks).
func (d *Datapath) Install(f flow.Flow) (uint32, error) {
	var id [1]uint32
	var err [1]error
	d.InstallBatch([]flow.Flow{f}, id[:], err[:])
	return id[0], err[0]
}

// InstallBatch installs many megaflows with one system call for the batch
// (BPF_MAP_UPDATE_BATCH into megaflows; a second into flow_tails when a
// flow's list is longer than a head; the heads, generations and filter
// counts are stores into mapped arrays): what lets the slow path set up
// flows faster than one syscall round trip each. ids[i] and errs[i] (both
// len(fs) long) get the outcome of fs[i], as Install would report it. A
// flow that repeats an earlier one of the batch fails with ErrFlowExists.
func (d *Datapath) InstallBatch(fs []flow.Flow, ids []uint32, errs []error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	sc := &d.scratch
	b := sc.pending[:0]
	defer func() { sc.pending = b[:0] }()
	for i := range fs {
		b = append(b, pendingFlow{idx: i})
		p := &b[len(b)-1]
		var err error
		p.in, err = d.claim(fs[i], &p.entry, &p.mid)
		ids[i], errs[i] = 0, err
		if err != nil {
			b = b[:len(b)-1]
		}
	}
	if len(b) == 0 {
		return
	}
	fail := func(p *pendingFlow, stage int, err error) {
		errs[p.idx] = fmt.Errorf("datapath: installing %s: %w", flow.Flow{Key: p.in.key, Mask: d.masks[p.in.slot].mask, Actions: p.in.actions}, err)
		d.unclaim(p.in, stage)
		p.in = nil
	}

	// Order matters for packets arriving meanwhile: the entry first (a
	// long list's tail, then the head: a copy into the mapped flows array
	// while the id's generation is still 0), then the generation and the
	// filter count (stores), then the megaflow that makes them reachable.
	// (A free id's stats are zero: Delete zeroes them when it frees the
	// id.)
	keys, tails, at := sc.keys[:0], sc.tails[:0], sc.at[:0]
	defer func() { sc.keys, sc.tails, sc.at = keys[:0], tails[:0], at[:0] }()
	for i := range b {
		if b[i].in.tail {
			keys, tails, at = append(keys, b[i].in.id), append(tails, tailOf(&b[i].entry)), append(at, i)
		}
	}
	if len(keys) > 0 {
		batchPut(d.objs.FlowTails, keys, tails, func(i int, err error) { fail(&b[at[i]], stageClaimed, err) })
		b = live(b)
	}
	for i := range b {
		d.putHead(b[i].in.id, &b[i].entry)
		d.setGen(b[i].in.id, b[i].in.gen)
		d.addFilter(b[i].in.filter, 1)
	}

	mids := sc.mids[:0]
	defer func() { sc.mids = mids[:0] }()
	keys = keys[:0]
	for i := range b {
		mids, keys = append(mids, b[i].mid), append(keys, b[i].in.id)
	}
	batchPut(d.objs.Megaflows, mids, keys, func(i int, err error) { fail(&b[i], stageFilter, err) })
	from := MaxMasks
	for i := range b {
		if b[i].in != nil {
			ids[b[i].idx] = b[i].in.id
			from = min(from, b[i].in.slot+1)
		}
	}
	// Now that they are reachable: mask cache entries of later slots
	// may have been written by walks that missed them.
	d.bumpMaskSeqs(from)
}

// batchScratch is InstallBatch's working memory, kept between calls (under
// d.mu): a batch allocates nothing but the flows' own records.
type batchScratch struct {
	pending []pendingFlow
	keys    []uint32
	tails   []flowTailBytes
	at      []int // the pending flow of each tail
	mids    []megaflowID
}

// pendingFlow is a flow of an InstallBatch on its way into the maps.
type pendingFlow struct {
	in    *installed // nil once it failed
	idx   int        // index in the batch
	entry flowEntryBytes
	mid   megaflowID
}

// flowEntryBytes is an encoded struct flow_entry.
type flowEntryBytes [flowEntrySize]byte

// Stages of an install, for undoing one that failed part way.
const (
	stageClaimed = iota // id, mask reference, d.flows entry
	stageFilter         // entry written (a tail inserted), generation set, filter count raised
)

// claim checks and compiles f and reserves what it needs (id, mask slot,
// its place in d.flows, so a repeat in the same batch is refused), and
// writes the flow's entry and megaflow key for the maps. f's key need not
// be masked yet.
func (d *Datapath) claim(f flow.Flow, entry *flowEntryBytes, mid *megaflowID) (*installed, error) {
	if err := checkActions(f); err != nil { // (looks at fields the mask keeps whole)
		return nil, err
	}
	raw, err := d.compileActions(f.Actions)
	if err != nil {
		return nil, err
	}
	if err := d.checkBudget(f.Key.InPort, d.findMask(f.Mask) >= 0); err != nil {
		return nil, err
	}
	slot, fresh, err := d.maskSlot(f.Mask)
	if err != nil {
		return nil, err
	}
	// The key is masked in words, once: the megaflow key, the filter hash
	// and the masked flow.Key all come from them.
	ms := &d.masks[slot]
	kw := f.Key.Words()
	for i := range kw {
		kw[i] &= ms.mw[i]
	}
	*mid = megaflowIDOf(slot, &kw)
	f.Key = flow.KeyFromWords(kw)
	if d.flows.get(mid, slot, &f.Key) != nil {
		if fresh {
			d.releaseMask(slot, true)
		}
		return nil, fmt.Errorf("datapath: %s: %w", f, ErrFlowExists)
	}
	ms.refs++
	id, ok := d.ids.alloc(d.cfg.MaxFlows)
	if !ok {
		d.releaseMask(slot, false)
		return nil, fmt.Errorf("datapath: %w (%d flows)", ErrFlowLimit, d.cfg.MaxFlows)
	}
	in := &installed{id: id, gen: d.nextGen(), slot: slot, key: f.Key, actions: f.Actions, sets: setsOf(raw), onload: f.Onload,
		tail: len(raw) > inlineActions}
	in.filter = uint32(slot)<<filterBits | filterHash(&kw, &ms.mw, ms.words)
	putEntry(entry[:], in.gen, raw, f.Onload)
	d.track(*mid, in)
	return in, nil
}

// unclaim undoes a claim whose install got as far as stage.
func (d *Datapath) unclaim(in *installed, stage int) {
	if stage >= stageFilter {
		d.addFilter(in.filter, -1)
		d.setGen(in.id, 0)
		if in.tail {
			_ = d.objs.FlowTails.Delete(in.id)
		}
	}
	d.freeID(in.id)
	d.untrack(makeMegaflowID(in.slot, &in.key), in)
	d.releaseMask(in.slot, false)
}

// track and untrack keep d.flows, d.byID and the ports' use in step.
func (d *Datapath) track(mid megaflowID, in *installed) {
	d.flows.put(&mid, in)
	d.account(in, 1)
	if int(in.id) >= len(d.byID) {
		d.byID = append(d.byID, make([]*installed, int(in.id)+1-len(d.byID))...)
	}
	d.byID[in.id] = in
}

func (d *Datapath) untrack(mid megaflowID, in *installed) {
	d.flows.del(&mid, in)
	d.account(in, -1)
	d.byID[in.id] = nil
	// Walks (RangeStats) end at the highest id in use, not the highest
	// ever used.
	n := len(d.byID)
	for n > 0 && d.byID[n-1] == nil {
		n--
	}
	d.byID = d.byID[:n]
}

// live drops the flows that failed.
func live(b []pendingFlow) []pendingFlow {
	out := b[:0]
	for _, p := range b {
		if p.in != nil {
			out = append(out, p)
		}
	}
	return out
}

// batchPut writes keys[i] → vals[i] with BPF_MAP_UPDATE_BATCH (see
// eachBatch). Batch updates take no BPF_NOEXIST: d.flows, kept under d.mu by
// the only writer, is what keeps a megaflow from being installed twice.
func batchPut[K, V any](m *ebpf.Map, keys []K, vals []V, failed func(i int, err error)) {
	eachBatch(len(keys), func(off int) (int, error) { return m.BatchUpdate(keys[off:], vals[off:], nil) }, failed)
}

// batchDel deletes keys with BPF_MAP_DELETE_BATCH (see eachBatch).
func batchDel[K any](m *ebpf.Map, keys []K, failed func(i int, err error)) {
	eachBatch(len(keys), func(off int) (int, error) { return m.BatchDelete(keys[off:], nil) }, failed)
}

// eachBatch runs a batch map operation over n elements. The kernel stops
// at the first element it cannot handle and says how many it did;
// failed(i, err) is called for that one and the rest is tried again.
func eachBatch(n int, call func(off int) (int, error), failed func(i int, err error)) {
	for off := 0; off < n; {
		done, err := call(off)
		if err == nil {
			return
		}
		if done < 0 || done >= n-off {
			done = n - off - 1
		}
		failed(off+done, err)
		off += done + 1
	}
}

// Modify replaces the actions (and the placement, f.Onload) of an
// installed megaflow in place. Packets see the old or the new list, never
// a mix: its generation is 0 while the entry is rewritten (a packet that
// comes meanwhile misses, and the slow path has it), then a new one, which
// also retires the copies of the old actions in the exact-match cache.
func (d *Datapath) Modify(f flow.Flow) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	f = f.Normalize()
	if err := checkActions(f); err != nil {
		return err
	}
	in, err := d.find(f.Key, f.Mask)
	if err != nil {
		return err
	}
	raw, err := d.compileActions(f.Actions)
	if err != nil {
		return err
	}
	gen := d.nextGen()
	var entry flowEntryBytes
	putEntry(entry[:], gen, raw, f.Onload)
	tail := len(raw) > inlineActions
	d.setGen(in.id, 0)
	if tail {
		if err := d.objs.FlowTails.Update(in.id, tailOf(&entry), ebpf.UpdateAny); err != nil {
			// A failed update leaves the tail as it was, and the head
			// is untouched: the old entry is whole again.
			d.setGen(in.id, in.gen)
			return fmt.Errorf("datapath: modifying %s: %w", f, err)
		}
	}
	d.putHead(in.id, &entry)
	d.retire(in)
	d.setGen(in.id, gen)
	if in.tail && !tail {
		_ = d.objs.FlowTails.Delete(in.id)
	}
	in.gen, in.actions, in.sets, in.onload, in.tail = gen, f.Actions, setsOf(raw), f.Onload, tail
	return nil
}

// Delete removes the megaflow with this key and mask, and returns its final
// statistics. Exact-match cache entries that pointed at it stop matching at
// once: its generation is cleared first, and a later flow reusing the id
// gets a new generation number.
func (d *Datapath) Delete(key flow.Key, mask flow.Mask) (Stats, error) {
	var st [1]Stats
	var err [1]error
	d.deleteBatch([]flow.Flow{{Key: key, Mask: mask}}, err[:], st[:])
	return st[0], err[0]
}

// DeleteBatch removes many megaflows (Key and Mask of each fs[i]; actions
// are ignored) with one map call per map. errs[i] (len(fs) long) gets
// ErrNoFlow for a flow that is not installed (or repeats an earlier one of
// the batch), or the error that kept it installed. Unlike Delete it does
// not read the flows' final counters.
func (d *Datapath) DeleteBatch(fs []flow.Flow, errs []error) { d.deleteBatch(fs, errs, nil) }

// deleteBatch is DeleteBatch that also reads each deleted flow's final
// counters into final[i] unless final is nil (one lookup per flow).
func (d *Datapath) deleteBatch(fs []flow.Flow, errs []error, final []Stats) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ins []*installed
	var mids []megaflowID
	for i, f := range fs {
		in, err := d.find(f.Key.And(f.Mask), f.Mask)
		errs[i] = err
		if err != nil {
			continue
		}
		// Untracked at once, so a repeat in the batch is not found again.
		mid := makeMegaflowID(in.slot, &in.key)
		d.untrack(mid, in)
		d.retire(in)
		in.idx = i
		ins, mids = append(ins, in), append(mids, mid)
	}
	if len(ins) == 0 {
		return
	}
	keep := func(j int, err error) { // flow j stays installed
		in := ins[j]
		errs[in.idx] = fmt.Errorf("datapath: deleting megaflow: %w", err)
		d.track(mids[j], in)
		ins[j] = nil
	}
	// Exact-match cache entries first (generation 0), then the megaflow,
	// then its filter count.
	for _, in := range ins {
		d.setGen(in.id, 0)
	}
	batchDel(d.objs.Megaflows, mids, func(j int, err error) {
		d.setGen(ins[j].id, ins[j].gen)
		keep(j, err)
	})
	var gone []uint32
	for _, in := range ins {
		if in == nil {
			continue
		}
		if final != nil {
			final[in.idx], _ = d.readStats(in.id) // unreachable now: nothing more to count
		}
		d.addFilter(in.filter, -1)
		gone = append(gone, in.id)
	}
	if len(gone) > 0 {
		// A head stays as it is: generation 0 keeps packets off it.
		var tails []uint32
		for _, in := range ins {
			if in != nil && in.tail {
				tails = append(tails, in.id)
			}
		}
		if len(tails) > 0 {
			_, _ = d.objs.FlowTails.BatchDelete(tails, nil)
		}
		_, _ = d.objs.Stats.BatchUpdate(gone, make([]nagareFlowStats, len(gone)*d.ncpu), nil)
	}
	for _, in := range ins {
		if in != nil {
			d.ids.release(in.id)
			d.releaseMask(in.slot, false)
		}
	}
}

// Flush deletes every megaflow.
func (d *Datapath) Flush() error {
	fs := d.Flows()
	const chunk = 4096
	errs := make([]error, chunk)
	var all []error
	for i := 0; i < len(fs); i += chunk {
		part := fs[i:min(i+chunk, len(fs))]
		d.DeleteBatch(part, errs[:len(part)])
		for _, err := range errs[:len(part)] {
			if err != nil && !errors.Is(err, ErrNoFlow) {
				all = append(all, err)
			}
		}
	}
	return errors.Join(all...)
}

// nextGen returns a fresh, non-zero generation number.
func (d *Datapath) nextGen() uint32 {
	d.gen++
	if d.gen == 0 {
		d.gen = 1
	}
	return d.gen
}

func (d *Datapath) find(key flow.Key, mask flow.Mask) (*installed, error) {
	for slot := range d.masks {
		if d.masks[slot].refs > 0 && d.masks[slot].mask == mask {
			mid := makeMegaflowID(slot, &key)
			if in := d.flows.get(&mid, slot, &key); in != nil {
				return in, nil
			}
			break
		}
	}
	return nil, fmt.Errorf("datapath: %s: %w", flow.Format(key, mask), ErrNoFlow)
}

// checkActions refuses what the fast path cannot do correctly.
func checkActions(f flow.Flow) error {
	for _, a := range f.Actions {
		switch a.(type) {
		case flow.SetTpSrc, flow.SetTpDst:
			// SCTP's CRC32c cannot be patched incrementally.
			if f.Mask.NwProto == 0xff && f.Key.NwProto == 132 {
				return fmt.Errorf("datapath: rewriting SCTP ports is not supported")
			}
		}
	}
	return nil
}

// findMask is the slot of an installed mask, or -1. Callers hold d.mu.
func (d *Datapath) findMask(mask flow.Mask) int {
	for i := range d.masks {
		if d.masks[i].refs > 0 && d.masks[i].mask == mask {
			return i
		}
	}
	return -1
}

// maskSlot finds the slot of mask, or claims a free one. fresh reports a
// newly claimed slot (so a failed install can give it back).
func (d *Datapath) maskSlot(mask flow.Mask) (slot int, fresh bool, err error) {
	free := -1
	for i := range d.masks {
		if d.masks[i].refs > 0 {
			if d.masks[i].mask == mask {
				return i, false, nil
			}
		} else if free < 0 {
			free = i
		}
	}
	if free < 0 {
		return 0, false, fmt.Errorf("datapath: %w", ErrMaskLimit)
	}
	s := &d.masks[free]
	s.setMask(mask)
	var v nagareMfMask
	buf := make([]byte, flow.KeySize)
	mask.Put(buf)
	if err := bytesTo(&v.Mask, buf); err != nil {
		return 0, false, err
	}
	v.Words, v.Valid = s.words, 1
	if err := d.objs.Masks.Put(uint32(free), v); err != nil {
		return 0, false, err
	}
	if uint32(free)+1 > d.nMasks {
		d.nMasks = uint32(free) + 1
		if err := d.writeConfig(func(c *nagareDpConfig) { c.N_masks = d.nMasks }); err != nil {
			return 0, false, err
		}
	}
	return free, true, nil
}

// releaseMask drops a reference (or a fresh claim) and retires the slot when
// no flow uses it any more.
func (d *Datapath) releaseMask(slot int, fresh bool) {
	s := &d.masks[slot]
	if !fresh {
		s.refs--
	}
	if s.refs > 0 {
		return
	}
	s.refs = 0
	_ = d.objs.Masks.Put(uint32(slot), nagareMfMask{})
	n := uint32(0)
	for i := range d.masks {
		if d.masks[i].refs > 0 {
			n = uint32(i) + 1
		}
	}
	if n != d.nMasks {
		d.nMasks = n
		_ = d.writeConfig(func(c *nagareDpConfig) { c.N_masks = n })
	}
}

// freeID zeroes a flow id's counters (the flow is unreachable by now) and
// returns the id to the allocator, so Install needs no write for them.
func (d *Datapath) freeID(id uint32) {
	_ = d.objs.Stats.Put(id, make([]nagareFlowStats, d.ncpu))
	d.ids.release(id)
}

// Stats are a cached flow's counters, summed over CPUs.
type Stats struct {
	Packets  uint64
	Bytes    uint64
	Used     time.Time // zero: never used
	TCPFlags uint16
}

// FlowStats is one installed megaflow and its counters.
type FlowStats struct {
	flow.Flow
	ID    uint32
	Stats Stats
}

func (d *Datapath) readStats(id uint32) (Stats, error) {
	per := make([]nagareFlowStats, d.ncpu)
	if err := d.objs.Stats.Lookup(id, &per); err != nil {
		return Stats{}, err
	}
	return sumStats(per, coarseNow()), nil
}

// Flows returns the installed megaflows (without statistics).
func (d *Datapath) Flows() []flow.Flow {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]flow.Flow, 0, d.flows.len())
	for in := range d.flows.all() {
		out = append(out, flow.Flow{Key: in.key, Mask: d.masks[in.slot].mask, Actions: in.actions, Onload: in.onload})
	}
	return out
}

// Dump returns the installed megaflows with their statistics, in flow id
// order (counters read with RangeStats, a chunk at a time).
func (d *Datapath) Dump() ([]FlowStats, error) {
	d.mu.Lock()
	all := make([]Stats, len(d.byID)) // by flow id
	d.mu.Unlock()
	err := d.RangeStats(func(ids []uint32, stats []Stats) {
		for i, id := range ids {
			if int(id) >= len(all) {
				all = append(all, make([]Stats, int(id)+1-len(all))...)
			}
			all[id] = stats[i]
		}
	})
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]FlowStats, 0, d.flows.len())
	for _, in := range d.byID {
		if in == nil {
			continue
		}
		f := FlowStats{Flow: flow.Flow{Key: in.key, Mask: d.masks[in.slot].mask, Actions: in.actions, Onload: in.onload}, ID: in.id}
		if int(in.id) < len(all) {
			f.Stats = all[in.id] // else installed after the walk: nothing counted yet
		}
		out = append(out, f)
	}
	return out, nil
}

// RangeStats calls fn with the counters of every installed megaflow, a
// chunk of flow ids at a time, in id order, without holding the datapath
// (installs and deletes go on meanwhile: a flow installed during the walk
// may be missed, a deleted one is not reported). It allocates nothing per
// flow, so a revalidator round over a million flows costs what a round over
// a thousand does, per flow.
//
// The kernel's copy of a chunk (the costly part: ~130 ns a flow) runs
// without d.mu, so the upcall handler's installs do not wait for it. What
// makes that safe: an id's counters change owner only when the id is freed
// (its counters zeroed, under d.mu) and claimed again, and freeing counts
// in d.ids.released. A chunk read while no id was freed holds each live
// flow's own counters (a flow installed meanwhile has zero or its own);
// otherwise its live flows are read again, one by one, under d.mu.
func (d *Datapath) RangeStats(fn func(ids []uint32, stats []Stats)) error {
	const chunk = 4096
	d.mu.Lock()
	small := d.flows.len() < batchThreshold
	d.mu.Unlock()
	if small {
		return d.rangeStatsEach(fn)
	}
	keys := make([]uint32, chunk)
	vals := make([]nagareFlowStats, chunk*d.ncpu)
	ids, stats := make([]uint32, 0, chunk), make([]Stats, 0, chunk)
	var cursor ebpf.MapBatchCursor
	for done := false; !done; {
		ids, stats = ids[:0], stats[:0]
		d.mu.Lock()
		released := d.ids.released
		d.mu.Unlock()
		cnt, err := d.objs.Stats.BatchLookup(&cursor, keys, vals, nil)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			done = true
		} else if err != nil {
			return fmt.Errorf("datapath: reading flow statistics: %w", err)
		}
		if rangeStatsRead != nil {
			rangeStatsRead()
		}
		now := coarseNow()
		d.mu.Lock()
		reread := d.ids.released != released
		for i := 0; i < cnt; i++ {
			id := keys[i]
			if int(id) >= len(d.byID) {
				done = true
				break
			}
			if d.byID[id] == nil {
				continue
			}
			st := sumStats(vals[i*d.ncpu:(i+1)*d.ncpu], now)
			if reread {
				if st, err = d.readStats(id); err != nil {
					d.mu.Unlock()
					return err
				}
			}
			ids, stats = append(ids, id), append(stats, st)
		}
		d.mu.Unlock()
		if len(ids) > 0 {
			fn(ids, stats)
		}
	}
	return nil
}

// rangeStatsRead, if set (tests), runs after each chunk's read, before
// d.mu is taken again: where a delete and an install can change an id's
// owner under the walk.
var rangeStatsRead func()

// rangeStatsEach is RangeStats for a few flows: one lookup each, under
// d.mu, cheaper than reading the whole stats array.
func (d *Datapath) rangeStatsEach(fn func(ids []uint32, stats []Stats)) error {
	var ids []uint32
	var stats []Stats
	d.mu.Lock()
	for _, in := range d.byID {
		if in == nil {
			continue
		}
		st, err := d.readStats(in.id)
		if err != nil {
			d.mu.Unlock()
			return err
		}
		ids, stats = append(ids, in.id), append(stats, st)
	}
	d.mu.Unlock()
	if len(ids) > 0 {
		fn(ids, stats)
	}
	return nil
}

// FlowByID returns the installed megaflow with this id.
func (d *Datapath) FlowByID(id uint32) (flow.Flow, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if int(id) >= len(d.byID) || d.byID[id] == nil {
		return flow.Flow{}, false
	}
	in := d.byID[id]
	return flow.Flow{Key: in.key, Mask: d.masks[in.slot].mask, Actions: in.actions, Onload: in.onload}, true
}

// batchThreshold: below this many flows, one lookup per flow is cheaper
// than batch-reading the stats array.
const batchThreshold = 64

func sumStats(per []nagareFlowStats, now timePair) Stats {
	var st Stats
	var used uint64
	for _, p := range per {
		st.Packets += p.Packets
		st.Bytes += p.Bytes
		st.TCPFlags |= p.TcpFlags
		used = max(used, p.Used)
	}
	if used != 0 {
		st.Used = now.wall.Add(-time.Duration(now.mono - min(used, now.mono)))
	}
	return st
}

// timePair is one reading of CLOCK_MONOTONIC_COARSE (what the fast path
// stamps flows with) and of the wall clock.
type timePair struct {
	mono uint64
	wall time.Time
}

func coarseNow() timePair {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts)
	return timePair{mono: uint64(ts.Nano()), wall: time.Now()}
}

// NumMasks is the number of masks in use.
func (d *Datapath) NumMasks() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for i := range d.masks {
		if d.masks[i].refs > 0 {
			n++
		}
	}
	return n
}

// idAllocator hands out the smallest free flow ids (they index the
// per-CPU stats array).
type idAllocator struct {
	next     uint32
	free     idHeap // freed ids below next, smallest first
	released uint64 // ids freed so far (RangeStats)
}

func (a *idAllocator) alloc(limit int) (uint32, bool) {
	if a.free.Len() > 0 {
		return heap.Pop(&a.free).(uint32), true
	}
	if int(a.next) >= limit {
		return 0, false
	}
	a.next++
	return a.next - 1, true
}

func (a *idAllocator) release(id uint32) {
	heap.Push(&a.free, id)
	a.released++
}

// idHeap is a min-heap of flow ids (container/heap).
type idHeap []uint32

func (h idHeap) Len() int           { return len(h) }
func (h idHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h idHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *idHeap) Push(x any)        { *h = append(*h, x.(uint32)) }
func (h *idHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
