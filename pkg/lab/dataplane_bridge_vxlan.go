package lab

import (
	"context"
	"fmt"
)

// bridgeVXLANPlane is the Flannel-style overlay: per node a Linux bridge
// br0 with the pods and one kernel VXLAN device (VNI 1, UDP 4789) whose
// all-zeros FDB entries replicate broadcasts to every other node; pod MTU
// 1450.
type bridgeVXLANPlane struct{}

func init() { RegisterDataPlane(func() DataPlane { return &bridgeVXLANPlane{} }) }

func (*bridgeVXLANPlane) Name() string { return "linux-bridge+vxlan" }

func (*bridgeVXLANPlane) Description() string {
	return "Linux bridge + kernel VXLAN per node, nodes over the underlay"
}

func (*bridgeVXLANPlane) Scope() Scope { return ScopeIntraNode | ScopeInterNode }

func (*bridgeVXLANPlane) Available() error { return nil }

func (*bridgeVXLANPlane) Setup(ctx context.Context, t *Topology) error {
	nodes := t.NodesWithPods()
	for _, n := range nodes {
		if err := addBridge(ctx, t, n); err != nil {
			return err
		}
		if len(nodes) > 1 {
			if err := t.IP(ctx, n.NS, "link", "add", "vxlan0", "type", "vxlan", "id", "1", "dstport", "4789",
				"local", n.UnderlayIP, "dev", n.UnderlayDev); err != nil {
				return err
			}
			for _, r := range nodes {
				if r == n {
					continue
				}
				if _, err := t.Sh.Run(ctx, "bridge", "-n", n.NS, "fdb", "append", "00:00:00:00:00:00", "dev", "vxlan0", "dst", r.UnderlayIP); err != nil {
					return err
				}
			}
			if err := t.IP(ctx, n.NS, "link", "set", "vxlan0", "master", "br0", "up"); err != nil {
				return err
			}
		}
		for _, p := range t.NodePods(n) {
			if err := t.AddPodLink(ctx, p, PodLinkOptions{MTU: VXLANPodMTU}); err != nil {
				return err
			}
			if err := t.IP(ctx, n.NS, "link", "set", p.HostIf, "master", "br0"); err != nil {
				return fmt.Errorf("%s: %w", n.Name, err)
			}
		}
	}
	return nil
}

func (*bridgeVXLANPlane) Teardown(context.Context, *Topology) error { return nil }

func (*bridgeVXLANPlane) Processes() []int { return nil }
