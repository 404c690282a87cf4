package ofproto

import (
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
