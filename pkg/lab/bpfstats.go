package lab

import (
	"errors"
	"io"
	"os"
	"strings"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// The fast path's own time per packet (Scenario.BPFStats): with the
// kernel's run-time statistics on, every BPF program counts its runs and
// the nanoseconds they took (run_cnt, run_time_ns). nagare's entry
// programs are what a packet runs in a switch: a recirculation is a tail
// call, which runs inside its entry program's run, so each packet counts
// once per switch it crosses, with all its passes. The statistics cost
// each run of every program two clock reads, so they are on only when a
// scenario asks (planes without BPF pay nothing, the others a little).
//
// What this measures and throughput cannot: the fast path's own share of
// a packet's cost, apart from the kernel and the applications around it
// (docs/lab.md: 511 against 184 ns a packet for the agent's pipeline and
// a one-pass table). It is not steadier than throughput from rep to rep
// on real veths (±15 %, cache state): compare medians of several reps.

// fastPathPrograms are the name prefixes (as the kernel keeps them: 15
// characters) of the programs a packet enters a switch by.
var fastPathPrograms = []string{"nagare_port", "nagare_uplink", "vf_host", "vf_wire"}

// bpfStatsOn: the statistics are on (Run, for a scenario that asks);
// takeSnapshot then reads them.
var bpfStatsOn atomic.Bool

// enableBPFStats turns the run-time statistics on until the closer is
// closed (BPF_ENABLE_STATS: off again when this process ends, whatever
// happens to it).
func enableBPFStats() (io.Closer, error) {
	return ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
}

// fastPathTime sums the run time (ns) and runs of every loaded fast-path
// entry program; programs come and go with the data planes, so the
// difference of two calls is right only while one plane runs.
func fastPathTime() (ns, runs uint64, err error) {
	var id ebpf.ProgramID
	for {
		id, err = ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return ns, runs, nil
		}
		if err != nil {
			return 0, 0, err
		}
		p, err := ebpf.NewProgramFromID(id)
		if errors.Is(err, os.ErrNotExist) {
			continue // unloaded in between
		}
		if err != nil {
			return 0, 0, err
		}
		info, ierr := p.Info()
		var st *ebpf.ProgramStats
		if ierr == nil && isFastPathProgram(info.Name) {
			st, ierr = p.Stats()
		}
		p.Close()
		if ierr != nil {
			return 0, 0, ierr
		}
		if st != nil {
			ns += uint64(st.Runtime.Nanoseconds())
			runs += st.RunCount
		}
	}
}

func isFastPathProgram(name string) bool {
	for _, p := range fastPathPrograms {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
