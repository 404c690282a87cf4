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

// TestRestartWithVanishedPort deletes a port's device while no process
// owns the instance (a pod deleted during a switch restart): the next Open
// must start, without that port, and say which port it removed.
func TestRestartWithVanishedPort(t *testing.T) {
	n, _, _, d := podPair(t)
	cfg := d.cfg
	var gone Port
	for _, p := range d.Ports() {
		if p.OFPort == 2 {
			gone = p
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	n.IP(t, "link", "del", "vb")
	d2, err := Open(cfg)
	if err != nil {
		t.Fatalf("reopening after a port's device went: %v", err)
	}
	ps := d2.Ports()
	if len(ps) != 1 || ps[0].OFPort != 1 {
		t.Fatalf("reopened instance has ports %+v, want only port 1", ps)
	}
	if v := d2.Vanished(); len(v) != 1 || v[0].OFPort != 2 || v[0].Ifindex != gone.Ifindex {
		t.Fatalf("vanished ports %+v, want port 2 (ifindex %d)", v, gone.Ifindex)
	}
	if _, err := link.LoadPinnedLink(d2.linkPin(gone.Ifindex), nil); err == nil {
		t.Fatalf("the vanished port's tcx link is still pinned")
	}
	// A third Open sees a clean instance.
	if err := d2.Close(); err != nil {
		t.Fatal(err)
	}
	d3, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d3.Destroy()
	if len(d3.Vanished()) != 0 || len(d3.Ports()) != 1 {
		t.Fatalf("third open: vanished %+v, ports %+v", d3.Vanished(), d3.Ports())
	}
}
