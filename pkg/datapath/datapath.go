// Package datapath loads, pins and programs nagare's kernel fast path: the
// eBPF flow cache in bpf/ that every switch port runs at tcx ingress.
//
// A Datapath is one switch instance. Its maps and its port attachments are
// pinned under PinRoot/Name on a BPF filesystem, so the process that owns
// it can exit and a new one can Open the same instance again while packets
// keep flowing through the flows already installed. Flows are described
// with package flow (plain Go values); Put, Modify and Delete install them.
package datapath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/nagare-net/nagare/pkg/flow"
)

// Limits shared with bpf/lib/maps.h.
const (
	MaxMasks        = 64       // masks searched by the megaflow lookup
	MaxActions      = 16       // actions per flow
	filterBits      = 13       // log2 of the filter slots per mask
	execSlots       = 64       // concurrent Execute calls
	upcallSnap      = 3072     // packet bytes carried by an upcall
	upcallRingBytes = 16 << 20 // the upcall ring (bpf/lib/maps.h UPCALL_RING_BYTES)
	upcallMin       = 64       // packets up to this size go in the least ring record
	upcallTiny      = 128      // packets up to this size go in a tiny ring record
	upcallSmall     = 256      // packets up to this size go in a small ring record
	portArray       = 65536    // ifindexes below this use the ports array
	// fastPathLayout is the dp_config.layout this code writes. 1: flows a
	// hash map of whole entries; 2: flows an array of heads, flow_tails.
	fastPathLayout  = 2
	DefaultMaxFlows = 262144
)

// DefaultPinRoot is where instances are pinned unless Config says otherwise.
const DefaultPinRoot = "/sys/fs/bpf/nagare"

// Errors callers can test for.
var (
	// ErrNotSupported wraps every failure caused by a missing kernel feature
	// (no BPF filesystem, no tcx, no BPF_PROG_RUN), so callers and tests can
	// tell "can't here" from "broken".
	ErrNotSupported = errors.New("not supported by this kernel or machine")
	ErrMaskLimit    = fmt.Errorf("megaflow mask limit reached (%d masks)", MaxMasks)
	ErrFlowLimit    = errors.New("flow limit reached")
	ErrFlowExists   = errors.New("megaflow already installed")
	ErrNoFlow       = errors.New("no such megaflow")
	ErrTooManyActs  = fmt.Errorf("more than %d datapath actions", MaxActions)
	ErrUnknownPort  = errors.New("unknown port")
	ErrPacketSize   = errors.New("packet too short or too long to execute")
)

// Config describes one fast-path instance.
type Config struct {
	// Name identifies the instance; its pins live in PinRoot/Name. Several
	// instances (one per node namespace) coexist on one kernel.
	Name string
	// PinRoot is a directory on a BPF filesystem. Default DefaultPinRoot.
	PinRoot string
	// MaxFlows bounds the megaflow table. Default DefaultMaxFlows. An
	// instance reopened with another value is migrated (migrate.go).
	MaxFlows int
	// NetNS is the path of the network namespace the ports live in (e.g.
	// /var/run/netns/node1). Empty: the caller's namespace.
	NetNS string
	// Trace makes the programs record every output decision; tests use it.
	Trace bool
	// EMCInsertInvProb: a megaflow hit is remembered in the exact-match
	// cache with probability 1/EMCInsertInvProb (Open vSwitch's
	// emc-insert-inv-prob), so a sender of ever-new keys cannot churn
	// the other ports' entries. 0 means DefaultEMCInsertInvProb; 1
	// remembers every hit.
	EMCInsertInvProb uint32
	// Per-port budgets (budget.go); 0 is no limit. UpcallRate upcalls
	// per second and UpcallBurst at once per port, enforced in the fast
	// path; PortFlowLimit megaflows per in_port; PortMaskLimit masks a
	// port's flows may use before it may add no new one.
	UpcallRate, UpcallBurst      uint32
	PortFlowLimit, PortMaskLimit int
	// ConntrackMax is the connections the conntrack table holds
	// (conntrack.go). Default DefaultConntrackMax; like MaxFlows, an
	// instance reopened with another value is migrated.
	ConntrackMax int
	// ConntrackPortMax is the live connections one ingress port may
	// commit; 0 means a quarter of ConntrackMax, negative no limit.
	ConntrackPortMax int
	// ConntrackTimeouts: zero fields are nf_conntrack's defaults.
	ConntrackTimeouts ConntrackTimeouts
	// PodHookQuiet is how long pod port attaches and detaches must pause
	// before pod ports move from their clsact filter to tcx (hooks.go).
	// 0 means DefaultPodHookQuiet.
	PodHookQuiet time.Duration
	// NoShortcuts keeps every packet on the walk (parse, caches,
	// actions): established connections take no shortcut
	// (bpf/lib/shortcut.h). For benchmarks that compare the two.
	NoShortcuts bool
}

// DefaultEMCInsertInvProb is Open vSwitch's default.
const DefaultEMCInsertInvProb = 100

// Datapath is an open fast-path instance.
type Datapath struct {
	cfg   Config
	dir   string
	objs  nagareObjects
	ns    netns.NsHandle
	ncpu  int
	slots chan uint32 // dynamic execute slots

	execMu    sync.Mutex
	execCache map[string]uint32 // action list → cached execute slot

	// The thread that stays in the namespace (see inNetns).
	nsOnce    sync.Once
	closeOnce sync.Once
	nsCalls   chan nsCall
	nsStop    chan struct{}
	nsErr     error

	mu       sync.Mutex
	sets     *outputSetTable
	ports    map[uint32]*Port // by OpenFlow port number
	vanished []Port           // ports whose device was gone at Open
	masks    [MaxMasks]maskSlot
	flows    flowIndex           // by megaflow key
	uses     map[uint32]*portUse // by in_port (budget.go)
	byID     []*installed        // the same flows by id
	scratch  batchScratch
	ids      idAllocator
	gen      uint32
	nMasks   uint32

	// Onload (onload.go): the mmapped onload_seqs array, and the action
	// lists of flow generations replaced while packets of theirs were
	// still on their way through userspace.
	seqs    []byte
	retired map[uint32]retiredFlow // by generation

	// maskSeqs is the mmapped mask_seqs array (maskcache.go).
	maskSeqs []byte
	// Pod ports waiting to move from their filter to tcx (hooks.go),
	// under mu.
	toTCX         map[int]bool // by ifindex
	lastPodChange time.Time
	tcxTimer      *time.Timer
	hooksClosed   bool
	moveMu        sync.Mutex // held by moveHooks while it runs
	noTCX         bool       // the kernel has no tcx
	hookErr       error      // the last move that failed
	// ctEpochMu makes bumpCTEpoch the one writer of its word.
	ctEpochMu sync.Mutex
	// gens and filter are the mmapped flow_gens and mask_filter arrays
	// (flowarrays.go), mem their mappings.
	gens, filter       []arrayU32
	gensMem, filterMem []byte
	// heads is the mmapped flows array: each flow id's flow_head.
	heads    []flowHead
	headsMem []byte

	// migrated is set when Open took over pins another build made
	// (migrate.go).
	migrated *migration
}

type maskSlot struct {
	mask  flow.Mask
	mw    [flow.KeyWords]uint64 // mask.Words(), kept: every install masks a key with it
	words uint32
	refs  int
}

// setMask fills the slot's mask and what is derived from it.
func (s *maskSlot) setMask(mask flow.Mask) {
	s.mask, s.mw = mask, mask.Words()
	s.words = maskWords(&s.mw)
}

// megaflowID is the kernel megaflow key: mask slot + masked key.
type megaflowID [8 + flow.KeySize]byte

type installed struct {
	id      uint32
	gen     uint32
	slot    int
	key     flow.Key // masked
	actions []flow.Action
	sets    []uint32   // output sets its actions refer to
	filter  uint32     // filter slot index raised for this flow
	idx     int        // its index in the DeleteBatch under way
	onload  bool       // placement: packets executed in userspace (onload.go)
	tail    bool       // its list is long: the rest is in flow_tails
	next    *installed // in d.flows: the next flow whose megaflow key has the same hash
}

// Open loads the fast path for cfg.Name, reusing its pinned maps and port
// attachments when they exist (a restart), creating them otherwise.
func Open(cfg Config) (*Datapath, error) {
	if cfg.Name == "" {
		return nil, errors.New("datapath: Config.Name is required")
	}
	if cfg.EMCInsertInvProb == 0 {
		cfg.EMCInsertInvProb = DefaultEMCInsertInvProb
	}
	if cfg.PinRoot == "" {
		cfg.PinRoot = DefaultPinRoot
	}
	if cfg.MaxFlows == 0 {
		cfg.MaxFlows = DefaultMaxFlows
	}
	if cfg.ConntrackMax == 0 {
		cfg.ConntrackMax = DefaultConntrackMax
	}
	if err := ensureBPFFS(cfg.PinRoot); err != nil {
		return nil, err
	}
	d := &Datapath{
		cfg:       cfg,
		dir:       filepath.Join(cfg.PinRoot, cfg.Name),
		ports:     make(map[uint32]*Port),
		flows:     newFlowIndex(),
		uses:      make(map[uint32]*portUse),
		execCache: make(map[string]uint32),
		sets:      newOutputSetTable(),
		retired:   make(map[uint32]retiredFlow),
		ns:        -1,
		slots:     make(chan uint32, execSlots),
		nsStop:    make(chan struct{}),
	}
	for i := uint32(execCached); i < execSlots; i++ {
		d.slots <- i
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	d.ncpu = ncpu
	if cfg.NetNS != "" {
		h, err := netns.GetFromPath(cfg.NetNS)
		if err != nil {
			return nil, fmt.Errorf("datapath: network namespace %s: %w", cfg.NetNS, err)
		}
		d.ns = h
	}
	if err := d.load(); err != nil {
		d.Close()
		return nil, err
	}
	if err := d.restore(); err != nil {
		d.Close()
		return nil, fmt.Errorf("datapath: restoring state from %s: %w", d.dir, err)
	}
	if d.migrated != nil {
		// Every port runs this build's programs now: the old instance's
		// maps go with its last pin.
		if err := os.RemoveAll(d.migrated.oldDir); err != nil {
			d.Close()
			return nil, fmt.Errorf("datapath: removing the migrated instance %s: %w", d.migrated.oldDir, err)
		}
	}
	return d, nil
}

func (d *Datapath) load() error {
	spec, err := loadNagare()
	if err != nil {
		return err
	}
	for _, name := range []string{"megaflows", "flows", "flow_tails", "flow_gens", "stats", "onload_seqs"} {
		spec.Maps[name].MaxEntries = uint32(d.cfg.MaxFlows)
	}
	spec.Maps["conntrack"].MaxEntries = uint32(2 * d.cfg.ConntrackMax) // an entry per direction
	// The caches with a block per CPU (bpf/lib/maps.h, emc_tags).
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	for _, name := range []string{"emc_tags", "mask_cache", "shortcuts"} {
		spec.Maps[name].MaxEntries *= uint32(cpus)
	}
	for _, m := range spec.Maps {
		if !unpinned[m.Name] {
			m.Pinning = ebpf.PinByName
		}
	}
	if d.cfg.Trace {
		if err := spec.Variables["trace_outputs"].Set(uint32(1)); err != nil {
			return err
		}
	}
	if d.cfg.NoShortcuts {
		if err := spec.Variables["shortcuts_off"].Set(uint32(1)); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(d.dir, "links"), 0o700); err != nil {
		return err
	}
	if err := replaceResizedRing(d.dir, "upcalls", spec.Maps["upcalls"].MaxEntries); err != nil {
		return err
	}
	opts := ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: d.dir}}
	// Pins of another layout (checkLayouts), or of other limits (the
	// kernel's maps do not match the spec), are migrated (migrate.go).
	migrate, err := d.checkLayouts()
	if err != nil {
		return err
	}
	for _, dir := range []string{d.oldDir(), d.newDir()} {
		if _, serr := os.Stat(dir); serr == nil {
			migrate = true // an interrupted migration
		}
	}
	if !migrate {
		err = spec.LoadAndAssign(&d.objs, &opts)
		migrate = errors.Is(err, ebpf.ErrMapIncompatible)
	}
	if migrate {
		err = d.migrate(spec, &opts)
	}
	if err != nil {
		return fmt.Errorf("datapath: loading the fast path: %w", err)
	}
	// Every pass after the first (bpf/lib/recirc.h).
	if err := d.objs.RecircProgs.Put(uint32(0), d.objs.NagareRecirc); err != nil {
		return fmt.Errorf("datapath: recirculation program: %w", err)
	}
	if err := d.mapMaskSeqs(); err != nil {
		return err
	}
	if err := d.mapFlowArrays(); err != nil {
		return err
	}
	return d.mapOnloadSeqs()
}

// replaceResizedRing removes the pin of the ring buffer name in dir when
// an earlier build made it with another size than this one's, so that the
// load pins a new one instead of failing as incompatible. A ring holds
// nothing but records in flight: the old process's programs write to the
// old ring until this process's programs replace them on the ports, and
// the misses of that moment are lost (their flows' next packets miss
// again), as they would be with no switch running. The upcall ring is
// pinned for the restarts that keep its size, whose new process reads
// what the old programs wrote meanwhile.
func replaceResizedRing(dir, name string, size uint32) error {
	path := filepath.Join(dir, name)
	m, err := ebpf.LoadPinnedMap(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("datapath: pinned ring %s: %w", path, err)
	}
	defer m.Close()
	if m.MaxEntries() == size {
		return nil
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("datapath: replacing the %d-byte ring %s: %w", m.MaxEntries(), path, err)
	}
	return nil
}

// unpinned are the maps each process makes anew: test traces and the
// program's constants. The per-CPU scratch maps and the recirculation
// program array are pinned like the rest although they hold nothing
// between packets: a recirculated pass carries its state from the entry
// program to nagare_recirc through them, and across a restart the old
// process's entry programs stay attached until the new process swaps
// them. With a map of their own, the old ones' tail calls would find an
// empty array once the old process closed it (the kernel clears a
// program array when its last user reference goes) and every
// recirculated packet would drop until the swap.
//
// The caches in front of the megaflow search (the exact-match cache, its
// tags, the mask cache, the connections' shortcuts) are also each
// process's own: they hold nothing a packet needs (a miss searches), the
// old process's programs keep theirs until the swap, and their layout may
// then change from one release to the next without making the pinned
// instance incompatible.
var unpinned = map[string]bool{"out_traces": true, ".rodata": true, ".bss": true, ".data": true,
	"emc": true, "emc_tags": true, "mask_cache": true, "shortcuts": true, "shortcut_ports": true}

// Close releases this process's handles. Pinned maps and port attachments
// stay: traffic keeps flowing through the installed flows.
func (d *Datapath) Close() error {
	d.closeHooks()
	d.unmapOnloadSeqs()
	d.unmapMaskSeqs()
	d.unmapFlowArrays()
	err := d.objs.Close()
	d.closeOnce.Do(func() { close(d.nsStop) })
	if d.ns >= 0 {
		d.ns.Close()
		d.ns = -1
	}
	return err
}

// Destroy detaches every port and removes the instance's pins: its traffic
// stops and its flows are gone.
func (d *Datapath) Destroy() error {
	d.mu.Lock()
	var errs []error
	for _, p := range d.ports {
		if err := d.detach(p); err != nil {
			errs = append(errs, err)
		}
	}
	d.mu.Unlock()
	errs = append(errs, d.Close(), os.RemoveAll(d.dir), os.RemoveAll(d.oldDir()), os.RemoveAll(d.newDir()))
	return errors.Join(errs...)
}

// Vanished lists the ports found in the pins at Open whose device no
// longer existed; Open removed them.
func (d *Datapath) Vanished() []Port { return d.vanished }

// Dir is the instance's pin directory.
func (d *Datapath) Dir() string { return d.dir }

// inNetns runs fn on an OS thread that is in the instance's network
// namespace: device names, ifindexes, tcx attachment and BPF_PROG_RUN's
// redirects are all relative to the calling thread's namespace. One
// long-lived thread (nsThread) stays in the namespace and runs every such
// call, so an Execute per upcalled packet costs a hand-off, not two setns
// calls and a thread.
func (d *Datapath) inNetns(fn func() error) error {
	if d.ns < 0 {
		return fn()
	}
	d.nsOnce.Do(d.startNSThread)
	if d.nsErr != nil {
		return d.nsErr
	}
	req := nsCall{fn: fn, done: make(chan error, 1)}
	select {
	case d.nsCalls <- req:
	case <-d.nsStop:
		return errors.New("datapath: closed")
	}
	return <-req.done
}

// InNetns runs fn in the instance's network namespace (see inNetns):
// for callers that attach their own programs to the ports' devices.
func (d *Datapath) InNetns(fn func() error) error { return d.inNetns(fn) }

type nsCall struct {
	fn   func() error
	done chan error
}

// startNSThread starts the goroutine that locks an OS thread, enters the
// namespace and serves inNetns calls until Close, then returns the thread
// to its own namespace.
func (d *Datapath) startNSThread() {
	d.nsCalls = make(chan nsCall)
	ready := make(chan error)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err == nil {
			err = netns.Set(d.ns)
		}
		ready <- err
		if err != nil {
			return // the thread is discarded with this goroutine
		}
		defer func() {
			// Back home before the thread serves other goroutines.
			if netns.Set(orig) == nil {
				runtime.UnlockOSThread()
			}
			orig.Close()
		}()
		for {
			select {
			case c := <-d.nsCalls:
				c.done <- c.fn()
			case <-d.nsStop:
				return
			}
		}
	}()
	d.nsErr = <-ready
	if d.nsErr != nil {
		d.nsErr = fmt.Errorf("datapath: entering network namespace %s: %w", d.cfg.NetNS, d.nsErr)
	}
}

// EnsureBPFFS makes sure dir is on a BPF filesystem, mounting one on
// /sys/fs/bpf when the machine has none mounted (nagare-switch
// mount-bpffs: the DaemonSet's init container, whose mount propagates to
// the host so the pins outlive every container).
func EnsureBPFFS(dir string) error { return ensureBPFFS(dir) }

func ensureBPFFS(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err == nil && isBPFFS(dir) {
		return nil
	}
	if !isBPFFS("/sys/fs/bpf") {
		if err := unix.Mount("bpffs", "/sys/fs/bpf", "bpf", 0, "mode=0700"); err != nil {
			return fmt.Errorf("datapath: mounting a BPF filesystem on /sys/fs/bpf: %w (%w)", err, ErrNotSupported)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if !isBPFFS(dir) {
		return fmt.Errorf("datapath: %s is not on a BPF filesystem: %w", dir, ErrNotSupported)
	}
	return nil
}

func isBPFFS(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && uint32(st.Type) == unix.BPF_FS_MAGIC
}

// linkPin is where the tcx attachment of the device with ifindex is pinned.
func (d *Datapath) linkPin(ifindex int) string {
	return filepath.Join(d.dir, "links", fmt.Sprintf("ifindex-%d", ifindex))
}
