package openflow

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// goldenMessages returns the messages ovs-ofctl sent for one golden file.
func goldenMessages(t testing.TB, name string) [][]byte {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "golden", name+".hex"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var msgs [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		b, err := hex.DecodeString(line)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		msgs = append(msgs, b)
	}
	return msgs
}

func goldenNames(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*.hex"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".hex"))
	}
	return names
}

// TestGoldenRoundTrip decodes every message ovs-ofctl sent, re-encodes it
// and demands the same bytes; the mods it sent must also validate.
func TestGoldenRoundTrip(t *testing.T) {
	for _, name := range goldenNames(t) {
		t.Run(name, func(t *testing.T) {
			for i, raw := range goldenMessages(t, name) {
				m, err := Unmarshal(raw)
				if err != nil {
					t.Fatalf("message %d (%s): %v", i, MsgType(raw[1]), err)
				}
				out, err := Marshal(m)
				if err != nil {
					t.Fatalf("message %d (%s): marshal: %v", i, m.MsgType(), err)
				}
				if !bytes.Equal(out, raw) {
					t.Fatalf("message %d (%s) re-encodes differently:\n got %x\nwant %x", i, m.MsgType(), out, raw)
				}
				if v, ok := m.(interface{ Validate() error }); ok {
					if err := v.Validate(); err != nil {
						t.Errorf("message %d (%s) from ovs-ofctl fails validation: %v", i, m.MsgType(), err)
					}
				}
			}
		})
	}
}

// goldenOf returns the decoded messages of type t in a golden file.
func goldenOf(t *testing.T, name string, typ MsgType) []Message {
	t.Helper()
	var out []Message
	for _, raw := range goldenMessages(t, name) {
		if MsgType(raw[1]) != typ {
			continue
		}
		m, err := Unmarshal(raw)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no %s message", name, typ)
	}
	return out
}

func prefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr     { return netip.MustParseAddr(s) }

// TestGoldenValues checks that the decoded Go values are what the
// ovs-ofctl command line asked for.
func TestGoldenValues(t *testing.T) {
	hdr := func(xid uint32) MsgHeader { return MsgHeader{Version: 4, Xid: xid} }
	cases := []struct {
		file string
		typ  MsgType
		want Message
	}{
		{"add_flow_tcp", TypeFlowMod, &FlowMod{
			MsgHeader: hdr(6), TableID: 0, Command: FlowAdd, Priority: 100, BufferID: NoBuffer,
			OutPort: PortAny, OutGroup: GroupAny,
			Match: Match{}.Add(Uint(FieldInPort, 1), Uint(FieldEthType, 0x0800),
				Prefix(FieldIPv4Src, prefix("10.0.0.0/8")), Uint(FieldIPProto, 6), Uint(FieldTCPDst, 80)),
			Instructions: Instructions{InstApplyActions{Actions: Actions{
				ActionSetField{Field: MAC(FieldEthDst, mustMAC("00:11:22:33:44:55"))},
				ActionDecNWTTL{}, ActionOutput{Port: 2}}}},
		}},
		{"add_flow_vlan", TypeFlowMod, &FlowMod{
			MsgHeader: hdr(6), Command: FlowAdd, Priority: 20, BufferID: NoBuffer, OutPort: PortAny, OutGroup: GroupAny,
			Match: Match{}.Add(Uint(FieldInPort, 3), MAC(FieldEthSrc, mustMAC("00:00:00:00:00:01")),
				MACMasked(FieldEthDst, mustMAC("01:00:00:00:00:00"), mustMAC("01:00:00:00:00:00")),
				Uint(FieldVLANVID, uint64(VIDPresent)|10), Uint(FieldVLANPCP, 3)),
			Instructions: Instructions{InstApplyActions{Actions: Actions{ActionPopVLAN{}, ActionOutput{Port: PortInPort}}}},
		}},
		{"add_flow_vlan_masked", TypeFlowMod, &FlowMod{
			MsgHeader: hdr(6), Command: FlowAdd, Priority: 22, BufferID: NoBuffer, OutPort: PortAny, OutGroup: GroupAny,
			Match:        Match{}.Add(Uint(FieldInPort, 1), Uint(FieldEthType, 0x0800), UintMasked(FieldVLANVID, 0x60, 0xf0)),
			Instructions: Instructions{InstApplyActions{Actions: Actions{ActionSetNWTTL{TTL: 5}, ActionOutput{Port: 2}}}},
		}},
		{"add_flow_push_vlan", TypeFlowMod, &FlowMod{
			MsgHeader: hdr(6), Command: FlowAdd, Priority: 21, BufferID: NoBuffer, OutPort: PortAny, OutGroup: GroupAny,
			Match: Match{}.Add(Uint(FieldInPort, 4), Uint(FieldVLANVID, uint64(VIDNone))),
			Instructions: Instructions{InstApplyActions{Actions: Actions{ActionPushVLAN{EtherType: 0x8100},
				ActionSetField{Field: Uint(FieldVLANVID, 0x100a)}, ActionOutput{Port: 5}}}},
		}},
		{"del_flows_strict", TypeFlowMod, &FlowMod{
			MsgHeader: hdr(6), TableID: TableAll, Command: FlowDeleteStrict, Priority: 100, BufferID: NoBuffer,
			OutPort: PortAny, OutGroup: GroupAny,
			Match: Match{}.Add(Uint(FieldInPort, 1), Uint(FieldEthType, 0x0800),
				Prefix(FieldIPv4Src, prefix("10.0.0.0/8")), Uint(FieldIPProto, 6), Uint(FieldTCPDst, 80)),
		}},
		{"add_group_select", TypeGroupMod, &GroupMod{
			MsgHeader: hdr(6), Command: GroupAdd, GroupType: GroupTypeSelect, GroupID: 1,
			Buckets: []Bucket{
				{Weight: 50, WatchPort: PortAny, WatchGroup: GroupAny, Actions: Actions{ActionOutput{Port: 1}}},
				{Weight: 50, WatchPort: PortAny, WatchGroup: GroupAny, Actions: Actions{ActionOutput{Port: 2}}},
			},
		}},
		{"packet_out", TypePacketOut, &PacketOut{
			MsgHeader: hdr(6), BufferID: NoBuffer, InPort: 1, Actions: Actions{ActionOutput{Port: 2}},
			Data: mustHex("ffffffffffff020000000001080600010800060400010200000000010a0000010000000000000a000002"),
		}},
		{"mod_port_down", TypePortMod, &PortMod{
			MsgHeader: hdr(4), PortNo: 1, HWAddr: mustMAC("02:00:00:00:00:01"),
			Config: PortConfigPortDown, Mask: PortConfigPortDown,
		}},
		{"dump_ports_1", TypeMultipartRequest, &MultipartRequest{
			MsgHeader: hdr(2), Type: MPPortStats, Body: &PortStatsRequest{PortNo: 1},
		}},
		{"dump_flows", TypeMultipartRequest, &MultipartRequest{
			MsgHeader: hdr(2), Type: MPFlow, Body: &FlowStatsRequest{TableID: TableAll, OutPort: PortAny, OutGroup: GroupAny},
		}},
		{"dump_table_features", TypeMultipartRequest, &MultipartRequest{MsgHeader: hdr(2), Type: MPTableFeatures}},
		{"add_meter", TypeMeterMod, &MeterMod{
			MsgHeader: hdr(2), Command: MeterAdd, Flags: 0x1 | 0x4, MeterID: 1,
			Bands: []MeterBand{{Type: MeterBandDrop, Rate: 1000, BurstSize: 100}},
		}},
		{"set_frags", TypeSetConfig, &SetConfig{MsgHeader: hdr(3), SwitchConfig: SwitchConfig{Flags: ConfigFragDrop, MissSendLen: 128}}},
		{"probe", TypeEchoRequest, &EchoRequest{MsgHeader: hdr(0), Data: []byte{}}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			got := goldenOf(t, c.file, c.typ)[0]
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("decoded\n got %#v\nwant %#v", got, c.want)
			}
		})
	}
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// TestGoldenHello checks version negotiation against ovs-ofctl's HELLO.
func TestGoldenHello(t *testing.T) {
	h := goldenOf(t, "probe", TypeHello)[0].(*Hello)
	if got := h.Versions(); !reflect.DeepEqual(got, []uint8{4}) {
		t.Fatalf("ovs-ofctl -O OpenFlow13 versions = %v, want [4]", got)
	}
	if v, e := Negotiate([]uint8{4}, h); e != nil || v != 4 {
		t.Fatalf("Negotiate = %d, %v", v, e)
	}
	v, e := Negotiate([]uint8{1}, h)
	if e == nil || e.Type != ErrTypeHelloFailed || e.Code != HelloFailedIncompatible {
		t.Fatalf("Negotiate([1]) = %d, %+v, want HELLO_FAILED/INCOMPATIBLE", v, e)
	}
	// A peer without a bitmap: the smaller header version wins.
	if v, e := Negotiate([]uint8{1, 4}, &Hello{MsgHeader: MsgHeader{Version: 5}}); e != nil || v != 4 {
		t.Fatalf("Negotiate(no bitmap, v5) = %d, %v", v, e)
	}
	if _, e := Negotiate([]uint8{4}, &Hello{MsgHeader: MsgHeader{Version: 1}}); e == nil {
		t.Fatal("Negotiate(no bitmap, v1) with only 1.3 must fail")
	}
}
