package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// ReplaceFlows sets every node's bridge table to flows (FlowTablePlane).
func (d *ovsNetdevPlane) ReplaceFlows(ctx context.Context, t *Topology, flows []string) error {
	for _, o := range d.ovs {
		file := filepath.Join(o.dir, "flows.txt")
		if err := os.WriteFile(file, []byte(strings.Join(flows, "\n")+"\n"), 0o644); err != nil {
			return err
		}
		t.Sh.logf("# ovs %s: %s\n#   %s", o.dir, file, strings.Join(flows, "\n#   "))
		if _, err := o.ofctl(ctx, "del-flows"); err != nil {
			return err
		}
		if _, err := o.ofctl(ctx, "add-flows", file); err != nil {
			return err
		}
	}
	return nil
}

// ovsOf is the instance of pod's node (one per node with pods, in order).
func (d *ovsNetdevPlane) ovsOf(t *Topology, pod *Pod) *ovsInstance {
	for i, n := range t.NodesWithPods() {
		if n == pod.Node && i < len(d.ovs) {
			return d.ovs[i]
		}
	}
	return nil
}

// ControllerSocket is the bridge's management socket. (Open vSwitch sends
// a service connection PACKET_INs once it sets a miss_send_len.)
func (d *ovsNetdevPlane) ControllerSocket(pod *Pod) string {
	if len(d.ovs) == 0 {
		return ""
	}
	return filepath.Join(d.ovs[0].dir, "br0.mgmt")
}

// Isolation samples the datapath's flows and masks (dpctl/dump-flows).
// The netdev datapath has no per-port drop counters: VictimDrops is -1
// (the victims' losses are in their RTT samples).
func (d *ovsNetdevPlane) Isolation(ctx context.Context, t *Topology, attacker *Pod, victims []*Pod) (IsolationResult, error) {
	o := d.ovsOf(t, victims[0])
	if o == nil {
		return IsolationResult{}, fmt.Errorf("no Open vSwitch on %s's node", victims[0].Name)
	}
	show, err := o.appctl(ctx, "dpctl/show")
	if err != nil {
		return IsolationResult{}, err
	}
	dump, err := o.appctl(ctx, "dpctl/dump-flows")
	if err != nil {
		return IsolationResult{}, err
	}
	attackerIf := ""
	if attacker != nil {
		attackerIf = attacker.HostIf
	}
	res := OVSIsolation(show, dump, attackerIf)
	if attacker == nil {
		res.AttackerMasks = 0
	}
	return res, nil
}

// UplinkSupport: uplink ports are bridge ports like the pods'.
func (*ovsNetdevPlane) UplinkSupport() error { return nil }
