package ctdiff

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// conjunctionCase is NetworkPolicy's building block, Open vSwitch's
// conjunctive match, through both switches:
//   - conjunction 10 (priority 100): 2 sources × 2 TCP ports × 2
//     destinations, its conj_id flow continues in table 3 (delivery by
//     destination address);
//   - conjunction 11 (priority 90): source × UDP 7, to b2;
//   - conjunction 12 (priority 90): source × UDP 53, whose conj_id flow
//     (priority 20) is below a normal UDP flow (priority 30): the lookup
//     with conj_id finds the normal flow first;
//   - a normal flow at priority 100 for client → b2:8080: a clause flow
//     is not above it, so it wins over conjunction 10;
//   - a normal flow at priority 80 (TCP 22 → ext): a packet of
//     conjunction 10's sources and destinations to port 22 does not
//     complete it and falls through to it.
//
// After the packets the tables' counters must agree (Open vSwitch counts
// the conj_id flow, not the clause flows).
func conjunctionCase() ctCase {
	const src2 = "10.77.0.9" // a second source of conjunction 10, sent by the client
	return ctCase{
		name: "conjunction",
		flows: lines(
			"table=0,priority=100,ip,nw_src="+cIP+",actions=conjunction(10,1/3)",
			"table=0,priority=100,ip,nw_src="+src2+",actions=conjunction(10,1/3)",
			"table=0,priority=100,tcp,tp_dst=80,actions=conjunction(10,2/3)",
			"table=0,priority=100,tcp,tp_dst=8080,actions=conjunction(10,2/3)",
			"table=0,priority=100,ip,nw_dst="+b1IP+",actions=conjunction(10,3/3)",
			"table=0,priority=100,ip,nw_dst="+b2IP+",actions=conjunction(10,3/3)",
			"table=0,priority=50,conj_id=10,ip,actions=goto_table:3",
			"table=0,priority=90,ip,nw_src="+cIP+",actions=conjunction(11,1/2),conjunction(12,1/2)",
			"table=0,priority=90,udp,tp_dst=7,actions=conjunction(11,2/2)",
			"table=0,priority=90,udp,tp_dst=53,actions=conjunction(12,2/2)",
			fmt.Sprintf("table=0,priority=40,conj_id=11,ip,actions=mod_dl_dst:%s,output:3", b2MAC),
			fmt.Sprintf("table=0,priority=20,conj_id=12,ip,actions=mod_dl_dst:%s,output:3", b2MAC),
			"table=0,priority=30,udp,actions=output:4",
			fmt.Sprintf("table=0,priority=100,tcp,nw_src=%s,nw_dst=%s,tp_dst=8080,actions=in_port", cIP, b2IP),
			"table=0,priority=80,tcp,tp_dst=22,actions=output:4",
			routeTable(3),
		),
		steps: []step{
			// Conjunction 10, all three clauses: delivered by table 3.
			{tcp("client", at(cIP, 43001), at(b1IP, 80), "S", 1, 0), want{at: "b1"}},
			{tcp("client", at(src2, 43002), at(b2IP, 8080), "S", 1, 0), want{at: "b2"}},
			{tcp("client", at(src2, 43003), at(b1IP, 8080), "S", 1, 0), want{at: "b1"}},
			{tcp("client", at(cIP, 43001), at(b1IP, 80), "A", 2, 1), want{at: "b1"}},
			// A source outside: nothing else matches, dropped.
			{tcp("client", at("10.77.0.5", 43004), at(b1IP, 80), "S", 1, 0), want{at: ""}},
			// A destination outside (ext's address): dropped.
			{tcp("client", at(cIP, 43005), at(extIP, 80), "S", 1, 0), want{at: ""}},
			// Port 22: not complete, falls through to the priority 80 flow.
			{tcp("client", at(cIP, 43006), at(b1IP, 22), "S", 1, 0), want{at: "ext"}},
			// The normal flow at conjunction 10's own priority wins.
			{tcp("client", at(cIP, 43007), at(b2IP, 8080), "S", 1, 0), want{at: "client"}},
			// Two dimensions, to b2 by the conj_id flow.
			{udp("client", at(cIP, 43008), at(b1IP, 7), "echo"), want{at: "b2"}},
			// Complete, but the normal UDP flow is above the conj_id flow.
			{udp("client", at(cIP, 43009), at(b1IP, 53), "query"), want{at: "ext"}},
			// UDP 7 from another source: not complete, the normal UDP flow.
			{udp("client", at(src2, 43010), at(b1IP, 7), "echo"), want{at: "ext"}},
		},
		counters: map[int]uint64{0: 9}, // every packet but the two dropped by a miss
	}
}

// ofRaw is a bare OpenFlow 1.3 connection to a switch's management
// socket, to send messages ovs-ofctl refuses to build.
type ofRaw struct {
	c  net.Conn
	r  *openflow.Reader
	id uint32
}

func dialOF(t *testing.T, target string) *ofRaw {
	t.Helper()
	c, err := net.DialTimeout("unix", strings.TrimPrefix(target, "unix:"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	o := &ofRaw{c: c, r: openflow.NewReader(c), id: 100}
	if err := openflow.WriteMessage(c, openflow.NewHello(1, 4)); err != nil {
		t.Fatal(err)
	}
	m, _, err := o.r.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.(*openflow.Hello); !ok {
		t.Fatalf("want HELLO, got %T", m)
	}
	return o
}

// flowMod sends fm and a barrier; it returns the ERROR the switch sent
// for fm ("accepted" when none).
func (o *ofRaw) flowMod(t *testing.T, fm *openflow.FlowMod) string {
	t.Helper()
	o.id++
	fm.Version, fm.Xid = 4, o.id
	b, err := fm.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	bar := &openflow.BarrierRequest{MsgHeader: openflow.MsgHeader{Version: 4, Xid: o.id + 1000}}
	bb, err := bar.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.c.Write(append(b, bb...)); err != nil {
		t.Fatal(err)
	}
	got := "accepted"
	for {
		m, raw, err := o.r.ReadMessage()
		if err != nil {
			t.Fatalf("reading the reply: %v (%x)", err, raw)
		}
		switch m := m.(type) {
		case *openflow.ErrorMsg:
			if m.Xid == o.id {
				got = m.Err().Error()
			}
		case *openflow.BarrierReply:
			if m.Xid == o.id+1000 {
				return got
			}
		case *openflow.EchoRequest:
			_ = openflow.WriteMessage(o.c, &openflow.EchoReply{MsgHeader: m.MsgHeader, Data: m.Data})
		}
	}
}

// TestConjunctionErrors sends conjunctions that ovs-ofctl will not write
// (it checks them itself) as raw FLOW_MODs to both switches: each must
// get the same answer, error type and code, from both.
func TestConjunctionErrors(t *testing.T) {
	requireHost(t)
	ovs, nagare := startOVS(t), startNagare(t)
	conj := func(id uint32, k, n uint8) openflow.Action {
		return openflow.ActionNXConjunction{ID: id, Clause: k, NClauses: n}
	}
	apply := func(as ...openflow.Action) openflow.Instruction { return openflow.InstApplyActions{Actions: as} }
	for _, tc := range []struct {
		name  string
		match []openflow.OXM // added to ip
		insts openflow.Instructions
	}{
		{"k above n", nil, openflow.Instructions{apply(conj(1, 3, 2))}},
		{"n of 1", nil, openflow.Instructions{apply(conj(1, 1, 1))}},
		{"n of 65", nil, openflow.Instructions{apply(conj(1, 1, 65))}},
		{"with output", nil, openflow.Instructions{apply(conj(1, 1, 2), openflow.ActionOutput{Port: 1})}},
		{"with goto_table", nil, openflow.Instructions{apply(conj(1, 1, 2)), openflow.InstGotoTable{TableID: 1}}},
		{"in write_actions", nil, openflow.Instructions{openflow.InstWriteActions{Actions: openflow.Actions{conj(1, 1, 2)}}}},
		{"same id, two n", nil, openflow.Instructions{apply(conj(1, 1, 2), conj(1, 2, 3))}},
		{"same id, two clauses", nil, openflow.Instructions{apply(conj(1, 1, 2), conj(1, 2, 2))}},
		{"with a note", nil, openflow.Instructions{apply(conj(1, 1, 2), openflow.ActionNXNote{Note: []byte{1, 2}})}},
		{"conj_id masked", []openflow.OXM{openflow.NXUintMasked(openflow.NXMConjID, 1, 1)}, openflow.Instructions{apply(openflow.ActionOutput{Port: 1})}},
		{"conj_id", []openflow.OXM{openflow.NXUint(openflow.NXMConjID, 1)}, openflow.Instructions{apply(openflow.ActionOutput{Port: 1})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, b := range []*bench{ovs, nagare} {
				fm, err := openflow.ParseFlow("table=0,priority=10,ip,actions=drop")
				if err != nil {
					t.Fatal(err)
				}
				fm.Command = openflow.FlowAdd
				fm.Match = fm.Match.Add(tc.match...)
				fm.Instructions = tc.insts
				got = append(got, dialOF(t, b.target).flowMod(t, fm))
			}
			t.Logf("ovs: %s; nagare: %s", got[0], got[1])
			if errName(got[0]) != errName(got[1]) {
				t.Errorf("DIFFERENCE: Open vSwitch: %s, nagare-switch: %s", got[0], got[1])
			}
		})
	}
}

// errName is an error's type and code, without the reason text.
func errName(s string) string {
	s = strings.TrimPrefix(s, "openflow: ")
	name, _, _ := strings.Cut(s, ":")
	return name
}
