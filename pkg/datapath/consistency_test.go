package datapath

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/nagare-net/nagare/pkg/flow"
)

// checkMaps compares the kernel maps with the userspace view of them: one
// megaflow per tracked flow pointing at its id, its actions entry, its
// generation, the filter counts recomputed from the flows, zero counters
// and generations on every free id.
func (t *testDP) checkMaps(step int) {
	tb := t.tb
	tb.Helper()
	d := t.Datapath
	d.mu.Lock()
	defer d.mu.Unlock()
	var mk megaflowID
	var id uint32
	kernel := map[megaflowID]uint32{}
	it := d.objs.Megaflows.Iterate()
	for it.Next(&mk, &id) {
		kernel[mk] = id
	}
	if err := it.Err(); err != nil {
		tb.Fatal(err)
	}
	if len(kernel) != d.flows.len() {
		tb.Fatalf("step %d: %d megaflows in the kernel, %d tracked", step, len(kernel), d.flows.len())
	}
	filter := map[uint32]uint32{}
	live := map[uint32]bool{}
	for in := range d.flows.all() {
		mid := makeMegaflowID(in.slot, &in.key)
		if got, ok := kernel[mid]; !ok || got != in.id {
			tb.Fatalf("step %d: megaflow of flow %d: kernel has %d, %v", step, in.id, got, ok)
		}
		if int(in.id) >= len(d.byID) || d.byID[in.id] != in {
			tb.Fatalf("step %d: flow %d missing from byID", step, in.id)
		}
		entry, err := kernelEntry(d, in.id)
		if err != nil {
			tb.Fatalf("step %d: actions of flow %d: %v", step, in.id, err)
		}
		if _, raw, _ := decodeEntry(entry); (len(raw) > inlineActions) != in.tail {
			tb.Fatalf("step %d: flow %d has %d actions in the kernel, tail %v here", step, in.id, len(raw), in.tail)
		}
		var gen uint32
		if err := d.objs.FlowGens.Lookup(in.id, &gen); err != nil || gen != in.gen || binary.NativeEndian.Uint32(entry) != in.gen {
			tb.Fatalf("step %d: flow %d generation %d (entry %d), want %d", step, in.id, gen, binary.NativeEndian.Uint32(entry), in.gen)
		}
		filter[in.filter]++
		live[in.id] = true
	}
	for slot, n := range filter {
		// Through the map (a system call): the mapping is the map.
		var got uint32
		if err := d.objs.MaskFilter.Lookup(slot, &got); err != nil || got != n {
			tb.Fatalf("step %d: filter slot %d: kernel %d (%v), flows %d", step, slot, got, err, n)
		}
	}
	for slot := range d.filter {
		if n := d.filter[slot].load(); filter[uint32(slot)] != n {
			tb.Fatalf("step %d: filter slot %d count %d, flows %d", step, slot, n, filter[uint32(slot)])
		}
	}
	for i := uint32(0); i < d.ids.next; i++ {
		if live[i] {
			continue
		}
		var gen uint32
		_ = d.objs.FlowGens.Lookup(i, &gen)
		st, _ := d.readStats(i)
		if gen != 0 || st.Packets != 0 {
			tb.Fatalf("step %d: free id %d has generation %d, %d packets", step, i, gen, st.Packets)
		}
	}
	refs := map[int]int{}
	for in := range d.flows.all() {
		refs[in.slot]++
	}
	for slot := range d.masks {
		if d.masks[slot].refs != refs[slot] {
			tb.Fatalf("step %d: mask slot %d has %d references, %d flows", step, slot, d.masks[slot].refs, refs[slot])
		}
	}
}

// TestBatchOpsKeepMapsConsistent runs random batches of installs, deletes,
// modifies and flushes (with repeats and unknown flows in them) and checks
// the kernel maps against the userspace view after each, and that packets
// of installed flows go where their flow says.
func TestBatchOpsKeepMapsConsistent(t *testing.T) {
	d := newTestDP(t)
	rng := rand.New(rand.NewPCG(7, 9))
	masks := []flow.Mask{flow.ExactMask()}
	for _, f := range []func(m *flow.Mask){
		func(m *flow.Mask) { m.TpDst = 0xffff },
		func(m *flow.Mask) { m.TpSrc = 0xffff },
		func(m *flow.Mask) { m.TpSrc, m.TpDst = 0xff00, 0xffff },
	} {
		m := flow.Mask{InPort: 0xffffffff, EthType: 0xffff, NwProto: 0xff}
		f(&m)
		masks = append(masks, m)
	}
	randFlow := func() flow.Flow {
		m := masks[rng.IntN(len(masks))]
		k := exactKeyUDP4("10.0.0.1", "10.0.0.2", uint16(1+rng.IntN(40)), uint16(53+rng.IntN(3)))
		port := uint32(portOut)
		if rng.IntN(2) == 0 {
			port = portOut2
		}
		return flow.Flow{Key: k.And(m), Mask: m, Actions: []flow.Action{flow.Output{Port: port}}}
	}
	checked := 0
	for step := 0; step < 1000; step++ {
		var fs []flow.Flow
		for n := 1 + rng.IntN(40); len(fs) < n; {
			fs = append(fs, randFlow())
		}
		errs := make([]error, len(fs))
		switch op := rng.IntN(10); {
		case op < 5:
			d.InstallBatch(fs, make([]uint32, len(fs)), errs)
		case op < 8:
			d.DeleteBatch(fs, errs)
		case op < 9:
			for _, f := range fs {
				_ = d.Modify(f)
			}
		default:
			if rng.IntN(4) == 0 {
				if err := d.Flush(); err != nil {
					t.Fatal(err)
				}
			} else if _, err := d.Delete(fs[0].Key, fs[0].Mask); err != nil && !errorsIsNoFlow(err) {
				t.Fatal(err)
			}
		}
		d.checkMaps(step)
		// A packet of an installed flow that no other flow overlaps goes
		// where that flow says.
		for _, f := range d.Flows() {
			if f.Mask != flow.ExactMask() {
				continue
			}
			overlapped := false
			for _, o := range d.Flows() {
				overlapped = overlapped || (o.Mask != f.Mask && f.Key.And(o.Mask) == o.Key)
			}
			if overlapped {
				continue
			}
			want := d.ifindex["dummy0"]
			if f.Actions[0].(flow.Output).Port == portOut2 {
				want = d.ifindex["dummy1"]
			}
			if got := d.outputOf(udpPkt(t, "10.0.0.1", "10.0.0.2", f.Key.TpSrc, f.Key.TpDst, "c")); got != want {
				t.Fatalf("step %d: packet of %s went to %d, want %d", step, f, got, want)
			}
			checked++
			break
		}
	}
	if checked < 200 {
		t.Fatalf("only %d steps had a packet to check", checked)
	}
}

func errorsIsNoFlow(err error) bool { return errors.Is(err, ErrNoFlow) }

// kernelEntry reads flow id's whole entry as the kernel has it: its head
// through the flows map (not this process's mapping of it, so a store at
// the wrong offset shows) and its tail, when the list is long.
func kernelEntry(d *Datapath, id uint32) ([]byte, error) {
	head := make([]byte, flowHeadSize)
	if err := d.objs.Flows.Lookup(id, &head); err != nil {
		return nil, err
	}
	var e flowEntryBytes
	copy(e[:], head)
	if err := d.addTail(id, &e); err != nil {
		return nil, err
	}
	return e[:], nil
}
