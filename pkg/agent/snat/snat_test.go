package snat

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/nagare-net/nagare/internal/nstest"
)

// TestMasquerade: pod -- node -- external host. With the rule the external
// host sees the node's address; traffic to the cluster CIDR keeps the
// pod's; without the rule the pod's address leaks out.
func TestMasquerade(t *testing.T) {
	pod, node, ext := nstest.New(t, "spod"), nstest.New(t, "snode"), nstest.New(t, "sext")
	nstest.Veth(t, pod, "eth0", node, "gw", 1500)
	nstest.Veth(t, node, "ext0", ext, "e0", 1500)
	pod.IP(t, "addr", "add", "10.66.1.2/24", "dev", "eth0")
	pod.IP(t, "route", "add", "default", "via", "10.66.1.1")
	node.IP(t, "addr", "add", "10.66.1.1/24", "dev", "gw")
	node.IP(t, "addr", "add", "172.30.0.1/24", "dev", "ext0")
	ext.IP(t, "addr", "add", "172.30.0.2/24", "dev", "e0")
	// A second "cluster" address on the external side, to see it is not
	// masqueraded.
	ext.IP(t, "addr", "add", "10.66.9.9/32", "dev", "e0")
	node.IP(t, "route", "add", "10.66.9.9/32", "via", "172.30.0.2")
	ext.IP(t, "route", "add", "10.66.1.0/24", "via", "172.30.0.1")
	if err := node.Sh(t, "sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
		t.Fatal(err)
	}
	cfg := Config{NetNS: node.Path, PodCIDR: netip.MustParsePrefix("10.66.1.0/24"),
		PodNetwork: []netip.Prefix{netip.MustParsePrefix("10.66.0.0/16")}, ExternalInterface: "ext0", Gateway: "gw"}
	for i := 0; i < 2; i++ {
		if err := Ensure(cfg); err != nil {
			t.Fatal(err)
		}
	}
	rules, err := Describe(node.Path)
	if err != nil || len(rules) != 1 {
		t.Fatalf("rules after two Ensures: %q %v", rules, err)
	}
	want := `oifname "ext0" ip saddr 10.66.1.0/24 ip daddr != 10.66.0.0/16 counter packets 0 bytes 0 masquerade`
	if rules[0] != want {
		t.Errorf("rule %q\nwant %q", rules[0], want)
	}
	if got := nstest.UDPPeer(t, pod, ext, "172.30.0.2:7101"); got != "172.30.0.1" {
		t.Errorf("external host saw %s, want the node's 172.30.0.1", got)
	}
	if got := nstest.UDPPeer(t, pod, ext, "10.66.9.9:7102"); got != "10.66.1.2" {
		t.Errorf("cluster address saw %s, want the pod's 10.66.1.2", got)
	}
	rules, _ = Describe(node.Path)
	if len(rules) != 1 || strings.Contains(rules[0], "packets 0 ") {
		t.Errorf("counter did not count: %q", rules)
	}
	if err := Remove(node.Path); err != nil {
		t.Fatal(err)
	}
	if err := Remove(node.Path); err != nil {
		t.Fatalf("second remove: %v", err)
	}
	if rules, err := Describe(node.Path); err != nil || len(rules) != 0 {
		t.Fatalf("after remove: %q %v", rules, err)
	}
	if got := nstest.UDPPeer(t, pod, ext, "172.30.0.2:7103"); got != "10.66.1.2" {
		t.Errorf("without the rule the external host saw %s, want the pod's own 10.66.1.2", got)
	}
}

// TestTunnelIsNotTracked: with the masquerade in place the node's tracker
// sees every packet of its namespace. The tunnel's packets to and from the
// node's endpoint must stay out of it (each would otherwise leave an
// UNREPLIED entry and pay a lookup), other UDP must not.
func TestTunnelIsNotTracked(t *testing.T) {
	node, peer := nstest.New(t, "tnode"), nstest.New(t, "tpeer")
	nstest.Veth(t, node, "ul0", peer, "ul0", 1500)
	node.IP(t, "addr", "add", "192.168.77.1/24", "dev", "ul0")
	peer.IP(t, "addr", "add", "192.168.77.2/24", "dev", "ul0")
	count := func() int {
		t.Helper()
		b := node.ReadFile(t, "/proc/sys/net/netfilter/nf_conntrack_count")
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	tunnel := func(what string) {
		t.Helper()
		if got := nstest.UDPPeer(t, peer, node, "192.168.77.1:4789"); got != "192.168.77.2" {
			t.Fatalf("%s: node received the tunnel port's datagram from %q", what, got)
		}
		if got := nstest.UDPPeer(t, node, peer, "192.168.77.2:4789"); got != "192.168.77.1" {
			t.Fatalf("%s: peer received the node's tunnel datagram from %q", what, got)
		}
	}
	cfg := Config{NetNS: node.Path, PodCIDR: netip.MustParsePrefix("10.66.1.0/24"), Gateway: "gw"}

	// Without a tunnel endpoint the tunnel is tracked like anything else.
	if err := Ensure(cfg); err != nil {
		t.Fatal(err)
	}
	c0 := count()
	tunnel("masquerade only")
	if c := count(); c <= c0 {
		t.Fatalf("masquerade only: tracker holds %d entries, had %d: the test sees no tracking", c, c0)
	}

	cfg.Tunnel, cfg.TunnelPort = netip.MustParseAddr("192.168.77.1"), 4789
	for i := 0; i < 2; i++ {
		if err := Ensure(cfg); err != nil {
			t.Fatal(err)
		}
	}
	c1 := count()
	tunnel("with the tunnel's chains")
	if c := count(); c != c1 {
		t.Errorf("tunnel datagrams made %d tracker entries, want none", c-c1)
	}
	if got := nstest.UDPPeer(t, peer, node, "192.168.77.1:7300"); got != "192.168.77.2" {
		t.Fatalf("other UDP: node saw %q", got)
	}
	if c := count(); c <= c1 {
		t.Errorf("other UDP to the node was not tracked (%d entries, had %d)", c, c1)
	}
	rules, err := Describe(node.Path)
	if err != nil || len(rules) != 3 {
		t.Fatalf("rules after two Ensures: %q %v", rules, err)
	}
	for i, want := range []string{"ip daddr 192.168.77.1 meta l4proto udp th dport 4789 counter packets ",
		"ip saddr 192.168.77.1 meta l4proto udp th dport 4789 counter packets "} {
		r := rules[1+i]
		if !strings.HasPrefix(r, want) || !strings.HasSuffix(r, " notrack") || strings.Contains(r, "packets 0 ") {
			t.Errorf("rule %q\nwant %q…notrack, counting", r, want)
		}
	}
}
