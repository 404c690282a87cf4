package pipeline

import (
	"github.com/nagare-net/nagare/pkg/agent/proxy"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// A pod's connection to an external frontend (any node's address:nodePort,
// a LoadBalancer or external IP) of a Service with externalTrafficPolicy
// Local: kube-proxy sends such pod traffic to all the Service's endpoints,
// not only this node's (the policy is there to keep an outside client's
// address and to avoid a second hop; a pod's traffic needs neither, and
// an ingress controller reaching its own LoadBalancer IP from a node
// without a local endpoint would otherwise be dropped). Here that is the
// internal (ClusterIP) group, whose endpoints are the Cluster policy's
// as long as internalTrafficPolicy is Cluster; with both policies Local
// pods keep the local endpoints (kube-proxy would use every endpoint).
// Traffic from the node's stack (NodePorts it DNATed, the node itself)
// keeps the external group.

// prioPodToExternal ranks these flows above the frontend's own (a pod's
// packet matches both).
const prioPodToExternal = prioSpecific + 10

// podToExternalShortcut sends a pod's new connection to frontend f to the
// Service port's internal group (tagged in reg5 as that group's).
func podToExternalShortcut(c uint64, proto uint8, f proxy.Frontend, internalGID uint32) *openflow.FlowMod {
	m := frontendMatch(proto, f)
	m.Fields = append(m.Fields, source(metaFromPod))
	return flow(TableServiceLB, prioPodToExternal, c, m,
		apply(openflow.ActionNXRegLoad{Dst: regField(regServiceTag, 0, 32), Value: uint64(internalGID)}, openflow.ActionGroup{GroupID: internalGID}))
}

// podShortcuts are those flows for a port's external frontends fes, if
// the Service qualifies and its internal group exists (internalGID != 0).
func podShortcuts(c uint64, s *proxy.Service, proto uint8, fes []proxy.Frontend, internalGID uint32) []*openflow.FlowMod {
	if !s.ExternalLocal || s.InternalLocal || internalGID == 0 {
		return nil
	}
	var out []*openflow.FlowMod
	for _, f := range fes {
		out = append(out, podToExternalShortcut(c, proto, f, internalGID))
	}
	return out
}
