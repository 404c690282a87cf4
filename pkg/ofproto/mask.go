package ofproto

import (
	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// The megaflow mask of a translation is the set of key bits its result
// depended on. Every packet that agrees with the translated one on those
// bits must get the same actions (mask_test.go checks it on random
// pipelines), and no other bit may be in it, so that one megaflow covers
// as many packets as possible.
//
// The rules:
//   - the rule that matched: every bit of its match;
//   - each rule of higher priority that did not match: the bits of one of
//     its fields where the packet differs — for addresses and L4 ports
//     only the prefix that proves the difference (see "Prefix misses"). A
//     field that costs no new bit (already in the mask, or fully written
//     by this translation) is preferred; otherwise the first differing
//     field in matchFieldOrder;
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
	first, firstLevel := -1, -1
	for fi := range cm.fields {
		fb := &cm.fields[fi]
		level := fb.missLevel(pw, &cm.val)
		if level < 0 {
			continue // the packet agrees on this field
		}
		if !x.costs(fb, level) {
			return
		}
		if first < 0 {
			first, firstLevel = fi, level
		}
	}
	if first < 0 {
		// Cannot happen: the rule did not match, so a field differs.
		x.needRule(cm)
		return
	}
	fb := &cm.fields[first]
	for j := uint8(0); j < fb.n; j++ {
		if i := fb.idx[j]; !pipelineOnly(int(i)) {
			x.mask[i] |= fb.levelBits(j, firstLevel) &^ x.written[i]
		}
	}
}

// costs reports whether proving a miss on fb at level adds a bit to the
// mask.
func (x *xlate) costs(fb *fieldBits, level int) bool {
	for j := uint8(0); j < fb.n; j++ {
		if i := fb.idx[j]; !pipelineOnly(int(i)) && fb.levelBits(j, level)&^x.written[i]&^x.mask[i] != 0 {
			return true
		}
	}
	return false
}

// Prefix misses. A rule that matches ip_dst=10.1.0.5 misses a packet to
// 192.0.2.7 already on the first byte: un-wildcarding that byte proves
// the miss for every packet that shares it, where the whole address would
// make each destination its own megaflow (an allow-list ACL would cache
// one flow per 5-tuple). Open vSwitch finds the shortest proving prefix
// bit by bit (prefix tries); we round it up to a short ladder of lengths,
// so that one field contributes at most len(ladder) different masks: with
// exact lengths an attacker chooses packets that differ in each bit in
// turn and gets a mask per bit and field, multiplied across fields
// (Csikor et al., "Tuple Space Explosion", CoNEXT 2019). Ladders:
//
//	IP addresses (IPv4 in the first 4 bytes): /8 /16 /24 /32 /64 /96 /128
//	L4 ports:                                 /4 /8 /12 /16
//
// A rule's field never un-wildcards bits outside its own mask: a level is
// the ladder prefix intersected with the rule's bits, so a /20 rule's
// levels are /8, /16 and /20.

// prefixLadder is the cumulative prefix masks of one key field, shortest
// first.
type prefixLadder []words

func newPrefixLadder(f openflow.Field, lengths ...int) prefixLadder {
	var l prefixLadder
	for _, n := range lengths {
		var k flow.Key
		var meta uint64
		b := make([]byte, f.Len())
		for i := 0; i < n; i++ {
			b[i/8] |= 0x80 >> (i % 8)
		}
		place(&k, &meta, f, b)
		l = append(l, keyWords(&k))
	}
	return l
}

// The ladders (IPv4 rules use the first 4 bytes of the IPv6 ones).
var (
	ipSrcLadder = newPrefixLadder(openflow.FieldIPv6Src, 8, 16, 24, 32, 64, 96, 128)
	ipDstLadder = newPrefixLadder(openflow.FieldIPv6Dst, 8, 16, 24, 32, 64, 96, 128)
	tpSrcLadder = newPrefixLadder(openflow.FieldTCPSrc, 4, 8, 12, 16)
	tpDstLadder = newPrefixLadder(openflow.FieldTCPDst, 4, 8, 12, 16)
)

// ladderOf is the prefix ladder of field f, nil for fields without one.
func ladderOf(f openflow.Field) prefixLadder {
	switch f {
	case openflow.FieldIPv4Src, openflow.FieldIPv6Src, openflow.FieldARPSPA:
		return ipSrcLadder
	case openflow.FieldIPv4Dst, openflow.FieldIPv6Dst, openflow.FieldARPTPA:
		return ipDstLadder
	case openflow.FieldTCPSrc, openflow.FieldUDPSrc, openflow.FieldSCTPSrc:
		return tpSrcLadder
	case openflow.FieldTCPDst, openflow.FieldUDPDst, openflow.FieldSCTPDst:
		return tpDstLadder
	}
	return nil
}

// missLevel is the shortest ladder level of fb on which pw differs from
// val: 0 for fields without a ladder (the whole field), -1 when pw agrees.
func (fb *fieldBits) missLevel(pw, val *words) int {
	if fb.ladder == nil {
		for j := uint8(0); j < fb.n; j++ {
			if i := fb.idx[j]; (pw[i]^val[i])&fb.bits[j] != 0 {
				return 0
			}
		}
		return -1
	}
	for l := range fb.ladder {
		for j := uint8(0); j < fb.n; j++ {
			if i := fb.idx[j]; (pw[i]^val[i])&fb.bits[j]&fb.ladder[l][i] != 0 {
				return l
			}
		}
	}
	return -1
}

// levelBits are the bits of fb's j-th word that a miss at level proves.
func (fb *fieldBits) levelBits(j uint8, level int) uint64 {
	if fb.ladder == nil {
		return fb.bits[j]
	}
	return fb.bits[j] & fb.ladder[level][fb.idx[j]]
}

// finalMask applies the always-on rules and returns the datapath mask.
func (x *xlate) finalMask() flow.Mask {
	m := x.mask
	m.or(&maskInPort)
	m.or(&maskRecircID) // a first pass and a recirculated one never share a megaflow
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
	return m.key()
}
