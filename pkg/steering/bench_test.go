package steering

import (
	"fmt"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// BenchmarkSteer measures what the XDP program adds per packet, with
// BPF_PROG_RUN's repeat loop (the kernel times the loop):
//
//	flock /tmp/nagare-timing.lock go test -run '^$' -bench Steer -benchtime 2000000x ./pkg/steering/
//
// Cases: hit and miss, cached (a packet of a flow seen before: the
// exact-match cache answers) and uncached (every packet probes the masks,
// as a flow's first packet does), under 1 and 4 masks.
// Each case reports ns/pkt, and empty-ns/pkt: an XDP program that only
// passes, run on the same packet in the same benchmark, so added =
// ns/pkt - empty-ns/pkt is the steering's own cost.
func BenchmarkSteer(b *testing.B) {
	for _, masks := range []int{1, 4} {
		u := newTestUplink(b, 2)
		// 1000 entries: exact inner destination and port, the shape a
		// controller installs per pod flow, under `masks` field sets.
		for i := 0; i < 1000; i++ {
			m := "i_dport=5001"
			switch i % masks {
			case 1:
				m = "i_sport=1000"
			case 2:
				m = "i_proto=17"
			case 3:
				m = "vni=5"
			}
			add(b, u, fmt.Sprintf("priority=10,i_dst=10.2.%d.%d,%s actions=cpu:1", i/250, i%250, m))
		}
		hit := vxlanPkt(5001)
		hit.iDst = "10.2.0.0" // entry 0, under the first mask
		miss := vxlanPkt(5001)
		miss.iDst = "10.9.0.1"
		for _, c := range []struct {
			name  string
			p     pkt
			want  uint32
			noEMC bool
		}{{"hit", hit, xdpRedirect, false}, {"miss", miss, xdpPass, false},
			{"hit-uncached", hit, xdpRedirect, true}, {"miss-uncached", miss, xdpPass, true}} {
			b.Run(fmt.Sprintf("%s-1k-entries-%d-masks", c.name, masks), func(b *testing.B) {
				// Cached: a packet of a flow seen before (the exact-match
				// cache answers); uncached: the first packet of a flow,
				// which probes the masks (the cache is switched off).
				u.emcOff = c.noEMC
				if err := u.writeSettings(u.nMasks); err != nil {
					b.Fatal(err)
				}
				onCPU0(b) // the receiving CPU; the entries send to CPU 1
				data := c.p.bytes(b)
				empty := bench(b, u.EmptyProgram(), data, b.N, xdpPass, nil)
				per := bench(b, u.Program(), data, b.N, c.want, b.ResetTimer)
				b.ReportMetric(float64(per.Nanoseconds()), "ns/pkt")
				b.ReportMetric(float64(empty.Nanoseconds()), "empty-ns/pkt")
				b.ReportMetric(float64(per.Nanoseconds()-empty.Nanoseconds()), "added-ns/pkt")
			})
		}
		u.Close()
	}
}

func bench(b *testing.B, p *ebpf.Program, data []byte, n int, want uint32, reset func()) time.Duration {
	b.Helper()
	ret, per, err := p.Benchmark(data, n, reset)
	if err != nil {
		b.Fatal(err)
	}
	if ret != want {
		b.Fatalf("verdict %d, want %d", ret, want)
	}
	return per
}
