package datapath

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nagare-net/nagare/pkg/flow"
)

// Onload: a flow installed with flow.Flow.Onload is classified and counted
// by the fast path like any other, which then puts its packets on the
// onload ring (bpf/lib/onload.h); an Onloader reads them in batches and
// executes each with the flow's cached actions, on the same ExecBatch the
// upcall handler delivers first packets with (sendmmsg on a packet socket
// for plain outputs, BPF_PROG_RUN otherwise).
//
// Order: per flow id, the fast path counts packets it hands up (enq) and
// the Onloader counts packets it has sent on (done), in the mmapped
// onload_seqs array. While they differ, the fast path sends the flow's
// packets up even when the flow is offloaded again, so no packet
// overtakes one still in userspace.

// UpcallOnload is the reason of the onload ring's records; Cookie holds
// the flow's generation (high 32 bits) and id (low 32).
const UpcallOnload UpcallReason = 3

// onloadSeqSize is sizeof(struct onload_seq): enq, done.
const onloadSeqSize = 16

// mapOnloadSeqs maps the onload_seqs array into this process.
func (d *Datapath) mapOnloadSeqs() error {
	size := d.cfg.MaxFlows * onloadSeqSize
	page := os.Getpagesize()
	size = (size + page - 1) / page * page
	mem, err := unix.Mmap(d.objs.OnloadSeqs.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("datapath: mapping onload_seqs (BPF_F_MMAPABLE): %w: %w", err, ErrNotSupported)
	}
	d.seqs = mem
	return nil
}

func (d *Datapath) unmapOnloadSeqs() {
	if d.seqs != nil {
		_ = unix.Munmap(d.seqs)
		d.seqs = nil
	}
}

// seqCounters returns the enq and done counters of flow id.
func (d *Datapath) seqCounters(id uint32) (enq, done *uint64) {
	off := int(id) * onloadSeqSize
	if d.seqs == nil || off+onloadSeqSize > len(d.seqs) {
		return nil, nil
	}
	return (*uint64)(unsafe.Pointer(&d.seqs[off])), (*uint64)(unsafe.Pointer(&d.seqs[off+8]))
}

// OnloadPending returns how many packets of flow id the fast path handed
// to userspace that have not been sent on yet.
func (d *Datapath) OnloadPending(id uint32) uint64 {
	enq, done := d.seqCounters(id)
	if enq == nil {
		return 0
	}
	return atomic.LoadUint64(enq) - atomic.LoadUint64(done)
}

// retiredFlow is the action list of a flow generation that was replaced
// (placement change, new actions, delete) while its packets could still be
// in the onload ring: they are executed as they were classified.
type retiredFlow struct {
	id      uint32
	actions []flow.Action
}

// retire keeps in's actions for the packets of its current generation
// still on their way, if there can be any. Callers hold d.mu.
func (d *Datapath) retire(in *installed) {
	if in.onload || d.OnloadPending(in.id) > 0 {
		d.retired[in.gen] = retiredFlow{id: in.id, actions: in.actions}
	}
}

// onloadActions returns the actions of flow id at generation gen. Callers
// hold d.mu.
func (d *Datapath) onloadActions(id, gen uint32) ([]flow.Action, bool) {
	if int(id) < len(d.byID) {
		if in := d.byID[id]; in != nil && in.gen == gen {
			return in.actions, true
		}
	}
	if r, ok := d.retired[gen]; ok && r.id == id {
		return r.actions, true
	}
	return nil, false
}

// pruneRetired forgets retired generations whose flow id has no packet
// left in userspace.
func (d *Datapath) pruneRetired() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for gen, r := range d.retired {
		if d.OnloadPending(r.id) == 0 {
			delete(d.retired, gen)
		}
	}
}

// OnloadStats are an Onloader's counters.
type OnloadStats struct {
	Packets, Bytes atomic.Uint64 // executed (a GSO packet sent whole: once; cut: each segment)
	Batches        atomic.Uint64 // ring reads
	Whole          atomic.Uint64 // GSO packet copies sent whole (vnet header)
	Segmented      atomic.Uint64 // GSO packets cut into segments
	Unknown        atomic.Uint64 // packets whose flow generation was unknown (dropped)
	Failed         atomic.Uint64 // packets that could not be executed (dropped)
	Malformed      atomic.Uint64 // records that did not decode
	// VnetHdr says whether GSO packets can be sent whole: "on", or why
	// not (they are then all cut).
	VnetHdr string
}

// onloadVnetHdr turns sending GSO packets whole off when false (tests of
// the cutting fallback).
var onloadVnetHdr = true

// Onloader executes the packets of onloaded flows. One per instance; it
// belongs to a goroutine that called LockToNetns.
type Onloader struct {
	d     *Datapath
	r     *UpcallReader
	eb    *ExecBatch
	ups   []Upcall
	acts  [][]flow.Action
	known []bool
	// arena and segs hold one batch's segments of GSO packets.
	arena []byte
	segs  [][]byte
	Stats OnloadStats
}

// onloadBatch is the most ring records one Run iteration takes.
const onloadBatch = 64

// NewOnloader opens the onload ring. Call it on the goroutine that will
// call Run, after LockToNetns: the packet socket it sends with is opened in
// the instance's namespace.
func (d *Datapath) NewOnloader() (*Onloader, error) {
	r, err := d.newUpcallReader(d.objs.Onload)
	if err != nil {
		return nil, err
	}
	eb, err := d.NewExecBatch()
	if err != nil && eb.fd < 0 {
		// Without a packet socket, BPF_PROG_RUN still executes (slower).
		err = nil
	}
	o := &Onloader{d: d, r: r, eb: eb, ups: make([]Upcall, onloadBatch),
		acts: make([][]flow.Action, onloadBatch), known: make([]bool, onloadBatch)}
	o.Stats.VnetHdr = "off"
	if onloadVnetHdr {
		o.Stats.VnetHdr = "on"
		if verr := eb.enableVnetHdr(); verr != nil {
			o.Stats.VnetHdr = verr.Error()
		}
	}
	return o, err
}

// Run executes onloaded packets until Close.
func (o *Onloader) Run() error {
	d := o.d
	for {
		n, err := o.r.ReadBatch(o.ups)
		o.Stats.Malformed.Store(o.r.Malformed)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return nil
			}
			return err
		}
		o.Stats.Batches.Add(1)
		ups := o.ups[:n]
		d.mu.Lock()
		for i := range ups {
			c := ups[i].Cookie
			o.acts[i], o.known[i] = d.onloadActions(uint32(c), uint32(c>>32))
		}
		d.mu.Unlock()
		for i := range ups {
			u := &ups[i]
			switch {
			case !o.known[i]:
				o.Stats.Unknown.Add(1)
			case len(o.acts[i]) == 0: // a drop flow
			case u.Truncated():
				o.Stats.Failed.Add(1)
			case u.GSOSize > 0 && o.eb.AddGSO(u.Packet, u.GSOSize, u.Key.InPort, o.acts[i]):
				// A GSO packet (a pod with TSO) to plain outputs: sent
				// whole, the kernel finishes its checksum (vnet.go).
				o.Stats.Packets.Add(1)
				o.Stats.Bytes.Add(uint64(len(u.Packet)))
			case u.GSOSize > 0:
				// Other actions, no vnet header, or no partial
				// checksum: it goes out as the segments the pod's
				// device would have sent, every checksum computed.
				var err error
				n := len(o.segs)
				if o.arena, o.segs, err = SegmentAppend(o.arena, o.segs, u.Packet, u.GSOSize); err != nil {
					o.Stats.Failed.Add(1)
					continue
				}
				o.Stats.Segmented.Add(1)
				for _, seg := range o.segs[n:] {
					o.add(seg, u.Key.InPort, o.acts[i])
				}
			default:
				o.add(u.Packet, u.Key.InPort, o.acts[i])
			}
		}
		failed, whole, refused := o.eb.Failed, o.eb.GSOWhole, o.eb.GSORefused
		_ = o.eb.Flush()
		o.Stats.Failed.Add(o.eb.Failed - failed)
		o.Stats.Whole.Add(o.eb.GSOWhole - whole)
		o.Stats.Segmented.Add(o.eb.GSORefused - refused)
		// Sent: the segments' buffer is free for the next batch.
		o.arena, o.segs = o.arena[:0], o.segs[:0]
		// Sent on (or dropped): later packets of these flows may take the
		// fast path again.
		for i := range ups {
			if _, done := d.seqCounters(uint32(ups[i].Cookie)); done != nil {
				atomic.AddUint64(done, 1)
			}
			o.acts[i] = nil
		}
		d.pruneRetired()
	}
}

// add queues one frame on the batch and counts it.
func (o *Onloader) add(pkt []byte, inPort uint32, acts []flow.Action) {
	if err := o.eb.Add(pkt, inPort, acts); err != nil {
		o.Stats.Failed.Add(1)
		return
	}
	o.Stats.Packets.Add(1)
	o.Stats.Bytes.Add(uint64(len(pkt)))
}

// Close stops Run and releases the ring and the packet socket.
func (o *Onloader) Close() error {
	err := o.r.Close()
	return errors.Join(err, o.eb.Close())
}
