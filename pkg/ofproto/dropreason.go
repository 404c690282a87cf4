package ofproto

import (
	"bytes"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// A drop's reason, given by the controller: OpenFlow has no way to say
// why a rule drops, and the fast path counts every drop under a reason
// (bpf/lib/drop_reasons.h). A rule whose actions hold a note reading
// "drop:REASON" (ASCII, zero-padded as notes are) names the reason a
// packet it leaves without any output is dropped under. Open vSwitch
// ignores notes, so the same flows work there. The one reason a note may
// name today is "policy" (the agent's NetworkPolicy deny flows);
// openflow.DropNote writes one.
var dropNoteReasons = map[string]uint32{"policy": flow.DropReasonPolicy}

// noteDropReason records the drop reason a note names, if it names one.
func (x *xlate) noteDropReason(note []byte) {
	rest, ok := bytes.CutPrefix(note, []byte(openflow.DropNotePrefix))
	if !ok {
		return
	}
	if r, ok := dropNoteReasons[string(bytes.TrimRight(rest, "\x00"))]; ok {
		x.dropReason = r
	}
}

// withDropReason ends acts with a Drop carrying the reason a rule's note
// gave, when acts deliver the packet nowhere (no output, no trip to
// userspace, no recirculation): then the fast path counts the drop under
// that reason instead of action-drop.
func withDropReason(acts []flow.Action, reason uint32) []flow.Action {
	if reason == 0 {
		return acts
	}
	for _, a := range acts {
		switch a.(type) {
		case flow.Output, flow.Local, flow.Userspace, flow.Recirc, flow.Drop:
			return acts
		}
	}
	return append(acts, flow.Drop{Reason: reason})
}
