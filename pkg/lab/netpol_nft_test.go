package lab

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nagare-net/nagare/internal/nstest"
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

// TestNftPolicyRulesetOnBridge: the ruleset on a real Linux bridge
// (namespaces, br_netfilter, the kernel's conntrack) allows and drops
// what nagare's pipeline does for the same State (the pipeline's walks:
// pkg/agent/pipeline TestPolicyConjunctionWalk).
func TestNftPolicyRulesetOnBridge(t *testing.T) {
	nstest.RequireRoot(t)
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("no nft")
	}
	br := nstest.New(t, "npbr")
	br.IP(t, "link", "add", "br0", "type", "bridge")
	br.IP(t, "link", "set", "br0", "up")
	if err := br.Sh(t, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1"); err != nil {
		t.Skip("no br_netfilter here: ", err)
	}
	pods := map[string]nstest.NS{}
	for i, name := range []string{"web", "db", "cli"} {
		p := nstest.New(t, "np"+name)
		nstest.Veth(t, p, "eth0", br, "v"+name, 1500)
		br.IP(t, "link", "set", "v"+name, "master", "br0")
		p.IP(t, "addr", "add", fmt.Sprintf("10.77.1.%d/24", i+2), "dev", "eth0")
		pods[name] = p
	}
	f := filepath.Join(t.TempDir(), "netpol.nft")
	if err := os.WriteFile(f, []byte(NftPolicyRuleset(nftTestState(), "netpol", netip.Addr{})), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := br.Sh(t, "nft", "-f", f); err != nil {
		t.Fatal(err)
	}
	listen := func(p nstest.NS, addr string) {
		var l net.Listener
		var err error
		p.In(t, func() { l, err = net.Listen("tcp4", addr) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte("hi"))
				c.Close()
			}
		}()
	}
	listen(pods["db"], "10.77.1.3:80")
	listen(pods["db"], "10.77.1.3:81")
	listen(pods["web"], "10.77.1.2:80")
	dial := func(from, addr string) bool {
		var c net.Conn
		var err error
		pods[from].In(t, func() { c, err = net.DialTimeout("tcp4", addr, 700*time.Millisecond) })
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(700 * time.Millisecond))
		b := make([]byte, 2)
		_, err = io.ReadFull(c, b)
		return err == nil && string(b) == "hi" // the reply came back: established passes
	}
	for _, c := range []struct {
		from, to string
		want     bool
	}{
		{"web", "10.77.1.3:80", true},  // db's rule: web, TCP 80
		{"web", "10.77.1.3:81", false}, // not its port
		{"cli", "10.77.1.3:80", false}, // cli's egress: only 10.77.2.0/24
		{"db", "10.77.1.2:80", false},  // web isolated, no rule
	} {
		if got := dial(c.from, c.to); got != c.want {
			t.Errorf("%s → %s: connected %v, want %v", c.from, c.to, got, c.want)
		}
	}
}
