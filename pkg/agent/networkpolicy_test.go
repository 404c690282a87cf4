package agent

import (
	"net/netip"
	"testing"

	"github.com/nagare-net/nagare/pkg/agent/netpol"
	"github.com/nagare-net/nagare/pkg/ctlproto"
)

// TestDeniedConnections: tracked connections judged as the pipeline
// judged their first packet: to the endpoint a Service connection
// reached, on its port; the node's own connections are never cut.
func TestDeniedConnections(t *testing.T) {
	a := netip.MustParseAddr
	web, db, gw, vip := a("10.77.1.2"), a("10.77.1.3"), a("10.77.1.1"), a("10.96.0.10")
	st := netpol.State{
		Rules: []netpol.Rule{{ID: "x/db/ingress/0", Direction: netpol.Ingress, AppliedTo: []netip.Addr{db},
			Peers: []netip.Prefix{netip.PrefixFrom(web, 32)}, Ports: []netpol.PortRange{{Proto: netpol.ProtoTCP, Min: 5432, Max: 5432}}}},
		IsolatedIngress: []netip.Addr{db},
	}
	tuple := func(src, dst netip.Addr, sport, dport uint16, proto uint8) ctlproto.ConnTuple {
		return ctlproto.ConnTuple{Src: src, Dst: dst, SrcPort: sport, DstPort: dport, Proto: proto}
	}
	conn := func(orig ctlproto.ConnTuple, endpoint netip.Addr, port uint16) ctlproto.Conn {
		return ctlproto.Conn{Zone: 65520, Orig: orig, Reply: tuple(endpoint, orig.Src, port, orig.SrcPort, orig.Proto)}
	}
	allowed := conn(tuple(web, db, 40000, 5432, 6), db, 5432)
	wrongPort := conn(tuple(web, db, 40001, 22, 6), db, 22)
	viaService := conn(tuple(web, vip, 40002, 80, 6), db, 8080) // DNAT to db:8080: denied
	viaServiceOK := conn(tuple(web, vip, 40003, 80, 6), db, 5432)
	probe := conn(tuple(gw, db, 40004, 8080, 6), db, 8080)
	ping := conn(tuple(web, db, 7, 7, 1), db, 7)
	got := deniedConnections([]ctlproto.Conn{allowed, wrongPort, viaService, viaServiceOK, probe, ping}, netpol.NewVerdicts(st), gw)
	want := []ctlproto.ConnTuple{wrongPort.Orig, viaService.Orig, ping.Orig}
	if len(got) != len(want) {
		t.Fatalf("denied %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Orig != want[i] {
			t.Fatalf("denied %v, want %v", got, want)
		}
	}
}
