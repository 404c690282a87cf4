package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/agent/config"
	"github.com/nagare-net/nagare/pkg/nscluster"
)

// TestServicesSessionAffinity: sticky (10.96.0.12, TCP 80 → 8080,
// sessionAffinity ClientIP for 2 s) has three endpoints, two on node 1
// and one on node 2. A client's connections all go to one endpoint while
// it keeps connecting, for longer than the timeout (every new connection
// restarts it); the switch shows the flow it learned; once the client
// stops, the learned flow expires and its next connections are balanced
// again (they can move). A plain ClusterIP on the same endpoints spreads
// the same client, so the test can tell affinity from luck.
func TestServicesSessionAffinity(t *testing.T) {
	cc := config.Default()
	eps := []string{"10.77.1.2", "10.77.2.2", "10.77.1.3"}
	ports := []config.ServicePort{{Name: "tcp", Protocol: "TCP", Port: 80, TargetPort: 8080}}
	cc.Services = append(cc.Services,
		config.Service{Name: "sticky", ClusterIP: "10.96.0.12", SessionAffinity: "ClientIP", SessionAffinityTimeout: 2,
			Ports: ports, Endpoints: eps},
		config.Service{Name: "spread", ClusterIP: "10.96.0.13", Ports: ports, Endpoints: eps})
	c := newCluster(t, cc)
	ctx := ctxT(t, 3*time.Minute)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	add := func(n *nscluster.Node, name string) *nscluster.Pod {
		p, err := n.AddPod(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	srvs := []*nscluster.Pod{add(n1, "srv1"), add(n2, "srv2"), add(n1, "srv3")}
	for i, s := range srvs {
		if s.IP.String() != eps[i] {
			t.Fatalf("endpoint pod %s got %s, the cluster file names %s", s.Name, s.IP, eps[i])
		}
		serveName(t, podNS(s), s.Name)
	}
	cli := add(n1, "cli1")
	connect := func(to string) string {
		t.Helper()
		name, err := tcpName(t, podNS(cli), to)
		if err != nil {
			t.Fatalf("connection to %s: %v", to, err)
		}
		return name
	}
	learned := func() []string {
		var out []string
		for _, l := range strings.Split(ofctl(t, n1.SwitchSocket(), "dump-flows", "table=25"), "\n") {
			if strings.Contains(l, "nw_src="+cli.IP.String()) {
				out = append(out, strings.TrimSpace(l))
			}
		}
		return out
	}

	got := map[string]int{}
	for i := 0; i < 24; i++ {
		got[connect("10.96.0.13:80")]++
	}
	if len(got) < 2 {
		t.Fatalf("without affinity 24 connections went to %v: the check below could not tell affinity from chance", got)
	}
	t.Logf("without affinity: %v", got)

	// Connections every 100 ms for 5 s, more than twice the timeout: the
	// affinity holds because each new connection restarts it.
	got = map[string]int{}
	var first string
	for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(100 * time.Millisecond) {
		name := connect("10.96.0.12:80")
		if first == "" {
			first = name
		}
		got[name]++
	}
	if len(got) != 1 {
		t.Fatalf("with affinity: connections went to %v, want all on %s", got, first)
	}
	l := learned()
	if len(l) != 1 || !strings.Contains(l[0], "hard_timeout=2") || !strings.Contains(l[0], "nw_dst=10.96.0.12,tp_dst=80") {
		t.Fatalf("learned flows on node 1: %q", l)
	}
	t.Logf("with affinity: %v; learned: %s", got, l[0])

	// The client stops: the learned flow expires, and new connections are
	// balanced again. Each try waits for the learned flow to go (polling
	// the switch), then connects once: a try stays on the first endpoint
	// with probability 1/3 when the group picks (and then learns again),
	// or while the revalidator has not yet translated the cached path
	// through the expired flow again (half a second at most; such a
	// connection learns nothing).
	deadline := time.Now().Add(40 * time.Second)
	for try := 0; ; try++ {
		for len(learned()) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("the learned flow did not expire: %q", learned())
			}
			time.Sleep(100 * time.Millisecond)
		}
		name := connect("10.96.0.12:80")
		if name != first {
			t.Logf("try %d after expiry: moved to %s", try, name)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tries after expiry all went to %s", try+1, first)
		}
	}
}
