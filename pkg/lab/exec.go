package lab

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nagare-net/nagare/internal/child"
)

// Shell runs the lab's commands (ip, ethtool, ovs-vsctl, sockperf, ...) and
// logs each one, so that a run's commands.log shows exactly what was done.
// Every child gets its own process group, which is what Stop and context
// cancellation kill: only processes the lab started, never anything by name.
type Shell struct {
	mu  sync.Mutex
	log io.Writer
}

// NewShell returns a Shell that logs commands to log (may be nil).
func NewShell(log io.Writer) *Shell { return &Shell{log: log} }

func (sh *Shell) logf(format string, a ...any) {
	if sh == nil || sh.log == nil {
		return
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	fmt.Fprintf(sh.log, format+"\n", a...)
}

func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'$;&|<>*?()") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

func command(ctx context.Context, args []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // child.Start adds the parent-death signal
	cmd.Cancel = func() error { return killGroup(cmd, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

func killGroup(cmd *exec.Cmd, sig syscall.Signal) error {
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// Run runs a command to completion and returns its combined output. A
// non-zero exit is an error that quotes the command and its output.
func (sh *Shell) Run(ctx context.Context, args ...string) (string, error) {
	sh.logf("%s", quoteArgs(args))
	cmd := command(ctx, args)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := child.Run(cmd)
	if err != nil {
		if ctx.Err() != nil {
			return out.String(), fmt.Errorf("%s: %w", quoteArgs(args), ctx.Err())
		}
		return out.String(), fmt.Errorf("%s: %v: %s", quoteArgs(args), err, strings.TrimSpace(lastLines(out.String(), 5)))
	}
	return out.String(), nil
}

// NS runs a command inside network namespace ns (ip netns exec).
func (sh *Shell) NS(ctx context.Context, ns string, args ...string) (string, error) {
	return sh.Run(ctx, append([]string{"ip", "netns", "exec", ns}, args...)...)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Proc is a background process started by Shell.Start.
type Proc struct {
	// Pid is the process ID (also its process group ID).
	Pid   int
	args  []string
	sh    *Shell
	cmd   *exec.Cmd
	mu    sync.Mutex
	out   bytes.Buffer
	ready chan struct{}
	done  chan struct{}
	err   error
	undo  *Undo
}

// Start starts a background process and registers its Stop with c, so the
// process dies with the run however the run ends. If readyMarker is not
// empty, WaitReady returns once a line of output contains it.
func (sh *Shell) Start(c *Cleanup, readyMarker string, args ...string) (*Proc, error) {
	sh.logf("%s &", quoteArgs(args))
	// Not CommandContext: the process lives until Stop (or cleanup).
	cmd := command(context.Background(), args)
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = pw
	p := &Proc{args: args, sh: sh, cmd: cmd, ready: make(chan struct{}), done: make(chan struct{})}
	if err := child.Start(cmd); err != nil {
		pw.Close()
		pr.Close()
		return nil, fmt.Errorf("%s: %w", quoteArgs(args), err)
	}
	p.Pid = cmd.Process.Pid
	p.undo = c.Add(fmt.Sprintf("stop pid %d (%s)", p.Pid, args[len(args)-1]), p.stop)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		seen := false
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			if p.out.Len() < 1<<20 {
				p.out.WriteString(line)
				p.out.WriteByte('\n')
			}
			p.mu.Unlock()
			if !seen && readyMarker != "" && strings.Contains(line, readyMarker) {
				seen = true
				close(p.ready)
			}
		}
		io.Copy(io.Discard, pr)
	}()
	go func() {
		p.err = cmd.Wait()
		pw.Close()
		close(p.done)
	}()
	return p, nil
}

// Output returns what the process printed so far (stdout and stderr).
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// WaitReady waits until the ready marker was printed. It fails if the
// process exits first, or after timeout.
func (p *Proc) WaitReady(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.ready:
		return nil
	case <-p.done:
		return fmt.Errorf("%s exited before it was ready: %v: %s", quoteArgs(p.args), p.err, lastLines(p.Output(), 5))
	case <-t.C:
		return fmt.Errorf("%s not ready after %s: %s", quoteArgs(p.args), timeout, lastLines(p.Output(), 5))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits for the process to exit by itself, or kills it when ctx ends.
func (p *Proc) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		p.Stop()
		return ctx.Err()
	}
}

// Stop ends the process group: SIGTERM, then SIGKILL after two seconds.
func (p *Proc) Stop() error { return p.undo.Run() }

func (p *Proc) stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	p.sh.logf("# stop pid %d: %s", p.Pid, quoteArgs(p.args))
	if err := killGroup(p.cmd, syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-p.done:
	case <-time.After(2 * time.Second):
		killGroup(p.cmd, syscall.SIGKILL)
		<-p.done
	}
	// No group kill after the leader is reaped: its PID (the group ID)
	// may already belong to someone else.
	return nil
}
