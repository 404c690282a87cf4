package datapath

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// An AF_XDP socket (XSK) of our own, on golang.org/x/sys/unix only (the Go
// AF_XDP modules are not available here). The kernel's side is
// Documentation/networking/af_xdp.rst: a UMEM (one memory area cut into
// frames) registered on the socket, and four single-producer
// single-consumer rings mapped from the socket:
//
//	fill        we produce free UMEM frames for the kernel to receive into
//	rx          the kernel produces received frames (address, length)
//	tx          we produce frames to transmit
//	completion  the kernel produces frames it has transmitted
//
// Each ring has a producer and a consumer index (free-running u32, masked
// by size-1) in the mapping. The producer writes descriptors, then
// publishes the new producer index (a store-release); the consumer reads
// the producer index (load-acquire), the descriptors, then publishes its
// consumer index. sync/atomic's loads and stores give those orders.
//
// Copy mode (XDP_COPY): veth has no zero-copy; the kernel copies each
// frame into the UMEM on receive and builds an skb from it on transmit.
// Transmit needs a sendto per batch in copy mode (the kick).

// xskFrame is the size of one UMEM frame: a page, so a 1500-byte (and up
// to ~3.8 KiB) frame fits with the XDP header in front.
const xskFrame = 4096

// XSK ring sizes (powers of two). The receive side keeps xskRxFrames
// frames in the kernel's hands; transmit has xskTxFrames of its own.
const (
	xskRxFrames = 2048
	xskTxFrames = 1024
)

// xskUMEM is one socket's UMEM: every frame, pinned at once
// (MAP_POPULATE), so 12 MiB per socket whatever the traffic.
const xskUMEM = (xskRxFrames + xskTxFrames) * xskFrame

// DefaultXSKMemoryMax is the default cap on all UMEMs together: 256 MiB,
// 21 sockets (ports × receive queues).
const DefaultXSKMemoryMax = 256 << 20

// ErrXSKMemory is what NewXSK wraps when the UMEM cap is reached.
var ErrXSKMemory = errors.New("AF_XDP UMEM memory cap reached")

// umemBudget is the process's UMEM memory: every socket takes xskUMEM of
// it, so a switch with many ports (or queues) on the AF_XDP path cannot
// pin the node's memory. Ports past the cap keep the ring path.
var umemBudget = struct {
	sync.Mutex
	used, max int64
}{max: DefaultXSKMemoryMax}

// SetXSKMemoryMax sets the cap on all UMEMs together (bytes; 0: none).
// Sockets open keep their memory.
func SetXSKMemoryMax(bytes int64) {
	umemBudget.Lock()
	umemBudget.max = bytes
	umemBudget.Unlock()
}

func reserveUMEM() error {
	umemBudget.Lock()
	defer umemBudget.Unlock()
	if m := umemBudget.max; m > 0 && umemBudget.used+xskUMEM > m {
		return fmt.Errorf("datapath: %w: %d MiB in use, %d MiB more would pass the cap of %d MiB (nagare-switch --xsk-memory-max)",
			ErrXSKMemory, umemBudget.used>>20, xskUMEM>>20, m>>20)
	}
	umemBudget.used += xskUMEM
	return nil
}

func releaseUMEM() {
	umemBudget.Lock()
	umemBudget.used -= xskUMEM
	umemBudget.Unlock()
}

// xskRing is one mapped ring.
type xskRing struct {
	mem        []byte
	prod, cons *uint32
	flags      *uint32
	descs      unsafe.Pointer
	mask       uint32
}

func (r *xskRing) addr(i uint32) *uint64 {
	return (*uint64)(unsafe.Add(r.descs, uintptr(i&r.mask)*8))
}

func (r *xskRing) desc(i uint32) *unix.XDPDesc {
	return (*unix.XDPDesc)(unsafe.Add(r.descs, uintptr(i&r.mask)*unsafe.Sizeof(unix.XDPDesc{})))
}

// XSK is one AF_XDP socket with its own UMEM, bound to one receive queue
// of a device in copy mode. Not safe for concurrent use: one goroutine
// owns it.
type XSK struct {
	fd       int
	Ifindex  int
	RxQueue  int
	umem     []byte
	fill     xskRing
	comp     xskRing
	rx       xskRing
	tx       xskRing
	txFree   []uint64 // transmit frames not in the kernel's hands
	txQueued int      // descriptors produced since the last kick
	rxHeld   []uint64 // frames received and not yet given back to fill
	// dropsSeen is RxDrops when its owner last looked (xsk_onload.go).
	dropsSeen uint64
	reserved  bool // holds xskUMEM of umemBudget until Close
}

// NewXSK opens an AF_XDP socket on receive queue queue of ifindex (copy
// mode). The device must be in the calling thread's network namespace. It
// receives only what an XDP program redirects to it (an XSKMAP entry).
func NewXSK(ifindex, queue int) (*XSK, error) {
	if err := reserveUMEM(); err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		releaseUMEM()
		return nil, fmt.Errorf("datapath: AF_XDP socket: %w", err)
	}
	x := &XSK{fd: fd, Ifindex: ifindex, RxQueue: queue, reserved: true}
	if err := x.setup(); err != nil {
		x.Close()
		return nil, err
	}
	return x, nil
}

func (x *XSK) setup() error {
	total := xskUMEM
	mem, err := unix.Mmap(-1, 0, total, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("datapath: UMEM: %w", err)
	}
	x.umem = mem
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), Len: uint64(total), Size: xskFrame}
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(x.fd), unix.SOL_XDP, unix.XDP_UMEM_REG,
		uintptr(unsafe.Pointer(&reg)), unsafe.Sizeof(reg), 0); e != 0 {
		return fmt.Errorf("datapath: XDP_UMEM_REG: %w", e)
	}
	for _, o := range []struct{ opt, n int }{
		{unix.XDP_UMEM_FILL_RING, xskRxFrames}, {unix.XDP_UMEM_COMPLETION_RING, xskTxFrames},
		{unix.XDP_RX_RING, xskRxFrames}, {unix.XDP_TX_RING, xskTxFrames},
	} {
		if err := unix.SetsockoptInt(x.fd, unix.SOL_XDP, o.opt, o.n); err != nil {
			return fmt.Errorf("datapath: XDP ring size (option %d): %w", o.opt, err)
		}
	}
	var off unix.XDPMmapOffsets
	l := uint32(unsafe.Sizeof(off))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(x.fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&l)), 0); e != 0 {
		return fmt.Errorf("datapath: XDP_MMAP_OFFSETS: %w", e)
	}
	rings := []struct {
		r     *xskRing
		o     unix.XDPRingOffset
		pgoff int64
		n     int
		desc  uintptr
	}{
		{&x.fill, off.Fr, unix.XDP_UMEM_PGOFF_FILL_RING, xskRxFrames, 8},
		{&x.comp, off.Cr, unix.XDP_UMEM_PGOFF_COMPLETION_RING, xskTxFrames, 8},
		{&x.rx, off.Rx, unix.XDP_PGOFF_RX_RING, xskRxFrames, unsafe.Sizeof(unix.XDPDesc{})},
		{&x.tx, off.Tx, unix.XDP_PGOFF_TX_RING, xskTxFrames, unsafe.Sizeof(unix.XDPDesc{})},
	}
	for _, rg := range rings {
		size := int(rg.o.Desc) + rg.n*int(rg.desc)
		m, err := unix.Mmap(x.fd, rg.pgoff, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return fmt.Errorf("datapath: mapping an XDP ring: %w", err)
		}
		base := unsafe.Pointer(&m[0])
		*rg.r = xskRing{mem: m, prod: (*uint32)(unsafe.Add(base, rg.o.Producer)),
			cons: (*uint32)(unsafe.Add(base, rg.o.Consumer)), flags: (*uint32)(unsafe.Add(base, rg.o.Flags)),
			descs: unsafe.Add(base, rg.o.Desc), mask: uint32(rg.n - 1)}
	}
	// All receive frames to the kernel; the transmit frames are ours.
	for i := range uint32(xskRxFrames) {
		*x.fill.addr(i) = uint64(i) * xskFrame
	}
	atomic.StoreUint32(x.fill.prod, xskRxFrames)
	x.txFree = make([]uint64, 0, xskTxFrames)
	for i := range uint64(xskTxFrames) {
		x.txFree = append(x.txFree, (xskRxFrames+i)*xskFrame)
	}
	sa := unix.SockaddrXDP{Flags: unix.XDP_COPY, Ifindex: uint32(x.Ifindex), QueueID: uint32(x.RxQueue)}
	if err := unix.Bind(x.fd, &sa); err != nil {
		return fmt.Errorf("datapath: binding AF_XDP to ifindex %d queue %d (copy mode): %w", x.Ifindex, x.RxQueue, err)
	}
	return nil
}

// FD is the socket, for an XSKMAP entry and for poll.
func (x *XSK) FD() int { return x.fd }

// Receive appends up to max received frames to frames (slices of the
// UMEM, valid until Release) and returns them. It does not block.
func (x *XSK) Receive(frames [][]byte, max int) [][]byte {
	cons := *x.rx.cons // only we write it
	prod := atomic.LoadUint32(x.rx.prod)
	n := prod - cons
	if n > uint32(max) {
		n = uint32(max)
	}
	for i := range n {
		d := x.rx.desc(cons + i)
		frames = append(frames, x.umem[d.Addr:d.Addr+uint64(d.Len)])
		x.rxHeld = append(x.rxHeld, d.Addr&^(xskFrame-1))
	}
	atomic.StoreUint32(x.rx.cons, cons+n)
	return frames
}

// Release gives the frames of the last Receive calls back to the kernel
// (the fill ring). The fill ring has room for every receive frame, so
// this never waits.
func (x *XSK) Release() {
	if len(x.rxHeld) == 0 {
		return
	}
	prod := *x.fill.prod
	for i, a := range x.rxHeld {
		*x.fill.addr(prod + uint32(i)) = a
	}
	atomic.StoreUint32(x.fill.prod, prod+uint32(len(x.rxHeld)))
	x.rxHeld = x.rxHeld[:0]
}

// complete takes back the transmit frames the kernel is done with.
func (x *XSK) complete() {
	cons := *x.comp.cons
	prod := atomic.LoadUint32(x.comp.prod)
	for i := cons; i != prod; i++ {
		x.txFree = append(x.txFree, *x.comp.addr(i))
	}
	atomic.StoreUint32(x.comp.cons, prod)
}

// ErrXSKFull: no transmit frame free (the kernel has not completed enough).
var ErrXSKFull = errors.New("datapath: AF_XDP transmit ring full")

// Queue copies pkt into a transmit frame and puts it on the TX ring; Kick
// sends what is queued.
func (x *XSK) Queue(pkt []byte) error {
	if len(pkt) > xskFrame {
		return fmt.Errorf("datapath: AF_XDP transmit %d bytes: %w", len(pkt), ErrPacketSize)
	}
	if len(x.txFree) == 0 {
		x.complete()
		if len(x.txFree) == 0 {
			// Let the kernel transmit what it holds, then look again.
			x.Kick()
			x.complete()
			if len(x.txFree) == 0 {
				return ErrXSKFull
			}
		}
	}
	a := x.txFree[len(x.txFree)-1]
	x.txFree = x.txFree[:len(x.txFree)-1]
	copy(x.umem[a:], pkt)
	prod := *x.tx.prod
	*x.tx.desc(prod) = unix.XDPDesc{Addr: a, Len: uint32(len(pkt))}
	atomic.StoreUint32(x.tx.prod, prod+1)
	x.txQueued++
	return nil
}

// Kick makes the kernel transmit the queued frames (copy mode transmits
// in the sendto call, up to its budget per call: kick again while the
// kernel leaves frames on the ring).
func (x *XSK) Kick() {
	for x.txQueued > 0 {
		before := *x.tx.prod - atomic.LoadUint32(x.tx.cons)
		_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(x.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
		left := *x.tx.prod - atomic.LoadUint32(x.tx.cons)
		x.txQueued = int(left)
		if left == before || (e != 0 && e != unix.EAGAIN && e != unix.EBUSY && e != unix.ENOBUFS) {
			break // no progress: the next kick sends them
		}
	}
	x.complete()
}

// Stats reads the socket's drop counters.
func (x *XSK) Stats() (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	l := uint32(unsafe.Sizeof(st))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(x.fd), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&l)), 0); e != 0 {
		return st, e
	}
	return st, nil
}

// RxDrops is what the kernel dropped for want of room on this socket:
// no free frame (rx_dropped; such a frame also counts in
// rx_fill_ring_empty_descs, left out) or a full RX ring.
func (x *XSK) RxDrops() uint64 {
	st, err := x.Stats()
	if err != nil {
		return 0
	}
	return st.Rx_dropped + st.Rx_ring_full
}

// Close releases the socket, its rings and its UMEM.
func (x *XSK) Close() error {
	var err error
	if x.fd >= 0 {
		err = unix.Close(x.fd)
		x.fd = -1
	}
	for _, r := range []*xskRing{&x.fill, &x.comp, &x.rx, &x.tx} {
		if r.mem != nil {
			_ = unix.Munmap(r.mem)
			r.mem = nil
		}
	}
	if x.umem != nil {
		_ = unix.Munmap(x.umem)
		x.umem = nil
	}
	if x.reserved {
		releaseUMEM()
		x.reserved = false
	}
	return err
}
