package pipeline

import "github.com/nagare-net/nagare/pkg/openflow"

// The flows of each object the pipeline knows, gathered from the feature
// files (classifier.go, spoofguard.go, arp.go, l3forward.go, l2forward.go).

// nodeFlows are the node-wide flows: every table's default, the gateway.
func (p *Pipeline) nodeFlows() []*openflow.FlowMod {
	c := localObject()
	return []*openflow.FlowMod{
		classifierDefault(c),
		classifierFromGateway(c, p.node),
		spoofGuardDefault(c),
		arpDefault(c),
		arpDropOthers(c),
		arpReplies(c),
		arpToGateway(c, p.node),
		l3Default(c),
		l3TunnelDefault(c),
		l3TunnelToGateway(c, p.node),
		l2Default(c),
		l2ToGateway(c, p.node),
	}
}

// podFlows are one pod's flows.
func (p *Pipeline) podFlows(pod Pod) []*openflow.FlowMod {
	c := podObject(pod.Key)
	return []*openflow.FlowMod{
		classifierFromPod(c, pod),
		spoofGuardIP(c, pod),
		spoofGuardARP(c, pod),
		arpToPod(c, pod),
		l3RoutedToPod(c, p.node, pod),
		l3TunnelToPod(c, p.node, pod),
		l2ToPod(c, pod),
	}
}

// remoteFlows are one remote node's flows.
func (p *Pipeline) remoteFlows(r RemoteNode) []*openflow.FlowMod {
	c := nodeObject(r.Name)
	return []*openflow.FlowMod{
		classifierFromTunnel(c, r),
		spoofGuardTunnel(c, p.node, r),
		spoofGuardTunnelCluster(c, p.node, r),
		spoofGuardTunnelNode(c, p.node, r),
		l3PodToRemote(c, p.node, r),
		l3NodeToRemote(c, p.node, r),
	}
}
