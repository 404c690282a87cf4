package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/nagare-net/nagare/pkg/datapath"
	"github.com/nagare-net/nagare/pkg/flow"
)

// nagarePlane is nagare's kernel fast path on every node: each pod's host
// veth and an external-mode VXLAN device are switch ports, and the flows
// are installed directly from the lab (an L2 table: destination MAC →
// local pod, or tunnel to the pod's node; broadcasts flooded). Once the
// switch and the agent exist, this plane will program through them.
type nagarePlane struct {
	dps []*datapath.Datapath
}

func init() { RegisterDataPlane(func() DataPlane { return &nagarePlane{} }) }

func (*nagarePlane) Name() string { return "nagare" }

func (*nagarePlane) Description() string {
	return "nagare eBPF fast path (tcx, redirect_peer; VXLAN via tunnel metadata), flows installed directly"
}

func (*nagarePlane) Scope() Scope { return ScopeIntraNode | ScopeInterNode }

func (*nagarePlane) Available() error { return fastPathAvailable("nagare") }

// fastPathAvailable says whether nagare's fast path can load here: it
// needs root (BPF) and a kernel with BTF.
func fastPathAvailable(plane string) error {
	if os.Geteuid() != 0 {
		return notAvailable("%s needs root for BPF", plane)
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return notAvailable("kernel without BTF")
	}
	return nil
}

const (
	nagareTunnelPort = 1000
	nagareVNI        = 1
)

var broadcastMAC = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

func (p *nagarePlane) Setup(ctx context.Context, t *Topology) error {
	nodes := t.NodesWithPods()
	multi := len(nodes) > 1
	portOf := map[*Pod]uint32{}
	for _, n := range nodes {
		for i, pod := range t.NodePods(n) {
			mtu := 0
			if multi {
				mtu = VXLANPodMTU
			}
			if err := t.AddPodLink(ctx, pod, PodLinkOptions{MTU: mtu}); err != nil {
				return err
			}
			portOf[pod] = uint32(i + 1)
		}
		if multi {
			if err := t.IP(ctx, n.NS, "link", "add", "nvx0", "type", "vxlan", "external", "dstport", "4789"); err != nil {
				return err
			}
			if err := t.IP(ctx, n.NS, "link", "set", "nvx0", "up"); err != nil {
				return err
			}
		}
	}
	for _, n := range nodes {
		dp, err := datapath.Open(datapath.Config{Name: n.NS, NetNS: "/var/run/netns/" + n.NS, MaxFlows: 4096})
		if err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
		p.dps = append(p.dps, dp)
		t.Cleanup.Add("nagare fast path "+n.NS, dp.Destroy)
		for _, pod := range t.NodePods(n) {
			if _, err := dp.AttachPort(pod.HostIf, portOf[pod], datapath.PortPod); err != nil {
				return err
			}
		}
		if multi {
			if _, err := dp.AttachPort("nvx0", nagareTunnelPort, datapath.PortTunnel); err != nil {
				return err
			}
		}
		flows, err := nagareFlows(t, n, nodes, portOf)
		if err != nil {
			return err
		}
		for _, f := range flows {
			if err := dp.Put(f); err != nil {
				return fmt.Errorf("%s: %w", n.Name, err)
			}
		}
	}
	return nil
}

// nagareFlows is node n's L2 table.
func nagareFlows(t *Topology, n *Node, nodes []*Node, portOf map[*Pod]uint32) ([]flow.Flow, error) {
	local := netip.MustParseAddr(n.UnderlayIP)
	toNode := func(m *Node) []flow.Action {
		return []flow.Action{
			flow.SetTunnel{VNI: nagareVNI, Remote: netip.MustParseAddr(m.UnderlayIP), Local: local},
			flow.Output{Port: nagareTunnelPort},
		}
	}
	dstMask := flow.Mask{EthDst: broadcastMAC}
	var out []flow.Flow
	for _, pod := range t.Pods {
		mac, err := net.ParseMAC(pod.MAC)
		if err != nil {
			return nil, err
		}
		f := flow.Flow{Key: flow.Key{EthDst: [6]byte(mac)}, Mask: dstMask}
		if pod.Node == n {
			f.Actions = []flow.Action{flow.Output{Port: portOf[pod]}}
		} else {
			f.Actions = toNode(pod.Node)
		}
		out = append(out, f)
	}
	// Broadcasts (ARP) from a local pod reach every other local pod and
	// every other node; from the tunnel, every local pod.
	bcast := flow.Mask{InPort: 0xffffffff, EthDst: broadcastMAC}
	ins := []uint32{}
	for _, pod := range t.NodePods(n) {
		ins = append(ins, portOf[pod])
	}
	if len(nodes) > 1 {
		ins = append(ins, nagareTunnelPort)
	}
	for _, in := range ins {
		var acts []flow.Action
		for _, pod := range t.NodePods(n) {
			if portOf[pod] != in {
				acts = append(acts, flow.Output{Port: portOf[pod]})
			}
		}
		if in != nagareTunnelPort {
			for _, m := range nodes {
				if m != n {
					acts = append(acts, toNode(m)...)
				}
			}
		}
		if len(acts) == 0 {
			continue
		}
		if len(acts) > datapath.MaxActions {
			return nil, errors.New("nagare lab plane: too many ports to flood with one flow")
		}
		out = append(out, flow.Flow{Key: flow.Key{InPort: in, EthDst: broadcastMAC}, Mask: bcast, Actions: acts})
	}
	return out, nil
}

func (p *nagarePlane) Teardown(context.Context, *Topology) error { return nil }

func (*nagarePlane) Processes() []int { return nil }
