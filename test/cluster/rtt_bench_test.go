package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/lab"
	"github.com/nagare-net/nagare/pkg/nscluster"
)

// BenchmarkPodRTT: 128-byte UDP round trips (sockperf, client, server and
// softirqs on one CPU, so the datapath's own cost shows) between two pods
// that nagare-agent attached on one node, against a bare veth pair
// between two namespaces in the same run; three interleaved rounds,
// medians. The target: nagare's p50 within 1.1x the bare veth.
//
//	go test -run '^$' -bench PodRTT -benchtime 1x ./test/cluster/
func BenchmarkPodRTT(b *testing.B) {
	nstest.RequireRoot(b)
	if bins.Agent == "" {
		b.Skip("binaries not built")
	}
	if _, err := exec.LookPath("sockperf"); err != nil {
		b.Skip("sockperf not installed (make deps)")
	}
	clusterSeq++
	c, err := nscluster.New(nscluster.Options{Prefix: fmt.Sprintf("rt%d-%d", os.Getpid(), clusterSeq), Bin: bins, Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	n := c.Nodes[0]
	pa, err := n.AddPod(ctx, "rtt-a")
	if err != nil {
		b.Fatal(err)
	}
	pb, err := n.AddPod(ctx, "rtt-b")
	if err != nil {
		b.Fatal(err)
	}
	va, vb := nstest.New(b, "veth-a"), nstest.New(b, "veth-b")
	nstest.Veth(b, va, "eth0", vb, "eth0", 1450)
	va.IP(b, "addr", "add", "10.98.0.1/24", "dev", "eth0")
	vb.IP(b, "addr", "add", "10.98.0.2/24", "dev", "eth0")

	var nagare, veth []float64
	for round := 0; round < 3; round++ {
		nagare = append(nagare, sockperfP50(b, pa.NS, pb.NS, pb.IP.String()))
		veth = append(veth, sockperfP50(b, va.Name, vb.Name, "10.98.0.2"))
	}
	nm, vm := median(nagare), median(veth)
	b.Logf("p50 RTT same core: nagare pods %v µs, bare veth %v µs", nagare, veth)
	b.ReportMetric(nm, "nagare-p50-us")
	b.ReportMetric(vm, "veth-p50-us")
	b.ReportMetric(nm/vm, "ratio")
}

// sockperfP50 runs a 3-second 128-byte ping-pong from namespace cns to a
// server in sns, everything on CPU 1, and returns the p50 RTT in µs.
func sockperfP50(b *testing.B, cns, sns, ip string) float64 {
	b.Helper()
	srv := exec.Command("ip", "netns", "exec", sns, "taskset", "-c", "1", "sockperf", "server", "-i", ip, "-p", "11111")
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	// sockperf has no readiness signal: wait until its socket is bound.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out, _ := exec.Command("ip", "netns", "exec", sns, "ss", "-Hlun", "sport = :11111").Output()
		if len(out) > 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("sockperf server did not bind")
		}
	}
	out, err := exec.Command("ip", "netns", "exec", cns, "taskset", "-c", "1", "sockperf", "ping-pong", "-i", ip, "-p", "11111", "-m", "128", "-t", "3").CombinedOutput()
	if err != nil {
		b.Fatalf("sockperf: %v: %s", err, out)
	}
	r, err := lab.ParseSockperf(string(out))
	if err != nil {
		b.Fatal(err)
	}
	return r.P50Us
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
