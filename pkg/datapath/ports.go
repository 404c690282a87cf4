package datapath

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
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
	// PortRepresentor is a pod's representor in a DPU domain (docs/dpu.md):
	// the DPU end of the VF link's crossing. Hooked like a pod (a filter:
	// one per CNI ADD), but output transmits on it, so the packet crosses
	// back to the host as a NIC's DMA into the VF would.
	PortRepresentor
)

// pod says whether ports of kind k are pods' (a pod's veth, a VF
// representor): attached with a filter first, moved to tcx (hooks.go).
func (k PortKind) pod() bool { return k == PortPod || k == PortRepresentor }

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
	case PortRepresentor:
		return "representor"
	}
	return fmt.Sprintf("kind(%d)", uint32(k))
}

// port_info.flags bits (bpf/lib/maps.h), plus the kind in the upper half so
// a restarted process knows each port's kind again.
const (
	portFlagTunnel = 1 << 0
	portFlagXDP    = 1 << 1 // PORT_XDP: onloaded packets go through AF_XDP (xsk_onload.go)
	portKindShift  = 16
)

// Port is a device attached to the fast path.
type Port struct {
	Name    string
	Ifindex int
	OFPort  uint32
	Kind    PortKind
	// Hook is how the program is attached: HookTCX, or HookFilter for a
	// pod port until it moves to tcx (hooks.go).
	Hook string
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
		p.Hook, err = d.attachProgram(p.Ifindex, kind)
		return err
	})
	if err != nil {
		return nil, err
	}
	d.ports[ofport] = p
	if p.Hook == HookFilter {
		d.queueTCX(p.Ifindex)
	}
	return p, nil
}

// attachProgram attaches (or re-points) the ingress program on ifindex so
// that the attachment outlives this process, and says which hook it is
// on. Two hooks, by port kind:
//
//   - pods: a cls_bpf filter (direct action) on the device's clsact
//     qdisc, which the caller queues for tcx (hooks.go: a tcx attach
//     waits for RCU grace periods under RTNL, 12 ms a device here, and
//     pods come and go with every CNI ADD).
//   - everything else: tcx, with the link pinned under the instance.
//
// A restart re-points either atomically (tcx link update, filter
// replace): no packet sees a gap. A pinned tcx link wins over the kind, so
// a pod port moved to tcx keeps it (and loses a filter a move cut short
// left behind).
func (d *Datapath) attachProgram(ifindex int, kind PortKind) (string, error) {
	pod := kind.pod()
	pin := d.linkPin(ifindex)
	if l, err := link.LoadPinnedLink(pin, nil); err == nil {
		defer l.Close()
		if err := l.Update(d.objs.NagarePortIngress); err == nil {
			if pod {
				return HookTCX, filterDel(ifindex)
			}
			return HookTCX, nil
		}
		_ = l.Unpin()
	}
	if pod {
		return HookFilter, d.attachFilter(ifindex)
	}
	return HookTCX, d.attachTCX(ifindex)
}

// portFilter is the fast path's cls_bpf filter at clsact ingress of a pod
// port: one fixed priority and handle, so a restart replaces it in place.
func portFilter(ifindex, progFD int) *netlink.BpfFilter {
	return &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: ifindex, Parent: netlink.HANDLE_MIN_INGRESS,
			Handle: 1, Priority: 1, Protocol: unix.ETH_P_ALL},
		Fd: progFD, Name: "nagare_port_ingress", DirectAction: true,
	}
}

// attachFilter adds a clsact qdisc to ifindex if it has none and creates
// or replaces the fast path's filter on it. Runs in the instance's
// namespace (netlink's package calls open their socket there).
func (d *Datapath) attachFilter(ifindex int) error {
	q := &netlink.GenericQdisc{QdiscType: "clsact", QdiscAttrs: netlink.QdiscAttrs{
		LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}
	if err := netlink.QdiscAdd(q); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("datapath: clsact on ifindex %d: %w", ifindex, err)
	}
	if err := netlink.FilterReplace(portFilter(ifindex, d.objs.NagarePortIngress.FD())); err != nil {
		return fmt.Errorf("datapath: tc filter on ifindex %d: %w", ifindex, err)
	}
	return nil
}

// detachFilter removes the fast path's filter; a device or filter already
// gone is fine.
func (d *Datapath) detachFilter(ifindex int) error {
	return d.inNetns(func() error { return filterDel(ifindex) })
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
	if t, ok := d.nativeTunnel(p); ok {
		errs = append(errs, d.clearNativeTunnel(p, t))
	}
	pod := p.Kind.pod()
	errs = append(errs, unpinLink(d.linkPin(p.Ifindex), pod)) // a pod's device takes its link (closeLinkLater)
	if pod {
		errs = append(errs, d.detachFilter(p.Ifindex)) // none after a move to tcx: fine
		delete(d.toTCX, p.Ifindex)
		d.lastPodChange = time.Now() // a CNI DEL: moves wait for the pause, as after an ADD
	}
	if p.Ifindex < portArray {
		errs = append(errs, d.objs.Ports.Put(uint32(p.Ifindex), nagarePortInfo{}))
	} else if err := d.objs.PortsBig.Delete(uint32(p.Ifindex)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		errs = append(errs, err)
	}
	delete(d.ports, p.OFPort)
	d.forgetDevice(p.Ifindex)
	d.forgetConntrackPort(p.OFPort)
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
