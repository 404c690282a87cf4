package datapath

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vishvananda/netns"

	"github.com/cilium/ebpf"

	"github.com/nagare-net/nagare/pkg/flow"
)

// maxExecute is the largest packet BPF_PROG_RUN accepts for a tc program
// (a page minus skb headroom and shared info).
const maxExecute = 3500

// Execute sends pkt through actions as if it had arrived on port inPort:
// the same action code that cached flows use, run with BPF_PROG_RUN. This
// is how the first packet of a flow is delivered after its upcall, and how
// OpenFlow PACKET_OUT leaves the switch.
func (d *Datapath) Execute(pkt []byte, inPort uint32, actions []flow.Action) error {
	return d.execute(pkt, inPort, actions, d.inNetns)
}

// ExecuteLocal is Execute for a goroutine that called LockToNetns: it runs
// on the calling thread, without handing the packet to another thread (on
// a VM a cross-CPU hand-off costs tens of microseconds).
func (d *Datapath) ExecuteLocal(pkt []byte, inPort uint32, actions []flow.Action) error {
	return d.execute(pkt, inPort, actions, func(fn func() error) error { return fn() })
}

// LockToNetns locks the calling goroutine to its OS thread and moves the
// thread into the instance's network namespace, for hot loops that call
// ExecuteLocal. The goroutine must call restore before it ends: it puts
// the thread back into its namespace and unlocks it. (A thread left in
// another namespace would be discarded by the runtime, unless it is the
// main thread, which is kept: /proc/self/net would then show the wrong
// namespace for the whole process.)
func (d *Datapath) LockToNetns() (restore func(), err error) {
	runtime.LockOSThread()
	if d.ns < 0 {
		return runtime.UnlockOSThread, nil
	}
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	if err := netns.Set(d.ns); err != nil {
		orig.Close()
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("datapath: entering network namespace %s: %w", d.cfg.NetNS, err)
	}
	return func() {
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		orig.Close()
	}, nil
}

// checkExecuteSize refuses what BPF_PROG_RUN cannot take (and what is no
// Ethernet frame).
func checkExecuteSize(pkt []byte) error {
	if len(pkt) < 14 || len(pkt) > maxExecute {
		return fmt.Errorf("datapath: execute %d bytes: %w", len(pkt), ErrPacketSize)
	}
	return nil
}

func (d *Datapath) execute(pkt []byte, inPort uint32, actions []flow.Action, run func(func() error) error) error {
	if err := checkExecuteSize(pkt); err != nil {
		return err
	}
	d.mu.Lock()
	raw, err := d.compileActions(actions)
	ifindex := 0
	if p, ok := d.ports[inPort]; ok {
		ifindex = p.Ifindex
	}
	d.mu.Unlock()
	if err != nil {
		return err
	}
	slot, err := d.execSlot(encodeEntry(1, raw, false))
	if err != nil {
		return err
	}
	if slot >= execCached {
		defer func() { d.slots <- slot }()
	}
	// struct __sk_buff as BPF_PROG_RUN context: ifindex (offset 40) picks
	// the device the packet appears on, cb[0] (48) the action slot, cb[1]
	// (52) the ingress port.
	ctx := make([]byte, 192)
	binary.NativeEndian.PutUint32(ctx[40:], uint32(ifindex))
	binary.NativeEndian.PutUint32(ctx[48:], slot)
	binary.NativeEndian.PutUint32(ctx[52:], inPort)
	return run(func() error {
		_, err := d.objs.NagareExecute.Run(&ebpf.RunOptions{Data: pkt, Context: ctx})
		if err != nil {
			return fmt.Errorf("datapath: execute: %w", err)
		}
		return nil
	})
}

// execCached slots hold action lists that stay written: the lists Execute
// sees most (output to a port, ...) are written once, not once per packet.
// The other slots are written for each call and handed out one caller at a
// time.
const execCached = execSlots / 2

// execSlot returns a slot holding entry: a cached one when entry was seen
// before (or a cached slot is still free), else a dynamic slot the caller
// must give back.
func (d *Datapath) execSlot(entry []byte) (uint32, error) {
	d.execMu.Lock()
	if slot, ok := d.execCache[string(entry)]; ok {
		d.execMu.Unlock()
		return slot, nil
	}
	if len(d.execCache) < execCached {
		slot := uint32(len(d.execCache))
		err := d.objs.ExecActions.Put(slot, entry)
		if err == nil {
			d.execCache[string(entry)] = slot
		}
		d.execMu.Unlock()
		return slot, err
	}
	d.execMu.Unlock()
	slot := <-d.slots
	if err := d.objs.ExecActions.Put(slot, entry); err != nil {
		d.slots <- slot
		return 0, err
	}
	return slot, nil
}

// ExecBatch delivers upcalled packets in batches. A packet whose actions
// are only outputs to device ports (what most first packets need) is
// queued and sent with the others in one sendmmsg call on a packet socket:
// a transmit on the output device, as the fast path's output action does.
// Any other packet is run through the actions with BPF_PROG_RUN, after
// the queue is sent, so packets leave in the order they were added.
//
// An ExecBatch belongs to one goroutine that called LockToNetns: its
// packet socket is opened in the instance's namespace.
type ExecBatch struct {
	d     *Datapath
	fd    int
	addrs []unix.RawSockaddrLinklayer
	iovs  []unix.Iovec
	msgs  []unix.Mmsghdr
	keep  []queued // the queued copies, referenced by iovs
	// hdrs: with vnet headers on (enableVnetHdr, vnet.go), each message's
	// struct virtio_net_hdr, its first iovec.
	hdrs []vnetHdr
	err  error // first error since the last Flush
	// xsk: output devices with an AF_XDP socket of the Onloader's, whose
	// plain outputs (not GSO packets) go on its TX ring (xsk_onload.go);
	// nil otherwise.
	xsk map[int]*XSK
	// Sent counts copies sendmmsg handed to devices, Failed the copies
	// that could not be delivered at all; GSOWhole the GSO packet copies
	// sent whole (AddGSO), GSORefused those the kernel refused whole and
	// that were cut instead.
	Sent, Failed         uint64
	GSOWhole, GSORefused uint64
}

// queued is one packet copy waiting for sendmmsg.
type queued struct {
	pkt          []byte
	inPort, port uint32
	gso          int // a GSO packet sent whole: its segment size
}

// execBatchMax is the most queued packet copies: past it Add sends.
const execBatchMax = 64

// NewExecBatch opens a batch for a goroutine that called LockToNetns. Where
// no packet socket can be opened, every packet goes through BPF_PROG_RUN
// (slower, same result); err says why.
func (d *Datapath) NewExecBatch() (*ExecBatch, error) {
	// Protocol 0: the socket only transmits, it never receives.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return &ExecBatch{d: d, fd: -1}, fmt.Errorf("datapath: packet socket (executing with BPF_PROG_RUN only): %w", err)
	}
	b := &ExecBatch{d: d, fd: fd, addrs: make([]unix.RawSockaddrLinklayer, execBatchMax),
		iovs: make([]unix.Iovec, execBatchMax), msgs: make([]unix.Mmsghdr, execBatchMax)}
	for i := range b.msgs {
		b.msgs[i].Hdr.Name = (*byte)(unsafe.Pointer(&b.addrs[i]))
		b.msgs[i].Hdr.Namelen = unix.SizeofSockaddrLinklayer
		b.msgs[i].Hdr.Iov = &b.iovs[i]
		b.msgs[i].Hdr.SetIovlen(1)
	}
	return b, nil
}

// Add executes pkt through actions as if it arrived on inPort, now or at
// the next Flush. pkt must stay unchanged until then.
func (b *ExecBatch) Add(pkt []byte, inPort uint32, actions []flow.Action) error {
	var devs [MaxActions]int
	n, ok := b.d.outputDevices(actions, devs[:])
	if !ok || b.fd < 0 {
		b.send()
		b.kickXSK()
		return b.d.ExecuteLocal(pkt, inPort, actions) // checks the size BPF_PROG_RUN takes
	}
	// The packet socket takes frames up to the device's MTU (onloaded
	// jumbo frames); the device refuses what is too long.
	if len(pkt) < 14 {
		return fmt.Errorf("datapath: execute %d bytes: %w", len(pkt), ErrPacketSize)
	}
	b.queue(pkt, inPort, actions, devs[:n], vnetHdr{}, 0)
	return nil
}

// queue adds a copy of pkt for each of devs (the devices of actions, plain
// outputs), with vnet header h when vnet headers are on.
func (b *ExecBatch) queue(pkt []byte, inPort uint32, actions []flow.Action, devs []int, h vnetHdr, gso int) {
	if len(b.keep)+len(devs) > execBatchMax {
		b.send()
	}
	proto := *(*uint16)(unsafe.Pointer(&pkt[12])) // network order, as sll_protocol wants it
	for j, ifindex := range devs {
		if x := b.xsk[ifindex]; x != nil && gso == 0 {
			if err := x.Queue(pkt); err != nil {
				b.Failed++
				if b.err == nil {
					b.err = err
				}
			}
			continue
		}
		i := len(b.keep)
		b.addrs[i] = unix.RawSockaddrLinklayer{Family: unix.AF_PACKET, Protocol: proto, Ifindex: int32(ifindex)}
		iov := &b.iovs[i]
		if b.hdrs != nil {
			b.hdrs[i] = h
			iov = &b.iovs[2*i+1]
		}
		iov.Base = &pkt[0]
		iov.SetLen(len(pkt))
		b.keep = append(b.keep, queued{pkt: pkt, inPort: inPort, port: actions[j].(flow.Output).Port, gso: gso})
	}
}

// outputDevices returns the devices of actions when they are nothing but
// outputs to device ports (not tunnels: those need a tunnel key).
func (d *Datapath) outputDevices(actions []flow.Action, devs []int) (int, bool) {
	if len(actions) == 0 || len(actions) > len(devs) {
		return 0, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, a := range actions {
		o, ok := a.(flow.Output)
		if !ok {
			return 0, false
		}
		p, ok := d.ports[o.Port]
		if !ok || p.Kind == PortTunnel {
			return 0, false
		}
		devs[i] = p.Ifindex
	}
	return len(actions), true
}

// Flush sends the queued packets and returns the first error since the
// last Flush (a packet that could not be delivered; the others still go).
func (b *ExecBatch) Flush() error {
	b.send()
	b.kickXSK()
	err := b.err
	b.err = nil
	return err
}

// send hands the queue to sendmmsg. A copy the packet socket refuses for
// its size (a frame longer than the output device's MTU allows: the fast
// path's redirect does not check that) goes through BPF_PROG_RUN instead.
func (b *ExecBatch) send() {
	for off := 0; off < len(b.keep); {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(b.fd), uintptr(unsafe.Pointer(&b.msgs[off])), uintptr(len(b.keep)-off), 0, 0, 0)
		switch {
		case e == unix.EINTR:
			continue
		case e != 0:
			// The message at off failed (sendmmsg reports an error only
			// for the first message it tried).
			q := b.keep[off]
			err := error(e)
			if q.gso > 0 {
				err = b.sendSegmented(q, &b.addrs[off])
			} else if e == unix.EMSGSIZE {
				err = b.d.ExecuteLocal(q.pkt, q.inPort, []flow.Action{flow.Output{Port: q.port}})
			}
			if err != nil {
				b.Failed++
				if b.err == nil {
					b.err = fmt.Errorf("datapath: execute: sending to ifindex %d: %w", b.addrs[off].Ifindex, err)
				}
			}
			off++
		default:
			for _, q := range b.keep[off : off+int(r)] {
				if q.gso > 0 {
					b.GSOWhole++
				}
			}
			b.Sent += uint64(r)
			off += int(r)
		}
	}
	clear(b.keep)
	b.keep = b.keep[:0]
}

// Close sends what is queued and closes the socket.
func (b *ExecBatch) Close() error {
	err := b.Flush()
	if b.fd >= 0 {
		if cerr := unix.Close(b.fd); err == nil {
			err = cerr
		}
		b.fd = -1
	}
	return err
}
