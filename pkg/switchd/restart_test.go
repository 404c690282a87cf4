package switchd

import (
	"github.com/nagare-net/nagare/internal/nstest"
	"testing"
	"time"
)

// TestRestartKeepsForwarding stops the switch process (in-process: Run
// ends, handles closed) while a UDP stream runs, starts a new one on the
// same pins, and lets the controller program it again: no datagram may be
// lost, the ports come back, and the re-programmed tables take over.
func TestRestartKeepsForwarding(t *testing.T) {
	ts := startSwitch(t, 2, nil)
	ts.ofctl("add-flow", "priority=10,in_port=1,actions=output:2")
	ts.ofctl("add-flow", "priority=10,in_port=2,actions=output:1")

	const total = 4000
	stream := nstest.StartUDPStream(t, ts.Pods[0], ts.Pods[1], podIP(2)+":7300", total, total/4, 250*time.Microsecond)
	<-stream.Reached
	runDir := ts.Config().RunDir
	ts.stop()
	// The new process: same run dir, so the same fast-path instance.
	ts2 := runSwitch(t, ts.Node, ts.Pods, runDir, nil)
	if got := len(ts2.ports.list()); got != 2 {
		t.Fatalf("restarted switch has %d ports", got)
	}
	// The controller notices and programs the new switch.
	ts2.ofctl("add-flow", "priority=10,in_port=1,actions=output:2")
	ts2.ofctl("add-flow", "priority=10,in_port=2,actions=output:1")
	if got := stream.Wait(); got != total {
		t.Fatalf("received %d of %d datagrams across the restart", got, total)
	}
	if err := ts2.ping(1, 2); err != nil {
		t.Fatal(err)
	}
	ts2.stopRun()
	if err := ts2.Destroy(); err != nil {
		t.Fatal(err)
	}
}
