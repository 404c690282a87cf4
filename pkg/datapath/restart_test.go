package datapath

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/flow"
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
	portsRun(t, d2)
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

// attachedProgram is the id of the program at ingress of port p: its
// pinned tcx link's, or its clsact filter's (pods).
func attachedProgram(t *testing.T, d *Datapath, p Port) ebpf.ProgramID {
	t.Helper()
	if l, err := link.LoadPinnedLink(d.linkPin(p.Ifindex), nil); err == nil {
		defer l.Close()
		li, err := l.Info()
		if err != nil {
			t.Fatal(err)
		}
		return li.Program
	}
	var id ebpf.ProgramID
	err := d.inNetns(func() error {
		fs, err := netlink.FilterList(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: p.Ifindex}}, netlink.HANDLE_MIN_INGRESS)
		if err != nil {
			return err
		}
		for _, f := range fs {
			if b, ok := f.(*netlink.BpfFilter); ok && b.Name == "nagare_port_ingress" {
				if id != 0 {
					return fmt.Errorf("port %s has two nagare filters", p.Name)
				}
				id = ebpf.ProgramID(b.Id)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if id == 0 {
		t.Fatalf("port %s (%v) has neither a pinned tcx link nor a nagare filter", p.Name, p.Kind)
	}
	return id
}

// nagareFilters is the fast path's filters at clsact ingress of device
// dev in namespace ns (tc's own view).
func nagareFilters(t *testing.T, ns, dev string) int {
	t.Helper()
	out, err := exec.Command("tc", "-n", ns, "filter", "show", "dev", dev, "ingress").CombinedOutput()
	if err != nil {
		t.Fatalf("tc filter show: %v: %s", err, out)
	}
	return strings.Count(string(out), "nagare_port_ingress")
}

// TestPodPortsMoveToTCX: pod ports attach with a clsact filter (a CNI
// ADD does not wait for tcx's RCU grace periods), other kinds with a
// pinned tcx link. Once pod attaches pause, the pod ports move to tcx
// (link pinned, filter gone) without losing a datagram of a ping-pong
// running through them; a restart keeps them there; detaching removes
// the hook a port has.
func TestPodPortsMoveToTCX(t *testing.T) {
	n, a, b, d := podPairWith(t, 1, func(c *Config) { c.PodHookQuiet = time.Hour })
	n.IP(t, "link", "add", "up0", "type", "veth", "peer", "name", "up0p") // no dummy module here
	up, err := d.AttachPort("up0", 3, PortUplink)
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string, d *Datapath, podHook string) {
		t.Helper()
		portsRun(t, d)
		for _, p := range d.Ports() {
			want := HookTCX
			if p.Kind == PortPod {
				want = podHook
			}
			_, pinErr := os.Stat(d.linkPin(p.Ifindex))
			filters := nagareFilters(t, n.Name, p.Name)
			if p.Hook != want || (want == HookTCX) != (pinErr == nil) || (want == HookFilter) != (filters == 1) || filters > 1 {
				t.Errorf("%s: port %s (%v): hook %q, want %q; pinned tcx link: %v; nagare filters %d", when, p.Name, p.Kind, p.Hook, want, pinErr, filters)
			}
		}
	}
	check("attached", d, HookFilter)

	// The pause: pod ports move while datagrams go to and fro.
	crossConnect(t, d, 1, 2)
	nstest.UDPEcho(t, b, "10.1.0.2:7000")
	d.mu.Lock()
	d.cfg.PodHookQuiet = time.Millisecond
	d.tcxTimer.Reset(0)
	d.mu.Unlock()
	moved := func() bool {
		for _, p := range d.Ports() {
			if p.Hook != HookTCX {
				return false
			}
		}
		return true
	}
	sent, got := 0, 0
	deadline := time.Now().Add(30 * time.Second)
	for after := 0; after < 2; {
		if moved() {
			after++
		} else if time.Now().After(deadline) {
			t.Fatalf("pod ports still on their filters: %+v (hook error %v)", d.Ports(), d.HookError())
		}
		got += nstest.UDPRoundTrips(t, a, "10.1.0.2:7000", 100)
		sent += 100
	}
	if got != sent {
		t.Fatalf("%d of %d round trips while the pod ports moved to tcx", got, sent)
	}
	t.Logf("%d round trips, all back, while the pod ports moved", sent)
	check("after the pause", d, HookTCX)
	if err := d.HookError(); err != nil {
		t.Fatal(err)
	}

	// A restart keeps them on tcx.
	cfg := d.cfg
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d2, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d2.Destroy() })
	check("restarted", d2, HookTCX)
	if n := nstest.UDPRoundTrips(t, a, "10.1.0.2:7000", 20); n != 20 {
		t.Fatalf("restarted: %d of 20 round trips", n)
	}

	var va Port
	for _, p := range d2.Ports() {
		if p.OFPort == 1 {
			va = p
		}
	}
	if err := d2.DetachPort(1); err != nil {
		t.Fatal(err)
	}
	if err := d2.DetachPort(up.OFPort); err != nil {
		t.Fatal(err)
	}
	for _, dev := range []string{"va", "up0"} {
		if nagareFilters(t, n.Name, dev) != 0 {
			t.Errorf("a filter left on detached %s", dev)
		}
	}
	for _, ifx := range []int{up.Ifindex, va.Ifindex} {
		if _, err := os.Stat(d2.linkPin(ifx)); !os.IsNotExist(err) {
			t.Errorf("pinned tcx link of detached ifindex %d: %v", ifx, err)
		}
	}
}

// TestRestartReplacesResizedRing: an instance pinned by a build whose
// upcall ring had another size opens with this build's ring (the load
// would otherwise fail as incompatible), and misses reach it.
func TestRestartReplacesResizedRing(t *testing.T) {
	d := newTestDP(t)
	cfg := d.cfg
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	path := d.dir + "/upcalls"
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	old, err := ebpf.NewMap(&ebpf.MapSpec{Name: "upcalls", Type: ebpf.RingBuf, MaxEntries: upcallRingBytes / 2})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := old.Pin(path); err != nil {
		t.Fatal(err)
	}
	d2, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.Datapath = d2
	if got := d2.objs.Upcalls.MaxEntries(); got != upcallRingBytes {
		t.Fatalf("upcall ring of %d bytes after the restart, want %d", got, upcallRingBytes)
	}
	r, err := d2.Upcalls()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	pkt := udpPkt(t, "10.0.0.1", "10.0.0.2", 1001, 3333, "after")
	if v := d.run(pkt, "lo"); v.verdict != tcActShot {
		t.Fatalf("miss verdict %d", v.verdict)
	}
	if u := readUpcall(t, r); u.Reason != UpcallMiss || !bytes.Equal(u.Packet, pkt) {
		t.Fatalf("upcall %+v", u)
	}
}

// TestRestoreDropsMegaflowsUnderInvalidMasks: a previous process that
// stopped between invalidating a mask and deleting its megaflows left a
// megaflow whose slot no walk probes. The next process must delete it with
// its id: kept, it would match again once the slot holds a mask again, and
// name whatever flow reuses the id.
func TestRestoreDropsMegaflowsUnderInvalidMasks(t *testing.T) {
	d := newTestDPWith(t, func(c *Config) { c.EMCInsertInvProb = 1 << 30 })
	pkt := udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, "x")
	f := inPortFlow(flow.Output{Port: portOut})
	if _, err := d.Install(f); err != nil {
		t.Fatal(err)
	}
	if r := d.run(pkt, "lo"); r.verdict != tcActRedirect {
		t.Fatalf("before: verdict %d", r.verdict)
	}
	// The previous process stops right after invalidating f's mask.
	var m nagareMfMask
	for slot := uint32(0); slot < MaxMasks; slot++ {
		if err := d.objs.Masks.Lookup(slot, &m); err != nil {
			t.Fatal(err)
		}
		if m.Valid != 0 {
			m.Valid = 0
			if err := d.objs.Masks.Update(slot, &m, ebpf.UpdateExist); err != nil {
				t.Fatal(err)
			}
		}
	}
	d.restart(t)
	d2 := d.Datapath
	// The megaflow left under the invalid mask is gone with its id: the
	// kernel's megaflows are the tracked ones (none).
	d.checkMaps(0)
	// Another flow under the same mask whose key falls in f's filter
	// bucket (the walk probes the megaflows only where the bucket counts
	// some): f's packets must miss, not take it through f's megaflow and
	// the reused id.
	g := f
	var mf flow.Mask = f.Mask
	mw := mf.Words()
	words := maskWords(&mw)
	kf := f.Key.Words()
	want := filterHash(&kf, &mw, words)
	for port := uint32(2); ; port++ {
		g.Key.InPort = port
		kg := g.Key.Words()
		if port != portIn && filterHash(&kg, &mw, words) == want {
			break
		}
		if port > 1<<24 {
			t.Fatal("no in_port shares f's filter bucket")
		}
	}
	g.Actions = []flow.Action{flow.Output{Port: portOut2}}
	if _, err := d2.Install(g); err != nil {
		t.Fatal(err)
	}
	if r := d.run(pkt, "lo"); r.verdict != tcActShot || len(r.outputs) != 0 {
		t.Fatalf("f's packet after the restart: verdict %d outputs %v, want a miss", r.verdict, r.outputs)
	}
}
