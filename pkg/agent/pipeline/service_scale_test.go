package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
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
	n := 10000
	if s := os.Getenv("NAGARE_SERVICES"); s != "" {
		fmt.Sscan(s, &n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	p, c, svcs := programScaleServices(ctx, t, n)
	defer c.Close()

	// One Service's endpoint changes: only its group and two flows move.
	start := time.Now()
	res, err := p.UpdateServices(ctx, []*proxy.Service{scaleService(n/2, 3, 1)}, nil)
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

// programScaleServices connects to the switch NAGARE_OF names (or skips),
// syncs the representative node and programs n scaleServices, timing it.
func programScaleServices(ctx context.Context, t *testing.T, n int) (*Pipeline, *Conn, []*proxy.Service) {
	t.Helper()
	target := os.Getenv("NAGARE_OF")
	if target == "" {
		t.Skip("NAGARE_OF=unix:PATH of a running nagare-switch not set")
	}
	c, err := Dial(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
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
	t.Logf("%d Services (%d flows, %d groups) programmed in %v (to the barrier)", n, res.FlowsAdded, res.GroupsAdded, time.Since(start))
	return p, c, svcs
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

// TestServiceChangeLatency measures "one Service change → realized in the
// switch": UpdateServices sends the change and waits for the barrier
// reply, and nagare-switch answers a barrier only after the pipeline took
// every message before it and a revalidator round brought the fast path's
// cached flows up to date. With NAGARE_SERVICES Services (default 10 000,
// 3 endpoints each) programmed, it times NAGARE_CHANGES (default 200)
// changes of each kind, each on its own Service: an endpoint added, an
// endpoint removed, a Service added, a Service deleted; then one endpoint
// change in a NAGARE_BIG_ENDPOINTS-endpoint Service (default 5000), and
// the deletion of everything. It prints p50/p99/max and asserts nothing
// about time. Runs only when NAGARE_OF names a running switch's socket
// (docs/agent.md, Services: the commands).
func TestServiceChangeLatency(t *testing.T) {
	n, changes, big := 10000, 200, 5000
	for env, v := range map[string]*int{"NAGARE_SERVICES": &n, "NAGARE_CHANGES": &changes, "NAGARE_BIG_ENDPOINTS": &big} {
		if s := os.Getenv(env); s != "" {
			fmt.Sscan(s, v)
		}
	}
	if n < 2*changes {
		t.Fatalf("NAGARE_SERVICES=%d: need at least 2×NAGARE_CHANGES=%d Services", n, 2*changes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	p, c, svcs := programScaleServices(ctx, t, n)
	defer c.Close()
	var res ServiceResult
	var err error
	var start time.Time

	// On a shared machine wall time is mostly waiting for a CPU: the CPU
	// each side spent per change is printed too (the switch's when
	// NAGARE_SWITCH_PID names it).
	switchPID := os.Getenv("NAGARE_SWITCH_PID")
	timed := func(kind string, k int, change func(i int) ([]*proxy.Service, []proxy.ServiceKey)) {
		t.Helper()
		agent0, switch0 := processCPU("self"), processCPU(switchPID)
		ds := make([]time.Duration, k)
		for i := range ds {
			up, del := change(i)
			start := time.Now()
			if _, err := p.UpdateServices(ctx, up, del); err != nil {
				t.Fatalf("%s %d: %v", kind, i, err)
			}
			ds[i] = time.Since(start)
		}
		agentCPU, switchCPU := (processCPU("self")-agent0)/time.Duration(k), (processCPU(switchPID)-switch0)/time.Duration(k)
		slices.Sort(ds)
		q := func(f float64) time.Duration { return ds[min(len(ds)-1, int(f*float64(len(ds))))] }
		t.Logf("%-28s n=%d  p50 %v  p99 %v  max %v  CPU per change: agent %v, switch %v", kind, k, q(0.50), q(0.99), ds[len(ds)-1],
			agentCPU.Round(10*time.Microsecond), switchCPU.Round(10*time.Microsecond))
	}
	// Each change on its own Service: 0..changes-1 gain an endpoint,
	// changes..2·changes-1 lose one, n.. are added and then deleted.
	timed("endpoint added", changes, func(i int) ([]*proxy.Service, []proxy.ServiceKey) {
		return []*proxy.Service{scaleService(i, 4, 0)}, nil
	})
	timed("endpoint removed", changes, func(i int) ([]*proxy.Service, []proxy.ServiceKey) {
		return []*proxy.Service{scaleService(changes+i, 2, 0)}, nil
	})
	timed("Service added", changes, func(i int) ([]*proxy.Service, []proxy.ServiceKey) {
		return []*proxy.Service{scaleService(n+i, 3, 0)}, nil
	})
	timed("Service deleted", changes, func(i int) ([]*proxy.Service, []proxy.ServiceKey) {
		return nil, []proxy.ServiceKey{scaleService(n+i, 3, 0).Key}
	})

	// One Service of big endpoints (child groups of ≤ 500 behind a
	// weighted parent): programmed, then one endpoint at a time changes.
	eps := manyEndpoints(big)
	start = time.Now()
	if res, err = p.UpdateServices(ctx, []*proxy.Service{bigService(eps)}, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("a %d-endpoint Service (%d flows, %d groups) programmed in %v", big, res.FlowsAdded, res.GroupsAdded, time.Since(start))
	timed(fmt.Sprintf("%d-endpoint Service: 1 endpoint replaced", big), min(changes, 50), func(i int) ([]*proxy.Service, []proxy.ServiceKey) {
		e := slices.Clone(eps)
		e[i*7%big].Addr = netip.AddrFrom4([4]byte{10, 77, 4, byte(1 + i)})
		return []*proxy.Service{bigService(e)}, nil
	})

	start = time.Now()
	keys := make([]proxy.ServiceKey, 0, n+1)
	for i := range n {
		keys = append(keys, svcs[i].Key)
	}
	keys = append(keys, bigService(nil).Key)
	if _, err := p.UpdateServices(ctx, nil, keys); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d Services deleted in %v", len(keys), time.Since(start))
}

// processCPU is the user+system CPU time of /proc/<pid> so far ("self":
// this process; "": 0), from /proc/<pid>/stat (clock ticks of 10 ms).
func processCPU(pid string) time.Duration {
	if pid == "" {
		return 0
	}
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command (which may hold spaces) start after ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	var utime, stime int64
	fmt.Sscan(f[11], &utime)
	fmt.Sscan(f[12], &stime)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
