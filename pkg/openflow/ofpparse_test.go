package openflow

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestOvsOfctlParsesOurMessages writes one of each message we encode to a
// file and has "ovs-ofctl ofp-parse" decode it: messages no ovs-ofctl
// command sends or awaits (ROLE, ASYNC, TABLE_MOD, PACKET_IN, ...) are
// checked against OVS's decoder this way.
func TestOvsOfctlParsesOurMessages(t *testing.T) {
	bin, err := exec.LookPath("ovs-ofctl")
	if err != nil {
		t.Skip("ovs-ofctl not installed")
	}
	cases := []struct {
		m    Message
		want string
	}{
		{NewHello(1, 4), "OFPT_HELLO (OF1.3) (xid=0x1):\n version bitmap: 0x04"},
		{&ErrorMsg{MsgHeader: MsgHeader{Xid: 2}, Type: ErrTypeBadMatch, Code: BadMatchBadPrereq,
			Data: goldenMessages(t, "add_flow_tcp")[5][:64]}, "OFPT_ERROR (OF1.3) (xid=0x2): OFPBMC_BAD_PREREQ"},
		{&EchoRequest{MsgHeader: MsgHeader{Xid: 3}, Data: []byte("hi")}, "OFPT_ECHO_REQUEST (OF1.3) (xid=0x3): 2 bytes of payload"},
		{&EchoReply{MsgHeader: MsgHeader{Xid: 4}}, "OFPT_ECHO_REPLY (OF1.3) (xid=0x4): 0 bytes of payload"},
		{&FeaturesReply{MsgHeader: MsgHeader{Xid: 5}, DatapathID: 1, NTables: 4, Capabilities: CapFlowStats},
			"OFPT_FEATURES_REPLY (OF1.3) (xid=0x5): dpid:0000000000000001\nn_tables:4, n_buffers:0\ncapabilities: FLOW_STATS"},
		{&GetConfigReply{MsgHeader: MsgHeader{Xid: 6}, SwitchConfig: SwitchConfig{Flags: ConfigFragDrop, MissSendLen: 100}},
			"OFPT_GET_CONFIG_REPLY (OF1.3) (xid=0x6): frags=drop miss_send_len=100"},
		{&PacketIn{MsgHeader: MsgHeader{Xid: 7}, BufferID: NoBuffer, TotalLen: 60, Reason: PacketInReasonNoMatch,
			TableID: 2, Cookie: 5, Match: Match{}.Add(Uint(FieldInPort, 3), UintMasked(FieldMetadata, 1, 1)), Data: make([]byte, 60)},
			"OFPT_PACKET_IN (OF1.3) (xid=0x7): table_id=2 cookie=0x5 total_len=60 metadata=0x1/0x1,in_port=3 (via no_match) data_len=60 (unbuffered)"},
		{&FlowRemoved{MsgHeader: MsgHeader{Xid: 8}, Cookie: 1, Priority: 3, Reason: FlowRemovedDelete, TableID: 1,
			DurationSec: 1, Match: Match{}.Add(Uint(FieldInPort, 9))},
			"OFPT_FLOW_REMOVED (OF1.3) (xid=0x8): priority=3,in_port=9 reason=delete table_id=1 cookie:0x1 duration1s"},
		{&PortStatus{MsgHeader: MsgHeader{Xid: 9}, Reason: PortReasonAdd, Port: testPorts[0]},
			"OFPT_PORT_STATUS (OF1.3) (xid=0x9): ADD: 1(p1): addr:02:00:00:00:00:01"},
		{&TableMod{MsgHeader: MsgHeader{Xid: 10}, TableID: 1}, "OFPT_TABLE_MOD (OF1.3) (xid=0xa): table_id=1"},
		{&BarrierReply{MsgHeader: MsgHeader{Xid: 11}}, "OFPT_BARRIER_REPLY (OF1.3) (xid=0xb):"},
		{&RoleRequest{MsgHeader: MsgHeader{Xid: 12}, Role: Role{Role: RoleMaster, GenerationID: 42}},
			"OFPT_ROLE_REQUEST (OF1.3) (xid=0xc): role=primary generation_id=42"},
		{&RoleReply{MsgHeader: MsgHeader{Xid: 13}, Role: Role{Role: RoleSlave, GenerationID: 7}},
			"OFPT_ROLE_REPLY (OF1.3) (xid=0xd): role=secondary generation_id=7"},
		{&GetAsyncRequest{MsgHeader: MsgHeader{Xid: 14}}, "OFPT_GET_ASYNC_REQUEST (OF1.3) (xid=0xe):"},
		{&GetAsyncReply{MsgHeader: MsgHeader{Xid: 15}, AsyncConfig: AsyncConfig{PacketInMask: [2]uint32{1 << PacketInReasonNoMatch, 0},
			PortStatusMask: [2]uint32{7, 7}, FlowRemovedMask: [2]uint32{1 << FlowRemovedDelete, 0}}},
			"OFPT_GET_ASYNC_REPLY (OF1.3) (xid=0xf):\n primary:\n       PACKET_IN: no_match\n     PORT_STATUS: add delete modify\n    FLOW_REMOVED: delete"},
		{&SetAsync{MsgHeader: MsgHeader{Xid: 16}}, "OFPT_SET_ASYNC (OF1.3) (xid=0x10):"},
		{&MeterMod{MsgHeader: MsgHeader{Xid: 17}, Command: MeterAdd, Flags: MeterFlagPktps | MeterFlagStats, MeterID: 5,
			Bands: []MeterBand{{Type: MeterBandDSCPRemark, Rate: 10, PrecLevel: 1}}},
			"OFPT_METER_MOD (OF1.3) (xid=0x11): ADD meter=5 pktps stats bands=\ntype=dscp_remark rate=10 prec_level=1"},
		{&MultipartReply{MsgHeader: MsgHeader{Xid: 19}, Body: &DescReply{MfrDesc: "nagare", HWDesc: "hw", SWDesc: "sw",
			SerialNum: "42", DPDesc: "dp"}},
			"OFPST_DESC reply (OF1.3) (xid=0x13):\nManufacturer: nagare\nHardware: hw\nSoftware: sw\nSerial Num: 42\nDP Description: dp"},
		{&MultipartRequest{MsgHeader: MsgHeader{Xid: 20}, Body: &GroupStatsRequest{GroupID: GroupAll}},
			"OFPST_GROUP request (OF1.3) (xid=0x14): group_id=ALL"},
		{&PacketOut{MsgHeader: MsgHeader{Xid: 21}, BufferID: NoBuffer, InPort: PortController,
			Actions: Actions{ActionOutput{Port: PortTable}}, Data: make([]byte, 14)},
			"OFPT_PACKET_OUT (OF1.3) (xid=0x15): in_port=CONTROLLER actions=TABLE data_len=14"},
	}
	var file []byte
	for _, c := range cases {
		b, err := c.m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		file = append(file, b...)
	}
	path := filepath.Join(t.TempDir(), "msgs.of")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "ofp-parse", path).CombinedOutput()
	if err != nil {
		t.Fatalf("ovs-ofctl ofp-parse: %v\n%s", err, out)
	}
	text := string(out)
	for _, c := range cases {
		if !strings.Contains(text, c.want) {
			t.Errorf("ovs-ofctl ofp-parse did not print %q for %s", c.want, c.m.MsgType())
		}
	}
	if strings.Contains(text, "decode error") {
		t.Errorf("ovs-ofctl reported a decode problem:\n%s", text)
	}
	if t.Failed() {
		t.Logf("ovs-ofctl ofp-parse output:\n%s", text)
	}
}
