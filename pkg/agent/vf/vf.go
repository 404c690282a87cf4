// Package vf is the host side of DPU mode's "VF" links (docs/dpu.md): what
// an SR-IOV NIC would give a pod, emulated with veth pairs and eBPF, plus
// direct forward.
//
// A pod's VF link is two veth pairs:
//
//	pod eth0 ↔ nag<h>     (podnet makes it, as in host mode: the VF and its host-side end)
//	nvf<h>  ↔ rep<h>      (this package: the crossing into the DPU domain; rep<h> is the
//	                       pod's representor, a port of the DPU's switch)
//
// vf_host_ingress (bpf/nagare_vf.c) on nag<h> sees what the pod transmits
// and sends it across to rep<h>, or, with direct forward, straight into a
// local pod's eth0; vf_wire_ingress on nvf<h> hands what the DPU sends
// into the pod. Making the crossing pair is the one place where the host
// side reaches into the DPU's namespace: it stands for the NIC creating a
// VF's representor, which on real hardware happens without the host.
//
// Maps are pinned under the agent's state (Config.PinDir), so a restarted
// agent keeps every link forwarding and finds its table again; the tc
// filters belong to their devices.
package vf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/nagare-net/nagare/pkg/agent/inns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ErrNotSupported wraps failures caused by a missing kernel feature.
var ErrNotSupported = errors.New("not supported by this kernel or machine")

// Counter is one of the paths a packet can take (enum vf_counter).
type Counter uint32

// Counters, as bpf/lib/direct_forward.h numbers them.
const (
	Direct       Counter = 0
	ToDPU        Counter = 1
	ToDPUNotIP   Counter = 2
	ToDPUSpoofed Counter = 3
	ToDPUNoDest  Counter = 4
	ToDPUAddr    Counter = 5
	FromDPU      Counter = 6
	DropNoLink   Counter = 7
	DropShort    Counter = 8
	numCounters          = 16
)

var counterNames = map[Counter]string{
	Direct: "direct", ToDPU: "to-dpu", ToDPUNotIP: "to-dpu-not-ip", ToDPUSpoofed: "to-dpu-spoofed",
	ToDPUNoDest: "to-dpu-no-dest", ToDPUAddr: "to-dpu-addr", FromDPU: "from-dpu",
	DropNoLink: "drop-no-link", DropShort: "drop-short",
}

func (c Counter) String() string {
	if n, ok := counterNames[c]; ok {
		return n
	}
	return fmt.Sprintf("counter(%d)", uint32(c))
}

// WireName and RepName name the crossing pair of the VF whose host-side
// end is host (nag + 12 hex digits): nvf<...> on the host, rep<...> in the
// DPU domain.
func WireName(host string) string { return "nvf" + suffix(host) }

// RepName is the pod's representor in the DPU domain.
func RepName(host string) string { return "rep" + suffix(host) }

func suffix(host string) string {
	if len(host) > 3 {
		return host[3:]
	}
	return host
}

// Config says where the links live.
type Config struct {
	HostNetns string // the host's namespace path ("" = the agent's own)
	DPUNetns  string // the DPU domain's namespace path
	PinDir    string // BPF filesystem directory for the maps
	// DirectForward turns the direct-forward table on.
	DirectForward bool
	// DPUCPUs and HostCPUs (CPU lists), when set, steer what crosses into
	// the DPU domain to the DPU's CPUs and what comes back to the host's
	// (rps.go).
	DPUCPUs, HostCPUs string
}

// VF is the loaded program and its maps.
type VF struct {
	mu                sync.Mutex // Attach, Detach and Reconcile one at a time
	cfg               Config
	objs              vfObjects
	dpuMask, hostMask string // RPS masks, "" = none
}

// Open loads the VF programs with the pinned maps (made on first use).
func Open(cfg Config) (*VF, error) {
	if cfg.DPUNetns == "" {
		return nil, errors.New("vf: the DPU domain's namespace is required")
	}
	if err := os.MkdirAll(cfg.PinDir, 0o700); err != nil {
		return nil, fmt.Errorf("vf: pin directory: %w", err)
	}
	spec, err := loadVf()
	if err != nil {
		return nil, err
	}
	v := &VF{cfg: cfg}
	if cfg.DPUCPUs != "" {
		if v.dpuMask, err = CPUMask(cfg.DPUCPUs); err != nil {
			return nil, fmt.Errorf("vf: DPU CPUs: %w", err)
		}
		if cfg.HostCPUs == "" {
			return nil, errors.New("vf: DPU CPUs without host CPUs")
		}
		if v.hostMask, err = CPUMask(cfg.HostCPUs); err != nil {
			return nil, fmt.Errorf("vf: host CPUs: %w", err)
		}
	}
	if err := spec.LoadAndAssign(&v.objs, &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: cfg.PinDir}}); err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) {
			return nil, fmt.Errorf("vf: load: %w (%w)", err, ErrNotSupported)
		}
		return nil, fmt.Errorf("vf: load: %w", err)
	}
	if err := v.SetDirectForward(cfg.DirectForward); err != nil {
		v.Close()
		return nil, err
	}
	return v, nil
}

// Close releases the handles; pins and filters stay (links keep forwarding).
func (v *VF) Close() error { return v.objs.Close() }

// SetDirectForward turns direct forward on or off for every link at once.
func (v *VF) SetDirectForward(on bool) error {
	var e uint32
	if on {
		e = 1
	}
	return v.objs.DfConfig.Put(uint32(0), vfDfSettings{Enabled: e})
}

// DirectForward says whether direct forward is on.
func (v *VF) DirectForward() bool {
	var s vfDfSettings
	if err := v.objs.DfConfig.Lookup(uint32(0), &s); err != nil {
		return false
	}
	return s.Enabled != 0
}

// Link is one pod's VF.
type Link struct {
	Host string           // nag<h>: the host-side end podnet made
	MAC  net.HardwareAddr // the pod's
	IP   netip.Addr       // the pod's
	Net  uint32           // the pod's network (VNI)
	MTU  int
}

func ipU32(a netip.Addr) uint32 {
	b := a.As4()
	return binary.LittleEndian.Uint32(b[:]) // the bytes in network order, as the packet has them
}

// Attach makes (or finds) the crossing pair of l, hooks both host-side
// devices and records the link. The representor it returns is the port
// the DPU's switch attaches. Idempotent.
func (v *VF) Attach(l Link) (rep string, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	wire, rep := WireName(l.Host), RepName(l.Host)
	hh, err := inns.Netlink(v.cfg.HostNetns)
	if err != nil {
		return "", fmt.Errorf("host namespace: %w", err)
	}
	defer hh.Close()
	hd, err := inns.Netlink(v.cfg.DPUNetns)
	if err != nil {
		return "", fmt.Errorf("DPU namespace: %w", err)
	}
	defer hd.Close()
	host, err := hh.LinkByName(l.Host)
	if err != nil {
		return "", fmt.Errorf("VF host end %s: %w", l.Host, err)
	}
	w, werr := hh.LinkByName(wire)
	r, rerr := hd.LinkByName(rep)
	if werr == nil && rerr != nil {
		// Half a pair: the DPU domain lost the representor (it was
		// rebuilt). Make the pair again.
		if err := hh.LinkDel(w); err != nil {
			return "", fmt.Errorf("remove half-made %s: %w", wire, err)
		}
		werr = errors.New("gone")
	}
	if werr != nil {
		if rerr == nil {
			_ = hd.LinkDel(r)
		}
		dpu, err := netns.GetFromPath(v.cfg.DPUNetns)
		if err != nil {
			return "", err
		}
		va := netlink.NewLinkAttrs()
		va.Name, va.MTU = wire, l.MTU
		err = hh.LinkAdd(&netlink.Veth{LinkAttrs: va, PeerName: rep, PeerMTU: uint32(l.MTU), PeerNamespace: netlink.NsFd(int(dpu))})
		dpu.Close()
		if err != nil {
			return "", fmt.Errorf("create %s/%s: %w", wire, rep, err)
		}
		if w, err = hh.LinkByName(wire); err != nil {
			return "", err
		}
		if r, err = hd.LinkByName(rep); err != nil {
			return "", err
		}
	}
	// Neither end is an interface of its namespace's stack: no IPv6
	// (no DAD or router solicitations into the pod).
	if err := inns.NoIPv6(v.cfg.HostNetns, wire); err != nil {
		return "", err
	}
	if err := inns.NoIPv6(v.cfg.DPUNetns, rep); err != nil {
		return "", err
	}
	for _, x := range []struct {
		h *netlink.Handle
		l netlink.Link
	}{{hh, w}, {hd, r}} {
		if err := x.h.LinkSetUp(x.l); err != nil {
			return "", fmt.Errorf("set %s up: %w", x.l.Attrs().Name, err)
		}
	}
	if v.dpuMask != "" {
		if err := setRPS(v.cfg.DPUNetns, rep, v.dpuMask); err != nil {
			return "", err
		}
		if err := setRPS(v.cfg.HostNetns, wire, v.hostMask); err != nil {
			return "", err
		}
	}
	link := vfVfLink{HostIfindex: uint32(host.Attrs().Index), WireIfindex: uint32(w.Attrs().Index), Net: l.Net, Ip: ipU32(l.IP)}
	copy(link.Mac[:], l.MAC)
	if err := v.objs.VfLinks.Put(link.HostIfindex, link); err != nil {
		return "", err
	}
	if err := v.objs.VfLinks.Put(link.WireIfindex, link); err != nil {
		return "", err
	}
	if err := attachFilter(hh, host.Attrs().Index, v.objs.VfHostIngress, "vf_host_ingress"); err != nil {
		return "", err
	}
	if err := attachFilter(hh, w.Attrs().Index, v.objs.VfWireIngress, "vf_wire_ingress"); err != nil {
		return "", err
	}
	return rep, nil
}

// attachFilter puts prog at clsact ingress of ifindex (one priority and
// handle, so a restarted agent replaces it in place: no gap).
func attachFilter(h *netlink.Handle, ifindex int, prog *ebpf.Program, name string) error {
	q := &netlink.GenericQdisc{QdiscType: "clsact", QdiscAttrs: netlink.QdiscAttrs{
		LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}
	if err := h.QdiscAdd(q); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("vf: clsact on ifindex %d: %w", ifindex, err)
	}
	f := &netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{LinkIndex: ifindex, Parent: netlink.HANDLE_MIN_INGRESS,
		Handle: 1, Priority: 1, Protocol: unix.ETH_P_ALL}, Fd: prog.FD(), Name: name, DirectAction: true}
	if err := h.FilterReplace(f); err != nil {
		return fmt.Errorf("vf: tc filter %s on ifindex %d: %w", name, ifindex, err)
	}
	return nil
}

// Publish enters l in the direct-forward table: from now on local pods'
// packets for l's MAC and address go straight into it. Call it only once
// the DPU pipeline forwards to l (its flows are in).
func (v *VF) Publish(l Link) error {
	hh, err := inns.Netlink(v.cfg.HostNetns)
	if err != nil {
		return err
	}
	defer hh.Close()
	host, err := hh.LinkByName(l.Host)
	if err != nil {
		return fmt.Errorf("VF host end %s: %w", l.Host, err)
	}
	return v.objs.DfFib.Put(dfKey(l.Net, l.MAC), vfDfDest{HostIfindex: uint32(host.Attrs().Index), Ip: ipU32(l.IP)})
}

// Withdraw removes l from the direct-forward table (before its flows go).
func (v *VF) Withdraw(l Link) error {
	if err := v.objs.DfFib.Delete(dfKey(l.Net, l.MAC)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

func dfKey(netID uint32, mac net.HardwareAddr) vfDfKey {
	k := vfDfKey{Net: netID}
	copy(k.Mac[:], mac)
	return k
}

// Detach removes the crossing pair and the link's entries; the pod's own
// pair is podnet's. A missing device is fine.
func (v *VF) Detach(host string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	hh, err := inns.Netlink(v.cfg.HostNetns)
	if err != nil {
		return err
	}
	defer hh.Close()
	var errs []error
	for _, name := range []string{host, WireName(host)} {
		l, err := hh.LinkByName(name)
		if err != nil {
			continue
		}
		idx := uint32(l.Attrs().Index)
		var e vfVfLink
		if name == WireName(host) && v.objs.VfLinks.Lookup(idx, &e) == nil && e.HostIfindex != idx {
			// The host end's entry, also when the host end is gone
			// (its pod's namespace went first) and cannot be named.
			if err := v.objs.VfLinks.Delete(e.HostIfindex); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = append(errs, err)
			}
		}
		if err := v.objs.VfLinks.Delete(idx); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
		if name == WireName(host) {
			if err := hh.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
				errs = append(errs, fmt.Errorf("delete %s: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Reconcile makes vf_links hold only the links of hosts() (the host ends
// of the pods the agent knows, read once no Attach runs, so a pod whose
// Attach ends first is in it): an entry whose host end vanished without a
// Detach (its pod's namespace deleted, the agent away) would stay until
// the map is full and every Attach fails; a device number the kernel
// gives again must not inherit it. Crossing pairs (nvf*) of no attached
// host end go too. It returns how many entries went.
func (v *VF) Reconcile(hosts func() []string) (int, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	hh, err := inns.Netlink(v.cfg.HostNetns)
	if err != nil {
		return 0, err
	}
	defer hh.Close()
	live := map[uint32]uint32{} // host ifindex -> its wire's ifindex
	wires := map[string]bool{}
	for _, h := range hosts() {
		wires[WireName(h)] = true
		hl, err := hh.LinkByName(h)
		if err != nil {
			continue
		}
		wl, err := hh.LinkByName(WireName(h))
		if err != nil {
			continue
		}
		live[uint32(hl.Attrs().Index)] = uint32(wl.Attrs().Index)
	}
	entries, err := v.links()
	if err != nil {
		return 0, err
	}
	var errs []error
	stale := staleLinks(entries, live)
	for _, k := range stale {
		if err := v.objs.VfLinks.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	links, err := hh.LinkList()
	if err != nil {
		return len(stale), errors.Join(append(errs, err)...)
	}
	for _, l := range links {
		if n := l.Attrs().Name; strings.HasPrefix(n, "nvf") && !wires[n] {
			if err := hh.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
				errs = append(errs, fmt.Errorf("delete %s: %w", n, err))
			}
		}
	}
	return len(stale), errors.Join(errs...)
}

// links is vf_links, by key.
func (v *VF) links() (map[uint32]vfVfLink, error) {
	out := map[uint32]vfVfLink{}
	var k uint32
	var e vfVfLink
	it := v.objs.VfLinks.Iterate()
	for it.Next(&k, &e) {
		out[k] = e
	}
	return out, it.Err()
}

// staleLinks is the vf_links keys that are not an attached link's: live
// maps each attached host end's ifindex to its wire's, and an entry is
// kept only under one of the two, naming exactly that pair.
func staleLinks(entries map[uint32]vfVfLink, live map[uint32]uint32) []uint32 {
	var out []uint32
	for k, e := range entries {
		wire, ok := live[e.HostIfindex]
		if !ok || wire != e.WireIfindex || (k != e.HostIfindex && k != e.WireIfindex) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// Entry is one direct-forward table entry.
type Entry struct {
	Net         uint32           `json:"net"`
	MAC         net.HardwareAddr `json:"-"`
	MACString   string           `json:"mac"`
	IP          netip.Addr       `json:"ip"`
	HostIfindex int              `json:"hostIfindex"`
}

// Table lists the direct-forward table.
func (v *VF) Table() ([]Entry, error) {
	var out []Entry
	var k vfDfKey
	var d vfDfDest
	it := v.objs.DfFib.Iterate()
	for it.Next(&k, &d) {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], d.Ip)
		mac := net.HardwareAddr(append([]byte(nil), k.Mac[:]...))
		out = append(out, Entry{Net: k.Net, MAC: mac, MACString: mac.String(), IP: netip.AddrFrom4(b), HostIfindex: int(d.HostIfindex)})
	}
	return out, it.Err()
}

// Counters sums the per-CPU path counters.
func (v *VF) Counters() (map[string]uint64, error) {
	out := map[string]uint64{}
	for c := Counter(0); c < numCounters; c++ {
		var per []uint64
		if err := v.objs.VfCounters.Lookup(uint32(c), &per); err != nil {
			return nil, err
		}
		var sum uint64
		for _, x := range per {
			sum += x
		}
		if _, named := counterNames[c]; named || sum > 0 {
			out[c.String()] = sum
		}
	}
	return out, nil
}
