// Package podnet attaches a pod to the node: a veth pair whose pod end is
// the pod's interface (eth0: MAC, address, default route via the node's
// gateway, an MTU that leaves room for VXLAN) and whose host end, in the
// node's namespace, becomes a switch port. Everything it makes it can also
// check and remove, idempotently: a runtime may repeat ADD and DEL.
//
// It works with netlink handles opened in the pod's and the node's
// namespaces, so no goroutine ever changes its own namespace, except for
// the per-interface sysctls (/proc/sys is read in the namespace of the
// opening thread), which run on a locked thread (package inns).
package podnet

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/nagare-net/nagare/pkg/agent/inns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ErrNoNetns is wrapped when the pod's network namespace does not exist.
var ErrNoNetns = errors.New("network namespace does not exist")

// Pod is one attachment: which namespace and interface, and what it gets.
type Pod struct {
	Netns  string       // path of the pod's network namespace
	IfName string       // the interface in the pod (eth0)
	Host   string       // the host end's name (HostIfName)
	Addr   netip.Prefix // the pod's address with the node subnet's length
	GW     netip.Addr   // the node gateway: the default route's next hop
	MTU    int
}

// HostIfName names the host end of a pod's veth after its container and
// interface: "nag" + 12 hex digits of a SHA-256 (15 bytes, IFNAMSIZ-1), so a
// repeated ADD or a DEL after an agent restart finds the same device.
func HostIfName(containerID, ifName string) string {
	h := sha256.Sum256([]byte(containerID + "/" + ifName))
	return "nag" + hex.EncodeToString(h[:6])
}

// MACFor is the pod's MAC, derived from its IPv4 address (0a:58:a.b.c.d, as
// OVN-Kubernetes does): stable across restarts and re-attachment, so the
// spoof guard's flows and neighbours' ARP caches stay right.
func MACFor(ip netip.Addr) net.HardwareAddr {
	a := ip.As4()
	return net.HardwareAddr{0x0a, 0x58, a[0], a[1], a[2], a[3]}
}

// Node is the node side: the namespace the host ends live in.
type Node struct {
	Netns string // path; "" = the agent's own namespace
}

// Exists says whether a network namespace path exists and is one.
func Exists(path string) error {
	if err := ns.IsNSorErr(path); err != nil {
		var notExist ns.NSPathNotExistErr
		if errors.As(err, &notExist) {
			return fmt.Errorf("%s: %w", path, ErrNoNetns)
		}
		return err
	}
	return nil
}

// Attached is what Setup made.
type Attached struct {
	HostIndex int
	MAC       net.HardwareAddr // the pod interface's
	PodIndex  int              // the pod interface's index inside the pod
}

// Setup creates (or finds, when a previous ADD got that far) the pod's veth
// pair and configures both ends. The host end is left up and unnumbered for
// the switch to attach.
func (n Node) Setup(p Pod) (Attached, error) {
	var out Attached
	if err := Exists(p.Netns); err != nil {
		return out, err
	}
	podNS, err := netns.GetFromPath(p.Netns)
	if err != nil {
		return out, err
	}
	defer podNS.Close()
	hn, err := inns.Netlink(n.Netns)
	if err != nil {
		return out, fmt.Errorf("node namespace: %w", err)
	}
	defer hn.Close()
	hp, err := netlink.NewHandleAt(podNS)
	if err != nil {
		return out, fmt.Errorf("pod namespace: %w", err)
	}
	defer hp.Close()

	mac := MACFor(p.Addr.Addr())
	host, err := hn.LinkByName(p.Host)
	if err == nil {
		// A repeated ADD: the pair exists if its pod end is where it should be.
		if _, perr := hp.LinkByName(p.IfName); perr != nil {
			if derr := hn.LinkDel(host); derr != nil {
				return out, fmt.Errorf("remove half-made %s: %w", p.Host, derr)
			}
			host = nil
		}
	} else {
		host = nil
	}
	if host == nil {
		if l, err := hp.LinkByName(p.IfName); err == nil {
			return out, fmt.Errorf("the pod already has an interface %s (index %d) not made by nagare", p.IfName, l.Attrs().Index)
		}
		va := netlink.NewLinkAttrs()
		va.Name = p.Host
		va.MTU = p.MTU
		veth := &netlink.Veth{LinkAttrs: va, PeerName: p.IfName, PeerHardwareAddr: mac, PeerMTU: uint32(p.MTU), PeerNamespace: netlink.NsFd(int(podNS))}
		if err := hn.LinkAdd(veth); err != nil {
			return out, fmt.Errorf("create veth %s/%s: %w", p.Host, p.IfName, err)
		}
		if host, err = hn.LinkByName(p.Host); err != nil {
			return out, err
		}
	}
	if err := n.NoIPv6(p.Host); err != nil {
		return out, err
	}
	if err := hn.LinkSetUp(host); err != nil {
		return out, fmt.Errorf("set %s up: %w", p.Host, err)
	}
	pl, err := hp.LinkByName(p.IfName)
	if err != nil {
		return out, fmt.Errorf("pod interface %s: %w", p.IfName, err)
	}
	// No IPv6 on the pod network yet: keep the interface from sending
	// router and neighbour solicitations the spoof guard would drop.
	if err := inns.NoIPv6(p.Netns, p.IfName); err != nil {
		return out, fmt.Errorf("pod sysctls: %w", err)
	}
	if pl.Attrs().MTU != p.MTU {
		if err := hp.LinkSetMTU(pl, p.MTU); err != nil {
			return out, err
		}
	}
	addr := &netlink.Addr{IPNet: prefixNet(p.Addr)}
	if err := hp.AddrReplace(pl, addr); err != nil {
		return out, fmt.Errorf("address %s: %w", p.Addr, err)
	}
	if err := hp.LinkSetUp(pl); err != nil {
		return out, err
	}
	lo, err := hp.LinkByName("lo")
	if err == nil {
		_ = hp.LinkSetUp(lo)
	}
	def := &netlink.Route{LinkIndex: pl.Attrs().Index, Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}, Gw: p.GW.AsSlice()}
	if err := hp.RouteReplace(def); err != nil {
		return out, fmt.Errorf("default route via %s: %w", p.GW, err)
	}
	out.HostIndex = host.Attrs().Index
	out.MAC = pl.Attrs().HardwareAddr
	out.PodIndex = pl.Attrs().Index
	return out, nil
}

// NoIPv6 turns IPv6 off on a device of the node's namespace that is a
// switch port (or a VF's crossing), not a router interface.
func (n Node) NoIPv6(ifname string) error { return inns.NoIPv6(n.Netns, ifname) }

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// Teardown removes the pair (deleting the host end removes the pod end
// too). Idempotent: a missing device or namespace is not an error.
func (n Node) Teardown(host string) error {
	hn, err := inns.Netlink(n.Netns)
	if err != nil {
		return err
	}
	defer hn.Close()
	l, err := hn.LinkByName(host)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return err
	}
	if err := hn.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete %s: %w", host, err)
	}
	return nil
}

// HostExists says whether the host end exists.
func (n Node) HostExists(host string) (bool, error) {
	hn, err := inns.Netlink(n.Netns)
	if err != nil {
		return false, err
	}
	defer hn.Close()
	_, err = hn.LinkByName(host)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// Check verifies that the pod still has what Setup gave it: the interface
// with its MAC, address and MTU, and the default route via the gateway; and
// that the host end exists and is up.
func (n Node) Check(p Pod) error {
	if err := Exists(p.Netns); err != nil {
		return err
	}
	hp, err := inns.Netlink(p.Netns)
	if err != nil {
		return err
	}
	defer hp.Close()
	pl, err := hp.LinkByName(p.IfName)
	if err != nil {
		return fmt.Errorf("pod interface %s: %w", p.IfName, err)
	}
	if want := MACFor(p.Addr.Addr()); pl.Attrs().HardwareAddr.String() != want.String() {
		return fmt.Errorf("%s has MAC %s, want %s", p.IfName, pl.Attrs().HardwareAddr, want)
	}
	if pl.Attrs().MTU != p.MTU {
		return fmt.Errorf("%s has MTU %d, want %d", p.IfName, pl.Attrs().MTU, p.MTU)
	}
	addrs, err := hp.AddrList(pl, netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	found := false
	for _, a := range addrs {
		if a.IPNet.String() == prefixNet(p.Addr).String() {
			found = true
		}
	}
	if !found {
		return fmt.Errorf("%s lacks address %s", p.IfName, p.Addr)
	}
	routes, err := hp.RouteList(pl, netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	found = false
	for _, r := range routes {
		if (r.Dst == nil || r.Dst.IP.IsUnspecified() && isZeroMask(r.Dst.Mask)) && r.Gw.Equal(p.GW.AsSlice()) {
			found = true
		}
	}
	if !found {
		return fmt.Errorf("%s lacks the default route via %s", p.IfName, p.GW)
	}
	hn, err := inns.Netlink(n.Netns)
	if err != nil {
		return err
	}
	defer hn.Close()
	hl, err := hn.LinkByName(p.Host)
	if err != nil {
		return fmt.Errorf("host end %s: %w", p.Host, err)
	}
	if hl.Attrs().Flags&net.FlagUp == 0 {
		return fmt.Errorf("host end %s is down", p.Host)
	}
	return nil
}

func isZeroMask(m net.IPMask) bool {
	ones, _ := m.Size()
	return ones == 0
}
