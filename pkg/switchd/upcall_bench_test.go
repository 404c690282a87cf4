package switchd

import "testing"

// BenchmarkFlowSetup is the slow path's cost per new flow: translate,
// install an exact flow, execute the packet, in batches of upcallBatch as
// the upcall loop reads them when it falls behind (no upcall ring: the
// upcalls are made here).
//
//	go test -run '^$' -bench FlowSetup -benchtime 20000x ./pkg/switchd/
func BenchmarkFlowSetup(b *testing.B) {
	sw := idleSwitch(b, func(c *Config) {
		c.MaxFlows, c.FlowLimit, c.DisableMegaflows = b.N+1024, b.N+1024, true
		c.PortFlowLimit = -1 // every flow enters on one port
	})
	addFlow(b, sw, "table=0,priority=100,in_port=1,actions=output:2")
	ups := udpUpcalls(b, b.N, 0)
	b.ResetTimer()
	handleUpcalls(b, sw, ups)
	b.StopTimer()
	if got := sw.stats.installed.Load(); got != uint64(b.N) {
		b.Fatalf("installed %d of %d (errors %d)", got, b.N, sw.stats.installErrs.Load())
	}
	if sw.stats.executed.Load() != uint64(b.N) {
		b.Fatalf("executed %d of %d", sw.stats.executed.Load(), b.N)
	}
}
