package ofproto

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nagare-net/nagare/pkg/flow"
)

func refsString(tr *Translation) string {
	s := make([]string, len(tr.Rules))
	for i, r := range tr.Rules {
		s[i] = r.String()
	}
	return strings.Join(s, "; ")
}

// The tuple space finds the rules the priority-ordered scan finds.
func TestClassifierMatchesLinearScan(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, small := range []int{0, 2, 8} {
		old := smallSubtable
		smallSubtable = small
		for pi := 0; pi < 100; pi++ {
			p, flows := randPipeline(t, r)
			for range 30 {
				k := randPacket(r)
				translate(t, p, k)
				tss := translate(t, p, k)
				linearLookup = true
				lin := translate(t, p, k)
				linearLookup = false
				if refsString(tss) != refsString(lin) || actions(tss) != actions(lin) {
					t.Fatalf("small=%d: tss %s -> %s\nlinear %s -> %s\nflows:\n%s\npacket %s", small,
						refsString(tss), actions(tss), refsString(lin), actions(lin), strings.Join(flows, "\n"),
						flow.Format(k, flow.ExactMask()))
				}
			}
		}
		smallSubtable = old
	}
}

// A big subtable misses with only the stages it needed in the mask.
func TestStagedLookupMask(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	for i := range 100 {
		mustAdd(t, p, fmt.Sprintf("priority=100,tcp,nw_dst=10.0.%d.%d,tp_dst=80,actions=output:2", i/256, i%256))
	}
	mustAdd(t, p, "priority=1,actions=output:3")
	// Not IPv4: the L2 stage (eth_type) already misses.
	arp := flow.Key{InPort: 1, EthType: 0x0806, NwProto: 1}
	arp.SetIPDst(mustAddr("10.0.0.1"))
	m := translate(t, p, arp).Mask
	if want := (flow.Mask{InPort: ^uint32(0), EthType: 0xffff, RecircID: ^uint32(0)}); m != want {
		t.Fatalf("arp mask %s", flow.Format(flow.ExactMask(), m))
	}
	// IPv4 to an unknown address: no rule's ip_dst starts 10.9, so the
	// prefix index proves the miss with ip_dst/16 — not the whole
	// address, not the L3 stage's ip_proto, not the L4 port.
	k := tcpKey(1, "10.0.0.1", "10.9.9.9", 1000, 80)
	tr := translate(t, p, k)
	m = tr.Mask
	want := flow.Mask{InPort: ^uint32(0), EthType: 0xffff, RecircID: ^uint32(0)}
	want.IPDst[0], want.IPDst[1] = 0xff, 0xff
	if actions(tr) != "output:3" || m != want {
		t.Fatalf("ipv4 miss: %s mask %s", actions(tr), flow.Format(flow.ExactMask(), m))
	}
	// Inside a known /24 but an unknown host: ip_dst/32 it must be.
	tr = translate(t, p, tcpKey(1, "10.0.0.1", "10.0.0.200", 1000, 80))
	if m = tr.Mask; actions(tr) != "output:3" || m.IPDst[3] != 0xff || m.TpDst != 0 {
		t.Fatalf("ipv4 host miss: %s mask %s", actions(tr), flow.Format(flow.ExactMask(), m))
	}
	// A hit pins the whole subtable mask.
	tr = translate(t, p, tcpKey(1, "10.0.0.1", "10.0.0.42", 1000, 80))
	if actions(tr) != "output:2" || tr.Mask.TpDst != 0xffff {
		t.Fatalf("hit: %s mask %s", actions(tr), flow.Format(flow.ExactMask(), tr.Mask))
	}
	// Deleting rules keeps the index consistent.
	for i := range 100 {
		fm := flowMod(t, 4 /* DELETE_STRICT */, fmt.Sprintf("priority=100,tcp,nw_dst=10.0.%d.%d,tp_dst=80", i/256, i%256))
		if rm, err := p.FlowMod(fm); err != nil || len(rm) != 1 {
			t.Fatalf("delete %d: %v %d", i, err, len(rm))
		}
	}
	if tr = translate(t, p, tcpKey(1, "10.0.0.1", "10.0.0.42", 1000, 80)); actions(tr) != "output:3" {
		t.Fatalf("after delete: %s", actions(tr))
	}
	if len(p.tables[0].cls.subtables) != 1 {
		t.Fatalf("%d subtables left", len(p.tables[0].cls.subtables))
	}
}
