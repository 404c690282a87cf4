package pipeline

import "github.com/nagare-net/nagare/pkg/openflow"

// The local node: its stack is reached through the gateway port (pod →
// node, and through the node's routing and masquerade, pod → outside).
// The node is trusted: its packets skip the spoof guard. Its ARP for pods
// goes to the pod; other nodes' gateways it never ARPs for (their
// neighbour entries are permanent, RemoteGatewayMAC).

// nodeFlows are the node-wide flows (cookie "node"): every table's
// default, the flows every pod or tunnel relies on, and the gateway's.
// Within a table they keep this order: default, classes, gateway.
func (p *Pipeline) nodeFlows() []*openflow.FlowMod {
	c := localObject()
	fs := tableDefaults(c)
	fs = append(fs, podConnectivityFlows(c)...)
	fs = append(fs, conntrackFlows(c)...)
	fs = append(fs, hairpinFlows(c, p.node)...)
	fs = append(fs, tunnelFlows(c)...)
	fs = append(fs, policyNodeFlows(c, p.node)...)
	return append(fs, gatewayFlows(c, p.node)...)
}

// gatewayFlows are the flows to and from the node's stack.
func gatewayFlows(c uint64, n Node) []*openflow.FlowMod {
	return []*openflow.FlowMod{
		classifierFromGateway(c, n),
		arpToGateway(c, n),
		l3TunnelToGateway(c, n),
		l3NodeToLocalPod(c, n),
		l2ToGateway(c, n),
	}
}

// l3NodeToLocalPod routes the node's packets sent towards RemoteGatewayMAC
// but (after a Service's DNAT) for a local pod: as if sent to the gateway's MAC.
//
// The node reaches ClusterIPs by a route through the gateway whose next hop
// resolves to RemoteGatewayMAC (nodenet.EnsureServiceRoute); an endpoint on
// another node is then routed into the tunnel by l3NodeToRemote, one here
// by this flow and l3RoutedToPod.
func l3NodeToLocalPod(c uint64, n Node) *openflow.FlowMod {
	return flow(TableL3, prioKind, c,
		match(source(metaFromGateway), openflow.MAC(openflow.FieldEthDst, RemoteGatewayMAC), ethType(etherIPv4), openflow.Prefix(openflow.FieldIPv4Dst, n.PodCIDR)),
		apply(setEthDst(n.GatewayMAC), openflow.ActionNXResubmit{InPort: openflow.PortInPort, Table: TableL3.ID}))
}

// classifierFromGateway marks packets from the node's stack; the node is trusted (no spoof guard).
func classifierFromGateway(c uint64, n Node) *openflow.FlowMod {
	return flow(TableClassifier, prioSpecific, c, match(inPort(n.GatewayPort)),
		openflow.InstWriteMetadata{Metadata: metaFromGateway, Mask: metaSourceMask}, gotoTable(TableARP))
}

// arpToGateway delivers ARP requests for the gateway address to the gateway.
func arpToGateway(c uint64, n Node) *openflow.FlowMod {
	return flow(TableARP, prioSpecific, c,
		match(ethType(etherARP), openflow.Uint(openflow.FieldARPOp, 1), openflow.Addr(openflow.FieldARPTPA, n.GatewayIP)),
		apply(output(n.GatewayPort)))
}

// l3TunnelToGateway delivers packets from another node for this node's gateway address to the node's stack.
func l3TunnelToGateway(c uint64, n Node) *openflow.FlowMod {
	return flow(TableL3, prioSpecific, c,
		match(source(metaFromTunnel), ethType(etherIPv4), openflow.Addr(openflow.FieldIPv4Dst, n.GatewayIP)),
		apply(setEthSrc(RemoteGatewayMAC), setEthDst(n.GatewayMAC), openflow.ActionDecNWTTL{}, output(n.GatewayPort)))
}

// l2ToGateway sends packets for the gateway's MAC to the node's stack.
func l2ToGateway(c uint64, n Node) *openflow.FlowMod {
	return flow(TableL2, prioSpecific, c, match(openflow.MAC(openflow.FieldEthDst, n.GatewayMAC)), apply(output(n.GatewayPort)))
}
