package switchd

import (
	"encoding/json"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/ofproto"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// TestTunnelEndpointPacketIn: packets from a remote VXLAN endpoint arrive
// on that endpoint's virtual port, and PACKET_INs say so — for the first
// packet (translated in userspace) and for later ones (the cached flow's
// userspace action, which the fast path reports with the tunnel device's
// port).
func TestTunnelEndpointPacketIn(t *testing.T) {
	node, remote := nstest.New(t, "node"), nstest.New(t, "remote")
	nstest.Veth(t, node, "u1", remote, "u2", 1500)
	node.IP(t, "addr", "add", "192.168.77.1/24", "dev", "u1")
	remote.IP(t, "addr", "add", "192.168.77.2/24", "dev", "u2")
	node.IP(t, "link", "add", "nvx0", "type", "vxlan", "external", "dstport", "4789")
	node.IP(t, "link", "set", "nvx0", "up")
	// The remote end is a plain kernel VXLAN device, VNI 42.
	remote.IP(t, "link", "add", "vx0", "type", "vxlan", "id", "42", "remote", "192.168.77.1", "local", "192.168.77.2", "dstport", "4789")
	remote.IP(t, "addr", "add", "10.77.0.2/24", "dev", "vx0")
	remote.IP(t, "link", "set", "vx0", "up")
	remote.IP(t, "neigh", "replace", "10.77.0.1", "lladdr", "02:77:00:00:00:01", "dev", "vx0")

	ts := runSwitch(t, node, nil, t.TempDir(), nil)
	t.Cleanup(func() {
		if ts.stopRun() {
			_ = ts.Destroy()
		}
	})
	const endpoint = 20
	if _, err := ts.AddPort(PortSpec{Name: "nvx0", OFPort: endpoint, Tunnel: &ofproto.TunnelConfig{
		Remote: netip.MustParseAddr("192.168.77.2"), Local: netip.MustParseAddr("192.168.77.1")}}); err != nil {
		t.Fatal(err)
	}
	// list-ports names the endpoint, its remote and the device carrying it.
	resp := ts.control(CtlRequest{Cmd: "list-ports"})
	var ports []PortInfo
	if err := json.Unmarshal(resp.Data, &ports); !resp.OK || err != nil {
		t.Fatalf("list-ports: %+v %v", resp, err)
	}
	var ep *PortInfo
	for i := range ports {
		if ports[i].OFPort == endpoint {
			ep = &ports[i]
		}
	}
	if ep == nil || ep.Remote != "192.168.77.2" || ep.Local != "192.168.77.1" || ep.Device != "nvx0" || ep.Kind != "tunnel" {
		t.Fatalf("list-ports: endpoint %d: %+v (all: %+v)", endpoint, ep, ports)
	}
	// The endpoint names its local address: the fast path does the
	// tunnel's VXLAN on the device that holds it. The remote's classic
	// device sends UDP checksums, which a veth leaves unverified: its
	// packets take nvx0's driver on the way in, as before.
	if nts := ts.dp.NativeTunnels(); len(nts) != 1 || nts[0].Underlay != "u1" || nts[0].UDPPort != 4789 {
		t.Fatalf("native tunnels %+v, want nvx0 on u1, port 4789", nts)
	}
	c := dialController(t, ts.Sock)
	ts.ofctl("add-flow", "priority=10,udp,actions=controller")
	var conn net.Conn
	var err error
	remote.In(t, func() { conn, err = net.Dial("udp4", "10.77.0.1:5000") })
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i, what := range []string{"first packet", "cached flow"} {
		if _, err := conn.Write([]byte(what)); err != nil {
			t.Fatal(err)
		}
		pi := c.waitPacketIn(t, 10*time.Second)
		in, ok := pi.Match.Get(openflow.FieldInPort)
		tun, tok := pi.Match.Get(openflow.FieldTunnelID)
		if !ok || in.Uint() != endpoint || !tok || tun.Uint() != 42 {
			t.Fatalf("PACKET_IN %d (%s): match %s, want in_port=%d,tunnel_id=42", i, what, pi.Match, endpoint)
		}
	}
}
