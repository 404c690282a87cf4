package ofproto

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// A policy as NetworkPolicy writes it: sources × ports × destinations as
// a conjunction, allowed packets to table 1, everything else to port 3.
func conjPolicy(t testing.TB, p *Pipeline) {
	t.Helper()
	mustAdd(t, p,
		"table=0,priority=100,ip,nw_src=10.0.0.1,actions=conjunction(7,1/3)",
		"table=0,priority=100,ip,nw_src=10.0.0.2,actions=conjunction(7,1/3)",
		"table=0,priority=100,tcp,tp_dst=80,actions=conjunction(7,2/3)",
		"table=0,priority=100,tcp,tp_dst=443,actions=conjunction(7,2/3)",
		"table=0,priority=100,ip,nw_dst=10.1.0.0/24,actions=conjunction(7,3/3)",
		"table=0,priority=10,conj_id=7,ip,actions=goto_table:1",
		"table=0,priority=0,actions=output:3",
		"table=1,priority=0,actions=output:2",
	)
}

func TestConjunctionLookup(t *testing.T) { classifierModes(t, testConjunctionLookup) }

func testConjunctionLookup(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	conjPolicy(t, p)
	for _, tc := range []struct {
		name string
		key  flow.Key
		want string
	}{
		{"all three clauses", tcpKey(1, "10.0.0.1", "10.1.0.9", 1000, 80), "output:2"},
		{"other source and port of the sets", tcpKey(1, "10.0.0.2", "10.1.0.200", 1000, 443), "output:2"},
		{"source outside", tcpKey(1, "10.0.0.3", "10.1.0.9", 1000, 80), "output:3"},
		{"port outside", tcpKey(1, "10.0.0.1", "10.1.0.9", 1000, 22), "output:3"},
		{"destination outside", tcpKey(1, "10.0.0.1", "10.2.0.9", 1000, 80), "output:3"},
	} {
		tr := translate(t, p, tc.key)
		if got := actions(tr); got != tc.want {
			t.Errorf("%s: %s, want %s\n%s", tc.name, got, tc.want, FormatTrace(tr.Trace))
		}
	}
}

// Priorities, as Open vSwitch's classifier decides them.
func TestConjunctionPriorities(t *testing.T) { classifierModes(t, testConjunctionPriorities) }

func testConjunctionPriorities(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flows []string
		key   flow.Key
		want  string
	}{
		{
			// The conjunction is above the normal flow and completes: the
			// conj_id flow is taken although its own priority is lower.
			"complete above a normal flow",
			[]string{
				"priority=100,ip,nw_src=10.0.0.1,actions=conjunction(1,1/2)",
				"priority=100,tcp,tp_dst=80,actions=conjunction(1,2/2)",
				"priority=50,ip,actions=output:3",
				"priority=60,conj_id=1,ip,actions=output:2",
			},
			tcpKey(1, "10.0.0.1", "10.0.0.9", 1000, 80), "output:2",
		},
		{
			// It completes, but the lookup with conj_id finds the normal
			// flow first: it has a higher priority than the conj_id flow.
			"conj_id flow below the normal flow",
			[]string{
				"priority=100,ip,nw_src=10.0.0.1,actions=conjunction(1,1/2)",
				"priority=100,tcp,tp_dst=80,actions=conjunction(1,2/2)",
				"priority=50,ip,actions=output:3",
				"priority=40,conj_id=1,ip,actions=output:2",
			},
			tcpKey(1, "10.0.0.1", "10.0.0.9", 1000, 80), "output:3",
		},
		{
			// A normal flow above the clause flows wins outright.
			"normal flow above",
			[]string{
				"priority=100,ip,nw_src=10.0.0.1,actions=conjunction(1,1/2)",
				"priority=100,tcp,tp_dst=80,actions=conjunction(1,2/2)",
				"priority=200,ip,actions=output:3",
				"priority=300,conj_id=1,ip,actions=output:2",
			},
			tcpKey(1, "10.0.0.1", "10.0.0.9", 1000, 80), "output:3",
		},
		{
			// Same priority: the normal flow is the hard match and the
			// clause flows (not above it) are ignored.
			"normal flow at the same priority",
			[]string{
				"priority=100,ip,nw_src=10.0.0.1,actions=conjunction(1,1/2)",
				"priority=100,tcp,tp_dst=80,actions=conjunction(1,2/2)",
				"priority=100,ip,nw_dst=10.0.0.9,actions=output:3",
				"priority=300,conj_id=1,ip,actions=output:2",
			},
			tcpKey(1, "10.0.0.1", "10.0.0.9", 1000, 80), "output:3",
		},
		{
			// Not complete: lookup falls through to the lower flow, and a
			// lower conjunction that does complete.
			"incomplete falls through to a lower conjunction",
			[]string{
				"priority=100,ip,nw_src=10.0.0.1,actions=conjunction(1,1/2)",
				"priority=100,tcp,tp_dst=22,actions=conjunction(1,2/2)",
				"priority=90,ip,nw_src=10.0.0.0/24,actions=conjunction(2,1/2)",
				"priority=90,tcp,tp_dst=80,actions=conjunction(2,2/2)",
				"priority=5,conj_id=1,ip,actions=output:1",
				"priority=5,conj_id=2,ip,actions=output:2",
				"priority=0,actions=output:3",
			},
			tcpKey(1, "10.0.0.1", "10.0.0.9", 1000, 80), "output:2",
		},
		{
			// Complete, but no flow for the conj_id: as if incomplete.
			"complete without a conj_id flow",
			[]string{
				"priority=100,ip,nw_src=10.0.0.1,actions=conjunction(1,1/2)",
				"priority=100,tcp,tp_dst=80,actions=conjunction(1,2/2)",
			},
			tcpKey(1, "10.0.0.1", "10.0.0.9", 1000, 80), "drop",
		},
		{
			// One flow serving two conjunctions (a source shared by two
			// policies), the second of which completes.
			"a flow in two conjunctions",
			[]string{
				"priority=100,ip,nw_src=10.0.0.1,actions=conjunction(1,1/2),conjunction(2,1/2)",
				"priority=100,tcp,tp_dst=22,actions=conjunction(1,2/2)",
				"priority=100,tcp,tp_dst=80,actions=conjunction(2,2/2)",
				"priority=5,conj_id=1,ip,actions=output:1",
				"priority=5,conj_id=2,ip,actions=output:2",
				"priority=0,actions=output:3",
			},
			tcpKey(1, "10.0.0.1", "10.0.0.9", 1000, 80), "output:2",
		},
		{
			// Clause flows at another priority belong to another
			// conjunction: 1/2 at 100 and 2/2 at 90 never complete.
			"clauses at different priorities",
			[]string{
				"priority=100,ip,nw_src=10.0.0.1,actions=conjunction(1,1/2)",
				"priority=90,tcp,tp_dst=80,actions=conjunction(1,2/2)",
				"priority=5,conj_id=1,ip,actions=output:1",
				"priority=0,actions=output:3",
			},
			tcpKey(1, "10.0.0.1", "10.0.0.9", 1000, 80), "output:3",
		},
		{
			// Two clauses of one id in one flow count as one matching
			// flow: with only that flow matching, Open vSwitch does not
			// complete the conjunction.
			"two clauses in one flow",
			[]string{
				"priority=100,ip,nw_src=10.0.0.1,actions=conjunction(1,1/2),conjunction(1,2/2)",
				"priority=5,conj_id=1,ip,actions=output:1",
				"priority=0,actions=output:3",
			},
			tcpKey(1, "10.0.0.1", "10.0.0.9", 1000, 80), "output:3",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := newTestPipeline(t, 3)
			mustAdd(t, p, tc.flows...)
			tr := translate(t, p, tc.key)
			if got := actions(tr); got != tc.want {
				t.Fatalf("%q, want %q\n%s", got, tc.want, FormatTrace(tr.Trace))
			}
		})
	}
}

// The conj_id flow gets the packets; clause flows stay at zero, as in
// Open vSwitch. The clause flows that completed the conjunction are
// dependencies of the translation: deleting one revalidates it.
func TestConjunctionStatsAndRevalidation(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	conjPolicy(t, p)
	k := tcpKey(1, "10.0.0.1", "10.1.0.9", 1000, 80)
	tr := translate(t, p, k)
	p.Credit(tr.Rules, 3, 300, p.cfg.Now())
	counts := map[string]uint64{}
	for _, fs := range p.FlowStats(&openflow.FlowStatsRequest{TableID: openflow.TableAll, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny}) {
		counts[fmt.Sprintf("%d %s %s", fs.TableID, fs.Match, fs.Instructions)] = fs.PacketCount
	}
	var got []string
	for k, v := range counts {
		if v != 0 {
			got = append(got, fmt.Sprintf("%s=%d", k, v))
		}
	}
	sort.Strings(got)
	want := "0 conj_id=7,ip goto_table:1=3 1  output:2=3"
	if strings.Join(got, " ") != want {
		t.Fatalf("counters %q, want %q", strings.Join(got, " "), want)
	}
	v := p.Version()
	// Deleting the destination clause that completed it.
	if _, err := p.FlowMod(flowMod(t, openflow.FlowDeleteStrict, "table=0,priority=100,ip,nw_dst=10.1.0.0/24")); err != nil {
		t.Fatal(err)
	}
	if c := p.ChangesSince(v); c == nil || !c.Affects(tr.Rules) {
		t.Fatalf("deleting a clause flow the translation completed does not affect it (changes %v)", c)
	}
	if got := actions(translate(t, p, k)); got != "output:3" {
		t.Fatalf("after the delete: %s", got)
	}
	// Adding it back: a rule added to table 0 affects every lookup of it.
	v = p.Version()
	tr = translate(t, p, k)
	mustAdd(t, p, "table=0,priority=100,ip,nw_dst=10.1.0.0/24,actions=conjunction(7,3/3)")
	if c := p.ChangesSince(v); c == nil || !c.Affects(tr.Rules) {
		t.Fatal("adding a clause flow does not affect a lookup of its table")
	}
	// Modifying a clause flow into another conjunction affects lookups
	// that only lost on it.
	k2 := tcpKey(1, "10.0.0.1", "10.1.0.9", 1000, 22)
	tr = translate(t, p, k2)
	v = p.Version()
	if _, err := p.FlowMod(flowMod(t, openflow.FlowModifyStrict, "table=0,priority=100,tcp,tp_dst=80,actions=conjunction(8,2/3)")); err != nil {
		t.Fatal(err)
	}
	if c := p.ChangesSince(v); c == nil || !c.Affects(tr.Rules) {
		t.Fatal("changing a clause flow's conjunction does not affect its table's lookups")
	}
}

// What a packet's cached flow pins.
func TestConjunctionMask(t *testing.T) { classifierModes(t, testConjunctionMask) }

func testConjunctionMask(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	var flows []string
	for i := 1; i <= 100; i++ {
		flows = append(flows, fmt.Sprintf("priority=100,ip,nw_src=10.0.%d.%d,actions=conjunction(9,1/2)", i/250, i%250))
	}
	for i := 0; i < 10; i++ {
		flows = append(flows, fmt.Sprintf("priority=100,tcp,tp_dst=%d,actions=conjunction(9,2/2)", 8000+i))
	}
	flows = append(flows, "priority=10,conj_id=9,ip,actions=output:2", "priority=0,actions=output:3")
	mustAdd(t, p, flows...)

	for _, tc := range []struct {
		name                 string
		key                  flow.Key
		want                 string
		srcPinned, dstPinned bool // nw_src /32, tp_dst whole
	}{
		// Allowed: both clauses are witnesses.
		{"allowed", tcpKey(1, "10.0.0.5", "10.9.9.9", 1000, 8003), "output:2", true, true},
		// A source of the policy to a port outside it: the port proves
		// the miss, the source is not pinned.
		{"port outside", tcpKey(1, "10.0.0.5", "10.9.9.9", 1000, 22), "output:3", false, false},
		// A port of the policy from a source outside it: the source's
		// first byte proves the miss, the port is not pinned.
		{"source outside", tcpKey(1, "192.168.0.5", "10.9.9.9", 1000, 8003), "output:3", false, false},
	} {
		tr := translate(t, p, tc.key)
		if got := actions(tr); got != tc.want {
			t.Fatalf("%s: %s, want %s\n%s", tc.name, got, tc.want, FormatTrace(tr.Trace))
		}
		m := tr.Mask
		src := m.IPSrc[0] == 0xff && m.IPSrc[3] == 0xff
		dst := m.TpDst == 0xffff
		if src != tc.srcPinned || dst != tc.dstPinned || m.IPDst != ([16]byte{}) || m.TpSrc != 0 {
			t.Errorf("%s: mask %s: want nw_src pinned %v, tp_dst pinned %v, nothing of nw_dst/tp_src",
				tc.name, flow.Format(flow.ExactMask(), m), tc.srcPinned, tc.dstPinned)
		}
		if tc.name == "port outside" && m.IPSrc != ([16]byte{}) {
			t.Errorf("%s: the source is in the mask: %s", tc.name, flow.Format(flow.ExactMask(), m))
		}
	}
}

// conjRefFlow is a flow of a random conjunctive pipeline, for the
// reference lookup.
type conjRefFlow struct {
	text     string
	priority uint16
	cm       *compiledMatch
	conjs    []openflow.ActionNXConjunction
	out      string // the actions a hit translates to
}

// refConjLookup is Open vSwitch's classifier_lookup, written plainly
// from its description: the actions of the winning flow.
func refConjLookup(flows []conjRefFlow, k flow.Key) string {
	pw := keyWords(&k)
	best := func(conjID uint32) *conjRefFlow {
		pw[conjWord] = uint64(conjID) << 32
		defer func() { pw[conjWord] = 0 }()
		var b *conjRefFlow
		for i := range flows {
			f := &flows[i]
			if f.conjs == nil && f.cm.matches(&pw) && (b == nil || f.priority > b.priority) {
				b = f
			}
		}
		return b
	}
	hard := best(0)
	prios := map[uint16][]*conjRefFlow{}
	for i := range flows {
		f := &flows[i]
		if f.conjs != nil && f.cm.matches(&pw) && (hard == nil || f.priority > hard.priority) {
			prios[f.priority] = append(prios[f.priority], f)
		}
	}
	var ps []int
	for p := range prios {
		ps = append(ps, int(p))
	}
	sort.Sort(sort.Reverse(sort.IntSlice(ps)))
	for _, p := range ps {
		level := prios[uint16(p)]
		clauses := map[uint32]map[uint8]bool{}
		n := map[uint32]uint8{}
		for _, f := range level {
			for _, c := range f.conjs {
				if clauses[c.ID] == nil {
					clauses[c.ID] = map[uint8]bool{}
				}
				clauses[c.ID][c.Clause] = true
				n[c.ID] = c.NClauses
			}
		}
		var ids []int
		for id := range clauses {
			if len(clauses[id]) == int(n[id]) && len(level) >= int(n[id]) {
				ids = append(ids, int(id))
			}
		}
		sort.Ints(ids)
		for _, id := range ids {
			if f := best(uint32(id)); f != nil {
				return f.out
			}
		}
	}
	if hard == nil {
		return "drop"
	}
	return hard.out
}

// randConjPipeline builds one table of clause flows (up to three
// conjunctions of two or three clauses over in_port, nw_src, nw_dst,
// tp_dst, at two priorities), conj_id flows and normal flows, every
// non-clause flow marking the packet's source MAC with its own number.
func randConjPipeline(t *testing.T, r *rand.Rand) (*Pipeline, []conjRefFlow) {
	p, _ := newTestPipeline(t, 5)
	var flows []conjRefFlow
	used := map[uint16]bool{}
	uniquePrio := func() uint16 {
		for {
			if pr := uint16(20 + r.IntN(200)); !used[pr] {
				used[pr] = true
				return pr
			}
		}
	}
	dims := []func() string{
		func() string { return fmt.Sprintf("in_port=%d", pick(r, uInPort)) },
		func() string { return "ip,nw_src=" + pick(r, uIPv4P) },
		func() string { return "ip,nw_src=" + pick(r, uIPv4) },
		func() string { return "ip,nw_dst=" + pick(r, uIPv4P) },
		func() string { return fmt.Sprintf("tcp,tp_dst=%d", pick(r, uPorts)) },
	}
	clausePrios := []uint16{100, 120}
	seen := map[string]bool{}
	nconj := 1 + r.IntN(3)
	for id := 1; id <= nconj; id++ {
		n := 2 + r.IntN(2)
		prio := pick(r, clausePrios)
		for k := 1; k <= n; k++ {
			for range 1 + r.IntN(4) {
				m := pick(r, dims)()
				key := fmt.Sprintf("%d %s", prio, m)
				if seen[key] {
					continue // an identical match would replace the flow
				}
				seen[key] = true
				conjs := []openflow.ActionNXConjunction{{ID: uint32(id), Clause: uint8(k), NClauses: uint8(n)}}
				flows = append(flows, conjRefFlow{text: fmt.Sprintf("priority=%d,%s,actions=conjunction(%d,%d/%d)", prio, m, id, k, n), priority: prio, conjs: conjs})
			}
		}
		if r.IntN(5) > 0 {
			flows = append(flows, conjRefFlow{text: fmt.Sprintf("priority=%d,conj_id=%d", uniquePrio(), id)})
		}
	}
	for range r.IntN(4) {
		flows = append(flows, conjRefFlow{text: fmt.Sprintf("priority=%d,%s", uniquePrio(), pick(r, dims)())})
	}
	ids := map[ruleID]bool{}
	kept := flows[:0]
	for i := range flows {
		f := &flows[i]
		if f.conjs == nil {
			f.out = fmt.Sprintf("set(eth_src=00:00:00:00:00:%02x),output:5", i)
			f.text += fmt.Sprintf(",actions=set_field:00:00:00:00:00:%02x->eth_src,output:5", i)
			fmt.Sscanf(f.text, "priority=%d", &f.priority)
		}
		fm := flowMod(t, openflow.FlowAdd, f.text)
		cm, err := compileMatch(fm.Match)
		if err != nil {
			t.Fatal(err)
		}
		if ids[cm.id(f.priority)] {
			continue // "10.0.0.1" and "10.0.0.1/32": the same match would replace the flow
		}
		ids[cm.id(f.priority)] = true
		f.cm = cm
		mustAdd(t, p, f.text)
		kept = append(kept, *f)
	}
	return p, kept
}

// Random conjunctive tables: the result is Open vSwitch's
// (refConjLookup), and every packet that agrees with a translated one on
// its mask gets the same result.
func TestConjunctionMatchesReference(t *testing.T) {
	classifierModes(t, testConjunctionMatchesReference)
}

func testConjunctionMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(*maskSeed, 20))
	pipelines := 300
	if testing.Short() {
		pipelines = 60
	}
	checked, hits := 0, 0
	for pi := 0; pi < pipelines; pi++ {
		p, flows := randConjPipeline(t, r)
		texts := func() string {
			var s []string
			for _, f := range flows {
				s = append(s, f.text)
			}
			return strings.Join(s, "\n  ")
		}
		for range 30 {
			k := randPacket(r)
			tr := translate(t, p, k)
			got, want := actions(tr), refConjLookup(flows, k)
			if got != want {
				t.Fatalf("pipeline %d: %s -> %q, Open vSwitch's lookup gives %q\nflows:\n  %s\ntrace:\n%s", pi,
					flow.Format(k, flow.ExactMask()), got, want, texts(), FormatTrace(tr.Trace))
			}
			for _, rf := range tr.Rules {
				if rf.kind == refClause {
					hits++
					break
				}
			}
			for v := range 8 {
				var other flow.Key
				if v%2 == 0 {
					other = randPacket(r)
				} else {
					w := k.Words()
					for i := range w {
						w[i] ^= r.Uint64()
					}
					other = flow.KeyFromWords(w)
				}
				k2 := mixOutside(k, other, tr.Mask)
				tr2 := translate(t, p, k2)
				if got2 := actions(tr2); got2 != got {
					t.Fatalf("pipeline %d: packets agree under the mask but translate differently\nflows:\n  %s\np1: %s\n  -> %s\np2: %s\n  -> %s\nmask: %s\ntrace p1:\n%s\ntrace p2:\n%s",
						pi, texts(), flow.Format(k, flow.ExactMask()), got, flow.Format(k2, flow.ExactMask()), got2,
						flow.Format(flow.ExactMask(), tr.Mask), FormatTrace(tr.Trace), FormatTrace(tr2.Trace))
				}
				checked++
			}
		}
	}
	if hits == 0 {
		t.Fatal("no packet took a conjunction: the test checks nothing")
	}
	t.Logf("%d packet pairs checked, %d packets through a conjunction", checked, hits)
}

// Malformed conjunctions get the error Open vSwitch sends
// (test/ctdiff's TestConjunctionErrors compares them with a running one).
func TestConjunctionErrors(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	conj := func(id uint32, k, n uint8) openflow.Action {
		return openflow.ActionNXConjunction{ID: id, Clause: k, NClauses: n}
	}
	for _, tc := range []struct {
		name    string
		actions openflow.Actions
		insts   openflow.Instructions
	}{
		{"k above n", openflow.Actions{conj(1, 3, 2)}, nil},
		{"n of 1", openflow.Actions{conj(1, 1, 1)}, nil},
		{"n of 65", openflow.Actions{conj(1, 1, 65)}, nil},
		{"with output", openflow.Actions{conj(1, 1, 2), openflow.ActionOutput{Port: 1}}, nil},
		{"with goto_table", openflow.Actions{conj(1, 1, 2)}, openflow.Instructions{openflow.InstGotoTable{TableID: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fm := flowMod(t, openflow.FlowAdd, "priority=10,ip,actions=drop")
			fm.Instructions = append(openflow.Instructions{openflow.InstApplyActions{Actions: tc.actions}}, tc.insts...)
			_, err := p.FlowMod(fm)
			wantErr(t, err, openflow.ErrTypeExperimenter, openflow.NXErrBadConjunction)
		})
	}
}

// nagarectl trace shows which clause flows completed the conjunction and
// the conj_id flow taken, or which clauses matched when none completed.
func TestConjunctionTrace(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	conjPolicy(t, p)
	for _, tc := range []struct {
		key  flow.Key
		want []string
	}{
		{tcpKey(1, "10.0.0.1", "10.1.0.9", 1000, 80), []string{
			"table 0: conjunction(7) complete at priority 100: lookup with conj_id=7",
			"table 0:   clause 1/3: priority=100,ip,nw_src=10.0.0.1 cookie=0x0",
			"table 0:   clause 2/3: priority=100,tcp,tp_dst=80 cookie=0x0",
			"table 0:   clause 3/3: priority=100,ip,nw_dst=10.1.0.0/24 cookie=0x0",
			"table 0: priority=10,conj_id=7,ip cookie=0x0 actions=goto_table:1",
		}},
		{tcpKey(1, "10.0.0.1", "10.1.0.9", 1000, 22), []string{
			"table 0: conjunction(7) at priority 100: clauses 1,3 of 3 matched, not complete: not taken",
			"table 0: priority=0,(any) cookie=0x0 actions=output:3",
		}},
	} {
		got := FormatTrace(translate(t, p, tc.key).Trace)
		if !strings.Contains(got, strings.Join(tc.want, "\n")+"\n") {
			t.Errorf("trace:\n%s\nwant the lines:\n%s", got, strings.Join(tc.want, "\n"))
		}
	}
}
