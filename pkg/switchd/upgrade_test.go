package switchd

import (
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/datapath"
)

// pingPong sends a request every interval and waits for its answer; it
// records the longest time without an answer and the first error.
type pingPong struct {
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	maxGap time.Duration
	n      int
	err    error
}

func startPingPong(interval time.Duration, round func(i int) error) *pingPong {
	p := &pingPong{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		last := time.Now()
		for i := 0; ; i++ {
			select {
			case <-p.stop:
				return
			case <-time.After(interval):
			}
			err := round(i)
			now := time.Now()
			p.mu.Lock()
			if err != nil {
				p.err = fmt.Errorf("round %d: %w", i, err)
				p.mu.Unlock()
				return
			}
			p.maxGap = max(p.maxGap, now.Sub(last))
			p.n++
			p.mu.Unlock()
			last = now
		}
	}()
	return p
}

// waitRounds waits until n rounds have been answered.
func (p *pingPong) waitRounds(n int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		p.mu.Lock()
		got, err := p.n, p.err
		p.mu.Unlock()
		switch {
		case err != nil:
			return err
		case got >= n:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("%d of %d rounds answered in %v", got, n, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (p *pingPong) finish() (time.Duration, int, error) {
	close(p.stop)
	<-p.done
	return p.maxGap, p.n, p.err
}

// udpPingPong: pod 0 asks pod i's UDP echo at addr, one datagram at a
// time; a lost datagram is sent again after 100 ms (and counts in the gap).
func udpPingPong(t *testing.T, ts *testSwitch, addr string) *pingPong {
	t.Helper()
	var c net.Conn
	var err error
	ts.Pods[0].In(t, func() { c, err = net.Dial("udp4", addr) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	buf := make([]byte, 64)
	return startPingPong(5*time.Millisecond, func(i int) error {
		msg := fmt.Sprintf("ping %d", i)
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := c.Write([]byte(msg)); err != nil {
				return err
			}
			_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			for {
				k, err := c.Read(buf)
				if err != nil {
					break // resend
				}
				if string(buf[:k]) == msg {
					return nil
				}
			}
		}
		return fmt.Errorf("no answer to %q in 3 s", msg)
	})
}

// TestUpgradeKeepsServiceConnections restarts the switch as another build
// would: with other limits (MaxFlows, ConntrackMax: maps of other sizes,
// which Open refused before the migration), and as a build of the next
// fast-path layout (the megaflow cache is then not carried over and
// upcalls refill it). Across each, an established TCP connection through
// a ClusterIP (ct-committed, DNAT) keeps its backend and is never reset,
// and a UDP ping-pong between two pods goes on; the longest time without
// an answer is logged and held to 1 s.
//
// About 15 s on an idle two-core machine (three restarts, each loading the
// fast path): behind NAGARE_UPGRADE=1 (make test-upgrade), out of CI's
// budget; pkg/datapath's TestMigrateToOtherLimits runs by default.
func TestUpgradeKeepsServiceConnections(t *testing.T) {
	if os.Getenv("NAGARE_UPGRADE") != "1" {
		t.Skip("NAGARE_UPGRADE=1 runs the upgrade test (make test-upgrade)")
	}
	ts := startService(t)
	nstest.UDPEcho(t, ts.Pods[2], "10.8.0.3:7400")
	sc := dialService(t, ts)
	backend, err := sc.ask("before")
	if err != nil {
		t.Fatal(err)
	}
	dp, ct := datapath.Layouts()
	runDir := ts.Config().RunDir
	for _, step := range []struct {
		name   string
		mod    func(*Config)
		layout uint32
	}{
		{"same build", nil, dp},
		{"other limits", func(c *Config) { c.MaxFlows, c.ConntrackMax = 4096, 16384 }, dp},
		{"next fast-path layout", func(c *Config) { c.MaxFlows, c.ConntrackMax = 4096, 16384 }, dp + 1},
	} {
		tcp := startPingPong(5*time.Millisecond, func(i int) error {
			name, err := sc.ask(fmt.Sprintf("%s %d", step.name, i))
			if err == nil && name != backend {
				err = fmt.Errorf("answered by %s, the connection was made to %s", name, backend)
			}
			return err
		})
		udp := udpPingPong(t, ts, "10.8.0.3:7400")
		// Both under way, their flows cached, before the stop: a first
		// packet that misses while no switch runs, or before the new one
		// is programmed, would meet empty tables (see the report below).
		if err := tcp.waitRounds(20, 5*time.Second); err != nil {
			t.Fatalf("%s: TCP before the restart: %v", step.name, err)
		}
		if err := udp.waitRounds(20, 5*time.Second); err != nil {
			t.Fatalf("%s: UDP before the restart: %v", step.name, err)
		}
		ts.stop()
		restore := datapath.OverrideLayouts(step.layout, ct)
		t.Cleanup(restore)
		start := time.Now()
		ts = runSwitch(t, ts.Node, ts.Pods, runDir, step.mod)
		opened := time.Since(start)
		serviceFlows(ts, 2, 3) // the controller programs the new process
		programmed := time.Since(start)
		time.Sleep(time.Second)
		tcpGap, tcpN, tcpErr := tcp.finish()
		udpGap, udpN, udpErr := udp.finish()
		m := ts.Datapath().Migration()
		t.Logf("%s: %s; new process opened in %v, programmed after %v; longest gap TCP %v (%d rounds), UDP %v (%d rounds)",
			step.name, m, opened.Round(time.Millisecond), programmed.Round(time.Millisecond),
			tcpGap.Round(time.Millisecond), tcpN, udpGap.Round(time.Millisecond), udpN)
		if (m == "") != (step.name == "same build") {
			t.Fatalf("%s: migration %q", step.name, m)
		}
		if tcpErr != nil {
			t.Fatalf("%s: the TCP connection through the Service: %v", step.name, tcpErr)
		}
		if udpErr != nil {
			t.Fatalf("%s: UDP ping-pong: %v", step.name, udpErr)
		}
		if tcpGap > time.Second || udpGap > time.Second {
			t.Fatalf("%s: gap TCP %v, UDP %v: more than 1 s", step.name, tcpGap, udpGap)
		}
	}
	ts.stopRun()
	if err := ts.Destroy(); err != nil {
		t.Fatal(err)
	}
}
