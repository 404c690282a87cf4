package ofproto

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// TranslateOptions modify a translation.
type TranslateOptions struct {
	Trace     bool // fill Translation.Trace
	PacketOut bool // translating a PACKET_OUT's action list (set by TranslatePacketOut)
	// SlowSelect: select groups pick their bucket by a hash taken here
	// (the 5-tuple goes into the megaflow) instead of the fast path's
	// dp_hash and a recirculation (groups.go). Traces use it (a trace
	// shows one pass, not a pass per hash), and a translation retries
	// with it when the pipeline goes on after a select group.
	SlowSelect bool
}

// Translation is the result of running one packet through the pipeline.
type Translation struct {
	// Actions are the datapath actions, in the order the fast path
	// replays them: every rewrite comes right before the first output
	// that must see it. Empty means drop.
	Actions []flow.Action
	// Mask is the megaflow mask: exactly the key bits the result
	// depended on (mask.go).
	Mask flow.Mask
	// Rules are the rules, table misses, groups, buckets and NORMAL
	// learning entries this packet went through, for Credit.
	Rules []RuleRef
	// MACDeps are the NORMAL learning table lookups the result depended
	// on; after a learning table change it still holds if MACDepsHold.
	MACDeps []MACDep
	// PacketIns are the messages for the controller about this packet;
	// the daemon sends them for the first packet and executes Actions
	// minus flow.Userspace (PacketIn.ActionIndex says where each was).
	PacketIns []PacketIn
	// NoCache says the result must not be installed as a megaflow: set
	// for PACKET_OUT translations and when translation was cut short
	// (group chain or resubmit depth exceeded, see Err below).
	NoCache bool
	// Trace lists each step when TranslateOptions.Trace was set.
	Trace []TraceStep
}

// maxDepth bounds group chaining and packet-out resubmission.
const maxDepth = 64

var errDepth = errors.New("ofproto: group chain or resubmit deeper than 64")

// errRecirc: after pop_mpls the packet behind the popped entry is not in
// the flow key (the fast path parses the top of the label stack only), so
// a lookup or an L3/L4 action on it would need Open vSwitch's
// recirculation, which the fast path does not have.
var errRecirc = errors.New("ofproto: matching or an L3/L4 action after pop_mpls needs recirculation")

// Pending rewrite bits (xlate.dirty): the pipeline's packet has a value
// the datapath's copy does not have yet.
const (
	dEthSrc uint16 = 1 << iota
	dEthDst
	dVLAN
	dIPSrc
	dIPDst
	dTpSrc
	dTpDst
	dDSCP
	dECN
	dNDTarget
	dNDLL // the source (NS) or target (NA) link-layer address option
	dMPLSLabel
	dMPLSTC
	dMPLSBOS
	dTTL     // IPv4 TTL / IPv6 hop limit, to undo a group bucket's
	dMPLSTTL // the top label stack entry's TTL, idem
)

// xlate is the state of one translation.
type xlate struct {
	p    *Pipeline
	opts TranslateOptions

	in    flow.Key // as it arrived
	cur   flow.Key // the pipeline's packet, after apply-actions so far
	curW  words    // cur in words, valid unless stale
	stale bool

	mask    words // megaflow mask being built
	written words // bits of cur set by actions, independent of the input

	dirty   uint16 // rewrites to emit before the next output
	emitted uint16 // rewrites emitted (for undoing a group bucket's)
	// dpTagged is whether the datapath's copy carries a VLAN tag now;
	// dpKnown is set once a VLAN action was emitted (before that it is
	// the input's tag and depends on the packet).
	dpTagged, dpKnown bool
	dp                flow.Key // the datapath's copy of the rewritable fields
	tpid              uint16
	lastTunnel        *flow.SetTunnel
	// mplsPushes counts entries pushed minus popped, and popLSE the
	// entries popped, so a group bucket's can be undone (restore).
	mplsPushes int
	pbbPushes  int // I-TAGs pushed minus popped, idem
	popLSE     []uint32
	dpLSE      uint32 // the datapath's copy of the top label stack entry
	// branchPushes is mplsPushes at the innermost save.
	branchPushes int
	// ttlTouched / mplsTTLTouched: an IP TTL action, or an MPLS TTL
	// action on the entry that was on top, was emitted since the
	// innermost save (a group bucket's, to be undone).
	ttlTouched, mplsTTLTouched bool

	acts []flow.Action
	// dropReason is the drop reason the last note naming one gave
	// (dropreason.go); 0: none.
	dropReason uint32
	rules      []RuleRef
	macDeps    []MACDep
	pins       []PacketIn
	trace      []TraceStep

	// Context of the rule being executed, for packet-ins and learn.
	tableID uint8
	cookie  uint64
	miss    bool
	rule    *rule // nil in a packet-out's own actions

	// popped is set once pop_mpls ran: what follows the popped entry
	// is not in the key (errRecirc).
	popped bool
	// l2Unknown is set once pop_pbb ran: the frame's addresses are the
	// customer ones, not in the key (NORMAL cannot learn or look up).
	l2Unknown bool

	// set is the action set of the pipeline pass being translated (nil
	// in a packet-out's actions); recircAt is len(acts) after a Recirc
	// was emitted (recirc.go).
	set      *actionSet
	recircAt int
	// selectFrozen: the pass froze at a select group to let the fast
	// path hash (groups.go); afterSelect: the pipeline went on after it,
	// which the recirculated pass cannot do: translate again with
	// SlowSelect.
	selectFrozen, afterSelect bool

	depth int
	err   error

	// conjAcc is scratch space of conjunctive lookups (conjunction.go),
	// kept across translations.
	conjAcc map[uint32]conjAcc
	conjGot map[conjKey]uint64
}

// recycle clears x, but for its scratch space, and puts it in the pool.
func (x *xlate) recycle() {
	*x = xlate{conjAcc: x.conjAcc, conjGot: x.conjGot}
	xlatePool.Put(x)
}

// xlatePool recycles translation state (about 1 KiB): the slow path
// translates every new flow's first packet, and every cached flow again
// after a table change.
var xlatePool = sync.Pool{New: func() any { return new(xlate) }}

func (p *Pipeline) newXlate(key flow.Key, opts TranslateOptions) *xlate {
	x := xlatePool.Get().(*xlate)
	*x = xlate{p: p, opts: opts, in: key, cur: key, dp: key, tpid: 0x8100, conjAcc: x.conjAcc, conjGot: x.conjGot}
	x.curW = keyWords(&key)
	for i := metaWord; i < nWords; i++ {
		x.written[i] = ^uint64(0) // metadata and registers (fields.go)
	}
	x.dpTagged = key.VlanTCI&flow.VLANCFI != 0
	x.rules = make([]RuleRef, 0, 4)
	return x
}

// packet returns the current packet in words.
func (x *xlate) packet() *words {
	if x.stale {
		kw := x.cur.Words()
		copy(x.curW[:flow.KeyWords], kw[:]) // the registers past the key stay
		x.stale = false
	}
	return &x.curW
}

// result hands the translation over and recycles x.
func (x *xlate) result() (*Translation, error) {
	if x.recircAt > 0 && len(x.acts) > x.recircAt && x.err == nil {
		x.tracef(TraceNote, x.tableID, "%v: dropped %s", errAfterRecirc, flow.FormatActions(x.acts[x.recircAt:]))
		x.acts = x.acts[:x.recircAt]
		x.err = errAfterRecirc
	}
	x.acts = withDropReason(x.acts, x.dropReason)
	if x.opts.Trace {
		x.tracef(TraceNote, x.tableID, "datapath actions: %s", flow.FormatActions(x.acts))
	}
	t := &Translation{Actions: x.acts, Mask: x.finalMask(), Rules: x.rules, MACDeps: x.macDeps, PacketIns: x.pins,
		NoCache: x.opts.PacketOut || x.err != nil, Trace: x.trace}
	err := x.err
	x.recycle()
	return t, err
}

// Translate runs the packet with key through the pipeline from table 0.
// The error is non-nil only when translation was cut short (then the
// result drops what was left and is marked NoCache).
func (p *Pipeline) Translate(key flow.Key, opts TranslateOptions) (*Translation, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	opts.PacketOut = false
	if opts.Trace {
		opts.SlowSelect = true
	}
	x := p.newXlate(key, opts)
	x.start()
	if x.afterSelect && !opts.SlowSelect {
		x.recycle()
		opts.SlowSelect = true
		x = p.newXlate(key, opts)
		x.start()
	}
	return x.result()
}

// start translates the packet from where it enters: a recirculated
// packet from its frozen state, any other from table 0.
func (x *xlate) start() {
	switch {
	case x.in.RecircID != 0:
		x.thaw()
	case x.p.nrules == 0 && x.p.fallbackNormal.Load():
		x.tracef(TraceNote, 0, "no rules: fail-standalone, acting as NORMAL")
		x.normal()
	default:
		x.pipeline(0)
	}
}

// TranslatePacketOut translates a PACKET_OUT: actions applied to the
// packet with key as if it arrived on inPort (which may be
// openflow.PortController or PortLocal). output:TABLE runs a copy through
// the pipeline from table 0. The result is always NoCache.
func (p *Pipeline) TranslatePacketOut(key flow.Key, inPort uint32, actions openflow.Actions, opts TranslateOptions) (*Translation, error) {
	if err := p.checkActions(actions, true); err != nil {
		return nil, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	opts.PacketOut = true
	opts.SlowSelect = true // a packet-out's own actions are one pass
	key.InPort = inPort
	x := p.newXlate(key, opts)
	x.tableID, x.cookie = openflow.TableAll, ^uint64(0)
	x.tracef(TraceNote, openflow.TableAll, "packet-out: %s", actions)
	x.apply(actions)
	return x.result()
}

// pipeline runs the tables from id on.
func (x *xlate) pipeline(id uint8) { x.pipelineFrom(id, actionSet{}) }

// pipelineFrom runs the tables from id on with an action set, then the
// set.
func (x *xlate) pipelineFrom(id uint8, set actionSet) {
	outer := x.set
	x.set = &set
	defer func() { x.set = outer }()
	if !x.tables(id) {
		return
	}
	if !set.empty() {
		acts := set.actions()
		x.tracef(TraceNote, x.tableID, "action set: %s", acts)
		set = actionSet{} // being executed: a select group freezing in it must not take itself along
		x.apply(acts)
	}
}

// tables runs the tables from id on, following goto_table, writing to
// x.set. It returns false when the action set must not run: a table
// missed (the packet is dropped, OpenFlow 1.3 5.4), or the pass was
// frozen (recirc.go) and the set belongs to the recirculated pass.
func (x *xlate) tables(id uint8) bool {
	for {
		t := x.p.tables[id]
		if x.popped || x.l2Unknown {
			// The headers behind a popped MPLS entry or PBB I-TAG are
			// not in the key: the fast path parses the packet again.
			x.tracef(TraceNote, id, "table %d after pop_mpls/pop_pbb: recirculate to see the inner headers", id)
			x.freeze(id)
			return false
		}
		r := x.lookup(t)
		if r == nil {
			x.rules = append(x.rules, RuleRef{kind: refMiss, table: t})
			x.tracef(TraceMiss, id, "no match: drop")
			return false
		}
		x.rules = append(x.rules, RuleRef{kind: refRule, table: t, rule: r})
		x.tableID, x.cookie, x.miss, x.rule = id, r.cookie, r.miss, r
		x.traceRule(r)
		next := -1
		var apply, write openflow.Actions
		var clearSet bool
		var meta *openflow.InstWriteMetadata
		for _, in := range r.insts {
			if m, ok := in.(openflow.InstMeter); ok {
				// The meter runs first (spec 5.9), on the packet as the
				// datapath has it now.
				x.commit()
				x.acts = append(x.acts, flow.Meter{ID: m.MeterID})
			}
		}
		for _, in := range r.insts {
			switch in := in.(type) {
			case openflow.InstApplyActions:
				apply = in.Actions
			case openflow.InstWriteActions:
				write = in.Actions
			case openflow.InstClearActions:
				clearSet = true
			case openflow.InstWriteMetadata:
				meta = &in
			case openflow.InstGotoTable:
				next = int(in.TableID)
			}
		}
		x.apply(apply)
		if x.selectFrozen {
			if len(write) > 0 || clearSet || meta != nil || next >= 0 {
				x.afterSelect = true
			}
			return false
		}
		if clearSet {
			*x.set = actionSet{}
		}
		x.set.write(write)
		if meta != nil {
			x.curW[metaWord] = x.curW[metaWord]&^meta.Mask | meta.Metadata&meta.Mask
		}
		if next < 0 || next >= len(x.p.tables) {
			return true
		}
		id = uint8(next)
	}
}

// resubmit runs the packet through table a.Table (this table for
// NXTableCurrent), with in_port a.InPort for the lookup unless it is
// IN_PORT, then goes on with the actions after it (Open vSwitch's
// resubmit: the resubmitted rule writes the same action set).
func (x *xlate) resubmit(a openflow.ActionNXResubmit) {
	x.depth++
	defer func() { x.depth-- }()
	if x.depth > maxDepth {
		x.err = errDepth
		return
	}
	table := a.Table
	if table == openflow.NXTableCurrent {
		table = x.tableID
	}
	if int(table) >= len(x.p.tables) {
		return
	}
	in := x.cur.InPort
	if a.InPort != openflow.PortInPort {
		x.cur.InPort = a.InPort
		x.stale = true
	}
	tid, cookie, miss, cur := x.tableID, x.cookie, x.miss, x.rule
	if x.set == nil { // a packet-out's actions
		var set actionSet
		x.set = &set
		defer func() { x.set = nil }()
	}
	x.tracef(TraceNote, x.tableID, "resubmit to table %d", table)
	x.tables(table)
	x.cur.InPort = in
	x.stale = true
	x.tableID, x.cookie, x.miss, x.rule = tid, cookie, miss, cur
}

// apply executes an action list on the current packet.
func (x *xlate) apply(as openflow.Actions) {
	for _, a := range as {
		if x.err != nil {
			return
		}
		if x.selectFrozen {
			x.afterSelect = true
			return
		}
		switch a := a.(type) {
		case openflow.ActionOutput:
			x.output(a.Port, a.MaxLen)
		case openflow.ActionGroup:
			x.group(a.GroupID)
		case openflow.ActionSetField:
			if a.Field.IsBasic() && a.Field.Mask == nil {
				x.setField(a.Field)
			} else {
				x.load(a.Field)
			}
		case openflow.ActionNXRegLoad2:
			x.load(a.Field)
		case openflow.ActionNXRegLoad:
			x.writeBits(subfield(a.Dst), binary.BigEndian.AppendUint64(nil, a.Value))
		case openflow.ActionNXRegMove:
			x.move(subfield(a.Src), subfield(a.Dst))
		case openflow.ActionNXCT:
			x.conntrack(ctSpecOf(a))
		case openflow.ActionNXCTClear:
			x.ctClear()
		case openflow.ActionNXResubmit:
			x.resubmit(a)
		case openflow.ActionNXOutputReg:
			r := subfield(a.Src)
			x.output(uint32(bitsValue(x.readField(r.field), r.ofs, r.nbits)), a.MaxLen)
		case openflow.ActionNXNote:
			// A comment for people reading the flows, or the reason
			// the rule's drops are counted under (dropreason.go).
			x.noteDropReason(a.Note)
		case openflow.ActionNXConjunction:
			// Conjunction in a PACKET_OUT does nothing (Open vSwitch
			// likewise).
		case openflow.ActionNXLearn:
			x.learn(a)
		case openflow.ActionNXDecTTL:
			x.apply(openflow.Actions{openflow.ActionDecNWTTL{}})
		case openflow.ActionPushVLAN:
			x.pushVLAN(a.EtherType)
		case openflow.ActionPopVLAN:
			x.popVLAN()
		case openflow.ActionDecNWTTL:
			// The datapath drops (and counts) a packet whose TTL runs
			// out; TTL is not part of any decision here.
			if x.l3Unknown("dec_ttl") {
				return
			}
			x.acts = append(x.acts, flow.DecTTL{})
			x.cur.NwTTL--
			x.ttlTouched = true
		case openflow.ActionSetNWTTL:
			x.setNWTTL(a.TTL)
		case openflow.ActionPushPBB:
			x.pushPBB()
		case openflow.ActionPopPBB:
			x.popPBB()
		case openflow.ActionPushMPLS:
			x.pushMPLS(a.EtherType)
		case openflow.ActionPopMPLS:
			x.popMPLS(a.EtherType)
		case openflow.ActionSetMPLSTTL:
			if x.isMPLS() {
				x.acts = append(x.acts, flow.SetMPLSTTL{TTL: a.TTL})
				x.touchMPLSTTL()
			}
		case openflow.ActionDecMPLSTTL:
			if x.isMPLS() {
				x.acts = append(x.acts, flow.DecMPLSTTL{})
				x.touchMPLSTTL()
			}
		case openflow.ActionCopyTTLOut:
			if x.isMPLS() {
				x.acts = append(x.acts, flow.CopyTTLOut{})
				x.touchMPLSTTL()
			}
		case openflow.ActionCopyTTLIn:
			if x.isMPLS() {
				x.acts = append(x.acts, flow.CopyTTLIn{})
			}
		}
	}
}

// isMPLS reports whether the current packet is MPLS; the MPLS TTL actions
// leave other packets alone (as Open vSwitch does), so the EtherType
// joins the mask. The TTLs they change are not match fields: the key
// needs no update.
func (x *xlate) isMPLS() bool {
	x.need(&maskEthType)
	if mplsType(x.cur.EthType) {
		return true
	}
	x.tracef(TraceNote, x.tableID, "MPLS TTL action ignored: not an MPLS packet")
	return false
}

// touchMPLSTTL notes a TTL change of the top entry for restore, unless
// the entry was pushed in this branch (its pop undoes it).
func (x *xlate) touchMPLSTTL() {
	if x.mplsPushes <= x.branchPushes {
		x.mplsTTLTouched = true
	}
}

// unknownLSE marks a popped entry whose value the key did not hold (the
// TTL of an entry is never 0 on the wire... but may be: the marker is
// out of a 32-bit entry's range).
const unknownLSE = ^uint32(0)

func mplsType(t uint16) bool { return t == 0x8847 || t == 0x8848 }

// l3Unknown reports (and makes the translation fail with errRecirc) when
// an action needs the L3/L4 headers of a packet whose MPLS entry was
// popped.
func (x *xlate) l3Unknown(what string) bool {
	if !x.popped || mplsType(x.cur.EthType) {
		return false
	}
	x.tracef(TraceNote, x.tableID, "%s after pop_mpls: the headers behind the label are not known: drop", what)
	x.err = errRecirc
	return true
}

// pushMPLS puts a label stack entry in front of the L3 header, valued as
// Open vSwitch does: a copy of the outer entry (BOS cleared) on an MPLS
// packet; otherwise label 0 (IPv4 explicit null) or 2 (IPv6), TC the low
// bits of the DSCP and TTL the IP TTL (64 for non-IP), BOS set. The
// values read from the packet join the mask.
func (x *xlate) pushMPLS(ethType uint16) {
	if x.l3Unknown("push_mpls") {
		return
	}
	x.need(&maskEthType)
	x.commit() // rewrites of the headers the label now covers go first
	k := &x.cur
	var lse uint32
	if mplsType(k.EthType) {
		if x.popped {
			x.tracef(TraceNote, x.tableID, "push_mpls after pop_mpls: the entry to copy is not known: drop")
			x.err = errRecirc
			return
		}
		x.need(&maskLSE)
		lse = k.MPLSLSE() &^ 0x100
	} else {
		label, tc, ttl := uint32(0), uint32(0), uint32(64)
		if k.EthType == 0x86dd {
			label = 2
		}
		if k.EthType == 0x0800 || k.EthType == 0x86dd {
			x.need(&maskDSCP)
			x.need(&maskNwTTL)
			tc = uint32(k.NwTOS>>2) & 7
			if k.NwTTL != 0 {
				ttl = uint32(k.NwTTL)
			}
		}
		lse = label<<12 | tc<<9 | 1<<8 | ttl
		x.encapsulated()
	}
	x.acts = append(x.acts, flow.PushMPLS{EthType: ethType, LSE: lse})
	k.EthType = ethType
	k.SetMPLSLSE(lse)
	x.dp.EthType, x.dpLSE = ethType, lse
	x.written.or(&maskEthType)
	x.written.or(&maskLSE)
	x.mplsPushes++
	x.stale = true
}

// encapsulated clears the key's L3/L4 fields: after a push the header
// they came from is payload.
func (x *xlate) encapsulated() {
	k := &x.cur
	*k = flow.Key{InPort: k.InPort, EthSrc: k.EthSrc, EthDst: k.EthDst, VlanTCI: k.VlanTCI, EthType: k.EthType, TunID: k.TunID,
		TunSrc: k.TunSrc, TunDst: k.TunDst, TunTOS: k.TunTOS, TunTTL: k.TunTTL, TunFlags: k.TunFlags}
	x.written.or(&maskL3L4)
}

// pushPBB encapsulates the frame in an 802.1ah I-TAG with I-SID 0; the
// backbone addresses start as the frame's (a set_field on eth_dst/eth_src
// after it rewrites them). The customer frame is payload from then on.
func (x *xlate) pushPBB() {
	if x.l3Unknown("push_pbb") {
		return
	}
	x.commit()
	x.encapsulated()
	x.cur.EthType = 0x88e7
	x.written.or(&maskEthType)
	x.acts = append(x.acts, flow.PushPBB{})
	x.dp.EthType = 0x88e7
	x.pbbPushes++
	x.stale = true
}

// popPBB decapsulates a PBB frame; the customer frame's addresses and
// EtherType are not in the key (popped, as after pop_mpls).
func (x *xlate) popPBB() {
	x.need(&maskEthType)
	if x.cur.EthType != 0x88e7 {
		x.tracef(TraceNote, x.tableID, "pop_pbb ignored: not a PBB frame")
		return
	}
	x.commit()
	x.acts = append(x.acts, flow.PopPBB{})
	x.pbbPushes--
	x.poppedTo(0)
	x.l2Unknown = true // the customer addresses are now the frame's
}

// poppedTo leaves the current packet with EtherType ethType after a pop:
// what the popped header covered is not in the key (popped).
func (x *xlate) poppedTo(ethType uint16) {
	x.cur.EthType = ethType
	x.cur.SetMPLSLSE(0)
	x.dp.EthType, x.dpLSE = ethType, 0
	x.written.or(&maskEthType)
	x.written.or(&maskLSE)
	x.popped = true
	x.stale = true
}

// popMPLS removes the top label stack entry of an MPLS packet; ethType is
// what follows it. What the entry covered is not in the key (popped).
func (x *xlate) popMPLS(ethType uint16) {
	x.need(&maskEthType)
	if !mplsType(x.cur.EthType) {
		x.tracef(TraceNote, x.tableID, "pop_mpls ignored: not an MPLS packet")
		return
	}
	x.commit() // rewrites of the popped entry are moot, but keep the order
	lse := x.cur.MPLSLSE()
	if x.popped {
		lse = unknownLSE // an entry below the top: not in the key
	} else {
		x.need(&maskLSE)
	}
	x.popLSE = append(x.popLSE, lse)
	x.acts = append(x.acts, flow.PopMPLS{EthType: ethType})
	x.mplsPushes--
	x.poppedTo(ethType)
}

// setNWTTL sets the IPv4 TTL or IPv6 hop limit. On other packets it
// does nothing (as in Open vSwitch), so whether it is emitted depends on
// the EtherType, which joins the mask.
func (x *xlate) setNWTTL(ttl uint8) {
	x.need(&maskEthType)
	if x.cur.EthType != 0x0800 && x.cur.EthType != 0x86dd {
		x.tracef(TraceNote, x.tableID, "set_nw_ttl ignored: not an IP packet")
		return
	}
	if x.l3Unknown("set_nw_ttl") {
		return
	}
	x.acts = append(x.acts, flow.SetTTL{TTL: ttl})
	x.cur.NwTTL = ttl
	x.ttlTouched = true
}

// output sends the current packet to port.
func (x *xlate) output(port uint32, maxLen uint16) {
	switch port {
	case openflow.PortInPort:
		x.emitOutput(x.cur.InPort, true)
	case openflow.PortTable:
		if !x.opts.PacketOut {
			return // refused at FLOW_MOD; unreachable
		}
		x.depth++
		if x.depth > maxDepth {
			x.err = errDepth
			return
		}
		saved := x.save()
		x.tracef(TraceNote, 0, "output:TABLE: resubmit to table 0")
		x.pipeline(0)
		x.restore(saved)
		x.depth--
	case openflow.PortNormal:
		x.normal()
	case openflow.PortFlood, openflow.PortAll:
		x.flood(port == openflow.PortFlood)
	case openflow.PortController:
		x.controller(maxLen)
	case openflow.PortAny:
	default:
		x.emitOutput(port, false)
	}
}

// emitOutput emits the pending rewrites and an output to port. Output to
// the packet's own in_port is dropped unless asked for with IN_PORT.
func (x *xlate) emitOutput(port uint32, inPortOK bool) {
	if port == x.cur.InPort && !inPortOK {
		x.tracef(TraceNote, x.tableID, "output:%s skipped: it is the in_port (use IN_PORT)", openflow.PortName(port))
		return
	}
	if port == openflow.PortLocal {
		x.commit()
		x.acts = append(x.acts, flow.Local{})
		return
	}
	pt := x.p.ports[port]
	if pt == nil {
		x.tracef(TraceNote, x.tableID, "output:%d dropped: no such port", port)
		return
	}
	if !pt.canForward() {
		x.tracef(TraceNote, x.tableID, "output:%d dropped: port down or no_fwd", port)
		return
	}
	x.commit()
	if pt.Tunnel != nil {
		x.need(&maskTunID) // unless set_field tunnel_id wrote it
		st := flow.SetTunnel{VNI: x.cur.TunID, Remote: pt.Tunnel.Remote, Local: pt.Tunnel.Local,
			TOS: pt.Tunnel.TOS, TTL: pt.Tunnel.TTL, InheritTOS: pt.Tunnel.InheritTOS}
		if x.lastTunnel == nil || *x.lastTunnel != st {
			x.acts = append(x.acts, st)
			x.lastTunnel = &st
		}
	}
	x.acts = append(x.acts, flow.Output{Port: port})
}

// flood outputs to every port but the in_port (FLOOD also skips
// PortConfigNoFlood ports).
func (x *xlate) flood(skipNoFlood bool) {
	for _, no := range x.p.portOrder {
		pt := x.p.ports[no]
		if no == x.cur.InPort || (skipNoFlood && pt.Config&PortConfigNoFlood != 0) || !pt.canForward() {
			continue
		}
		x.emitOutput(no, false)
	}
}

// setField rewrites a field of the current packet. Fields whose
// prerequisites the packet does not meet are left alone (a bucket may be
// shared by flows of several protocols), as Open vSwitch does.
func (x *xlate) setField(o openflow.OXM) {
	k := &x.cur
	v := o.Uint()
	var m words
	switch o.Field {
	case openflow.FieldEthSrc, openflow.FieldEthDst, openflow.FieldVLANVID, openflow.FieldVLANPCP, openflow.FieldTunnelID,
		openflow.FieldMPLSLabel, openflow.FieldMPLSTC, openflow.FieldMPLSBOS, openflow.FieldPBBISID:
	default:
		if x.l3Unknown("set_field " + o.Field.String()) {
			return
		}
	}
	switch o.Field {
	case openflow.FieldEthSrc:
		copy(k.EthSrc[:], o.Value)
		x.dirty |= dEthSrc
		m = maskEthSrc
	case openflow.FieldEthDst:
		copy(k.EthDst[:], o.Value)
		x.dirty |= dEthDst
		m = maskEthDst
	case openflow.FieldVLANVID, openflow.FieldVLANPCP:
		x.need(&maskCFI)
		if k.VlanTCI&flow.VLANCFI == 0 {
			return
		}
		if o.Field == openflow.FieldVLANVID {
			k.VlanTCI = k.VlanTCI&^0xfff | uint16(v)&0xfff
			m = fieldMask(openflow.FieldVLANVID)
		} else {
			k.VlanTCI = k.VlanTCI&^0xe000 | uint16(v&7)<<13
			m = fieldMask(openflow.FieldVLANPCP)
		}
		x.dirty |= dVLAN
	case openflow.FieldTunnelID:
		k.TunID = uint32(v)
		m = maskTunID
	case openflow.FieldIPv4Src, openflow.FieldIPv4Dst, openflow.FieldIPv6Src, openflow.FieldIPv6Dst,
		openflow.FieldIPDSCP, openflow.FieldIPECN:
		x.need(&maskEthType)
		want := uint16(0x0800)
		if o.Field == openflow.FieldIPv6Src || o.Field == openflow.FieldIPv6Dst {
			want = 0x86dd
		}
		if (o.Field == openflow.FieldIPDSCP || o.Field == openflow.FieldIPECN) && k.EthType == 0x86dd {
			want = 0x86dd
		}
		if k.EthType != want {
			x.tracef(TraceNote, x.tableID, "set_field %s ignored: not an IP packet of that version", o.Field)
			return
		}
		var meta uint64
		place(k, &meta, o.Field, o.Value)
		m = fieldMask(o.Field)
		switch o.Field {
		case openflow.FieldIPv4Src, openflow.FieldIPv6Src:
			x.dirty |= dIPSrc
		case openflow.FieldIPv4Dst, openflow.FieldIPv6Dst:
			x.dirty |= dIPDst
		case openflow.FieldIPDSCP:
			x.dirty |= dDSCP
		default:
			x.dirty |= dECN
		}
	case openflow.FieldTCPSrc, openflow.FieldTCPDst, openflow.FieldUDPSrc, openflow.FieldUDPDst,
		openflow.FieldSCTPSrc, openflow.FieldSCTPDst:
		x.need(&maskEthType)
		x.need(&maskIPProto)
		proto := uint8(6)
		switch o.Field {
		case openflow.FieldUDPSrc, openflow.FieldUDPDst:
			proto = 17
		case openflow.FieldSCTPSrc, openflow.FieldSCTPDst:
			proto = 132 // the fast path recomputes the CRC32c (bpf/lib/crc32c.h)
		}
		if (k.EthType != 0x0800 && k.EthType != 0x86dd) || k.NwProto != proto {
			x.tracef(TraceNote, x.tableID, "set_field %s ignored: packet is not of that protocol", o.Field)
			return
		}
		if o.Field == openflow.FieldTCPSrc || o.Field == openflow.FieldUDPSrc || o.Field == openflow.FieldSCTPSrc {
			k.TpSrc, m = uint16(v), maskTpSrc
			x.dirty |= dTpSrc
		} else {
			k.TpDst, m = uint16(v), maskTpDst
			x.dirty |= dTpDst
		}
	case openflow.FieldPBBISID:
		x.need(&maskEthType)
		if k.EthType != 0x88e7 {
			x.tracef(TraceNote, x.tableID, "set_field pbb_isid ignored: not a PBB frame")
			return
		}
		var meta uint64
		place(k, &meta, o.Field, o.Value)
		m = fieldMask(o.Field)
		// Emitted at once: the I-SID is written whole, whatever the frame had.
		x.acts = append(x.acts, flow.SetPBBISID{ISID: uint32(v)})
	case openflow.FieldMPLSLabel, openflow.FieldMPLSTC, openflow.FieldMPLSBOS:
		x.need(&maskEthType)
		if !mplsType(k.EthType) {
			x.tracef(TraceNote, x.tableID, "set_field %s ignored: not an MPLS packet", o.Field)
			return
		}
		var meta uint64
		place(k, &meta, o.Field, o.Value)
		m = fieldMask(o.Field)
		x.dirty |= map[openflow.Field]uint16{openflow.FieldMPLSLabel: dMPLSLabel, openflow.FieldMPLSTC: dMPLSTC,
			openflow.FieldMPLSBOS: dMPLSBOS}[o.Field]
	case openflow.FieldIPv6NDTarget, openflow.FieldIPv6NDSLL, openflow.FieldIPv6NDTLL:
		// Only an NS or NA (code 0) has the field; the fast path's
		// parser found it there, so the key's ND bytes are the packet's.
		x.need(&maskEthType)
		x.need(&maskIPProto)
		x.need(&maskTpSrc)
		x.need(&maskTpDst)
		types := []uint16{135, 136}
		switch o.Field {
		case openflow.FieldIPv6NDSLL:
			types = types[:1]
		case openflow.FieldIPv6NDTLL:
			types = types[1:]
		}
		if k.EthType != 0x86dd || k.NwProto != 58 || k.TpDst != 0 || (k.TpSrc != types[0] && k.TpSrc != types[len(types)-1]) {
			x.tracef(TraceNote, x.tableID, "set_field %s ignored: not a neighbour solicitation/advertisement with it", o.Field)
			return
		}
		var meta uint64
		place(k, &meta, o.Field, o.Value)
		m = fieldMask(o.Field)
		if o.Field == openflow.FieldIPv6NDTarget {
			x.dirty |= dNDTarget
		} else {
			x.dirty |= dNDLL
		}
	default:
		return // refused at FLOW_MOD / GROUP_MOD
	}
	x.written.or(&m)
	x.stale = true
}

func (x *xlate) pushVLAN(tpid uint16) {
	x.need(&maskCFI)
	if x.cur.VlanTCI&flow.VLANCFI != 0 {
		// A second tag: the key keeps one, the outer, which is a copy
		// of the inner one (OpenFlow 1.3 push_vlan semantics).
		x.commit()
		x.need(&maskTCI)
		x.acts = append(x.acts, flow.PushVLAN{TPID: tpid, TCI: x.cur.VlanTCI &^ flow.VLANCFI})
		x.dpTagged, x.dpKnown, x.tpid = true, true, tpid
		x.emitted |= dVLAN
		return
	}
	x.cur.VlanTCI = flow.VLANCFI
	x.tpid = tpid
	x.written.or(&maskTCI)
	x.dirty |= dVLAN
	x.stale = true
}

func (x *xlate) popVLAN() {
	x.need(&maskCFI)
	if x.cur.VlanTCI&flow.VLANCFI == 0 {
		return
	}
	x.cur.VlanTCI = 0
	x.written.or(&maskTCI)
	x.dirty |= dVLAN
	x.stale = true
}

// commit emits the pending rewrites so that the datapath's copy of the
// packet equals the pipeline's before an output.
func (x *xlate) commit() {
	d := x.dirty
	if d == 0 {
		return
	}
	k := &x.cur
	// An emitted value that was not written by this translation (a
	// bucket's rewrite being undone, a copied VLAN PCP) comes from the
	// packet: it is part of the decision.
	v6 := k.EthType == 0x86dd // pinned by the set_field that made IP fields dirty
	for _, fm := range commitMasks {
		if d&fm.bit != 0 {
			if v6 && fm.v6 != nil {
				x.need(fm.v6)
			} else {
				x.need(fm.mask)
			}
		}
	}
	if d&dEthSrc != 0 {
		x.acts = append(x.acts, flow.SetEthSrc{MAC: net.HardwareAddr(append([]byte(nil), k.EthSrc[:]...))})
	}
	if d&dEthDst != 0 {
		x.acts = append(x.acts, flow.SetEthDst{MAC: net.HardwareAddr(append([]byte(nil), k.EthDst[:]...))})
	}
	if d&dVLAN != 0 {
		if !x.dpKnown {
			x.needInput(&maskCFI)
		}
		if x.dpTagged {
			x.acts = append(x.acts, flow.PopVLAN{})
		}
		x.dpTagged, x.dpKnown = k.VlanTCI&flow.VLANCFI != 0, true
		if x.dpTagged {
			x.need(&maskTCI)
			x.acts = append(x.acts, flow.PushVLAN{TPID: x.tpid, TCI: k.VlanTCI &^ flow.VLANCFI})
		}
	}
	addr := func(b [16]byte) netip.Addr {
		if v6 {
			return netip.AddrFrom16(b)
		}
		return netip.AddrFrom4([4]byte(b[:4]))
	}
	if d&dIPSrc != 0 {
		x.acts = append(x.acts, flow.SetIPSrc{Addr: addr(k.IPSrc)})
	}
	if d&dIPDst != 0 {
		x.acts = append(x.acts, flow.SetIPDst{Addr: addr(k.IPDst)})
	}
	if d&dTpSrc != 0 {
		x.acts = append(x.acts, flow.SetTpSrc{Port: k.TpSrc})
	}
	if d&dTpDst != 0 {
		x.acts = append(x.acts, flow.SetTpDst{Port: k.TpDst})
	}
	if d&dDSCP != 0 {
		x.acts = append(x.acts, flow.SetDSCP{DSCP: k.NwTOS >> 2})
	}
	if d&dECN != 0 {
		x.acts = append(x.acts, flow.SetECN{ECN: k.NwTOS & 3})
	}
	if m := d & (dMPLSLabel | dMPLSTC | dMPLSBOS); m != 0 {
		var bits uint32
		for _, f := range []struct {
			d uint16
			f openflow.Field
		}{{dMPLSLabel, openflow.FieldMPLSLabel}, {dMPLSTC, openflow.FieldMPLSTC}, {dMPLSBOS, openflow.FieldMPLSBOS}} {
			if m&f.d != 0 {
				sh, b := lseField(f.f)
				bits |= b << sh
			}
		}
		x.acts = append(x.acts, flow.SetMPLS{LSE: k.MPLSLSE() & bits, Mask: bits})
	}
	if d&dTTL != 0 {
		x.acts = append(x.acts, flow.SetTTL{TTL: k.NwTTL})
	}
	if d&dMPLSTTL != 0 {
		x.acts = append(x.acts, flow.SetMPLSTTL{TTL: uint8(k.MPLSLSE())})
	}
	if d&dNDTarget != 0 {
		x.acts = append(x.acts, flow.SetNDTarget{Addr: netip.AddrFrom16(k.NDTarget)})
	}
	if d&dNDLL != 0 {
		lla := k.ArpSHA // the NS's source link-layer address
		if k.TpSrc == 136 {
			lla = k.ArpTHA // the NA's target link-layer address
		}
		x.acts = append(x.acts, flow.SetNDLL{MAC: net.HardwareAddr(append([]byte(nil), lla[:]...))})
	}
	dp := &x.dp
	dp.EthSrc, dp.EthDst, dp.VlanTCI = k.EthSrc, k.EthDst, k.VlanTCI
	if mplsType(k.EthType) {
		// The label covers the IP header: the datapath's copy of it
		// is what it was before the push.
		x.dpLSE = k.MPLSLSE()
	} else {
		dp.NDTarget, dp.ArpSHA, dp.ArpTHA = k.NDTarget, k.ArpSHA, k.ArpTHA
		dp.IPSrc, dp.IPDst, dp.TpSrc, dp.TpDst, dp.NwTOS = k.IPSrc, k.IPDst, k.TpSrc, k.TpDst, k.NwTOS
	}
	x.emitted |= d
	x.dirty = 0
}

// differs reports which of the fields in bits have a different value in
// the datapath's copy than in the pipeline's packet. Comparing looks at
// the values, so the pipeline's side goes into the mask.
func (x *xlate) differs(bits uint16) uint16 {
	var out uint16
	k, dp := &x.cur, &x.dp
	check := func(bit uint16, m *words, same bool) {
		if bits&bit == 0 {
			return
		}
		x.need(m)
		if !same {
			out |= bit
		}
	}
	check(dEthSrc, &maskEthSrc, k.EthSrc == dp.EthSrc)
	check(dEthDst, &maskEthDst, k.EthDst == dp.EthDst)
	check(dVLAN, &maskTCI, k.VlanTCI == dp.VlanTCI && (k.VlanTCI&flow.VLANCFI != 0) == x.dpTagged)
	check(dIPSrc, &maskIPSrc, k.IPSrc == dp.IPSrc)
	check(dIPDst, &maskIPDst, k.IPDst == dp.IPDst)
	check(dTpSrc, &maskTpSrc, k.TpSrc == dp.TpSrc)
	check(dTpDst, &maskTpDst, k.TpDst == dp.TpDst)
	check(dDSCP, &maskDSCP, k.NwTOS>>2 == dp.NwTOS>>2)
	check(dECN, &maskECN, k.NwTOS&3 == dp.NwTOS&3)
	check(dNDTarget, &maskNDTarget, k.NDTarget == dp.NDTarget)
	check(dMPLSLabel, &maskMPLSLabel, k.MPLSLSE()>>12 == x.dpLSE>>12)
	check(dMPLSTC, &maskMPLSTC, k.MPLSLSE()>>9&7 == x.dpLSE>>9&7)
	check(dMPLSBOS, &maskMPLSBOS, k.MPLSLSE()>>8&1 == x.dpLSE>>8&1)
	check(dNDLL, &maskNDLL, k.ArpSHA == dp.ArpSHA && k.ArpTHA == dp.ArpTHA)
	return out
}

var (
	maskDSCP      = fieldMask(openflow.FieldIPDSCP)
	maskECN       = fieldMask(openflow.FieldIPECN)
	maskIPv4Src   = fieldMask(openflow.FieldIPv4Src)
	maskIPv4Dst   = fieldMask(openflow.FieldIPv4Dst)
	maskNDTarget  = fieldMask(openflow.FieldIPv6NDTarget)
	maskMPLSLabel = fieldMask(openflow.FieldMPLSLabel)
	maskMPLSTC    = fieldMask(openflow.FieldMPLSTC)
	maskMPLSBOS   = fieldMask(openflow.FieldMPLSBOS)
	maskNwTTL     = func() words { k := flow.Key{NwTTL: 0xff}; return keyWords(&k) }()
	// maskLSE is the whole top label stack entry, TTL included.
	maskLSE    = func() words { var k flow.Key; k.SetMPLSLSE(^uint32(0)); return keyWords(&k) }()
	maskLSETTL = func() words { var k flow.Key; k.SetMPLSLSE(0xff); return keyWords(&k) }()
	maskNDLL   = func() words {
		m := fieldMask(openflow.FieldIPv6NDSLL)
		o := fieldMask(openflow.FieldIPv6NDTLL)
		m.or(&o)
		return m
	}()
	commitMasks = []struct {
		bit      uint16
		mask, v6 *words
	}{{dEthSrc, &maskEthSrc, nil}, {dEthDst, &maskEthDst, nil}, {dIPSrc, &maskIPv4Src, &maskIPSrc},
		{dIPDst, &maskIPv4Dst, &maskIPDst}, {dTpSrc, &maskTpSrc, nil}, {dTpDst, &maskTpDst, nil},
		{dDSCP, &maskDSCP, nil}, {dECN, &maskECN, nil}, {dNDTarget, &maskNDTarget, nil}, {dNDLL, &maskNDLL, nil},
		{dMPLSLabel, &maskMPLSLabel, nil}, {dMPLSTC, &maskMPLSTC, nil}, {dMPLSBOS, &maskMPLSBOS, nil},
		{dTTL, &maskNwTTL, nil}, {dMPLSTTL, &maskLSETTL, nil}}
)

// branch is the pipeline packet's state, saved around a group bucket or
// a packet-out resubmit: each sees its own copy of the packet.
type branch struct {
	cur     flow.Key
	curW    words
	stale   bool
	written words
	dirty   uint16
	emitted uint16
	tpid    uint16
	table   uint8
	cookie  uint64
	miss    bool

	mplsPushes, branchPushes, popLen   int
	pbbPushes                          int
	popped, ttlTouched, mplsTTLTouched bool
	l2Unknown                          bool
}

func (x *xlate) save() branch {
	b := branch{cur: x.cur, curW: x.curW, stale: x.stale, written: x.written, dirty: x.dirty,
		emitted: x.emitted, tpid: x.tpid, table: x.tableID, cookie: x.cookie, miss: x.miss,
		mplsPushes: x.mplsPushes, branchPushes: x.branchPushes, popLen: len(x.popLSE), popped: x.popped, pbbPushes: x.pbbPushes,
		ttlTouched: x.ttlTouched, mplsTTLTouched: x.mplsTTLTouched, l2Unknown: x.l2Unknown}
	x.emitted = 0
	x.branchPushes, x.ttlTouched, x.mplsTTLTouched = x.mplsPushes, false, false
	return b
}

// restore returns to a saved packet. Rewrites emitted meanwhile changed
// the datapath's copy, so they are marked pending again: the next output
// re-emits the saved values.
func (x *xlate) restore(b branch) {
	x.undoStructure(b)
	x.cur, x.curW, x.stale, x.written = b.cur, b.curW, b.stale, b.written
	// Pending before and untouched: still pending. Emitted in the branch:
	// pending again unless the datapath already has the saved value.
	x.dirty = b.dirty&^x.emitted | x.differs(x.emitted)
	x.emitted = b.emitted | x.emitted
	x.tpid, x.tableID, x.cookie, x.miss = b.tpid, b.table, b.cookie, b.miss
	// TTLs the branch changed go back to the saved packet's: values
	// from the packet, so they join the mask (commit).
	if x.ttlTouched {
		x.dirty |= dTTL
	}
	if x.mplsTTLTouched {
		x.dirty |= dMPLSTTL
	}
	x.ttlTouched, x.mplsTTLTouched = x.ttlTouched || b.ttlTouched, x.mplsTTLTouched || b.mplsTTLTouched
	x.branchPushes = b.branchPushes
}

// undoStructure emits the pops and pushes that give the datapath back the
// label stack the saved packet had: entries the branch pushed are popped,
// entries it popped are pushed back (known only for the one that was on
// top: a deeper one makes the translation fail with errRecirc).
func (x *xlate) undoStructure(b branch) {
	if x.pbbPushes != b.pbbPushes && x.mplsPushes != b.mplsPushes {
		// Which went on first is not recorded: not worth guessing.
		x.err = errRecirc
		return
	}
	for x.mplsPushes > b.mplsPushes {
		et := uint16(0x8847)
		if x.mplsPushes == b.mplsPushes+1 {
			et = b.cur.EthType
		}
		x.acts = append(x.acts, flow.PopMPLS{EthType: et})
		x.mplsPushes--
	}
	for x.mplsPushes < b.mplsPushes {
		lse := x.popLSE[len(x.popLSE)-1]
		x.popLSE = x.popLSE[:len(x.popLSE)-1]
		if lse == unknownLSE {
			x.err = errRecirc
			return
		}
		x.acts = append(x.acts, flow.PushMPLS{EthType: b.cur.EthType, LSE: lse})
		x.mplsPushes++
	}
	for x.pbbPushes > b.pbbPushes {
		x.acts = append(x.acts, flow.PopPBB{})
		x.pbbPushes--
	}
	if x.pbbPushes < b.pbbPushes {
		// The backbone addresses and I-SID of a popped I-TAG could be
		// pushed back, but not a B-VLAN: not worth guessing.
		x.err = errRecirc
		return
	}
	x.popLSE = x.popLSE[:b.popLen]
	x.popped, x.l2Unknown = b.popped, b.l2Unknown
	x.dp.EthType = b.cur.EthType
	if mplsType(b.cur.EthType) {
		x.dpLSE = b.cur.MPLSLSE()
	}
}

// actionSet is the OpenFlow action set, executed at the end of the
// pipeline in the spec's order (5.10): copy_ttl_in, pop (VLAN, MPLS), push (MPLS, VLAN),
// copy_ttl_out, dec_ttl (IP, MPLS), set (set_mpls_ttl, set_nw_ttl, then set_field),
// qos, group, output (output is ignored when a group is set).
type actionSet struct {
	copyIn     bool
	popMPLS    *openflow.ActionPopMPLS
	popPBB     bool
	pushMPLS   *openflow.ActionPushMPLS
	pushPBB    bool
	copyOut    bool
	decMPLSTTL bool
	setMPLSTTL *openflow.ActionSetMPLSTTL
	pop        bool
	push       *openflow.ActionPushVLAN
	decTTL     bool
	setTTL     *openflow.ActionSetNWTTL
	sets       []openflow.ActionSetField // one per field, in the order written
	group      *openflow.ActionGroup
	output     *openflow.ActionOutput
}

func (s *actionSet) empty() bool {
	return !s.pop && s.push == nil && !s.decTTL && s.setTTL == nil && len(s.sets) == 0 && s.group == nil && s.output == nil &&
		!s.copyIn && s.popMPLS == nil && s.pushMPLS == nil && !s.popPBB && !s.pushPBB && !s.copyOut && !s.decMPLSTTL && s.setMPLSTTL == nil
}

// write merges actions into the set: one action per type, and per field
// for set_field; later ones replace earlier ones.
func (s *actionSet) write(as openflow.Actions) {
	for _, a := range as {
		switch a := a.(type) {
		case openflow.ActionPopVLAN:
			s.pop = true
		case openflow.ActionPushVLAN:
			s.push = &a
		case openflow.ActionDecNWTTL:
			s.decTTL = true
		case openflow.ActionSetNWTTL:
			s.setTTL = &a
		case openflow.ActionCopyTTLIn:
			s.copyIn = true
		case openflow.ActionCopyTTLOut:
			s.copyOut = true
		case openflow.ActionPopMPLS:
			s.popMPLS = &a
		case openflow.ActionPushMPLS:
			s.pushMPLS = &a
		case openflow.ActionPopPBB:
			s.popPBB = true
		case openflow.ActionPushPBB:
			s.pushPBB = true
		case openflow.ActionDecMPLSTTL:
			s.decMPLSTTL = true
		case openflow.ActionSetMPLSTTL:
			s.setMPLSTTL = &a
		case openflow.ActionSetField:
			i := 0
			for ; i < len(s.sets); i++ {
				if s.sets[i].Field.Key() == a.Field.Key() {
					s.sets[i] = a
					break
				}
			}
			if i == len(s.sets) {
				s.sets = append(s.sets, a)
			}
		case openflow.ActionGroup:
			s.group = &a
		case openflow.ActionOutput:
			s.output = &a
		}
	}
}

// actions lists the set in execution order.
func (s *actionSet) actions() openflow.Actions {
	var as openflow.Actions
	if s.copyIn {
		as = append(as, openflow.ActionCopyTTLIn{})
	}
	if s.pop {
		as = append(as, openflow.ActionPopVLAN{})
	}
	if s.popMPLS != nil {
		as = append(as, *s.popMPLS)
	}
	if s.popPBB {
		as = append(as, openflow.ActionPopPBB{})
	}
	if s.pushMPLS != nil {
		as = append(as, *s.pushMPLS)
	}
	if s.pushPBB {
		as = append(as, openflow.ActionPushPBB{EtherType: 0x88e7})
	}
	if s.push != nil {
		as = append(as, *s.push)
	}
	if s.copyOut {
		as = append(as, openflow.ActionCopyTTLOut{})
	}
	if s.decTTL {
		as = append(as, openflow.ActionDecNWTTL{})
	}
	if s.decMPLSTTL {
		as = append(as, openflow.ActionDecMPLSTTL{})
	}
	if s.setMPLSTTL != nil {
		as = append(as, *s.setMPLSTTL)
	}
	if s.setTTL != nil {
		as = append(as, *s.setTTL)
	}
	for _, a := range s.sets {
		as = append(as, a)
	}
	if s.group != nil {
		as = append(as, *s.group)
	} else if s.output != nil {
		as = append(as, *s.output)
	}
	return as
}
