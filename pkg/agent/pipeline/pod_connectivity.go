package pipeline

import "github.com/nagare-net/nagare/pkg/openflow"

// Pod connectivity: a local pod gets in through its own port and only as
// itself (port, MAC, address; ARP included), its ARP requests reach their
// target alone, and packets for it leave by its MAC (from pods on this
// node: the switch hands them over with redirect_peer, never through the
// gateway) or routed to it (from the gateway or another node: MACs
// rewritten, TTL−1).
//
// Why ARP is delivered, not answered: the fast path cannot rewrite ARP
// fields, so the switch answers for no one; the owner of the address (the
// pod, or the gateway's kernel device) answers. Nothing floods.

// podFlows are one pod's flows, with the pod's cookie.
func (p *Pipeline) podFlows(pod Pod) []*openflow.FlowMod {
	c := podObject(pod.Key)
	return append([]*openflow.FlowMod{
		classifierFromPod(c, pod),
		spoofGuardIP(c, pod),
		spoofGuardARP(c, pod),
		arpToPod(c, pod),
		l3RoutedToPod(c, p.node, pod),
		l3TunnelToPod(c, p.node, pod),
		l2ToPod(c, pod),
	}, p.redirectPodFlows(c, pod)...)
}

// podConnectivityFlows are the node-wide flows every pod relies on (ARP replies, no flooding).
func podConnectivityFlows(c uint64) []*openflow.FlowMod {
	return []*openflow.FlowMod{
		arpDropOthers(c),
		arpReplies(c),
	}
}

// classifierFromPod marks packets from a pod's port and sends them to the spoof guard.
func classifierFromPod(c uint64, pod Pod) *openflow.FlowMod {
	return flow(TableClassifier, prioSpecific, c, match(inPort(pod.Port)),
		openflow.InstWriteMetadata{Metadata: metaFromPod, Mask: metaSourceMask}, gotoTable(TableSpoofGuard))
}

// spoofGuardIP passes a pod's IPv4 packets with its own MAC and address.
func spoofGuardIP(c uint64, pod Pod) *openflow.FlowMod {
	return flow(TableSpoofGuard, prioSpecific, c,
		match(inPort(pod.Port), openflow.MAC(openflow.FieldEthSrc, pod.MAC), ethType(etherIPv4), openflow.Addr(openflow.FieldIPv4Src, pod.IP)),
		gotoTable(TableConntrackZone))
}

// spoofGuardARP passes a pod's ARP with its own MAC and address as sender.
func spoofGuardARP(c uint64, pod Pod) *openflow.FlowMod {
	return flow(TableSpoofGuard, prioSpecific, c,
		match(inPort(pod.Port), openflow.MAC(openflow.FieldEthSrc, pod.MAC), ethType(etherARP),
			openflow.Addr(openflow.FieldARPSPA, pod.IP), openflow.MAC(openflow.FieldARPSHA, pod.MAC)),
		gotoTable(TableARP))
}

// arpToPod delivers ARP requests for a local pod's address to that pod only.
func arpToPod(c uint64, pod Pod) *openflow.FlowMod {
	return flow(TableARP, prioSpecific, c,
		match(ethType(etherARP), openflow.Uint(openflow.FieldARPOp, 1), openflow.Addr(openflow.FieldARPTPA, pod.IP)),
		apply(output(pod.Port)))
}

// arpReplies sends ARP replies to L2 forwarding (by destination MAC).
func arpReplies(c uint64) *openflow.FlowMod {
	return flow(TableARP, prioKind, c, match(ethType(etherARP), openflow.Uint(openflow.FieldARPOp, 2)), gotoTable(TableL2))
}

// arpDropOthers drops ARP for addresses nobody here owns (no flooding).
func arpDropOthers(c uint64) *openflow.FlowMod {
	return flow(TableARP, prioDrop, c, match(ethType(etherARP)))
}

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

// l2ToPod sends packets for a local pod's MAC to its port.
func l2ToPod(c uint64, pod Pod) *openflow.FlowMod {
	return flow(TableL2, prioSpecific, c, match(openflow.MAC(openflow.FieldEthDst, pod.MAC)), apply(output(pod.Port)))
}
