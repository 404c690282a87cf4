package pipeline

import "github.com/nagare-net/nagare/pkg/openflow"

// SpoofGuard: a pod sends only from its own port, MAC and address (ARP
// included); a remote node, with our VNI, only from its own pod subnet or
// from addresses outside the cluster's pod network (its own stack
// answering a pod), never as another node's pods. Everything else drops
// here. IPv6 from pods drops too (nagare gives pods
// no IPv6 address yet).

// spoofGuardIP passes a pod's IPv4 packets with its own MAC and address.
func spoofGuardIP(c uint64, pod Pod) *openflow.FlowMod {
	return flow(TableSpoofGuard, prioSpecific, c,
		match(inPort(pod.Port), openflow.MAC(openflow.FieldEthSrc, pod.MAC), ethType(etherIPv4), openflow.Addr(openflow.FieldIPv4Src, pod.IP)),
		gotoTable(TableL3))
}

// spoofGuardARP passes a pod's ARP with its own MAC and address as sender.
func spoofGuardARP(c uint64, pod Pod) *openflow.FlowMod {
	return flow(TableSpoofGuard, prioSpecific, c,
		match(inPort(pod.Port), openflow.MAC(openflow.FieldEthSrc, pod.MAC), ethType(etherARP),
			openflow.Addr(openflow.FieldARPSPA, pod.IP), openflow.MAC(openflow.FieldARPSHA, pod.MAC)),
		gotoTable(TableARP))
}

// spoofGuardTunnel passes IPv4 from a remote node's endpoint with our VNI and a source in its pod subnet.
func spoofGuardTunnel(c uint64, n Node, r RemoteNode) *openflow.FlowMod {
	return flow(TableSpoofGuard, prioSpecific, c,
		match(inPort(r.Port), openflow.Uint(openflow.FieldTunnelID, uint64(n.VNI)), ethType(etherIPv4), openflow.Prefix(openflow.FieldIPv4Src, r.PodCIDR)),
		gotoTable(TableL3))
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

// spoofGuardTunnelNode passes a remote node's own traffic (sources outside the pod network).
func spoofGuardTunnelNode(c uint64, n Node, r RemoteNode) *openflow.FlowMod {
	return flow(TableSpoofGuard, prioDrop, c,
		match(inPort(r.Port), openflow.Uint(openflow.FieldTunnelID, uint64(n.VNI)), ethType(etherIPv4)),
		gotoTable(TableL3))
}

// spoofGuardDefault drops whatever the flows above did not pass.
func spoofGuardDefault(c uint64) *openflow.FlowMod {
	return flow(TableSpoofGuard, prioDefault, c, match())
}
