package switchd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/nagare-net/nagare/pkg/datapath"
	"github.com/nagare-net/nagare/pkg/ofproto"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// OpenFlow port config/state bits used here.
const (
	ofppcPortDown = 1 << 0
	ofppsLinkDown = 1 << 0
	ofppsLive     = 1 << 2
)

// PortSpec asks for a port.
type PortSpec struct {
	Name   string
	OFPort uint32                // 0: the lowest free number
	Kind   string                // "pod", "uplink", "tunnel", "internal"; "": detect
	Tunnel *ofproto.TunnelConfig // for a tunnel port: its remote (and local) endpoint
	// VS-extend: the workload behind the port (its FCF id), its tenant and
	// the CPU it is pinned to (openflow.VSXNoCPU: none; 0 is CPU 0, so a
	// spec built without this field set must say VSXNoCPU — see NoPin).
	Workload, Tenant uint32
	PinnedCPU        uint32
}

// NoPin is PortSpec.PinnedCPU for a port without a pinned CPU.
const NoPin = openflow.VSXNoCPU

// port is one switch port: a device attached to the fast path, or a
// virtual tunnel port (an endpoint) carried by a tunnel device.
type port struct {
	no      uint32
	name    string
	kind    datapath.PortKind
	ifindex int
	hwaddr  net.HardwareAddr
	config  uint32
	state   uint32
	added   time.Time
	tunnel  *ofproto.TunnelConfig
	carrier uint32 // for a virtual tunnel port: the device port carrying it
	// VS-extend: workload (FCF id), tenant, pinned CPU (VSXNoCPU: none)
	workload, tenant, pinnedCPU uint32
}

func (p *port) desc() openflow.Port {
	hw := p.hwaddr
	if len(hw) != 6 {
		hw = make(net.HardwareAddr, 6)
	}
	return openflow.Port{PortNo: p.no, HWAddr: hw, Name: p.name, Config: p.config, State: p.state,
		Curr: 1<<6 /* 10GB_FD */ | 1<<11 /* COPPER */, CurrSpeed: 10000000, MaxSpeed: 10000000}
}

type portTable struct {
	s     *Switch
	mu    sync.Mutex
	ports map[uint32]*port
}

func newPortTable(s *Switch) *portTable { return &portTable{s: s, ports: map[uint32]*port{}} }

// withNetlink runs fn with a netlink handle in the switch's namespace.
func (t *portTable) withNetlink(fn func(h *netlink.Handle) error) error {
	var h *netlink.Handle
	var err error
	if t.s.cfg.NetNS == "" {
		h, err = netlink.NewHandle()
	} else {
		ns, nerr := netns.GetFromPath(t.s.cfg.NetNS)
		if nerr != nil {
			return nerr
		}
		defer ns.Close()
		h, err = netlink.NewHandleAt(ns)
	}
	if err != nil {
		return err
	}
	defer h.Close()
	return fn(h)
}

// restore takes over the ports a previous process attached.
func (t *portTable) restore() error {
	for _, p := range t.s.dp.Vanished() {
		t.s.log.Warn("port removed: its device went while the switch was down", "port", p.OFPort, "ifindex", p.Ifindex)
	}
	if t.s.cfg.KernelTunnel {
		for _, nt := range t.s.dp.NativeTunnels() {
			if err := t.s.dp.ClearNativeTunnel(nt.OFPort); err != nil {
				return fmt.Errorf("giving tunnel port %d back to its device: %w", nt.OFPort, err)
			}
		}
	}
	for _, dp := range t.s.dp.Ports() {
		p := &port{no: dp.OFPort, name: dp.Name, kind: dp.Kind, ifindex: dp.Ifindex, added: time.Now()}
		_ = t.withNetlink(func(h *netlink.Handle) error {
			if l, err := h.LinkByIndex(dp.Ifindex); err == nil {
				p.fill(l)
			}
			return nil
		})
		t.ports[p.no] = p
	}
	t.publish()
	return nil
}

func (p *port) fill(l netlink.Link) {
	a := l.Attrs()
	p.name, p.ifindex, p.hwaddr = a.Name, a.Index, a.HardwareAddr
	p.state = 0
	if a.OperState == netlink.OperDown || a.Flags&net.FlagUp == 0 {
		p.state |= ofppsLinkDown
	} else {
		p.state |= ofppsLive
	}
}

// detectKind picks the port kind of a device: a veth whose peer lives in
// another namespace is a pod (delivered with redirect_peer), an
// external-mode VXLAN device a tunnel, anything else an uplink.
func detectKind(l netlink.Link) datapath.PortKind {
	switch v := l.(type) {
	case *netlink.Veth:
		if l.Attrs().NetNsID >= 0 {
			return datapath.PortPod
		}
		return datapath.PortInternal
	case *netlink.Vxlan:
		if v.FlowBased {
			return datapath.PortTunnel
		}
	}
	return datapath.PortUplink
}

func parseKind(s string) (datapath.PortKind, error) {
	switch s {
	case "pod":
		return datapath.PortPod, nil
	case "uplink":
		return datapath.PortUplink, nil
	case "tunnel":
		return datapath.PortTunnel, nil
	case "internal":
		return datapath.PortInternal, nil
	case "representor":
		return datapath.PortRepresentor, nil
	}
	return 0, fmt.Errorf("port kind %q: want pod, representor, uplink, tunnel or internal", s)
}

func (t *portTable) freeNumber() uint32 {
	for n := uint32(1); ; n++ {
		if _, ok := t.ports[n]; !ok {
			return n
		}
	}
}

// Add attaches a port and announces it (PORT_STATUS ADD).
func (t *portTable) Add(spec PortSpec) (*port, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.ports {
		if p.name == spec.Name && spec.Tunnel == nil {
			return nil, fmt.Errorf("port %s exists (number %d)", spec.Name, p.no)
		}
	}
	no := spec.OFPort
	if no == 0 {
		no = t.freeNumber()
	}
	if no >= openflow.PortMax {
		return nil, fmt.Errorf("port number %d is reserved", no)
	}
	if _, ok := t.ports[no]; ok {
		return nil, fmt.Errorf("port number %d is taken", no)
	}
	p := &port{no: no, added: time.Now(), tunnel: spec.Tunnel}
	err := t.withNetlink(func(h *netlink.Handle) error {
		l, err := h.LinkByName(spec.Name)
		if err != nil {
			return fmt.Errorf("no device %s: %w", spec.Name, err)
		}
		p.fill(l)
		p.kind = detectKind(l)
		if spec.Kind != "" {
			k, err := parseKind(spec.Kind)
			if err != nil {
				return err
			}
			p.kind = k
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if spec.Tunnel != nil {
		// A tunnel endpoint: a virtual port on the tunnel device, which
		// needs a device port of its own for ingress.
		if p.kind != datapath.PortTunnel {
			return nil, fmt.Errorf("%s is not a tunnel device (ip link add NAME type vxlan external)", spec.Name)
		}
		carrier := t.carrierOf(p.ifindex)
		if carrier == nil {
			n := t.freeNumberExcept(no)
			if _, err := t.s.dp.AttachPort(spec.Name, n, datapath.PortTunnel); err != nil {
				return nil, err
			}
			carrier = &port{no: n, name: spec.Name, kind: datapath.PortTunnel, ifindex: p.ifindex, hwaddr: p.hwaddr, state: p.state, added: time.Now()}
			t.ports[n] = carrier
		}
		if !t.s.cfg.KernelTunnel && spec.Tunnel.Local.Is4() {
			t.nativeTunnel(carrier, spec.Tunnel.Local)
		}
		p.carrier = carrier.no
		p.name = fmt.Sprintf("%s-%s", spec.Name, spec.Tunnel.Remote)
	} else if _, err := t.s.dp.AttachPort(spec.Name, no, p.kind); err != nil {
		return nil, err
	}
	t.ports[no] = p
	t.publishLocked()
	t.s.broadcast(&openflow.PortStatus{Reason: openflow.PortReasonAdd, Port: p.desc()}, openflow.PortReasonAdd)
	p.workload, p.tenant, p.pinnedCPU = spec.Workload, spec.Tenant, spec.PinnedCPU
	if spec.Workload == 0 && spec.Tenant == 0 && spec.PinnedCPU == 0 {
		p.pinnedCPU = NoPin // a spec that says nothing about steering
	}
	t.s.pinPort(p, true)
	t.s.portReport(p, openflow.VSXPortAdd)
	return p, nil
}

// nativeTunnel lets the fast path do the VXLAN of tunnel device carrier
// (datapath.SetNativeTunnel) on the device that holds local, unless it
// does already. A tunnel it cannot take stays with its device, which
// works, only slower: the reason is logged.
func (t *portTable) nativeTunnel(carrier *port, local netip.Addr) {
	for _, nt := range t.s.dp.NativeTunnels() {
		if nt.OFPort == carrier.no {
			return
		}
	}
	nt := datapath.NativeTunnel{OFPort: carrier.no, Local: local}
	err := t.withNetlink(func(h *netlink.Handle) error {
		l, err := h.LinkByIndex(carrier.ifindex)
		if err != nil {
			return err
		}
		vx, ok := l.(*netlink.Vxlan)
		if !ok || !vx.FlowBased {
			return fmt.Errorf("%s is not an external-mode VXLAN device", l.Attrs().Name)
		}
		nt.UDPPort = uint16(vx.Port)
		addrs, err := h.AddrList(nil, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok && ip == local {
				ul, err := h.LinkByIndex(a.LinkIndex)
				if err != nil {
					return err
				}
				nt.Underlay = ul.Attrs().Name
				return nil
			}
		}
		return fmt.Errorf("no device holds the local address %s", local)
	})
	if err == nil {
		err = t.s.dp.SetNativeTunnel(nt)
	}
	if err != nil {
		t.s.log.Warn("tunnel left to its device", "port", carrier.name, "local", local, "err", err)
		return
	}
	t.s.log.Info("tunnel in the fast path", "port", carrier.name, "underlay", nt.Underlay, "local", local, "udp-port", nt.UDPPort)
}

func (t *portTable) carrierOf(ifindex int) *port {
	for _, q := range t.ports {
		if q.ifindex == ifindex && q.tunnel == nil && q.kind == datapath.PortTunnel {
			return q
		}
	}
	return nil
}

func (t *portTable) freeNumberExcept(skip uint32) uint32 {
	for n := uint32(1); ; n++ {
		if _, ok := t.ports[n]; !ok && n != skip {
			return n
		}
	}
}

// Del removes a port by name (or by number) and announces it.
func (t *portTable) Del(name string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var p *port
	for _, q := range t.ports {
		if q.name == name || fmt.Sprint(q.no) == name {
			p = q
		}
	}
	if p == nil {
		return fmt.Errorf("no port %s", name)
	}
	if p.tunnel == nil {
		if err := t.s.dp.DetachPort(p.no); err != nil && !errors.Is(err, datapath.ErrUnknownPort) {
			return err
		}
	}
	delete(t.ports, p.no)
	t.publishLocked()
	t.s.broadcast(&openflow.PortStatus{Reason: openflow.PortReasonDelete, Port: p.desc()}, openflow.PortReasonDelete)
	t.s.pinPort(p, false)
	t.s.portReport(p, openflow.VSXPortDelete)
	return nil
}

func (t *portTable) publish() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.publishLocked()
}

// publishLocked tells the pipeline the current ports.
func (t *portTable) publishLocked() {
	var ps []ofproto.Port
	for _, p := range t.ports {
		ps = append(ps, ofproto.Port{No: p.no, Name: p.name, HWAddr: [6]byte(pad6(p.hwaddr)), Config: p.config, State: p.state, Tunnel: p.tunnel})
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].No < ps[j].No })
	t.s.pl.SetPorts(ps)
}

func pad6(b net.HardwareAddr) []byte {
	out := make([]byte, 6)
	copy(out, b)
	return out
}

// list returns the ports in number order.
func (t *portTable) list() []*port {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*port, 0, len(t.ports))
	for _, p := range t.ports {
		cp := *p
		out = append(out, &cp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].no < out[j].no })
	return out
}

// endpointFor maps a packet received on tunnel device port carrier from
// outer source src to the virtual tunnel port for that remote, if any.
func (t *portTable) endpointFor(carrier uint32, src netip.Addr) (uint32, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.ports {
		if p.carrier == carrier && p.tunnel != nil && p.tunnel.Remote == src {
			return p.no, true
		}
	}
	return 0, false
}

// carrierPort returns the device port that carries virtual port no.
func (t *portTable) carrierPort(no uint32) (uint32, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.ports[no]
	if !ok || p.carrier == 0 {
		return 0, false
	}
	return p.carrier, true
}

func (t *portTable) hasCarriers() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.ports {
		if p.carrier != 0 {
			return true
		}
	}
	return false
}

// PortMod changes a port's config bits (port down, no-flood, ...).
func (t *portTable) PortMod(pm *openflow.PortMod) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.ports[pm.PortNo]
	if !ok {
		return &openflow.Error{Type: openflow.ErrTypePortModFailed, Code: 0 /* BAD_PORT */}
	}
	if len(pm.HWAddr) == 6 && len(p.hwaddr) == 6 && pm.HWAddr.String() != p.hwaddr.String() {
		return &openflow.Error{Type: openflow.ErrTypePortModFailed, Code: 1 /* BAD_HW_ADDR */}
	}
	p.config = p.config&^pm.Mask | pm.Config&pm.Mask
	t.publishLocked()
	t.s.broadcast(&openflow.PortStatus{Reason: openflow.PortReasonModify, Port: p.desc()}, openflow.PortReasonModify)
	return nil
}

// stats reads the kernel's counters of the ports (all, or one).
func (t *portTable) stats(no uint32) ([]openflow.PortStats, error) {
	ports := t.list()
	var out []openflow.PortStats
	err := t.withNetlink(func(h *netlink.Handle) error {
		for _, p := range ports {
			if no != openflow.PortAny && p.no != no {
				continue
			}
			st := openflow.PortStats{PortNo: p.no}
			d := time.Since(p.added)
			st.DurationSec, st.DurationN = uint32(d/time.Second), uint32(d%time.Second)
			if p.tunnel == nil {
				if l, err := h.LinkByIndex(p.ifindex); err == nil && l.Attrs().Statistics != nil {
					ls := l.Attrs().Statistics
					st.RxPackets, st.TxPackets = ls.RxPackets, ls.TxPackets
					st.RxBytes, st.TxBytes = ls.RxBytes, ls.TxBytes
					st.RxDropped, st.TxDropped = ls.RxDropped, ls.TxDropped
					st.RxErrors, st.TxErrors = ls.RxErrors, ls.TxErrors
					st.RxFrameErr, st.RxOverErr, st.RxCRCErr = ls.RxFrameErrors, ls.RxOverErrors, ls.RxCrcErrors
					st.Collisions = ls.Collisions
				}
			}
			out = append(out, st)
		}
		return nil
	})
	if no != openflow.PortAny && len(out) == 0 {
		return nil, &openflow.Error{Type: openflow.ErrTypeBadRequest, Code: openflow.BadRequestBadPort}
	}
	return out, err
}

// watch follows link state changes of the ports and reports them
// (PORT_STATUS MODIFY; the pipeline's liveness for fast-failover groups).
func (t *portTable) watch(ctx context.Context) {
	ch := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	defer close(done)
	opts := netlink.LinkSubscribeOptions{ErrorCallback: func(error) {}}
	if t.s.cfg.NetNS != "" {
		ns, err := netns.GetFromPath(t.s.cfg.NetNS)
		if err != nil {
			return
		}
		defer ns.Close()
		opts.Namespace = &ns
	}
	if err := netlink.LinkSubscribeWithOptions(ch, done, opts); err != nil {
		t.s.log.Warn("link state updates unavailable", "err", err)
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case u := <-ch:
			t.linkChanged(u.Link)
		}
	}
}

func (t *portTable) linkChanged(l netlink.Link) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.ports {
		if p.ifindex != l.Attrs().Index {
			continue
		}
		before := p.state
		name := p.name
		p.fill(l)
		if p.tunnel != nil {
			p.name = name
		}
		if p.state != before {
			t.publishLocked()
			t.s.broadcast(&openflow.PortStatus{Reason: openflow.PortReasonModify, Port: p.desc()}, openflow.PortReasonModify)
		}
	}
}
