package nodenet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The node proxy's link, for transparent redirection (the agent pipeline's
// proxyredirect.go): a veth pair whose switch end (DefaultProxy + "p") is
// a switch port and whose other end (DefaultProxy) is in the node's
// stack, without an address. The switch sends a pod's redirected packets
// out of the port unchanged but for the destination MAC (this end's);
// the node's stack takes every packet that arrives on it as local:
//
//	ip rule add iif nagare-px0 lookup 15001 pref 100
//	ip route add local 0.0.0.0/0 dev lo table 15001
//
// so a proxy listening with IP_TRANSPARENT (HAProxy: bind ... transparent)
// accepts a connection whose local address is the original destination.
// Its answers are routed as the node's (to the pod through the gateway).
// Loose reverse-path filtering on this end, and an address (ProxyLinkIP,
// /32: no route): the pods' addresses are reached through the gateway, not
// through it, so strict mode drops every packet it receives, and so does
// any mode on a device without an address (the kernel's
// __fib_validate_source: no address, rp_filter on → drop; counted as
// TcpExtIPReversePathFilter). The host's net.ipv4.conf.all.rp_filter must
// not be 1 (the device's effective mode is the larger of the two).

// Proxy link defaults.
const (
	DefaultProxy    = "nagare-px0"
	ProxyRouteTable = 15001 // Istio's outbound capture port, as a reminder of what it is for
	ProxyRulePref   = 100
)

// ProxyLinkIP is the node end's own address (for reverse-path filtering only).
var ProxyLinkIP = netip.MustParsePrefix("169.254.0.252/32")

// ProxyLink is what EnsureProxyLink reports.
type ProxyLink struct {
	MAC      net.HardwareAddr // of the node's end: the redirected packets' destination MAC
	PortName string           // the switch end
}

// EnsureProxyLink makes the proxy's veth pair, the policy rule and the
// local route (idempotent: what matches is left alone).
func (n *Net) EnsureProxyLink(name string) (ProxyLink, error) {
	if name == "" {
		name = DefaultProxy
	}
	portName := name + GatewayPortSuffix
	l, err := n.h.LinkByName(name)
	if err != nil {
		va := netlink.NewLinkAttrs()
		va.Name = name
		va.MTU = n.cfg.MTU
		if err := n.h.LinkAdd(&netlink.Veth{LinkAttrs: va, PeerName: portName, PeerMTU: uint32(n.cfg.MTU)}); err != nil && !errors.Is(err, unix.EEXIST) {
			return ProxyLink{}, fmt.Errorf("create proxy link %s: %w", name, err)
		}
		if l, err = n.h.LinkByName(name); err != nil {
			return ProxyLink{}, err
		}
	}
	port, err := n.h.LinkByName(portName)
	if err != nil {
		return ProxyLink{}, fmt.Errorf("proxy link's switch end %s: %w (delete %s to let the agent make the pair again)", portName, err, name)
	}
	if err := n.sysctls(map[string]string{
		"net/ipv4/conf/" + name + "/rp_filter":        "2",
		"net/ipv6/conf/" + name + "/disable_ipv6":     "1",
		"net/ipv6/conf/" + portName + "/disable_ipv6": "1",
	}); err != nil {
		return ProxyLink{}, err
	}
	if lo, err := n.h.LinkByName("lo"); err == nil {
		if err := n.h.LinkSetUp(lo); err != nil {
			return ProxyLink{}, err
		}
	}
	rt := &netlink.Route{LinkIndex: 1, Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}, Table: ProxyRouteTable,
		Type: unix.RTN_LOCAL, Scope: netlink.SCOPE_HOST}
	if lo, err := n.h.LinkByName("lo"); err == nil {
		rt.LinkIndex = lo.Attrs().Index
	}
	if err := n.h.RouteReplace(rt); err != nil {
		return ProxyLink{}, fmt.Errorf("local route in table %d: %w", ProxyRouteTable, err)
	}
	if err := n.ensureProxyRule(name); err != nil {
		return ProxyLink{}, err
	}
	if err := n.h.AddrReplace(l, &netlink.Addr{IPNet: ipnet(ProxyLinkIP), Scope: int(netlink.SCOPE_LINK)}); err != nil {
		return ProxyLink{}, fmt.Errorf("proxy link address %s: %w", ProxyLinkIP, err)
	}
	for _, x := range []netlink.Link{port, l} {
		if err := n.h.LinkSetUp(x); err != nil {
			return ProxyLink{}, err
		}
	}
	return ProxyLink{MAC: l.Attrs().HardwareAddr, PortName: portName}, nil
}

// ensureProxyRule adds "iif name lookup ProxyRouteTable" unless present.
func (n *Net) ensureProxyRule(name string) error {
	rules, err := n.h.RuleList(unix.AF_INET)
	if err != nil {
		return err
	}
	for _, r := range rules {
		if r.IifName == name && r.Table == ProxyRouteTable {
			return nil
		}
	}
	r := netlink.NewRule()
	r.Family = unix.AF_INET
	r.IifName = name
	r.Table = ProxyRouteTable
	r.Priority = ProxyRulePref
	if err := n.h.RuleAdd(r); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("rule iif %s lookup %d: %w", name, ProxyRouteTable, err)
	}
	return nil
}
