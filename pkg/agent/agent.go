// Package agent is nagare-agent, one per node: it gives pods their network
// (IPAM, veth, addresses, routes) when nagare-cni asks, programs the node's
// nagare-switch over OpenFlow (pkg/agent/pipeline), keeps the node's
// gateway, tunnel device, routes and masquerade, and follows the cluster's
// nodes (a cluster file, or the Kubernetes API) with one tunnel endpoint
// per remote node.
//
// The agent owns no packet: pods keep forwarding while it restarts, since
// the switch and its fast path go on. On start it finds what a previous
// run made (IPAM records, switch ports, flows by cookie) and reconciles,
// changing only what differs.
//
// Files: agent.go (config, start, the switch connection), pods.go (the CNI
// handler: ADD, DEL, CHECK, GC, STATUS), nodes.go (remote nodes and
// tunnels), services.go (the desired service state, pkg/agent/proxy),
// networkpolicy.go (NetworkPolicy realization, pkg/agent/netpol),
// gc.go (leaked allocations), status.go (nagarectl agent, Prometheus
// metrics), hostops.go (the node, switch-control and IPAM interfaces the
// tests fake, so this logic is tested without root).
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nagare-net/nagare/pkg/agent/cniserver"
	"github.com/nagare-net/nagare/pkg/agent/config"
	"github.com/nagare-net/nagare/pkg/agent/ipam"
	"github.com/nagare-net/nagare/pkg/agent/k8s"
	"github.com/nagare-net/nagare/pkg/agent/netpol"
	"github.com/nagare-net/nagare/pkg/agent/nodenet"
	"github.com/nagare-net/nagare/pkg/agent/pipeline"
	"github.com/nagare-net/nagare/pkg/agent/proxy"
	"github.com/nagare-net/nagare/pkg/agent/snat"
	"github.com/nagare-net/nagare/pkg/agent/vf"
	"github.com/nagare-net/nagare/pkg/controlnet"
	"github.com/nagare-net/nagare/pkg/ctlproto"
)

// Defaults.
const (
	DefaultSwitchSocket = "/var/run/nagare/br-int.mgmt"
	DefaultStateDir     = "/var/lib/nagare"
	DefaultAgentSocket  = "/var/run/nagare/agent.sock"
)

// Config is the agent's configuration (its flags).
type Config struct {
	NodeName string
	// Cluster holds the shared settings and, without Kubernetes, the nodes.
	Cluster *config.Cluster
	// Kube, when set, is where nodes and pods come from.
	Kube *k8s.Source
	// NetNS is the node's network namespace (path); "" = the agent's own.
	NetNS        string
	SwitchSocket string // the switch's management socket (OpenFlow and control)
	CNISocket    string // where nagare-cni reaches the agent
	AgentSocket  string // nagarectl agent and /metrics
	StateDir     string // IPAM database
	Gateway      string // gateway device name (nodenet.DefaultGateway)
	Tunnel       string // VXLAN device name (nodenet.DefaultTunnel)
	// GCInterval is the period of the check for leaked allocations.
	GCInterval time.Duration
	// GCGrace: an allocation younger than this is never collected (its ADD
	// may still be running).
	GCGrace time.Duration
	Logger  *slog.Logger
	// Mode is ModeHost (the switch beside the agent, on SwitchSocket) or
	// ModeDPU (the switch in a DPU domain, reached over its control
	// network: docs/dpu.md).
	Mode string
	DPU  DPUConfig
}

func (c *Config) setDefaults() error {
	if c.NodeName == "" {
		return errors.New("agent: a node name is required")
	}
	if c.Cluster == nil {
		c.Cluster = config.Default()
	}
	if c.SwitchSocket == "" {
		c.SwitchSocket = DefaultSwitchSocket
	}
	if c.CNISocket == "" {
		c.CNISocket = cniserver.DefaultSocket
	}
	if c.AgentSocket == "" {
		c.AgentSocket = DefaultAgentSocket
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	if c.Gateway == "" {
		c.Gateway = nodenet.DefaultGateway
	}
	if c.Tunnel == "" {
		c.Tunnel = nodenet.DefaultTunnel
	}
	if c.GCInterval == 0 {
		c.GCInterval = time.Minute
	}
	if c.GCGrace == 0 {
		c.GCGrace = 2 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return c.setDPUDefaults()
}

// Agent is one node's agent.
type Agent struct {
	cfg  Config
	log  *slog.Logger
	node config.Node // this node
	net  nodeNetwork
	gw   nodenet.Gateway
	// podMTU is the pods' MTU: the underlay's (config.Cluster.PodMTU).
	podMTU int
	ipam   podStore
	pl     *pipeline.Pipeline
	met    *metrics
	reg    *prometheus.Registry

	// mu guards the maps below and conn; structural work on the switch
	// (ports, pipeline) runs under swMu so a reconnect's full sync and a
	// pod's flows never interleave.
	mu    sync.Mutex
	swMu  sync.Mutex
	conn  *pipeline.Conn
	ready bool // switch connected and synced
	// networkMarked: the Node's NetworkUnavailable condition was cleared
	// (Kubernetes) in this run.
	networkMarked bool
	gwPort        uint32
	pods          map[string]*podRecord // by key (containerID/ifName)
	remotes       map[string]*remote    // by node name
	locks         keyedMutex
	started       time.Time
	lastSync      pipeline.SyncStats
	lastSyncAt    time.Time
	lastSyncDur   time.Duration
	reconnects    int
	downReason    string // why the switch is not ready (for CNI errors and STATUS)
	lostReason    string // why the last connection ended (kept while reconnecting)

	sw  controlnet.Endpoint // where the switch is
	ctl *ctlproto.Client    // control calls to it, over kept connections (call)
	vf  *vf.VF              // DPU mode: VF links and direct forward

	// Tests' fakes (hostops.go); nil = the real thing.
	podNet  podNetwork
	control switchControl
	masq    func(snat.Config) error

	masqMu sync.Mutex // one masquerade rule write at a time (nodes.go)

	services       *proxy.Tracker               // the desired service state (services.go)
	rejecter       pipeline.Rejecter            // answers Service reject PACKET_INs on every switch connection
	unresolvedPods atomic.Value                 // cluster-file endpoint pods not on this node, last logged
	svcInFlight    atomic.Int64                 // Services taken from the tracker and not yet programmed (serviceLoop)
	nodePorts      nodePortState                // the NodePort sets last written (nodeports.go)
	policies       *policyFeed                  // NetworkPolicy input and realization (networkpolicy.go); nil without policies
	policiesSynced <-chan struct{}              // closed once the policy input is whole (informers synced; the cluster file at once)
	filePolicyMu   sync.Mutex                   // one feedClusterPolicies at a time (pods come and go concurrently)
	pendingCut     atomic.Pointer[netpol.State] // policies a switch Sync programmed: policyLoop cuts what they deny
	filePolicyPods map[string]netip.Addr        // cluster-file policies: the local pods fed to the engine, by address
	filePolicyNS   map[string]bool              // and the namespaces
	policyMu       sync.Mutex                   // one realization + programming at a time (realizePolicies)
	policyReported map[string]string            // under policyMu: each policy's problems, last reported
	redirect       redirectState                // transparent redirection to the node's proxy (proxyredirect.go)
}

// New checks the configuration; Run does the work.
func New(cfg Config) (*Agent, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, log: cfg.Logger.With("node", cfg.NodeName), pods: map[string]*podRecord{}, remotes: map[string]*remote{}}
	a.reg = prometheus.NewRegistry()
	a.met = newMetrics(a)
	return a, nil
}

// Run starts the agent and serves until ctx ends. It returns once the
// sockets are closed; everything on the node (devices, switch ports and
// flows, allocations) stays as it is, so pods keep forwarding.
func (a *Agent) Run(ctx context.Context) error {
	a.started = time.Now()
	node, err := a.localNode(ctx)
	if err != nil {
		return err
	}
	a.node = node
	a.log.Info("node", "podCIDR", node.PodCIDR, "underlay", node.Underlay, "gateway", node.Gateway(), "mode", a.cfg.Mode)
	if err := a.openSwitchEndpoint(); err != nil {
		return err
	}
	defer a.ctl.Close()
	if a.vf != nil {
		defer a.vf.Close()
	}

	if err := os.MkdirAll(a.cfg.StateDir, 0o700); err != nil {
		return err
	}
	db := filepath.Join(a.cfg.StateDir, "ipam-"+a.cfg.NodeName+".db")
	store, err := ipam.Open(db, node.PodCIDR, node.Gateway())
	if err != nil {
		return fmt.Errorf("IPAM: %w", err)
	}
	defer store.Close()
	a.ipam = store
	if err := a.loadPods(); err != nil {
		return err
	}

	if err := a.setupNode(); err != nil {
		return err
	}
	defer a.net.Close()

	// The CNI socket is served from the start: until the switch is synced
	// an ADD fails at once with a retryable error (not a hang).
	srv, err := cniserver.Listen(a.cfg.CNISocket)
	if err != nil {
		return fmt.Errorf("CNI socket: %w", err)
	}
	status, err := a.serveStatus()
	if err != nil {
		srv.Close()
		return err
	}
	a.startServices()
	a.startPolicies()
	var wg sync.WaitGroup
	wg.Add(6)
	go func() { defer wg.Done(); a.proxyLoop(ctx) }()
	go func() { defer wg.Done(); a.serviceLoop(ctx) }()
	go func() { defer wg.Done(); a.policyLoop(ctx) }()
	go func() {
		defer wg.Done()
		if err := cniserver.Serve(ctx, srv, a, a.log, a.met.cni); err != nil && ctx.Err() == nil {
			a.log.Error("CNI server", "err", err)
		}
	}()
	go func() { defer wg.Done(); a.gcLoop(ctx) }()
	go func() { defer wg.Done(); a.switchLoop(ctx) }()
	if a.cfg.Kube != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.cfg.Kube.Run(ctx, a); err != nil && ctx.Err() == nil {
				a.log.Error("Kubernetes node source", "err", err)
			}
		}()
	} else {
		for _, n := range a.cfg.Cluster.Nodes {
			if n.Name != a.cfg.NodeName {
				a.NodeUpdated(n)
			}
		}
	}
	a.log.Info("agent started", "cni", a.cfg.CNISocket, "switch", a.sw.String(), "status", a.cfg.AgentSocket)
	<-ctx.Done()
	srv.Close()
	status.Close()
	wg.Wait()
	a.mu.Lock()
	if a.conn != nil {
		a.conn.Close()
	}
	a.mu.Unlock()
	return nil
}

// localNode is this node's entry: from the cluster file, or from its Node
// object (waiting until it has a pod CIDR).
func (a *Agent) localNode(ctx context.Context) (config.Node, error) {
	if a.cfg.Kube != nil {
		return a.cfg.Kube.LocalNode(ctx)
	}
	n, ok := a.cfg.Cluster.Node(a.cfg.NodeName)
	if !ok {
		return n, fmt.Errorf("node %q is not in the cluster file", a.cfg.NodeName)
	}
	return n, nil
}

// setupNode makes the gateway, the tunnel device and the masquerade.
func (a *Agent) setupNode() error {
	c := a.cfg.Cluster
	gwPrefix := netip.PrefixFrom(a.node.Gateway(), a.node.PodCIDR.Bits())
	nn, err := nodenet.Open(nodenet.Config{Netns: a.nodeNetns(), Gateway: a.cfg.Gateway, GatewayIP: gwPrefix,
		Tunnel: a.cfg.Tunnel, VXLANPort: c.VXLANPort})
	if err != nil {
		return err
	}
	a.podMTU = a.cfg.Cluster.PodMTU(a.underlayMTU(nn))
	nn.SetMTU(a.podMTU)
	a.net = nn
	if a.gw, err = a.net.EnsureGateway(); err != nil {
		return err
	}
	if err := a.net.EnsureTunnel(); err != nil {
		return err
	}
	if c.ServiceCIDR.IsValid() {
		if err := a.net.EnsureServiceRoute(c.ServiceCIDR, pipeline.RemoteGatewayMAC); err != nil {
			return fmt.Errorf("service route: %w", err)
		}
	}
	if err := a.setupNodePorts(); err != nil {
		return fmt.Errorf("nodeport steering: %w", err)
	}
	if err := a.setupProxyLink(); err != nil {
		return fmt.Errorf("proxy link: %w", err)
	}
	return a.ensureMasquerade()
}

// underlayMTU is the MTU of the node's device holding its underlay
// address; 1500 when no device holds it (then say so: pods may get an
// MTU their path cannot carry, and the cluster file's mtu fixes it).
func (a *Agent) underlayMTU(nn *nodenet.Net) int {
	mtu, dev, err := nn.UnderlayMTU(a.node.Underlay)
	if err != nil {
		if a.cfg.Cluster.MTU == 0 {
			a.log.Warn("underlay MTU unknown, assuming 1500 (set mtu in the cluster file)", "err", err)
		}
		return 1500
	}
	a.log.Info("underlay", "device", dev, "mtu", mtu, "configured", a.cfg.Cluster.MTU, "podMTU", a.cfg.Cluster.PodMTU(mtu))
	return mtu
}

// mtu is the pods' MTU: set by setupNode; before it (tests without a
// node) what a 1500-byte underlay gives.
func (a *Agent) mtu() int {
	if a.podMTU == 0 {
		return a.cfg.Cluster.PodMTU(1500)
	}
	return a.podMTU
}

func (a *Agent) pipelineNode() pipeline.Node {
	return pipeline.Node{Name: a.node.Name, PodCIDR: a.node.PodCIDR, ClusterCIDR: a.cfg.Cluster.ClusterCIDR,
		GatewayIP: a.node.Gateway(), GatewayMAC: a.gw.MAC, GatewayPort: a.gwPort, VNI: a.cfg.Cluster.VNI}
}

// errSwitchDown is what CNI calls get while the switch is not synced.
var errSwitchDown = errors.New("the node's switch is not connected yet")

// switchLoop connects to the switch, brings its ports and tables to the
// desired state, and does it again whenever the connection drops (the
// switch restarted).
func (a *Agent) switchLoop(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		conn, err := a.connectAndSync(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			a.mu.Lock()
			a.downReason = err.Error()
			if a.lostReason != "" {
				a.downReason = a.lostReason + "; reconnecting: " + err.Error()
			}
			a.mu.Unlock()
			a.log.Warn("switch not ready; retrying", "switch", a.sw.String(), "err", err, "in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		go a.rejecter.Serve(ctx, conn)
		select {
		case <-ctx.Done():
			return
		case <-conn.Done():
		}
		a.mu.Lock()
		a.ready = false
		a.reconnects++
		a.lostReason = fmt.Sprintf("connection to %s lost: %v", a.sw, conn.Err())
		a.downReason = a.lostReason
		a.mu.Unlock()
		a.met.reconnects.Inc()
		a.log.Warn("switch connection lost; reconnecting", "err", conn.Err())
	}
}

func (a *Agent) connectAndSync(ctx context.Context) (*pipeline.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nc, err := a.sw.Dial(dctx)
	if err != nil {
		return nil, err
	}
	conn, err := pipeline.Open(dctx, nc, a.sw.String())
	if err != nil {
		return nil, err
	}
	if a.cfg.Mode == ModeDPU {
		conn.Lease(a.cfg.DPU.LeaseInterval, a.cfg.DPU.LeaseTimeout)
	}
	if err := a.syncSwitch(ctx, conn); err != nil {
		return nil, err
	}
	return conn, nil
}

// syncSwitch brings a new connection's switch to the desired state: its
// ports, then every flow and group (closing conn when it cannot).
func (a *Agent) syncSwitch(ctx context.Context, conn *pipeline.Conn) error {
	a.swMu.Lock()
	defer a.swMu.Unlock()
	start := time.Now()
	if err := a.ensurePorts(ctx); err != nil {
		conn.Close()
		return err
	}
	a.mu.Lock()
	old := a.conn
	a.conn = conn
	if a.pl == nil {
		a.pl = pipeline.New(conn, a.pipelineNode(), a.log)
	} else {
		a.pl.SetConn(conn)
		a.pl.SetNode(a.pipelineNode()) // the gateway may have a new port number
	}
	a.pl.SetRedirect(a.pipelineRedirect(), a.redirect.up.Load())
	pods, remotes := a.pipelineStateLocked()
	a.pl.SetState(pods, remotes)
	a.mu.Unlock()
	if a.services != nil {
		// Take first: a restarted agent's tracker has its input but no
		// Take yet, and a Sync without the Services would delete their
		// flows and groups until serviceLoop put them back. (Kubernetes:
		// the informers may not have synced yet; then the same gap.)
		a.services.Take()
		a.pl.SetServices(a.services.Services())
		a.syncNodePorts() // that Take's NodePorts, which serviceLoop will not see
	}
	a.syncPolicies()
	if old != nil {
		old.Close()
	}
	st, err := a.pl.Sync(ctx)
	if err != nil {
		conn.Close()
		return fmt.Errorf("sync: %w", err)
	}
	if err := a.publishAll(); err != nil {
		conn.Close()
		return fmt.Errorf("direct forward: %w", err)
	}
	a.mu.Lock()
	a.ready = true
	a.downReason, a.lostReason = "", ""
	a.lastSync, a.lastSyncAt, a.lastSyncDur = st, time.Now(), time.Since(start)
	markNode := a.cfg.Kube != nil && !a.networkMarked
	a.networkMarked = true
	a.mu.Unlock()
	if markNode {
		// The node's pod network works from here on: the scheduler may
		// place pods (NetworkUnavailable=False), once per agent run.
		go func() {
			if err := a.cfg.Kube.MarkNetworkAvailable(ctx); err != nil && ctx.Err() == nil {
				a.log.Error("node condition", "err", err)
			}
		}()
	}
	a.log.Info("switch synced", "added", st.Added, "deleted", st.Deleted, "kept", st.Kept, "pods", len(pods), "remotes", len(remotes), "took", time.Since(start))
	return nil
}

// ensurePorts makes the switch's ports what the agent expects: the
// gateway, every remote node's tunnel endpoint, every pod's host end. A
// port a previous run added keeps its number (its flows name it).
func (a *Agent) ensurePorts(ctx context.Context) error {
	have, err := a.listPorts(ctx)
	if err != nil {
		return err
	}
	byName := map[string]ctlproto.PortInfo{}
	for _, p := range have {
		byName[p.Name] = p
	}
	gwName := a.gw.PortName
	gwPort := byName[gwName].OFPort
	if gwPort == 0 {
		if gwPort, err = a.addPort(ctx, ctlproto.Request{Cmd: "port-add", Name: gwName, Kind: "internal"}); err != nil {
			return fmt.Errorf("gateway port: %w", err)
		}
	}
	var proxyPort uint32
	if a.redirect.link.PortName != "" {
		if proxyPort = byName[a.redirect.link.PortName].OFPort; proxyPort == 0 {
			if proxyPort, err = a.addPort(ctx, ctlproto.Request{Cmd: "port-add", Name: a.redirect.link.PortName, Kind: "internal"}); err != nil {
				return fmt.Errorf("proxy port: %w", err)
			}
		}
	}
	a.mu.Lock()
	a.gwPort = gwPort
	a.redirect.port = proxyPort
	remotes := make([]*remote, 0, len(a.remotes))
	for _, r := range a.remotes {
		remotes = append(remotes, r)
	}
	pods := make([]*podRecord, 0, len(a.pods))
	for _, p := range a.pods {
		pods = append(pods, p)
	}
	a.mu.Unlock()
	for _, r := range remotes {
		if err := a.ensureEndpoint(ctx, r, byName); err != nil {
			return err
		}
	}
	for _, p := range pods {
		no := a.podPort(p)
		if no == 0 {
			continue // its ADD did not get that far
		}
		if err := a.attachVF(p); err != nil {
			a.podLog(p).Error("re-attach the pod's VF", "err", err)
			continue
		}
		if q, ok := byName[a.portName(p)]; ok {
			if q.OFPort != no {
				a.podLog(p).Warn("pod port renumbered by the switch", "was", no, "now", q.OFPort)
				a.setPodPort(p, q.OFPort)
			}
			continue
		}
		exists, err := a.podNode().HostExists(p.Host)
		if err != nil || !exists {
			continue // gone: GC will release it
		}
		no, err = a.addPort(ctx, ctlproto.Request{Cmd: "port-add", Name: a.portName(p), Kind: a.portKind(), OFPort: no})
		if err != nil {
			no, err = a.addPort(ctx, ctlproto.Request{Cmd: "port-add", Name: a.portName(p), Kind: a.portKind()})
		}
		if err != nil {
			a.podLog(p).Error("re-attach pod port", "err", err)
			continue
		}
		a.setPodPort(p, no)
	}
	return nil
}

func (a *Agent) listPorts(ctx context.Context) ([]ctlproto.PortInfo, error) {
	resp, err := a.call(ctx, ctlproto.Request{Cmd: "list-ports"})
	if err != nil {
		return nil, err
	}
	var ps []ctlproto.PortInfo
	if err := jsonUnmarshal(resp.Data, &ps); err != nil {
		return nil, fmt.Errorf("list-ports: %w", err)
	}
	return ps, nil
}

func (a *Agent) addPort(ctx context.Context, req ctlproto.Request) (uint32, error) {
	resp, err := a.call(ctx, req)
	if err != nil {
		return 0, err
	}
	var d struct {
		OFPort uint32 `json:"ofport"`
	}
	if err := jsonUnmarshal(resp.Data, &d); err != nil || d.OFPort == 0 {
		return 0, fmt.Errorf("port-add %s: no port number in %s", req.Name, resp.Data)
	}
	return d.OFPort, nil
}

// connected returns the pipeline when the switch is synced.
func (a *Agent) connected() (*pipeline.Pipeline, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.ready || a.pl == nil {
		if a.downReason != "" {
			return nil, fmt.Errorf("%w (%s): %s", errSwitchDown, a.sw, a.downReason)
		}
		return nil, fmt.Errorf("%w (%s)", errSwitchDown, a.sw)
	}
	return a.pl, nil
}

// keyedMutex serializes work on one key (a container) without holding up
// the others.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

func (k *keyedMutex) lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyLock{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

// macString formats a MAC for records.
func macString(m net.HardwareAddr) string { return m.String() }
