package ctdiff

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/datapath"
	"github.com/nagare-net/nagare/pkg/lab"
	"github.com/nagare-net/nagare/pkg/switchd"
)

// The topology, one copy per switch: four endpoint namespaces, each with
// eth0 on a veth to the node namespace, whose ends v1..v4 are the switch's
// OpenFlow ports 1..4. The endpoints have no IP address: the kernel
// there never answers (no RST for a SYN to a closed port, no ARP), so
// every frame on the wire is one the test crafted or the switch forwarded.
//
//	client ─ v1 ┐                 ┌ v3 ─ b2
//	b1     ─ v2 ┴─ switch (node) ─┴ v4 ─ ext
var endpoints = []struct {
	name string
	port int
	mac  string
	ip   string
	ip6  string
}{
	{"client", 1, "02:00:00:00:01:01", "10.77.0.1", "fd00:77::1"},
	{"b1", 2, "02:00:00:00:01:02", "10.77.0.2", "fd00:77::2"},
	{"b2", 3, "02:00:00:00:01:03", "10.77.0.3", "fd00:77::3"},
	{"ext", 4, "02:00:00:00:01:04", "10.77.1.4", "fd00:77:1::4"},
}

// Addresses the pipelines use beside the endpoints'.
const (
	vip    = "10.96.0.10"  // a Service's virtual IP (DNAT cases)
	snatIP = "10.77.1.100" // the node's external address (SNAT cases)
)

// endpoint is one endpoint namespace with a raw socket on its eth0.
type endpoint struct {
	name string
	port int
	mac  net.HardwareAddr
	ip   net.IP
	ns   nstest.NS
	fd   int
}

// bench is one switch on its copy of the topology.
type bench struct {
	name   string // "ovs" or "nagare"
	target string // ovs-ofctl's target: unix:<management socket>
	node   nstest.NS
	eps    map[string]*endpoint
	frames *capture
	// flushConntrack empties the switch's connection table (nil: the
	// switch has no way to, the cases use distinct tuples anyway).
	flushConntrack func() error
	// flushCache empties the datapath's flow cache, so that a case's
	// first packets are translated under its own tables (a barrier does
	// not wait for Open vSwitch's revalidators).
	flushCache func() error
	log        string // the switch's log file, quoted on failure
	// diag returns the switch's own account of its datapath, for a
	// failure report (nil: none).
	diag func() string
	// trace is the switch's own trace of frame entering on port inPort,
	// the tracker answering ctNext ("trk,new") on a recirculation.
	trace func(frame []byte, inPort int, ctNext string) string
}

// newTopology makes the node namespace and the endpoints of one bench,
// and starts capturing on every endpoint.
func newTopology(t *testing.T, name string) *bench {
	t.Helper()
	b := &bench{name: name, node: nstest.New(t, name+"-node"), eps: map[string]*endpoint{}}
	b.frames = newCapture()
	for _, e := range endpoints {
		ep := &endpoint{name: e.name, port: e.port, mac: mustMAC(e.mac), ip: net.ParseIP(e.ip).To4()}
		ep.ns = nstest.New(t, name+"-"+e.name)
		nstest.Veth(t, ep.ns, "eth0", b.node, fmt.Sprintf("v%d", e.port), 1500)
		ep.ns.IP(t, "link", "set", "eth0", "address", e.mac)
		// Checksums are the test's to get right, never offloaded.
		_ = ep.ns.Sh(t, "ethtool", "-K", "eth0", "tx", "off")
		ep.fd = nstest.RawSocket(t, ep.ns, "eth0")
		b.eps[e.name] = ep
		b.frames.start(t, ep)
	}
	return b
}

// send puts frame on the wire at endpoint ep.
func (b *bench) send(ep string, frame []byte) error {
	e := b.eps[ep]
	if e == nil {
		return fmt.Errorf("no endpoint %q", ep)
	}
	_, err := unix.Write(e.fd, frame)
	return err
}

// ofctl runs `ovs-ofctl -O OpenFlow13 CMD <switch> ARGS...`.
func (b *bench) ofctl(cmd string, args ...string) (string, error) {
	full := append([]string{"-O", "OpenFlow13", cmd, b.target}, args...)
	out, err := exec.Command("ovs-ofctl", full...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ovs-ofctl %s %s: %v: %s", cmd, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// program replaces the switch's groups and flows (groups first: flows
// name them). ovs-ofctl ends each command with a barrier, so the tables
// are in force when it returns.
func (b *bench) program(dir string, groups, flows []string) error {
	if _, err := b.ofctl("del-flows"); err != nil {
		return err
	}
	if _, err := b.ofctl("del-groups"); err != nil {
		return err
	}
	for _, g := range groups {
		if _, err := b.ofctl("add-group", g); err != nil {
			return err
		}
	}
	file := filepath.Join(dir, b.name+"-flows.txt")
	if err := os.WriteFile(file, []byte(strings.Join(flows, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	_, err := b.ofctl("add-flows", file)
	return err
}

// startOVS runs Open vSwitch's userspace datapath on a new topology:
// bridge br0 (datapath_type=netdev, fail_mode=secure: no flow but ours),
// v1..v4 as OpenFlow ports 1..4.
func startOVS(t *testing.T) *bench {
	t.Helper()
	b := newTopology(t, "ovs")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The directory first: its removal must come after the daemons'
	// stop (cleanups run last-in first-out), which finds them by the
	// pidfiles in it.
	dir := filepath.Join(t.TempDir(), "ovs")
	cleanup := &lab.Cleanup{}
	t.Cleanup(func() {
		if err := cleanup.RunAll(); err != nil {
			t.Errorf("stopping Open vSwitch: %v", err)
		}
	})
	ovs, err := lab.StartOVS(ctx, lab.NewShell(nil), cleanup, dir, b.node.Name)
	if err != nil {
		t.Fatalf("starting Open vSwitch: %v", err)
	}
	args := []string{"add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev", "fail_mode=secure",
		"protocols=OpenFlow10,OpenFlow13"}
	for _, e := range endpoints {
		dev := fmt.Sprintf("v%d", e.port)
		args = append(args, "--", "add-port", "br0", dev, "--", "set", "interface", dev, fmt.Sprintf("ofport_request=%d", e.port))
	}
	if _, err := ovs.Vsctl(ctx, args...); err != nil {
		t.Fatalf("ovs-vsctl: %v", err)
	}
	b.target = "unix:" + filepath.Join(ovs.Dir(), "br0.mgmt")
	b.log = filepath.Join(ovs.Dir(), "ovs-vswitchd.log")
	b.diag = func() string {
		var out strings.Builder
		for _, cmd := range [][]string{{"dpctl/dump-flows"}, {"dpctl/dump-conntrack"}, {"coverage/show"}} {
			o, err := ovs.Appctl(context.Background(), cmd...)
			if err != nil {
				o = err.Error()
			}
			if cmd[0] == "coverage/show" {
				var keep []string
				for _, l := range strings.Split(o, "\n") {
					if strings.Contains(l, "drop") || strings.Contains(l, "upcall") || strings.Contains(l, "lost") {
						keep = append(keep, l)
					}
				}
				o = strings.Join(keep, "\n")
			}
			fmt.Fprintf(&out, "  ovs-appctl %s:\n    %s\n", cmd[0], strings.ReplaceAll(strings.TrimSpace(o), "\n", "\n    "))
		}
		return out.String()
	}
	b.flushConntrack = func() error {
		_, err := ovs.Appctl(context.Background(), "dpctl/flush-conntrack")
		return err
	}
	b.trace = func(frame []byte, inPort int, ctNext string) string {
		args := []string{"ofproto/trace"}
		if ctNext != "" {
			args = append(args, "--ct-next", ctNext)
		}
		args = append(args, "br0", fmt.Sprintf("in_port=%d", inPort), hex.EncodeToString(frame))
		o, err := ovs.Appctl(context.Background(), args...)
		if err != nil {
			return err.Error()
		}
		return o
	}
	b.flushCache = func() error {
		if _, err := ovs.Appctl(context.Background(), "revalidator/wait"); err != nil {
			return err
		}
		_, err := ovs.Appctl(context.Background(), "dpctl/del-flows")
		return err
	}
	out, err := b.ofctl("show")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range endpoints {
		if !strings.Contains(out, fmt.Sprintf(" %d(v%d)", e.port, e.port)) {
			t.Fatalf("Open vSwitch lacks port %d(v%d):\n%s", e.port, e.port, out)
		}
	}
	return b
}

// startNagare runs nagare-switch (in this process, as pkg/switchd's tests
// do) on a new topology: bridge br0, v1..v4 as OpenFlow ports 1..4.
func startNagare(t *testing.T) *bench {
	t.Helper()
	b := newTopology(t, "nagare")
	runDir := t.TempDir()
	b.log = filepath.Join(runDir, "nagare-switch.log")
	logf, err := os.Create(b.log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	var logw io.Writer = logf
	cfg := switchd.Config{
		Bridge: "br0", RunDir: runDir, NetNS: b.node.Path, PinRoot: pinRoot, MaxFlows: 8192,
		RevalidateInterval: 100 * time.Millisecond, ProbeInterval: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	sw, err := switchd.New(cfg)
	if err != nil {
		t.Fatalf("nagare-switch: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sw.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("nagare-switch: %v", err)
		}
		// Destroy releases the handles Close would, and removes the pins.
		if err := sw.Destroy(); err != nil {
			t.Errorf("removing nagare-switch's fast path: %v", err)
		}
	})
	sock := filepath.Join(runDir, "br0.mgmt")
	b.target = "unix:" + sock
	call := func(cmd string) ([]string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := switchd.Call(ctx, sock, switchd.CtlRequest{Cmd: cmd})
		if err != nil {
			return nil, err
		}
		return r.Lines, nil
	}
	b.flushCache = func() error { _, err := call("flush-cache"); return err }
	b.trace = func(frame []byte, inPort int, ctNext string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := switchd.Call(ctx, sock, switchd.CtlRequest{Cmd: "trace", Hex: hex.EncodeToString(frame),
			Packet: fmt.Sprintf("in_port=%d", inPort), CtNext: ctNext})
		if err != nil {
			return err.Error()
		}
		return strings.Join(r.Lines, "\n")
	}
	b.flushConntrack = func() error {
		_, err := sw.Datapath().FlushConntrack(datapath.ConnMatch{})
		return err
	}
	b.diag = func() string {
		var out strings.Builder
		for _, cmd := range []string{"dump-cache", "show"} {
			lines, err := call(cmd)
			if err != nil {
				lines = []string{err.Error()}
			}
			fmt.Fprintf(&out, "  nagarectl %s:\n    %s\n", cmd, strings.Join(lines, "\n    "))
		}
		conns, err := sw.Datapath().Conntrack()
		fmt.Fprintf(&out, "  conntrack (%v):\n", err)
		for _, c := range conns {
			fmt.Fprintf(&out, "    %+v\n", c)
		}
		return out.String()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nagare-switch socket %s never came up: %v", sock, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a socket that has no readiness event
	}
	for _, e := range endpoints {
		if _, err := sw.EnsurePort(switchd.PortSpec{Name: fmt.Sprintf("v%d", e.port), OFPort: uint32(e.port), PinnedCPU: switchd.NoPin}); err != nil {
			t.Fatalf("nagare-switch port v%d: %v", e.port, err)
		}
	}
	return b
}

// capture keeps every frame the endpoints received, indexed by the IPv4
// identification field: each frame the test sends has its own, and
// neither switch changes it (NAT neither), so it names the packet a
// frame came from wherever it arrives.
type capture struct {
	mu      sync.Mutex
	byID    map[uint16][]arrival
	changed chan struct{} // closed (and replaced) on every new frame
}

// arrival is one frame received at an endpoint.
type arrival struct {
	at    string
	frame []byte
}

func newCapture() *capture {
	return &capture{byID: map[uint16][]arrival{}, changed: make(chan struct{})}
}

// start reads ep's raw socket until the test ends. Frames the endpoint
// itself sent (PACKET_OUTGOING) and frames that are not IPv4 are left out.
func (c *capture) start(t *testing.T, ep *endpoint) {
	stop := make(chan struct{})
	stopped := make(chan struct{})
	// Runs before nstest's cleanup closes the socket (cleanups are LIFO).
	t.Cleanup(func() { close(stop); <-stopped })
	tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(ep.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(stopped)
		buf := make([]byte, 65536)
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, from, err := unix.Recvfrom(ep.fd, buf, 0)
			if err != nil {
				continue // the receive timeout: look at stop again
			}
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
				continue
			}
			id, ok := ipv4ID(buf[:n])
			if !ok {
				continue
			}
			c.mu.Lock()
			c.byID[id] = append(c.byID[id], arrival{at: ep.name, frame: append([]byte(nil), buf[:n]...)})
			close(c.changed)
			c.changed = make(chan struct{})
			c.mu.Unlock()
		}
	}()
}

// get returns the frames of packet id received so far.
func (c *capture) get(id uint16) []arrival {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]arrival(nil), c.byID[id]...)
}

// waitFor waits until packet id has arrived at least n times or the
// deadline passes, and returns what arrived.
func (c *capture) waitFor(id uint16, n int, deadline time.Time) []arrival {
	for {
		c.mu.Lock()
		got := len(c.byID[id])
		changed := c.changed
		c.mu.Unlock()
		if got >= n {
			return c.get(id)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return c.get(id)
		}
		select {
		case <-changed:
		case <-time.After(left):
		}
	}
}

// ipv4ID names the packet a frame came from: an IPv4 frame's
// identification field, an IPv6 frame's flow label (the test sends
// labels below 2^16; neither switch changes either).
func ipv4ID(f []byte) (uint16, bool) {
	switch {
	case len(f) >= 14+20 && f[12] == 0x08 && f[13] == 0x00 && f[14]>>4 == 4:
		return uint16(f[18])<<8 | uint16(f[19]), true
	case len(f) >= 14+40 && f[12] == 0x86 && f[13] == 0xdd && f[14]>>4 == 6 && f[15]&0xf == 0:
		return uint16(f[16])<<8 | uint16(f[17]), true
	}
	return 0, false
}

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}
