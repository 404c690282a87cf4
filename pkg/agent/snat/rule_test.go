package snat

import (
	"net/netip"
	"testing"

	"github.com/google/nftables/expr"
)

// TestMasqueradeExcludesPodNetwork: the rule excludes every prefix of the
// pod network (the union of the nodes' pod CIDRs has several), and only
// the node's own pod CIDR when it is empty. No root: the rule's
// expressions only.
func TestMasqueradeExcludesPodNetwork(t *testing.T) {
	pods := netip.MustParsePrefix("10.77.1.0/24")
	excluded := func(cfg Config) int {
		n := 0
		for _, e := range masquerade(cfg) {
			if c, ok := e.(*expr.Cmp); ok && c.Op == expr.CmpOpNeq && len(c.Data) == 4 {
				n++
			}
		}
		return n
	}
	three := []netip.Prefix{pods, netip.MustParsePrefix("10.77.2.0/24"), netip.MustParsePrefix("10.77.3.0/24")}
	if n := excluded(Config{PodCIDR: pods, PodNetwork: three}); n != 3 {
		t.Errorf("%d destinations excluded, want 3", n)
	}
	if n := excluded(Config{PodCIDR: pods}); n != 1 {
		t.Errorf("%d destinations excluded without a pod network, want 1 (the node's own)", n)
	}
}
