package agent

import (
	"context"
	"net/netip"
	"strings"
	"time"

	"github.com/nagare-net/nagare/pkg/agent/pipeline"
	"github.com/nagare-net/nagare/pkg/agent/proxy"
	"github.com/nagare-net/nagare/pkg/ctlproto"
)

// Services: the agent keeps the desired service state of its node in a
// proxy.Tracker, fed by the Kubernetes source's Service and EndpointSlice
// informers, or by the cluster file's services section. serviceLoop takes
// the changes and the pipeline (pipeline/service.go) programs them:
// flows and select groups, only what changed. While the switch is down
// nothing is lost: a (re)connection hands the pipeline the tracker's whole
// state before its Sync.

// serviceCoalesce is how long serviceLoop lets updates gather after the
// first one: a rollout touches a Service's slices many times in a few
// milliseconds, and each Take should see them together.
const serviceCoalesce = 100 * time.Millisecond

// proxyNode is what the proxy needs of this node: the NodePort frontends'
// addresses (nodePortAddresses) and the pod network (no ClusterIP may lie in it).
func (a *Agent) proxyNode() proxy.Node {
	n := proxy.Node{Name: a.cfg.NodeName, PodNetwork: a.cfg.Cluster.PodNetwork(), Addresses: a.nodePortAddresses()}
	if a.node.PodCIDR.IsValid() {
		n.PodNetwork = append(n.PodNetwork, a.node.PodCIDR)
	}
	a.mu.Lock()
	for _, r := range a.remotes {
		n.PodNetwork = append(n.PodNetwork, r.node.PodCIDR)
	}
	a.mu.Unlock()
	return n
}

// startServices makes the tracker and connects its source.
func (a *Agent) startServices() {
	report := func(p proxy.Problem) {
		a.log.Warn("service input refused", "object", p.Object, "namespace", p.Service.Namespace, "name", p.Name, "reason", p.Reason, "problem", p.Message)
	}
	if a.cfg.Kube != nil {
		report = a.cfg.Kube.ReportProblem
	}
	a.services = proxy.NewTracker(a.proxyNode(), report)
	if a.cfg.Kube != nil {
		a.cfg.Kube.WatchServices(a.services)
		return
	}
	a.feedClusterServices()
}

// feedClusterServices hands the cluster file's Services to the tracker,
// with pod names resolved against the pods attached here (again whenever
// they change; an unchanged state is not reported as a change).
func (a *Agent) feedClusterServices() {
	if a.services == nil || a.cfg.Kube != nil || len(a.cfg.Cluster.Services) == 0 {
		return
	}
	svcs, slices, unresolved := proxy.FromClusterFile(a.cfg.Cluster, a.podAddress)
	for _, s := range svcs {
		a.services.UpdateService(s)
	}
	for _, s := range slices {
		a.services.UpdateEndpointSlice(s)
	}
	// Said when the set changes: this node's view of those Services lacks
	// the endpoints, which only their addresses in the file would fix.
	u := strings.Join(unresolved, ",")
	if last, _ := a.unresolvedPods.Swap(u).(string); u != last && u != "" {
		a.log.Info("service endpoints named by pods not on this node are left out (give their addresses)", "pods", u)
	}
}

// podAddress finds a pod attached on this node by namespace/name.
func (a *Agent) podAddress(name string) (netip.Addr, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.pods {
		if p.Pod == name {
			return p.IP, true
		}
	}
	return netip.Addr{}, false
}

// podsChanged: a pod came or went (cluster-file endpoints by pod name).
func (a *Agent) podsChanged() {
	a.feedClusterServices()
	a.feedClusterPolicies()
}

// nodesChanged: a remote node came, went or changed (the pod network).
func (a *Agent) nodesChanged() {
	if a.services != nil {
		a.services.SetNode(a.proxyNode())
	}
}

// servicesPending is how many Services' changes are not yet programmed
// in the switch: touched in the tracker and not taken, or taken and being
// programmed. A change refused by the switch is repaired by the next sync
// and does not count.
func (a *Agent) servicesPending() int {
	if a.services == nil {
		return 0
	}
	return a.services.Pending() + int(a.svcInFlight.Load())
}

// serviceLoop takes the tracker's changes as they come.
func (a *Agent) serviceLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.services.Changed():
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(serviceCoalesce):
		}
		start := time.Now()
		// In flight from before the Take until programmed, so that the
		// status never shows a taken change as done (servicesPending).
		a.svcInFlight.Store(1)
		ch := a.services.Take()
		n := len(ch.Updated) + len(ch.Deleted)
		a.svcInFlight.Store(int64(n))
		if n == 0 {
			continue
		}
		a.met.services.Set(float64(len(a.services.Services())))
		res, err := a.programServices(ctx, ch)
		a.svcInFlight.Store(0)
		if err != nil {
			a.log.Warn("services: programming the switch failed (the next sync repairs it)", "err", err,
				"updated", len(ch.Updated), "deleted", len(ch.Deleted))
			continue
		}
		a.flushStaleUDP(ctx, res.StaleUDP)
		a.syncNodePorts()
		a.log.Info("services changed", "updated", len(ch.Updated), "deleted", len(ch.Deleted),
			"flows_added", res.FlowsAdded, "flows_deleted", res.FlowsDeleted,
			"groups_added", res.GroupsAdded, "groups_modified", res.GroupsModified, "groups_deleted", res.GroupsDeleted,
			"took", time.Since(start))
	}
}

// programServices hands the changes to the pipeline if the switch is
// connected. Under swMu, so that a (re)connection either runs before
// (and this programs the change) or after (and its Sync, from the
// tracker's whole state, has it).
func (a *Agent) programServices(ctx context.Context, ch proxy.Changes) (pipeline.ServiceResult, error) {
	a.swMu.Lock()
	defer a.swMu.Unlock()
	pl, err := a.connected()
	if err != nil {
		return pipeline.ServiceResult{}, nil // the connection's Sync programs the tracker's state
	}
	return pl.UpdateServices(ctx, ch.Updated, ch.Deleted)
}

// flushStaleUDP deletes the node zone's UDP connections to endpoints no
// Service uses any more, as kube-proxy does (conntrack -D): UDP has no
// end, so a client (a resolver to a deleted DNS pod) would otherwise keep
// its established entry, and its packets keep going to the gone endpoint,
// until the entry times out. The switch's conntrack-flush selects the
// connections with that address and port at either end (after DNAT, the
// reply direction's source).
func (a *Agent) flushStaleUDP(ctx context.Context, stale []pipeline.StaleEndpoint) {
	for _, e := range stale {
		zone := e.Zone
		req := ctlproto.Request{Cmd: "conntrack-flush", Zone: &zone, Proto: "udp", Addr: e.Addr.String(), L4Port: e.Port}
		resp, err := a.call(ctx, req)
		if err != nil {
			a.log.Warn("services: flushing a gone endpoint's UDP connections", "endpoint", netip.AddrPortFrom(e.Addr, e.Port), "err", err)
			continue
		}
		a.log.Info("services: UDP endpoint gone, its connections flushed", "endpoint", netip.AddrPortFrom(e.Addr, e.Port),
			"result", strings.Join(resp.Lines, "; "))
	}
}
