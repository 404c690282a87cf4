package agent

import (
	"fmt"
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
// NodePort frontend. LoadBalancer ingress IPs and external IPs are routed
// into the switch each (a /32), where they are frontends themselves.

// nodePortState is what the agent last wrote into the NodePort sets.
type nodePortState struct {
	mu     sync.Mutex
	last   []nodeport.Port
	ok     bool                // the table exists (setupNodePorts succeeded)
	routed map[netip.Addr]bool // LoadBalancer / external IPs routed into the switch
}

// setupNodePorts routes nodeport.Address into the switch and makes the
// table. A restarted agent keeps what its predecessor wrote (read back
// from the kernel) until its first sync: NodePorts stay steered meanwhile.
func (a *Agent) setupNodePorts() error {
	if err := a.net.EnsureServiceRoute(netip.PrefixFrom(nodeport.Address, 32), pipeline.RemoteGatewayMAC); err != nil {
		return err
	}
	old, err := nodeport.Ports(a.nodeNetns())
	if err != nil {
		a.log.Warn("nodeport: reading the previous NodePort sets; starting empty", "err", err)
		old = nil
	}
	if err := nodeport.Ensure(nodeport.Config{NetNS: a.nodeNetns(), Gateway: a.cfg.Gateway}, old); err != nil {
		return err
	}
	a.nodePorts.mu.Lock()
	a.nodePorts.ok, a.nodePorts.last = true, old
	a.nodePorts.routed = map[netip.Addr]bool{}
	for _, p := range old {
		if p.Addr.IsValid() {
			a.nodePorts.routed[p.Addr] = true // its route is there; removed if no Service has it any more
		}
	}
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

// wantNodePorts lists the NodePorts of the programmed Services, and their
// LoadBalancer ingress and external IPs' ports unless an address is one
// of own (the node's stack answers for those: not steered), sorted.
func wantNodePorts(svcs []*proxy.Service, own []netip.Addr) []nodeport.Port {
	seen := map[nodeport.Port]bool{}
	var out []nodeport.Port
	add := func(np nodeport.Port) {
		if !seen[np] {
			seen[np] = true
			out = append(out, np)
		}
	}
	for _, s := range svcs {
		for _, p := range s.Ports {
			if p.NodePort != 0 {
				add(nodeport.Port{Proto: p.Protocol.Number(), Port: p.NodePort, Local: s.ExternalLocal})
			}
			for _, f := range p.Frontends {
				if (f.Kind == proxy.FrontendLoadBalancer || f.Kind == proxy.FrontendExternalIP) && f.Addr.Is4() && !slices.Contains(own, f.Addr) {
					add(nodeport.Port{Addr: f.Addr, Proto: p.Protocol.Number(), Port: f.Port, Local: s.ExternalLocal})
				}
			}
		}
	}
	nodeport.SortPorts(out)
	return out
}

// syncNodePorts writes the NodePort sets if they changed (one atomic
// batch) and routes the LoadBalancer / external IPs into the switch.
func (a *Agent) syncNodePorts() {
	want := wantNodePorts(a.services.Services(), a.nodePortAddresses())
	a.nodePorts.mu.Lock()
	defer a.nodePorts.mu.Unlock()
	if !a.nodePorts.ok || nodeport.Equal(want, a.nodePorts.last) {
		return
	}
	// The sets before the routes: a route without its address in the
	// external set would let Cluster traffic into the switch unmasqueraded.
	if err := nodeport.Update(a.nodeNetns(), want); err != nil {
		a.log.Error("nodeport: updating the NodePort sets", "err", err, "nodeports", len(want))
		return
	}
	a.nodePorts.last = want
	routes := map[netip.Addr]bool{}
	for _, p := range want {
		if p.Addr.IsValid() {
			routes[p.Addr] = true
		}
	}
	for addr := range routes {
		if !a.nodePorts.routed[addr] {
			if err := a.net.EnsureServiceRoute(netip.PrefixFrom(addr, 32), pipeline.RemoteGatewayMAC); err != nil {
				a.log.Error("nodeport: routing a LoadBalancer / external IP into the switch", "addr", addr, "err", err)
				delete(routes, addr)
			}
		}
	}
	for addr := range a.nodePorts.routed {
		if !routes[addr] {
			if err := a.net.DelServiceRoute(netip.PrefixFrom(addr, 32)); err != nil {
				a.log.Error("nodeport: removing a LoadBalancer / external IP's route", "addr", addr, "err", err)
			}
		}
	}
	a.nodePorts.routed = routes
	a.log.Info("nodeport: NodePorts and external addresses steered into the switch", "entries", len(want), "routed", len(routes))
}

// nodePortSummary says what the NodePort table steers ("" before setup).
func (a *Agent) nodePortSummary() string {
	a.nodePorts.mu.Lock()
	defer a.nodePorts.mu.Unlock()
	if !a.nodePorts.ok {
		return ""
	}
	var nodePorts, local int
	for _, p := range a.nodePorts.last {
		if !p.Addr.IsValid() {
			nodePorts++
			if p.Local {
				local++
			}
		}
	}
	return fmt.Sprintf("%d NodePorts (%d Local) via %s, %d LoadBalancer / external IPs routed (table ip %s)",
		nodePorts, local, nodeport.Address, len(a.nodePorts.routed), nodeport.TableName)
}
