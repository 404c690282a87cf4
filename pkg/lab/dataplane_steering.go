package lab

import (
	"context"
	"fmt"
	"strings"

	"github.com/nagare-net/nagare/pkg/switchd"
)

// steeringPlane is nagare-switch across nodes with one of seed 001's
// receive models on each node's underlay device (the paper's NIC):
//
//	nagare-switch+default          the receive path stays on the receiving CPU
//	nagare-switch+rps              RPS over every CPU on the underlay device
//	nagare-switch+vs-extend        VS-extend: one choose entry per local pod (inner destination)
//	nagare-switch+vs-extend-prio   the same, the node's first pod a priority flow
//
// A veth receives on the sending CPU, so the receiving CPU is the
// client's: what the models change is where the decapsulation, the
// switch's fast path and the delivery run.
//
// Every model sends with TX checksum offload off on the underlay veths:
// a native-XDP redirect rebuilds the frame without the skb's
// CHECKSUM_PARTIAL state (as a NIC delivers frames, checksums complete),
// so a partial checksum would arrive as a bad one. The models differ in
// the receive side only.
type steeringPlane struct {
	nagareSwitchPlane
	model string
}

// Steering models.
const (
	modelDefault      = "default"
	modelRPS          = "rps"
	modelVSExtend     = "vs-extend"
	modelVSExtendPrio = "vs-extend-prio"
)

func init() {
	for _, m := range []string{modelDefault, modelRPS, modelVSExtend, modelVSExtendPrio} {
		RegisterDataPlane(func() DataPlane { return &steeringPlane{model: m} })
	}
}

func (p *steeringPlane) Name() string { return "nagare-switch+" + p.model }

func (p *steeringPlane) Description() string {
	switch p.model {
	case modelDefault:
		return "nagare-switch across nodes, the receive path on the receiving CPU (seed 001's default model)"
	case modelRPS:
		return "nagare-switch across nodes, RPS on every CPU on the underlay device (seed 001's RSS/RPS model)"
	case modelVSExtend:
		return "nagare-switch across nodes, VS-extend steering (XDP on the underlay device, one choose entry per local pod)"
	}
	return "nagare-switch across nodes, VS-extend steering, the node's first pod a priority flow"
}

func (*steeringPlane) Scope() Scope { return ScopeInterNode }

func (p *steeringPlane) Available() error {
	if err := p.nagareSwitchPlane.Available(); err != nil {
		return err
	}
	if numCPU() < 2 {
		return notAvailable("steering needs at least two CPUs")
	}
	return nil
}

func (p *steeringPlane) Setup(ctx context.Context, t *Topology) error {
	if p.model == modelVSExtend || p.model == modelVSExtendPrio {
		p.extraArgs = func(sw *nagareSwitch) []string { return []string{"--steer-dev", sw.node.UnderlayDev} }
	}
	if err := p.nagareSwitchPlane.Setup(ctx, t); err != nil {
		return err
	}
	for _, sw := range p.sws {
		if _, err := t.Sh.Run(ctx, "ip", "netns", "exec", sw.node.NS, "ethtool", "-K", sw.node.UnderlayDev, "tx", "off"); err != nil {
			return fmt.Errorf("checksum offload off on %s: %w", sw.node.Name, err)
		}
		switch p.model {
		case modelDefault:
			continue
		case modelRPS:
			mask := fmt.Sprintf("%x", uint64(1)<<numCPU()-1)
			if _, err := t.Sh.Run(ctx, "ip", "netns", "exec", sw.node.NS, "sh", "-c",
				fmt.Sprintf("for q in /sys/class/net/%s/queues/rx-*/rps_cpus; do echo %s > $q; done", sw.node.UnderlayDev, mask)); err != nil {
				return fmt.Errorf("rps on %s: %w", sw.node.Name, err)
			}
			continue
		}
		for i, pod := range t.NodePods(sw.node) {
			act := "choose"
			if p.model == modelVSExtendPrio && i == 0 {
				act += ",priority_flow"
			}
			entry := fmt.Sprintf("priority=10,vni=%d,i_dst=%s actions=%s", nagareVNI, pod.IP, act)
			t.Sh.logf("# %s: steering add %s", sw.bridge, entry)
			if _, err := sw.ctl(ctx, switchd.CtlRequest{Cmd: "steering-add", Entry: entry}); err != nil {
				return fmt.Errorf("nagare-switch on %s: %w", sw.node.Name, err)
			}
		}
	}
	return nil
}

// Teardown logs each switch's steering state (entries with the CPUs they
// chose, per-CPU counters) beside its `show`.
func (p *steeringPlane) Teardown(ctx context.Context, t *Topology) error {
	if p.model == modelVSExtend || p.model == modelVSExtendPrio {
		for _, sw := range p.sws {
			if sw.proc == nil || sw.proc.Exited() {
				continue
			}
			if r, err := sw.ctl(ctx, switchd.CtlRequest{Cmd: "steering-show"}); err == nil {
				t.Sh.logf("# %s steering:\n#   %s", sw.bridge, strings.Join(r.Lines, "\n#   "))
			}
		}
	}
	return p.nagareSwitchPlane.Teardown(ctx, t)
}
