package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/nagare-net/nagare/pkg/agent/cniserver"
	"github.com/nagare-net/nagare/pkg/agent/ipam"
	"github.com/nagare-net/nagare/pkg/agent/pipeline"
	"github.com/nagare-net/nagare/pkg/agent/podnet"
	"github.com/nagare-net/nagare/pkg/ctlproto"
)

// CNI error codes the agent returns beyond the spec's own (100+ are the
// plugin's to define, https://www.cni.dev/docs/spec/#error).
const (
	// ErrCodePoolExhausted: the node's pod subnet has no free address.
	ErrCodePoolExhausted = 100
)

// podRecord is what the agent keeps of one attachment, stored with its
// IPAM allocation (ipam.Allocation.Attachment) so a restarted agent knows
// every pod without asking anyone.
type podRecord struct {
	Key         string     `json:"-"` // containerID/ifName
	ContainerID string     `json:"containerID"`
	IfName      string     `json:"ifName"`
	Pod         string     `json:"pod,omitempty"`    // namespace/name
	PodUID      string     `json:"podUID,omitempty"` // the pod object's UID (GC: a pod re-created under its name is another pod)
	Netns       string     `json:"netns"`
	Host        string     `json:"host"`
	OFPort      uint32     `json:"ofport"`
	MAC         string     `json:"mac"`
	IP          netip.Addr `json:"-"`
	Created     time.Time  `json:"-"`
}

func podKey(containerID, ifName string) string { return containerID + "/" + ifName }

// loadPods reads every allocation and its record.
func (a *Agent) loadPods() error {
	all, err := a.ipam.List()
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, al := range all {
		p := &podRecord{ContainerID: al.ContainerID, IfName: al.IfName, Pod: al.Pod}
		if len(al.Attachment) > 0 {
			if err := json.Unmarshal(al.Attachment, p); err != nil {
				a.log.Warn("unreadable pod record; keeping the allocation for GC", "container", al.ContainerID, "err", err)
			}
		}
		p.Key, p.IP, p.Created = podKey(al.ContainerID, al.IfName), al.IP, al.Created
		if p.Host == "" {
			p.Host = podnet.HostIfName(al.ContainerID, al.IfName)
		}
		a.pods[p.Key] = p
	}
	a.log.Info("pods from the IPAM database", "pods", len(all))
	return nil
}

func (a *Agent) podNode() podNetwork {
	if a.podNet != nil {
		return a.podNet
	}
	return podnet.Node{Netns: a.cfg.NetNS}
}

func (a *Agent) podLog(p *podRecord) *slog.Logger {
	return a.log.With("pod", p.Pod, "container", shortID(p.ContainerID))
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// podPort is p's switch port number (0: not attached yet). The number
// changes under a.mu (ADD, a reconnection's renumbering): read it so.
func (a *Agent) podPort(p *podRecord) uint32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return p.OFPort
}

func (a *Agent) setPodPort(p *podRecord, no uint32) {
	a.mu.Lock()
	p.OFPort = no
	a.mu.Unlock()
	if err := a.saveRecord(p); err != nil {
		a.podLog(p).Error("save pod record", "err", err)
	}
}

// saveRecord stores p with its allocation: without it, a restarted agent
// would know the address but not the port and delete the pod's flows.
func (a *Agent) saveRecord(p *podRecord) error {
	a.mu.Lock()
	b, err := json.Marshal(p)
	a.mu.Unlock()
	if err != nil {
		return err
	}
	if err := a.ipam.SetAttachment(p.ContainerID, p.IfName, b); err != nil {
		return fmt.Errorf("save the pod's record: %w", err)
	}
	return nil
}

func (p *podRecord) pipelinePod() (pipeline.Pod, bool) {
	mac, err := net.ParseMAC(p.MAC)
	if err != nil || p.OFPort == 0 {
		return pipeline.Pod{}, false
	}
	return pipeline.Pod{Key: p.Key, Name: p.Pod, Port: p.OFPort, MAC: mac, IP: p.IP}, true
}

// pipelineStateLocked is every attached pod and every remote node with an
// endpoint, as the pipeline wants them.
func (a *Agent) pipelineStateLocked() ([]pipeline.Pod, []pipeline.RemoteNode) {
	var pods []pipeline.Pod
	for _, p := range a.pods {
		if pp, ok := p.pipelinePod(); ok {
			pp.NoRedirect = a.optedOut(context.Background(), p.Pod, 0)
			pods = append(pods, pp)
		}
	}
	var rs []pipeline.RemoteNode
	for _, r := range a.remotes {
		if r.port != 0 {
			rs = append(rs, r.pipelineNode())
		}
	}
	return pods, rs
}

// cniError turns agent errors into the CNI error the runtime sees.
func cniError(err error) error {
	var te *types.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &te):
		return te
	case errors.Is(err, errSwitchDown):
		return types.NewError(types.ErrTryAgainLater, "nagare: "+err.Error(), "retry when the switch is back")
	case errors.Is(err, ipam.ErrExhausted):
		return types.NewError(ErrCodePoolExhausted, "nagare: "+err.Error(), "")
	case errors.Is(err, podnet.ErrNoNetns):
		return types.NewError(types.ErrInvalidNetNS, "nagare: "+err.Error(), "")
	}
	return types.NewError(types.ErrInternal, "nagare: "+err.Error(), "")
}

// Add attaches a pod: address (persisted before anything else), veth,
// switch port, flows.
func (a *Agent) Add(ctx context.Context, req *cniserver.Request) (types.Result, error) {
	res, err := a.add(ctx, req)
	return res, cniError(err)
}

func (a *Agent) add(ctx context.Context, req *cniserver.Request) (types.Result, error) {
	conf, err := cniserver.ParseConf(req)
	if err != nil {
		return nil, err
	}
	if err := podnet.Exists(req.Netns); err != nil {
		return nil, err
	}
	pl, err := a.connected()
	if err != nil {
		return nil, err
	}
	key := podKey(req.ContainerID, req.IfName)
	unlock := a.locks.lock(key)
	defer unlock()
	podName := cniserver.PodName(req.Args)
	log := a.log.With("pod", podName, "container", shortID(req.ContainerID))

	al, fresh, err := a.ipam.Allocate(req.ContainerID, req.IfName, podName)
	if err != nil {
		return nil, err
	}
	rec := &podRecord{Key: key, ContainerID: req.ContainerID, IfName: req.IfName, Pod: podName, PodUID: cniserver.PodUID(req.Args), Netns: req.Netns,
		Host: podnet.HostIfName(req.ContainerID, req.IfName), MAC: podnet.MACFor(al.IP).String(), IP: al.IP, Created: al.Created}
	a.mu.Lock()
	if old, ok := a.pods[key]; ok && old.OFPort != 0 {
		rec.OFPort = old.OFPort
	}
	a.pods[key] = rec
	a.mu.Unlock()
	undo := func(cause error) error {
		if !fresh {
			return cause // a repeated ADD: leave the first one's work to DEL
		}
		a.detach(context.WithoutCancel(ctx), rec, log)
		return cause
	}
	pod := a.podSpec(rec)
	att, err := a.podNode().Setup(pod)
	if err != nil {
		return nil, undo(fmt.Errorf("attach: %w", err))
	}
	if err := a.attachVF(rec); err != nil {
		return nil, undo(fmt.Errorf("VF link: %w", err))
	}
	if a.podPort(rec) == 0 {
		no, err := a.ensurePodPort(ctx, a.portName(rec))
		if err != nil {
			return nil, undo(fmt.Errorf("switch port: %w", err))
		}
		a.mu.Lock()
		rec.OFPort = no
		a.mu.Unlock()
	}
	if err := a.saveRecord(rec); err != nil {
		return nil, undo(err)
	}
	optOut := a.optedOut(ctx, rec.Pod, 2*time.Second)
	a.mu.Lock()
	pp, _ := rec.pipelinePod()
	a.mu.Unlock()
	pp.NoRedirect = optOut
	a.enforceBeforeForwarding(ctx, rec, log)
	a.swMu.Lock()
	err = pl.AddPod(ctx, pp)
	a.swMu.Unlock()
	if err != nil {
		return nil, undo(fmt.Errorf("flows: %w", err))
	}
	// Direct forward only once the pipeline forwards to the pod.
	if err := a.publish(rec); err != nil {
		return nil, undo(fmt.Errorf("direct forward: %w", err))
	}
	a.met.pods.Set(float64(a.podCount()))
	a.podsChanged()
	log.Info("pod attached", "ip", al.IP, "mac", rec.MAC, "port", pp.Port, "host", rec.Host, "repeat", !fresh)

	podIf := 1
	result := &current.Result{
		CNIVersion: current.ImplementedSpecVersion,
		Interfaces: []*current.Interface{
			{Name: rec.Host, Mac: "", Sandbox: ""},
			{Name: req.IfName, Mac: att.MAC.String(), Sandbox: req.Netns},
		},
		IPs: []*current.IPConfig{{
			Interface: &podIf,
			Address:   net.IPNet{IP: al.IP.AsSlice(), Mask: net.CIDRMask(a.node.PodCIDR.Bits(), 32)},
			Gateway:   a.node.Gateway().AsSlice(),
		}},
		Routes: []*types.Route{{Dst: net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}, GW: a.node.Gateway().AsSlice()}},
	}
	return result.GetAsVersion(conf.CNIVersion)
}

// ensurePodPort attaches a pod's host end to the switch, or finds it
// attached by an ADD that died before it could record the number (the
// rare case: it costs a listing of every port, so it comes second).
func (a *Agent) ensurePodPort(ctx context.Context, host string) (uint32, error) {
	a.swMu.Lock()
	defer a.swMu.Unlock()
	no, err := a.addPort(ctx, ctlproto.Request{Cmd: "port-add", Name: host, Kind: a.portKind()})
	if err == nil || !strings.Contains(err.Error(), "port "+host+" exists") {
		return no, err
	}
	ports, lerr := a.listPorts(ctx)
	if lerr != nil {
		return 0, errors.Join(err, lerr)
	}
	for _, p := range ports {
		if p.Name == host {
			return p.OFPort, nil
		}
	}
	return 0, err
}

func (a *Agent) podSpec(rec *podRecord) podnet.Pod {
	return podnet.Pod{Netns: rec.Netns, IfName: rec.IfName, Host: rec.Host,
		Addr: netip.PrefixFrom(rec.IP, a.node.PodCIDR.Bits()), GW: a.node.Gateway(), MTU: a.mtu()}
}

func (a *Agent) podCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.pods)
}

// detach removes everything a pod's ADD made, in reverse: flows, switch
// port, veth, allocation. Each step tolerates an absent object, so DEL is
// idempotent and also cleans up after an ADD that died half-way.
func (a *Agent) detach(ctx context.Context, rec *podRecord, log *slog.Logger) error {
	var errs []error
	if pl, err := a.connected(); err == nil {
		// Out of the direct-forward table before the pipeline lets go.
		if err := a.withdraw(rec); err != nil {
			errs = append(errs, fmt.Errorf("direct forward: %w", err))
		}
		a.swMu.Lock()
		if err := pl.DelPod(ctx, rec.Key); err != nil {
			errs = append(errs, fmt.Errorf("flows: %w", err))
		}
		if _, err := a.call(ctx, ctlproto.Request{Cmd: "port-del", Name: a.portName(rec)}); err != nil && !isNoPort(err) {
			errs = append(errs, fmt.Errorf("switch port: %w", err))
		}
		a.swMu.Unlock()
		if err := a.detachVF(rec); err != nil {
			errs = append(errs, fmt.Errorf("VF link: %w", err))
		}
	} else {
		// Without the switch the flows and port cannot go now: keep the
		// record so that a later DEL or GC finishes the job (the
		// runtime retries a failed DEL).
		return err
	}
	if err := a.podNode().Teardown(rec.Host); err != nil {
		errs = append(errs, fmt.Errorf("veth: %w", err))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if _, err := a.ipam.Release(rec.ContainerID, rec.IfName); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	a.mu.Lock()
	delete(a.pods, rec.Key)
	n := len(a.pods)
	a.mu.Unlock()
	a.met.pods.Set(float64(n))
	if a.policies != nil && a.cfg.Kube != nil {
		ns, name, _ := strings.Cut(rec.Pod, "/")
		a.policies.detach(ns, name)
	}
	a.podsChanged()
	log.Info("pod detached", "ip", rec.IP, "host", rec.Host)
	return nil
}

func isNoPort(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no port ")
}

// Del detaches a pod. Idempotent: an unknown container is success.
func (a *Agent) Del(ctx context.Context, req *cniserver.Request) error {
	key := podKey(req.ContainerID, req.IfName)
	unlock := a.locks.lock(key)
	defer unlock()
	a.mu.Lock()
	rec := a.pods[key]
	a.mu.Unlock()
	if rec == nil {
		// Nothing recorded; a device may still exist if an ADD died
		// before its allocation was written.
		host := podnet.HostIfName(req.ContainerID, req.IfName)
		return cniError(a.podNode().Teardown(host))
	}
	return cniError(a.detach(ctx, rec, a.podLog(rec)))
}

// Check verifies the pod's interface, address, route and MTU, its switch
// port and that its allocation is recorded.
func (a *Agent) Check(ctx context.Context, req *cniserver.Request) error {
	if _, err := cniserver.ParseConf(req); err != nil {
		return cniError(err)
	}
	key := podKey(req.ContainerID, req.IfName)
	a.mu.Lock()
	rec := a.pods[key]
	a.mu.Unlock()
	if rec == nil {
		return types.NewError(types.ErrUnknownContainer, "nagare: no attachment for container "+req.ContainerID+" interface "+req.IfName, "")
	}
	if err := a.podNode().Check(a.podSpec(rec)); err != nil {
		return cniError(fmt.Errorf("pod %s: %w", rec.Pod, err))
	}
	ports, err := a.listPorts(ctx)
	if err != nil {
		return cniError(fmt.Errorf("%w: %v", errSwitchDown, err))
	}
	no := a.podPort(rec)
	for _, p := range ports {
		if p.Name == a.portName(rec) && p.OFPort == no {
			return nil
		}
	}
	return cniError(fmt.Errorf("pod %s: its port %s is not switch port %d", rec.Pod, a.portName(rec), no))
}

// GC releases every attachment not in the runtime's list of valid ones.
func (a *Agent) GC(ctx context.Context, req *cniserver.Request) error {
	conf, err := cniserver.ParseConf(req)
	if err != nil {
		return cniError(err)
	}
	valid := map[string]bool{}
	for _, v := range conf.ValidAttachments {
		valid[podKey(v.ContainerID, v.IfName)] = true
	}
	n, err := a.collect(ctx, "cni-gc", func(p *podRecord) bool { return valid[p.Key] })
	a.log.Info("CNI GC", "valid", len(valid), "released", n)
	return cniError(err)
}

// Status is nil while the agent can serve ADDs: the switch is synced and
// the pool has room.
func (a *Agent) Status(ctx context.Context, req *cniserver.Request) error {
	if _, err := a.connected(); err != nil {
		return types.NewError(50, "nagare: "+err.Error(), "") // the plugin is not available
	}
	if used, total := a.ipam.Stats(); used >= total {
		return types.NewError(51, fmt.Sprintf("nagare: the node's pod subnet %s is full (%d addresses)", a.node.PodCIDR, total), "")
	}
	return nil
}
