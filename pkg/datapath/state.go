package datapath

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"

	"github.com/cilium/ebpf"

	"github.com/nagare-net/nagare/pkg/flow"
)

// bytesTo decodes kernel-layout bytes into a bpf2go struct.
func bytesTo(v any, b []byte) error {
	return binary.Read(bytes.NewReader(b), binary.NativeEndian, v)
}

func (d *Datapath) writeConfig(change func(*nagareDpConfig)) error {
	var c nagareDpConfig
	if err := d.objs.Config.Lookup(uint32(0), &c); err != nil {
		return err
	}
	change(&c)
	return d.objs.Config.Put(uint32(0), c)
}

// SetEMC turns the exact-match cache on or off (benchmarks of the megaflow
// search turn it off).
func (d *Datapath) SetEMC(on bool) error {
	return d.writeConfig(func(c *nagareDpConfig) {
		c.Emc = 0
		if on {
			c.Emc = d.cfg.EMCInsertInvProb
		}
	})
}

// SetMaskCache turns the mask cache (bpf/lib/megaflow.h) on or off: on by
// default; the megaflow search benchmarks compare the two.
func (d *Datapath) SetMaskCache(on bool) error {
	return d.writeConfig(func(c *nagareDpConfig) { c.MaskCache = b2u(on) })
}

// SetUpcalls chooses whether misses go to userspace (on) or are dropped
// and counted (off).
func (d *Datapath) SetUpcalls(on bool) error {
	return d.writeConfig(func(c *nagareDpConfig) { c.Upcalls = b2u(on) })
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// restore rebuilds this process's view (ports, masks, flows, id allocator)
// from the pinned maps, and re-points every pinned port attachment at the
// freshly loaded program. A new instance just gets its defaults written.
func (d *Datapath) restore() error {
	var c nagareDpConfig
	if err := d.objs.Config.Lookup(uint32(0), &c); err != nil {
		return err
	}
	if err := d.initConntrack(); err != nil {
		return err
	}
	if c.Layout == 0 {
		c = nagareDpConfig{Emc: d.cfg.EMCInsertInvProb, Upcalls: 1, Layout: dpLayout,
			UpcallRate: d.cfg.UpcallRate, UpcallBurst: d.cfg.UpcallBurst, MaskCache: 1}
		return d.objs.Config.Put(uint32(0), c)
	}
	if c.Layout != dpLayout {
		return fmt.Errorf("pinned maps have layout %d, this build understands %d", c.Layout, dpLayout)
	}
	// Controller-action and miss limits are the previous process's feedback
	// (pkg/switchd, pinfeedback.go): this one starts without them.
	var ifindex uint32
	var stale []uint32
	for it := d.objs.ActionMeters.Iterate(); it.Next(&ifindex, new(nagareActionMeter)); {
		stale = append(stale, ifindex)
	}
	for _, k := range stale {
		_ = d.objs.ActionMeters.Delete(k)
	}
	if c.UpcallRate != d.cfg.UpcallRate || c.UpcallBurst != d.cfg.UpcallBurst || c.MaskCache == 0 {
		c.UpcallRate, c.UpcallBurst = d.cfg.UpcallRate, d.cfg.UpcallBurst // this process's budget wins
		c.MaskCache = 1
		if err := d.objs.Config.Put(uint32(0), c); err != nil {
			return err
		}
	}
	if c.Emc != 0 && c.Emc != d.cfg.EMCInsertInvProb {
		// This process's setting wins (a previous one may have had
		// another, or the "always" of older builds).
		c.Emc = d.cfg.EMCInsertInvProb
		if err := d.objs.Config.Put(uint32(0), c); err != nil {
			return err
		}
	}

	// Ports, and their attachments.
	var ports []*Port
	for _, m := range []*ebpf.Map{d.objs.Ports, d.objs.PortsBig} {
		var ifindex uint32
		var info nagarePortInfo
		it := m.Iterate()
		for it.Next(&ifindex, &info) {
			if info.Ofport != 0 {
				ports = append(ports, &Port{Ifindex: int(ifindex), OFPort: info.Ofport, Kind: PortKind(info.Flags >> portKindShift)})
			}
		}
		if err := it.Err(); err != nil {
			return err
		}
	}
	err := d.inNetns(func() error {
		for _, p := range ports {
			ifc, err := net.InterfaceByIndex(p.Ifindex)
			if err != nil {
				// The device went while no process owned the instance (a
				// pod deleted during a switch restart): forget the port
				// (below) rather than refuse to start.
				d.vanished = append(d.vanished, *p)
				continue
			}
			p.Name = ifc.Name
			if p.Hook, err = d.attachProgram(p.Ifindex, p.Kind); err != nil {
				return err
			}
			d.ports[p.OFPort] = p
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, p := range d.ports {
		if p.Hook == HookFilter {
			d.queueTCX(p.Ifindex)
		}
	}
	for i := range d.vanished {
		if err := d.detach(&d.vanished[i]); err != nil {
			return fmt.Errorf("removing vanished port %d (ifindex %d): %w", d.vanished[i].OFPort, d.vanished[i].Ifindex, err)
		}
	}
	if err := d.restoreNativeTunnels(); err != nil {
		return fmt.Errorf("native tunnels: %w", err)
	}

	// Output sets, before the flows that refer to them.
	if err := d.restoreOutputSets(); err != nil {
		return err
	}

	// Masks.
	var valid [MaxMasks]bool
	for slot := uint32(0); slot < MaxMasks; slot++ {
		var m nagareMfMask
		if err := d.objs.Masks.Lookup(slot, &m); err != nil {
			return err
		}
		if m.Valid == 0 {
			continue
		}
		var b bytes.Buffer
		_ = binary.Write(&b, binary.NativeEndian, m.Mask)
		var mask flow.Mask
		if err := mask.UnmarshalBinary(b.Bytes()); err != nil {
			return err
		}
		d.masks[slot].setMask(mask)
		d.masks[slot].words = m.Words // as the fast path has it
		d.nMasks = max(d.nMasks, slot+1)
		valid[slot] = true
	}

	// Megaflows and their entries.
	var mk megaflowID
	var id uint32
	used := map[uint32]bool{}
	counts := map[uint32]uint32{} // filter slot → flows, as the megaflows say
	var stray []megaflowID
	mit := d.objs.Megaflows.Iterate()
	for mit.Next(&mk, &id) {
		if id >= uint32(d.cfg.MaxFlows) {
			// No id of this instance names it (a migration drops such
			// megaflows; a same-limits restart never has one): it would
			// index past flow_gens' mapping.
			stray = append(stray, mk)
			continue
		}
		entry, err := d.entryOf(id)
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
		gen, raw, onload := decodeEntry(entry[:])
		if err != nil || gen == 0 || d.gens[id].load() != gen {
			// Its entry is not whole (a previous process stopped while
			// it wrote or deleted it): upcalls install it again.
			stray = append(stray, mk)
			continue
		}
		slot := int(binary.NativeEndian.Uint32(mk[:]))
		if slot >= MaxMasks || !valid[slot] {
			// A previous process stopped between invalidating its
			// mask and deleting it. Kept, it would match again once
			// the slot holds a mask, naming whatever flow reuses
			// its id (the id is freed below).
			stray = append(stray, mk)
			continue
		}
		var key flow.Key
		if err := key.UnmarshalBinary(mk[8:]); err != nil {
			return err
		}
		in := &installed{id: id, gen: gen, slot: slot, key: key, actions: d.decodeActions(raw), sets: setsOf(raw), onload: onload,
			tail: len(raw) > inlineActions}
		kw := key.Words()
		in.filter = uint32(slot)<<filterBits | filterHash(&kw, &d.masks[slot].mw, d.masks[slot].words)
		d.track(mk, in)
		counts[in.filter]++
		d.masks[slot].refs++
		used[id] = true
		d.gen = max(d.gen, gen)
	}
	if err := mit.Err(); err != nil {
		return err
	}
	for i := range stray {
		_ = d.objs.Megaflows.Delete(&stray[i])
	}
	// A previous process that stopped between raising a count and
	// inserting its megaflow, or between deleting one and lowering its
	// count, left the count too high (a wasted probe, never a missed
	// flow): the counts become exact again.
	for slot := range d.filter {
		if n := counts[uint32(slot)]; d.filter[slot].load() != n {
			d.filter[slot].store(n)
		}
	}
	for i := uint32(0); i < uint32(d.cfg.MaxFlows) && len(used) > 0; i++ {
		if used[i] {
			d.ids.next = i + 1
		}
	}
	for i := uint32(0); i < d.ids.next; i++ {
		if !used[i] {
			d.setGen(i, 0)
			d.freeID(i) // zeroed in case a previous process stopped mid-delete
		}
	}
	return nil
}
