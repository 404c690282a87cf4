package pktgen

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// mainEnv makes the test binary act as `nagarectl lab pktgen`, so the root
// test runs the generator exactly as the lab does: a separate process
// started with ip netns exec.
const mainEnv = "NAGARE_PKTGEN_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		if err := Main(os.Args[1:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "pktgen:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestVethRoot sends 20 000 new flows at 50 000 pps from one namespace to
// another over a bare veth pair (no switch: nothing may be lost) and checks
// that every first packet arrives once, with good checksums.
func TestVethRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, AF_PACKET)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip command")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	a, b := fmt.Sprintf("pgt%d-a", os.Getpid()), fmt.Sprintf("pgt%d-b", os.Getpid())
	for _, ns := range []string{a, b} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	run(t, "ip", "link", "add", "eth0", "netns", a, "address", "02:99:00:00:00:01", "type", "veth",
		"peer", "name", "eth0", "netns", b, "address", "02:99:00:00:00:02")
	run(t, "ip", "-n", a, "addr", "add", "10.99.0.1/24", "dev", "eth0")
	run(t, "ip", "-n", b, "addr", "add", "10.99.0.2/24", "dev", "eth0")
	run(t, "ip", "-n", a, "link", "set", "eth0", "up")
	run(t, "ip", "-n", b, "link", "set", "eth0", "up")

	const flows = 20_000
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	recv := exec.CommandContext(ctx, "ip", "netns", "exec", b, self, "recv", "--flows", fmt.Sprint(flows),
		"--idle", "500ms", "--timeout", "10s", "--out", dir+"/recv.json")
	recv.Env = append(os.Environ(), mainEnv+"=1")
	stdout, err := recv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	recv.Stderr = &stderr
	if err := recv.Start(); err != nil {
		t.Fatal(err)
	}
	defer recv.Process.Kill() // no-op once it has exited
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || sc.Text() != ReadyMarker {
		t.Fatalf("receiver did not get ready: %q %s", sc.Text(), stderr.String())
	}
	go func() {
		for sc.Scan() {
		}
	}()
	send := exec.CommandContext(ctx, "ip", "netns", "exec", a, self, "send", "--flows", fmt.Sprint(flows), "--rate", "50000",
		"--dst-mac", "02:99:00:00:00:02", "--src-ip", "10.99.0.1", "--dst-ip", "10.99.0.2", "--out", dir+"/send.json")
	send.Env = append(os.Environ(), mainEnv+"=1")
	if out, err := send.CombinedOutput(); err != nil {
		t.Fatalf("sender: %v: %s", err, out)
	}
	if err := recv.Wait(); err != nil {
		t.Fatalf("receiver: %v: %s", err, stderr.String())
	}
	var sr SendReport
	var rr RecvReport
	for path, v := range map[string]any{dir + "/send.json": &sr, dir + "/recv.json": &rr} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	t.Logf("sent %d at %.0f pps (tx dropped %d); received %d distinct of %d packets, %d foreign, csum errors %d, rcvbuf errors %d",
		sr.Sent, sr.OfferedPPS, sr.TxDropped, rr.Distinct, rr.Packets, rr.Foreign, rr.InCsumErrors, rr.RcvbufErrors)
	if sr.Sent != flows {
		t.Errorf("sent %d, want %d", sr.Sent, flows)
	}
	// The pacer must never send faster than asked (10 % for the clock):
	// flat out this veth takes several times 50 000 pps. Slower is the
	// machine's doing as much as the pacer's — a sender descheduled for
	// a quarter of its 0.4 s on a busy two-core machine offered 30 645 —
	// so below only a pacer that waits several times too long fails (a
	// unit mistake, a sleep per packet).
	if sr.OfferedPPS > 55_000 || sr.OfferedPPS < 10_000 {
		t.Errorf("offered %.0f pps, want at most 50 000 + 10 %% and not under 10 000", sr.OfferedPPS)
	}
	if rr.InCsumErrors != 0 {
		t.Errorf("%d packets dropped for bad checksums", rr.InCsumErrors)
	}
	if rr.Distinct != flows || rr.Packets != flows || rr.Foreign != 0 {
		t.Errorf("received %d distinct flows in %d packets (%d foreign), want all %d once", rr.Distinct, rr.Packets, rr.Foreign, flows)
	}
	if rr.TimedOut {
		t.Error("receiver timed out")
	}
}
