package pipeline

import (
	"context"
	"net"
	"net/netip"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// Transparent redirection to the node's proxy (Istio ambient's ztunnel
// role, done by the switch instead of iptables in the pod): a local pod's
// new TCP connection to a chosen port (and, if given, a chosen
// destination prefix) is committed in the node's zone with ct_mark bit 2
// and its packets are sent, unchanged but for the destination MAC, out of
// the proxy port: a veth whose other end (ProxyMAC's device) lives in the
// node's stack, where a policy rule makes every packet that arrives on it
// local (nodenet.EnsureProxyLink). The proxy listens there with
// IP_TRANSPARENT, so the accepted socket's local address is the original
// destination (ClusterIP:port or pod:port), and it opens its own
// connection to that destination from the node, which the pipeline treats
// as any node traffic (Service DNAT, policy, routing). The proxy's replies
// to the client leave the node's stack through the gateway and find the
// client's committed connection in reverse (+est+rpl).
//
//	ConntrackState (flows of this feature, above the table's default)
//	  220  from a pod, +trk-inv-rpl, ct_mark=0x4/0x4  → eth_dst:=proxy, output:proxy
//	       (a redirected connection stays redirected: the mark is the
//	       connection's, in the fast path's tracker, which outlives agent
//	       and switch restarts)
//	  210  in_port=an opted-out pod, tcp, +new+trk    → resubmit(,25),resubmit(,26)
//	  200  from a pod, tcp, [nw_dst=prefix], tp_dst=port, +new+trk
//	         proxy up:                  ct(commit,zone,nat,exec(ct_mark|=0x4)), eth_dst:=proxy, output:proxy
//	         proxy down, fail open:     resubmit(,25),resubmit(,26) (direct; the flow's counter counts them)
//	         proxy down, fail closed:   controller → the agent's Rejecter (ICMP port unreachable)
//
// Why in ConntrackState and not a table of its own: the decision needs the
// tracker's state (after ConntrackZone's recirculation into table 24) and
// must come before ServiceLB (26) translates a ClusterIP; there is no free
// id between 24 and 25 (SessionAffinity), and renumbering rewrites every
// flow on every node. Only new connections are judged: a connection that
// went direct is +est and never meets the 200 flows again, so it stays
// direct when the proxy comes back.
//
// What it skips: the policy stage (30-38) for redirected connections at
// the client's node — the proxy's own connection is the node's, which
// ingress rules admit (IngressRule, priority 240). The destination sees
// the node's gateway address as the source, not the client pod's.

// ctMarkRedirect is the ct_mark bit of connections sent to the node's proxy.
const ctMarkRedirect = 4

const (
	prioRedirectEst    = 220 // a redirected connection's later packets
	prioRedirectOptOut = 210 // an opted-out pod's new TCP connections
	prioRedirectNew    = 200 // a selected new connection
)

// Redirect says what goes to the node's proxy and where the proxy is.
type Redirect struct {
	Port  uint32           // the proxy port on the switch
	MAC   net.HardwareAddr // the proxy device's MAC (in the node's stack)
	Ports []uint16         // TCP destination ports redirected
	// Destinations limit redirection to these prefixes (ClusterIPs, pod
	// subnets); empty: any destination.
	Destinations []netip.Prefix
	// FailClosed: with the proxy down, new selected connections are
	// refused (ICMP port unreachable) instead of going direct.
	FailClosed bool
	// OptOut are pods (namespace/name) never redirected, besides those
	// marked Pod.NoRedirect (a Kubernetes annotation).
	OptOut map[string]bool
}

// redirectObject is the cookie of the node-wide redirect flows.
func redirectObject() uint64 { return objectID(cookieRedirect, "proxy-redirect") }

// SetRedirect sets (nil: removes) transparent redirection without touching
// the switch; Sync applies it. up says whether the proxy answers.
func (p *Pipeline) SetRedirect(r *Redirect, up bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.redirect, p.proxyUp = r, up
}

// SetProxyUp moves new selected connections to the proxy (up) or to the
// configured fallback (down), and waits until the switch has it.
// Established connections keep their path either way.
func (p *Pipeline) SetProxyUp(ctx context.Context, up bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.proxyUp = up
	if p.redirect == nil || p.redirect.Port == 0 {
		return nil
	}
	return p.apply(ctx, redirectNewFlows(redirectObject(), p.redirect, up), nil)
}

// redirectFlows are the node-wide redirect flows (none without a proxy).
func (p *Pipeline) redirectFlows() []*openflow.FlowMod {
	r := p.redirect
	if r == nil || r.Port == 0 {
		return nil
	}
	c := redirectObject()
	return append([]*openflow.FlowMod{redirectEstablished(c, r)}, redirectNewFlows(c, r, p.proxyUp)...)
}

// redirectPodFlows are a pod's redirect flows: its opt-out, if it opted out.
func (p *Pipeline) redirectPodFlows(c uint64, pod Pod) []*openflow.FlowMod {
	if r := p.redirect; r == nil || r.Port == 0 || !(pod.NoRedirect || r.OptOut[pod.Name]) {
		return nil
	}
	return []*openflow.FlowMod{redirectOptOut(c, pod)}
}

// redirectEstablished sends every later packet of a redirected connection from its client to the proxy.
func redirectEstablished(c uint64, r *Redirect) *openflow.FlowMod {
	return flow(TableConntrackState, prioRedirectEst, c,
		match(source(metaFromPod), ethType(etherIPv4),
			openflow.CtState(openflow.CtStateTrk, openflow.CtStateTrk|openflow.CtStateInv|openflow.CtStateRpl),
			openflow.NXUintMasked(openflow.NXMCtMark, ctMarkRedirect, ctMarkRedirect)),
		apply(setEthDst(r.MAC), output(r.Port)))
}

// redirectOptOut sends an opted-out pod's new TCP connections on as the table's default does (never to the proxy).
func redirectOptOut(c uint64, pod Pod) *openflow.FlowMod {
	return flow(TableConntrackState, prioRedirectOptOut, c,
		match(inPort(pod.Port), ethType(etherIPv4), openflow.Uint(openflow.FieldIPProto, 6), ctNew()),
		apply(resubmit(TableAffinity), resubmit(TableServiceLB)))
}

// redirectNewFlows are one flow per selected (destination, port): to the proxy, or the fallback when it is down.
func redirectNewFlows(c uint64, r *Redirect, up bool) []*openflow.FlowMod {
	dsts := r.Destinations
	if len(dsts) == 0 {
		dsts = []netip.Prefix{{}}
	}
	var fs []*openflow.FlowMod
	for _, d := range dsts {
		for _, port := range r.Ports {
			m := match(source(metaFromPod), ethType(etherIPv4), openflow.Uint(openflow.FieldIPProto, 6))
			if d.IsValid() {
				m.Fields = append(m.Fields, openflow.Prefix(openflow.FieldIPv4Dst, d.Masked()))
			}
			m.Fields = append(m.Fields, openflow.Uint(openflow.FieldTCPDst, uint64(port)), ctNew())
			fs = append(fs, flow(TableConntrackState, prioRedirectNew, c, m, redirectVerdict(r, up)))
		}
	}
	return fs
}

// redirectVerdict is what a selected new connection gets.
func redirectVerdict(r *Redirect, up bool) openflow.Instruction {
	switch {
	case up:
		return apply(openflow.ActionNXCT{Flags: openflow.NXCTFlagCommit, Zone: CtZone, Table: openflow.NXCTRecircNone, Actions: openflow.Actions{
			openflow.ActionNXNAT{},
			openflow.ActionNXRegLoad2{Field: openflow.NXUintMasked(openflow.NXMCtMark, ctMarkRedirect, ctMarkRedirect)},
		}}, setEthDst(r.MAC), output(r.Port))
	case r.FailClosed:
		return apply(openflow.ActionOutput{Port: openflow.PortController, MaxLen: rejectMaxLen})
	}
	return apply(resubmit(TableAffinity), resubmit(TableServiceLB))
}

// isRedirectReject says whether pi came from a fail-closed redirect flow.
func isRedirectReject(pi *openflow.PacketIn) bool {
	return pi.TableID == TableConntrackState.ID && pi.Cookie&cookieFeature == cookieRedirect
}
