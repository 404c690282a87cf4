package openflow

import "fmt"

// Validation of the Nicira actions as Open vSwitch checks them
// (ofp-actions.c: the decode_NXAST_*, check_* and ofpacts_verify*
// functions), each refusal with the OFPT_ERROR code it sends.

// validateNX checks one Nicira action in the context of the flow's match.
//
//   - move, load, set_field (REG_LOAD2) and ct's zone=FIELD[]: the bit
//     range inside the field (OFPBAC_BAD_SET_LEN), a writable
//     destination (OFPBAC_BAD_SET_ARGUMENT), an unknown field
//     (OFPBAC_BAD_SET_TYPE), a load value wider than its bits
//     (OFPBAC_BAD_ARGUMENT); fields whose prerequisites the match does not
//     establish: OFPBAC_MATCH_INCONSISTENT
//   - ct_mark and ct_label may only be written inside ct(exec(...)):
//     OFPBAC_BAD_SET_ARGUMENT elsewhere; nat is only valid inside ct:
//     OFPBAC_BAD_SET_ARGUMENT elsewhere
//   - ct: a flow that is not IPv4/IPv6, commit on a flow matching +inv,
//     alg=ftp without tcp or alg=tftp without udp:
//     OFPBAC_MATCH_INCONSISTENT; zone from a field of other than 16 bits:
//     OFPBAC_BAD_SET_LEN; nested actions other than a bare nat without
//     commit: OFPBAC_BAD_ARGUMENT
//   - nat: a flow that is not IP, or of the other family than its range:
//     OFPBAC_MATCH_INCONSISTENT; bad flags or ranges: OFPBAC_BAD_ARGUMENT
//   - resubmit(,T,ct) on a flow whose ct_state does not show a valid
//     connection: OFPBAC_MATCH_INCONSISTENT
//   - learn: see checkLearn
//   - conjunction(id,k/n) outside 1 <= k <= n, 2 <= n <= 64, or with an
//     action other than conjunction and note: NXBAC_BAD_CONJUNCTION (an
//     OFPET_EXPERIMENTER error of experimenter Nicira)
func validateNX(a NXAction, m Match, inCT bool) error {
	switch a := a.(type) {
	case ActionNXRegMove:
		if a.Src.NBits != a.Dst.NBits {
			return bad(ErrTypeBadAction, BadActionBadSetLen, "move of %d bits into %d", a.Src.NBits, a.Dst.NBits)
		}
		if err := checkSubfieldIn(a.Src, m, false, inCT); err != nil {
			return err
		}
		return checkSubfieldIn(a.Dst, m, true, inCT)
	case ActionNXRegLoad:
		if a.Dst.NBits > 64 {
			return bad(ErrTypeBadAction, BadActionBadSetLen, "load into %d bits", a.Dst.NBits)
		}
		if err := checkSubfieldIn(a.Dst, m, true, inCT); err != nil {
			return err
		}
		if a.Dst.NBits < 64 && a.Value>>a.Dst.NBits != 0 {
			return bad(ErrTypeBadAction, BadActionBadArgument, "load of %#x into %d bits", a.Value, a.Dst.NBits)
		}
	case ActionNXRegLoad2:
		o := a.Field
		if o.Class == ClassOpenFlowBasic {
			if o.Mask != nil && !withinMask(o.Value, o.Mask) {
				return bad(ErrTypeBadAction, BadActionBadSetArgument, "set_field value outside its mask")
			}
			o.Mask = nil
			return validateSetField(o, m, false, inCT)
		}
		return validateNXSetField(a.Field, m, inCT)
	case ActionNXNAT:
		if !inCT {
			return bad(ErrTypeBadAction, BadActionBadSetArgument, "nat outside ct")
		}
		return checkNAT(a, m)
	case ActionNXCT:
		return checkCT(a, m)
	case ActionNXResubmit:
		if a.CT && !m.ctValid() {
			return bad(ErrTypeBadAction, BadActionMatchInconsistent, "resubmit with ct on a flow without a valid ct_state")
		}
		if _, ok := nxPort16(a.InPort); !ok {
			return bad(ErrTypeBadAction, BadActionBadOutPort, "resubmit port %d", a.InPort)
		}
	case ActionNXConjunction:
		if a.NClauses < 2 || a.NClauses > 64 || a.Clause < 1 || a.Clause > a.NClauses {
			return nxErr(nxBACBadConjunction, fmt.Sprintf("conjunction(%d,%d/%d)", a.ID, a.Clause, a.NClauses))
		}
	case ActionNXOutputReg:
		return checkSubfieldIn(a.Src, m, false, inCT)
	case ActionNXLearn:
		return checkLearn(a, m)
	case ActionNXNote, ActionNXDecTTL, ActionNXCTClear:
	default:
		return bad(ErrTypeBadAction, BadActionBadExpType, "nicira action %s", a)
	}
	return nil
}

// checkSubfieldIn is checkSubfield plus what needs the match: the field's
// prerequisites (OFPBAC_MATCH_INCONSISTENT) and, for a destination,
// ct_mark/ct_label only inside ct (OFPBAC_BAD_SET_ARGUMENT).
func checkSubfieldIn(s Subfield, m Match, dst, inCT bool) error {
	if err := checkSubfield(s, dst); err != nil {
		return err
	}
	if dst && nxFields[s.Field].ctOnly && !inCT {
		return bad(ErrTypeBadAction, BadActionBadSetArgument, "%s may only be set inside ct", nxmName(s.Field))
	}
	return checkFieldPrereqs(s.Field, m)
}

// checkFieldPrereqs reports OFPBAC_MATCH_INCONSISTENT when the match does
// not establish what field k needs to exist in the packet.
func checkFieldPrereqs(k FieldKey, m Match) error {
	f, basic := k.Field, k.Class == ClassOpenFlowBasic
	if fi, ok := nxFields[k]; ok {
		if fi.ctValid && !m.ctValid() {
			return bad(ErrTypeBadAction, BadActionMatchInconsistent, "%s needs a valid ct_state", nxmName(k))
		}
		f, basic = fi.basic, fi.hasBasic
	}
	if !basic {
		return nil
	}
	if err := m.checkPrereqs(f); err != nil {
		return bad(ErrTypeBadAction, BadActionMatchInconsistent, "%s: %v", nxmName(k), err.(*Error).Reason)
	}
	return nil
}

// validateNXSetField checks set_field (or REG_LOAD2) of a non-basic field.
func validateNXSetField(o OXM, m Match, inCT bool) error {
	fi, ok := nxFields[o.Key()]
	if !ok || o.Class == ClassExperimenter {
		return bad(ErrTypeBadAction, BadActionBadSetType, "set_field of oxm 0x%04x:%d", o.Class, o.Field)
	}
	if len(o.Value) != fi.len || (o.Mask != nil && len(o.Mask) != fi.len) {
		return bad(ErrTypeBadAction, BadActionBadSetLen, "set_field %s of %d bytes, want %d", fi.name, len(o.Value), fi.len)
	}
	if !fi.writable {
		return bad(ErrTypeBadAction, BadActionBadSetArgument, "%s is read-only", fi.name)
	}
	if o.Mask != nil && !withinMask(o.Value, o.Mask) {
		return bad(ErrTypeBadAction, BadActionBadSetArgument, "set_field %s value outside its mask", fi.name)
	}
	if fi.ctOnly && !inCT {
		return bad(ErrTypeBadAction, BadActionBadSetArgument, "%s may only be set inside ct", fi.name)
	}
	return checkFieldPrereqs(o.Key(), m)
}

// checkNestedInCT allows inside ct only nat and writes to ct_mark or
// ct_label (set_field, load, move): anything else is OFPBAC_BAD_ARGUMENT.
func checkNestedInCT(a Action) error {
	var dst FieldKey
	switch a := a.(type) {
	case ActionNXNAT:
		return nil
	case ActionSetField:
		dst = a.Field.Key()
	case ActionNXRegLoad2:
		dst = a.Field.Key()
	case ActionNXRegLoad:
		dst = a.Dst.Field
	case ActionNXRegMove:
		dst = a.Dst.Field
	default:
		return bad(ErrTypeBadAction, BadActionBadArgument, "%s inside ct", a)
	}
	if !nxFields[dst].ctOnly {
		return bad(ErrTypeBadAction, BadActionBadArgument, "ct may not set %s", dst)
	}
	return nil
}

// checkConjunctionAlone enforces that conjunction shares its list only
// with other conjunctions and notes.
func checkConjunctionAlone(as Actions) error {
	conj := false
	for _, a := range as {
		if _, ok := a.(ActionNXConjunction); ok {
			conj = true
		}
	}
	if !conj {
		return nil
	}
	for _, a := range as {
		switch a.(type) {
		case ActionNXConjunction, ActionNXNote:
		default:
			return nxErr(nxBACBadConjunction, fmt.Sprintf("conjunction with %s", a))
		}
	}
	return nil
}

// isIPFlow reports the flow's pinned IP eth_type (0x0800 or 0x86dd).
func (m Match) ipEthType() (uint64, bool) {
	et, ok := m.exact(FieldEthType)
	return et, ok && (et == 0x0800 || et == 0x86dd)
}

func checkNAT(a ActionNXNAT, m Match) error {
	et, ok := m.ipEthType()
	if !ok || a.AddrMin.Is4() && et != 0x0800 || a.AddrMin.Is6() && et != 0x86dd {
		return bad(ErrTypeBadAction, BadActionMatchInconsistent, "%s on a flow that is not of its IP family", a)
	}
	if a.Flags&^nxNATFlagsKnown != 0 || a.Flags&NXNATFlagSrc != 0 && a.Flags&NXNATFlagDst != 0 ||
		a.Flags&NXNATFlagProtoHash != 0 && a.Flags&NXNATFlagProtoRandom != 0 {
		return bad(ErrTypeBadAction, BadActionBadArgument, "nat flags %#x", a.Flags)
	}
	if a.AddrMax.IsValid() && (!a.AddrMin.IsValid() || a.AddrMax.Is4() != a.AddrMin.Is4() || a.AddrMax.Less(a.AddrMin)) ||
		a.PortMin == 0 && a.PortMax != 0 || a.PortMax != 0 && a.PortMax < a.PortMin ||
		a.PortMin != 0 && !a.AddrMin.IsValid() {
		return bad(ErrTypeBadAction, BadActionBadArgument, "nat range %s", a)
	}
	return nil
}

func checkCT(a ActionNXCT, m Match) error {
	if _, ok := m.ipEthType(); !ok {
		return bad(ErrTypeBadAction, BadActionMatchInconsistent, "ct on a flow that is not IPv4 or IPv6")
	}
	if st, ok := m.getKey(FieldKey{ClassNXM1, NXMCtState}); ok && len(st.Value) == 4 &&
		uint32(st.Uint()&st.MaskUint())&CtStateInv != 0 && a.Flags&NXCTFlagCommit != 0 {
		return bad(ErrTypeBadAction, BadActionMatchInconsistent, "ct(commit) on a flow matching +inv")
	}
	proto, _ := m.exact(FieldIPProto)
	if a.Alg == NXCTAlgFTP && proto != 6 || a.Alg == NXCTAlgTFTP && proto != 17 {
		return bad(ErrTypeBadAction, BadActionMatchInconsistent, "ct alg=%d on ip_proto %d", a.Alg, proto)
	}
	if a.ZoneSrc != nil {
		if err := checkSubfieldIn(*a.ZoneSrc, m, false, false); err != nil {
			return err
		}
		if a.ZoneSrc.NBits != 16 {
			return bad(ErrTypeBadAction, BadActionBadSetLen, "ct zone from %d bits, want 16", a.ZoneSrc.NBits)
		}
	}
	if a.Flags&NXCTFlagCommit == 0 {
		for _, n := range a.Actions {
			if nat, ok := n.(ActionNXNAT); !ok || nat.Flags != 0 || nat.AddrMin.IsValid() {
				return bad(ErrTypeBadAction, BadActionBadArgument, "ct without commit may only nest a bare nat, not %s", n)
			}
		}
	}
	return validateActions(a.Actions, m, true)
}
