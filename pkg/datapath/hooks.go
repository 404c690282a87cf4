package datapath

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Pod ports' hooks: a clsact filter when they are attached, tcx once pod
// attaches have paused.
//
// A CNI ADD attaches its pod's port, and a tcx attach waits for RCU grace
// periods while it holds RTNL: 11.8 ms a device on this VM kind (HZ=250)
// against 0.1 ms for a cls_bpf filter on a new clsact, and a waiting RTNL
// stalls every other ADD's netlink work (af5f8e3: ADD p50 20 → 10 ms).
// At run time the legacy hook costs every packet tc_run, tcf_classify,
// __tcf_classify and cls_bpf_classify before the program runs: ~140 ns a
// packet of the lab's same-core ping-pong on this machine kind, where
// every call returns through the kernel's return thunk (docs/lab.md,
// "The pod hook"). So a pod port starts on a filter and moves to tcx
// when no pod port has been attached or detached for
// Config.PodHookQuiet: one port at a time, each move holding the kernel's
// RTNL for one tcx attach; a CNI ADD or DEL that arrives meanwhile stops
// the others until the next pause (a DEL waiting behind a move's RTNL was
// ~12 ms slower: BenchmarkCNI's DEL phase began while the ADD phase's
// pods moved).
//
// A move attaches and pins the tcx link first, then removes the filter.
// tcx runs before the legacy hook and the program's verdict ends the
// hook (it never returns TCX_NEXT), so every packet meets the program
// exactly once throughout. A restart finds the pinned link
// (attachProgram) and keeps it; a port still on its filter is queued
// again.

// DefaultPodHookQuiet is how long pod attaches pause before pod ports
// move from their clsact filter to tcx.
const DefaultPodHookQuiet = time.Second

// HookTCX and HookFilter name a port's hook (Port.Hook).
const (
	HookTCX    = "tcx"
	HookFilter = "clsact filter"
)

func (d *Datapath) podHookQuiet() time.Duration {
	if d.cfg.PodHookQuiet > 0 {
		return d.cfg.PodHookQuiet
	}
	return DefaultPodHookQuiet
}

// queueTCX remembers that ifindex's port is on a filter and (re)starts the
// wait for a pause. Callers hold d.mu.
func (d *Datapath) queueTCX(ifindex int) {
	if d.hooksClosed || d.noTCX {
		return
	}
	if d.toTCX == nil {
		d.toTCX = map[int]bool{}
	}
	d.toTCX[ifindex] = true
	d.lastPodChange = time.Now()
	if d.tcxTimer == nil {
		d.tcxTimer = time.AfterFunc(d.podHookQuiet(), d.moveHooks)
	} else {
		d.tcxTimer.Reset(d.podHookQuiet())
	}
}

// moveHooks moves the queued pod ports to tcx, one at a time, while pod
// attaches stay paused. d.mu is not held during a tcx attach (flow
// installs need it): a port detached meanwhile loses the link again.
func (d *Datapath) moveHooks() {
	d.moveMu.Lock() // Close waits for a move under way (closeHooks)
	defer d.moveMu.Unlock()
	for {
		d.mu.Lock()
		if d.hooksClosed || len(d.toTCX) == 0 {
			d.mu.Unlock()
			return
		}
		if wait := d.podHookQuiet() - time.Since(d.lastPodChange); wait > 0 {
			d.tcxTimer.Reset(wait)
			d.mu.Unlock()
			return
		}
		var ifindex int
		for ifindex = range d.toTCX {
			break
		}
		delete(d.toTCX, ifindex)
		p := d.portByIfindex(ifindex)
		if p == nil || p.Hook != HookFilter {
			d.mu.Unlock()
			continue
		}
		name := p.Name
		d.mu.Unlock()

		err := d.inNetns(func() error { return d.attachTCX(ifindex) })

		d.mu.Lock()
		p = d.portByIfindex(ifindex)
		switch {
		case err == nil && p == nil: // detached meanwhile
			err = unpinLink(d.linkPin(ifindex), false)
		case err == nil:
			p.Hook = HookTCX // tcx runs first: a filter left behind never runs
			err = d.inNetns(func() error { return filterDel(ifindex) })
		case errors.Is(err, ErrNotSupported):
			d.noTCX = true // a kernel without tcx: filters it is
			clear(d.toTCX)
		}
		if err != nil {
			d.hookErr = fmt.Errorf("moving port %s to tcx: %w", name, err)
		}
		d.mu.Unlock()
	}
}

// unpinLink unpins the tcx link pinned at pin, if any, and closes it: at
// once (which detaches it), or, later, after podLinkGrace
// (closeLinkLater).
func unpinLink(pin string, later bool) error {
	l, err := link.LoadPinnedLink(pin, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if later {
		err = l.Unpin()
		closeLinkLater(l)
		return err
	}
	return errors.Join(l.Unpin(), l.Close())
}

// attachTCX attaches the program at tcx ingress of ifindex and pins the
// link under the instance. In the instance's namespace.
func (d *Datapath) attachTCX(ifindex int) error {
	l, err := link.AttachTCX(link.TCXOptions{
		Interface: ifindex,
		Program:   d.objs.NagarePortIngress,
		Attach:    ebpf.AttachTCXIngress,
	})
	if err != nil {
		if errors.Is(err, link.ErrNotSupported) {
			return fmt.Errorf("datapath: tcx attach: %w (%w)", err, ErrNotSupported)
		}
		return fmt.Errorf("datapath: tcx attach to ifindex %d: %w", ifindex, err)
	}
	defer l.Close() // pinned, the attach stays; else it goes with the link
	if err := l.Pin(d.linkPin(ifindex)); err != nil {
		return fmt.Errorf("datapath: pin %s: %w", d.linkPin(ifindex), err)
	}
	return nil
}

// filterDel removes the fast path's filter from ifindex; a device or
// filter already gone is fine. In the instance's namespace.
func filterDel(ifindex int) error {
	err := netlink.FilterDel(portFilter(ifindex, 0))
	if err == nil || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.EINVAL) {
		return nil
	}
	return fmt.Errorf("datapath: removing the tc filter of ifindex %d: %w", ifindex, err)
}

// podLinkGrace is how long a detached pod port's tcx link is kept before
// it is closed.
const podLinkGrace = 2 * time.Second

// closeLinkLater closes a detached pod port's tcx link (already unpinned)
// after podLinkGrace. A detach of an attached tcx link waits for RCU
// grace periods under RTNL (~12 ms here), as an attach does; a pod port
// is detached by its CNI DEL just before the runtime deletes the device,
// which takes the link with it in the device's own teardown, so the close
// then finds the link detached already and costs nothing, and the DEL
// does not wait. A device that stays is detached by the close.
func closeLinkLater(l link.Link) {
	time.AfterFunc(podLinkGrace, func() { _ = l.Close() })
}

// closeHooks stops the moves and waits for one under way (Close: the
// namespace and the program it uses go next).
func (d *Datapath) closeHooks() {
	d.mu.Lock()
	d.hooksClosed = true
	if d.tcxTimer != nil {
		d.tcxTimer.Stop()
	}
	d.mu.Unlock()
	d.moveMu.Lock()
	d.moveMu.Unlock() // a barrier: no move runs past this point
}

// HookError is the last failure to move a pod port to tcx, or nil; the
// port stays on its filter and forwards.
func (d *Datapath) HookError() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hookErr
}
