package lab

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nagare-net/nagare/pkg/agent/netpol"
)

// nftTestState: db takes TCP 80, 8000-8003 (and 8001 again, overlapping)
// from web and 10.77.2.0/24 (web's /32 inside it too) and anything UDP from
// anyone; cli may send only to 10.77.2.0/24 minus nothing; web isolated
// with no rule.
func nftTestState() netpol.State {
	a := netip.MustParseAddr
	pre := netip.MustParsePrefix
	return netpol.State{
		Rules: []netpol.Rule{
			{ID: "x/db/ingress/0", Direction: netpol.Ingress, AppliedTo: []netip.Addr{a("10.77.1.3")},
				Peers: []netip.Prefix{pre("10.77.1.2/32"), pre("10.77.2.0/24"), pre("10.77.2.7/32")},
				Ports: []netpol.PortRange{{Proto: netpol.ProtoTCP, Min: 80, Max: 80}, {Proto: netpol.ProtoTCP, Min: 8000, Max: 8003}, {Proto: netpol.ProtoTCP, Min: 8001, Max: 8001}}},
			{ID: "x/db/ingress/1", Direction: netpol.Ingress, AppliedTo: []netip.Addr{a("10.77.1.3")}, AnyPeer: true,
				Ports: []netpol.PortRange{{Proto: netpol.ProtoUDP, Min: 0, Max: 65535}}},
			{ID: "x/cli/egress/0", Direction: netpol.Egress, AppliedTo: []netip.Addr{a("10.77.1.4")},
				Peers: []netip.Prefix{pre("10.77.2.0/24")}, AnyPort: true},
		},
		IsolatedIngress: []netip.Addr{a("10.77.1.2"), a("10.77.1.3")},
		IsolatedEgress:  []netip.Addr{a("10.77.1.4")},
	}
}

// TestNftPolicyRuleset: the ruleset says what the State says, and real
// nft takes it (nft -c, in a namespace of its own, when root).
func TestNftPolicyRuleset(t *testing.T) {
	rs := NftPolicyRuleset(nftTestState(), "netpol", netip.MustParseAddr("10.77.1.1"))
	for _, want := range []string{
		"ct state established,related accept",
		"ip saddr vmap { 10.77.1.4 : jump eg_10_77_1_4 }",
		"ip saddr 10.77.1.1 accept",
		"ip daddr vmap { 10.77.1.2 : jump in_10_77_1_2, 10.77.1.3 : jump in_10_77_1_3 }",
		"ip saddr { 10.77.2.0/24, 10.77.1.2/32 } meta l4proto tcp th dport { 80, 8000-8003 } accept",
		"meta l4proto udp accept",
		"ip daddr { 10.77.2.0/24 } return",
		"chain in_10_77_1_2 {\n\t\tdrop\n\t}",
	} {
		if !strings.Contains(rs, want) {
			t.Errorf("ruleset lacks %q:\n%s", want, rs)
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("nft -c needs root")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("no nft")
	}
	f := filepath.Join(t.TempDir(), "netpol.nft")
	if err := os.WriteFile(f, []byte(rs), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("unshare", "-n", "nft", "-c", "-f", f).CombinedOutput(); err != nil {
		t.Fatalf("nft -c refuses the ruleset: %v\n%s\n%s", err, out, rs)
	}
}
