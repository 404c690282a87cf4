package steering

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
)

// ErrNotSupported wraps every failure caused by a missing kernel feature
// (XDP, cpumap).
var ErrNotSupported = errors.New("not supported by this kernel or machine")

// ErrNoEntry is returned by Delete when no entry has the match.
var ErrNoEntry = errors.New("steering: no such entry")

// Config of an Uplink. Zero fields take the defaults.
type Config struct {
	Threshold uint32 // percent; default DefaultThreshold
	FCF       FCF    // default DefaultFCF
	VXLANPort uint16 // default 4789
	QueueSize uint32 // cpumap queue per CPU; default 2048
	// CPUs is the number of CPUs the Core Table holds (0: every possible
	// CPU of the machine, at most MaxCPUs); each becomes a cpumap target.
	CPUs int
}

func (c *Config) defaults() {
	if c.Threshold == 0 {
		c.Threshold = DefaultThreshold
	}
	if c.FCF == (FCF{}) {
		c.FCF = DefaultFCF
	}
	if c.VXLANPort == 0 {
		c.VXLANPort = 4789
	}
	if c.QueueSize == 0 {
		c.QueueSize = 2048
	}
	if c.CPUs == 0 {
		c.CPUs = possibleCPUs()
	}
	if c.CPUs > MaxCPUs {
		c.CPUs = MaxCPUs
	}
}

// XDP attach modes, as Attach reports them.
const (
	ModeNative  = "native"
	ModeGeneric = "generic"
)

// Uplink is the VS-extend datapath of one switch: the XDP program, its
// Flow Table and Core Table, attached to one or more receiving devices.
type Uplink struct {
	mu      sync.Mutex
	cfg     Config
	objs    uplinkObjects
	links   map[string]attachment
	entries map[flowID]*installed
	masks   []*maskSlot // by mask id; nil = free
	freeIDs []uint32
	nextID  uint32
	cores   []Core // loads and pins as last written
	gen     uint32 // Flow Table generation (steer_settings.gen)
	nMasks  uint32
	emcOff  bool // benchmarks: every packet probes the masks
}

type attachment struct {
	l    link.Link
	mode string
}

type flowID struct {
	mask, key [keySize]byte
}

type installed struct {
	Entry
	id      uint32
	maskID  uint32
	strikes int // consecutive evaluations its CPU did not qualify
}

type maskSlot struct {
	mask [keySize]byte
	n    int // entries under it
}

// New loads the program and its maps and makes every CPU of the Core
// Table a cpumap target. Nothing is attached yet.
func New(cfg Config) (*Uplink, error) {
	cfg.defaults()
	if !cfg.FCF.Valid() {
		return nil, fmt.Errorf("steering: FCF layout %+v does not fit a ToS byte", cfg.FCF)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("steering: memlock: %w", err)
	}
	u := &Uplink{cfg: cfg, links: map[string]attachment{}, entries: map[flowID]*installed{},
		masks: make([]*maskSlot, MaxMasks)}
	if err := loadUplinkObjects(&u.objs, nil); err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) {
			return nil, fmt.Errorf("steering: loading the XDP program: %w (%w)", err, ErrNotSupported)
		}
		return nil, fmt.Errorf("steering: loading the XDP program: %w", err)
	}
	u.cores = make([]Core, cfg.CPUs)
	online := onlineCPUs()
	for i := range u.cores {
		u.cores[i].CPU = uint32(i)
		if !online[i] {
			continue
		}
		if err := u.objs.SteerCpumap.Put(uint32(i), uplinkBpfCpumapVal{Qsize: cfg.QueueSize}); err != nil {
			u.objs.Close()
			return nil, fmt.Errorf("steering: cpumap entry for CPU %d: %w (%w)", i, err, ErrNotSupported)
		}
		u.cores[i].Online = true
	}
	if err := u.writeCores(); err != nil {
		u.objs.Close()
		return nil, err
	}
	if err := u.writeSettings(0); err != nil {
		u.objs.Close()
		return nil, err
	}
	return u, nil
}

// Close detaches the program from every device and frees the maps.
func (u *Uplink) Close() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	for name, a := range u.links {
		a.l.Close()
		delete(u.links, name)
	}
	return u.objs.Close()
}

// Config returns the configuration in use (defaults filled in).
func (u *Uplink) Config() Config { return u.cfg }

// Attach puts the program on the device's XDP hook: native (driver) mode
// where the driver has it, generic otherwise. It returns the mode.
func (u *Uplink) Attach(ifname string) (string, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if a, ok := u.links[ifname]; ok {
		return a.mode, nil
	}
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return "", fmt.Errorf("steering: %w", err)
	}
	var errs []error
	for _, m := range []struct {
		flag link.XDPAttachFlags
		name string
	}{{link.XDPDriverMode, ModeNative}, {link.XDPGenericMode, ModeGeneric}} {
		l, err := link.AttachXDP(link.XDPOptions{Program: u.objs.NagareUplinkXdp, Interface: ifi.Index, Flags: m.flag})
		if err == nil {
			u.links[ifname] = attachment{l: l, mode: m.name}
			return m.name, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", m.name, err))
	}
	return "", fmt.Errorf("steering: XDP on %s: %w (%w)", ifname, errors.Join(errs...), ErrNotSupported)
}

// Detach takes the program off a device.
func (u *Uplink) Detach(ifname string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	a, ok := u.links[ifname]
	if !ok {
		return fmt.Errorf("steering: %s is not attached", ifname)
	}
	delete(u.links, ifname)
	return a.l.Close()
}

// Attached lists the devices and their XDP modes.
func (u *Uplink) Attached() map[string]string {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := map[string]string{}
	for n, a := range u.links {
		out[n] = a.mode
	}
	return out
}

// Mode is the XDP mode of the attachments: "native", "generic", a
// comma-separated mix, or "none".
func (u *Uplink) Mode() string {
	var modes []string
	for _, m := range u.Attached() {
		if !slices.Contains(modes, m) {
			modes = append(modes, m)
		}
	}
	if len(modes) == 0 {
		return "none"
	}
	sort.Strings(modes)
	return strings.Join(modes, ",")
}

// Program is the XDP program (tests run it with BPF_PROG_RUN).
func (u *Uplink) Program() *ebpf.Program { return u.objs.NagareUplinkXdp }

// EmptyProgram is an XDP program that only passes: the benchmarks' peer.
func (u *Uplink) EmptyProgram() *ebpf.Program { return u.objs.NagareXdpEmpty }

// writeSettings writes the settings with a new Flow Table generation:
// callers change the tables first, so no cached lookup outlives them.
func (u *Uplink) writeSettings(nMasks uint32) error {
	u.gen++
	u.nMasks = nMasks
	s := uplinkSteerSettings{
		Gen: u.gen, N_masks: nMasks, EmcOff: boolU32(u.emcOff), Threshold: u.cfg.Threshold, N_cpus: uint32(len(u.cores)),
		FcfIdShift: u.cfg.FCF.IDShift, FcfIdBits: u.cfg.FCF.IDBits, FcfPrioBit: u.cfg.FCF.PrioBit,
		VxlanPort: htons(u.cfg.VXLANPort),
	}
	if err := u.objs.SteerConfig.Put(uint32(0), s); err != nil {
		return fmt.Errorf("steering: settings: %w", err)
	}
	return nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func boolU32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// Add installs e, replacing an entry with the same match (its counters
// are kept, a chosen CPU is chosen again).
func (u *Uplink) Add(e Entry) error {
	if err := e.Validate(); err != nil {
		return err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	key, mask := e.Match.masked()
	fid := flowID{mask: mask, key: key}
	in := u.entries[fid]
	if in == nil {
		mid, err := u.maskFor(mask)
		if err != nil {
			return err
		}
		id, err := u.allocID()
		if err != nil {
			return err
		}
		if err := u.objs.SteerStats.Put(id, make([]uplinkSteerCounters, ebpf.MustPossibleCPU())); err != nil {
			return fmt.Errorf("steering: clearing counters: %w", err)
		}
		in = &installed{id: id, maskID: mid}
		u.masks[mid].n++
	}
	in.Entry = e
	if err := u.objs.SteerEntries.Put(in.id, in.value()); err != nil {
		return fmt.Errorf("steering: installing %s: %w", e, err)
	}
	if err := u.objs.SteerFlows.Put(u.flowKey(in.maskID, key), in.id); err != nil {
		if u.entries[fid] == nil {
			u.masks[in.maskID].n--
			u.freeIDs = append(u.freeIDs, in.id)
		}
		return fmt.Errorf("steering: installing %s: %w", e, err)
	}
	u.entries[fid] = in
	return u.writeMasks()
}

func (in *installed) value() uplinkSteerEntry {
	v := uplinkSteerEntry{Id: in.id, Priority: uint32(in.Priority), Cpu: in.CPU}
	if in.Action == ActionChoose {
		v.Action, v.Cpu = 1, cpuUnset
	}
	if in.PriorityFlow {
		v.Flags |= entryPrio
	}
	return v
}

const (
	cpuUnset       = ^uint32(0)
	entryPrio      = 1 << 0
	entryChosePrio = 1 << 1
	strikesToMove  = 2 // evaluations in a row a chosen CPU must fail before the flow moves
)

// flowKey is the Flow Table key of a masked key under mask mid: the mask
// id rides in the high nibble of flags (STEER_MASK_ID_SHIFT).
func (u *Uplink) flowKey(mid uint32, key [keySize]byte) uplinkSteerKey {
	k := toBPFKey(keyFromWire(key))
	k.Flags = k.Flags&0x0f | uint8(mid)<<4
	return k
}

// toBPFKey converts through the wire layout, which the layout test pins
// to the generated struct.
func toBPFKey(k Key) uplinkSteerKey {
	b := k.wire()
	var out uplinkSteerKey
	// The generated struct holds each field as the bytes in memory, read
	// little-endian: decoding the wire bytes that way reproduces them.
	if err := binary.Read(bytes.NewReader(b[:]), binary.LittleEndian, &out); err != nil {
		panic(err) // sizes are pinned by TestKeyLayout
	}
	return out
}

func (u *Uplink) maskFor(mask [keySize]byte) (uint32, error) {
	free := -1
	for i, m := range u.masks {
		if m != nil && m.mask == mask {
			return uint32(i), nil
		}
		if m == nil && free < 0 {
			free = i
		}
	}
	if free < 0 {
		return 0, fmt.Errorf("steering: all %d masks in use: entries must share field sets", MaxMasks)
	}
	u.masks[free] = &maskSlot{mask: mask}
	return uint32(free), nil
}

func (u *Uplink) allocID() (uint32, error) {
	if n := len(u.freeIDs); n > 0 {
		id := u.freeIDs[n-1]
		u.freeIDs = u.freeIDs[:n-1]
		return id, nil
	}
	if u.nextID >= MaxEntries {
		return 0, fmt.Errorf("steering: Flow Table full (%d entries)", MaxEntries)
	}
	u.nextID++
	return u.nextID - 1, nil
}

// writeMasks rewrites the probe order: masks in use, highest entry
// priority first. A packet that races the rewrite may see a mask twice or
// miss one: it then stays on its receiving CPU, never worse.
func (u *Uplink) writeMasks() error {
	type slot struct {
		id      uint32
		maxPrio uint32
	}
	var order []slot
	for id, m := range u.masks {
		if m == nil || m.n == 0 {
			continue
		}
		order = append(order, slot{id: uint32(id)})
	}
	for _, in := range u.entries {
		for i := range order {
			if order[i].id == in.maskID && uint32(in.Priority) >= order[i].maxPrio {
				order[i].maxPrio = uint32(in.Priority)
			}
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i].maxPrio > order[j].maxPrio })
	for i, s := range order {
		v := uplinkSteerMask{Mask: toBPFKey(keyFromWire(u.masks[s.id].mask)), MaxPrio: s.maxPrio, Id: s.id}
		if err := u.objs.SteerMasks.Put(uint32(i), v); err != nil {
			return fmt.Errorf("steering: mask slot %d: %w", i, err)
		}
	}
	return u.writeSettings(uint32(len(order)))
}

// Delete removes the entry whose match is m.
func (u *Uplink) Delete(m Match) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	key, mask := m.masked()
	fid := flowID{mask: mask, key: key}
	in := u.entries[fid]
	if in == nil {
		return fmt.Errorf("%w: %s", ErrNoEntry, m)
	}
	delete(u.entries, fid)
	u.masks[in.maskID].n--
	if err := u.writeMasks(); err != nil {
		return err
	}
	if u.masks[in.maskID].n == 0 {
		u.masks[in.maskID] = nil
	}
	if err := u.objs.SteerFlows.Delete(u.flowKey(in.maskID, key)); err != nil {
		return fmt.Errorf("steering: deleting %s: %w", m, err)
	}
	// A new generation before the id is reused: no cached lookup can lead
	// to the entry that takes it next.
	if err := u.writeSettings(u.nMasks); err != nil {
		return err
	}
	u.freeIDs = append(u.freeIDs, in.id)
	return nil
}

// EntryStatus is an installed entry with what the datapath made of it.
type EntryStatus struct {
	Entry
	ID      uint32
	CPU     uint32 // fixed or chosen CPU; ReceivingCPU; NotChosen before the first packet
	Changes uint32 // times the CPU was chosen or re-chosen
	Packets uint64
	Bytes   uint64
}

// NotChosen is EntryStatus.CPU of a choose entry no packet has hit yet.
const NotChosen = cpuUnset

// Entries lists the Flow Table, highest priority first.
func (u *Uplink) Entries() ([]EntryStatus, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []EntryStatus
	for _, in := range u.entries {
		var v uplinkSteerEntry
		if err := u.objs.SteerEntries.Lookup(in.id, &v); err != nil {
			return nil, fmt.Errorf("steering: reading %s: %w", in.Entry, err)
		}
		st := EntryStatus{Entry: in.Entry, ID: in.id, CPU: v.Cpu, Changes: v.Changes}
		c, err := u.sum(u.objs.SteerStats, in.id)
		if err != nil {
			return nil, err
		}
		st.Packets, st.Bytes = c.Packets, c.Bytes
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Priority != out[j].Priority {
			return out[i].Priority > out[j].Priority
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

func (u *Uplink) sum(m *ebpf.Map, idx uint32) (uplinkSteerCounters, error) {
	var per []uplinkSteerCounters
	var total uplinkSteerCounters
	if err := m.Lookup(idx, &per); err != nil {
		return total, fmt.Errorf("steering: counters %d: %w", idx, err)
	}
	for _, c := range per {
		total.Packets += c.Packets
		total.Bytes += c.Bytes
	}
	return total, nil
}

// CPUCounters is what the datapath sent to one CPU.
type CPUCounters struct {
	CPU     int // target CPU; -1 for packets that stayed where they were received
	Packets uint64
	Bytes   uint64
	// ByReceiver[r] is the packets received on CPU r that went to CPU.
	ByReceiver []uint64
}

// CPUCounters returns the per-target counters: one row per CPU of the
// Core Table, then the row of packets that stayed (-1).
func (u *Uplink) CPUCounters() ([]CPUCounters, error) {
	var out []CPUCounters
	for i := 0; i <= len(u.cores); i++ {
		idx := uint32(i)
		row := CPUCounters{CPU: i}
		if i == len(u.cores) {
			idx, row.CPU = MaxCPUs, -1
		}
		var per []uplinkSteerCounters
		if err := u.objs.SteerCpus.Lookup(idx, &per); err != nil {
			return nil, fmt.Errorf("steering: cpu counters: %w", err)
		}
		for _, c := range per {
			row.Packets += c.Packets
			row.Bytes += c.Bytes
			row.ByReceiver = append(row.ByReceiver, c.Packets)
		}
		out = append(out, row)
	}
	return out, nil
}

// EventNames names the datapath's events (enum steer_event), by index;
// "" is a slot not counted (hits and redirects are in the entries' and
// the CPUs' counters: the hit path updates no more counters than it must).
var EventNames = []string{"", "miss", "unparsed", "chose", "chose-receiving-cpu", "fragment-followed",
	"", "local", "target-down"}

// Events returns the event counters, summed over CPUs, by name.
func (u *Uplink) Events() (map[string]uint64, error) {
	out := map[string]uint64{}
	for i, name := range EventNames {
		if name == "" {
			continue
		}
		var per []uint64
		if err := u.objs.SteerEvents.Lookup(uint32(i), &per); err != nil {
			return nil, fmt.Errorf("steering: events: %w", err)
		}
		var n uint64
		for _, v := range per {
			n += v
		}
		out[name] = n
	}
	return out, nil
}

// SetPin records that workload id (0: none) is pinned to cpu.
func (u *Uplink) SetPin(cpu uint32, id uint32) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if int(cpu) >= len(u.cores) {
		return fmt.Errorf("steering: cpu %d out of range (0..%d)", cpu, len(u.cores)-1)
	}
	u.cores[cpu].Pinned = id
	return u.evaluate()
}

// SetLoads records CPU loads (percent, index = CPU) and re-evaluates the
// choices (see Evaluate).
func (u *Uplink) SetLoads(loads []uint32) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	for i := range u.cores {
		if i < len(loads) {
			u.cores[i].Load = loads[i]
		}
	}
	return u.evaluate()
}

// Cores returns the Core Table as the datapath sees it.
func (u *Uplink) Cores() ([]Core, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([]Core, len(u.cores))
	for i := range u.cores {
		var c uplinkSteerCore
		if err := u.objs.SteerCores.Lookup(uint32(i), &c); err != nil {
			return nil, fmt.Errorf("steering: core %d: %w", i, err)
		}
		out[i] = Core{CPU: uint32(i), Load: c.Load, Pinned: c.Pinned, Flows: c.Flows, PrioFlows: c.PrioFlows, Online: c.Online != 0}
	}
	return out, nil
}

// evaluate re-checks every chosen entry against the Core Table: a choice
// whose CPU stops qualifying (pinned, offline, or at the threshold) for
// strikesToMove evaluations in a row is chosen again (moving a flow can
// reorder the packets in flight on the old CPU's queue, so one bad sample
// does not move it); an entry that stayed on the receiving CPU for want
// of a candidate takes one as soon as one exists. Flow counts are then
// recomputed from the entries and the Core Table rewritten.
func (u *Uplink) evaluate() error {
	u.recount()
	fids := make([]flowID, 0, len(u.entries))
	for fid := range u.entries {
		fids = append(fids, fid)
	}
	// Priority flows choose first, then by entry priority.
	sort.Slice(fids, func(i, j int) bool {
		a, b := u.entries[fids[i]], u.entries[fids[j]]
		if a.PriorityFlow != b.PriorityFlow {
			return a.PriorityFlow
		}
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		return a.id < b.id
	})
	for _, fid := range fids {
		in := u.entries[fid]
		if in.Action != ActionChoose {
			continue
		}
		var v uplinkSteerEntry
		if err := u.objs.SteerEntries.Lookup(in.id, &v); err != nil {
			continue
		}
		if v.Cpu == cpuUnset {
			continue
		}
		prio := v.Flags&(entryPrio|entryChosePrio) != 0
		if v.Cpu != ReceivingCPU && qualifies(u.cores, v.Cpu, u.cfg.Threshold, prio) {
			in.strikes = 0
			continue
		}
		in.strikes++
		if v.Cpu != ReceivingCPU && in.strikes < strikesToMove {
			continue
		}
		// Choose as if this flow were not counted where it is now.
		if v.Cpu < uint32(len(u.cores)) {
			dec(&u.cores[v.Cpu].Flows)
			if prio {
				dec(&u.cores[v.Cpu].PrioFlows)
			}
		}
		cpu := Choose(u.cores, u.cfg.Threshold, prio)
		if cpu < uint32(len(u.cores)) {
			u.cores[cpu].Flows++
			if prio {
				u.cores[cpu].PrioFlows++
			}
		}
		if cpu == v.Cpu {
			continue
		}
		v.Cpu = cpu
		v.Changes++
		in.strikes = 0
		if err := u.objs.SteerEntries.Update(in.id, v, ebpf.UpdateExist); err != nil {
			return fmt.Errorf("steering: re-choosing %s: %w", in.Entry, err)
		}
	}
	return u.writeCores()
}

func dec(p *uint32) {
	if *p > 0 {
		*p--
	}
}

// recount sets every CPU's flow counts from the entries' current choices.
func (u *Uplink) recount() {
	for i := range u.cores {
		u.cores[i].Flows, u.cores[i].PrioFlows = 0, 0
	}
	for _, in := range u.entries {
		if in.Action != ActionChoose {
			continue
		}
		var v uplinkSteerEntry
		if err := u.objs.SteerEntries.Lookup(in.id, &v); err != nil {
			continue
		}
		if v.Cpu < uint32(len(u.cores)) {
			u.cores[v.Cpu].Flows++
			if v.Flags&(entryPrio|entryChosePrio) != 0 {
				u.cores[v.Cpu].PrioFlows++
			}
		}
	}
}

func (u *Uplink) writeCores() error {
	for i, c := range u.cores {
		v := uplinkSteerCore{Load: c.Load, Pinned: c.Pinned, Flows: c.Flows, PrioFlows: c.PrioFlows}
		if c.Online {
			v.Online = 1
		}
		if err := u.objs.SteerCores.Put(uint32(i), v); err != nil {
			return fmt.Errorf("steering: core %d: %w", i, err)
		}
	}
	return nil
}

// Sample reads /proc/stat every period and feeds the loads to SetLoads,
// until ctx ends. The first reading comes one period after the start.
func (u *Uplink) Sample(ctx context.Context, period time.Duration, procStat string) error {
	if procStat == "" {
		procStat = "/proc/stat"
	}
	prev, err := ReadProcStat(procStat)
	if err != nil {
		return err
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cur, err := ReadProcStat(procStat)
		if err != nil {
			return err
		}
		if err := u.SetLoads(Loads(prev, cur)); err != nil {
			return err
		}
		prev = cur
	}
}

// RPSState reports whether RPS is on for a device: "on" when any receive
// queue has a non-empty rps_cpus mask, "off", or "unknown".
func RPSState(ifname string) string {
	qs, _ := filepath.Glob(filepath.Join("/sys/class/net", ifname, "queues", "rx-*", "rps_cpus"))
	if len(qs) == 0 {
		return "unknown"
	}
	for _, q := range qs {
		b, err := os.ReadFile(q)
		if err != nil {
			return "unknown"
		}
		if len(bytes.Trim(bytes.TrimSpace(b), "0,")) > 0 {
			return "on"
		}
	}
	return "off"
}

// possibleCPUs is the number of CPUs the kernel may bring up.
func possibleCPUs() int {
	n, err := ebpf.PossibleCPU()
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// onlineCPUs reads /sys/devices/system/cpu/online ("0-1,4").
func onlineCPUs() map[int]bool {
	out := map[int]bool{}
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		out[0] = true
		return out
	}
	for _, r := range strings.Split(strings.TrimSpace(string(b)), ",") {
		var lo, hi int
		if n, _ := fmt.Sscanf(r, "%d-%d", &lo, &hi); n == 2 {
			for i := lo; i <= hi; i++ {
				out[i] = true
			}
		} else if n, _ := fmt.Sscanf(r, "%d", &lo); n == 1 {
			out[lo] = true
		}
	}
	return out
}
