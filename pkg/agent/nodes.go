package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/nagare-net/nagare/pkg/agent/config"
	"github.com/nagare-net/nagare/pkg/agent/nodenet"
	"github.com/nagare-net/nagare/pkg/agent/pipeline"
	"github.com/nagare-net/nagare/pkg/agent/snat"
	"github.com/nagare-net/nagare/pkg/ctlproto"
)

// remote is another node: its pod subnet is routed into the switch and
// reached through a tunnel endpoint port towards its underlay address.
type remote struct {
	node config.Node
	port uint32 // the switch's endpoint port; 0 until added
}

func (r *remote) pipelineNode() pipeline.RemoteNode {
	return pipeline.RemoteNode{Name: r.node.Name, PodCIDR: r.node.PodCIDR, Underlay: r.node.Underlay, Port: r.port}
}

// endpointName is how the switch names a tunnel endpoint port.
func (a *Agent) endpointName(r *remote) string {
	return fmt.Sprintf("%s-%s", a.cfg.Tunnel, r.node.Underlay)
}

// ensureEndpoint finds or adds r's endpoint port (caller holds swMu).
func (a *Agent) ensureEndpoint(ctx context.Context, r *remote, byName map[string]ctlproto.PortInfo) error {
	if p, ok := byName[a.endpointName(r)]; ok && p.Remote == r.node.Underlay.String() {
		a.mu.Lock()
		r.port = p.OFPort
		a.mu.Unlock()
		return nil
	}
	req := ctlproto.Request{Cmd: "port-add", Name: a.cfg.Tunnel, Remote: r.node.Underlay.String(), Local: a.node.Underlay.String()}
	a.mu.Lock()
	req.OFPort = r.port // keep the number the flows use, after a switch restart
	a.mu.Unlock()
	no, err := a.addPort(ctx, req)
	if err != nil && req.OFPort != 0 {
		req.OFPort = 0
		no, err = a.addPort(ctx, req)
	}
	if err != nil {
		return fmt.Errorf("tunnel endpoint to %s (%s): %w", r.node.Name, r.node.Underlay, err)
	}
	a.mu.Lock()
	r.port = no
	a.mu.Unlock()
	return nil
}

// NodeUpdated adds or changes a remote node: route, endpoint port, flows.
// The agent's own node is ignored (a changed pod CIDR needs a restart).
func (a *Agent) NodeUpdated(n config.Node) {
	if n.Name == a.cfg.NodeName {
		if n.PodCIDR != a.node.PodCIDR {
			a.log.Error("this node's pod CIDR changed; restart the agent (pods keep their addresses until then)", "was", a.node.PodCIDR, "now", n.PodCIDR)
		}
		return
	}
	log := a.log.With("remote", n.Name)
	a.mu.Lock()
	r := a.remotes[n.Name]
	if r != nil && r.node == n {
		a.mu.Unlock()
		return
	}
	changed := r != nil
	overlap := a.overlapLocked(n)
	a.mu.Unlock()
	if overlap != "" {
		// Its routes and flows would take another node's pods (or this
		// one's): refuse it, and take down what it had before.
		msg := fmt.Sprintf("pod CIDR %s overlaps %s; node not used until that changes", n.PodCIDR, overlap)
		log.Error("remote node refused", "podCIDR", n.PodCIDR, "overlaps", overlap)
		if a.cfg.Kube != nil {
			a.cfg.Kube.ReportNodeProblem(n.Name, "PodCIDROverlap", msg)
		}
		if changed {
			a.NodeDeleted(n.Name)
		}
		return
	}
	if changed {
		// Its address or subnet changed: take the old tunnel down first.
		a.NodeDeleted(n.Name)
	}
	a.mu.Lock()
	r = &remote{node: n}
	a.remotes[n.Name] = r
	a.mu.Unlock()
	a.podNetworkChanged(log)
	if err := a.net.EnsureRemote(nodenet.Remote{PodCIDR: n.PodCIDR, Gateway: n.Gateway()}, pipeline.RemoteGatewayMAC); err != nil {
		log.Error("route to remote pods", "err", err)
	}
	a.met.remotes.Set(float64(a.remoteCount()))
	a.nodesChanged()
	// Under swMu a switch (re)connection either has not read the remotes
	// yet (and will add this one) or is done (and we add it here).
	a.swMu.Lock()
	defer a.swMu.Unlock()
	pl, err := a.connected()
	if err != nil {
		log.Info("remote node noted; its tunnel comes with the switch", "underlay", n.Underlay, "podCIDR", n.PodCIDR)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ports, err := a.listPorts(ctx)
	if err == nil {
		byName := map[string]ctlproto.PortInfo{}
		for _, p := range ports {
			byName[p.Name] = p
		}
		err = a.ensureEndpoint(ctx, r, byName)
	}
	if err == nil {
		err = pl.AddRemoteNode(ctx, r.pipelineNode())
	}
	if err != nil {
		log.Error("tunnel to remote node", "err", err)
		return
	}
	log.Info("tunnel to remote node", "underlay", n.Underlay, "podCIDR", n.PodCIDR, "port", r.port)
}

// NodeDeleted removes a remote node's flows, endpoint port and route.
func (a *Agent) NodeDeleted(name string) {
	a.mu.Lock()
	r := a.remotes[name]
	delete(a.remotes, name)
	a.mu.Unlock()
	if r == nil {
		return
	}
	log := a.log.With("remote", name)
	a.swMu.Lock()
	if pl, err := a.connected(); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := pl.DelRemoteNode(ctx, name); err != nil {
			log.Error("remove flows", "err", err)
		}
		if r.port != 0 {
			if _, err := a.call(ctx, ctlproto.Request{Cmd: "port-del", Name: fmt.Sprint(r.port)}); err != nil && !isNoPort(err) {
				log.Error("remove tunnel endpoint", "err", err)
			}
		}
	}
	a.swMu.Unlock()
	a.forgetRemote(r.node, log)
	a.podNetworkChanged(log)
	a.met.remotes.Set(float64(a.remoteCount()))
	a.nodesChanged()
	log.Info("remote node removed")
}

func (a *Agent) forgetRemote(n config.Node, log interface{ Error(string, ...any) }) {
	if err := a.net.DelRemote(nodenet.Remote{PodCIDR: n.PodCIDR, Gateway: n.Gateway()}); err != nil {
		log.Error("remove route to remote pods", "err", err)
	}
}

func (a *Agent) remoteCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.remotes)
}

// podNetworkLocked is the cluster's pod network: the cluster CIDR, or
// without one the union of every known node's pod CIDR, this node's
// first (docs/agent.md). Callers hold a.mu.
func (a *Agent) podNetworkLocked() []netip.Prefix {
	if c := a.cfg.Cluster.ClusterCIDR; c.IsValid() {
		return []netip.Prefix{c}
	}
	out := []netip.Prefix{a.node.PodCIDR}
	for _, r := range a.remotes {
		out = append(out, r.node.PodCIDR)
	}
	slices.SortFunc(out[1:], func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) })
	return out
}

// ensureMasquerade writes the node's masquerade rule for the pod network
// as it is now: without a cluster CIDR it changes as nodes come and go.
func (a *Agent) ensureMasquerade() error {
	a.masqMu.Lock()
	defer a.masqMu.Unlock()
	ext := a.node.ExternalInterface
	if ext == "" {
		ext = a.cfg.Cluster.ExternalInterface
	}
	a.mu.Lock()
	cfg := snat.Config{NetNS: a.nodeNetns(), PodCIDR: a.node.PodCIDR, PodNetwork: a.podNetworkLocked(),
		ExternalInterface: ext, Gateway: a.cfg.Gateway, Tunnel: a.node.Underlay, TunnelPort: a.cfg.Cluster.VXLANPort}
	a.mu.Unlock()
	ensure := snat.Ensure
	if a.masq != nil {
		ensure = a.masq
	}
	if err := ensure(cfg); err != nil {
		return fmt.Errorf("masquerade: %w", err)
	}
	return nil
}

// podNetworkChanged rewrites what follows the pod network when it is the
// known nodes' union (the spoof guard follows by itself: each remote
// node's flows guard its own subnet).
func (a *Agent) podNetworkChanged(log interface{ Error(string, ...any) }) {
	if a.cfg.Cluster.ClusterCIDR.IsValid() {
		return
	}
	if err := a.ensureMasquerade(); err != nil {
		log.Error("pod network changed", "err", err)
	}
}

// overlapLocked says which known pod CIDR n's overlaps ("" none): this
// node's or another remote node's. Callers hold a.mu.
func (a *Agent) overlapLocked(n config.Node) string {
	if n.PodCIDR.Overlaps(a.node.PodCIDR) {
		return fmt.Sprintf("this node's %s", a.node.PodCIDR)
	}
	for name, r := range a.remotes {
		if name != n.Name && n.PodCIDR.Overlaps(r.node.PodCIDR) {
			return fmt.Sprintf("node %s's %s", name, r.node.PodCIDR)
		}
	}
	return ""
}
