package nodeport

import (
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nagare-net/nagare/internal/nstest"
)

// nodeportTopo: ext -- node -- sw. The node has the table; "sw" stands in
// for the switch: it owns Address on its end of the gateway link, so
// whatever the node DNATs to Address arrives there, and a listener in it
// tells which source the packet carried.
type nodeportTopo struct {
	ext, node, sw nstest.NS
}

const (
	nodeIP = "172.30.0.1"
	extIP  = "172.30.0.2"
	gwIP   = "10.66.1.1"
)

func newTopo(t *testing.T) nodeportTopo {
	tp := nodeportTopo{ext: nstest.New(t, "npext"), node: nstest.New(t, "npnode"), sw: nstest.New(t, "npsw")}
	nstest.Veth(t, tp.node, "ext0", tp.ext, "e0", 1500)
	nstest.Veth(t, tp.node, "gwtest", tp.sw, "e0", 1500)
	tp.node.IP(t, "addr", "add", nodeIP+"/24", "dev", "ext0")
	tp.ext.IP(t, "addr", "add", extIP+"/24", "dev", "e0")
	tp.node.IP(t, "addr", "add", gwIP+"/24", "dev", "gwtest")
	tp.sw.IP(t, "addr", "add", "10.66.1.2/24", "dev", "e0")
	tp.sw.IP(t, "addr", "add", Address.String()+"/32", "dev", "e0")
	tp.sw.IP(t, "route", "add", "default", "via", gwIP)
	// As the agent's route into the switch (nodenet.EnsureServiceRoute).
	tp.node.IP(t, "route", "add", Address.String()+"/32", "dev", "gwtest", "src", gwIP)
	if err := tp.node.Sh(t, "sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
		t.Fatal(err)
	}
	return tp
}

// peer sends UDP from `from` to dst and returns the source address a
// listener on dst's port (any address) in `to` saw; "" if none arrived.
func peer(t *testing.T, from, to nstest.NS, dst string) string {
	t.Helper()
	_, port, _ := net.SplitHostPort(dst)
	var srv net.PacketConn
	var err error
	to.In(t, func() { srv, err = net.ListenPacket("udp4", ":"+port) })
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var c net.Conn
	from.In(t, func() { c, err = net.Dial("udp4", dst) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 64)
	for i := 0; i < 2; i++ {
		_, _ = c.Write([]byte("who am i"))
		_ = srv.SetReadDeadline(time.Now().Add(time.Second))
		if _, p, err := srv.ReadFrom(buf); err == nil {
			return p.(*net.UDPAddr).IP.String()
		}
	}
	return ""
}

// TestNodePortSteering: NodePorts to the node's address, from outside and
// from the node itself, go to Address; Cluster ones with the gateway's
// address as source, Local ones with the client's; other ports stay with
// the node; Update swaps the sets atomically; the kernel's own listing
// (nft) shows the rules as documented.
func TestNodePortSteering(t *testing.T) {
	tp := newTopo(t)
	ports := []Port{{Proto: 17, Port: 30080}, {Proto: 17, Port: 30081, Local: true}, {Proto: 6, Port: 30080}}
	// A LoadBalancer IP of Cluster policy and one of Local, routed into
	// "the switch" as the agent routes them.
	lbCluster, lbLocal := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2")
	externals := []Port{{Addr: lbCluster, Proto: 17, Port: 80}, {Addr: lbLocal, Proto: 17, Port: 80, Local: true}}
	tp.node.IP(t, "route", "add", "198.51.100.0/24", "dev", "gwtest", "src", gwIP)
	tp.ext.IP(t, "route", "add", "198.51.100.0/24", "via", nodeIP)
	tp.sw.IP(t, "addr", "add", lbCluster.String()+"/32", "dev", "e0")
	tp.sw.IP(t, "addr", "add", lbLocal.String()+"/32", "dev", "e0")
	for i := 0; i < 2; i++ { // twice: the second leaves one of each rule
		if err := Ensure(Config{NetNS: tp.node.Path, Gateway: "gwtest"}, append(append([]Port(nil), ports...), externals...)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Ports(tp.node.Path)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]Port{externals[0]}, ports...) // the Local external IP has no element
	SortPorts(want)
	if !Equal(got, want) {
		t.Fatalf("sets read back %v, want %v", got, want)
	}
	listing, err := nftList(tp.node)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"fib daddr type local meta l4proto . th dport @nodeports counter packets 0 bytes 0 dnat to 169.254.0.252",
		"ip daddr != 127.0.0.0/8 fib daddr type local meta l4proto . th dport @nodeports counter packets 0 bytes 0 dnat to 169.254.0.252",
		`oifname "gwtest" ip daddr 169.254.0.252 meta l4proto . th dport != @local counter packets 0 bytes 0 masquerade`,
		`oifname "gwtest" ip daddr . meta l4proto . th dport @external counter packets 0 bytes 0 masquerade`,
		"elements = { 198.51.100.1 . udp . 80 }",
		"type inet_proto . inet_service",
	} {
		if !strings.Contains(string(listing), w) {
			t.Errorf("nft list lacks %q:\n%s", w, listing)
		}
	}
	if n := strings.Count(string(listing), "dnat to"); n != 2 {
		t.Errorf("%d dnat rules after two Ensures, want 2:\n%s", n, listing)
	}

	cases := []struct {
		name     string
		from     nstest.NS
		dst      string
		wantPeer string
	}{
		{"outside, Cluster: masqueraded to the gateway", tp.ext, nodeIP + ":30080", gwIP},
		{"outside, Local: the client's address kept", tp.ext, nodeIP + ":30081", extIP},
		{"the node itself, Cluster", tp.node, nodeIP + ":30080", gwIP},
		{"the node itself, Local", tp.node, nodeIP + ":30081", nodeIP},
		{"outside, not a NodePort: stays with the node", tp.ext, nodeIP + ":30082", ""},
		{"LoadBalancer IP, Cluster: masqueraded", tp.ext, lbCluster.String() + ":80", gwIP},
		{"LoadBalancer IP, Local: the client's address kept", tp.ext, lbLocal.String() + ":80", extIP},
	}
	for _, c := range cases {
		if got := peer(t, c.from, tp.sw, c.dst); got != c.wantPeer {
			t.Errorf("%s: switch side saw source %q, want %q", c.name, got, c.wantPeer)
		}
	}

	// Update: 30080 goes, 30082 comes.
	next := []Port{{Proto: 17, Port: 30081, Local: true}, {Proto: 17, Port: 30082}}
	if err := Update(tp.node.Path, next); err != nil {
		t.Fatal(err)
	}
	if got, _ := Ports(tp.node.Path); !Equal(got, next) {
		t.Fatalf("after Update: %v, want %v", got, next)
	}
	if got := peer(t, tp.ext, tp.sw, nodeIP+":30082"); got != gwIP {
		t.Errorf("added NodePort 30082: switch side saw %q, want %q", got, gwIP)
	}
	if got := peer(t, tp.ext, tp.sw, nodeIP+":30080"); got != "" {
		t.Errorf("removed NodePort 30080 still steered (source %q)", got)
	}

	// Ten thousand NodePorts: one batch, read back whole.
	var many []Port
	for i := 0; i < 10000; i++ {
		many = append(many, Port{Proto: []uint8{6, 17}[i%2], Port: uint16(30000 + i/2), Local: i%7 == 0})
	}
	start := time.Now()
	if err := Update(tp.node.Path, many); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	// Counted in the kernel's own listing, and read back.
	out, err := exec.Command("ip", "netns", "exec", tp.node.Name, "nft", "list", "set", "ip", TableName, setAll).CombinedOutput()
	if err != nil {
		t.Fatal(err, string(out))
	}
	if n := strings.Count(string(out), "tcp . ") + strings.Count(string(out), "udp . "); n != len(many) {
		t.Fatalf("10000 ports: the kernel's set holds %d", n)
	}
	got, err = Ports(tp.node.Path)
	SortPorts(many)
	if err != nil || !Equal(got, many) {
		t.Fatalf("10000 ports read back: %d, %v", len(got), err)
	}
	t.Logf("10000 NodePorts updated in %v", took)

	if err := Remove(tp.node.Path); err != nil {
		t.Fatal(err)
	}
	if err := Remove(tp.node.Path); err != nil {
		t.Fatalf("second remove: %v", err)
	}
	if got := peer(t, tp.ext, tp.sw, nodeIP+":30082"); got != "" {
		t.Errorf("after Remove, still steered (source %q)", got)
	}
	if got, err := Ports(tp.node.Path); err != nil || len(got) != 0 {
		t.Errorf("after Remove: %v %v", got, err)
	}
}

// nftList is the kernel's listing of the table, in nft's words.
func nftList(n nstest.NS) ([]byte, error) {
	out, err := exec.Command("ip", "netns", "exec", n.Name, "nft", "list", "table", "ip", TableName).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("nft list: %v: %s", err, out)
	}
	return out, nil
}
