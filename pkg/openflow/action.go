package openflow

import (
	"errors"
	"fmt"
	"strings"
)

// ActionType is ofp_action_type.
type ActionType uint16

// OpenFlow 1.3 action types.
const (
	ActionTypeOutput       ActionType = 0
	ActionTypeCopyTTLOut   ActionType = 11
	ActionTypeCopyTTLIn    ActionType = 12
	ActionTypeSetMPLSTTL   ActionType = 15
	ActionTypeDecMPLSTTL   ActionType = 16
	ActionTypePushVLAN     ActionType = 17
	ActionTypePopVLAN      ActionType = 18
	ActionTypePushMPLS     ActionType = 19
	ActionTypePopMPLS      ActionType = 20
	ActionTypeSetQueue     ActionType = 21
	ActionTypeGroup        ActionType = 22
	ActionTypeSetNWTTL     ActionType = 23
	ActionTypeDecNWTTL     ActionType = 24
	ActionTypeSetField     ActionType = 25
	ActionTypePushPBB      ActionType = 26
	ActionTypePopPBB       ActionType = 27
	ActionTypeExperimenter ActionType = 0xffff
)

// Controller max_len values (ofp_controller_max_len) for output:CONTROLLER.
const (
	ControllerMaxLen   uint16 = 0xffe5 // largest max_len that may buffer
	ControllerNoBuffer uint16 = 0xffff // send the whole packet, do not buffer
)

// Action is one ofp_action_*. Every action encodes to a multiple of 8 bytes
// starting with the common header:
//
//	2 bytes: type (ActionType)
//	2 bytes: length of the action including this header, a multiple of 8
type Action interface {
	Type() ActionType
	MarshalBinary() ([]byte, error)
	// String is the ovs-ofctl spelling, e.g. "output:2", "dec_ttl".
	String() string
}

// ActionOutput sends the packet to a port (16 bytes).
//
//	4 bytes: type=0, len=16
//	4 bytes: port (a number or a reserved Port*)
//	2 bytes: max_len, bytes sent to the controller for port CONTROLLER
//	6 bytes: pad
type ActionOutput struct {
	Port   uint32
	MaxLen uint16
}

// ActionCopyTTLOut copies the TTL from the next-to-outermost header outwards (8 bytes: header, 4 pad).
type ActionCopyTTLOut struct{}

// ActionCopyTTLIn copies the TTL from the outermost header inwards (8 bytes: header, 4 pad).
type ActionCopyTTLIn struct{}

// ActionSetMPLSTTL sets the MPLS TTL (8 bytes: header, 1 byte ttl, 3 pad).
type ActionSetMPLSTTL struct{ TTL uint8 }

// ActionDecMPLSTTL decrements the MPLS TTL (8 bytes: header, 4 pad).
type ActionDecMPLSTTL struct{}

// ActionPushVLAN pushes a VLAN tag (8 bytes: header, 2 bytes ethertype 0x8100 or 0x88a8, 2 pad).
type ActionPushVLAN struct{ EtherType uint16 }

// ActionPopVLAN pops the outer VLAN tag (8 bytes: header, 4 pad).
type ActionPopVLAN struct{}

// ActionPushMPLS pushes an MPLS shim (8 bytes: header, 2 bytes ethertype 0x8847 or 0x8848, 2 pad).
type ActionPushMPLS struct{ EtherType uint16 }

// ActionPopMPLS pops the outer MPLS shim (8 bytes: header, 2 bytes ethertype of the payload, 2 pad).
type ActionPopMPLS struct{ EtherType uint16 }

// ActionSetQueue sets the output queue (8 bytes: header, 4 bytes queue_id).
type ActionSetQueue struct{ QueueID uint32 }

// ActionGroup processes the packet through a group (8 bytes: header, 4 bytes group_id).
type ActionGroup struct{ GroupID uint32 }

// ActionSetNWTTL sets the IP TTL (8 bytes: header, 1 byte ttl, 3 pad).
type ActionSetNWTTL struct{ TTL uint8 }

// ActionDecNWTTL decrements the IP TTL (8 bytes: header, 4 pad).
type ActionDecNWTTL struct{}

// ActionPushPBB pushes a PBB service tag (8 bytes: header, 2 bytes ethertype 0x88e7, 2 pad).
type ActionPushPBB struct{ EtherType uint16 }

// ActionPopPBB pops the outer PBB service tag (8 bytes: header, 4 pad).
type ActionPopPBB struct{}

// ActionSetField rewrites a header field.
//
//	4 bytes: type=25, len = 4 + OXM size rounded up to 8
//	n bytes: one OXM TLV without mask
//	pad to a multiple of 8
type ActionSetField struct{ Field OXM }

// ActionExperimenter is an experimenter action; the body is kept verbatim.
//
//	4 bytes: type=0xffff, len (a multiple of 8)
//	4 bytes: experimenter id
//	len-8 bytes: experimenter-defined
type ActionExperimenter struct {
	Experimenter uint32
	Data         []byte
}

// Type returns ActionTypeOutput.
func (ActionOutput) Type() ActionType { return ActionTypeOutput }

// Type returns ActionTypeCopyTTLOut.
func (ActionCopyTTLOut) Type() ActionType { return ActionTypeCopyTTLOut }

// Type returns ActionTypeCopyTTLIn.
func (ActionCopyTTLIn) Type() ActionType { return ActionTypeCopyTTLIn }

// Type returns ActionTypeSetMPLSTTL.
func (ActionSetMPLSTTL) Type() ActionType { return ActionTypeSetMPLSTTL }

// Type returns ActionTypeDecMPLSTTL.
func (ActionDecMPLSTTL) Type() ActionType { return ActionTypeDecMPLSTTL }

// Type returns ActionTypePushVLAN.
func (ActionPushVLAN) Type() ActionType { return ActionTypePushVLAN }

// Type returns ActionTypePopVLAN.
func (ActionPopVLAN) Type() ActionType { return ActionTypePopVLAN }

// Type returns ActionTypePushMPLS.
func (ActionPushMPLS) Type() ActionType { return ActionTypePushMPLS }

// Type returns ActionTypePopMPLS.
func (ActionPopMPLS) Type() ActionType { return ActionTypePopMPLS }

// Type returns ActionTypeSetQueue.
func (ActionSetQueue) Type() ActionType { return ActionTypeSetQueue }

// Type returns ActionTypeGroup.
func (ActionGroup) Type() ActionType { return ActionTypeGroup }

// Type returns ActionTypeSetNWTTL.
func (ActionSetNWTTL) Type() ActionType { return ActionTypeSetNWTTL }

// Type returns ActionTypeDecNWTTL.
func (ActionDecNWTTL) Type() ActionType { return ActionTypeDecNWTTL }

// Type returns ActionTypePushPBB.
func (ActionPushPBB) Type() ActionType { return ActionTypePushPBB }

// Type returns ActionTypePopPBB.
func (ActionPopPBB) Type() ActionType { return ActionTypePopPBB }

// Type returns ActionTypeSetField.
func (ActionSetField) Type() ActionType { return ActionTypeSetField }

// Type returns ActionTypeExperimenter.
func (ActionExperimenter) Type() ActionType { return ActionTypeExperimenter }

// act8 encodes the 8-byte actions: header then a 4-byte argument area.
func act8(t ActionType, arg func(b []byte)) ([]byte, error) { return tlv8(uint16(t), arg) }

// Actions and instructions share one TLV shape: 2 bytes type, 2 bytes
// length including this header, payload padded to 8. tlv8, experimenterTLV
// and parseTLVHeader serve both.

// tlv8 encodes an 8-byte TLV whose 4-byte payload arg fills.
func tlv8(t uint16, arg func(b []byte)) ([]byte, error) {
	b := make([]byte, 8)
	be.PutUint16(b, t)
	be.PutUint16(b[2:], 8)
	if arg != nil {
		arg(b[4:])
	}
	return b, nil
}

// experimenterTLV encodes an experimenter action or instruction: header,
// 4 bytes experimenter id, data zero-padded to 8.
func experimenterTLV(t uint16, experimenter uint32, data []byte, what string) ([]byte, error) {
	n := pad8(8 + len(data))
	if n > 0xffff {
		return nil, fmt.Errorf("openflow: experimenter %s of %d bytes", what, n)
	}
	b := make([]byte, n)
	be.PutUint16(b, t)
	be.PutUint16(b[2:], uint16(n))
	be.PutUint32(b[4:], experimenter)
	copy(b[8:], data)
	return b, nil
}

// parseTLVHeader checks the TLV at the front of b and returns its type and
// length. Errors carry et with code badLen; name names the TLV in messages.
func parseTLVHeader(b []byte, et ErrorType, badLen uint16, kind string, name func(uint16) string) (uint16, int, error) {
	if len(b) < 4 {
		return 0, 0, short(et, badLen, kind+" header")
	}
	t, n := be.Uint16(b), int(be.Uint16(b[2:]))
	if n < 8 || n%8 != 0 {
		return 0, 0, bad(et, badLen, "%s length %d", name(t), n)
	}
	if n > len(b) {
		return 0, 0, short(et, badLen, fmt.Sprintf("%s of %d bytes", name(t), n))
	}
	return t, n, nil
}

// MarshalBinary encodes the action.
func (a ActionOutput) MarshalBinary() ([]byte, error) {
	b := make([]byte, 16)
	be.PutUint16(b, uint16(ActionTypeOutput))
	be.PutUint16(b[2:], 16)
	be.PutUint32(b[4:], a.Port)
	be.PutUint16(b[8:], a.MaxLen)
	return b, nil
}

// MarshalBinary encodes the action.
func (a ActionCopyTTLOut) MarshalBinary() ([]byte, error) { return act8(a.Type(), nil) }

// MarshalBinary encodes the action.
func (a ActionCopyTTLIn) MarshalBinary() ([]byte, error) { return act8(a.Type(), nil) }

// MarshalBinary encodes the action.
func (a ActionSetMPLSTTL) MarshalBinary() ([]byte, error) {
	return act8(a.Type(), func(b []byte) { b[0] = a.TTL })
}

// MarshalBinary encodes the action.
func (a ActionDecMPLSTTL) MarshalBinary() ([]byte, error) { return act8(a.Type(), nil) }

// MarshalBinary encodes the action.
func (a ActionPushVLAN) MarshalBinary() ([]byte, error) {
	return act8(a.Type(), func(b []byte) { be.PutUint16(b, a.EtherType) })
}

// MarshalBinary encodes the action.
func (a ActionPopVLAN) MarshalBinary() ([]byte, error) { return act8(a.Type(), nil) }

// MarshalBinary encodes the action.
func (a ActionPushMPLS) MarshalBinary() ([]byte, error) {
	return act8(a.Type(), func(b []byte) { be.PutUint16(b, a.EtherType) })
}

// MarshalBinary encodes the action.
func (a ActionPopMPLS) MarshalBinary() ([]byte, error) {
	return act8(a.Type(), func(b []byte) { be.PutUint16(b, a.EtherType) })
}

// MarshalBinary encodes the action.
func (a ActionSetQueue) MarshalBinary() ([]byte, error) {
	return act8(a.Type(), func(b []byte) { be.PutUint32(b, a.QueueID) })
}

// MarshalBinary encodes the action.
func (a ActionGroup) MarshalBinary() ([]byte, error) {
	return act8(a.Type(), func(b []byte) { be.PutUint32(b, a.GroupID) })
}

// MarshalBinary encodes the action.
func (a ActionSetNWTTL) MarshalBinary() ([]byte, error) {
	return act8(a.Type(), func(b []byte) { b[0] = a.TTL })
}

// MarshalBinary encodes the action.
func (a ActionDecNWTTL) MarshalBinary() ([]byte, error) { return act8(a.Type(), nil) }

// MarshalBinary encodes the action.
func (a ActionPushPBB) MarshalBinary() ([]byte, error) {
	return act8(a.Type(), func(b []byte) { be.PutUint16(b, a.EtherType) })
}

// MarshalBinary encodes the action.
func (a ActionPopPBB) MarshalBinary() ([]byte, error) { return act8(a.Type(), nil) }

// MarshalBinary encodes the action.
func (a ActionSetField) MarshalBinary() ([]byte, error) {
	b := make([]byte, 4, 4+pad8(a.Field.Len()))
	b, err := a.Field.appendTo(b)
	if err != nil {
		return nil, err
	}
	b = append(b, make([]byte, pad8(len(b))-len(b))...)
	be.PutUint16(b, uint16(ActionTypeSetField))
	be.PutUint16(b[2:], uint16(len(b)))
	return b, nil
}

// MarshalBinary encodes the action; Data is padded with zeros to 8 bytes.
func (a ActionExperimenter) MarshalBinary() ([]byte, error) {
	return experimenterTLV(uint16(ActionTypeExperimenter), a.Experimenter, a.Data, "action")
}

// ParseAction decodes the action at the front of b and returns it with its
// encoded length. Errors carry OFPET_BAD_ACTION codes: BAD_LEN for a length
// that is short, not a multiple of 8 or wrong for the type, BAD_TYPE for an
// unknown type, BAD_SET_LEN for a set_field whose OXM does not fit.
func ParseAction(b []byte) (Action, int, error) {
	tt, n, err := parseTLVHeader(b, ErrTypeBadAction, BadActionBadLen, "action",
		func(t uint16) string { return fmt.Sprintf("action %d", t) })
	if err != nil {
		return nil, 0, err
	}
	t := ActionType(tt)
	p := b[4:n]
	want := 8
	var a Action
	switch t {
	case ActionTypeOutput:
		want = 16
		if n == want {
			a = ActionOutput{Port: be.Uint32(p), MaxLen: be.Uint16(p[4:])}
		}
	case ActionTypeCopyTTLOut:
		a = ActionCopyTTLOut{}
	case ActionTypeCopyTTLIn:
		a = ActionCopyTTLIn{}
	case ActionTypeSetMPLSTTL:
		a = ActionSetMPLSTTL{TTL: p[0]}
	case ActionTypeDecMPLSTTL:
		a = ActionDecMPLSTTL{}
	case ActionTypePushVLAN:
		a = ActionPushVLAN{EtherType: be.Uint16(p)}
	case ActionTypePopVLAN:
		a = ActionPopVLAN{}
	case ActionTypePushMPLS:
		a = ActionPushMPLS{EtherType: be.Uint16(p)}
	case ActionTypePopMPLS:
		a = ActionPopMPLS{EtherType: be.Uint16(p)}
	case ActionTypeSetQueue:
		a = ActionSetQueue{QueueID: be.Uint32(p)}
	case ActionTypeGroup:
		a = ActionGroup{GroupID: be.Uint32(p)}
	case ActionTypeSetNWTTL:
		a = ActionSetNWTTL{TTL: p[0]}
	case ActionTypeDecNWTTL:
		a = ActionDecNWTTL{}
	case ActionTypePushPBB:
		a = ActionPushPBB{EtherType: be.Uint16(p)}
	case ActionTypePopPBB:
		a = ActionPopPBB{}
	case ActionTypeSetField:
		var o OXM
		k, err := o.decode(p, ErrTypeBadAction, BadActionBadSetLen)
		if err != nil {
			// The OXM overran the action's own length: a malformed
			// action, not a short message.
			var oe *Error
			if errors.As(err, &oe) {
				oe.Err = nil
			}
			return nil, 0, err
		}
		if want = pad8(4 + k); n != want {
			return nil, 0, bad(ErrTypeBadAction, BadActionBadSetLen, "set_field length %d, want %d", n, want)
		}
		a = ActionSetField{Field: o}
	case ActionTypeExperimenter:
		want = n
		if be.Uint32(p) == ExperimenterNicira {
			nx, err := parseNXAction(b[:n])
			if err != nil {
				return nil, 0, err
			}
			if nx != nil {
				a = nx
				break
			}
		}
		a = ActionExperimenter{Experimenter: be.Uint32(p), Data: append([]byte{}, p[4:]...)}
	default:
		return nil, 0, bad(ErrTypeBadAction, BadActionBadType, "action type %d", t)
	}
	if n != want {
		return nil, 0, bad(ErrTypeBadAction, BadActionBadLen, "%s length %d, want %d", t, n, want)
	}
	return a, n, nil
}

// Actions is an action list (apply-actions, packet-out, group bucket) or
// action set (write-actions), in wire order.
type Actions []Action

// Len returns the encoded size of the list.
func (as Actions) Len() int {
	n := 0
	for _, a := range as {
		n += actionLen(a)
	}
	return n
}

func actionLen(a Action) int {
	switch a := a.(type) {
	case ActionOutput:
		return 16
	case ActionSetField:
		return pad8(4 + a.Field.Len())
	case ActionExperimenter:
		return pad8(8 + len(a.Data))
	case NXAction:
		b, err := a.MarshalBinary()
		if err != nil {
			return 0
		}
		return len(b)
	}
	return 8
}

// MarshalBinary encodes the actions back to back.
func (as Actions) MarshalBinary() ([]byte, error) { return as.appendTo(nil) }

func (as Actions) appendTo(b []byte) ([]byte, error) {
	for _, a := range as {
		if a == nil {
			return nil, fmt.Errorf("openflow: nil action")
		}
		ab, err := a.MarshalBinary()
		if err != nil {
			return nil, err
		}
		b = append(b, ab...)
	}
	return b, nil
}

// UnmarshalBinary decodes all of b as actions.
func (as *Actions) UnmarshalBinary(b []byte) error {
	*as = nil
	for len(b) > 0 {
		a, n, err := ParseAction(b)
		if err != nil {
			return err
		}
		*as = append(*as, a)
		b = b[n:]
	}
	return nil
}

// String formats the list as ovs-ofctl does: "output:2,dec_ttl", or "drop"
// when empty.
func (as Actions) String() string {
	if len(as) == 0 {
		return "drop"
	}
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// String implements Action.
func (a ActionOutput) String() string {
	switch {
	case a.Port == PortController:
		return fmt.Sprintf("CONTROLLER:%d", a.MaxLen)
	case a.Port > PortMax:
		return PortName(a.Port)
	}
	return fmt.Sprintf("output:%d", a.Port)
}

// String implements Action.
func (ActionCopyTTLOut) String() string { return "copy_ttl_out" }

// String implements Action.
func (ActionCopyTTLIn) String() string { return "copy_ttl_in" }

// String implements Action.
func (a ActionSetMPLSTTL) String() string { return fmt.Sprintf("set_mpls_ttl(%d)", a.TTL) }

// String implements Action.
func (ActionDecMPLSTTL) String() string { return "dec_mpls_ttl" }

// String implements Action.
func (a ActionPushVLAN) String() string { return fmt.Sprintf("push_vlan:0x%04x", a.EtherType) }

// String implements Action.
func (ActionPopVLAN) String() string { return "pop_vlan" }

// String implements Action.
func (a ActionPushMPLS) String() string { return fmt.Sprintf("push_mpls:0x%04x", a.EtherType) }

// String implements Action.
func (a ActionPopMPLS) String() string { return fmt.Sprintf("pop_mpls:0x%04x", a.EtherType) }

// String implements Action.
func (a ActionSetQueue) String() string { return fmt.Sprintf("set_queue:%d", a.QueueID) }

// String implements Action.
func (a ActionGroup) String() string { return fmt.Sprintf("group:%d", a.GroupID) }

// String implements Action.
func (a ActionSetNWTTL) String() string { return fmt.Sprintf("mod_nw_ttl:%d", a.TTL) }

// String implements Action.
func (ActionDecNWTTL) String() string { return "dec_ttl" }

// String implements Action.
func (a ActionPushPBB) String() string { return fmt.Sprintf("push_pbb:0x%04x", a.EtherType) }

// String implements Action.
func (ActionPopPBB) String() string { return "pop_pbb" }

// String implements Action, e.g. "set_field:00:11:22:33:44:55->eth_dst".
func (a ActionSetField) String() string {
	return "set_field:" + formatFieldValue(a.Field) + "->" + setFieldTarget(a.Field)
}

// String implements Action.
func (a ActionExperimenter) String() string {
	return fmt.Sprintf("experimenter(0x%08x,%x)", a.Experimenter, a.Data)
}

var actionTypeNames = map[ActionType]string{
	ActionTypeOutput: "OUTPUT", ActionTypeCopyTTLOut: "COPY_TTL_OUT", ActionTypeCopyTTLIn: "COPY_TTL_IN",
	ActionTypeSetMPLSTTL: "SET_MPLS_TTL", ActionTypeDecMPLSTTL: "DEC_MPLS_TTL", ActionTypePushVLAN: "PUSH_VLAN",
	ActionTypePopVLAN: "POP_VLAN", ActionTypePushMPLS: "PUSH_MPLS", ActionTypePopMPLS: "POP_MPLS",
	ActionTypeSetQueue: "SET_QUEUE", ActionTypeGroup: "GROUP", ActionTypeSetNWTTL: "SET_NW_TTL",
	ActionTypeDecNWTTL: "DEC_NW_TTL", ActionTypeSetField: "SET_FIELD", ActionTypePushPBB: "PUSH_PBB",
	ActionTypePopPBB: "POP_PBB", ActionTypeExperimenter: "EXPERIMENTER",
}

// String returns the spec name without the OFPAT_ prefix.
func (t ActionType) String() string {
	if s, ok := actionTypeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("ACTION_%d", uint16(t))
}

// ValidateActions checks an action list as a switch must before accepting
// it, in the context of the flow's match m (use the zero Match for
// PACKET_OUT and group buckets):
//
//   - output to port 0, OFPP_ANY or a number above OFPP_MAX that is not a
//     reserved port: OFPBAC_BAD_OUT_PORT
//   - group above OFPG_MAX: OFPBAC_BAD_OUT_GROUP
//   - push_vlan/push_mpls/push_pbb with the wrong ethertype: OFPBAC_BAD_ARGUMENT
//   - set_field of a non-basic or unknown field, or of in_port,
//     in_phy_port or metadata: OFPBAC_BAD_SET_TYPE; of the wrong length:
//     OFPBAC_BAD_SET_LEN; masked or out of range: OFPBAC_BAD_SET_ARGUMENT
//   - set_field of a field whose prerequisites the match (and earlier
//     push actions) do not establish: OFPBAC_MATCH_INCONSISTENT
//   - experimenter actions of another experimenter than Nicira:
//     OFPBAC_BAD_EXPERIMENTER; Nicira subtypes this package does not
//     decode: OFPBAC_BAD_EXPERIMENTER_TYPE
//   - the Nicira actions (nxaction.go), checked as Open vSwitch checks
//     them; see validateNX
//
// push_mpls and pop_mpls change the packet's ethertype for the actions
// after them, so set_field mpls_label after push_mpls is consistent.
func ValidateActions(as Actions, m Match) error { return validateActions(as, m, false) }

// validateActions checks a list; inCT is set for the actions nested in ct.
func validateActions(as Actions, m Match, inCT bool) error {
	if err := checkConjunctionAlone(as); err != nil {
		return err
	}
	pushedVLAN := false
	for _, a := range as {
		if inCT {
			if err := checkNestedInCT(a); err != nil {
				return err
			}
		}
		if nx, ok := a.(NXAction); ok {
			if err := validateNX(nx, m, inCT); err != nil {
				return err
			}
			continue
		}
		switch a := a.(type) {
		case ActionOutput:
			if !validOutPort(a.Port) {
				return bad(ErrTypeBadAction, BadActionBadOutPort, "output to %s", PortName(a.Port))
			}
		case ActionGroup:
			if a.GroupID > GroupMax {
				return bad(ErrTypeBadAction, BadActionBadOutGroup, "group %#x", a.GroupID)
			}
		case ActionPushVLAN:
			if a.EtherType != 0x8100 && a.EtherType != 0x88a8 {
				return bad(ErrTypeBadAction, BadActionBadArgument, "push_vlan ethertype %#04x", a.EtherType)
			}
			pushedVLAN = true
		case ActionPushMPLS:
			if a.EtherType != 0x8847 && a.EtherType != 0x8848 {
				return bad(ErrTypeBadAction, BadActionBadArgument, "push_mpls ethertype %#04x", a.EtherType)
			}
			m = m.retyped(a.EtherType)
		case ActionPopMPLS:
			m = m.retyped(a.EtherType)
		case ActionPushPBB:
			if a.EtherType != 0x88e7 {
				return bad(ErrTypeBadAction, BadActionBadArgument, "push_pbb ethertype %#04x", a.EtherType)
			}
			m = m.retyped(a.EtherType)
		case ActionSetField:
			if err := validateSetField(a.Field, m, pushedVLAN, inCT); err != nil {
				return err
			}
		case ActionExperimenter:
			if a.Experimenter == ExperimenterNicira && len(a.Data) >= 2 {
				return bad(ErrTypeBadAction, BadActionBadExpType, "nicira action subtype %d", be.Uint16(a.Data))
			}
			return bad(ErrTypeBadAction, BadActionBadExperimenter, "experimenter 0x%08x", a.Experimenter)
		}
	}
	return nil
}

// validOutPort reports whether an output action may name port p.
func validOutPort(p uint32) bool {
	switch p {
	case PortInPort, PortTable, PortNormal, PortFlood, PortAll, PortController, PortLocal:
		return true
	}
	return p > 0 && p <= PortMax
}

func validateSetField(o OXM, m Match, pushedVLAN, inCT bool) error {
	if o.Class != ClassOpenFlowBasic {
		if o.Mask != nil {
			return bad(ErrTypeBadAction, BadActionBadSetArgument, "set_field of %s with a mask", o.Key())
		}
		return validateNXSetField(o, m, inCT)
	}
	if int(o.Field) >= numFields {
		return bad(ErrTypeBadAction, BadActionBadSetType, "set_field of oxm %#04x:%d", o.Class, o.Field)
	}
	switch o.Field {
	case FieldInPort, FieldInPhyPort, FieldMetadata:
		return bad(ErrTypeBadAction, BadActionBadSetType, "set_field of pipeline field %s", o.Field)
	}
	if o.Mask != nil {
		return bad(ErrTypeBadAction, BadActionBadSetArgument, "set_field of %s with a mask", o.Field)
	}
	if err := validateOXM(o); err != nil {
		var oe *Error
		if errors.As(err, &oe) && oe.Code == BadMatchBadLen {
			return bad(ErrTypeBadAction, BadActionBadSetLen, "%s", oe.Reason)
		}
		return bad(ErrTypeBadAction, BadActionBadSetArgument, "%v", err)
	}
	if o.Field == FieldVLANVID && o.Uint()&uint64(VIDPresent) == 0 {
		return bad(ErrTypeBadAction, BadActionBadSetArgument, "set_field vlan_vid without OFPVID_PRESENT")
	}
	if o.Field == FieldVLANVID || o.Field == FieldVLANPCP {
		if !pushedVLAN && !m.vlanTagged() {
			return bad(ErrTypeBadAction, BadActionMatchInconsistent, "set_field %s on a flow that does not match a VLAN tag", o.Field)
		}
		return nil
	}
	if err := m.checkPrereqs(o.Field); err != nil {
		return bad(ErrTypeBadAction, BadActionMatchInconsistent, "set_field %s: %v", o.Field, err.(*Error).Reason)
	}
	return nil
}

// retyped returns the match as seen after an action changed the packet's
// ethertype: the new eth_type, and no L3/L4 fields (they are now hidden
// behind, or unknown after, the MPLS shim). Pipeline and L2 fields stay.
func (m Match) retyped(ethType uint16) Match {
	var n Match
	for _, o := range m.Fields {
		switch o.Field {
		case FieldInPort, FieldInPhyPort, FieldMetadata, FieldTunnelID, FieldEthSrc, FieldEthDst,
			FieldVLANVID, FieldVLANPCP:
			if o.Class == ClassOpenFlowBasic {
				n.Fields = append(n.Fields, o)
			}
		}
	}
	return n.Add(Uint(FieldEthType, uint64(ethType)))
}
