package steering

// Core is one CPU's row of the Core Table.
type Core struct {
	CPU       uint32
	Load      uint32 // percent busy over the last sample period
	Pinned    uint32 // workload (pod/VM) id pinned to the CPU, 0 = none
	Flows     uint32 // choose entries that chose this CPU
	PrioFlows uint32 // of which priority flows
	Online    bool   // a cpumap target
}

// DefaultThreshold is the paper's: a CPU at or above 50 % load is not a
// candidate.
const DefaultThreshold = 50

// ReceivingCPU is Choose's answer when no CPU qualifies: the packet stays
// on the CPU that received it (STEER_CPU_RX).
const ReceivingCPU = ^uint32(0) - 1

// Choose applies the Core Table rule of seed 001 (§3.2), the same as
// steer_choose in bpf/lib/steer.h (the tests hold the two to the same
// answers). A candidate is an online CPU with no pinned workload whose
// load is below threshold.
//   - a priority flow gets the least-loaded candidate; with none
//     (overcommit), the least-loaded unpinned CPU whatever its load;
//   - another flow gets the candidate that holds no priority flow, then
//     the fewest chosen flows, then the least load: heavy flows spread
//     apart and keep off the CPUs priority flows hold;
//   - none: ReceivingCPU.
//
// Ties go to the lower CPU number.
func Choose(cores []Core, threshold uint32, prio bool) uint32 {
	best, bestAny := ReceivingCPU, ReceivingCPU
	bestScore, bestAnyLoad := ^uint64(0), ^uint64(0)
	for i, c := range cores {
		if i >= MaxCPUs {
			break
		}
		if !c.Online || c.Pinned != 0 {
			continue
		}
		if uint64(c.Load) < bestAnyLoad {
			bestAnyLoad, bestAny = uint64(c.Load), uint32(i)
		}
		if c.Load >= threshold {
			continue
		}
		score := uint64(c.Load)
		if !prio {
			p := uint64(0)
			if c.PrioFlows != 0 {
				p = 1
			}
			score = p<<48 | uint64(c.Flows&0xffff)<<32 | uint64(c.Load)
		}
		if score < bestScore {
			bestScore, best = score, uint32(i)
		}
	}
	if best == ReceivingCPU && prio {
		return bestAny
	}
	return best
}

// qualifies reports whether cpu is still an acceptable choice for a flow
// (re-evaluation keeps a choice that qualifies: moving a flow can reorder
// its packets in flight).
func qualifies(cores []Core, cpu, threshold uint32, prio bool) bool {
	if cpu >= uint32(len(cores)) {
		return false
	}
	c := cores[cpu]
	if !c.Online || c.Pinned != 0 {
		return false
	}
	return c.Load < threshold || prio && Choose(cores, threshold, true) == cpu
}
