package ofproto

import (
	"fmt"
	"net/netip"
	"testing"

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
