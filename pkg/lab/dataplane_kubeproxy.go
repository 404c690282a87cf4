package lab

import (
	"context"
	"fmt"
	"path/filepath"
	"time"
)

// kubeProxyPlane is the peer of nagare's Services: the Linux bridge pod
// network (linux-bridge, with br0 as the pods' gateway so that ClusterIP
// traffic is routed through the node namespace) and the real kube-proxy
// in the node namespace, in iptables or nftables mode, reading the
// Services and EndpointSlices from the run's API server (kubeapi.go) like
// nagare-agent --kubernetes does. Pod-to-pod traffic stays bridged;
// br_netfilter (on in every namespace of this kernel, as in the
// linux-bridge plane) lets the NAT rules see the bridged replies, as in a
// kubenet or bridge-CNI cluster.
type kubeProxyPlane struct {
	mode string // iptables or nftables
	proc *Proc
}

func init() {
	RegisterDataPlane(func() DataPlane { return &kubeProxyPlane{mode: "iptables"} })
	RegisterDataPlane(func() DataPlane { return &kubeProxyPlane{mode: "nftables"} })
}

// bridgeGateway is br0's address: the pods' default gateway in the
// kube-proxy planes (pods are 10.99.0.1-200).
const bridgeGateway = "10.99.0.254"

// kubeProxyPodCIDR is the pods' subnet, kube-proxy's --cluster-cidr.
const kubeProxyPodCIDR = "10.99.0.0/24"

func (p *kubeProxyPlane) Name() string { return "kube-proxy-" + p.mode }

func (p *kubeProxyPlane) Description() string {
	return fmt.Sprintf("Linux bridge pod network (br0 the pods' gateway) + kube-proxy v1.33 in %s mode in the node namespace, Services from the run's kube-apiserver", p.mode)
}

func (*kubeProxyPlane) Scope() Scope { return ScopeIntraNode }

func (p *kubeProxyPlane) Available() error {
	if _, err := kubeBinary("kube-proxy"); err != nil {
		return err
	}
	if err := kubeAPIAvailable(); err != nil {
		return err
	}
	tool := "iptables-restore"
	if p.mode == "nftables" {
		tool = "nft"
	}
	if m := MissingTools(tool); len(m) > 0 {
		return notAvailable("kube-proxy %s mode needs %s", p.mode, m[0])
	}
	return nil
}

func (p *kubeProxyPlane) Setup(ctx context.Context, t *Topology) error {
	nodes := t.NodesWithPods()
	if len(nodes) != 1 {
		return fmt.Errorf("%s: one node only (the Linux bridge pod network does not cross nodes)", p.Name())
	}
	n := nodes[0]
	// The linux-bridge plane, then br0 as the pods' gateway.
	if err := (&bridgePlane{}).Setup(ctx, t); err != nil {
		return err
	}
	for _, c := range [][]string{
		{"ip", "-n", n.NS, "addr", "add", bridgeGateway + "/24", "dev", "br0"},
		{"ip", "netns", "exec", n.NS, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
	} {
		if _, err := t.Sh.Run(ctx, c...); err != nil {
			return err
		}
	}
	for _, pod := range t.NodePods(n) {
		if err := t.IP(ctx, pod.NS, "route", "add", "default", "via", bridgeGateway); err != nil {
			return err
		}
	}
	api, err := t.KubeAPI(ctx)
	if err != nil {
		return err
	}
	// br0's address is the Node's: kube-proxy's nftables mode takes
	// NodePorts on the Node's primary address only (its default
	// --nodeport-addresses), iptables mode on every local one.
	if err := api.CreateNode(ctx, n.Name, kubeProxyPodCIDR, bridgeGateway); err != nil {
		return err
	}
	bin, err := kubeBinary("kube-proxy")
	if err != nil {
		return err
	}
	// The conntrack sysctls are the host's to set (a namespace may not);
	// 0 leaves them as they are. Sync periods are kube-proxy's defaults.
	proc, err := t.Sh.Start(t.Cleanup, "", "ip", "netns", "exec", n.NS, bin,
		"--kubeconfig", api.Kubeconfig, "--hostname-override", n.Name, "--proxy-mode", p.mode,
		"--cluster-cidr", kubeProxyPodCIDR, "--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0", "--healthz-bind-address=127.0.0.1:10256",
		"--metrics-bind-address=127.0.0.1:10249", "--v=2")
	if err != nil {
		return err
	}
	// Whether it programs anything is what the Services' probes wait for;
	// here only that it did not exit on its flags.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Second):
	}
	if proc.Exited() {
		return fmt.Errorf("kube-proxy exited: %s", lastLines(proc.Output(), 8))
	}
	p.proc = proc
	t.Sh.logf("# kube-proxy %s mode in %s (log in commands.log at teardown), kubeconfig %s", p.mode, n.NS, filepath.Base(api.Kubeconfig))
	return nil
}

// Teardown copies the end of kube-proxy's log into the command log.
func (p *kubeProxyPlane) Teardown(_ context.Context, t *Topology) error {
	if p.proc != nil {
		t.Sh.logf("# kube-proxy %s log (last lines):\n#   %s", p.mode, lastLines(p.proc.Output(), 20))
	}
	return nil
}

// Processes: kube-proxy only programs the kernel; packets never reach it.
// Its CPU is in host CPU like the rest.
func (*kubeProxyPlane) Processes() []int { return nil }

// NodePortAddress is br0's address: the Node object's, as a pod reaches it.
func (*kubeProxyPlane) NodePortAddress(*Topology, *Node) (string, error) { return bridgeGateway, nil }
