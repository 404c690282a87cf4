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
	"fmt"
	"net"
	"net/netip"
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
	deadline := time.Now().Add(5 * time.Minute)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	b, _ := json.Marshal(req)
	if _, err := c.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("%s: %w", req.Cmd, err)
	}
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 64<<10), 256<<20)
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", req.Cmd, err)
		}
		return nil, fmt.Errorf("%s: switch at %s closed the connection", req.Cmd, c.RemoteAddr())
	}
	var resp Response
	if err := json.Unmarshal(sc.Bytes(), &resp); err != nil {
		return nil, fmt.Errorf("%s: %w", req.Cmd, err)
	}
	if !resp.OK {
		return nil, fmt.Errorf("%s: %s", req.Cmd, resp.Error)
	}
	return &resp, nil
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
}
