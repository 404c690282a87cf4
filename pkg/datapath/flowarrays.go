package datapath

import (
	"sync/atomic"
	"unsafe"
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

// mapFlowArrays maps flow_gens and mask_filter into this process.
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
	d.gensMem, d.filterMem = gens, filter
	d.gens = unsafe.Slice((*arrayU32)(unsafe.Pointer(&gens[0])), d.cfg.MaxFlows)
	d.filter = unsafe.Slice((*arrayU32)(unsafe.Pointer(&filter[0])), filterSize)
	return nil
}

func (d *Datapath) unmapFlowArrays() {
	d.gens, d.filter = nil, nil
	munmapArray(&d.gensMem)
	munmapArray(&d.filterMem)
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
