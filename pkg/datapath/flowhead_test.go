package datapath

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/nagare-net/nagare/pkg/flow"
)

// spread is a list of n actions (more than a head holds) whose three
// outputs sit at its start, in its middle (past the head's last action)
// and at its end, all to port.
func spread(port uint32, n int) []flow.Action {
	acts := make([]flow.Action, n)
	for i := range acts {
		acts[i] = flow.DecTTL{}
	}
	acts[0], acts[inlineActions+1], acts[n-1] = flow.Output{Port: port}, flow.Output{Port: port}, flow.Output{Port: port}
	return acts
}

func (t *testDP) hasTail(id uint32) bool {
	t.tb.Helper()
	var tail flowTailBytes
	err := t.objs.FlowTails.Lookup(id, &tail)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.tb.Fatal(err)
	}
	return err == nil
}

// TestLongListKeepsItsTail: a list longer than a head runs whole, from the
// megaflow (flow_fetch puts head and tail together) and from the
// exact-match cache; a Modify to a short list drops the tail, one back to
// a long list writes it again, a delete removes it; a restart reads the
// whole list back.
func TestLongListKeepsItsTail(t *testing.T) {
	d := newTestDP(t)
	d.pinCPU(t)
	pkt := udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, "x")
	out0, out1 := d.ifindex["dummy0"], d.ifindex["dummy1"]
	want := func(what string, ifindex int) {
		t.Helper()
		r := d.run(pkt, "lo")
		w := []traceOut{{ifindex, 0}, {ifindex, 0}, {ifindex, outLast}}
		if r.verdict != tcActRedirect || fmt.Sprint(r.outputs) != fmt.Sprint(w) {
			t.Fatalf("%s: verdict %d outputs %v, want %d %v", what, r.verdict, r.outputs, tcActRedirect, w)
		}
	}
	f := inPortFlow(spread(portOut, 11)...)
	id, err := d.Install(f)
	if err != nil {
		t.Fatal(err)
	}
	if !d.hasTail(id) {
		t.Fatal("an 11-action flow has no tail")
	}
	want("megaflow hit", out0)
	want("exact-match cache hit", out0)
	if c := d.counters(); c["emc-hit"] != 1 || c["megaflow-hit"] != 1 {
		t.Fatalf("counters %v: want one megaflow hit, then one EMC hit", c)
	}

	short := f
	short.Actions = []flow.Action{flow.Output{Port: portOut2}}
	if err := d.Modify(short); err != nil {
		t.Fatal(err)
	}
	if d.hasTail(id) {
		t.Fatal("the tail stayed after a Modify to one action")
	}
	if r := d.run(pkt, "lo"); fmt.Sprint(r.outputs) != fmt.Sprint([]traceOut{{out1, outLast}}) {
		t.Fatalf("after a Modify to one output: %v", r.outputs)
	}
	f.Actions = spread(portOut2, MaxActions)
	if err := d.Modify(f); err != nil {
		t.Fatal(err)
	}
	want("after a Modify back to 16 actions", out1)

	// A restart reads it back whole.
	d.restart(t)
	d2 := d.Datapath
	got := d2.Flows()
	if len(got) != 1 || fmt.Sprint(got[0].Actions) != fmt.Sprint(f.Actions) {
		t.Fatalf("after a restart: %v, want %v", got, f.Actions)
	}
	want("after a restart", out1)

	if _, err := d2.Delete(f.Key, f.Mask); err != nil {
		t.Fatal(err)
	}
	if d.hasTail(id) {
		t.Fatal("the tail stayed after the flow's delete")
	}
	if r := d.run(pkt, "lo"); r.verdict != tcActShot || len(r.outputs) != 0 {
		t.Fatalf("after the delete: verdict %d outputs %v, want a miss", r.verdict, r.outputs)
	}
}

// TestModifyIsNeverSeenHalfWritten: one goroutine rewrites a flow's
// 16-action list over and over, between two lists that output to one port
// each at the same places (in the head and in the tail), while packets run
// through the fast path on the other CPU, not through the exact-match
// cache. Every packet must take one list or the other whole, or miss (a
// rewrite under way: the slow path has it), never half of each.
func TestModifyIsNeverSeenHalfWritten(t *testing.T) {
	d := newTestDPWith(t, func(c *Config) { c.EMCInsertInvProb = 1 << 30 })
	pkt := udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, "x")
	out0, out1 := d.ifindex["dummy0"], d.ifindex["dummy1"]
	a, b := inPortFlow(spread(portOut, MaxActions)...), inPortFlow(spread(portOut2, MaxActions)...)
	d.put(a)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var modifies int
	var modErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			f := a
			if i%2 == 0 {
				f = b
			}
			if err := d.Modify(f); err != nil {
				modErr = err
				return
			}
			modifies++
		}
	}()
	var whole0, whole1, missed int
	for i := 0; i < 4000; i++ {
		r := d.run(pkt, "lo")
		switch {
		case r.verdict == tcActShot && len(r.outputs) == 0:
			missed++
		case fmt.Sprint(r.outputs) == fmt.Sprint([]traceOut{{out0, 0}, {out0, 0}, {out0, outLast}}):
			whole0++
		case fmt.Sprint(r.outputs) == fmt.Sprint([]traceOut{{out1, 0}, {out1, 0}, {out1, outLast}}):
			whole1++
		default:
			stop.Store(true)
			wg.Wait()
			t.Fatalf("packet %d took verdict %d, outputs %v: half of each list (after %d rewrites)", i, r.verdict, r.outputs, modifies)
		}
	}
	stop.Store(true)
	wg.Wait()
	if modErr != nil {
		t.Fatal(modErr)
	}
	t.Logf("%d rewrites; packets: %d the first list, %d the second, %d missed", modifies, whole0, whole1, missed)
	if whole0 == 0 || whole1 == 0 {
		t.Fatalf("the packets saw one list only (%d, %d): the rewrites did not overlap them", whole0, whole1)
	}
}
