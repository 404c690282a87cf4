package switchd

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nagare-net/nagare/internal/nstest"
)

// TestFloodOnLargeBridge: FLOOD on a bridge of 24 ports is 23 outputs,
// more than a cached flow's 16 actions. The broadcast's first packet (slow
// path) and the next (fast path) must reach every other port.
func TestFloodOnLargeBridge(t *testing.T) {
	const n = 24
	ts := startSwitch(t, n, nil)
	ts.ofctl("add-flow", "priority=10,actions=FLOOD")
	rx := make([]int, n)
	for i := 1; i < n; i++ {
		rx[i] = nstest.RawSocket(t, ts.Pods[i], "eth0")
	}
	tx := nstest.RawSocket(t, ts.Pods[0], "eth0")
	for _, what := range []string{"first broadcast, by the slow path", "second broadcast, by the fast path"} {
		frame := taggedFrame(t, 10, what)
		copy(frame[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
		if _, err := unix.Write(tx, frame); err != nil {
			t.Fatal(err)
		}
		for i := 1; i < n; i++ {
			nstest.ReadFrame(t, rx[i], []byte(what), 5*time.Second)
		}
	}
	// The flood is a cached flow (before output sets, its install was
	// refused and every broadcast went through userspace, if at all).
	resp := ts.control(CtlRequest{Cmd: "dump-cache"})
	cached := strings.Join(resp.Lines, "\n")
	if !strings.Contains(cached, fmt.Sprintf("output:%d", n)) {
		t.Fatalf("no cached flood flow:\n%s", cached)
	}
	waitFor(t, "the flood rule counts both broadcasts", func() bool {
		return strings.Contains(ts.ofctl("dump-flows"), "n_packets=2")
	})
}
