package netpol

import (
	"net/netip"
	"testing"
)

// TestVerdicts: a connection passes when neither end's isolation stops
// it: egress rules judge an egress-isolated source, ingress rules an
// ingress-isolated destination, by peer prefix and by protocol and port.
func TestVerdicts(t *testing.T) {
	a := netip.MustParseAddr
	web, db, cli := a("10.77.1.2"), a("10.77.1.3"), a("10.77.1.4")
	st := State{
		Rules: []Rule{
			{ID: "x/db/ingress/0", Direction: Ingress, AppliedTo: []netip.Addr{db},
				Peers: []netip.Prefix{netip.PrefixFrom(web, 32)}, Ports: []PortRange{{Proto: ProtoTCP, Min: 5432, Max: 5432}}},
			{ID: "x/cli/egress/0", Direction: Egress, AppliedTo: []netip.Addr{cli},
				Peers: []netip.Prefix{netip.MustParsePrefix("10.77.1.0/30")}, AnyPort: true},
		},
		IsolatedIngress: []netip.Addr{db},
		IsolatedEgress:  []netip.Addr{cli},
	}
	v := NewVerdicts(st)
	for _, c := range []struct {
		src, dst netip.Addr
		proto    uint8
		port     uint16
		want     bool
	}{
		{web, db, ProtoTCP, 5432, true},     // the ingress rule
		{web, db, ProtoTCP, 5433, false},    // wrong port
		{web, db, ProtoUDP, 5432, false},    // wrong protocol
		{cli, db, ProtoTCP, 5432, false},    // db's rule does not name cli
		{db, web, ProtoTCP, 80, true},       // web is not isolated, db not for egress
		{cli, web, ProtoTCP, 80, true},      // cli's egress rule: 10.77.1.0/30
		{cli, a("10.77.1.9"), 6, 80, false}, // outside it
		{cli, a("10.77.1.9"), 1, 0, false},  // ICMP too
		{web, a("8.8.8.8"), ProtoUDP, 53, true},
	} {
		if got := v.Allows(c.src, c.dst, c.proto, c.port); got != c.want {
			t.Errorf("%v → %v proto %d port %d: allows %v, want %v", c.src, c.dst, c.proto, c.port, got, c.want)
		}
	}
}
