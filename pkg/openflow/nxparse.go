package openflow

import (
	"encoding/hex"
	"fmt"
	"math/big"
	"net/netip"
	"strconv"
	"strings"
)

// Parsing of Open vSwitch's Nicira extension syntax for ParseFlow, so that
// an ovs-ofctl command line with reg/ct_* matches or ct, nat, move, load,
// resubmit, conjunction and note actions parses to the bytes ovs-ofctl
// sends (the golden add_flow_nx_* files check this).

// nxCtOrder is the order of the conntrack fields; ovs-ofctl puts the Nicira match fields among the
// basic ones: conj_id first of all; registers then the conntrack fields
// after tun_id and before metadata.
var nxCtOrder = []Field{NXMCtState, NXMCtZone, NXMCtMark, NXMCtLabel, NXMCtNWSrc, NXMCtNWDst,
	NXMCtIPv6Src, NXMCtIPv6Dst, NXMCtNWProto, NXMCtTPSrc, NXMCtTPDst}

// nxFieldByName finds a matchable non-basic field by its ovs-fields name.
func nxFieldByName(name string) (FieldKey, nxFieldInfo, bool) {
	for k, fi := range nxFields {
		if fi.matchable && fi.name == name {
			return k, fi, true
		}
	}
	return FieldKey{}, nxFieldInfo{}, false
}

// parseBig parses a decimal or 0x-hex number of at most bits bits.
func parseBig(s string, bits int) (*big.Int, error) {
	v, ok := new(big.Int).SetString(s, 0)
	if !ok || v.Sign() < 0 || v.BitLen() > bits {
		return nil, fmt.Errorf("bad %d-bit value %q", bits, s)
	}
	return v, nil
}

// bigBytes returns v big-endian over n bytes.
func bigBytes(v *big.Int, n int) []byte { return v.FillBytes(make([]byte, n)) }

// parseNXMatch parses one Nicira match token (reg3=0x5/0xff, xreg0=...,
// ct_state=+trk-new, ct_nw_src=10.0.0.0/8, conj_id=5...) into the OXMs
// ovs-ofctl sends for it (xreg and xxreg become 32-bit register pieces).
// ok is false when k is not a Nicira field name.
func parseNXMatch(k, v string) (out []OXM, ok bool, err error) {
	if strings.HasPrefix(k, "xreg") || strings.HasPrefix(k, "xxreg") {
		n, perr := strconv.Atoi(strings.TrimLeft(k, "x")[len("reg"):])
		width := 64
		if strings.HasPrefix(k, "xxreg") {
			width = 128
		}
		if perr != nil || n < 0 || n*width/32 >= NumRegs {
			return nil, false, nil
		}
		val, mask, err := parseBigMasked(v, width)
		if err != nil {
			return nil, true, err
		}
		pieces := width / 32
		vb, mb := bigBytes(val, width/8), bigBytes(mask, width/8)
		for i := 0; i < pieces; i++ {
			pv, pm := getUint(vb[4*i:4*i+4]), getUint(mb[4*i:4*i+4])
			pv &= pm
			switch {
			case pm == 0:
			case pm == 0xffffffff:
				out = append(out, Reg(n*pieces+i, uint32(pv)))
			default:
				out = append(out, RegMasked(n*pieces+i, uint32(pv), uint32(pm)))
			}
		}
		return out, true, nil
	}
	key, fi, found := nxFieldByName(k)
	if !found {
		return nil, false, nil
	}
	switch key.Field {
	case NXMCtState:
		o, err := parseCtState(v)
		if err == nil && o.Mask != nil && allZero(o.Mask) {
			return nil, true, nil
		}
		return []OXM{o}, true, err
	case NXMCtNWSrc, NXMCtNWDst, NXMCtIPv6Src, NXMCtIPv6Dst:
		f := FieldIPv4Src
		if fi.len == 16 {
			f = FieldIPv6Src
		}
		o, err := parseFieldValue(f, v, true)
		o.Class, o.Field = key.Class, key.Field
		if o.Mask != nil && allZero(o.Mask) {
			return nil, true, err
		}
		return []OXM{o}, true, err
	}
	val, mask, hasMask := strings.Cut(v, "/")
	bv, err := parseBig(val, 8*fi.len)
	if err != nil {
		return nil, true, err
	}
	o := OXM{Class: key.Class, Field: key.Field, Value: bigBytes(bv, fi.len)}
	if hasMask {
		if !fi.maskable {
			return nil, true, fmt.Errorf("%s is not maskable", k)
		}
		bm, err := parseBig(mask, 8*fi.len)
		if err != nil {
			return nil, true, err
		}
		// Open vSwitch keeps value&mask (reg1=0x100/0x1 is reg1=0/0x1).
		o.Value = bigBytes(new(big.Int).And(bv, bm), fi.len)
		o.Mask = bigBytes(bm, fi.len)
		if bm.Sign() == 0 {
			return nil, true, nil // wildcarded: ovs-ofctl sends nothing
		}
	}
	return []OXM{o}, true, nil
}

func parseBigMasked(v string, bits int) (val, mask *big.Int, err error) {
	a, b, hasMask := strings.Cut(v, "/")
	if val, err = parseBig(a, bits); err != nil {
		return nil, nil, err
	}
	mask = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(bits)), big.NewInt(1))
	if hasMask {
		if mask, err = parseBig(b, bits); err != nil {
			return nil, nil, err
		}
	}
	return val, mask, nil
}

// parseCtState parses "+trk+est-new", "trk|est" (every known bit under
// the mask) or "0x22/0x23".
func parseCtState(v string) (OXM, error) {
	bit := func(name string) (uint32, error) {
		for i, n := range ctStateNames {
			if n == name {
				return 1 << i, nil
			}
		}
		return 0, fmt.Errorf("unknown ct_state flag %q", name)
	}
	switch {
	case v == "":
		return OXM{}, fmt.Errorf("empty ct_state")
	case v[0] == '+' || v[0] == '-':
		var val, mask uint32
		for len(v) > 0 {
			sign := v[0]
			v = v[1:]
			end := strings.IndexAny(v, "+-")
			if end < 0 {
				end = len(v)
			}
			b, err := bit(v[:end])
			if err != nil {
				return OXM{}, err
			}
			v = v[end:]
			if sign == '+' {
				val |= b
			}
			mask |= b
		}
		return CtState(val, mask), nil
	case v[0] >= '0' && v[0] <= '9':
		// A zero mask (ct_state=0/0) is a wildcard; parseNXMatch drops it.
		val, mask, err := parseMasked(v, 32)
		if err != nil {
			return OXM{}, err
		}
		if !strings.Contains(v, "/") {
			mask = uint64(ctStateKnown)
		}
		return CtState(uint32(val&mask), uint32(mask)), nil
	}
	var val uint32
	for _, name := range strings.Split(v, "|") {
		b, err := bit(name)
		if err != nil {
			return OXM{}, err
		}
		val |= b
	}
	return CtState(val, ctStateKnown), nil
}

// nxmNames maps the NXM/OXM names move and load use to fields; nxm.go's
// init fills it once nxFields is complete.
var nxmNames = map[string]FieldKey{}

func initNXMNames() {
	for k, fi := range nxFields {
		nxmNames[fi.nxm] = k
	}
	for f := Field(0); f < numFields; f++ {
		nxmNames["OXM_OF_"+strings.ToUpper(fieldInfos[f].name)] = FieldKey{ClassOpenFlowBasic, f}
	}
}

// operandKey resolves a move/load/zone operand name as ovs-ofctl does: an
// NXM or OXM name, or an ovs-fields name; basic fields that have an NXM
// alias are named by it, as Open vSwitch writes their headers.
func operandKey(name string) (FieldKey, bool) {
	if k, ok := nxmNames[name]; ok {
		if n, alias := basicNXMName[k.Field]; alias && k.Class == ClassOpenFlowBasic {
			return nxmNames[n], true
		}
		return k, true
	}
	if k, _, ok := nxFieldByName(name); ok {
		return k, true
	}
	if name == "in_port" {
		return FieldKey{ClassNXM0, 0}, true
	}
	f, ok := fieldAliases[name]
	if !ok {
		return FieldKey{}, false
	}
	if n, ok := basicNXMName[f]; ok {
		return nxmNames[n], true
	}
	return FieldKey{ClassOpenFlowBasic, f}, true
}

// ParseSubfield parses "NXM_NX_REG0[0..15]", "reg0[3]", "NXM_NX_REG0[]" or
// a bare field name (its whole width).
func ParseSubfield(s string) (Subfield, error) {
	name, rng, hasRange := strings.Cut(s, "[")
	k, ok := operandKey(name)
	if !ok {
		return Subfield{}, fmt.Errorf("unknown field %q", name)
	}
	w, _ := fieldWidth(k)
	sf := Subfield{Field: k, NBits: uint16(w)}
	if !hasRange {
		return sf, nil
	}
	rng, ok = strings.CutSuffix(rng, "]")
	if !ok {
		return Subfield{}, fmt.Errorf("bad subfield %q", s)
	}
	if rng == "" {
		return sf, nil
	}
	lo, hi, isRange := strings.Cut(rng, "..")
	a, err := strconv.ParseUint(lo, 10, 16)
	if err != nil {
		return Subfield{}, fmt.Errorf("bad subfield %q", s)
	}
	b := a
	if isRange {
		if b, err = strconv.ParseUint(hi, 10, 16); err != nil || b < a {
			return Subfield{}, fmt.Errorf("bad subfield %q", s)
		}
	}
	if int(b) >= w {
		return Subfield{}, fmt.Errorf("%s: bits beyond the %d-bit field", s, w)
	}
	return Subfield{Field: k, Ofs: uint16(a), NBits: uint16(b - a + 1)}, nil
}

// loadPieces returns the REG_LOADs ovs-ofctl sends to write value under
// mask into field k: one per run of mask bits, runs longer than 64 bits
// cut into 64-bit pieces from the least significant end.
func loadPieces(k FieldKey, value, mask *big.Int) []Action {
	w, _ := fieldWidth(k)
	var out []Action
	for i := 0; i < w; {
		if mask.Bit(i) == 0 {
			i++
			continue
		}
		j := i
		for j < w && mask.Bit(j) == 1 && j-i < 64 {
			j++
		}
		v := new(big.Int).Rsh(value, uint(i))
		v.And(v, new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(j-i)), big.NewInt(1)))
		out = append(out, ActionNXRegLoad{Dst: Subfield{k, uint16(i), uint16(j - i)}, Value: v.Uint64()})
		i = j
	}
	return out
}

// parseNXActionText parses the Nicira actions; ok is false for another keyword.
// It may return more than one action (load of more than 64 bits, masked
// set_field).
func parseNXActionText(k, v, tok string, hasArg bool) (out []Action, ok bool, err error) {
	switch k {
	case "ct":
		a, err := parseCT(v)
		return []Action{a}, true, err
	case "nat":
		a, err := parseNAT(v, hasArg)
		return []Action{a}, true, err
	case "ct_clear":
		return []Action{ActionNXCTClear{}}, true, nil
	case "learn":
		a, err := parseLearn(v)
		return []Action{a}, true, err
	case "output":
		// output:FIELD[..]; ovs-ofctl tells a field from a port by the
		// brackets (and refuses output(port=FIELD[],...)).
		if !strings.Contains(v, "[") || strings.Contains(tok, "(") {
			return nil, false, nil
		}
		sf, err := ParseSubfield(v)
		return []Action{ActionNXOutputReg{Src: sf, MaxLen: 0xffff}}, true, err
	case "move":
		src, dst, found := strings.Cut(v, "->")
		if !found {
			return nil, true, fmt.Errorf("want move:SRC->DST")
		}
		s, err := ParseSubfield(src)
		if err != nil {
			return nil, true, err
		}
		d, err := ParseSubfield(dst)
		if err != nil {
			return nil, true, err
		}
		if s.NBits != d.NBits {
			return nil, true, fmt.Errorf("move of %d bits into %d", s.NBits, d.NBits)
		}
		return []Action{ActionNXRegMove{Src: s, Dst: d}}, true, nil
	case "load":
		val, dst, found := strings.Cut(v, "->")
		if !found {
			return nil, true, fmt.Errorf("want load:VALUE->DST")
		}
		d, err := ParseSubfield(dst)
		if err != nil {
			return nil, true, err
		}
		bv, err := parseBig(val, int(d.NBits))
		if err != nil {
			return nil, true, err
		}
		ones := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(d.NBits)), big.NewInt(1))
		return loadPieces(d.Field, new(big.Int).Lsh(bv, uint(d.Ofs)), new(big.Int).Lsh(ones, uint(d.Ofs))), true, nil
	case "set_field":
		val, name, found := strings.Cut(v, "->")
		if !found {
			return nil, false, nil
		}
		key, fi, isNX := nxFieldByName(name)
		if !isNX {
			return nil, false, nil
		}
		bv, bm, err := parseBigMasked(val, 8*fi.len)
		if err != nil {
			return nil, true, err
		}
		if bm.BitLen() == 8*fi.len && bm.Cmp(new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(8*fi.len)), big.NewInt(1))) == 0 {
			return []Action{ActionSetField{Field: OXM{Class: key.Class, Field: key.Field, Value: bigBytes(bv, fi.len)}}}, true, nil
		}
		return loadPieces(key, bv, bm), true, nil
	case "resubmit":
		a, err := parseResubmit(v, hasArg, strings.Contains(tok, "("))
		return []Action{a}, true, err
	case "conjunction":
		id, kn, found := strings.Cut(v, ",")
		kk, n, found2 := strings.Cut(kn, "/")
		if !found || !found2 {
			return nil, true, fmt.Errorf("want conjunction(id,k/n)")
		}
		iv, err1 := parseUint(strings.TrimSpace(id), 32)
		kv, err2 := parseUint(strings.TrimSpace(kk), 8)
		nv, err3 := parseUint(strings.TrimSpace(n), 8)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, true, fmt.Errorf("want conjunction(id,k/n)")
		}
		return []Action{ActionNXConjunction{ID: uint32(iv), Clause: uint8(kv), NClauses: uint8(nv)}}, true, nil
	case "note":
		b, err := hex.DecodeString(strings.ReplaceAll(v, ".", ""))
		if err != nil {
			return nil, true, err
		}
		// The note fills the action up to its 8-byte boundary with zeros.
		b = append(b, make([]byte, pad8(nxHeaderLen+len(b))-nxHeaderLen-len(b))...)
		if len(b) < 6 {
			b = append(b, make([]byte, 6-len(b))...)
		}
		return []Action{ActionNXNote{Note: b}}, true, nil
	case "dec_ttl":
		if !hasArg {
			return nil, false, nil
		}
		ids := []uint16{}
		for _, s := range strings.Split(v, ",") {
			if strings.TrimSpace(s) == "" && v == "" {
				break // dec_ttl(): no controller ids
			}
			n, err := parseUint(strings.TrimSpace(s), 16)
			if err != nil {
				return nil, true, err
			}
			ids = append(ids, uint16(n))
		}
		return []Action{ActionNXDecTTL{ControllerIDs: ids}}, true, nil
	}
	return nil, false, nil
}

// parseResubmit parses "resubmit:PORT" and "resubmit([PORT],[TABLE][,ct])".
func parseResubmit(v string, hasArg, paren bool) (ActionNXResubmit, error) {
	a := ActionNXResubmit{InPort: PortInPort, Table: NXTableCurrent}
	if !hasArg {
		return a, fmt.Errorf("resubmit needs a port or table")
	}
	parts := []string{v}
	if paren {
		parts = strings.Split(v, ",")
	}
	if len(parts) > 3 || len(parts) == 3 && parts[2] != "ct" {
		return a, fmt.Errorf("bad resubmit(%s)", v)
	}
	if p := strings.TrimSpace(parts[0]); p != "" {
		port, err := parsePort(p)
		if err != nil {
			return a, err
		}
		a.InPort = port
	}
	if len(parts) > 1 {
		if t := strings.TrimSpace(parts[1]); t != "" {
			n, err := parseUint(t, 8)
			if err != nil {
				return a, err
			}
			a.Table = uint8(n)
		}
	}
	a.CT = len(parts) == 3
	return a, nil
}

// parseCT parses the inside of ct(...).
func parseCT(v string) (ActionNXCT, error) {
	a := ActionNXCT{Table: NXCTRecircNone}
	for _, tok := range splitTop(v) {
		k, val, hasVal := strings.Cut(tok, "=")
		switch {
		case tok == "commit":
			a.Flags |= NXCTFlagCommit
		case tok == "force":
			a.Flags |= NXCTFlagForce
		case k == "table" && hasVal:
			n, err := parseUint(val, 8)
			if err != nil {
				return a, err
			}
			a.Table = uint8(n)
		case k == "zone" && hasVal:
			if n, err := parseUint(val, 16); err == nil {
				a.Zone = uint16(n)
				break
			}
			sf, err := ParseSubfield(val)
			if err != nil {
				return a, err
			}
			a.ZoneSrc = &sf
		case k == "alg" && hasVal:
			switch val {
			case "ftp":
				a.Alg = NXCTAlgFTP
			case "tftp":
				a.Alg = NXCTAlgTFTP
			default:
				n, err := parseUint(val, 16)
				if err != nil {
					return a, err
				}
				a.Alg = uint16(n)
			}
		case tok == "nat" || strings.HasPrefix(tok, "nat(") && strings.HasSuffix(tok, ")"):
			arg := strings.TrimSuffix(strings.TrimPrefix(tok, "nat("), ")")
			n, err := parseNAT(arg, tok != "nat")
			if err != nil {
				return a, err
			}
			a.Actions = append(a.Actions, n)
		case strings.HasPrefix(tok, "exec(") && strings.HasSuffix(tok, ")"):
			as, err := ParseActions(tok[len("exec(") : len(tok)-1])
			if err != nil {
				return a, err
			}
			a.Actions = append(a.Actions, as...)
		default:
			return a, fmt.Errorf("unknown ct argument %q", tok)
		}
	}
	return a, nil
}

// parseNAT parses the inside of nat(...): src|dst[=ADDR[-ADDR][:PORT[-PORT]]],
// persistent, hash, random. IPv6 addresses may be bracketed.
func parseNAT(v string, hasArg bool) (ActionNXNAT, error) {
	var a ActionNXNAT
	if !hasArg {
		return a, nil
	}
	for _, tok := range splitTop(v) {
		k, val, hasVal := strings.Cut(tok, "=")
		switch k {
		case "src", "dst":
			if a.Flags&(NXNATFlagSrc|NXNATFlagDst) != 0 {
				return a, fmt.Errorf("nat: both src and dst")
			}
			a.Flags |= NXNATFlagSrc
			if k == "dst" {
				a.Flags = a.Flags&^NXNATFlagSrc | NXNATFlagDst
			}
			if hasVal {
				if err := parseNATRange(&a, val); err != nil {
					return a, err
				}
			}
		case "persistent":
			a.Flags |= NXNATFlagPersistent
		case "hash":
			a.Flags |= NXNATFlagProtoHash
		case "random":
			a.Flags |= NXNATFlagProtoRandom
		default:
			return a, fmt.Errorf("unknown nat argument %q", tok)
		}
	}
	return a, nil
}

// parseNATRange parses ADDR[-ADDR][:PORT[-PORT]].
func parseNATRange(a *ActionNXNAT, s string) error {
	addr := func(s string) (netip.Addr, string, error) {
		if strings.HasPrefix(s, "[") {
			end := strings.IndexByte(s, ']')
			if end < 0 {
				return netip.Addr{}, "", fmt.Errorf("nat: unclosed [ in %q", s)
			}
			x, err := netip.ParseAddr(s[1:end])
			return x, s[end+1:], err
		}
		end := strings.IndexAny(s, "-")
		if end < 0 {
			end = len(s)
		}
		// An IPv4 address ends at ':' (the port); an unbracketed IPv6
		// address runs to '-' or the end.
		if i := strings.IndexByte(s[:end], ':'); i >= 0 && strings.Count(s[:end], ":") == 1 {
			end = i
		}
		x, err := netip.ParseAddr(s[:end])
		return x, s[end:], err
	}
	var err error
	if a.AddrMin, s, err = addr(s); err != nil {
		return err
	}
	if strings.HasPrefix(s, "-") {
		if a.AddrMax, s, err = addr(s[1:]); err != nil {
			return err
		}
	}
	if a.AddrMin.Zone() != "" || a.AddrMax.Zone() != "" {
		return fmt.Errorf("nat: an address with a zone")
	}
	if strings.HasPrefix(s, ":") {
		lo, hi, isRange := strings.Cut(s[1:], "-")
		n, err := parseUint(lo, 16)
		if err != nil {
			return err
		}
		a.PortMin = uint16(n)
		if isRange {
			if n, err = parseUint(hi, 16); err != nil {
				return err
			}
			a.PortMax = uint16(n)
		}
		s = ""
	}
	if s != "" {
		return fmt.Errorf("nat: trailing %q", s)
	}
	// Open vSwitch prints no max equal to its min, so one written that
	// way is dropped here for the text to read back to the same bytes
	// (ovs-ofctl itself would send it).
	if a.AddrMax == a.AddrMin {
		a.AddrMax = netip.Addr{}
	}
	if a.PortMax == a.PortMin {
		a.PortMax = 0
	}
	return nil
}
