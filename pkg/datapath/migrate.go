package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Migration: a switch started on an instance whose pins another build
// made — other limits (MaxFlows, ConntrackMax: other map sizes) or another
// layout (dp_config.layout, ct_settings.layout) — takes the instance over
// without stopping its traffic, as a same-build restart does:
//
//  1. This build's maps and programs are loaded and pinned beside the old
//     instance, in DIR-new; the old programs stay attached and keep
//     forwarding on the old maps.
//  2. What a packet of an established connection needs is copied, old →
//     new: the ports, the conntrack table with its NAT state and the
//     per-port connection counts, meters, counters, and — when the
//     fast-path layout is the same — the megaflow cache (masks, flows,
//     statistics, output sets), so flows keep hitting until the
//     controller has programmed the new process. A map whose layout
//     changed goes through its converter (converters); the megaflow
//     cache has none: it is dropped and refilled by upcalls.
//  3. DIR becomes DIR-old, DIR-new becomes DIR, the pinned tcx links
//     move to DIR/links; restore then swaps each port's program for the
//     new one (tcx link update, or tc filter replace: atomic per port),
//     and Open removes DIR-old.
//
// Connections committed by the old programs during the copy (step 2: a
// few hundred milliseconds) are not in the new table; their next packet
// is tracked as new. A migration refused or interrupted (the process
// killed) is rolled back to the old instance (rollBack), which the next
// Open migrates again.
//
// Downgrades: pins whose layout is newer than this build's are refused,
// naming both layouts; only the build that made them knows their fields.

// The layout stamps sit at offsets that no release may move: dp_config's
// layout is its fourth word, ct_config's its last. A build that changes
// a map below bumps the stamp that covers it.
const (
	dpLayoutOffset = 12 // offsetof(struct dp_config, layout)
)

// dpLayout and ctLayoutVersion are the layouts this build writes; tests
// raise them to make an older build's pins honestly.
var (
	dpLayout        uint32 = fastPathLayout
	ctLayoutVersion uint32 = ctLayout
)

// migration is what Open learns when it had to move an instance.
type migration struct {
	oldDir             string
	fromDP, fromCT     uint32
	copied, dropped    map[string]int // entries, by map
	skippedFlowCache   bool           // the megaflow cache was not carried over
	ctLost, flowsLost  int            // entries that did not fit the new limits
	interruptedResumed bool
	took               time.Duration // from the start to the directories' trade
	load               time.Duration // of which loading this build's maps and programs
	slowest            string        // the map whose copy took longest, and how long
	slowestTook        time.Duration
}

// Migration describes the migration the last Open did, "" if none.
func (d *Datapath) Migration() string {
	m := d.migrated
	if m == nil {
		return ""
	}
	s := fmt.Sprintf("migrated %s from layout %d/%d (fast path/conntrack) to %d/%d: %d connections, %d ports, %d megaflows carried over in %v (loading %v, copying %v, slowest %s %v)",
		d.dir, m.fromDP, m.fromCT, dpLayout, ctLayoutVersion, m.copied["conntrack"]/2, m.copied["ports"]+m.copied["ports_big"], m.copied["megaflows"], m.took.Round(time.Millisecond),
		m.load.Round(time.Millisecond), (m.took - m.load).Round(time.Millisecond), m.slowest, m.slowestTook.Round(time.Millisecond))
	if m.skippedFlowCache {
		s += "; megaflow cache dropped (its layout changed), upcalls refill it"
	}
	if m.ctLost > 0 || m.flowsLost > 0 {
		s += fmt.Sprintf("; %d conntrack entries and %d megaflows did not fit the new limits", m.ctLost, m.flowsLost)
	}
	if m.interruptedResumed {
		s += "; an interrupted migration was resumed"
	}
	return s
}

// flowCacheMaps are the megaflow cache: carried over only within one
// fast-path layout (their keys and actions are the flow-key layout).
var flowCacheMaps = map[string]bool{"megaflows": true, "flows": true, "flow_tails": true, "stats": true, "flow_gens": true,
	"masks": true, "mask_filter": true, "output_sets": true, "config": true}

// ctMaps are covered by ct_settings.layout.
var ctMaps = map[string]bool{"conntrack": true, "ct_ports": true, "ct_released": true}

// requiredMaps must survive a migration: without them an established
// connection stops (its port, its translation).
var requiredMaps = map[string]bool{"ports": true, "ports_big": true, "conntrack": true, "ct_ports": true}

// notMigrated hold nothing between packets, belong to one process, or are
// rewritten by restore: ring buffers, scratch space, program arrays, the
// onload and mask-cache sequence numbers, the controller-action limits.
var notMigrated = map[string]bool{"exec_actions": true, "passes": true, "mf_scratch": true, "ct_scratch": true,
	"upcall_wake": true, "onload_seqs": true, "mask_seqs": true, "action_meters": true, "recirc_progs": true,
	"ct_settings": true, "upcalls": true, "onload": true, "tunnel_saved": true, "ct_epoch": true}

// ownedByProcess are map types whose entries are kernel objects a process
// made (sockets, programs, CPU and device queues) or a ring: the new
// process fills them itself.
var ownedByProcess = map[ebpf.MapType]bool{ebpf.XSKMap: true, ebpf.DevMap: true, ebpf.DevMapHash: true,
	ebpf.CPUMap: true, ebpf.ProgramArray: true, ebpf.RingBuf: true, ebpf.SockMap: true, ebpf.SockHash: true}

// converter turns one entry of a map in an older layout into this
// build's; ok false drops it.
type converter func(key, value []byte) (newKey, newValue []byte, ok bool)

// converters by map name and the layout they convert from. Empty while
// layout 1 is the only layout: the next build that changes a required
// map adds its converter here (and a test that makes the old pins).
var converters = map[string]map[uint32]converter{}

// readStamp reads a layout stamp from a pinned one-entry config map.
// ok false: no such pin (a new instance).
func readStamp(path string, last bool) (uint32, bool, error) {
	m, err := ebpf.LoadPinnedMap(path, nil)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer m.Close()
	v := make([]byte, m.ValueSize())
	if err := m.Lookup(uint32(0), v); err != nil {
		return 0, false, err
	}
	off := dpLayoutOffset
	if last {
		off = len(v) - 4
	}
	if off+4 > len(v) {
		return 0, false, fmt.Errorf("%s: value of %d bytes has no layout stamp", path, len(v))
	}
	return binary.NativeEndian.Uint32(v[off:]), true, nil
}

// pinnedLayouts are the stamps of the instance in dir (0: not written).
func pinnedLayouts(dir string) (dp, ct uint32, exists bool, err error) {
	dp, exists, err = readStamp(filepath.Join(dir, "config"), false)
	if err != nil || !exists {
		return 0, 0, exists, err
	}
	ct, _, err = readStamp(filepath.Join(dir, "ct_settings"), true)
	return dp, ct, true, err
}

// checkLayouts says whether the pins in d.dir need a migration, and
// refuses pins from a newer build.
func (d *Datapath) checkLayouts() (migrate bool, err error) {
	dp, ct, exists, err := pinnedLayouts(d.dir)
	if err != nil || !exists {
		return false, err
	}
	if dp > dpLayout || ct > ctLayoutVersion {
		return false, fmt.Errorf("datapath: the maps pinned in %s were made by a newer build (fast-path layout %d, conntrack layout %d); this build writes layouts %d and %d and cannot read them: run the newer build, or remove the instance (--destroy, which stops its traffic)",
			d.dir, dp, ct, dpLayout, ctLayoutVersion)
	}
	return (dp != 0 && dp != dpLayout) || (ct != 0 && ct != ctLayoutVersion), nil
}

// migrate moves the instance in d.dir aside, loads spec into a new one in
// d.dir and copies the old maps' entries over (see the comment at the top).
func (d *Datapath) migrate(spec *ebpf.CollectionSpec, opts *ebpf.CollectionOptions) (err error) {
	m := &migration{oldDir: d.oldDir(), copied: map[string]int{}, dropped: map[string]int{}}
	start := time.Now()
	if m.interruptedResumed, err = d.rollBack(); err != nil {
		return err
	}
	defer func() {
		if err == nil {
			return
		}
		// Refused or failed: the old instance stays, or goes back, as it
		// was (its programs never stopped forwarding).
		d.objs.Close()
		d.objs = nagareObjects{}
		_, rerr := d.rollBack()
		err = errors.Join(err, rerr)
	}()
	dp, ct, _, err := pinnedLayouts(d.dir)
	if err != nil {
		return err
	}
	if dp > dpLayout || ct > ctLayoutVersion {
		return fmt.Errorf("datapath: the maps pinned in %s were made by a newer build (fast-path layout %d, conntrack layout %d); this build writes layouts %d and %d", d.dir, dp, ct, dpLayout, ctLayoutVersion)
	}
	m.fromDP, m.fromCT = dp, ct

	// This build's maps and programs, pinned beside the old instance
	// (loading is most of the time a migration takes; the old programs
	// forward on their maps meanwhile).
	newDir := d.newDir()
	if err := os.MkdirAll(filepath.Join(newDir, "links"), 0o700); err != nil {
		return err
	}
	newOpts := *opts
	newOpts.Maps.PinPath = newDir
	if err := spec.LoadAndAssign(&d.objs, &newOpts); err != nil {
		return fmt.Errorf("datapath: loading the fast path beside %s: %w", d.dir, err)
	}
	m.load = time.Since(start)

	// The copy: from here until the swap, what the old programs commit
	// is not carried over.
	newMaps := mapsByName(&d.objs.nagareMaps)
	for name, ms := range spec.Maps {
		if ms.Pinning != ebpf.PinByName || notMigrated[name] || ownedByProcess[ms.Type] {
			continue
		}
		from, err := ebpf.LoadPinnedMap(filepath.Join(d.dir, ms.Name), nil)
		if errors.Is(err, fs.ErrNotExist) {
			continue // a map the old build did not have
		}
		if err != nil {
			return err
		}
		to := newMaps[name]
		t0 := time.Now()
		err = m.copyMap(name, from, to, uint32(d.cfg.MaxFlows))
		if el := time.Since(t0); el > m.slowestTook {
			m.slowest, m.slowestTook = name, el
		}
		from.Close()
		if err != nil {
			return fmt.Errorf("datapath: migrating %s from %s (layouts %d/%d → %d/%d): %w", name, d.dir, dp, ct, dpLayout, ctLayoutVersion, err)
		}
	}
	if m.skippedFlowCache || m.copied["config"] == 0 {
		// A new config (restore applies this process's settings), stamped:
		// restore then takes the ports over rather than starting empty.
		c := nagareDpConfig{Emc: d.cfg.EMCInsertInvProb, Upcalls: 1, Layout: dpLayout, MaskCache: 1}
		if err := d.objs.Config.Put(uint32(0), c); err != nil {
			return err
		}
	}

	// The directories trade places and the port attachments follow;
	// restore (Open) then swaps each port's program.
	if err := os.Rename(d.dir, m.oldDir); err != nil {
		return fmt.Errorf("datapath: moving the old instance aside: %w", err)
	}
	if err := os.Rename(newDir, d.dir); err != nil {
		return fmt.Errorf("datapath: moving the new instance in: %w", err)
	}
	if err := moveLinks(m.oldDir, d.dir); err != nil {
		return err
	}
	m.took = time.Since(start)
	d.migrated = m
	return nil
}

// rollBack returns what an interrupted or failed migration left to one
// instance in d.dir, the old one: its attachments moved back, the new
// one removed. It reports whether there was anything to undo.
func (d *Datapath) rollBack() (bool, error) {
	_, errOld := os.Stat(d.oldDir())
	_, errNew := os.Stat(d.newDir())
	if errOld != nil && errNew != nil {
		return false, nil
	}
	if errOld == nil {
		// d.dir, if there, is the new instance.
		if _, err := os.Stat(d.dir); err == nil {
			if err := moveLinks(d.dir, d.oldDir()); err != nil {
				return true, err
			}
			if err := os.RemoveAll(d.dir); err != nil {
				return true, err
			}
		}
		if err := os.Rename(d.oldDir(), d.dir); err != nil {
			return true, err
		}
	}
	return true, os.RemoveAll(d.newDir())
}

// moveLinks renames the pinned port attachments from one instance
// directory's links/ to another's.
func moveLinks(from, to string) error {
	ents, err := os.ReadDir(filepath.Join(from, "links"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(to, "links"), 0o700); err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.Rename(filepath.Join(from, "links", e.Name()), filepath.Join(to, "links", e.Name())); err != nil {
			return fmt.Errorf("datapath: moving the port attachment %s: %w", e.Name(), err)
		}
	}
	return nil
}

// copyMap copies the entries of from into to, converting them when the
// layout that covers the map changed.
func (m *migration) copyMap(name string, from, to *ebpf.Map, flowIDs uint32) error {
	if to == nil {
		return nil
	}
	sameShape := from.Type() == to.Type() && from.KeySize() == to.KeySize() && from.ValueSize() == to.ValueSize()
	perCPU := from.Type() == ebpf.PerCPUArray || from.Type() == ebpf.PerCPUHash || from.Type() == ebpf.LRUCPUHash
	// Whether the entries' meaning changed: the stamp that covers the map
	// says so; a map no stamp covers changed if its shape did.
	var changed bool
	fromLayout := m.fromDP
	switch {
	case ctMaps[name]:
		changed, fromLayout = m.fromCT != ctLayoutVersion, m.fromCT
	case flowCacheMaps[name]:
		if m.fromDP != dpLayout || !sameShape {
			// Not converted: upcalls refill the cache from the OpenFlow
			// tables the controller programs again.
			m.skippedFlowCache = true
			return nil
		}
	default:
		changed = !sameShape
	}
	var conv converter
	if changed {
		conv = converters[name][fromLayout]
		switch {
		case conv != nil && perCPU:
			return errors.New("converters of per-CPU maps are not written yet")
		case conv != nil:
		case requiredMaps[name]:
			return fmt.Errorf("no converter from layout %d (%v, key %d, value %d bytes) to this build's (%v, key %d, value %d bytes)",
				fromLayout, from.Type(), from.KeySize(), from.ValueSize(), to.Type(), to.KeySize(), to.ValueSize())
		default:
			m.dropped[name]++ // counters, meters, steering state: started anew
			return nil
		}
	} else if !sameShape {
		return fmt.Errorf("%v, key %d, value %d bytes → %v, key %d, value %d bytes within conntrack layout %d: the layout stamp should have changed",
			from.Type(), from.KeySize(), from.ValueSize(), to.Type(), to.KeySize(), to.ValueSize(), fromLayout)
	}
	isArray := from.Type() == ebpf.Array || from.Type() == ebpf.PerCPUArray
	maxEntries := to.MaxEntries()
	if idKeyed[name] {
		maxEntries = flowIDs
	}
	if isArray && conv == nil {
		return m.copyArray(name, from, to, perCPU, maxEntries)
	}
	key := make([]byte, from.KeySize())
	var value any
	var raw func() []byte // the value's bytes (not per-CPU)
	if perCPU {
		ncpu, err := ebpf.PossibleCPU()
		if err != nil {
			return err
		}
		t := reflect.SliceOf(reflect.ArrayOf(int(from.ValueSize()), reflect.TypeOf(byte(0))))
		value = reflect.MakeSlice(t, ncpu, ncpu).Interface()
	} else {
		v := make([]byte, from.ValueSize())
		value, raw = v, func() []byte { return v }
	}
	it := from.Iterate()
	for it.Next(key, value) {
		if idKeyed[name] && binary.NativeEndian.Uint32(key) >= maxEntries {
			m.lost(name)
			continue
		}
		if name == "megaflows" && binary.NativeEndian.Uint32(raw()) >= flowIDs {
			m.lost(name) // its flow id is beyond the new MaxFlows
			continue
		}
		k, v := key, value
		if conv != nil {
			var ok bool
			var nv []byte
			k, nv, ok = conv(key, raw())
			if !ok {
				m.dropped[name]++
				continue
			}
			v = nv
		}
		if err := to.Update(k, v, ebpf.UpdateAny); err != nil {
			if errors.Is(err, unix.E2BIG) { // the new table is full
				m.lost(name)
				continue
			}
			return err
		}
		m.copied[name]++
	}
	return it.Err()
}

// copyArray copies an array's non-zero slots below limit, reading it in
// batches: the mask filter alone has half a million slots, and one
// lookup each took seconds.
func (m *migration) copyArray(name string, from, to *ebpf.Map, perCPU bool, limit uint32) error {
	const chunk = 4096
	ncpu := 1
	if perCPU {
		n, err := ebpf.PossibleCPU()
		if err != nil {
			return err
		}
		ncpu = n
	}
	elem := reflect.ArrayOf(int(from.ValueSize()), reflect.TypeOf(byte(0)))
	keys := make([]uint32, chunk)
	vals := reflect.MakeSlice(reflect.SliceOf(elem), chunk*ncpu, chunk*ncpu)
	// The same memory as bytes: testing half a million slots for zero
	// through reflect took most of a copy's time.
	vs := int(from.ValueSize()) * ncpu
	flat := unsafe.Slice((*byte)(vals.UnsafePointer()), chunk*vs)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := from.BatchLookup(&cursor, keys, vals.Interface(), nil)
		for i := 0; i < n; i++ {
			if !slices.ContainsFunc(flat[i*vs:(i+1)*vs], func(b byte) bool { return b != 0 }) {
				continue
			}
			v := vals.Slice(i*ncpu, (i+1)*ncpu)
			if keys[i] >= limit {
				m.lost(name)
				continue
			}
			var value any = v.Interface()
			if !perCPU {
				value = v.Index(0).Interface()
			}
			if err := to.Update(keys[i], value, ebpf.UpdateAny); err != nil {
				return err
			}
			m.copied[name]++
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (m *migration) lost(name string) {
	switch name {
	case "conntrack":
		m.ctLost++
	case "megaflows":
		m.flowsLost++
	}
	m.dropped[name]++
}

// idKeyed maps are keyed by flow id: ids at or beyond the new MaxFlows
// are not carried over (nor the megaflows that name them).
var idKeyed = map[string]bool{"flows": true, "flow_tails": true}

// mapsByName indexes bpf2go's maps struct by the maps' ELF names.
func mapsByName(objs *nagareMaps) map[string]*ebpf.Map {
	out := map[string]*ebpf.Map{}
	v := reflect.ValueOf(objs).Elem()
	for i := 0; i < v.NumField(); i++ {
		if mp, ok := v.Field(i).Interface().(*ebpf.Map); ok {
			out[v.Type().Field(i).Tag.Get("ebpf")] = mp
		}
	}
	return out
}

// oldDir is where a migration moves the old instance, and newDir where
// it makes the new one: beside it, with suffixes without a dot (the BPF
// filesystem refuses dots in names).
func (d *Datapath) oldDir() string { return d.dir + "-old" }
func (d *Datapath) newDir() string { return d.dir + "-new" }

// OverrideLayouts makes this process write, and expect, other layout
// stamps until restore is called: tests in other packages (pkg/switchd)
// use it to play the next release against pins this one made.
func OverrideLayouts(dp, ct uint32) (restore func()) {
	oldDP, oldCT := dpLayout, ctLayoutVersion
	dpLayout, ctLayoutVersion = dp, ct
	return func() { dpLayout, ctLayoutVersion = oldDP, oldCT }
}

// Layouts are the layout stamps this build writes: the fast path's
// (dp_config.layout: the flow key and megaflow cache) and conntrack's.
func Layouts() (dp, ct uint32) { return dpLayout, ctLayoutVersion }
