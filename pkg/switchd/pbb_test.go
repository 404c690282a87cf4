package switchd

import (
	"bytes"
	"testing"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// TestPBBOnTheWire: push_pbb, pbb_isid (match and set_field) and pop_pbb
// from a controller (ovs-ofctl knows none of them), on real veths, first
// packet and cached: a datagram leaves encapsulated with the I-SID and
// backbone destination the flow set, and an encapsulated frame of I-SID 5
// leaves as the customer frame.
func TestPBBOnTheWire(t *testing.T) {
	ts := startSwitch(t, 2, nil)
	c := dialController(t, ts.Sock)
	c.flow(t, "priority=10,in_port=1,udp,actions=push_pbb:0x88e7,set_field:5->pbb_isid,set_field:02:0b:00:00:00:01->eth_dst,output:2")
	c.flow(t, "priority=10,in_port=1,dl_type=0x88e7,pbb_isid=5,actions=pop_pbb,output:2")
	c.flow(t, "priority=5,actions=drop")
	c.barrier(t)
	c.send(t, &openflow.MultipartRequest{Type: openflow.MPFlow, Body: &openflow.FlowStatsRequest{TableID: openflow.TableAll,
		OutPort: openflow.PortAny, OutGroup: openflow.GroupAny}})
	bda := mustMAC("02:0b:00:00:00:01")
	encap := func(inner []byte, isid uint32) []byte {
		b := append(append([]byte(nil), bda...), inner[6:12]...)
		b = append(b, 0x88, 0xe7, 0, byte(isid>>16), byte(isid>>8), byte(isid))
		return append(b, inner...)
	}
	for what, got := range ts.forwardTwice(t, func(what string) []byte { return ipFrame(t, 0, what) }) {
		if want := encap(ipFrame(t, 0, what), 5); !bytes.Equal(got, want) {
			t.Errorf("push, %s:\n got %x\nwant %x", what, got, want)
		}
	}
	for what, got := range ts.forwardTwice(t, func(what string) []byte { return encap(ipFrame(t, 0, what), 5) }) {
		if want := ipFrame(t, 0, what); !bytes.Equal(got, want) {
			t.Errorf("pop, %s:\n got %x\nwant %x", what, got, want)
		}
	}
}
