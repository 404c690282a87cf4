package datapath

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/nagare-net/nagare/pkg/flow"
)

// dstFlow matches packets to an IPv4 destination (under one mask) and
// outputs to port.
func dstFlow(dst string, port uint32) flow.Flow {
	k := flow.Key{InPort: portIn, EthType: 0x0800}
	k.SetIPDst(netip.MustParseAddr(dst))
	m := flow.Mask{InPort: 0xffffffff, EthType: 0xffff, IPDst: [16]byte{0xff, 0xff, 0xff, 0xff}}
	return flow.Flow{Key: k, Mask: m, Actions: []flow.Action{flow.Output{Port: port}}}
}

func (t *testDP) outputOf(pkt []byte) int {
	t.tb.Helper()
	r := t.run(pkt, "lo")
	if len(r.outputs) == 0 {
		return 0
	}
	return r.outputs[len(r.outputs)-1].ifindex
}

// TestOverlapAndInvalidation: two overlapping megaflows; the one under the
// first mask in probe order wins, also once the exact-match cache holds the
// packet; deleting it must expose the other at once (no stale EMC entry),
// and modifying a flow's actions must take effect for cached packets.
func TestOverlapAndInvalidation(t *testing.T) {
	d := newTestDP(t)
	d.pinCPU(t) // the exact-match cache is per CPU
	pkt := udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, "x")
	specific := dstFlow("10.0.0.2", portOut)
	broad := inPortFlow(flow.Output{Port: portOut2})
	d.put(specific)
	d.put(broad)
	out0, out1 := d.ifindex["dummy0"], d.ifindex["dummy1"]

	for i := 0; i < 3; i++ { // megaflow hit, then EMC hits
		if got := d.outputOf(pkt); got != out0 {
			t.Fatalf("packet %d went to %d, want the first mask's flow (%d)", i, got, out0)
		}
	}
	if c := d.counters(); c["emc-hit"] != 2 {
		t.Fatalf("counters %v: want 2 EMC hits", c)
	}
	if _, err := d.Delete(specific.Key, specific.Mask); err != nil {
		t.Fatal(err)
	}
	if got := d.outputOf(pkt); got != out1 {
		t.Fatalf("after delete the packet went to %d, want the remaining flow (%d)", got, out1)
	}
	if err := d.Modify(inPortFlow(flow.Output{Port: portOut})); err != nil {
		t.Fatal(err)
	}
	if got := d.outputOf(pkt); got != out0 {
		t.Fatalf("after modify the packet went to %d, want %d", got, out0)
	}
	if _, err := d.Delete(broad.Key, broad.Mask); err != nil {
		t.Fatal(err)
	}
	if err := d.SetUpcalls(false); err != nil {
		t.Fatal(err)
	}
	if r := d.run(pkt, "lo"); r.verdict != tcActShot || len(r.outputs) != 0 {
		t.Fatalf("with no flows left the packet was forwarded: %+v", r)
	}
	if d.drops()[DropMissNoUpcall] != 1 {
		t.Fatalf("miss not counted: %v", d.drops())
	}
}

// TestMaskCacheKeepsProbeOrder: the mask cache (bpf/lib/megaflow.h)
// sends a known key straight to the slot where the walk found it; a
// megaflow installed later under an earlier slot, whether under a mask in
// use or under a new mask in a freed slot, must win at once, as it does
// for the walk. The EMC is off so that every packet takes the search.
func TestMaskCacheKeepsProbeOrder(t *testing.T) {
	d := newTestDP(t)
	d.pinCPU(t) // the mask cache is per CPU
	if err := d.SetEMC(false); err != nil {
		t.Fatal(err)
	}
	pkt := udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, "x")
	out0, out1 := d.ifindex["dummy0"], d.ifindex["dummy1"]
	other := dstFlow("10.9.9.9", portOut) // slot 0, does not match pkt
	d.put(other)
	d.put(inPortFlow(flow.Output{Port: portOut2})) // slot 1, matches
	// Slot 2, does not match: the cache is used above two masks.
	d.put(flow.Flow{Key: flow.Key{InPort: portIn, TpSrc: 9}, Mask: flow.Mask{InPort: 0xffffffff, TpSrc: 0xffff}, Actions: []flow.Action{flow.Drop{}}})
	hits := func() uint64 { return d.counters()["mask-cache-hit"] }
	for i := 0; i < 3; i++ {
		if got := d.outputOf(pkt); got != out1 {
			t.Fatalf("packet %d went to %d, want %d", i, got, out1)
		}
	}
	if h := hits(); h != 2 {
		t.Fatalf("%d mask cache hits, want 2 (the first packet walks)", h)
	}

	// Under the mask of slot 0, which is in use.
	d.put(dstFlow("10.0.0.2", portOut))
	if got := d.outputOf(pkt); got != out0 {
		t.Fatalf("after an install under an earlier mask the packet went to %d, want %d", got, out0)
	}
	if _, err := d.Delete(dstFlow("10.0.0.2", portOut).Key, dstFlow("10.0.0.2", portOut).Mask); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the walk, then the cache, find slot 1 again
		if got := d.outputOf(pkt); got != out1 {
			t.Fatalf("after the delete the packet went to %d, want %d", got, out1)
		}
	}
	before := hits()

	// Under a new mask that takes the freed slot 0.
	if _, err := d.Delete(other.Key, other.Mask); err != nil {
		t.Fatal(err)
	}
	if n := d.NumMasks(); n != 2 {
		t.Fatalf("%d masks, want 2 (slot 0 freed)", n)
	}
	k := flow.Key{InPort: portIn, EthType: 0x0800, NwProto: 17}
	d.put(flow.Flow{Key: k, Mask: flow.Mask{InPort: 0xffffffff, EthType: 0xffff, NwProto: 0xff},
		Actions: []flow.Action{flow.Output{Port: portOut}}})
	if got := d.outputOf(pkt); got != out0 {
		t.Fatalf("after a new mask in an earlier slot the packet went to %d, want %d", got, out0)
	}
	if h := hits(); h != before {
		t.Fatalf("a stale mask cache entry was used (%d hits, %d before)", h, before)
	}
}

// TestMaskCacheTCPFlags: the mask cache leaves the TCP flags out of an
// entry while no mask up to its slot looks at them, so a connection's ACK
// finds the megaflow its SYN's walk found; a mask that looks at the flags,
// installed in an earlier slot afterwards, wins at once for the packets it
// matches, and from then on entries compare the flags too (an ACK does not
// take a SYN's entry).
func TestMaskCacheTCPFlags(t *testing.T) {
	d := newTestDP(t)
	d.pinCPU(t) // the mask cache is per CPU
	if err := d.SetEMC(false); err != nil {
		t.Fatal(err)
	}
	out0, out1 := d.ifindex["dummy0"], d.ifindex["dummy1"]
	pkt := func(sport uint16, f layers.TCP) []byte {
		f.SrcPort, f.DstPort, f.Seq, f.Window = layers.TCPPort(sport), 80, 1, 1000
		return serialize(t, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolTCP, "10.0.0.1", "10.0.0.2"), &f, gopacket.Payload("x"))
	}
	syn, ack, fin := layers.TCP{SYN: true}, layers.TCP{ACK: true}, layers.TCP{FIN: true, ACK: true}
	other := dstFlow("10.9.9.9", portOut) // slot 0, does not match
	d.put(other)
	d.put(inPortFlow(flow.Output{Port: portOut2})) // slot 1, matches everything from portIn
	hits := func() uint64 { return d.counters()["mask-cache-hit"] }
	expect := func(what string, p []byte, want int, hit bool) {
		t.Helper()
		before := hits()
		if got := d.outputOf(p); got != want {
			t.Fatalf("%s went to %d, want %d", what, got, want)
		}
		if got := hits() - before; got != map[bool]uint64{false: 0, true: 1}[hit] {
			t.Fatalf("%s: %d mask cache hits, want hit=%v", what, got, hit)
		}
	}
	expect("first SYN (walks)", pkt(1000, syn), out1, false)
	expect("its ACK", pkt(1000, ack), out1, true)
	expect("its FIN", pkt(1000, fin), out1, true)

	// A mask on the FIN flag in the freed slot 0: an install before slot 1.
	if _, err := d.Delete(other.Key, other.Mask); err != nil {
		t.Fatal(err)
	}
	k := flow.Key{InPort: portIn, EthType: 0x0800, NwProto: 6, TCPFlags: 0x001}
	d.put(flow.Flow{Key: k, Mask: flow.Mask{InPort: 0xffffffff, EthType: 0xffff, NwProto: 0xff, TCPFlags: 0x001},
		Actions: []flow.Action{flow.Output{Port: portOut}}})
	expect("FIN after a FIN rule in an earlier slot", pkt(1000, fin), out0, false)
	expect("ACK after it (the entry holds the FIN now, flags compared: walks)", pkt(1000, ack), out1, false)
	expect("ACK again", pkt(1000, ack), out1, true)
	expect("FIN again", pkt(1000, fin), out0, false) // the ACK's entry is exact now: the FIN walks
	expect("a new connection's SYN", pkt(2000, syn), out1, false)
	expect("its ACK (the SYN's entry compares the flags)", pkt(2000, ack), out1, false)
	expect("its FIN", pkt(2000, fin), out0, false)
}

// TestReusedIDDoesNotResurrectEMC: a flow id freed by a delete and reused by
// another flow must not let the old flow's EMC entries forward packets.
func TestReusedIDDoesNotResurrectEMC(t *testing.T) {
	d := newTestDP(t)
	a := udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, "x")
	fa := dstFlow("10.0.0.2", portOut)
	d.put(fa)
	d.outputOf(a)
	d.outputOf(a) // now in the EMC
	if _, err := d.Delete(fa.Key, fa.Mask); err != nil {
		t.Fatal(err)
	}
	d.put(dstFlow("10.0.0.3", portOut2)) // takes the freed id
	if err := d.SetUpcalls(false); err != nil {
		t.Fatal(err)
	}
	if got := d.outputOf(a); got != 0 {
		t.Fatalf("packet of the deleted flow forwarded to %d", got)
	}
}

func TestLimits(t *testing.T) {
	requireRoot(t)
	d := newTestDP(t)
	// Mask limit: MaxMasks distinct masks fit, one more does not.
	mk := func(i int) flow.Flow {
		k := flow.Key{InPort: portIn, TpDst: uint16(i)}
		m := flow.Mask{InPort: 0xffffffff, TpDst: uint16(i) | 1, TpSrc: uint16(i)}
		return flow.Flow{Key: k, Mask: m, Actions: []flow.Action{flow.Drop{}}}
	}
	for i := 0; i < MaxMasks; i++ {
		d.put(mk(i))
	}
	if err := d.Put(mk(MaxMasks)); !errors.Is(err, ErrMaskLimit) {
		t.Fatalf("mask %d: err %v, want ErrMaskLimit", MaxMasks+1, err)
	}
	f := mk(5)
	if _, err := d.Delete(f.Key, f.Mask); err != nil {
		t.Fatal(err)
	}
	d.put(mk(MaxMasks)) // a freed mask slot is reused
	if err := d.Put(mk(MaxMasks)); !errors.Is(err, ErrFlowExists) {
		t.Fatalf("duplicate put: err %v, want ErrFlowExists", err)
	}

	// Flow limit.
	small, err := Open(Config{Name: "limits-small", PinRoot: testPinDir, NetNS: "/var/run/netns/" + testNS, MaxFlows: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Destroy()
	for i := 0; i < 8; i++ {
		if err := small.Put(flow.Flow{Key: flow.Key{InPort: uint32(i + 1)}, Mask: flow.Mask{InPort: 0xffffffff}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := small.Put(flow.Flow{Key: flow.Key{InPort: 99}, Mask: flow.Mask{InPort: 0xffffffff}}); !errors.Is(err, ErrFlowLimit) {
		t.Fatalf("flow 9 of 8: err %v, want ErrFlowLimit", err)
	}
	// Other limits: the instance is migrated (migrate.go), its flows
	// kept, and the new limit holds.
	small.Close()
	bigger, err := Open(Config{Name: "limits-small", PinRoot: testPinDir, NetNS: "/var/run/netns/" + testNS, MaxFlows: 16})
	if err != nil {
		t.Fatalf("reopening with other limits: %v", err)
	}
	defer bigger.Destroy()
	if got := len(bigger.Flows()); got != 8 {
		t.Fatalf("after the migration to MaxFlows 16: %d flows, want the 8 made before", got)
	}
	for i := 8; i < 16; i++ {
		if err := bigger.Put(flow.Flow{Key: flow.Key{InPort: uint32(i + 1)}, Mask: flow.Mask{InPort: 0xffffffff}}); err != nil {
			t.Fatalf("flow %d of 16: %v", i+1, err)
		}
	}
	if err := bigger.Put(flow.Flow{Key: flow.Key{InPort: 99}, Mask: flow.Mask{InPort: 0xffffffff}}); !errors.Is(err, ErrFlowLimit) {
		t.Fatalf("flow 17 of 16: err %v, want ErrFlowLimit", err)
	}
}

// TestClassifierMatchesReference installs random flows under random masks
// and checks that the kernel picks, for random packets, the flow that a
// straightforward Go classifier picks (first matching mask in probe order).
// This is what keeps the filter hash and the key layout in step with Go.
func TestClassifierMatchesReference(t *testing.T) {
	d := newTestDP(t)
	rng := rand.New(rand.NewPCG(1, 2))
	if err := d.SetUpcalls(false); err != nil {
		t.Fatal(err)
	}
	fields := []func(m *flow.Mask){
		func(m *flow.Mask) { m.IPDst = [16]byte{0xff, 0xff, 0xff, 0xff} },
		func(m *flow.Mask) { m.IPDst = [16]byte{0xff, 0xff, 0xff, 0} },
		func(m *flow.Mask) { m.IPSrc = [16]byte{0xff, 0xff, 0xff, 0xff} },
		func(m *flow.Mask) { m.TpDst = 0xffff },
		func(m *flow.Mask) { m.TpSrc = 0xff00 },
		func(m *flow.Mask) { m.NwProto = 0xff },
		func(m *flow.Mask) { m.EthDst = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff} },
	}
	var masks []flow.Mask
	for len(masks) < 12 {
		m := flow.Mask{InPort: 0xffffffff, EthType: 0xffff}
		for _, f := range fields {
			if rng.IntN(2) == 0 {
				f(&m)
			}
		}
		dup := false
		for _, o := range masks {
			dup = dup || o == m
		}
		if !dup {
			masks = append(masks, m)
		}
	}
	randPkt := func() (flow.Key, []byte) {
		src := netip.AddrFrom4([4]byte{10, 0, 0, byte(rng.IntN(4))})
		dst := netip.AddrFrom4([4]byte{10, 0, byte(rng.IntN(2)), byte(rng.IntN(4))})
		sport, dport := uint16(1000+rng.IntN(2)*256), uint16(3000+rng.IntN(4))
		pkt := udpPkt(t, src.String(), dst.String(), sport, dport, "r")
		return exactKeyUDP4(src.String(), dst.String(), sport, dport), pkt
	}
	type ref struct {
		f    flow.Flow
		slot int
	}
	var installed []ref
	portsOut := []uint32{portOut, portOut2}
	for i := 0; i < 150; i++ {
		k, _ := randPkt()
		m := masks[rng.IntN(len(masks))]
		f := flow.Flow{Key: k, Mask: m, Actions: []flow.Action{flow.Output{Port: portsOut[rng.IntN(2)]}}}
		if err := d.Put(f); errors.Is(err, ErrFlowExists) {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		installed = append(installed, ref{f.Normalize(), -1})
	}
	slotOf := func(m flow.Mask) int {
		for i := range d.masks {
			if d.masks[i].refs > 0 && d.masks[i].mask == m {
				return i
			}
		}
		return -1
	}
	for i := range installed {
		installed[i].slot = slotOf(installed[i].f.Mask)
	}
	for _, emc := range []bool{false, true} {
		if err := d.SetEMC(emc); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 400; i++ {
			k, pkt := randPkt()
			want, best := 0, MaxMasks
			for _, r := range installed {
				if r.slot < best && r.f.Key.Matches(r.f.Mask, k) {
					best = r.slot
					want = d.ports[r.f.Actions[0].(flow.Output).Port].Ifindex
				}
			}
			if got := d.outputOf(pkt); got != want {
				t.Fatalf("emc=%v packet %s: kernel output %d, reference %d", emc, flow.Format(k, flow.ExactMask()), got, want)
			}
		}
	}
}

// TestInstallBatch: a batch reports each flow's outcome as Install would
// (repeats in the batch and flows already installed refused, unknown ports
// and the mask limit refused), and the flows it installed forward, dump,
// and delete like single installs.
func TestInstallBatch(t *testing.T) {
	d := newTestDP(t)
	exact := func(sport uint16) flow.Flow {
		return flow.Flow{Key: exactKeyUDP4("10.0.0.1", "10.0.0.2", sport, 53), Mask: flow.ExactMask(), Actions: []flow.Action{flow.Output{Port: portOut}}}
	}
	d.put(exact(1))
	var masks []flow.Flow // MaxMasks-1 more distinct masks: the batch's last new mask is one too many
	for i := 0; i < MaxMasks-1; i++ {
		masks = append(masks, flow.Flow{Key: flow.Key{InPort: portIn}, Mask: flow.Mask{InPort: 0xffffffff, TpSrc: uint16(i + 1)}, Actions: []flow.Action{flow.Drop{}}})
	}
	fs := []flow.Flow{
		exact(2),
		exact(1), // installed before
		exact(3),
		exact(2), // repeat in the batch
		{Key: flow.Key{InPort: portIn}, Mask: flow.Mask{InPort: 0xffffffff}, Actions: []flow.Action{flow.Output{Port: 4242}}},
	}
	fs = append(fs, masks...)
	fs = append(fs, flow.Flow{Key: flow.Key{InPort: portIn}, Mask: flow.Mask{InPort: 0xffffffff, TpDst: 7}, Actions: []flow.Action{flow.Drop{}}})
	ids, errs := make([]uint32, len(fs)), make([]error, len(fs))
	d.InstallBatch(fs, ids, errs)
	want := map[int]error{1: ErrFlowExists, 3: ErrFlowExists, 4: ErrUnknownPort, len(fs) - 1: ErrMaskLimit}
	seen := map[uint32]bool{}
	for i := range fs {
		if w := want[i]; w != nil {
			if !errors.Is(errs[i], w) || ids[i] != 0 {
				t.Errorf("flow %d (%s): id %d err %v, want %v", i, fs[i], ids[i], errs[i], w)
			}
			continue
		}
		if errs[i] != nil || seen[ids[i]] {
			t.Errorf("flow %d (%s): id %d err %v", i, fs[i], ids[i], errs[i])
		}
		seen[ids[i]] = true
	}
	dump, err := d.Dump()
	if err != nil {
		t.Fatal(err)
	}
	if len(dump) != 1+len(seen) {
		t.Fatalf("%d flows dumped, want %d", len(dump), 1+len(seen))
	}
	for _, f := range dump {
		if f.ID != 0 && !seen[f.ID] && !(f.Key == exact(1).Key) {
			t.Errorf("dumped flow %d (%s) was not reported installed", f.ID, f.Flow)
		}
	}
	for _, sport := range []uint16{2, 3} {
		if got := d.outputOf(udpPkt(t, "10.0.0.1", "10.0.0.2", sport, 53, "x")); got != d.ifindex["dummy0"] {
			t.Errorf("packet of batch flow %d went to %d", sport, got)
		}
	}
	if _, err := d.Delete(exact(3).Key, exact(3).Mask); err != nil {
		t.Fatal(err)
	}
	if r := d.run(udpPkt(t, "10.0.0.1", "10.0.0.2", 3, 53, "x"), "lo"); len(r.outputs) != 0 {
		t.Fatalf("deleted batch flow still forwards: %+v", r.outputs)
	}
}

// TestBatchPutPartial: when the kernel stops part way through a batch, the
// element it stopped at is reported and the rest is still written.
func TestBatchPutPartial(t *testing.T) {
	requireRoot(t)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Put(uint32(9), uint32(9)); err != nil {
		t.Fatal(err)
	}
	var failed []int
	batchPut(m, []uint32{1, 2, 3, 9, 4}, []uint32{10, 20, 30, 90, 40}, func(i int, err error) { failed = append(failed, i) })
	if !slices.Equal(failed, []int{2, 4}) { // the map is full after 1 and 2; 9 exists and is overwritten
		t.Fatalf("failed elements %v, want [2 4]", failed)
	}
	var v uint32
	if err := m.Lookup(uint32(9), &v); err != nil || v != 90 {
		t.Fatalf("element after a failure: %d, %v", v, err)
	}
}

// TestRangeStats: the walk reports every installed flow once with its
// counters, deleted ones not, below and above the batch-read threshold.
func TestRangeStats(t *testing.T) {
	d := newTestDP(t)
	exact := func(i int) flow.Flow {
		return flow.Flow{Key: exactKeyUDP4("10.0.0.1", "10.0.0.2", uint16(i), 53), Mask: flow.ExactMask(), Actions: []flow.Action{flow.Output{Port: portOut}}}
	}
	walk := func() map[uint32]Stats {
		got := map[uint32]Stats{}
		err := d.RangeStats(func(ids []uint32, st []Stats) {
			for i, id := range ids {
				if _, dup := got[id]; dup {
					t.Errorf("flow %d reported twice", id)
				}
				got[id] = st[i]
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	var fs []flow.Flow
	for k, n := range []int{10, batchThreshold + 100} {
		for i := len(fs); i < n; i++ {
			fs = append(fs, exact(i+1))
		}
		ids, errs := make([]uint32, len(fs)), make([]error, len(fs))
		d.InstallBatch(fs[len(d.Flows()):], ids, errs)
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		d.run(udpPkt(t, "10.0.0.1", "10.0.0.2", 5, 53, "x"), "lo")
		d.run(udpPkt(t, "10.0.0.1", "10.0.0.2", 5, 53, "x"), "lo")
		victim := fs[2]
		if _, err := d.Delete(victim.Key, victim.Mask); err != nil {
			t.Fatal(err)
		}
		got := walk()
		if len(got) != len(fs)-1 {
			t.Fatalf("%d flows: walk reported %d", len(fs)-1, len(got))
		}
		var pkts uint64
		for _, st := range got {
			pkts += st.Packets
		}
		if want := uint64(2 * (k + 1)); pkts != want { // two packets per pass, to one flow
			t.Fatalf("%d flows: walk counted %d packets, want %d", len(fs)-1, pkts, want)
		}
		d.put(victim)
	}
}

// TestRangeStatsIDReused: a flow deleted while RangeStats reads its chunk,
// and its id taken by a new flow at once, must not lend its counters to
// the new flow (the read ran without the datapath's lock).
func TestRangeStatsIDReused(t *testing.T) {
	d := newTestDP(t)
	var fs []flow.Flow
	for i := 0; i < batchThreshold+10; i++ {
		fs = append(fs, flow.Flow{Key: exactKeyUDP4("10.0.0.1", "10.0.0.2", uint16(i+1), 53), Mask: flow.ExactMask(), Actions: []flow.Action{flow.Output{Port: portOut}}})
	}
	ids, errs := make([]uint32, len(fs)), make([]error, len(fs))
	d.InstallBatch(fs, ids, errs)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	d.run(udpPkt(t, "10.0.0.1", "10.0.0.2", 5, 53, "x"), "lo") // fs[4]
	d.run(udpPkt(t, "10.0.0.1", "10.0.0.2", 5, 53, "x"), "lo")
	victim := fs[4]
	fresh := flow.Flow{Key: exactKeyUDP4("10.0.0.1", "10.0.0.3", 5, 53), Mask: flow.ExactMask(), Actions: []flow.Action{flow.Output{Port: portOut}}}
	var freshID uint32
	rangeStatsRead = func() {
		rangeStatsRead = nil
		if _, err := d.Delete(victim.Key, victim.Mask); err != nil {
			t.Fatal(err)
		}
		id, err := d.Install(fresh)
		if err != nil {
			t.Fatal(err)
		}
		if freshID = id; id != ids[4] {
			t.Fatalf("the new flow got id %d, not the deleted flow's %d", id, ids[4])
		}
	}
	t.Cleanup(func() { rangeStatsRead = nil })
	var pkts uint64
	seen := false
	err := d.RangeStats(func(ids []uint32, st []Stats) {
		for i, id := range ids {
			pkts += st[i].Packets
			if id == freshID {
				seen = true
				if st[i].Packets != 0 || !st[i].Used.IsZero() {
					t.Errorf("the new flow %d was reported with the deleted flow's counters: %+v", id, st[i])
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !seen || pkts != 0 {
		t.Fatalf("walk: new flow reported %v, %d packets counted in all (want 0: the only used flow is gone)", seen, pkts)
	}
}

// TestIDAllocatorSmallestFirst: freed ids are reused smallest first, so
// after a flush the ids (and the walks over them) stay as low as the flow
// count allows.
func TestIDAllocatorSmallestFirst(t *testing.T) {
	var a idAllocator
	for i := 0; i < 10; i++ {
		if id, ok := a.alloc(10); !ok || id != uint32(i) {
			t.Fatalf("alloc %d: %d %v", i, id, ok)
		}
	}
	if _, ok := a.alloc(10); ok {
		t.Fatal("alloc past the limit succeeded")
	}
	for _, id := range []uint32{7, 3, 9, 0} {
		a.release(id)
	}
	for _, want := range []uint32{0, 3, 7, 9} {
		if id, ok := a.alloc(10); !ok || id != want {
			t.Fatalf("alloc after release: %d %v, want %d", id, ok, want)
		}
	}
}

// TestDeleteBatch: a batch removes the flows it names (unknown ones and
// repeats reported as ErrNoFlow), their packets miss at once, the others
// keep forwarding, and deleting the rest (Flush) frees every mask and id.
func TestDeleteBatch(t *testing.T) {
	d := newTestDP(t)
	exact := func(i int) flow.Flow {
		return flow.Flow{Key: exactKeyUDP4("10.0.0.1", "10.0.0.2", uint16(i), 53), Mask: flow.ExactMask(), Actions: []flow.Action{flow.Output{Port: portOut}}}
	}
	var fs []flow.Flow
	for i := 1; i <= 3000; i++ {
		fs = append(fs, exact(i))
	}
	ids, errs := make([]uint32, len(fs)), make([]error, len(fs))
	d.InstallBatch(fs, ids, errs)
	pkt := func(i int) []byte { return udpPkt(t, "10.0.0.1", "10.0.0.2", uint16(i), 53, "x") }
	d.run(pkt(2), "lo") // in the exact-match cache
	del := []flow.Flow{exact(2), exact(4000), exact(4), exact(2)}
	derrs := make([]error, len(del))
	d.DeleteBatch(del, derrs)
	if derrs[0] != nil || derrs[2] != nil || !errors.Is(derrs[1], ErrNoFlow) || !errors.Is(derrs[3], ErrNoFlow) {
		t.Fatalf("errors %v", derrs)
	}
	if n := len(d.Flows()); n != 2998 {
		t.Fatalf("%d flows left, want 2998", n)
	}
	for _, i := range []int{2, 4} {
		if r := d.run(pkt(i), "lo"); len(r.outputs) != 0 {
			t.Fatalf("deleted flow %d still forwards", i)
		}
	}
	if got := d.outputOf(pkt(3)); got != d.ifindex["dummy0"] {
		t.Fatalf("kept flow went to %d", got)
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, m := len(d.Flows()), d.NumMasks(); n != 0 || m != 0 {
		t.Fatalf("after flush: %d flows, %d masks", n, m)
	}
	if id, err := d.Install(exact(1)); err != nil || id != 0 {
		t.Fatalf("first install after flush: id %d, %v", id, err)
	}
	// Ids come back with zeroed counters (flow 2's packet was counted on
	// one of the first ids).
	for i := 2; i <= 3; i++ {
		if _, err := d.Install(exact(i)); err != nil {
			t.Fatal(err)
		}
	}
	dump, err := d.Dump()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range dump {
		if f.Stats.Packets != 0 {
			t.Fatalf("reused id %d starts with %d packets", f.ID, f.Stats.Packets)
		}
	}
}

// TestMaskedVLANMegaflow: a megaflow under a mask of some VID bits (from
// an OpenFlow vlan_vid=0x60/0xf0) takes tagged packets whose VID has
// those bits, packet by packet, and misses the others.
func TestMaskedVLANMegaflow(t *testing.T) {
	d := newTestDP(t)
	d.put(flow.Flow{Key: flow.Key{InPort: portIn, VlanTCI: 0x60}, Mask: flow.Mask{InPort: 0xffffffff, VlanTCI: 0xf0},
		Actions: []flow.Action{flow.Output{Port: portOut}}})
	tagged := func(vid uint16) []byte {
		return serialize(t, eth(layers.EthernetTypeDot1Q), &layers.Dot1Q{VLANIdentifier: vid, Priority: 3, Type: layers.EthernetTypeIPv4},
			ip4(layers.IPProtocolUDP, "10.0.0.1", "10.0.0.2"), &layers.UDP{SrcPort: 1, DstPort: 2}, gopacket.Payload("vlan"))
	}
	out0 := d.ifindex["dummy0"]
	for _, c := range []struct {
		vid  uint16
		want int
	}{{0x65, out0}, {0x6f, out0}, {0x75, 0}, {0x185, 0}, {0x165, out0}, {0x60, out0}} {
		for i := 0; i < 2; i++ { // megaflow, then EMC
			if got := d.outputOf(tagged(c.vid)); got != c.want {
				t.Fatalf("vid %#x, packet %d: output %d, want %d", c.vid, i, got, c.want)
			}
		}
	}
}
