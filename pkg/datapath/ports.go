package datapath

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// PortKind says how the fast path receives from and delivers to a port.
type PortKind uint32

const (
	// PortPod is the host side of a pod's veth pair: output uses
	// redirect_peer, which lands in the pod's namespace without a trip
	// through the backlog queue.
	PortPod PortKind = iota
	// PortUplink is a NIC or underlay device: output transmits on it.
	PortUplink
	// PortTunnel is an external-mode tunnel device (ip link add ... type
	// vxlan external): ingress reads the tunnel metadata into the key, and
	// output encapsulates with the metadata of the preceding SetTunnel.
	PortTunnel
	// PortInternal is any other device the switch owns (transmit on it).
	PortInternal
)

func (k PortKind) String() string {
	switch k {
	case PortPod:
		return "pod"
	case PortUplink:
		return "uplink"
	case PortTunnel:
		return "tunnel"
	case PortInternal:
		return "internal"
	}
	return fmt.Sprintf("kind(%d)", uint32(k))
}

// port_info.flags bits (bpf/lib/maps.h), plus the kind in the upper half so
// a restarted process knows each port's kind again.
const (
	portFlagTunnel = 1 << 0
	portKindShift  = 16
)

// Port is a device attached to the fast path.
type Port struct {
	Name    string
	Ifindex int
	OFPort  uint32
	Kind    PortKind
}

// AttachPort attaches the fast path at tcx ingress of device name and gives
// it OpenFlow port number ofport. Attaching an attached device again
// replaces its program (and updates its number and kind).
func (d *Datapath) AttachPort(name string, ofport uint32, kind PortKind) (*Port, error) {
	if ofport == 0 || ofport >= 0xffffff00 {
		return nil, fmt.Errorf("datapath: port number %d is reserved", ofport)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if p, ok := d.ports[ofport]; ok && p.Name != name {
		return nil, fmt.Errorf("datapath: port number %d is taken by %s", ofport, p.Name)
	}
	p := &Port{Name: name, OFPort: ofport, Kind: kind}
	err := d.inNetns(func() error {
		ifc, err := net.InterfaceByName(name)
		if err != nil {
			return fmt.Errorf("datapath: attach %s: %w", name, err)
		}
		p.Ifindex = ifc.Index
		info := nagarePortInfo{Ofport: ofport, Flags: uint32(kind) << portKindShift}
		if kind == PortTunnel {
			info.Flags |= portFlagTunnel
		}
		if err := d.portMap(p.Ifindex).Put(uint32(p.Ifindex), info); err != nil {
			return fmt.Errorf("datapath: attach %s: %w", name, err)
		}
		return d.attachProgram(p.Ifindex)
	})
	if err != nil {
		return nil, err
	}
	d.ports[ofport] = p
	return p, nil
}

// attachProgram attaches (or re-points) the ingress program on ifindex,
// keeping the attachment pinned so it outlives this process.
func (d *Datapath) attachProgram(ifindex int) error {
	pin := d.linkPin(ifindex)
	if l, err := link.LoadPinnedLink(pin, nil); err == nil {
		defer l.Close()
		// A restart: swap the program atomically, no packet sees a gap.
		if err := l.Update(d.objs.NagarePortIngress); err == nil {
			return nil
		}
		_ = l.Unpin()
	}
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
	defer l.Close()
	if err := l.Pin(pin); err != nil {
		return fmt.Errorf("datapath: pin %s: %w", pin, err)
	}
	return nil
}

// DetachPort removes port ofport from the fast path. Flows that output to
// it are left for the caller (the revalidator) to fix.
func (d *Datapath) DetachPort(ofport uint32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.ports[ofport]
	if !ok {
		return fmt.Errorf("datapath: %w %d", ErrUnknownPort, ofport)
	}
	return d.detach(p)
}

func (d *Datapath) detach(p *Port) error {
	var errs []error
	if l, err := link.LoadPinnedLink(d.linkPin(p.Ifindex), nil); err == nil {
		errs = append(errs, l.Unpin(), l.Close())
	} else if !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if p.Ifindex < portArray {
		errs = append(errs, d.objs.Ports.Put(uint32(p.Ifindex), nagarePortInfo{}))
	} else if err := d.objs.PortsBig.Delete(uint32(p.Ifindex)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		errs = append(errs, err)
	}
	delete(d.ports, p.OFPort)
	return errors.Join(errs...)
}

// Ports returns the attached ports.
func (d *Datapath) Ports() []Port {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Port, 0, len(d.ports))
	for _, p := range d.ports {
		out = append(out, *p)
	}
	return out
}

// portMap is the map that holds ifindex's entry.
func (d *Datapath) portMap(ifindex int) *ebpf.Map {
	if ifindex < portArray {
		return d.objs.Ports
	}
	return d.objs.PortsBig
}

// portByIfindex finds a port by device; callers hold d.mu.
func (d *Datapath) portByIfindex(ifindex int) *Port {
	for _, p := range d.ports {
		if p.Ifindex == ifindex {
			return p
		}
	}
	return nil
}
