package pipeline

import "github.com/nagare-net/nagare/pkg/openflow"

// Remote nodes: each is reached through its own tunnel endpoint port
// (VXLAN, our VNI). A pod's or the node's packets for its pod subnet go
// into that tunnel (TTL−1 when routed from a pod); what comes out of it
// is accepted only from its own pod subnet or from outside the cluster's
// pod network (its own stack answering a pod), never as another node's
// pods. A node never forwards one node's traffic to another: tunnel
// packets for nobody here drop.

// remoteFlows are one remote node's flows, with that node's cookie.
func (p *Pipeline) remoteFlows(r RemoteNode) []*openflow.FlowMod {
	c := nodeObject(r.Name)
	fs := []*openflow.FlowMod{
		classifierFromTunnel(c, r),
		spoofGuardTunnel(c, p.node, r),
		spoofGuardTunnelCluster(c, p.node, r),
		spoofGuardTunnelNode(c, p.node, r),
		l3PodToRemote(c, p.node, r),
		l3NodeToRemote(c, p.node, r),
	}
	if !p.node.ClusterCIDR.IsValid() {
		fs = append(fs, spoofGuardTunnelOthers(c, p.node, r))
	}
	return fs
}

// tunnelFlows are the node-wide flows for tunnel traffic.
func tunnelFlows(c uint64) []*openflow.FlowMod {
	return []*openflow.FlowMod{
		l3TunnelDefault(c),
	}
}

// classifierFromTunnel marks packets from a remote node's tunnel endpoint with our VNI.
func classifierFromTunnel(c uint64, r RemoteNode) *openflow.FlowMod {
	return flow(TableClassifier, prioSpecific, c, match(inPort(r.Port)),
		openflow.InstWriteMetadata{Metadata: metaFromTunnel, Mask: metaSourceMask}, gotoTable(TableSpoofGuard))
}

// spoofGuardTunnel passes IPv4 from a remote node's endpoint with our VNI and a source in its pod subnet.
func spoofGuardTunnel(c uint64, n Node, r RemoteNode) *openflow.FlowMod {
	return flow(TableSpoofGuard, prioSpecific, c,
		match(inPort(r.Port), openflow.Uint(openflow.FieldTunnelID, uint64(n.VNI)), ethType(etherIPv4), openflow.Prefix(openflow.FieldIPv4Src, r.PodCIDR)),
		gotoTable(TableConntrackZone))
}

// spoofGuardTunnelCluster drops packets from a remote node that claim another node's pod addresses.
func spoofGuardTunnelCluster(c uint64, n Node, r RemoteNode) *openflow.FlowMod {
	cluster := n.ClusterCIDR
	if !cluster.IsValid() {
		cluster = n.PodCIDR
	}
	return flow(TableSpoofGuard, prioKind, c,
		match(inPort(r.Port), openflow.Uint(openflow.FieldTunnelID, uint64(n.VNI)), ethType(etherIPv4), openflow.Prefix(openflow.FieldIPv4Src, cluster)))
}

// spoofGuardTunnelOthers drops packets from any tunnel that claim this remote's pod addresses
// but did not come from its own endpoint (without a cluster CIDR, whose flow does it: the pod
// network is then the union of the known nodes' pod CIDRs, so each remote guards its own subnet).
func spoofGuardTunnelOthers(c uint64, n Node, r RemoteNode) *openflow.FlowMod {
	return flow(TableSpoofGuard, prioKind, c,
		match(source(metaFromTunnel), openflow.Uint(openflow.FieldTunnelID, uint64(n.VNI)), ethType(etherIPv4), openflow.Prefix(openflow.FieldIPv4Src, r.PodCIDR)))
}

// spoofGuardTunnelNode passes a remote node's own traffic (sources outside the pod network).
func spoofGuardTunnelNode(c uint64, n Node, r RemoteNode) *openflow.FlowMod {
	return flow(TableSpoofGuard, prioDrop, c,
		match(inPort(r.Port), openflow.Uint(openflow.FieldTunnelID, uint64(n.VNI)), ethType(etherIPv4)),
		gotoTable(TableConntrackZone))
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

// l3TunnelDefault drops tunnel packets for nobody on this node.
func l3TunnelDefault(c uint64) *openflow.FlowMod {
	return flow(TableL3, prioKind, c, match(source(metaFromTunnel)))
}
