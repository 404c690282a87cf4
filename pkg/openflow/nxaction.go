package openflow

import (
	"fmt"
	"net/netip"
	"strings"
)

// Open vSwitch's Nicira extension actions: OFPAT_EXPERIMENTER actions with
// experimenter id ExperimenterNicira (0x00002320) and a 2-byte subtype.
// Every one starts with the same 10 bytes:
//
//	2 bytes: type = 0xffff (OFPAT_EXPERIMENTER)
//	2 bytes: len, of the whole action, a multiple of 8
//	4 bytes: experimenter = 0x00002320
//	2 bytes: subtype (NXAST_*)
//
// The subtypes ovs-ofctl -O OpenFlow13 (3.1) writes for the constructs a
// conntrack pipeline uses (captured in testdata/golden/add_flow_nx_*.hex):
//
//	ct(...)                      NXAST_CT 35, nested actions inside
//	nat(...) inside ct           NXAST_NAT 36 (only valid nested in ct)
//	ct_clear                     NXAST_CT_CLEAR 43
//	move:A[..]->B[..]            NXAST_REG_MOVE 6
//	load:V->F[..]                NXAST_REG_LOAD 7, for every field with an
//	                             NXM header, split into 64-bit pieces for
//	                             128-bit fields (load:1->NXM_NX_CT_LABEL[] is
//	                             two REG_LOADs). NXAST_REG_LOAD2 (33) is
//	                             never sent for these fields; decoded anyway.
//	set_field:V->reg0            OFPAT_SET_FIELD with the NXM_NX_REG0 OXM
//	set_field:V/M->reg1          NXAST_REG_LOAD per run of mask bits (OF1.3
//	                             set_field cannot carry a mask)
//	set_field:V->xreg1           OFPAT_SET_FIELD with OXM_OF_PKT_REG1
//	resubmit(,T), resubmit(P,T), NXAST_RESUBMIT_TABLE 14 (resubmit:P too,
//	resubmit:P                   with table 255); NXAST_RESUBMIT 1 decoded
//	resubmit(,T,ct)              NXAST_RESUBMIT_TABLE_CT 44
//	output:NXM_NX_REG1[]         NXAST_OUTPUT_REG 15
//	conjunction(id,k/n)          NXAST_CONJUNCTION 34
//	note:hex                     NXAST_NOTE 8
//	dec_ttl(id,...)              NXAST_DEC_TTL_CNT_IDS 21 (plain dec_ttl is
//	                             OFPAT_DEC_NW_TTL)
//	learn(...)                   NXAST_LEARN 16 (nxlearn.go)
//
// Unknown Nicira subtypes stay ActionExperimenter (kept verbatim) and
// ValidateActions refuses them with OFPBAC_BAD_EXPERIMENTER_TYPE, as
// Open vSwitch does.

// NXSubtype is a Nicira action subtype (NXAST_*).
type NXSubtype uint16

// Nicira action subtypes decoded here.
const (
	NXASTResubmit        NXSubtype = 1
	NXASTRegMove         NXSubtype = 6
	NXASTRegLoad         NXSubtype = 7
	NXASTNote            NXSubtype = 8
	NXASTOutputReg       NXSubtype = 15
	NXASTResubmitTable   NXSubtype = 14
	NXASTDecTTLCntIDs    NXSubtype = 21
	NXASTRegLoad2        NXSubtype = 33
	NXASTConjunction     NXSubtype = 34
	NXASTCT              NXSubtype = 35
	NXASTNAT             NXSubtype = 36
	NXASTCTClear         NXSubtype = 43
	NXASTResubmitTableCT NXSubtype = 44
)

// nxHeaderLen is the common header of every Nicira action.
const nxHeaderLen = 10

// NXAction is a decoded Nicira extension action.
type NXAction interface {
	Action
	Subtype() NXSubtype
}

// Subfield is a bit range of a field, as move, load and ct's zone name it
// (NXM_NX_REG0[0..15]). A field's whole width is Ofs 0, NBits = width.
type Subfield struct {
	Field FieldKey
	Ofs   uint16
	NBits uint16
}

// String formats the subfield as ovs-ofctl: "NXM_NX_REG0[0..15]",
// "NXM_NX_REG0[]" for the whole field, "NXM_NX_XXREG1[0]" for one bit.
func (s Subfield) String() string {
	name := nxmName(s.Field)
	if w, ok := fieldWidth(s.Field); ok && s.Ofs == 0 && int(s.NBits) == w {
		return name + "[]"
	}
	if s.NBits == 1 {
		return fmt.Sprintf("%s[%d]", name, s.Ofs)
	}
	return fmt.Sprintf("%s[%d..%d]", name, s.Ofs, int(s.Ofs)+int(s.NBits)-1)
}

// ofsNBits encodes ofs and n_bits as NXM's 16-bit ofs_nbits: ofs<<6 | (n_bits-1).
func ofsNBits(ofs, nbits uint16) uint16 { return ofs<<6 | (nbits-1)&0x3f }

// fieldHeader encodes a field's NXM/OXM header (no mask): class, field<<1,
// length in bytes.
func fieldHeader(k FieldKey) (uint32, error) {
	n, ok := fieldBytes(k)
	if !ok || k.Class == ClassExperimenter || k.Field > 0x7f {
		return 0, fmt.Errorf("openflow: no header for field %s", k)
	}
	return uint32(k.Class)<<16 | uint32(k.Field)<<9 | uint32(n), nil
}

// parseFieldHeader decodes a 4-byte NXM header naming a known field.
// Open vSwitch refuses a header it does not know (including one with the
// wrong length or with hasmask) with code; so does this.
func parseFieldHeader(h uint32, et ErrorType, code uint16) (FieldKey, error) {
	k := FieldKey{Class: uint16(h >> 16), Field: Field(h >> 9 & 0x7f)}
	n, ok := fieldBytes(k)
	if !ok || h>>8&1 != 0 || int(h&0xff) != n {
		return FieldKey{}, bad(et, code, "unknown field header 0x%08x", h)
	}
	return k, nil
}

// nxPort converts a 16-bit OpenFlow 1.0 port (as NXAST_RESUBMIT carries)
// to OpenFlow 1.3 numbering: 0xff00 and above are the reserved ports.
func nxPort(p uint16) uint32 {
	if p >= 0xff00 {
		return uint32(p) + 0xffff0000
	}
	return uint32(p)
}

// nxPort16 is the inverse of nxPort.
func nxPort16(p uint32) (uint16, bool) {
	switch {
	case p >= 0xffffff00:
		return uint16(p - 0xffff0000), true
	case p < 0xff00:
		return uint16(p), true
	}
	return 0, false
}

// nxStart returns an action buffer of n bytes (n a multiple of 8) with the
// Nicira header filled in.
func nxStart(sub NXSubtype, n int) []byte {
	b := make([]byte, n)
	be.PutUint16(b, uint16(ActionTypeExperimenter))
	be.PutUint16(b[2:], uint16(n))
	be.PutUint32(b[4:], ExperimenterNicira)
	be.PutUint16(b[8:], uint16(sub))
	return b
}

// nxFinish pads b to 8 bytes and writes its length.
func nxFinish(b []byte) ([]byte, error) {
	b = append(b, make([]byte, pad8(len(b))-len(b))...)
	if len(b) > 0xffff {
		return nil, fmt.Errorf("openflow: nicira action of %d bytes", len(b))
	}
	be.PutUint16(b[2:], uint16(len(b)))
	return b, nil
}

// ActionNXResubmit is resubmit: run the packet through a table again.
//
//	10 bytes: Nicira header, subtype 1 (RESUBMIT), 14 (RESUBMIT_TABLE) or
//	          44 (RESUBMIT_TABLE_CT)
//	2 bytes:  in_port, OpenFlow 1.0 numbering (0xfff8 = IN_PORT: keep it)
//	1 byte:   table (255 = the current table; NXAST_RESUBMIT sends 255)
//	3 bytes:  pad
type ActionNXResubmit struct {
	InPort uint32 // OpenFlow 1.3 numbering; PortInPort keeps the packet's
	Table  uint8  // NXTableCurrent: the table this action runs in
	CT     bool   // resubmit(,T,ct): look up with the conntrack original tuple
	// NoTable marks the old NXAST_RESUBMIT (resubmit:P), which has no
	// table; ovs-ofctl sends RESUBMIT_TABLE for it today.
	NoTable bool
}

// NXTableCurrent is resubmit's "this table" (255).
const NXTableCurrent uint8 = 255

// Type returns ActionTypeExperimenter.
func (ActionNXResubmit) Type() ActionType { return ActionTypeExperimenter }

// Subtype returns the NXAST subtype the action encodes as.
func (a ActionNXResubmit) Subtype() NXSubtype {
	switch {
	case a.CT:
		return NXASTResubmitTableCT
	case a.NoTable:
		return NXASTResubmit
	}
	return NXASTResubmitTable
}

// MarshalBinary encodes the action.
func (a ActionNXResubmit) MarshalBinary() ([]byte, error) {
	p, ok := nxPort16(a.InPort)
	if !ok {
		return nil, fmt.Errorf("openflow: resubmit port %d does not fit 16 bits", a.InPort)
	}
	if a.CT && a.NoTable {
		return nil, fmt.Errorf("openflow: resubmit with ct needs a table")
	}
	b := nxStart(a.Subtype(), 16)
	be.PutUint16(b[10:], p)
	b[12] = a.Table
	if a.NoTable {
		b[12] = NXTableCurrent
	}
	return b, nil
}

// String formats as ovs-ofctl: "resubmit:3", "resubmit(,10)", "resubmit(1,10)", "resubmit(,10,ct)".
func (a ActionNXResubmit) String() string {
	if a.InPort != PortInPort && a.Table == NXTableCurrent && !a.CT {
		return "resubmit:" + nxPortName(a.InPort)
	}
	s := "resubmit("
	if a.InPort != PortInPort {
		s += nxPortName(a.InPort)
	}
	s += ","
	if a.Table != NXTableCurrent {
		s += fmt.Sprint(a.Table)
	}
	if a.CT {
		s += ",ct"
	}
	return s + ")"
}

// nxPortName names a port as ovs-ofctl's ofputil_format_port: numbers
// plain, reserved ports by name.
func nxPortName(p uint32) string {
	if p > PortMax {
		return PortName(p)
	}
	return fmt.Sprint(p)
}

// ActionNXRegMove is move:SRC[a..b]->DST[c..d].
//
//	10 bytes: Nicira header, subtype 6
//	2 bytes:  n_bits
//	2 bytes:  src_ofs
//	2 bytes:  dst_ofs
//	4 bytes:  src field header
//	4 bytes:  dst field header
//	pad to 8 (must be zero)
//
// Src.NBits and Dst.NBits must be equal: the wire carries one n_bits.
type ActionNXRegMove struct {
	Src, Dst Subfield
}

// Type returns ActionTypeExperimenter.
func (ActionNXRegMove) Type() ActionType { return ActionTypeExperimenter }

// Subtype returns NXASTRegMove.
func (ActionNXRegMove) Subtype() NXSubtype { return NXASTRegMove }

// MarshalBinary encodes the action.
func (a ActionNXRegMove) MarshalBinary() ([]byte, error) {
	if a.Src.NBits != a.Dst.NBits {
		return nil, fmt.Errorf("openflow: move of %d bits into %d", a.Src.NBits, a.Dst.NBits)
	}
	src, err := fieldHeader(a.Src.Field)
	if err != nil {
		return nil, err
	}
	dst, err := fieldHeader(a.Dst.Field)
	if err != nil {
		return nil, err
	}
	b := nxStart(NXASTRegMove, 16)
	be.PutUint16(b[10:], a.Src.NBits)
	be.PutUint16(b[12:], a.Src.Ofs)
	be.PutUint16(b[14:], a.Dst.Ofs)
	b = be.AppendUint32(b, src)
	b = be.AppendUint32(b, dst)
	return nxFinish(b)
}

// String formats as ovs-ofctl: "move:NXM_NX_REG0[0..15]->NXM_NX_REG1[16..31]".
func (a ActionNXRegMove) String() string { return "move:" + a.Src.String() + "->" + a.Dst.String() }

// ActionNXRegLoad is load:V->DST[a..b] (24 bytes).
//
//	10 bytes: Nicira header, subtype 7
//	2 bytes:  ofs_nbits: ofs<<6 | (n_bits-1)
//	4 bytes:  dst field header
//	8 bytes:  value, in the low n_bits bits
type ActionNXRegLoad struct {
	Dst   Subfield
	Value uint64
}

// Type returns ActionTypeExperimenter.
func (ActionNXRegLoad) Type() ActionType { return ActionTypeExperimenter }

// Subtype returns NXASTRegLoad.
func (ActionNXRegLoad) Subtype() NXSubtype { return NXASTRegLoad }

// MarshalBinary encodes the action.
func (a ActionNXRegLoad) MarshalBinary() ([]byte, error) {
	if a.Dst.NBits == 0 || a.Dst.NBits > 64 || a.Dst.Ofs > 0x3ff {
		return nil, fmt.Errorf("openflow: load to %s does not fit ofs_nbits", a.Dst)
	}
	h, err := fieldHeader(a.Dst.Field)
	if err != nil {
		return nil, err
	}
	b := nxStart(NXASTRegLoad, 24)
	be.PutUint16(b[10:], ofsNBits(a.Dst.Ofs, a.Dst.NBits))
	be.PutUint32(b[12:], h)
	be.PutUint64(b[16:], a.Value)
	return b, nil
}

// String formats as ovs-ofctl: "load:0x5->NXM_NX_REG0[0..15]".
func (a ActionNXRegLoad) String() string { return "load:" + cHex(a.Value) + "->" + a.Dst.String() }

// ActionNXRegLoad2 is set_field carried as a Nicira action, so that it may
// have a mask (OF1.3's set_field may not).
//
//	10 bytes: Nicira header, subtype 33
//	n bytes:  one OXM TLV, masked or not
//	pad to 8 (must be zero)
type ActionNXRegLoad2 struct{ Field OXM }

// Type returns ActionTypeExperimenter.
func (ActionNXRegLoad2) Type() ActionType { return ActionTypeExperimenter }

// Subtype returns NXASTRegLoad2.
func (ActionNXRegLoad2) Subtype() NXSubtype { return NXASTRegLoad2 }

// MarshalBinary encodes the action.
func (a ActionNXRegLoad2) MarshalBinary() ([]byte, error) {
	b, err := a.Field.appendTo(nxStart(NXASTRegLoad2, nxHeaderLen))
	if err != nil {
		return nil, err
	}
	return nxFinish(b)
}

// String formats as ovs-ofctl: "set_field:0x5/0xff->reg1".
func (a ActionNXRegLoad2) String() string {
	return "set_field:" + formatFieldValue(a.Field) + "->" + setFieldTarget(a.Field)
}

// ActionNXOutputReg is output:FIELD[a..b]: output to the port number held
// in a field (24 bytes).
//
//	10 bytes: Nicira header, subtype 15
//	2 bytes:  ofs_nbits of the source
//	4 bytes:  source field header
//	2 bytes:  max_len, for output to the controller (0xffff: all)
//	6 bytes:  zeros
type ActionNXOutputReg struct {
	Src    Subfield
	MaxLen uint16
}

// Type returns ActionTypeExperimenter.
func (ActionNXOutputReg) Type() ActionType { return ActionTypeExperimenter }

// Subtype returns NXASTOutputReg.
func (ActionNXOutputReg) Subtype() NXSubtype { return NXASTOutputReg }

// MarshalBinary encodes the action.
func (a ActionNXOutputReg) MarshalBinary() ([]byte, error) {
	if a.Src.NBits == 0 || a.Src.NBits > 64 || a.Src.Ofs > 0x3ff {
		return nil, fmt.Errorf("openflow: output from %s does not fit ofs_nbits", a.Src)
	}
	h, err := fieldHeader(a.Src.Field)
	if err != nil {
		return nil, err
	}
	b := nxStart(NXASTOutputReg, 24)
	be.PutUint16(b[10:], ofsNBits(a.Src.Ofs, a.Src.NBits))
	be.PutUint32(b[12:], h)
	be.PutUint16(b[16:], a.MaxLen)
	return b, nil
}

// String formats as ovs-ofctl: "output:NXM_NX_REG1[]" (it does not print
// max_len).
func (a ActionNXOutputReg) String() string { return "output:" + a.Src.String() }

// ActionNXNote is note:hex, a comment controllers attach to a flow.
//
//	10 bytes: Nicira header, subtype 8
//	n bytes:  the note, then zeros to a multiple of 8 (at least 6 bytes)
//
// Note holds every byte after the subtype, padding included, as Open
// vSwitch keeps and prints them ("note:01.02.03.04.05.00").
type ActionNXNote struct{ Note []byte }

// Type returns ActionTypeExperimenter.
func (ActionNXNote) Type() ActionType { return ActionTypeExperimenter }

// Subtype returns NXASTNote.
func (ActionNXNote) Subtype() NXSubtype { return NXASTNote }

// MarshalBinary encodes the action, zero-padding the note.
func (a ActionNXNote) MarshalBinary() ([]byte, error) {
	b := append(nxStart(NXASTNote, nxHeaderLen), a.Note...)
	if len(b) < 16 {
		b = append(b, make([]byte, 16-len(b))...)
	}
	return nxFinish(b)
}

// String formats as ovs-ofctl: "note:01.02.03".
func (a ActionNXNote) String() string {
	s := make([]string, len(a.Note))
	for i, c := range a.Note {
		s[i] = fmt.Sprintf("%02x", c)
	}
	return "note:" + strings.Join(s, ".")
}

// DropNotePrefix starts a note that names the reason the rule's drops are
// counted under in nagare's fast path ("drop:policy"; pkg/ofproto
// dropreason.go). Open vSwitch ignores it as it ignores every note.
const DropNotePrefix = "drop:"

// DropNote is the note that names reason, zero-padded to the length a
// flow dump hands back (6 + 8k bytes), so a controller comparing dumped
// flows with its own sees no difference.
func DropNote(reason string) ActionNXNote {
	b := []byte(DropNotePrefix + reason)
	for (len(b)-6)%8 != 0 {
		b = append(b, 0)
	}
	return ActionNXNote{Note: b}
}

// ActionNXDecTTL is dec_ttl(id,...): decrement the IP TTL, and send
// packets whose TTL expires to the controllers with these connection ids.
//
//	10 bytes: Nicira header, subtype 21
//	2 bytes:  n_controllers
//	4 bytes:  zeros
//	2n bytes: controller ids
//	pad to 8
type ActionNXDecTTL struct{ ControllerIDs []uint16 }

// Type returns ActionTypeExperimenter.
func (ActionNXDecTTL) Type() ActionType { return ActionTypeExperimenter }

// Subtype returns NXASTDecTTLCntIDs.
func (ActionNXDecTTL) Subtype() NXSubtype { return NXASTDecTTLCntIDs }

// MarshalBinary encodes the action.
func (a ActionNXDecTTL) MarshalBinary() ([]byte, error) {
	if len(a.ControllerIDs) > 0xffff {
		return nil, fmt.Errorf("openflow: dec_ttl with %d controllers", len(a.ControllerIDs))
	}
	b := nxStart(NXASTDecTTLCntIDs, 16)
	be.PutUint16(b[10:], uint16(len(a.ControllerIDs)))
	for _, id := range a.ControllerIDs {
		b = be.AppendUint16(b, id)
	}
	return nxFinish(b)
}

// String formats as ovs-ofctl: "dec_ttl(1,2)".
func (a ActionNXDecTTL) String() string {
	s := make([]string, len(a.ControllerIDs))
	for i, id := range a.ControllerIDs {
		s[i] = fmt.Sprint(id)
	}
	return "dec_ttl(" + strings.Join(s, ",") + ")"
}

// ActionNXConjunction is conjunction(id,k/n): this flow is clause k of n
// of conjunctive match id (16 bytes).
//
//	10 bytes: Nicira header, subtype 34
//	1 byte:   clause, k-1 (0-based on the wire)
//	1 byte:   n_clauses
//	4 bytes:  id
type ActionNXConjunction struct {
	ID       uint32
	Clause   uint8 // k, 1-based as written in conjunction(id,k/n)
	NClauses uint8 // n
}

// Type returns ActionTypeExperimenter.
func (ActionNXConjunction) Type() ActionType { return ActionTypeExperimenter }

// Subtype returns NXASTConjunction.
func (ActionNXConjunction) Subtype() NXSubtype { return NXASTConjunction }

// MarshalBinary encodes the action.
func (a ActionNXConjunction) MarshalBinary() ([]byte, error) {
	if a.Clause == 0 {
		return nil, fmt.Errorf("openflow: conjunction clause 0 (k is 1-based)")
	}
	b := nxStart(NXASTConjunction, 16)
	b[10], b[11] = a.Clause-1, a.NClauses
	be.PutUint32(b[12:], a.ID)
	return b, nil
}

// String formats as ovs-ofctl: "conjunction(5,1/2)".
func (a ActionNXConjunction) String() string {
	return fmt.Sprintf("conjunction(%d,%d/%d)", a.ID, a.Clause, a.NClauses)
}

// ActionNXCTClear is ct_clear: forget the packet's conntrack state (16
// bytes: Nicira header, subtype 43, 6 bytes pad).
type ActionNXCTClear struct{}

// Type returns ActionTypeExperimenter.
func (ActionNXCTClear) Type() ActionType { return ActionTypeExperimenter }

// Subtype returns NXASTCTClear.
func (ActionNXCTClear) Subtype() NXSubtype { return NXASTCTClear }

// MarshalBinary encodes the action.
func (ActionNXCTClear) MarshalBinary() ([]byte, error) { return nxStart(NXASTCTClear, 16), nil }

// String formats as ovs-ofctl.
func (ActionNXCTClear) String() string { return "ct_clear" }

// ct flags (NX_CT_F_*).
const (
	NXCTFlagCommit uint16 = 1 << 0 // commit the connection to the tracker
	NXCTFlagForce  uint16 = 1 << 1 // with commit: end a connection seen in the other direction first
	nxCTFlagsKnown        = NXCTFlagCommit | NXCTFlagForce
)

// ct alg= values: the helper's well-known port.
const (
	NXCTAlgFTP  uint16 = 21
	NXCTAlgTFTP uint16 = 69
)

// ActionNXCT is ct(...): send the packet through the connection tracker.
//
//	10 bytes: Nicira header, subtype 35
//	2 bytes:  flags (NXCTFlag*)
//	4 bytes:  zone_src: header of the field the zone comes from, 0 for an
//	          immediate zone
//	2 bytes:  zone_ofs_nbits (zone_src set) or the zone itself
//	1 byte:   recirc_table: table to resubmit to afterwards, 255 = none
//	3 bytes:  pad
//	2 bytes:  alg: 0, or the helper's port (21 ftp, 69 tftp)
//	n bytes:  nested actions, run only on commit: nat, and set_field or
//	          load to ct_mark / ct_label
type ActionNXCT struct {
	Flags uint16
	// ZoneSrc is zone=NXM_FIELD[a..b]; nil for an immediate Zone.
	ZoneSrc *Subfield
	Zone    uint16
	Table   uint8 // NXCTRecircNone: do not recirculate
	Alg     uint16
	Actions Actions
}

// NXCTRecircNone is ct's "no table=" value (255).
const NXCTRecircNone uint8 = 255

// Type returns ActionTypeExperimenter.
func (ActionNXCT) Type() ActionType { return ActionTypeExperimenter }

// Subtype returns NXASTCT.
func (ActionNXCT) Subtype() NXSubtype { return NXASTCT }

// MarshalBinary encodes the action with its nested actions.
func (a ActionNXCT) MarshalBinary() ([]byte, error) {
	b := nxStart(NXASTCT, 24)
	be.PutUint16(b[10:], a.Flags)
	if a.ZoneSrc != nil {
		h, err := fieldHeader(a.ZoneSrc.Field)
		if err != nil {
			return nil, err
		}
		if a.ZoneSrc.NBits == 0 || a.ZoneSrc.NBits > 64 || a.ZoneSrc.Ofs > 0x3ff {
			return nil, fmt.Errorf("openflow: ct zone %s does not fit ofs_nbits", a.ZoneSrc)
		}
		be.PutUint32(b[12:], h)
		be.PutUint16(b[16:], ofsNBits(a.ZoneSrc.Ofs, a.ZoneSrc.NBits))
	} else {
		be.PutUint16(b[16:], a.Zone)
	}
	b[18] = a.Table
	be.PutUint16(b[22:], a.Alg)
	b, err := a.Actions.appendTo(b)
	if err != nil {
		return nil, err
	}
	return nxFinish(b)
}

// String formats as ovs-ofctl: "ct(commit,force,table=10,zone=5,nat(...),exec(...),alg=ftp)".
// A leading nat prints outside exec(), as Open vSwitch does.
func (a ActionNXCT) String() string {
	var p []string
	if a.Flags&NXCTFlagCommit != 0 {
		p = append(p, "commit")
	}
	if a.Flags&NXCTFlagForce != 0 {
		p = append(p, "force")
	}
	if a.Table != NXCTRecircNone {
		p = append(p, fmt.Sprintf("table=%d", a.Table))
	}
	if a.ZoneSrc != nil {
		p = append(p, "zone="+a.ZoneSrc.String())
	} else if a.Zone != 0 {
		p = append(p, fmt.Sprintf("zone=%d", a.Zone))
	}
	as := a.Actions
	if len(as) > 0 {
		if nat, ok := as[0].(ActionNXNAT); ok {
			p = append(p, nat.String())
			as = as[1:]
		}
	}
	if len(as) > 0 {
		p = append(p, "exec("+as.String()+")")
	}
	switch a.Alg {
	case 0:
	case NXCTAlgFTP:
		p = append(p, "alg=ftp")
	case NXCTAlgTFTP:
		p = append(p, "alg=tftp")
	default:
		p = append(p, fmt.Sprintf("alg=%d", a.Alg))
	}
	return "ct(" + strings.Join(p, ",") + ")"
}

// nat flags (NX_NAT_F_*).
const (
	NXNATFlagSrc         uint16 = 1 << 0
	NXNATFlagDst         uint16 = 1 << 1
	NXNATFlagPersistent  uint16 = 1 << 2
	NXNATFlagProtoHash   uint16 = 1 << 3
	NXNATFlagProtoRandom uint16 = 1 << 4
	nxNATFlagsKnown             = 0x1f
)

// nat range_present bits (NX_NAT_RANGE_*): which optional fields follow,
// in this order.
const (
	nxNATRangeIPv4Min  uint16 = 1 << 0
	nxNATRangeIPv4Max  uint16 = 1 << 1
	nxNATRangeIPv6Min  uint16 = 1 << 2
	nxNATRangeIPv6Max  uint16 = 1 << 3
	nxNATRangeProtoMin uint16 = 1 << 4
	nxNATRangeProtoMax uint16 = 1 << 5
)

// ActionNXNAT is nat(...), valid only nested in ct.
//
//	10 bytes: Nicira header, subtype 36
//	2 bytes:  pad
//	2 bytes:  flags (NXNATFlag*)
//	2 bytes:  range_present: which of the following are there
//	4 bytes:  IPv4 min    4 bytes: IPv4 max
//	16 bytes: IPv6 min    16 bytes: IPv6 max
//	2 bytes:  port min    2 bytes: port max
//	pad to 8
//
// Absent values are the zero netip.Addr and port 0, and encode as absent
// (as Open vSwitch encodes them); AddrMax and PortMax are only sent when
// AddrMin / PortMin are.
type ActionNXNAT struct {
	Flags            uint16
	AddrMin, AddrMax netip.Addr
	PortMin, PortMax uint16
}

// Type returns ActionTypeExperimenter.
func (ActionNXNAT) Type() ActionType { return ActionTypeExperimenter }

// Subtype returns NXASTNAT.
func (ActionNXNAT) Subtype() NXSubtype { return NXASTNAT }

// MarshalBinary encodes the action.
func (a ActionNXNAT) MarshalBinary() ([]byte, error) {
	b := nxStart(NXASTNAT, 16)
	be.PutUint16(b[12:], a.Flags)
	var present uint16
	switch {
	case !a.AddrMin.IsValid():
		if a.AddrMax.IsValid() {
			return nil, fmt.Errorf("openflow: nat with a max address and no min")
		}
	case a.AddrMin.Is4():
		present |= nxNATRangeIPv4Min
		b = append(b, a.AddrMin.AsSlice()...)
		if a.AddrMax.IsValid() {
			if !a.AddrMax.Is4() {
				return nil, fmt.Errorf("openflow: nat range mixes IPv4 and IPv6")
			}
			present |= nxNATRangeIPv4Max
			b = append(b, a.AddrMax.AsSlice()...)
		}
	default:
		present |= nxNATRangeIPv6Min
		b = append(b, a.AddrMin.AsSlice()...)
		if a.AddrMax.IsValid() {
			if !a.AddrMax.Is6() {
				return nil, fmt.Errorf("openflow: nat range mixes IPv4 and IPv6")
			}
			present |= nxNATRangeIPv6Max
			b = append(b, a.AddrMax.AsSlice()...)
		}
	}
	if a.PortMin != 0 {
		present |= nxNATRangeProtoMin
		b = be.AppendUint16(b, a.PortMin)
		if a.PortMax != 0 {
			present |= nxNATRangeProtoMax
			b = be.AppendUint16(b, a.PortMax)
		}
	} else if a.PortMax != 0 {
		return nil, fmt.Errorf("openflow: nat with a max port and no min")
	}
	be.PutUint16(b[14:], present)
	return nxFinish(b)
}

// String formats as ovs-ofctl: "nat", "nat(src=10.0.0.1-10.0.0.5:1000-2000,persistent,random)",
// "nat(dst=[2001:db8::1]-[2001:db8::5]:80,hash)".
func (a ActionNXNAT) String() string {
	var p []string
	if a.Flags&(NXNATFlagSrc|NXNATFlagDst) != 0 {
		s := "src"
		if a.Flags&NXNATFlagDst != 0 {
			s = "dst"
		}
		if a.AddrMin.IsValid() {
			// Open vSwitch brackets IPv6 addresses only when a port follows.
			addr := func(x netip.Addr) string {
				if x.Is6() && a.PortMin != 0 {
					return "[" + x.String() + "]"
				}
				return x.String()
			}
			s += "=" + addr(a.AddrMin)
			if a.AddrMax.IsValid() && a.AddrMax != a.AddrMin {
				s += "-" + addr(a.AddrMax)
			}
			if a.PortMin != 0 {
				s += fmt.Sprintf(":%d", a.PortMin)
				if a.PortMax != 0 && a.PortMax != a.PortMin {
					s += fmt.Sprintf("-%d", a.PortMax)
				}
			}
		}
		p = append(p, s)
	}
	if a.Flags&NXNATFlagPersistent != 0 {
		p = append(p, "persistent")
	}
	if a.Flags&NXNATFlagProtoHash != 0 {
		p = append(p, "hash")
	}
	if a.Flags&NXNATFlagProtoRandom != 0 {
		p = append(p, "random")
	}
	if len(p) == 0 {
		return "nat"
	}
	return "nat(" + strings.Join(p, ",") + ")"
}

// parseNXAction decodes the body of a Nicira action of n bytes at the
// front of b (b[:n] is the whole action, header included). It returns
// nil, nil for a subtype this package does not decode, which the caller
// keeps verbatim as ActionExperimenter. Checks Open vSwitch makes while
// decoding are made here with its error codes; those that need the flow's
// match are ValidateActions'.
func parseNXAction(b []byte) (Action, error) {
	n := len(b)
	if n < 16 {
		return nil, bad(ErrTypeBadAction, BadActionBadLen, "nicira action of %d bytes", n)
	}
	sub := NXSubtype(be.Uint16(b[8:]))
	p := b[nxHeaderLen:]
	fixed := func(want int) error {
		if n != want {
			return bad(ErrTypeBadAction, BadActionBadLen, "nicira action %d length %d, want %d", sub, n, want)
		}
		return nil
	}
	switch sub {
	case NXASTResubmit, NXASTResubmitTable, NXASTResubmitTableCT:
		if err := fixed(16); err != nil {
			return nil, err
		}
		a := ActionNXResubmit{InPort: nxPort(be.Uint16(p)), Table: p[2], CT: sub == NXASTResubmitTableCT,
			NoTable: sub == NXASTResubmit}
		if a.NoTable {
			a.Table = NXTableCurrent // NXAST_RESUBMIT has no table: its byte is ignored
		}
		return a, nil
	case NXASTRegMove:
		if n < 24 {
			return nil, bad(ErrTypeBadAction, BadActionBadLen, "move of %d bytes", n)
		}
		nbits, srcOfs, dstOfs := be.Uint16(p), be.Uint16(p[2:]), be.Uint16(p[4:])
		src, err := parseFieldHeader(be.Uint32(p[6:]), ErrTypeBadMatch, BadMatchBadField)
		if err != nil {
			return nil, err
		}
		dst, err := parseFieldHeader(be.Uint32(p[10:]), ErrTypeBadMatch, BadMatchBadField)
		if err != nil {
			return nil, err
		}
		if err := fixed(24); err != nil {
			return nil, err
		}
		if !allZero(p[14:]) {
			return nil, nxErr(nxBRCMustBeZero, "move padding")
		}
		a := ActionNXRegMove{Src: Subfield{src, srcOfs, nbits}, Dst: Subfield{dst, dstOfs, nbits}}
		if err := checkSubfield(a.Src, false); err != nil {
			return nil, err
		}
		return a, checkSubfield(a.Dst, true)
	case NXASTRegLoad:
		if err := fixed(24); err != nil {
			return nil, err
		}
		on := be.Uint16(p)
		dst := Subfield{Ofs: on >> 6, NBits: on&0x3f + 1}
		k, err := parseFieldHeader(be.Uint32(p[2:]), ErrTypeBadAction, BadActionBadSetType)
		if err != nil {
			return nil, err
		}
		dst.Field = k
		if err := checkSubfield(dst, true); err != nil {
			return nil, err
		}
		v := be.Uint64(p[6:])
		if dst.NBits < 64 && v>>dst.NBits != 0 {
			return nil, bad(ErrTypeBadAction, BadActionBadArgument, "load of %#x into %d bits", v, dst.NBits)
		}
		return ActionNXRegLoad{Dst: dst, Value: v}, nil
	case NXASTRegLoad2:
		var o OXM
		k, err := o.decode(p, ErrTypeBadAction, BadActionBadSetLen)
		if err != nil {
			return nil, err
		}
		if err := fixed(pad8(nxHeaderLen + k)); err != nil {
			return nil, err
		}
		if !allZero(p[k:]) {
			return nil, nxErr(nxBRCMustBeZero, "reg_load2 padding")
		}
		return ActionNXRegLoad2{Field: o}, nil
	case NXASTNote:
		return ActionNXNote{Note: append([]byte{}, p...)}, nil
	case NXASTOutputReg:
		if err := fixed(24); err != nil {
			return nil, err
		}
		on := be.Uint16(p)
		src := Subfield{Ofs: on >> 6, NBits: on&0x3f + 1}
		k, err := parseFieldHeader(be.Uint32(p[2:]), ErrTypeBadAction, BadActionBadSetType)
		if err != nil {
			return nil, err
		}
		src.Field = k
		if !allZero(p[8:14]) {
			return nil, bad(ErrTypeBadAction, BadActionBadArgument, "output_reg zeros")
		}
		if err := checkSubfield(src, false); err != nil {
			return nil, err
		}
		return ActionNXOutputReg{Src: src, MaxLen: be.Uint16(p[6:])}, nil
	case NXASTDecTTLCntIDs:
		cnt := int(be.Uint16(p))
		if err := fixed(pad8(16 + 2*cnt)); err != nil {
			return nil, err
		}
		if !allZero(p[2:6]) {
			return nil, nxErr(nxBRCMustBeZero, "dec_ttl zeros")
		}
		ids := make([]uint16, cnt)
		for i := range ids {
			ids[i] = be.Uint16(p[6+2*i:])
		}
		return ActionNXDecTTL{ControllerIDs: ids}, nil
	case NXASTConjunction:
		if err := fixed(16); err != nil {
			return nil, err
		}
		clause, nclauses := p[0], p[1]
		if nclauses < 2 || nclauses > 64 || clause >= nclauses {
			return nil, nxErr(nxBACBadConjunction, fmt.Sprintf("conjunction clause %d of %d", clause+1, nclauses))
		}
		return ActionNXConjunction{ID: be.Uint32(p[2:]), Clause: clause + 1, NClauses: nclauses}, nil
	case NXASTCTClear:
		if err := fixed(16); err != nil {
			return nil, err
		}
		return ActionNXCTClear{}, nil
	case NXASTCT:
		if n < 24 {
			return nil, bad(ErrTypeBadAction, BadActionBadLen, "ct of %d bytes", n)
		}
		a := ActionNXCT{Flags: be.Uint16(p), Table: p[8], Alg: be.Uint16(p[12:])}
		if h := be.Uint32(p[2:]); h != 0 {
			k, err := parseFieldHeader(h, ErrTypeBadAction, BadActionBadSetType)
			if err != nil {
				return nil, err
			}
			on := be.Uint16(p[6:])
			zs := Subfield{Field: k, Ofs: on >> 6, NBits: on&0x3f + 1}
			if err := checkSubfield(zs, false); err != nil {
				return nil, err
			}
			if zs.NBits != 16 {
				return nil, bad(ErrTypeBadAction, BadActionBadSetLen, "ct zone from %d bits, want 16", zs.NBits)
			}
			a.ZoneSrc = &zs
		} else {
			a.Zone = be.Uint16(p[6:])
		}
		if err := a.Actions.UnmarshalBinary(b[24:]); err != nil {
			return nil, err
		}
		return a, nil
	case NXASTNAT:
		return parseNXNAT(b)
	case NXASTLearn:
		return parseNXLearn(b)
	}
	return nil, nil
}

// parseNXNAT decodes NXAST_NAT with Open vSwitch's checks (all
// OFPBAC_BAD_ARGUMENT): unknown or contradictory flags, a max without its
// min, mixed address families, a zero min, a max below its min.
func parseNXNAT(b []byte) (Action, error) {
	a := ActionNXNAT{Flags: be.Uint16(b[12:])}
	present := be.Uint16(b[14:])
	if a.Flags&^nxNATFlagsKnown != 0 || a.Flags&NXNATFlagSrc != 0 && a.Flags&NXNATFlagDst != 0 ||
		a.Flags&NXNATFlagProtoHash != 0 && a.Flags&NXNATFlagProtoRandom != 0 {
		return nil, bad(ErrTypeBadAction, BadActionBadArgument, "nat flags %#x", a.Flags)
	}
	if present&^0x3f != 0 {
		return nil, bad(ErrTypeBadAction, BadActionBadArgument, "nat range_present %#x", present)
	}
	opts := b[16:]
	take := func(k int) ([]byte, error) {
		if len(opts) < k {
			return nil, bad(ErrTypeBadAction, BadActionBadLen, "nat range of %d bytes", len(b)-16)
		}
		v := opts[:k]
		opts = opts[k:]
		return v, nil
	}
	argErr := func(what string) error { return bad(ErrTypeBadAction, BadActionBadArgument, "nat %s", what) }
	switch {
	case present&nxNATRangeIPv4Min != 0:
		if present&(nxNATRangeIPv6Min|nxNATRangeIPv6Max) != 0 {
			return nil, argErr("range mixes IPv4 and IPv6")
		}
		v, err := take(4)
		if err != nil {
			return nil, err
		}
		a.AddrMin = netip.AddrFrom4([4]byte(v))
		if a.AddrMin.IsUnspecified() {
			return nil, argErr("range from 0.0.0.0")
		}
		if present&nxNATRangeIPv4Max != 0 {
			if v, err = take(4); err != nil {
				return nil, err
			}
			a.AddrMax = netip.AddrFrom4([4]byte(v))
			if a.AddrMax.Less(a.AddrMin) {
				return nil, argErr("range max below min")
			}
		}
	case present&nxNATRangeIPv4Max != 0:
		return nil, argErr("IPv4 max without min")
	case present&nxNATRangeIPv6Min != 0:
		v, err := take(16)
		if err != nil {
			return nil, err
		}
		a.AddrMin = netip.AddrFrom16([16]byte(v))
		if a.AddrMin.IsUnspecified() {
			return nil, argErr("range from ::")
		}
		if present&nxNATRangeIPv6Max != 0 {
			if v, err = take(16); err != nil {
				return nil, err
			}
			a.AddrMax = netip.AddrFrom16([16]byte(v))
			if a.AddrMax.Less(a.AddrMin) {
				return nil, argErr("range max below min")
			}
		}
	case present&nxNATRangeIPv6Max != 0:
		return nil, argErr("IPv6 max without min")
	}
	if present&nxNATRangeProtoMin != 0 {
		if !a.AddrMin.IsValid() {
			return nil, argErr("port range without addresses")
		}
		v, err := take(2)
		if err != nil {
			return nil, err
		}
		if a.PortMin = be.Uint16(v); a.PortMin == 0 {
			return nil, argErr("port range from 0")
		}
		if present&nxNATRangeProtoMax != 0 {
			if v, err = take(2); err != nil {
				return nil, err
			}
			if a.PortMax = be.Uint16(v); a.PortMax < a.PortMin {
				return nil, argErr("port max below min")
			}
		}
	} else if present&nxNATRangeProtoMax != 0 {
		return nil, argErr("port max without min")
	}
	// The length must be exactly what the ranges need, so that the
	// action re-encodes to the bytes it came from.
	if want := pad8(len(b) - len(opts)); want != len(b) {
		return nil, bad(ErrTypeBadAction, BadActionBadLen, "nat length %d, want %d", len(b), want)
	}
	return a, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// checkSubfield makes Open vSwitch's mf_check_src / mf_check_dst checks
// that need no match: the bit range lies inside the field
// (OFPBAC_BAD_SET_LEN) and, for a destination, the field is writable
// (OFPBAC_BAD_SET_ARGUMENT).
func checkSubfield(s Subfield, dst bool) error {
	w, ok := fieldWidth(s.Field)
	switch {
	case !ok:
		return bad(ErrTypeBadAction, BadActionBadSetType, "unknown field %s", s.Field)
	case s.NBits == 0:
		return bad(ErrTypeBadAction, BadActionBadSetLen, "zero-bit %s", s)
	case int(s.Ofs) >= w || int(s.Ofs)+int(s.NBits) > w:
		return bad(ErrTypeBadAction, BadActionBadSetLen, "bits %d..%d of %d-bit %s", s.Ofs,
			int(s.Ofs)+int(s.NBits)-1, w, nxmName(s.Field))
	case dst && !fieldWritable(s.Field):
		return bad(ErrTypeBadAction, BadActionBadSetArgument, "%s is read-only", nxmName(s.Field))
	}
	return nil
}

// fieldWritable reports whether set_field, load or move may write k.
func fieldWritable(k FieldKey) bool {
	if k.Class == ClassOpenFlowBasic {
		return basicWritable(k.Field)
	}
	return nxFields[k].writable
}

// formatFieldValue prints a field's value (and mask) as set_field does:
// basic fields in their own notation, the Nicira fields in hex.
func formatFieldValue(o OXM) string {
	if o.Class == ClassOpenFlowBasic {
		return formatOXMValue(o)
	}
	hexOf := func(b []byte) string {
		if len(b) <= 8 {
			return cHex(getUint(b))
		}
		return hexBytes(b)
	}
	s := hexOf(o.Value)
	if o.Mask != nil && !allOnes(o.Mask) {
		s += "/" + hexOf(o.Mask)
	}
	return s
}

// setFieldTarget is the field name in "set_field:v->name".
func setFieldTarget(o OXM) string {
	if o.Class == ClassOpenFlowBasic {
		if name, ok := setFieldName[o.Field]; ok {
			return name
		}
		if int(o.Field) < numFields {
			return ovsName[o.Field]
		}
		return o.Field.String()
	}
	return o.Key().String()
}
