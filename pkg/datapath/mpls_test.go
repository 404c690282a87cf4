package datapath

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket/layers"

	"github.com/nagare-net/nagare/pkg/flow"
)

// mplsFrame puts label stack entries lses between the Ethernet header of
// the IPv4/IPv6 frame inner and its payload (EtherType 0x8847).
func mplsFrame(inner []byte, lses ...uint32) []byte {
	b := append([]byte(nil), inner[:12]...)
	b = binary.BigEndian.AppendUint16(b, 0x8847)
	for _, l := range lses {
		b = binary.BigEndian.AppendUint32(b, l)
	}
	return append(b, inner[14:]...)
}

func lse(label, tc, bos, ttl uint32) uint32 { return label<<12 | tc<<9 | bos<<8 | ttl }

// TestMPLSActions runs each MPLS action with BPF_PROG_RUN and checks the
// bytes that leave: push onto IPv4 (and behind a VLAN tag kept in the
// packet), pop back to IPv4, label/TC rewrites, TTL set/decrement, and
// the TTL copies between the top entry and the next entry or IP header
// (IPv4 header checksum fixed).
func TestMPLSActions(t *testing.T) {
	d := newTestDP(t)
	ip := udpPkt(t, "10.0.0.1", "10.0.0.2", 1000, 2000, "mpls payload")
	ip[14+8] = 33 // IPv4 TTL
	checksumFix(ip)
	withTTL := func(ttl byte) []byte {
		b := append([]byte(nil), ip...)
		b[14+8] = ttl
		checksumFix(b)
		return b
	}
	tagged := serialize(t, eth(layers.EthernetTypeDot1Q), &layers.Dot1Q{VLANIdentifier: 7, Type: layers.EthernetTypeIPv4},
		ip4(layers.IPProtocolUDP, "10.0.0.1", "10.0.0.2"), &layers.UDP{SrcPort: 1, DstPort: 2})
	taggedMPLS := append(append(append([]byte(nil), tagged[:16]...), 0x88, 0x47, 0, 0x06, 0x41, 0x40), tagged[18:]...)
	for _, tc := range []struct {
		name string
		in   []byte
		acts []flow.Action
		want []byte
	}{
		{"push-onto-ipv4", ip, []flow.Action{flow.PushMPLS{EthType: 0x8847, LSE: lse(100, 3, 1, 33)}},
			mplsFrame(ip, lse(100, 3, 1, 33))},
		{"push-behind-vlan-tag", tagged, []flow.Action{flow.PushMPLS{EthType: 0x8847, LSE: lse(100, 0, 1, 64)}}, taggedMPLS},
		{"push-onto-mpls", mplsFrame(ip, lse(5, 1, 1, 9)), []flow.Action{flow.PushMPLS{EthType: 0x8847, LSE: lse(6, 1, 0, 9)}},
			mplsFrame(ip, lse(6, 1, 0, 9), lse(5, 1, 1, 9))},
		{"pop-to-ipv4", mplsFrame(ip, lse(100, 3, 1, 20)), []flow.Action{flow.PopMPLS{EthType: 0x0800}}, ip},
		{"pop-outer-of-two", mplsFrame(ip, lse(6, 0, 0, 20), lse(5, 0, 1, 20)), []flow.Action{flow.PopMPLS{EthType: 0x8847}},
			mplsFrame(ip, lse(5, 0, 1, 20))},
		{"push-then-pop", ip, []flow.Action{flow.PushMPLS{EthType: 0x8847, LSE: lse(1, 0, 1, 1)}, flow.PopMPLS{EthType: 0x0800}}, ip},
		{"set-label-and-tc", mplsFrame(ip, lse(100, 3, 1, 20)), []flow.Action{flow.SetMPLS{LSE: lse(200, 5, 0, 0), Mask: lse(0xfffff, 7, 0, 0)}},
			mplsFrame(ip, lse(200, 5, 1, 20))},
		{"set-ttl", mplsFrame(ip, lse(100, 3, 1, 20)), []flow.Action{flow.SetMPLSTTL{TTL: 7}}, mplsFrame(ip, lse(100, 3, 1, 7))},
		{"dec-ttl", mplsFrame(ip, lse(100, 3, 1, 20)), []flow.Action{flow.DecMPLSTTL{}}, mplsFrame(ip, lse(100, 3, 1, 19))},
		{"copy-ttl-out-from-ipv4", mplsFrame(ip, lse(100, 3, 1, 20)), []flow.Action{flow.CopyTTLOut{}}, mplsFrame(ip, lse(100, 3, 1, 33))},
		{"copy-ttl-in-to-ipv4", mplsFrame(ip, lse(100, 3, 1, 20)), []flow.Action{flow.CopyTTLIn{}}, mplsFrame(withTTL(20), lse(100, 3, 1, 20))},
		{"copy-ttl-out-from-next-entry", mplsFrame(ip, lse(6, 0, 0, 20), lse(5, 0, 1, 44)), []flow.Action{flow.CopyTTLOut{}},
			mplsFrame(ip, lse(6, 0, 0, 44), lse(5, 0, 1, 44))},
		{"copy-ttl-in-to-next-entry", mplsFrame(ip, lse(6, 0, 0, 20), lse(5, 0, 1, 44)), []flow.Action{flow.CopyTTLIn{}},
			mplsFrame(ip, lse(6, 0, 0, 20), lse(5, 0, 1, 20))},
		{"mpls-actions-leave-ipv4-alone", ip, []flow.Action{flow.DecMPLSTTL{}, flow.SetMPLS{LSE: 1 << 12, Mask: 0xfffff000}, flow.CopyTTLIn{}}, ip},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if out := d.forward(t, tc.in, tc.acts...); !bytes.Equal(out, tc.want) {
				t.Fatalf("out\n got %x\nwant %x", out, tc.want)
			}
		})
	}
}

// TestDecMPLSTTLExpires: dec_mpls_ttl on TTL 1 drops and counts.
func TestDecMPLSTTLExpires(t *testing.T) {
	d := newTestDP(t)
	d.put(inPortFlow(flow.DecMPLSTTL{}, flow.Output{Port: portOut}))
	before := d.drops()[DropTTLExceeded]
	pkt := mplsFrame(udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, "x"), lse(100, 0, 1, 1))
	if r := d.run(pkt, "lo"); r.verdict != tcActShot || len(r.outputs) != 0 {
		t.Fatalf("verdict %d outputs %v, want a drop", r.verdict, r.outputs)
	}
	if got := d.drops()[DropTTLExceeded]; got != before+1 {
		t.Fatalf("ttl-exceeded count %d, want %d", got, before+1)
	}
}

// TestMPLSPopFindsIPAgain: after a push and the pop that undoes it (what a
// group bucket's undo emits), IP rewrites find their headers again.
func TestMPLSPopFindsIPAgain(t *testing.T) {
	d := newTestDP(t)
	in := udpPkt(t, "10.0.0.1", "10.0.0.2", 40000, 2000, "again")
	d.put(inPortFlow(flow.PushMPLS{EthType: 0x8847, LSE: lse(1, 0, 1, 64)}, flow.PopMPLS{EthType: 0x0800},
		flow.SetIPDst{Addr: netip.MustParseAddr("10.9.9.9")}, flow.SetTpDst{Port: 4242}, flow.DecTTL{}, flow.Output{Port: portOut}))
	r := d.run(in, "lo")
	if r.verdict != tcActRedirect {
		t.Fatalf("verdict %d, drops %v", r.verdict, d.drops())
	}
	want := udpPkt(t, "10.0.0.1", "10.9.9.9", 40000, 4242, "again")
	want[14+8]--
	checksumFix(want)
	if !bytes.Equal(r.out, want) {
		t.Fatalf("out\n got %x\nwant %x", r.out, want)
	}
	checksumsOK(t, r.out)
}

// forward replaces every flow with one running acts and an output on
// packets from portIn, runs pkt and returns what leaves (failing the test
// unless it is forwarded).
func (d *testDP) forward(t *testing.T, pkt []byte, acts ...flow.Action) []byte {
	t.Helper()
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	d.put(inPortFlow(append(acts, flow.Output{Port: portOut})...))
	r := d.run(pkt, "lo")
	if r.verdict != tcActRedirect {
		t.Fatalf("verdict %d, drops %v", r.verdict, d.drops())
	}
	return r.out
}
