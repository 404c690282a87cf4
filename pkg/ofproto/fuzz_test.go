package ofproto

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// fuzzKeys are packets the fuzzed pipelines translate: TCP, UDP, ARP,
// IPv6, a VLAN-tagged frame and one from a tunnel.
var fuzzKeys = func() []flow.Key {
	mac := func(s string) [6]byte { m, _ := net.ParseMAC(s); return [6]byte(m) }
	tcp := flow.Key{InPort: 1, EthSrc: mac("02:00:00:00:00:01"), EthDst: mac("02:00:00:00:00:02"), EthType: 0x0800,
		IPSrc: [16]byte{10, 0, 0, 1}, IPDst: [16]byte{10, 0, 0, 2}, NwProto: 6, NwTTL: 64, TpSrc: 1234, TpDst: 80}
	udp := tcp
	udp.InPort, udp.NwProto, udp.TpDst = 3, 17, 53
	arp := flow.Key{InPort: 3, EthSrc: mac("02:00:00:00:00:03"), EthDst: mac("ff:ff:ff:ff:ff:ff"), EthType: 0x0806, NwProto: 1,
		IPSrc: [16]byte{10, 0, 0, 3}, IPDst: [16]byte{10, 0, 0, 1}}
	v6 := flow.Key{InPort: 1, EthSrc: mac("02:00:00:00:00:01"), EthDst: mac("33:33:00:00:00:01"), EthType: 0x86dd,
		IPSrc: [16]byte{0xfe, 0x80, 15: 1}, IPDst: [16]byte{0xff, 0x02, 15: 1}, NwProto: 58, NwTTL: 255, TpSrc: 135}
	vlan := udp
	vlan.VlanTCI = flow.VLANCFI | 10
	tun := tcp
	tun.TunID, tun.TunFlags, tun.TunSrc = 42, flow.TunPresent, [4]byte{192, 168, 1, 2}
	return []flow.Key{tcp, udp, arp, v6, vlan, tun}
}()

// FuzzPipeline feeds arbitrary OpenFlow messages (FLOW_MOD, GROUP_MOD,
// TABLE_MOD, PACKET_OUT) to a pipeline and translates packets through the
// result. Beyond "no panic": a refusal is an *openflow.Error (what the
// switch sends back as OFPT_ERROR), and every cacheable translation's mask
// is sound — a packet that differs only in bits outside the mask gets the
// same actions (what installing the megaflow promises).
func FuzzPipeline(f *testing.F) {
	for _, spec := range [][]string{
		{"priority=10,udp,tp_dst=53,actions=set_field:10.9.9.9->ip_dst,output:2", "priority=0,actions=NORMAL"},
		{"table=0,priority=5,ip,nw_dst=10.0.0.0/24,actions=write_metadata:0x5/0xff,goto_table:1", "table=1,metadata=0x5/0xff,actions=group:1"},
		{"priority=100,in_port=1,vlan_tci=0x1000/0x1000,actions=pop_vlan,output:3", "priority=1,arp,actions=FLOOD"},
		{"priority=20,tcp,tp_src=1024/0xfc00,actions=dec_ttl,controller:64,output:IN_PORT", "tun_id=42,actions=output:4"},
		{"priority=7,ipv6,actions=push_vlan:0x8100,set_field:5->vlan_vid,output:ALL"},
		{"priority=9,tcp,actions=learn(table=1,hard_timeout=5,delete_learned,cookie=0x3,eth_type=0x800,nw_proto=6,NXM_OF_TCP_DST[],NXM_OF_IP_SRC[],load:NXM_NX_REG3[]->NXM_NX_REG4[],output:NXM_NX_REG2[0..15]),resubmit(,1)",
			"table=1,priority=1,actions=output:2"},
		{"priority=100,ip,nw_src=10.0.0.1,actions=conjunction(3,1/2),conjunction(4,1/3)", "priority=100,tcp,tp_dst=80,actions=conjunction(3,2/2)",
			"priority=90,udp,actions=conjunction(4,2/3)", "priority=90,ip,nw_dst=10.0.0.0/24,actions=conjunction(4,3/3)",
			"priority=5,conj_id=3,ip,actions=output:2", "priority=95,conj_id=4,ip,actions=goto_table:1", "priority=50,ip,actions=output:3"},
	} {
		var buf bytes.Buffer
		for _, s := range spec {
			fm, err := openflow.ParseFlow(s)
			if err != nil {
				f.Fatalf("%s: %v", s, err)
			}
			b, err := openflow.Marshal(fm)
			if err != nil {
				f.Fatal(err)
			}
			buf.Write(b)
		}
		gm := &openflow.GroupMod{Command: openflow.GroupAdd, GroupType: openflow.GroupTypeSelect, GroupID: 1, Buckets: []openflow.Bucket{
			{Weight: 1, Actions: openflow.Actions{openflow.ActionOutput{Port: 2}}},
			{Weight: 1, Actions: openflow.Actions{openflow.ActionOutput{Port: 3}}}}}
		b, err := openflow.Marshal(gm)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append(b, buf.Bytes()...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, _ := newTestPipeline(t, 4)
		r := openflow.NewReader(bytes.NewReader(data))
		for i := 0; i < 16; i++ {
			m, _, err := r.ReadMessage()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					mustBeOFError(t, err)
				}
				break
			}
			switch m := m.(type) {
			case *openflow.FlowMod:
				_, err = p.FlowMod(m)
			case *openflow.GroupMod:
				err = p.GroupMod(m)
			case *openflow.TableMod:
				err = p.TableMod(m)
			case *openflow.PacketOut:
				_, err = p.TranslatePacketOut(fuzzKeys[0], m.InPort, m.Actions, TranslateOptions{Trace: true})
			}
			if err != nil {
				mustBeOFError(t, err)
			}
		}
		for _, k := range fuzzKeys {
			tr, err := p.Translate(k, TranslateOptions{Trace: true})
			if err != nil || tr.NoCache {
				continue
			}
			tr, _ = p.Translate(k, TranslateOptions{}) // NORMAL has learned from k now
			// k with every bit outside the mask flipped.
			kw, mw := k.Words(), tr.Mask.Words()
			for w := range kw {
				kw[w] ^= ^mw[w]
			}
			other := flow.KeyFromWords(kw)
			tr2, err := p.Translate(other, TranslateOptions{})
			if err != nil || tr2.NoCache {
				t.Fatalf("key %s: translated, but a key within its megaflow did not (%v)", flow.Format(k, flow.ExactMask()), err)
			}
			if a, b := flow.FormatActions(tr.Actions), flow.FormatActions(tr2.Actions); a != b {
				t.Fatalf("megaflow %s\n  key   %s → %s\n  other %s → %s",
					flow.Format(k, tr.Mask), flow.Format(k, flow.ExactMask()), a, flow.Format(other, flow.ExactMask()), b)
			}
		}
		p.FlowStats(&openflow.FlowStatsRequest{TableID: openflow.TableAll, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny})
		p.GroupDesc()
		p.Expire()
	})
}

func mustBeOFError(t *testing.T, err error) {
	t.Helper()
	var oe *openflow.Error
	if !errors.As(err, &oe) {
		t.Fatalf("error %v (%T) is not an *openflow.Error", err, err)
	}
}
