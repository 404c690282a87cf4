package openflow

// MatchKey is a Match (or a packet's extracted fields) flattened for
// evaluation: value and mask per basic field in fixed arrays indexed by
// Field, plus the presence bitmap. Evaluating a flow against a packet is
// then a loop over the flow's present bits with no allocation. nagarectl
// trace and tests use it as the reference classifier; the datapath
// compiles the same values into its own megaflow key.
type MatchKey struct {
	Present FieldSet
	Value   [numFields][16]byte // left-aligned, Field.Len() bytes used
	Mask    [numFields][16]byte // all ones over Field.Len() when unmasked
}

// Key flattens a validated match. Fields of other classes or unknown
// basic fields cannot be evaluated and make Key fail with OFPBMC_BAD_FIELD.
func (m Match) Key() (MatchKey, error) {
	var k MatchKey
	for _, o := range m.Fields {
		if err := validateOXM(o); err != nil {
			return MatchKey{}, err
		}
		if o.Class != ClassOpenFlowBasic {
			return MatchKey{}, bad(ErrTypeBadMatch, BadMatchBadField, "%s is not a basic field", oxmName(o))
		}
		n := o.Field.Len()
		copy(k.Value[o.Field][:n], o.Value)
		if o.Mask != nil {
			copy(k.Mask[o.Field][:n], o.Mask)
		} else {
			for i := range n {
				k.Mask[o.Field][i] = 0xff
			}
		}
		k.Present |= 1 << o.Field
	}
	return k, nil
}

// PacketKey returns the key of a packet from its header fields given as
// exact OXMs (what a parser extracted); fields the packet lacks are simply
// absent.
func PacketKey(fields ...OXM) (MatchKey, error) { return Match{Fields: fields}.Key() }

// Covers reports whether the flow key k matches packet key p: every field
// k constrains must be present in p and equal under k's mask. A vlan_vid
// of OFPVID_NONE matches packets without a vlan_vid field.
func (k *MatchKey) Covers(p *MatchKey) bool {
	for f := Field(0); f < numFields; f++ {
		if !k.Present.Has(f) {
			continue
		}
		if !p.Present.Has(f) {
			if f == FieldVLANVID && k.Value[f][0] == 0 && k.Value[f][1] == 0 {
				continue // untagged flow, untagged packet
			}
			return false
		}
		for i := range f.Len() {
			if p.Value[f][i]&k.Mask[f][i] != k.Value[f][i] {
				return false
			}
		}
	}
	return true
}
