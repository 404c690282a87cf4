package lab

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/containernetworking/plugins/pkg/ns"
)

// tcRedirectPlane is the floor of any switch whose program runs at tc
// ingress of a pod's host-side veth, as nagare's and Cilium's (veth
// mode) do: each pair of pods has a veth each into the node namespace,
// and each host end runs a four-instruction tc program that hands every
// frame to the other pod with bpf_redirect_peer (the peer's ifindex is a
// constant in it: no parse, no lookup). Against veth (the two pods on
// one veth pair) it measures what the hop itself costs — the second
// device's receive path and a tc program's run — and so how close to
// the bare veth a switch attached there can come (docs/lab.md).
type tcRedirectPlane struct {
	mu    sync.Mutex // Teardown may run from the cleanup while Setup attaches
	links []link.Link
	progs []*ebpf.Program
}

func init() { RegisterDataPlane(func() DataPlane { return &tcRedirectPlane{} }) }

func (*tcRedirectPlane) Name() string { return "tc-redirect" }

func (*tcRedirectPlane) Description() string {
	return "A ⇄ veth ⇄ tc program (bpf_redirect_peer, nothing else) ⇄ veth ⇄ B: the floor of a switch at tc ingress"
}

func (*tcRedirectPlane) Scope() Scope { return ScopeIntraNode }

// Available: tcx (kernel 6.6) and root are checked where they are needed,
// at Setup, as for the other in-kernel planes.
func (*tcRedirectPlane) Available() error { return nil }

func (pl *tcRedirectPlane) Setup(ctx context.Context, t *Topology) error {
	t.Cleanup.Add("tc-redirect programs", func() error { return pl.Teardown(context.Background(), t) })
	return joinPairs(t, "tc-redirect", func(a, b *Pod) error {
		if a.Node != b.Node {
			return fmt.Errorf("tc-redirect joins pods of one node; %s and %s are on %s and %s", a.Name, b.Name, a.Node.Name, b.Node.Name)
		}
		for _, p := range []*Pod{a, b} {
			if err := t.AddPodLink(ctx, p, PodLinkOptions{}); err != nil {
				return err
			}
		}
		t.Sh.logf("# %s: tc ingress of %s and %s: bpf_redirect_peer to the other (in-process, cilium/ebpf tcx)", a.Node.NS, a.HostIf, b.HostIf)
		return ns.WithNetNSPath(netnsPath(a.Node.NS), func(ns.NetNS) error { return pl.attach(a.HostIf, b.HostIf) })
	})
}

// attach attaches a program to each of the two devices that redirects
// into the other's peer; its thread is in their namespace.
func (pl *tcRedirectPlane) attach(devA, devB string) error {
	ia, err := net.InterfaceByName(devA)
	if err != nil {
		return err
	}
	ib, err := net.InterfaceByName(devB)
	if err != nil {
		return err
	}
	for _, d := range [][2]*net.Interface{{ia, ib}, {ib, ia}} {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:    "lab_tc_redirect",
			Type:    ebpf.SchedCLS,
			License: "GPL",
			Instructions: asm.Instructions{
				asm.Mov.Imm(asm.R1, int32(d[1].Index)),
				asm.Mov.Imm(asm.R2, 0),
				asm.FnRedirectPeer.Call(),
				asm.Return(),
			},
		})
		if err != nil {
			return fmt.Errorf("tc-redirect program: %w", err)
		}
		pl.mu.Lock()
		pl.progs = append(pl.progs, prog)
		pl.mu.Unlock()
		l, err := link.AttachTCX(link.TCXOptions{Program: prog, Attach: ebpf.AttachTCXIngress, Interface: d[0].Index})
		if err != nil {
			return fmt.Errorf("tcx ingress of %s: %w", d[0].Name, err)
		}
		pl.mu.Lock()
		pl.links = append(pl.links, l)
		pl.mu.Unlock()
	}
	return nil
}

// Teardown detaches and unloads the programs (closing the links is all
// it takes; the devices go with the namespaces).
func (pl *tcRedirectPlane) Teardown(context.Context, *Topology) error {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for _, l := range pl.links {
		l.Close()
	}
	for _, p := range pl.progs {
		p.Close()
	}
	pl.links, pl.progs = nil, nil
	return nil
}

func (*tcRedirectPlane) Processes() []int { return nil }
