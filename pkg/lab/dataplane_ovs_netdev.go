package lab

import (
	"context"
)

// ovsNetdevPlane is Open vSwitch's userspace datapath (datapath_type=netdev,
// no DPDK or AF_XDP): per node its own ovsdb-server and ovs-vswitchd, a
// bridge br0 with the pods' host-side veths as AF_PACKET "system" ports and
// the default NORMAL flow. The pods' eth0 have transmit checksum offload
// off: the userspace datapath loses the CHECKSUM_PARTIAL metadata, so
// offloaded UDP/TCP would arrive with bad checksums and be dropped.
type ovsNetdevPlane struct {
	ovs []*ovsInstance
	fs  ovsFlowSetup // flowsetup_ovs.go
}

func init() { RegisterDataPlane(func() DataPlane { return &ovsNetdevPlane{} }) }

func (*ovsNetdevPlane) Name() string { return "ovs-netdev" }

func (*ovsNetdevPlane) Description() string {
	return "veth → OVS userspace datapath (netdev), NORMAL → veth (one node); pods tx-csum off"
}

func (*ovsNetdevPlane) Scope() Scope { return ScopeIntraNode }

func (*ovsNetdevPlane) Available() error { return ovsAvailable() }

func (d *ovsNetdevPlane) Setup(ctx context.Context, t *Topology) error {
	for _, n := range t.NodesWithPods() {
		o, err := startOVS(ctx, t, n)
		if err != nil {
			return err
		}
		d.ovs = append(d.ovs, o)
		args := []string{"add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev"}
		for _, p := range t.NodePods(n) {
			if err := t.AddPodLink(ctx, p, PodLinkOptions{TxOff: true}); err != nil {
				return err
			}
			args = append(args, "--", "add-port", "br0", p.HostIf)
		}
		if _, err := o.vsctl(ctx, args...); err != nil {
			return err
		}
		if err := t.IP(ctx, n.NS, "link", "set", "br0", "up"); err != nil {
			return err
		}
	}
	return nil
}

func (*ovsNetdevPlane) Teardown(context.Context, *Topology) error { return nil }

func (d *ovsNetdevPlane) Processes() []int { return ovsPIDs(d.ovs) }

func ovsPIDs(os []*ovsInstance) []int {
	var pids []int
	for _, o := range os {
		pids = append(pids, o.VswitchdPID)
	}
	return pids
}
