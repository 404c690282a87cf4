package child

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestChildOutlivesItsStartersThread starts a child from a goroutine that
// then locks its thread and returns, which makes the runtime end that
// thread: the child must still be running. With cmd.Start on the
// goroutine's own thread, Pdeathsig would kill it here.
func TestChildOutlivesItsStartersThread(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	started := make(chan error)
	go func() {
		runtime.LockOSThread() // returning while locked ends the thread
		started <- Start(cmd)
	}()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("the child died with its starter's thread: %v", err)
	case <-time.After(300 * time.Millisecond):
		_ = cmd.Process.Kill()
		<-exited
	}
	if cmd.SysProcAttr.Pdeathsig != syscall.SIGKILL {
		t.Fatalf("Pdeathsig %v", cmd.SysProcAttr.Pdeathsig)
	}
}
