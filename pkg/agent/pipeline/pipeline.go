// Package pipeline is the OpenFlow pipeline nagare-agent programs into its
// node's nagare-switch: the tables, in order, here; the flows in one file
// per feature (Antrea's habit), so that a feature is read, and changed, in
// one place:
//
//	pod_connectivity.go  local pods: classify, spoof guard, ARP, routed and switched delivery
//	node.go              the local node: table defaults' owner, the gateway (the node's stack)
//	remote_node.go       other nodes: tunnel endpoints, their spoof guard, routes into the tunnels
//	service.go           Services (ClusterIP and the other frontends): conntrack, select groups, DNAT
//	conntrack_onepass.go plain pod-to-pod traffic: committed and routed without recirculating
//	service_affinity.go  Services' sessionAffinity ClientIP: learned client → endpoint flows
//	networkpolicy.go     NetworkPolicy: egress and ingress rules by conjunction, default deny
//	proxyredirect.go     transparent redirection of pods' selected TCP connections to the node's proxy
//
// cookie.go says which feature and object a flow belongs to; ofconn.go is
// the OpenFlow 1.3 client.
//
// # Rules for adding a table
//
//  1. Declare it in tables below, in packet order, with its stage. Table
//     ids leave gaps of 10 so a table can go between two others without
//     renumbering (renumbering rewrites every flow on every node).
//  2. Give it a default flow (priority 0) in tableDefaults() that says what
//     an unmatched packet does: the next table, or drop. Nothing is left to
//     the switch's table-miss behaviour.
//  3. Put its builders in the file of the feature they serve, each one
//     function with a one-line comment that says what the flow does; give
//     every flow the cookie of its feature and object (cookie.go).
//  4. Match only what the decision needs: the switch caches the fields a
//     translation looked at, and a needless field multiplies cached flows.
//  5. Add its walk to docs/agent-pipeline.md.
package pipeline

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"

	"github.com/nagare-net/nagare/pkg/agent/proxy"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// Table is one pipeline table.
type Table struct {
	ID    uint8
	Name  string
	Stage string
}

// The tables, in the order a packet meets them.
//
//   - Classifier records where a packet came in (pod, gateway, tunnel) in
//     the metadata's low bits for the tables after it; other ports drop.
//   - SpoofGuard passes what a source may send; everything else drops here.
//     IPv6 from pods drops too (nagare gives pods no IPv6 address yet).
//   - ARPResponder delivers each ARP request to its target alone and sends
//     replies to L2; anything not ARP goes on to the conntrack stage.
//   - ConntrackZone sends every IPv4 packet through the node's connection
//     tracker (zone CtZone) with nat, which restores an established
//     connection's translation in both directions, and recirculates to
//     ConntrackState; what is not IPv4 goes on to L3. A packet between
//     two pod addresses that no Service and no policy names is
//     committed and routed in this one pass instead
//     (conntrack_onepass.go).
//   - ConntrackState drops what the tracker found invalid in pods' packets;
//     with transparent redirection it sends pods' selected TCP
//     connections, new and established, to the node's proxy
//     (proxyredirect.go).
//   - SessionAffinity holds the flows the switch learned for Services with
//     sessionAffinity ClientIP (client, frontend → endpoint, with the
//     affinity timeout): a hit loads the endpoint into registers. The
//     ConntrackState default resubmits every packet to it, then to
//     ServiceLB (learned flows cannot goto_table).
//   - ServiceLB sends a new connection to a Service frontend to the
//     Service port's select group (one bucket per endpoint), or straight
//     to EndpointDNAT when SessionAffinity chose the endpoint; everything
//     else goes on to the policy stage.
//   - EndpointDNAT commits the connection with DNAT to the endpoint the
//     bucket loaded into registers, and recirculates to EgressRule; for
//     an affinity Service it first learns the choice into SessionAffinity.
//   - EgressRule passes established and related packets (+est, +rel) past
//     the whole policy stage to L3; a new connection from a local pod
//     that a NetworkPolicy egress rule allows goes on to IngressRule.
//   - EgressDefault drops what no rule allowed from egress-isolated pods.
//   - IngressRule: a new connection to a local pod that an ingress rule
//     allows (or that comes from the node itself) goes on to
//     ConntrackCommit.
//   - IngressDefault drops what no rule allowed to ingress-isolated pods.
//   - ConntrackCommit commits new connections that EndpointDNAT did not
//     (the tracker must know every connection to judge its replies
//     valid), after the policy stage: a connection is committed once, and
//     only when policy allowed it.
//   - L3Forwarding handles routed IPv4: packets to the gateway's MAC (from
//     pods), to RemoteGatewayMAC (from the node, towards other nodes'
//     pods) or from a tunnel. Every routed hop decrements the TTL; what is
//     not routed goes on to L2.
//   - L2Forwarding switches by destination MAC to a pod's port or the
//     gateway; unknown destinations and broadcasts drop: nothing floods.
var (
	TableClassifier     = Table{0, "Classifier", "classify"}        // where did it come from: pod, gateway, tunnel
	TableSpoofGuard     = Table{10, "SpoofGuard", "validate"}       // a pod sends only as itself; a node only its pods
	TableARP            = Table{20, "ARPResponder", "resolve"}      // ARP requests to their target only, never flooded
	TableConntrackZone  = Table{22, "ConntrackZone", "conntrack"}   // ct(zone, nat): established translations restored
	TableConntrackState = Table{24, "ConntrackState", "conntrack"}  // invalid connections drop
	TableAffinity       = Table{25, "SessionAffinity", "service"}   // learned: client, frontend → endpoint (ClientIP affinity)
	TableServiceLB      = Table{26, "ServiceLB", "service"}         // new connections to a frontend → the port's group
	TableEndpointDNAT   = Table{28, "EndpointDNAT", "service"}      // ct(commit, nat(dst=endpoint)) → EgressRule
	TableEgressRule     = Table{30, "EgressRule", "policy"}         // established pass; a local pod's new connection allowed by a rule
	TableEgressDefault  = Table{32, "EgressDefault", "policy"}      // egress-isolated pods: what no rule allowed drops
	TableIngressRule    = Table{34, "IngressRule", "policy"}        // a new connection to a local pod allowed by a rule
	TableIngressDefault = Table{36, "IngressDefault", "policy"}     // ingress-isolated pods: what no rule allowed drops
	TableCtCommit       = Table{38, "ConntrackCommit", "conntrack"} // new connections not yet committed: ct(commit)
	TableL3             = Table{40, "L3Forwarding", "route"}        // routed: local pod, remote node (tunnel), node
	TableL2             = Table{50, "L2Forwarding", "switch"}       // by destination MAC: a pod port or the gateway
	tables              = []Table{TableClassifier, TableSpoofGuard, TableARP, TableConntrackZone, TableConntrackState,
		TableAffinity, TableServiceLB, TableEndpointDNAT, TableEgressRule, TableEgressDefault, TableIngressRule,
		TableIngressDefault, TableCtCommit, TableL3, TableL2}
)

// Tables returns the pipeline's tables in order.
func Tables() []Table { return append([]Table(nil), tables...) }

// tableDefaults are every table's priority-0 flow, in table order.
func tableDefaults(c uint64) []*openflow.FlowMod {
	return []*openflow.FlowMod{
		classifierDefault(c),
		spoofGuardDefault(c),
		arpDefault(c),
		conntrackZoneDefault(c),
		conntrackStateDefault(c),
		affinityDefault(c),
		serviceLBDefault(c),
		endpointDNATDefault(c),
		egressRuleDefault(c),
		egressDefaultDefault(c),
		ingressRuleDefault(c),
		ingressDefaultDefault(c),
		ctCommitDefault(c),
		l3Default(c),
		l2Default(c),
	}
}

// classifierDefault drops packets from ports the agent did not attach.
func classifierDefault(c uint64) *openflow.FlowMod {
	return flow(TableClassifier, prioDefault, c, match())
}

// spoofGuardDefault drops whatever the flows above did not pass.
func spoofGuardDefault(c uint64) *openflow.FlowMod {
	return flow(TableSpoofGuard, prioDefault, c, match())
}

// arpDefault sends everything that is not ARP on to the conntrack stage.
func arpDefault(c uint64) *openflow.FlowMod {
	return flow(TableARP, prioDefault, c, match(), gotoTable(TableConntrackZone))
}

// conntrackZoneDefault sends what is not IPv4 (no connection to track) on to L3 forwarding.
func conntrackZoneDefault(c uint64) *openflow.FlowMod {
	return flow(TableConntrackZone, prioDefault, c, match(), gotoTable(TableL3))
}

// conntrackStateDefault sends tracked, valid packets on to the Service stage: SessionAffinity, then ServiceLB.
//
// Resubmits, as Antrea's PreRoutingClassifier does, because the flows
// learn adds to SessionAffinity can carry no goto_table.
func conntrackStateDefault(c uint64) *openflow.FlowMod {
	return flow(TableConntrackState, prioDefault, c, match(), apply(resubmit(TableAffinity), resubmit(TableServiceLB)))
}

// serviceLBDefault sends what is not a new connection to a frontend on to the policy stage.
func serviceLBDefault(c uint64) *openflow.FlowMod {
	return flow(TableServiceLB, prioDefault, c, match(), gotoTable(TableEgressRule))
}

// endpointDNATDefault drops what no endpoint flow claims (a bucket always has one).
func endpointDNATDefault(c uint64) *openflow.FlowMod {
	return flow(TableEndpointDNAT, prioDefault, c, match())
}

// egressRuleDefault sends what no egress rule allowed to EgressDefault.
func egressRuleDefault(c uint64) *openflow.FlowMod {
	return flow(TableEgressRule, prioDefault, c, match(), gotoTable(TableEgressDefault))
}

// egressDefaultDefault sends what is not from an egress-isolated pod on to the ingress rules.
func egressDefaultDefault(c uint64) *openflow.FlowMod {
	return flow(TableEgressDefault, prioDefault, c, match(), gotoTable(TableIngressRule))
}

// ingressRuleDefault sends what no ingress rule allowed to IngressDefault.
func ingressRuleDefault(c uint64) *openflow.FlowMod {
	return flow(TableIngressRule, prioDefault, c, match(), gotoTable(TableIngressDefault))
}

// ingressDefaultDefault sends what is not for an ingress-isolated pod on to ConntrackCommit.
func ingressDefaultDefault(c uint64) *openflow.FlowMod {
	return flow(TableIngressDefault, prioDefault, c, match(), gotoTable(TableCtCommit))
}

// ctCommitDefault sends what needs no commit (established, already committed, not IPv4) on to L3 forwarding.
func ctCommitDefault(c uint64) *openflow.FlowMod {
	return flow(TableCtCommit, prioDefault, c, match(), gotoTable(TableL3))
}

// l3Default sends packets that are not routed here to L2 forwarding.
func l3Default(c uint64) *openflow.FlowMod {
	return flow(TableL3, prioDefault, c, match(), gotoTable(TableL2))
}

// l2Default drops packets for MACs not on this node.
func l2Default(c uint64) *openflow.FlowMod {
	return flow(TableL2, prioDefault, c, match())
}

// Priorities, per table, highest first.
const (
	prioSpecific = 200 // one object's flow (a pod, a node)
	prioKind     = 100 // a class of packets (all ARP replies, all tunnel traffic)
	prioDrop     = 50  // explicit drops below the specific flows
	prioDefault  = 0   // the table's default
)

// Metadata bits: where the packet came in (set by the classifier).
const (
	metaSourceMask  uint64 = 0x3
	metaFromPod     uint64 = 1
	metaFromGateway uint64 = 2
	metaFromTunnel  uint64 = 3
)

// RemoteGatewayMAC is the MAC the node's routes to other nodes' pod
// subnets resolve to (a permanent neighbour entry for each remote
// gateway on the node's gateway device): packets the node sends to
// remote pods carry it, and L3 forwarding routes them into the tunnel.
// Locally administered, unicast.
var RemoteGatewayMAC = net.HardwareAddr{0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}

// Node is what the pipeline needs of its own node.
type Node struct {
	Name        string
	PodCIDR     netip.Prefix
	ClusterCIDR netip.Prefix // the spoof guard's pod network; invalid: the known nodes' pod CIDRs (routing is by those)
	GatewayIP   netip.Addr
	GatewayMAC  net.HardwareAddr
	GatewayPort uint32
	VNI         uint32
}

// Pod is a pod attached to a switch port.
type Pod struct {
	Key  string // containerID/ifName
	Name string // namespace/name (logs)
	Port uint32
	MAC  net.HardwareAddr
	IP   netip.Addr
	// NoRedirect: never sent to the node's proxy (proxyredirect.go).
	NoRedirect bool
}

// RemoteNode is another node, reached through a tunnel endpoint port.
type RemoteNode struct {
	Name     string
	PodCIDR  netip.Prefix
	Underlay netip.Addr
	Port     uint32
}

// Pipeline knows every object the agent wants flows for and keeps the
// switch's tables equal to them.
type Pipeline struct {
	log     *slog.Logger
	mu      sync.Mutex // one switch operation at a time; guards the fields below
	conn    *Conn
	node    Node
	pods    map[string]Pod
	remotes map[string]RemoteNode

	services map[proxy.ServiceKey]*programmedService
	groupIDs groupIDs

	policies *programmedPolicies // nil: no policy state set yet
	conjIDs  conjIDs

	redirect *Redirect // nil: no transparent redirection (proxyredirect.go)
	proxyUp  bool      // the proxy answers: selected new connections go to it

	// What the switch holds of the one pass (conntrack_onepass.go): its
	// flows by flowID, and the tracked flows.
	onePass map[string]*openflow.FlowMod
	tracked map[trackKey]bool
}

// New makes a pipeline for node, programmed through c.
func New(c *Conn, node Node, log *slog.Logger) *Pipeline {
	if log == nil {
		log = slog.Default()
	}
	return &Pipeline{log: log, conn: c, node: node, pods: map[string]Pod{}, remotes: map[string]RemoteNode{},
		services: map[proxy.ServiceKey]*programmedService{}}
}

// SetConn switches to a new connection (the switch restarted); call Sync.
func (p *Pipeline) SetConn(c *Conn) {
	p.mu.Lock()
	p.conn = c
	p.mu.Unlock()
}

// SetNode changes the node's own parameters (the gateway's port number
// after a switch restart); call Sync.
func (p *Pipeline) SetNode(n Node) {
	p.mu.Lock()
	p.node = n
	p.mu.Unlock()
}

// SetState replaces the known pods and remote nodes without touching the
// switch; Sync applies them.
func (p *Pipeline) SetState(pods []Pod, remotes []RemoteNode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pods = map[string]Pod{}
	for _, x := range pods {
		p.pods[x.Key] = x
	}
	p.remotes = map[string]RemoteNode{}
	for _, r := range remotes {
		p.remotes[r.Name] = r
	}
}

// AddPod installs a pod's flows and waits until the switch has them.
func (p *Pipeline) AddPod(ctx context.Context, pod Pod) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.pods[pod.Key]; ok && !samePod(old, pod) {
		if err := p.deleteObject(ctx, podObject(old.Key)); err != nil {
			return err
		}
	}
	p.pods[pod.Key] = pod
	return p.apply(ctx, p.podFlows(pod), nil)
}

func samePod(a, b Pod) bool {
	return a.Port == b.Port && a.IP == b.IP && a.MAC.String() == b.MAC.String() && a.NoRedirect == b.NoRedirect
}

// DelPod removes a pod's flows (by its cookie). Unknown pods are fine.
func (p *Pipeline) DelPod(ctx context.Context, key string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pods, key)
	return p.deleteObject(ctx, podObject(key))
}

// AddRemoteNode installs the flows to and from a remote node.
func (p *Pipeline) AddRemoteNode(ctx context.Context, n RemoteNode) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.remotes[n.Name]; ok && old != n {
		if err := p.deleteObject(ctx, nodeObject(old.Name)); err != nil {
			return err
		}
	}
	p.remotes[n.Name] = n
	if err := p.apply(ctx, p.remoteFlows(n), nil); err != nil {
		return err
	}
	adds, dels := p.onePassChangesLocked() // its pod CIDR joins the pod network
	return p.send(ctx, append(adds, dels...))
}

// DelRemoteNode removes a remote node's flows.
func (p *Pipeline) DelRemoteNode(ctx context.Context, name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.remotes, name)
	adds, dels := p.onePassChangesLocked() // its pod CIDR leaves the pod network
	if err := p.send(ctx, append(adds, dels...)); err != nil {
		return err
	}
	return p.deleteObject(ctx, nodeObject(name))
}

// deleteObject deletes every flow of one object, in every table.
func (p *Pipeline) deleteObject(ctx context.Context, obj uint64) error {
	fm := &openflow.FlowMod{Command: openflow.FlowDelete, TableID: openflow.TableAll, Cookie: obj, CookieMask: objectMask,
		BufferID: openflow.NoBuffer, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny}
	return p.apply(ctx, nil, []*openflow.FlowMod{fm})
}

// apply sends adds and deletes and waits for the barrier.
func (p *Pipeline) apply(ctx context.Context, adds, dels []*openflow.FlowMod) error {
	var msgs []openflow.Message
	for _, d := range dels {
		msgs = append(msgs, d)
	}
	for _, a := range adds {
		msgs = append(msgs, a)
	}
	if len(msgs) == 0 {
		return nil
	}
	if err := p.conn.Send(msgs...); err != nil {
		return err
	}
	return p.conn.Barrier(ctx)
}

// Desired is every flow the pipeline wants, in table order.
func (p *Pipeline) Desired() []*openflow.FlowMod {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.desiredLocked()
}

func (p *Pipeline) desiredLocked() []*openflow.FlowMod {
	fs := p.nodeFlows()
	keys := make([]string, 0, len(p.pods))
	for k := range p.pods {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fs = append(fs, p.podFlows(p.pods[k])...)
	}
	names := make([]string, 0, len(p.remotes))
	for n := range p.remotes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fs = append(fs, p.remoteFlows(p.remotes[n])...)
	}
	for _, k := range p.sortedServiceKeys() {
		fs = append(fs, p.services[k].flows...)
	}
	if p.policies != nil {
		fs = append(fs, p.policies.flows()...)
	}
	fs = append(fs, p.redirectFlows()...)
	fs = append(fs, p.onePassFlowsLocked()...)
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].TableID < fs[j].TableID })
	return fs
}

// SyncStats says what a Sync changed.
type SyncStats struct {
	Added   int `json:"added"`
	Deleted int `json:"deleted"`
	Kept    int `json:"kept"`

	GroupsAdded    int `json:"groups_added,omitempty"`
	GroupsModified int `json:"groups_modified,omitempty"`
	GroupsDeleted  int `json:"groups_deleted,omitempty"`
	GroupsKept     int `json:"groups_kept,omitempty"`
}

// flowID identifies a flow in a table as OpenFlow does (table, priority,
// match); its value is what the flow does (cookie and instructions). Both
// are wire encodings, not text: the switch keeps and dumps a flow's match
// and instructions as they were sent, so equal flows encode equally
// (fields in any order), and encoding is what a change to a
// 5000-endpoint Service, which compares 5000 flows, can afford.
func flowID(table uint8, prio uint16, m openflow.Match) string {
	fields := make([]string, 0, len(m.Fields))
	for _, o := range m.Fields {
		b, err := o.MarshalBinary() // self-delimiting: the header holds the length
		if err != nil {
			b = []byte("\xff" + openflow.Match{Fields: []openflow.OXM{o}}.String())
		}
		fields = append(fields, string(b))
	}
	sort.Strings(fields)
	return string([]byte{table, byte(prio >> 8), byte(prio)}) + strings.Join(fields, "")
}

func flowValue(cookie uint64, is openflow.Instructions) string {
	b, err := is.MarshalBinary()
	if err != nil {
		return fmt.Sprintf("%#x unencodable %v %s", cookie, err, is)
	}
	return string(binary.BigEndian.AppendUint64(nil, cookie)) + string(b)
}

// Sync makes the switch's tables and groups hold exactly the desired
// flows and groups. Flows and groups that are already right are not
// touched (flows keep their counters and age: an agent restart deletes and
// re-adds nothing that did not change); a group that differs is modified
// in place (deleting it would delete the flows that use it), missing ones
// are added before the flows that use them, unwanted flows are deleted
// (strictly, one by one), the missing ones added, and unwanted groups
// deleted last, when no flow uses them any more. Established connections
// never pass a group (only new ones do), so even a group that has to be
// replaced does not touch them.
func (p *Pipeline) Sync(ctx context.Context) (SyncStats, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var st SyncStats
	have, err := p.conn.DumpFlows(ctx, &openflow.FlowStatsRequest{TableID: openflow.TableAll, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny})
	if err != nil {
		return st, fmt.Errorf("dump flows: %w", err)
	}
	haveGroups, err := p.conn.DumpGroups(ctx)
	if err != nil {
		return st, fmt.Errorf("dump groups: %w", err)
	}
	want := map[string]*openflow.FlowMod{}
	for _, f := range p.desiredLocked() {
		want[flowID(f.TableID, f.Priority, f.Match)] = f
	}
	var dels, adds []*openflow.FlowMod
	seen := map[string]bool{}
	for _, h := range have {
		if learnedFlow(h.TableID, h.Cookie) {
			continue // the switch's own, removed with its learner (service_affinity.go)
		}
		if h.Cookie&cookieFeature == cookiePolicyCut {
			continue // a cut connection's guard: it goes when idle (networkpolicy_cut.go)
		}
		if p.policies == nil && h.Cookie&cookieFeature == cookiePolicy {
			continue // no policy state yet: a previous run's policy flows stay until UpdatePolicies
		}
		id := flowID(h.TableID, h.Priority, h.Match)
		if w, ok := want[id]; ok && !seen[id] && flowValue(w.Cookie, w.Instructions) == flowValue(h.Cookie, h.Instructions) {
			seen[id] = true
			st.Kept++
			continue
		}
		dels = append(dels, &openflow.FlowMod{Command: openflow.FlowDeleteStrict, TableID: h.TableID, Priority: h.Priority,
			Match: h.Match, BufferID: openflow.NoBuffer, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny})
	}
	for id, w := range want {
		if !seen[id] {
			adds = append(adds, w)
		}
	}
	// Later tables first; within a table, higher priorities first (an
	// exception is in before the flow it is an exception to).
	sort.SliceStable(adds, func(i, j int) bool {
		if adds[i].TableID != adds[j].TableID {
			return adds[i].TableID > adds[j].TableID
		}
		return adds[i].Priority > adds[j].Priority
	})

	// Groups: add or modify the desired ones (children before parents,
	// as desiredGroupsLocked orders them), delete the others at the end.
	present := map[uint32]string{}
	for _, g := range haveGroups {
		present[g.GroupID] = groupValue(g.GroupType, g.Buckets)
	}
	var msgs []openflow.Message
	wantGroup := map[uint32]bool{}
	for _, g := range p.desiredGroupsLocked() {
		wantGroup[g.GroupID] = true
		v, ok := present[g.GroupID]
		switch {
		case !ok:
			msgs = append(msgs, g)
			st.GroupsAdded++
		case v != groupValue(g.GroupType, g.Buckets):
			m := *g
			m.Command = openflow.GroupModify
			msgs = append(msgs, &m)
			st.GroupsModified++
		default:
			st.GroupsKept++
		}
	}
	for _, d := range dels {
		msgs = append(msgs, d)
	}
	for _, a := range adds {
		msgs = append(msgs, a)
	}
	var gdels []uint32
	for id := range present {
		if !wantGroup[id] {
			gdels = append(gdels, id)
		}
	}
	// Parents before children: a group in use by another cannot go first.
	sort.Slice(gdels, func(i, j int) bool { return groupDepth(haveGroups, gdels[i]) > groupDepth(haveGroups, gdels[j]) })
	for _, id := range gdels {
		msgs = append(msgs, &openflow.GroupMod{Command: openflow.GroupDelete, GroupID: id})
	}
	st.GroupsDeleted = len(gdels)
	st.Deleted, st.Added = len(dels), len(adds)
	if err := p.send(ctx, msgs); err != nil {
		return st, err
	}
	p.onePassInstalled()
	return st, nil
}

// groupValue is what a group does, to compare a dumped group with a desired one.
func groupValue(typ uint8, bs []openflow.Bucket) string {
	b := []byte{typ}
	for _, bk := range bs {
		x, err := bk.MarshalBinary()
		if err != nil {
			return fmt.Sprintf("unencodable %v", err)
		}
		b = append(b, x...)
	}
	return string(b)
}

// groupDepth is 1 for a group no other dumped group points to, more for
// the groups that parents use (so parents are deleted first).
func groupDepth(gs []openflow.GroupDesc, id uint32) int {
	for _, g := range gs {
		for _, b := range g.Buckets {
			for _, a := range b.Actions {
				if ga, ok := a.(openflow.ActionGroup); ok && ga.GroupID == id {
					return 0
				}
			}
		}
	}
	return 1
}

// send writes msgs and waits for the barrier.
func (p *Pipeline) send(ctx context.Context, msgs []openflow.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := p.conn.Send(msgs...); err != nil {
		return err
	}
	return p.conn.Barrier(ctx)
}

// TableCount is one table's number of flows on the switch.
type TableCount struct {
	ID    uint8  `json:"id"`
	Name  string `json:"name"`
	Stage string `json:"stage"`
	Flows int    `json:"flows"`
}

// TableCounts reads the switch's flows per pipeline table.
func (p *Pipeline) TableCounts(ctx context.Context) ([]TableCount, error) {
	p.mu.Lock()
	c := p.conn
	p.mu.Unlock()
	fs, err := c.DumpFlows(ctx, &openflow.FlowStatsRequest{TableID: openflow.TableAll, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny})
	if err != nil {
		return nil, err
	}
	n := map[uint8]int{}
	for _, f := range fs {
		n[f.TableID]++
	}
	out := make([]TableCount, 0, len(tables))
	for _, t := range tables {
		out = append(out, TableCount{ID: t.ID, Name: t.Name, Stage: t.Stage, Flows: n[t.ID]})
	}
	return out, nil
}

// flow builds a FLOW_MOD add; builders fill in match and instructions.
func flow(t Table, prio uint16, cookie uint64, m openflow.Match, is ...openflow.Instruction) *openflow.FlowMod {
	return &openflow.FlowMod{Command: openflow.FlowAdd, TableID: t.ID, Priority: prio, Cookie: cookie,
		BufferID: openflow.NoBuffer, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny, Match: m, Instructions: is}
}

func gotoTable(t Table) openflow.Instruction { return openflow.InstGotoTable{TableID: t.ID} }

func resubmit(t Table) openflow.Action {
	return openflow.ActionNXResubmit{InPort: openflow.PortInPort, Table: t.ID}
}

func apply(as ...openflow.Action) openflow.Instruction { return openflow.InstApplyActions{Actions: as} }

func output(port uint32) openflow.Action { return openflow.ActionOutput{Port: port, MaxLen: 0xffff} }

func setEthSrc(m net.HardwareAddr) openflow.Action {
	return openflow.ActionSetField{Field: openflow.MAC(openflow.FieldEthSrc, m)}
}

func setEthDst(m net.HardwareAddr) openflow.Action {
	return openflow.ActionSetField{Field: openflow.MAC(openflow.FieldEthDst, m)}
}

func match(oxms ...openflow.OXM) openflow.Match { return openflow.Match{Fields: oxms} }

func inPort(p uint32) openflow.OXM  { return openflow.Uint(openflow.FieldInPort, uint64(p)) }
func ethType(t uint16) openflow.OXM { return openflow.Uint(openflow.FieldEthType, uint64(t)) }
func source(kind uint64) openflow.OXM {
	return openflow.UintMasked(openflow.FieldMetadata, kind, metaSourceMask)
}

const (
	etherIPv4 = 0x0800
	etherARP  = 0x0806
)
