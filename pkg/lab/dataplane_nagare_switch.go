package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nagare-net/nagare/pkg/switchd"
)

// nagareSwitchPlane runs the real nagare-switch daemon on every node: one
// process per node (bridge br-<node>, its own run directory, so its
// fast-path pins never meet another run's), the pods' host veths as
// OpenFlow ports 1..N, programmed with the real ovs-ofctl over the
// switch's management socket. One node: a NORMAL learning switch.
// Several nodes: an external-mode VXLAN device nvx0 per node with one
// tunnel endpoint port per remote node (added over the control protocol)
// and explicit L2 flows (destination MAC → local port, or tunnel_id 1 and
// the remote node's endpoint; broadcasts flooded by in_port). NORMAL is
// not used across nodes: it floods to every endpoint, including from
// one remote endpoint to another, which loops with three or more nodes.
//
// This plane stays hand-programmed beside the agent-driven `nagare`: the
// flow-setup scenario needs a table that makes every new 5-tuple its own
// cached flow (in_port → output with --disable-megaflows, restarted with
// lifted limits), which the agent's pipeline does not express and should
// not; and it shows the fast path under a plain L2 table, so the agent's
// pipeline can be compared with it in the same run.
type nagareSwitchPlane struct {
	// placement "onload" onloads every pod port; capacity > 0 runs with
	// --fastpath-capacity (flows beyond it onloaded by rate). The pods
	// keep TSO: the onload path carries GSO packets and segments them.
	placement string
	capacity  int
	// onloadPath: --onload-path (ring, afxdp); empty: the switch's default.
	onloadPath string
	exe        string
	sws        []*nagareSwitch // one per node with pods, in NodesWithPods order
	fs         *nagareSwitch   // the switch of the flow-setup measurements
	// extraArgs adds arguments to a node's switch command line (the
	// steering planes' --steer-dev).
	extraArgs func(*nagareSwitch) []string
}

// nagareSwitch is one node's switch process.
type nagareSwitch struct {
	node   *Node
	bridge string
	runDir string
	proc   *Proc
	ports  map[*Pod]uint32  // pod → OpenFlow port
	eps    map[*Node]uint32 // remote node → tunnel endpoint port
	// limit is the flow limit the process runs with in flow-setup mode
	// (0: started for plain forwarding).
	limit int
}

// NagareSwitchBinary finds the nagare-switch executable: next to the
// running program (bin/nagarectl → bin/nagare-switch), else in PATH.
// Tests replace it with a freshly built binary.
var NagareSwitchBinary = func() (string, error) { return nagareBinary("nagare-switch") }

func init() {
	RegisterDataPlane(func() DataPlane { return &nagareSwitchPlane{} })
	RegisterDataPlane(func() DataPlane { return &nagareSwitchPlane{placement: "onload"} })
	RegisterDataPlane(func() DataPlane { return &nagareSwitchPlane{capacity: 4} })
	// The onload path's two ways up (lab/scenarios/onload-path.yaml).
	RegisterDataPlane(func() DataPlane { return &nagareSwitchPlane{placement: "onload", onloadPath: "ring"} })
	RegisterDataPlane(func() DataPlane { return &nagareSwitchPlane{placement: "onload", onloadPath: "afxdp"} })
}

func (p *nagareSwitchPlane) Name() string {
	switch {
	case p.placement != "" && p.onloadPath != "":
		return "nagare-switch-" + p.placement + "-" + p.onloadPath
	case p.placement != "":
		return "nagare-switch-" + p.placement
	case p.capacity > 0:
		return "nagare-switch-auto"
	}
	return "nagare-switch"
}

func (p *nagareSwitchPlane) Description() string {
	switch {
	case p.onloadPath == "ring":
		return "nagare-switch, every pod port onloaded, --onload-path ring: BPF ring buffer up, sendmmsg down (GSO packets whole, with a vnet header)"
	case p.onloadPath == "afxdp":
		return "nagare-switch, every pod port onloaded, --onload-path afxdp: XDP to an AF_XDP socket per receive queue (copy mode), its TX ring down; the pods lose TSO while XDP is attached"
	case p.placement != "":
		return "nagare-switch, every pod port onloaded: packets classified by the fast path, executed in userspace (batched ring + sendmmsg, the default --onload-path; GSO packets sent whole with a vnet header)"
	case p.capacity > 0:
		return fmt.Sprintf("nagare-switch with --fastpath-capacity %d: the highest-rate flows offloaded, the rest onloaded", p.capacity)
	}
	return "nagare-switch daemon per node (OpenFlow 1.3 via ovs-ofctl, eBPF fast path; NORMAL on one node, per-MAC flows + VXLAN tunnel ports across nodes)"
}

func (*nagareSwitchPlane) Scope() Scope { return ScopeIntraNode | ScopeInterNode }

func (*nagareSwitchPlane) Available() error {
	if err := fastPathAvailable("nagare-switch"); err != nil {
		return err
	}
	if _, err := NagareSwitchBinary(); err != nil {
		return notAvailable("no nagare-switch next to this program or in PATH; build it: make build")
	}
	if m := MissingTools("ovs-ofctl"); len(m) > 0 {
		return notAvailable("missing ovs-ofctl (Debian package openvswitch-common)")
	}
	return nil
}

const (
	// nagareSwitchEndpointBase + node index is the OpenFlow port of the
	// tunnel endpoint towards that node.
	nagareSwitchEndpointBase = 100
	// nagareSwitchReady is logged once the switch serves its socket.
	nagareSwitchReady = "msg=listening"
)

func (p *nagareSwitchPlane) Setup(ctx context.Context, t *Topology) error {
	exe, err := NagareSwitchBinary()
	if err != nil {
		return err
	}
	p.exe = exe
	nodes := t.NodesWithPods()
	multi := len(nodes) > 1
	for _, n := range nodes {
		sw := &nagareSwitch{node: n, bridge: "br-" + n.Name, runDir: filepath.Join(t.TempDir, "nagare-switch-"+n.Name),
			ports: map[*Pod]uint32{}, eps: map[*Node]uint32{}}
		for i, pod := range t.NodePods(n) {
			mtu := 0
			if multi {
				mtu = VXLANPodMTU
			}
			if err := t.AddPodLink(ctx, pod, PodLinkOptions{MTU: mtu}); err != nil {
				return err
			}
			sw.ports[pod] = uint32(i + 1)
		}
		if multi {
			if err := t.IP(ctx, n.NS, "link", "add", "nvx0", "type", "vxlan", "external", "dstport", "4789"); err != nil {
				return err
			}
			if err := t.IP(ctx, n.NS, "link", "set", "nvx0", "up"); err != nil {
				return err
			}
		}
		// Registered before the first start, so it runs after every stop
		// (Cleanup is last-in first-out): the pins outlive the process.
		t.Cleanup.Add("destroy fast path of nagare-switch "+sw.bridge+" in "+sw.runDir, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return p.destroy(ctx, t, sw)
		})
		p.sws = append(p.sws, sw)
	}
	for _, sw := range p.sws {
		if err := p.start(ctx, t, sw, 0); err != nil {
			return err
		}
	}
	return nil
}

// start starts sw's process (after stopping a previous one and removing its
// fast path), adds the tunnel endpoints and installs the base flows. A
// limit > 0 starts it for flow-setup measurements: exact-match caching,
// fast path and flow limit of that size, no idle expiry during the run.
func (p *nagareSwitchPlane) start(ctx context.Context, t *Topology, sw *nagareSwitch, limit int) error {
	if sw.proc != nil {
		if err := sw.proc.Stop(); err != nil {
			return err
		}
		sw.proc = nil
		if err := p.destroy(ctx, t, sw); err != nil {
			return err
		}
	}
	args := append([]string{p.exe}, sw.ident()...)
	for _, pod := range t.NodePods(sw.node) {
		args = append(args, "--port", fmt.Sprintf("%s=%d", pod.HostIf, sw.ports[pod]))
	}
	args = append(args, "--fail-mode", "secure")
	if p.extraArgs != nil {
		args = append(args, p.extraArgs(sw)...)
	}
	if p.onloadPath != "" {
		args = append(args, "--onload-path", p.onloadPath)
	}
	if p.capacity > 0 {
		args = append(args, "--fastpath-capacity", strconv.Itoa(p.capacity))
	}
	if limit > 0 {
		n := strconv.Itoa(limit)
		// Flow setup measures the slow path's capacity from one sending
		// port: the per-port budgets (which bound one port's share of it)
		// are lifted with the flow limit.
		args = append(args, "--disable-megaflows", "--max-flows", n, "--flow-limit", n, "--idle-timeout", "1h",
			"--upcall-rate", "-1", "--port-flow-limit", "-1")
	}
	proc, err := t.Sh.Start(t.Cleanup, nagareSwitchReady, args...)
	if err != nil {
		return err
	}
	sw.proc, sw.limit = proc, limit
	// (Loading the fast path, the kernel's verification of its programs
	// most of all, took over 30 s on the shared 2-core VM at load average
	// 55: the wait is not what a scenario measures.)
	if err := proc.WaitReady(ctx, 90*time.Second); err != nil {
		return fmt.Errorf("nagare-switch on %s: %w", sw.node.Name, err)
	}
	for _, m := range t.NodesWithPods() {
		if m == sw.node {
			continue
		}
		no := uint32(nagareSwitchEndpointBase + m.Index)
		t.Sh.logf("# %s: control port-add nvx0 ofport %d remote %s local %s", sw.bridge, no, m.UnderlayIP, sw.node.UnderlayIP)
		if _, err := sw.ctl(ctx, switchd.CtlRequest{Cmd: "port-add", Name: "nvx0", OFPort: no, Remote: m.UnderlayIP, Local: sw.node.UnderlayIP}); err != nil {
			return fmt.Errorf("nagare-switch on %s: tunnel port to %s: %w", sw.node.Name, m.Name, err)
		}
		sw.eps[m] = no
	}
	if p.placement != "" {
		for _, pod := range t.NodePods(sw.node) {
			t.Sh.logf("# %s: control placement-set %s %s", sw.bridge, pod.HostIf, p.placement)
			if _, err := sw.ctl(ctx, switchd.CtlRequest{Cmd: "placement-set", Target: pod.HostIf, Mode: p.placement}); err != nil {
				return fmt.Errorf("nagare-switch on %s: %w", sw.node.Name, err)
			}
		}
	}
	if err := p.program(ctx, t, sw, nil); err != nil {
		return err
	}
	return waitPodHooks(ctx, t, sw.bridge, sw.socket(), 30*time.Second)
}

// ident is what names sw's switch (and, derived from it, its pins).
func (sw *nagareSwitch) ident() []string {
	return []string{"--bridge", sw.bridge, "--run-dir", sw.runDir, "--netns", sw.node.NS}
}

// destroy removes sw's fast path (ports, flows, pins); the process must be
// stopped.
func (p *nagareSwitchPlane) destroy(ctx context.Context, t *Topology, sw *nagareSwitch) error {
	if p.exe == "" {
		return nil
	}
	_, err := t.Sh.Run(ctx, append(append([]string{p.exe}, sw.ident()...), "--destroy")...)
	return err
}

// program replaces sw's OpenFlow table by the base flows plus extra.
func (p *nagareSwitchPlane) program(ctx context.Context, t *Topology, sw *nagareSwitch, extra []string) error {
	flows := append(sw.baseFlows(t), extra...)
	file := filepath.Join(sw.runDir, "flows.txt")
	if err := os.WriteFile(file, []byte(strings.Join(flows, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	t.Sh.logf("# %s: %s\n#   %s", sw.bridge, file, strings.Join(flows, "\n#   "))
	if _, err := sw.ofctl(ctx, t, "del-flows"); err != nil {
		return err
	}
	_, err := sw.ofctl(ctx, t, "add-flows", file)
	return err
}

// baseFlows is sw's L2 table: NORMAL on a single node; across nodes, by
// destination MAC to the local port or the remote node's tunnel endpoint
// (tunnel_id 1), broadcasts to every local pod and, from a local pod,
// every remote node.
func (sw *nagareSwitch) baseFlows(t *Topology) []string {
	if len(sw.eps) == 0 {
		return []string{"priority=0,actions=NORMAL"}
	}
	toNode := func(m *Node) string {
		return fmt.Sprintf("set_field:%d->tunnel_id,output:%d", nagareVNI, sw.eps[m])
	}
	var out []string
	for _, pod := range t.Pods {
		act := ""
		if no, ok := sw.ports[pod]; ok {
			act = fmt.Sprintf("output:%d", no)
		} else if pod.Node != nil && sw.eps[pod.Node] != 0 {
			act = toNode(pod.Node)
		} else {
			continue
		}
		out = append(out, fmt.Sprintf("priority=10,dl_dst=%s,actions=%s", pod.MAC, act))
	}
	local := t.NodePods(sw.node)
	flood := func(in uint32, remote bool) string {
		var acts []string
		for _, pod := range local {
			if sw.ports[pod] != in {
				acts = append(acts, fmt.Sprintf("output:%d", sw.ports[pod]))
			}
		}
		if remote {
			for _, m := range t.NodesWithPods() {
				if sw.eps[m] != 0 {
					acts = append(acts, toNode(m))
				}
			}
		}
		if len(acts) == 0 {
			acts = []string{"drop"}
		}
		return fmt.Sprintf("priority=10,in_port=%d,dl_dst=ff:ff:ff:ff:ff:ff,actions=%s", in, strings.Join(acts, ","))
	}
	for _, pod := range local {
		out = append(out, flood(sw.ports[pod], true))
	}
	for _, m := range t.NodesWithPods() {
		if no := sw.eps[m]; no != 0 {
			out = append(out, flood(no, false))
		}
	}
	return out
}

func (sw *nagareSwitch) socket() string { return filepath.Join(sw.runDir, sw.bridge+".mgmt") }

// ofctl runs the real ovs-ofctl (OpenFlow 1.3) against sw's socket.
func (sw *nagareSwitch) ofctl(ctx context.Context, t *Topology, args ...string) (string, error) {
	cmd := append([]string{"ovs-ofctl", "-O", "OpenFlow13", args[0], "unix:" + sw.socket()}, args[1:]...)
	return t.Sh.Run(ctx, cmd...)
}

// ctl sends one request of the JSON control protocol (what nagarectl
// speaks) on sw's socket.
func (sw *nagareSwitch) ctl(ctx context.Context, req switchd.CtlRequest) (*switchd.CtlResponse, error) {
	return switchd.Call(ctx, sw.socket(), req)
}

// Teardown logs each switch's `show` (slow-path, revalidator and drop
// counters) to the run's command log.
func (p *nagareSwitchPlane) Teardown(ctx context.Context, t *Topology) error {
	for _, sw := range p.sws {
		if sw.proc == nil || sw.proc.Exited() {
			continue
		}
		if r, err := sw.ctl(ctx, switchd.CtlRequest{Cmd: "show"}); err == nil {
			t.Sh.logf("# %s show:\n#   %s", sw.bridge, strings.Join(r.Lines, "\n#   "))
		}
	}
	return nil
}

func (p *nagareSwitchPlane) Processes() []int {
	var pids []int
	for _, sw := range p.sws {
		if sw.proc != nil {
			pids = append(pids, sw.proc.Pid)
		}
	}
	return pids
}

// nagare-switch as a FlowSetupPlane: the switch of the client's node is
// restarted with --disable-megaflows (one cached flow per packet key, as
// Open vSwitch's pipeline with move: forces one datapath flow per key), a
// fast path and flow limit of 2×maxFlows (at least 262144) and idle
// expiry out of the way; the table gets in_port=client → server and back
// (ARP and ICMP included) above the base flows.

func (p *nagareSwitchPlane) PrepareFlowSetup(ctx context.Context, t *Topology, client, server *Pod, maxFlows int) error {
	if client.Node != server.Node {
		return fmt.Errorf("nagare-switch flow setup: %s and %s are on different nodes", client.Name, server.Name)
	}
	var sw *nagareSwitch
	for _, s := range p.sws {
		if s.node == client.Node {
			sw = s
		}
	}
	if sw == nil {
		return fmt.Errorf("no nagare-switch on node %s", client.Node.Name)
	}
	limit := max(262144, 2*maxFlows)
	if sw.limit < limit {
		if err := p.start(ctx, t, sw, limit); err != nil {
			return err
		}
	}
	p.fs = sw
	c, s := sw.ports[client], sw.ports[server]
	return p.program(ctx, t, sw, []string{
		fmt.Sprintf("priority=100,in_port=%d,actions=output:%d", c, s),
		fmt.Sprintf("priority=100,in_port=%d,actions=output:%d", s, c),
	})
}

// InstalledFlows is the switch's cached flow count (`show`).
func (p *nagareSwitchPlane) InstalledFlows(ctx context.Context) (int, error) {
	if p.fs == nil {
		return 0, fmt.Errorf("PrepareFlowSetup was not called")
	}
	r, err := p.fs.ctl(ctx, switchd.CtlRequest{Cmd: "show"})
	if err != nil {
		return 0, err
	}
	var d struct {
		CachedFlows *int `json:"cached_flows"`
	}
	if err := json.Unmarshal(r.Data, &d); err != nil || d.CachedFlows == nil {
		return 0, fmt.Errorf("show: no cached_flows in %s", r.Data)
	}
	return *d.CachedFlows, nil
}

// FlushFlows deletes every cached flow (`flush-cache`).
func (p *nagareSwitchPlane) FlushFlows(ctx context.Context) error {
	if p.fs == nil {
		return fmt.Errorf("PrepareFlowSetup was not called")
	}
	_, err := p.fs.ctl(ctx, switchd.CtlRequest{Cmd: "flush-cache"})
	return err
}

// RevalidationRound runs one round now (`revalidate`; with tableChange
// every cached flow is translated again, as after a table change, while
// the tables stay as they are) and returns what the switch measured.
func (p *nagareSwitchPlane) RevalidationRound(ctx context.Context, tableChange bool) (RevalidationRound, error) {
	if p.fs == nil {
		return RevalidationRound{}, fmt.Errorf("PrepareFlowSetup was not called")
	}
	r, err := p.fs.ctl(ctx, switchd.CtlRequest{Cmd: "revalidate", Change: tableChange})
	if err != nil {
		return RevalidationRound{}, err
	}
	var d struct {
		Flows      int   `json:"flows"`
		DurationNs int64 `json:"duration_ns"`
	}
	if err := json.Unmarshal(r.Data, &d); err != nil {
		return RevalidationRound{}, fmt.Errorf("revalidate: %w in %s", err, r.Data)
	}
	return RevalidationRound{Flows: d.Flows, Duration: time.Duration(d.DurationNs)}, nil
}

// ReplaceFlows sets every switch's table to flows (FlowTablePlane).
func (p *nagareSwitchPlane) ReplaceFlows(ctx context.Context, t *Topology, flows []string) error {
	for _, sw := range p.sws {
		file := filepath.Join(sw.runDir, "flows.txt")
		if err := os.WriteFile(file, []byte(strings.Join(flows, "\n")+"\n"), 0o644); err != nil {
			return err
		}
		t.Sh.logf("# %s: %s\n#   %s", sw.bridge, file, strings.Join(flows, "\n#   "))
		if _, err := sw.ofctl(ctx, t, "del-flows"); err != nil {
			return err
		}
		if _, err := sw.ofctl(ctx, t, "add-flows", file); err != nil {
			return err
		}
	}
	return nil
}

// switchOf is the switch of pod's node.
func (p *nagareSwitchPlane) switchOf(pod *Pod) *nagareSwitch {
	for _, sw := range p.sws {
		if sw.node == pod.Node {
			return sw
		}
	}
	return nil
}

// ControllerSocket is the management socket of pod's node's switch.
func (p *nagareSwitchPlane) ControllerSocket(pod *Pod) string {
	if sw := p.switchOf(pod); sw != nil {
		return sw.socket()
	}
	return ""
}

// Isolation samples the cache of the victims' node's switch.
func (p *nagareSwitchPlane) Isolation(ctx context.Context, t *Topology, attacker *Pod, victims []*Pod) (IsolationResult, error) {
	sw := p.switchOf(victims[0])
	if sw == nil {
		return IsolationResult{}, fmt.Errorf("no switch on %s's node", victims[0].Name)
	}
	return nagareIsolation(ctx, sw, attacker, victims)
}

// UplinkSupport: uplink ports are switch ports like the pods' (on one
// node the NORMAL table learns the tester's addresses behind them).
func (*nagareSwitchPlane) UplinkSupport() error { return nil }
