package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/vishvananda/netns"

	"github.com/nagare-net/nagare/pkg/nscluster"
)

// BenchmarkCNI times CNI ADD and DEL through the CNI library, as a
// runtime calls them, for nagare (agent + switch + nagare-cni), nagare in
// DPU mode (the agent calls the switch over the control network's mutual
// TLS) and Debian's reference plugins (bridge + host-local) on the same
// machine in the same run, at 1 and 20 concurrent calls. Pod namespaces are made
// before the clock starts. Reported per call: p50 and p99 in ms, and pods
// per second.
//
//	go test -run '^$' -bench CNI -benchtime 110x ./test/cluster/
func BenchmarkCNI(b *testing.B) {
	for _, plane := range []string{"nagare", "nagare-dpu", "bridge+host-local"} {
		for _, conc := range []int{1, 20} {
			b.Run(fmt.Sprintf("%s/conc=%d", plane, conc), func(b *testing.B) {
				benchCNI(b, plane, conc)
			})
		}
	}
}

type cniPlane struct {
	cl     *libcni.NetworkConfigList
	cni    *libcni.CNIConfig
	nodeNS string // where the plugin runs (its "host" namespace)
	newPod func(i int) (*nscluster.Pod, error)
}

func benchCNI(b *testing.B, plane string, conc int) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	if bins.Agent == "" {
		b.Skip("binaries not built")
	}
	clusterSeq++
	c, err := nscluster.New(nscluster.Options{Prefix: fmt.Sprintf("cb%d-%d", os.Getpid(), clusterSeq), Bin: bins, Dir: b.TempDir(),
		DPU: plane == "nagare-dpu"})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	n := c.Nodes[0]
	p := cniPlane{cni: c.CNI(), nodeNS: n.NetnsPath()}
	switch plane {
	case "nagare", "nagare-dpu":
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := c.Start(ctx)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		if p.cl, err = n.ConfList(); err != nil {
			b.Fatal(err)
		}
	default:
		p.cni = libcni.NewCNIConfigWithCacheDir([]string{"/usr/lib/cni"}, filepath.Join(b.TempDir(), "cache"), nil)
		conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"ref","plugins":[{"type":"bridge","bridge":"refbr0","isGateway":true,
			"mtu":1450,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.79.0.0/16"}]],"dataDir":%q}}]}`, filepath.Join(b.TempDir(), "ipam"))
		if p.cl, err = libcni.ConfListFromBytes([]byte(conf)); err != nil {
			b.Fatal(err)
		}
		if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
			b.Skip("Debian's containernetworking-plugins are not installed")
		}
	}
	pods := make([]*nscluster.Pod, b.N)
	for i := range pods {
		if pods[i], err = n.NewPod(fmt.Sprintf("b%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	addLat := make([]time.Duration, b.N)
	delLat := make([]time.Duration, b.N)
	b.ResetTimer()
	start := time.Now()
	runConcurrent(b, conc, b.N, func(i int) error {
		t0 := time.Now()
		err := p.call(true, pods[i])
		addLat[i] = time.Since(t0)
		return err
	})
	addWall := time.Since(start)
	b.StopTimer()
	if plane != "bridge+host-local" {
		st, err := n.Status(context.Background())
		if err != nil || st.IPAM.Used != b.N {
			b.Fatalf("after %d ADDs the agent has %+v (%v)", b.N, st.IPAM, err)
		}
		if b.N >= 100 {
			b.ReportMetric(float64(rssKiB(n.Agent.Cmd.Process.Pid))/1024, "agent-RSS-MiB")
			b.ReportMetric(restartSync(b, n).Seconds()*1000, "restart-sync-ms")
		}
	}
	b.StartTimer()
	start = time.Now()
	runConcurrent(b, conc, b.N, func(i int) error {
		t0 := time.Now()
		err := p.call(false, pods[i])
		delLat[i] = time.Since(t0)
		return err
	})
	delWall := time.Since(start)
	b.StopTimer()
	b.ReportMetric(pct(addLat, 50), "add-p50-ms")
	b.ReportMetric(pct(addLat, 99), "add-p99-ms")
	b.ReportMetric(pct(delLat, 50), "del-p50-ms")
	b.ReportMetric(pct(delLat, 99), "del-p99-ms")
	b.ReportMetric(float64(b.N)/addWall.Seconds(), "adds/s")
	b.ReportMetric(float64(b.N)/delWall.Seconds(), "dels/s")
}

// call runs ADD or DEL for pod from a thread in the node's namespace, so
// a plugin that works in its own namespace (bridge) changes the node, not
// the machine.
func (p *cniPlane) call(add bool, pod *nscluster.Pod) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the thread dies with its namespace change
		h, err := netns.GetFromPath(p.nodeNS)
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if add {
			_, err = p.cni.AddNetworkList(ctx, p.cl, pod.RuntimeConf())
		} else {
			err = p.cni.DelNetworkList(ctx, p.cl, pod.RuntimeConf())
		}
		errc <- err
	}()
	return <-errc
}

func runConcurrent(b *testing.B, conc, n int, f func(i int) error) {
	var wg sync.WaitGroup
	next := make(chan int)
	errs := make(chan error, n)
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

func pct(ds []time.Duration, p int) float64 {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return float64(s[i].Microseconds()) / 1000
}

func rssKiB(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			v, _ := strconv.Atoi(f[1])
			return v
		}
	}
	return 0
}

// restartSync restarts the node's agent and returns the time from its
// start until it reports its switch synced (every pod's flows checked).
func restartSync(b *testing.B, n *nscluster.Node) time.Duration {
	n.Agent.Stop()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := n.StartAgent(ctx); err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	st, err := n.Status(ctx)
	if err != nil || st.Switch.LastSync.Added != 0 || st.Switch.LastSync.Deleted != 0 {
		b.Fatalf("restart sync %+v %v", st.Switch, err)
	}
	b.Logf("agent restart with %d pods: synced %v after start (its own sync took %s; kept %d flows)", len(st.Pods), took, st.Switch.SyncTook, st.Switch.LastSync.Kept)
	return took
}
