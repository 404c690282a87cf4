package switchd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nagare-net/nagare/internal/nstest"
)

// A test switch: node namespace N with pods P1..Pn (10.8.0.i/24, MAC
// 02:00:00:00:00:0i, host side "vi" as OpenFlow port i), nagare-switch
// running in this process on N's ports.
type testSwitch struct {
	*Switch
	t      *testing.T
	Sock   string
	Node   nstest.NS
	Pods   []nstest.NS
	cancel context.CancelFunc
	done   chan error
}

// podIP and podMAC are pod i's addresses (1-based).
func podIP(i int) string  { return fmt.Sprintf("10.8.0.%d", i) }
func podMAC(i int) string { return fmt.Sprintf("02:00:00:00:00:%02x", i) }

var testPinRoot string

func TestMain(m *testing.M) {
	code := func() int {
		if os.Geteuid() == 0 {
			_ = exec.Command("mountpoint", "-q", "/sys/fs/bpf").Run()
			dir, err := os.MkdirTemp("/sys/fs/bpf", "nagare-switchd-test-")
			if err == nil {
				testPinRoot = dir
				defer os.RemoveAll(dir)
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// newTopo makes the node and n pods without a switch.
func newTopo(t testing.TB, n int) (nstest.NS, []nstest.NS) {
	t.Helper()
	nstest.RequireRoot(t)
	if testPinRoot == "" {
		t.Skip("no BPF filesystem")
	}
	node := nstest.New(t, "node")
	var pods []nstest.NS
	for i := 1; i <= n; i++ {
		p := nstest.New(t, fmt.Sprintf("p%d", i))
		nstest.Veth(t, p, "eth0", node, fmt.Sprintf("v%d", i), 1500)
		p.IP(t, "link", "set", "eth0", "address", podMAC(i))
		p.IP(t, "addr", "add", podIP(i)+"/24", "dev", "eth0")
		pods = append(pods, p)
	}
	return node, pods
}

// startSwitch builds the topology and runs a switch on it.
func startSwitch(t *testing.T, n int, mod func(*Config)) *testSwitch {
	t.Helper()
	node, pods := newTopo(t, n)
	ts := runSwitch(t, node, pods, t.TempDir(), mod)
	for i := 1; i <= n; i++ {
		if _, err := ts.EnsurePort(PortSpec{Name: fmt.Sprintf("v%d", i), OFPort: uint32(i)}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if ts.stopRun() {
			_ = ts.Destroy()
		}
	})
	return ts
}

// runSwitch starts a switch (new, or taking over the pins of one that ran
// with the same run dir) and stops it when the test ends.
func runSwitch(t *testing.T, node nstest.NS, pods []nstest.NS, runDir string, mod func(*Config)) *testSwitch {
	t.Helper()
	cfg := Config{
		Bridge: "br0", RunDir: runDir, NetNS: node.Path, PinRoot: testPinRoot, MaxFlows: 8192,
		RevalidateInterval: 100 * time.Millisecond, ProbeInterval: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if mod != nil {
		mod(&cfg)
	}
	sw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testSwitch{Switch: sw, t: t, Sock: filepath.Join(runDir, "br0.mgmt"), Node: node, Pods: pods, cancel: cancel, done: make(chan error, 1)}
	go func() { ts.done <- sw.Run(ctx) }()
	t.Cleanup(ts.stop)
	// Ready once the socket accepts.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("unix", ts.Sock)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("switch socket %s never came up: %v", ts.Sock, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return ts
}

// stop ends Run and releases the switch's handles (the fast path stays).
func (ts *testSwitch) stop() {
	if ts.stopRun() {
		_ = ts.Switch.Close()
	}
}

// stopRun ends Run; it reports whether Run was still going.
func (ts *testSwitch) stopRun() bool {
	if ts.cancel == nil {
		return false
	}
	ts.cancel()
	ts.cancel = nil
	<-ts.done
	return true
}

// ofctl runs the real ovs-ofctl against the switch and returns its output.
func (ts *testSwitch) ofctl(args ...string) string {
	ts.t.Helper()
	out, err := ts.ofctlErr(args...)
	if err != nil {
		ts.t.Fatalf("ovs-ofctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (ts *testSwitch) ofctlErr(args ...string) (string, error) {
	ts.t.Helper()
	if _, err := exec.LookPath("ovs-ofctl"); err != nil {
		ts.t.Skip("ovs-ofctl not installed (Debian openvswitch-common)")
	}
	// Options (--strict, ...) go before the command, then the switch.
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "--") {
		i++
	}
	full := append(append([]string{"-O", "OpenFlow13"}, args[:i]...), args[i], "unix:"+ts.Sock)
	full = append(full, args[i+1:]...)
	out, err := exec.Command("ovs-ofctl", full...).CombinedOutput()
	return string(out), err
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ping runs a few pings from pod i to pod j and reports success.
func (ts *testSwitch) ping(i, j int) error {
	return ts.Pods[i-1].Sh(ts.t, "ping", "-c", "2", "-i", "0.2", "-W", "2", podIP(j))
}

// control sends one nagarectl request over the socket and returns the
// answer.
func (ts *testSwitch) control(req CtlRequest) CtlResponse {
	ts.t.Helper()
	c, err := net.Dial("unix", ts.Sock)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer c.Close()
	if err := json.NewEncoder(c).Encode(req); err != nil {
		ts.t.Fatal(err)
	}
	var r CtlResponse
	if err := json.NewDecoder(c).Decode(&r); err != nil {
		ts.t.Fatal(err)
	}
	return r
}
