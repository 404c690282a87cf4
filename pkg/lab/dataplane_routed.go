package lab

import "context"

// routedPlane is Calico-style L3 forwarding without a bridge or overlay:
// each pod has a /32 and a default route via 169.254.1.1 (a permanent
// neighbour entry for ee:ee:ee:ee:ee:ee, the MAC of every host-side veth);
// each node routes its own pods with /32 routes and other nodes' pods via
// their underlay address.
type routedPlane struct{}

func init() { RegisterDataPlane(func() DataPlane { return &routedPlane{} }) }

const (
	routedGatewayIP  = "169.254.1.1"
	routedGatewayMAC = "ee:ee:ee:ee:ee:ee"
)

func (*routedPlane) Name() string { return "routed" }

func (*routedPlane) Description() string {
	return "veth → node L3 forwarding (/32 routes) → veth; underlay routes between nodes"
}

func (*routedPlane) Scope() Scope { return ScopeIntraNode | ScopeInterNode }

func (*routedPlane) Available() error { return nil }

func (*routedPlane) Setup(ctx context.Context, t *Topology) error {
	for _, n := range t.NodesWithPods() {
		if _, err := t.Sh.NS(ctx, n.NS, "sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
			return err
		}
		for _, p := range t.NodePods(n) {
			if err := t.AddPodLink(ctx, p, PodLinkOptions{Addr: p.IP + "/32"}); err != nil {
				return err
			}
			cmds := [][]string{
				{n.NS, "link", "set", p.HostIf, "address", routedGatewayMAC},
				{n.NS, "route", "add", p.IP + "/32", "dev", p.HostIf, "scope", "link"},
				{n.NS, "neigh", "replace", p.IP, "lladdr", p.MAC, "dev", p.HostIf, "nud", "permanent"},
				{p.NS, "route", "add", routedGatewayIP, "dev", "eth0", "scope", "link"},
				{p.NS, "route", "add", "default", "via", routedGatewayIP, "dev", "eth0"},
				{p.NS, "neigh", "replace", routedGatewayIP, "lladdr", routedGatewayMAC, "dev", "eth0", "nud", "permanent"},
			}
			for _, c := range cmds {
				if err := t.IP(ctx, c[0], c[1:]...); err != nil {
					return err
				}
			}
		}
		for _, p := range t.Pods {
			if p.Node != n {
				if err := t.IP(ctx, n.NS, "route", "add", p.IP+"/32", "via", p.Node.UnderlayIP, "dev", n.UnderlayDev); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (*routedPlane) Teardown(context.Context, *Topology) error { return nil }

func (*routedPlane) Processes() []int { return nil }
