package agent

import (
	"net/netip"
	"slices"
	"sync"

	"github.com/nagare-net/nagare/pkg/agent/nodeport"
	"github.com/nagare-net/nagare/pkg/agent/pipeline"
	"github.com/nagare-net/nagare/pkg/agent/proxy"
)

// NodePorts. Pods reach any node's address:nodePort through their own
// switch: the proxy is given every node's address, so each is a NodePort
// frontend in ServiceLB. The node's stack owns its addresses, so what
// arrives there (from outside, or from the node itself) is DNATed by the
// agent's nftables table (pkg/agent/nodeport) to nodeport.Address, which
// is routed into the switch like the service CIDR, and is one more
// NodePort frontend.

// nodePortState is what the agent last wrote into the NodePort sets.
type nodePortState struct {
	mu   sync.Mutex
	last []nodeport.Port
	ok   bool // the table exists (setupNodePorts succeeded)
}

// setupNodePorts routes nodeport.Address into the switch and makes the
// table, with no NodePort yet (serviceLoop fills it).
func (a *Agent) setupNodePorts() error {
	if err := a.net.EnsureServiceRoute(netip.PrefixFrom(nodeport.Address, 32), pipeline.RemoteGatewayMAC); err != nil {
		return err
	}
	if err := nodeport.Ensure(nodeport.Config{NetNS: a.nodeNetns(), Gateway: a.cfg.Gateway}, nil); err != nil {
		return err
	}
	a.nodePorts.mu.Lock()
	a.nodePorts.ok, a.nodePorts.last = true, nil
	a.nodePorts.mu.Unlock()
	return nil
}

// nodePortAddresses are the NodePort frontends' addresses: every node's
// (this one's first), and the virtual one the node's stack DNATs to.
func (a *Agent) nodePortAddresses() []netip.Addr {
	var out []netip.Addr
	if a.node.Underlay.IsValid() {
		out = append(out, a.node.Underlay)
	}
	a.mu.Lock()
	for _, r := range a.remotes {
		if r.node.Underlay.IsValid() {
			out = append(out, r.node.Underlay)
		}
	}
	a.mu.Unlock()
	if len(out) > 1 {
		slices.SortFunc(out[1:], netip.Addr.Compare)
	}
	return append(out, nodeport.Address)
}

// wantNodePorts lists the NodePorts of the programmed Services, sorted.
func wantNodePorts(svcs []*proxy.Service) []nodeport.Port {
	seen := map[nodeport.Port]bool{}
	var out []nodeport.Port
	for _, s := range svcs {
		for _, p := range s.Ports {
			if p.NodePort == 0 {
				continue
			}
			np := nodeport.Port{Proto: p.Protocol.Number(), Port: p.NodePort, Local: s.ExternalLocal}
			if !seen[np] {
				seen[np] = true
				out = append(out, np)
			}
		}
	}
	nodeport.SortPorts(out)
	return out
}

// syncNodePorts writes the NodePort sets if they changed (one atomic batch).
func (a *Agent) syncNodePorts() {
	want := wantNodePorts(a.services.Services())
	a.nodePorts.mu.Lock()
	defer a.nodePorts.mu.Unlock()
	if !a.nodePorts.ok || nodeport.Equal(want, a.nodePorts.last) {
		return
	}
	if err := nodeport.Update(a.nodeNetns(), want); err != nil {
		a.log.Error("nodeport: updating the NodePort sets", "err", err, "nodeports", len(want))
		return
	}
	a.nodePorts.last = want
	a.log.Info("nodeport: NodePorts steered into the switch", "nodeports", len(want))
}
