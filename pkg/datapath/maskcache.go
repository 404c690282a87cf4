package datapath

import (
	"sync/atomic"
	"unsafe"
)

// The mask cache (bpf/lib/megaflow.h) remembers, per CPU and key, the
// mask slot where the walk over the masks found the key's megaflow, and
// is trusted only while no megaflow installed since could be found
// before it. mask_seqs says when that was: [0] counts installs, [1+slot]
// is the count at the last install under a slot before slot. Userspace
// alone writes it, through this mapping, after the megaflows are in the
// table.

// mapMaskSeqs maps the mask_seqs array into this process.
func (d *Datapath) mapMaskSeqs() error {
	mem, err := mmapArray(d.objs.MaskSeqs, "mask_seqs", (1+MaxMasks)*8)
	d.maskSeqs = mem
	return err
}

func (d *Datapath) unmapMaskSeqs() { munmapArray(&d.maskSeqs) }

func (d *Datapath) maskSeq(i int) *uint64 {
	return (*uint64)(unsafe.Pointer(&d.maskSeqs[i*8]))
}

// bumpMaskSeqs invalidates the mask cache's entries for slots from on:
// called after megaflows were installed under slot from-1, so an entry
// for a later slot written by a walk that began before could have missed
// them. Callers hold d.mu.
func (d *Datapath) bumpMaskSeqs(from int) {
	if d.maskSeqs == nil || from >= MaxMasks {
		return
	}
	seq := atomic.AddUint64(d.maskSeq(0), 1)
	for slot := from; slot < MaxMasks; slot++ {
		atomic.StoreUint64(d.maskSeq(1+slot), seq)
	}
}
