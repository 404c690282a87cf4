package pipeline

import (
	"context"
	"net/netip"
	"testing"

	"github.com/nagare-net/nagare/pkg/agent/proxy"
	dp "github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// fromDBTo is a packet from pod db to vip:dport.
func fromDBTo(vip string, sport, dport uint16) (k dp.Key) {
	k = fromDB(6, sport, dport)
	k.SetIPDst(netip.MustParseAddr(vip))
	return k
}

// learnedFlows are the flows the switch learned into SessionAffinity.
func learnedFlows(sw *fakeSwitch) []openflow.FlowStats {
	var out []openflow.FlowStats
	for _, f := range sw.pl.FlowStats(&openflow.FlowStatsRequest{TableID: TableAffinity.ID, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny}) {
		if learnedFlow(f.TableID, f.Cookie) {
			out = append(out, f)
		}
	}
	return out
}

// endpointsOf walks n new connections from db to vip:80 and counts the
// endpoints they were DNATed to.
func endpointsOf(t *testing.T, sw *fakeSwitch, ct *conntrack, vip string, first uint16, n int) map[string]int {
	t.Helper()
	hits := map[string]int{}
	for sport := first; sport < first+uint16(n); sport++ {
		_, k := ct.walk(t, sw.pl, fromDBTo(vip, sport, 80))
		hits[netip.AddrFrom4([4]byte(k.IPDst[:4])).String()]++
	}
	return hits
}

// TestServiceAffinity: with sessionAffinity ClientIP every connection of
// a client goes to the endpoint its first one got, through a flow the
// switch learned (visible in its tables, kept by Sync); switching
// affinity off removes the learned flows and spreads the client again;
// switching it on holds it again; an endpoint that goes takes its learned
// flows with it.
func TestServiceAffinity(t *testing.T) {
	p, sw := serviceNode(t)
	ctx := context.Background()
	sticky := affinityService()
	if _, err := p.UpdateServices(ctx, []*proxy.Service{sticky}, nil); err != nil {
		t.Fatal(err)
	}
	ct := &conntrack{credit: true}
	hits := endpointsOf(t, sw, ct, "10.96.0.20", 41000, 32)
	if len(hits) != 1 {
		t.Fatalf("affinity: 32 connections went to %v, want one endpoint", hits)
	}
	l := learnedFlows(sw)
	if len(l) != 1 || l[0].HardTimeout != 600 || l[0].Priority != prioSpecific {
		t.Fatalf("learned flows: %+v", l)
	}
	if got := l[0].Match.String(); got != "tcp,nw_src=10.77.1.3,nw_dst=10.96.0.20,tp_dst=80" {
		t.Errorf("learned match %s", got)
	}
	// Sync (a reconnection) leaves the switch's learned flows alone.
	st, err := p.Sync(ctx)
	if err != nil || st.Deleted != 0 || st.Added != 0 {
		t.Fatalf("sync: %+v, %v", st, err)
	}
	if len(learnedFlows(sw)) != 1 {
		t.Fatal("sync removed the learned flow")
	}

	// Off: the learned flows go with the learners; connections spread.
	off := affinityService()
	off.Affinity = proxy.Affinity{}
	if _, err := p.UpdateServices(ctx, []*proxy.Service{off}, nil); err != nil {
		t.Fatal(err)
	}
	if l := learnedFlows(sw); len(l) != 0 {
		t.Fatalf("affinity off, learned flows left: %+v", l)
	}
	if hits := endpointsOf(t, sw, ct, "10.96.0.20", 42000, 32); len(hits) != 2 {
		t.Fatalf("affinity off: 32 connections went to %v, want both endpoints", hits)
	}

	// On again: held again.
	if _, err := p.UpdateServices(ctx, []*proxy.Service{sticky}, nil); err != nil {
		t.Fatal(err)
	}
	hits = endpointsOf(t, sw, ct, "10.96.0.20", 43000, 32)
	if len(hits) != 1 {
		t.Fatalf("affinity on again: %v", hits)
	}
	var chosen string
	for ep := range hits {
		chosen = ep
	}
	// The chosen endpoint goes: its learned flow goes with its
	// EndpointDNAT flow, and the client is held on the other one.
	gone := affinityService()
	for _, port := range gone.Ports {
		var keep []proxy.Endpoint
		for _, e := range port.InternalEndpoints {
			if e.Addr.String() != chosen {
				keep = append(keep, e)
			}
		}
		port.Endpoints, port.InternalEndpoints, port.ExternalEndpoints = keep, keep, keep
	}
	if _, err := p.UpdateServices(ctx, []*proxy.Service{gone}, nil); err != nil {
		t.Fatal(err)
	}
	if l := learnedFlows(sw); len(l) != 0 {
		t.Fatalf("endpoint %s gone, its learned flow left: %+v", chosen, l)
	}
	hits = endpointsOf(t, sw, ct, "10.96.0.20", 44000, 8)
	if len(hits) != 1 || hits[chosen] != 0 {
		t.Fatalf("after %s left: %v", chosen, hits)
	}
	// Deleting the Service deletes what was learned for it.
	if _, err := p.UpdateServices(ctx, nil, []proxy.ServiceKey{gone.Key}); err != nil {
		t.Fatal(err)
	}
	if l := learnedFlows(sw); len(l) != 0 {
		t.Fatalf("Service deleted, learned flows left: %+v", l)
	}
}
