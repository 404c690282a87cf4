package cluster

import (
	"bytes"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/nscluster"
)

func podNS(p *nscluster.Pod) nstest.NS   { return nstest.NS{Name: p.NS, Path: p.Netns} }
func nodeNS(n *nscluster.Node) nstest.NS { return nstest.NS{Name: n.NS, Path: n.NetnsPath()} }

// ping sends count echo requests from namespace ns to ip and returns nil
// only if every one was answered.
func ping(ns, ip string, count int) error {
	out, err := exec.Command("ip", "netns", "exec", ns, "ping", "-n", "-q", "-c", fmt.Sprint(count), "-i", "0.1", "-W", "2", ip).CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte(fmt.Sprintf("%d received", count))) {
		return fmt.Errorf("ping %s from %s: %v: %s", ip, ns, err, bytes.TrimSpace(out))
	}
	return nil
}

// pingAllPairs pings every pod from every other.
func pingAllPairs(t *testing.T, pods []*nscluster.Pod, count int) {
	t.Helper()
	for _, a := range pods {
		for _, b := range pods {
			if a != b {
				if err := ping(a.NS, b.IP.String(), count); err != nil {
					t.Error(err)
				}
			}
		}
	}
}

// liveness measures the longest time a pair of pods could not talk, with
// a UDP ping-pong every 10 ms and a paced TCP stream, while a test
// restarts things underneath.
type liveness struct {
	t        *testing.T
	mu       sync.Mutex
	udpLast  time.Time
	udpGap   time.Duration
	udpOK    int
	tcpLast  time.Time
	tcpGap   time.Duration
	tcpBytes int64
	stop     chan struct{}
	wg       sync.WaitGroup
}

func startLiveness(t *testing.T, client, server nstest.NS, serverIP string, port int) *liveness {
	t.Helper()
	return startLivenessVia(t, client, server, serverIP, serverIP, port)
}

// startLivenessVia is startLiveness with the client dialing dialIP (a
// Service's ClusterIP whose only endpoint, on the same ports, is the
// server at serverIP).
func startLivenessVia(t *testing.T, client, server nstest.NS, dialIP, serverIP string, port int) *liveness {
	t.Helper()
	lv := &liveness{t: t, stop: make(chan struct{})}
	nstest.UDPEcho(t, server, net.JoinHostPort(serverIP, fmt.Sprint(port)))
	var uc net.Conn
	var err error
	client.In(t, func() { uc, err = net.Dial("udp4", net.JoinHostPort(dialIP, fmt.Sprint(port))) })
	if err != nil {
		t.Fatal(err)
	}
	var l net.Listener
	server.In(t, func() { l, err = net.Listen("tcp4", net.JoinHostPort(serverIP, fmt.Sprint(port+1))) })
	if err != nil {
		t.Fatal(err)
	}
	var tc net.Conn
	client.In(t, func() { tc, err = net.DialTimeout("tcp4", net.JoinHostPort(dialIP, fmt.Sprint(port+1)), 5*time.Second) })
	if err != nil {
		t.Fatal(err)
	}
	sc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	lv.udpLast, lv.tcpLast = now, now
	lv.wg.Add(3)
	go func() { // UDP ping-pong
		defer lv.wg.Done()
		buf := make([]byte, 64)
		for i := 0; ; i++ {
			select {
			case <-lv.stop:
				return
			default:
			}
			msg := fmt.Sprint(i)
			_, _ = uc.Write([]byte(msg))
			_ = uc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			for {
				k, err := uc.Read(buf)
				if err != nil {
					break
				}
				if string(buf[:k]) == msg {
					lv.mu.Lock()
					now := time.Now()
					lv.udpGap = max(lv.udpGap, now.Sub(lv.udpLast))
					lv.udpLast = now
					lv.udpOK++
					lv.mu.Unlock()
					break
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	go func() { // TCP receiver
		defer lv.wg.Done()
		buf := make([]byte, 64<<10)
		for {
			k, err := sc.Read(buf)
			if err != nil {
				return
			}
			lv.mu.Lock()
			now := time.Now()
			lv.tcpGap = max(lv.tcpGap, now.Sub(lv.tcpLast))
			lv.tcpLast = now
			lv.tcpBytes += int64(k)
			lv.mu.Unlock()
		}
	}()
	go func() { // TCP sender: 16 KiB every 10 ms
		defer lv.wg.Done()
		chunk := bytes.Repeat([]byte("x"), 16<<10)
		for {
			select {
			case <-lv.stop:
				tc.Close()
				return
			default:
			}
			_ = tc.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err := tc.Write(chunk); err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	// The server's end is closed first: a receiver whose connection was
	// cut (a policy) would otherwise wait out TCP keepalive for a FIN.
	t.Cleanup(func() { sc.Close(); lv.finish(); uc.Close(); l.Close() })
	return lv
}

// finish stops the traffic and returns the longest gaps seen (including
// the time from the last success to now).
func (lv *liveness) finish() (udp, tcp time.Duration, udpOK int, tcpBytes int64) {
	select {
	case <-lv.stop:
	default:
		close(lv.stop)
		lv.wg.Wait()
	}
	lv.mu.Lock()
	defer lv.mu.Unlock()
	return lv.udpGap, lv.tcpGap, lv.udpOK, lv.tcpBytes
}

// snapshot is the traffic so far, for progress checks.
func (lv *liveness) snapshot() (udpOK int, tcpBytes int64) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	return lv.udpOK, lv.tcpBytes
}

// waitTraffic waits until both streams have moved past where they were.
func (lv *liveness) waitTraffic(t *testing.T) {
	t.Helper()
	u0, b0 := lv.snapshot()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		u, b := lv.snapshot()
		if u > u0+5 && b > b0+64<<10 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("traffic between the pods does not flow")
}

// ofctl runs the real ovs-ofctl against a switch socket.
func ofctl(t *testing.T, sock string, args ...string) string {
	t.Helper()
	cmd := append([]string{"-O", "OpenFlow13", args[0], "unix:" + sock}, args[1:]...)
	out, err := exec.Command("ovs-ofctl", cmd...).CombinedOutput()
	if err != nil {
		t.Fatalf("ovs-ofctl %s: %v: %s", strings.Join(cmd, " "), err, out)
	}
	return string(out)
}

// flowLines are the flows of a dump-flows, one per line, without the
// counters that change with traffic.
func flowLines(dump string) []string {
	var out []string
	for _, l := range strings.Split(dump, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "cookie=") {
			out = append(out, l)
		}
	}
	return out
}
