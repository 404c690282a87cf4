package datapath

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
)

// flow_gens (a flow id's generation, 0: dead) and mask_filter (a filter
// slot's count of flows) are arrays that userspace alone writes and the
// fast path only reads. Both are BPF_F_MMAPABLE: a write is a 32-bit
// store into this process's mapping, not a system call. A batch of new
// flows used to make two BPF_MAP_UPDATE_BATCH calls for them, which cost
// a first packet handled alone as much as the rest of its install
// (docs/lab.md, issue 19). The stores keep the order the install and
// delete paths rely on: x86 does not reorder stores with stores, and the
// megaflow insert or delete that follows them is a system call.
//
// An array map's elements are 8 bytes apart whatever their value size
// (the kernel rounds elem_size up to 8): a u32 value is the low half of
// each 8-byte element (bpfel, little-endian).
//
// flows, the heads of the flows' entries (bpf/lib/maps.h, struct
// flow_head: the generation, the action count and flags, the first
// inlineActions actions), is one too: an install writes a head with a
// copy into the mapping where it made a hash map insert, whose element
// the kernel allocated, and that was the larger part of the kernel's time
// in an install. A head is written only while its id's generation is 0:
// the fast path reads a head between two reads of the generation
// (flow_fetch, bpf/lib/megaflow.h), so it takes a whole head or none.

// mapFlowArrays maps flow_gens, mask_filter and flows into this process.
func (d *Datapath) mapFlowArrays() error {
	gens, err := mmapArray(d.objs.FlowGens, "flow_gens", d.cfg.MaxFlows*int(unsafe.Sizeof(arrayU32{})))
	if err != nil {
		return err
	}
	filter, err := mmapArray(d.objs.MaskFilter, "mask_filter", filterSize*int(unsafe.Sizeof(arrayU32{})))
	if err != nil {
		munmapArray(&gens)
		return err
	}
	heads, err := mmapArray(d.objs.Flows, "flows", d.cfg.MaxFlows*flowHeadSize)
	if err != nil {
		munmapArray(&gens)
		munmapArray(&filter)
		return err
	}
	d.gensMem, d.filterMem, d.headsMem = gens, filter, heads
	d.gens = unsafe.Slice((*arrayU32)(unsafe.Pointer(&gens[0])), d.cfg.MaxFlows)
	d.filter = unsafe.Slice((*arrayU32)(unsafe.Pointer(&filter[0])), filterSize)
	d.heads = unsafe.Slice((*flowHead)(unsafe.Pointer(&heads[0])), d.cfg.MaxFlows)
	return nil
}

func (d *Datapath) unmapFlowArrays() {
	d.gens, d.filter, d.heads = nil, nil, nil
	munmapArray(&d.gensMem)
	munmapArray(&d.filterMem)
	munmapArray(&d.headsMem)
}

// inlineActions is FLOW_INLINE_ACTIONS: the actions a head holds; a
// longer list keeps the rest in flow_tails under the flow id.
const inlineActions = 5

// flowHeadSize and flowTailSize are struct flow_head's and flow_tail's
// sizes (the assignments below fail to compile if bpf2go's differ).
const (
	flowHeadSize = 8 + inlineActions*actionSize
	flowTailSize = 8 + (MaxActions-inlineActions)*actionSize
)

var (
	_ [flowHeadSize]byte = [unsafe.Sizeof(nagareFlowHead{})]byte{}
	_ [flowTailSize]byte = [unsafe.Sizeof(nagareFlowTail{})]byte{}
)

// flowHead is an element of the flows array as mapped (a multiple of 8
// bytes, so elements are flowHeadSize apart).
type flowHead [flowHeadSize]byte

// flowTailBytes is an encoded struct flow_tail.
type flowTailBytes [flowTailSize]byte

// long reports whether an encoded entry's list needs a tail.
func long(entry *flowEntryBytes) bool {
	return int(binary.NativeEndian.Uint16(entry[4:])) > inlineActions
}

// tailOf returns the tail of an encoded entry, stamped with its generation.
func tailOf(entry *flowEntryBytes) flowTailBytes {
	var t flowTailBytes
	copy(t[:4], entry[:4])
	copy(t[8:], entry[flowHeadSize:])
	return t
}

// putHead writes flow id's head from its encoded entry. Callers hold d.mu
// and have set id's generation to 0.
func (d *Datapath) putHead(id uint32, entry *flowEntryBytes) {
	copy(d.heads[id][:], entry[:flowHeadSize])
}

// entryOf reads flow id's whole entry back: its head, and its tail when
// the list is long.
func (d *Datapath) entryOf(id uint32) (flowEntryBytes, error) {
	var e flowEntryBytes
	copy(e[:flowHeadSize], d.heads[id][:])
	return e, d.addTail(id, &e)
}

// addTail completes e, an entry holding flow id's head, with the tail in
// flow_tails when the list is long. A tail of another generation than the
// head's is reported as missing (ebpf.ErrKeyNotExist).
func (d *Datapath) addTail(id uint32, e *flowEntryBytes) error {
	if !long(e) {
		return nil
	}
	var t flowTailBytes
	if err := d.objs.FlowTails.Lookup(id, &t); err != nil {
		return fmt.Errorf("datapath: reading the tail of flow %d: %w", id, err)
	}
	if !bytes.Equal(t[:4], e[:4]) {
		return fmt.Errorf("datapath: flow %d: tail of generation %d under a head of %d: %w", id,
			binary.NativeEndian.Uint32(t[:]), binary.NativeEndian.Uint32(e[:]), ebpf.ErrKeyNotExist)
	}
	copy(e[flowHeadSize:], t[8:])
	return nil
}

// filterSize is mask_filter's length: FILTER_SLOTS per mask.
const filterSize = MaxMasks << filterBits

// arrayU32 is an element of an array map of u32 values, as mapped.
type arrayU32 struct {
	v uint32
	_ uint32
}

func (e *arrayU32) load() uint32   { return atomic.LoadUint32(&e.v) }
func (e *arrayU32) store(v uint32) { atomic.StoreUint32(&e.v, v) }

// setGen writes flow id's generation. Callers hold d.mu.
func (d *Datapath) setGen(id, gen uint32) { d.gens[id].store(gen) }

// addFilter changes filter slot's count by delta. Callers hold d.mu.
func (d *Datapath) addFilter(slot uint32, delta int32) {
	atomic.AddUint32(&d.filter[slot].v, uint32(delta))
}
