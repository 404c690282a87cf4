package pipeline

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/nagare-net/nagare/pkg/agent/proxy"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// Reject: a new connection to a Service port with no usable endpoint
// anywhere (proxy.Reject) is answered at once, so that the client fails
// with "connection refused" instead of waiting for a timeout.
//
// What kube-proxy sends, and so what nagare sends: an ICMP destination
// unreachable, code 3 (port unreachable), from the frontend address to
// the client, for TCP and UDP alike (iptables mode: `-j REJECT`, whose
// default is icmp-port-unreachable; nftables mode: `reject`, the same).
// Linux turns it into ECONNREFUSED for a connecting TCP socket and for a
// connected UDP socket. (Antrea answers TCP with a RST; a client cannot
// tell the difference.)
//
//	ServiceLB  +new+trk, proto, nw_dst=frontend, tp_dst=port
//	             → output:CONTROLLER (max_len rejectMaxLen)
//
// The agent's Rejecter takes the PACKET_IN (table ServiceLB, a Service's
// cookie), builds the ICMP error and PACKET_OUTs it to the port the packet
// came in on. The packet was never committed: nothing stays in the
// tracker. One pod's rejects cannot starve another's: the switch shares
// its PACKET_IN budget fairly between ingress ports (docs/switch.md), and
// the Rejecter answers each port at most rejectRate per second (burst
// rejectBurst); past that the packet is dropped, as an unanswered
// connection attempt (the client retries).

const (
	// rejectMaxLen is how much of the packet the switch sends up: the
	// Ethernet and IP headers (options included) and the first 8 bytes
	// of the transport header, which is what an ICMP error quotes.
	rejectMaxLen = 14 + 60 + 8
	rejectRate   = 100 // answers per second per ingress port
	rejectBurst  = 20
)

// serviceLBReject sends a new connection to a frontend without endpoints to the agent, which rejects it.
func serviceLBReject(c uint64, proto uint8, f proxy.Frontend) *openflow.FlowMod {
	return flow(TableServiceLB, prioSpecific, c, frontendMatch(proto, f),
		apply(openflow.ActionOutput{Port: openflow.PortController, MaxLen: rejectMaxLen}))
}

// isServiceReject says whether pi came from a Service's reject flow.
func isServiceReject(pi *openflow.PacketIn) bool {
	return pi.TableID == TableServiceLB.ID && pi.Cookie&cookieFeature == cookieService
}

// errNotRejectable: the frame is not an IPv4 TCP/UDP/SCTP packet the reject flow could have sent.
var errNotRejectable = errors.New("not an IPv4 TCP, UDP or SCTP frame")

// rejectReply builds the answer to frame (an Ethernet frame with an IPv4
// packet to a frontend): an ICMP port unreachable from the frontend to
// the client, quoting the packet's IP header and first 8 bytes of its
// transport header (RFC 792), Ethernet addresses swapped.
//
//	14 bytes  Ethernet: dst = the client's MAC, src = the MAC it sent to
//	20 bytes  IPv4: TTL 64, proto 1, src = the frontend, dst = the client
//	 8 bytes  ICMP: type 3, code 3, checksum, 4 unused
//	 n bytes  the client's IP header and 8 bytes after it
func rejectReply(frame []byte) ([]byte, error) {
	if len(frame) < 14+20 || binary.BigEndian.Uint16(frame[12:]) != etherIPv4 {
		return nil, errNotRejectable
	}
	ip := frame[14:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[0]>>4 != 4 || ihl < 20 || len(ip) < ihl+8 {
		return nil, errNotRejectable
	}
	switch ip[9] {
	case 6, 17, 132:
	default:
		return nil, errNotRejectable
	}
	if binary.BigEndian.Uint16(ip[6:])&0x1fff != 0 {
		return nil, errNotRejectable // a later fragment: no transport header to quote
	}
	quote := ip[:ihl+8]
	out := make([]byte, 14+20+8+len(quote))
	copy(out[0:6], frame[6:12])
	copy(out[6:12], frame[0:6])
	binary.BigEndian.PutUint16(out[12:], etherIPv4)
	h := out[14:34]
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:], uint16(20+8+len(quote)))
	h[8], h[9] = 64, 1
	copy(h[12:16], ip[16:20]) // from the frontend the client addressed
	copy(h[16:20], ip[12:16]) // to the client
	binary.BigEndian.PutUint16(h[10:], inetChecksum(h))
	icmp := out[34:]
	icmp[0], icmp[1] = 3, 3
	copy(icmp[8:], quote)
	binary.BigEndian.PutUint16(icmp[2:], inetChecksum(icmp))
	return out, nil
}

// inetChecksum is the Internet checksum (RFC 1071) of b.
func inetChecksum(b []byte) uint16 {
	var sum uint32
	for len(b) >= 2 {
		sum += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// Rejecter answers the Service reject flows' PACKET_INs, each ingress
// port at most rejectRate a second. One serves every connection the
// agent makes to its switch, in turn.
type Rejecter struct {
	mu      sync.Mutex
	perPort map[uint32]*rejectBucket

	// Counters (metrics): answers sent, dropped by the per-port limit,
	// and PACKET_INs that were no reject or not answerable.
	Sent, Limited, Ignored atomic.Uint64
}

type rejectBucket struct {
	lim  *rate.Limiter
	last time.Time
}

// allow takes a token of port's bucket, and forgets ports idle for a
// minute (pods come and go; their numbers are reused).
func (r *Rejecter) allow(port uint32, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.perPort == nil {
		r.perPort = map[uint32]*rejectBucket{}
	}
	b := r.perPort[port]
	if b == nil {
		if len(r.perPort) > 64 {
			for p, o := range r.perPort {
				if now.Sub(o.last) > time.Minute {
					delete(r.perPort, p)
				}
			}
		}
		b = &rejectBucket{lim: rate.NewLimiter(rejectRate, rejectBurst)}
		r.perPort[port] = b
	}
	b.last = now
	return b.lim.AllowN(now, 1)
}

// Serve answers c's reject PACKET_INs until c ends or ctx is done.
func (r *Rejecter) Serve(ctx context.Context, c *Conn) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.Done():
			return
		case pi := <-c.PacketIns():
			if msg := r.answer(pi, time.Now()); msg != nil {
				if c.Send(msg) == nil {
					r.Sent.Add(1)
				}
			}
		}
	}
}

// answer is the PACKET_OUT for pi, or nil (not a reject, not answerable, over the port's limit).
func (r *Rejecter) answer(pi *openflow.PacketIn, now time.Time) *openflow.PacketOut {
	in, ok := pi.Match.Get(openflow.FieldInPort)
	if !(isServiceReject(pi) || isRedirectReject(pi)) || !ok {
		r.Ignored.Add(1)
		return nil
	}
	if t, ok := pi.Match.Get(openflow.FieldTunnelID); ok && t.Uint() != 0 {
		// From another node's tunnel: the answer would need the tunnel's
		// remote end; that node's own switch rejects its pods' packets.
		r.Ignored.Add(1)
		return nil
	}
	port := uint32(in.Uint())
	reply, err := rejectReply(pi.Data)
	if err != nil {
		r.Ignored.Add(1)
		return nil
	}
	if !r.allow(port, now) {
		r.Limited.Add(1)
		return nil
	}
	return &openflow.PacketOut{BufferID: openflow.NoBuffer, InPort: openflow.PortController,
		Actions: openflow.Actions{openflow.ActionOutput{Port: port, MaxLen: 0xffff}}, Data: reply}
}
