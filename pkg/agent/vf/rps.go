package vf

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The crossing's cost. On hardware, a packet a VF transmits leaves the
// host's CPU: the NIC's eswitch (or the DPU's cores) handles it and a DMA
// plus an interrupt bring it back. Here the crossing pair's receive
// queues are steered with RPS: what arrives at the representor is
// processed on the DPU domain's CPUs, what comes back at nvf<h> on the
// host's, each hand-off an inter-processor interrupt. Without CPU sets
// the crossing is only the two extra veth hops.

// maxCPU bounds a CPU number in a list (the kernel's NR_CPUS ceiling).
const maxCPU = 8191

// ParseCPUList parses a CPU list ("1", "0,2-3") into its CPUs, ascending
// and without repeats.
func ParseCPUList(list string) ([]int, error) {
	set := map[int]bool{}
	for _, part := range strings.Split(list, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("CPU list %q: %w", list, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("CPU list %q: %w", list, err)
			}
		}
		if a < 0 || b < a || b > maxCPU {
			return nil, fmt.Errorf("CPU list %q: want CPUs 0-%d", list, maxCPU)
		}
		for c := a; c <= b; c++ {
			set[c] = true
		}
	}
	if len(set) == 0 {
		return nil, fmt.Errorf("CPU list %q is empty", list)
	}
	out := make([]int, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	slices.Sort(out)
	return out, nil
}

// FormatCPUMask writes cpus as the kernel's cpumask text (what
// rps_cpus reads and shows, bitmap_parse): 32-bit hex words, most
// significant first, separated by commas; the first word unpadded, the
// others eight digits ("1,00000000" is CPU 32). A single 64-bit hex
// number is refused by the kernel beyond 32 CPUs.
func FormatCPUMask(cpus []int) string {
	top := 0
	for _, c := range cpus {
		top = max(top, c)
	}
	words := make([]uint32, top/32+1)
	for _, c := range cpus {
		words[c/32] |= 1 << (c % 32)
	}
	var b strings.Builder
	for i := len(words) - 1; i >= 0; i-- {
		if i == len(words)-1 {
			fmt.Fprintf(&b, "%x", words[i])
		} else {
			fmt.Fprintf(&b, ",%08x", words[i])
		}
	}
	return b.String()
}

// CPUMask parses a CPU list into the mask text sysfs takes.
func CPUMask(list string) (string, error) {
	cpus, err := ParseCPUList(list)
	if err != nil {
		return "", err
	}
	return FormatCPUMask(cpus), nil
}

// setRPS writes the receive-steering mask of dev's first queue in the
// namespace at nsPath. sysfs shows the devices of the namespace it was
// mounted in, so this runs on a thread of its own with a private mount
// namespace and a fresh sysfs (what `ip netns exec` does); the thread is
// never handed back to the Go scheduler.
func setRPS(nsPath, dev, mask string) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return fmt.Errorf("unshare mount namespace: %w", err)
			}
			if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
				return fmt.Errorf("make / a slave: %w", err)
			}
			if nsPath != "" {
				h, err := netns.GetFromPath(nsPath)
				if err != nil {
					return err
				}
				defer h.Close()
				if err := netns.Set(h); err != nil {
					return err
				}
			}
			if err := unix.Mount("sysfs", "/sys", "sysfs", 0, ""); err != nil {
				return fmt.Errorf("mount sysfs: %w", err)
			}
			p := filepath.Join("/sys/class/net", dev, "queues/rx-0/rps_cpus")
			if err := os.WriteFile(p, []byte(mask), 0o644); err != nil {
				return fmt.Errorf("RPS of %s: %w", dev, err)
			}
			return nil
		}()
	}()
	return <-errc
}
