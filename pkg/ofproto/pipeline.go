// Package ofproto is the OpenFlow 1.3 pipeline of one bridge and the
// translation of packets through it into datapath flows. It is pure Go: no
// kernel, no sockets. The switch daemon owns connections, ports, the fast
// path and the revalidator and calls this package.
//
// How a packet travels through the pipeline (Translate):
//
//	flow.Key from the upcall ─► xlate (translate.go): cur = key, metadata = 0,
//	                             megaflow mask = {in_port}, action set = {}
//	table 0 ─► lookup (tables.go): rules by priority, first match wins;
//	           every higher-priority rule that missed un-wildcards one field
//	           where the packet differs (mask.go); the hit un-wildcards its
//	           whole match. No hit and no table-miss rule: drop, done.
//	rule hit ─► instructions in spec order: meter (refused at FLOW_MOD),
//	           apply_actions (executed now on cur: rewrites are recorded as
//	           pending and emitted, in order, just before the next output),
//	           clear_actions, write_actions (action set), write_metadata,
//	           goto_table (forward only) ─► next table ...
//	no goto ─► the action set runs in spec order (pop, push, dec_ttl,
//	           set_field, group or output)
//	outputs ─► port (flow.Output), LOCAL (flow.Local), IN_PORT, FLOOD/ALL,
//	           NORMAL (normal.go, MAC learning), CONTROLLER
//	           (flow.Userspace with a registered cookie, controller.go),
//	           groups (groups.go: ALL, SELECT, INDIRECT, FAST_FAILOVER; every
//	           bucket sees its own copy of the packet)
//	result ─► Translation{Actions, Mask, Rules, PacketIns, Trace}
//
// Bits that the translation's own actions wrote (set_field, push/pop VLAN)
// are never added to the mask when a later table looks at them: their
// value does not depend on the packet that arrived.
//
// Counters are not touched by Translate: the daemon reports every packet,
// including the one it just translated, through Credit with the
// Translation's Rules.
package ofproto

import (
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// PortConfigNoFlood is OFPPC_NO_FLOOD (OpenFlow 1.0 bit 4, kept by Open
// vSwitch): FLOOD and NORMAL flooding skip the port. OpenFlow 1.3 dropped
// the bit from ofp_port_config, so pkg/openflow does not define it.
const PortConfigNoFlood uint32 = 1 << 4

// Port is one port of the bridge as the pipeline needs to know it.
type Port struct {
	No     uint32 // OpenFlow port number
	Name   string
	HWAddr [6]byte
	Config uint32 // openflow.PortConfig* bits and PortConfigNoFlood
	State  uint32 // openflow.PortState* bits
	// Tunnel is set for tunnel ports: an output to the port is preceded
	// by flow.SetTunnel with the packet's tunnel_id as VNI.
	Tunnel *TunnelConfig
}

// TunnelConfig describes the encapsulation of a tunnel port.
type TunnelConfig struct {
	Remote netip.Addr // outer destination
	Local  netip.Addr // outer source; zero: chosen by routing
	TOS    uint8
	TTL    uint8
	// InheritTOS copies the inner ToS, as the actions left it, to the
	// outer header (VS-extend's flow control field survives ESP and
	// fragmentation that way); TOS is then unused.
	InheritTOS bool
}

// live reports whether a fast-failover watch on the port holds.
func (pt *Port) live() bool {
	return pt.State&openflow.PortStateLinkDown == 0 && pt.Config&openflow.PortConfigPortDown == 0
}

// canForward reports whether packets may be sent out of the port.
func (pt *Port) canForward() bool {
	return pt.Config&(openflow.PortConfigPortDown|openflow.PortConfigNoFwd) == 0 &&
		pt.State&openflow.PortStateLinkDown == 0
}

// Config configures a Pipeline.
type Config struct {
	NumTables int              // number of flow tables; default 254 (0..253)
	Now       func() time.Time // clock; default time.Now
	MACAging  time.Duration    // NORMAL learning table aging; default 300s
	// MACTableSize bounds the NORMAL learning table; default 8192 (Open
	// vSwitch's mac-table-size).
	MACTableSize int
	// MACPerPort is how many learning table entries one port may own;
	// default a quarter of MACTableSize.
	MACPerPort int
	// MaxRulesPerTable limits each table (OFPFMFC_TABLE_FULL); default 1<<20.
	MaxRulesPerTable int
	// FailStandalone makes Translate act as NORMAL while the pipeline
	// holds no rules at all (the daemon's --fail-mode standalone).
	FailStandalone bool
}

// Pipeline is the OpenFlow 1.3 pipeline of one bridge: flow tables,
// groups, the NORMAL learning table and the controller cookie registry.
// All methods are safe for concurrent use.
type Pipeline struct {
	cfg Config

	mu        sync.RWMutex
	tables    []*table
	nrules    int
	groups    map[uint32]*group
	meters    map[uint32]*Meter
	ports     map[uint32]*Port
	portOrder []uint32 // sorted port numbers, for FLOOD/ALL
	pending   []Removed
	seq       uint64

	fallbackNormal atomic.Bool
	version        atomic.Uint64
	// versionMu orders bumps with Versions: fullVersion is the version
	// of the last change other than a learning table one.
	versionMu   sync.Mutex
	fullVersion uint64
	macs        macTable
	cookies     cookieRegistry
	recirc      recircs         // frozen states of recirculated packets (recirc.go)
	changes     changeLog       // what each version changed (changes.go); under versionMu
	watchers    map[uint32]bool // groups with a bucket that watches a group
	index       ruleIndex       // rules by group and cookie (index.go)
	parents     groupParents    // groups by the groups that forward to them (index.go)
	// learners counts, per (table, cookie), the rules holding a
	// delete_learned learn for it (learn.go).
	learners map[ruleCookie]int
}

// New returns an empty pipeline.
func New(cfg Config) *Pipeline {
	if cfg.NumTables <= 0 || cfg.NumTables > int(openflow.TableMax)+1 {
		cfg.NumTables = 254
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MACAging <= 0 {
		cfg.MACAging = 300 * time.Second
	}
	if cfg.MACTableSize <= 0 {
		cfg.MACTableSize = 8192
	}
	if cfg.MACPerPort <= 0 {
		cfg.MACPerPort = max(1, cfg.MACTableSize/4)
	}
	cfg.MACPerPort = min(cfg.MACPerPort, cfg.MACTableSize)
	if cfg.MaxRulesPerTable <= 0 {
		cfg.MaxRulesPerTable = 1 << 20
	}
	p := &Pipeline{cfg: cfg, groups: map[uint32]*group{}, meters: map[uint32]*Meter{}, ports: map[uint32]*Port{}}
	p.index.init()
	p.parents = groupParents{}
	p.watchers = map[uint32]bool{}
	p.tables = make([]*table, cfg.NumTables)
	for i := range p.tables {
		p.tables[i] = newTable(uint8(i), &p.index)
	}
	p.macs.init(cfg.MACTableSize, cfg.MACPerPort)
	p.cookies.init()
	p.learners = map[ruleCookie]int{}
	p.recirc.init()
	p.fallbackNormal.Store(cfg.FailStandalone)
	p.version.Store(1)
	p.fullVersion = 1
	return p
}

// Version is bumped on every change that can alter a translation: flow
// and group mods, port changes, NORMAL learning table changes, expiry,
// fallback mode. The revalidator re-translates cached flows when it moved.
func (p *Pipeline) Version() uint64 { return p.version.Load() }

// Versions returns the version and the version of the last change that
// was not a NORMAL learning table change (learning, moves, evictions,
// aging). A translation made at version v < full may be wrong anywhere;
// one made at full <= v < version only where its MACDeps no longer hold.
func (p *Pipeline) Versions() (version, full uint64) {
	p.versionMu.Lock()
	defer p.versionMu.Unlock()
	return p.version.Load(), p.fullVersion
}

// bump records a change that may alter any translation.
func (p *Pipeline) bump() { p.bumpWith(nil) }

// bumpWith records a change of what c names (nil: anything).
func (p *Pipeline) bumpWith(c *changeSet) {
	if p.fallbackNormal.Load() {
		c = nil // with no rule, every translation was NORMAL's
	}
	p.versionMu.Lock()
	p.fullVersion = p.version.Add(1)
	p.changes.record(p.fullVersion, c)
	p.versionMu.Unlock()
}

// bumpMAC records a learning table change.
func (p *Pipeline) bumpMAC() {
	p.versionMu.Lock()
	p.version.Add(1)
	p.versionMu.Unlock()
}

// SetFallbackNormal turns fail-standalone on or off: while no rule is
// installed in any table, Translate behaves as output:NORMAL.
func (p *Pipeline) SetFallbackNormal(on bool) {
	if p.fallbackNormal.Swap(on) != on {
		p.bump()
	}
}

// SetPorts replaces the bridge's port list. Ports decide FLOOD, ALL,
// NORMAL, output to missing or down ports and fast-failover liveness.
// NORMAL entries pointing at ports that disappeared are forgotten.
func (p *Pipeline) SetPorts(ports []Port) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := make(map[uint32]*Port, len(ports))
	order := make([]uint32, 0, len(ports))
	for i := range ports {
		pt := ports[i]
		if pt.Tunnel != nil {
			tc := *pt.Tunnel
			pt.Tunnel = &tc
		}
		if _, dup := m[pt.No]; !dup {
			order = append(order, pt.No)
		}
		m[pt.No] = &pt
	}
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	p.ports, p.portOrder = m, order
	p.macs.forgetPorts(func(no uint32) bool { _, ok := m[no]; return ok })
	p.bump()
}

// Ports returns a copy of the current port list, sorted by number.
func (p *Pipeline) Ports() []Port {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]Port, 0, len(p.portOrder))
	for _, no := range p.portOrder {
		out = append(out, *p.ports[no])
	}
	return out
}

// TableMod accepts OFPT_TABLE_MOD. OpenFlow 1.3 deprecated every table
// config bit, so apart from validation (bad table: OFPTMFC_BAD_TABLE) it
// changes nothing.
func (p *Pipeline) TableMod(tm *openflow.TableMod) error {
	if err := tm.Validate(); err != nil {
		return err
	}
	if tm.TableID != openflow.TableAll && int(tm.TableID) >= p.cfg.NumTables {
		return ofErr(openflow.ErrTypeTableModFailed, openflow.TableModBadTable, "table %d of %d", tm.TableID, p.cfg.NumTables)
	}
	return nil
}
