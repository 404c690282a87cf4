package switchd

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

func TestKeyFromMatch(t *testing.T) {
	m, err := openflow.ParseMatch("in_port=3,udp,nw_src=10.0.0.1,nw_dst=10.0.0.2,tp_dst=53,dl_vlan=10,tun_id=0x7")
	if err != nil {
		t.Fatal(err)
	}
	k := keyFromMatch(m)
	want := "in_port=3,tunnel(vni=7,flags=0x1),vlan_tci=0x100a,eth_type=0x800,ipv4(src=10.0.0.1,dst=10.0.0.2,proto=17,ttl=64),udp(dst=53)"
	if got := flow.Format(k, flow.Present(k)); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// TestNagarectlTrace runs the trace through the control socket.
func TestControlTrace(t *testing.T) {
	ts := startSwitch(t, 2, nil)
	ts.ofctl("add-flow", "table=0,priority=10,udp,actions=goto_table:1")
	ts.ofctl("add-flow", "table=1,priority=10,udp,tp_dst=53,actions=output:2")
	r := ts.control(CtlRequest{Cmd: "trace", Packet: "in_port=1,udp,nw_dst=10.8.0.2,tp_dst=53"})
	out := strings.Join(r.Lines, "\n")
	for _, want := range []string{"table 0:", "table 1:", "datapath actions: output:2", "megaflow: recirc_id=0x0,in_port=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("trace lacks %q:\n%s", want, out)
		}
	}
	if r := ts.control(CtlRequest{Cmd: "nonsense"}); r.OK || !strings.Contains(r.Error, "unknown command") {
		t.Errorf("unknown command answered %+v", r)
	}
}

// A trace follows a ct(table=) recirculation with the ct_state
// --ct-next gives each pass, and says so.
func TestControlTraceFollowsRecirculation(t *testing.T) {
	ts := startSwitch(t, 3, nil)
	serviceFlows(ts, 2, 3)
	pkt := fmt.Sprintf("in_port=1,tcp,nw_src=10.8.0.1,nw_dst=%s,tp_src=40000,tp_dst=%d", svcVIP, svcPort)
	r := ts.control(CtlRequest{Cmd: "trace", Packet: pkt})
	out := strings.Join(r.Lines, "\n")
	for _, want := range []string{"ct(zone=5,nat),recirc(", "recirculation 1", "ct_state(+new-est", "group:1 select",
		"ct(commit,zone=5,mark=0x1/0x1,nat(dst=10.8.0.", "recirculation 2", "output:"} {
		if !strings.Contains(out, want) {
			t.Errorf("trace lacks %q:\n%s", want, out)
		}
	}
	r = ts.control(CtlRequest{Cmd: "trace", Packet: pkt, CtNext: "trk,est"})
	out = strings.Join(r.Lines, "\n")
	if strings.Contains(out, "group:1") || !strings.Contains(out, "ct_state(-new+est") {
		t.Errorf("an established pass went to the group, or lacks its state:\n%s", out)
	}
	if r := ts.control(CtlRequest{Cmd: "trace", Packet: pkt, CtNext: "trk,bogus"}); r.OK || !strings.Contains(r.Error, "unknown ct_state") {
		t.Errorf("a bad --ct-next answered %+v", r)
	}
}

// TestRevalidateChangeKeepsTables: `revalidate --change` translates every
// cached flow again, as a table change would, but leaves the tables (and
// the pipeline's version) as they were: it is a benchmark hook on a
// production switch's socket.
func TestRevalidateChangeKeepsTables(t *testing.T) {
	ts := startSwitch(t, 2, nil)
	ts.ofctl("add-flow", "priority=10,in_port=1,actions=output:2")
	ts.ofctl("add-flow", "priority=10,in_port=2,actions=output:1")
	if err := ts.ping(1, 2); err != nil {
		t.Fatal(err)
	}
	before := ts.control(CtlRequest{Cmd: "dump-flows"})
	version := ts.pl.Version()
	cached := ts.cache.len()
	if cached == 0 {
		t.Fatal("no cached flows after a ping")
	}
	rechecked := ts.rv.stats().Revalidated
	for range 3 {
		if r := ts.control(CtlRequest{Cmd: "revalidate", Change: true}); !r.OK {
			t.Fatalf("revalidate --change: %s", r.Error)
		}
	}
	// Cached flows are only added meanwhile (nothing idles out within the
	// test), and the switch's own rounds re-translate nothing while the
	// version stands: three forced rounds saw at least 3x the flows.
	if got := ts.rv.stats().Revalidated - rechecked; got < 3*uint64(cached) {
		t.Errorf("3 rounds with --change translated %d flows again, want >= %d", got, 3*cached)
	}
	after := ts.control(CtlRequest{Cmd: "dump-flows"})
	// dump-flows prints rules without counters (ovs-ofctl --no-stats).
	if b, a := strings.Join(before.Lines, "\n"), strings.Join(after.Lines, "\n"); a != b {
		t.Errorf("revalidate --change changed the tables:\nbefore:\n%s\nafter:\n%s", b, a)
	}
	if v := ts.pl.Version(); v != version {
		t.Errorf("pipeline version moved from %d to %d", version, v)
	}
}
