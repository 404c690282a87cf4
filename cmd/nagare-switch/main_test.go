package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/switchd"
)

// The test binary doubles as nagare-switch, so that tests can run it as
// a process of its own (and kill it).
const asMainEnv = "NAGARE_SWITCH_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// switchProc is nagare-switch running as a child process.
type switchProc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer
	exited chan struct{}
	err    error // of Wait, once exited is closed
}

func (p *switchProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *switchProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func switchCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), asMainEnv+"=1")
	return cmd
}

// startSwitch starts nagare-switch with args and waits until its
// management socket answers the control protocol.
func startSwitch(t *testing.T, sock string, args ...string) *switchProc {
	t.Helper()
	p := &switchProc{cmd: switchCmd(context.Background(), args...), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { p.signal(syscall.SIGKILL) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := switchd.Call(ctx, sock, switchd.CtlRequest{Cmd: "show"})
		cancel()
		if err == nil {
			return p
		}
		select {
		case <-p.exited:
			t.Fatalf("nagare-switch %s exited: %v\n%s", strings.Join(args, " "), p.err, p.output())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("nagare-switch never answered on %s: %v\n%s", sock, err, p.output())
		}
	}
}

// signal sends sig and waits for the process to end.
func (p *switchProc) signal(sig syscall.Signal) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	<-p.exited
}

// runRefused runs nagare-switch with args, which must fail at once (it
// is killed after 20 s), and returns its output.
func runRefused(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := switchCmd(ctx, args...).CombinedOutput()
	var ee *exec.ExitError
	if ctx.Err() != nil || !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("nagare-switch %s: %v (want exit status 1 at once)\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestOneSwitchPerBridge runs nagare-switch processes on one bridge and
// run dir: a second one and --destroy are refused while the first runs,
// with the first's pid in the message; after the first is killed with
// SIGKILL (no cleanup of any kind) a new one starts and takes the fast
// path over; once that one has stopped, --destroy works.
func TestOneSwitchPerBridge(t *testing.T) {
	nstest.RequireRoot(t)
	pinRoot, err := os.MkdirTemp("/sys/fs/bpf", "nagare-switch-cmd-test-")
	if err != nil {
		t.Skipf("no BPF filesystem: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(pinRoot) })
	node := nstest.New(t, "node")
	pod := nstest.New(t, "pod")
	nstest.Veth(t, pod, "eth0", node, "v1", 1500)

	runDir := t.TempDir()
	sock := filepath.Join(runDir, "br0.mgmt")
	args := []string{"--bridge", "br0", "--run-dir", runDir, "--netns", node.Path, "--bpffs", pinRoot, "--log-level", "warn"}
	first := startSwitch(t, sock, append(args, "--port", "v1=1")...)
	holder := fmt.Sprintf("pid %d", first.cmd.Process.Pid)

	out := runRefused(t, args...)
	if !strings.Contains(out, "in use by another nagare-switch") || !strings.Contains(out, holder) {
		t.Errorf("second switch's error does not say who holds the bridge (%s):\n%s", holder, out)
	}
	out = runRefused(t, append(args, "--destroy")...)
	if !strings.Contains(out, "--destroy refused") || !strings.Contains(out, holder) {
		t.Errorf("--destroy's error does not say it was refused for %s:\n%s", holder, out)
	}
	ports := func() []switchd.PortInfo {
		t.Helper()
		var ps []switchd.PortInfo
		r, err := switchd.Call(context.Background(), sock, switchd.CtlRequest{Cmd: "list-ports"})
		if err == nil {
			err = json.Unmarshal(r.Data, &ps)
		}
		if err != nil {
			t.Fatal(err)
		}
		return ps
	}
	if ps := ports(); len(ps) != 1 || ps[0].Name != "v1" {
		t.Fatalf("first switch after the refusals has ports %+v, want v1", ps)
	}

	// A crash: the kernel drops the lock with the process.
	first.signal(syscall.SIGKILL)
	second := startSwitch(t, sock, args...)
	if ps := ports(); len(ps) != 1 || ps[0].Name != "v1" || ps[0].OFPort != 1 {
		t.Fatalf("switch started after a SIGKILL has ports %+v, want v1 as 1 (taken over from the pins)", ps)
	}
	second.signal(syscall.SIGTERM)
	if second.err != nil {
		t.Fatalf("switch stopped by SIGTERM: %v\n%s", second.err, second.output())
	}
	if out, err := switchCmd(context.Background(), append(args, "--destroy")...).CombinedOutput(); err != nil {
		t.Fatalf("--destroy after the switch stopped: %v\n%s", err, out)
	}
	if left, _ := os.ReadDir(pinRoot); len(left) != 0 {
		t.Errorf("pins left after --destroy: %v", left)
	}
}
