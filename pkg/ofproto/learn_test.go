package ofproto

import (
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// affinityPipeline is session affinity in three tables: table 0 sends a
// packet whose client already has a learned endpoint (table 1) to it,
// else picks one by destination port (table 2), which learns it.
func affinityPipeline(t *testing.T, p *Pipeline) {
	mustAdd(t, p,
		"table=0,priority=10,tcp,actions=resubmit(,1),resubmit(,2)",
		"table=2,priority=10,tcp,reg3=0,tp_dst=80,actions=load:0x2->NXM_NX_REG3[],"+
			"learn(table=1,hard_timeout=10,priority=20,delete_learned,cookie=0x7,eth_type=0x800,nw_proto=6,NXM_OF_TCP_DST[],NXM_OF_IP_SRC[],load:NXM_NX_REG3[]->NXM_NX_REG3[]),resubmit(,3)",
		"table=2,priority=5,tcp,actions=resubmit(,3)",
		"table=3,priority=10,reg3=2,actions=output:2",
		"table=3,priority=10,reg3=3,actions=output:3",
	)
}

func TestLearnTranslation(t *testing.T) {
	p, clock := newTestPipeline(t, 3)
	affinityPipeline(t, p)
	k := tcpKey(1, "10.0.0.1", "10.96.0.1", 40000, 80)
	tr := translate(t, p, k)
	if got := actions(tr); got != "output:2" {
		t.Fatalf("first packet: %s", got)
	}
	// The fields learn read are in the megaflow; the source port is not.
	if tr.Mask.TpDst != 0xffff || [4]byte(tr.Mask.IPSrc[:4]) != [4]byte{255, 255, 255, 255} || tr.Mask.TpSrc != 0 {
		t.Errorf("mask %+v", tr.Mask)
	}
	l := tr.Learned()
	if len(l) != 1 {
		t.Fatalf("learned %d flows", len(l))
	}
	if got, want := l[0].Match.String()+" "+l[0].Instructions.String(), "tcp,nw_src=10.0.0.1,tp_dst=80 load:0x2->NXM_NX_REG3[]"; got != want {
		t.Errorf("learned %q, want %q", got, want)
	}
	// Translation alone changes no table.
	if n := len(tableFlows(p, 1)); n != 0 {
		t.Fatalf("table 1 has %d flows before credit", n)
	}
	v := p.Version()
	p.Credit(tr.Rules, 1, 60, clock.now())
	if p.Version() == v {
		t.Error("adding a learned flow did not bump the version")
	}
	fs := tableFlows(p, 1)
	if len(fs) != 1 || fs[0].Cookie != 7 || fs[0].HardTimeout != 10 || fs[0].Priority != 20 {
		t.Fatalf("table 1: %+v", fs)
	}
	// Another connection of the client now takes the learned path, even
	// with reg3 forced elsewhere by a competing rule.
	mustAdd(t, p, "table=2,priority=10,tcp,reg3=0,tp_dst=80,nw_src=10.0.0.1,actions=load:0x3->NXM_NX_REG3[],resubmit(,3)")
	tr2 := translate(t, p, tcpKey(1, "10.0.0.1", "10.96.0.1", 40001, 80))
	if got := actions(tr2); got != "output:2" {
		t.Errorf("second connection: %s", got)
	}
	// A refresh of an identical flow restarts the hard timeout and bumps nothing.
	clock.advance(8 * time.Second)
	v = p.Version()
	p.Credit(tr.Rules, 1, 60, clock.now())
	if p.Version() != v {
		t.Error("a refresh bumped the version")
	}
	clock.advance(8 * time.Second)
	if rm := p.Expire(); len(rm) != 0 {
		t.Fatalf("expired %d after a refresh 8 s ago", len(rm))
	}
	clock.advance(3 * time.Second)
	rm := p.Expire()
	if len(rm) != 1 || rm[0].Reason != openflow.FlowRemovedHardTimeout || rm[0].TableID != 1 {
		t.Fatalf("expire: %+v", rm)
	}
	// No credit (no traffic): nothing comes back.
	p.Credit(tr.Rules, 0, 0, clock.now())
	if n := len(tableFlows(p, 1)); n != 0 {
		t.Fatalf("relearned without traffic")
	}
}

func TestLearnDeleteLearned(t *testing.T) {
	p, clock := newTestPipeline(t, 3)
	affinityPipeline(t, p)
	tr := translate(t, p, tcpKey(1, "10.0.0.1", "10.96.0.1", 40000, 80))
	p.Credit(tr.Rules, 1, 60, clock.now())
	tr2 := translate(t, p, tcpKey(1, "10.0.0.2", "10.96.0.1", 40000, 80))
	p.Credit(tr2.Rules, 1, 60, clock.now())
	mustAdd(t, p, "table=1,priority=1,cookie=0x8,actions=drop") // another cookie stays
	table1 := func() int { return len(tableFlows(p, 1)) }
	if n := table1(); n != 3 {
		t.Fatalf("table 1 holds %d flows, want 3", n)
	}
	// Deleting the learning flow deletes what it learned.
	if _, err := p.FlowMod(flowMod(t, openflow.FlowDeleteStrict, "table=2,priority=10,tcp,reg3=0,tp_dst=80")); err != nil {
		t.Fatal(err)
	}
	if n := table1(); n != 1 {
		t.Fatalf("table 1 holds %d flows after the learner went, want 1", n)
	}
	if rm := p.Expire(); len(rm) != 2 || rm[0].Reason != openflow.FlowRemovedDelete {
		t.Errorf("flow removed: %+v", rm)
	}
	// A cached megaflow of the dead learner learns nothing any more.
	p.Credit(tr.Rules, 1, 60, clock.now())
	if n := table1(); n != 1 {
		t.Fatalf("a dead learner's megaflow relearned")
	}
}

// TestLearnModifyOff: modifying the learning flow to actions without the
// learn (switching affinity off) flushes its learned flows.
func TestLearnModifyOff(t *testing.T) {
	p, clock := newTestPipeline(t, 3)
	affinityPipeline(t, p)
	tr := translate(t, p, tcpKey(1, "10.0.0.1", "10.96.0.1", 40000, 80))
	p.Credit(tr.Rules, 1, 60, clock.now())
	if _, err := p.FlowMod(flowMod(t, openflow.FlowModifyStrict, "table=2,priority=10,tcp,reg3=0,tp_dst=80,actions=resubmit(,3)")); err != nil {
		t.Fatal(err)
	}
	fs := tableFlows(p, 1)
	if len(fs) != 0 {
		t.Fatalf("learned flows kept: %+v", fs)
	}
	tr = translate(t, p, tcpKey(1, "10.0.0.1", "10.96.0.1", 40000, 80))
	if len(tr.Learned()) != 0 || actions(tr) != "drop" {
		t.Errorf("still learning")
	}
}

// TestLearnRejects: learn specs the datapath cannot follow are refused
// at FLOW_MOD.
func TestLearnRejects(t *testing.T) {
	p, _ := newTestPipeline(t, 1)
	_, err := p.FlowMod(flowMod(t, openflow.FlowAdd, "ip,actions=learn(table=1,eth_type=0x800,NXM_NX_CT_IPV6_SRC[]=NXM_NX_IPV6_SRC[])"))
	if err == nil {
		t.Fatal("learn of ct_ipv6_src accepted")
	}
}

// TestLearnStaleMegaflow: a cached translation that went through a
// learned flow since expired does not learn it again when its packets
// are credited (the revalidator translates it again first).
func TestLearnStaleMegaflow(t *testing.T) {
	p, clock := newTestPipeline(t, 3)
	mustAdd(t, p,
		"table=0,priority=10,tcp,actions=resubmit(,1),resubmit(,2)",
		"table=2,priority=20,tcp,reg3=2,actions=learn(table=1,hard_timeout=2,eth_type=0x800,nw_proto=6,NXM_OF_IP_SRC[],load:NXM_NX_REG3[]->NXM_NX_REG3[]),output:2",
		"table=2,priority=10,tcp,actions=load:0x2->NXM_NX_REG3[],resubmit(,2)",
	)
	k := tcpKey(1, "10.0.0.1", "10.96.0.1", 40000, 80)
	p.Credit(translate(t, p, k).Rules, 1, 60, clock.now()) // learns
	learnedPath := translate(t, p, k)                      // through the learned flow
	clock.advance(3 * time.Second)
	if rm := p.Expire(); len(rm) != 1 {
		t.Fatalf("expire: %+v", rm)
	}
	p.Credit(learnedPath.Rules, 1, 60, clock.now())
	if n := len(tableFlows(p, 1)); n != 0 {
		t.Fatalf("a stale megaflow relearned the expired flow")
	}
	// Translated again, it learns.
	p.Credit(translate(t, p, k).Rules, 1, 60, clock.now())
	if n := len(tableFlows(p, 1)); n != 1 {
		t.Fatalf("fresh translation did not learn")
	}
}

// tableFlows are the flows of one table.
func tableFlows(p *Pipeline, table uint8) []openflow.FlowStats {
	return p.FlowStats(&openflow.FlowStatsRequest{TableID: table, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny})
}
