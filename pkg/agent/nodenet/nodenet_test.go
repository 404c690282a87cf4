package nodenet

import (
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/nagare-net/nagare/internal/nstest"
)

func TestNodeDevices(t *testing.T) {
	node := nstest.New(t, "nnode")
	cfg := Config{Netns: node.Path, GatewayIP: netip.MustParsePrefix("10.66.1.1/24"), MTU: 1450, TunnelMTU: 1450}
	n, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	gw, err := n.EnsureGateway()
	if err != nil {
		t.Fatal(err)
	}
	if gw.PortName != "nagare-gw0p" || len(gw.MAC) != 6 {
		t.Fatalf("gateway %+v", gw)
	}
	// Idempotent: the same device, the same MAC.
	gw2, err := n.EnsureGateway()
	if err != nil || gw2.MAC.String() != gw.MAC.String() {
		t.Fatalf("second EnsureGateway: %+v %v (first %+v)", gw2, err, gw)
	}
	if err := n.EnsureTunnel(); err != nil {
		t.Fatal(err)
	}
	if err := n.EnsureTunnel(); err != nil {
		t.Fatalf("second EnsureTunnel: %v", err)
	}
	out := ip(t, node, "-d", "link", "show", "nagare-vx0")
	if !strings.Contains(out, "external") || !strings.Contains(out, "dstport 4789") || !strings.Contains(out, "mtu 1450") {
		t.Errorf("tunnel device: %s", out)
	}
	// The tunnel device is a port of the idle PMTU bridge (the driver then
	// answers oversized inner packets with ICMP frag-needed).
	if out := ip(t, node, "link", "show", "nagare-vx0"); !strings.Contains(out, "master "+PMTUBridge) {
		t.Errorf("tunnel device not a port of %s: %s", PMTUBridge, out)
	}
	// The underlay's MTU is the MTU of the device holding the address.
	node.IP(t, "link", "add", "ul0", "mtu", "1400", "type", "veth", "peer", "name", "ul0p")
	node.IP(t, "addr", "add", "192.168.66.1/24", "dev", "ul0")
	if mtu, dev, err := n.UnderlayMTU(netip.MustParseAddr("192.168.66.1")); err != nil || mtu != 1400 || dev != "ul0" {
		t.Errorf("UnderlayMTU: %d %q %v, want 1400 ul0", mtu, dev, err)
	}
	if _, _, err := n.UnderlayMTU(netip.MustParseAddr("192.168.66.2")); err == nil {
		t.Error("UnderlayMTU of an address no device holds: no error")
	}
	out = ip(t, node, "addr", "show", "nagare-gw0")
	if !strings.Contains(out, "10.66.1.1/24") || !strings.Contains(out, "mtu 1450") {
		t.Errorf("gateway: %s", out)
	}
	if b, err := exec.Command("ip", "netns", "exec", node.Name, "sysctl", "-n", "net.ipv4.ip_forward").Output(); err != nil || strings.TrimSpace(string(b)) != "1" {
		t.Errorf("ip_forward in the node namespace: %q %v", b, err)
	}
	mac, _ := net.ParseMAC("aa:bb:cc:00:00:01")
	r := Remote{PodCIDR: netip.MustParsePrefix("10.66.2.0/24"), Gateway: netip.MustParseAddr("10.66.2.1")}
	for i := 0; i < 2; i++ {
		if err := n.EnsureRemote(r, mac); err != nil {
			t.Fatal(err)
		}
	}
	out = ip(t, node, "route", "show", "10.66.2.0/24")
	if !strings.Contains(out, "via 10.66.2.1 dev nagare-gw0 onlink") {
		t.Errorf("remote route: %q", out)
	}
	out = ip(t, node, "neigh", "show", "10.66.2.1")
	if !strings.Contains(out, "aa:bb:cc:00:00:01") || !strings.Contains(out, "PERMANENT") {
		t.Errorf("remote gateway neighbour: %q", out)
	}
	if rs, err := n.Routes(); err != nil || len(rs) != 1 || rs[0] != r.PodCIDR {
		t.Errorf("Routes: %v %v", rs, err)
	}
	for i := 0; i < 2; i++ {
		if err := n.DelRemote(r); err != nil {
			t.Fatalf("DelRemote %d: %v", i, err)
		}
	}
	if out := ip(t, node, "route", "show", "10.66.2.0/24"); strings.TrimSpace(out) != "" {
		t.Errorf("route left: %q", out)
	}
	if err := n.Remove(); err != nil {
		t.Fatal(err)
	}
	if out := ip(t, node, "-o", "link", "show"); strings.Contains(out, "nagare-") {
		t.Errorf("devices left after Remove: %s", out)
	}
}

func TestTunnelNameTakenByOther(t *testing.T) {
	node := nstest.New(t, "nnode2")
	node.IP(t, "link", "add", "nagare-vx0", "type", "vxlan", "id", "5", "dstport", "4789")
	n, err := Open(Config{Netns: node.Path, GatewayIP: netip.MustParsePrefix("10.66.1.1/24"), MTU: 1450})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if err := n.EnsureTunnel(); err == nil || !strings.Contains(err.Error(), "not an external-mode") {
		t.Fatalf("EnsureTunnel over a non-external device: %v", err)
	}
}

func ip(t *testing.T, ns nstest.NS, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"-n", ns.Name}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
	return string(out)
}
