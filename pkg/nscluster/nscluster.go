// Package nscluster builds a nagare cluster out of network namespaces on
// one Linux host: one namespace per node (underlay link, external link),
// an underlay and an "external" host namespace, and on every node the real
// nagare-switch and nagare-agent processes. Pods are namespaces attached
// through the real nagare-cni binary, called with the CNI library exactly
// as a container runtime calls it.
//
//	underlay ns: bridge ul, one port per node       (192.168.77.0/24)
//	external ns: bridge ex, one port per node, and the external host's
//	             own address on the bridge           (172.31.77.0/24, host .100)
//	node ns:     ul0 192.168.77.N, ext0 172.31.77.N, and what the agent
//	             makes (nagare-gw0, nagare-vx0, masquerade out of ext0)
//
// Everything lives in namespaces named <prefix>-*; Close removes them,
// stops the processes it started (by PID) and removes the switches' pins.
package nscluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
	"gopkg.in/yaml.v3"

	"github.com/nagare-net/nagare/internal/child"
	"github.com/nagare-net/nagare/pkg/agent"
	"github.com/nagare-net/nagare/pkg/agent/config"
)

// ExternalHost is the external host's address (on the external bridge).
const ExternalHost = "172.31.77.100"

// Binaries are the programs the cluster runs.
type Binaries struct {
	Switch, Agent, CNI string
}

// Options shape a cluster.
type Options struct {
	Prefix  string          // namespace prefix (default "nc<pid>")
	Cluster *config.Cluster // default: the embedded cluster file
	Bin     Binaries
	Dir     string // scratch directory (run dirs, state, logs); default a new temp dir
	// PinRoot is the switches' BPF filesystem directory; default a new
	// directory under /sys/fs/bpf, removed by Close.
	PinRoot string
	// AgentArgs and SwitchArgs are extra flags for every node's processes.
	AgentArgs, SwitchArgs []string
	// AgentInNodeNetns runs every agent inside its node's network
	// namespace (nsenter --net) rather than beside it, so that it reaches
	// what listens there: the lab's Kubernetes API server on the node's
	// loopback (--kubernetes).
	AgentInNodeNetns bool
	Logf             func(format string, args ...any)
	// DPU builds every node in DPU mode (docs/dpu.md): a DPU domain
	// namespace <node>-dpu owns the uplink and external links and runs the
	// switch (pinned to DPUCPUs), reached by the agent over the control
	// link; the host namespace runs no switch.
	DPU bool
	// DPUCPUs is the DPU domain's CPU set (taskset -c syntax); default
	// the last CPU.
	DPUCPUs string
	// DPUUplink (Adopt in DPU mode) is the node's underlay device, moved
	// into the DPU domain with its address (the node's Underlay/24).
	DPUUplink string
	// UnderlayMTU is the MTU of every node's underlay link (ul0 and its
	// bridge port); default the cluster file's mtu, else 1500. The agents
	// derive the pods' MTU from it unless the cluster file sets mtu.
	UnderlayMTU int
}

// The control link between a host and its DPU domain (nagare-dpu0 on
// both sides): the control network, and the host's own way to its pods
// and beyond, routed by the DPU.
const (
	DPUHostAddr    = "169.254.100.1"
	DPUControlAddr = "169.254.100.2"
	DPUControlPort = "6653"
	DPULink        = "nagare-dpu0"
)

// Cluster is a running namespace cluster.
type Cluster struct {
	opt      Options
	Config   *config.Cluster
	Nodes    []*Node
	Underlay string // namespace names
	External string
	mu       sync.Mutex
	pods     []*Pod
	cleanups []func() error
}

// Node is one node namespace and its processes.
type Node struct {
	c        *Cluster
	Config   config.Node
	NS       string // namespace name
	Dir      string // run dir: sockets, state, logs
	ExtAddr  string // the node's address on the external network
	Switch   *Proc
	Agent    *Proc
	conflist []byte
	// DPUNS is the node's DPU domain (DPU mode), else "".
	DPUNS string
}

// Proc is a process the cluster started.
type Proc struct {
	Cmd  *exec.Cmd
	Log  string
	done chan struct{}
	err  error
}

// Pod is a pod namespace attached through nagare-cni.
type Pod struct {
	Name        string
	NS          string // namespace name
	Netns       string // its path
	Node        *Node
	ContainerID string
	IP          netip.Addr
	Result      *current.Result
}

// New builds the namespaces (no processes yet: Start starts them).
func New(opt Options) (*Cluster, error) {
	c, err := newCluster(opt)
	if err != nil {
		return nil, err
	}
	if err := c.build(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Adopt makes a cluster of node namespaces that exist already, made and
// joined by their owner (the lab builds its own nodes and underlay):
// nodeNS names the namespace of every node of opt.Cluster. No underlay or
// external namespace is made; Start starts the switches and agents as on
// a cluster from New, and Close stops them, removes the switches' fast
// paths and deletes the pods (CNI DEL), but leaves the namespaces to
// their owner.
func Adopt(opt Options, nodeNS map[string]string) (*Cluster, error) {
	c, err := newCluster(opt)
	if err != nil {
		return nil, err
	}
	for _, nc := range c.Config.Nodes {
		ns, ok := nodeNS[nc.Name]
		if !ok {
			c.Close()
			return nil, fmt.Errorf("node %s: no namespace given", nc.Name)
		}
		n := &Node{c: c, Config: nc, NS: ns, Dir: filepath.Join(c.opt.Dir, nc.Name)}
		if err := os.MkdirAll(n.Dir, 0o700); err != nil {
			c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
		if c.opt.DPU {
			if err := c.buildDPU(n); err != nil {
				c.Close()
				return nil, err
			}
			if err := c.moveUplink(n); err != nil {
				c.Close()
				return nil, err
			}
		}
	}
	if err := c.writeClusterFile(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// newCluster fills in opt's defaults and makes the scratch and pin
// directories.
func newCluster(opt Options) (*Cluster, error) {
	if opt.Prefix == "" {
		opt.Prefix = fmt.Sprintf("nc%d", os.Getpid())
	}
	if opt.Cluster == nil {
		opt.Cluster = config.Default()
	}
	if opt.Logf == nil {
		opt.Logf = func(string, ...any) {}
	}
	if opt.Dir == "" {
		d, err := os.MkdirTemp("", "nscluster-")
		if err != nil {
			return nil, err
		}
		opt.Dir = d
	}
	c := &Cluster{opt: opt, Config: opt.Cluster, Underlay: opt.Prefix + "-ul", External: opt.Prefix + "-ext"}
	if c.opt.PinRoot == "" {
		d, err := os.MkdirTemp("/sys/fs/bpf", "nscluster-")
		if err != nil {
			return nil, fmt.Errorf("BPF filesystem: %w", err)
		}
		c.opt.PinRoot = d
		c.onClose(func() error { return os.RemoveAll(d) })
	}
	return c, nil
}

func (c *Cluster) onClose(f func() error) { c.cleanups = append(c.cleanups, f) }

func sh(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func (c *Cluster) addNS(name string) error {
	if err := sh("ip", "netns", "add", name); err != nil {
		return err
	}
	c.onClose(func() error { return sh("ip", "netns", "del", name) })
	if err := sh("ip", "-n", name, "link", "set", "lo", "up"); err != nil {
		return err
	}
	return sh("ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
}

func (c *Cluster) build() error {
	for _, ns := range []string{c.Underlay, c.External} {
		if err := c.addNS(ns); err != nil {
			return err
		}
	}
	for _, cmd := range [][]string{
		{"ip", "-n", c.Underlay, "link", "add", "ul", "type", "bridge"},
		{"ip", "-n", c.Underlay, "link", "set", "ul", "up"},
		{"ip", "-n", c.External, "link", "add", "ex", "type", "bridge"},
		{"ip", "-n", c.External, "addr", "add", ExternalHost + "/24", "dev", "ex"},
		{"ip", "-n", c.External, "link", "set", "ex", "up"},
	} {
		if err := sh(cmd...); err != nil {
			return err
		}
	}
	mtu := fmt.Sprint(c.underlayMTU())
	for i, nc := range c.Config.Nodes {
		n := &Node{c: c, Config: nc, NS: c.opt.Prefix + "-" + nc.Name, Dir: filepath.Join(c.opt.Dir, nc.Name),
			ExtAddr: fmt.Sprintf("172.31.77.%d", i+1)}
		if err := os.MkdirAll(n.Dir, 0o700); err != nil {
			return err
		}
		if err := c.addNS(n.NS); err != nil {
			return err
		}
		// The uplinks belong to the node, or in DPU mode to its DPU domain.
		up := n.NS
		if c.opt.DPU {
			if err := c.buildDPU(n); err != nil {
				return err
			}
			up = n.DPUNS
		}
		ulPeer, exPeer := fmt.Sprintf("u%d", i+1), fmt.Sprintf("e%d", i+1)
		for _, cmd := range [][]string{
			{"ip", "link", "add", "ul0", "netns", up, "mtu", mtu, "type", "veth", "peer", "name", ulPeer, "netns", c.Underlay, "mtu", mtu},
			{"ip", "-n", c.Underlay, "link", "set", ulPeer, "master", "ul", "up"},
			{"ip", "-n", up, "addr", "add", nc.Underlay.String() + "/24", "dev", "ul0"},
			{"ip", "-n", up, "link", "set", "ul0", "up"},
			{"ip", "link", "add", "ext0", "netns", up, "type", "veth", "peer", "name", exPeer, "netns", c.External},
			{"ip", "-n", c.External, "link", "set", exPeer, "master", "ex", "up"},
			{"ip", "-n", up, "addr", "add", n.ExtAddr + "/24", "dev", "ext0"},
			{"ip", "-n", up, "link", "set", "ext0", "up"},
			{"ip", "-n", up, "route", "add", "default", "via", ExternalHost},
		} {
			if err := sh(cmd...); err != nil {
				return err
			}
		}
		c.Nodes = append(c.Nodes, n)
	}
	return c.writeClusterFile()
}

// underlayMTU is the nodes' underlay links' MTU (Options.UnderlayMTU).
func (c *Cluster) underlayMTU() int {
	switch {
	case c.opt.UnderlayMTU != 0:
		return c.opt.UnderlayMTU
	case c.Config.MTU != 0:
		return c.Config.MTU
	}
	return 1500
}

// buildDPU makes node n's DPU domain: a namespace and the link to the
// host (the control network, and the host's route to everything: the DPU
// owns the uplink).
func (c *Cluster) buildDPU(n *Node) error {
	n.DPUNS = n.NS + "-dpu"
	if err := c.addNS(n.DPUNS); err != nil {
		return err
	}
	for _, cmd := range [][]string{
		{"ip", "link", "add", DPULink, "netns", n.NS, "type", "veth", "peer", "name", DPULink, "netns", n.DPUNS},
		{"ip", "-n", n.NS, "addr", "add", DPUHostAddr + "/30", "dev", DPULink},
		{"ip", "-n", n.DPUNS, "addr", "add", DPUControlAddr + "/30", "dev", DPULink},
		{"ip", "-n", n.NS, "link", "set", DPULink, "up"},
		{"ip", "-n", n.DPUNS, "link", "set", DPULink, "up"},
		{"ip", "-n", n.NS, "route", "replace", "default", "via", DPUControlAddr},
	} {
		if err := sh(cmd...); err != nil {
			return err
		}
	}
	return nil
}

// moveUplink hands an adopted node's underlay device to its DPU domain.
func (c *Cluster) moveUplink(n *Node) error {
	if c.opt.DPUUplink == "" {
		return errors.New("nscluster: DPU mode on adopted nodes needs DPUUplink")
	}
	dev := c.opt.DPUUplink
	for _, cmd := range [][]string{
		{"ip", "-n", n.NS, "link", "set", dev, "netns", n.DPUNS},
		{"ip", "-n", n.DPUNS, "addr", "add", n.Config.Underlay.String() + "/24", "dev", dev},
		{"ip", "-n", n.DPUNS, "link", "set", dev, "up"},
	} {
		if err := sh(cmd...); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) writeClusterFile() error {
	b, err := yaml.Marshal(c.Config)
	if err != nil {
		return err
	}
	return os.WriteFile(c.ClusterFile(), b, 0o644)
}

// WriteClusterFile writes Config to the cluster file again (after a
// change; the agents read it when they start).
func (c *Cluster) WriteClusterFile() error { return c.writeClusterFile() }

// ClusterFile is the cluster file every agent reads.
func (c *Cluster) ClusterFile() string { return filepath.Join(c.opt.Dir, "cluster.yaml") }

// Node returns the node called name.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Config.Name == name {
			return n
		}
	}
	return nil
}

// Sockets and paths of a node.
func (n *Node) SwitchSocket() string { return filepath.Join(n.Dir, "br-int.mgmt") }
func (n *Node) CNISocket() string    { return filepath.Join(n.Dir, "cni.sock") }
func (n *Node) AgentSocket() string  { return filepath.Join(n.Dir, "agent.sock") }
func (n *Node) StateDir() string     { return filepath.Join(n.Dir, "state") }
func (n *Node) NetnsPath() string    { return "/var/run/netns/" + n.NS }

// Start starts every node's switch and agent and waits until each agent
// has synced its switch.
func (c *Cluster) Start(ctx context.Context) error {
	for _, n := range c.Nodes {
		if err := n.StartSwitch(ctx); err != nil {
			return err
		}
		n := n
		c.onClose(func() error { return n.DestroySwitch() })
	}
	for _, n := range c.Nodes {
		if err := n.StartAgent(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) start(n *Node, what string, args []string, ready func(context.Context) error, ctx context.Context) (*Proc, error) {
	logPath := filepath.Join(n.Dir, what+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	c.opt.Logf("%s: %s", n.Config.Name, strings.Join(args, " "))
	if err := child.Start(cmd); err != nil { // dies with this process
		f.Close()
		return nil, err
	}
	p := &Proc{Cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); f.Close(); close(p.done) }()
	c.onClose(func() error { p.Stop(); return nil })
	deadline := time.Now().Add(30 * time.Second)
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		err := ready(rctx)
		cancel()
		if err == nil {
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s on %s exited (%v): %s", what, n.Config.Name, p.err, tail(logPath))
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.Stop()
			return nil, fmt.Errorf("%s on %s not ready: %v: %s", what, n.Config.Name, err, tail(logPath))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// Stop ends the process (SIGTERM, then SIGKILL after 10 s).
func (p *Proc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
}

// Kill ends the process with SIGKILL, as a crash would.
func (p *Proc) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.done
}

// Exited says whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (n *Node) switchArgs() []string {
	args := append(n.switchIdent(), "--fail-mode", "secure")
	if n.DPUNS != "" {
		args = append(args, "--listen", "pssl:"+DPUControlPort+":"+DPUControlAddr, "--pki-dir", n.PKIDir())
	}
	if os.Getenv("NAGARE_DEBUG_SWITCH") != "" {
		args = append(args, "--log-level", "debug")
	}
	return append(args, n.c.opt.SwitchArgs...)
}

// switchIdent names the node's switch (and its pins). In DPU mode it runs
// on the DPU domain's CPUs, its ports in the DPU domain.
func (n *Node) switchIdent() []string {
	if n.DPUNS != "" {
		return []string{"taskset", "-c", n.c.DPUCPUs(), n.c.opt.Bin.Switch, "--bridge", "br-int", "--run-dir", n.Dir, "--netns", n.DPUNS, "--bpffs", n.c.opt.PinRoot}
	}
	return []string{n.c.opt.Bin.Switch, "--bridge", "br-int", "--run-dir", n.Dir, "--netns", n.NS, "--bpffs", n.c.opt.PinRoot}
}

// DPUCPUs is the DPU domains' CPU set.
func (c *Cluster) DPUCPUs() string {
	if c.opt.DPUCPUs != "" {
		return c.opt.DPUCPUs
	}
	return fmt.Sprint(runtime.NumCPU() - 1)
}

// PKIDir holds the node's control-network certificates (both sides: the
// one provisioning step the namespaces share).
func (n *Node) PKIDir() string { return filepath.Join(n.Dir, "pki") }

// StartSwitch starts (or restarts) the node's switch.
func (n *Node) StartSwitch(ctx context.Context) error {
	p, err := n.c.start(n, "switch", n.switchArgs(), func(ctx context.Context) error {
		return socketAnswers(ctx, n.SwitchSocket())
	}, ctx)
	if err != nil {
		return err
	}
	n.Switch = p
	return nil
}

// DestroySwitch removes the switch's fast path (pins, ports, flows).
func (n *Node) DestroySwitch() error {
	if n.Switch != nil {
		n.Switch.Stop()
	}
	return sh(append(n.switchIdent(), "--destroy")...)
}

// StartAgent starts (or restarts) the node's agent and waits until it has
// synced its switch.
func (n *Node) StartAgent(ctx context.Context) error {
	args := append([]string{n.c.opt.Bin.Agent, "--node-name", n.Config.Name, "--cluster-file", n.c.ClusterFile(),
		"--netns", n.NS, "--switch", "unix:" + n.SwitchSocket(), "--cni-socket", n.CNISocket(),
		"--agent-socket", n.AgentSocket(), "--state-dir", n.StateDir()}, n.c.opt.AgentArgs...)
	if n.c.opt.AgentInNodeNetns {
		args = append([]string{"nsenter", "--net=" + n.NetnsPath(), "--"}, args...)
	}
	if n.DPUNS != "" {
		args = append(args, "--mode", "dpu", "--dpu-netns", n.DPUNS, "--dpu-switch", "ssl:"+DPUControlAddr+":"+DPUControlPort,
			"--pki-dir", n.PKIDir(), "--dpu-cpus", n.c.DPUCPUs(), "--bpffs", filepath.Join(n.c.opt.PinRoot, "agent-"+n.Config.Name))
	}
	p, err := n.c.start(n, "agent", args, func(ctx context.Context) error {
		st, err := n.Status(ctx)
		if err != nil {
			return err
		}
		if !st.Switch.Connected {
			return errors.New("switch not synced yet")
		}
		return nil
	}, ctx)
	if err != nil {
		return err
	}
	n.Agent = p
	return nil
}

// Status asks the node's agent for its status.
func (n *Node) Status(ctx context.Context) (*agent.Status, error) {
	return agent.FetchStatus(ctx, n.AgentSocket())
}

// WaitStatus polls the agent's status until ok holds or limit passes;
// the error then names what was awaited and the last status seen.
func (n *Node) WaitStatus(ctx context.Context, limit time.Duration, what string, ok func(*agent.Status) bool) error {
	deadline := time.Now().Add(limit)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := n.Status(cctx)
		cancel()
		if err == nil && ok(st) {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("status %+v", st)
			}
			return fmt.Errorf("nagare-agent %s: not %s after %v: %w", n.Config.Name, what, limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// socketAnswers is nil once a Unix socket accepts connections.
func socketAnswers(ctx context.Context, path string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return err
	}
	return c.Close()
}

// Conflist is the node's network configuration for nagare-cni.
func (n *Node) Conflist() []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"nagare","plugins":[{"type":"nagare-cni","socket":%q}]}`, n.CNISocket()))
}

// CNI returns the CNI library's handle on the plugin directory.
func (c *Cluster) CNI() *libcni.CNIConfig {
	return libcni.NewCNIConfigWithCacheDir([]string{filepath.Dir(c.opt.Bin.CNI)}, filepath.Join(c.opt.Dir, "cni-cache"), nil)
}

// RuntimeConf is what a runtime passes for pod p.
func (p *Pod) RuntimeConf() *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: p.ContainerID, NetNS: p.Netns, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", p.Name}, {"K8S_POD_INFRA_CONTAINER_ID", p.ContainerID}}}
}

// NewPod makes a pod namespace on node n (not attached yet).
func (n *Node) NewPod(name string) (*Pod, error) {
	p := n.AdoptPod(name, n.c.opt.Prefix+"-"+name)
	if err := n.c.addNS(p.NS); err != nil {
		return nil, err
	}
	return p, nil
}

// AdoptPod is a pod on node n in namespace ns, which exists already and
// stays its owner's (not attached yet: Add attaches it).
func (n *Node) AdoptPod(name, ns string) *Pod {
	id := make([]byte, 32)
	_, _ = rand.Read(id)
	return &Pod{Name: name, NS: ns, Netns: "/var/run/netns/" + ns, Node: n, ContainerID: hex.EncodeToString(id)}
}

// ConfList parses the node's conflist.
func (n *Node) ConfList() (*libcni.NetworkConfigList, error) {
	return libcni.ConfListFromBytes(n.Conflist())
}

// AddPod makes a pod namespace and attaches it with CNI ADD.
func (n *Node) AddPod(ctx context.Context, name string) (*Pod, error) {
	p, err := n.NewPod(name)
	if err != nil {
		return nil, err
	}
	if err := p.Add(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// Add runs CNI ADD for the pod.
func (p *Pod) Add(ctx context.Context) error {
	cl, err := p.Node.ConfList()
	if err != nil {
		return err
	}
	r, err := p.Node.c.CNI().AddNetworkList(ctx, cl, p.RuntimeConf())
	if err != nil {
		return fmt.Errorf("CNI ADD %s: %w", p.Name, err)
	}
	res, err := current.NewResultFromResult(r)
	if err != nil {
		return err
	}
	if len(res.IPs) == 0 {
		return fmt.Errorf("CNI ADD %s: no address in %v", p.Name, res)
	}
	p.Result = res
	p.IP, _ = netip.AddrFromSlice(res.IPs[0].Address.IP.To4())
	p.Node.c.mu.Lock()
	p.Node.c.pods = append(p.Node.c.pods, p)
	p.Node.c.mu.Unlock()
	return nil
}

// Del runs CNI DEL for the pod.
func (p *Pod) Del(ctx context.Context) error {
	cl, err := p.Node.ConfList()
	if err != nil {
		return err
	}
	return p.Node.c.CNI().DelNetworkList(ctx, cl, p.RuntimeConf())
}

// Check runs CNI CHECK for the pod.
func (p *Pod) Check(ctx context.Context) error {
	cl, err := p.Node.ConfList()
	if err != nil {
		return err
	}
	return p.Node.c.CNI().CheckNetworkList(ctx, cl, p.RuntimeConf())
}

// Exec runs a command inside the pod.
func (p *Pod) Exec(args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", p.NS}, args...)...).CombinedOutput()
	return string(out), err
}

// Close deletes the pods (CNI DEL), stops the processes, removes the
// switches' fast paths and every namespace, newest first.
func (c *Cluster) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.mu.Lock()
	pods := c.pods
	c.pods = nil
	c.mu.Unlock()
	for _, p := range pods {
		if p.Node.Agent != nil && !p.Node.Agent.Exited() {
			_ = p.Del(ctx)
		}
	}
	var errs []error
	for i := len(c.cleanups) - 1; i >= 0; i-- {
		if err := c.cleanups[i](); err != nil {
			errs = append(errs, err)
		}
	}
	c.cleanups = nil
	return errors.Join(errs...)
}
