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

// macKey is a learning table key: VLAN TCI bits 0-12 (VID and the "tagged"
// bit, so untagged and VID 0 differ) and the MAC.
type macKey struct {
	vlan uint16
	mac  [6]byte
}

// macEntry is one learned address.
type macEntry struct {
	port uint32
	seen time.Time
}

// macTable is the NORMAL learning table.
type macTable struct {
	mu sync.Mutex
	m  map[macKey]*macEntry
}

func (t *macTable) init() { t.m = map[macKey]*macEntry{} }

// learn records that k was seen on port at now. It reports whether the
// table changed in a way that alters forwarding (new or moved address).
func (t *macTable) learn(k macKey, port uint32, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.m[k]
	if e == nil {
		t.m[k] = &macEntry{port: port, seen: now}
		return true
	}
	moved := e.port != port
	e.port = port
	if now.After(e.seen) {
		e.seen = now
	}
	return moved
}

// refresh updates the age of k if it is still on port.
func (t *macTable) refresh(k macKey, port uint32, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.m[k]; e != nil && e.port == port && now.After(e.seen) {
		e.seen = now
	}
}

// lookup returns the port of k unless it aged out.
func (t *macTable) lookup(k macKey, now time.Time, aging time.Duration) (uint32, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
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
	for k, e := range t.m {
		if now.Sub(e.seen) >= aging {
			delete(t.m, k)
			n++
		}
	}
	return n
}

// forgetPorts removes entries whose port no longer exists.
func (t *macTable) forgetPorts(exists func(uint32) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, e := range t.m {
		if !exists(e.port) {
			delete(t.m, k)
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

// normal forwards the current packet as a learning switch.
func (x *xlate) normal() {
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
			x.p.bump()
		}
		x.rules = append(x.rules, RuleRef{kind: refLearn, mac: src, port: k.InPort, p: x.p})
	}
	if k.EthDst[0]&1 != 0 {
		x.tracef(TraceNormal, x.tableID, "NORMAL: multicast/broadcast destination: flood")
		x.normalFlood()
		return
	}
	port, ok := x.p.macs.lookup(macKey{vlan: vlan, mac: k.EthDst}, now, x.p.cfg.MACAging)
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
