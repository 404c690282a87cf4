package pipeline

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// Conn is an OpenFlow 1.3 connection to a switch, from the controller's
// side: the agent's channel to its node's nagare-switch (or any OpenFlow
// 1.3 switch). One goroutine reads; any number may send.
type Conn struct {
	c          net.Conn
	r          *openflow.Reader
	DatapathID uint64

	wmu  sync.Mutex // one message at a time on the wire
	bw   *bufio.Writer
	mu   sync.Mutex
	xid  uint32
	wait map[uint32]chan openflow.Message // replies awaited by xid (barrier, multipart)
	errs []error                          // OFPT_ERRORs since the last barrier
	done chan struct{}
	err  error // why the connection ended

	packetIns chan *openflow.PacketIn // PACKET_INs for the agent's packet-in handlers

	leaseUntil time.Time // Lease: the switch answered an echo sent before this minus the timeout
	leaseErr   error
}

// Dial connects to target (unix:PATH or tcp:HOST:PORT), negotiates
// OpenFlow 1.3 and reads the datapath id.
func Dial(ctx context.Context, target string) (*Conn, error) {
	network, addr, ok := strings.Cut(target, ":")
	if !ok || (network != "unix" && network != "tcp") {
		return nil, fmt.Errorf("openflow target %q: want unix:PATH or tcp:HOST:PORT", target)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return Open(ctx, nc, target)
}

// Open speaks OpenFlow on a connection made elsewhere (a TLS connection
// over a DPU's control network): the handshake, then the reader.
func Open(ctx context.Context, nc net.Conn, name string) (*Conn, error) {
	c := &Conn{c: nc, bw: bufio.NewWriter(nc), wait: map[uint32]chan openflow.Message{}, done: make(chan struct{}),
		packetIns: make(chan *openflow.PacketIn, packetInQueue)}
	if err := c.handshake(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("openflow handshake with %s: %w", name, err)
	}
	go c.readLoop()
	return c, nil
}

// Lease keeps the connection only while the switch answers: an ECHO every
// interval, and a switch that has not answered one within timeout is
// taken for gone (the connection closes, Done fires, Err says so). A TCP
// connection to a DPU that hangs or whose control link is cut would
// otherwise look alive for minutes.
func (c *Conn) Lease(interval, timeout time.Duration) {
	c.mu.Lock()
	c.leaseUntil = time.Now().Add(timeout)
	c.mu.Unlock()
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-c.done:
				return
			case <-t.C:
			}
			xid := c.nextXid()
			ch := c.await(xid)
			sent := time.Now()
			if err := c.write(&openflow.EchoRequest{MsgHeader: openflow.MsgHeader{Xid: xid}}); err != nil {
				c.forget(xid)
				return
			}
			select {
			case _, ok := <-ch:
				c.forget(xid)
				if !ok {
					return
				}
				c.mu.Lock()
				c.leaseUntil = sent.Add(timeout)
				c.mu.Unlock()
			case <-time.After(time.Until(c.LeaseUntil())):
				c.forget(xid)
				c.mu.Lock()
				c.leaseErr = fmt.Errorf("lease expired: no echo reply within %v", timeout)
				c.mu.Unlock()
				c.c.Close()
				return
			case <-c.done:
				c.forget(xid)
				return
			}
		}
	}()
}

// LeaseUntil is when the lease runs out unless the switch answers again.
func (c *Conn) LeaseUntil() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leaseUntil
}

func (c *Conn) handshake(ctx context.Context) error {
	dl := time.Now().Add(10 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = c.c.SetDeadline(dl)
	defer c.c.SetDeadline(time.Time{})
	r := openflow.NewReader(c.c)
	if err := c.write(openflow.NewHello(c.nextXid(), 0x04)); err != nil {
		return err
	}
	m, _, err := r.ReadMessage()
	if err != nil {
		return err
	}
	h, ok := m.(*openflow.Hello)
	if !ok {
		return fmt.Errorf("expected HELLO, got %T", m)
	}
	if _, emsg := openflow.Negotiate([]uint8{0x04}, h); emsg != nil {
		return fmt.Errorf("no common OpenFlow version (the switch offers %v)", h.Versions())
	}
	xid := c.nextXid()
	if err := c.write(&openflow.FeaturesRequest{MsgHeader: openflow.MsgHeader{Xid: xid}}); err != nil {
		return err
	}
	for {
		m, _, err := r.ReadMessage()
		if err != nil {
			return err
		}
		switch m := m.(type) {
		case *openflow.FeaturesReply:
			c.DatapathID = m.DatapathID
			c.r = r
			return nil
		case *openflow.EchoRequest:
			if err := c.write(m.Reply()); err != nil {
				return err
			}
		case *openflow.ErrorMsg:
			return m.Err()
		}
	}
}

func (c *Conn) nextXid() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.xid++
	return c.xid
}

func (c *Conn) write(msgs ...openflow.Message) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for _, m := range msgs {
		if err := openflow.WriteMessage(c.bw, m); err != nil {
			return err
		}
	}
	return c.bw.Flush()
}

func (c *Conn) readLoop() {
	var err error
	defer func() {
		c.mu.Lock()
		c.err = err
		for x, ch := range c.wait {
			close(ch)
			delete(c.wait, x)
		}
		c.mu.Unlock()
		close(c.done)
		c.c.Close()
	}()
	for {
		var m openflow.Message
		m, _, err = c.r.ReadMessage()
		if err != nil {
			return
		}
		switch m := m.(type) {
		case *openflow.EchoRequest:
			if err = c.write(m.Reply()); err != nil {
				return
			}
			continue
		case *openflow.PacketIn:
			// Never wait for the handler: a full queue drops the packet
			// (the switch already paces PACKET_INs per ingress port; this
			// keeps a slow handler from stalling barriers and replies).
			select {
			case c.packetIns <- m:
			default:
			}
			continue
		}
		xid := m.Hdr().Xid
		c.mu.Lock()
		ch := c.wait[xid]
		if e, ok := m.(*openflow.ErrorMsg); ok && ch == nil {
			// A refused FLOW_MOD: reported by the next Barrier, with
			// the message the switch echoed.
			c.errs = append(c.errs, fmt.Errorf("switch refused message %d: %w (%s)", e.Xid, e.Err(), describeEcho(e.Data)))
		}
		c.mu.Unlock()
		if ch != nil {
			select {
			case ch <- m:
			default: // the waiter left; drop
			}
		}
	}
}

// packetInQueue is how many PACKET_INs wait for the agent's handler.
const packetInQueue = 256

// PacketIns are the PACKET_INs the switch sent on this connection (closed
// never; read it until Done). Only what the agent's own flows send to the
// controller arrives here: Service rejects (service_reject.go).
func (c *Conn) PacketIns() <-chan *openflow.PacketIn { return c.packetIns }

// Done is closed when the connection has ended (the switch went away).
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the connection ended (nil while it lives).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leaseErr != nil {
		return c.leaseErr
	}
	return c.err
}

// Close ends the connection.
func (c *Conn) Close() error { return c.c.Close() }

// Send writes messages, giving each a transaction id.
func (c *Conn) Send(msgs ...openflow.Message) error {
	for _, m := range msgs {
		m.Hdr().Xid = c.nextXid()
	}
	select {
	case <-c.done:
		return fmt.Errorf("openflow connection closed: %v", c.Err())
	default:
	}
	return c.write(msgs...)
}

func (c *Conn) await(xid uint32) chan openflow.Message {
	ch := make(chan openflow.Message, 64)
	c.mu.Lock()
	c.wait[xid] = ch
	c.mu.Unlock()
	return ch
}

func (c *Conn) forget(xid uint32) {
	c.mu.Lock()
	delete(c.wait, xid)
	c.mu.Unlock()
}

// Barrier returns once the switch has processed everything sent before it
// (nagare-switch answers only when its fast path agrees with the tables),
// with every OFPT_ERROR that arrived since the previous Barrier.
func (c *Conn) Barrier(ctx context.Context) error {
	xid := c.nextXid()
	ch := c.await(xid)
	defer c.forget(xid)
	if err := c.write(&openflow.BarrierRequest{MsgHeader: openflow.MsgHeader{Xid: xid}}); err != nil {
		return err
	}
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				return fmt.Errorf("openflow connection closed during a barrier: %v", c.Err())
			}
			if _, isReply := m.(*openflow.BarrierReply); !isReply {
				continue
			}
			c.mu.Lock()
			errs := c.errs
			c.errs = nil
			c.mu.Unlock()
			return errors.Join(errs...)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// DumpFlows returns the switch's flows that req selects.
func (c *Conn) DumpFlows(ctx context.Context, req *openflow.FlowStatsRequest) ([]openflow.FlowStats, error) {
	xid := c.nextXid()
	ch := c.await(xid)
	defer c.forget(xid)
	if err := c.write(&openflow.MultipartRequest{MsgHeader: openflow.MsgHeader{Xid: xid}, Type: openflow.MPFlow, Body: req}); err != nil {
		return nil, err
	}
	var out []openflow.FlowStats
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				return nil, fmt.Errorf("openflow connection closed during a flow dump: %v", c.Err())
			}
			switch m := m.(type) {
			case *openflow.ErrorMsg:
				return nil, m.Err()
			case *openflow.MultipartReply:
				if b, ok := m.Body.(*openflow.FlowStatsReply); ok {
					out = append(out, b.Stats...)
				}
				if m.Flags&openflow.MultipartMore == 0 {
					return out, nil
				}
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// DumpGroups returns the switch's groups (OFPMP_GROUP_DESC).
func (c *Conn) DumpGroups(ctx context.Context) ([]openflow.GroupDesc, error) {
	xid := c.nextXid()
	ch := c.await(xid)
	defer c.forget(xid)
	if err := c.write(&openflow.MultipartRequest{MsgHeader: openflow.MsgHeader{Xid: xid}, Type: openflow.MPGroupDesc}); err != nil {
		return nil, err
	}
	var out []openflow.GroupDesc
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				return nil, fmt.Errorf("openflow connection closed during a group dump: %v", c.Err())
			}
			switch m := m.(type) {
			case *openflow.ErrorMsg:
				return nil, m.Err()
			case *openflow.MultipartReply:
				if b, ok := m.Body.(*openflow.GroupDescReply); ok {
					out = append(out, b.Groups...)
				}
				if m.Flags&openflow.MultipartMore == 0 {
					return out, nil
				}
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// describeEcho prints the start of the request a switch echoed in an
// error (a FLOW_MOD or GROUP_MOD, if it decodes).
func describeEcho(b []byte) string {
	if m, err := openflow.Unmarshal(b); err == nil {
		if fm, ok := m.(*openflow.FlowMod); ok {
			return fm.String()
		}
		if gm, ok := m.(*openflow.GroupMod); ok {
			return fmt.Sprintf("GROUP_MOD command %d group %d, %d buckets", gm.Command, gm.GroupID, len(gm.Buckets))
		}
		return fmt.Sprintf("%T", m)
	}
	return fmt.Sprintf("%d bytes", len(b))
}
