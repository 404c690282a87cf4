package pipeline

import (
	"context"
	"net/netip"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// Cutting a connection a new policy denies (the agent deletes its
// conntrack entry, pkg/agent/networkpolicy.go) leaves one way back in:
// the server's next packet (data, an ACK) finds no entry, is +new, and is
// judged as a new connection from the server to the client, which the
// policy may well allow (the server is not egress-isolated, the client
// not ingress-isolated); committed, it would make the client's packets
// its replies (+est), which pass. A guard flow per cut connection closes
// it: at ConntrackCommit, where only new connections that passed policy
// arrive, the server's packets to the client (the connection's reply
// tuple) are dropped, as policy drops, instead of committed. The guard
// goes when the server has been quiet for policyCutIdle (the switch
// removes it: idle_timeout); Sync leaves guards alone.
//
//	ConntrackCommit  +new+trk, reply tuple of a cut connection → drop (note:drop:policy), idle_timeout=60

const (
	prioPolicyCut = 200 // above the commit flow (prioKind)
	policyCutIdle = 60  // seconds
)

// CutConnection is a connection the agent cut, by its reply tuple: the
// server's packets to the client as they look on the way back.
type CutConnection struct {
	Proto          uint8
	Server, Client netip.AddrPort
}

// cutGuardFlow drops a cut connection's server packets while they are new.
func cutGuardFlow(c CutConnection) *openflow.FlowMod {
	f := flow(TableCtCommit, prioPolicyCut, objectID(cookiePolicyCut, c.Server.String()+">"+c.Client.String()),
		match(ethType(etherIPv4), ctNew(), openflow.Addr(openflow.FieldIPv4Src, c.Server.Addr()), openflow.Addr(openflow.FieldIPv4Dst, c.Client.Addr()),
			openflow.Uint(openflow.FieldIPProto, uint64(c.Proto)),
			openflow.Uint(tpSrcField(c.Proto), uint64(c.Server.Port())), openflow.Uint(tpDstField(c.Proto), uint64(c.Client.Port()))),
		apply(openflow.DropNote("policy")))
	f.IdleTimeout = policyCutIdle
	return f
}

// GuardCutConnections adds the guard flows of cs (TCP, UDP and SCTP
// connections between IPv4 addresses; others need none: an ICMP echo
// reply without its request's entry is +inv, which the pipeline drops
// from pods) and waits for the switch.
func (p *Pipeline) GuardCutConnections(ctx context.Context, cs []CutConnection) error {
	msgs := make([]openflow.Message, 0, len(cs))
	for _, c := range cs {
		switch c.Proto {
		case 6, 17, 132:
		default:
			continue
		}
		if !c.Server.Addr().Is4() || !c.Client.Addr().Is4() {
			continue
		}
		msgs = append(msgs, cutGuardFlow(c))
	}
	if len(msgs) == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.send(ctx, msgs)
}

func tpSrcField(proto uint8) openflow.Field {
	switch proto {
	case 17:
		return openflow.FieldUDPSrc
	case 132:
		return openflow.FieldSCTPSrc
	}
	return openflow.FieldTCPSrc
}
