package ofproto

import "github.com/nagare-net/nagare/pkg/flow"

// The megaflow mask of a translation is the set of key bits its result
// depended on. Every packet that agrees with the translated one on those
// bits must get the same actions (mask_test.go checks it on random
// pipelines), and no other bit may be in it, so that one megaflow covers
// as many packets as possible.
//
// The rules:
//   - the rule that matched: every bit of its match;
//   - each rule of higher priority that did not match: the bits of one of
//     its fields where the packet differs. A field that costs no new bit
//     (already in the mask, or fully written by this translation) is
//     preferred; otherwise the first differing field in matchFieldOrder;
//   - bits of the current packet that this translation wrote itself
//     (x.written) are never added: their value comes from the actions,
//     not from the packet. The metadata register is always "written";
//   - in_port is always exact; eth_type is exact when any L3/L4 bit is,
//     ip_proto when an L4 port is;
//   - NORMAL adds in_port, eth_src, eth_dst and the VLAN id; SELECT groups
//     the hashed fields; output to a tunnel port the tunnel id when it came
//     from the packet.

// need adds bits of the current packet to the mask, minus written bits.
func (x *xlate) need(m *words) {
	for i := 0; i < flow.KeyWords; i++ {
		x.mask[i] |= m[i] &^ x.written[i]
	}
}

// needInput adds bits of the packet as it arrived, written or not (for
// decisions taken on the datapath's view of the packet, not the
// pipeline's).
func (x *xlate) needInput(m *words) {
	for i := 0; i < flow.KeyWords; i++ {
		x.mask[i] |= m[i]
	}
}

// needRule records a matched rule.
func (x *xlate) needRule(cm *compiledMatch) {
	for _, i := range cm.nz {
		if int(i) < flow.KeyWords {
			x.mask[i] |= cm.mask[i] &^ x.written[i]
		}
	}
}

// needMiss records a higher-priority rule that did not match pw.
func (x *xlate) needMiss(cm *compiledMatch, pw *words) {
	if cm.never {
		return
	}
	first := -1
	for fi := range cm.fields {
		fb := &cm.fields[fi]
		differs, cost := false, false
		for j := uint8(0); j < fb.n; j++ {
			i := fb.idx[j]
			if (pw[i]^cm.val[i])&fb.bits[j] != 0 {
				differs = true
			}
			if i != metaWord && fb.bits[j]&^x.written[i]&^x.mask[i] != 0 {
				cost = true
			}
		}
		if !differs {
			continue
		}
		if !cost {
			return
		}
		if first < 0 {
			first = fi
		}
	}
	if first < 0 {
		// Cannot happen: the rule did not match, so a field differs.
		x.needRule(cm)
		return
	}
	fb := &cm.fields[first]
	for j := uint8(0); j < fb.n; j++ {
		if i := fb.idx[j]; i != metaWord {
			x.mask[i] |= fb.bits[j] &^ x.written[i]
		}
	}
}

// finalMask applies the always-on rules and returns the datapath mask.
func (x *xlate) finalMask() flow.Mask {
	m := x.mask
	m.or(&maskInPort)
	l4 := false
	l3 := false
	for i := 0; i < flow.KeyWords; i++ {
		if m[i]&maskL3L4[i] != 0 {
			l3 = true
		}
		if m[i]&(maskTpSrc[i]|maskTpDst[i]) != 0 {
			l4 = true
		}
	}
	if l3 {
		m.or(&maskEthType)
	}
	if l4 {
		m.or(&maskIPProto)
	}
	m[metaWord] = 0
	return m.key()
}
