package datapath

import (
	"fmt"
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/flow"
)

// The fast path's per-packet cost, measured with BPF_PROG_RUN's repeat
// loop (the kernel times the loop; no socket or device is involved):
//
//	go test -run '^$' -bench . ./pkg/datapath/   (make bench)
//
// Each benchmark reports ns/pkt, the kernel's average per repetition.

// benchRun runs pkt through the ingress program b.N times in the kernel.
func benchRun(b *testing.B, d *testDP, pkt []byte, want uint32) {
	b.Helper()
	// Warm up (fills the exact-match cache where it is on).
	d.run(pkt, "lo")
	// Without a context BPF_PROG_RUN puts the packet on lo (ifindex 1 in
	// every namespace), which newTestDP made port 1.
	var ret uint32
	var per time.Duration
	err := d.inNetns(func() error {
		var err error
		ret, per, err = d.objs.NagarePortIngress.Benchmark(pkt, b.N, b.ResetTimer)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	if ret != want {
		b.Fatalf("verdict %d, want %d; drops %v", ret, want, d.drops())
	}
	b.ReportMetric(float64(per.Nanoseconds()), "ns/pkt")
}

// installMasks installs n flows under n distinct masks; the one that
// matches the benchmark packet is under the last mask probed.
func installMasks(b *testing.B, d *testDP, n int, key flow.Key) {
	for i := 0; i < n-1; i++ {
		// Distinct masks that all look at the UDP destination port with a
		// different width, plus the source address: none matches the packet.
		m := flow.Mask{InPort: 0xffffffff, EthType: 0xffff, NwProto: 0xff, TpDst: uint16(0xffff << (i % 16))}
		m.IPSrc = [16]byte{0xff, 0xff, byte(0xff << (i / 16)), 0}
		k := key
		k.TpDst = key.TpDst + 1 + uint16(i)
		k.IPSrc[0] ^= 0x80
		if err := d.Put(flow.Flow{Key: k, Mask: m, Actions: []flow.Action{flow.Output{Port: portOut2}}}); err != nil {
			b.Fatal(err)
		}
	}
	m := flow.Mask{InPort: 0xffffffff, EthType: 0xffff, NwProto: 0xff, EthDst: [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	m.IPDst = [16]byte{0xff, 0xff, 0xff, 0xff}
	if err := d.Put(flow.Flow{Key: key, Mask: m, Actions: []flow.Action{flow.Output{Port: portOut}}}); err != nil {
		b.Fatal(err)
	}
	if got := d.NumMasks(); got != n {
		b.Fatalf("%d masks installed, want %d", got, n)
	}
}

func BenchmarkFastPath(b *testing.B) {
	pkt := udpPkt(b, "10.0.0.1", "10.0.0.2", 1000, 2000, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789")
	key := exactKeyUDP4("10.0.0.1", "10.0.0.2", 1000, 2000)

	b.Run("emc-hit", func(b *testing.B) {
		d := newTestDP(b)
		installMasks(b, d, 1, key)
		benchRun(b, d, pkt, tcActRedirect)
	})
	for _, n := range []int{1, 8, 32, 64} {
		b.Run(fmt.Sprintf("megaflow-hit-%d-masks", n), func(b *testing.B) {
			d := newTestDP(b)
			installMasks(b, d, n, key)
			if err := d.SetEMC(false); err != nil {
				b.Fatal(err)
			}
			benchRun(b, d, pkt, tcActRedirect)
		})
	}
	b.Run("miss-32-masks", func(b *testing.B) {
		d := newTestDP(b)
		installMasks(b, d, 32, key)
		miss := udpPkt(b, "10.0.0.1", "10.9.9.9", 1000, 2000, "x")
		// Misses are dropped and counted here; the upcall ring would fill.
		if err := d.SetUpcalls(false); err != nil {
			b.Fatal(err)
		}
		benchRun(b, d, miss, tcActShot)
	})
}
