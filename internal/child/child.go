// Package child starts child processes that get SIGKILL when this process
// dies (Pdeathsig), and only then.
//
// Linux sends the parent-death signal when the thread that forked the child
// exits, not when the process does. Go ends an OS thread when a goroutine
// that locked it (runtime.LockOSThread, as every setns into a pod's or a
// node's namespace does) returns without unlocking it, and any goroutine may
// have forked a child on that thread before: the child was then killed at a
// random moment (an agent or switch of a namespace cluster dying under 20
// concurrent CNI calls). Children are therefore forked from one goroutine
// that keeps its thread locked for the life of the process.
package child

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

type request struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	once     sync.Once
	requests chan request
)

func forker() {
	runtime.LockOSThread() // never unlocked: this thread lives as long as the process
	for r := range requests {
		r.done <- r.cmd.Start()
	}
}

// Start starts cmd with SIGKILL as its parent-death signal (other
// SysProcAttr settings are kept), from the process's forking thread.
func Start(cmd *exec.Cmd) error {
	once.Do(func() {
		requests = make(chan request)
		go forker()
	})
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	r := request{cmd: cmd, done: make(chan error, 1)}
	requests <- r
	return <-r.done
}

// Run is Start and Wait.
func Run(cmd *exec.Cmd) error {
	if err := Start(cmd); err != nil {
		return err
	}
	return cmd.Wait()
}
