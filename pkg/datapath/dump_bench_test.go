package datapath

import (
	"fmt"
	"testing"

	"github.com/nagare-net/nagare/pkg/flow"
)

// BenchmarkDump is the fast-path side of a revalidator round: reading
// every cached flow with its per-CPU counters.
//
//	go test -run '^$' -bench Dump -benchtime 5x ./pkg/datapath/
func BenchmarkDump(b *testing.B) {
	requireRoot(b)
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("flows-%d", n), func(b *testing.B) {
			d, err := Open(Config{Name: fmt.Sprintf("bench-dump-%d", n), PinRoot: testPinDir, MaxFlows: n})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Destroy()
			fillFlows(b, d, n)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				fs, err := d.Dump()
				if err != nil || len(fs) != n {
					b.Fatalf("%d flows, %v", len(fs), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/flow")
		})
	}
}

// fillFlows installs n exact UDP flows under one mask.
func fillFlows(tb testing.TB, d *Datapath, n int) {
	tb.Helper()
	m := flow.Mask{InPort: 0xffffffff, EthType: 0xffff, NwProto: 0xff, TpSrc: 0xffff, TpDst: 0xffff}
	for i := 0; i < n; i++ {
		k := flow.Key{InPort: 1, EthType: 0x0800, NwProto: 17, TpSrc: uint16(i), TpDst: uint16(i >> 16)}
		if err := d.Put(flow.Flow{Key: k, Mask: m, Actions: []flow.Action{flow.Drop{}}}); err != nil {
			tb.Fatal(err)
		}
	}
}
