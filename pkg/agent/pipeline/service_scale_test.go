package pipeline

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/agent/proxy"
)

// TestProgramServicesIntoSwitch measures programming Services into a real
// nagare-switch through the agent's client, and an incremental change
// after it. It runs only when NAGARE_OF names the switch's OpenFlow
// socket (docs/agent.md says how to start one); NAGARE_SERVICES sets how
// many (default 10000), each with one TCP port and 3 endpoints.
func TestProgramServicesIntoSwitch(t *testing.T) {
	target := os.Getenv("NAGARE_OF")
	if target == "" {
		t.Skip("NAGARE_OF=unix:PATH of a running nagare-switch not set")
	}
	n := 10000
	if s := os.Getenv("NAGARE_SERVICES"); s != "" {
		fmt.Sscan(s, &n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := Dial(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := representativePipeline()
	p.SetConn(c)
	p.SetServices(nil)
	if _, err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	svcs := make([]*proxy.Service, n)
	for i := range svcs {
		svcs[i] = scaleService(i, 3, 0)
	}
	start := time.Now()
	res, err := p.UpdateServices(ctx, svcs, nil)
	if err != nil {
		t.Fatal(err)
	}
	all := time.Since(start)
	t.Logf("%d Services (%d flows, %d groups) programmed in %v (to the barrier)", n, res.FlowsAdded, res.GroupsAdded, all)

	// One Service's endpoint changes: only its group and two flows move.
	start = time.Now()
	res, err = p.UpdateServices(ctx, []*proxy.Service{scaleService(n/2, 3, 1)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("one changed Service among %d: %+v in %v", n, res, time.Since(start))

	// An agent restart: a new pipeline's Sync finds every flow and group.
	q := representativePipeline()
	q.SetConn(c)
	svcs[n/2] = scaleService(n/2, 3, 1)
	q.SetServices(svcs)
	start = time.Now()
	st, err := q.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restart sync with %d Services: %+v in %v", n, st, time.Since(start))
	if st.Added != 0 || st.Deleted != 0 || st.GroupsAdded != 0 || st.GroupsDeleted != 0 {
		t.Errorf("a restart changed flows or groups: %+v", st)
	}
	start = time.Now()
	keys := make([]proxy.ServiceKey, n)
	for i := range keys {
		keys[i] = svcs[i].Key
	}
	if _, err := q.UpdateServices(ctx, nil, keys); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d Services deleted in %v", n, time.Since(start))
}

// scaleService is Service i: ClusterIP 10.96.x.y, TCP 80, eps endpoints
// on node2's subnet (shifted by shift).
func scaleService(i, eps, shift int) *proxy.Service {
	vip := netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)})
	var es []proxy.Endpoint
	for j := 0; j < eps; j++ {
		es = append(es, proxy.Endpoint{Addr: netip.AddrFrom4([4]byte{10, 77, 2, byte(1 + (i+j+shift)%250)}), Port: 8080, Ready: true, Serving: true})
	}
	return &proxy.Service{Key: proxy.ServiceKey{Namespace: "scale", Name: fmt.Sprint("svc-", i)}, Type: proxy.TypeClusterIP,
		Ports: []*proxy.Port{{Protocol: proxy.TCP, Port: 80, Frontends: []proxy.Frontend{{Kind: proxy.FrontendClusterIP, Addr: vip, Port: 80}},
			Endpoints: es, InternalEndpoints: es, Internal: proxy.Forward, External: proxy.Reject}}}
}
