package ofproto

import (
	"sync"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// The fast path cannot talk to controllers. An output:CONTROLLER becomes
// flow.Userspace{Cookie: c}; c names, in a registry kept here, what the
// PACKET_IN must say (reason, table, rule cookie, max_len, metadata). A
// cookie stays valid while any rule of that table with that cookie
// exists; the registry forgets it when the last such rule goes (packet-out
// cookies, table 0xff, are kept forever: there are at most a few).

// PacketIn is what to tell the controller about a packet.
type PacketIn struct {
	Reason   uint8  // openflow.PacketInReason*
	TableID  uint8  // table of the rule that sent it; 0xff for PACKET_OUT
	Cookie   uint64 // that rule's cookie; all ones for PACKET_OUT
	MaxLen   uint16 // bytes of the packet to send; openflow.ControllerNoBuffer = all
	Metadata uint64 // the metadata register at the time
	// Match holds the pipeline fields to report (in_port, metadata and
	// tunnel_id when set). Filled in Translation.PacketIns; from
	// ControllerCookie use MatchFor with the upcall's key.
	Match openflow.Match
	// ActionIndex is the position of the matching flow.Userspace in
	// Translation.Actions: the packet to send is the input with the
	// rewrites before that index applied.
	ActionIndex int
}

// MatchFor returns the PACKET_IN match for a packet with key.
func (pi PacketIn) MatchFor(key flow.Key) openflow.Match {
	m := openflow.Match{}.Add(openflow.Uint(openflow.FieldInPort, uint64(key.InPort)))
	if pi.Metadata != 0 {
		m = m.Add(openflow.Uint(openflow.FieldMetadata, pi.Metadata))
	}
	if key.TunFlags&flow.TunPresent != 0 || key.TunID != 0 {
		m = m.Add(openflow.Uint(openflow.FieldTunnelID, uint64(key.TunID)))
	}
	return m
}

// Message builds the OFPT_PACKET_IN for frame (truncated to MaxLen) of a
// packet with key.
func (pi PacketIn) Message(key flow.Key, frame []byte) *openflow.PacketIn {
	data := frame
	if pi.MaxLen != openflow.ControllerNoBuffer && int(pi.MaxLen) < len(data) {
		data = data[:pi.MaxLen]
	}
	return &openflow.PacketIn{BufferID: openflow.NoBuffer, TotalLen: uint16(min(len(frame), 0xffff)),
		Reason: pi.Reason, TableID: pi.TableID, Cookie: pi.Cookie, Match: pi.MatchFor(key), Data: data}
}

type ctlKey struct {
	reason uint8
	table  uint8
	cookie uint64
	maxLen uint16
	meta   uint64
}

type ruleCookie struct {
	table  uint8
	cookie uint64
}

// cookieRegistry maps userspace cookies to PacketIn descriptions.
type cookieRegistry struct {
	mu    sync.Mutex
	next  uint64
	byKey map[ctlKey]uint64
	byID  map[uint64]ctlKey
	live  map[ruleCookie]int // rules per (table, cookie)
}

func (c *cookieRegistry) init() {
	c.next = 1
	c.byKey, c.byID, c.live = map[ctlKey]uint64{}, map[uint64]ctlKey{}, map[ruleCookie]int{}
}

func (c *cookieRegistry) get(k ctlKey) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id, ok := c.byKey[k]; ok {
		return id
	}
	id := c.next
	c.next++
	c.byKey[k], c.byID[id] = id, k
	return id
}

// hold and release count the rules of each (table, cookie).
func (c *cookieRegistry) hold(r *rule) {
	c.mu.Lock()
	c.live[ruleCookie{r.table, r.cookie}]++
	c.mu.Unlock()
}

func (c *cookieRegistry) release(r *rule) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rc := ruleCookie{r.table, r.cookie}
	if c.live[rc]--; c.live[rc] > 0 {
		return
	}
	delete(c.live, rc)
	for k, id := range c.byKey {
		if k.table == rc.table && k.cookie == rc.cookie {
			delete(c.byKey, k)
			delete(c.byID, id)
		}
	}
}

// ControllerCookie returns what a flow.Userspace cookie produced by this
// pipeline stands for. Match is empty: build it with MatchFor.
func (p *Pipeline) ControllerCookie(cookie uint64) (PacketIn, bool) {
	p.cookies.mu.Lock()
	defer p.cookies.mu.Unlock()
	k, ok := p.cookies.byID[cookie]
	if !ok {
		return PacketIn{}, false
	}
	return PacketIn{Reason: k.reason, TableID: k.table, Cookie: k.cookie, MaxLen: k.maxLen, Metadata: k.meta}, true
}

// controller sends the current packet to the controller: a userspace
// action for the fast path, and a PacketIn for this packet.
func (x *xlate) controller(maxLen uint16) {
	reason := openflow.PacketInReasonAction
	if x.miss {
		reason = openflow.PacketInReasonNoMatch
	}
	x.commit()
	meta := x.packet()[metaWord]
	k := ctlKey{reason: reason, table: x.tableID, cookie: x.cookie, maxLen: maxLen, meta: meta}
	c := x.p.cookies.get(k)
	pi := PacketIn{Reason: reason, TableID: x.tableID, Cookie: x.cookie, MaxLen: maxLen, Metadata: meta,
		ActionIndex: len(x.acts)}
	pi.Match = pi.MatchFor(x.in)
	x.pins = append(x.pins, pi)
	x.acts = append(x.acts, flow.Userspace{Cookie: c})
	x.tracef(TraceController, x.tableID, "CONTROLLER reason=%d max_len=%d cookie=%#x: userspace(%#x)", reason, maxLen, x.cookie, c)
}
