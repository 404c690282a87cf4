package steering

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// CPUTimes is one "cpuN" line of /proc/stat, in clock ticks.
type CPUTimes struct {
	CPU        int
	Busy, Idle uint64 // Idle = idle + iowait; Busy = every other column but guest (counted in user)
}

// ReadProcStat reads the per-CPU lines of /proc/stat (path lets tests feed
// their own file).
func ReadProcStat(path string) ([]CPUTimes, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseProcStat(f)
}

func parseProcStat(r io.Reader) ([]CPUTimes, error) {
	var out []CPUTimes
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		n, err := strconv.Atoi(f[0][3:])
		if err != nil {
			return nil, fmt.Errorf("steering: /proc/stat: %q", f[0])
		}
		t := CPUTimes{CPU: n}
		// user nice system idle iowait irq softirq steal guest guest_nice
		for i, s := range f[1:] {
			if i >= 8 {
				break // guest time is already in user
			}
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("steering: /proc/stat %s: %q", f[0], s)
			}
			if i == 3 || i == 4 {
				t.Idle += v
			} else {
				t.Busy += v
			}
		}
		out = append(out, t)
	}
	return out, sc.Err()
}

// Loads turns two samples into per-CPU load percentages (index = CPU
// number). A CPU with no ticks between the samples reads 0.
func Loads(prev, cur []CPUTimes) []uint32 {
	n := 0
	for _, c := range cur {
		if c.CPU+1 > n {
			n = c.CPU + 1
		}
	}
	old := make(map[int]CPUTimes, len(prev))
	for _, p := range prev {
		old[p.CPU] = p
	}
	out := make([]uint32, n)
	for _, c := range cur {
		p := old[c.CPU]
		if c.Busy < p.Busy || c.Idle < p.Idle {
			continue // counter went back (CPU hot-plugged): no reading
		}
		busy, idle := c.Busy-p.Busy, c.Idle-p.Idle
		if busy+idle > 0 {
			out[c.CPU] = uint32(busy * 100 / (busy + idle))
		}
	}
	return out
}
