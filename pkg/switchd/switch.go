// Package switchd is nagare-switch: an OpenFlow 1.3 switch whose slow path
// fills the kernel fast path (pkg/datapath).
//
// One OpenFlow message's way: a connection (conn.go) frames and decodes it,
// handle.go dispatches it; table changes go to the pipeline (pkg/ofproto),
// which bumps its version; the revalidator (revalidator.go) notices and
// re-translates every cached megaflow, fixing or deleting those that
// disagree. A BARRIER is answered only once that has happened.
//
// One packet's way through the slow path: the fast path misses and hands it
// up (upcall.go); the pipeline translates its key into datapath actions and
// a wildcard mask; the megaflow is installed and the packet executed through
// the same actions; controllers get their PACKET_INs.
package switchd

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nagare-net/nagare/pkg/controlnet"
	"github.com/nagare-net/nagare/pkg/datapath"
	"github.com/nagare-net/nagare/pkg/ofproto"
	"github.com/nagare-net/nagare/pkg/openflow"
	"github.com/nagare-net/nagare/pkg/steering"
	"github.com/nagare-net/nagare/pkg/unixsock"
)

// Fail modes: what the switch does while no controller is connected.
const (
	FailSecure     = "secure"     // keep the flows, drop misses
	FailStandalone = "standalone" // behave as a learning switch
)

// Config is nagare-switch's configuration (its flags).
type Config struct {
	Bridge     string
	DatapathID uint64 // 0: derived from the bridge name
	// Listen adds listeners; the management socket (MgmtSocket) is always
	// there, whatever Listen holds, as Open vSwitch keeps its .mgmt.
	Listen      []Target
	Controllers []Target
	FailMode    string        // FailSecure (default) or FailStandalone
	RunDir      string        // default /var/run/nagare
	NetNS       string        // path of the network namespace the ports live in
	PinRoot     string        // BPF filesystem directory; default datapath.DefaultPinRoot
	MaxFlows    int           // fast-path capacity (datapath.DefaultMaxFlows)
	FlowLimit   int           // cached flows the slow path installs at most; default 200000
	IdleTimeout time.Duration // a cached flow unused this long is removed; default 10s
	// NeighborIdleTimeout is IdleTimeout for cached ARP flows; default
	// 5 min (never shorter than IdleTimeout). Hosts re-resolve a
	// neighbour they use every 15-45 s (Linux's reachable time), with the
	// same few packets each time: kept, those flows cost a handful of
	// entries per talking pair, no upcall per refresh, and a stopped
	// switch's fast path still answers them, so pods that keep talking
	// keep their neighbours (revalidator.go).
	NeighborIdleTimeout time.Duration
	// EMCInsertInvProb: one megaflow hit in N enters the exact-match
	// cache (datapath.DefaultEMCInsertInvProb, as Open vSwitch).
	EMCInsertInvProb uint32
	// MACTableSize and MACPerPort bound NORMAL's learning table (ofproto
	// defaults: 8192, a quarter of the table per port).
	MACTableSize, MACPerPort int
	// RevalidateInterval is the period of the revalidator's rounds; default 500ms.
	RevalidateInterval time.Duration
	ProbeInterval      time.Duration // OpenFlow echo keepalive; default 5s
	// DisableMegaflows installs every flow with an exact mask (one cached
	// flow per packet key), like Open vSwitch's upcall/disable-megaflows:
	// for flow-setup benchmarks and debugging, never for production.
	DisableMegaflows bool
	Logger           *slog.Logger
	// PKIDir holds the control network's certificates for pssl listeners
	// (pkg/controlnet); default <RunDir>/pki, made on first start.
	PKIDir string
	// SteerDevices get VS-extend's receive steering (pkg/steering): an
	// XDP program that picks, per flow, the CPU that runs the rest of
	// the receive path. Empty: no steering.
	SteerDevices []string
	Steering     steering.Config
	SteerPeriod  time.Duration // Core Table load sampling period; default 1s
	// KernelTunnel leaves every tunnel's VXLAN to its device, so that the
	// node's IP stack (netfilter included) sees the tunnel's packets.
	// Otherwise the fast path encapsulates and decapsulates itself
	// (datapath.NativeTunnel) for tunnel endpoints that name their local
	// address, on the device that holds it (docs/switch.md, "Tunnels").
	KernelTunnel bool
	// MetricsAddr serves Prometheus /metrics over TCP ("127.0.0.1:9475");
	// empty: none.
	MetricsAddr string
	// FastpathCapacity is the most flows offloaded at once (a NIC or DPU
	// flow table); 0 is unlimited. The rest are onloaded (placement.go).
	FastpathCapacity int
	// PlacementHysteresis and PlacementMinPPS: an onloaded flow takes an
	// offloaded one's place only when its rate is higher by this fraction
	// and by this many packets per second (placement.Policy).
	PlacementHysteresis float64
	PlacementMinPPS     float64
	// OnloadPath: how onloaded packets reach the switch (xdp.go): ring
	// (the default: pods keep TSO, GSO packets travel whole), auto (AF_XDP
	// where it can be set up: more packets per second, but XDP takes TSO
	// from the pods), or afxdp (auto, and AF_XDP required).
	OnloadPath datapath.OnloadPath

	// Per-port budgets (docs/switch.md, "Per-port budgets"); 0 takes the
	// default, a negative value removes the limit. UpcallRate: misses one
	// port may send to the slow path per second, enforced in the fast path
	// before the upcall ring (default 2000); UpcallBurst: at once (1000).
	// PortFlowLimit: cached flows entering on one port (half FlowLimit).
	// PortMaskLimit: masks one port's flows may use before it may add no
	// new mask to the datapath (16 of datapath.MaxMasks).
	UpcallRate, UpcallBurst      int
	PortFlowLimit, PortMaskLimit int
	// PacketInRate and PacketInBurst limit the PACKET_INs sent to each
	// connection (Open vSwitch's controller-rate-limit and
	// controller-burst-limit); 0 takes the default (1000/s, 250),
	// negative removes the limit.
	PacketInRate, PacketInBurst int
	// ConntrackMax is the connections the fast path's tracker holds
	// (default datapath.DefaultConntrackMax); ConntrackPortMax the live
	// connections one ingress port may commit (0: a quarter of the
	// table, negative: no limit). Both are per-port budgets in the same
	// sense as the above: a pod opening connections without end fails
	// its own new connections, not another pod's.
	ConntrackMax, ConntrackPortMax int
	// ConntrackTimeouts: zero fields take nf_conntrack's defaults.
	ConntrackTimeouts datapath.ConntrackTimeouts
}

// Per-port budget defaults.
const (
	DefaultUpcallRate    = 2000
	DefaultUpcallBurst   = 1000
	DefaultPortMaskLimit = datapath.MaxMasks / 4
	DefaultPacketInRate  = 1000
	DefaultPacketInBurst = 250
)

// budget resolves a budget setting: 0 is def, negative is no limit (0).
func budget(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

func (c *Config) setDefaults() error {
	if c.Bridge == "" {
		return errors.New("switchd: a bridge name is required")
	}
	if c.RunDir == "" {
		c.RunDir = "/var/run/nagare"
	}
	abs, err := filepath.Abs(c.RunDir)
	if err != nil {
		return err
	}
	c.RunDir = abs
	if c.PKIDir == "" {
		c.PKIDir = filepath.Join(c.RunDir, "pki")
	}
	if c.FailMode == "" {
		c.FailMode = FailSecure
	}
	if c.FailMode != FailSecure && c.FailMode != FailStandalone {
		return fmt.Errorf("switchd: fail mode %q: want secure or standalone", c.FailMode)
	}
	if c.DatapathID == 0 {
		h := fnv.New64a()
		h.Write([]byte(c.Bridge))
		// A locally administered MAC in the low 48 bits, as OVS derives it.
		c.DatapathID = (h.Sum64() & 0x0000feffffffffff) | 0x0000020000000000
	}
	if c.FlowLimit == 0 {
		c.FlowLimit = 200000
	}
	if c.MaxFlows == 0 {
		c.MaxFlows = datapath.DefaultMaxFlows
	}
	if c.FlowLimit > c.MaxFlows {
		c.FlowLimit = c.MaxFlows
	}
	c.UpcallRate = budget(c.UpcallRate, DefaultUpcallRate)
	c.UpcallBurst = budget(c.UpcallBurst, DefaultUpcallBurst)
	c.PortFlowLimit = budget(c.PortFlowLimit, c.FlowLimit/2)
	c.PortMaskLimit = budget(c.PortMaskLimit, DefaultPortMaskLimit)
	c.PacketInRate = budget(c.PacketInRate, DefaultPacketInRate)
	c.PacketInBurst = budget(c.PacketInBurst, DefaultPacketInBurst)
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 10 * time.Second
	}
	if c.NeighborIdleTimeout == 0 {
		c.NeighborIdleTimeout = 5 * time.Minute
	}
	c.NeighborIdleTimeout = max(c.NeighborIdleTimeout, c.IdleTimeout)
	if c.RevalidateInterval == 0 {
		c.RevalidateInterval = 500 * time.Millisecond
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = 5 * time.Second
	}
	if c.SteerPeriod == 0 {
		c.SteerPeriod = time.Second
	}
	if c.OnloadPath == "" {
		c.OnloadPath = datapath.OnloadPathRing
	}
	if _, err := datapath.ParseOnloadPath(string(c.OnloadPath)); err != nil {
		return err
	}
	if c.OnloadPath == datapath.OnloadPathAFXDP {
		// Asked for by name: no AF_XDP in the kernel is an error, not a
		// fallback (auto falls back; a port AF_XDP refuses falls back
		// either way).
		if err := datapath.ProbeAFXDP(); err != nil {
			return fmt.Errorf("switchd: --onload-path afxdp: %w", err)
		}
	}
	if c.FastpathCapacity < 0 || c.PlacementHysteresis < 0 || c.PlacementMinPPS < 0 {
		return errors.New("switchd: fast-path capacity and placement thresholds must not be negative")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return nil
}

// MgmtSocket is the default OpenFlow management socket,
// <RunDir>/<Bridge>.mgmt, as Open vSwitch names it.
func (c *Config) MgmtSocket() string { return filepath.Join(c.RunDir, c.Bridge+".mgmt") }

// LockFile is the bridge's lock, <RunDir>/<Bridge>.lock: the running
// switch holds an flock on it (its pid is written inside, for messages).
func (c *Config) LockFile() string { return filepath.Join(c.RunDir, c.Bridge+".lock") }

// listenTargets is the management socket, then the extra listeners (one
// that names the management socket again is the same listener: binding it
// twice would unlink the first).
func (c *Config) listenTargets() []Target {
	mgmt := Target{Passive: true, Network: "unix", Address: c.MgmtSocket()}
	ts := []Target{mgmt}
	for _, t := range c.Listen {
		if abs, err := filepath.Abs(t.Address); err == nil && t.Network == "unix" && abs == mgmt.Address {
			continue
		}
		ts = append(ts, t)
	}
	return ts
}

// instanceName names the fast-path instance: the bridge plus a digest of
// the run directory, so switches with the same bridge name in different
// run directories (one per node namespace) never share pins.
func (c *Config) instanceName() string {
	sum := sha256.Sum256([]byte(c.RunDir))
	return fmt.Sprintf("%s-%x", c.Bridge, sum[:4])
}

// Switch is a running nagare-switch.
type Switch struct {
	cfg Config
	log *slog.Logger
	dp  *datapath.Datapath
	pl  *ofproto.Pipeline

	xid     atomic.Uint32
	connSeq atomic.Uint64
	start   time.Time

	connMu      sync.Mutex
	conns       map[*ofConn]struct{}
	controllers int    // connected controllers (for the fail mode)
	generation  uint64 // last master generation id
	genSet      bool

	configMu    sync.Mutex
	swFlags     uint16
	missSendLen uint16

	numTables   int
	ports       *portTable
	cache       *flowCache
	stats       slowStats
	refused     portCounts // slow-path refusals by port and reason
	rv          *revalidator
	place       *placements
	actionPacer *upcallPacer                      // controller-action upcalls: what the controllers accept, fed back to the fast path
	missPacer   *upcallPacer                      // misses: what a port's cache budget accepts, fed back likewise
	onloader    atomic.Pointer[datapath.Onloader] // set once the onload loop runs
	metricsAddr atomic.Pointer[string]            // where /metrics is served (MetricsAddr, port resolved)

	lock      *os.File // flock on cfg.LockFile(), held until Close or Destroy
	listeners []net.Listener
	rawMu     sync.Mutex
	raw       map[net.Conn]struct{} // every open connection, closed on shutdown
	wg        sync.WaitGroup
	cancel    context.CancelFunc

	steer *steering.Uplink // VS-extend; nil without SteerDevices
	rps   string           // RPS on the steered device: on, off, unknown
}

// ErrBridgeBusy is wrapped by New's error when another switch (another
// process, or another Switch in this one) holds the bridge's run directory.
var ErrBridgeBusy = errors.New("switchd: bridge in use by another nagare-switch")

// lockBridge takes the bridge's lock, an flock on <RunDir>/<Bridge>.lock,
// or says who holds it. Two switches on one bridge would share the fast
// path's pins and hand out each other's flow ids; the lock refuses the
// second (and --destroy under a live one). An flock belongs to the open
// file, so the kernel drops it when the holder exits, even by SIGKILL:
// a switch restarted after a crash is not refused, and there is no stale
// lock to clean up. The file is never removed (unlinking a lock file
// lets two processes lock two different inodes).
//
// The lock is per run directory, not on the pin directory: the instance's
// pins are named from the run directory (instanceName), so one run
// directory and bridge own exactly one instance and this lock covers it;
// and being taken by inode, it also holds when the run directory is
// reached by two spellings (/var/run/nagare and /run/nagare). What it
// cannot see is two run directories whose switches attach the same
// devices of one namespace: those are two instances.
func lockBridge(cfg *Config) (*os.File, error) {
	path := cfg.LockFile()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("switchd: lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("switchd: lock %s: %w", path, err)
		}
		// The holder writes its pid right after locking: it may not be
		// there yet.
		holder := ""
		if b, err := os.ReadFile(path); err == nil {
			if pid := strings.TrimSpace(string(b)); pid != "" {
				holder = ", pid " + pid
			}
		}
		return nil, fmt.Errorf("%w: bridge %s, run dir %s%s (it holds %s)", ErrBridgeBusy, cfg.Bridge, cfg.RunDir, holder, path)
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(fmt.Sprintf("%d\n", os.Getpid())), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("switchd: lock %s: %w", path, err)
	}
	return f, nil
}

// New opens (or re-opens, after a restart) the switch's fast path and its
// state. Run starts serving.
func New(cfg Config) (*Switch, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.RunDir, 0o755); err != nil {
		return nil, err
	}
	// The lock comes before the fast path is opened: Open already rebuilds
	// state from the pins and swaps programs, which must not happen under
	// a running switch.
	lock, err := lockBridge(&cfg)
	if err != nil {
		return nil, err
	}
	dp, err := datapath.Open(datapath.Config{
		Name: cfg.instanceName(), PinRoot: cfg.PinRoot, MaxFlows: cfg.MaxFlows, NetNS: cfg.NetNS,
		EMCInsertInvProb: cfg.EMCInsertInvProb,
		UpcallRate:       uint32(cfg.UpcallRate), UpcallBurst: uint32(cfg.UpcallBurst),
		PortFlowLimit: cfg.PortFlowLimit, PortMaskLimit: cfg.PortMaskLimit,
		ConntrackMax: cfg.ConntrackMax, ConntrackPortMax: cfg.ConntrackPortMax, ConntrackTimeouts: cfg.ConntrackTimeouts,
	})
	if err != nil {
		lock.Close()
		return nil, err
	}
	s := &Switch{
		cfg:         cfg,
		log:         cfg.Logger.With("bridge", cfg.Bridge),
		dp:          dp,
		lock:        lock,
		pl:          ofproto.New(ofproto.Config{MACTableSize: cfg.MACTableSize, MACPerPort: cfg.MACPerPort}),
		start:       time.Now(),
		conns:       map[*ofConn]struct{}{},
		raw:         map[net.Conn]struct{}{},
		missSendLen: 128,
	}
	if m := dp.Migration(); m != "" {
		// Pins of another build (other limits or layout): their ports,
		// connections and cached flows were carried over (datapath,
		// migrate.go).
		s.log.Info("fast path migrated", "migration", m)
	}
	if err := s.openSteering(); err != nil {
		s.Close()
		return nil, err
	}
	s.numTables = len(s.pl.TableStats())
	s.ports = newPortTable(s)
	s.cache = newFlowCache()
	s.place = newPlacements(&s.cfg)
	s.actionPacer = newUpcallPacer(s.cfg.UpcallRate, s.dp.SetActionUpcallRate)
	s.missPacer = newUpcallPacer(s.cfg.UpcallRate, s.dp.SetMissUpcallRate)
	s.rv = newRevalidator(s)
	if err := s.ports.restore(); err != nil {
		s.Close()
		return nil, err
	}
	// Flows a previous process cached stay in the fast path; without the
	// pipeline that made them (OpenFlow tables are not persistent) they are
	// kept until the controller re-programs the switch, then revalidated.
	if err := s.cache.adopt(dp); err != nil {
		s.Close()
		return nil, err
	}
	s.updateFailMode()
	return s, nil
}

// Datapath is the switch's fast path.
func (s *Switch) Datapath() *datapath.Datapath { return s.dp }

// Config returns the effective configuration.
func (s *Switch) Config() Config { return s.cfg }

func (s *Switch) nextXid() uint32 { return s.xid.Add(1) }

// Run serves OpenFlow and the control protocol until ctx ends, then closes
// connections. The fast path keeps forwarding after Run returns.
func (s *Switch) Run(ctx context.Context) error {
	ctx, s.cancel = context.WithCancel(ctx)
	for _, t := range s.cfg.listenTargets() {
		l, err := s.listen(t)
		if err != nil {
			s.stopListeners()
			return err
		}
		s.listeners = append(s.listeners, l)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.acceptLoop(ctx, l, t)
		}()
		s.log.Info("listening", "target", t.String())
	}
	for _, t := range s.cfg.Controllers {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.dialLoop(ctx, t)
		}()
	}
	if err := s.serveMetrics(ctx); err != nil {
		s.stopListeners()
		return err
	}
	s.wg.Add(5)
	go func() { defer s.wg.Done(); s.runSteering(ctx) }()
	go func() { defer s.wg.Done(); s.upcallLoop(ctx) }()
	go func() { defer s.wg.Done(); s.onloadLoop(ctx) }()
	go func() { defer s.wg.Done(); s.rv.run(ctx) }()
	go func() { defer s.wg.Done(); s.ports.watch(ctx) }()
	<-ctx.Done()
	s.stopListeners()
	s.rawMu.Lock()
	for c := range s.raw {
		c.Close()
	}
	s.raw = nil
	s.rawMu.Unlock()
	s.wg.Wait()
	return nil
}

// track registers an open connection so that shutdown closes it, also
// mid-handshake; it reports false (and closes c) once shutdown began.
func (s *Switch) track(c net.Conn) bool {
	s.rawMu.Lock()
	defer s.rawMu.Unlock()
	if s.raw == nil {
		c.Close()
		return false
	}
	s.raw[c] = struct{}{}
	return true
}

func (s *Switch) untrack(c net.Conn) {
	s.rawMu.Lock()
	defer s.rawMu.Unlock()
	delete(s.raw, c)
}

// Close releases the fast path handles (pins stay: forwarding goes on)
// and the bridge's lock.
func (s *Switch) Close() error {
	if s.steer != nil {
		s.steer.Close()
	}
	err := s.dp.Close()
	s.unlock()
	return err
}

// unlock releases the bridge's lock (once).
func (s *Switch) unlock() {
	if s.lock != nil {
		s.lock.Close()
		s.lock = nil
	}
}

func (s *Switch) stopListeners() {
	for _, l := range s.listeners {
		l.Close()
	}
}

func (s *Switch) listen(t Target) (net.Listener, error) {
	if t.Network == "unix" {
		_ = os.Remove(t.Address) // a stale socket from a previous run
		// Local only, owner only, from its creation on: whoever can
		// write this socket controls the switch.
		l, err := unixsock.Listen(t.Address, 0o600, 0o755)
		if err != nil {
			return nil, fmt.Errorf("listen %s: %w", t, err)
		}
		return l, nil
	}
	if t.TLS {
		// The DPU's control network: in the ports' namespace (the DPU
		// domain), bound to the control address's device, mutual TLS.
		host, _, _ := net.SplitHostPort(t.Address)
		pki, err := controlnet.EnsurePKI(s.cfg.PKIDir, controlnet.RoleSwitch, []net.IP{net.ParseIP(host)})
		if err != nil {
			return nil, fmt.Errorf("listen %s: %w", t, err)
		}
		return controlnet.Listen(s.cfg.NetNS, t.Address, pki.ServerConfig())
	}
	l, err := net.Listen("tcp", t.Address)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", t, err)
	}
	return l, nil
}

func (s *Switch) acceptLoop(ctx context.Context, l net.Listener, t Target) {
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				s.log.Warn("accept", "target", t.String(), "err", err)
			}
			return
		}
		if !s.track(c) {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.untrack(c)
			s.serveAccepted(c, t)
		}()
	}
}

// dialLoop keeps a connection to an active controller, reconnecting with
// exponential backoff (1 s doubling to 8 s).
func (s *Switch) dialLoop(ctx context.Context, t Target) {
	backoff := time.Second
	for ctx.Err() == nil {
		var d net.Dialer
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := d.DialContext(dctx, t.Network, t.Address)
		cancel()
		if err == nil && s.track(c) {
			backoff = time.Second
			oc := s.newConn(c, true)
			oc.dialled = true
			s.log.Info("connected to controller", "target", t.String())
			oc.serve(newReader(c))
			s.untrack(c)
			s.log.Info("controller connection closed", "target", t.String())
		} else if err != nil {
			s.log.Debug("controller unreachable", "target", t.String(), "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 8*time.Second)
	}
}

func (s *Switch) connUp(oc *ofConn) {
	s.connMu.Lock()
	s.conns[oc] = struct{}{}
	if oc.controller {
		s.controllers++
	}
	s.connMu.Unlock()
	s.updateFailMode()
	if oc.controller {
		// A new controller may take more. Not for every connection:
		// ovs-ofctl on the management socket would lift the limits each
		// time it runs (the doubling finds a connection that takes more
		// within about a second anyway).
		s.actionPacer.expire(time.Now(), true)
	}
	if s.steer != nil && oc.dialled {
		// VS-extend: the host report follows the handshake with a
		// controller the switch dialled. Connections to the switch's own
		// sockets (ovs-ofctl, tools) ask for it: ovs-ofctl takes any
		// message it does not expect as a bad reply and fails.
		hr := s.hostReport()
		hr.Xid = s.nextXid()
		_ = oc.send(hr)
	}
}

func (s *Switch) connDown(oc *ofConn) {
	s.connMu.Lock()
	delete(s.conns, oc)
	if oc.controller {
		s.controllers--
	}
	s.connMu.Unlock()
	s.updateFailMode()
}

// updateFailMode applies the fail mode: in standalone mode, a switch
// without a connected controller falls back to NORMAL forwarding.
func (s *Switch) updateFailMode() {
	s.connMu.Lock()
	none := s.controllers == 0
	s.connMu.Unlock()
	s.pl.SetFallbackNormal(s.cfg.FailMode == FailStandalone && none)
}

// broadcast sends an asynchronous message to every connection that wants
// it (role and async configuration).
func (s *Switch) broadcast(m openflow.Message, reason uint8) {
	s.connMu.Lock()
	targets := make([]*ofConn, 0, len(s.conns))
	for c := range s.conns {
		if c.wants(m.MsgType(), reason) {
			targets = append(targets, c)
		}
	}
	s.connMu.Unlock()
	if len(targets) == 0 {
		return
	}
	m.Hdr().Xid = 0
	b, err := openflow.Marshal(m)
	if err != nil {
		s.log.Warn("encoding async message", "err", err)
		return
	}
	for _, c := range targets {
		c.sendAsync(b) // PACKET_INs go through sendPacketIn
	}
}

// datapathIDBytes renders the datapath id the way ovs-ofctl prints it.
func datapathIDBytes(id uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, id)
	return b
}

// AddPort attaches a port (see PortSpec).
func (s *Switch) AddPort(spec PortSpec) (uint32, error) {
	p, err := s.ports.Add(spec)
	if err != nil {
		return 0, err
	}
	return p.no, nil
}

// EnsurePort attaches a port unless a port of that device already exists
// (a restarted switch has its ports back from the fast path's pins); a
// different number for an existing port is an error.
func (s *Switch) EnsurePort(spec PortSpec) (uint32, error) {
	for _, p := range s.ports.list() {
		if p.name == spec.Name && p.tunnel == nil && spec.Tunnel == nil {
			if spec.OFPort != 0 && spec.OFPort != p.no {
				return 0, fmt.Errorf("port %s exists with number %d, not %d", spec.Name, p.no, spec.OFPort)
			}
			return p.no, nil
		}
	}
	return s.AddPort(spec)
}

// DelPort removes a port by name or number.
func (s *Switch) DelPort(name string) error { return s.ports.Del(name) }

// Destroy removes the fast path: ports detached, flows and pins gone; the
// bridge's lock is released.
func (s *Switch) Destroy() error {
	if s.steer != nil {
		s.steer.Close()
	}
	err := s.dp.Destroy()
	s.unlock()
	return err
}
