package pipeline

import (
	"net/netip"

	"github.com/nagare-net/nagare/pkg/agent/proxy"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// Hairpin: a pod that reaches itself through its Service. After DNAT the
// packet's source and destination are the pod's own address, and it must
// go back out of the port it came in on. Two things stand in the way:
// OpenFlow drops an output to the packet's own ingress port unless it is
// IN_PORT, and Linux drops a packet arriving from outside whose source is
// one of its own addresses (a martian). So, as Antrea does, such a
// connection is also SNATed to a virtual address, HairpinSource, in a
// second zone, and sent out with IN_PORT; its replies are un-SNATed in
// that zone first, then un-DNATed in the node's zone as usual.
//
//	EndpointDNAT  (one flow per local endpoint, above its plain one)
//	              reg5=tag, reg3=IP, reg4=port, proto, nw_src=IP
//	                → ct(commit, zone=CtZone, nat(dst=IP:port),
//	                     ct_mark |= hairpin, table=EgressRule)
//	              (the policy stage, then L3Forwarding)
//	L3Forwarding  ct_mark hairpin, -rpl → ct(commit, zone=HairpinCtZone,
//	                     nat(src=HairpinSource), table=L3Forwarding)
//	              nw_src=HairpinSource → back to the sender: eth_dst :=
//	                     eth_src, eth_src := gateway MAC, TTL−1, IN_PORT
//	ConntrackZone nw_dst=HairpinSource (a reply) → ct(zone=HairpinCtZone,
//	                     nat, table=ConntrackZone): un-SNATed, then the
//	                     node zone's ct un-DNATs it as any reply
//	L3Forwarding  ct_mark hairpin, +rpl → back to the sender, as above
//
// The hairpin bit lives in the node zone's connection, so established
// packets of both directions find it after ConntrackZone's ct; the second
// zone's connection carries no mark, so a packet coming back into
// L3Forwarding from it matches only the send-back flow.

// HairpinSource is the address a hairpinned connection's source is
// translated to. Not 169.254.0.253: that is the node's next hop to the
// Service range (nodenet.ServiceNextHop), whose replies come back to the
// gateway address, not here.
var HairpinSource = netip.MustParseAddr("169.254.0.251")

// HairpinCtZone is the zone of the hairpin SNAT (Antrea's SNAT zone).
const HairpinCtZone uint16 = 65521

// ctMarkHairpin is the ct_mark bit of a connection from an endpoint to itself.
const ctMarkHairpin = 2

// hairpinEndpoint says whether e can be a hairpin endpoint here: a pod of this node.
func (p *Pipeline) hairpinEndpoint(e proxy.Endpoint) bool {
	return p.node.PodCIDR.IsValid() && p.node.PodCIDR.Contains(e.Addr)
}

// endpointDNATHairpin commits a new connection from an endpoint to its own Service with DNAT to itself, marked hairpin.
func endpointDNATHairpin(c uint64, proto uint8, gid uint32, e proxy.Endpoint) *openflow.FlowMod {
	f := endpointDNAT(c, proto, gid, e)
	f.Priority = prioSpecific + 10
	f.Match = f.Match.Add(openflow.Addr(openflow.FieldIPv4Src, e.Addr))
	f.Instructions = []openflow.Instruction{apply(openflow.ActionNXCT{Flags: openflow.NXCTFlagCommit, Zone: CtZone, Table: TableEgressRule.ID,
		Actions: openflow.Actions{
			openflow.ActionNXNAT{Flags: openflow.NXNATFlagDst, AddrMin: e.Addr, PortMin: e.Port},
			openflow.ActionNXRegLoad2{Field: openflow.NXUintMasked(openflow.NXMCtMark, ctMarkService|ctMarkHairpin, ctMarkService|ctMarkHairpin)},
		}})}
	return f
}

// hairpinFlows are the node-wide hairpin flows (above).
func hairpinFlows(c uint64, n Node) []*openflow.FlowMod {
	hairpin := openflow.NXUintMasked(openflow.NXMCtMark, ctMarkHairpin, ctMarkHairpin)
	return []*openflow.FlowMod{
		// A hairpinned packet from the client: SNAT in the second zone.
		flow(TableL3, prioSpecific+10, c, match(ethType(etherIPv4), hairpin,
			openflow.CtState(openflow.CtStateTrk, openflow.CtStateTrk|openflow.CtStateRpl)),
			apply(openflow.ActionNXCT{Flags: openflow.NXCTFlagCommit, Zone: HairpinCtZone, Table: TableL3.ID, Actions: openflow.Actions{
				openflow.ActionNXNAT{Flags: openflow.NXNATFlagSrc, AddrMin: HairpinSource}}})),
		// ... and, SNATed, back out of its own port.
		flow(TableL3, prioSpecific+10, c, match(ethType(etherIPv4), openflow.Addr(openflow.FieldIPv4Src, HairpinSource)),
			apply(sendBack(n)...)),
		// A reply to the virtual source: un-SNAT first, then the node zone.
		flow(TableConntrackZone, prioSpecific, c, match(ethType(etherIPv4), openflow.Addr(openflow.FieldIPv4Dst, HairpinSource)),
			apply(openflow.ActionNXCT{Zone: HairpinCtZone, Table: TableConntrackZone.ID, Actions: openflow.Actions{openflow.ActionNXNAT{}}})),
		// The reply, un-NATed (from the ClusterIP to the pod): back out of its own port.
		flow(TableL3, prioSpecific+10, c, match(ethType(etherIPv4), hairpin,
			openflow.CtState(openflow.CtStateTrk|openflow.CtStateRpl, openflow.CtStateTrk|openflow.CtStateRpl)),
			apply(sendBack(n)...)),
	}
}

// sendBack routes a packet back to the pod that sent it: its MAC becomes
// the destination, the gateway's the source, TTL−1, out of IN_PORT.
func sendBack(n Node) []openflow.Action {
	ethField := func(f openflow.Field) openflow.Subfield {
		return openflow.Subfield{Field: openflow.FieldKey{Class: openflow.ClassOpenFlowBasic, Field: f}, NBits: 48}
	}
	return []openflow.Action{
		openflow.ActionNXRegMove{Src: ethField(openflow.FieldEthSrc), Dst: ethField(openflow.FieldEthDst)},
		setEthSrc(n.GatewayMAC), openflow.ActionDecNWTTL{}, output(openflow.PortInPort),
	}
}
