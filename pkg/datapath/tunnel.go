package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// NativeTunnel is a tunnel port whose VXLAN the fast path does itself
// (bpf/lib/tunnel.h): outputs to the port are encapsulated and sent on the
// underlay, and VXLAN for Local on UDPPort that arrives on the underlay is
// decapsulated at its ingress and enters the switch on the port. What the
// fast path leaves alone (ARP, an unresolved next hop, a packet too big
// for the underlay, anything unusual on receipt) still takes the device.
type NativeTunnel struct {
	OFPort   uint32     // the tunnel device's port
	Underlay string     // the device that carries the tunnel's packets
	Local    netip.Addr // this node's outer address (IPv4)
	UDPPort  uint16     // the VXLAN port of the tunnel device

	underlayIfindex int
}

// SetNativeTunnel lets the fast path do the VXLAN of tunnel port t.OFPort
// on t.Underlay. Setting it again moves it to the new underlay or address.
func (d *Datapath) SetNativeTunnel(t NativeTunnel) error {
	if !t.Local.Is4() || t.UDPPort == 0 {
		return fmt.Errorf("datapath: native tunnel needs an IPv4 local address and a UDP port (have %v, %d)", t.Local, t.UDPPort)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.ports[t.OFPort]
	if !ok {
		return fmt.Errorf("datapath: native tunnel on %w %d", ErrUnknownPort, t.OFPort)
	}
	if p.Kind != PortTunnel {
		return fmt.Errorf("datapath: port %d (%s) is a %s port, not a tunnel", t.OFPort, p.Name, p.Kind)
	}
	err := d.inNetns(func() error {
		ifc, err := net.InterfaceByName(t.Underlay)
		if err != nil {
			return fmt.Errorf("datapath: native tunnel underlay: %w", err)
		}
		t.underlayIfindex = ifc.Index
		return nil
	})
	if err != nil {
		return err
	}
	if q := d.portByIfindex(t.underlayIfindex); q != nil {
		return fmt.Errorf("datapath: %s is switch port %d: a native tunnel's underlay must not be a port", t.Underlay, q.OFPort)
	}
	if old, ok := d.nativeTunnel(p); ok && old.underlayIfindex != t.underlayIfindex {
		if err := d.clearNativeTunnel(p, old); err != nil {
			return err
		}
	}
	local := t.Local.As4()
	v := nagareNativeTunnel{Ofport: t.OFPort, Tunnel: uint32(p.Ifindex), Underlay: uint32(t.underlayIfindex),
		Local: binary.NativeEndian.Uint32(local[:])}
	v.Port = binary.NativeEndian.Uint16(binary.BigEndian.AppendUint16(nil, t.UDPPort))
	// The receive side first: until the transmit entry exists, the
	// remote's packets may arrive either way.
	if err := d.objs.NativeTunnels.Put(uint32(t.underlayIfindex), v); err != nil {
		return fmt.Errorf("datapath: native tunnel: %w", err)
	}
	if err := d.inNetns(func() error { _, err := d.attachProgram(t.underlayIfindex, PortUplink); return err }); err != nil {
		_ = d.objs.NativeTunnels.Delete(uint32(t.underlayIfindex))
		return err
	}
	if err := d.objs.NativeTunnels.Put(uint32(p.Ifindex), v); err != nil {
		return fmt.Errorf("datapath: native tunnel: %w", err)
	}
	return nil
}

// ClearNativeTunnel gives tunnel port ofport's VXLAN back to its device.
func (d *Datapath) ClearNativeTunnel(ofport uint32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.ports[ofport]
	if !ok {
		return fmt.Errorf("datapath: %w %d", ErrUnknownPort, ofport)
	}
	t, ok := d.nativeTunnel(p)
	if !ok {
		return nil
	}
	return d.clearNativeTunnel(p, t)
}

// NativeTunnels lists the tunnels the fast path does itself.
func (d *Datapath) NativeTunnels() []NativeTunnel {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []NativeTunnel
	for _, p := range d.ports {
		if t, ok := d.nativeTunnel(p); ok {
			out = append(out, t)
		}
	}
	return out
}

// nativeTunnel reads tunnel port p's entry; callers hold d.mu.
func (d *Datapath) nativeTunnel(p *Port) (NativeTunnel, bool) {
	var v nagareNativeTunnel
	if p.Kind != PortTunnel || d.objs.NativeTunnels.Lookup(uint32(p.Ifindex), &v) != nil || v.Tunnel != uint32(p.Ifindex) {
		return NativeTunnel{}, false
	}
	var local [4]byte
	binary.NativeEndian.PutUint32(local[:], v.Local)
	t := NativeTunnel{OFPort: p.OFPort, Local: netip.AddrFrom4(local), underlayIfindex: int(v.Underlay)}
	t.UDPPort = binary.BigEndian.Uint16(binary.NativeEndian.AppendUint16(nil, v.Port))
	_ = d.inNetns(func() error {
		if ifc, err := net.InterfaceByIndex(t.underlayIfindex); err == nil {
			t.Underlay = ifc.Name
		}
		return nil
	})
	return t, true
}

// clearNativeTunnel removes both entries (transmit first) and the
// underlay's hook; callers hold d.mu.
func (d *Datapath) clearNativeTunnel(p *Port, t NativeTunnel) error {
	var errs []error
	for _, k := range []uint32{uint32(p.Ifindex), uint32(t.underlayIfindex)} {
		if err := d.objs.NativeTunnels.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(append(errs, d.detachUnderlay(t.underlayIfindex))...)
}

// detachUnderlay removes the hook restore or SetNativeTunnel put on an
// underlay.
func (d *Datapath) detachUnderlay(ifindex int) error {
	l, err := link.LoadPinnedLink(d.linkPin(ifindex), nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return errors.Join(l.Unpin(), l.Close())
}

// restoreNativeTunnels re-points the underlays' hooks at this build's
// program and drops both entries of a tunnel whose port or underlay went
// while no process owned the instance; callers hold d.mu (restore).
func (d *Datapath) restoreNativeTunnels() error {
	type entry struct {
		key uint32
		v   nagareNativeTunnel
	}
	var entries []entry
	var e entry
	it := d.objs.NativeTunnels.Iterate()
	for it.Next(&e.key, &e.v) {
		entries = append(entries, e)
	}
	if err := it.Err(); err != nil {
		return err
	}
	keep := map[uint32]bool{} // by underlay ifindex
	err := d.inNetns(func() error {
		for _, e := range entries {
			if e.key != e.v.Underlay {
				continue
			}
			p, ok := d.ports[e.v.Ofport]
			if !ok || p.Kind != PortTunnel || uint32(p.Ifindex) != e.v.Tunnel {
				continue
			}
			if _, err := net.InterfaceByIndex(int(e.key)); err != nil {
				continue
			}
			if _, err := d.attachProgram(int(e.key), PortUplink); err != nil {
				return err
			}
			keep[e.key] = true
		}
		return nil
	})
	for _, e := range entries {
		if keep[e.v.Underlay] {
			continue
		}
		_ = d.objs.NativeTunnels.Delete(e.key)
		if e.key == e.v.Underlay {
			_ = d.detachUnderlay(int(e.key))
		}
	}
	return err
}
