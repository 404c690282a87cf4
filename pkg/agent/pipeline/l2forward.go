package pipeline

import "github.com/nagare-net/nagare/pkg/openflow"

// L2Forwarding: by destination MAC, to a local pod's port (intra-node pod
// to pod: the switch hands it to the pod with redirect_peer, never through
// the gateway) or to the gateway (the node, and through it the outside,
// masqueraded). Unknown destinations and broadcasts drop: nothing floods.

// l2ToPod sends packets for a local pod's MAC to its port.
func l2ToPod(c uint64, pod Pod) *openflow.FlowMod {
	return flow(TableL2, prioSpecific, c, match(openflow.MAC(openflow.FieldEthDst, pod.MAC)), apply(output(pod.Port)))
}

// l2ToGateway sends packets for the gateway's MAC to the node's stack.
func l2ToGateway(c uint64, n Node) *openflow.FlowMod {
	return flow(TableL2, prioSpecific, c, match(openflow.MAC(openflow.FieldEthDst, n.GatewayMAC)), apply(output(n.GatewayPort)))
}

// l2Default drops packets for MACs not on this node.
func l2Default(c uint64) *openflow.FlowMod {
	return flow(TableL2, prioDefault, c, match())
}
