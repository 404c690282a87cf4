package switchd

import (
	"syscall"
	"testing"
	"time"
)

// BenchmarkFlowSetup is the slow path's cost per new flow: translate,
// install an exact flow, execute the packet, in batches of upcallBatch as
// the upcall loop reads them when it falls behind (no upcall ring: the
// upcalls are made here). Besides wall time per flow it reports the
// process's CPU time per flow (cpu-ns/op: user + system, GC included),
// the figure the lab's flow-setup scenario reports as switch µs/flow, and
// the one that moves least with what else the machine runs.
//
//	go test -run '^$' -bench FlowSetup -benchtime 100000x ./pkg/switchd/
func BenchmarkFlowSetup(b *testing.B) {
	benchFlowSetup(b, "table=0,priority=100,in_port=1,actions=output:2", upcallBatch)
}

// BenchmarkFlowSetupOne is BenchmarkFlowSetup one upcall at a time: a
// handler that keeps up with its misses wakes for each, and pays what a
// batch costs whatever its size (the map updates' and sendmmsg's system
// calls, the locks) for one flow. (The lab's flow-setup rows are not: its
// handler took ~16 flows a batch at 20 kpps, ~80 at 100 kpps; docs/lab.md.)
//
//	go test -run '^$' -bench FlowSetupOne -benchtime 30000x ./pkg/switchd/
func BenchmarkFlowSetupOne(b *testing.B) {
	benchFlowSetup(b, "table=0,priority=100,in_port=1,actions=output:2", 1)
}

// BenchmarkFlowSetupCT is BenchmarkFlowSetup through a conntrack commit,
// as the flows of a NetworkPolicy or Service pipeline: the missed packet
// is executed with BPF_PROG_RUN (not handed to a packet socket), one
// system call per packet.
//
//	go test -run '^$' -bench FlowSetupCT -benchtime 20000x ./pkg/switchd/
func BenchmarkFlowSetupCT(b *testing.B) {
	benchFlowSetup(b, "table=0,priority=100,in_port=1,ip,actions=ct(commit),output:2", upcallBatch)
}

func benchFlowSetup(b *testing.B, spec string, batch int) {
	sw := idleSwitch(b, func(c *Config) {
		c.MaxFlows, c.FlowLimit, c.DisableMegaflows = b.N+1024, b.N+1024, true
		c.PortFlowLimit = -1 // every flow enters on one port
	})
	addFlow(b, sw, spec)
	ups := udpUpcalls(b, b.N, 0)
	b.ResetTimer()
	cpu0 := processCPU(b)
	handleUpcallsIn(b, sw, ups, batch)
	cpu := processCPU(b) - cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	if got := sw.stats.installed.Load(); got != uint64(b.N) {
		b.Fatalf("installed %d of %d (errors %d)", got, b.N, sw.stats.installErrs.Load())
	}
	if sw.stats.executed.Load() != uint64(b.N) {
		b.Fatalf("executed %d of %d", sw.stats.executed.Load(), b.N)
	}
}

// processCPU is the process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
