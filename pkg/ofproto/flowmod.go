package ofproto

import (
	"time"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// Removed is a flow entry that left its table, with what a FLOW_REMOVED
// reports. The daemon sends one for each with SendFlowRem().
type Removed struct {
	TableID     uint8
	Priority    uint16
	Cookie      uint64
	Reason      uint8 // openflow.FlowRemoved*
	Flags       uint16
	IdleTimeout uint16
	HardTimeout uint16
	Duration    time.Duration
	PacketCount uint64
	ByteCount   uint64
	Match       openflow.Match
}

// SendFlowRem reports whether the rule asked for a FLOW_REMOVED.
func (r Removed) SendFlowRem() bool { return r.Flags&openflow.FlowFlagSendFlowRem != 0 }

// Message builds the OFPT_FLOW_REMOVED.
func (r Removed) Message() *openflow.FlowRemoved {
	return &openflow.FlowRemoved{Cookie: r.Cookie, Priority: r.Priority, Reason: r.Reason, TableID: r.TableID,
		DurationSec: uint32(r.Duration / time.Second), DurationNsec: uint32(r.Duration % time.Second),
		IdleTimeout: r.IdleTimeout, HardTimeout: r.HardTimeout, PacketCount: r.PacketCount, ByteCount: r.ByteCount,
		Match: r.Match}
}

func removedOf(r *rule, reason uint8, now time.Time) Removed {
	return Removed{TableID: r.table, Priority: r.priority, Cookie: r.cookie, Reason: reason, Flags: r.flags,
		IdleTimeout: r.idle, HardTimeout: r.hard, Duration: now.Sub(r.created),
		PacketCount: r.packets.Load(), ByteCount: r.bytes.Load(), Match: r.match}
}

// FlowMod applies OFPT_FLOW_MOD and returns the rules a DELETE removed
// (reason DELETE; the daemon sends FLOW_REMOVED for those with
// SendFlowRem). Errors are *openflow.Error, ready for Reply:
//
//   - the codec's Validate (BAD_COMMAND, BAD_FLAGS, match and instruction
//     checks);
//   - table beyond NumTables: FLOW_MOD_FAILED/BAD_TABLE_ID; goto_table
//     beyond it: BAD_INSTRUCTION/BAD_TABLE_ID;
//   - a match field the datapath key lacks: BAD_MATCH/BAD_FIELD;
//   - meter instruction naming a meter that does not exist:
//     METER_MOD_FAILED/UNKNOWN_METER;
//   - an action the fast path cannot do (set_nw_ttl, MPLS, PBB, copy TTL):
//     BAD_ACTION/BAD_TYPE; set_field of a field it cannot rewrite:
//     BAD_ACTION/BAD_SET_TYPE; output:TABLE outside PACKET_OUT:
//     BAD_ACTION/BAD_OUT_PORT; a group that does not exist:
//     BAD_ACTION/BAD_OUT_GROUP;
//   - ADD with CHECK_OVERLAP over a same-priority rule: OVERLAP; a full
//     table: TABLE_FULL.
//
// ADD replaces a rule with identical match and priority (counters kept
// unless RESET_COUNTS). MODIFY and MODIFY_STRICT change the instructions
// of the selected rules (cookie, timeouts and flags stay; RESET_COUNTS
// clears counters) and add nothing when none is selected. BufferID is not
// looked at (the switch buffers nothing).
func (p *Pipeline) FlowMod(fm *openflow.FlowMod) ([]Removed, error) {
	if err := fm.Validate(); err != nil {
		return nil, err
	}
	isDelete := fm.Command == openflow.FlowDelete || fm.Command == openflow.FlowDeleteStrict
	if int(fm.TableID) >= p.cfg.NumTables && !(isDelete && fm.TableID == openflow.TableAll) {
		return nil, ofErr(openflow.ErrTypeFlowModFailed, openflow.FlowModBadTableID, "table %d of %d", fm.TableID, p.cfg.NumTables)
	}
	cm, err := compileMatch(fm.Match)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if isDelete {
		return p.deleteFlows(fm, cm), nil
	}
	if err := p.checkInstructions(fm); err != nil {
		return nil, err
	}
	switch fm.Command {
	case openflow.FlowAdd:
		return nil, p.addFlow(fm, cm)
	default:
		p.modifyFlows(fm, cm)
		return nil, nil
	}
}

func (p *Pipeline) addFlow(fm *openflow.FlowMod, cm *compiledMatch) error {
	t := p.tables[fm.TableID]
	if fm.Flags&openflow.FlowFlagCheckOverlap != 0 {
		for _, o := range t.rules {
			if o.priority == fm.Priority && o.cm.overlaps(cm) {
				return ofErr(openflow.ErrTypeFlowModFailed, openflow.FlowModOverlap,
					"overlaps priority=%d,%s", o.priority, o.match)
			}
		}
	}
	var c changeSet
	p.seq++
	r := &rule{table: fm.TableID, priority: fm.Priority, match: fm.Match, cm: cm, cookie: fm.Cookie,
		idle: fm.IdleTimeout, hard: fm.HardTimeout, flags: fm.Flags, seq: p.seq, created: p.cfg.Now(),
		miss: fm.Priority == 0 && len(cm.fields) == 0}
	r.setInstructions(fm.Instructions)
	r.modified.Store(r.created.UnixNano())
	old := t.byMatch[r.id()]
	if old == nil && len(t.rules) >= p.cfg.MaxRulesPerTable {
		return ofErr(openflow.ErrTypeFlowModFailed, openflow.FlowModTableFull, "table %d holds %d rules", t.id, len(t.rules))
	}
	p.holdRule(r)
	if old != nil {
		if fm.Flags&openflow.FlowFlagResetCounts == 0 {
			r.packets.Store(old.packets.Load())
			r.bytes.Store(old.bytes.Load())
			r.used.Store(old.used.Load())
		}
		r.seq = old.seq
		t.replace(old, r)
		p.releaseRule(old)
		c.addRule(old)
		if old.conjs != nil || r.conjs != nil {
			c.addTable(t.id) // conjunctions may complete now (conjunction.go)
		}
	} else {
		t.insert(r)
		p.nrules++
		c.addTable(t.id)
	}
	p.bumpWith(&c)
	return nil
}

func (r *rule) setInstructions(is openflow.Instructions) {
	r.insts = is
	r.groups, r.outPorts, r.meter, r.conjs = nil, nil, 0, nil
	for _, in := range is {
		var as openflow.Actions
		switch in := in.(type) {
		case openflow.InstMeter:
			r.meter = in.MeterID
		case openflow.InstApplyActions:
			as = in.Actions
		case openflow.InstWriteActions:
			as = in.Actions
		}
		for _, a := range as {
			switch a := a.(type) {
			case openflow.ActionGroup:
				r.groups = append(r.groups, a.GroupID)
			case openflow.ActionOutput:
				r.outPorts = append(r.outPorts, a.Port)
			case openflow.ActionNXConjunction:
				// The codec lets conjunction share its flow only with
				// other conjunctions and notes: a clause flow.
				r.conjs = append(r.conjs, a)
			}
		}
	}
}

// selected reports whether r is selected by a MODIFY/DELETE/stats request.
func selected(r *rule, cm *compiledMatch, strict bool, priority uint16, cookie, cookieMask uint64, outPort, outGroup uint32) bool {
	if r.cookie&cookieMask != cookie&cookieMask {
		return false
	}
	if strict {
		if r.priority != priority || !r.cm.sameAs(cm) {
			return false
		}
	} else if !r.cm.within(cm) {
		return false
	}
	if outPort != openflow.PortAny {
		found := false
		for _, p := range r.outPorts {
			if p == outPort {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	if outGroup != openflow.GroupAny {
		found := false
		for _, g := range r.groups {
			if g == outGroup {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func (p *Pipeline) modifyFlows(fm *openflow.FlowMod, cm *compiledMatch) {
	strict := fm.Command == openflow.FlowModifyStrict
	t := p.tables[fm.TableID]
	rs, ok := p.candidates(fm.TableID, cm, strict, fm.Priority, fm.Cookie, fm.CookieMask, openflow.GroupAny)
	if !ok {
		rs = append([]*rule(nil), t.rules...)
	}
	var c changeSet
	for _, r := range rs {
		if !selected(r, cm, strict, fm.Priority, fm.Cookie, fm.CookieMask, openflow.PortAny, openflow.GroupAny) {
			continue
		}
		// A new rule value, so that translations running on the old one
		// (and RuleRefs they handed out) keep a consistent view.
		n := &rule{table: r.table, priority: r.priority, match: r.match, cm: r.cm, cookie: r.cookie, idle: r.idle,
			hard: r.hard, flags: r.flags, miss: r.miss, seq: r.seq, created: r.created}
		n.setInstructions(fm.Instructions)
		if fm.Flags&openflow.FlowFlagResetCounts == 0 {
			n.packets.Store(r.packets.Load())
			n.bytes.Store(r.bytes.Load())
		}
		n.used.Store(r.used.Load())
		n.modified.Store(r.modified.Load())
		t.replace(r, n)
		c.addRule(r)
		if r.conjs != nil || n.conjs != nil {
			c.addTable(t.id) // conjunctions may complete now (conjunction.go)
		}
		for _, k := range learnKeys(n) {
			p.learners[k]++
		}
		p.releaseLearners(r)
	}
	if c.rules != nil {
		p.bumpWith(&c)
	}
}

func (p *Pipeline) deleteFlows(fm *openflow.FlowMod, cm *compiledMatch) []Removed {
	strict := fm.Command == openflow.FlowDeleteStrict
	now := p.cfg.Now()
	var out []Removed
	var c changeSet
	gone := func(r *rule) {
		c.addRule(r)
		out = append(out, removedOf(r, openflow.FlowRemovedDelete, now))
		p.releaseRule(r)
		p.nrules--
	}
	if rs, ok := p.candidates(fm.TableID, cm, strict, fm.Priority, fm.Cookie, fm.CookieMask, fm.OutGroup); ok {
		doomed := rs[:0]
		for _, r := range rs {
			if selected(r, cm, strict, fm.Priority, fm.Cookie, fm.CookieMask, fm.OutPort, fm.OutGroup) {
				doomed = append(doomed, r)
			}
		}
		p.removeRules(doomed)
		for _, r := range doomed {
			gone(r)
		}
	} else {
		for _, t := range p.tables {
			if fm.TableID != openflow.TableAll && t.id != fm.TableID {
				continue
			}
			for _, r := range t.removeIf(func(r *rule) bool {
				return selected(r, cm, strict, fm.Priority, fm.Cookie, fm.CookieMask, fm.OutPort, fm.OutGroup)
			}) {
				gone(r)
			}
		}
	}
	if len(out) > 0 {
		p.bumpWith(&c)
	}
	return out
}

// checkInstructions applies the checks the codec cannot know about: this
// pipeline's table count, meters, groups and what the fast path can do.
func (p *Pipeline) checkInstructions(fm *openflow.FlowMod) error {
	for _, in := range fm.Instructions {
		switch in := in.(type) {
		case openflow.InstGotoTable:
			if int(in.TableID) >= p.cfg.NumTables {
				return ofErr(openflow.ErrTypeBadInstruction, openflow.BadInstBadTableID, "goto_table:%d of %d tables", in.TableID, p.cfg.NumTables)
			}
		case openflow.InstMeter:
			if p.meters[in.MeterID] == nil {
				return ofErr(openflow.ErrTypeMeterModFailed, openflow.MeterModUnknownMeter, "meter %d does not exist", in.MeterID)
			}
		case openflow.InstApplyActions:
			if err := p.checkActions(in.Actions, false); err != nil {
				return err
			}
		case openflow.InstWriteActions:
			for _, a := range in.Actions {
				if sf, ok := a.(openflow.ActionSetField); a.Type() == openflow.ActionTypeExperimenter || (ok && (!sf.Field.IsBasic() || sf.Field.Mask != nil)) {
					return ofErr(openflow.ErrTypeBadAction, openflow.BadActionBadType, "%s in write_actions: only in apply_actions", a)
				}
			}
			if err := p.checkActions(in.Actions, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkActions refuses actions the fast path cannot replay and groups
// that do not exist. Callers hold p.mu (or, for packet-out, take it).
func (p *Pipeline) checkActions(as openflow.Actions, packetOut bool) error {
	for _, a := range as {
		if a.Type() == openflow.ActionTypeExperimenter {
			if err := checkNX(a); err != nil {
				return err
			}
			continue
		}
		switch a := a.(type) {
		case openflow.ActionOutput:
			if a.Port == openflow.PortTable && !packetOut {
				return ofErr(openflow.ErrTypeBadAction, openflow.BadActionBadOutPort, "output:TABLE is for PACKET_OUT only")
			}
			if a.Port == 0 || (a.Port > openflow.PortMax && a.Port < openflow.PortInPort) {
				return ofErr(openflow.ErrTypeBadAction, openflow.BadActionBadOutPort, "output:%d", a.Port)
			}
		case openflow.ActionGroup:
			if packetOut {
				p.mu.RLock()
			}
			g := p.groups[a.GroupID]
			if packetOut {
				p.mu.RUnlock()
			}
			if g == nil {
				return ofErr(openflow.ErrTypeBadAction, openflow.BadActionBadOutGroup, "group %d does not exist", a.GroupID)
			}
		case openflow.ActionSetField:
			if !a.Field.IsBasic() {
				if f := nxFields[a.Field.Key()]; f == nil || f.key {
					return ofErr(openflow.ErrTypeBadAction, openflow.BadActionBadSetType, "set_field %s: the fast path cannot rewrite it", a.Field.Key())
				}
				continue
			}
			if !settable(a.Field.Field) {
				return ofErr(openflow.ErrTypeBadAction, openflow.BadActionBadSetType, "set_field %s: the fast path cannot rewrite it", a.Field.Field)
			}
			if len(a.Field.Value) != a.Field.Field.Len() || (a.Field.Mask != nil && len(a.Field.Mask) != len(a.Field.Value)) {
				return ofErr(openflow.ErrTypeBadAction, openflow.BadActionBadSetArgument, "set_field %s", a.Field.Field)
			}
		case openflow.ActionSetQueue:
			// No port has queues: accepting set_queue and ignoring it
			// would hide that its traffic gets no QoS class.
			return ofErr(openflow.ErrTypeBadAction, openflow.BadActionBadQueue, "set_queue:%d: ports have no queues", a.QueueID)
		case openflow.ActionPushVLAN, openflow.ActionPushMPLS, openflow.ActionPushPBB, // EtherTypes: checked by the codec
			openflow.ActionPopVLAN, openflow.ActionDecNWTTL, openflow.ActionSetNWTTL, openflow.ActionPopMPLS, openflow.ActionSetMPLSTTL, openflow.ActionDecMPLSTTL, openflow.ActionCopyTTLIn,
			openflow.ActionCopyTTLOut, openflow.ActionPopPBB:
		default:
			return ofErr(openflow.ErrTypeBadAction, openflow.BadActionBadType, "%s: not supported by the fast path", a)
		}
	}
	return nil
}

// Settable reports whether set_field may rewrite f (what table features
// advertise for the set-field properties).
func Settable(f openflow.Field) bool { return settable(f) }

// settable reports whether set_field may rewrite f.
func settable(f openflow.Field) bool {
	switch f {
	case openflow.FieldEthSrc, openflow.FieldEthDst, openflow.FieldVLANVID, openflow.FieldVLANPCP,
		openflow.FieldIPDSCP, openflow.FieldIPECN, openflow.FieldIPv4Src, openflow.FieldIPv4Dst,
		openflow.FieldIPv6Src, openflow.FieldIPv6Dst, openflow.FieldTCPSrc, openflow.FieldTCPDst,
		openflow.FieldUDPSrc, openflow.FieldUDPDst, openflow.FieldSCTPSrc, openflow.FieldSCTPDst, openflow.FieldTunnelID,
		openflow.FieldIPv6NDTarget, openflow.FieldIPv6NDSLL, openflow.FieldIPv6NDTLL,
		openflow.FieldMPLSLabel, openflow.FieldMPLSTC, openflow.FieldMPLSBOS, openflow.FieldPBBISID:
		return true
	}
	return false
}

// checkNX checks a Nicira action against what translation and the fast
// path do (the codec has checked it as Open vSwitch does): fields read
// must be in the key or the registers, fields written must be registers,
// metadata or rewritable packet fields.
func checkNX(a openflow.Action) error {
	readable := func(k openflow.FieldKey) bool {
		if nxFields[k] != nil {
			return true
		}
		f, ok := openflow.BasicOf(k)
		return ok && (supported(f) || f == openflow.FieldMetadata)
	}
	writable := func(k openflow.FieldKey) bool {
		if f := nxFields[k]; f != nil {
			return !f.key
		}
		f, ok := openflow.BasicOf(k)
		return ok && (settable(f) || f == openflow.FieldMetadata)
	}
	badSet := func(k openflow.FieldKey) error {
		return ofErr(openflow.ErrTypeBadAction, openflow.BadActionBadSetType, "%s: the fast path cannot rewrite it", k)
	}
	switch a := a.(type) {
	case openflow.ActionNXCT:
		if a.Alg != 0 {
			return ofErr(openflow.ErrTypeBadAction, openflow.BadActionBadArgument, "ct(alg=%d): no connection tracking helpers (ALGs)", a.Alg)
		}
		if a.ZoneSrc != nil && !readable(a.ZoneSrc.Field) {
			return ofErr(openflow.ErrTypeBadAction, openflow.BadActionBadSetType, "ct zone from %s: not in the flow key", a.ZoneSrc.Field)
		}
	case openflow.ActionNXCTClear, openflow.ActionNXNote, openflow.ActionNXDecTTL:
	case openflow.ActionNXRegMove:
		if !readable(a.Src.Field) {
			return ofErr(openflow.ErrTypeBadAction, openflow.BadActionBadSetType, "move from %s: not in the flow key", a.Src.Field)
		}
		if !writable(a.Dst.Field) {
			return badSet(a.Dst.Field)
		}
	case openflow.ActionNXOutputReg:
		if !readable(a.Src.Field) {
			return ofErr(openflow.ErrTypeBadAction, openflow.BadActionBadSetType, "output from %s: not in the flow key", a.Src.Field)
		}
	case openflow.ActionNXRegLoad:
		if !writable(a.Dst.Field) {
			return badSet(a.Dst.Field)
		}
	case openflow.ActionNXRegLoad2:
		if !writable(a.Field.Key()) {
			return badSet(a.Field.Key())
		}
	case openflow.ActionNXResubmit:
		if a.CT {
			return ofErr(openflow.ErrTypeBadAction, openflow.BadActionBadExpType, "resubmit(,%d,ct): not supported", a.Table)
		}
	case openflow.ActionNXConjunction:
		// Checked by the codec as Open vSwitch does (1 ≤ k ≤ n, 2 ≤ n ≤
		// 64, alone with notes); a no-op when executed (a PACKET_OUT's).
	case openflow.ActionNXLearn:
		// The learned flow is checked like any FLOW_MOD when it is built
		// (learn.go); here: the sources are readable and a learned match
		// can be compiled (fields the datapath key has).
		for _, s := range a.Specs {
			if s.Imm == nil && !readable(s.Src.Field) {
				return ofErr(openflow.ErrTypeBadAction, openflow.BadActionBadSetType, "learn from %s: not in the flow key", s.Src.Field)
			}
			if s.Dst == openflow.NXLearnMatch && !readable(s.DstField.Field) && s.DstField.Field != (openflow.FieldKey{Class: openflow.ClassNXM0}) {
				return ofErr(openflow.ErrTypeBadAction, openflow.BadActionBadSetType, "learn a match on %s: not in the flow key", s.DstField.Field)
			}
			if s.Dst == openflow.NXLearnLoad && !writable(s.DstField.Field) {
				return badSet(s.DstField.Field)
			}
		}
	case openflow.ActionExperimenter:
		if a.Experimenter != openflow.ExperimenterNicira {
			return ofErr(openflow.ErrTypeBadAction, openflow.BadActionBadExperimenter, "experimenter 0x%08x", a.Experimenter)
		}
		return ofErr(openflow.ErrTypeBadAction, openflow.BadActionBadExpType, "%s: not supported", a)
	default:
		return ofErr(openflow.ErrTypeBadAction, openflow.BadActionBadExpType, "%s: not supported", a)
	}
	return nil
}
