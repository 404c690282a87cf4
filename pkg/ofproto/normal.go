package ofproto

import (
	"sync"
	"time"
)

// output:NORMAL is a plain L2 learning switch: learn (VLAN, source MAC) →
// in_port with aging, send known unicast to its port, flood unknown,
// broadcast and multicast destinations; never send back to the in_port.
// VLANs separate learning domains but are not enforced as access/trunk
// memberships. Learning happens while translating (the first packet of a
// flow) and is refreshed by Credit (the following packets, which the fast
// path forwards without an upcall).
//
// The table is a resource every port shares, so it is bounded the way Open
// vSwitch bounds its mac-learning table (mac-table-size, default 8192) and
// then some: a port owns at most Config.MACPerPort entries (default a
// quarter of the table). A port at its budget that shows a new source MAC
// loses its own least recently seen entry; a full table loses the least
// recently seen entry of the port that owns the most (Open vSwitch's "evict
// fairly"). So a pod sending from random source MACs churns through its own
// budget and cannot push out another port's addresses.
//
// A translation records each destination lookup it made (MACDep); the
// revalidator re-translates a cached flow after a table change only if one
// of its lookups would now answer differently (MACDepsHold), not every flow
// on every newly learned address.

// macKey is a learning table key: VLAN TCI bits 0-12 (VID and the "tagged"
// bit, so untagged and VID 0 differ) and the MAC.
type macKey struct {
	vlan uint16
	mac  [6]byte
}

// macEntry is one learned address, linked into its port's list, least
// recently seen first.
type macEntry struct {
	key        macKey
	port       uint32
	seen       time.Time
	prev, next *macEntry
}

// portMACs is the list of one port's entries, least recently seen first.
type portMACs struct {
	root macEntry // sentinel: root.next is the oldest, root.prev the newest
	n    int
}

func newPortMACs() *portMACs {
	l := &portMACs{}
	l.root.next, l.root.prev = &l.root, &l.root
	return l
}

func (l *portMACs) pushBack(e *macEntry) {
	e.prev, e.next = l.root.prev, &l.root
	l.root.prev.next = e
	l.root.prev = e
	l.n++
}

func (l *portMACs) remove(e *macEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	l.n--
}

func (l *portMACs) oldest() *macEntry {
	if l.n == 0 {
		return nil
	}
	return l.root.next
}

// MACStats counts what the learning table did since the pipeline started.
type MACStats struct {
	Entries        int    `json:"entries"`
	Max            int    `json:"max"`
	PerPort        int    `json:"per_port"`
	Learned        uint64 `json:"learned"`         // new addresses
	Moved          uint64 `json:"moved"`           // an address seen on another port
	Aged           uint64 `json:"aged"`            // removed after MACAging without traffic
	EvictedPort    uint64 `json:"evicted_port"`    // a port at its budget replaced its oldest address
	EvictedFull    uint64 `json:"evicted_full"`    // a full table took the largest port's oldest address
	EvictedVictims uint64 `json:"evicted_victims"` // of EvictedFull: taken from a port other than the learner's
}

// macTable is the NORMAL learning table.
type macTable struct {
	mu      sync.Mutex
	m       map[macKey]*macEntry
	ports   map[uint32]*portMACs
	max     int
	perPort int
	st      MACStats
}

func (t *macTable) init(max, perPort int) {
	t.m = map[macKey]*macEntry{}
	t.ports = map[uint32]*portMACs{}
	t.max, t.perPort = max, perPort
}

func (t *macTable) portList(port uint32) *portMACs {
	l := t.ports[port]
	if l == nil {
		l = newPortMACs()
		t.ports[port] = l
	}
	return l
}

// drop removes e from the table (t.mu held).
func (t *macTable) drop(e *macEntry) {
	l := t.ports[e.port]
	l.remove(e)
	if l.n == 0 {
		delete(t.ports, e.port)
	}
	delete(t.m, e.key)
}

// makeRoom frees a slot for one more entry on port (t.mu held): the port's
// own oldest when it is at its budget, else the oldest of the port owning
// the most entries when the table is full.
func (t *macTable) makeRoom(port uint32, adding bool) {
	if l := t.ports[port]; l != nil && l.n >= t.perPort {
		t.drop(l.oldest())
		t.st.EvictedPort++
		return
	}
	if !adding || len(t.m) < t.max {
		return
	}
	var big *portMACs
	var bigPort uint32
	for no, l := range t.ports {
		if big == nil || l.n > big.n || l.n == big.n && l.oldest().seen.Before(big.oldest().seen) {
			big, bigPort = l, no
		}
	}
	if big == nil {
		return
	}
	t.drop(big.oldest())
	t.st.EvictedFull++
	if bigPort != port {
		t.st.EvictedVictims++
	}
}

// touch marks e seen at now: it becomes its port's newest (t.mu held).
func (t *macTable) touch(e *macEntry, now time.Time) {
	if !now.After(e.seen) {
		return
	}
	e.seen = now
	l := t.ports[e.port]
	l.remove(e)
	l.pushBack(e)
}

// learn records that k was seen on port at now. It reports whether the
// table changed in a way that alters forwarding (new, moved or evicted
// addresses).
func (t *macTable) learn(k macKey, port uint32, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.m[k]
	if e != nil && e.port == port {
		t.touch(e, now)
		return false
	}
	if e != nil {
		// A station move: the entry leaves its old port's list first, so
		// the new port's budget is checked without it.
		t.ports[e.port].remove(e)
		if t.ports[e.port].n == 0 {
			delete(t.ports, e.port)
		}
		t.makeRoom(port, false)
		e.port, e.seen = port, now
		t.portList(port).pushBack(e)
		t.st.Moved++
		return true
	}
	t.makeRoom(port, true)
	e = &macEntry{key: k, port: port, seen: now}
	t.m[k] = e
	t.portList(port).pushBack(e)
	t.st.Learned++
	return true
}

// refresh updates the age of k if it is still on port.
func (t *macTable) refresh(k macKey, port uint32, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.m[k]; e != nil && e.port == port {
		t.touch(e, now)
	}
}

// lookup returns the port of k unless it aged out.
func (t *macTable) lookup(k macKey, now time.Time, aging time.Duration) (uint32, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lookupLocked(k, now, aging)
}

func (t *macTable) lookupLocked(k macKey, now time.Time, aging time.Duration) (uint32, bool) {
	e := t.m[k]
	if e == nil || now.Sub(e.seen) >= aging {
		return 0, false
	}
	return e.port, true
}

// age removes entries older than aging and reports how many.
func (t *macTable) age(now time.Time, aging time.Duration) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, e := range t.m {
		if now.Sub(e.seen) >= aging {
			t.drop(e)
			n++
		}
	}
	t.st.Aged += uint64(n)
	return n
}

// forgetPorts removes entries whose port no longer exists.
func (t *macTable) forgetPorts(exists func(uint32) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for no, l := range t.ports {
		if exists(no) {
			continue
		}
		for e := l.oldest(); e != nil; e = l.oldest() {
			t.drop(e)
		}
	}
}

// MACEntry is one NORMAL learning table entry, for inspection.
type MACEntry struct {
	VLAN uint16 // VID | flow.VLANCFI when tagged, 0 when untagged
	MAC  [6]byte
	Port uint32
	Age  time.Duration
}

// MACTable returns the NORMAL learning table.
func (p *Pipeline) MACTable() []MACEntry {
	now := p.cfg.Now()
	p.macs.mu.Lock()
	defer p.macs.mu.Unlock()
	out := make([]MACEntry, 0, len(p.macs.m))
	for k, e := range p.macs.m {
		out = append(out, MACEntry{VLAN: k.vlan, MAC: k.mac, Port: e.port, Age: now.Sub(e.seen)})
	}
	return out
}

// MACStats returns the learning table's size, limits and counters.
func (p *Pipeline) MACStats() MACStats {
	p.macs.mu.Lock()
	defer p.macs.mu.Unlock()
	st := p.macs.st
	st.Entries, st.Max, st.PerPort = len(p.macs.m), p.macs.max, p.macs.perPort
	return st
}

// MACDep is one destination lookup a NORMAL translation made, and its
// answer: the translation holds as long as the lookup answers the same.
type MACDep struct {
	key   macKey
	port  uint32
	found bool
}

// MACDepsHold reports whether every lookup in deps answers as it did when
// it was recorded: if so, a translation that depended on nothing else of
// the learning table is still right after learning table changes.
func (p *Pipeline) MACDepsHold(deps []MACDep) bool {
	if len(deps) == 0 {
		return true
	}
	now := p.cfg.Now()
	p.macs.mu.Lock()
	defer p.macs.mu.Unlock()
	for _, d := range deps {
		port, ok := p.macs.lookupLocked(d.key, now, p.cfg.MACAging)
		if ok != d.found || port != d.port {
			return false
		}
	}
	return true
}

// normal forwards the current packet as a learning switch.
func (x *xlate) normal() {
	if x.l2Unknown {
		x.tracef(TraceNote, x.tableID, "NORMAL after pop_pbb: the customer addresses are not known: drop")
		x.err = errRecirc
		return
	}
	k := &x.cur
	x.need(&maskInPort)
	x.need(&maskEthSrc)
	x.need(&maskEthDst)
	x.need(&maskVID)
	vlan := k.VlanTCI & 0x1fff
	now := x.p.cfg.Now()
	if k.EthSrc[0]&1 == 0 && x.p.ports[k.InPort] != nil {
		src := macKey{vlan: vlan, mac: k.EthSrc}
		if x.p.macs.learn(src, k.InPort, now) {
			x.p.bumpMAC()
		}
		x.rules = append(x.rules, RuleRef{kind: refLearn, mac: src, port: k.InPort, p: x.p})
	}
	if k.EthDst[0]&1 != 0 {
		x.tracef(TraceNormal, x.tableID, "NORMAL: multicast/broadcast destination: flood")
		x.normalFlood()
		return
	}
	dst := macKey{vlan: vlan, mac: k.EthDst}
	port, ok := x.p.macs.lookup(dst, now, x.p.cfg.MACAging)
	x.macDeps = append(x.macDeps, MACDep{key: dst, port: port, found: ok})
	if !ok {
		x.tracef(TraceNormal, x.tableID, "NORMAL: unknown destination: flood")
		x.normalFlood()
		return
	}
	if port == k.InPort {
		x.tracef(TraceNormal, x.tableID, "NORMAL: destination learned on the in_port: drop")
		return
	}
	x.tracef(TraceNormal, x.tableID, "NORMAL: learned destination on port %d", port)
	x.emitOutput(port, false)
}

func (x *xlate) normalFlood() { x.flood(true) }
