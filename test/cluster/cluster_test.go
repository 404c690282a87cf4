package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/agent/config"
	"github.com/nagare-net/nagare/pkg/nscluster"
	"github.com/nagare-net/nagare/pkg/switchd"
)

// TestTwoNodesThreePods is the first acceptance: two nodes with
// three pods each, created through the CNI library; every pod reaches
// every other (ping and TCP), its node and the other node, the node
// reaches its pods, the outside sees the node's address, and DEL removes
// everything ADD made.
func TestTwoNodesThreePods(t *testing.T) {
	c := newCluster(t, nil)
	ctx := ctxT(t, 3*time.Minute)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	base := map[*nscluster.Node]nodeState{n1: readNodeState(t, n1), n2: readNodeState(t, n2)}

	var pods []*nscluster.Pod
	for i := 0; i < 6; i++ {
		n := c.Nodes[i%2]
		p, err := n.AddPod(ctx, fmt.Sprintf("p%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if !n.Config.PodCIDR.Contains(p.IP) || p.IP == n.Config.Gateway() {
			t.Fatalf("%s got %s, outside %s or the gateway", p.Name, p.IP, n.Config.PodCIDR)
		}
		pods = append(pods, p)
	}
	seen := map[netip.Addr]string{}
	for _, p := range pods {
		if o, dup := seen[p.IP]; dup {
			t.Fatalf("%s and %s both got %s", o, p.Name, p.IP)
		}
		seen[p.IP] = p.Name
		if err := p.Check(ctx); err != nil {
			t.Errorf("CHECK %s: %v", p.Name, err)
		}
	}

	t.Run("all-pairs-ping", func(t *testing.T) { pingAllPairs(t, pods, 2) })
	t.Run("all-pairs-tcp", func(t *testing.T) {
		for i, a := range pods {
			for j, b := range pods {
				if a != b {
					nstest.TCPTransfer(t, podNS(b), podNS(a), fmt.Sprintf("%s:%d", b.IP, 7000+i*10+j), 256<<10)
				}
			}
		}
	})
	t.Run("tunnel-in-fast-path", func(t *testing.T) {
		// The pairs across nodes went through VXLAN the switches did
		// themselves (datapath.NativeTunnel), both ways.
		for _, n := range c.Nodes {
			c := switchCounters(t, n)
			if c["tunnel-encap"] == 0 || c["tunnel-decap"] == 0 {
				t.Errorf("%s: fast-path counters %v: the tunnel was left to the VXLAN device", n.Config.Name, c)
			}
		}
	})
	t.Run("pod-node", func(t *testing.T) {
		for _, p := range pods {
			own, other := p.Node, n1
			if own == n1 {
				other = n2
			}
			for _, ip := range []string{own.Config.Gateway().String(), own.Config.Underlay.String(), other.Config.Underlay.String()} {
				if err := ping(p.NS, ip, 2); err != nil {
					t.Error(err)
				}
			}
			// The node reaches its own pods and the other node's.
			if err := ping(own.NS, p.IP.String(), 2); err != nil {
				t.Error(err)
			}
			if err := ping(other.NS, p.IP.String(), 2); err != nil {
				t.Error(err)
			}
		}
	})
	t.Run("external-snat", func(t *testing.T) {
		ext := nstest.NS{Name: c.External, Path: "/var/run/netns/" + c.External}
		for i, p := range pods {
			got := nstest.UDPPeer(t, podNS(p), ext, fmt.Sprintf("%s:%d", nscluster.ExternalHost, 7500+i))
			if got != p.Node.ExtAddr {
				t.Errorf("the external host saw %s from %s, want its node's %s", got, p.Name, p.Node.ExtAddr)
			}
		}
	})
	t.Run("spoofed-source-dropped", func(t *testing.T) {
		// A pod that takes another pod's address cannot use it.
		a, b := pods[0], pods[2] // both on node 1
		if out, err := a.Exec("ip", "addr", "add", pods[4].IP.String()+"/32", "dev", "eth0"); err != nil {
			t.Fatal(out, err)
		}
		defer a.Exec("ip", "addr", "del", pods[4].IP.String()+"/32", "dev", "eth0")
		out, _ := exec.Command("ip", "netns", "exec", a.NS, "ping", "-n", "-q", "-c", "3", "-i", "0.1", "-W", "1",
			"-I", pods[4].IP.String(), b.IP.String()).CombinedOutput()
		if !strings.Contains(string(out), " 0 received") {
			t.Errorf("a ping with a stolen source address got through: %s", out)
		}
	})

	// DEL removes every link, port, flow and allocation ADD made.
	var wg sync.WaitGroup
	errs := make([]error, len(pods))
	for i, p := range pods {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = p.Del(ctx) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		after := readNodeState(t, n)
		before := base[n]
		if fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("%s after DEL of every pod differs from before the first ADD:\nbefore %+v\nafter  %+v", n.Config.Name, before, after)
		}
	}
	// DEL again is fine.
	if err := pods[0].Del(ctx); err != nil {
		t.Errorf("second DEL: %v", err)
	}
}

// switchShow decodes the data of n's switch's show into v.
func switchShow(ctx context.Context, t *testing.T, n *nscluster.Node, v any) {
	t.Helper()
	resp, err := switchd.Call(ctx, n.SwitchSocket(), switchd.CtlRequest{Cmd: "show"})
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(resp.Data, v); err != nil {
		t.Fatal(err)
	}
}

// switchCounters are the fast path's event counters of n's switch.
func switchCounters(t *testing.T, n *nscluster.Node) map[string]uint64 {
	t.Helper()
	var show struct {
		Counters map[string]uint64 `json:"counters"`
	}
	switchShow(ctxT(t, 10*time.Second), t, n, &show)
	return show.Counters
}

// nodeState is what pods add to a node and DEL must take away again.
type nodeState struct {
	Links       []string // device names in the node namespace
	Routes      []string
	Ports       []string // switch ports
	Flows       int
	Allocations int
	Masquerade  []string
}

func readNodeState(t *testing.T, n *nscluster.Node) nodeState {
	t.Helper()
	var s nodeState
	out, err := exec.Command("ip", "-n", n.NS, "-o", "link", "show").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 {
			s.Links = append(s.Links, strings.TrimSuffix(strings.Split(f[1], "@")[0], ":"))
		}
	}
	out, err = exec.Command("ip", "-n", n.NS, "route", "show").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	s.Routes = strings.Split(strings.TrimSpace(string(out)), "\n")
	resp, err := switchd.Call(context.Background(), n.SwitchSocket(), switchd.CtlRequest{Cmd: "list-ports"})
	if err != nil {
		t.Fatal(err)
	}
	s.Ports = resp.Lines
	s.Flows = len(flowLines(ofctl(t, n.SwitchSocket(), "dump-flows")))
	st, err := n.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s.Allocations = st.IPAM.Used
	for _, m := range st.Masquerade {
		// Counters change with traffic; the rule itself must not.
		s.Masquerade = append(s.Masquerade, regexp.MustCompile(`counter packets \d+ bytes \d+`).ReplaceAllString(m, "counter"))
	}
	sort.Strings(s.Links)
	return s
}

// TestConcurrentAdds: 50 ADDs at once get 50 different addresses; all DELs
// at once return every one.
func TestConcurrentAdds(t *testing.T) {
	c := newCluster(t, nil)
	ctx := ctxT(t, 3*time.Minute)
	n := c.Nodes[0]
	const N = 50
	pods := newPods(t, n, "c", N)
	errs := make([]error, N)
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = p.Add(ctx) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	checkUnique(t, pods)
	st, err := n.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.IPAM.Used != N || len(st.Pods) != N {
		t.Fatalf("agent has %d allocations and %d pods, want %d", st.IPAM.Used, len(st.Pods), N)
	}
	// A sample of them forward: first, last, across the node.
	for _, pair := range [][2]int{{0, N - 1}, {N / 2, 1}} {
		if err := ping(pods[pair[0]].NS, pods[pair[1]].IP.String(), 2); err != nil {
			t.Error(err)
		}
	}
	for i, p := range pods {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = p.Del(ctx) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if st, err = n.Status(ctx); err != nil || st.IPAM.Used != 0 {
		t.Fatalf("after DEL of all: %+v %v", st.IPAM, err)
	}
}

// newPods makes count pod namespaces on n, not attached yet.
func newPods(t *testing.T, n *nscluster.Node, prefix string, count int) []*nscluster.Pod {
	t.Helper()
	pods := make([]*nscluster.Pod, count)
	for i := range pods {
		p, err := n.NewPod(fmt.Sprintf("%s%d", prefix, i))
		if err != nil {
			t.Fatal(err)
		}
		pods[i] = p
	}
	return pods
}

func checkUnique(t *testing.T, pods []*nscluster.Pod) {
	t.Helper()
	seen := map[netip.Addr]string{}
	for _, p := range pods {
		if p == nil || !p.IP.IsValid() {
			continue
		}
		if o, dup := seen[p.IP]; dup {
			t.Fatalf("%s and %s both got %s", o, p.Name, p.IP)
		}
		seen[p.IP] = p.Name
	}
}

// TestAgentKilledDuringAdds: SIGKILL of the agent in the middle of a burst
// of ADDs, then a restart: no address is ever given twice, the runtime's
// retries succeed, and CNI GC leaves exactly the valid attachments.
func TestAgentKilledDuringAdds(t *testing.T) {
	c := newCluster(t, nil)
	ctx := ctxT(t, 3*time.Minute)
	n := c.Nodes[0]
	const N = 40
	pods := newPods(t, n, "k", N)
	errs := make([]error, N)
	var wg sync.WaitGroup
	var succeeded atomic.Int32
	five := make(chan struct{}) // closed when the fifth ADD has succeeded
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.Add(ctx)
			if errs[i] == nil && succeeded.Add(1) == 5 {
				close(five)
			}
		}()
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	select { // five ADDs have succeeded: kill the agent amid the rest
	case <-five:
	case <-all: // (both may be closed: select picks either)
		if succeeded.Load() < 5 {
			t.Fatalf("only %d of %d ADDs succeeded with the agent up: %v", succeeded.Load(), N, errors.Join(errs...))
		}
	}
	n.Agent.Kill()
	wg.Wait()
	var ok, failed []*nscluster.Pod
	for i, p := range pods {
		if errs[i] == nil {
			ok = append(ok, p)
			continue
		}
		failed = append(failed, p)
		var ce *types.Error
		if errors.As(errs[i], &ce) && ce.Code != types.ErrTryAgainLater && ce.Code != types.ErrInternal {
			t.Errorf("%s: error code %d (%s), want 11 (try again later)", p.Name, ce.Code, ce.Msg)
		}
	}
	t.Logf("%d ADDs returned before/around the kill, %d failed", len(ok), len(failed))
	if len(failed) == 0 {
		t.Log("every ADD finished before the kill landed; the restart checks still run")
	}
	if err := n.StartAgent(ctx); err != nil {
		t.Fatal(err)
	}
	checkUnique(t, ok)
	// The runtime retries half of the failed ADDs (same container) and
	// gives up on the others.
	var retried []*nscluster.Pod
	for i, p := range failed {
		if i%2 == 0 {
			if err := p.Add(ctx); err != nil {
				t.Fatalf("retried ADD %s: %v", p.Name, err)
			}
			retried = append(retried, p)
		}
	}
	live := append(append([]*nscluster.Pod{}, ok...), retried...)
	checkUnique(t, live)
	st, err := n.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ips := map[string]bool{}
	for _, p := range st.Pods {
		if ips[p.IP] {
			t.Fatalf("the agent's records give %s twice", p.IP)
		}
		ips[p.IP] = true
	}
	for _, p := range live {
		if !ips[p.IP.String()] {
			t.Errorf("%s's %s is not recorded", p.Name, p.IP)
		}
	}
	// CNI GC with the runtime's valid attachments releases the leaks.
	cl, err := n.ConfList()
	if err != nil {
		t.Fatal(err)
	}
	var valid []types.GCAttachment
	for _, p := range live {
		valid = append(valid, types.GCAttachment{ContainerID: p.ContainerID, IfName: "eth0"})
	}
	if err := c.CNI().GCNetworkList(ctx, cl, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
		t.Fatal(err)
	}
	if st, err = n.Status(ctx); err != nil {
		t.Fatal(err)
	}
	if st.IPAM.Used != len(live) || len(st.Pods) != len(live) {
		t.Fatalf("after GC: %d allocations, %d pods; want %d", st.IPAM.Used, len(st.Pods), len(live))
	}
	// Everything that survived forwards.
	if err := ping(live[0].NS, live[len(live)-1].IP.String(), 2); err != nil {
		t.Error(err)
	}
}

// TestRestarts: the agent's restart and the switch's restart under a TCP
// stream and a UDP ping-pong (intra-node and inter-node): no pair loses
// connectivity for more than a second, and the agent's restart deletes
// and re-adds no flow.
func TestRestarts(t *testing.T) {
	c := newCluster(t, nil)
	ctx := ctxT(t, 3*time.Minute)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	a, err := n1.AddPod(ctx, "ra")
	if err != nil {
		t.Fatal(err)
	}
	b, err := n1.AddPod(ctx, "rb")
	if err != nil {
		t.Fatal(err)
	}
	r, err := n2.AddPod(ctx, "rc")
	if err != nil {
		t.Fatal(err)
	}
	intra := startLiveness(t, podNS(a), podNS(b), b.IP.String(), 9000)
	inter := startLiveness(t, podNS(a), podNS(r), r.IP.String(), 9100)
	intra.waitTraffic(t)
	inter.waitTraffic(t)

	t.Run("agent", func(t *testing.T) {
		before := flowDurations(t, ofctl(t, n1.SwitchSocket(), "dump-flows"))
		n1.Agent.Stop()
		// Pods keep forwarding with the agent down.
		intra.waitTraffic(t)
		inter.waitTraffic(t)
		if err := n1.StartAgent(ctx); err != nil {
			t.Fatal(err)
		}
		st, err := n1.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Switch.LastSync.Added != 0 || st.Switch.LastSync.Deleted != 0 || st.Switch.LastSync.Kept != len(before) {
			t.Errorf("restart sync: %+v, want 0 added, 0 deleted, %d kept", st.Switch.LastSync, len(before))
		}
		after := flowDurations(t, ofctl(t, n1.SwitchSocket(), "dump-flows"))
		if len(after) != len(before) {
			t.Errorf("%d flows before the restart, %d after", len(before), len(after))
		}
		for f, d0 := range before {
			if d1, ok := after[f]; !ok {
				t.Errorf("flow gone after the restart: %s", f)
			} else if d1 < d0 {
				t.Errorf("flow re-added by the restart (duration %.3f < %.3f): %s", d1, d0, f)
			}
		}
		intra.waitTraffic(t)
		inter.waitTraffic(t)
	})
	t.Run("switch", func(t *testing.T) {
		st0, err := n1.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n1.Switch.Stop()
		if err := n1.StartSwitch(ctx); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			st, err := n1.Status(ctx)
			if err == nil && st.Switch.Connected && st.Switch.Reconnects > st0.Switch.Reconnects {
				if st.Switch.LastSync.Added == 0 {
					t.Errorf("after the switch's restart the agent added no flow: %+v", st.Switch.LastSync)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the agent did not re-sync the restarted switch: %+v %v", st, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		intra.waitTraffic(t)
		inter.waitTraffic(t)
		// A new pod after the switch's restart gets flows too.
		d, err := n1.AddPod(ctx, "rd")
		if err != nil {
			t.Fatal(err)
		}
		if err := ping(d.NS, r.IP.String(), 2); err != nil {
			t.Error(err)
			for _, n := range []*nscluster.Node{n1, r.Node} {
				for _, cmd := range []string{"dump-cache", "show"} {
					resp, err := switchd.Call(ctx, n.SwitchSocket(), switchd.CtlRequest{Cmd: cmd})
					if err == nil {
						t.Logf("%s %s:\n%s", n.SwitchSocket(), cmd, strings.Join(resp.Lines, "\n"))
					}
				}
			}
			out, _ := exec.Command("grep", "-h", "translation failed", n1.Dir+"/switch.log").CombinedOutput()
			t.Logf("translation failures in node1's switch log (NAGARE_DEBUG_SWITCH=1 logs them):\n%s", out)
		}
	})
	for name, lv := range map[string]*liveness{"intra-node": intra, "inter-node": inter} {
		udp, tcp, n, bytes := lv.finish()
		t.Logf("%s: longest gap UDP %v (%d round trips), TCP %v (%d MiB)", name, udp, n, tcp, bytes>>20)
		if udp > time.Second || tcp > time.Second {
			t.Errorf("%s: connectivity lost for UDP %v / TCP %v (limit 1s)", name, udp, tcp)
		}
	}
}

var durationRE = regexp.MustCompile(`duration=([0-9.]+)s, `)
var countersRE = regexp.MustCompile(`(n_packets|n_bytes|idle_age|hard_age)=[0-9]+, ?`)

// flowDurations maps each flow (without its counters) to its duration.
func flowDurations(t *testing.T, dump string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, l := range flowLines(dump) {
		m := durationRE.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("no duration in %q", l)
		}
		d, _ := strconv.ParseFloat(m[1], 64)
		key := countersRE.ReplaceAllString(durationRE.ReplaceAllString(l, ""), "")
		out[key] = d
	}
	return out
}

// TestBadInput: the errors a runtime gets from the real agent.
func TestBadInput(t *testing.T) {
	cc := config.Default()
	cc.Nodes[0].PodCIDR = netip.MustParsePrefix("10.77.1.0/29") // 5 addresses for pods
	c := newCluster(t, cc)
	ctx := ctxT(t, 2*time.Minute)
	n := c.Nodes[0]
	var pods []*nscluster.Pod
	for i := 0; i < 5; i++ {
		p, err := n.AddPod(ctx, fmt.Sprintf("b%d", i))
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	cniCode := func(err error) int {
		var ce *types.Error
		if errors.As(err, &ce) {
			return int(ce.Code)
		}
		return -1
	}
	t.Run("exhausted", func(t *testing.T) {
		p, err := n.NewPod("b-full")
		if err != nil {
			t.Fatal(err)
		}
		err = p.Add(ctx)
		if code := cniCode(err); code != 100 {
			t.Fatalf("ADD into a full /29: %v (code %d), want code 100", err, code)
		}
		// Nothing of the refused pod is left behind.
		st, _ := n.Status(ctx)
		if st.IPAM.Used != 5 {
			t.Errorf("%d allocations after a refused ADD, want 5", st.IPAM.Used)
		}
	})
	t.Run("no-netns", func(t *testing.T) {
		p := &nscluster.Pod{Name: "ghost", Node: n, ContainerID: "ghost0123456789", Netns: "/var/run/netns/nagare-does-not-exist"}
		cl, _ := n.ConfList()
		_, err := c.CNI().AddNetworkList(ctx, cl, p.RuntimeConf())
		if err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("ADD into a missing netns: %v", err)
		}
	})
	t.Run("check", func(t *testing.T) {
		p := pods[0]
		if err := p.Check(ctx); err != nil {
			t.Fatalf("CHECK of a healthy pod: %v", err)
		}
		pfx := fmt.Sprintf("%s/%d", p.IP, n.Config.PodCIDR.Bits())
		if out, err := p.Exec("ip", "route", "del", "default"); err != nil {
			t.Fatal(out, err)
		}
		if err := p.Check(ctx); err == nil || !strings.Contains(err.Error(), "default route") {
			t.Errorf("CHECK without the default route: %v", err)
		}
		if out, err := p.Exec("ip", "route", "add", "default", "via", n.Config.Gateway().String()); err != nil {
			t.Fatal(out, err)
		}
		if out, err := p.Exec("ip", "addr", "del", pfx, "dev", "eth0"); err != nil {
			t.Fatal(out, err)
		}
		if err := p.Check(ctx); err == nil || !strings.Contains(err.Error(), "lacks address") {
			t.Errorf("CHECK without the address: %v", err)
		}
	})
	t.Run("status-full", func(t *testing.T) {
		cl, _ := n.ConfList()
		if code := cniCode(c.CNI().GetStatusNetworkList(ctx, cl)); code != 51 {
			t.Errorf("STATUS with a full pool: code %d, want 51", code)
		}
		if err := pods[4].Del(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.CNI().GetStatusNetworkList(ctx, cl); err != nil {
			t.Errorf("STATUS with room again: %v", err)
		}
	})
	t.Run("agent-down", func(t *testing.T) {
		n.Agent.Stop()
		p, err := n.NewPod("b-down")
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = p.Add(ctx)
		if code := cniCode(err); code != int(types.ErrTryAgainLater) {
			t.Fatalf("ADD with the agent down: %v (code %d), want 11", err, code)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("ADD with the agent down took %v: it must fail at once", took)
		}
		// STATUS says so too.
		cl, _ := n.ConfList()
		if err := c.CNI().GetStatusNetworkList(ctx, cl); err == nil {
			t.Error("STATUS with the agent down: no error")
		}
		if err := n.StartAgent(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.CNI().GetStatusNetworkList(ctx, cl); err != nil {
			t.Errorf("STATUS with the agent up: %v", err)
		}
	})
}

// TestPeriodicGC: a pod whose namespace went away without a DEL (the
// runtime crashed) loses its allocation, veth, port and flows at the
// agent's next check.
func TestPeriodicGC(t *testing.T) {
	c := newCluster(t, nil, "--gc-interval", "500ms", "--gc-grace", "1ms")
	ctx := ctxT(t, 2*time.Minute)
	n := c.Nodes[0]
	base := readNodeState(t, n)
	keep, err := n.AddPod(ctx, "g-keep")
	if err != nil {
		t.Fatal(err)
	}
	gone, err := n.AddPod(ctx, "g-gone")
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("ip", "netns", "del", gone.NS).Run(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := n.Status(ctx)
		if err == nil && st.IPAM.Used == 1 && len(st.Pods) == 1 && st.Pods[0].Pod == "default/g-keep" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leaked pod not collected: %+v %v", st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := keep.Del(ctx); err != nil {
		t.Fatal(err)
	}
	if after := readNodeState(t, n); fmt.Sprint(after) != fmt.Sprint(base) {
		t.Errorf("after GC and DEL the node differs:\nbefore %+v\nafter  %+v", base, after)
	}
}
