package pipeline

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"sort"

	"github.com/nagare-net/nagare/pkg/agent/proxy"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// Services, in Antrea's AntreaProxy shape (no kube-proxy): every IPv4
// packet goes through the node's connection tracker in one zone, which
// restores an established connection's translation both ways; a new
// connection to a Service frontend is sent to the Service port's select
// group, whose bucket (one per endpoint) loads the endpoint into
// registers and resubmits to EndpointDNAT, which commits the connection
// with DNAT to that endpoint and goes on to the policy stage
// (networkpolicy.go) and L3 forwarding.
//
//	ConntrackZone  ip → ct(zone=CtZone, nat, table=ConntrackState)
//	ConntrackState from a pod, +inv+trk → drop; else → ServiceLB
//	ServiceLB      +new+trk, proto, nw_dst=frontend, tp_dst=port
//	                 → load the port's tag into reg5, group:<port's group>
//	               no endpoint anywhere → controller (the agent rejects: service_reject.go)
//	               else → EgressRule (policy: networkpolicy.go)
//	group          one bucket per endpoint: reg3=IP, reg4[0..15]=port,
//	                 resubmit(,EndpointDNAT)
//	EndpointDNAT   reg5=tag, reg3, reg4[0..15], proto
//	                 → ct(commit, zone=CtZone, nat(dst=IP:port),
//	                      exec(ct_mark[0]=1), table=EgressRule)
//	ConntrackCommit (after policy) other +new+trk-dnat
//	                 → ct(commit, zone=CtZone, nat), goto L3Forwarding (same pass)
//
// Why the endpoint is a table and not the bucket itself: Open vSwitch
// refuses ct in a group bucket (a group has no match to prove the packet
// is IP), so buckets only load registers.
//
// Why reg5 carries the group id (the "tag"): an endpoint can serve two
// Services (or two ports); with the tag in its match, each Service's
// EndpointDNAT flows are its own, and deleting a Service by its cookie
// deletes exactly its flows.
//
// Large Services: an OpenFlow message is at most 64 KiB and a bucket is 80
// bytes, so a port's endpoints are split over child select groups of at
// most maxBucketsPerGroup endpoints, of near-equal size, behind a parent
// select group whose buckets weigh each child by its size (5000 endpoints:
// ten children of 500 behind one parent).
//
// Group ids are stable: an FNV-32 hash of the Service, port, traffic class
// and part, collision-checked against the ids in use (a collision takes
// the next free id), so a restarted agent finds its groups again.

// CtZone is the node's connection-tracking zone (Antrea's).
const CtZone uint16 = 65520

// ctMarkService is the ct_mark bit set on connections DNATed to a Service endpoint.
const ctMarkService = 1

// Registers the Service flows use.
const (
	regEndpointIP   = 3 // the chosen endpoint's IPv4 address
	regEndpointPort = 4 // bits 0..15: its port
	regServiceTag   = 5 // the Service port's group id, so EndpointDNAT flows are per Service
)

// maxBucketsPerGroup is the most endpoints one select group holds (80
// bytes a bucket: 40 KB, well under OpenFlow's 64 KiB message).
const maxBucketsPerGroup = 500

// serviceObject is a Service's cookie (object: namespace/name).
func serviceObject(k proxy.ServiceKey) uint64 { return objectID(cookieService, k.String()) }

// programmedService is what the pipeline installed for one Service.
type programmedService struct {
	svc    *proxy.Service
	flows  []*openflow.FlowMod
	groups []*openflow.GroupMod // children before their parents
	owners []string             // group-id owners allocated for it
	// ids and values are flowID and flowValue of flows ("": not
	// computed yet), kept from the update that programmed them, and dnat
	// finds each endpoint's EndpointDNAT flow: a change of one endpoint
	// in a 5000-endpoint Service builds and encodes one flow, not 5000.
	ids, values []string
	dnat        map[dnatKey]int   // index in flows
	groupValues map[uint32]string // groupValue of groups, by id, once compared
	// groupEps are the endpoints of each endpoint select group, by id: a
	// group whose endpoints did not change is kept, with its encoding.
	groupEps map[uint32][]netip.AddrPort
}

// endpointGroup is the select group id over eps: old's if it had the same
// endpoints there.
func (ps *programmedService) endpointGroup(old *programmedService, id uint32, eps []proxy.Endpoint) *openflow.GroupMod {
	aps := make([]netip.AddrPort, len(eps))
	for i, e := range eps {
		aps[i] = netip.AddrPortFrom(e.Addr, e.Port)
	}
	if ps.groupEps == nil {
		ps.groupEps = map[uint32][]netip.AddrPort{}
	}
	ps.groupEps[id] = aps
	if old != nil && slices.Equal(old.groupEps[id], aps) {
		for _, g := range old.groups {
			if g.GroupID == id {
				if v, ok := old.groupValues[id]; ok {
					if ps.groupValues == nil {
						ps.groupValues = map[uint32]string{}
					}
					ps.groupValues[id] = v
				}
				return g
			}
		}
	}
	return selectGroup(id, endpointBuckets(eps))
}

// groupValue is groupValue of g, one of ps's groups, kept once computed.
func (ps *programmedService) groupValue(g *openflow.GroupMod) string {
	if v, ok := ps.groupValues[g.GroupID]; ok {
		return v
	}
	if ps.groupValues == nil {
		ps.groupValues = map[uint32]string{}
	}
	v := groupValue(g.GroupType, g.Buckets)
	ps.groupValues[g.GroupID] = v
	return v
}

// dnatKey is everything an EndpointDNAT flow depends on besides the
// Service's cookie.
type dnatKey struct {
	proto uint8
	gid   uint32
	ep    netip.AddrPort
}

// keys returns the flowID and flowValue of each of ps's flows.
func (ps *programmedService) keys() ([]string, []string) {
	if len(ps.ids) != len(ps.flows) {
		ps.ids = append(ps.ids, make([]string, len(ps.flows)-len(ps.ids))...)
		ps.values = append(ps.values, make([]string, len(ps.flows)-len(ps.values))...)
	}
	for i, f := range ps.flows {
		if ps.ids[i] == "" {
			ps.ids[i], ps.values[i] = flowID(f.TableID, f.Priority, f.Match), flowValue(f.Cookie, f.Instructions)
		}
	}
	return ps.ids, ps.values
}

// addFlow appends f with its id and value if known.
func (ps *programmedService) addFlow(f *openflow.FlowMod, id, value string) {
	ps.flows = append(ps.flows, f)
	ps.ids = append(ps.ids, id)
	ps.values = append(ps.values, value)
}

// groupIDs allocates stable group ids: id → owner and owner → id.
type groupIDs struct {
	byID    map[uint32]string
	byOwner map[string]uint32
}

func (g *groupIDs) alloc(owner string) uint32 {
	if g.byID == nil {
		g.byID, g.byOwner = map[uint32]string{}, map[string]uint32{}
	}
	if id, ok := g.byOwner[owner]; ok {
		return id
	}
	h := fnv.New32a()
	h.Write([]byte(owner))
	id := h.Sum32()&0x7fffffff | 1 // well below OFPG_MAX, never 0
	for {
		if _, used := g.byID[id]; !used {
			break
		}
		id = (id+1)&0x7fffffff | 1
	}
	g.byID[id], g.byOwner[owner] = owner, id
	return id
}

func (g *groupIDs) release(owner string) {
	if id, ok := g.byOwner[owner]; ok {
		delete(g.byOwner, owner)
		delete(g.byID, id)
	}
}

// ipProto is the IP protocol number of a Service port.
func ipProto(p proxy.Protocol) uint8 {
	switch p {
	case proxy.UDP:
		return 17
	case proxy.SCTP:
		return 132
	}
	return 6
}

func tpDstField(proto uint8) openflow.Field {
	switch proto {
	case 17:
		return openflow.FieldUDPDst
	case 132:
		return openflow.FieldSCTPDst
	}
	return openflow.FieldTCPDst
}

// serviceFlows computes a Service's flows and groups, allocating group ids.
func (p *Pipeline) serviceFlows(s *proxy.Service) *programmedService {
	c := serviceObject(s.Key)
	old := p.services[s.Key] // its EndpointDNAT flows are reused
	ps := &programmedService{svc: s}
	if old != nil {
		ps.dnat = make(map[dnatKey]int, len(old.dnat))
	} else {
		ps.dnat = map[dnatKey]int{}
	}
	for _, port := range s.Ports {
		proto := ipProto(port.Protocol)
		var internalGID uint32 // the ClusterIP frontends' group, once made (service_nodeport.go)
		for _, external := range []bool{false, true} {
			var fes []proxy.Frontend
			for _, f := range port.Frontends {
				if f.Kind.External() == external && f.Addr.Is4() {
					fes = append(fes, f)
				}
			}
			if len(fes) == 0 {
				continue
			}
			if external { // before the verdict: a Local port without local endpoints is where pods need it most
				for _, f := range podShortcuts(c, s, proto, fes, internalGID) {
					ps.addFlow(f, "", "")
				}
			}
			eps, verdict := port.EndpointsFor(fes[0])
			class := "internal"
			if external {
				class = "external"
			}
			owner := fmt.Sprintf("%s/%s/%d/%s", s.Key, port.Protocol, port.Port, class)
			if verdict != proxy.Forward || len(eps) == 0 {
				// Reject (no endpoint anywhere): answered with ICMP port
				// unreachable by the agent (service_reject.go); Drop (Local
				// policy, endpoints only elsewhere): dropped, as kube-proxy.
				for _, f := range fes {
					if verdict == proxy.Drop {
						ps.addFlow(serviceLBDrop(c, proto, f), "", "")
					} else {
						ps.addFlow(serviceLBReject(c, proto, f), "", "")
					}
				}
				continue
			}
			gid := p.groupIDs.alloc(owner)
			ps.owners = append(ps.owners, owner)
			ps.groups = append(ps.groups, p.endpointGroups(ps, old, owner, gid, eps)...)
			for _, f := range fes {
				ps.addFlow(serviceLB(c, proto, f, gid), "", "")
				if s.Affinity.ClientIP {
					ps.addFlow(serviceLBAffinity(c, proto, f, gid), "", "")
				}
			}
			if !external {
				internalGID = gid
			}
			seen := make(map[netip.AddrPort]bool, len(eps))
			for _, e := range eps {
				ap := netip.AddrPortFrom(e.Addr, e.Port)
				if seen[ap] || !e.Addr.Is4() {
					continue
				}
				seen[ap] = true
				k := dnatKey{proto, gid, ap}
				ps.dnat[k] = len(ps.flows)
				// An unchanged endpoint's flow is reused, unless the
				// Service's affinity changed (its flow learns or not).
				if i, ok := old.dnatFlow(k); ok && old.svc.Affinity == s.Affinity {
					ps.addFlow(old.flows[i], old.ids[i], old.values[i])
				} else {
					dnat := endpointDNAT(c, proto, gid, e)
					if s.Affinity.ClientIP {
						withAffinityLearn(dnat, s, proto, gid, e)
					}
					ps.addFlow(dnat, "", "")
				}
				if p.hairpinEndpoint(e) {
					ps.addFlow(endpointDNATHairpin(c, proto, gid, e), "", "") // service_hairpin.go
				}
			}
		}
	}
	return ps
}

// dnatFlow finds the EndpointDNAT flow of k in ps (nil: none).
func (ps *programmedService) dnatFlow(k dnatKey) (int, bool) {
	if ps == nil || len(ps.ids) != len(ps.flows) {
		return 0, false
	}
	i, ok := ps.dnat[k]
	return i, ok
}

// endpointGroups builds the select group gid over eps for ps: one group,
// or children of at most maxBucketsPerGroup behind gid (children first);
// groups whose endpoints are those they had in old are old's.
func (p *Pipeline) endpointGroups(ps, old *programmedService, owner string, gid uint32, eps []proxy.Endpoint) []*openflow.GroupMod {
	var v4 []proxy.Endpoint
	for _, e := range eps {
		if e.Addr.Is4() {
			v4 = append(v4, e)
		}
	}
	if len(v4) <= maxBucketsPerGroup {
		return []*openflow.GroupMod{ps.endpointGroup(old, gid, v4)}
	}
	n := (len(v4) + maxBucketsPerGroup - 1) / maxBucketsPerGroup
	var out []*openflow.GroupMod
	var parent []openflow.Bucket
	for i := 0; i < n; i++ {
		part := v4[i*len(v4)/n : (i+1)*len(v4)/n] // near-equal sizes
		childOwner := fmt.Sprintf("%s#%d", owner, i)
		child := p.groupIDs.alloc(childOwner)
		ps.owners = append(ps.owners, childOwner)
		out = append(out, ps.endpointGroup(old, child, part))
		parent = append(parent, openflow.Bucket{Weight: uint16(len(part)), WatchPort: openflow.PortAny, WatchGroup: openflow.GroupAny,
			Actions: openflow.Actions{openflow.ActionGroup{GroupID: child}}})
	}
	return append(out, selectGroup(gid, parent))
}

func selectGroup(id uint32, bs []openflow.Bucket) *openflow.GroupMod {
	return &openflow.GroupMod{Command: openflow.GroupAdd, GroupType: openflow.GroupTypeSelect, GroupID: id, Buckets: bs}
}

// endpointBuckets are one bucket per endpoint: load it into reg3/reg4, resubmit to EndpointDNAT.
func endpointBuckets(eps []proxy.Endpoint) []openflow.Bucket {
	bs := make([]openflow.Bucket, 0, len(eps))
	for _, e := range eps {
		a := e.Addr.As4()
		bs = append(bs, openflow.Bucket{Weight: 1, WatchPort: openflow.PortAny, WatchGroup: openflow.GroupAny, Actions: openflow.Actions{
			openflow.ActionNXRegLoad{Dst: regField(regEndpointIP, 0, 32), Value: uint64(a[0])<<24 | uint64(a[1])<<16 | uint64(a[2])<<8 | uint64(a[3])},
			openflow.ActionNXRegLoad{Dst: regField(regEndpointPort, 0, 16), Value: uint64(e.Port)},
			openflow.ActionNXResubmit{InPort: openflow.PortInPort, Table: TableEndpointDNAT.ID},
		}})
	}
	return bs
}

func regField(i int, ofs, nbits uint16) openflow.Subfield {
	return openflow.Subfield{Field: openflow.FieldKey{Class: openflow.ClassNXM1, Field: openflow.NXMReg0 + openflow.Field(i)}, Ofs: ofs, NBits: nbits}
}

func ctNew() openflow.OXM {
	return openflow.CtState(openflow.CtStateNew|openflow.CtStateTrk, openflow.CtStateNew|openflow.CtStateTrk)
}

func frontendMatch(proto uint8, f proxy.Frontend) openflow.Match {
	return match(ethType(etherIPv4), openflow.Uint(openflow.FieldIPProto, uint64(proto)),
		openflow.Addr(openflow.FieldIPv4Dst, f.Addr), openflow.Uint(tpDstField(proto), uint64(f.Port)), ctNew())
}

// serviceLB sends a new connection to a frontend to its Service port's group, tagged in reg5.
func serviceLB(c uint64, proto uint8, f proxy.Frontend, gid uint32) *openflow.FlowMod {
	return flow(TableServiceLB, prioSpecific, c, frontendMatch(proto, f),
		apply(openflow.ActionNXRegLoad{Dst: regField(regServiceTag, 0, 32), Value: uint64(gid)}, openflow.ActionGroup{GroupID: gid}))
}

// serviceLBDrop drops new connections to a frontend whose endpoints are all on other nodes under a Local policy (the Drop verdict).
func serviceLBDrop(c uint64, proto uint8, f proxy.Frontend) *openflow.FlowMod {
	return flow(TableServiceLB, prioSpecific, c, frontendMatch(proto, f))
}

// endpointDNAT commits a new connection with DNAT to the endpoint its bucket chose, then routes it.
func endpointDNAT(c uint64, proto uint8, gid uint32, e proxy.Endpoint) *openflow.FlowMod {
	a := e.Addr.As4()
	return flow(TableEndpointDNAT, prioSpecific, c,
		match(ethType(etherIPv4), openflow.Uint(openflow.FieldIPProto, uint64(proto)), openflow.Reg(regServiceTag, gid),
			openflow.Reg(regEndpointIP, uint32(a[0])<<24|uint32(a[1])<<16|uint32(a[2])<<8|uint32(a[3])),
			openflow.RegMasked(regEndpointPort, uint32(e.Port), 0xffff)),
		apply(openflow.ActionNXCT{Flags: openflow.NXCTFlagCommit, Zone: CtZone, Table: TableEgressRule.ID, Actions: openflow.Actions{
			openflow.ActionNXNAT{Flags: openflow.NXNATFlagDst, AddrMin: e.Addr, PortMin: e.Port},
			openflow.ActionNXRegLoad2{Field: openflow.NXUintMasked(openflow.NXMCtMark, ctMarkService, ctMarkService)},
		}}))
}

// conntrackFlows are the node-wide flows of the conntrack stage.
func conntrackFlows(c uint64) []*openflow.FlowMod {
	return []*openflow.FlowMod{
		conntrackZoneIP(c),
		conntrackStateInvalid(c),
		conntrackCommitOthers(c),
	}
}

// conntrackCommitOthers commits every other new connection (pod to pod, to
// the node, from other nodes) that the policy stage allowed, and routes
// it: the tracker then knows its replies (a TCP SYN-ACK of a connection it
// never saw is invalid, and ConntrackState drops invalid packets), as
// Antrea's ConntrackCommit does. A connection policy dropped is never
// committed, so a packet that looks like its reply is not +est.
//
// Not a packet ConntrackZone's nat just translated (+dnat): that is a
// Service connection's later packet before its first reply (a UDP
// client's second datagram, a retransmitted SYN), still +new to the
// tracker, and already committed. Committed again by its translated tuple
// it would be a second connection whose reply tuple is the first's: the
// fast path refuses it and drops the packet (Open vSwitch finds the
// packet's connection from the first ct and commits nothing new). A
// UDP client that sends several datagrams before the first answer (nc
// -u: the conformance spec "same port and different protocols") lost all
// but the first.
//
// With bare nat: the null binding (no translation), unless the connection's
// reply tuple is a Service connection's — the client reached the endpoint
// through the Service and directly from the same port, as a kernel picks
// ports per destination — then the switch moves the client's port
// (docs/conntrack.md), as kube-proxy's netfilter does; without it the SYN
// was dropped (nat-no-port) and the endpoint would have taken it for the
// other connection.
//
// No recirculation after the commit: L3Forwarding and L2Forwarding route
// by the destination, which a bare nat never changes (it moves, at most,
// the client's port), and match no ct field a commit could change here
// (the hairpin flows match ct_mark bits only DNAT commits set), so the
// packet goes on in the same pass, translated by the fast path.
func conntrackCommitOthers(c uint64) *openflow.FlowMod {
	return flow(TableCtCommit, prioKind, c, match(ethType(etherIPv4),
		openflow.CtState(openflow.CtStateNew|openflow.CtStateTrk, openflow.CtStateNew|openflow.CtStateTrk|openflow.CtStateDNAT)),
		apply(openflow.ActionNXCT{Flags: openflow.NXCTFlagCommit, Zone: CtZone, Table: openflow.NXCTRecircNone,
			Actions: openflow.Actions{openflow.ActionNXNAT{}}}),
		gotoTable(TableL3))
}

// conntrackZoneIP sends every IPv4 packet through the node's zone (nat restores established translations).
func conntrackZoneIP(c uint64) *openflow.FlowMod {
	return flow(TableConntrackZone, prioKind, c, match(ethType(etherIPv4)),
		apply(openflow.ActionNXCT{Zone: CtZone, Table: TableConntrackState.ID, Actions: openflow.Actions{openflow.ActionNXNAT{}}}))
}

// conntrackStateInvalid drops packets from pods the tracker found invalid.
//
// Only from pods: the node's and other nodes' packets may belong to
// connections this switch never saw start, because the way out and the
// way back differ (a pod pings another node's address: the request leaves
// through this node's stack and the underlay, the reply comes back from
// that node's stack through both switches; at the other node's switch the
// echo reply, or a TCP SYN-ACK, has no connection and is +inv).
func conntrackStateInvalid(c uint64) *openflow.FlowMod {
	return flow(TableConntrackState, prioDrop, c,
		match(source(metaFromPod), openflow.CtState(openflow.CtStateInv|openflow.CtStateTrk, openflow.CtStateInv|openflow.CtStateTrk)))
}

// StaleEndpoint is an endpoint a UDP Service port no longer uses: its
// connections in the node's zone must be flushed, or a client keeps
// sending to it (DNS through a deleted CoreDNS pod).
type StaleEndpoint struct {
	Zone  uint16
	Proto uint8
	Addr  netip.Addr
	Port  uint16
}

// staleUDP lists the UDP endpoints old used and new does not.
func staleUDP(old, new *proxy.Service) []StaleEndpoint {
	if old == nil {
		return nil
	}
	keep := map[StaleEndpoint]bool{}
	add := func(s *proxy.Service, into func(StaleEndpoint)) {
		if s == nil {
			return
		}
		for _, port := range s.Ports {
			if port.Protocol != proxy.UDP {
				continue
			}
			for _, e := range append(append([]proxy.Endpoint(nil), port.InternalEndpoints...), port.ExternalEndpoints...) {
				into(StaleEndpoint{CtZone, 17, e.Addr, e.Port})
			}
		}
	}
	add(new, func(e StaleEndpoint) { keep[e] = true })
	var out []StaleEndpoint
	seen := map[StaleEndpoint]bool{}
	add(old, func(e StaleEndpoint) {
		if !keep[e] && !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	})
	return out
}

// sortedServiceKeys returns the programmed Services' keys in order.
func (p *Pipeline) sortedServiceKeys() []proxy.ServiceKey {
	keys := make([]proxy.ServiceKey, 0, len(p.services))
	for k := range p.services {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	return keys
}

// SetServices replaces the known Services without touching the switch
// (the agent's full state at a switch (re)connection); Sync applies them.
func (p *Pipeline) SetServices(svcs []*proxy.Service) {
	p.mu.Lock()
	defer p.mu.Unlock()
	want := map[proxy.ServiceKey]*proxy.Service{}
	for _, s := range svcs {
		want[s.Key] = s
	}
	for k, old := range p.services {
		if _, ok := want[k]; !ok {
			p.releaseLocked(old, nil)
			delete(p.services, k)
		}
	}
	for _, k := range sortedKeys(want) {
		old := p.services[k]
		ps := p.serviceFlows(want[k])
		p.releaseLocked(old, ps)
		p.services[k] = ps
	}
}

func sortedKeys(m map[proxy.ServiceKey]*proxy.Service) []proxy.ServiceKey {
	keys := make([]proxy.ServiceKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	return keys
}

// releaseLocked frees the group ids old allocated that now does not use.
func (p *Pipeline) releaseLocked(old, now *programmedService) {
	if old == nil {
		return
	}
	keep := map[string]bool{}
	if now != nil {
		for _, o := range now.owners {
			keep[o] = true
		}
	}
	for _, o := range old.owners {
		if !keep[o] {
			p.groupIDs.release(o)
		}
	}
}

// ServiceResult says what UpdateServices did.
type ServiceResult struct {
	FlowsAdded, FlowsDeleted, GroupsAdded, GroupsModified, GroupsDeleted int
	// StaleUDP are the UDP endpoints no longer used by a Service: the
	// caller flushes their connections (conntrack-flush) so that clients
	// stop sending to them.
	StaleUDP []StaleEndpoint
}

// UpdateServices programs changed Services and removes deleted ones, and
// waits for the switch (one barrier). Per Service, only what changed is
// sent: new or changed flows are added (an add replaces the flow with
// the same match, so there is no moment without one), flows it no longer
// wants are deleted strictly, groups are added, modified in place, or
// deleted after the flows that used them. Established connections do not
// pass ServiceLB or the groups, so a change moves new connections only.
func (p *Pipeline) UpdateServices(ctx context.Context, updated []*proxy.Service, deleted []proxy.ServiceKey) (ServiceResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var res ServiceResult
	var groupAdds, flowDels, flowAdds, groupDels []openflow.Message
	for _, k := range deleted {
		old := p.services[k]
		if old == nil {
			continue
		}
		res.StaleUDP = append(res.StaleUDP, staleUDP(old.svc, nil)...)
		// One delete by cookie over every table: nagare-switch (as Open
		// vSwitch) finds the rules by a cookie index, so the message costs
		// the Service's flows, not the switch's (docs/agent.md, Services).
		flowDels = append(flowDels, &openflow.FlowMod{Command: openflow.FlowDelete, TableID: openflow.TableAll, Cookie: serviceObject(k),
			CookieMask: objectMask, BufferID: openflow.NoBuffer, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny})
		res.FlowsDeleted += len(old.flows)
		for i := len(old.groups) - 1; i >= 0; i-- { // parents first
			groupDels = append(groupDels, &openflow.GroupMod{Command: openflow.GroupDelete, GroupID: old.groups[i].GroupID})
			res.GroupsDeleted++
		}
		p.releaseLocked(old, nil)
		delete(p.services, k)
	}
	for _, s := range updated {
		old := p.services[s.Key]
		now := p.serviceFlows(s)
		oldGroups := map[uint32]*openflow.GroupMod{}
		var oldFlows map[string]string // flowID → flowValue
		if old != nil {
			res.StaleUDP = append(res.StaleUDP, staleUDP(old.svc, s)...)
			for _, g := range old.groups {
				oldGroups[g.GroupID] = g
			}
			ids, values := old.keys()
			oldFlows = make(map[string]string, len(ids))
			for i, id := range ids {
				oldFlows[id] = values[i]
			}
		}
		nowGroups := map[uint32]bool{}
		for _, g := range now.groups {
			nowGroups[g.GroupID] = true
			o, ok := oldGroups[g.GroupID]
			switch {
			case !ok:
				groupAdds = append(groupAdds, g)
				res.GroupsAdded++
			case old.groupValue(o) != now.groupValue(g):
				m := *g
				m.Command = openflow.GroupModify
				groupAdds = append(groupAdds, &m)
				res.GroupsModified++
			}
		}
		ids, values := now.keys()
		nowFlows := make(map[string]bool, len(ids))
		for i, f := range now.flows {
			id := ids[i]
			nowFlows[id] = true
			if v, ok := oldFlows[id]; ok && v == values[i] {
				continue
			}
			flowAdds = append(flowAdds, f)
			res.FlowsAdded++
		}
		if old != nil {
			oldIDs, _ := old.keys()
			for i, f := range old.flows {
				if !nowFlows[oldIDs[i]] {
					flowDels = append(flowDels, deleteStrict(f))
					res.FlowsDeleted++
				}
			}
			for i := len(old.groups) - 1; i >= 0; i-- {
				if id := old.groups[i].GroupID; !nowGroups[id] {
					groupDels = append(groupDels, &openflow.GroupMod{Command: openflow.GroupDelete, GroupID: id})
					res.GroupsDeleted++
				}
			}
		}
		p.releaseLocked(old, now)
		p.services[s.Key] = now
	}
	// Order on the wire: groups exist before the flows that use them;
	// flows go before the groups they used.
	// The one pass's tracked addresses go in first and out last
	// (conntrack_onepass.go).
	opAdds, opDels := p.onePassChangesLocked()
	msgs := append(append(append(append(append(opAdds, groupAdds...), flowDels...), flowAdds...), groupDels...), opDels...)
	return res, p.send(ctx, msgs)
}

// DesiredGroups is every group the pipeline wants, children before parents.
func (p *Pipeline) DesiredGroups() []*openflow.GroupMod {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.desiredGroupsLocked()
}

func (p *Pipeline) desiredGroupsLocked() []*openflow.GroupMod {
	var gs []*openflow.GroupMod
	for _, k := range p.sortedServiceKeys() {
		gs = append(gs, p.services[k].groups...)
	}
	return gs
}

// Services returns the programmed Services' keys, sorted.
func (p *Pipeline) Services() []proxy.ServiceKey {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sortedServiceKeys()
}

// deleteStrict deletes exactly f (its table, priority and match).
func deleteStrict(f *openflow.FlowMod) *openflow.FlowMod {
	return &openflow.FlowMod{Command: openflow.FlowDeleteStrict, TableID: f.TableID, Priority: f.Priority,
		Match: f.Match, BufferID: openflow.NoBuffer, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny}
}
