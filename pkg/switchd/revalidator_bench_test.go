package switchd

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// BenchmarkRevalidation times one revalidator round over N cached flows:
// "steady" (stats only, tables unchanged) and "changed" (after a table
// change every flow is translated again and compared).
//
//	go test -run '^$' -bench Revalidation -benchtime 3x ./pkg/switchd/
//
// NAGARE_BENCH_1M=1 adds the 1 000 000-flow case (a minute to fill).
func BenchmarkRevalidation(b *testing.B) {
	sizes := []int{1000, 10000, 100000}
	if os.Getenv("NAGARE_BENCH_1M") != "" {
		sizes = append(sizes, 1000000)
	}
	for _, n := range sizes {
		for _, mode := range []string{"steady", "changed"} {
			b.Run(fmt.Sprintf("flows-%d/%s", n, mode), func(b *testing.B) {
				sw := benchSwitch(b, n, 0)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if mode == "changed" {
						b.StopTimer()
						fm, _ := openflow.ParseFlow(fmt.Sprintf("table=0,priority=1,tcp,tp_dst=%d,actions=drop", i+1))
						if _, err := sw.pl.FlowMod(fm); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
					sw.rv.round()
				}
				st := sw.rv.stats()
				if st.LastFlows != n || st.StaleDeleted != 0 || st.IdleDeleted != 0 {
					b.Fatalf("round covered %d flows, deleted %d stale and %d idle", st.LastFlows, st.StaleDeleted, st.IdleDeleted)
				}
				per := b.Elapsed() / time.Duration(b.N)
				b.ReportMetric(float64(per.Milliseconds()), "ms/round")
				b.ReportMetric(float64(per.Nanoseconds())/float64(n), "ns/flow")
			})
		}
	}
}

// benchSwitch makes a switch (not running) with ports 1 and 2, the rule
// udp → output:2, and n cached megaflows that agree with it (exact on the
// UDP ports, which is wider than the rule needs: revalidation keeps them).
func benchSwitch(b *testing.B, n, room int) *Switch {
	b.Helper()
	sw := idleSwitch(b, func(c *Config) { c.MaxFlows, c.FlowLimit = n+room+1024, n+room+1024 })
	addFlow(b, sw, "table=0,priority=10,udp,actions=output:2")
	mask := flow.Mask{InPort: 0xffffffff, EthType: 0xffff, NwProto: 0xff, TpSrc: 0xffff, TpDst: 0xffff}
	const chunk = 1024
	var fs []flow.Flow
	var uks []*ukey
	ids, errs := make([]uint32, chunk), make([]error, chunk)
	for i := 0; i < n; i++ {
		k := flow.Key{InPort: 1, EthType: 0x0800, NwProto: 17, NwTTL: 64, TpSrc: uint16(i), TpDst: uint16(1 + i>>16)}
		x, err := sw.translate(k, false)
		if err != nil {
			b.Fatal(err)
		}
		m := x.mask.Or(mask)
		fs = append(fs, flow.Flow{Key: k.And(m), Mask: m, Actions: x.actions})
		uks = append(uks, &ukey{packet: k, mask: m, actions: x.actions, rules: x.Rules, version: x.version, created: time.Now()})
		if len(fs) == chunk || i == n-1 {
			sw.dp.InstallBatch(fs, ids, errs)
			for j := range fs {
				if errs[j] != nil {
					b.Fatalf("flow %d not installed: %v", i-len(fs)+1+j, errs[j])
				}
				sw.cache.set(ids[j], uks[j])
			}
			fs, uks = fs[:0], uks[:0]
		}
	}
	sw.rv.round() // settle: every ukey checked against this version
	return sw
}
