package ofproto

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// benchPipeline: table 0 classifies by in_port and goes to table 1, which
// holds n rules matching tcp,nw_dst=<distinct /32>,tp_dst=80 at distinct
// priorities above a default rule. Packets are drawn over those
// destinations, so a lookup scans on average half the table.
func benchPipeline(b *testing.B, n int) (*Pipeline, []flow.Key) {
	p, _ := newTestPipeline(b, 4)
	mustAdd(b, p, "table=0,priority=10,in_port=1,actions=goto_table:1", "table=0,priority=0,actions=drop",
		"table=1,priority=0,actions=output:3")
	for i := range n {
		fm := &openflow.FlowMod{Command: openflow.FlowAdd, TableID: 1, Priority: uint16(1 + i%60000),
			BufferID: openflow.NoBuffer, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny,
			Match: openflow.Match{}.Add(openflow.Uint(openflow.FieldEthType, 0x0800), openflow.Uint(openflow.FieldIPProto, 6),
				openflow.Addr(openflow.FieldIPv4Dst, netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})),
				openflow.Uint(openflow.FieldTCPDst, 80)),
			Instructions: openflow.Instructions{openflow.InstApplyActions{Actions: openflow.Actions{openflow.ActionOutput{Port: 2}}}}}
		if _, err := p.FlowMod(fm); err != nil {
			b.Fatal(err)
		}
	}
	keys := make([]flow.Key, 256)
	for i := range keys {
		d := (i * 7919) % n
		keys[i] = tcpKey(1, "192.168.0.1", fmt.Sprintf("10.%d.%d.%d", byte(d>>16), byte(d>>8), byte(d)), uint16(1000+i), 80)
	}
	return p, keys
}

func BenchmarkTranslate(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			p, keys := benchPipeline(b, n)
			if tr, _ := p.Translate(keys[0], TranslateOptions{}); flow.FormatActions(tr.Actions) != "output:2" {
				b.Fatalf("bench pipeline: %s", flow.FormatActions(tr.Actions))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := p.Translate(keys[i%len(keys)], TranslateOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTranslateSmall is the flow-setup cost of a typical small
// pipeline: a few tables, rewrites, a group.
func BenchmarkTranslateSmall(b *testing.B) {
	p, _ := newTestPipeline(b, 4)
	addGroup(b, p, 1, openflow.GroupTypeSelect, bucket(b, 1, anyP, anyG, "output:2"), bucket(b, 1, anyP, anyG, "output:3"))
	mustAdd(b, p,
		"table=0,priority=100,in_port=1,actions=goto_table:1",
		"table=0,priority=0,actions=drop",
		"table=1,priority=200,arp,actions=NORMAL",
		"table=1,priority=100,tcp,nw_dst=10.96.0.10,tp_dst=80,actions=set_field:10.0.0.7->ip_dst,goto_table:2",
		"table=1,priority=50,ip,actions=goto_table:2",
		"table=2,priority=100,ip,nw_dst=10.0.0.0/24,actions=group:1",
		"table=2,priority=0,actions=output:4",
	)
	k := tcpKey(1, "10.0.1.1", "10.96.0.10", 1000, 80)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k.TpSrc = uint16(i)
		if _, err := p.Translate(k, TranslateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// policyFlows is one allow-list policy, NetworkPolicy-sized: 100 sources
// × 10 TCP ports × 50 destinations to port 2, anything else to port 3.
// conj writes it as Open vSwitch's conjunction (100+10+50 clause flows
// and a conj_id flow), else as the cross product (50 000 flows).
func policyFlows(conj bool) []*openflow.FlowMod {
	src := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 1, byte(i / 250), byte(i % 250)}) }
	dst := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 2, 0, byte(i)}) }
	fm := func(prio uint16, m openflow.Match, as ...openflow.Action) *openflow.FlowMod {
		return &openflow.FlowMod{Command: openflow.FlowAdd, Priority: prio, BufferID: openflow.NoBuffer,
			OutPort: openflow.PortAny, OutGroup: openflow.GroupAny, Match: m,
			Instructions: openflow.Instructions{openflow.InstApplyActions{Actions: as}}}
	}
	ip := openflow.Match{}.Add(openflow.Uint(openflow.FieldEthType, 0x0800))
	tcp := ip.Add(openflow.Uint(openflow.FieldIPProto, 6))
	out := []*openflow.FlowMod{fm(0, openflow.Match{}, openflow.ActionOutput{Port: 3})}
	if !conj {
		for s := range 100 {
			for d := range 50 {
				for p := range 10 {
					out = append(out, fm(100, tcp.Add(openflow.Addr(openflow.FieldIPv4Src, src(s)), openflow.Addr(openflow.FieldIPv4Dst, dst(d)),
						openflow.Uint(openflow.FieldTCPDst, uint64(8000+p))), openflow.ActionOutput{Port: 2}))
				}
			}
		}
		return out
	}
	clause := func(k uint8) openflow.Action { return openflow.ActionNXConjunction{ID: 1, Clause: k, NClauses: 3} }
	for s := range 100 {
		out = append(out, fm(100, ip.Add(openflow.Addr(openflow.FieldIPv4Src, src(s))), clause(1)))
	}
	for p := range 10 {
		out = append(out, fm(100, tcp.Add(openflow.Uint(openflow.FieldTCPDst, uint64(8000+p))), clause(2)))
	}
	for d := range 50 {
		out = append(out, fm(100, ip.Add(openflow.Addr(openflow.FieldIPv4Dst, dst(d))), clause(3)))
	}
	return append(out, fm(10, ip.Add(openflow.NXUint(openflow.NXMConjID, 1)), openflow.ActionOutput{Port: 2}))
}

// BenchmarkConjunctionPolicy: the flow-setup (translation) cost of the
// same policy as a conjunction and as its cross product, for packets
// allowed and denied (a source, a port or a destination outside it); the
// flows each form installs, the time to install them and the megaflows
// 256 such packets (5 of 8 allowed, each a distinct connection) cache
// are reported as metrics. Run: go test -run '^$' -bench ConjunctionPolicy ./pkg/ofproto/
func BenchmarkConjunctionPolicy(b *testing.B) {
	keys := make([]flow.Key, 256)
	for i := range keys {
		s, d, p := fmt.Sprintf("10.1.0.%d", i%100), fmt.Sprintf("10.2.0.%d", i%50), uint16(8000+i%10)
		switch i % 8 {
		case 5:
			s = "10.9.0.1"
		case 6:
			p = 22
		case 7:
			d = "10.2.1.1"
		}
		keys[i] = tcpKey(1, s, d, uint16(1000+i), p)
	}
	for _, form := range []string{"conjunction", "cross-product"} {
		b.Run(form, func(b *testing.B) {
			p, _ := newTestPipeline(b, 4)
			fms := policyFlows(form == "conjunction")
			start := time.Now()
			for _, fm := range fms {
				if _, err := p.FlowMod(fm); err != nil {
					b.Fatal(err)
				}
			}
			install := time.Since(start)
			megaflows := map[[2 * flow.KeyWords]uint64]bool{} // mask, key & mask
			for i, k := range keys {
				want := "output:2"
				if i%8 >= 5 {
					want = "output:3"
				}
				tr, _ := p.Translate(k, TranslateOptions{})
				if flow.FormatActions(tr.Actions) != want {
					b.Fatalf("%s: packet %d: %s, want %s", form, i, flow.FormatActions(tr.Actions), want)
				}
				var mf [2 * flow.KeyWords]uint64
				kw, mw := k.Words(), tr.Mask.Words()
				for j := range kw {
					mf[j], mf[flow.KeyWords+j] = mw[j], kw[j]&mw[j]
				}
				megaflows[mf] = true
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := p.Translate(keys[i%len(keys)], TranslateOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(fms)), "flows")
			b.ReportMetric(float64(install.Milliseconds()), "install-ms")
			b.ReportMetric(float64(len(megaflows)), "megaflows/256pkts")
		})
	}
}
