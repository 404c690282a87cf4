// Package ctlproto is the switch's control protocol, spoken by nagarectl
// and the agent on the same socket as OpenFlow (a Unix socket, or a DPU's
// control network): one JSON request per line, one JSON response per
// line; and the connection targets of both, in Open vSwitch syntax. It is
// the whole of what a client needs of the switch, so that the agent does
// not link the switch itself (pkg/switchd serves it).
package ctlproto

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Request is one request of the control protocol.
type Request struct {
	Cmd    string `json:"cmd"`
	Name   string `json:"name,omitempty"`   // port-add/port-del: device
	OFPort uint32 `json:"ofport,omitempty"` // port-add
	Kind   string `json:"kind,omitempty"`   // port-add: pod|representor|uplink|tunnel|internal
	Remote string `json:"remote,omitempty"` // port-add of a tunnel endpoint
	Local  string `json:"local,omitempty"`
	TOS    string `json:"tos,omitempty"`     // port-add of a tunnel endpoint: "inherit" copies the inner ToS (VS-extend FCF)
	Packet string `json:"packet,omitempty"`  // trace: ovs-ofctl match syntax
	Hex    string `json:"hex,omitempty"`     // trace: a whole frame in hex instead
	CtNext string `json:"ct_next,omitempty"` // trace: ct_state per recirculated pass ("trk,new;trk,est")
	// conntrack, conntrack-flush: which connections (all when empty)
	Zone   *uint16 `json:"zone,omitempty"`
	Proto  string  `json:"proto,omitempty"`
	Addr   string  `json:"addr,omitempty"`
	L4Port uint16  `json:"l4_port,omitempty"`
	// conntrack-flush: only these connections (by original tuple), within the selection above
	Conns  []ConnTuple `json:"conns,omitempty"`
	Change bool        `json:"change,omitempty"` // revalidate: translate every cached flow again
	// steering-add/-del: an entry or a match (pkg/steering syntax)
	Entry string `json:"entry,omitempty"`
	// steering-pin: workload (0 unpins) on CPU; port-add: the port's
	// workload (its FCF id), tenant and pinned CPU (PinCPU: CPU + 1, 0 = none)
	CPU      uint32 `json:"cpu,omitempty"`
	Workload uint32 `json:"workload,omitempty"`
	Tenant   uint32 `json:"tenant,omitempty"`
	PinCPU   uint32 `json:"pin_cpu,omitempty"`
	Target   string `json:"target,omitempty"` // placement-set: a port (name or number) or cookie=V[/M]
	Mode     string `json:"mode,omitempty"`   // placement-set: offload, onload or auto
}

// ConnTuple is one direction of a tracked connection, as "conntrack"
// lists it in Data (pkg/datapath.ConnTuple: the same JSON).
type ConnTuple struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16 // ICMP echo: the id, in both
	Proto            uint8
}

// Conn is a tracked connection as "conntrack" lists it in Data: Orig as
// its first packet had it, Reply as replies have it (after NAT: Reply.Src
// is the endpoint a DNATed connection reached).
type Conn struct {
	Zone        uint16
	Orig, Reply ConnTuple
	SNAT, DNAT  bool
}

// Response is the answer: text lines for people, Data for programs.
type Response struct {
	OK    bool            `json:"ok"`
	Error string          `json:"error,omitempty"`
	Lines []string        `json:"lines,omitempty"`
	Data  json.RawMessage `json:"data,omitempty"`
}

// Call sends one request of the control protocol to the switch serving the
// Unix socket path and returns its response; a response that is not OK is
// an error carrying the switch's text. The call ends with ctx (and after
// five minutes at most: a dump of a million cached flows takes seconds).
func Call(ctx context.Context, path string, req Request) (*Response, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("switch at %s: %w", path, err)
	}
	return CallConn(ctx, c, req)
}

// CallConn is Call on a connection made elsewhere (a DPU's control
// network, pkg/controlnet); it closes c.
func CallConn(ctx context.Context, c net.Conn, req Request) (*Response, error) {
	defer c.Close()
	resp, _, err := exchange(ctx, c, newScanner(c), req)
	return resp, err
}

// errClosed: the switch closed the connection without answering.
var errClosed = errors.New("closed the connection")

// closedUnanswered says whether a kept connection's call failed because
// the switch had closed it (not a timeout, not a cancelled call).
func closedUnanswered(err error) bool {
	return errors.Is(err, errClosed) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

func newScanner(c net.Conn) *bufio.Scanner {
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 64<<10), 256<<20)
	return sc
}

// exchange sends req on c and reads its response line from sc. answered
// says whether any of the response arrived (a kept connection that gets
// none was closed by the switch before it read the request). On return c
// has no deadline, unless ctx ended during the call.
func exchange(ctx context.Context, c net.Conn, sc *bufio.Scanner, req Request) (_ *Response, answered bool, _ error) {
	deadline := time.Now().Add(5 * time.Minute)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer func() {
		if stop() {
			_ = c.SetDeadline(time.Time{})
		}
	}()
	b, _ := json.Marshal(req)
	if _, err := c.Write(append(b, '\n')); err != nil {
		return nil, false, fmt.Errorf("%s: %w", req.Cmd, err)
	}
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return nil, false, fmt.Errorf("%s: %w", req.Cmd, err)
		}
		return nil, false, fmt.Errorf("%s: switch at %s %w", req.Cmd, c.RemoteAddr(), errClosed)
	}
	var resp Response
	if err := json.Unmarshal(sc.Bytes(), &resp); err != nil {
		return nil, true, fmt.Errorf("%s: %w", req.Cmd, err)
	}
	if !resp.OK {
		return nil, true, fmt.Errorf("%s: %s", req.Cmd, resp.Error)
	}
	return &resp, true, nil
}

// Client calls one switch over connections it keeps open between calls,
// as net/http keeps a host's connections: a call takes an idle connection
// or dials one, and puts it back once the whole response is read (a
// switch's control socket serves any number of requests, one after the
// other, on a connection). Concurrent calls use as many connections; at
// most MaxIdle stay open between calls. A call that finds its kept
// connection closed by the switch (a restarted switch) before any of the
// response came is sent once more on a new connection: the switch that
// closed it cannot have answered, and the new one has not seen it.
type Client struct {
	Dial    func(ctx context.Context) (net.Conn, error)
	MaxIdle int // 0: 4

	mu     sync.Mutex
	idle   []*keptConn
	closed bool
	dials  atomic.Uint64
}

type keptConn struct {
	net.Conn
	sc *bufio.Scanner
}

// Call sends req and returns the switch's response; a response that is
// not OK is an error carrying the switch's text. The call ends with ctx
// (and after five minutes at most).
func (cl *Client) Call(ctx context.Context, req Request) (*Response, error) {
	for attempt := 0; ; attempt++ {
		kc, reused, err := cl.get(ctx, attempt > 0)
		if err != nil {
			return nil, err
		}
		resp, answered, err := exchange(ctx, kc.Conn, kc.sc, req)
		if err == nil || (answered && ctx.Err() == nil) {
			// A whole answer (an error response too) leaves the
			// connection ready for the next request. A long one
			// (a conntrack listing) grew the scanner's buffer: a
			// kept connection does not hold on to it (nothing is
			// buffered past the answer's line).
			if len(kc.sc.Bytes()) > 64<<10 {
				kc.sc = newScanner(kc.Conn)
			}
			cl.put(kc)
			return resp, err
		}
		kc.Close()
		if reused && !answered && attempt == 0 && ctx.Err() == nil && closedUnanswered(err) {
			cl.closeIdle() // the others came from the same switch
			continue
		}
		return nil, err
	}
}

// Dials is how many connections the client has made.
func (cl *Client) Dials() uint64 { return cl.dials.Load() }

func (cl *Client) get(ctx context.Context, fresh bool) (*keptConn, bool, error) {
	cl.mu.Lock()
	if n := len(cl.idle); n > 0 && !fresh {
		kc := cl.idle[n-1]
		cl.idle = cl.idle[:n-1]
		cl.mu.Unlock()
		return kc, true, nil
	}
	cl.mu.Unlock()
	c, err := cl.Dial(ctx)
	if err != nil {
		return nil, false, err
	}
	cl.dials.Add(1)
	return &keptConn{Conn: c, sc: newScanner(c)}, false, nil
}

func (cl *Client) put(kc *keptConn) {
	max := cl.MaxIdle
	if max <= 0 {
		max = 4
	}
	cl.mu.Lock()
	if !cl.closed && len(cl.idle) < max {
		cl.idle = append(cl.idle, kc)
		kc = nil
	}
	cl.mu.Unlock()
	if kc != nil {
		kc.Close()
	}
}

// Close closes the idle connections; calls after it dial and close.
func (cl *Client) Close() {
	cl.mu.Lock()
	cl.closed = true
	cl.mu.Unlock()
	cl.closeIdle()
}

func (cl *Client) closeIdle() {
	cl.mu.Lock()
	idle := cl.idle
	cl.idle = nil
	cl.mu.Unlock()
	for _, kc := range idle {
		kc.Close()
	}
}

// PortInfo is one port as list-ports reports it (for programs: the
// agent finds the ports a previous run of it added).
type PortInfo struct {
	OFPort  uint32 `json:"ofport"`
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Ifindex int    `json:"ifindex,omitempty"`
	Remote  string `json:"remote,omitempty"` // a tunnel endpoint's
	Local   string `json:"local,omitempty"`
	Carrier uint32 `json:"carrier,omitempty"` // a tunnel endpoint's device port
	Device  string `json:"device,omitempty"`  // a tunnel endpoint's device
	// Hook is how the fast path sits on the port's device: "tcx", or
	// "clsact filter" for a pod port until pod attaches pause
	// (pkg/datapath/hooks.go); empty for a port with no device of its own.
	Hook string `json:"hook,omitempty"`
}
