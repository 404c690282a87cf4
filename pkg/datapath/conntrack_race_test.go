package datapath

import (
	"encoding/binary"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/nagare-net/nagare/pkg/flow"
)

// TestCTConcurrentCloses: the two sides of a connection close at the same
// moment on two CPUs (an HTTP server closes after its response while the
// client closes after reading it: both FINs cross), connection after
// connection. Every connection must end in TIME_WAIT. A tracker that
// records a FIN by a read-modify-write of a byte both sides share loses
// one of them now and then, and the connection stays half closed
// (FIN_WAIT / CLOSE_WAIT) for minutes, its tuples taken: a Service's new
// connection onto the same reply tuple was dropped (nat-no-port) and the
// client's SYN retried for seconds.
func TestCTConcurrentCloses(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs two CPUs")
	}
	c := newCTTest(t, func(cfg *Config) { cfg.Trace = false })
	c.firstPass(portIn, flow.CT{Flags: flow.CTCommit}, flow.Recirc{ID: 1})
	c.firstPass(portOut, flow.CT{}, flow.Recirc{ID: 1})
	// The second pass drops: no upcalls, so both CPUs run freely.
	c.put(flow.Flow{Key: flow.Key{RecircID: 1}, Mask: flow.Mask{RecircID: 0xffffffff}})
	cl, sv := "10.0.0.1", "10.0.0.2"
	const n = 3000
	for i := 0; i < n; i++ {
		sp := uint16(10000 + i)
		c.run(tcpSeg(t, cl, sv, sp, 80, synF), "lo")
		c.run(tcpSeg(t, sv, cl, 80, sp, synAckF), "dummy0")
		c.run(tcpSeg(t, cl, sv, sp, 80, ackF), "lo")
	}
	// Both FINs of connection i run at once, one per CPU: a spin barrier
	// per connection lines the two up.
	var arrived [n]atomic.Int32
	side := func(cpu int, dev string, pkt func(i int) []byte, errc chan<- error) {
		runtime.LockOSThread() // never unlocked: the thread leaves with its namespace
		errc <- func() error {
			f, err := os.Open("/var/run/netns/" + testNS)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				return err
			}
			var one unix.CPUSet
			one.Set(cpu)
			if err := unix.SchedSetaffinity(0, &one); err != nil {
				return err
			}
			ctx := make([]byte, 192)
			binary.NativeEndian.PutUint32(ctx[40:], uint32(c.ifindex[dev]))
			for i := 0; i < n; i++ {
				p := pkt(i)
				arrived[i].Add(1)
				for arrived[i].Load() < 2 {
				}
				if _, err := c.objs.NagarePortIngress.Run(&ebpf.RunOptions{Data: p, Context: ctx}); err != nil {
					return err
				}
			}
			return nil
		}()
	}
	cfin := make([][]byte, n)
	sfin := make([][]byte, n)
	for i := range cfin {
		sp := uint16(10000 + i)
		cfin[i] = tcpSeg(t, cl, sv, sp, 80, finF)
		sfin[i] = tcpSeg(t, sv, cl, 80, sp, finF)
	}
	errc := make(chan error, 2)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); side(0, "lo", func(i int) []byte { return cfin[i] }, errc) }()
	go func() { defer wg.Done(); side(1, "dummy0", func(i int) []byte { return sfin[i] }, errc) }()
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatal(err)
		}
	}
	states := map[string]int{}
	for _, x := range c.conns() {
		states[x.TCPState]++
	}
	if states["TIME_WAIT"] != n {
		t.Fatalf("after both sides' FINs, concurrently: %v; want all %d in TIME_WAIT", states, n)
	}
	// And the tuples are free again: a SYN on each starts anew.
	for i := 0; i < n; i += 97 {
		c.run(tcpSeg(t, cl, sv, uint16(10000+i), 80, synF), "lo")
		if x := connOf(t, c, uint16(10000+i)); x.TCPState != "SYN_SENT" {
			t.Fatalf("SYN after the close: %v", x)
		}
	}
}
