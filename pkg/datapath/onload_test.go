package datapath

import (
	"encoding/binary"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nagare-net/nagare/internal/nstest"

	"github.com/nagare-net/nagare/pkg/flow"
)

// TestOnloadToRingAndBack: an onloaded flow's packet is counted and goes
// to the onload ring, not through the actions; offloaded again while one
// of its packets is still in userspace, the next packet follows it up;
// once userspace has sent it on, packets take the fast path again.
func TestOnloadToRingAndBack(t *testing.T) {
	d := newTestDP(t)
	f := flow.Flow{Key: flow.Key{InPort: portIn}, Mask: flow.Mask{InPort: 0xffffffff},
		Actions: []flow.Action{flow.Output{Port: portOut}}, Onload: true}
	id, err := d.Install(f)
	if err != nil {
		t.Fatal(err)
	}
	r, err := d.newUpcallReader(d.objs.Onload)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	pkt := udpPkt(t, "10.0.0.1", "10.0.0.2", 1000, 2000, "onload")

	res := d.run(pkt, "lo")
	if res.verdict != tcActShot || len(res.outputs) != 0 {
		t.Fatalf("onloaded packet: verdict %d outputs %v, want shot and no output", res.verdict, res.outputs)
	}
	if c := d.counters(); c["onload"] != 1 {
		t.Fatalf("counters %v: want onload 1", c)
	}
	if len(d.drops()) != 0 {
		t.Fatalf("handing a packet up counted as a drop: %v", d.drops())
	}
	u, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	gen := d.byID[id].gen
	if u.Reason != UpcallOnload || uint32(u.Cookie) != id || uint32(u.Cookie>>32) != gen || string(u.Packet) != string(pkt) {
		t.Fatalf("ring record %v cookie %#x (want id %d gen %d), %d bytes", u.Reason, u.Cookie, id, gen, len(u.Packet))
	}
	fs, _ := d.Dump()
	if len(fs) != 1 || fs[0].Stats.Packets != 1 || !fs[0].Onload {
		t.Fatalf("dump %+v: the onloaded packet must count in its flow", fs)
	}
	if n := d.OnloadPending(id); n != 1 {
		t.Fatalf("pending %d, want 1", n)
	}

	// Offload again while that packet is still "in userspace".
	f.Onload = false
	if err := d.Modify(f); err != nil {
		t.Fatal(err)
	}
	if _, ok := d.retired[gen]; !ok {
		t.Fatal("the onloaded generation's actions were not kept for its packets in the ring")
	}
	if res := d.run(pkt, "lo"); res.verdict != tcActShot || len(res.outputs) != 0 {
		t.Fatalf("offloaded flow with a packet in userspace: verdict %d outputs %v, want it sent up too", res.verdict, res.outputs)
	}
	if n := d.OnloadPending(id); n != 2 {
		t.Fatalf("pending %d, want 2", n)
	}
	acts, ok := d.onloadActions(id, gen)
	if !ok || len(acts) != 1 {
		t.Fatalf("actions of the retired generation: %v %v", acts, ok)
	}
	// Userspace sends both on.
	_, done := d.seqCounters(id)
	atomic.AddUint64(done, 2)
	if res := d.run(pkt, "lo"); res.verdict != tcActRedirect || len(res.outputs) != 1 || res.outputs[0].ifindex != d.ifindex["dummy0"] {
		t.Fatalf("drained flow: verdict %d outputs %v, want the fast path's redirect", res.verdict, res.outputs)
	}
	d.pruneRetired()
	if len(d.retired) != 0 {
		t.Fatalf("retired generations kept after the drain: %v", d.retired)
	}
}

// TestOnloadForwards: pods whose flows are onloaded reach each other
// through the Onloader (ping, UDP, a TCP stream), and the fast path's
// counters still see every packet.
func TestOnloadForwards(t *testing.T) {
	for _, path := range []OnloadPath{OnloadPathRing, OnloadPathAFXDP} {
		t.Run(string(path), func(t *testing.T) { testOnloadForwards(t, path) })
	}
}

func testOnloadForwards(t *testing.T, path OnloadPath) {
	// Two queues: the AF_XDP path takes each with a socket of its own.
	_, a, b, d := podPairQueues(t, 2)
	for _, ns := range []nstest.NS{a, b} {
		// Without TSO: every packet a plain frame (GSO packets:
		// TestOnloadForwardsTSO).
		if err := ns.Sh(t, "ethtool", "-K", "eth0", "tx", "off"); err != nil {
			t.Fatal(err)
		}
	}
	onloadCrossConnect(t, d)
	o := startOnloaderPath(t, d, path)
	if path == OnloadPathAFXDP {
		for _, no := range []uint32{1, 2} {
			if err := o.EnableXDP(no); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := a.Sh(t, "ping", "-c", "3", "-i", "0.2", "-W", "2", "10.1.0.2"); err != nil {
		t.Fatal(err)
	}
	nstest.UDPEcho(t, b, "10.1.0.2:7000")
	if n := nstest.UDPRoundTrips(t, a, "10.1.0.2:7000", 50); n != 50 {
		t.Fatalf("%d of 50 UDP round trips", n)
	}
	nstest.TCPTransfer(t, b, a, "10.1.0.2:7001", 8<<20)
	c, _ := d.Counters()
	fs, _ := d.Dump()
	var pkts uint64
	for _, f := range fs {
		pkts += f.Stats.Packets
	}
	if c["onload"] < 100 || o.Stats.Packets.Load() < c["onload"]-pkts/100 || pkts < c["onload"] {
		t.Fatalf("counters %v, onloader %d packets, flows %d packets: the onload path did not carry the traffic", c, o.Stats.Packets.Load(), pkts)
	}
	if dr, _ := d.Drops(); len(dr) != 0 {
		t.Fatalf("drops %v", dr)
	}
	if x := o.Stats.XDP.Load(); (path == OnloadPathAFXDP) != (x > 0) || (x > 0 && x < c["onload"]) {
		t.Fatalf("%s path: %d of %d onloaded packets came through AF_XDP", path, x, c["onload"])
	}
	// A malformed frame (an IPv4 header cut off) is dropped and counted
	// with its reason, whichever hook sees it first.
	raw := nstest.RawSocket(t, a, "eth0")
	frame := append(append([]byte{0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1}, 0x08, 0x00), 0x45, 0, 0, 20, 0)
	if _, err := unix.Write(raw, frame); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if dr, _ := d.Drops(); dr[DropShortIP] == 1 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("drops %v: the short frame was not counted", dr)
		}
	}
}

// TestOnloadForwardsTSO: pods with TSO hand their veths GSO packets; the
// Onloader sends them whole to the other pod's veth (a packet socket with
// vnet headers: the kernel finishes the checksum), none cut in userspace.
// The streams arrive intact (SHA-256 of each), and neither pod's TCP saw a
// bad checksum.
func TestOnloadForwardsTSO(t *testing.T) {
	o, a, b := onloadTSO(t, true)
	if o.Stats.VnetHdr != "on" {
		t.Fatalf("vnet header: %s", o.Stats.VnetHdr)
	}
	if o.Stats.Whole.Load() == 0 || o.Stats.Segmented.Load() != 0 {
		t.Fatalf("onloader: %d GSO packets sent whole, %d segmented; want some, none", o.Stats.Whole.Load(), o.Stats.Segmented.Load())
	}
	checkNoCsumErrors(t, a, b)
}

// TestOnloadSegmentsTSO: with vnet headers off, the Onloader cuts the GSO
// packets (Segment) and the streams still arrive intact.
func TestOnloadSegmentsTSO(t *testing.T) {
	onloadVnetHdr = false
	t.Cleanup(func() { onloadVnetHdr = true })
	o, a, b := onloadTSO(t, false)
	if o.Stats.VnetHdr != "off" || o.Stats.Segmented.Load() == 0 || o.Stats.Whole.Load() != 0 {
		t.Fatalf("onloader (vnet header %s): %d GSO packets segmented, %d sent whole; want some, none",
			o.Stats.VnetHdr, o.Stats.Segmented.Load(), o.Stats.Whole.Load())
	}
	checkNoCsumErrors(t, a, b)
}

// TestOnloadBadChecksumNotDelivered: a frame with a bad UDP checksum on an
// onloaded flow reaches the pod as it was, and the pod's UDP drops it
// (InCsumErrors); the same datagram with its checksum right is delivered.
// The Onloader with vnet headers must not make a bad frame good.
func TestOnloadBadChecksumNotDelivered(t *testing.T) {
	_, a, b, d := podPair(t)
	onloadCrossConnect(t, d)
	o := startOnloader(t, d)
	var macA, macB net.HardwareAddr
	a.In(t, func() {
		if ifc, err := net.InterfaceByName("eth0"); err == nil {
			macA = ifc.HardwareAddr
		}
	})
	b.In(t, func() {
		if ifc, err := net.InterfaceByName("eth0"); err == nil {
			macB = ifc.HardwareAddr
		}
	})
	var srv net.PacketConn
	var err error
	b.In(t, func() { srv, err = net.ListenPacket("udp4", "10.1.0.2:7003") })
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	frame := func(payload string, bad bool) []byte {
		p := udpPkt(t, "10.1.0.1", "10.1.0.2", 7004, 7003, payload)
		copy(p[0:], macB)
		copy(p[6:], macA)
		if bad {
			c := binary.BigEndian.Uint16(p[14+20+6:])
			binary.BigEndian.PutUint16(p[14+20+6:], c^0x0101)
		}
		return p
	}
	before := nstest.SNMP(t, b, "Udp", "InCsumErrors")
	fd := nstest.RawSocket(t, a, "eth0")
	for _, f := range [][]byte{frame("bad checksum", true), frame("good checksum", false)} {
		if _, err := unix.Write(fd, f); err != nil {
			t.Fatal(err)
		}
	}
	_ = srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 100)
	n, _, err := srv.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "good checksum" {
		t.Fatalf("pod b read %q, %v; want the datagram with the good checksum only", buf[:n], err)
	}
	if got := nstest.SNMP(t, b, "Udp", "InCsumErrors") - before; got != 1 {
		t.Fatalf("pod b: UDP InCsumErrors +%d, want +1 (the bad frame dropped there)", got)
	}
	if o.Stats.Packets.Load() < 2 {
		t.Fatalf("onloader executed %d packets, want both frames", o.Stats.Packets.Load())
	}
}

// onloadTSO sends TCP both ways between two pods with TSO through
// onloaded flows and checks that every packet went through the Onloader.
func onloadTSO(t *testing.T, whole bool) (*Onloader, nstest.NS, nstest.NS) {
	_, a, b, d := podPair(t)
	for _, ns := range []nstest.NS{a, b} {
		if err := ns.Sh(t, "ethtool", "-K", "eth0", "tx", "on", "tso", "on", "gso", "on"); err != nil {
			t.Fatal(err)
		}
	}
	onloadCrossConnect(t, d)
	o := startOnloader(t, d)
	nstest.TCPTransfer(t, b, a, "10.1.0.2:7001", 32<<20)
	nstest.TCPTransfer(t, a, b, "10.1.0.1:7002", 8<<20)
	c, _ := d.Counters()
	dr, _ := d.Drops()
	if c["onload-gso"] != 0 || len(dr) != 0 {
		t.Fatalf("counters %v, drops %v: packets of onloaded flows ran in the fast path or were dropped for their size", c, dr)
	}
	if o.Stats.Failed.Load() != 0 {
		t.Fatalf("onloader: %d packets failed", o.Stats.Failed.Load())
	}
	if o.Stats.Bytes.Load() < 40<<20 {
		t.Fatalf("onloader sent %d bytes for 40 MiB of TCP", o.Stats.Bytes.Load())
	}
	return o, a, b
}

// checkNoCsumErrors fails the test if a pod's TCP dropped a segment for its
// checksum (nstat's TcpInCsumErrors).
func checkNoCsumErrors(t *testing.T, pods ...nstest.NS) {
	t.Helper()
	for _, ns := range pods {
		if n := nstest.SNMP(t, ns, "Tcp", "InCsumErrors"); n != 0 {
			t.Errorf("namespace %s: TcpInCsumErrors %d", ns.Name, n)
		}
	}
}

// onloadCrossConnect installs onloaded flows port 1 → 2 and 2 → 1.
func onloadCrossConnect(t *testing.T, d *Datapath) {
	t.Helper()
	for _, f := range []flow.Flow{
		{Key: flow.Key{InPort: 1}, Mask: flow.Mask{InPort: 0xffffffff}, Actions: []flow.Action{flow.Output{Port: 2}}, Onload: true},
		{Key: flow.Key{InPort: 2}, Mask: flow.Mask{InPort: 0xffffffff}, Actions: []flow.Action{flow.Output{Port: 1}}, Onload: true},
	} {
		if err := d.Put(f); err != nil {
			t.Fatal(err)
		}
	}
}

// startOnloader runs an Onloader for d until the test ends.
func startOnloader(t testing.TB, d *Datapath) *Onloader {
	t.Helper()
	return startOnloaderPath(t, d, OnloadPathRing)
}

// startOnloaderPath is startOnloader on an onload path.
func startOnloaderPath(t testing.TB, d *Datapath, path OnloadPath) *Onloader {
	t.Helper()
	ready := make(chan *Onloader)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		restore, err := d.LockToNetns()
		if err != nil {
			t.Error(err)
			close(ready)
			return
		}
		defer restore()
		o, err := d.NewOnloaderPath(path)
		if err != nil {
			t.Error(err)
			close(ready)
			return
		}
		ready <- o
		if err := o.Run(); err != nil {
			t.Error(err)
		}
	}()
	o := <-ready
	if o == nil {
		t.FailNow()
	}
	t.Cleanup(func() {
		o.Close()
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			t.Error("onloader did not stop")
		}
	})
	return o
}

// BenchmarkPlacementSwap measures how long a placement change takes to
// show on the wire, under a UDP stream between two pods (its rate: stream-pps):
// to-onload is Modify(Onload) until the Onloader has sent the flow's first
// packet; to-offload is Modify(offload) until a packet of the flow is
// counted by the fast path without being handed up (the packets still in
// userspace drained first). Both include the wait for the stream's next
// packet (1/stream-pps on average).
func BenchmarkPlacementSwap(b *testing.B) {
	_, a, bb, d := podPair(b)
	for _, ns := range []nstest.NS{a, bb} {
		if err := ns.Sh(b, "ethtool", "-K", "eth0", "tx", "off"); err != nil {
			b.Fatal(err)
		}
	}
	f := flow.Flow{Key: flow.Key{InPort: 1}, Mask: flow.Mask{InPort: 0xffffffff}, Actions: []flow.Action{flow.Output{Port: 2}}}
	id, err := d.Install(f)
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Put(flow.Flow{Key: flow.Key{InPort: 2}, Mask: flow.Mask{InPort: 0xffffffff}, Actions: []flow.Action{flow.Output{Port: 1}}}); err != nil {
		b.Fatal(err)
	}
	o := startOnloader(b, d)
	s := nstest.StartUDPStream(b, a, bb, "10.1.0.2:7400", 1<<30, 0, 10*time.Microsecond)
	<-s.Reached
	onloadCtr := func() uint64 {
		v, err := d.percpuSum(d.objs.Counters.Lookup, 10)
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	var toOnload, toOffload time.Duration
	st0, _ := d.readStats(id)
	began := time.Now()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		before := o.Stats.Packets.Load()
		f.Onload = true
		start := time.Now()
		if err := d.Modify(f); err != nil {
			b.Fatal(err)
		}
		for o.Stats.Packets.Load() == before {
			if time.Since(start) > 5*time.Second {
				b.Fatal("no packet through the onload path")
			}
		}
		toOnload += time.Since(start)

		f.Onload = false
		start = time.Now()
		if err := d.Modify(f); err != nil {
			b.Fatal(err)
		}
		for {
			if time.Since(start) > 5*time.Second {
				b.Fatal("no packet through the fast path")
			}
			if d.OnloadPending(id) != 0 {
				continue
			}
			// Nothing in userspace: the flow's next packet counted
			// without the onload counter moving took the fast path.
			c0 := onloadCtr()
			p0, _ := d.readStats(id)
			for p, _ := d.readStats(id); p.Packets == p0.Packets; p, _ = d.readStats(id) {
			}
			if onloadCtr() == c0 {
				break
			}
		}
		toOffload += time.Since(start)
	}
	b.StopTimer()
	st1, _ := d.readStats(id)
	b.ReportMetric(float64(st1.Packets-st0.Packets)/time.Since(began).Seconds(), "stream-pps")
	b.ReportMetric(float64(toOnload.Microseconds())/float64(b.N), "µs-to-onload")
	b.ReportMetric(float64(toOffload.Microseconds())/float64(b.N), "µs-to-offload")
}
