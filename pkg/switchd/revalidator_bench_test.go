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
// "steady" (stats only, tables unchanged), "changed" (a rule added to the
// table every flow looked up: every flow is translated again and
// compared) and "changed-elsewhere" (a rule added to a table no cached
// flow looked up: none is translated again, ofproto/changes.go).
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
		for _, mode := range []string{"steady", "changed", "changed-elsewhere"} {
			b.Run(fmt.Sprintf("flows-%d/%s", n, mode), func(b *testing.B) {
				sw := benchSwitch(b, n, 0)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if mode != "steady" {
						b.StopTimer()
						table := map[bool]int{true: 0, false: 5}[mode == "changed"]
						fm, _ := openflow.ParseFlow(fmt.Sprintf("table=%d,priority=1,tcp,tp_dst=%d,actions=drop", table, i+1))
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
	sw := idleSwitch(b, func(c *Config) { c.MaxFlows, c.FlowLimit, c.PortFlowLimit = n+room+1024, n+room+1024, -1 })
	addFlow(b, sw, "table=0,priority=10,udp,actions=output:2")
	keys := make([]flow.Key, n)
	for i := range keys {
		keys[i] = flow.Key{InPort: 1, EthType: 0x0800, NwProto: 17, NwTTL: 64, TpSrc: uint16(i), TpDst: uint16(1 + i>>16)}
	}
	cacheFlows(b, sw, keys)
	return sw
}

// cacheFlows translates keys and installs them as cached megaflows, exact
// on the UDP ports (wider than rules need: revalidation keeps them), then
// runs a round so that every ukey is checked against this version.
func cacheFlows(tb testing.TB, sw *Switch, keys []flow.Key) {
	tb.Helper()
	mask := flow.Mask{InPort: 0xffffffff, EthType: 0xffff, NwProto: 0xff, TpSrc: 0xffff, TpDst: 0xffff}
	const chunk = 1024
	var fs []flow.Flow
	var uks []*ukey
	ids, errs := make([]uint32, chunk), make([]error, chunk)
	for i, k := range keys {
		x, err := sw.translate(k, false)
		if err != nil {
			tb.Fatal(err)
		}
		m := x.mask.Or(mask)
		fs = append(fs, flow.Flow{Key: k.And(m), Mask: m, Actions: x.actions})
		uks = append(uks, &ukey{packet: k, mask: m, actions: x.actions, rules: x.Rules, version: x.version, created: time.Now()})
		if len(fs) == chunk || i == len(keys)-1 {
			sw.dp.InstallBatch(fs, ids, errs)
			for j := range fs {
				if errs[j] != nil {
					tb.Fatalf("flow %d not installed: %v", i-len(fs)+1+j, errs[j])
				}
				sw.cache.set(ids[j], uks[j])
			}
			fs, uks = fs[:0], uks[:0]
		}
	}
	sw.rv.round()
}
