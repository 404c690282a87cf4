package steering

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParseEntryRoundTrip(t *testing.T) {
	for _, s := range []string{
		"priority=100,vni=5,i_dst=10.1.0.2,i_proto=17,i_dport=5001 actions=cpu:1",
		"priority=0,fcf_id=3,fcf_prio=1 actions=choose,priority_flow",
		"priority=7,o_src=192.168.0.0/16,o_dport=4608/0xff00,spi=4660 actions=choose",
		"priority=1,i_eth_dst=0a:58:0a:01:00:02,i_src=10.0.0.0/255.0.255.0 actions=cpu:63",
	} {
		e, err := ParseEntry(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if got := e.String(); got != s {
			t.Errorf("round trip:\n got %s\nwant %s", got, s)
		}
	}
}

func TestParseEntryErrors(t *testing.T) {
	for _, s := range []string{
		"vni=5",                           // no actions
		"vni=5 actions=cpu:64",            // CPU out of range
		"vni=16777216 actions=choose",     // 25 bits
		"fcf_id=128 actions=choose",       // 8 bits
		"i_dst=fe80::1 actions=choose",    // IPv6
		"bogus=1 actions=choose",          // unknown field
		"vni=5 actions=flood",             // unknown action
		"vni=5 actions=priority_flow",     // no cpu or choose
		"i_eth_dst=zz actions=choose",     // bad MAC
		"o_dport=1/0x10000 actions=cpu:0", // mask too wide
	} {
		if _, err := ParseEntry(s); !errors.Is(err, ErrSyntax) {
			t.Errorf("%q: err %v, want ErrSyntax", s, err)
		}
	}
}

func TestMatchesIsMaskedEquality(t *testing.T) {
	e, err := ParseEntry("vni=5,i_dst=10.2.0.0/16,fcf_id=3 actions=choose")
	if err != nil {
		t.Fatal(err)
	}
	k := Key{VNI: 5, InnerDst: netip.MustParseAddr("10.2.9.9"), FCFID: 3, InnerDstPort: 80}
	if !e.Match.Matches(k) {
		t.Fatal("should match")
	}
	k.FCFID = 4
	if e.Match.Matches(k) {
		t.Fatal("other FCF id matched")
	}
}

func TestFCFLayout(t *testing.T) {
	if got := DefaultFCF.ToS(3, true); got != 0x07 {
		t.Fatalf("default ToS(3, prio) = %#x, want 0x07", got)
	}
	f := FCF{IDShift: 2, IDBits: 5, PrioBit: 8}
	if got := f.ToS(3, true); got != 0x0c {
		t.Fatalf("ToS = %#x, want 0x0c (no priority bit)", got)
	}
	for _, bad := range []FCF{{IDShift: 2, IDBits: 7}, {IDShift: 1, IDBits: 7, PrioBit: 3}, {IDBits: 0}} {
		if bad.Valid() {
			t.Errorf("%+v valid", bad)
		}
	}
}

func TestLoadsFromProcStat(t *testing.T) {
	prev, err := parseProcStat(strings.NewReader("cpu  1 1 1 1 1 1 1 1 0 0\ncpu0 100 0 100 800 0 0 0 0 0 0\ncpu1 0 0 0 1000 0 0 0 0 0 0\nintr 5\n"))
	if err != nil {
		t.Fatal(err)
	}
	cur, err := parseProcStat(strings.NewReader("cpu0 250 0 150 900 0 0 0 0 0 0\ncpu1 0 0 0 1000 0 0 100 0 0 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	// cpu0: busy +200, idle +100 → 66 %; cpu1: softirq +100, idle 0 → 100 %.
	got := Loads(prev, cur)
	if len(got) != 2 || got[0] != 66 || got[1] != 100 {
		t.Fatalf("loads %v, want [66 100]", got)
	}
	if _, err := parseProcStat(strings.NewReader("cpux 1 2 3 4 5\n")); err == nil {
		t.Fatal("bad cpu line accepted")
	}
}

func TestChooseGo(t *testing.T) {
	cores := []Core{{Online: true, Load: 10, Pinned: 1}, {Online: true, Load: 40}, {Online: false, Load: 0}, {Online: true, Load: 20}}
	if got := Choose(cores, 50, false); got != 3 {
		t.Fatalf("Choose = %d, want 3 (unpinned, online, least loaded)", got)
	}
	cores[3].Flows = 2
	if got := Choose(cores, 50, false); got != 1 {
		t.Fatalf("Choose = %d, want 1 (fewer flows)", got)
	}
	if got := Choose(cores, 50, true); got != 3 {
		t.Fatalf("priority Choose = %d, want 3 (least loaded)", got)
	}
}
