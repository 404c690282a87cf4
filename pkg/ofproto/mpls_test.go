package ofproto

import (
	"errors"
	"testing"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

func mplsKey(in uint32, label, tc, bos, ttl uint32) flow.Key {
	k := flow.Key{InPort: in, EthType: 0x8847, EthSrc: mac("00:00:00:00:00:01"), EthDst: mac("00:00:00:00:00:02")}
	k.SetMPLSLSE(label<<12 | tc<<9 | bos<<8 | ttl)
	return k
}

// MPLS in the pipeline: matches on label/tc/bos, push valued as Open
// vSwitch does (label 0, TC from the DSCP, TTL from the IP TTL), label
// rewrites, TTL actions, pop, and the action set's order.
func TestMPLSTranslation(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	mustAdd(t, p,
		"priority=10,in_port=1,ip,actions=push_mpls:0x8847,set_field:100->mpls_label,set_field:5->mpls_tc,output:2",
		"priority=10,in_port=2,mpls,mpls_label=100,mpls_bos=1,actions=dec_mpls_ttl,copy_ttl_in,pop_mpls:0x0800,output:1",
		"priority=10,in_port=3,mpls,mpls_label=7,actions=write_actions(output:1,set_mpls_ttl:9,pop_mpls:0x8847,copy_ttl_in)",
		"priority=5,in_port=2,mpls,actions=output:3")
	ip := tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2)
	ip.NwTOS = 46 << 2
	ip.NwTTL = 33
	for _, tc := range []struct {
		name string
		key  flow.Key
		want string
		mask func(m flow.Mask) bool
	}{
		{"push onto ipv4", ip, "push_mpls(eth_type=0x8847,label=0,tc=6,bos=1,ttl=33),set(mpls(label=100,tc=5)),output:2",
			func(m flow.Mask) bool { return m.NwTTL == 0xff && m.NwTOS&0xfc == 0xfc }},
		{"pop", mplsKey(2, 100, 0, 1, 9), "dec_mpls_ttl,copy_ttl_in,pop_mpls(eth_type=0x0800),output:1",
			func(m flow.Mask) bool { return m.MPLSLSE()&0xfffff100 == 0xfffff100 }},
		{"other label", mplsKey(2, 101, 0, 1, 9), "output:3", func(m flow.Mask) bool { return m.MPLSLSE()>>12 != 0 }},
		{"action set order", mplsKey(3, 7, 0, 0, 9), "copy_ttl_in,pop_mpls(eth_type=0x8847),set(mpls(ttl=9)),output:1", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := translate(t, p, tc.key)
			if got := actions(tr); got != tc.want {
				t.Fatalf("actions %s, want %s\ntrace:\n%s", got, tc.want, FormatTrace(tr.Trace))
			}
			if tc.mask != nil && !tc.mask(tr.Mask) {
				t.Fatalf("mask %s lacks what the result depended on", flow.Format(tc.key, tr.Mask))
			}
		})
	}
}

// A lookup after pop_mpls matches on headers the key does not hold: the
// translation recirculates, and the second pass (the fast path parsed the
// packet again) matches the inner IP header.
func TestMPLSPopThenLookupRecirculates(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	mustAdd(t, p, "table=0,mpls,actions=pop_mpls:0x0800,goto_table:1", "table=1,ip,nw_dst=10.0.0.2,actions=output:2")
	tr, err := p.Translate(mplsKey(1, 5, 0, 1, 9), TranslateOptions{Trace: true})
	if err != nil || tr.NoCache || len(tr.Actions) != 2 {
		t.Fatalf("first pass: %s err %v NoCache %v\n%s", actions(tr), err, tr.NoCache, FormatTrace(tr.Trace))
	}
	rc, ok := tr.Actions[1].(flow.Recirc)
	if _, pop := tr.Actions[0].(flow.PopMPLS); !pop || !ok || rc.ID == 0 {
		t.Fatalf("first pass %s, want pop_mpls then recirc", actions(tr))
	}
	if tr.Mask.RecircID != ^uint32(0) {
		t.Fatalf("first pass mask %s lacks recirc_id", flow.Format(flow.Key{}, tr.Mask))
	}
	inner := flow.Key{InPort: 1, EthType: 0x0800, RecircID: rc.ID}
	inner.SetIPDst(mustAddr("10.0.0.2"))
	tr2 := translate(t, p, inner)
	if got := actions(tr2); got != "output:2" {
		t.Fatalf("second pass %s, want output:2\n%s", got, FormatTrace(tr2.Trace))
	}
	inner.SetIPDst(mustAddr("10.0.0.3"))
	if got := actions(translate(t, p, inner)); got != "drop" {
		t.Fatalf("second pass to another address: %s, want drop", got)
	}
	// An id this pipeline never handed out (a flow from before a restart).
	inner.RecircID = rc.ID + 1
	if tr, err := p.Translate(inner, TranslateOptions{}); !errors.Is(err, errUnknownRecirc) || !tr.NoCache {
		t.Fatalf("unknown recirc id: %v NoCache %v", err, tr.NoCache)
	}
}

// Every bucket of an ALL group sees the packet as the group got it: a
// bucket's push_mpls is popped again and its TTL rewrites undone before
// the next bucket's output (the TTL's old value comes from the packet, so
// it joins the mask).
func TestGroupBucketsUndoStructureAndTTL(t *testing.T) {
	p, _ := newTestPipeline(t, 4)
	addGroup(t, p, 1, openflow.GroupTypeAll,
		bucket(t, 0, anyP, anyG, "dec_ttl,output:2"),
		bucket(t, 0, anyP, anyG, "push_mpls:0x8847,output:3"),
		bucket(t, 0, anyP, anyG, "output:4"))
	addGroup(t, p, 2, openflow.GroupTypeAll,
		bucket(t, 0, anyP, anyG, "dec_mpls_ttl,output:2"),
		bucket(t, 0, anyP, anyG, "pop_mpls:0x0800,output:3"),
		bucket(t, 0, anyP, anyG, "output:4"))
	mustAdd(t, p, "in_port=1,ip,actions=group:1", "in_port=1,mpls,actions=group:2")
	ip := tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2)
	ip.NwTTL = 33
	tr := translate(t, p, ip)
	want := "dec_ttl,output:2,set(ttl=33),push_mpls(eth_type=0x8847,label=0,tc=0,bos=1,ttl=33),output:3,pop_mpls(eth_type=0x0800),output:4"
	if got := actions(tr); got != want {
		t.Fatalf("ip: actions %s\nwant %s\ntrace:\n%s", got, want, FormatTrace(tr.Trace))
	}
	if tr.Mask.NwTTL != 0xff {
		t.Fatalf("ip: mask ttl %#x: the restored TTL comes from the packet", tr.Mask.NwTTL)
	}
	m := mplsKey(1, 100, 0, 1, 20)
	tr = translate(t, p, m)
	want = "dec_mpls_ttl,output:2,set(mpls(ttl=20)),pop_mpls(eth_type=0x0800),output:3,push_mpls(eth_type=0x8847,label=100,tc=0,bos=1,ttl=20),output:4"
	if got := actions(tr); got != want {
		t.Fatalf("mpls: actions %s\nwant %s\ntrace:\n%s", got, want, FormatTrace(tr.Trace))
	}
}

// After pop_mpls to IPv4 the key holds no IP fields: a set_field on one,
// or NORMAL after pop_pbb (customer addresses unknown), stops the
// translation instead of acting on zeros.
func TestActionsAfterPopNeedRecirculation(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	mustAdd(t, p, "in_port=1,mpls,actions=pop_mpls:0x0800,set_field:10.0.0.9->ip_dst,output:2",
		"in_port=2,dl_type=0x88e7,actions=pop_pbb,NORMAL")
	for _, k := range []flow.Key{mplsKey(1, 5, 0, 1, 9), {InPort: 2, EthType: 0x88e7}} {
		if tr, err := p.Translate(k, TranslateOptions{}); !errors.Is(err, errRecirc) || !tr.NoCache {
			t.Fatalf("in_port %d: err %v, actions %s", k.InPort, err, actions(tr))
		}
	}
}
