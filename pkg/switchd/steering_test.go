package switchd

import (
	"errors"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"golang.org/x/sys/unix"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/openflow"
	"github.com/nagare-net/nagare/pkg/steering"
)

// TestSteeringVXLAN: VXLAN traffic that arrives on CPU 0 is processed on
// the CPU a controller's VS-extend entry names, and every fragment of a
// fragmented datagram goes to the same CPU.
//
// Topology: "remote" sends over a kernel VXLAN device (VNI 5, outer ToS
// inherited) through a veth into "node", whose end (up0) carries the
// switch's steering program in native XDP; node's VXLAN device
// decapsulates and a UDP socket receives. The sender's thread is pinned
// to CPU 0, and a veth receives on the sending CPU, so CPU 0 is the
// receiving CPU. Where the rest ran is read two ways: the socket's
// SO_INCOMING_CPU (the kernel's, independent of nagare) and the steering
// program's per-CPU counters.
func TestSteeringVXLAN(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs two CPUs")
	}
	remote := nstest.New(t, "remote")
	node := nstest.New(t, "node")
	nstest.Veth(t, remote, "eth0", node, "up0", 1500)
	remote.IP(t, "addr", "add", "192.168.77.1/24", "dev", "eth0")
	node.IP(t, "addr", "add", "192.168.77.2/24", "dev", "up0")
	// Checksums are completed before the veth: after an XDP redirect the
	// frame is rebuilt without the skb's CHECKSUM_PARTIAL state, as a NIC
	// would deliver it, so a partial checksum would be dropped as bad.
	if err := remote.Sh(t, "ethtool", "-K", "eth0", "tx", "off"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []struct {
		ns          nstest.NS
		local, peer string
		inner       string
	}{{remote, "192.168.77.1", "192.168.77.2", "10.77.0.1/24"}, {node, "192.168.77.2", "192.168.77.1", "10.77.0.2/24"}} {
		n.ns.IP(t, "link", "add", "vx0", "type", "vxlan", "id", "5", "local", n.local, "remote", n.peer, "dstport", "4789", "tos", "inherit")
		n.ns.IP(t, "link", "set", "vx0", "up")
		n.ns.IP(t, "addr", "add", n.inner, "dev", "vx0")
	}

	ts := runSwitch(t, node, nil, t.TempDir(), func(c *Config) { c.SteerDevices = []string{"up0"} })
	t.Cleanup(func() {
		if ts.stopRun() {
			_ = ts.Destroy()
		}
	})
	u := ts.Steering()
	if u == nil {
		t.Fatal("no steering")
	}
	if mode := u.Mode(); mode != steering.ModeNative {
		t.Fatalf("XDP mode %s on a veth, want native", mode)
	}

	// The controller (on the switch's socket: it asks for the host report;
	// a controller the switch dials gets it after the handshake).
	tc := dialController(t, ts.Sock)
	tc.send(t, &openflow.Experimenter{Experimenter: openflow.ExperimenterNagare, ExpType: openflow.VSXHostReport})
	hr := tc.wait(t, 5*time.Second, func(m openflow.Message) bool {
		e, ok := m.(*openflow.Experimenter)
		return ok && e.Experimenter == openflow.ExperimenterNagare && e.ExpType == openflow.VSXHostReport
	}).(*openflow.Experimenter)
	body, err := openflow.DecodeVSX(hr)
	if err != nil {
		t.Fatal(err)
	}
	if h := body.(*openflow.VSXHost); h.CPUs != uint32(runtime.NumCPU()) || h.XDPMode != openflow.VSXModeNative {
		t.Fatalf("host report %+v: want %d CPUs, native XDP", h, runtime.NumCPU())
	}

	// A VM's port with its workload id, tenant and pinned CPU: the Core
	// Table pins the CPU and the controller hears of it.
	node.IP(t, "link", "add", "vm1", "type", "veth", "peer", "name", "vm1p")
	node.IP(t, "link", "set", "vm1", "up")
	if r := ts.control(CtlRequest{Cmd: "port-add", Name: "vm1", Workload: 3, Tenant: 7, PinCPU: 1 + 1}); !r.OK {
		t.Fatalf("port-add: %s", r.Error)
	}
	pr := tc.wait(t, 5*time.Second, func(m openflow.Message) bool {
		e, ok := m.(*openflow.Experimenter)
		return ok && e.ExpType == openflow.VSXPortReport
	}).(*openflow.Experimenter)
	if body, err := openflow.DecodeVSX(pr); err != nil || *body.(*openflow.VSXPort) != (openflow.VSXPort{PortNo: 1, Workload: 3, Tenant: 7, PinnedCPU: 1}) {
		t.Fatalf("port report %+v (%v)", body, err)
	}
	if cores, err := u.Cores(); err != nil || cores[1].Pinned != 3 {
		t.Fatalf("core table %+v (%v): want workload 3 pinned to CPU 1", cores, err)
	}
	// The controller unpins it again (the entries below name CPU 1 explicitly anyway).
	cm, _ := openflow.VSXMessage(openflow.VSXCoreMod, openflow.VSXCore{CPU: 1, Workload: 0})
	tc.send(t, cm)
	tc.barrier(t)
	if cores, _ := u.Cores(); cores[1].Pinned != 0 {
		t.Fatalf("core mod did not unpin: %+v", cores)
	}

	// ovs-ofctl beside a steering switch (it would take an unsolicited
	// experimenter message as a bad reply).
	ts.ofctl("del-flows")
	ts.ofctl("add-flow", "priority=1,actions=drop")
	if out := ts.ofctl("dump-flows"); !strings.Contains(out, "actions=drop") {
		t.Fatalf("ovs-ofctl dump-flows beside steering: %s", out)
	}

	// Receiver and sender sockets.
	var rx, tx *net.UDPConn
	node.In(t, func() {
		// Connected: UDP records SO_INCOMING_CPU on connected sockets only.
		rx, err = net.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(10, 77, 0, 2), Port: 5001}, &net.UDPAddr{IP: net.IPv4(10, 77, 0, 1), Port: 7000})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	remote.In(t, func() {
		tx, err = net.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(10, 77, 0, 1), Port: 7000}, &net.UDPAddr{IP: net.IPv4(10, 77, 0, 2), Port: 5001})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	fcf := steering.DefaultFCF.ToS(9, false)
	rawConn, err := tx.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	_ = rawConn.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, int(fcf)) })
	if err != nil {
		t.Fatal(err)
	}

	// send sends n datagrams of size bytes from CPU 0 and returns the
	// CPUs the receiver saw them processed on.
	send := func(n, size int) map[int]int {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var set unix.CPUSet
			set.Set(0)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				done <- err
				return
			}
			buf := make([]byte, size)
			for i := 0; i < n; i++ {
				if _, err := tx.Write(buf); err != nil {
					done <- err
					return
				}
				time.Sleep(time.Millisecond) // one datagram at a time through the receive path
			}
			done <- nil
		}()
		seen := map[int]int{}
		buf := make([]byte, 65536)
		rc, _ := rx.SyscallConn()
		got := 0
		for got < n {
			_ = rx.SetReadDeadline(time.Now().Add(3 * time.Second))
			m, err := rx.Read(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					break
				}
				t.Fatal(err)
			}
			if m != size {
				t.Fatalf("datagram of %d bytes, want %d", m, size)
			}
			got++
			var cpu int
			_ = rc.Control(func(fd uintptr) { cpu, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_INCOMING_CPU) })
			if err != nil {
				t.Fatal(err)
			}
			seen[cpu]++
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got < n*9/10 {
			t.Fatalf("received %d of %d datagrams", got, n)
		}
		return seen
	}

	// Warm up (ARP on both layers), then no entry: CPU 0 does it all.
	send(5, 64)
	if seen := send(30, 64); seen[0] != 30 {
		t.Fatalf("without an entry the receive path ran on CPUs %v, want only 0", seen)
	}

	// The controller steers the flow (inner UDP port 5001 in VNI 5) to CPU 1.
	var e steering.Entry
	if e, err = steering.ParseEntry("priority=10,vni=5,i_proto=17,i_dport=5001 actions=cpu:1"); err != nil {
		t.Fatal(err)
	}
	key, mask := e.Match.Wire()
	fm, err := openflow.VSXMessage(openflow.VSXFlowMod, openflow.VSXFlow{Command: openflow.VSXFlowAdd, Action: openflow.VSXActionCPU,
		Priority: e.Priority, CPU: 1, Key: key, Mask: mask})
	if err != nil {
		t.Fatal(err)
	}
	tc.send(t, fm)
	tc.barrier(t)
	before := steeredFrom0(t, u, 1)
	if seen := send(30, 64); seen[0] != 0 || seen[1] == 0 {
		t.Fatalf("with the entry the receive path ran on CPUs %v, want only 1", seen)
	}
	if n := steeredFrom0(t, u, 1) - before; n < 27 {
		t.Fatalf("counters: %d packets from CPU 0 to CPU 1, want about 30", n)
	}
	// nagarectl steering show (the control socket) and /metrics say so too.
	r := ts.control(CtlRequest{Cmd: "steering-show"})
	if !r.OK || !strings.Contains(strings.Join(r.Lines, "\n"), "i_dport=5001 actions=cpu:1 cpu=1 changes=0 n_packets=") {
		t.Fatalf("steering-show: %+v", r)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(steering.NewCollector(u))
	if v := gathered(t, reg, "nagare_steering_cpu_packets_total", "cpu", "1"); v < 27 {
		t.Fatalf("metric nagare_steering_cpu_packets_total{cpu=\"1\"} = %v, want >= 27", v)
	}

	// 8000-byte datagrams: six inner fragments each (VXLAN MTU 1450);
	// only the first carries the port the entry matches, the rest follow it.
	ev0 := events(t, u)
	before = steeredFrom0(t, u, 1)
	const dgrams = 20
	if seen := send(dgrams, 8000); seen[0] != 0 || seen[1] == 0 {
		t.Fatalf("fragmented datagrams reassembled on CPUs %v, want only 1", seen)
	}
	ev1 := events(t, u)
	followed := ev1["fragment-followed"] - ev0["fragment-followed"]
	steered := steeredFrom0(t, u, 1) - before
	if followed < 5*dgrams*9/10 || steered < 6*dgrams*9/10 {
		t.Fatalf("fragments: %d followed their first, %d steered to CPU 1; want about %d and %d", followed, steered, 5*dgrams, 6*dgrams)
	}

	// The controller deletes the entry: back on CPU 0.
	del, _ := openflow.VSXMessage(openflow.VSXFlowMod, openflow.VSXFlow{Command: openflow.VSXFlowDelete, Key: key, Mask: mask})
	tc.send(t, del)
	tc.barrier(t)
	if seen := send(20, 64); seen[0] != 20 {
		t.Fatalf("after the delete the receive path ran on CPUs %v, want only 0", seen)
	}
	// A malformed flow mod gets an OpenFlow error, not a dropped connection.
	tc.send(t, &openflow.Experimenter{Experimenter: openflow.ExperimenterNagare, ExpType: openflow.VSXFlowMod, Data: []byte{1, 2}})
	em := tc.wait(t, 5*time.Second, func(m openflow.Message) bool { _, ok := m.(*openflow.ErrorMsg); return ok }).(*openflow.ErrorMsg)
	if em.Type != openflow.ErrTypeBadRequest || em.Code != openflow.BadRequestBadLen {
		t.Fatalf("error %+v, want BAD_REQUEST/BAD_LEN", em)
	}
}

// gathered returns the value of the metric name whose label is value.
func gathered(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no metric %s{%s=%q}", name, label, value)
	return 0
}

// steeredFrom0 is the packets received on CPU 0 that the program sent to cpu.
func steeredFrom0(t *testing.T, u *steering.Uplink, cpu int) uint64 {
	t.Helper()
	rows, err := u.CPUCounters()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.CPU == cpu && len(r.ByReceiver) > 0 {
			return r.ByReceiver[0]
		}
	}
	return 0
}

func events(t *testing.T, u *steering.Uplink) map[string]uint64 {
	t.Helper()
	ev, err := u.Events()
	if err != nil {
		t.Fatal(err)
	}
	return ev
}
