package datapath

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// Per-port budgets: the upcall ring, the handler thread, the flow table
// and the mask list are shared by every port, and one port must not use
// them up (docs/switch.md, "Per-port budgets").
//
//   - upcalls: a token bucket per port in the fast path, before the ring
//     (bpf/lib/upcall.h, upcall_admit); a miss past it is dropped and
//     counted as upcall-port-budget for that port;
//   - cached flows: at most Config.PortFlowLimit megaflows whose in_port
//     is one port (ErrPortFlowLimit);
//   - masks: a port whose flows already use Config.PortMaskLimit masks may
//     not add a new mask to the datapath (ErrPortMaskLimit); it may still
//     use masks others brought, which cost no extra probe.
var (
	ErrPortFlowLimit = errors.New("port's flow budget reached")
	ErrPortMaskLimit = errors.New("port's mask budget reached")
)

// portUse is what one port's cached flows hold.
type portUse struct {
	flows int
	masks map[int]int // mask slot → flows of this port under it
}

// use returns in_port's record, made on first use. Callers hold d.mu.
func (d *Datapath) use(port uint32) *portUse {
	u := d.uses[port]
	if u == nil {
		u = &portUse{masks: map[int]int{}}
		d.uses[port] = u
	}
	return u
}

// account adds (delta 1) or removes (-1) one flow of in to its port's use.
// Callers hold d.mu.
func (d *Datapath) account(in *installed, delta int) {
	u := d.use(in.key.InPort)
	u.flows += delta
	if u.masks[in.slot] += delta; u.masks[in.slot] <= 0 {
		delete(u.masks, in.slot)
	}
	if u.flows <= 0 {
		delete(d.uses, in.key.InPort)
	}
}

// checkBudget refuses a flow of port whose install would take the port past
// its flow budget, or add a new mask past its mask budget. Callers hold d.mu.
func (d *Datapath) checkBudget(port uint32, maskKnown bool) error {
	u := d.uses[port]
	if u == nil {
		return nil
	}
	if d.cfg.PortFlowLimit > 0 && u.flows >= d.cfg.PortFlowLimit {
		return fmt.Errorf("datapath: port %d: %w (%d flows)", port, ErrPortFlowLimit, d.cfg.PortFlowLimit)
	}
	if !maskKnown && d.cfg.PortMaskLimit > 0 && len(u.masks) >= d.cfg.PortMaskLimit {
		return fmt.Errorf("datapath: port %d: %w (%d masks)", port, ErrPortMaskLimit, d.cfg.PortMaskLimit)
	}
	return nil
}

// PortUse reports the megaflows and distinct masks the flows entering on
// port hold.
func (d *Datapath) PortUse(port uint32) (flows, masks int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if u := d.uses[port]; u != nil {
		return u.flows, len(u.masks)
	}
	return 0, 0
}

// SetUpcallBudget sets every port's upcall token bucket: rate upcalls per
// second, burst at once. rate 0 removes the limit.
func (d *Datapath) SetUpcallBudget(rate, burst uint32) error {
	d.cfg.UpcallRate, d.cfg.UpcallBurst = rate, burst
	return d.writeConfig(func(c *nagareDpConfig) { c.UpcallRate, c.UpcallBurst = rate, burst })
}

// SetActionUpcallRate limits the controller-action upcalls of OpenFlow
// port ofport to rate per second, burst at once, before they spend the
// port's upcall budget (bpf/lib/upcall.h, paced_admit); those past it are
// dropped before the ring and counted as controller-upcall-budget. rate 0
// removes the limit. The bucket starts full.
func (d *Datapath) SetActionUpcallRate(ofport, rate, burst uint32) error {
	return d.setPace(ofport, 0, rate, burst)
}

// SetMissUpcallRate is SetActionUpcallRate for the port's misses, for a
// port whose flows are refused for its cache budget; those past it are
// counted as upcall-port-budget.
func (d *Datapath) SetMissUpcallRate(ofport, rate, burst uint32) error {
	return d.setPace(ofport, missMeter, rate, burst)
}

// missMeter marks a device's miss meter in action_meters (MISS_METER).
const missMeter = 1 << 31

func (d *Datapath) setPace(ofport, kind, rate, burst uint32) error {
	d.mu.Lock()
	p, ok := d.ports[ofport]
	ifindex := 0
	if ok {
		ifindex = p.Ifindex
	}
	d.mu.Unlock()
	if !ok {
		return fmt.Errorf("datapath: no port %d", ofport)
	}
	key := uint32(ifindex) | kind
	if rate == 0 {
		err := d.objs.ActionMeters.Delete(key)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			err = nil
		}
		return err
	}
	cost := uint64(1e9) / uint64(rate)
	m := nagareActionMeter{CostNs: cost, CapNs: cost * uint64(max(burst, 1))}
	m.CreditNs = m.CapNs
	return d.objs.ActionMeters.Put(key, m)
}

// PortDrops returns the fast path's drops by device (ifindex) and reason,
// summed over CPUs (see Drops for the totals).
func (d *Datapath) PortDrops() (map[int]map[DropReason]uint64, error) {
	out := map[int]map[DropReason]uint64{}
	var k nagarePortDropKey
	vals := make([]uint64, d.ncpu)
	it := d.objs.PortDrops.Iterate()
	for it.Next(&k, &vals) {
		var n uint64
		for _, v := range vals {
			n += v
		}
		if n == 0 {
			continue
		}
		if out[int(k.Ifindex)] == nil {
			out[int(k.Ifindex)] = map[DropReason]uint64{}
		}
		out[int(k.Ifindex)][DropReason(k.Reason)] += n
	}
	return out, it.Err()
}

// forgetDevice drops the per-device state of a detached port (its upcall
// bucket and drop counts), so a device that later gets the same ifindex
// starts afresh.
func (d *Datapath) forgetDevice(ifindex int) {
	_ = d.objs.UpcallMeters.Delete(uint32(ifindex))
	_ = d.objs.ActionMeters.Delete(uint32(ifindex))
	_ = d.objs.ActionMeters.Delete(uint32(ifindex) | missMeter)
	var k nagarePortDropKey
	var stale []nagarePortDropKey
	vals := make([]uint64, d.ncpu)
	it := d.objs.PortDrops.Iterate()
	for it.Next(&k, &vals) {
		if int(k.Ifindex) == ifindex {
			stale = append(stale, k)
		}
	}
	for _, k := range stale {
		if err := d.objs.PortDrops.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
	}
}
