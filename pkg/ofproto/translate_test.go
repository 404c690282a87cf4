package ofproto

import (
	"strings"
	"testing"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

func TestTranslateBasics(t *testing.T) {
	tests := []struct {
		name  string
		flows []string
		key   flow.Key
		want  string
	}{
		{"empty pipeline drops", nil, tcpKey(1, "10.0.0.1", "10.0.0.2", 1000, 80), "drop"},
		{"output", []string{"in_port=1,actions=output:2"}, tcpKey(1, "10.0.0.1", "10.0.0.2", 1000, 80), "output:2"},
		{"output to in_port is dropped", []string{"actions=output:1"}, tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2), "drop"},
		{"IN_PORT sends back", []string{"actions=in_port"}, tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2), "output:1"},
		{"missing port dropped", []string{"actions=output:9,output:2"}, tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2), "output:2"},
		{"LOCAL", []string{"actions=LOCAL"}, tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2), "local"},
		{"FLOOD skips in_port", []string{"actions=FLOOD"}, tcpKey(2, "10.0.0.1", "10.0.0.2", 1, 2), "output:1,output:3"},
		{"priority", []string{"priority=10,actions=output:2", "priority=20,tcp,actions=output:3"},
			tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2), "output:3"},
		{"goto and write_actions", []string{
			"table=0,actions=write_actions(output:2),goto_table:1",
			"table=1,tcp,actions=write_actions(output:3)"}, tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2), "output:3"},
		{"miss in later table drops the action set", []string{
			"table=0,actions=write_actions(output:2),goto_table:1"}, tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2), "drop"},
		{"clear_actions", []string{
			"table=0,actions=write_actions(output:2),goto_table:1",
			"table=1,actions=clear_actions"}, tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2), "drop"},
		{"rewrite before the output that sees it, not before earlier outputs",
			[]string{"tcp,actions=output:2,set_field:10.9.9.9->ip_dst,output:3,set_field:7->tcp_dst"},
			tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2), "output:2,set(ip_dst=10.9.9.9),output:3"},
		{"action set order: set_field before output", []string{"actions=write_actions(output:2,set_field:00:00:00:00:00:99->eth_dst)"},
			tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2), "set(eth_dst=00:00:00:00:00:99),output:2"},
		{"dec_ttl and dscp", []string{"ip,actions=dec_ttl,set_field:46->ip_dscp,output:2"},
			tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2), "dec_ttl,set(dscp=46),output:2"},
		{"push vlan then set vid", []string{"actions=push_vlan:0x8100,set_field:4196->vlan_vid,output:2"},
			tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2), "push_vlan(tpid=0x8100,vid=100,pcp=0),output:2"},
		{"write_metadata then match it", []string{
			"table=0,actions=write_metadata:0x5/0xff,goto_table:1",
			"table=1,metadata=0x5,actions=output:3",
			"table=1,priority=0,actions=output:2"}, tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2), "output:3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { wantActions(t, tc.flows, tc.key, tc.want) })
	}
}

func TestVLANRewrite(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	mustAdd(t, p, "dl_vlan=10,actions=set_field:4116->vlan_vid,output:2,pop_vlan,output:3")
	k := tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2)
	k.VlanTCI = flow.VLANCFI | 3<<13 | 10
	tr := translate(t, p, k)
	want := "pop_vlan,push_vlan(tpid=0x8100,vid=20,pcp=3),output:2,pop_vlan,output:3"
	if got := actions(tr); got != want {
		t.Fatalf("got %s want %s", got, want)
	}
	// The PCP is copied from the packet: it must be in the mask.
	if tr.Mask.VlanTCI&0xe000 != 0xe000 {
		t.Fatalf("mask TCI %#x lacks PCP", tr.Mask.VlanTCI)
	}
}

// A field written by set_field and matched by a later table is not
// un-wildcarded: its value came from the actions.
func TestSetFieldThenGotoMask(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	mustAdd(t, p,
		"table=0,priority=10,tcp,actions=set_field:10.1.1.1->ip_dst,goto_table:1",
		"table=1,priority=30,ip,nw_dst=10.2.0.0/16,actions=output:3",
		"table=1,priority=20,ip,nw_dst=10.1.1.1,actions=output:2",
	)
	k := tcpKey(1, "10.0.0.1", "10.2.3.4", 1, 2) // would match the /16 before the rewrite
	tr := translate(t, p, k)
	if got := actions(tr); got != "set(ip_dst=10.1.1.1),output:2" {
		t.Fatalf("actions %s", got)
	}
	if tr.Mask.IPDst != ([16]byte{}) {
		t.Fatalf("mask has ip_dst %v: it was written, not read", tr.Mask.IPDst)
	}
	if tr.Mask.EthType != 0xffff || tr.Mask.NwProto != 0xff || tr.Mask.InPort != ^uint32(0) {
		t.Fatalf("mask %+v lacks eth_type/ip_proto/in_port", tr.Mask)
	}
	// Reading before writing does pin it.
	p2, _ := newTestPipeline(t, 3)
	mustAdd(t, p2,
		"table=0,priority=10,ip,nw_dst=10.2.0.0/16,actions=set_field:10.1.1.1->ip_dst,goto_table:1",
		"table=1,priority=20,ip,nw_dst=10.1.1.1,actions=output:2",
	)
	tr = translate(t, p2, k)
	if tr.Mask.IPDst[0] != 0xff || tr.Mask.IPDst[1] != 0xff || tr.Mask.IPDst[2] != 0 {
		t.Fatalf("mask ip_dst %v, want /16", tr.Mask.IPDst[:4])
	}
}

// A higher-priority rule that misses un-wildcards one differing field,
// not its whole match.
func TestMissUnwildcardsOneField(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	mustAdd(t, p,
		"priority=100,tcp,nw_src=192.168.0.0/16,tp_dst=22,actions=drop",
		"priority=50,ip,actions=output:2",
	)
	tr := translate(t, p, tcpKey(1, "10.0.0.1", "10.0.0.2", 1000, 80))
	if actions(tr) != "output:2" {
		t.Fatalf("actions %s", actions(tr))
	}
	m := tr.Mask
	// 10.0.0.1 is outside 192.168.0.0/16 already by its first byte.
	if m.IPSrc[0] != 0xff || m.IPSrc[1] != 0 {
		t.Fatalf("want nw_src /8 in mask, got %v", m.IPSrc[:4])
	}
	if m.TpDst != 0 || m.TpSrc != 0 || m.IPDst != ([16]byte{}) || m.EthSrc != ([6]byte{}) {
		t.Fatalf("mask too narrow-minded: %s", flow.Format(tcpKey(1, "10.0.0.1", "10.0.0.2", 1000, 80), m))
	}
	// A UDP packet differs already in ip_proto: only that is needed.
	u := tcpKey(1, "192.168.1.1", "10.0.0.2", 1000, 22)
	u.NwProto = 17
	tr = translate(t, p, u)
	if tr.Mask.IPSrc != ([16]byte{}) || tr.Mask.NwProto != 0xff {
		t.Fatalf("udp mask %s", flow.Format(u, tr.Mask))
	}
}

func TestControllerAndPacketIn(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	mustAdd(t, p,
		"table=0,cookie=0x42,tcp,actions=set_field:00:00:00:00:00:aa->eth_dst,CONTROLLER:128,goto_table:1",
		"table=1,priority=0,actions=CONTROLLER:65535",
	)
	tr := translate(t, p, tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2))
	if len(tr.PacketIns) != 2 {
		t.Fatalf("packet-ins %+v", tr.PacketIns)
	}
	pi := tr.PacketIns[0]
	if pi.Reason != openflow.PacketInReasonAction || pi.TableID != 0 || pi.Cookie != 0x42 || pi.MaxLen != 128 {
		t.Fatalf("first packet-in %+v", pi)
	}
	if tr.PacketIns[1].Reason != openflow.PacketInReasonNoMatch || tr.PacketIns[1].TableID != 1 {
		t.Fatalf("table-miss packet-in %+v", tr.PacketIns[1])
	}
	us, ok := tr.Actions[pi.ActionIndex].(flow.Userspace)
	if !ok || pi.ActionIndex != 1 {
		t.Fatalf("actions %s, index %d", actions(tr), pi.ActionIndex)
	}
	if _, ok := tr.Actions[0].(flow.SetEthDst); !ok {
		t.Fatalf("rewrite must precede the userspace action: %s", actions(tr))
	}
	got, ok := p.ControllerCookie(us.Cookie)
	if !ok || got.Reason != pi.Reason || got.Cookie != 0x42 || got.MaxLen != 128 || got.TableID != 0 {
		t.Fatalf("ControllerCookie = %+v, %v", got, ok)
	}
	if m := got.MatchFor(tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2)); m.String() != "in_port=1" {
		t.Fatalf("match %s", m)
	}
	// Same rule, other packet: same cookie.
	tr2 := translate(t, p, tcpKey(1, "10.0.0.3", "10.0.0.2", 1, 2))
	if tr2.Actions[1].(flow.Userspace).Cookie != us.Cookie {
		t.Fatal("cookie not reused")
	}
	// The cookie dies with the last rule that produced it.
	if _, err := p.FlowMod(flowMod(t, openflow.FlowDelete, "table=0,cookie=0x42/0xffffffffffffffff")); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.ControllerCookie(us.Cookie); ok {
		t.Fatal("cookie outlived its rule")
	}
	if _, ok := p.ControllerCookie(tr.Actions[len(tr.Actions)-1].(flow.Userspace).Cookie); !ok {
		t.Fatal("table 1's cookie must survive")
	}
}

func TestTrace(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	mustAdd(t, p,
		"table=0,priority=5,cookie=0x7,in_port=1,actions=goto_table:1",
		"table=1,priority=9,tcp,tp_dst=80,actions=output:2",
	)
	tr := translate(t, p, tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 22))
	got := FormatTrace(tr.Trace)
	want := "table 0: priority=5,in_port=1 cookie=0x7 actions=goto_table:1\ntable 1: no match: drop\ntable 0: datapath actions: drop\n"
	if got != want {
		t.Fatalf("trace\n%s\nwant\n%s", got, want)
	}
	if tr2, _ := p.Translate(tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 22), TranslateOptions{}); tr2.Trace != nil {
		t.Fatal("trace without opts.Trace")
	}
}

func TestPacketOut(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	mustAdd(t, p, "in_port=CONTROLLER,actions=output:3")
	as, err := openflow.ParseActions("output:2,TABLE")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := p.TranslatePacketOut(tcpKey(0, "10.0.0.1", "10.0.0.2", 1, 2), openflow.PortController, as, TranslateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if actions(tr) != "output:2,output:3" || !tr.NoCache {
		t.Fatalf("packet-out: %s nocache=%v", actions(tr), tr.NoCache)
	}
	// output:TABLE outside packet-out is refused.
	_, err = p.FlowMod(flowMod(t, openflow.FlowAdd, "actions=TABLE"))
	wantErr(t, err, openflow.ErrTypeBadAction, openflow.BadActionBadOutPort)
}

func TestTunnelOutput(t *testing.T) {
	p, _ := newTestPipeline(t, 0)
	remote := mustAddr("192.0.2.7")
	p.SetPorts([]Port{{No: 1}, {No: 5, Tunnel: &TunnelConfig{Remote: remote}}})
	mustAdd(t, p, "in_port=1,actions=set_field:5000->tun_id,output:5")
	tr := translate(t, p, tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2))
	if got := actions(tr); got != "set(tunnel(vni=5000,dst=192.0.2.7)),output:5" {
		t.Fatalf("actions %s", got)
	}
	if tr.Mask.TunID != 0 {
		t.Fatal("tun_id was written, not read")
	}
	// Without set_field the packet's own tunnel id is used: it is read.
	mustAdd(t, p, "in_port=1,actions=output:5")
	k := tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2)
	k.TunID = 9
	tr = translate(t, p, k)
	if !strings.Contains(actions(tr), "vni=9") || tr.Mask.TunID != ^uint32(0) {
		t.Fatalf("actions %s mask %#x", actions(tr), tr.Mask.TunID)
	}
}

func TestFailStandalone(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	k := tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2)
	if actions(translate(t, p, k)) != "drop" {
		t.Fatal("secure mode must drop")
	}
	v := p.Version()
	p.SetFallbackNormal(true)
	if p.Version() == v {
		t.Fatal("version did not move")
	}
	if got := actions(translate(t, p, k)); got != "output:2,output:3" {
		t.Fatalf("standalone: %s", got)
	}
	mustAdd(t, p, "priority=0,actions=drop")
	if actions(translate(t, p, k)) != "drop" {
		t.Fatal("rules present: no fallback")
	}
}

// Match values the datapath key cannot hold never match.
func TestUnmatchableValues(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	mustAdd(t, p, "priority=10,tun_id=0x100000005,actions=output:2", "priority=10,arp,arp_op=0x101,actions=output:3",
		"priority=1,actions=output:1")
	k := tcpKey(2, "10.0.0.1", "10.0.0.2", 1, 2)
	k.TunID = 5
	if got := actions(translate(t, p, k)); got != "output:1" {
		t.Fatalf("tun_id >= 2^32 matched: %s", got)
	}
	a := flow.Key{InPort: 2, EthType: 0x0806, NwProto: 1}
	if got := actions(translate(t, p, a)); got != "output:1" {
		t.Fatalf("arp_op > 255 matched: %s", got)
	}
}

// TestPacketOutRulesCredited: a PACKET_OUT's output:TABLE reports the
// rules it went through, so the daemon can count the packet in them (no
// cached flow ever will).
func TestPacketOutRulesCredited(t *testing.T) {
	p, c := newTestPipeline(t, 3)
	mustAdd(t, p,
		"table=0,cookie=0x1,tcp,actions=goto_table:1",
		"table=1,cookie=0x2,tcp,actions=output:3",
	)
	as, err := openflow.ParseActions("TABLE")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := p.TranslatePacketOut(tcpKey(0, "10.0.0.1", "10.0.0.2", 1, 2), 1, as, TranslateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Credit(tr.Rules, 1, 60, c.now())
	st := p.FlowStats(&openflow.FlowStatsRequest{TableID: openflow.TableAll, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny})
	if len(st) != 2 {
		t.Fatalf("flow stats %+v", st)
	}
	for _, s := range st {
		if s.PacketCount != 1 || s.ByteCount != 60 {
			t.Errorf("table %d cookie %#x: %d packets, %d bytes; want 1, 60", s.TableID, s.Cookie, s.PacketCount, s.ByteCount)
		}
	}
}

// set_nw_ttl rewrites IP packets only (as Open vSwitch does), so the
// EtherType decides and must be in the megaflow mask even when no rule
// matched on it.
func TestSetNWTTL(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	mustAdd(t, p, "in_port=1,actions=set_nw_ttl:5,output:2",
		"in_port=3,actions=write_actions(mod_nw_ttl:7,output:2)")
	v6 := tcpKey(1, "fd00::1", "fd00::2", 1, 2)
	v6.EthType = 0x86dd
	arp := flow.Key{InPort: 1, EthType: 0x0806}
	for _, tc := range []struct {
		name string
		key  flow.Key
		want string
	}{
		{"ipv4", tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2), "set(ttl=5),output:2"},
		{"ipv6", v6, "set(ttl=5),output:2"},
		{"arp untouched", arp, "output:2"},
		{"action set", tcpKey(3, "10.0.0.1", "10.0.0.2", 1, 2), "set(ttl=7),output:2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := translate(t, p, tc.key)
			if got := actions(tr); got != tc.want {
				t.Fatalf("actions %s, want %s\ntrace:\n%s", got, tc.want, FormatTrace(tr.Trace))
			}
			if tr.Mask.EthType != 0xffff {
				t.Fatalf("mask eth_type %#x: whether set_nw_ttl applies depends on it", tr.Mask.EthType)
			}
		})
	}
}

// A masked vlan_vid (ovs-ofctl's vlan_vid=0x60/0xf0) matches the VID bits
// under the mask, as in Open vSwitch; the megaflow keeps exactly those bits.
func TestMaskedVLANVID(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	mustAdd(t, p, "priority=10,vlan_vid=0x60/0xf0,actions=output:2", "priority=10,vlan_vid=0x1200/0x1f00,actions=output:3",
		"priority=0,actions=drop")
	tagged := func(vid uint16) flow.Key {
		k := tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2)
		k.VlanTCI = flow.VLANCFI | 5<<13 | vid
		return k
	}
	for _, tc := range []struct {
		name string
		key  flow.Key
		want string
	}{
		{"vid 0x65 matches 0x60/0xf0", tagged(0x65), "output:2"},
		{"vid 0x6f matches 0x60/0xf0", tagged(0x6f), "output:2"},
		{"vid 0x75 does not", tagged(0x75), "drop"},
		{"untagged does not", tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2), "drop"},
		{"vid 0x2ab matches 0x1200/0x1f00", tagged(0x2ab), "output:3"},
		{"vid 0x3ab does not", tagged(0x3ab), "drop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := translate(t, p, tc.key)
			if got := actions(tr); got != tc.want {
				t.Fatalf("actions %s, want %s\ntrace:\n%s", got, tc.want, FormatTrace(tr.Trace))
			}
			if tr.Mask.VlanTCI&0xf0 != 0xf0 || tr.Mask.VlanTCI&0xe00f != 0 {
				t.Fatalf("mask vlan_tci %#04x: want the masked VID bits and not the PCP or low VID bits", tr.Mask.VlanTCI)
			}
		})
	}
}

// TestTunnelInheritTOS: a tunnel port that inherits ToS emits a tunnel
// action that says so, after the set_field that writes the FCF.
func TestTunnelInheritTOS(t *testing.T) {
	p, _ := newTestPipeline(t, 0)
	p.SetPorts([]Port{{No: 1}, {No: 5, Tunnel: &TunnelConfig{Remote: mustAddr("192.0.2.7"), InheritTOS: true}}})
	mustAdd(t, p, "in_port=1,ip,actions=set_field:4->ip_dscp,set_field:1->ip_ecn,set_field:7->tun_id,output:5")
	got := actions(translate(t, p, tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2)))
	if got != "set(dscp=4),set(ecn=1),set(tunnel(vni=7,dst=192.0.2.7,tos=inherit)),output:5" {
		t.Fatalf("actions %s", got)
	}
}

// set_field on sctp_src/sctp_dst becomes the datapath's port rewrite
// (which fixes the CRC32c) for SCTP packets, in a flow and in an action set.
func TestSetSCTPPorts(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	mustAdd(t, p, "in_port=1,sctp,actions=set_field:99->sctp_dst,set_field:98->sctp_src,output:2",
		"in_port=3,sctp,actions=write_actions(set_field:97->sctp_dst,output:2)")
	for _, tc := range []struct {
		in   uint32
		want string
	}{{1, "set(tp_src=98),set(tp_dst=99),output:2"}, {3, "set(tp_dst=97),output:2"}} {
		k := tcpKey(tc.in, "10.0.0.1", "10.0.0.2", 1, 2)
		k.NwProto = 132
		tr := translate(t, p, k)
		if got := actions(tr); got != tc.want {
			t.Fatalf("actions %s, want %s\ntrace:\n%s", got, tc.want, FormatTrace(tr.Trace))
		}
		if tr.Mask.NwProto != 0xff || tr.Mask.TpDst != 0 {
			t.Fatalf("mask ip_proto %#x tp_dst %#x: the port is written, not read", tr.Mask.NwProto, tr.Mask.TpDst)
		}
	}
}

// nd_target/nd_sll/nd_tll are matched and rewritten: a rule on the target
// puts the target (and the ND prerequisites) in the megaflow, set_field
// becomes the datapath's ND rewrites for the message that has the field.
func TestNDFields(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	mustAdd(t, p, "priority=10,icmp6,icmp_type=135,nd_target=fd00::99,actions=set_field:fd00::1->nd_target,set_field:02:00:00:00:00:ee->nd_sll,output:2",
		"priority=10,icmp6,icmp_type=136,nd_tll=02:00:00:00:00:0b,actions=set_field:02:00:00:00:00:ef->nd_tll,output:2",
		"priority=1,actions=output:3")
	nd := func(typ uint16, target string) flow.Key {
		k := flow.Key{InPort: 1, EthType: 0x86dd, NwProto: 58, NwTTL: 255, TpSrc: typ}
		k.SetIPSrc(mustAddr("fd00::1"))
		k.SetIPDst(mustAddr("ff02::1:ff00:99"))
		k.NDTarget = mustAddr(target).As16()
		return k
	}
	ns := nd(135, "fd00::99")
	ns.ArpSHA = [6]byte{2, 0, 0, 0, 0, 0xa}
	na := nd(136, "fd00::98")
	na.ArpTHA = [6]byte{2, 0, 0, 0, 0, 0xb}
	for _, tc := range []struct {
		name string
		key  flow.Key
		want string
	}{
		{"ns", ns, "set(nd_target=fd00::1),set(nd_ll=02:00:00:00:00:ee),output:2"},
		{"ns other target", nd(135, "fd00::98"), "output:3"},
		{"na", na, "set(nd_ll=02:00:00:00:00:ef),output:2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := translate(t, p, tc.key)
			if got := actions(tr); got != tc.want {
				t.Fatalf("actions %s, want %s\ntrace:\n%s", got, tc.want, FormatTrace(tr.Trace))
			}
			if tc.key.TpSrc == 135 && tr.Mask.NDTarget != [16]byte(allOnes(16)) {
				t.Fatalf("mask nd_target %x: the rule's decision depends on it", tr.Mask.NDTarget)
			}
		})
	}
}
