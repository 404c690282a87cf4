// Package openflow is nagare's OpenFlow 1.3 (wire version 0x04) codec.
//
// It decodes what arrives on an OpenFlow channel and encodes what is sent,
// for both sides of the channel: the switch (nagared) decodes FLOW_MOD,
// GROUP_MOD, PACKET_OUT, MULTIPART requests and encodes replies and
// asynchronous messages; a controller or nagarectl does the opposite.
//
// # Reading one message from entry to exit
//
//	r := openflow.NewReader(conn)          // frames messages (header.go)
//	raw, err := r.ReadRaw()                // one message's bytes, header checked
//	msg, err := openflow.Unmarshal(raw)    // concrete type: *FlowMod, *PacketOut, ...
//	if err != nil {
//		// Every malformed input is an *Error carrying the OpenFlow
//		// error type/code to send back; short input also matches
//		// errors.Is(err, io.ErrUnexpectedEOF).
//		reply := openflow.ErrorReply(err, raw)   // an *ErrorMsg echoing 64 bytes
//	}
//	if fm, ok := msg.(*openflow.FlowMod); ok {
//		err := fm.Validate()               // prerequisites, masks, actions
//	}
//	out, err := openflow.Marshal(reply)
//
// Files, one concern each: header.go (ofp_header, Message, Unmarshal,
// Reader), errors.go (error types/codes, *Error, ErrorReply), hello.go
// (HELLO, version negotiation), messages.go (fixed-layout messages),
// port.go, packet.go (PACKET_IN/OUT), flow.go (FLOW_MOD/REMOVED), group.go,
// meter.go, multipart.go, tablefeatures.go, oxm.go (OXM and Match),
// validate.go (match checks), matchkey.go (evaluation), action.go,
// instruction.go, format.go
// (ovs-ofctl printing) and parse.go (ovs-ofctl flow syntax).
//
// # Open vSwitch's Nicira extensions
//
// Controllers that program Open vSwitch for Kubernetes Services and
// NetworkPolicy (Antrea) use Nicira (experimenter 0x00002320) extensions,
// which ovs-ofctl -O OpenFlow13 sends inside OF1.3 messages. nxm.go has the
// match fields (reg<n>, xreg<n>, xxreg<n>, ct_state, ct_zone, ct_mark,
// ct_label, the ct_nw/ct_ipv6/ct_tp tuple, conj_id): they are OXMs of class
// ClassNXM1 or ClassPacketRegs, looked up with Match.Lookup(FieldKey{...}).
// nxaction.go has the actions (ActionNXCT with nested actions, ActionNXNAT,
// ActionNXCTClear, ActionNXRegMove, ActionNXRegLoad, ActionNXRegLoad2,
// ActionNXResubmit, ActionNXConjunction, ActionNXNote, ActionNXDecTTL), each
// with its wire layout and the ovs-ofctl encoding it was captured as;
// nxvalidate.go checks them as Open vSwitch does, with its error codes;
// nxparse.go reads their ovs-ofctl syntax. Unknown Nicira subtypes stay
// ActionExperimenter and are refused with OFPBAC_BAD_EXPERIMENTER_TYPE.
//
// Decoding is structural: lengths, padding and TLV framing are checked and
// violations are reported with the error code the spec asks for. Semantic
// checks (match prerequisites, duplicate fields, masks, action arguments)
// live in the Validate methods (Nicira actions are the exception where Open
// vSwitch itself refuses them while decoding: a load wider than its bits,
// an unknown field header, a bad nat range or conjunction) so that a controller can still decode and
// print what a peer sent even when a switch would reject it.
//
// # Match representation
//
// A Match is an ordered list of OXM TLVs (Match.Fields), kept in wire order
// so that decoding and re-encoding reproduces the peer's bytes exactly (OVS,
// for instance, puts eth_src before eth_dst). Each OXM for the
// OpenFlow-basic class has its value and optional mask as fixed-size byte
// slices of the length the spec gives. Match.Present is a bitmap (one bit
// per OFPXMT_OFB_* field number) so that a switch can test "is eth_type
// matched" in one AND, and Match.Get returns a field in O(n) over at most 40
// entries. For evaluation, Match.Key flattens a match into a MatchKey
// (fixed value/mask arrays indexed by field, plus the presence bitmap) and
// MatchKey.Covers tests a packet's key against it without allocating; it
// is the reference classifier for nagarectl trace and tests, while the
// datapath compiles the same values into its own megaflow key.
//
// Actions and instructions are small value types implementing the Action
// and Instruction interfaces (ActionOutput, ActionSetField, InstGotoTable,
// ...), so a switch dispatches on them with a type switch.
//
// # Byte layouts
//
// Each codec has its layout written beside it, field by field, in the order
// the bytes appear, so that a reader can check the code against the
// OpenFlow 1.3.5 specification without opening it.
//
// # Golden vectors
//
// testdata/golden/*.hex were captured from the real ovs-ofctl (Open vSwitch
// 3.1) talking OpenFlow 1.3 to a fake switch; regenerate them with
//
//	NAGARE_OF_CAPTURE=1 go test -run TestCaptureGolden ./pkg/openflow/
package openflow
