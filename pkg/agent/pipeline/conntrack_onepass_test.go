package pipeline

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/agent/netpol"
	"github.com/nagare-net/nagare/pkg/agent/proxy"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// onePassNode is serviceNode with the policy state known (none): the one
// pass is on. web (10.77.1.2) and node2's 10.77.2.5 are default/web's
// endpoints, db (10.77.1.3) is plain.
func onePassNode(t *testing.T) (*Pipeline, *fakeSwitch) {
	t.Helper()
	return serviceNodeWith(t, func(p *Pipeline) { p.SetPolicies(netpol.State{}) })
}

// onePass reports whether ct's last walk was the one pass: a single pass
// through the pipeline, in which the tracker commits.
func onePass(ct *conntrack, out string) bool {
	return ct.passes == 1 && strings.Contains(out, "ct(commit")
}

// zoneFlows are the switch's ConntrackZone flows above the table's class flow, in words.
func zoneFlows(t *testing.T, p *Pipeline) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fs, err := p.conn.DumpFlows(ctx, &openflow.FlowStatsRequest{TableID: TableConntrackZone.ID, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fs {
		if f.Priority == prioTracked || f.Priority == prioOnePass {
			out = append(out, f.Match.String())
		}
	}
	return out
}

// TestOnePassWalk: packets between plain pods are committed and routed in
// one pass; a Service's endpoints, its ClusterIP and a policy's isolated
// pods keep the recirculating walk; the tracked set follows Services and
// policies, before their own flows.
func TestOnePassWalk(t *testing.T) {
	p, sw := onePassNode(t)
	var ct conntrack
	ctx := context.Background()

	// db → node3's pod: plain both ends, one pass, into node3's tunnel.
	out, _ := ct.walk(t, sw.pl, ipKey(6, 6, dbMAC, gatewayMAC, "10.77.1.3", "10.77.3.7", 40000, 80))
	t.Logf("db → node3 pod: %s", out)
	if !onePass(&ct, out) || !strings.Contains(out, "output:4") {
		t.Fatalf("db → a plain remote pod: %s, want one pass (ct(commit...)) to port 4", out)
	}
	if len(ct.orig) != 1 {
		t.Fatalf("one pass committed %d connections, want 1", len(ct.orig))
	}
	// Its reply from node3: one pass too, established.
	k := ipKey(6, 4, [6]byte{2}, [6]byte{3}, "10.77.3.7", "10.77.1.3", 80, 40000)
	k.TunID = 1
	if out, _ = ct.walk(t, sw.pl, k); !onePass(&ct, out) || !strings.HasSuffix(out, "output:6") {
		t.Fatalf("reply node3 pod → db: %s", out)
	}
	if c := ct.orig[tuple{netip.MustParseAddr("10.77.1.3"), netip.MustParseAddr("10.77.3.7"), 40000, 80, 6}]; c == nil || !c.seenReply {
		t.Fatalf("the tracker did not see the one-pass connection's reply: %+v", c)
	}

	// db → web directly: web is an endpoint, tracked as a source only:
	// db's packets in one pass, web's replies through the full walk
	// (ConntrackState's invalid drop), established.
	if out, _ = ct.walk(t, sw.pl, ipKey(6, 6, dbMAC, webMAC, "10.77.1.3", "10.77.1.2", 40001, 8080)); !onePass(&ct, out) || !strings.HasSuffix(out, "output:5") {
		t.Fatalf("db → web (an endpoint): %s, want one pass to port 5", out)
	}
	if out, _ = ct.walk(t, sw.pl, ipKey(6, 5, webMAC, dbMAC, "10.77.1.2", "10.77.1.3", 8080, 40001)); onePass(&ct, out) || !strings.HasSuffix(out, "output:6") {
		t.Fatalf("web (an endpoint) → db: %s, want the full walk to port 6", out)
	}
	if c := ct.orig[tuple{netip.MustParseAddr("10.77.1.3"), netip.MustParseAddr("10.77.1.2"), 40001, 8080, 6}]; c == nil || !c.seenReply {
		t.Fatalf("db → web: the tracker saw no reply: %+v", c)
	}
	// db → the ClusterIP: DNAT as ever.
	out, _ = ct.walk(t, sw.pl, fromDB(6, 40002, 80))
	if onePass(&ct, out) || !strings.Contains(out, "output:") {
		t.Fatalf("db → ClusterIP: %s", out)
	}

	// Endpoints are tracked as sources (their replies), the ClusterIP is outside the pod network.
	want := []string{"ip,nw_src=10.77.1.2", "ip,nw_src=10.77.2.5", "ip,nw_src=10.77.0.0/16,nw_dst=10.77.0.0/16"}
	if got := zoneFlows(t, p); !sameSet(got, want) {
		t.Fatalf("ConntrackZone after Sync: %q, want %q", got, want)
	}

	// The Service moves to node3's 10.77.3.7 alone: it is tracked, 10.77.1.2 and 10.77.2.5 no more.
	s := representativeService()
	for _, port := range s.Ports {
		ep := proxy.Endpoint{Addr: netip.MustParseAddr("10.77.3.7"), Port: port.Endpoints[0].Port, NodeName: "node3", Ready: true, Serving: true}
		port.Endpoints, port.InternalEndpoints, port.ExternalEndpoints = []proxy.Endpoint{ep}, []proxy.Endpoint{ep}, []proxy.Endpoint{ep}
	}
	if _, err := p.UpdateServices(ctx, []*proxy.Service{s}, nil); err != nil {
		t.Fatal(err)
	}
	want = []string{"ip,nw_src=10.77.3.7", "ip,nw_src=10.77.0.0/16,nw_dst=10.77.0.0/16"}
	if got := zoneFlows(t, p); !sameSet(got, want) {
		t.Fatalf("ConntrackZone after the endpoints moved: %q, want %q", got, want)
	}
	// db's connection to node3's pod, now an endpoint, goes on: db's
	// packets in one pass, the endpoint's through the full walk, which
	// finds the connection established.
	if out, _ = ct.walk(t, sw.pl, ipKey(6, 6, dbMAC, gatewayMAC, "10.77.1.3", "10.77.3.7", 40000, 80)); !onePass(&ct, out) || !strings.Contains(out, "output:4") {
		t.Fatalf("db → node3 pod after it became an endpoint: %s", out)
	}
	if out, _ = ct.walk(t, sw.pl, k); onePass(&ct, out) || !strings.HasSuffix(out, "output:6") {
		t.Fatalf("reply node3 pod (an endpoint now) → db: %s, want the full walk to port 6", out)
	}

	// A policy isolates db: db is tracked, in the same batch as its isolation.
	before := sw.msgs
	if _, err := p.UpdatePolicies(ctx, netpol.State{IsolatedIngress: []netip.Addr{dbIP}}); err != nil {
		t.Fatal(err)
	}
	if n := sw.msgs - before; n != 3 {
		t.Fatalf("isolating db sent %d messages, want 3 (db's two tracked flows, its drop)", n)
	}
	if out, _ = ct.walk(t, sw.pl, ipKey(6, 5, webMAC, dbMAC, "10.77.1.2", "10.77.1.3", 40003, 80)); out != "drop(policy)" {
		t.Fatalf("web → isolated db: %s, want drop(policy)", out)
	}
	// web is plain now: web → node2's pod in one pass.
	if out, _ = ct.walk(t, sw.pl, ipKey(6, 5, webMAC, gatewayMAC, "10.77.1.2", "10.77.2.5", 40004, 80)); !onePass(&ct, out) {
		t.Fatalf("web → node2 pod (both plain now): %s", out)
	}

	// Transparent redirection turns the one pass off (it judges every pod's TCP in ConntrackState).
	p.SetRedirect(&Redirect{Port: 7, MAC: []byte{2, 0, 0, 0, 0, 7}, Ports: []uint16{80}}, false)
	if _, err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := zoneFlows(t, p); len(got) != 0 {
		t.Fatalf("ConntrackZone with redirection: %q, want no tracked or one-pass flow", got)
	}
	if out, _ = ct.walk(t, sw.pl, ipKey(6, 5, webMAC, gatewayMAC, "10.77.1.2", "10.77.2.5", 40005, 80)); onePass(&ct, out) {
		t.Fatalf("web → node2 pod with redirection: %s, want the full walk", out)
	}
}

// TestOnePassOff: without the policy state (an agent restarting under
// policies) every packet takes the full walk.
func TestOnePassOff(t *testing.T) {
	p, sw := serviceNode(t) // no policy state
	var ct conntrack
	if got := zoneFlows(t, p); len(got) != 0 {
		t.Fatalf("ConntrackZone without policy state: %q", got)
	}
	if out, _ := ct.walk(t, sw.pl, ipKey(6, 6, dbMAC, gatewayMAC, "10.77.1.3", "10.77.3.7", 40000, 80)); onePass(&ct, out) {
		t.Fatalf("db → node3 pod without policy state: %s", out)
	}
}

// TestOnePassNodeCIDRs: without clusterCIDR the pod network is the known
// nodes' pod CIDRs, one conjunction over them, following nodes as they
// come and go.
func TestOnePassNodeCIDRs(t *testing.T) {
	p, sw := serviceNodeWith(t, func(p *Pipeline) {
		n := p.node
		n.ClusterCIDR = netip.Prefix{}
		p.SetNode(n)
		p.SetPolicies(netpol.State{})
	})
	var ct conntrack
	ctx := context.Background()
	want := []string{"ip,nw_src=10.77.1.2", "ip,nw_src=10.77.2.5",
		"ip,nw_src=10.77.1.0/24", "ip,nw_dst=10.77.1.0/24", "ip,nw_src=10.77.2.0/24", "ip,nw_dst=10.77.2.0/24",
		"ip,nw_src=10.77.3.0/24", "ip,nw_dst=10.77.3.0/24", "conj_id=1,ip"}
	if got := zoneFlows(t, p); !sameSet(got, want) {
		t.Fatalf("ConntrackZone: %q, want %q", got, want)
	}
	if out, _ := ct.walk(t, sw.pl, ipKey(6, 6, dbMAC, gatewayMAC, "10.77.1.3", "10.77.3.7", 40000, 80)); !onePass(&ct, out) || !strings.Contains(out, "output:4") {
		t.Fatalf("db → node3 pod: %s, want one pass to port 4", out)
	}
	// Outside the pod network (the node's uplink network): the full walk.
	if out, _ := ct.walk(t, sw.pl, ipKey(6, 6, dbMAC, gatewayMAC, "10.77.1.3", "192.168.77.9", 40000, 80)); onePass(&ct, out) {
		t.Fatalf("db → outside: %s, want the full walk", out)
	}
	if err := p.DelRemoteNode(ctx, "node3"); err != nil {
		t.Fatal(err)
	}
	want = slicesWithout(want, "ip,nw_src=10.77.3.0/24", "ip,nw_dst=10.77.3.0/24")
	if got := zoneFlows(t, p); !sameSet(got, want) {
		t.Fatalf("ConntrackZone without node3: %q, want %q", got, want)
	}
	if err := p.AddRemoteNode(ctx, RemoteNode{Name: "node4", PodCIDR: netip.MustParsePrefix("10.77.4.0/24"), Underlay: netip.MustParseAddr("192.168.77.3"), Port: 4}); err != nil {
		t.Fatal(err)
	}
	want = append(want, "ip,nw_src=10.77.4.0/24", "ip,nw_dst=10.77.4.0/24")
	if got := zoneFlows(t, p); !sameSet(got, want) {
		t.Fatalf("ConntrackZone with node4: %q, want %q", got, want)
	}
	if out, _ := ct.walk(t, sw.pl, ipKey(6, 6, dbMAC, gatewayMAC, "10.77.1.3", "10.77.4.7", 40001, 80)); !onePass(&ct, out) || !strings.Contains(out, "output:4") {
		t.Fatalf("db → node4 pod: %s, want one pass to port 4", out)
	}
	// A restart's Sync on the same state changes nothing.
	st, err := p.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Added != 0 || st.Deleted != 0 {
		t.Fatalf("Sync after incremental changes: %+v, want nothing added or deleted", st)
	}
}

func slicesWithout(a []string, drop ...string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(drop, x) {
			out = append(out, x)
		}
	}
	return out
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]int{}
	for _, x := range a {
		m[x]++
	}
	for _, x := range b {
		m[x]--
	}
	for _, n := range m {
		if n != 0 {
			return false
		}
	}
	return true
}
