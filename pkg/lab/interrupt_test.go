package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// procStart returns a live process's start time (field 22 of
// /proc/PID/stat), so that a recycled PID is not mistaken for a survivor;
// "" for a process that is gone or a zombie (dead, not yet reaped by its
// new parent).
func procStart(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 || f[0] == "Z" {
		return ""
	}
	return f[19]
}

func procCmdline(pid int) string {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.ReplaceAll(string(data), "\x00", " ")
}

// TestSIGINTLeavesNothingBehind builds nagarectl, starts a run with an Open
// vSwitch data plane (daemons), a sockperf test and stress-ng load, sends
// SIGINT while all of them run, and checks that no namespace, process or
// host link of the run survives.
func TestSIGINTLeavesNothingBehind(t *testing.T) {
	skipUnlessLab(t, "sockperf", "stress-ng")
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go command to build nagarectl")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "nagarectl")
	if out, err := exec.Command(goBin, "build", "-o", bin, "github.com/nagare-net/nagare/cmd/nagarectl").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	planes := "[ovs-netdev, linux-bridge+vxlan]"
	wantProcs := []string{"sockperf ping-pong", "stress-ng", "ovs-vswitchd", "ovsdb-server"}
	if ovsAvailable() != nil {
		planes = "[linux-bridge+vxlan]"
		wantProcs = wantProcs[:2]
	}
	scen := filepath.Join(dir, "interrupt.yaml")
	os.WriteFile(scen, []byte(`
name: interrupt
nodes: [n1, n2]
pods: [{name: a, node: n1}, {name: b, node: n1}, {name: c, node: n2}]
dataplanes: `+planes+`
reps: 1
measurements:
  - {name: rtt, kind: rtt, client: a, server: b, duration: 60s}
loads:
  - {name: cpu, cpu: {percent: 10, cpus: [0]}}
`), 0o644)

	linksBefore := rootLinks(t)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "lab", "run", scen, "--out", filepath.Join(dir, "out"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	prefix := fmt.Sprintf("nl%d", cmd.Process.Pid)

	// Poll until every kind of process the run starts is running inside its
	// namespaces (the run's own progress is the event we wait for).
	inodes := map[uint64]bool{}
	started := map[int]string{} // pid -> start time
	deadline := time.Now().Add(90 * time.Second)
	for {
		for _, ns := range ListNamespaces(prefix) {
			if ino, err := nsInode("/run/netns/" + ns); err == nil {
				inodes[ino] = true
			}
		}
		missing := append([]string(nil), wantProcs...)
		for _, pid := range pidsWithNetnsInode(inodes) {
			started[pid] = procStart(pid)
			cl := procCmdline(pid)
			for i := 0; i < len(missing); i++ {
				if strings.Contains(cl, missing[i]) {
					missing = append(missing[:i], missing[i+1:]...)
					i--
				}
			}
		}
		if len(missing) == 0 {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("run ended before %v started: %v\n%s", missing, err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Signal(syscall.SIGINT)
			t.Fatalf("%v never ran in %s-*: %s", missing, prefix, stderr.String())
		}
		time.Sleep(20 * time.Millisecond) // polling another process's progress
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var exitErr *exec.ExitError
	select {
	case err := <-exited:
		if !errors.As(err, &exitErr) || exitErr.ExitCode() != 1 {
			t.Errorf("exit: %v, want status 1", err)
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("nagarectl did not exit within 60 s of SIGINT:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("stderr does not say interrupted:\n%s", stderr.String())
	}
	if !strings.Contains(stdout.String(), "Interrupted: partial results") {
		t.Errorf("stdout lacks the partial-results note:\n%s", stdout.String())
	}

	if left := ListNamespaces(prefix); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
		for _, ns := range left {
			exec.Command("ip", "netns", "del", ns).Run()
		}
	}
	if pids := pidsWithNetnsInode(inodes); len(pids) > 0 {
		t.Errorf("processes still in the run's namespaces: %v", pids)
	}
	for pid, st := range started {
		if st != "" && procStart(pid) == st {
			t.Errorf("process %d (%s) survived", pid, procCmdline(pid))
		}
	}
	if after := rootLinks(t); strings.Join(after, " ") != strings.Join(linksBefore, " ") {
		t.Errorf("host links changed: before %v after %v", linksBefore, after)
	}
	t.Logf("%d processes in %d namespaces were running at SIGINT", len(started), len(inodes))
}

// TestCancelAtAnyPointCleansUp cancels runs of the daemon-based OVS planes
// after increasing delays, so the cancellation lands in namespace creation,
// daemon start-up, bridge set-up or a measurement. Wherever it lands,
// nothing of the run may survive.
func TestCancelAtAnyPointCleansUp(t *testing.T) {
	skipUnlessLab(t, "sockperf")
	if ovsAvailable() != nil {
		t.Skip("needs Open vSwitch")
	}
	s, err := ParseScenario([]byte(`
name: cancel
nodes: [n1, n2]
pods: [{name: a, node: n1}, {name: b, node: n1}, {name: c, node: n2}]
dataplanes: [ovs-vxlan]
reps: 1
measurements:
  - {name: inter, kind: rtt, client: a, server: c, duration: 30s}
`))
	if err != nil {
		t.Fatal(err)
	}
	linksBefore := rootLinks(t)
	for i, delay := range []time.Duration{
		// The run first samples the VM's load for backgroundWindow.
		backgroundWindow + 20*time.Millisecond, backgroundWindow + 150*time.Millisecond,
		backgroundWindow + 400*time.Millisecond, backgroundWindow + 800*time.Millisecond,
		backgroundWindow + 1500*time.Millisecond, backgroundWindow + 4*time.Second,
	} {
		prefix := fmt.Sprintf("nlc%d-%d", os.Getpid(), i)
		inodes := map[uint64]bool{}
		testHookBuilt = func(topo *Topology) {
			for _, ns := range topo.namespaces() {
				if ino, err := nsInode("/run/netns/" + ns); err == nil {
					inodes[ino] = true
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), delay)
		res, err := Run(ctx, s, Options{Prefix: prefix, Progress: io.Discard, NoFiles: true})
		cancel()
		testHookBuilt = nil
		t.Logf("cancel after %s: %d namespaces had been created", delay, len(inodes))
		if err == nil || !errors.Is(err, context.DeadlineExceeded) || res == nil || !res.Interrupted {
			t.Errorf("cancel after %s: err %v, want deadline exceeded and an interrupted result", delay, err)
		}
		if left := ListNamespaces(prefix); len(left) > 0 {
			t.Errorf("cancel after %s: namespaces left: %v", delay, left)
			for _, ns := range left {
				exec.Command("ip", "netns", "del", ns).Run()
			}
		}
		if pids := pidsWithNetnsInode(inodes); len(pids) > 0 {
			t.Errorf("cancel after %s: processes left in the run's namespaces: %v", delay, pids)
		}
	}
	if after := rootLinks(t); strings.Join(after, " ") != strings.Join(linksBefore, " ") {
		t.Errorf("host links changed: before %v after %v", linksBefore, after)
	}
}
