package lab

import (
	"context"
	"fmt"
)

// bridgePlane puts the pods of each node on a Linux bridge br0 in the node
// namespace (FDB learning, no STP).
type bridgePlane struct{}

func init() {
	RegisterDataPlane(func() DataPlane { return &bridgePlane{} })
	RegisterDataPlane(func() DataPlane { return &bridgeNftPlane{} })
	RegisterDataPlane(func() DataPlane { return &bridgeNftPlane{others: 1000} })
}

func (*bridgePlane) Name() string { return "linux-bridge" }

func (*bridgePlane) Description() string { return "veth → Linux bridge → veth (one node)" }

// bridgeNftPlane is the Linux bridge with the run's NetworkPolicies as an
// nftables ruleset (netpol.go, NftPolicyRuleset) through br_netfilter:
// linux-bridge+nft, and linux-bridge+nft1000 with 1000 other policies.
type bridgeNftPlane struct {
	bridgePlane
	others int
}

func (p *bridgeNftPlane) Name() string { return policyPlaneName("linux-bridge", "nft", p.others) }

func (p *bridgeNftPlane) Description() string {
	return fmt.Sprintf("veth → Linux bridge → veth, the run's NetworkPolicies and %d other policies as an nftables ruleset (ip family, forward hook through br_netfilter, the kernel's conntrack)", p.others)
}

func (*bridgeNftPlane) PolicyBase() string   { return "linux-bridge" }
func (p *bridgeNftPlane) OtherPolicies() int { return p.others }

func (*bridgeNftPlane) Available() error {
	if m := MissingTools("nft"); len(m) > 0 {
		return notAvailable("missing nft (Debian package nftables)")
	}
	return nil
}

func (p *bridgeNftPlane) Setup(ctx context.Context, t *Topology) error {
	if err := p.bridgePlane.Setup(ctx, t); err != nil {
		return err
	}
	return applyNftPolicies(ctx, t)
}

func (*bridgePlane) Scope() Scope { return ScopeIntraNode }

func (*bridgePlane) Available() error { return nil }

func (*bridgePlane) Setup(ctx context.Context, t *Topology) error {
	for _, n := range t.NodesWithPods() {
		if err := addBridge(ctx, t, n); err != nil {
			return err
		}
		for _, p := range t.NodePods(n) {
			if err := t.AddPodLink(ctx, p, PodLinkOptions{}); err != nil {
				return err
			}
			if err := t.IP(ctx, n.NS, "link", "set", p.HostIf, "master", "br0"); err != nil {
				return err
			}
		}
	}
	return nil
}

// addBridge creates br0 (no STP, no forwarding delay) in node n and sets it up.
func addBridge(ctx context.Context, t *Topology, n *Node) error {
	if err := t.IP(ctx, n.NS, "link", "add", "br0", "type", "bridge", "stp_state", "0", "forward_delay", "0"); err != nil {
		return err
	}
	return t.IP(ctx, n.NS, "link", "set", "br0", "up")
}

func (*bridgePlane) Teardown(context.Context, *Topology) error { return nil }

func (*bridgePlane) Processes() []int { return nil }

// UplinkSupport: uplink ports are bridge ports like the pods' (the
// in-kernel floor of a switch with uplinks; no switch process).
func (*bridgePlane) UplinkSupport() error { return nil }
