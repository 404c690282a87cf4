package lab

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// clockTicks is USER_HZ, the unit of /proc/stat and /proc/PID/stat times.
// It is 100 on every Linux architecture the lab runs on.
const clockTicks = 100

// CPUTimes is one line of /proc/stat, in clock ticks.
type CPUTimes struct {
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal uint64
}

// Busy is the time spent running something: user + nice + system + irq +
// softirq + steal (guest time is already inside user).
func (c CPUTimes) Busy() uint64 {
	return c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal
}

// ProcStat is the parsed /proc/stat: the aggregate line and one per CPU.
type ProcStat struct {
	Total  CPUTimes
	PerCPU []CPUTimes
}

// ParseProcStat parses the cpu lines of /proc/stat.
func ParseProcStat(data string) (ProcStat, error) {
	var ps ProcStat
	found := false
	for _, line := range strings.Split(data, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		var v [8]uint64
		for i := range v {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return ps, fmt.Errorf("/proc/stat: %q: %w", line, err)
			}
			v[i] = n
		}
		ct := CPUTimes{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]}
		if f[0] == "cpu" {
			ps.Total = ct
			found = true
		} else {
			ps.PerCPU = append(ps.PerCPU, ct)
		}
	}
	if !found {
		return ps, fmt.Errorf("/proc/stat: no aggregate cpu line")
	}
	return ps, nil
}

// ParsePIDStat returns utime+stime (clock ticks, all threads) from the
// contents of /proc/PID/stat.
func ParsePIDStat(data string) (uint64, error) {
	i := strings.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/PID/stat: no ')' in %q", data)
	}
	f := strings.Fields(data[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/PID/stat: %d fields after comm", len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/PID/stat: bad utime/stime %q %q", f[11], f[12])
	}
	return u + s, nil
}

// PerCPUCounters is a per-CPU counter table such as /proc/softirqs or
// /proc/interrupts: Rows[name][cpu].
type PerCPUCounters struct {
	CPUs int
	Rows map[string][]uint64
}

// Sum returns the sum of all rows per CPU.
func (c PerCPUCounters) Sum() []uint64 {
	out := make([]uint64, c.CPUs)
	for _, r := range c.Rows {
		for i, v := range r {
			out[i] += v
		}
	}
	return out
}

// ParsePerCPUCounters parses /proc/softirqs or /proc/interrupts: a header of
// CPU names, then "NAME: count count ... [description]". Rows with fewer
// counts than CPUs (ERR:, MIS: on x86) count on CPU 0 only.
func ParsePerCPUCounters(data string) (PerCPUCounters, error) {
	sc := bufio.NewScanner(strings.NewReader(data))
	if !sc.Scan() {
		return PerCPUCounters{}, fmt.Errorf("per-CPU counters: empty")
	}
	ncpu := len(strings.Fields(sc.Text()))
	if ncpu == 0 {
		return PerCPUCounters{}, fmt.Errorf("per-CPU counters: no CPU header")
	}
	c := PerCPUCounters{CPUs: ncpu, Rows: map[string][]uint64{}}
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || !strings.HasSuffix(f[0], ":") {
			continue
		}
		name := strings.TrimSuffix(f[0], ":")
		row := make([]uint64, ncpu)
		for i := 0; i < ncpu && i+1 < len(f); i++ {
			v, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				break // description text
			}
			row[i] = v
		}
		c.Rows[name] = row
	}
	return c, nil
}

// cpuSnapshot is everything sampled before and after a measurement.
type cpuSnapshot struct {
	stat       ProcStat
	pidTicks   map[int]uint64
	dpuTicks   map[int]uint64 // DPU-domain processes (DPUPlane)
	fpNs       uint64         // fast-path programs' run time and runs (bpfstats.go), when on
	fpRuns     uint64
	softirqs   PerCPUCounters
	interrupts PerCPUCounters
}

func takeSnapshot(pids []int, dpuPids ...int) (cpuSnapshot, error) {
	var s cpuSnapshot
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	if s.stat, err = ParseProcStat(string(data)); err != nil {
		return s, err
	}
	if data, err = os.ReadFile("/proc/softirqs"); err != nil {
		return s, err
	}
	if s.softirqs, err = ParsePerCPUCounters(string(data)); err != nil {
		return s, err
	}
	if data, err = os.ReadFile("/proc/interrupts"); err != nil {
		return s, err
	}
	if s.interrupts, err = ParsePerCPUCounters(string(data)); err != nil {
		return s, err
	}
	if s.pidTicks, err = pidTicks("switch", pids); err != nil {
		return s, err
	}
	if s.dpuTicks, err = pidTicks("DPU switch", dpuPids); err != nil {
		return s, err
	}
	if bpfStatsOn.Load() {
		s.fpNs, s.fpRuns, err = fastPathTime()
	}
	return s, err
}

// pidTicks reads the CPU ticks (user+system, all threads) of each process.
func pidTicks(what string, pids []int) (map[int]uint64, error) {
	ticks := map[int]uint64{}
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return nil, fmt.Errorf("%s process %d: %w", what, pid, err)
		}
		if ticks[pid], err = ParsePIDStat(string(data)); err != nil {
			return nil, err
		}
	}
	return ticks, nil
}

// CPUUsage is what the host spent during one measurement window.
type CPUUsage struct {
	// WindowSeconds is the wall time between the two samples.
	WindowSeconds float64 `json:"window_s"`
	// SwitchCPUSeconds is user+system time of the data plane's processes
	// (all threads); 0 for in-kernel data planes.
	SwitchCPUSeconds float64 `json:"switch_cpu_s"`
	// DPUCPUSeconds is user+system time of the switch processes in a DPU
	// domain (DPUPlane); their packets' softirq time is in HostCPUSeconds,
	// the DPU's CPUs being this machine's.
	DPUCPUSeconds float64 `json:"dpu_cpu_s,omitempty"`
	// HostCPUSeconds is busy time of the whole VM, all CPUs.
	HostCPUSeconds float64 `json:"host_cpu_s"`
	// HostBusyPerCPU is the busy fraction (0-1) of each CPU.
	HostBusyPerCPU []float64 `json:"host_busy_per_cpu"`
	// Softirqs and Interrupts are per-CPU counts (all kinds summed).
	Softirqs   []uint64 `json:"softirqs_per_cpu"`
	Interrupts []uint64 `json:"interrupts_per_cpu"`
	// NetRxSoftirqs is the NET_RX softirq count summed over CPUs.
	NetRxSoftirqs uint64 `json:"net_rx_softirqs"`
	// NetRxPerCPU is the NET_RX softirq count of each CPU.
	NetRxPerCPU []uint64 `json:"net_rx_per_cpu,omitempty"`
	// FastPathNs and FastPathRuns are the run time and runs of the
	// switches' fast-path programs (Scenario.BPFStats; bpfstats.go).
	FastPathNs   uint64 `json:"fast_path_ns,omitempty"`
	FastPathRuns uint64 `json:"fast_path_runs,omitempty"`
}

// FastPathNsPerPacket is the fast path's time per packet and switch, 0
// without statistics.
func (u CPUUsage) FastPathNsPerPacket() float64 {
	if u.FastPathRuns == 0 {
		return 0
	}
	return float64(u.FastPathNs) / float64(u.FastPathRuns)
}

// TotalSoftirqs sums Softirqs over CPUs.
func (u CPUUsage) TotalSoftirqs() uint64 { return sum(u.Softirqs) }

// TotalInterrupts sums Interrupts over CPUs.
func (u CPUUsage) TotalInterrupts() uint64 { return sum(u.Interrupts) }

func sum(v []uint64) uint64 {
	var s uint64
	for _, x := range v {
		s += x
	}
	return s
}

func usageBetween(a, b cpuSnapshot, window float64) CPUUsage {
	u := CPUUsage{WindowSeconds: window}
	u.SwitchCPUSeconds = cpuSecondsBetween(a.pidTicks, b.pidTicks)
	u.DPUCPUSeconds = cpuSecondsBetween(a.dpuTicks, b.dpuTicks)
	u.HostCPUSeconds = float64(b.stat.Total.Busy()-a.stat.Total.Busy()) / clockTicks
	for i := range b.stat.PerCPU {
		if i >= len(a.stat.PerCPU) {
			break
		}
		busy := float64(b.stat.PerCPU[i].Busy() - a.stat.PerCPU[i].Busy())
		total := busy + float64(b.stat.PerCPU[i].Idle+b.stat.PerCPU[i].IOWait-a.stat.PerCPU[i].Idle-a.stat.PerCPU[i].IOWait)
		f := 0.0
		if total > 0 {
			f = busy / total
		}
		u.HostBusyPerCPU = append(u.HostBusyPerCPU, f)
	}
	u.Softirqs = diffCounts(a.softirqs.Sum(), b.softirqs.Sum())
	u.Interrupts = diffCounts(a.interrupts.Sum(), b.interrupts.Sum())
	u.NetRxPerCPU = diffCounts(a.softirqs.Rows["NET_RX"], b.softirqs.Rows["NET_RX"])
	u.NetRxSoftirqs = sum(u.NetRxPerCPU)
	if b.fpRuns >= a.fpRuns && b.fpNs >= a.fpNs {
		u.FastPathNs, u.FastPathRuns = b.fpNs-a.fpNs, b.fpRuns-a.fpRuns
	}
	return u
}

// cpuSecondsBetween sums the CPU seconds each process spent from a to b.
func cpuSecondsBetween(a, b map[int]uint64) float64 {
	var secs float64
	for pid, t0 := range a {
		if t1, ok := b[pid]; ok && t1 >= t0 {
			secs += float64(t1-t0) / clockTicks
		}
	}
	return secs
}

func diffCounts(a, b []uint64) []uint64 {
	out := make([]uint64, len(b))
	for i := range b {
		if i < len(a) && b[i] >= a[i] {
			out[i] = b[i] - a[i]
		}
	}
	return out
}

// nsInode returns the inode of a namespace file (/run/netns/X or
// /proc/PID/ns/net), which identifies the namespace.
func nsInode(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// pidsWithNetnsInode lists the processes whose network namespace is one of
// inodes.
func pidsWithNetnsInode(inodes map[uint64]bool) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ino, err := nsInode(filepath.Join("/proc", e.Name(), "ns", "net"))
		if err == nil && inodes[ino] {
			pids = append(pids, pid)
		}
	}
	return pids
}

// pinThreads sets the CPU affinity of every thread of pid to cpus and
// returns a function that restores each thread's previous affinity.
func pinThreads(pid int, cpus []int) (restore func(), err error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return func() {}, err
	}
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	saved := map[int]unix.CPUSet{}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var old unix.CPUSet
		if unix.SchedGetaffinity(tid, &old) != nil {
			continue // thread gone
		}
		if unix.SchedSetaffinity(tid, &set) == nil {
			saved[tid] = old
		}
	}
	return func() {
		for tid, old := range saved {
			unix.SchedSetaffinity(tid, &old)
		}
	}, nil
}
