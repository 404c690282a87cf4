package ofproto

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/nagare-net/nagare/pkg/flow"
)

// megaflowSet counts the distinct megaflows and masks that a stream of
// translations would install.
type megaflowSet struct {
	flows map[[2]flow.Key]bool
	masks map[flow.Mask]bool
}

func newMegaflowSet() *megaflowSet {
	return &megaflowSet{flows: map[[2]flow.Key]bool{}, masks: map[flow.Mask]bool{}}
}

func (s *megaflowSet) add(k flow.Key, tr *Translation) {
	s.flows[[2]flow.Key{k.And(tr.Mask), tr.Mask}] = true
	s.masks[tr.Mask] = true
}

// allowList is an ACL as a pod's network policy writes it: a few allowed
// (source prefix, destination, protocol, port) tuples, everything else
// dropped. With hashed, its allow rules are many (a subtable past
// smallSubtable), as a policy allowing a /24 host by host would be.
func allowList(t *testing.T, hashed bool) *Pipeline {
	p, _ := newTestPipeline(t, 3)
	mustAdd(t, p,
		"priority=100,in_port=1,tcp,nw_src=10.0.1.0/24,nw_dst=10.0.2.5,tp_dst=80,actions=output:2",
		"priority=100,in_port=1,udp,nw_src=10.0.1.0/24,nw_dst=10.0.2.6,tp_dst=53,actions=output:2",
		"priority=90,in_port=1,tcp,nw_dst=10.0.3.0/24,tp_dst=443,actions=output:2",
		"priority=0,actions=drop",
	)
	if hashed {
		for i := range 200 {
			mustAdd(t, p, fmt.Sprintf("priority=100,in_port=1,tcp,nw_src=10.0.1.0/24,nw_dst=10.0.4.%d,tp_dst=8080,actions=output:2", i))
		}
	}
	return p
}

// randomTuple is a never-repeating-looking 5-tuple from in_port 1: random
// addresses (anywhere, or inside the node's 10.0.0.0/16) and ports.
func randomTuple(r *rand.Rand, inside bool) flow.Key {
	k := tcpKey(1, "0.0.0.0", "0.0.0.0", uint16(r.Uint32()), uint16(r.Uint32()))
	if r.IntN(2) == 0 {
		k.NwProto = 17
	}
	src, dst := r.Uint32(), r.Uint32()
	if inside {
		src, dst = 10<<24|src&0xffff, 10<<24|dst&0xffff
	}
	k.IPSrc = [16]byte{byte(src >> 24), byte(src >> 16), byte(src >> 8), byte(src)}
	k.IPDst = [16]byte{byte(dst >> 24), byte(dst >> 16), byte(dst >> 8), byte(dst)}
	return k
}

// Under an allow-list ACL, N random 5-tuples must not each become their
// own megaflow: a miss is proved by an address or port prefix.
// go test -v -run 'AllowList|TupleSpace' ./pkg/ofproto/ — megaflows
// (masks) for 10000 tuples, whole-field misses → prefix misses:
//
//	few rules, anywhere        10000 (2) →  548 (4)
//	few rules, in 10.0.0.0/16   9613 (3) →  554 (5)
//	203 rules, anywhere        10000 (1) →  291 (2)
//	203 rules, in 10.0.0.0/16   9997 (2) →  341 (6)
//	tuple-space explosion: masks 6 → 17 (few rules), 2 → 18 (203 rules)
func TestAllowListMegaflows(t *testing.T) {
	const n = 10000
	for _, hashed := range []bool{false, true} {
		for _, inside := range []bool{false, true} {
			t.Run(fmt.Sprintf("hashed=%v,inside=%v", hashed, inside), func(t *testing.T) {
				p := allowList(t, hashed)
				r := rand.New(rand.NewPCG(9, uint64(n)))
				s := newMegaflowSet()
				for range n {
					k := randomTuple(r, inside)
					s.add(k, translate(t, p, k))
				}
				t.Logf("%d random 5-tuples: %d megaflows, %d masks", n, len(s.flows), len(s.masks))
				// Random traffic mostly misses on the first byte of ip_dst
				// (256 values) or, inside 10.0.0.0/16, on the third
				// (x 2 protocols, each ip_dst/24 then on a port nibble).
				if len(s.flows) > 2000 {
					t.Errorf("%d megaflows for %d tuples: misses un-wildcard too much", len(s.flows), n)
				}
				if len(s.masks) > maxACLMasks {
					t.Errorf("%d masks, bound %d", len(s.masks), maxACLMasks)
				}
			})
		}
	}
}

// maxACLMasks bounds the masks one allow-list ACL can produce: a miss on
// ip_dst at one of its 4 IPv4 levels, or (ip_dst exact) on ip_src at 4, or
// (both) on the port at 4, ip_proto or not, plus the hits.
const maxACLMasks = 32

// The tuple-space-explosion attack (Csikor et al., CoNEXT 2019) crafts
// packets that differ from the allowed tuples in each bit in turn, so that
// a classifier finding the shortest proving prefix bit by bit installs a
// mask per bit and field — masks the datapath must probe for every
// packet. Prefix ladders bound that: the attack gets no more masks than
// random traffic's bound.
func TestTupleSpaceExplosionBounded(t *testing.T) {
	for _, hashed := range []bool{false, true} {
		t.Run(fmt.Sprintf("hashed=%v", hashed), func(t *testing.T) {
			p := allowList(t, hashed)
			s := newMegaflowSet()
			allowed := tcpKey(1, "10.0.1.7", "10.0.2.5", 40000, 80)
			for _, proto := range []uint8{6, 17} {
				for bit := range 32 {
					for _, field := range []int{0, 1, 2, 3} {
						k := allowed
						k.NwProto = proto
						switch field {
						case 0:
							k.IPDst[bit/8] ^= 0x80 >> (bit % 8)
						case 1:
							k.IPSrc[bit/8] ^= 0x80 >> (bit % 8)
						case 2:
							k.TpDst ^= 0x8000 >> (bit % 16)
						case 3:
							k.TpSrc ^= 0x8000 >> (bit % 16)
						}
						s.add(k, translate(t, p, k))
					}
				}
			}
			t.Logf("tuple-space-explosion packets: %d megaflows, %d masks", len(s.flows), len(s.masks))
			if len(s.masks) > maxACLMasks {
				t.Errorf("%d masks, bound %d", len(s.masks), maxACLMasks)
			}
		})
	}
}
