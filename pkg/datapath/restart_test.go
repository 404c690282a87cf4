package datapath

import (
	"fmt"
	"github.com/nagare-net/nagare/internal/nstest"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
)

// TestRestartKeepsForwarding closes the userspace side while a UDP stream
// runs and opens the instance again from its pins: no datagram may be
// lost, the new process must see the flows and ports again, and the ports
// must now run the new process's program.
func TestRestartKeepsForwarding(t *testing.T) {
	_, a, b, d := podPair(t)
	crossConnect(t, d, 1, 2)
	cfg := d.cfg

	const total = 3000
	stream := nstest.StartUDPStream(t, a, b, "10.1.0.2:7200", total, total/3, 200*time.Microsecond)
	<-stream.Reached
	flowsBefore := len(d.Flows())
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d2, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Destroy()

	if got := len(d2.Flows()); got != flowsBefore {
		t.Fatalf("reopened instance sees %d flows, had %d", got, flowsBefore)
	}
	if got := len(d2.Ports()); got != 2 {
		t.Fatalf("reopened instance sees %d ports", got)
	}
	info, err := d2.objs.NagarePortIngress.Info()
	if err != nil {
		t.Fatal(err)
	}
	progID, _ := info.ID()
	for _, p := range d2.Ports() {
		l, err := link.LoadPinnedLink(d2.linkPin(p.Ifindex), nil)
		if err != nil {
			t.Fatal(err)
		}
		li, err := l.Info()
		l.Close()
		if err != nil {
			t.Fatal(err)
		}
		if li.Program != progID {
			t.Fatalf("port %s runs program %d, the new process loaded %d", p.Name, li.Program, progID)
		}
	}
	if got := stream.Wait(); got != total {
		t.Fatalf("received %d of %d datagrams across the restart", got, total)
	}
	// The new process can still change the flows it inherited.
	for _, f := range d2.Flows() {
		if _, err := d2.Delete(f.Key, f.Mask); err != nil {
			t.Fatal(fmt.Errorf("deleting inherited flow: %w", err))
		}
	}
}
