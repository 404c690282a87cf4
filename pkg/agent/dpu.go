package agent

// DPU mode (docs/dpu.md): the switch runs in a DPU domain and the agent
// reaches it over the control network; pods attach through VF links whose
// representors are the switch's ports; direct forward keeps intra-node
// packets on the host. Everything here is a no-op in host mode, so the
// CNI, the pipeline and nagarectl are the same in both.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nagare-net/nagare/pkg/agent/vf"
	"github.com/nagare-net/nagare/pkg/controlnet"
	"github.com/nagare-net/nagare/pkg/ctlproto"
)

// Modes.
const (
	ModeHost = "host"
	ModeDPU  = "dpu"
)

// DPUConfig is DPU mode's part of the configuration.
type DPUConfig struct {
	// Netns is the DPU domain's namespace (path). The node's devices
	// (gateway, tunnel, masquerade, routes) are made there, as the DPU
	// owns the uplink; and the pods' representors appear there.
	Netns string
	// Switch is the DPU's switch on the control network: ssl:IP:PORT.
	Switch string
	// PKIDir holds the control network's certificates (default
	// <StateDir>/pki; made on first start when empty).
	PKIDir string
	// DirectForward turns direct forward on (nagare-agent's default in DPU mode).
	DirectForward bool
	// LeaseInterval and LeaseTimeout: the agent holds a lease on the DPU
	// side, renewed by an OpenFlow echo every interval; without an answer
	// for LeaseTimeout the DPU is down (defaults 500ms, 2s).
	LeaseInterval, LeaseTimeout time.Duration
	// CallTimeout bounds one control call over the control network (10s).
	CallTimeout time.Duration
	// PinDir is the BPF filesystem directory of the VF maps (default
	// /sys/fs/bpf/nagare/agent-<node>).
	PinDir string
	// CPUs is the DPU domain's CPU list: packets crossing into it are
	// processed there (and back on the other CPUs). "" = no steering.
	CPUs string
}

func (c *Config) setDPUDefaults() error {
	switch c.Mode {
	case "", ModeHost:
		c.Mode = ModeHost
		return nil
	case ModeDPU:
	default:
		return fmt.Errorf("agent: mode %q: want host or dpu", c.Mode)
	}
	d := &c.DPU
	if d.Netns == "" {
		return errors.New("agent: DPU mode needs the DPU domain's namespace")
	}
	if d.Switch == "" {
		return errors.New("agent: DPU mode needs the DPU switch's control address (ssl:IP:PORT)")
	}
	if d.PKIDir == "" {
		d.PKIDir = filepath.Join(c.StateDir, "pki")
	}
	if d.LeaseInterval == 0 {
		d.LeaseInterval = 500 * time.Millisecond
	}
	if d.LeaseTimeout == 0 {
		d.LeaseTimeout = 2 * time.Second
	}
	if d.PinDir == "" {
		d.PinDir = filepath.Join("/sys/fs/bpf/nagare", "agent-"+c.NodeName)
	}
	if d.CallTimeout == 0 {
		d.CallTimeout = 10 * time.Second
	}
	return nil
}

// openSwitchEndpoint says where the switch is and, in DPU mode, loads the
// certificates and the VF programs.
func (a *Agent) openSwitchEndpoint() error {
	// Control calls go over connections kept open between calls (in DPU
	// mode a TLS handshake each otherwise).
	a.ctl = &ctlproto.Client{Dial: func(ctx context.Context) (net.Conn, error) { return a.sw.Dial(ctx) }}
	if a.cfg.Mode != ModeDPU {
		a.sw = controlnet.Endpoint{Network: "unix", Address: a.cfg.SwitchSocket}
		return nil
	}
	t, err := ctlproto.ParseTarget(a.cfg.DPU.Switch)
	if err != nil || !t.TLS || t.Passive {
		return fmt.Errorf("DPU switch %q: want ssl:IP:PORT", a.cfg.DPU.Switch)
	}
	host, _, _ := net.SplitHostPort(t.Address)
	pki, err := controlnet.EnsurePKI(a.cfg.DPU.PKIDir, controlnet.RoleAgent, nil)
	if err != nil {
		return fmt.Errorf("control network: %w", err)
	}
	a.sw = controlnet.Endpoint{Network: "tcp", Address: t.Address, Netns: a.cfg.NetNS, TLS: pki.ClientConfig(net.ParseIP(host))}
	a.vf, err = vf.Open(vf.Config{HostNetns: a.cfg.NetNS, DPUNetns: a.cfg.DPU.Netns,
		PinDir: a.cfg.DPU.PinDir, DirectForward: a.cfg.DPU.DirectForward,
		DPUCPUs: a.cfg.DPU.CPUs, HostCPUs: otherCPUs(a.cfg.DPU.CPUs)})
	if err != nil {
		return err
	}
	return nil
}

// call runs one control-protocol request on the switch.
func (a *Agent) call(ctx context.Context, req ctlproto.Request) (*ctlproto.Response, error) {
	if a.cfg.Mode == ModeDPU {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.cfg.DPU.CallTimeout)
		defer cancel()
	}
	if a.control != nil {
		return a.control(ctx, req)
	}
	return a.ctl.Call(ctx, req)
}

// nodeNetns is where the node's own devices live: the DPU domain in DPU
// mode (its uplink carries the tunnels and the masquerade), else the node.
func (a *Agent) nodeNetns() string {
	if a.cfg.Mode == ModeDPU {
		return a.cfg.DPU.Netns
	}
	return a.cfg.NetNS
}

// portName is the pod's switch port: its VF's representor in DPU mode,
// else the host end of its veth.
func (a *Agent) portName(p *podRecord) string {
	if a.cfg.Mode == ModeDPU {
		return vf.RepName(p.Host)
	}
	return p.Host
}

func (a *Agent) portKind() string {
	if a.cfg.Mode == ModeDPU {
		return "representor"
	}
	return "pod"
}

func (a *Agent) vfLink(p *podRecord) (vf.Link, error) {
	mac, err := net.ParseMAC(p.MAC)
	if err != nil {
		return vf.Link{}, err
	}
	return vf.Link{Host: p.Host, MAC: mac, IP: p.IP, Net: a.cfg.Cluster.VNI, MTU: a.mtu()}, nil
}

// attachVF makes the pod's crossing into the DPU domain (again, when the
// DPU domain lost it).
func (a *Agent) attachVF(p *podRecord) error {
	if a.vf == nil {
		return nil
	}
	exists, err := a.podNode().HostExists(p.Host)
	if err != nil || !exists {
		return fmt.Errorf("the pod's host end %s is gone", p.Host)
	}
	l, err := a.vfLink(p)
	if err != nil {
		return err
	}
	_, err = a.vf.Attach(l)
	return err
}

func (a *Agent) detachVF(p *podRecord) error {
	if a.vf == nil {
		return nil
	}
	return a.vf.Detach(p.Host)
}

// publish enters the pod into the direct-forward table: its own MAC and
// address on its own network, exactly what the pipeline's spoof guard
// and L2 forwarding let through to it.
func (a *Agent) publish(p *podRecord) error {
	if a.vf == nil {
		return nil
	}
	l, err := a.vfLink(p)
	if err != nil {
		return err
	}
	return a.vf.Publish(l)
}

func (a *Agent) withdraw(p *podRecord) error {
	if a.vf == nil {
		return nil
	}
	l, err := a.vfLink(p)
	if err != nil {
		return err
	}
	return a.vf.Withdraw(l)
}

// publishAll makes the direct-forward table exactly the attached pods
// (after a sync: a restarted agent's table may hold pods deleted while it
// was away).
func (a *Agent) publishAll() error {
	if a.vf == nil {
		return nil
	}
	a.mu.Lock()
	want := map[string]*podRecord{}
	for _, p := range a.pods {
		if p.OFPort != 0 {
			want[strings.ToLower(p.MAC)] = p
		}
	}
	a.mu.Unlock()
	if n, err := a.vf.Reconcile(a.podHosts); err != nil {
		a.log.Warn("VF links of gone pods", "removed", n, "err", err)
	} else if n > 0 {
		a.log.Info("VF links of gone pods removed", "entries", n)
	}
	have, err := a.vf.Table()
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range have {
		if _, ok := want[e.MACString]; !ok {
			errs = append(errs, a.vf.Withdraw(vf.Link{MAC: e.MAC, Net: e.Net}))
		}
	}
	for _, p := range want {
		if err := a.publish(p); err != nil {
			errs = append(errs, fmt.Errorf("pod %s: %w", p.Pod, err))
		}
	}
	return errors.Join(errs...)
}

// podHosts is the host end of every pod the agent knows, attached or
// being attached.
func (a *Agent) podHosts() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.pods))
	for _, p := range a.pods {
		out = append(out, p.Host)
	}
	return out
}

// DPUStatus is DPU mode's part of nagarectl agent.
type DPUStatus struct {
	Switch        string            `json:"switch"`
	Netns         string            `json:"netns"`
	LeaseUntil    time.Time         `json:"leaseUntil,omitempty"`
	Down          string            `json:"down,omitempty"`
	DirectForward bool              `json:"directForward"`
	Table         []vf.Entry        `json:"table"`
	Paths         map[string]uint64 `json:"paths"` // packets per path taken at the VFs
}

func (a *Agent) dpuStatus() *DPUStatus {
	if a.vf == nil {
		return nil
	}
	a.mu.Lock()
	st := &DPUStatus{Switch: a.sw.String(), Netns: a.cfg.DPU.Netns, Down: a.downReason}
	if a.conn != nil && a.ready {
		st.LeaseUntil = a.conn.LeaseUntil()
	}
	a.mu.Unlock()
	st.DirectForward = a.vf.DirectForward()
	st.Table, _ = a.vf.Table()
	st.Paths, _ = a.vf.Counters()
	return st
}

// SetDirectForward turns direct forward on or off at run time.
func (a *Agent) SetDirectForward(on bool) error {
	if a.vf == nil {
		return errors.New("direct forward exists in DPU mode only")
	}
	return a.vf.SetDirectForward(on)
}

// otherCPUs is every CPU of this machine not in list (the host's, when
// list is the DPU's); "" when list is.
func otherCPUs(list string) string {
	return cpusBut(list, runtime.NumCPU())
}

// cpusBut is every CPU of n not in list, as a list; list itself when
// that leaves none (one CPU: host and DPU share it).
func cpusBut(list string, n int) string {
	if list == "" {
		return ""
	}
	taken, err := vf.ParseCPUList(list)
	if err != nil {
		return list // vf.Open reports it
	}
	var out []string
	for c := 0; c < n; c++ {
		if !slices.Contains(taken, c) {
			out = append(out, strconv.Itoa(c))
		}
	}
	if len(out) == 0 {
		return list
	}
	return strings.Join(out, ",")
}
