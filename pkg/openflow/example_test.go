package openflow_test

import (
	"fmt"
	"net"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// A switch's view of one message: frame, decode, validate, and answer a
// malformed or unacceptable request with the OFPT_ERROR the spec names.
func Example_switchSide() {
	fm, _ := openflow.ParseFlow("table=0,priority=10,tcp_dst=80,actions=output:2")
	fm.Xid = 42
	raw, _ := fm.MarshalBinary() // what a controller would send

	msg, err := openflow.Unmarshal(raw)
	if err == nil {
		if v, ok := msg.(interface{ Validate() error }); ok {
			err = v.Validate()
		}
	}
	if err != nil {
		reply := openflow.ErrorReply(err, raw)
		fmt.Println(err)
		fmt.Printf("reply: xid=%d %s code=%d, echoing %d bytes\n", reply.Xid, reply.Type, reply.Code, len(reply.Data))
	}
	// Output:
	// openflow: BAD_MATCH/BAD_PREREQ: tcp_dst needs eth_type=0x0800|0x86dd
	// reply: xid=42 BAD_MATCH code=9, echoing 64 bytes
}

// Building a flow in Go and printing it the way ovs-ofctl does.
func ExampleFlowMod() {
	fm := &openflow.FlowMod{
		Command: openflow.FlowAdd, TableID: 0, Priority: 100,
		BufferID: openflow.NoBuffer, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny,
		Match: openflow.Match{}.Add(
			openflow.Uint(openflow.FieldInPort, 1),
			openflow.Uint(openflow.FieldEthType, 0x0800),
			openflow.Uint(openflow.FieldIPProto, 6),
			openflow.Uint(openflow.FieldTCPDst, 80)),
		Instructions: openflow.Instructions{openflow.InstApplyActions{Actions: openflow.Actions{
			openflow.ActionSetField{Field: openflow.MAC(openflow.FieldEthDst, net.HardwareAddr{0, 0x11, 0x22, 0x33, 0x44, 0x55})},
			openflow.ActionDecNWTTL{},
			openflow.ActionOutput{Port: 2},
		}}},
	}
	fmt.Println(fm.Validate())
	fmt.Println(fm)
	// Output:
	// <nil>
	// table=0,priority=100,tcp,in_port=1,tp_dst=80,actions=set_field:00:11:22:33:44:55->eth_dst,dec_ttl,output:2
}

// Version negotiation from the peer's HELLO.
func ExampleNegotiate() {
	peer := openflow.NewHello(1, 1, 4) // speaks OpenFlow 1.0 and 1.3
	v, failed := openflow.Negotiate([]uint8{4}, peer)
	fmt.Println(v, failed == nil)

	v, failed = openflow.Negotiate([]uint8{4}, openflow.NewHello(2, 1))
	fmt.Println(v, failed.Type, string(failed.Data))
	// Output:
	// 4 true
	// 0 HELLO_FAILED no common version: ours [4], peer's [1]
}
