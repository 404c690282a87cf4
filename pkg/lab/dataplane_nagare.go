package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/nagare-net/nagare/pkg/agent"
	"github.com/nagare-net/nagare/pkg/agent/config"
	"github.com/nagare-net/nagare/pkg/datapath"
	"github.com/nagare-net/nagare/pkg/nscluster"
	"github.com/nagare-net/nagare/pkg/switchd"
)

// nagarePlane is nagare as users run it: on every node with pods the real
// nagare-switch and nagare-agent processes (the agent programs the switch
// over OpenFlow 1.3 from a cluster file), and every pod attached by
// calling the real nagare-cni plugin through the CNI library, as a
// container runtime does. pkg/nscluster (the cluster tests' harness)
// starts and stops all of it; here it adopts the lab's own node
// namespaces and underlay instead of making its own.
//
// Pods get their addresses from the agent's IPAM: node j's pod CIDR is
// 10.99.j.0/24 (gateway .1), so a pod's IP and MAC are known only once
// its CNI ADD returned, and are set on the lab's Pod then. The pod MTU is
// the agent's (underlay MTU - 50) on one node as on several.
//
// The same plane runs in DPU mode (docs/dpu.md) as nagare-dpu (direct
// forward off: intra-node traffic hairpins through the DPU domain) and
// nagare-dpu-df (direct forward on): every node's underlay device moves
// into its DPU domain, which runs the switch on its own CPU; the agent
// stays in the node namespace.
//
// nagare+netpol and nagare+netpol1000 are the plane enforcing the run's
// NetworkPolicies (netpol.go), given to the agents in their cluster file,
// with 0 or 1000 other policies.
type nagarePlane struct {
	cluster *nscluster.Cluster
	dpu     bool // the switch in a DPU domain
	df      bool // direct forward (DPU mode)
	netpol  bool // enforces Topology.NetworkPolicies
	others  int  // policies besides the allowing ones
}

func init() {
	RegisterDataPlane(func() DataPlane { return &nagarePlane{} })
	RegisterDataPlane(func() DataPlane { return &nagarePlane{dpu: true} })
	RegisterDataPlane(func() DataPlane { return &nagarePlane{dpu: true, df: true} })
	RegisterDataPlane(func() DataPlane { return &nagarePolicyPlane{nagarePlane{netpol: true}} })
	RegisterDataPlane(func() DataPlane { return &nagarePolicyPlane{nagarePlane{netpol: true, others: 1000}} })
}

// nagarePolicyPlane is nagare enforcing the run's policies.
type nagarePolicyPlane struct{ nagarePlane }

func (*nagarePolicyPlane) PolicyBase() string   { return "nagare" }
func (p *nagarePolicyPlane) OtherPolicies() int { return p.others }

func (p *nagarePlane) Name() string {
	switch {
	case p.netpol:
		return policyPlaneName("nagare", "netpol", p.others)
	case p.dpu && p.df:
		return "nagare-dpu-df"
	case p.dpu:
		return "nagare-dpu"
	}
	return "nagare"
}

func (p *nagarePlane) Description() string {
	switch {
	case p.dpu && p.df:
		return "nagare in DPU mode with direct forward: the switch in a DPU-domain namespace (own CPU, owns the uplink), pods on VF links; intra-node packets redirected at the VF's transmit point (eBPF), the rest across to the DPU"
	case p.dpu:
		return "nagare in DPU mode without direct forward: the switch in a DPU-domain namespace (own CPU, owns the uplink), pods on VF links; every packet crosses into the DPU domain and back (hairpin)"
	}
	if p.netpol {
		return fmt.Sprintf("nagare as a CNI enforcing the run's NetworkPolicies (cluster file) and %d other policies: conjunctive-match rules, default deny, conntrack-committed allowed connections", p.others)
	}
	return "nagare as a CNI: nagare-switch + nagare-agent per node, pods attached by nagare-cni via libcni (eBPF fast path: redirect_peer intra-node, VXLAN tunnel ports across nodes)"
}

func (*nagarePlane) Scope() Scope { return ScopeIntraNode | ScopeInterNode }

func (*nagarePlane) Available() error {
	if err := fastPathAvailable("nagare"); err != nil {
		return err
	}
	if _, err := NagareBinaries(); err != nil {
		return notAvailable("%v; build them: make build", err)
	}
	return nil
}

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

// nagareBinary finds one of nagare's executables: next to the running
// program (bin/nagarectl → bin/<name>), else in PATH.
func nagareBinary(name string) (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("no %s next to this program or in PATH", name)
	}
	return p, nil
}

// NagareBinaries finds nagare-switch, nagare-agent and nagare-cni (the
// CNI library runs the plugin by its type, nagare-cni, from the
// directory it is in). Tests replace it with freshly built binaries.
var NagareBinaries = func() (nscluster.Binaries, error) {
	var b nscluster.Binaries
	var err error
	if b.Switch, err = NagareSwitchBinary(); err != nil {
		return b, err
	}
	if b.Agent, err = nagareBinary("nagare-agent"); err != nil {
		return b, err
	}
	b.CNI, err = nagareBinary("nagare-cni")
	return b, err
}

// nagareVNI is the VXLAN network identifier of the nagare planes.
const nagareVNI = 1

// nagareClusterCIDR holds every node's pod CIDR (10.99.<node>.0/24).
var nagareClusterCIDR = netip.MustParsePrefix("10.99.0.0/16")

// nagareCluster is the agents' cluster file for t: the nodes with pods,
// their underlay addresses, one /24 pod CIDR each. The lab has no
// external network: no external interface, so the agents' masquerade
// (which never applies to the cluster CIDR) sees no lab traffic.
func nagareCluster(t *Topology) (*config.Cluster, error) {
	c := &config.Cluster{VNI: nagareVNI, MTU: t.UnderlayMTU, ClusterCIDR: nagareClusterCIDR}
	for _, n := range t.NodesWithPods() {
		ul, err := netip.ParseAddr(n.UnderlayIP)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Name, err)
		}
		if n.Index > 255 {
			return nil, fmt.Errorf("node %s: at most 255 nodes", n.Name)
		}
		c.Nodes = append(c.Nodes, config.Node{Name: n.Name, Underlay: ul,
			PodCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 99, byte(n.Index), 0}), 24)})
	}
	if err := c.Complete(); err != nil {
		return nil, err
	}
	return c, nil
}

func (p *nagarePlane) Setup(ctx context.Context, t *Topology) error {
	bins, err := NagareBinaries()
	if err != nil {
		return err
	}
	cc, err := nagareCluster(t)
	if err != nil {
		return err
	}
	nodeNS := map[string]string{}
	for _, n := range t.NodesWithPods() {
		nodeNS[n.Name] = n.NS
	}
	// The switches' pins go under a directory named after the run, so a
	// leftover is easy to tell apart (and the tests can check there is none).
	pins, err := os.MkdirTemp("/sys/fs/bpf", t.Prefix+"-nagare-")
	if err != nil {
		return fmt.Errorf("BPF filesystem: %w", err)
	}
	t.Cleanup.Add("remove "+pins, func() error { return os.RemoveAll(pins) })
	opt := nscluster.Options{Prefix: t.Prefix, Cluster: cc, Bin: bins,
		Dir: filepath.Join(t.TempDir, "nagare"), PinRoot: pins, Logf: t.Sh.logf}
	if p.dpu {
		opt.DPU, opt.DPUUplink = true, t.Nodes[0].UnderlayDev
		opt.AgentArgs = []string{"--direct-forward=" + fmt.Sprint(p.df)}
		t.Sh.logf("# DPU mode: each node's %s moves into <node>-dpu, whose switch runs on CPU %s; direct forward %v", opt.DPUUplink, dpuCPUs(), p.df)
		opt.DPUCPUs = dpuCPUs()
	}
	if p.netpol {
		for _, np := range t.NetworkPolicies {
			cc.NetworkPolicies = append(cc.NetworkPolicies, config.NetworkPolicy{NetworkPolicy: np})
		}
		cc.PodLabels = labPodLabels(t)
	}
	// The application's Services (bookinfo) come with the cluster file.
	cc.Services = append(cc.Services, t.ClusterServices...)
	if t.Services {
		if err := p.kubernetesServices(ctx, t, cc, &opt); err != nil {
			return err
		}
	}
	c, err := nscluster.Adopt(opt, nodeNS)
	if err != nil {
		return err
	}
	p.cluster = c
	// Close deletes the pods (CNI DEL through the agents), stops agents
	// and switches by PID and removes the fast paths' pins; the lab's
	// namespaces are removed after it (Cleanup is last-in first-out).
	t.Cleanup.Add("nagare: CNI DEL, stop agents and switches, remove fast paths", c.Close)
	if b, err := os.ReadFile(c.ClusterFile()); err == nil && len(b) > 64<<10 {
		t.Sh.logf("# nagare cluster file %s: %d bytes (%d NetworkPolicies)", c.ClusterFile(), len(b), len(cc.NetworkPolicies))
	} else if err == nil {
		t.Sh.logf("# nagare cluster file %s:\n#   %s", c.ClusterFile(), strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", "\n#   "))
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	for _, pod := range t.Pods {
		n := c.Node(pod.Node.Name)
		cp := n.AdoptPod(pod.Name, pod.NS)
		t.Sh.logf("# CNI ADD (libcni) pod %s netns %s container %s: %s", pod.Name, cp.Netns, cp.ContainerID, n.Conflist())
		if err := cp.Add(ctx); err != nil {
			return fmt.Errorf("pod %s on %s: %w", pod.Name, pod.Node.Name, err)
		}
		pod.IP = cp.IP.String()
		for _, itf := range cp.Result.Interfaces {
			if itf.Sandbox == "" {
				pod.HostIf = itf.Name
			} else {
				pod.MAC = itf.Mac
			}
		}
		t.Sh.logf("#   → %s (MAC %s, host end %s)", pod.IP, pod.MAC, pod.HostIf)
	}
	if err := waitServicesProgrammed(ctx, c, 30*time.Second); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if err := waitPodHooks(ctx, t, n.Config.Name, n.SwitchSocket(), 30*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// waitPodHooks waits until the switch serving socket has moved its pod
// ports from their clsact filter to tcx, as a switch does a second after
// pod attaches pause (pkg/datapath/hooks.go): the lab measures a cluster
// whose pods have settled, not the first second after their ADD.
func waitPodHooks(ctx context.Context, t *Topology, name, socket string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		r, err := switchd.Call(ctx, socket, switchd.CtlRequest{Cmd: "list-ports"})
		if err != nil {
			return fmt.Errorf("nagare-switch %s list-ports: %w", name, err)
		}
		var ports []switchd.PortInfo
		if err := json.Unmarshal(r.Data, &ports); err != nil {
			return fmt.Errorf("nagare-switch %s list-ports: %w", name, err)
		}
		var waiting []string
		for _, p := range ports {
			if p.Hook == datapath.HookFilter {
				waiting = append(waiting, p.Name)
			}
		}
		if len(waiting) == 0 {
			t.Sh.logf("# nagare-switch %s: every pod port on tcx (moved from its clsact filter once attaches paused)", name)
			return nil
		}
		if time.Now().After(deadline) {
			show := ""
			if r, err := switchd.Call(ctx, socket, switchd.CtlRequest{Cmd: "show"}); err == nil {
				show = ": " + strings.Join(r.Lines, "; ")
			}
			return fmt.Errorf("nagare-switch %s: pod ports %v still on their clsact filter after %v%s", name, waiting, limit, show)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitServicesProgrammed waits until every agent of c is connected to its
// switch with no Service change left to program: a cluster file's
// Services name their endpoints by pod, and the agent programs them a
// moment after the pods' ADDs (it coalesces changes), so a measurement
// that starts at once could find an endpoint missing (Bookinfo's reviews
// → ratings answered 502 in CI).
func waitServicesProgrammed(ctx context.Context, c *nscluster.Cluster, limit time.Duration) error {
	deadline := time.Now().Add(limit) // for all the nodes together
	for _, n := range c.Nodes {
		if err := n.WaitStatus(ctx, time.Until(deadline), "connected with every Service programmed", func(st *agent.Status) bool {
			return st.Switch.Connected && st.ServicesPending == 0
		}); err != nil {
			return err
		}
	}
	return nil
}

// kubernetesServices makes the agents take their Services from the run's
// API server (nagare-agent --kubernetes), the objects kube-proxy reads in
// the peer planes: each agent runs in its node's namespace, where the API
// server listens, and finds its node in a Node object made here (pod
// CIDR, underlay address). The lab's pods have no Pod objects: the
// agents' check for leaked allocations, which would take them for gone,
// is put off past any run.
func (p *nagarePlane) kubernetesServices(ctx context.Context, t *Topology, cc *config.Cluster, opt *nscluster.Options) error {
	if p.dpu {
		return fmt.Errorf("%s: Services are measured on nagare in host mode only", p.Name())
	}
	api, err := t.KubeAPI(ctx)
	if err != nil {
		return err
	}
	for _, n := range cc.Nodes {
		if err := api.CreateNode(ctx, n.Name, n.PodCIDR.String(), n.Underlay.String()); err != nil {
			return err
		}
	}
	opt.AgentInNodeNetns = true
	opt.AgentArgs = append(opt.AgentArgs, "--kubernetes", "--kubeconfig", api.Kubeconfig, "--gc-interval", "24h")
	return nil
}

// Teardown logs what each agent reports (pods, allocations, flows per
// table) to the run's command log.
func (p *nagarePlane) Teardown(ctx context.Context, t *Topology) error {
	if p.cluster == nil {
		return nil
	}
	for _, n := range p.cluster.Nodes {
		if n.Agent == nil || n.Agent.Exited() {
			continue
		}
		if st, err := n.Status(ctx); err == nil {
			b, _ := json.Marshal(st)
			t.Sh.logf("# nagare-agent %s status: %s", n.Config.Name, b)
		}
		// The switch's counters too (which way packets went: shortcut,
		// caches, upcalls); none to ask in DPU mode, where it listens on
		// the DPU's link instead.
		if r, err := switchd.Call(ctx, n.SwitchSocket(), switchd.CtlRequest{Cmd: "show"}); err == nil {
			t.Sh.logf("# nagare-switch %s show:\n#   %s", n.Config.Name, strings.Join(r.Lines, "\n#   "))
		}
	}
	return nil
}

// Processes are every node's switch and agent: the switch handles first
// packets (upcalls); the agent only programs it, but it is part of what
// this data plane costs. In DPU mode no switch runs on the host: the
// agent's CPU is host CPU like any other, and the switches are the DPU's
// (DPUProcesses).
func (p *nagarePlane) Processes() []int {
	if p.cluster == nil || p.dpu {
		return nil
	}
	return p.pids(true, true)
}

// DPUProcesses are the switches in the DPU domains (DPU mode).
func (p *nagarePlane) DPUProcesses() []int {
	if p.cluster == nil || !p.dpu {
		return nil
	}
	return p.pids(true, false)
}

func (p *nagarePlane) pids(switches, agents bool) []int {
	var pids []int
	for _, n := range p.cluster.Nodes {
		var procs []*nscluster.Proc
		if switches {
			procs = append(procs, n.Switch)
		}
		if agents {
			procs = append(procs, n.Agent)
		}
		for _, proc := range procs {
			if proc != nil && !proc.Exited() {
				pids = append(pids, proc.Cmd.Process.Pid)
			}
		}
	}
	return pids
}

// dpuCPUs is the DPU domains' CPU set: CPU 0. The paper's DPU has cores
// of its own; here one is borrowed from the host: the same-core placement
// runs client and server on the scenario's server CPU (1 by default), so
// there the DPU keeps a core to itself, as on the real DPU; cross-core
// shares it with the client.
func dpuCPUs() string { return "0" }

// UplinkSupport: not in this plane. The agent attaches pods by CNI ADD
// (addresses from its IPAM) and routes them through its gateway and
// tunnel ports; a plain L2 port towards a tester namespace is no part of
// its pipeline. nagare-switch (the same fast path, every flow
// offloaded) stands for it in scenarios with uplinks.
func (*nagarePlane) UplinkSupport() error {
	return notAvailable("the agent's pipeline has no uplink port towards a plain tester namespace (pods get IPAM addresses and are routed through its gateway); nagare-switch runs the same fast path with uplink ports")
}

// NodePortAddress is the node's underlay address, its Node object's
// InternalIP: the agent makes every address of a node a NodePort frontend
// in the switch, so a pod's packet to it is translated there (no trip
// through the node's stack), as kube-proxy's planes reach br0's.
func (p *nagarePlane) NodePortAddress(_ *Topology, n *Node) (string, error) {
	if p.dpu {
		return "", notAvailable("Services are measured on nagare in host mode only")
	}
	if n == nil {
		return "", nil // asked whether the plane has NodePorts at all
	}
	return n.UnderlayIP, nil
}

// Isolation samples the cache of the switch of the attacker's (else the
// first victim's) node, the pods' ports found by their host ends' names.
func (p *nagarePlane) Isolation(ctx context.Context, t *Topology, attacker *Pod, victims []*Pod) (IsolationResult, error) {
	pod := attacker
	if pod == nil && len(victims) > 0 {
		pod = victims[0]
	}
	if p.cluster == nil || pod == nil || p.dpu {
		return IsolationResult{}, fmt.Errorf("%s: no switch to sample", p.Name())
	}
	n := p.cluster.Node(pod.Node.Name)
	return switchIsolation(ctx, n.SwitchSocket(), func(r switchd.PortReport, pod *Pod) bool { return r.Name == pod.HostIf }, attacker, victims)
}

// MeshServices: the agents take the application's Services from their
// cluster file (Topology.ClusterServices), in every mode.
func (p *nagarePlane) MeshServices() error { return nil }
