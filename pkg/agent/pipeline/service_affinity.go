package pipeline

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/nagare-net/nagare/pkg/agent/proxy"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// Session affinity (sessionAffinity: ClientIP), as Antrea builds it on
// Open vSwitch's learn: the switch itself remembers which endpoint each
// client got, so a client's later connections follow without a round trip
// to the agent.
//
//	SessionAffinity  learned, per client and frontend (hard_timeout = the
//	                   affinity timeout): ip, proto, nw_src=client,
//	                   nw_dst=frontend, tp_dst=port → reg3=IP,
//	                   reg4[0..15]=port, reg4[16..18]=affinitySelected
//	                 default: nothing (ConntrackState resubmits here, then
//	                   to ServiceLB: learned flows cannot goto_table)
//	ServiceLB        frontend, +new+trk, reg4[16..18]=affinitySelected
//	                   → reg5=tag, goto EndpointDNAT (no group)
//	                 frontend, +new+trk → reg5=tag, group (as without affinity)
//	EndpointDNAT     reg5=tag, reg3, reg4[0..15] → learn(...) the above
//	                   into SessionAffinity, then ct(commit, nat) as without
//
// Every new connection of the client passes EndpointDNAT, whichever way
// it came, and learns again: the switch then restarts the learned flow's
// hard timeout, so the affinity lasts while the client keeps opening
// connections within the timeout, as kube-proxy's (iptables "recent
// --set" on every new connection). Established packets match learned
// flows too but ServiceLB only looks at +new.
//
// Each EndpointDNAT flow learns with a cookie of its own endpoint
// (cookieAffinity) and delete_learned: when the endpoint's flow goes
// (the endpoint left, the Service was deleted, or affinity was switched
// off and the flow replaced by one without learn), the switch deletes
// what it learned for that endpoint, and no client is sent to an endpoint
// that is gone. Sync leaves learned flows alone: the switch owns them.

// affinitySelected is reg4[16..18] when SessionAffinity chose the endpoint.
const affinitySelected = 2

// prioAffinitySelected is above serviceLB's prioSpecific: a learned
// endpoint wins over the group.
const prioAffinitySelected = prioSpecific + 10

// maxLearnTimeout is the largest hard_timeout OpenFlow can carry (16
// bits); the API allows up to 86400 s.
const maxLearnTimeout = 0xffff

func regAffinity() openflow.Subfield { return regField(regEndpointPort, 16, 3) }

// affinityDefault does nothing to a packet no learned flow claims (ServiceLB is resubmitted to next).
func affinityDefault(c uint64) *openflow.FlowMod {
	return flow(TableAffinity, prioDefault, c, match())
}

// serviceLBAffinity sends a new connection whose endpoint SessionAffinity chose straight to EndpointDNAT.
func serviceLBAffinity(c uint64, proto uint8, f proxy.Frontend, gid uint32) *openflow.FlowMod {
	m := frontendMatch(proto, f)
	m.Fields = append(m.Fields, openflow.RegMasked(regEndpointPort, affinitySelected<<16, 7<<16))
	return flow(TableServiceLB, prioAffinitySelected, c, m,
		apply(openflow.ActionNXRegLoad{Dst: regField(regServiceTag, 0, 32), Value: uint64(gid)}),
		gotoTable(TableEndpointDNAT))
}

// affinityObject is the cookie of the flows learned for one endpoint of
// one Service port (gid).
func affinityObject(k proxy.ServiceKey, gid uint32, e proxy.Endpoint) uint64 {
	return objectID(cookieAffinity, fmt.Sprintf("%s/%d/%s", k, gid, netip.AddrPortFrom(e.Addr, e.Port)))
}

// withAffinityLearn makes an EndpointDNAT flow learn its endpoint for the client first.
func withAffinityLearn(dnat *openflow.FlowMod, s *proxy.Service, proto uint8, gid uint32, e proxy.Endpoint) {
	ap := dnat.Instructions[0].(openflow.InstApplyActions)
	learn := affinityLearn(affinityObject(s.Key, gid, e), proto, s.Affinity.Timeout)
	dnat.Instructions[0] = apply(append(openflow.Actions{learn}, ap.Actions...)...)
}

// affinityLearn is the learn of an EndpointDNAT flow: in SessionAffinity,
// this client's packets to this frontend load this endpoint, for timeout.
func affinityLearn(cookie uint64, proto uint8, timeout time.Duration) openflow.ActionNXLearn {
	secs := (timeout + time.Second - 1) / time.Second
	if secs > maxLearnTimeout {
		secs = maxLearnTimeout
	}
	if secs < 1 {
		secs = 1
	}
	field := func(name string) openflow.Subfield {
		sf, err := openflow.ParseSubfield(name)
		if err != nil {
			panic(err) // names below are fixed
		}
		return sf
	}
	same := func(name string) openflow.NXLearnSpec {
		sf := field(name)
		return openflow.NXLearnSpec{Dst: openflow.NXLearnMatch, NBits: sf.NBits, Src: sf, DstField: sf}
	}
	tpDst := "tcp_dst"
	switch proto {
	case 17:
		tpDst = "udp_dst"
	case 132:
		tpDst = "sctp_dst"
	}
	ethType, ipProto := field("eth_type"), field("ip_proto")
	return openflow.ActionNXLearn{Table: TableAffinity.ID, HardTimeout: uint16(secs), Priority: prioSpecific,
		Flags: openflow.NXLearnFlagDeleteLearned, Cookie: cookie, Specs: []openflow.NXLearnSpec{
			{Dst: openflow.NXLearnMatch, NBits: 16, Imm: []byte{etherIPv4 >> 8, etherIPv4 & 0xff}, DstField: ethType},
			{Dst: openflow.NXLearnMatch, NBits: 8, Imm: []byte{0, proto}, DstField: ipProto},
			same(tpDst),
			same("ip_dst"),
			same("ip_src"),
			{Dst: openflow.NXLearnLoad, NBits: 32, Src: regField(regEndpointIP, 0, 32), DstField: regField(regEndpointIP, 0, 32)},
			{Dst: openflow.NXLearnLoad, NBits: 16, Src: regField(regEndpointPort, 0, 16), DstField: regField(regEndpointPort, 0, 16)},
			{Dst: openflow.NXLearnLoad, NBits: 3, Imm: []byte{0, affinitySelected}, DstField: regAffinity()},
		}}
}

// learnedFlow reports whether a flow in the switch is one it learned for
// session affinity (Sync leaves those alone).
func learnedFlow(table uint8, cookie uint64) bool {
	return table == TableAffinity.ID && cookie&cookieFeature == cookieAffinity
}
