package agent

import "testing"

// TestHostCPUs: the host's CPUs are every CPU not the DPU domain's, on
// any machine (before: CPUs from 64 on were never the host's).
func TestHostCPUs(t *testing.T) {
	for _, c := range []struct {
		list string
		n    int
		want string
	}{
		{"1", 4, "0,2,3"},
		{"0-63", 66, "64,65"},
		{"0", 1, "0"},
		{"", 8, ""},
	} {
		if got := cpusBut(c.list, c.n); got != c.want {
			t.Errorf("cpusBut(%q, %d) = %q, want %q", c.list, c.n, got, c.want)
		}
	}
}
