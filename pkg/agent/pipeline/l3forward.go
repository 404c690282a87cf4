package pipeline

import "github.com/nagare-net/nagare/pkg/openflow"

// L3Forwarding: routed IPv4, i.e. packets addressed to the gateway's MAC
// (from pods), to RemoteGatewayMAC (from the node, towards other nodes'
// pods) or arriving from a tunnel. Every routed hop decrements the TTL.
// Packets not routed here go on to L2 forwarding; tunnel packets that are
// for nobody here drop (a node never forwards one node's traffic to
// another).

// l3RoutedToPod delivers packets routed through the gateway to a local pod: gateway → pod MACs, TTL−1.
func l3RoutedToPod(c uint64, n Node, pod Pod) *openflow.FlowMod {
	return flow(TableL3, prioSpecific, c,
		match(openflow.MAC(openflow.FieldEthDst, n.GatewayMAC), ethType(etherIPv4), openflow.Addr(openflow.FieldIPv4Dst, pod.IP)),
		apply(setEthSrc(n.GatewayMAC), setEthDst(pod.MAC), openflow.ActionDecNWTTL{}, output(pod.Port)))
}

// l3TunnelToPod delivers packets from another node to a local pod: gateway → pod MACs, TTL−1.
func l3TunnelToPod(c uint64, n Node, pod Pod) *openflow.FlowMod {
	return flow(TableL3, prioSpecific, c,
		match(source(metaFromTunnel), ethType(etherIPv4), openflow.Addr(openflow.FieldIPv4Dst, pod.IP)),
		apply(setEthSrc(n.GatewayMAC), setEthDst(pod.MAC), openflow.ActionDecNWTTL{}, output(pod.Port)))
}

// l3PodToRemote sends a pod's packets for another node's pods into the tunnel to that node: TTL−1, VNI.
func l3PodToRemote(c uint64, n Node, r RemoteNode) *openflow.FlowMod {
	return flow(TableL3, prioSpecific, c,
		match(source(metaFromPod), openflow.MAC(openflow.FieldEthDst, n.GatewayMAC), ethType(etherIPv4), openflow.Prefix(openflow.FieldIPv4Dst, r.PodCIDR)),
		apply(openflow.ActionDecNWTTL{}, openflow.ActionSetField{Field: openflow.Uint(openflow.FieldTunnelID, uint64(n.VNI))}, output(r.Port)))
}

// l3NodeToRemote sends the node's own packets for another node's pods into the tunnel to that node.
func l3NodeToRemote(c uint64, n Node, r RemoteNode) *openflow.FlowMod {
	return flow(TableL3, prioSpecific, c,
		match(source(metaFromGateway), openflow.MAC(openflow.FieldEthDst, RemoteGatewayMAC), ethType(etherIPv4), openflow.Prefix(openflow.FieldIPv4Dst, r.PodCIDR)),
		apply(openflow.ActionSetField{Field: openflow.Uint(openflow.FieldTunnelID, uint64(n.VNI))}, output(r.Port)))
}

// l3TunnelToGateway delivers packets from another node for this node's gateway address to the node's stack.
func l3TunnelToGateway(c uint64, n Node) *openflow.FlowMod {
	return flow(TableL3, prioSpecific, c,
		match(source(metaFromTunnel), ethType(etherIPv4), openflow.Addr(openflow.FieldIPv4Dst, n.GatewayIP)),
		apply(setEthSrc(RemoteGatewayMAC), setEthDst(n.GatewayMAC), openflow.ActionDecNWTTL{}, output(n.GatewayPort)))
}

// l3TunnelDefault drops tunnel packets for nobody on this node.
func l3TunnelDefault(c uint64) *openflow.FlowMod {
	return flow(TableL3, prioKind, c, match(source(metaFromTunnel)))
}

// l3Default sends packets that are not routed here to L2 forwarding.
func l3Default(c uint64) *openflow.FlowMod {
	return flow(TableL3, prioDefault, c, match(), gotoTable(TableL2))
}
