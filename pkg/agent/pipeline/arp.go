package pipeline

import "github.com/nagare-net/nagare/pkg/openflow"

// ARPResponder: the fast path cannot rewrite ARP fields, so the switch
// does not answer for anyone; it delivers each ARP request to its target
// alone (a local pod's port, or the gateway, whose kernel device answers
// for the gateway address) and never floods. Replies go by MAC (L2). The
// node never ARPs for other nodes' gateways: their neighbour entries are
// permanent (RemoteGatewayMAC). Anything not ARP goes on to L3.

// arpToPod delivers ARP requests for a local pod's address to that pod only.
func arpToPod(c uint64, pod Pod) *openflow.FlowMod {
	return flow(TableARP, prioSpecific, c,
		match(ethType(etherARP), openflow.Uint(openflow.FieldARPOp, 1), openflow.Addr(openflow.FieldARPTPA, pod.IP)),
		apply(output(pod.Port)))
}

// arpToGateway delivers ARP requests for the gateway address to the gateway.
func arpToGateway(c uint64, n Node) *openflow.FlowMod {
	return flow(TableARP, prioSpecific, c,
		match(ethType(etherARP), openflow.Uint(openflow.FieldARPOp, 1), openflow.Addr(openflow.FieldARPTPA, n.GatewayIP)),
		apply(output(n.GatewayPort)))
}

// arpReplies sends ARP replies to L2 forwarding (by destination MAC).
func arpReplies(c uint64) *openflow.FlowMod {
	return flow(TableARP, prioKind, c, match(ethType(etherARP), openflow.Uint(openflow.FieldARPOp, 2)), gotoTable(TableL2))
}

// arpDropOthers drops ARP for addresses nobody here owns (no flooding).
func arpDropOthers(c uint64) *openflow.FlowMod {
	return flow(TableARP, prioDrop, c, match(ethType(etherARP)))
}

// arpDefault sends everything that is not ARP on to L3 forwarding.
func arpDefault(c uint64) *openflow.FlowMod {
	return flow(TableARP, prioDefault, c, match(), gotoTable(TableL3))
}
