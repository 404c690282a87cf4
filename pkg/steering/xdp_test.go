package steering

import (
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/nagare-net/nagare/internal/nstest"
)

// XDP verdicts.
const (
	xdpPass     = 2
	xdpRedirect = 4
)

var (
	macOuterA = net.HardwareAddr{0x02, 0, 0, 0, 0, 0xa}
	macOuterB = net.HardwareAddr{0x02, 0, 0, 0, 0, 0xb}
	macPodA   = net.HardwareAddr{0x0a, 0x58, 10, 1, 0, 1}
	macPodB   = net.HardwareAddr{0x0a, 0x58, 10, 2, 0, 2}
)

func requireBPF(tb testing.TB) {
	tb.Helper()
	if testing.Short() || os.Geteuid() != 0 {
		tb.Skip("needs root and BPF (skipped in -short mode)")
	}
}

// newTestUplink loads a fresh Uplink whose Core Table has cpus CPUs;
// CPUs beyond the machine's are marked online without a cpumap entry, so
// the choice rule can be tested on more CPUs than the machine has (the
// datapath then records the choice and stays: target-down).
func newTestUplink(tb testing.TB, cpus int) *Uplink {
	tb.Helper()
	requireBPF(tb)
	u, err := New(Config{CPUs: cpus})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { u.Close() })
	for i := range u.cores {
		u.cores[i].Online = true
	}
	if err := u.writeCores(); err != nil {
		tb.Fatal(err)
	}
	return u
}

// onCPU0 runs the rest of the test on CPU 0: BPF_PROG_RUN runs the
// program on the calling thread's CPU, which is then the receiving CPU.
func onCPU0(tb testing.TB) {
	tb.Helper()
	runtime.LockOSThread()
	tb.Cleanup(runtime.UnlockOSThread)
	var set unix.CPUSet
	set.Set(0)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		var all unix.CPUSet
		for i := 0; i < runtime.NumCPU(); i++ {
			all.Set(i)
		}
		unix.SchedSetaffinity(0, &all)
	})
}

func run(tb testing.TB, u *Uplink, pkt []byte) uint32 {
	tb.Helper()
	ret, err := u.Program().Run(&ebpf.RunOptions{Data: pkt})
	if err != nil {
		tb.Fatal(err)
	}
	return ret
}

func mustEntry(tb testing.TB, s string) Entry {
	tb.Helper()
	e, err := ParseEntry(s)
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

func add(tb testing.TB, u *Uplink, s string) Entry {
	tb.Helper()
	e := mustEntry(tb, s)
	if err := u.Add(e); err != nil {
		tb.Fatal(err)
	}
	return e
}

func serialize(tb testing.TB, ls ...gopacket.SerializableLayer) []byte {
	tb.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// pkt describes a test packet: an outer IPv4 header, then VXLAN with an
// inner IPv4/UDP packet (vni != 0), ESP (spi != 0), or plain UDP.
type pkt struct {
	oSrc, oDst   string
	oTos         uint8
	oFragOff     uint16 // in 8-byte units
	oMF          bool
	oID          uint16
	vni          uint32
	spi          uint32
	iSrc, iDst   string
	iTos         uint8
	iID          uint16
	iFragOff     uint16
	iMF          bool
	sport, dport uint16
	payload      int
}

func (p pkt) bytes(tb testing.TB) []byte {
	tb.Helper()
	if p.oSrc == "" {
		p.oSrc = "192.168.1.1"
	}
	if p.oDst == "" {
		p.oDst = "192.168.1.2"
	}
	if p.payload == 0 {
		p.payload = 64
	}
	outer := &layers.IPv4{Version: 4, TTL: 64, TOS: p.oTos, Id: p.oID, SrcIP: net.ParseIP(p.oSrc).To4(), DstIP: net.ParseIP(p.oDst).To4(),
		FragOffset: p.oFragOff}
	if p.oMF {
		outer.Flags = layers.IPv4MoreFragments
	}
	eth := &layers.Ethernet{SrcMAC: macOuterA, DstMAC: macOuterB, EthernetType: layers.EthernetTypeIPv4}
	payload := gopacket.Payload(make([]byte, p.payload))
	switch {
	case p.oFragOff != 0:
		// A later outer fragment: only payload follows the IP header.
		outer.Protocol = layers.IPProtocolUDP
		return serialize(tb, eth, outer, payload)
	case p.spi != 0:
		outer.Protocol = 50
		esp := make([]byte, 8+p.payload)
		esp[0], esp[1], esp[2], esp[3] = byte(p.spi>>24), byte(p.spi>>16), byte(p.spi>>8), byte(p.spi)
		esp[7] = 1 // sequence number
		return serialize(tb, eth, outer, gopacket.Payload(esp))
	case p.vni != 0:
		outer.Protocol = layers.IPProtocolUDP
		ou := &layers.UDP{SrcPort: 40000, DstPort: 4789}
		ou.SetNetworkLayerForChecksum(outer)
		vx := &layers.VXLAN{ValidIDFlag: true, VNI: p.vni}
		ieth := &layers.Ethernet{SrcMAC: macPodA, DstMAC: macPodB, EthernetType: layers.EthernetTypeIPv4}
		inner := &layers.IPv4{Version: 4, TTL: 64, TOS: p.iTos, Id: p.iID, Protocol: layers.IPProtocolUDP,
			SrcIP: net.ParseIP(p.iSrc).To4(), DstIP: net.ParseIP(p.iDst).To4(), FragOffset: p.iFragOff}
		if p.iMF {
			inner.Flags = layers.IPv4MoreFragments
		}
		if p.iFragOff != 0 {
			return serialize(tb, eth, outer, ou, vx, ieth, inner, payload)
		}
		iu := &layers.UDP{SrcPort: layers.UDPPort(p.sport), DstPort: layers.UDPPort(p.dport)}
		iu.SetNetworkLayerForChecksum(inner)
		return serialize(tb, eth, outer, ou, vx, ieth, inner, iu, payload)
	default:
		outer.Protocol = layers.IPProtocolUDP
		u := &layers.UDP{SrcPort: layers.UDPPort(p.sport), DstPort: layers.UDPPort(p.dport)}
		u.SetNetworkLayerForChecksum(outer)
		return serialize(tb, eth, outer, u, payload)
	}
}

func vxlanPkt(dport uint16) pkt {
	return pkt{vni: 5, iSrc: "10.1.0.1", iDst: "10.2.0.2", sport: 1000, dport: dport}
}

func entryStatus(tb testing.TB, u *Uplink, m Match) EntryStatus {
	tb.Helper()
	es, err := u.Entries()
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range es {
		if e.Match == m {
			return e
		}
	}
	tb.Fatalf("no entry %s", m)
	return EntryStatus{}
}

func events(tb testing.TB, u *Uplink) map[string]uint64 {
	tb.Helper()
	ev, err := u.Events()
	if err != nil {
		tb.Fatal(err)
	}
	return ev
}

func cpuPackets(tb testing.TB, u *Uplink, cpu int) uint64 {
	tb.Helper()
	rows, err := u.CPUCounters()
	if err != nil {
		tb.Fatal(err)
	}
	for _, r := range rows {
		if r.CPU == cpu {
			return r.Packets
		}
	}
	tb.Fatalf("no counters for cpu %d", cpu)
	return 0
}

func TestOuterMatch(t *testing.T) {
	u := newTestUplink(t, 2)
	onCPU0(t)
	e := add(t, u, "priority=10,o_dst=192.168.1.2,o_dport=4789 actions=cpu:1")
	p := vxlanPkt(5001).bytes(t)
	if got := run(t, u, p); got != xdpRedirect {
		t.Fatalf("verdict %d, want redirect (%d)", got, xdpRedirect)
	}
	other := vxlanPkt(5001)
	other.oDst = "192.168.1.3"
	if got := run(t, u, other.bytes(t)); got != xdpPass {
		t.Fatalf("other outer destination: verdict %d, want pass", got)
	}
	st := entryStatus(t, u, e.Match)
	if st.Packets != 1 || st.Bytes != uint64(len(p)) || st.CPU != 1 {
		t.Fatalf("entry %+v: want 1 packet of %d bytes on cpu 1", st, len(p))
	}
	if n := cpuPackets(t, u, 1); n != 1 {
		t.Fatalf("cpu 1 got %d packets, want 1", n)
	}
	if n := cpuPackets(t, u, -1); n != 1 {
		t.Fatalf("%d packets stayed, want 1 (the miss)", n)
	}
	if ev := events(t, u); ev["miss"] != 1 {
		t.Fatalf("events %v", ev)
	}
}

func TestInnerMatch(t *testing.T) {
	u := newTestUplink(t, 2)
	onCPU0(t)
	add(t, u, "priority=10,vni=5,i_eth_dst=0a:58:0a:02:00:02,i_dst=10.2.0.0/16,i_proto=17,i_dport=5001 actions=cpu:1")
	cases := []struct {
		name string
		p    pkt
		want uint32
	}{
		{"match", vxlanPkt(5001), xdpRedirect},
		{"other port", vxlanPkt(5002), xdpPass},
		{"other vni", func() pkt { p := vxlanPkt(5001); p.vni = 6; return p }(), xdpPass},
		{"other inner dst", func() pkt { p := vxlanPkt(5001); p.iDst = "10.3.0.2"; return p }(), xdpPass},
		{"not vxlan", pkt{sport: 1000, dport: 5001}, xdpPass},
	}
	for _, c := range cases {
		if got := run(t, u, c.p.bytes(t)); got != c.want {
			t.Errorf("%s: verdict %d, want %d", c.name, got, c.want)
		}
	}
}

func TestPriorityWins(t *testing.T) {
	u := newTestUplink(t, 2)
	onCPU0(t)
	// The wider entry has the higher priority: it must win although its
	// mask was added last.
	add(t, u, "priority=10,vni=5,i_dport=5001 actions=cpu:0")
	add(t, u, "priority=20,vni=5 actions=cpu:1")
	if got := run(t, u, vxlanPkt(5001).bytes(t)); got != xdpRedirect {
		t.Fatalf("verdict %d, want redirect to cpu 1 (priority 20)", got)
	}
	// Lower it below the specific one: the specific entry (cpu 0, this
	// CPU) wins and the packet stays.
	add(t, u, "priority=5,vni=5 actions=cpu:1")
	if got := run(t, u, vxlanPkt(5001).bytes(t)); got != xdpPass {
		t.Fatalf("verdict %d, want pass (cpu 0 = receiving CPU)", got)
	}
	if ev := events(t, u); ev["local"] != 1 {
		t.Fatalf("events %v: want one local", ev)
	}
}

func TestFCFOnESP(t *testing.T) {
	u := newTestUplink(t, 2)
	onCPU0(t)
	add(t, u, "priority=10,fcf_id=3 actions=cpu:1")
	add(t, u, "priority=10,spi=0x1234 actions=cpu:1")
	tos := DefaultFCF.ToS(3, false)
	if got := run(t, u, pkt{spi: 0x9999, oTos: tos}.bytes(t)); got != xdpRedirect {
		t.Fatalf("ESP with FCF id 3: verdict %d, want redirect", got)
	}
	if got := run(t, u, pkt{spi: 0x1234}.bytes(t)); got != xdpRedirect {
		t.Fatalf("ESP SPI 0x1234: verdict %d, want redirect", got)
	}
	if got := run(t, u, pkt{spi: 0x9999, oTos: DefaultFCF.ToS(4, false)}.bytes(t)); got != xdpPass {
		t.Fatalf("ESP with FCF id 4: verdict %d, want pass", got)
	}
}

func TestFCFLayoutConfigurable(t *testing.T) {
	requireBPF(t)
	f := FCF{IDShift: 2, IDBits: 5, PrioBit: 8} // DSCP bits 4..0 hold the id, ECN untouched
	u, err := New(Config{CPUs: 2, FCF: f})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	onCPU0(t)
	add(t, u, "priority=1,fcf_id=3 actions=cpu:1")
	if got := run(t, u, pkt{spi: 1, oTos: 3<<2 | 0x3}.bytes(t)); got != xdpRedirect {
		t.Fatalf("id 3 in bits 6..2 with ECN set: verdict %d, want redirect", got)
	}
	if got := run(t, u, pkt{spi: 1, oTos: DefaultFCF.ToS(3, false)}.bytes(t)); got != xdpPass {
		t.Fatalf("the default layout's id 3 reads as another id here: verdict %d, want pass", got)
	}
}

func TestFragmentsOneCPU(t *testing.T) {
	u := newTestUplink(t, 2)
	onCPU0(t)
	// Only the first fragment carries the inner ports the entry matches.
	add(t, u, "priority=10,vni=5,i_dport=5001 actions=cpu:1")
	first := vxlanPkt(5001)
	first.iID, first.iMF = 77, true
	later := vxlanPkt(5001)
	later.iID, later.iFragOff = 77, 185 // 1480 bytes in
	if got := run(t, u, first.bytes(t)); got != xdpRedirect {
		t.Fatalf("first fragment: verdict %d, want redirect", got)
	}
	if got := run(t, u, later.bytes(t)); got != xdpRedirect {
		t.Fatalf("later fragment: verdict %d, want redirect (follows the first)", got)
	}
	if ev := events(t, u); ev["fragment-followed"] != 1 {
		t.Fatalf("events %v: want fragment-followed 1", ev)
	}
	// A later fragment of another datagram, first fragment never seen:
	// no ports, so the port entry cannot match it.
	stray := later
	stray.iID = 78
	if got := run(t, u, stray.bytes(t)); got != xdpPass {
		t.Fatalf("stray later fragment: verdict %d, want pass", got)
	}
	// With the FCF in the outer ToS every fragment matches by itself,
	// including outer fragments that carry no UDP or VXLAN header.
	add(t, u, "priority=20,fcf_id=9 actions=cpu:1")
	stray.oTos = DefaultFCF.ToS(9, false)
	if got := run(t, u, stray.bytes(t)); got != xdpRedirect {
		t.Fatalf("stray later fragment with FCF: verdict %d, want redirect", got)
	}
	outerLater := pkt{oTos: DefaultFCF.ToS(9, false), oID: 5, oFragOff: 100}
	if got := run(t, u, outerLater.bytes(t)); got != xdpRedirect {
		t.Fatalf("outer later fragment with FCF: verdict %d, want redirect", got)
	}
}

// setCores writes loads and pins straight into the Core Table (no
// re-evaluation), as one sample period would leave them.
func setCores(tb testing.TB, u *Uplink, loads []uint32, pins []uint32) {
	tb.Helper()
	for i := range u.cores {
		u.cores[i].Load, u.cores[i].Pinned = loads[i], pins[i]
	}
	if err := u.writeCores(); err != nil {
		tb.Fatal(err)
	}
}

func TestChooseOnce(t *testing.T) {
	u := newTestUplink(t, 2)
	onCPU0(t)
	e := add(t, u, "priority=10,vni=5 actions=choose")
	if st := entryStatus(t, u, e.Match); st.CPU != NotChosen {
		t.Fatalf("before any packet: cpu %d, want not chosen", st.CPU)
	}
	setCores(t, u, []uint32{80, 10}, []uint32{0, 0})
	if got := run(t, u, vxlanPkt(5001).bytes(t)); got != xdpRedirect {
		t.Fatalf("first packet: verdict %d, want redirect to cpu 1", got)
	}
	cores, err := u.Cores()
	if err != nil {
		t.Fatal(err)
	}
	if cores[1].Flows != 1 {
		t.Fatalf("core 1 flows %d, want 1 (counted by the datapath)", cores[1].Flows)
	}
	// Loads flip: the choice stays (no re-evaluation has run).
	setCores(t, u, []uint32{10, 80}, []uint32{0, 0})
	for i := 0; i < 3; i++ {
		if got := run(t, u, vxlanPkt(5001).bytes(t)); got != xdpRedirect {
			t.Fatalf("packet %d: verdict %d, want redirect (choice kept)", i+2, got)
		}
	}
	st := entryStatus(t, u, e.Match)
	if st.CPU != 1 || st.Changes != 1 || st.Packets != 4 {
		t.Fatalf("entry %+v: want cpu 1, 1 change, 4 packets", st)
	}
	if ev := events(t, u); ev["chose"] != 1 {
		t.Fatalf("events %v: want one choice", ev)
	}
}

// TestChooseRule runs the datapath's choice on four CPUs and compares it
// with the expected CPU and with Choose (the Go twin re-evaluation uses).
func TestChooseRule(t *testing.T) {
	cases := []struct {
		name  string
		loads []uint32
		pins  []uint32
		flows []uint32 // chosen flows already on each CPU
		prio  []uint32 // of which priority flows
		entry string
		fcf   uint8 // outer ToS
		want  uint32
	}{
		{"under threshold, unpinned", []uint32{90, 60, 30, 10}, []uint32{0, 0, 0, 7}, nil, nil,
			"actions=choose", 0, 2},
		{"spread: fewest flows first", []uint32{90, 20, 30, 40}, []uint32{0, 0, 0, 0}, []uint32{0, 2, 1, 0}, nil,
			"actions=choose", 0, 3},
		{"keep off priority CPUs", []uint32{90, 10, 30, 40}, []uint32{0, 0, 0, 0}, []uint32{0, 1, 1, 1}, []uint32{0, 1, 0, 0},
			"actions=choose", 0, 2},
		{"priority entry: least loaded", []uint32{90, 20, 30, 5}, []uint32{0, 0, 0, 0}, []uint32{0, 0, 0, 3}, nil,
			"actions=choose,priority_flow", 0, 3},
		{"priority by FCF bit", []uint32{90, 20, 30, 5}, []uint32{0, 0, 0, 0}, []uint32{0, 0, 0, 3}, nil,
			"actions=choose", DefaultFCF.ToS(0, true), 3},
		{"threshold: none qualifies", []uint32{50, 70, 99, 60}, []uint32{0, 0, 0, 0}, nil, nil,
			"actions=choose", 0, ReceivingCPU},
		{"pins: none qualifies", []uint32{0, 0, 0, 0}, []uint32{1, 2, 3, 4}, nil, nil,
			"actions=choose", 0, ReceivingCPU},
		{"priority under overcommit: least-loaded unpinned", []uint32{95, 70, 99, 60}, []uint32{0, 0, 0, 9}, nil, nil,
			"actions=choose,priority_flow", 0, 1},
		{"priority, all pinned: receiving CPU", []uint32{0, 0, 0, 0}, []uint32{1, 2, 3, 4}, nil, nil,
			"actions=choose,priority_flow", 0, ReceivingCPU},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u := newTestUplink(t, 4)
			onCPU0(t)
			e := add(t, u, "priority=1,vni=5 "+c.entry)
			setCores(t, u, c.loads, c.pins)
			for i := range u.cores {
				if c.flows != nil {
					u.cores[i].Flows = c.flows[i]
				}
				if c.prio != nil {
					u.cores[i].PrioFlows = c.prio[i]
				}
			}
			if err := u.writeCores(); err != nil {
				t.Fatal(err)
			}
			prio := e.PriorityFlow || c.fcf&1 != 0
			if got := Choose(u.cores, u.cfg.Threshold, prio); got != c.want {
				t.Errorf("Choose = %d, want %d", got, c.want)
			}
			p := vxlanPkt(5001)
			p.oTos = c.fcf
			verdict := run(t, u, p.bytes(t))
			st := entryStatus(t, u, e.Match)
			if st.CPU != c.want {
				t.Fatalf("datapath chose %d, want %d", st.CPU, c.want)
			}
			wantVerdict := uint32(xdpPass) // CPUs 2, 3 have no cpumap entry here; 0 is this CPU
			if c.want == 1 {
				wantVerdict = xdpRedirect
			}
			if verdict != wantVerdict {
				t.Fatalf("verdict %d, want %d", verdict, wantVerdict)
			}
			if c.want == ReceivingCPU {
				if ev := events(t, u); ev["chose-receiving-cpu"] != 1 {
					t.Fatalf("events %v: want chose-receiving-cpu", ev)
				}
			}
		})
	}
}

func TestReevaluation(t *testing.T) {
	u := newTestUplink(t, 4)
	onCPU0(t)
	e := add(t, u, "priority=1,vni=5 actions=choose")
	setCores(t, u, []uint32{90, 10, 20, 30}, []uint32{0, 0, 0, 0})
	run(t, u, vxlanPkt(5001).bytes(t))
	if st := entryStatus(t, u, e.Match); st.CPU != 1 {
		t.Fatalf("chose %d, want 1", st.CPU)
	}
	// CPU 1 gets busy: one sample is not enough to move the flow...
	if err := u.SetLoads([]uint32{90, 80, 20, 30}); err != nil {
		t.Fatal(err)
	}
	if st := entryStatus(t, u, e.Match); st.CPU != 1 {
		t.Fatalf("after one bad sample: cpu %d, want 1 (kept)", st.CPU)
	}
	// ...two in a row are.
	if err := u.SetLoads([]uint32{90, 80, 20, 30}); err != nil {
		t.Fatal(err)
	}
	st := entryStatus(t, u, e.Match)
	if st.CPU != 2 || st.Changes != 2 {
		t.Fatalf("after two bad samples: %+v, want cpu 2 and 2 changes", st)
	}
	// A workload pinned to CPU 2 moves it too (after two evaluations).
	if err := u.SetPin(2, 42); err != nil {
		t.Fatal(err)
	}
	if err := u.SetPin(2, 42); err != nil {
		t.Fatal(err)
	}
	if st := entryStatus(t, u, e.Match); st.CPU != 3 {
		t.Fatalf("after pinning CPU 2: cpu %d, want 3", st.CPU)
	}
	cores, err := u.Cores()
	if err != nil {
		t.Fatal(err)
	}
	if cores[3].Flows != 1 || cores[1].Flows != 0 || cores[2].Flows != 0 {
		t.Fatalf("flow counts %+v: want only CPU 3 with 1", cores)
	}
}

func TestUnparsedStays(t *testing.T) {
	u := newTestUplink(t, 2)
	onCPU0(t)
	add(t, u, "priority=1 actions=cpu:1") // matches every IP packet
	arp := serialize(t, &layers.Ethernet{SrcMAC: macOuterA, DstMAC: layers.EthernetBroadcast, EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: 1, SourceHwAddress: macOuterA, SourceProtAddress: []byte{1, 2, 3, 4}, DstHwAddress: make([]byte, 6), DstProtAddress: []byte{1, 2, 3, 5}})
	if got := run(t, u, arp); got != xdpPass {
		t.Fatalf("ARP: verdict %d, want pass", got)
	}
	if got := run(t, u, vxlanPkt(1).bytes(t)); got != xdpRedirect {
		t.Fatalf("IP: verdict %d, want redirect", got)
	}
	if ev := events(t, u); ev["unparsed"] != 1 {
		t.Fatalf("events %v: want one unparsed", ev)
	}
}

func TestDeleteEntry(t *testing.T) {
	u := newTestUplink(t, 2)
	onCPU0(t)
	e := add(t, u, "priority=1,vni=5 actions=cpu:1")
	if got := run(t, u, vxlanPkt(1).bytes(t)); got != xdpRedirect {
		t.Fatalf("verdict %d, want redirect", got)
	}
	if err := u.Delete(e.Match); err != nil {
		t.Fatal(err)
	}
	if got := run(t, u, vxlanPkt(1).bytes(t)); got != xdpPass {
		t.Fatalf("after delete: verdict %d, want pass", got)
	}
	if err := u.Delete(e.Match); err == nil {
		t.Fatal("second delete succeeded")
	}
	if es, _ := u.Entries(); len(es) != 0 {
		t.Fatalf("entries left: %v", es)
	}
}

// TestKeyLayout pins the Go wire layout to the generated struct.
func TestKeyLayout(t *testing.T) {
	k := Key{OuterSrc: netip.MustParseAddr("1.2.3.4"), VNI: 0x123456, InnerDstPort: 5001, FCFID: 3, FCFPrio: true,
		InnerEthDst: [6]byte{1, 2, 3, 4, 5, 6}, Flags: KeyVXLAN}
	b := toBPFKey(k)
	if b.Vni != 0x123456 || b.I_dport != 0x8913 || b.Fcf != 7 || b.I_ethDst != [6]uint8{1, 2, 3, 4, 5, 6} || b.O_src != 0x04030201 {
		t.Fatalf("generated key %+v does not hold %+v", b, k)
	}
	if got := keyFromWire(k.wire()); got.wire() != k.wire() || got.OuterSrc != k.OuterSrc || got.VNI != k.VNI {
		t.Fatalf("round trip: %+v, want %+v", got, k)
	}
}

// TestCachedMissThenAdd: the exact-match cache remembers misses too; an
// entry added afterwards must be seen by the very next packet.
func TestCachedMissThenAdd(t *testing.T) {
	u := newTestUplink(t, 2)
	onCPU0(t)
	add(t, u, "priority=1,vni=99 actions=cpu:1") // something, so the program looks
	p := vxlanPkt(5001).bytes(t)
	for i := 0; i < 2; i++ {
		if got := run(t, u, p); got != xdpPass {
			t.Fatalf("before the entry: verdict %d, want pass", got)
		}
	}
	add(t, u, "priority=1,vni=5 actions=cpu:1")
	if got := run(t, u, p); got != xdpRedirect {
		t.Fatalf("after the entry: verdict %d, want redirect", got)
	}
}

// TestAttachModes: a veth takes the program natively; a device whose
// driver has no XDP (a VXLAN device) gets generic XDP, and says so.
func TestAttachModes(t *testing.T) {
	requireBPF(t)
	ns := nstest.New(t, "steer")
	ns.IP(t, "link", "add", "a0", "type", "veth", "peer", "name", "a1")
	ns.IP(t, "link", "add", "vx9", "type", "vxlan", "id", "9", "dstport", "4789", "local", "127.0.0.1")
	for _, d := range []string{"a0", "a1", "vx9"} {
		ns.IP(t, "link", "set", d, "up")
	}
	u := newTestUplink(t, 2)
	ns.In(t, func() {
		for dev, want := range map[string]string{"a0": ModeNative, "vx9": ModeGeneric} {
			got, err := u.Attach(dev)
			if err != nil {
				t.Errorf("%s: %v", dev, err)
				continue
			}
			if got != want {
				t.Errorf("%s: mode %s, want %s", dev, got, want)
			}
		}
	})
	if m := u.Mode(); m != "generic,native" {
		t.Fatalf("Mode() = %q", m)
	}
	if err := u.Detach("vx9"); err != nil {
		t.Fatal(err)
	}
	if m := u.Mode(); m != ModeNative {
		t.Fatalf("after detach: Mode() = %q", m)
	}
}

// TestOuterIPv6: an IPv6 underlay is parsed too: the VNI and the inner
// headers match, the FCF is read from the traffic class.
func TestOuterIPv6(t *testing.T) {
	u := newTestUplink(t, 2)
	onCPU0(t)
	add(t, u, "priority=1,vni=5,i_dport=5001 actions=cpu:1")
	add(t, u, "priority=2,fcf_id=4 actions=cpu:1")
	build := func(tc uint8, vni uint32, dport uint16) []byte {
		outer := &layers.IPv6{Version: 6, TrafficClass: tc, HopLimit: 64, NextHeader: layers.IPProtocolUDP,
			SrcIP: net.ParseIP("fd00::1"), DstIP: net.ParseIP("fd00::2")}
		ou := &layers.UDP{SrcPort: 40000, DstPort: 4789}
		ou.SetNetworkLayerForChecksum(outer)
		inner := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IPv4(10, 1, 0, 1), DstIP: net.IPv4(10, 2, 0, 2)}
		iu := &layers.UDP{SrcPort: 1000, DstPort: layers.UDPPort(dport)}
		iu.SetNetworkLayerForChecksum(inner)
		return serialize(t, &layers.Ethernet{SrcMAC: macOuterA, DstMAC: macOuterB, EthernetType: layers.EthernetTypeIPv6}, outer, ou,
			&layers.VXLAN{ValidIDFlag: true, VNI: vni}, &layers.Ethernet{SrcMAC: macPodA, DstMAC: macPodB, EthernetType: layers.EthernetTypeIPv4},
			inner, iu, gopacket.Payload(make([]byte, 32)))
	}
	if got := run(t, u, build(0, 5, 5001)); got != xdpRedirect {
		t.Fatalf("VNI 5 port 5001 over IPv6: verdict %d, want redirect", got)
	}
	if got := run(t, u, build(0, 6, 5001)); got != xdpPass {
		t.Fatalf("VNI 6 over IPv6: verdict %d, want pass", got)
	}
	if got := run(t, u, build(DefaultFCF.ToS(4, false), 6, 1)); got != xdpRedirect {
		t.Fatalf("FCF 4 in the traffic class: verdict %d, want redirect", got)
	}
}
