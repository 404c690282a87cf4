// Package nodenet makes the node's own devices: the gateway (a veth pair,
// as Antrea's antrea-gw0 is an internal port: one end holds the pod
// subnet's first address in the node's stack, the other is a switch port),
// the external-mode VXLAN device that carries every tunnel (a port of an
// idle bridge, for path MTU: ensurePMTUBridge), and the routes
// that send traffic for other nodes' pod subnets into the switch.
//
// Every Ensure is idempotent and leaves what already matches alone, so an
// agent restart changes nothing on a node that is right.
package nodenet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/nagare-net/nagare/pkg/agent/inns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Default device names.
const (
	DefaultGateway = "nagare-gw0"
	DefaultTunnel  = "nagare-vx0"
	// PMTUBridge is the idle bridge the tunnel device is a port of
	// (EnsureTunnel says why).
	PMTUBridge = "nagare-pmtu0"
	// GatewayPortSuffix names the switch end of the gateway pair.
	GatewayPortSuffix = "p"
)

// Config says what the node gets.
type Config struct {
	Netns     string       // node namespace path; "" = the agent's own
	Gateway   string       // gateway device in the node's stack (DefaultGateway)
	GatewayIP netip.Prefix // the pod subnet's first address, with its length
	MTU       int          // the pods' MTU (underlay MTU - VXLAN overhead)
	Tunnel    string       // the VXLAN device (DefaultTunnel)
	VXLANPort uint16
	// TunnelMTU is the VXLAN device's MTU: the pods' MTU (the encapsulated
	// frame then fits the underlay).
	TunnelMTU int
}

// GatewayPort is the switch end of the gateway pair.
func (c Config) GatewayPort() string { return c.Gateway + GatewayPortSuffix }

// Net is a handle on the node's namespace.
type Net struct {
	cfg Config
	h   *netlink.Handle
}

// Open opens the node's namespace.
func Open(cfg Config) (*Net, error) {
	if cfg.Gateway == "" {
		cfg.Gateway = DefaultGateway
	}
	if cfg.Tunnel == "" {
		cfg.Tunnel = DefaultTunnel
	}
	if cfg.VXLANPort == 0 {
		cfg.VXLANPort = 4789
	}
	h, err := inns.Netlink(cfg.Netns)
	if err != nil {
		return nil, fmt.Errorf("node namespace: %w", err)
	}
	return &Net{cfg: cfg, h: h}, nil
}

// SetMTU sets the pods' MTU, which the gateway pair and the tunnel device
// get too (before EnsureGateway and EnsureTunnel).
func (n *Net) SetMTU(mtu int) { n.cfg.MTU, n.cfg.TunnelMTU = mtu, mtu }

// Close releases the handle.
func (n *Net) Close() { n.h.Close() }

// Config returns the configuration with defaults filled in.
func (n *Net) Config() Config { return n.cfg }

// Gateway is what EnsureGateway reports.
type Gateway struct {
	MAC      net.HardwareAddr // of the gateway device (pods' next hop)
	PortName string           // the switch end
}

// EnsureGateway makes the gateway pair, its address and MTU, and turns on
// forwarding in the node's namespace (a node that routes for its pods must
// forward; on a Kubernetes node it already does).
func (n *Net) EnsureGateway() (Gateway, error) {
	c := n.cfg
	gw, err := n.h.LinkByName(c.Gateway)
	if err != nil {
		va := netlink.NewLinkAttrs()
		va.Name = c.Gateway
		va.MTU = c.MTU
		if err := n.h.LinkAdd(&netlink.Veth{LinkAttrs: va, PeerName: c.GatewayPort(), PeerMTU: uint32(c.MTU)}); err != nil && !errors.Is(err, unix.EEXIST) {
			return Gateway{}, fmt.Errorf("create gateway %s: %w", c.Gateway, err)
		}
		if gw, err = n.h.LinkByName(c.Gateway); err != nil {
			return Gateway{}, err
		}
	}
	port, err := n.h.LinkByName(c.GatewayPort())
	if err != nil {
		return Gateway{}, fmt.Errorf("gateway's switch end %s: %w (delete %s to let the agent make the pair again)", c.GatewayPort(), err, c.Gateway)
	}
	for _, l := range []netlink.Link{gw, port} {
		if l.Attrs().MTU != c.MTU {
			if err := n.h.LinkSetMTU(l, c.MTU); err != nil {
				return Gateway{}, err
			}
		}
	}
	if err := n.sysctls(map[string]string{
		"net/ipv4/ip_forward": "1",
		// The switch end is a port, not an interface of the node.
		"net/ipv6/conf/" + c.GatewayPort() + "/disable_ipv6": "1",
	}); err != nil {
		return Gateway{}, err
	}
	if err := n.h.AddrReplace(gw, &netlink.Addr{IPNet: ipnet(c.GatewayIP)}); err != nil {
		return Gateway{}, fmt.Errorf("gateway address %s: %w", c.GatewayIP, err)
	}
	for _, l := range []netlink.Link{port, gw} {
		if err := n.h.LinkSetUp(l); err != nil {
			return Gateway{}, err
		}
	}
	return Gateway{MAC: gw.Attrs().HardwareAddr, PortName: c.GatewayPort()}, nil
}

// EnsureTunnel makes the external-mode (flow-based) VXLAN device: one
// device for every remote node; the switch sets each packet's VNI and
// remote endpoint.
func (n *Net) EnsureTunnel() error {
	c := n.cfg
	l, err := n.h.LinkByName(c.Tunnel)
	if err == nil {
		v, ok := l.(*netlink.Vxlan)
		if !ok || !v.FlowBased || v.Port != int(c.VXLANPort) {
			return fmt.Errorf("%s exists but is not an external-mode VXLAN device on UDP port %d; delete it", c.Tunnel, c.VXLANPort)
		}
	} else {
		va := netlink.NewLinkAttrs()
		va.Name = c.Tunnel
		va.MTU = c.TunnelMTU
		vx := &netlink.Vxlan{LinkAttrs: va, FlowBased: true, Port: int(c.VXLANPort), Learning: false}
		if err := n.h.LinkAdd(vx); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("create %s: %w", c.Tunnel, err)
		}
		if l, err = n.h.LinkByName(c.Tunnel); err != nil {
			return err
		}
	}
	if c.TunnelMTU > 0 && l.Attrs().MTU != c.TunnelMTU {
		if err := n.h.LinkSetMTU(l, c.TunnelMTU); err != nil {
			return err
		}
	}
	if err := n.sysctls(map[string]string{"net/ipv6/conf/" + c.Tunnel + "/disable_ipv6": "1"}); err != nil {
		return err
	}
	if err := n.ensurePMTUBridge(l); err != nil {
		return err
	}
	return n.h.LinkSetUp(l)
}

// ensurePMTUBridge makes the tunnel device a port of PMTUBridge, a bridge
// that stays down and carries nothing. Why: when an inner packet with DF
// does not fit the path to the remote endpoint (the route's MTU, lowered
// by an ICMP frag-needed the underlay sent for an earlier outer packet),
// the VXLAN driver answers the pod with an ICMP frag-needed carrying the
// inner MTU only if the device is a bridge or OVS port
// (skb_tunnel_check_pmtu's "reply" case); it injects that ICMP back into
// the device's receive path with the tunnel endpoints swapped, so the
// switch sees it arrive from the remote node's tunnel port and forwards it
// to the pod like any packet from that node. For any other device the
// driver only lowers a route the skb does not have, and the outer packet
// is dropped: the pod's TCP stalls. The switch's tc program takes every
// packet the device receives before the bridge's handler would (tc
// ingress runs first); a packet it passes up finds a disabled bridge port
// and is dropped, as the stack (no address on the device) did before.
func (n *Net) ensurePMTUBridge(tun netlink.Link) error {
	br, err := n.h.LinkByName(PMTUBridge)
	if err != nil {
		la := netlink.NewLinkAttrs()
		la.Name = PMTUBridge
		if err := n.h.LinkAdd(&netlink.Bridge{LinkAttrs: la}); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("create %s: %w", PMTUBridge, err)
		}
		if br, err = n.h.LinkByName(PMTUBridge); err != nil {
			return err
		}
	}
	if tun.Attrs().MasterIndex == br.Attrs().Index {
		return nil
	}
	if err := n.h.LinkSetMaster(tun, br); err != nil {
		return fmt.Errorf("%s as a port of %s (ICMP frag-needed to pods): %w", tun.Attrs().Name, PMTUBridge, err)
	}
	return nil
}

// UnderlayMTU is the MTU of the device in the node's namespace that holds
// addr, the node's underlay address (the VXLAN outer source), and that
// device's name.
func (n *Net) UnderlayMTU(addr netip.Addr) (int, string, error) {
	as, err := n.h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return 0, "", err
	}
	for _, a := range as {
		if ip, ok := netip.AddrFromSlice(a.IP); !ok || ip.Unmap() != addr {
			continue
		}
		l, err := n.h.LinkByIndex(a.LinkIndex)
		if err != nil {
			return 0, "", err
		}
		return l.Attrs().MTU, l.Attrs().Name, nil
	}
	return 0, "", fmt.Errorf("no device holds the underlay address %s", addr)
}

// Remote is another node's pod subnet as the node's routing sees it.
type Remote struct {
	PodCIDR netip.Prefix
	Gateway netip.Addr // the remote node's gateway address (its PodCIDR's first)
}

// EnsureRemote routes a remote node's pod subnet into the switch: "PodCIDR
// via its gateway dev gw onlink", with a permanent neighbour entry for that
// gateway (mac: the pipeline's remote-gateway MAC), so the node never ARPs
// for another node's gateway.
func (n *Net) EnsureRemote(r Remote, mac net.HardwareAddr) error {
	gw, err := n.h.LinkByName(n.cfg.Gateway)
	if err != nil {
		return err
	}
	neigh := &netlink.Neigh{LinkIndex: gw.Attrs().Index, Family: unix.AF_INET, State: netlink.NUD_PERMANENT,
		IP: r.Gateway.AsSlice(), HardwareAddr: mac}
	if err := n.h.NeighSet(neigh); err != nil {
		return fmt.Errorf("neighbour %s: %w", r.Gateway, err)
	}
	rt := &netlink.Route{LinkIndex: gw.Attrs().Index, Dst: ipnet(r.PodCIDR.Masked()), Gw: r.Gateway.AsSlice(), Flags: int(netlink.FLAG_ONLINK)}
	if err := n.h.RouteReplace(rt); err != nil {
		return fmt.Errorf("route %s via %s: %w", r.PodCIDR, r.Gateway, err)
	}
	return nil
}

// ServiceNextHop is the made-up next hop of the route to the Services'
// range (Antrea's virtual service IP): its neighbour entry is permanent.
var ServiceNextHop = netip.MustParseAddr("169.254.0.253")

// EnsureServiceRoute routes the Services' ClusterIP range into the switch:
// "cidr via ServiceNextHop dev gw onlink src gatewayIP", ServiceNextHop's
// neighbour entry permanent with mac (the pipeline's remote-gateway MAC).
// The node's packets to a ClusterIP then pass the switch, which DNATs
// them to an endpoint; their source is the gateway address, so the
// replies come back through the switch to be un-NATed.
func (n *Net) EnsureServiceRoute(cidr netip.Prefix, mac net.HardwareAddr) error {
	gw, err := n.h.LinkByName(n.cfg.Gateway)
	if err != nil {
		return err
	}
	neigh := &netlink.Neigh{LinkIndex: gw.Attrs().Index, Family: unix.AF_INET, State: netlink.NUD_PERMANENT,
		IP: ServiceNextHop.AsSlice(), HardwareAddr: mac}
	if err := n.h.NeighSet(neigh); err != nil {
		return fmt.Errorf("neighbour %s: %w", ServiceNextHop, err)
	}
	rt := &netlink.Route{LinkIndex: gw.Attrs().Index, Dst: ipnet(cidr.Masked()), Gw: ServiceNextHop.AsSlice(),
		Src: n.cfg.GatewayIP.Addr().AsSlice(), Flags: int(netlink.FLAG_ONLINK)}
	if err := n.h.RouteReplace(rt); err != nil {
		return fmt.Errorf("route %s via %s: %w", cidr, ServiceNextHop, err)
	}
	return nil
}

// DelRemote removes what EnsureRemote made; absent entries are fine.
func (n *Net) DelRemote(r Remote) error {
	gw, err := n.h.LinkByName(n.cfg.Gateway)
	if err != nil {
		return nil
	}
	rt := &netlink.Route{LinkIndex: gw.Attrs().Index, Dst: ipnet(r.PodCIDR.Masked())}
	if err := n.h.RouteDel(rt); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("route %s: %w", r.PodCIDR, err)
	}
	neigh := &netlink.Neigh{LinkIndex: gw.Attrs().Index, Family: unix.AF_INET, IP: r.Gateway.AsSlice()}
	if err := n.h.NeighDel(neigh); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("neighbour %s: %w", r.Gateway, err)
	}
	return nil
}

// Routes lists the remote pod subnets routed through the gateway.
func (n *Net) Routes() ([]netip.Prefix, error) {
	gw, err := n.h.LinkByName(n.cfg.Gateway)
	if err != nil {
		return nil, err
	}
	rs, err := n.h.RouteList(gw, netlink.FAMILY_V4)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, r := range rs {
		if r.Gw == nil || r.Dst == nil {
			continue
		}
		a, _ := netip.AddrFromSlice(r.Dst.IP.To4())
		ones, _ := r.Dst.Mask.Size()
		out = append(out, netip.PrefixFrom(a, ones))
	}
	return out, nil
}

// Remove deletes the gateway pair, the tunnel device and its PMTU bridge
// (uninstall).
func (n *Net) Remove() error {
	var errs []error
	for _, name := range []string{n.cfg.Gateway, n.cfg.Tunnel, PMTUBridge} {
		if l, err := n.h.LinkByName(name); err == nil {
			if err := n.h.LinkDel(l); err != nil {
				errs = append(errs, fmt.Errorf("delete %s: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}

func (n *Net) sysctls(kv map[string]string) error { return inns.Sysctls(n.cfg.Netns, kv) }

func ipnet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// DelServiceRoute removes a route EnsureServiceRoute made (the next hop's
// neighbour entry stays: the service CIDR's route uses it too); an absent
// route is fine.
func (n *Net) DelServiceRoute(cidr netip.Prefix) error {
	gw, err := n.h.LinkByName(n.cfg.Gateway)
	if err != nil {
		return nil
	}
	rt := &netlink.Route{LinkIndex: gw.Attrs().Index, Dst: ipnet(cidr.Masked())}
	if err := n.h.RouteDel(rt); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("route %s: %w", cidr, err)
	}
	return nil
}
