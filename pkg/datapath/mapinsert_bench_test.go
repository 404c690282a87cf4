package datapath

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// BenchmarkMapInsert is what an install costs in the kernel, per element,
// for the maps every new flow goes into: megaflows (megaflow key → flow
// id) as shipped (a hash map without preallocation: the kernel allocates
// each element as it is inserted) or preallocated, and flows (flow id →
// entry) as layout 1 had it (such a hash map), preallocated, as an array
// written with BPF_MAP_UPDATE_BATCH, and as shipped since layout 2 (an
// array of heads, stores into its mapping: flows-heads-mmapped; a list
// longer than a head adds an insert into flow_tails, a hash map like the
// first cell's). Batches of 64 (BPF_MAP_UPDATE_BATCH), as the upcall handler
// writes them; each cell gets fresh keys, deleted untimed after each
// round, and the cells' batches are interleaved round after round so a
// change in the machine's load falls on each alike. Besides ns/op (the
// median batch's time per element) and min-ns/op it reports what the map
// holds in memory with DefaultMaxFlows entries (the kernel's memlock in
// fdinfo: empty-MB right after creation, B/elem more per element
// inserted): the price of preallocation.
//
//	go test -run '^$' -bench MapInsert -benchtime 64000x ./pkg/datapath/
func BenchmarkMapInsert(b *testing.B) {
	const batch = 64
	type cell struct {
		name    string
		m       *ebpf.Map
		put     func(m *ebpf.Map, base uint32) error
		del     func(m *ebpf.Map, base uint32)
		emptyMB float64
		perElem float64
		durs    []time.Duration
	}
	// The keys of a batch, written into the same slices each time: the
	// timed loop allocates nothing.
	fk, mk := make([]uint32, batch), make([]megaflowID, batch)
	flowKeys := func(base uint32) []uint32 {
		for i := range fk {
			fk[i] = base + uint32(i)
		}
		return fk
	}
	mfKeys := func(base uint32) []megaflowID {
		for i := range mk {
			id := base + uint32(i)
			mk[i][8], mk[i][9], mk[i][10], mk[i][11] = byte(id), byte(id>>8), byte(id>>16), byte(id>>24)
		}
		return mk
	}
	entries := make([]flowEntryBytes, batch)
	ids := make([]uint32, batch)
	putFlows := func(m *ebpf.Map, base uint32) error {
		_, err := m.BatchUpdate(flowKeys(base), entries, nil)
		return err
	}
	delFlows := func(m *ebpf.Map, base uint32) { _, _ = m.BatchDelete(flowKeys(base), nil) }
	putMF := func(m *ebpf.Map, base uint32) error {
		_, err := m.BatchUpdate(mfKeys(base), ids, nil)
		return err
	}
	delMF := func(m *ebpf.Map, base uint32) { _, _ = m.BatchDelete(mfKeys(base), nil) }
	var cells []*cell
	add := func(name string, spec ebpf.MapSpec, put func(*ebpf.Map, uint32) error, del func(*ebpf.Map, uint32)) {
		spec.Name, spec.MaxEntries = "", DefaultMaxFlows
		m, err := ebpf.NewMap(&spec)
		if err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		b.Cleanup(func() { m.Close() })
		cells = append(cells, &cell{name: name, m: m, put: put, del: del, emptyMB: float64(memlock(b, m)) / (1 << 20)})
	}
	entrySize, mfSize := uint32(flowEntrySize), uint32(len(megaflowID{}))
	add("flows-hash-noprealloc", ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: entrySize, Flags: unix.BPF_F_NO_PREALLOC}, putFlows, delFlows) // layout 1
	add("flows-hash-prealloc", ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: entrySize}, putFlows, delFlows)
	add("flows-array", ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: entrySize}, putFlows, func(*ebpf.Map, uint32) {})
	// Shipped since layout 2: heads copied into the mapped array (a
	// flow whose list needs a tail also goes into a hash map like the
	// first cell's).
	var heads []flowHead
	putHeads := func(m *ebpf.Map, base uint32) error {
		if heads == nil {
			mem, err := mmapArray(m, "flows", DefaultMaxFlows*flowHeadSize)
			if err != nil {
				return err
			}
			b.Cleanup(func() { munmapArray(&mem) })
			heads = unsafe.Slice((*flowHead)(unsafe.Pointer(&mem[0])), DefaultMaxFlows)
		}
		for i := range entries {
			copy(heads[base+uint32(i)][:], entries[i][:flowHeadSize])
		}
		return nil
	}
	add("flows-heads-mmapped", ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: flowHeadSize, Flags: unix.BPF_F_MMAPABLE}, putHeads, func(*ebpf.Map, uint32) {})
	add("megaflows-hash-noprealloc", ebpf.MapSpec{Type: ebpf.Hash, KeySize: mfSize, ValueSize: 4, Flags: unix.BPF_F_NO_PREALLOC}, putMF, delMF) // shipped
	add("megaflows-hash-prealloc", ebpf.MapSpec{Type: ebpf.Hash, KeySize: mfSize, ValueSize: 4}, putMF, delMF)

	per := max(batch, b.N/benchBatches/batch*batch) // elements per cell per round
	round := func(timed bool) {
		for _, c := range cells {
			before := memlock(b, c.m)
			start := time.Now()
			for off := 0; off < per; off += batch {
				if err := c.put(c.m, uint32(off)); err != nil {
					b.Fatalf("%s: %v", c.name, err)
				}
			}
			d := time.Since(start)
			if timed {
				c.durs = append(c.durs, d/time.Duration(per))
				c.perElem = float64(memlock(b, c.m)-before) / float64(per)
			}
			for off := 0; off < per; off += batch {
				c.del(c.m, uint32(off))
			}
		}
	}
	round(false) // warm-up: the kernel's element caches, the first faults
	for range benchBatches {
		round(true)
	}
	for _, c := range cells {
		b.Run(c.name, func(b *testing.B) {
			reportBatches(b, c.durs)
			b.ReportMetric(c.emptyMB, "empty-MB")
			b.ReportMetric(c.perElem, "B/elem")
		})
	}
}

// memlock is the memory the kernel says m holds (fdinfo's memlock).
func memlock(tb testing.TB, m *ebpf.Map) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "memlock:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatal("no memlock in fdinfo")
	return 0
}
