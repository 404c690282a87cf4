package switchd

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// ofVersion is the only OpenFlow version nagare speaks.
const ofVersion = 0x04

// ofConn is one OpenFlow connection (a controller, or a tool such as
// ovs-ofctl on the management socket). Messages from it are handled one at
// a time, in order, which is what makes BARRIER trivially correct for
// everything handled synchronously.
type ofConn struct {
	sw         *Switch
	c          net.Conn
	id         uint64
	controller bool // counts as a controller for the fail mode
	dialled    bool // the switch connected to it (--controller)
	log        *slog.Logger

	lastRx atomic.Int64 // unix nanos of the last message received

	// Everything this connection is sent goes through txq, written by
	// its own writer goroutine (see "Send queue" below).
	txq   chan txItem
	wdone chan struct{} // closed when the writer has ended
	pins  *pinSched     // PACKET_IN rate limit, shared fairly by port
	drops connDrops

	mu    sync.Mutex // role and async config
	role  uint32
	async openflow.AsyncConfig

	closeOnce sync.Once
	done      chan struct{}
}

// defaultAsync is the OpenFlow 1.3 default asynchronous configuration:
// masters/equals get every reason, slaves only port status.
func defaultAsync() openflow.AsyncConfig {
	return openflow.AsyncConfig{
		PacketInMask:    [2]uint32{1<<openflow.PacketInReasonNoMatch | 1<<openflow.PacketInReasonAction, 0},
		PortStatusMask:  [2]uint32{0x7, 0x7},
		FlowRemovedMask: [2]uint32{0xf, 0},
	}
}

func (s *Switch) newConn(c net.Conn, controller bool) *ofConn {
	id := s.connSeq.Add(1)
	oc := &ofConn{
		sw: s, c: c, id: id, controller: controller,
		log:   s.log.With("conn", id, "peer", c.RemoteAddr().String()),
		role:  openflow.RoleEqual,
		async: defaultAsync(),
		done:  make(chan struct{}),
		txq:   make(chan txItem, connQueue),
		wdone: make(chan struct{}),
	}
	oc.pins = newPinSched(s.cfg.PacketInRate, s.cfg.PacketInBurst)
	oc.lastRx.Store(time.Now().UnixNano())
	go oc.writer()
	return oc
}

// Send queue. The upcall handler (PACKET_IN), the revalidator
// (FLOW_REMOVED) and the port watcher (PORT_STATUS, under the port
// table's lock) must never wait for a controller that reads slowly: they
// only put the encoded message in the connection's bounded queue, and the
// connection's writer sends it. Replies to the connection's own requests
// wait for room (only that connection's reader is held up, which is
// backpressure on the peer that caused it); asynchronous messages never
// wait: a PACKET_IN past the connection's rate limit or past
// packetInQueue queued messages, and any asynchronous message finding the
// queue full, is dropped and counted (connDrops; nagarectl show, metrics).
// One queue keeps replies and asynchronous messages in the order they
// were made.
const (
	connQueue     = 1024 // messages queued per connection
	packetInQueue = 128  // a PACKET_IN is queued only behind fewer than this many
)

// txItem is one queued message; a PACKET_IN names its ingress port, whose
// queue slot (pinSched.reserve) is given back once it is written.
type txItem struct {
	b     []byte
	port  uint32
	pinIn bool // a PACKET_IN holding a slot of port's
}

// connDrops counts what a connection was not sent.
type connDrops struct {
	packetInRate  atomic.Uint64 // over the PACKET_IN rate limit
	packetInQueue atomic.Uint64 // PACKET_IN behind packetInQueue messages
	asyncQueue    atomic.Uint64 // PORT_STATUS / FLOW_REMOVED finding the queue full
}

// writer sends the queued messages until the connection closes; a nil
// message closes it once everything before it is written.
func (oc *ofConn) writer() {
	defer close(oc.wdone)
	for {
		select {
		case it := <-oc.txq:
			if it.pinIn {
				oc.pins.release(it.port)
			}
			if it.b == nil {
				oc.close()
				return
			}
			_ = oc.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := oc.c.Write(it.b); err != nil {
				oc.close()
				return
			}
		case <-oc.done:
			return
		}
	}
}

// enqueue puts b in the send queue; wait says whether to wait for room.
// It reports whether b was queued.
func (oc *ofConn) enqueue(b []byte, wait bool) bool {
	return oc.enqueueItem(txItem{b: b}, wait)
}

func (oc *ofConn) enqueueItem(it txItem, wait bool) bool {
	if wait {
		select {
		case oc.txq <- it:
			return true
		case <-oc.done:
			return false
		}
	}
	select {
	case oc.txq <- it:
		return true
	case <-oc.done:
		return false
	default:
		return false
	}
}

// finish closes the connection after what is queued has been written.
func (oc *ofConn) finish() {
	if oc.enqueue(nil, true) {
		<-oc.wdone
	}
	oc.close()
}

// sendAsync queues an asynchronous message other than PACKET_IN without
// waiting. It returns "" when queued, else why it was dropped (and
// counted).
func (oc *ofConn) sendAsync(b []byte) string {
	if !oc.enqueue(b, false) {
		oc.drops.asyncQueue.Add(1)
		return "async-queue"
	}
	return ""
}

// queuePacketIn queues a PACKET_IN from port that passed the rate limit
// and holds one of port's queue slots (packetInTargets reserved it).
func (oc *ofConn) queuePacketIn(b []byte, port uint32) string {
	if !oc.enqueueItem(txItem{b: b, port: port, pinIn: true}, false) {
		oc.pins.release(port)
		oc.drops.packetInQueue.Add(1)
		return refusedPacketInQ
	}
	return ""
}

// send writes one message; errors close the connection.
func (oc *ofConn) send(m openflow.Message) error {
	b, err := openflow.Marshal(m)
	if err != nil {
		return fmt.Errorf("encoding %T: %w", m, err)
	}
	return oc.sendRaw(b)
}

// sendRaw queues an encoded message, waiting for room (see "Send queue").
func (oc *ofConn) sendRaw(b []byte) error {
	if !oc.enqueue(b, true) {
		return net.ErrClosed
	}
	return nil
}

func (oc *ofConn) close() {
	oc.closeOnce.Do(func() {
		close(oc.done)
		oc.c.Close()
	})
}

// serve runs the connection until it closes: version negotiation, then one
// message at a time.
func (oc *ofConn) serve(r *openflow.Reader) {
	defer oc.finish()
	hello := openflow.NewHello(oc.sw.nextXid(), ofVersion)
	if err := oc.send(hello); err != nil {
		return
	}
	// A peer that never says HELLO is dropped after two probe intervals.
	_ = oc.c.SetReadDeadline(time.Now().Add(2 * oc.sw.cfg.ProbeInterval))
	raw, err := r.ReadRaw()
	_ = oc.c.SetReadDeadline(time.Time{})
	if err != nil {
		return
	}
	m, err := openflow.Unmarshal(raw)
	peer, ok := m.(*openflow.Hello)
	if err != nil || !ok {
		// The first message must be a HELLO; anything else fails the
		// handshake the way the spec says.
		_ = oc.send(openflow.ErrorReply(&openflow.Error{Type: openflow.ErrTypeHelloFailed, Code: openflow.HelloFailedIncompatible}, raw))
		return
	}
	if _, fail := openflow.Negotiate([]uint8{ofVersion}, peer); fail != nil {
		_ = oc.send(fail)
		oc.log.Info("version negotiation failed", "peer-versions", peer.Versions())
		return
	}
	oc.lastRx.Store(time.Now().UnixNano())
	go oc.keepalive()
	oc.sw.connUp(oc)
	defer oc.sw.connDown(oc)
	for {
		raw, err := r.ReadRaw()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				oc.log.Debug("read", "err", err)
			}
			return
		}
		oc.lastRx.Store(time.Now().UnixNano())
		if raw[0] != ofVersion {
			_ = oc.send(openflow.ErrorReply(&openflow.Error{Type: openflow.ErrTypeBadRequest, Code: openflow.BadRequestBadVersion}, raw))
			continue
		}
		msg, err := openflow.Unmarshal(raw)
		if err != nil {
			// Malformed: answer with the error the decoder chose, echoing
			// the request, and keep the connection.
			_ = oc.send(openflow.ErrorReply(err, raw))
			continue
		}
		oc.sw.handle(oc, msg, raw)
	}
}

// keepalive sends an ECHO_REQUEST after probeInterval of silence and drops
// the connection after two intervals without anything received.
func (oc *ofConn) keepalive() {
	probe := oc.sw.cfg.ProbeInterval
	t := time.NewTicker(probe / 2)
	defer t.Stop()
	for {
		select {
		case <-oc.done:
			return
		case now := <-t.C:
			idle := now.Sub(time.Unix(0, oc.lastRx.Load()))
			switch {
			case idle > 2*probe:
				oc.log.Info("no answer to echo, disconnecting", "idle", idle)
				oc.close()
				return
			case idle > probe:
				_ = oc.send(&openflow.EchoRequest{MsgHeader: openflow.MsgHeader{Xid: oc.sw.nextXid()}})
			}
		}
	}
}

// wants reports whether an asynchronous message of this kind and reason
// goes to this connection, given its role and async configuration.
func (oc *ofConn) wants(kind openflow.MsgType, reason uint8) bool {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	i := 0
	if oc.role == openflow.RoleSlave {
		i = 1
	}
	var mask uint32
	switch kind {
	case openflow.TypePacketIn:
		mask = oc.async.PacketInMask[i]
	case openflow.TypePortStatus:
		mask = oc.async.PortStatusMask[i]
	case openflow.TypeFlowRemoved:
		mask = oc.async.FlowRemovedMask[i]
	default:
		return false
	}
	return mask&(1<<reason) != 0
}

func (oc *ofConn) isSlave() bool {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	return oc.role == openflow.RoleSlave
}
