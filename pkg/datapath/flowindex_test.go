package datapath

import (
	"testing"

	"github.com/nagare-net/nagare/pkg/flow"
)

// TestFlowIndexCollisions: flows whose megaflow keys share a hash are all
// found, and each is removed alone, wherever it sits in the chain.
func TestFlowIndexCollisions(t *testing.T) {
	for _, shared := range []bool{false, true} {
		x := newFlowIndex()
		if shared {
			x.oneChain = true
		}
		var ins []*installed
		var mids []megaflowID
		var keys []flow.Key
		for i := 0; i < 5; i++ {
			var k flow.Key
			k.InPort, k.TpSrc = 1, uint16(i)
			in := &installed{id: uint32(i), slot: i % 2, key: k}
			mid := makeMegaflowID(in.slot, &in.key)
			if x.get(&mid, in.slot, &in.key) != nil {
				t.Fatalf("shared %v: flow %d found before it was put", shared, i)
			}
			x.put(&mid, in)
			ins, mids, keys = append(ins, in), append(mids, mid), append(keys, k)
		}
		// The same key under another slot is another megaflow.
		other := ins[0].key
		if mid := makeMegaflowID(1, &other); x.get(&mid, 1, &other) != nil {
			t.Fatalf("shared %v: key of slot 0 found in slot 1", shared)
		}
		// Remove the middle, the head, the tail: the rest stay found.
		for _, i := range []int{2, 4, 0} {
			x.del(&mids[i], ins[i])
			ins[i] = nil
			n := 0
			for j, in := range ins {
				got := x.get(&mids[j], j%2, &keys[j])
				if in == nil && got != nil || in != nil && got != in {
					t.Fatalf("shared %v, after removing %d: flow %d gives %v", shared, i, j, got)
				}
				if in != nil {
					n++
				}
			}
			all := 0
			for range x.all() {
				all++
			}
			if x.len() != n || all != n {
				t.Fatalf("shared %v, after removing %d: len %d, all %d, want %d", shared, i, x.len(), all, n)
			}
		}
	}
}
