package datapath

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// Namespace plumbing for the integration tests: every namespace and link
// a test makes is removed by t.Cleanup.

type testNetns struct {
	name string
	path string
}

var nsSeq int

func newNetns(t *testing.T, role string) testNetns {
	t.Helper()
	requireRoot(t)
	nsSeq++
	n := testNetns{name: fmt.Sprintf("ndp%d-%d-%s", os.Getpid(), nsSeq, role)}
	n.path = "/var/run/netns/" + n.name
	if err := sh("ip", "netns", "add", n.name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sh("ip", "netns", "del", n.name) })
	n.ip(t, "link", "set", "lo", "up")
	if err := sh("ip", "netns", "exec", n.name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n testNetns) ip(t *testing.T, args ...string) {
	t.Helper()
	if err := sh(append([]string{"ip", "-n", n.name}, args...)...); err != nil {
		t.Fatal(err)
	}
}

// veth connects a:ifa with b:ifb.
func veth(t *testing.T, a testNetns, ifa string, b testNetns, ifb string, mtu int) {
	t.Helper()
	if err := sh("ip", "link", "add", ifa, "netns", a.name, "mtu", fmt.Sprint(mtu), "type", "veth", "peer", "name", ifb, "netns", b.name, "mtu", fmt.Sprint(mtu)); err != nil {
		t.Fatal(err)
	}
	a.ip(t, "link", "set", ifa, "up")
	b.ip(t, "link", "set", ifb, "up")
}

// in runs fn on a thread inside n. Sockets made there stay in n and can
// be used from any goroutine afterwards.
func (n testNetns) in(t *testing.T, fn func()) {
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
		h, err := netns.GetFromPath(n.path)
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

func (n testNetns) sh(t *testing.T, args ...string) error {
	t.Helper()
	return sh(append([]string{"ip", "netns", "exec", n.name}, args...)...)
}

// udpEcho starts an echo server in n on addr and returns a stop function.
func udpEcho(t *testing.T, n testNetns, addr string) {
	t.Helper()
	var c net.PacketConn
	var err error
	n.in(t, func() { c, err = net.ListenPacket("udp4", addr) })
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

// udpRoundTrips sends count datagrams from n to addr, one at a time, and
// returns how many echoes came back.
func udpRoundTrips(t *testing.T, n testNetns, addr string, count int) int {
	t.Helper()
	var c net.Conn
	var err error
	n.in(t, func() { c, err = net.Dial("udp4", addr) })
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

// tcpTransfer sends size bytes from client namespace to a listener in
// server namespace and checks they arrive intact.
func tcpTransfer(t *testing.T, server, client testNetns, addr string, size int) {
	t.Helper()
	var l net.Listener
	var err error
	server.in(t, func() { l, err = net.Listen("tcp4", addr) })
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
	client.in(t, func() { c, err = net.DialTimeout("tcp4", addr, 5*time.Second) })
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

// udpOnce sends msg once from namespace from to addr in namespace to and
// returns what arrived (empty after a 10 s wait).
func udpOnce(t *testing.T, from, to testNetns, addr, msg string) string {
	t.Helper()
	var srv net.PacketConn
	var err error
	to.in(t, func() { srv, err = net.ListenPacket("udp4", addr) })
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var c net.Conn
	from.in(t, func() { c, err = net.Dial("udp4", addr) })
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
