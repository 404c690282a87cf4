package ofproto

import (
	"testing"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// TestDropNote: a rule's note "drop:policy" makes the drop it ends in
// carry the policy reason; an output anywhere, an unknown reason or any
// other note leave the actions as they were.
func TestDropNote(t *testing.T) {
	policy := openflow.DropNote("policy").String()
	key := tcpKey(1, "10.0.0.1", "10.0.0.2", 1000, 80)
	tests := []struct {
		name  string
		flows []string
		want  string
	}{
		{"deny", []string{"tcp,actions=" + policy}, "drop(policy)"},
		{"deny after goto", []string{"table=0,actions=goto_table:1", "table=1,tcp,actions=" + policy}, "drop(policy)"},
		{"noted rule that outputs", []string{"tcp,actions=" + policy + ",output:2"}, "output:2"},
		{"note, then a later table outputs", []string{"table=0,actions=" + policy + ",goto_table:1", "table=1,actions=output:2"}, "output:2"},
		{"unknown reason", []string{"tcp,actions=" + openflow.DropNote("nosuch").String()}, "drop"},
		{"other note", []string{"tcp,actions=note:01.02"}, "drop"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { wantActions(t, tc.flows, key, tc.want) })
	}
	if n := len(openflow.DropNote("policy").Note); (n-6)%8 != 0 {
		t.Errorf("DropNote is %d bytes: a dump would hand it back padded", n)
	}
}
