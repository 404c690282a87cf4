package switchd

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/datapath"
	"github.com/nagare-net/nagare/pkg/flow"
)

// The venv scripts/osken-venv.sh makes (`make deps` runs it).
const defaultOskenVenv = "/var/cache/nagare/osken-venv"

// oskenCookie is the cookie test/osken/l2switch.py puts on learned rules.
const oskenCookie = "0x6e6167617265"

// TestOskenL2Switch is the acceptance test with a real controller: os-ken
// running our L2 learning app (test/osken/l2switch.py) drives the switch
// over TCP; three pods ping each other and run iperf3; the controller's
// learned rules count packets in OpenFlow and are in the fast path.
func TestOskenL2Switch(t *testing.T) {
	nstest.RequireRoot(t)
	python := oskenPython(t)
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Skip("iperf3 not installed (Debian iperf3; make deps)")
	}
	addr, oskenLog := startOsken(t, python)

	ts := startSwitch(t, 3, func(c *Config) {
		c.Controllers = []Target{{Network: "tcp", Address: addr}}
		c.FailMode = FailSecure
		// The pings' megaflows must outlive iperf3 so they can be checked.
		c.IdleTimeout = time.Minute
	})
	waitFor(t, "os-ken's table-miss rule", func() bool {
		out, err := ts.ofctlErr("dump-flows")
		return err == nil && strings.Contains(out, "priority=0 actions=CONTROLLER:65535")
	})

	// Every pod reaches every other: ARP floods through the controller,
	// the replies teach it both ends, unicast then gets rules.
	for i := 1; i <= 3; i++ {
		for j := 1; j <= 3; j++ {
			if i != j {
				if err := ts.ping(i, j); err != nil {
					t.Fatalf("ping p%d -> p%d: %v", i, j, err)
				}
			}
		}
	}
	for i := 1; i <= 3; i++ {
		for j := 1; j <= 3; j++ {
			if i != j {
				if f := fastPathL2(t, ts, i, j); f == nil || f.Stats.Packets == 0 {
					t.Errorf("fast path: no flow in_port=%d eth_dst=%s -> output:%d that counted packets (best: %s)", i, podMAC(j), j, fmtFlow(f))
				}
			}
		}
	}

	bps, bytes := iperf3(t, ts, 3, 1)
	t.Logf("iperf3 p1 -> p3: %.1f Mbit/s, %d bytes", bps/1e6, bytes)
	if bps <= 0 {
		t.Fatalf("iperf3 p1 -> p3: no throughput")
	}
	// The stream went through the fast path, not the controller.
	if f := fastPathL2(t, ts, 1, 3); f == nil || f.Stats.Bytes < uint64(bytes) {
		t.Errorf("fast path: flow p1 -> p3 after iperf3 (%d bytes received): %s", bytes, fmtFlow(f))
	}

	// OpenFlow's view: the controller's six learned rules, each counted.
	rule := regexp.MustCompile(`cookie=` + oskenCookie + `, .*n_packets=(\d+),.* priority=100,in_port="?v?(\d)"?,dl_src=([0-9a-f:]+),dl_dst=([0-9a-f:]+) actions=output:"?v?(\d)"?`)
	var dump string
	waitFor(t, "learned rules with n_packets > 0 in dump-flows", func() bool {
		dump = ts.ofctl("dump-flows")
		seen := map[string]bool{}
		for _, m := range rule.FindAllStringSubmatch(dump, -1) {
			in, _ := strconv.Atoi(m[2])
			out, _ := strconv.Atoi(m[5])
			if n, _ := strconv.Atoi(m[1]); n > 0 && m[3] == podMAC(in) && m[4] == podMAC(out) {
				seen[m[2]+">"+m[5]] = true
			}
		}
		return len(seen) == 6
	})
	t.Logf("dump-flows:\n%s", dump)

	// Every PACKET_IN os-ken got was a packet that matched the table-miss
	// rule, so that rule counted at least as many (the first packet of a
	// megaflow, handled by the slow path, counts too).
	miss := regexp.MustCompile(`n_packets=(\d+),.* priority=0 actions=CONTROLLER:65535`)
	var missed, packetIns int
	waitFor(t, "the table-miss rule to count every PACKET_IN", func() bool {
		m := miss.FindStringSubmatch(ts.ofctl("dump-flows"))
		if m == nil {
			return false
		}
		missed, _ = strconv.Atoi(m[1])
		packetIns = strings.Count(oskenReadLog(t, oskenLog), "l2switch DEBUG packet-in ")
		return packetIns > 0 && missed >= packetIns
	})
	t.Logf("os-ken handled %d PACKET_INs; table-miss n_packets=%d", packetIns, missed)
}

func oskenReadLog(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// oskenPython returns the venv's interpreter, or skips.
func oskenPython(t *testing.T) string {
	venv := os.Getenv("NAGARE_OSKEN_VENV")
	if venv == "" {
		venv = defaultOskenVenv
	}
	py := filepath.Join(venv, "bin", "python")
	if err := exec.Command(py, "-c", "import os_ken.base.app_manager").Run(); err != nil {
		t.Skipf("no os-ken venv at %s (%v): run scripts/osken-venv.sh or make deps", venv, err)
	}
	return py
}

// startOsken runs test/osken/run.py on a free loopback port, waits until it
// listens and returns host:port and its log file. It is killed when the test ends; its log
// is printed if the test failed or runs verbose.
func startOsken(t *testing.T, python string) (addr, logPath string) {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	runPy, err := filepath.Abs("../../test/osken/run.py")
	if err != nil {
		t.Fatal(err)
	}
	logPath = filepath.Join(t.TempDir(), "osken.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, runPy, strconv.Itoa(port), "-v")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() || testing.Verbose() {
			b, _ := os.ReadFile(logPath)
			t.Logf("os-ken log:\n%s", b)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for !tcpListening(port) {
		select {
		case <-exited:
			t.Fatalf("os-ken exited before listening (%v)", cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("os-ken not listening on 127.0.0.1:%d", port)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Sprintf("127.0.0.1:%d", port), logPath
}

// tcpListening reports whether 127.0.0.1:port is in LISTEN state in this
// namespace (read from /proc, not dialled: a probe connection would be a
// switch to os-ken).
func tcpListening(port int) bool {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return false
	}
	defer f.Close()
	want := fmt.Sprintf("0100007F:%04X", port)
	s := bufio.NewScanner(f)
	for s.Scan() {
		fs := strings.Fields(s.Text())
		if len(fs) > 3 && fs[1] == want && fs[3] == "0A" {
			return true
		}
	}
	return false
}

// fastPathL2 returns the cached flow for pod i's packets to pod j's MAC
// (in_port i and eth_dst j exact, output to port j and nothing else) that
// counted most, or nil.
func fastPathL2(t *testing.T, ts *testSwitch, i, j int) *datapath.FlowStats {
	t.Helper()
	flows, err := ts.Switch.Datapath().Dump()
	if err != nil {
		t.Fatal(err)
	}
	mac, _ := net.ParseMAC(podMAC(j))
	var best *datapath.FlowStats
	for k, f := range flows {
		if f.Key.InPort != uint32(i) || f.Mask.InPort != 0xffffffff ||
			f.Mask.EthDst != [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff} || f.Key.EthDst != [6]byte(mac) {
			continue
		}
		if len(f.Actions) != 1 || f.Actions[0] != flow.Action(flow.Output{Port: uint32(j)}) {
			continue
		}
		if best == nil || f.Stats.Packets > best.Stats.Packets {
			best = &flows[k]
		}
	}
	return best
}

func fmtFlow(f *datapath.FlowStats) string {
	if f == nil {
		return "none"
	}
	return fmt.Sprintf("%v packets=%d bytes=%d", f.Flow, f.Stats.Packets, f.Stats.Bytes)
}

// iperf3 runs an iperf3 server in pod srv (one test, then it exits) and a
// 2 s client in pod cli; it returns the receiver's bits/s and bytes.
func iperf3(t *testing.T, ts *testSwitch, srv, cli int) (float64, int64) {
	t.Helper()
	const port = "5201"
	server := exec.Command("ip", "netns", "exec", ts.Pods[srv-1].Name,
		"iperf3", "-s", "-1", "-B", podIP(srv), "-p", port)
	var serr strings.Builder
	server.Stdout, server.Stderr = &serr, &serr
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = server.Wait(); close(done) }()
	defer func() {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = server.Process.Kill()
			<-done
		}
	}()
	waitFor(t, "iperf3 server", func() bool {
		out, _ := exec.Command("ip", "netns", "exec", ts.Pods[srv-1].Name, "ss", "-Hltn", "sport = :"+port).Output()
		return strings.Contains(string(out), podIP(srv)+":"+port)
	})
	out, err := exec.Command("ip", "netns", "exec", ts.Pods[cli-1].Name,
		"iperf3", "-c", podIP(srv), "-p", port, "-t", "2", "-J").Output()
	if err != nil {
		t.Fatalf("iperf3 client: %v\n%s\nserver: %s", err, out, serr.String())
	}
	var res struct {
		End struct {
			SumReceived struct {
				Bytes         int64   `json:"bytes"`
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("iperf3 -J output: %v\n%s", err, out)
	}
	if res.Error != "" {
		t.Fatalf("iperf3: %s", res.Error)
	}
	return res.End.SumReceived.BitsPerSecond, res.End.SumReceived.Bytes
}
