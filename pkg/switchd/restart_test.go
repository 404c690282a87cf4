package switchd

import (
	"net"
	"strconv"
	"sync/atomic"
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

	var srv net.PacketConn
	var err error
	ts.Pods[1].In(t, func() { srv, err = net.ListenPacket("udp4", podIP(2)+":7300") })
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var received atomic.Int64
	go func() {
		b := make([]byte, 64)
		for {
			if _, _, err := srv.ReadFrom(b); err != nil {
				return
			}
			received.Add(1)
		}
	}()
	var c net.Conn
	ts.Pods[0].In(t, func() { c, err = net.Dial("udp4", podIP(2)+":7300") })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const total = 4000
	half := make(chan struct{})
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := 0; i < total; i++ {
			if i == total/4 {
				close(half)
			}
			_, _ = c.Write([]byte(strconv.Itoa(i)))
			time.Sleep(250 * time.Microsecond)
		}
	}()
	<-half
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
	<-sent
	waitFor(t, "the stream's tail", func() bool { return received.Load() >= total })
	if got := received.Load(); got != total {
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
