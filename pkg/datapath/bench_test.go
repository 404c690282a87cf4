package datapath

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/vishvananda/netns"

	"github.com/nagare-net/nagare/pkg/flow"
)

// The fast path's per-packet cost, measured with BPF_PROG_RUN's repeat
// loop (the kernel times the loop, leaving out the time the thread was
// preempted; no socket or device is involved):
//
//	go test -run '^$' -bench FastPath -benchtime 300000x ./pkg/datapath/   (make bench)
//
// The machine is shared and a single timed loop moved by up to 40 % from
// one run to the next, so each benchmark pins the namespace thread to one
// CPU, warms up (caches, branch predictors, the EMC where it is on) with
// one untimed batch, then times benchBatches short batches of
// b.N/benchBatches packets: other work that runs on the CPU between two
// packets of a batch (preempted time itself is not counted) leaves it with
// cold caches, and short batches leave some untouched. ns/op is the median
// batch's kernel average per packet, min-ns/op the fastest batch's: the
// min is what two runs on a busy machine share (noise only ever adds),
// the median what a packet usually costs.
const benchBatches = 25

// benchRun runs pkt through the ingress program b.N times in the kernel.
func benchRun(b *testing.B, d *testDP, pkt []byte, want uint32) {
	b.Helper()
	d.pinCPU(b)
	// Without a context BPF_PROG_RUN puts the packet on lo (ifindex 1 in
	// every namespace), which newTestDP made port 1.
	d.run(pkt, "lo")
	per := max(b.N/benchBatches, 1)
	benchBatch(b, d, pkt, want, per) // warm-up
	b.ResetTimer()
	durs := make([]time.Duration, benchBatches)
	for i := range durs {
		durs[i] = benchBatch(b, d, pkt, want, per)
	}
	b.StopTimer()
	reportBatches(b, durs)
}

// benchBatch runs pkt n times with one BPF_PROG_RUN and returns the
// kernel's average per run.
func benchBatch(b *testing.B, d *testDP, pkt []byte, want uint32, n int) time.Duration {
	b.Helper()
	var ret uint32
	var dur time.Duration
	err := d.inNetns(func() error {
		var err error
		ret, dur, err = d.objs.NagarePortIngress.Benchmark(pkt, n, nil)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	if ret != want {
		b.Fatalf("verdict %d, want %d; drops %v", ret, want, d.drops())
	}
	return dur
}

// reportBatches reports the median (ns/op), fastest and slowest batch.
func reportBatches(b *testing.B, durs []time.Duration) {
	durs = slices.Sorted(slices.Values(durs))
	b.ReportMetric(float64(durs[len(durs)/2].Nanoseconds()), "ns/op")
	b.ReportMetric(float64(durs[0].Nanoseconds()), "min-ns/op")
	b.ReportMetric(float64(durs[len(durs)-1].Nanoseconds()), "max-ns/op")
}

// installMasks installs n flows under n distinct masks; the one that
// matches the benchmark packet is under the last mask probed.
func installMasks(b testing.TB, d *testDP, n int, key flow.Key) {
	installMasksAt(b, d, n, key, false)
}

// installMasksAt is installMasks with the packet's flow under the first
// mask probed instead when hitFirst.
func installMasksAt(b testing.TB, d *testDP, n int, key flow.Key, hitFirst bool) {
	m := flow.Mask{InPort: 0xffffffff, EthType: 0xffff, NwProto: 0xff, EthDst: [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	m.IPDst = [16]byte{0xff, 0xff, 0xff, 0xff}
	hit := flow.Flow{Key: key, Mask: m, Actions: []flow.Action{flow.Output{Port: portOut}}}
	if hitFirst {
		if err := d.Put(hit); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < n-1; i++ {
		// Distinct masks that all look at the UDP destination port with a
		// different width, plus the source address: none matches the packet.
		m := flow.Mask{InPort: 0xffffffff, EthType: 0xffff, NwProto: 0xff, TpDst: uint16(0xffff << (i % 16))}
		m.IPSrc = [16]byte{0xff, 0xff, byte(0xff << (i / 16)), 0}
		k := key
		k.TpDst = key.TpDst + 1 + uint16(i)
		k.IPSrc[0] ^= 0x80
		if err := d.Put(flow.Flow{Key: k, Mask: m, Actions: []flow.Action{flow.Output{Port: portOut2}}}); err != nil {
			b.Fatal(err)
		}
	}
	if !hitFirst {
		if err := d.Put(hit); err != nil {
			b.Fatal(err)
		}
	}
	if got := d.NumMasks(); got != n {
		b.Fatalf("%d masks installed, want %d", got, n)
	}
}

func BenchmarkFastPath(b *testing.B) {
	pkt := udpPkt(b, "10.0.0.1", "10.0.0.2", 1000, 2000, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789")
	key := exactKeyUDP4("10.0.0.1", "10.0.0.2", 1000, 2000)

	b.Run("emc-hit", func(b *testing.B) {
		d := newTestDP(b)
		installMasks(b, d, 1, key)
		benchRun(b, d, pkt, tcActRedirect)
	})
	for _, n := range []int{1, 8, 32, 64} {
		b.Run(fmt.Sprintf("megaflow-hit-%d-masks", n), func(b *testing.B) {
			d := newTestDP(b)
			installMasks(b, d, n, key)
			if err := d.SetEMC(false); err != nil {
				b.Fatal(err)
			}
			benchRun(b, d, pkt, tcActRedirect)
		})
	}
	b.Run("miss-32-masks", func(b *testing.B) {
		d := newTestDP(b)
		installMasks(b, d, 32, key)
		miss := udpPkt(b, "10.0.0.1", "10.9.9.9", 1000, 2000, "x")
		// Misses are dropped and counted here; the upcall ring would fill.
		if err := d.SetUpcalls(false); err != nil {
			b.Fatal(err)
		}
		benchRun(b, d, miss, tcActShot)
	})
}

// BenchmarkMegaflowSearch: a megaflow hit (EMC off) with the packet's
// flow under the last of n masks, through the mask walk alone ("walk",
// the mask cache off) and through the mask cache ("cache"), plus the
// walk with the flow under the first mask ("walk-hit-first": the best
// that ordering masks by hit count could do for this packet). Every
// datapath is set up first and the batches of all cells are interleaved,
// round after round, so that a change in the machine's load falls on
// each cell alike; then one line per cell reports its batches (ns/op the
// median, min-ns/op the fastest), and "per-extra-mask" the slopes from 1
// to 64 masks, from the mins:
//
//	go test -run '^$' -bench MegaflowSearch -benchtime 300000x ./pkg/datapath/
func BenchmarkMegaflowSearch(b *testing.B) {
	pkt := udpPkt(b, "10.0.0.1", "10.0.0.2", 1000, 2000, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789")
	key := exactKeyUDP4("10.0.0.1", "10.0.0.2", 1000, 2000)
	type cell struct {
		name string
		d    *testDP
		durs []time.Duration
	}
	var cells []*cell
	add := func(name string, n int, cache, hitFirst bool) {
		d := newTestDPWith(b, func(c *Config) { c.Name += "_" + strings.ReplaceAll(name, "-", "_") })
		installMasksAt(b, d, n, key, hitFirst)
		if err := d.SetEMC(false); err != nil {
			b.Fatal(err)
		}
		if err := d.SetMaskCache(cache); err != nil {
			b.Fatal(err)
		}
		d.pinCPU(b)
		d.run(pkt, "lo")
		cells = append(cells, &cell{name: name, d: d})
	}
	counts := []int{1, 2, 4, 8, 16, 32, 64}
	for _, n := range counts {
		add(fmt.Sprintf("walk-%d-masks", n), n, false, false)
		add(fmt.Sprintf("cache-%d-masks", n), n, true, false)
	}
	add("walk-hit-first-64-masks", 64, false, true)

	per := benchPackets() / benchBatches
	for _, c := range cells { // warm-up
		benchBatch(b, c.d, pkt, tcActRedirect, per)
	}
	for range benchBatches {
		for _, c := range cells {
			c.durs = append(c.durs, benchBatch(b, c.d, pkt, tcActRedirect, per))
		}
	}
	mins := map[string]float64{}
	for _, c := range cells {
		b.Run(c.name, func(b *testing.B) { reportBatches(b, c.durs) })
		mins[c.name] = float64(slices.Min(c.durs).Nanoseconds())
	}
	b.Run("per-extra-mask", func(b *testing.B) {
		b.ReportMetric((mins["walk-64-masks"]-mins["walk-1-masks"])/63, "walk-ns/mask")
		b.ReportMetric((mins["cache-64-masks"]-mins["cache-1-masks"])/63, "cache-ns/mask")
		b.ReportMetric(0, "ns/op")
	})
}

// benchPackets is the -benchtime count (300000x: 300000), or 300000
// when -benchtime is a duration: how many packets a cell runs in all.
func benchPackets() int {
	if f := flag.Lookup("test.benchtime"); f != nil {
		if n, err := strconv.Atoi(strings.TrimSuffix(f.Value.String(), "x")); err == nil && strings.HasSuffix(f.Value.String(), "x") {
			return max(n, benchBatches)
		}
	}
	return 300000
}

// BenchmarkCTRecirc: a packet of an established connection through
// ct + recirculation (two lookups, the conntrack in between) against the
// same packet through a plain cached flow. EMC on, as in production.
//
//	go test -run '^$' -bench 'CTRecirc' ./pkg/datapath/
func BenchmarkCTRecirc(b *testing.B) {
	pkt := udpPkt(b, "10.0.0.1", "10.0.0.2", 1000, 2000, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789")
	key := exactKeyUDP4("10.0.0.1", "10.0.0.2", 1000, 2000)

	b.Run("plain-flow", func(b *testing.B) {
		d := newTestDP(b)
		installMasks(b, d, 1, key)
		benchRun(b, d, pkt, tcActRedirect)
	})
	// The agent's one pass for plain pod-to-pod traffic
	// (pkg/agent/pipeline/conntrack_onepass.go): the connection committed
	// (with nat, which finds nothing to translate) and routed in the same
	// pass. Its packets alternate directions: "orig" costs one conntrack
	// lookup, "reply" two. The MAC rewrites of the routed hop alone beside
	// them (dec_ttl would expire the repeated skb).
	macs := []flow.Action{flow.SetEthSrc{MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}}, flow.SetEthDst{MAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}}
	b.Run("plain-flow-routed", func(b *testing.B) {
		d := newTestDP(b)
		d.put(flow.Flow{Key: flow.Key{InPort: portIn}, Mask: flow.Mask{InPort: 0xffffffff, RecircID: 0xffffffff},
			Actions: append(append([]flow.Action(nil), macs...), flow.Output{Port: portOut})})
		benchRun(b, d, pkt, tcActRedirect)
	})
	reply := udpPkt(b, "10.0.0.2", "10.0.0.1", 2000, 1000, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789")
	// Each with the connection's shortcut (bpf/lib/shortcut.h), and
	// without (the walk: parse, exact-match cache, actions, ct).
	for _, dir := range []struct {
		name string
		pkt  []byte
	}{{"orig", pkt}, {"reply", reply}} {
		for _, sc := range []string{"", "-walk"} {
			b.Run("ct-one-pass-"+dir.name+sc, func(b *testing.B) {
				d := newTestDPWith(b, func(c *Config) { c.NoShortcuts = sc != "" })
				d.put(flow.Flow{Key: flow.Key{InPort: portIn}, Mask: flow.Mask{InPort: 0xffffffff, RecircID: 0xffffffff},
					Actions: append([]flow.Action{flow.CT{Zone: 1, Flags: flow.CTCommit, NAT: &flow.NAT{}}}, append(append([]flow.Action(nil), macs...), flow.Output{Port: portOut})...)})
				d.run(pkt, "lo")   // commits
				d.run(reply, "lo") // a reply: established
				before := d.counters()["shortcut-hit"]
				benchRun(b, d, dir.pkt, tcActRedirect)
				b.ReportMetric(float64(d.counters()["shortcut-hit"]-before)/float64(b.N), "shortcuts/pkt")
			})
		}
	}
	// BPF_PROG_RUN repeats on one skb, so a translated packet would come
	// round translated: the DNAT case's second pass writes the original
	// destination back (two set_field rewrites more than the NAT itself).
	undo := []flow.Action{flow.SetIPDst{Addr: netip.MustParseAddr("10.0.0.2")}, flow.SetTpDst{Port: 2000}}
	for _, tc := range []struct {
		name  string
		ct    flow.CT
		reply []byte // makes the connection established
		undo  []flow.Action
	}{
		{"ct-recirc", flow.CT{Zone: 1, Flags: flow.CTCommit},
			udpPkt(b, "10.0.0.2", "10.0.0.1", 2000, 1000, "a"), nil},
		{"ct-dnat-recirc", flow.CT{Zone: 1, Flags: flow.CTCommit, NAT: &flow.NAT{Kind: flow.NATDst, AddrMin: netip.MustParseAddr("10.1.0.5"), PortMin: 8080}},
			udpPkt(b, "10.1.0.5", "10.0.0.1", 8080, 1000, "a"), undo},
	} {
		b.Run(tc.name, func(b *testing.B) {
			d := newTestDP(b)
			d.put(flow.Flow{Key: flow.Key{InPort: portIn}, Mask: flow.Mask{InPort: 0xffffffff, RecircID: 0xffffffff},
				Actions: []flow.Action{tc.ct, flow.Recirc{ID: 1}}})
			d.put(flow.Flow{Key: flow.Key{InPort: portIn, RecircID: 1, CtState: flow.CtTrk | flow.CtEst},
				Mask:    flow.Mask{InPort: 0xffffffff, RecircID: 0xffffffff, CtState: flow.CtTrk | flow.CtEst | flow.CtNew | flow.CtRpl | flow.CtInv},
				Actions: append(tc.undo, flow.Output{Port: portOut})})
			d.run(pkt, "lo")      // commits
			d.run(tc.reply, "lo") // a reply: established
			benchRun(b, d, pkt, tcActRedirect)
		})
	}
}

// BenchmarkConntrackLookup: one lookup of an established connection in
// nagare's table (a packet in the original direction: one map lookup; a
// reply: two) against the kernel's nf_conntrack through the kfuncs
// (bpf_skb_ct_lookup + bpf_ct_release), same packet, same harness
// (bpf/ct_kfunc_bench.c). docs/conntrack.md quotes it:
//
//	go test -run '^$' -bench ConntrackLookup ./pkg/datapath/
func BenchmarkConntrackLookup(b *testing.B) {
	requireRoot(b)
	pkt := udpPkt(b, "10.0.0.1", "10.0.0.2", 1000, 2000, "0123456789abcdef")
	var objs ctkfuncObjects
	if err := loadCtkfuncObjects(&objs, nil); err != nil {
		b.Skipf("kfunc programs do not load here: %v", err)
	}
	defer objs.Close()
	// Our table: the connection in both directions, as a commit makes it.
	orig, conn, reply, alias := ctEntries([4]byte{10, 0, 0, 1}, [4]byte{10, 0, 0, 2}, 1000, 2000, monoCoarse()+uint64(time.Hour))
	if err := objs.CtBench.Put(orig, conn); err != nil {
		b.Fatal(err)
	}
	if err := objs.CtBench.Put(reply, alias); err != nil {
		b.Fatal(err)
	}
	replyPkt := udpPkt(b, "10.0.0.2", "10.0.0.1", 2000, 1000, "0123456789abcdef")
	run := func(b *testing.B, p *ebpf.Program, pkt []byte) {
		var ret uint32
		var per time.Duration
		err := nsRun(func() error {
			var err error
			ret, per, err = p.Benchmark(pkt, b.N, b.ResetTimer)
			return err
		})
		if err != nil || ret != 0 {
			b.Fatalf("ret %d err %v", ret, err)
		}
		b.ReportMetric(float64(per.Nanoseconds()), "ns/pkt")
	}
	b.Run("harness", func(b *testing.B) { run(b, objs.CtBenchNone, pkt) })
	b.Run("own-table-orig", func(b *testing.B) { run(b, objs.CtBenchOwnOrig, pkt) })
	b.Run("own-table-reply", func(b *testing.B) { run(b, objs.CtBenchOwnReply, replyPkt) })
	b.Run("kfunc-lookup-release", func(b *testing.B) {
		var ret uint32
		if err := nsRun(func() error {
			var err error
			ret, err = objs.CtBenchKfuncAdd.Run(&ebpf.RunOptions{Data: pkt})
			return err
		}); err != nil || (ret != 0 && ret != 2) {
			b.Fatalf("inserting into nf_conntrack: ret %d err %v", ret, err)
		}
		run(b, objs.CtBenchKfunc, pkt)
	})
}

// nsRun runs fn on a thread in the test namespace (the kfuncs look the
// connection up in the netns of the packet's device).
func nsRun(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	h, err := netns.GetFromName(testNS)
	if err != nil {
		return err
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		return err
	}
	defer netns.Set(orig)
	return fn()
}

// BenchmarkShortConnections: the packets of many short TCP connections
// (SYN, ACK, PSH|ACK, FIN|ACK of each, as a connections-per-second load
// sends them), each run once, through a megaflow under the last of 14
// masks (the agent's pipeline has about as many): every connection's
// keys are new to the caches (more connections than the mask cache's 4096
// entries per CPU), and a connection's flags change from packet to
// packet. "one-flow" sends one connection's packets over and over, the
// case the caches are built for. One BPF_PROG_RUN per packet, so the
// kernel's timing of a single run is in every cell alike; the cells'
// rounds are interleaved so that a change in the machine's load falls on
// each alike. ns/op is the median round's time per packet, min-ns/op the
// fastest round's; probes/pkt counts the megaflow table lookups,
// mask-cache-hits/pkt the packets the mask cache answered.
//
//	go test -run '^$' -bench ShortConnections -benchtime 1x ./pkg/datapath/
func BenchmarkShortConnections(b *testing.B) {
	const conns, masks, rounds = 8192, 14, 7
	key := exactKeyUDP4("10.0.0.1", "10.0.0.2", 1000, 2000)
	key.NwProto = 6
	flagSets := []layers.TCP{{SYN: true}, {ACK: true}, {PSH: true, ACK: true}, {FIN: true, ACK: true}}
	pkt := func(c int, f layers.TCP) []byte {
		tc := f
		tc.SrcPort, tc.DstPort, tc.Seq, tc.Window = layers.TCPPort(10000+c), 80, 1, 1000
		return serialize(b, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolTCP, "10.0.0.1", "10.0.0.2"), &tc, gopacket.Payload("hello"))
	}
	var many [][]byte
	for c := range conns {
		for _, f := range flagSets {
			many = append(many, pkt(c, f))
		}
	}
	type cell struct {
		name           string
		pkts           [][]byte
		emc, maskCache bool
		noInsert       bool
		d              *testDP
		durs           []time.Duration
		before         map[string]uint64
	}
	cells := []*cell{
		{name: "one-flow", pkts: many[:len(flagSets)], emc: true, maskCache: true},
		{name: "many-connections", pkts: many, emc: true, maskCache: true},
		{name: "many-connections-emc-off", pkts: many, maskCache: true},
		{name: "many-connections-emc-noinsert", pkts: many, emc: true, maskCache: true, noInsert: true},
		{name: "many-connections-caches-off", pkts: many},
	}
	round := func(c *cell) time.Duration {
		var sum time.Duration
		for i := range many {
			p := c.pkts[i%len(c.pkts)]
			var ret uint32
			var dur time.Duration
			if err := c.d.inNetns(func() error {
				var err error
				ret, dur, err = c.d.objs.NagarePortIngress.Benchmark(p, 1, nil)
				return err
			}); err != nil {
				b.Fatal(err)
			}
			if ret != tcActRedirect {
				b.Fatalf("verdict %d; drops %v", ret, c.d.drops())
			}
			sum += dur
		}
		return sum / time.Duration(len(many))
	}
	for _, c := range cells {
		c.d = newTestDPWith(b, func(cfg *Config) {
			cfg.Name += "_" + strings.ReplaceAll(c.name, "-", "_")
			cfg.EMCInsertInvProb = DefaultEMCInsertInvProb // as in production, not the tests' 1
			if c.noInsert {
				cfg.EMCInsertInvProb = 1 << 30
			}
		})
		installMasks(b, c.d, masks, key)
		if err := c.d.SetEMC(c.emc); err != nil {
			b.Fatal(err)
		}
		if err := c.d.SetMaskCache(c.maskCache); err != nil {
			b.Fatal(err)
		}
		c.d.pinCPU(b)
		round(c) // warm-up
		c.before = c.d.counters()
	}
	for range rounds {
		for _, c := range cells {
			c.durs = append(c.durs, round(c))
		}
	}
	for _, c := range cells {
		after := c.d.counters()
		b.Run(c.name, func(b *testing.B) {
			reportBatches(b, c.durs)
			n := float64(rounds * len(many))
			b.ReportMetric(float64(after["mask-probe"]-c.before["mask-probe"])/n, "probes/pkt")
			b.ReportMetric(float64(after["mask-cache-hit"]-c.before["mask-cache-hit"])/n, "mask-cache-hits/pkt")
		})
	}
}

// BenchmarkConntrackSweep: one sweep of a table holding what one port's
// budget lets an attacker commit (a quarter of the default table: 16384
// connections, two entries each), none of them expired. The revalidator
// sweeps every few seconds on the switch's thread, which may share its
// core with pods (lab scenario netpol-isolation, TSE against an allowed
// tuple); Stats is the read `nagarectl show` and the metrics do.
func BenchmarkConntrackSweep(b *testing.B) {
	d := newTestDP(b)
	const conns = DefaultConntrackMax / 4
	keys := make([]ctKey, 0, 2*conns)
	vals := make([]ctValue, 0, 2*conns)
	exp := monoCoarse() + uint64(time.Hour)
	for i := range conns {
		orig, conn, reply, alias := ctPair(i, exp)
		keys, vals = append(keys, orig, reply), append(vals, conn, alias)
	}
	if _, err := d.objs.Conntrack.BatchUpdate(keys, vals, nil); err != nil {
		b.Fatal(err)
	}
	b.Run("sweep", func(b *testing.B) {
		for b.Loop() {
			if n, err := d.SweepConntrack(); err != nil || n != 0 {
				b.Fatalf("swept %d (%v), want none", n, err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(2*conns), "ns/entry")
	})
	b.Run("stats", func(b *testing.B) {
		for b.Loop() {
			if st, err := d.ConntrackStats(); err != nil || st.Conns != conns {
				b.Fatalf("%d connections (%v), want %d", st.Conns, err, conns)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(2*conns), "ns/entry")
	})
}
