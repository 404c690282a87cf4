package datapath

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
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
	mem, err := mmapArray(d.objs.OnloadSeqs, "onload_seqs", d.cfg.MaxFlows*onloadSeqSize)
	d.seqs = mem
	return err
}

// mmapArray maps the first size bytes (rounded up to pages) of a
// BPF_F_MMAPABLE array into this process.
func mmapArray(m *ebpf.Map, name string, size int) ([]byte, error) {
	page := os.Getpagesize()
	size = (size + page - 1) / page * page
	mem, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("datapath: mapping %s (BPF_F_MMAPABLE): %w: %w", name, err, ErrNotSupported)
	}
	return mem, nil
}

func (d *Datapath) unmapOnloadSeqs() { munmapArray(&d.seqs) }

// munmapArray undoes mmapArray (nothing if *mem is nil) and clears *mem.
func munmapArray(mem *[]byte) {
	if *mem != nil {
		_ = unix.Munmap(*mem)
		*mem = nil
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
	XDP     atomic.Uint64 // packets of Packets that came through AF_XDP sockets
	Lost    atomic.Uint64 // frames the AF_XDP sockets dropped (ring full)
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
	pkts  []onloadPacket
	xdp   *xdpSource // AF_XDP sockets, nil on the ring path only
	Stats OnloadStats
}

// onloadBatch is the most ring records one Run iteration takes.
const onloadBatch = 64

// NewOnloader opens the onload ring (the ring path only). Call it on the
// goroutine that will call Run, after LockToNetns: the packet socket it
// sends with is opened in the instance's namespace.
func (d *Datapath) NewOnloader() (*Onloader, error) { return d.NewOnloaderPath(OnloadPathRing) }

// NewOnloaderPath is NewOnloader for a path (xsk_onload.go): with auto or
// afxdp it can also take ports onto AF_XDP sockets (EnableXDP); where the
// kernel has no AF_XDP it stays on the ring, and err says why.
func (d *Datapath) NewOnloaderPath(path OnloadPath) (*Onloader, error) {
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
	if path != OnloadPathRing {
		if xerr := o.startXDP(); xerr != nil {
			err = errors.Join(err, xerr)
		}
	}
	return o, err
}

// Run executes onloaded packets until Close.
func (o *Onloader) Run() error {
	if o.xdp != nil {
		defer o.xdp.release()
		return o.xdpLoop()
	}
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
		o.executeRing(o.ups[:n])
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

// onloadPacket is one packet handed up, whatever brought it (the onload
// ring, an AF_XDP socket).
type onloadPacket struct {
	cookie    uint64 // flow generation << 32 | flow id
	inPort    uint32
	pkt       []byte
	truncated bool
	gsoSize   int // a GSO packet's segment size (ring records only), else 0
}

// execute runs a batch of handed-up packets through their flows' cached
// actions and sends them on (one Flush).
func (o *Onloader) execute(pkts []onloadPacket) {
	d := o.d
	o.Stats.Batches.Add(1)
	d.mu.Lock()
	for i := range pkts {
		c := pkts[i].cookie
		o.acts[i], o.known[i] = d.onloadActions(uint32(c), uint32(c>>32))
	}
	d.mu.Unlock()
	for i := range pkts {
		p := &pkts[i]
		switch {
		case !o.known[i]:
			o.Stats.Unknown.Add(1)
		case len(o.acts[i]) == 0: // a drop flow
		case p.truncated:
			o.Stats.Failed.Add(1)
		case p.gsoSize > 0 && o.eb.AddGSO(p.pkt, p.gsoSize, p.inPort, o.acts[i]):
			// A GSO packet (a pod with TSO) to plain outputs: sent
			// whole, the kernel finishes its checksum (vnet.go).
			o.Stats.Packets.Add(1)
			o.Stats.Bytes.Add(uint64(len(p.pkt)))
		case p.gsoSize > 0:
			// Other actions, no vnet header, or no partial
			// checksum: it goes out as the segments the pod's
			// device would have sent, every checksum computed.
			var err error
			n := len(o.segs)
			if o.arena, o.segs, err = SegmentAppend(o.arena, o.segs, p.pkt, p.gsoSize); err != nil {
				o.Stats.Failed.Add(1)
				continue
			}
			o.Stats.Segmented.Add(1)
			for _, seg := range o.segs[n:] {
				o.add(seg, p.inPort, o.acts[i])
			}
		default:
			o.add(p.pkt, p.inPort, o.acts[i])
		}
	}
	failed, whole, refused := o.eb.Failed, o.eb.GSOWhole, o.eb.GSORefused
	_ = o.eb.Flush()
	o.Stats.Failed.Add(o.eb.Failed - failed)
	o.Stats.Whole.Add(o.eb.GSOWhole - whole)
	o.Stats.Segmented.Add(o.eb.GSORefused - refused)
	// Sent: the segments' buffer is free for the next batch.
	o.arena, o.segs = o.arena[:0], o.segs[:0]
	for i := range pkts {
		o.acts[i] = nil
	}
}

// executeRing executes a batch of onload ring records and counts them
// done: later packets of these flows may take the fast path again.
func (o *Onloader) executeRing(ups []Upcall) {
	o.pkts = o.pkts[:0]
	for i := range ups {
		u := &ups[i]
		o.pkts = append(o.pkts, onloadPacket{cookie: u.Cookie, inPort: u.Key.InPort, pkt: u.Packet, truncated: u.Truncated(), gsoSize: u.GSOSize})
	}
	o.execute(o.pkts)
	for i := range ups {
		if _, done := o.d.seqCounters(uint32(ups[i].Cookie)); done != nil {
			atomic.AddUint64(done, 1)
		}
	}
}

// Close stops Run and releases the ring and the packet socket.
func (o *Onloader) Close() error {
	o.closeXDP()
	err := o.r.Close()
	return errors.Join(err, o.eb.Close())
}
