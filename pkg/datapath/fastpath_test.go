package datapath

import (
	"testing"

	"github.com/nagare-net/nagare/pkg/flow"
)

func TestOutputExactFlow(t *testing.T) {
	d := newTestDP(t)
	pkt := udpPkt(t, "10.0.0.1", "10.0.0.2", 1000, 2000, "ping")
	key := exactKeyUDP4("10.0.0.1", "10.0.0.2", 1000, 2000)
	mask := flow.ExactMask()
	mask.TCPFlags = 0
	d.put(flow.Flow{Key: key, Mask: mask, Actions: []flow.Action{flow.Output{Port: portOut}}})

	for i, want := range []string{"megaflow-hit", "emc-hit"} {
		r := d.run(pkt, "lo")
		if r.verdict != tcActRedirect {
			t.Fatalf("run %d: verdict %d, want redirect; drops %v", i, r.verdict, d.drops())
		}
		if len(r.outputs) != 1 || r.outputs[0].ifindex != d.ifindex["dummy0"] {
			t.Fatalf("run %d: outputs %v, want dummy0 (%d)", i, r.outputs, d.ifindex["dummy0"])
		}
		if c := d.counters(); c[want] != 1 {
			t.Fatalf("run %d: counters %v, want %s=1", i, c, want)
		}
	}
	fs, err := d.Dump()
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 1 || fs[0].Stats.Packets != 2 || fs[0].Stats.Bytes != uint64(2*len(pkt)) {
		t.Fatalf("dump %+v", fs)
	}
}
