package pipeline

import (
	"net/netip"
	"sort"

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
//	ConntrackZone 190  ip, nw_src=A → ct(zone=CtZone, nat, table=ConntrackState)   for each tracked address A
//	              190  ip, nw_dst=A → the same
//	              150  ip, nw_src=cluster, nw_dst=cluster → ct(commit, zone=CtZone, nat), goto L3Forwarding
//	              100  ip → ct(zone=CtZone, nat, table=ConntrackState)   (service.go)
//
// Tracked addresses (the recirculating walk, as before): every endpoint
// of every Service (whatever its conditions) and every frontend inside
// the pod network, and every local pod a policy isolates in either
// direction. A policy is enforced at the isolated pod's node, whose
// switch sees both directions of its connections, so other nodes'
// isolated pods need no flow here.
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
// pod's new TCP connections in ConntrackState), without a cluster CIDR
// (the known nodes' pod CIDRs would need a flow per pair), and not before
// the policy state is known (an agent restarting under policies keeps the
// recirculating walk until it knows which pods they isolate).
//
// Order: tracked flows go in before anything that needs them (a
// Service's endpoint flows, a pod's isolation), and out after it.

const (
	prioTracked = 190 // a Service's or a policy's address: the full walk
	prioOnePass = 150 // pod network to pod network, nothing else: one pass
)

// cookieTracked marks one tracked address's flows (object: the address).
func trackedObject(a netip.Addr) uint64 { return objectID(cookieTracked, a.String()) }

// onePassCluster is the pod network the one pass covers, and false when
// the pipeline cannot take it now (see above).
func (p *Pipeline) onePassCluster() (netip.Prefix, bool) {
	c := p.node.ClusterCIDR
	return c, c.IsValid() && c.Addr().Is4() && p.redirect == nil && p.policies != nil
}

// trackedAddrsLocked are the addresses whose packets take the full walk.
func (p *Pipeline) trackedAddrsLocked(cluster netip.Prefix) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	add := func(a netip.Addr) {
		if a.Is4() && cluster.Contains(a) {
			out[a] = true
		}
	}
	for _, ps := range p.services {
		for _, port := range ps.svc.Ports {
			for _, f := range port.Frontends {
				add(f.Addr)
			}
			for _, e := range port.Endpoints {
				add(e.Addr)
			}
			for _, e := range port.InternalEndpoints {
				add(e.Addr)
			}
			for _, e := range port.ExternalEndpoints {
				add(e.Addr)
			}
		}
	}
	for a := range p.policies.isolated {
		add(a)
	}
	return out
}

// trackedFlows sends a tracked address's packets, either way, through the full walk.
func trackedFlows(a netip.Addr) []*openflow.FlowMod {
	c := trackedObject(a)
	ct := apply(openflow.ActionNXCT{Zone: CtZone, Table: TableConntrackState.ID, Actions: openflow.Actions{openflow.ActionNXNAT{}}})
	return []*openflow.FlowMod{
		flow(TableConntrackZone, prioTracked, c, match(ethType(etherIPv4), openflow.Addr(openflow.FieldIPv4Src, a)), ct),
		flow(TableConntrackZone, prioTracked, c, match(ethType(etherIPv4), openflow.Addr(openflow.FieldIPv4Dst, a)), ct),
	}
}

// onePassFlow commits and routes packets between plain pods in one pass.
func onePassFlow(c uint64, cluster netip.Prefix) *openflow.FlowMod {
	return flow(TableConntrackZone, prioOnePass, c,
		match(ethType(etherIPv4), openflow.Prefix(openflow.FieldIPv4Src, cluster), openflow.Prefix(openflow.FieldIPv4Dst, cluster)),
		apply(openflow.ActionNXCT{Flags: openflow.NXCTFlagCommit, Zone: CtZone, Table: openflow.NXCTRecircNone,
			Actions: openflow.Actions{openflow.ActionNXNAT{}}}),
		gotoTable(TableL3))
}

// onePassFlowsLocked are the feature's desired flows: tracked addresses
// first (in address order), then the one-pass flow; none when off.
func (p *Pipeline) onePassFlowsLocked() []*openflow.FlowMod {
	cluster, on := p.onePassCluster()
	if !on {
		return nil
	}
	var fs []*openflow.FlowMod
	for _, a := range sortedAddrs(p.trackedAddrsLocked(cluster)) {
		fs = append(fs, trackedFlows(a)...)
	}
	return append(fs, onePassFlow(localObject(), cluster))
}

// onePassInstalled records what Sync installed of the feature.
func (p *Pipeline) onePassInstalled() {
	cluster, on := p.onePassCluster()
	p.onePass = netip.Prefix{}
	p.tracked = map[netip.Addr]bool{}
	if on {
		p.onePass = cluster
		p.tracked = p.trackedAddrsLocked(cluster)
	}
}

// onePassChangesLocked are the messages that bring the switch from what
// is installed to what is wanted now: adds (tracked addresses first, then
// the one-pass flow) to send before a change's own flows, deletes (the
// one-pass flow first, then tracked addresses) to send after them.
func (p *Pipeline) onePassChangesLocked() (adds, dels []openflow.Message) {
	cluster, on := p.onePassCluster()
	want := map[netip.Addr]bool{}
	if on {
		want = p.trackedAddrsLocked(cluster)
	} else {
		cluster = netip.Prefix{}
	}
	if p.onePass != cluster && p.onePass.IsValid() {
		dels = append(dels, deleteStrict(onePassFlow(localObject(), p.onePass)))
	}
	for _, a := range sortedAddrs(want) {
		if !p.tracked[a] {
			for _, f := range trackedFlows(a) {
				adds = append(adds, f)
			}
		}
	}
	for _, a := range sortedAddrs(p.tracked) {
		if !want[a] {
			for _, f := range trackedFlows(a) {
				dels = append(dels, deleteStrict(f))
			}
		}
	}
	if p.onePass != cluster && cluster.IsValid() {
		adds = append(adds, onePassFlow(localObject(), cluster))
	}
	p.onePass, p.tracked = cluster, want
	return adds, dels
}

func sortedAddrs(m map[netip.Addr]bool) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}
