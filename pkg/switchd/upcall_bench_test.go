package switchd

import (
	"testing"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// BenchmarkFlowSetup is the slow path's cost per new flow: translate,
// install an exact flow, execute the packet, in batches of upcallBatch as
// the upcall loop reads them when it falls behind (no upcall ring: the
// upcalls are made here).
//
//	go test -run '^$' -bench FlowSetup -benchtime 20000x ./pkg/switchd/
func BenchmarkFlowSetup(b *testing.B) {
	sw := benchSwitch(b, 0, b.N)
	sw.cfg.DisableMegaflows = true
	fm, _ := openflow.ParseFlow("table=0,priority=100,in_port=1,actions=output:2")
	if _, err := sw.pl.FlowMod(fm); err != nil {
		b.Fatal(err)
	}
	ups := udpUpcalls(b, b.N, 0)
	// As the upcall loop does: this goroutine's thread stays in the
	// namespace (and is discarded when the benchmark ends).
	done := make(chan struct{})
	b.ResetTimer()
	go func() {
		defer close(done)
		restore, err := sw.dp.LockToNetns()
		if err != nil {
			b.Error(err)
			return
		}
		defer restore()
		eb, err := sw.dp.NewExecBatch()
		if err != nil {
			b.Error(err)
			return
		}
		defer eb.Close()
		h := newUpcallHandler(sw, eb)
		for i := 0; i < b.N; i += upcallBatch {
			h.handle(ups[i:min(i+upcallBatch, b.N)])
		}
	}()
	<-done
	b.StopTimer()
	if got := sw.stats.installed.Load(); got != uint64(b.N) {
		b.Fatalf("installed %d of %d (errors %d)", got, b.N, sw.stats.installErrs.Load())
	}
	if sw.stats.executed.Load() != uint64(b.N) {
		b.Fatalf("executed %d of %d", sw.stats.executed.Load(), b.N)
	}
}
