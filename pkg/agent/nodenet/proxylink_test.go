package nodenet

import (
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/nagare-net/nagare/internal/nstest"
)

// TestProxyLink: the proxy's pair, its address and loose rp_filter, the
// rule and the local route; a second call changes nothing (one rule).
func TestProxyLink(t *testing.T) {
	node := nstest.New(t, "pnode")
	n, err := Open(Config{Netns: node.Path, GatewayIP: netip.MustParsePrefix("10.66.1.1/24"), MTU: 1450})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, err := n.EnsureGateway(); err != nil { // the pods' subnet: the sources' reverse path
		t.Fatal(err)
	}
	l, err := n.EnsureProxyLink("")
	if err != nil {
		t.Fatal(err)
	}
	if l.PortName != "nagare-px0p" || len(l.MAC) != 6 {
		t.Fatalf("proxy link %+v", l)
	}
	l2, err := n.EnsureProxyLink("")
	if err != nil || l2.MAC.String() != l.MAC.String() {
		t.Fatalf("second EnsureProxyLink: %+v %v (first %+v)", l2, err, l)
	}
	if out := ip(t, node, "rule"); strings.Count(out, "iif nagare-px0 lookup 15001") != 1 {
		t.Errorf("rules: %s", out)
	}
	if out := ip(t, node, "route", "show", "table", "15001"); !strings.Contains(out, "local default dev lo") {
		t.Errorf("table 15001: %q", out)
	}
	if out := ip(t, node, "addr", "show", "nagare-px0"); !strings.Contains(out, "169.254.0.252/32") || !strings.Contains(out, "mtu 1450") {
		t.Errorf("proxy end: %s", out)
	}
	if b, err := exec.Command("ip", "netns", "exec", node.Name, "sysctl", "-n", "net.ipv4.conf.nagare-px0.rp_filter").Output(); err != nil || strings.TrimSpace(string(b)) != "2" {
		t.Errorf("rp_filter on the proxy end: %q %v", b, err)
	}
	// A pod's packet arriving on it, for any address, is local: the
	// kernel's own answer (reverse-path filtering included).
	if out := ip(t, node, "route", "get", "10.96.0.20", "from", "10.66.1.5", "iif", "nagare-px0"); !strings.HasPrefix(strings.TrimSpace(out), "local 10.96.0.20") {
		t.Errorf("route get for a packet from the proxy link: %q", out)
	}
}
