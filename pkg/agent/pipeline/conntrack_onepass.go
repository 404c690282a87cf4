package pipeline

import (
	"net/netip"
	"sort"

	"github.com/nagare-net/nagare/pkg/agent/proxy"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// One pass for plain pod-to-pod traffic.
//
// Every IPv4 packet goes through the node's tracker (service.go), and in
// general the pipeline needs the tracker's verdict to go on: a new
// connection to a frontend is balanced, policy judges new connections
// only, invalid packets from pods drop. The verdict costs a
// recirculation, a second pass through the fast path for every packet
// (docs/lab.md, "The CNI plane since Services": 511 against 184 ns a
// packet intra-node).
//
// A packet between two addresses of the cluster's pod network that no
// Service names and no NetworkPolicy isolates needs no verdict: ServiceLB
// would not match it, the policy stage would pass it, ConntrackCommit
// would commit it. So ConntrackZone commits it there, in the same pass,
// and routes it:
//
//	ConntrackZone 190  ip, nw_src=A → ct(zone=CtZone, nat, table=ConntrackState)   A tracked as a source
//	              190  ip, nw_dst=A → the same                                       A tracked as a destination
//	              150  ip, nw_src=pods, nw_dst=pods → ct(commit, zone=CtZone, nat), goto L3Forwarding
//	              100  ip → ct(zone=CtZone, nat, table=ConntrackState)   (service.go)
//
// The pod network ("pods") is clusterCIDR, or without it the known nodes'
// pod CIDRs: then the 150 flow is a conjunction, nw_src=<each CIDR> clause
// 1/2, nw_dst=<each CIDR> clause 2/2, so N nodes cost 2N+1 flows.
//
// Tracked (the recirculating walk, as before): every Service endpoint
// (whatever its conditions) as a source, so that its replies to a
// translated connection that the tracker finds invalid are dropped before
// they reach the client untranslated (the client would reset the
// endpoint's connection: kube-proxy drops them too); every frontend
// inside the pod network as a destination; every local pod a policy
// isolates, both ways. A policy is enforced at the isolated pod's node,
// whose switch sees both directions of its connections, so other nodes'
// isolated pods need no flow here. Connections to an endpoint from its
// clients directly may take the one pass one way and the full walk the
// other: both use the same zone, so the tracker sees one connection.
//
// Still committed, with nat: the tracker knows every connection as it did
// (a policy that later isolates a pod finds its connections and cuts the
// ones it denies, networkpolicy_cut.go; a pod that becomes an endpoint
// keeps its connections, now +est), and an established Service
// connection's replies are translated back even from an endpoint that has
// left its Service but still serves (graceful termination): nat restores
// the source, and routing is by the destination, which it leaves alone.
// What the one pass does not do is drop the tracker's invalid packets:
// between two plain pods nothing is translated, so an invalid packet
// reaches its destination as it would over a bare veth.
//
// Not with transparent redirection (proxyredirect.go: it judges every
// pod's new TCP connections in ConntrackState), and not before the policy
// state is known (an agent restarting under policies keeps the
// recirculating walk until it knows which pods they isolate).
//
// Order: tracked flows go in before anything that needs them (a
// Service's endpoint flows, a pod's isolation), and out after it.

const (
	prioTracked = 190 // a Service's or a policy's address: the full walk
	prioOnePass = 150 // pod network to pod network, nothing else: one pass
)

// onePassConjID is the one pass's conjunction id in ConntrackZone (ids
// are per table; the policy tables' are their own).
const onePassConjID = 1

// trackKey is one tracked flow: an address as a source, or as a destination.
type trackKey struct {
	addr netip.Addr
	dst  bool
}

// trackedObject is the cookie of an address's tracked flows.
func trackedObject(a netip.Addr) uint64 { return objectID(cookieTracked, a.String()) }

// podNetLocked is the pod network the one pass covers, nil when the
// pipeline cannot take it now (see above).
func (p *Pipeline) podNetLocked() []netip.Prefix {
	if p.redirect != nil || p.policies == nil {
		return nil
	}
	if c := p.node.ClusterCIDR; c.IsValid() {
		if !c.Addr().Is4() {
			return nil
		}
		return []netip.Prefix{c.Masked()}
	}
	seen := map[netip.Prefix]bool{}
	var out []netip.Prefix
	for _, c := range append([]netip.Prefix{p.node.PodCIDR}, p.remoteCIDRs()...) {
		if c.IsValid() && c.Addr().Is4() && !seen[c.Masked()] {
			seen[c.Masked()] = true
			out = append(out, c.Masked())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func (p *Pipeline) remoteCIDRs() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(p.remotes))
	for _, r := range p.remotes {
		out = append(out, r.PodCIDR)
	}
	return out
}

func inPodNet(net []netip.Prefix, a netip.Addr) bool {
	for _, c := range net {
		if c.Contains(a) {
			return true
		}
	}
	return false
}

// trackedLocked are the flows that send packets through the full walk.
func (p *Pipeline) trackedLocked(net []netip.Prefix) map[trackKey]bool {
	out := map[trackKey]bool{}
	add := func(a netip.Addr, dst bool) {
		if a.Is4() && inPodNet(net, a) {
			out[trackKey{a, dst}] = true
		}
	}
	for _, ps := range p.services {
		for _, port := range ps.svc.Ports {
			for _, f := range port.Frontends {
				add(f.Addr, true)
			}
			for _, eps := range [][]proxy.Endpoint{port.Endpoints, port.InternalEndpoints, port.ExternalEndpoints} {
				for _, e := range eps {
					add(e.Addr, false)
				}
			}
		}
	}
	for a := range p.policies.isolated {
		add(a, false)
		add(a, true)
	}
	return out
}

// trackedFlow sends packets from (or to) k.addr through the full walk.
func trackedFlow(k trackKey) *openflow.FlowMod {
	f := openflow.FieldIPv4Src
	if k.dst {
		f = openflow.FieldIPv4Dst
	}
	return flow(TableConntrackZone, prioTracked, trackedObject(k.addr), match(ethType(etherIPv4), openflow.Addr(f, k.addr)),
		apply(openflow.ActionNXCT{Zone: CtZone, Table: TableConntrackState.ID, Actions: openflow.Actions{openflow.ActionNXNAT{}}}))
}

// onePassFlows commit and route packets between plain pods in one pass:
// one flow over one prefix, a conjunction over several.
func onePassFlows(c uint64, net []netip.Prefix) []*openflow.FlowMod {
	is := []openflow.Instruction{
		apply(openflow.ActionNXCT{Flags: openflow.NXCTFlagCommit, Zone: CtZone, Table: openflow.NXCTRecircNone,
			Actions: openflow.Actions{openflow.ActionNXNAT{}}}),
		gotoTable(TableL3),
	}
	switch len(net) {
	case 0:
		return nil
	case 1:
		return []*openflow.FlowMod{flow(TableConntrackZone, prioOnePass, c,
			match(ethType(etherIPv4), openflow.Prefix(openflow.FieldIPv4Src, net[0]), openflow.Prefix(openflow.FieldIPv4Dst, net[0])), is...)}
	}
	var fs []*openflow.FlowMod
	for _, pfx := range net {
		for i, fld := range []openflow.Field{openflow.FieldIPv4Src, openflow.FieldIPv4Dst} {
			fs = append(fs, flow(TableConntrackZone, prioOnePass, c, match(ethType(etherIPv4), openflow.Prefix(fld, pfx)),
				apply(&openflow.ActionNXConjunction{ID: onePassConjID, Clause: uint8(i + 1), NClauses: 2})))
		}
	}
	return append(fs, flow(TableConntrackZone, prioOnePass, c,
		match(ethType(etherIPv4), openflow.NXUint(openflow.NXMConjID, onePassConjID)), is...))
}

// onePassWantLocked is what the feature wants installed now: the tracked
// flows and the one pass's own flows; nothing when off.
func (p *Pipeline) onePassWantLocked() (map[trackKey]bool, []*openflow.FlowMod) {
	net := p.podNetLocked()
	if net == nil {
		return map[trackKey]bool{}, nil
	}
	return p.trackedLocked(net), onePassFlows(localObject(), net)
}

// onePassFlowsLocked are the feature's desired flows: tracked ones first
// (in address order), then the one pass.
func (p *Pipeline) onePassFlowsLocked() []*openflow.FlowMod {
	tracked, pass := p.onePassWantLocked()
	var fs []*openflow.FlowMod
	for _, k := range sortedTrackKeys(tracked) {
		fs = append(fs, trackedFlow(k))
	}
	return append(fs, pass...)
}

// onePassInstalled records what a Sync installed of the feature.
func (p *Pipeline) onePassInstalled() {
	tracked, pass := p.onePassWantLocked()
	p.tracked, p.onePass = tracked, flowsByID(pass)
}

func flowsByID(fs []*openflow.FlowMod) map[string]*openflow.FlowMod {
	m := make(map[string]*openflow.FlowMod, len(fs))
	for _, f := range fs {
		m[flowID(f.TableID, f.Priority, f.Match)] = f
	}
	return m
}

// onePassChangesLocked are the messages that bring the switch from what
// is installed to what is wanted now: adds (tracked flows first, then the
// one pass's) to send before a change's own flows, deletes (the one
// pass's first, then tracked flows) to send after them.
func (p *Pipeline) onePassChangesLocked() (adds, dels []openflow.Message) {
	want, pass := p.onePassWantLocked()
	for _, k := range sortedTrackKeys(want) {
		if !p.tracked[k] {
			adds = append(adds, trackedFlow(k))
		}
	}
	have, now := p.onePass, flowsByID(pass)
	for _, f := range pass {
		h, ok := have[flowID(f.TableID, f.Priority, f.Match)]
		if !ok || flowValue(h.Cookie, h.Instructions) != flowValue(f.Cookie, f.Instructions) {
			adds = append(adds, f)
		}
	}
	var gone []string
	for id := range have {
		if _, ok := now[id]; !ok {
			gone = append(gone, id)
		}
	}
	sort.Strings(gone)
	for _, id := range gone {
		dels = append(dels, deleteStrict(have[id]))
	}
	for _, k := range sortedTrackKeys(p.tracked) {
		if !want[k] {
			dels = append(dels, deleteStrict(trackedFlow(k)))
		}
	}
	p.tracked, p.onePass = want, now
	return adds, dels
}

func sortedTrackKeys(m map[trackKey]bool) []trackKey {
	out := make([]trackKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].addr != out[j].addr {
			return out[i].addr.Less(out[j].addr)
		}
		return !out[i].dst && out[j].dst
	})
	return out
}
