package agent

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nagare-net/nagare/pkg/agent/config"
	"github.com/nagare-net/nagare/pkg/agent/snat"
)

func remoteNode(i int) config.Node {
	return config.Node{Name: fmt.Sprintf("node%d", i), Underlay: netip.MustParseAddr(fmt.Sprintf("192.168.77.%d", i)),
		PodCIDR: netip.MustParsePrefix(fmt.Sprintf("10.77.%d.0/24", i))}
}

// masqueradeLog records the masquerade rules the agent writes.
type masqueradeLog struct {
	mu   sync.Mutex
	last snat.Config
	n    int
}

func (m *masqueradeLog) ensure(c snat.Config) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last, m.n = c, m.n+1
	return nil
}

func (m *masqueradeLog) excluded() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, p := range m.last.PodNetwork {
		out = append(out, p.String())
	}
	return out
}

// TestEmptyClusterCIDR: without a cluster CIDR the pod network is the
// union of every known node's pod CIDR, recomputed as nodes come and go:
// a remote node may not send as another remote node's pods (spoof guard)
// and no node's pods are masqueraded to (SNAT). Before: only this node's
// pod CIDR was guarded and excluded, so node2 could send as node3's pods
// and traffic to node3's pods through the node was masqueraded.
func TestEmptyClusterCIDR(t *testing.T) {
	ta := newTestAgent(t, func(c *config.Cluster) { c.ClusterCIDR = netip.Prefix{} })
	var masq masqueradeLog
	ta.masq = masq.ensure
	ta.NodeUpdated(remoteNode(2))
	ta.NodeUpdated(remoteNode(3))

	// Tunnel packets (metadata 3) claiming node3's pods drop unless they
	// come from node3's endpoint.
	guard := func(cidr string) []string {
		var out []string
		for _, f := range ta.flowsNaming("nw_src=" + cidr) {
			if strings.HasPrefix(f, "table=10 ") && strings.Contains(f, "metadata=0x3/0x3") && strings.HasSuffix(f, "actions=drop") {
				out = append(out, f)
			}
		}
		return out
	}
	for _, cidr := range []string{"10.77.2.0/24", "10.77.3.0/24"} {
		if len(guard(cidr)) != 1 {
			t.Errorf("no drop of tunnel packets from %s but from its own node:\n%s", cidr, strings.Join(ta.sw.flows(), "\n"))
		}
	}
	want := []string{"10.77.1.0/24", "10.77.2.0/24", "10.77.3.0/24"}
	if got := masq.excluded(); !slices.Equal(got, want) {
		t.Errorf("masquerade excludes %v, want %v", got, want)
	}

	ta.NodeDeleted("node3")
	if g := guard("10.77.3.0/24"); len(g) != 0 {
		t.Errorf("node3's guard stayed: %v", g)
	}
	if got, want := masq.excluded(), want[:2]; !slices.Equal(got, want) {
		t.Errorf("after node3 left, masquerade excludes %v, want %v", got, want)
	}
}

// TestClusterCIDRSet: with a cluster CIDR, it alone is the pod network
// and node changes do not rewrite the masquerade.
func TestClusterCIDRSet(t *testing.T) {
	ta := newTestAgent(t, nil)
	var masq masqueradeLog
	ta.masq = masq.ensure
	if err := ta.ensureMasquerade(); err != nil {
		t.Fatal(err)
	}
	ta.NodeUpdated(remoteNode(2))
	if got := masq.excluded(); masq.n != 1 || !slices.Equal(got, []string{"10.77.0.0/16"}) {
		t.Errorf("masquerade written %d times, excludes %v", masq.n, got)
	}
}

// TestOverlappingRemoteRefused: a remote node whose pod CIDR overlaps
// this node's or another remote's is refused (no route, no tunnel, no
// flows) and said so; one that changes to an overlapping CIDR loses what
// it had. Before: its route and flows took the other node's pods.
func TestOverlappingRemoteRefused(t *testing.T) {
	ta := newTestAgent(t, nil)
	var logs strings.Builder
	ta.log = slog.New(slog.NewTextHandler(&logs, nil))
	ta.NodeUpdated(remoteNode(2))
	bad := remoteNode(3)
	bad.PodCIDR = netip.MustParsePrefix("10.77.1.128/25") // inside this node's
	ta.NodeUpdated(bad)
	bad4 := remoteNode(4)
	bad4.PodCIDR = netip.MustParsePrefix("10.77.2.0/23") // covers node2's
	ta.NodeUpdated(bad4)
	if n := ta.remoteCount(); n != 1 {
		t.Errorf("%d remote nodes, want node2 only", n)
	}
	for _, p := range []netip.Prefix{bad.PodCIDR, bad4.PodCIDR} {
		if ta.nodes.has(p) {
			t.Errorf("route to %s", p)
		}
		if f := ta.flowsNaming("nw_dst=" + p.String()); len(f) != 0 {
			t.Errorf("flows to %s: %v", p, f)
		}
	}
	if _, ok := ta.sw.port(ta.endpointName(&remote{node: bad})); ok {
		t.Error("tunnel endpoint to node3")
	}
	if c := strings.Count(logs.String(), "remote node refused"); c != 2 {
		t.Errorf("%d refusals logged, want 2:\n%s", c, logs.String())
	}
	// node2 changes to overlap this node: refused, and its old state goes.
	moved := remoteNode(2)
	moved.PodCIDR = netip.MustParsePrefix("10.77.0.0/16")
	ta.NodeUpdated(moved)
	if n := ta.remoteCount(); n != 0 || ta.nodes.has(remoteNode(2).PodCIDR) {
		t.Errorf("node2 kept after moving onto this node's pods: %d remotes", n)
	}
}
