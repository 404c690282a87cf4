package datapath

import (
	"hash/maphash"
	"iter"

	"github.com/nagare-net/nagare/pkg/flow"
)

// flowIndex finds the installed flows by megaflow key (mask slot and
// masked key, the kernel's megaflows key). It is a Go map keyed by a hash
// of that key, the flows whose keys share a hash chained through
// installed.next: a map keyed by the 168-byte key itself hashed, compared
// and moved 176-byte slots on every install, about a tenth of a flow
// setup's time in the slow path (BenchmarkFlowSetup).
type flowIndex struct {
	m    map[uint64]*installed
	n    int
	seed maphash.Seed
	// oneChain makes every key hash alike (tests of the chains).
	oneChain bool
}

func newFlowIndex() flowIndex {
	return flowIndex{m: make(map[uint64]*installed), seed: maphash.MakeSeed()}
}

// hash is a method, not a func field, so that mid does not escape to the
// heap: that would be one allocation per install.
func (x *flowIndex) hash(mid *megaflowID) uint64 {
	if x.oneChain {
		return 7
	}
	return maphash.Bytes(x.seed, mid[:])
}

// get returns the flow installed under mid (slot and key are what mid is
// made of), or nil.
func (x *flowIndex) get(mid *megaflowID, slot int, key *flow.Key) *installed {
	for in := x.m[x.hash(mid)]; in != nil; in = in.next {
		if in.slot == slot && in.key == *key {
			return in
		}
	}
	return nil
}

// put adds in under mid, its megaflow key (not there yet).
func (x *flowIndex) put(mid *megaflowID, in *installed) {
	h := x.hash(mid)
	in.next = x.m[h]
	x.m[h] = in
	x.n++
}

// del removes in, installed under mid.
func (x *flowIndex) del(mid *megaflowID, in *installed) {
	h := x.hash(mid)
	head := x.m[h]
	switch {
	case head == in && in.next == nil:
		delete(x.m, h)
	case head == in:
		x.m[h] = in.next
	default:
		p := head
		for p != nil && p.next != in {
			p = p.next
		}
		if p == nil {
			return // not there
		}
		p.next = in.next
	}
	in.next = nil
	x.n--
}

func (x *flowIndex) len() int { return x.n }

// all yields every installed flow, in no order.
func (x *flowIndex) all() iter.Seq[*installed] {
	return func(yield func(*installed) bool) {
		for _, in := range x.m {
			for ; in != nil; in = in.next {
				if !yield(in) {
					return
				}
			}
		}
	}
}
