package pipeline

import "github.com/nagare-net/nagare/pkg/openflow"

// Classifier: where a packet came in, recorded in the metadata's low bits
// for the tables after it.

// classifierFromPod marks packets from a pod's port and sends them to the spoof guard.
func classifierFromPod(c uint64, pod Pod) *openflow.FlowMod {
	return flow(TableClassifier, prioSpecific, c, match(inPort(pod.Port)),
		openflow.InstWriteMetadata{Metadata: metaFromPod, Mask: metaSourceMask}, gotoTable(TableSpoofGuard))
}

// classifierFromGateway marks packets from the node's stack; the node is trusted (no spoof guard).
func classifierFromGateway(c uint64, n Node) *openflow.FlowMod {
	return flow(TableClassifier, prioSpecific, c, match(inPort(n.GatewayPort)),
		openflow.InstWriteMetadata{Metadata: metaFromGateway, Mask: metaSourceMask}, gotoTable(TableARP))
}

// classifierFromTunnel marks packets from a remote node's tunnel endpoint with our VNI.
func classifierFromTunnel(c uint64, r RemoteNode) *openflow.FlowMod {
	return flow(TableClassifier, prioSpecific, c, match(inPort(r.Port)),
		openflow.InstWriteMetadata{Metadata: metaFromTunnel, Mask: metaSourceMask}, gotoTable(TableSpoofGuard))
}

// classifierDefault drops packets from ports the agent did not attach.
func classifierDefault(c uint64) *openflow.FlowMod {
	return flow(TableClassifier, prioDefault, c, match())
}
