package ofproto

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

func l2Key(in uint32, src, dst string, vlan uint16) flow.Key {
	return flow.Key{InPort: in, EthType: 0x0800, EthSrc: mac(src), EthDst: mac(dst), VlanTCI: vlan, NwProto: 6}
}

func TestNormalLearning(t *testing.T) {
	p, c := newTestPipeline(t, 0)
	p.SetPorts([]Port{{No: 1}, {No: 2}, {No: 3}, {No: 4, Config: PortConfigNoFlood}, {No: 5, State: openflow.PortStateLinkDown}})
	mustAdd(t, p, "actions=NORMAL")
	a, b := "00:00:00:00:00:0a", "00:00:00:00:00:0b"
	// Unknown destination: flood (not in_port, no_flood or down ports).
	v := p.Version()
	tr := translate(t, p, l2Key(1, a, b, 0))
	if got := actions(tr); got != "output:2,output:3" {
		t.Fatalf("flood: %s", got)
	}
	if p.Version() == v {
		t.Fatal("learning a new address must move the version")
	}
	m := tr.Mask
	if m.EthSrc != mac("ff:ff:ff:ff:ff:ff") || m.EthDst != mac("ff:ff:ff:ff:ff:ff") || m.VlanTCI != 0x1fff || m.IPSrc != ([16]byte{}) || m.EthType != 0 {
		t.Fatalf("normal mask %s", flow.Format(flow.ExactMask(), m))
	}
	// b answers from port 2: learned, and a is known.
	if got := actions(translate(t, p, l2Key(2, b, a, 0))); got != "output:1" {
		t.Fatalf("known a: %s", got)
	}
	if got := actions(translate(t, p, l2Key(1, a, b, 0))); got != "output:2" {
		t.Fatalf("known b: %s", got)
	}
	// VLANs are separate learning domains.
	if got := actions(translate(t, p, l2Key(1, a, b, flow.VLANCFI|7))); got != "output:2,output:3" {
		t.Fatalf("other vlan: %s", got)
	}
	// Broadcast floods.
	if got := actions(translate(t, p, l2Key(2, b, "ff:ff:ff:ff:ff:ff", 0))); got != "output:1,output:3" {
		t.Fatalf("broadcast: %s", got)
	}
	// Never back to the in_port.
	if got := actions(translate(t, p, l2Key(2, b, b, 0))); got != "drop" {
		t.Fatalf("to self: %s", got)
	}
	// Station move.
	v = p.Version()
	translate(t, p, l2Key(3, b, a, 0))
	if p.Version() == v {
		t.Fatal("move must bump the version")
	}
	if got := actions(translate(t, p, l2Key(1, a, b, 0))); got != "output:3" {
		t.Fatalf("moved: %s", got)
	}
	// Credit keeps an entry alive; without it, it ages out.
	tr = translate(t, p, l2Key(3, b, a, 0))
	c.advance(200 * time.Second)
	p.Credit(tr.Rules, 1, 60, c.now())
	c.advance(200 * time.Second) // a last seen 400s ago (aged), b 200s ago (alive)
	v = p.Version()
	p.Expire()
	if p.Version() == v {
		t.Fatal("aging must bump the version")
	}
	if got := actions(translate(t, p, l2Key(1, a, b, 0))); got != "output:3" {
		t.Fatalf("b refreshed by Credit: %s", got)
	}
	c.advance(301 * time.Second)
	if got := actions(translate(t, p, l2Key(2, "00:00:00:00:00:0c", b, 0))); got != "output:1,output:3" {
		t.Fatalf("b aged out: %s", got)
	}
	// A removed port is forgotten.
	p.SetPorts([]Port{{No: 2}, {No: 3}})
	for _, e := range p.MACTable() {
		if e.Port == 1 {
			t.Fatalf("entry on removed port: %+v", e)
		}
	}
}

// TestNormalMACFlood: a port sending from 20 000 random source MACs cannot
// push out another port's addresses, and the table never exceeds its size.
func TestNormalMACFlood(t *testing.T) {
	p, c := newTestPipeline(t, 3)
	mustAdd(t, p, "actions=NORMAL")
	victim, peer := "00:00:00:00:00:0a", "00:00:00:00:00:0b"
	translate(t, p, l2Key(1, victim, peer, 0))
	translate(t, p, l2Key(2, peer, victim, 0))
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 20000; i++ {
		c.advance(time.Millisecond) // the flood's addresses are newer than the victim's
		var src [6]byte
		r.Read(src[:])
		src[0] &^= 1 // unicast
		k := l2Key(3, "00:00:00:00:00:00", peer, 0)
		k.EthSrc = src
		translate(t, p, k)
		if n := len(p.MACTable()); i%1000 == 0 && n > 8192 {
			t.Fatalf("after %d addresses the table holds %d entries", i, n)
		}
	}
	st := p.MACStats()
	if st.Entries > st.Max || st.Max != 8192 || st.PerPort != 2048 {
		t.Fatalf("stats %+v", st)
	}
	perPort := map[uint32]int{}
	for _, e := range p.MACTable() {
		perPort[e.Port]++
	}
	if perPort[3] != 2048 || perPort[1] != 1 || perPort[2] != 1 {
		t.Fatalf("entries per port %v", perPort)
	}
	if st.EvictedPort != 20000-2048 || st.EvictedVictims != 0 {
		t.Fatalf("evictions %+v", st)
	}
	if got := actions(translate(t, p, l2Key(2, peer, victim, 0))); got != "output:1" {
		t.Fatalf("victim's address lost: %s", got)
	}
}

// TestNormalMACTableFull: a full table gives up the oldest address of the
// port owning the most, so a newcomer is learned and small ports keep theirs.
func TestNormalMACTableFull(t *testing.T) {
	c := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	p := New(Config{NumTables: 1, Now: c.now, MACTableSize: 8, MACPerPort: 4})
	p.SetPorts([]Port{{No: 1}, {No: 2}, {No: 3}, {No: 4}})
	mustAdd(t, p, "actions=NORMAL")
	src := func(port, i int) string { return fmt.Sprintf("00:00:00:00:%02x:%02x", port, i) }
	for i := 0; i < 4; i++ { // ports 1 and 2 at their budget: the table is full
		c.advance(time.Second)
		translate(t, p, l2Key(1, src(1, i), "ff:ff:ff:ff:ff:ff", 0))
		translate(t, p, l2Key(2, src(2, i), "ff:ff:ff:ff:ff:ff", 0))
	}
	c.advance(time.Second)
	translate(t, p, l2Key(2, src(2, 0), "ff:ff:ff:ff:ff:ff", 0)) // refresh: port 1 now holds the oldest
	translate(t, p, l2Key(3, src(3, 0), "ff:ff:ff:ff:ff:ff", 0))
	st := p.MACStats()
	if st.Entries != 8 || st.EvictedFull != 1 || st.EvictedVictims != 1 {
		t.Fatalf("stats %+v", st)
	}
	if got := actions(translate(t, p, l2Key(4, src(4, 0), src(1, 0), 0))); got != "output:1,output:2,output:3" {
		t.Fatalf("port 1's oldest should have gone: %s", got)
	}
}

// TestNormalMACDeps: a translation records the destination lookups it
// made; learning other addresses leaves them holding, learning (or
// moving, or aging) the looked-up one does not.
func TestNormalMACDeps(t *testing.T) {
	p, c := newTestPipeline(t, 3)
	mustAdd(t, p, "actions=NORMAL")
	a, b, x := "00:00:00:00:00:0a", "00:00:00:00:00:0b", "00:00:00:00:00:0c"
	flood := translate(t, p, l2Key(1, a, b, 0)) // b unknown: flooded
	_, full := p.Versions()
	translate(t, p, l2Key(3, x, a, 0)) // an unrelated address
	if v, f := p.Versions(); f != full || v == full {
		t.Fatalf("learning must move only the version: %d %d (full %d)", v, f, full)
	}
	if len(flood.MACDeps) != 1 || !p.MACDepsHold(flood.MACDeps) {
		t.Fatalf("unrelated learning broke the flood's deps %+v", flood.MACDeps)
	}
	toA := translate(t, p, l2Key(2, b, a, 0)) // b learned on 2
	if p.MACDepsHold(flood.MACDeps) {
		t.Fatal("learning b must break the flood to b")
	}
	if !p.MACDepsHold(toA.MACDeps) {
		t.Fatal("a is where it was")
	}
	translate(t, p, l2Key(3, a, b, 0)) // a moves to 3
	if p.MACDepsHold(toA.MACDeps) {
		t.Fatal("a moved")
	}
	toA = translate(t, p, l2Key(2, b, a, 0))
	c.advance(301 * time.Second)
	if p.MACDepsHold(toA.MACDeps) {
		t.Fatal("a aged")
	}
	if bc := translate(t, p, l2Key(2, b, "ff:ff:ff:ff:ff:ff", 0)); len(bc.MACDeps) != 0 {
		t.Fatalf("a broadcast depends on no address: %+v", bc.MACDeps)
	}
	p.SetPorts([]Port{{No: 1}, {No: 2}})
	if _, f := p.Versions(); f == full {
		t.Fatal("a port change is a full change")
	}
}
