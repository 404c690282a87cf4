package ofproto

import (
	"strings"
	"testing"

	"github.com/nagare-net/nagare/pkg/flow"
)

// PBB in the pipeline: pbb_isid matched (and in the mask when a rule on it
// misses), push_pbb then set_field pbb_isid, pop_pbb, and a lookup after
// pop_pbb stopping the translation.
func TestPBBTranslation(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	mustAdd(t, p, "priority=10,in_port=1,udp,actions=push_pbb:0x88e7,set_field:5->pbb_isid,output:2",
		"priority=10,in_port=2,dl_type=0x88e7,pbb_isid=5,actions=pop_pbb,output:1",
		"priority=10,in_port=3,dl_type=0x88e7,actions=pop_pbb,goto_table:1",
		"priority=1,actions=output:3")
	udp := tcpKey(1, "10.0.0.1", "10.0.0.2", 1, 2)
	udp.NwProto = 17
	pbb := func(in uint32, isid uint32) flow.Key {
		k := flow.Key{InPort: in, EthType: 0x88e7}
		k.IPSrc[1], k.IPSrc[2], k.IPSrc[3] = byte(isid>>16), byte(isid>>8), byte(isid)
		return k
	}
	for _, tc := range []struct {
		name string
		key  flow.Key
		want string
	}{
		{"push", udp, "push_pbb(isid=0),set(pbb(isid=5)),output:2"},
		{"pop", pbb(2, 5), "pop_pbb,output:1"},
		{"other isid", pbb(2, 6), "output:3"},
	} {
		tr := translate(t, p, tc.key)
		if got := actions(tr); got != tc.want {
			t.Fatalf("%s: actions %s, want %s\ntrace:\n%s", tc.name, got, tc.want, FormatTrace(tr.Trace))
		}
		if tc.key.EthType == 0x88e7 && [3]byte(tr.Mask.IPSrc[1:4]) != [3]byte{0xff, 0xff, 0xff} {
			t.Fatalf("%s: mask %s lacks the I-SID", tc.name, flow.Format(tc.key, tr.Mask))
		}
	}
	// A lookup after pop_pbb recirculates (the customer frame is parsed
	// on the second pass).
	if tr, err := p.Translate(pbb(3, 9), TranslateOptions{}); err != nil || tr.NoCache ||
		!strings.HasPrefix(actions(tr), "pop_pbb,recirc(") {
		t.Fatalf("lookup after pop_pbb: %s %v", actions(tr), err)
	}
}
