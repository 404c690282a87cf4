package openflow

import (
	"fmt"
	"math/big"
	"strings"
)

// learn(...): Open vSwitch's NXAST_LEARN, an action that adds (or
// refreshes) a flow built from the packet at hand. Session affinity,
// MAC learning and "remember this client" pipelines are built on it.

// learn flags (NX_LEARN_F_*). NX_LEARN_F_WRITE_RESULT (4) belongs to
// NXAST_LEARN2, which is not decoded here.
const (
	NXLearnFlagSendFlowRem   uint16 = 1 << 0 // the learned flow has send_flow_rem
	NXLearnFlagDeleteLearned uint16 = 1 << 1 // deleting the learning flow deletes what it learned
	nxLearnFlagsKnown               = NXLearnFlagSendFlowRem | NXLearnFlagDeleteLearned
)

// NXLearnDst says what a learn spec builds in the learned flow.
type NXLearnDst uint16

// learn spec destinations, bits 12..11 of the spec header.
const (
	NXLearnMatch  NXLearnDst = 0 << 11 // a match on Dst
	NXLearnLoad   NXLearnDst = 1 << 11 // an action loading Dst
	NXLearnOutput NXLearnDst = 2 << 11 // output to the port the source holds
)

const (
	nxLearnSrcImmediate  = 1 << 13
	nxLearnDstMask       = 3 << 11
	nxLearnNBitsMask     = 0x7ff
	nxLearnHeaderLen     = 32
	nxLearnDefaultPrio   = 0x8000
	nxLearnDefaultTable  = 1
	nxLearnFieldOperand  = 6 // 4-byte field header + 2-byte ofs
	nxLearnMaxImmBits    = 128
	nxLearnOutputMaxBits = 32
)

// NXLearnSpec is one flow_mod_spec of learn: where a value comes from (a
// subfield of the packet, or an immediate) and what it becomes (a match,
// a load, an output).
//
//	2 bytes: header: bit 13 src (0 field, 1 immediate), bits 12..11 dst
//	         (0 match, 1 load, 2 output), bits 10..0 n_bits
//	src:     field: 4-byte field header + 2-byte ofs;
//	         immediate: 2*ceil(n_bits/16) bytes, the value right-aligned
//	dst:     match/load: 4-byte field header + 2-byte ofs; output: nothing
type NXLearnSpec struct {
	Dst   NXLearnDst
	NBits uint16
	// Src is the source subfield (its NBits is NBits) unless Imm is set.
	Src Subfield
	// Imm is the immediate source, 2*ceil(NBits/16) bytes as on the wire.
	Imm []byte
	// DstField is the match or load destination (NBits wide); unused for
	// output.
	DstField Subfield
}

// ActionNXLearn is learn(...).
//
//	10 bytes: Nicira header, subtype 16
//	2 bytes:  idle_timeout       2 bytes: hard_timeout
//	2 bytes:  priority           8 bytes: cookie
//	2 bytes:  flags (NXLearnFlag*)
//	1 byte:   table_id (255 is refused)
//	1 byte:   pad (must be zero)
//	2 bytes:  fin_idle_timeout   2 bytes: fin_hard_timeout
//	n bytes:  flow_mod_specs (NXLearnSpec), then zeros to a multiple of 8
type ActionNXLearn struct {
	IdleTimeout, HardTimeout       uint16
	Priority                       uint16
	Cookie                         uint64
	Flags                          uint16
	Table                          uint8
	FinIdleTimeout, FinHardTimeout uint16
	Specs                          []NXLearnSpec
}

// NXASTLearn is NXAST_LEARN.
const NXASTLearn NXSubtype = 16

// Type returns ActionTypeExperimenter.
func (ActionNXLearn) Type() ActionType { return ActionTypeExperimenter }

// Subtype returns NXASTLearn.
func (ActionNXLearn) Subtype() NXSubtype { return NXASTLearn }

// immBytes is the wire size of an n-bit immediate.
func immBytes(nbits uint16) int { return 2 * ((int(nbits) + 15) / 16) }

// MarshalBinary encodes the action.
func (a ActionNXLearn) MarshalBinary() ([]byte, error) {
	b := nxStart(NXASTLearn, nxLearnHeaderLen)
	be.PutUint16(b[10:], a.IdleTimeout)
	be.PutUint16(b[12:], a.HardTimeout)
	be.PutUint16(b[14:], a.Priority)
	be.PutUint64(b[16:], a.Cookie)
	be.PutUint16(b[24:], a.Flags)
	b[26] = a.Table
	be.PutUint16(b[28:], a.FinIdleTimeout)
	be.PutUint16(b[30:], a.FinHardTimeout)
	for _, s := range a.Specs {
		if s.NBits == 0 || s.NBits > nxLearnNBitsMask {
			return nil, fmt.Errorf("openflow: learn spec of %d bits", s.NBits)
		}
		h := uint16(s.Dst) | s.NBits
		if s.Imm != nil {
			h |= nxLearnSrcImmediate
		}
		b = be.AppendUint16(b, h)
		if s.Imm != nil {
			if len(s.Imm) != immBytes(s.NBits) {
				return nil, fmt.Errorf("openflow: learn immediate of %d bytes for %d bits", len(s.Imm), s.NBits)
			}
			b = append(b, s.Imm...)
		} else {
			var err error
			if b, err = appendLearnOperand(b, s.Src); err != nil {
				return nil, err
			}
		}
		if s.Dst != NXLearnOutput {
			var err error
			if b, err = appendLearnOperand(b, s.DstField); err != nil {
				return nil, err
			}
		}
	}
	return nxFinish(b)
}

func appendLearnOperand(b []byte, s Subfield) ([]byte, error) {
	h, err := fieldHeader(s.Field)
	if err != nil {
		return nil, err
	}
	return be.AppendUint16(be.AppendUint32(b, h), s.Ofs), nil
}

// parseNXLearn decodes NXAST_LEARN with Open vSwitch's checks
// (decode_NXAST_RAW_LEARN, decode_LEARN_specs): a nonzero pad, unknown
// flags, table 255, a spec whose src/dst pair is not one of the five
// valid ones or nonzero bytes after the last spec: OFPBAC_BAD_ARGUMENT;
// a spec running past the end: OFPBAC_BAD_LEN; an unknown field:
// OFPBAC_BAD_SET_TYPE; a bit range outside its field: OFPBAC_BAD_SET_LEN.
func parseNXLearn(b []byte) (Action, error) {
	if len(b) < nxLearnHeaderLen {
		return nil, bad(ErrTypeBadAction, BadActionBadLen, "learn of %d bytes", len(b))
	}
	argErr := func(format string, args ...any) error {
		return bad(ErrTypeBadAction, BadActionBadArgument, "learn: "+format, args...)
	}
	a := ActionNXLearn{IdleTimeout: be.Uint16(b[10:]), HardTimeout: be.Uint16(b[12:]), Priority: be.Uint16(b[14:]),
		Cookie: be.Uint64(b[16:]), Flags: be.Uint16(b[24:]), Table: b[26],
		FinIdleTimeout: be.Uint16(b[28:]), FinHardTimeout: be.Uint16(b[30:])}
	switch {
	case b[27] != 0:
		return nil, argErr("pad")
	case a.Flags&^nxLearnFlagsKnown != 0:
		return nil, argErr("flags %#x", a.Flags)
	case a.Table == 0xff:
		return nil, argErr("table 255")
	}
	p := b[nxLearnHeaderLen:]
	for len(p) >= 2 {
		h := be.Uint16(p)
		if h == 0 {
			break
		}
		p = p[2:]
		s := NXLearnSpec{Dst: NXLearnDst(h & nxLearnDstMask), NBits: h & nxLearnNBitsMask}
		imm := h&nxLearnSrcImmediate != 0
		// Open vSwitch ignores the two reserved bits; so does this.
		if s.Dst == 3<<11 || s.Dst == NXLearnOutput && imm {
			return nil, argErr("spec header %#04x", h)
		}
		need := 0
		if imm {
			need += immBytes(s.NBits)
		} else {
			need += nxLearnFieldOperand
		}
		if s.Dst != NXLearnOutput {
			need += nxLearnFieldOperand
		}
		if len(p) < need {
			return nil, bad(ErrTypeBadAction, BadActionBadLen, "learn spec needs %d bytes, %d left", need, len(p))
		}
		operand := func() (Subfield, error) {
			k, err := parseFieldHeader(be.Uint32(p), ErrTypeBadAction, BadActionBadSetType)
			sf := Subfield{Field: k, Ofs: be.Uint16(p[4:]), NBits: s.NBits}
			p = p[nxLearnFieldOperand:]
			return sf, err
		}
		var err error
		if imm {
			s.Imm = append([]byte{}, p[:immBytes(s.NBits)]...)
			p = p[immBytes(s.NBits):]
		} else if s.Src, err = operand(); err != nil {
			return nil, err
		}
		if s.Dst != NXLearnOutput {
			if s.DstField, err = operand(); err != nil {
				return nil, err
			}
		}
		a.Specs = append(a.Specs, s)
	}
	if !allZero(p) {
		return nil, argErr("bytes after the last spec")
	}
	// learn_check's range checks, which ofp-parse makes on decode too.
	for _, s := range a.Specs {
		if s.Imm == nil {
			if err := checkSubfield(s.Src, false); err != nil {
				return nil, err
			}
		}
		if s.Dst != NXLearnOutput {
			if err := checkSubfield(s.DstField, s.Dst == NXLearnLoad); err != nil {
				return nil, err
			}
		}
	}
	// Re-encoding must give back these bytes: the specs end where the
	// padding of their own length does.
	if enc, err := a.MarshalBinary(); err != nil || len(enc) != len(b) {
		return nil, bad(ErrTypeBadAction, BadActionBadLen, "learn of %d bytes, specs take %d", len(b), len(enc))
	}
	return a, nil
}

// checkLearn is Open vSwitch's learn_check: every source subfield lies in
// its field and has its prerequisites in the learning flow's match m;
// every match destination lies in its field and has its prerequisites in
// the learned match built so far (the earlier immediate matches); every
// load destination is writable; an immediate value fits its bits; output
// reads at most 32 bits.
func checkLearn(a ActionNXLearn, m Match) error {
	if a.Table == 0xff {
		return bad(ErrTypeBadAction, BadActionBadArgument, "learn to table 255")
	}
	if a.Flags&^nxLearnFlagsKnown != 0 {
		return bad(ErrTypeBadAction, BadActionBadArgument, "learn flags %#x", a.Flags)
	}
	var learned Match
	for _, s := range a.Specs {
		if s.Imm == nil {
			if s.Src.NBits != s.NBits {
				return bad(ErrTypeBadAction, BadActionBadSetLen, "learn source %s for %d bits", s.Src, s.NBits)
			}
			if err := checkSubfieldIn(s.Src, m, false, false); err != nil {
				return err
			}
		} else if len(s.Imm) != immBytes(s.NBits) || new(big.Int).SetBytes(s.Imm).BitLen() > int(s.NBits) {
			return bad(ErrTypeBadAction, BadActionBadArgument, "learn immediate %x for %d bits", s.Imm, s.NBits)
		}
		switch s.Dst {
		case NXLearnMatch:
			if s.DstField.NBits != s.NBits {
				return bad(ErrTypeBadAction, BadActionBadSetLen, "learn match %s for %d bits", s.DstField, s.NBits)
			}
			if err := checkSubfieldIn(s.DstField, learned, false, false); err != nil {
				return err
			}
			if s.Imm != nil {
				if o, ok := learnedOXM(s.DstField, new(big.Int).SetBytes(s.Imm)); ok {
					learned = learned.Add(o)
				}
			}
		case NXLearnLoad:
			if s.DstField.NBits != s.NBits {
				return bad(ErrTypeBadAction, BadActionBadSetLen, "learn load %s for %d bits", s.DstField, s.NBits)
			}
			if err := checkSubfield(s.DstField, true); err != nil {
				return err
			}
		case NXLearnOutput:
			if s.NBits > nxLearnOutputMaxBits {
				return bad(ErrTypeBadAction, BadActionBadSetLen, "learn output from %d bits", s.NBits)
			}
		}
	}
	return nil
}

// learnedOXM is the exact (or bit-masked) match on sf's bits holding v,
// as a match field: NXM aliases of basic fields become the basic field.
func learnedOXM(sf Subfield, v *big.Int) (OXM, bool) {
	if sf.Field == (FieldKey{ClassNXM0, 0}) {
		// NXM_OF_IN_PORT is the 16-bit OpenFlow 1.0 port: the match is
		// on the 32-bit in_port.
		return Uint(FieldInPort, uint64(nxPort(uint16(v.Uint64())))), true
	}
	n, ok := fieldBytes(sf.Field)
	if !ok {
		return OXM{}, false
	}
	val := bigBytes(new(big.Int).Lsh(v, uint(sf.Ofs)), n)
	ones := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(sf.NBits)), big.NewInt(1))
	mask := bigBytes(new(big.Int).Lsh(ones, uint(sf.Ofs)), n)
	o := OXM{Class: sf.Field.Class, Field: sf.Field.Field, Value: val}
	if f, ok := BasicOf(sf.Field); ok {
		o.Class, o.Field = ClassOpenFlowBasic, f
	}
	if w, _ := fieldWidth(sf.Field); int(sf.NBits) != w || sf.Ofs != 0 {
		o.Mask = mask
	}
	return o, true
}

// String formats as ovs-ofctl: "learn(table=25,hard_timeout=10,priority=200,delete_learned,cookie=0x3,
// eth_type=0x800,nw_proto=6,NXM_OF_TCP_DST[],load:NXM_NX_REG3[]->NXM_NX_REG3[],output:NXM_OF_IN_PORT[])".
func (a ActionNXLearn) String() string {
	p := []string{fmt.Sprintf("table=%d", a.Table)}
	for _, t := range []struct {
		name string
		v    uint16
	}{{"idle_timeout", a.IdleTimeout}, {"hard_timeout", a.HardTimeout},
		{"fin_idle_timeout", a.FinIdleTimeout}, {"fin_hard_timeout", a.FinHardTimeout}} {
		if t.v != 0 {
			p = append(p, fmt.Sprintf("%s=%d", t.name, t.v))
		}
	}
	if a.Priority != nxLearnDefaultPrio {
		p = append(p, fmt.Sprintf("priority=%d", a.Priority))
	}
	if a.Flags&NXLearnFlagSendFlowRem != 0 {
		p = append(p, "send_flow_rem")
	}
	if a.Flags&NXLearnFlagDeleteLearned != 0 {
		p = append(p, "delete_learned")
	}
	if a.Cookie != 0 {
		p = append(p, fmt.Sprintf("cookie=%#x", a.Cookie))
	}
	for _, s := range a.Specs {
		p = append(p, s.String())
	}
	return "learn(" + strings.Join(p, ",") + ")"
}

// String formats one spec as ovs-ofctl's learn_format does.
func (s NXLearnSpec) String() string {
	imm := func() string {
		if s.Imm == nil {
			return ""
		}
		v := new(big.Int).SetBytes(s.Imm)
		if v.Sign() == 0 {
			return "0"
		}
		return "0x" + v.Text(16)
	}
	switch s.Dst {
	case NXLearnMatch:
		if s.Imm != nil {
			if w, _ := fieldWidth(s.DstField.Field); s.DstField.Ofs == 0 && int(s.NBits) == w {
				if o, ok := learnedOXM(s.DstField, new(big.Int).SetBytes(s.Imm)); ok {
					return mfName(s.DstField.Field) + "=" + learnValue(o)
				}
			}
			return s.DstField.String() + "=" + imm()
		}
		if s.Src.Field == s.DstField.Field && s.Src.Ofs == s.DstField.Ofs {
			return s.DstField.String()
		}
		return s.DstField.String() + "=" + s.Src.String()
	case NXLearnLoad:
		src := imm()
		if s.Imm == nil {
			src = s.Src.String()
		}
		return "load:" + src + "->" + s.DstField.String()
	}
	return "output:" + s.Src.String()
}

// mfRenamed are the basic fields whose Open vSwitch meta-flow name (as
// learn prints a whole-field immediate) is not the OXM name.
var mfRenamed = map[Field]string{FieldIPDSCP: "nw_tos", FieldIPECN: "nw_ecn", FieldIPProto: "nw_proto",
	FieldIPv4Src: "ip_src", FieldIPv4Dst: "ip_dst", FieldICMPv4Type: "icmp_type", FieldICMPv4Code: "icmp_code"}

// mfName is a field's meta-flow name.
func mfName(k FieldKey) string {
	if f, ok := BasicOf(k); ok {
		if n, ok := mfRenamed[f]; ok {
			return n
		}
		return FieldName(FieldKey{ClassOpenFlowBasic, f})
	}
	return FieldName(k)
}

// learnValue prints a whole-field immediate as mf_format does: the basic
// fields in their notation (eth_type and the like in hex), others in hex.
func learnValue(o OXM) string {
	if o.Class != ClassOpenFlowBasic {
		return formatFieldValue(o)
	}
	switch o.Field {
	case FieldEthType, FieldVLANVID, FieldMetadata, FieldTunnelID:
		return cHex(o.Uint())
	}
	return formatOXMValue(o)
}

// parseLearn parses the inside of learn(...) as ovs-ofctl's learn_parse:
// table=, priority=, idle_timeout=, hard_timeout=, fin_idle_timeout=,
// fin_hard_timeout=, cookie=, send_flow_rem, delete_learned, and specs:
//
//	FIELD=VALUE          match the whole field on an immediate
//	FIELD[a..b]=VALUE    match bits on an immediate
//	FIELD[a..b]          match bits on the packet's same bits
//	FIELD[a..b]=SRC[c..d] match bits on the packet's SRC bits
//	load:SRC[c..d]->DST[a..b], load:VALUE->DST[a..b]
//	output:SRC[c..d]
func parseLearn(v string) (ActionNXLearn, error) {
	a := ActionNXLearn{Table: nxLearnDefaultTable, Priority: nxLearnDefaultPrio}
	u16 := map[string]*uint16{"priority": &a.Priority, "idle_timeout": &a.IdleTimeout, "hard_timeout": &a.HardTimeout,
		"fin_idle_timeout": &a.FinIdleTimeout, "fin_hard_timeout": &a.FinHardTimeout}
	for _, tok := range splitTop(v) {
		k, val, hasVal := strings.Cut(tok, "=")
		var err error
		switch dst, isU16 := u16[k]; {
		case tok == "send_flow_rem":
			a.Flags |= NXLearnFlagSendFlowRem
		case tok == "delete_learned":
			a.Flags |= NXLearnFlagDeleteLearned
		case hasVal && isU16:
			var n uint64
			n, err = parseUint(val, 16)
			*dst = uint16(n)
		case hasVal && k == "table":
			var n uint64
			if n, err = parseUint(val, 8); err == nil && n == 0xff {
				err = fmt.Errorf("table 255")
			}
			a.Table = uint8(n)
		case hasVal && k == "cookie":
			a.Cookie, err = parseUint(val, 64)
		default:
			var s NXLearnSpec
			if s, err = parseLearnSpec(tok); err != nil {
				return a, err
			}
			a.Specs = append(a.Specs, s)
		}
		if err != nil {
			return a, fmt.Errorf("learn %s: %v", k, err)
		}
	}
	return a, nil
}

// learnImm encodes v as an nbits immediate.
func learnImm(v *big.Int, nbits uint16) ([]byte, error) {
	if v.BitLen() > int(nbits) {
		return nil, fmt.Errorf("learn value %#x does not fit %d bits", v, nbits)
	}
	return bigBytes(v, immBytes(nbits)), nil
}

// parseLearnSpec parses one learn spec (see parseLearn).
func parseLearnSpec(tok string) (NXLearnSpec, error) {
	var s NXLearnSpec
	if rest, ok := strings.CutPrefix(tok, "load:"); ok {
		src, dst, found := strings.Cut(rest, "->")
		if !found {
			return s, fmt.Errorf("want load:SRC->DST in learn")
		}
		d, err := ParseSubfield(dst)
		if err != nil {
			return s, err
		}
		s = NXLearnSpec{Dst: NXLearnLoad, NBits: d.NBits, DstField: d}
		if v, ok := new(big.Int).SetString(src, 0); ok {
			s.Imm, err = learnImm(v, d.NBits)
			return s, err
		}
		if s.Src, err = ParseSubfield(src); err == nil && s.Src.NBits != d.NBits {
			err = fmt.Errorf("learn load of %d bits into %d", s.Src.NBits, d.NBits)
		}
		return s, err
	}
	if rest, ok := strings.CutPrefix(tok, "output:"); ok {
		src, err := ParseSubfield(rest)
		return NXLearnSpec{Dst: NXLearnOutput, NBits: src.NBits, Src: src}, err
	}
	name, val, hasVal := strings.Cut(tok, "=")
	d, err := ParseSubfield(name)
	if err != nil {
		return s, fmt.Errorf("unknown learn argument %q", tok)
	}
	s = NXLearnSpec{Dst: NXLearnMatch, NBits: d.NBits, DstField: d, Src: d}
	if !hasVal {
		return s, nil
	}
	if src, err := ParseSubfield(val); err == nil {
		if src.NBits != d.NBits {
			return s, fmt.Errorf("learn match of %d bits from %d", d.NBits, src.NBits)
		}
		s.Src = src
		return s, nil
	}
	s.Src = Subfield{}
	if !strings.Contains(name, "[") {
		// A whole field by name takes a value in the field's own notation.
		m, err := ParseMatch(name + "=" + val)
		if err == nil && len(m.Fields) == 1 && m.Fields[0].Mask == nil {
			s.Imm, err = learnImm(new(big.Int).SetBytes(m.Fields[0].Value), d.NBits)
			return s, err
		}
	}
	v, ok := new(big.Int).SetString(val, 0)
	if !ok {
		return s, fmt.Errorf("bad learn value %q", tok)
	}
	s.Imm, err = learnImm(v, d.NBits)
	return s, err
}

// FlowMod builds the flow learn adds for one packet, as Open vSwitch's
// learn_execute: read returns the packet's bits of a source subfield,
// big-endian in (NBits+7)/8 bytes. The match holds every match spec
// (several specs on one field merge their bits); loads become REG_LOADs
// (REG_LOAD2 beyond 64 bits) and output an output action, in spec order.
// The command is ADD: the pipeline that applies it refreshes an
// identical flow instead of replacing it. fin_idle_timeout and
// fin_hard_timeout are not carried (no fin_timeout action here).
func (a ActionNXLearn) FlowMod(read func(Subfield) []byte) *FlowMod {
	fm := &FlowMod{Command: FlowAdd, TableID: a.Table, Priority: a.Priority, Cookie: a.Cookie,
		IdleTimeout: a.IdleTimeout, HardTimeout: a.HardTimeout, BufferID: NoBuffer, OutPort: PortAny, OutGroup: GroupAny}
	if a.Flags&NXLearnFlagSendFlowRem != 0 {
		fm.Flags |= FlowFlagSendFlowRem
	}
	var acts Actions
	byField := map[FieldKey]int{} // index in fm.Match.Fields
	for _, s := range a.Specs {
		var v *big.Int
		if s.Imm != nil {
			v = new(big.Int).SetBytes(s.Imm)
			v.And(v, new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(s.NBits)), big.NewInt(1)))
		} else {
			v = new(big.Int).SetBytes(read(s.Src))
		}
		switch s.Dst {
		case NXLearnMatch:
			o, ok := learnedOXM(s.DstField, v)
			if !ok {
				continue
			}
			i, seen := byField[o.Key()]
			if !seen {
				byField[o.Key()] = len(fm.Match.Fields)
				fm.Match.Fields = append(fm.Match.Fields, o)
				continue
			}
			fm.Match.Fields[i] = mergeOXM(fm.Match.Fields[i], o)
		case NXLearnLoad:
			if s.NBits <= 64 {
				acts = append(acts, ActionNXRegLoad{Dst: s.DstField, Value: v.Uint64()})
				continue
			}
			if o, ok := learnedOXM(s.DstField, v); ok {
				if o.Mask == nil {
					n, _ := fieldBytes(s.DstField.Field)
					o.Mask = allOnesBytes(n)
				}
				o.Class, o.Field = s.DstField.Field.Class, s.DstField.Field.Field
				acts = append(acts, ActionNXRegLoad2{Field: o})
			}
		case NXLearnOutput:
			// Open vSwitch outputs only to a port that fits 16 bits:
			// a physical port below OFPP_MAX, or IN_PORT and the like.
			if p := v.Uint64(); v.BitLen() <= 16 && p != 0 {
				acts = append(acts, ActionOutput{Port: nxPort(uint16(p)), MaxLen: 0xffff})
			}
		}
	}
	if len(acts) > 0 {
		fm.Instructions = Instructions{InstApplyActions{Actions: acts}}
	}
	return fm
}

// mergeOXM adds o's masked bits to m (the same field).
func mergeOXM(m, o OXM) OXM {
	n := len(m.Value)
	mm, om := m.Mask, o.Mask
	if mm == nil {
		return m // already exact: the later spec's bits agree or lose, as in OVS
	}
	if om == nil {
		om = allOnesBytes(n)
	}
	out := OXM{Class: m.Class, Field: m.Field, Value: make([]byte, n), Mask: make([]byte, n)}
	for i := 0; i < n; i++ {
		out.Mask[i] = mm[i] | om[i]
		out.Value[i] = m.Value[i]&^om[i] | o.Value[i]&om[i]
	}
	if allOnes(out.Mask) {
		out.Mask = nil
	}
	return out
}

func allOnesBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 0xff
	}
	return b
}
