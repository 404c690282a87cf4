package switchd

import (
	"testing"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/ofproto"
	"github.com/nagare-net/nagare/pkg/openflow"
	"github.com/nagare-net/nagare/pkg/placement"
)

// TestPlacementResolve: what a flow asks for comes from the last rule on
// its way with a cookie placement, else its ingress port, else auto (no
// root: a pipeline and the placement table only).
func TestPlacementResolve(t *testing.T) {
	pl := ofproto.New(ofproto.Config{})
	for _, s := range []string{
		"table=0,cookie=0x11,priority=10,in_port=1,actions=goto_table:1",
		"table=0,cookie=0x22,priority=10,in_port=2,actions=goto_table:1",
		"table=1,cookie=0x35,priority=10,udp,actions=output:3",
		"table=1,cookie=0x40,priority=5,actions=output:3",
	} {
		fm, err := openflow.ParseFlow(s)
		if err != nil {
			t.Fatal(err)
		}
		fm.Command = openflow.FlowAdd
		if _, err := pl.FlowMod(fm); err != nil {
			t.Fatal(err)
		}
	}
	rules := func(inPort uint32, proto uint8) []ofproto.RuleRef {
		tr, err := pl.Translate(flow.Key{InPort: inPort, EthType: 0x0800, NwProto: proto}, ofproto.TranslateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Rules
	}
	p := newPlacements(&Config{})
	check := func(what string, inPort uint32, proto uint8, want placement.Mode) {
		t.Helper()
		if got := p.resolve(inPort, rules(inPort, proto)); got != want {
			t.Errorf("%s: %s, want %s", what, got, want)
		}
	}
	check("nothing set", 1, 17, placement.Auto)
	p.setPort(1, placement.Onload)
	check("port 1 onload", 1, 17, placement.Onload)
	check("port 2 untouched", 2, 17, placement.Auto)
	p.setCookie(0x30, 0xf0, placement.Offload) // table 1's udp rule
	check("rule beats port", 1, 17, placement.Offload)
	check("other rule: port again", 1, 6, placement.Onload)
	p.setCookie(0x22, 0xff, placement.Onload) // table 0, port 2
	check("a later rule's placement wins", 2, 17, placement.Offload)
	check("the earlier rule's when the later has none", 2, 6, placement.Onload)
	p.setCookie(0x30, 0xf0, placement.Auto) // cleared
	p.setPort(1, placement.Auto)
	check("cleared", 1, 17, placement.Auto)
	if p.any.Load() != true {
		t.Error("a cookie placement is still set, but any is false")
	}
	p.setCookie(0x22, 0xff, placement.Auto)
	if p.any.Load() {
		t.Error("nothing set, but any is true")
	}
	for _, bad := range []string{"cookie=", "cookie=0x1/zz", "v1"} {
		if _, _, err := parseCookieTarget(bad); err == nil {
			t.Errorf("parseCookieTarget(%q) accepted", bad)
		}
	}
	if v, m, err := parseCookieTarget("cookie=0x10"); err != nil || v != 0x10 || m != ^uint64(0) {
		t.Errorf("cookie=0x10: %#x/%#x %v", v, m, err)
	}
}
