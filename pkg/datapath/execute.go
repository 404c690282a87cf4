package datapath

import (
	"encoding/binary"
	"fmt"
	"runtime"

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

func (d *Datapath) execute(pkt []byte, inPort uint32, actions []flow.Action, run func(func() error) error) error {
	if len(pkt) < 14 || len(pkt) > maxExecute {
		return fmt.Errorf("datapath: execute %d bytes: %w", len(pkt), ErrPacketSize)
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
	slot, err := d.execSlot(encodeEntry(1, raw))
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
