package datapath

import (
	"testing"

	"github.com/nagare-net/nagare/pkg/flow"
)

// TestEMCInsertProbability: with Open vSwitch's 1/100 insertion, 1000
// packets of ever-new keys under one wide megaflow (a sender of random
// ports) write about 10 EMC entries instead of 1000, so they cannot churn
// the other flows' entries at their packet rate; with 1/1 every hit is
// written.
func TestEMCInsertProbability(t *testing.T) {
	d := newTestDP(t)
	d.put(inPortFlow(flow.Output{Port: portOut}))
	// Each round uses keys never sent before: a key already in this CPU's
	// EMC would hit there and never reach the insert.
	round := 0
	send := func() uint64 {
		round++
		before := d.counters()["emc-insert"]
		for i := 0; i < 1000; i++ {
			d.run(udpPkt(t, "10.0.0.1", "10.0.0.2", uint16(round*1000+i), 80, "x"), "lo")
		}
		return d.counters()["emc-insert"] - before
	}
	if n := send(); n != 1000 {
		t.Fatalf("insert probability 1/1: %d entries written for 1000 new keys", n)
	}
	d.cfg.EMCInsertInvProb = 100 // as Open sets it by default
	if err := d.SetEMC(true); err != nil {
		t.Fatal(err)
	}
	// Mean 10; 50 or more has a probability far below 1e-15.
	if n := send(); n == 0 || n >= 50 {
		t.Fatalf("insert probability 1/100: %d entries written for 1000 new keys", n)
	}
}
