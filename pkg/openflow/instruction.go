package openflow

import (
	"fmt"
	"strings"
)

// InstructionType is ofp_instruction_type.
type InstructionType uint16

// OpenFlow 1.3 instruction types.
const (
	InstTypeGotoTable     InstructionType = 1
	InstTypeWriteMetadata InstructionType = 2
	InstTypeWriteActions  InstructionType = 3
	InstTypeApplyActions  InstructionType = 4
	InstTypeClearActions  InstructionType = 5
	InstTypeMeter         InstructionType = 6
	InstTypeExperimenter  InstructionType = 0xffff
)

var instTypeNames = map[InstructionType]string{
	InstTypeGotoTable: "GOTO_TABLE", InstTypeWriteMetadata: "WRITE_METADATA",
	InstTypeWriteActions: "WRITE_ACTIONS", InstTypeApplyActions: "APPLY_ACTIONS",
	InstTypeClearActions: "CLEAR_ACTIONS", InstTypeMeter: "METER", InstTypeExperimenter: "EXPERIMENTER",
}

// String returns the spec name without the OFPIT_ prefix.
func (t InstructionType) String() string {
	if s, ok := instTypeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("INSTRUCTION_%d", uint16(t))
}

// Instruction is one ofp_instruction. Every instruction starts with
//
//	2 bytes: type (InstructionType)
//	2 bytes: length including this header, a multiple of 8
type Instruction interface {
	Type() InstructionType
	MarshalBinary() ([]byte, error)
	String() string
}

// InstGotoTable continues the pipeline at another table.
//
//	4 bytes: type=1, len=8
//	1 byte:  table_id
//	3 bytes: pad
type InstGotoTable struct{ TableID uint8 }

// InstWriteMetadata writes the metadata register under a mask.
//
//	4 bytes: type=2, len=24
//	4 bytes: pad
//	8 bytes: metadata
//	8 bytes: metadata_mask
type InstWriteMetadata struct{ Metadata, Mask uint64 }

// InstWriteActions merges actions into the action set.
//
//	4 bytes: type=3, len = 8 + actions
//	4 bytes: pad
//	n bytes: actions
type InstWriteActions struct{ Actions Actions }

// InstApplyActions applies actions immediately (same layout as write, type=4).
type InstApplyActions struct{ Actions Actions }

// InstClearActions empties the action set (8 bytes: type=5, len=8, 4 pad).
type InstClearActions struct{}

// InstMeter sends the packet through a meter (8 bytes: type=6, len=8, 4 bytes meter_id).
type InstMeter struct{ MeterID uint32 }

// InstExperimenter is an experimenter instruction, kept verbatim.
//
//	4 bytes: type=0xffff, len
//	4 bytes: experimenter id
//	len-8 bytes: experimenter-defined
type InstExperimenter struct {
	Experimenter uint32
	Data         []byte
}

// Type returns InstTypeGotoTable.
func (InstGotoTable) Type() InstructionType { return InstTypeGotoTable }

// Type returns InstTypeWriteMetadata.
func (InstWriteMetadata) Type() InstructionType { return InstTypeWriteMetadata }

// Type returns InstTypeWriteActions.
func (InstWriteActions) Type() InstructionType { return InstTypeWriteActions }

// Type returns InstTypeApplyActions.
func (InstApplyActions) Type() InstructionType { return InstTypeApplyActions }

// Type returns InstTypeClearActions.
func (InstClearActions) Type() InstructionType { return InstTypeClearActions }

// Type returns InstTypeMeter.
func (InstMeter) Type() InstructionType { return InstTypeMeter }

// Type returns InstTypeExperimenter.
func (InstExperimenter) Type() InstructionType { return InstTypeExperimenter }

func inst8(t InstructionType, arg func([]byte)) ([]byte, error) { return tlv8(uint16(t), arg) }

func instActions(t InstructionType, as Actions) ([]byte, error) {
	b, err := as.appendTo(make([]byte, 8, 8+as.Len()))
	if err != nil {
		return nil, err
	}
	if len(b) > 0xffff {
		return nil, fmt.Errorf("openflow: %s instruction of %d bytes", t, len(b))
	}
	be.PutUint16(b, uint16(t))
	be.PutUint16(b[2:], uint16(len(b)))
	return b, nil
}

// MarshalBinary encodes the instruction.
func (i InstGotoTable) MarshalBinary() ([]byte, error) {
	return inst8(i.Type(), func(b []byte) { b[0] = i.TableID })
}

// MarshalBinary encodes the instruction.
func (i InstWriteMetadata) MarshalBinary() ([]byte, error) {
	b := make([]byte, 24)
	be.PutUint16(b, uint16(InstTypeWriteMetadata))
	be.PutUint16(b[2:], 24)
	be.PutUint64(b[8:], i.Metadata)
	be.PutUint64(b[16:], i.Mask)
	return b, nil
}

// MarshalBinary encodes the instruction.
func (i InstWriteActions) MarshalBinary() ([]byte, error) {
	return instActions(InstTypeWriteActions, i.Actions)
}

// MarshalBinary encodes the instruction.
func (i InstApplyActions) MarshalBinary() ([]byte, error) {
	return instActions(InstTypeApplyActions, i.Actions)
}

// MarshalBinary encodes the instruction.
func (i InstClearActions) MarshalBinary() ([]byte, error) { return inst8(i.Type(), nil) }

// MarshalBinary encodes the instruction.
func (i InstMeter) MarshalBinary() ([]byte, error) {
	return inst8(i.Type(), func(b []byte) { be.PutUint32(b, i.MeterID) })
}

// MarshalBinary encodes the instruction; Data is zero-padded to 8 bytes.
func (i InstExperimenter) MarshalBinary() ([]byte, error) {
	return experimenterTLV(uint16(InstTypeExperimenter), i.Experimenter, i.Data, "instruction")
}

// ParseInstruction decodes the instruction at the front of b and returns
// its encoded length. Errors carry OFPET_BAD_INSTRUCTION codes (BAD_LEN,
// UNKNOWN_INST) or, from nested actions, OFPET_BAD_ACTION codes.
func ParseInstruction(b []byte) (Instruction, int, error) {
	tt, n, err := parseTLVHeader(b, ErrTypeBadInstruction, BadInstBadLen, "instruction",
		func(t uint16) string { return InstructionType(t).String() })
	if err != nil {
		return nil, 0, err
	}
	t := InstructionType(tt)
	p := b[4:n]
	want := 8
	var in Instruction
	switch t {
	case InstTypeGotoTable:
		in = InstGotoTable{TableID: p[0]}
	case InstTypeWriteMetadata:
		want = 24
		if n == want {
			in = InstWriteMetadata{Metadata: be.Uint64(p[4:]), Mask: be.Uint64(p[12:])}
		}
	case InstTypeWriteActions, InstTypeApplyActions:
		want = n
		var as Actions
		if err := as.UnmarshalBinary(p[4:]); err != nil {
			return nil, 0, err
		}
		if t == InstTypeWriteActions {
			in = InstWriteActions{Actions: as}
		} else {
			in = InstApplyActions{Actions: as}
		}
	case InstTypeClearActions:
		in = InstClearActions{}
	case InstTypeMeter:
		in = InstMeter{MeterID: be.Uint32(p)}
	case InstTypeExperimenter:
		want = n
		in = InstExperimenter{Experimenter: be.Uint32(p), Data: append([]byte{}, p[4:]...)}
	default:
		return nil, 0, bad(ErrTypeBadInstruction, BadInstUnknownInst, "instruction type %d", t)
	}
	if n != want {
		return nil, 0, bad(ErrTypeBadInstruction, BadInstBadLen, "%s length %d, want %d", t, n, want)
	}
	return in, n, nil
}

// Instructions is a flow entry's instruction set, in wire order.
type Instructions []Instruction

// Len returns the encoded size.
func (is Instructions) Len() int {
	n := 0
	for _, in := range is {
		switch in := in.(type) {
		case InstWriteMetadata:
			n += 24
		case InstWriteActions:
			n += 8 + in.Actions.Len()
		case InstApplyActions:
			n += 8 + in.Actions.Len()
		case InstExperimenter:
			n += pad8(8 + len(in.Data))
		default:
			n += 8
		}
	}
	return n
}

// MarshalBinary encodes the instructions back to back.
func (is Instructions) MarshalBinary() ([]byte, error) { return is.appendTo(nil) }

func (is Instructions) appendTo(b []byte) ([]byte, error) {
	for _, in := range is {
		if in == nil {
			return nil, fmt.Errorf("openflow: nil instruction")
		}
		ib, err := in.MarshalBinary()
		if err != nil {
			return nil, err
		}
		b = append(b, ib...)
	}
	return b, nil
}

// UnmarshalBinary decodes all of b as instructions.
func (is *Instructions) UnmarshalBinary(b []byte) error {
	*is = nil
	for len(b) > 0 {
		in, n, err := ParseInstruction(b)
		if err != nil {
			return err
		}
		*is = append(*is, in)
		b = b[n:]
	}
	return nil
}

// String formats the instructions as ovs-ofctl prints them after
// "actions=": apply-actions inline, the others by name, "drop" if empty.
func (is Instructions) String() string {
	var s []string
	for _, in := range is {
		if a, ok := in.(InstApplyActions); ok {
			if len(a.Actions) == 0 {
				continue
			}
			s = append(s, a.Actions.String())
			continue
		}
		s = append(s, in.String())
	}
	if len(s) == 0 {
		return "drop"
	}
	return strings.Join(s, ",")
}

// String implements Instruction.
func (i InstGotoTable) String() string { return fmt.Sprintf("goto_table:%d", i.TableID) }

// String implements Instruction.
func (i InstWriteMetadata) String() string {
	if i.Mask == ^uint64(0) {
		return fmt.Sprintf("write_metadata:%#x", i.Metadata)
	}
	return fmt.Sprintf("write_metadata:%#x/%#x", i.Metadata, i.Mask)
}

// String implements Instruction.
func (i InstWriteActions) String() string {
	return "write_actions(" + strings.TrimSuffix(i.Actions.String(), "drop") + ")"
}

// String implements Instruction.
func (i InstApplyActions) String() string { return i.Actions.String() }

// String implements Instruction.
func (InstClearActions) String() string { return "clear_actions" }

// String implements Instruction.
func (i InstMeter) String() string { return fmt.Sprintf("meter:%d", i.MeterID) }

// String implements Instruction.
func (i InstExperimenter) String() string {
	return fmt.Sprintf("experimenter_inst(0x%08x,%x)", i.Experimenter, i.Data)
}

// ValidateInstructions checks a flow's instructions for installation in
// table tableID with match m:
//
//   - an instruction type twice: OFPBIC_UNSUP_INST (1.3 has no DUP_INST)
//   - goto_table to a table ≤ tableID or above TableMax: OFPBIC_BAD_TABLE_ID
//   - an experimenter instruction: OFPBIC_BAD_EXPERIMENTER
//   - every action list through ValidateActions
//   - conjunction with any instruction but its apply_actions:
//     NXBAC_BAD_CONJUNCTION, as Open vSwitch (a conjunction flow may only
//     carry conjunction and note actions)
func ValidateInstructions(is Instructions, tableID uint8, m Match) error {
	if len(is) > 1 {
		for _, in := range is {
			var as Actions
			switch in := in.(type) {
			case InstApplyActions:
				as = in.Actions
			case InstWriteActions:
				as = in.Actions
			}
			for _, a := range as {
				if _, ok := a.(ActionNXConjunction); ok {
					return nxErr(nxBACBadConjunction, "conjunction with another instruction")
				}
			}
		}
	}
	seen := map[InstructionType]bool{}
	for _, in := range is {
		if seen[in.Type()] {
			return bad(ErrTypeBadInstruction, BadInstUnsupInst, "%s twice", in.Type())
		}
		seen[in.Type()] = true
		switch in := in.(type) {
		case InstGotoTable:
			if in.TableID <= tableID || in.TableID > TableMax {
				return bad(ErrTypeBadInstruction, BadInstBadTableID, "goto_table:%d from table %d", in.TableID, tableID)
			}
		case InstWriteActions:
			if err := ValidateActions(in.Actions, m); err != nil {
				return err
			}
		case InstApplyActions:
			if err := ValidateActions(in.Actions, m); err != nil {
				return err
			}
		case InstExperimenter:
			return bad(ErrTypeBadInstruction, BadInstBadExperimenter, "experimenter 0x%08x", in.Experimenter)
		}
	}
	return nil
}
