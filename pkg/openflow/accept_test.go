package openflow

import (
	"bufio"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The tests in this file serve replies encoded by this package to the real
// ovs-ofctl and assert on what it prints: the strongest evidence that our
// encodings are what an OpenFlow 1.3 peer expects.

// serveMultipart returns a reply function answering multipart requests of
// type t with body.
func serveMultipart(t MultipartType, body MultipartBody) func(Message) []Message {
	return func(m Message) []Message {
		if r, ok := m.(*MultipartRequest); ok && r.Type == t {
			return []Message{&MultipartReply{Body: body}}
		}
		return nil
	}
}

// goldenFlowStats turns every FLOW_MOD add in the golden files into a flow
// entry, so that ovs-ofctl prints flows it once encoded itself.
func goldenFlowStats(t *testing.T) []FlowStats {
	var stats []FlowStats
	for _, name := range goldenNames(t) {
		if !strings.HasPrefix(name, "add_flow") {
			continue
		}
		fm := goldenOf(t, name, TypeFlowMod)[0].(*FlowMod)
		stats = append(stats, FlowStats{TableID: fm.TableID, Priority: fm.Priority, Cookie: fm.Cookie,
			IdleTimeout: fm.IdleTimeout, HardTimeout: fm.HardTimeout, Flags: fm.Flags,
			DurationSec: 12, DurationNsec: 5e8, PacketCount: 3, ByteCount: 180,
			Match: fm.Match, Instructions: fm.Instructions})
	}
	return stats
}

// TestOvsOfctlAcceptsFlowStats serves a FLOW stats reply and checks that
// ovs-ofctl prints each flow exactly as FlowStats.String does.
func TestOvsOfctlAcceptsFlowStats(t *testing.T) {
	stats := goldenFlowStats(t)
	// Also a flow with flags, the default priority and an empty match.
	stats = append(stats, FlowStats{TableID: 3, Priority: defaultPriority, Flags: FlowFlagSendFlowRem,
		Instructions: Instructions{InstApplyActions{Actions: Actions{ActionOutput{Port: PortController, MaxLen: ControllerNoBuffer}}}}})
	sw := newFakeSwitch(t, serveMultipart(MPFlow, &FlowStatsReply{Stats: stats}))
	out, err := ovsOfctl(t, "--no-stats", "dump-flows", sw.target())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != len(stats) {
		t.Fatalf("ovs-ofctl printed %d flows, want %d:\n%s", len(lines), len(stats), out)
	}
	for i, s := range stats {
		if got, want := strings.TrimSpace(lines[i]), s.String(); got != want {
			t.Errorf("flow %d:\novs-ofctl: %s\n     ours: %s", i, got, want)
		}
	}
	// With statistics, the counters we encoded must come back.
	out, err = ovsOfctl(t, "dump-flows", sw.target())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "duration=12.500s") || !strings.Contains(out, "n_packets=3, n_bytes=180") {
		t.Errorf("counters not printed as encoded:\n%s", out)
	}
}

// TestOvsOfctlAcceptsPortDesc serves PORT_DESC and FEATURES replies (show).
func TestOvsOfctlAcceptsPortDesc(t *testing.T) {
	sw := newFakeSwitch(t, nil)
	out, err := ovsOfctl(t, "show", sw.target())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"dpid:0000aabbccddeeff", "n_tables:254, n_buffers:0",
		"capabilities: FLOW_STATS TABLE_STATS PORT_STATS GROUP_STATS",
		"1(p1): addr:02:00:00:00:00:01", "current:    10GB-FD FIBER",
		"speed: 10000 Mbps now, 10000 Mbps max",
		"2(p2): addr:02:00:00:00:00:02", "config:     PORT_DOWN", "state:      LINK_DOWN",
		"frags=normal miss_send_len=128",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("ovs-ofctl show lacks %q:\n%s", want, out)
		}
	}
}

// TestOvsOfctlAcceptsError makes the switch refuse a FLOW_MOD with an error
// built by ErrorReply and checks ovs-ofctl reports that error.
func TestOvsOfctlAcceptsError(t *testing.T) {
	for _, c := range []struct {
		err  *Error
		want string
	}{
		{&Error{Type: ErrTypeFlowModFailed, Code: FlowModTableFull}, "OFPFMFC_TABLE_FULL"},
		{&Error{Type: ErrTypeBadMatch, Code: BadMatchBadPrereq}, "OFPBMC_BAD_PREREQ"},
		{&Error{Type: ErrTypeBadAction, Code: BadActionBadOutPort}, "OFPBAC_BAD_OUT_PORT"},
		{&Error{Type: ErrTypeBadInstruction, Code: BadInstBadTableID}, "OFPBIC_BAD_TABLE_ID"},
	} {
		sw := newFakeSwitch(t, func(m Message) []Message {
			if fm, ok := m.(*FlowMod); ok {
				raw, err := fm.MarshalBinary()
				if err != nil {
					t.Error(err)
				}
				return []Message{c.err.Reply(raw)}
			}
			return nil
		})
		out, err := ovsOfctl(t, "add-flow", sw.target(), "in_port=1,actions=output:2")
		if err == nil {
			t.Fatalf("ovs-ofctl add-flow succeeded despite %v: %s", c.err, out)
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "OFPT_FLOW_MOD") {
			t.Errorf("ovs-ofctl did not report %s with the echoed FLOW_MOD: %v", c.want, err)
		}
	}
}

// TestOvsOfctlAcceptsStats covers PORT_STATS, TABLE, AGGREGATE, GROUP,
// GROUP_DESC, GROUP_FEATURES, METER_FEATURES and TABLE_FEATURES replies.
func TestOvsOfctlAcceptsStats(t *testing.T) {
	var groupDescs []GroupDesc
	for _, name := range []string{"add_group_select", "add_group_ff", "add_group_indirect", "add_group_nx_hash"} {
		gm := goldenOf(t, name, TypeGroupMod)[0].(*GroupMod)
		groupDescs = append(groupDescs, GroupDesc{GroupType: gm.GroupType, GroupID: gm.GroupID, Buckets: gm.Buckets})
	}
	cases := []struct {
		name string
		args []string
		mt   MultipartType
		body MultipartBody
		want []string
	}{
		{"ports", []string{"dump-ports"}, MPPortStats, &PortStatsReply{Stats: []PortStats{{
			PortNo: 1, RxPackets: 10, TxPackets: 20, RxBytes: 1000, TxBytes: 2000, RxDropped: 1, TxDropped: 2,
			RxErrors: 3, TxErrors: 4, RxFrameErr: 5, RxOverErr: 6, RxCRCErr: 7, Collisions: 8, DurationSec: 9}}},
			[]string{"1 ports", "port  1: rx pkts=10, bytes=1000, drop=1, errs=3, frame=5, over=6, crc=7",
				"tx pkts=20, bytes=2000, drop=2, errs=4, coll=8", "duration=9s"}},
		{"tables", []string{"dump-tables"}, MPTable, &TableStatsReply{Stats: []TableStats{
			{TableID: 0, ActiveCount: 5, LookupCount: 100, MatchedCount: 90}}},
			[]string{"table 0:", "active=5, lookup=100, matched=90"}},
		{"aggregate", []string{"dump-aggregate"}, MPAggregate, &AggregateStatsReply{PacketCount: 10, ByteCount: 1000, FlowCount: 2},
			[]string{"packet_count=10 byte_count=1000 flow_count=2"}},
		{"groups", []string{"dump-groups"}, MPGroupDesc, &GroupDescReply{Groups: groupDescs},
			[]string{"group_id=1,type=select,bucket=weight:50,actions=output:1,bucket=weight:50,actions=output:2",
				"group_id=2,type=ff,bucket=watch_port:1,actions=output:1,bucket=watch_port:2,actions=output:2",
				"group_id=3,type=indirect,bucket=actions=set_field:00:00:00:00:00:01->eth_dst,output:3",
				"group_id=7,type=select,bucket=actions=load:0x1->NXM_NX_REG0[],resubmit(,10),bucket=actions=load:0x2->NXM_NX_REG0[],resubmit(,10)"}},
		{"group_stats", []string{"dump-group-stats"}, MPGroup, &GroupStatsReply{Stats: []GroupStats{{
			GroupID: 1, RefCount: 2, PacketCount: 30, ByteCount: 3000, DurationSec: 4,
			Buckets: []BucketCounter{{10, 1000}, {20, 2000}}}}},
			[]string{"group_id=1,duration=4s,ref_count=2,packet_count=30,byte_count=3000",
				"bucket0:packet_count=10,byte_count=1000", "bucket1:packet_count=20,byte_count=2000"}},
		{"group_features", []string{"dump-group-features"}, MPGroupFeatures, &GroupFeaturesReply{
			Types: 1<<GroupTypeAll | 1<<GroupTypeSelect, Capabilities: 1, MaxGroups: [4]uint32{16, 32},
			Actions: [4]uint32{1 << ActionTypeOutput, 1<<ActionTypeOutput | 1<<ActionTypeGroup}},
			[]string{"all group:", "max_groups=0x10", "actions: output", "select group:", "max_groups=0x20", "actions: output group"}},
		{"meter_features", []string{"meter-features"}, MPMeterFeatures, &MeterFeaturesReply{},
			[]string{"max_meter:0 max_bands:0 max_color:0"}},
		{"table_features", []string{"dump-table-features"}, MPTableFeatures,
			&TableFeaturesBody{Reply: true, Tables: []TableFeatures{testTableFeatures()}},
			[]string{`table 0 ("classifier")`, "max_entries=1000000", "next tables: 1-3",
				"instructions: meter apply_actions clear_actions write_actions write_metadata goto_table",
				"arbitrary mask: tun_id metadata eth_{src,dst} vlan_vid ip_{src,dst} ipv6_{src,dst,label}"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sw := newFakeSwitch(t, serveMultipart(c.mt, c.body))
			out, err := ovsOfctl(t, append(c.args, sw.target())...)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("ovs-ofctl %s output lacks %q:\n%s", c.args[0], w, out)
				}
			}
		})
	}
}

// TestOvsOfctlAcceptsAsync pushes PACKET_IN, PORT_STATUS and FLOW_REMOVED
// to "ovs-ofctl monitor" and checks it prints them.
func TestOvsOfctlAcceptsAsync(t *testing.T) {
	bin, err := exec.LookPath("ovs-ofctl")
	if err != nil {
		t.Skip("ovs-ofctl not installed")
	}
	frame := mustHex("ffffffffffff020000000001080600010800060400010200000000010a0000010000000000000a000002")
	async := []Message{
		&PacketIn{BufferID: NoBuffer, TotalLen: uint16(len(frame)), Reason: PacketInReasonAction, TableID: 0,
			Cookie: 0x77, Match: Match{}.Add(Uint(FieldInPort, 1)), Data: frame},
		&PortStatus{Reason: PortReasonModify, Port: testPorts[1]},
		&FlowRemoved{Cookie: 0x99, Priority: 100, Reason: FlowRemovedIdleTimeout, TableID: 0, DurationSec: 7,
			IdleTimeout: 5, PacketCount: 4, ByteCount: 400,
			Match: Match{}.Add(Uint(FieldEthType, 0x0800), Addr(FieldIPv4Dst, addr("10.0.0.2")))},
	}
	sw := newFakeSwitch(t, func(m Message) []Message {
		// ovs-ofctl monitor's second barrier follows its set-up; then it
		// is listening.
		if _, ok := m.(*BarrierRequest); ok {
			return append([]Message{&BarrierReply{}}, async...)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-O", "OpenFlow13", "monitor", sw.target(), "65535")
	cmd.Env = append(cmd.Environ(), "OVS_RUNDIR="+t.TempDir())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout // the pipe's writer: OVS logs warnings there too
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// monitor runs until killed: read until the last async message shows.
	var out []byte
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		out = append(append(out, sc.Bytes()...), '\n')
		if strings.Contains(sc.Text(), "OFPT_FLOW_REMOVED") {
			break
		}
	}
	cancel()
	cmd.Wait()
	for _, want := range []string{
		"OFPT_PACKET_IN (OF1.3)", "cookie=0x77", "total_len=42 in_port=1 (via action)",
		"arp,vlan_tci=0x0000,dl_src=02:00:00:00:00:01,dl_dst=ff:ff:ff:ff:ff:ff,arp_spa=10.0.0.1,arp_tpa=10.0.0.2,arp_op=1,arp_sha=02:00:00:00:00:01",
		"OFPT_PORT_STATUS (OF1.3)", "MOD: 2(p2): addr:02:00:00:00:00:02",
		"OFPT_FLOW_REMOVED (OF1.3)", "priority=100,ip,nw_dst=10.0.0.2 reason=idle table_id=0 cookie:0x99 duration7s idle5 pkts4 bytes400",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("ovs-ofctl monitor output lacks %q:\n%s", want, out)
		}
	}
}

// TestOvsOfctlAcceptsSplitReply serves 3000 flows, more than one message
// can hold, split by SplitReply with OFPMPF_REPLY_MORE, and checks that
// ovs-ofctl reassembles all of them.
func TestOvsOfctlAcceptsSplitReply(t *testing.T) {
	base := goldenFlowStats(t)
	var stats []FlowStats
	for i := range 3000 {
		s := base[i%len(base)]
		s.Cookie = uint64(i + 1)
		stats = append(stats, s)
	}
	parts, err := SplitReply(&MultipartReply{Body: &FlowStatsReply{Stats: stats}})
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) < 3 {
		t.Fatalf("3000 flows split into %d parts", len(parts))
	}
	var total int
	for i, p := range parts {
		b, err := p.MarshalBinary()
		if err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		if more := p.Flags&MultipartMore != 0; more != (i < len(parts)-1) {
			t.Fatalf("part %d: MORE=%v", i, more)
		}
		if len(b) > MaxMessageLen {
			t.Fatalf("part %d is %d bytes", i, len(b))
		}
		total += len(p.Body.(*FlowStatsReply).Stats)
	}
	if total != len(stats) {
		t.Fatalf("parts hold %d flows, want %d", total, len(stats))
	}
	sw := newFakeSwitch(t, func(m Message) []Message {
		if r, ok := m.(*MultipartRequest); ok && r.Type == MPFlow {
			var out []Message
			for _, p := range parts {
				out = append(out, p)
			}
			return out
		}
		return nil
	})
	out, err := ovsOfctl(t, "--no-stats", "dump-flows", sw.target())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != len(stats) {
		t.Fatalf("ovs-ofctl printed %d flows, want %d", len(lines), len(stats))
	}
	if got, want := strings.TrimSpace(lines[2999]), stats[2999].String(); got != want {
		t.Fatalf("last flow:\novs-ofctl: %s\n     ours: %s", got, want)
	}
}
