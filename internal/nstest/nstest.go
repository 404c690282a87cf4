// Package nstest builds test hosts from network namespaces and veth pairs
// and runs traffic between them; every namespace a test makes is removed
// by t.Cleanup. Tests that use it need root (they skip otherwise).
package nstest

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// RequireRoot skips the test unless it runs as root and not in -short mode.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 || testing.Short() {
		t.Skip("needs root, network namespaces and BPF (skipped in -short mode)")
	}
}

// Sh runs a command and returns its combined output in the error.
func Sh(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

type NS struct {
	Name string // under /var/run/netns
	Path string
}

var nsSeq int

func New(t testing.TB, role string) NS {
	t.Helper()
	RequireRoot(t)
	nsSeq++
	n := NS{Name: fmt.Sprintf("nt%d-%d-%s", os.Getpid(), nsSeq, role)}
	n.Path = "/var/run/netns/" + n.Name
	if err := Sh("ip", "netns", "add", n.Name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Sh("ip", "netns", "del", n.Name) })
	n.IP(t, "link", "set", "lo", "up")
	if err := Sh("ip", "netns", "exec", n.Name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n NS) IP(t testing.TB, args ...string) {
	t.Helper()
	if err := Sh(append([]string{"ip", "-n", n.Name}, args...)...); err != nil {
		t.Fatal(err)
	}
}

// Veth connects a:ifa with b:ifb.
func Veth(t testing.TB, a NS, ifa string, b NS, ifb string, mtu int) {
	t.Helper()
	if err := Sh("ip", "link", "add", ifa, "netns", a.Name, "mtu", fmt.Sprint(mtu), "type", "veth", "peer", "name", ifb, "netns", b.Name, "mtu", fmt.Sprint(mtu)); err != nil {
		t.Fatal(err)
	}
	a.IP(t, "link", "set", ifa, "up")
	b.IP(t, "link", "set", ifb, "up")
}

// In runs fn on a thread inside n. Sockets made there stay in n and can
// be used from any goroutine afterwards.
func (n NS) In(t testing.TB, fn func()) {
	t.Helper()
	done := make(chan struct{})
	var ferr error
	go func() {
		defer close(done)
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			ferr = err
			return
		}
		h, err := netns.GetFromPath(n.Path)
		if err != nil {
			ferr = err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			ferr = err
			return
		}
		fn()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
	}()
	<-done
	if ferr != nil {
		t.Fatal(ferr)
	}
}

func (n NS) Sh(t testing.TB, args ...string) error {
	t.Helper()
	return Sh(append([]string{"ip", "netns", "exec", n.Name}, args...)...)
}

// UDPEcho starts an echo server in n on addr and returns a stop function.
func UDPEcho(t testing.TB, n NS, addr string) {
	t.Helper()
	var c net.PacketConn
	var err error
	n.In(t, func() { c, err = net.ListenPacket("udp4", addr) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			k, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteTo(buf[:k], from)
		}
	}()
}

// UDPRoundTrips sends count datagrams from n to addr, one at a time, and
// returns how many echoes came back.
func UDPRoundTrips(t testing.TB, n NS, addr string, count int) int {
	t.Helper()
	var c net.Conn
	var err error
	n.In(t, func() { c, err = net.Dial("udp4", addr) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ok := 0
	buf := make([]byte, 2048)
	for i := 0; i < count; i++ {
		msg := fmt.Sprintf("datagram %d", i)
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		k, err := c.Read(buf)
		if err == nil && string(buf[:k]) == msg {
			ok++
		}
	}
	return ok
}

// TCPTransfer sends size bytes from client namespace to a listener in
// server namespace and checks they arrive intact.
func TCPTransfer(t testing.TB, server, client NS, addr string, size int) {
	t.Helper()
	var l net.Listener
	var err error
	server.In(t, func() { l, err = net.Listen("tcp4", addr) })
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan [32]byte, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(got)
			return
		}
		defer c.Close()
		h := sha256.New()
		_, _ = io.Copy(h, c)
		got <- [32]byte(h.Sum(nil))
	}()
	var c net.Conn
	client.In(t, func() { c, err = net.DialTimeout("tcp4", addr, 5*time.Second) })
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("nagare flow "), size/12)
	if _, err := c.Write(data); err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case h, ok := <-got:
		if !ok || h != sha256.Sum256(data) {
			t.Fatal("TCP stream arrived damaged or not at all")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("TCP transfer timed out")
	}
}

// UDPOnce sends msg once from namespace from to addr in namespace to and
// returns what arrived (empty after a 10 s wait).
func UDPOnce(t testing.TB, from, to NS, addr, msg string) string {
	t.Helper()
	var srv net.PacketConn
	var err error
	to.In(t, func() { srv, err = net.ListenPacket("udp4", addr) })
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var c net.Conn
	from.In(t, func() { c, err = net.Dial("udp4", addr) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	_ = srv.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 2048)
	k, _, err := srv.ReadFrom(buf)
	if err != nil {
		return ""
	}
	return string(buf[:k])
}

// Stream is a paced UDP stream from one namespace to another, counted at
// the receiver: what restart tests run while they restart things.
type Stream struct {
	total    int
	received atomic.Int64
	// OutOfOrder counts datagrams that arrived after a later one (each
	// datagram carries its number).
	OutOfOrder atomic.Int64
	sent       chan struct{}
	Reached    chan struct{} // closed once the stream has sent its first `at` datagrams
}

// StartUDPStream sends total datagrams, one every gap, from `from` to addr
// (a socket bound in `to`).
func StartUDPStream(t testing.TB, from, to NS, addr string, total, at int, gap time.Duration) *Stream {
	t.Helper()
	var srv net.PacketConn
	var c net.Conn
	var err error
	to.In(t, func() { srv, err = net.ListenPacket("udp4", addr) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	from.In(t, func() { c, err = net.Dial("udp4", addr) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s := &Stream{total: total, sent: make(chan struct{}), Reached: make(chan struct{})}
	go func() {
		b := make([]byte, 64)
		last := -1
		for {
			k, _, err := srv.ReadFrom(b)
			if err != nil {
				return
			}
			if n, err := strconv.Atoi(string(b[:k])); err == nil {
				if n < last {
					s.OutOfOrder.Add(1)
				}
				last = max(last, n)
			}
			s.received.Add(1)
		}
	}()
	go func() {
		defer close(s.sent)
		for i := 0; i < total; i++ {
			if i == at {
				close(s.Reached)
			}
			_, _ = c.Write([]byte(strconv.Itoa(i)))
			time.Sleep(gap)
		}
	}()
	return s
}

// Wait waits until everything was sent and the tail arrived (at most 5 s
// more) and returns how many datagrams arrived.
func (s *Stream) Wait() int {
	<-s.sent
	deadline := time.Now().Add(5 * time.Second)
	for int(s.received.Load()) < s.total && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return int(s.received.Load())
}

// UDPPeer sends a datagram from namespace from to addr (a socket bound in
// namespace to), up to three times, and returns the source address the
// receiver saw ("" if nothing arrived): what tests of NAT look at.
func UDPPeer(t testing.TB, from, to NS, addr string) string {
	t.Helper()
	var srv net.PacketConn
	var err error
	to.In(t, func() { srv, err = net.ListenPacket("udp4", addr) })
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var c net.Conn
	from.In(t, func() { c, err = net.Dial("udp4", addr) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 64)
	for i := 0; i < 3; i++ {
		if _, err := c.Write([]byte("who am i")); err != nil {
			t.Fatal(err)
		}
		_ = srv.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, peer, err := srv.ReadFrom(buf); err == nil {
			return peer.(*net.UDPAddr).IP.String()
		}
	}
	return ""
}

// ReadFile reads path from a thread in namespace n (what /proc/net and
// /proc/sys/net show depends on the reader's namespace).
func (n NS) ReadFile(t testing.TB, path string) []byte {
	t.Helper()
	var b []byte
	var err error
	n.In(t, func() { b, err = os.ReadFile(path) })
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// SNMP reads counter name of protocol proto ("Tcp", "Udp", "Ip", ...) in
// namespace n's /proc/net/snmp (nstat's TcpInCsumErrors is "Tcp",
// "InCsumErrors").
func SNMP(t testing.TB, n NS, proto, name string) int {
	t.Helper()
	b := n.ReadFile(t, "/proc/thread-self/net/snmp")
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != proto+":" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, n := range names {
			if n == name && i < len(f) {
				v, _ := strconv.Atoi(f[i])
				return v
			}
		}
	}
	t.Fatalf("no %s %s in /proc/net/snmp", proto, name)
	return 0
}
