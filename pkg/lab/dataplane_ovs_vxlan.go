package lab

import (
	"context"
	"fmt"
)

// ovsVXLANPlane is Open vSwitch userspace tunnelling: per node br-int (pods
// + a vxlan port, key 1, UDP 4789) and br-phy (the underlay port; the
// tunnel endpoint address moves from ul0 to br-phy's internal port, with a
// static tnl/neigh entry for the remote node), so encapsulation is OVS's own
// tnl_push/tnl_pop, not the kernel's. Pods: MTU 1450, tx-csum off.
type ovsVXLANPlane struct {
	ovs []*ovsInstance
}

func init() { RegisterDataPlane(func() DataPlane { return &ovsVXLANPlane{} }) }

func (*ovsVXLANPlane) Name() string { return "ovs-vxlan" }

func (*ovsVXLANPlane) Description() string {
	return "OVS netdev + userspace VXLAN per node, nodes over the underlay; pods tx-csum off"
}

func (*ovsVXLANPlane) Scope() Scope { return ScopeIntraNode | ScopeInterNode }

func (*ovsVXLANPlane) Available() error { return ovsAvailable() }

func (d *ovsVXLANPlane) Setup(ctx context.Context, t *Topology) error {
	nodes := t.NodesWithPods()
	if len(nodes) > 2 {
		// NORMAL floods from one tunnel port to the others: a full mesh of
		// more than two nodes would loop.
		return fmt.Errorf("ovs-vxlan: pods on %d nodes; this plane supports at most 2", len(nodes))
	}
	for _, n := range nodes {
		o, err := startOVS(ctx, t, n)
		if err != nil {
			return err
		}
		d.ovs = append(d.ovs, o)
		if len(nodes) == 2 {
			if err := t.IP(ctx, n.NS, "addr", "flush", "dev", n.UnderlayDev); err != nil {
				return err
			}
			if _, err := o.vsctl(ctx, "add-br", "br-phy", "--", "set", "bridge", "br-phy", "datapath_type=netdev",
				"other-config:hwaddr="+n.UnderlayMAC, "--", "add-port", "br-phy", n.UnderlayDev); err != nil {
				return err
			}
			if err := t.IP(ctx, n.NS, "addr", "add", n.UnderlayIP+"/24", "dev", "br-phy"); err != nil {
				return err
			}
			if err := t.IP(ctx, n.NS, "link", "set", "br-phy", "up"); err != nil {
				return err
			}
		}
		args := []string{"add-br", "br-int", "--", "set", "bridge", "br-int", "datapath_type=netdev"}
		for _, p := range t.NodePods(n) {
			if err := t.AddPodLink(ctx, p, PodLinkOptions{MTU: VXLANPodMTU, TxOff: true}); err != nil {
				return err
			}
			args = append(args, "--", "add-port", "br-int", p.HostIf)
		}
		for _, r := range nodes {
			if r != n {
				args = append(args, "--", "add-port", "br-int", "vxlan0", "--", "set", "interface", "vxlan0", "type=vxlan",
					"options:remote_ip="+r.UnderlayIP, "options:local_ip="+n.UnderlayIP, "options:key=1", "options:dst_port=4789")
			}
		}
		if _, err := o.vsctl(ctx, args...); err != nil {
			return err
		}
		if err := t.IP(ctx, n.NS, "link", "set", "br-int", "up"); err != nil {
			return err
		}
	}
	if len(nodes) == 2 {
		for i, o := range d.ovs {
			r := nodes[1-i]
			if _, err := o.appctl(ctx, "tnl/neigh/set", "br-phy", r.UnderlayIP, r.UnderlayMAC); err != nil {
				return err
			}
		}
	}
	return nil
}

func (*ovsVXLANPlane) Teardown(context.Context, *Topology) error { return nil }

func (d *ovsVXLANPlane) Processes() []int { return ovsPIDs(d.ovs) }
