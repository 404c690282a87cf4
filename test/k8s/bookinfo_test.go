package k8s

// Seed 002's sidecar study on the real two-node Kubernetes (issue 21): the
// lab's Bookinfo-shaped application (cmd/nagare-bookinfo) as Deployments
// behind ClusterIP Services spread over both nodes, a client pod driving
// the product page with wrk at 1, 2, 4, 8 keep-alive connections, measured
// and reported by the lab's own code (lab.MeasureMeshStep, Result.WriteFiles:
// the seed2-sidecar scenario's table, the paper's p90 beside ours, the
// plots), with the proxy in these placements (NAGARE_K8S_BOOKINFO_PROXIES):
//
//   - none: the application alone, every call through its callee's ClusterIP.
//   - node: one HAProxy per node in the node's network namespace
//     (lab.NodeHAProxyConf, as the lab's node placement), the pods' connections
//     to 10.96.0.0/16:9080 sent to it by nagare's transparent redirection:
//     proxyRedirect in the DaemonSet's ConfigMap, the DaemonSet restarted
//     (`kubectl rollout restart`), and back for none. Placements alternate
//     rep by rep (none node none node ...), so each is compared with the
//     other in the same run.
//
// Sidecars (NGINX in the pod) are not here: see docs/lab.md.
//
// Never part of a default run (CI is at its budget):
//
//	make k8s-bookinfo   # flock /tmp/nagare-k8s.lock; NAGARE_K8S_BOOKINFO=1
//
// Output (results.json, samples.csv, summary.md, plots) in
// NAGARE_K8S_BOOKINFO_OUT (default /var/tmp/nagare-k8s-bookinfo).

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nagare-net/nagare/internal/oci"
	"github.com/nagare-net/nagare/pkg/lab"
	"github.com/nagare-net/nagare/pkg/lab/bookinfo"
)

const (
	bookinfoImage = "docker.io/library/nagare-bookinfo:dev"
	bookinfoPlane = "k8s-nagare"
	// bookinfoServiceCIDR is what the node proxy gets redirected: the
	// Services' range (port bookinfo.Port).
	bookinfoServiceCIDR = serviceCIDR
)

// bookinfoClusterIP is a role's Service address: fixed, so that each
// service is given its callees' ClusterIPs on its command line (as the
// lab's cluster file does: no DNS lookup per call).
func bookinfoClusterIP(role string) string {
	for i, r := range bookinfo.Roles {
		if r == role {
			return fmt.Sprintf("10.96.80.%d", 10+i)
		}
	}
	panic("unknown role " + role)
}

// bookinfoPlacement is where each Deployment runs (node index): the
// client's calls to productpage cross nodes, as do productpage's to
// details and to reviews v2, and v2's to ratings; the others stay on
// their node.
var bookinfoPlacement = []struct {
	name, role string
	version    int
	node       int
}{
	{"productpage", bookinfo.RoleProductPage, 0, 1},
	{"details", bookinfo.RoleDetails, 0, 0},
	{"reviews-v1", bookinfo.RoleReviews, 1, 1},
	{"reviews-v2", bookinfo.RoleReviews, 2, 0},
	{"reviews-v3", bookinfo.RoleReviews, 3, 1},
	{"ratings", bookinfo.RoleRatings, 0, 1},
}

const bookinfoClientNode = 0

func TestTwoNodeBookinfo(t *testing.T) {
	if os.Getenv("NAGARE_K8S_BOOKINFO") != "1" {
		t.Skip("the Bookinfo study on the real cluster runs with NAGARE_K8S_BOOKINFO=1 (make k8s-bookinfo)")
	}
	proxies := strings.Split(envOr("NAGARE_K8S_BOOKINFO_PROXIES", "none,node"), ",")
	reps, err := strconv.Atoi(envOr("NAGARE_K8S_BOOKINFO_REPS", "2"))
	if err != nil || reps < 1 {
		t.Fatalf("NAGARE_K8S_BOOKINFO_REPS: %q", os.Getenv("NAGARE_K8S_BOOKINFO_REPS"))
	}
	dur, err := time.ParseDuration(envOr("NAGARE_K8S_BOOKINFO_DURATION", "5s"))
	if err != nil {
		t.Fatal(err)
	}
	out := envOr("NAGARE_K8S_BOOKINFO_OUT", "/var/tmp/nagare-k8s-bookinfo")
	for _, p := range proxies {
		if p != "none" && p != "node" {
			t.Fatalf("NAGARE_K8S_BOOKINFO_PROXIES: %q: the real cluster has none and node", p)
		}
	}
	for _, tool := range []string{"wrk", "haproxy", "ldd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (make deps): %v", tool, err)
		}
	}
	started := time.Now()
	c := upTwoNode(t)
	c.bookinfoImage()
	c.apply(bookinfoManifest(c.nodes))
	c.waitFor("Bookinfo Deployments available and the client running", 3*time.Minute, func() error {
		o, err := c.kubectl("wait", "--for=condition=Available", "deploy", "--all", "--timeout=5s")
		if err != nil {
			return err
		}
		if o, err = c.kubectl("wait", "--for=condition=Ready", "pod/bookinfo-client", "--timeout=5s"); err != nil {
			return err
		}
		_ = o
		return nil
	})
	c.logf("Bookinfo up: %s", c.mustKubectl("get", "pods", "-o", "wide"))
	app := c.bookinfoPIDs()
	if len(app) != len(bookinfoPlacement) {
		t.Fatalf("nagare-bookinfo processes: %v, want %d", app, len(bookinfoPlacement))
	}
	// Every call is a new connection (as Bookinfo's): TIME_WAIT reuse in
	// the application's pods, as the lab sets it (not a sysctl Kubernetes
	// lets a pod set without --allowed-unsafe-sysctls).
	for _, pid := range app {
		if o, err := run("nsenter", fmt.Sprintf("--net=/proc/%d/ns/net", pid), "sysctl", "-qw", "net.ipv4.tcp_tw_reuse=1"); err != nil {
			t.Fatal(o, err)
		}
	}
	hp := c.nodeProxies()
	baseCfg := strings.TrimSpace(c.mustKubectl("-n", "kube-system", "get", "configmap", "nagare-config", "-o", "jsonpath={.data.cluster\\.yaml}"))

	s, err := lab.LoadScenario("seed2-sidecar")
	if err != nil {
		t.Fatal(err)
	}
	s.Name, s.DataPlanes, s.Reps = "k8s-bookinfo", []string{bookinfoPlane}, reps
	var m lab.MeasurementSpec
	for _, mm := range s.Measurements {
		if mm.Kind == lab.KindBookinfo {
			m = mm
		}
	}
	m.Client, m.Server, m.Proxies, m.Duration = "bookinfo-client", "productpage", proxies, lab.Duration(dur)
	s.Measurements = []lab.MeasurementSpec{m}
	s.SetProxies(proxies)
	for i := range s.Paper {
		s.Paper[i].DataPlane = bookinfoPlane
	}
	res := &lab.Result{Scenario: s, Started: started,
		Command: "flock /tmp/nagare-k8s.lock make k8s-bookinfo (" + strings.Join(bookinfoEnv(), " ") + ")",
		Host:    lab.HostInfo{Kernel: kernelRelease(), CPU: cpuModel(), CPUs: runtime.NumCPU()},
		Planes: []lab.PlaneInfo{{Name: bookinfoPlane, Scope: "cross-node",
			Description: "nagare on a real two-node Kubernetes " + k8sVersion + " (test/k8s), Bookinfo as Deployments behind ClusterIP Services"}}}
	url := fmt.Sprintf("http://%s:%d/productpage", bookinfoClusterIP(bookinfo.RoleProductPage), bookinfo.Port)
	redirect := false
	for rep := 1; rep <= reps; rep++ {
		for _, proxy := range proxies {
			if want := proxy == "node"; want != redirect {
				c.setProxyRedirect(baseCfg, want)
				redirect = want
			}
			smp := lab.Sample{DataPlane: bookinfoPlane, Measurement: m.Name, Kind: lab.KindBookinfo, Client: m.Client,
				Server: m.Server, Scope: "cross-node", Placement: lab.CrossCore, Load: "none", Rep: rep, Status: lab.StatusOK,
				Proxy: proxy, Start: time.Now()}
			smp.BackgroundBusyPct = lab.BackgroundBusyPct(context.Background())
			r, err := c.bookinfoRun(url, m, hp, proxy == "node", app)
			smp.Mesh = r
			if err != nil {
				smp.Status, smp.Error = lab.StatusFailed, err.Error()
				t.Errorf("rep %d, proxies %s: %v", rep, proxy, err)
			}
			res.Samples = append(res.Samples, smp)
		}
	}
	if redirect {
		c.setProxyRedirect(baseCfg, false)
	}
	res.WallSeconds = time.Since(started).Seconds()
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := res.WriteFiles(out); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(out, "summary.md"))
	load, _ := os.ReadFile("/proc/loadavg")
	c.logf("load average %s; results in %s:\n%s", strings.TrimSpace(string(load)), out, md)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func bookinfoEnv() []string {
	var out []string
	for _, k := range []string{"NAGARE_K8S_BOOKINFO_PROXIES", "NAGARE_K8S_BOOKINFO_REPS", "NAGARE_K8S_BOOKINFO_DURATION"} {
		if v := os.Getenv(k); v != "" {
			out = append(out, k+"="+v)
		}
	}
	if len(out) == 0 {
		return []string{"defaults: none,node, 2 reps, 5s"}
	}
	return out
}

func kernelRelease() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// bookinfoImage builds nagare-bookinfo:dev the way nagareImage builds
// nagare:dev (from this tree's binaries, no registry): the static
// nagare-bookinfo, the host's wrk with its shared libraries (the client
// pod's load tool), busybox for sh, sleep, taskset and wget; and imports
// it on both nodes.
func (c *twoNode) bookinfoImage() {
	bin := c.path("bookinfo-bin")
	cmd := exec.Command("go", "build", "-o", bin+"/", "./cmd/nagare-bookinfo")
	cmd.Dir = c.repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		c.t.Fatalf("build nagare-bookinfo: %v\n%s", err, out)
	}
	wrk, err := exec.LookPath("wrk")
	c.fatal(err)
	files := map[string]oci.File{"/usr/local/bin/nagare-bookinfo": {Src: filepath.Join(bin, "nagare-bookinfo")},
		"/bin/busybox": {Src: "/bin/busybox"}}
	for _, a := range []string{"sh", "sleep", "taskset", "wget", "wc", "cat"} {
		files["/bin/"+a] = oci.File{Link: "busybox"}
	}
	c.fatal(oci.AddDynamic(files, wrk))
	tar := c.path("bookinfo-image.tar")
	c.fatal(oci.Build(tar, bookinfoImage, files, []string{"/usr/local/bin/nagare-bookinfo"}))
	for _, n := range c.nodes {
		if out, err := run("ctr", "--address", n.sock, "-n", "k8s.io", "images", "import", tar); err != nil {
			c.t.Fatalf("import %s into %s: %v %s", bookinfoImage, n.name, err, out)
		}
	}
	c.logf("%s imported on both nodes", bookinfoImage)
}

// bookinfoManifest: a Deployment per service (reviews in three, one per
// version, behind one Service), each pinned to its node, a Service per
// role at its fixed ClusterIP, and the client pod.
func bookinfoManifest(nodes []*tnode) string {
	base := func(role string) string { return fmt.Sprintf("http://%s:%d", bookinfoClusterIP(role), bookinfo.Port) }
	var b strings.Builder
	for _, d := range bookinfoPlacement {
		args := []string{"--listen", fmt.Sprintf("0.0.0.0:%d", bookinfo.Port), "--role", d.role}
		switch {
		case d.role == bookinfo.RoleProductPage:
			args = append(args, "--details", base(bookinfo.RoleDetails), "--reviews", base(bookinfo.RoleReviews))
		case d.role == bookinfo.RoleReviews:
			args = append(args, "--version", strconv.Itoa(d.version))
			if d.version > 1 {
				args = append(args, "--ratings", base(bookinfo.RoleRatings))
			}
		}
		q, _ := json.Marshal(args)
		fmt.Fprintf(&b, `apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, labels: {app: %[2]s}}
spec:
  replicas: 1
  selector: {matchLabels: {app: %[2]s, deploy: %[1]s}}
  template:
    metadata: {labels: {app: %[2]s, deploy: %[1]s}}
    spec:
      nodeSelector: {kubernetes.io/hostname: %[3]s}
      terminationGracePeriodSeconds: 1
      containers:
        - name: %[2]s
          image: %[4]s
          imagePullPolicy: Never
          command: [/usr/local/bin/nagare-bookinfo]
          args: %[5]s
          ports: [{containerPort: %[6]d, name: http}]
          readinessProbe: {tcpSocket: {port: %[6]d}, periodSeconds: 1}
---
`, d.name, d.role, nodes[d.node].name, bookinfoImage, q, bookinfo.Port)
	}
	for _, role := range bookinfo.Roles {
		fmt.Fprintf(&b, `apiVersion: v1
kind: Service
metadata: {name: %[1]s}
spec:
  clusterIP: %[2]s
  selector: {app: %[1]s}
  ports: [{name: http, port: %[3]d, targetPort: %[3]d}]
---
`, role, bookinfoClusterIP(role), bookinfo.Port)
	}
	fmt.Fprintf(&b, `apiVersion: v1
kind: Pod
metadata: {name: bookinfo-client}
spec:
  nodeSelector: {kubernetes.io/hostname: %s}
  terminationGracePeriodSeconds: 1
  containers:
    - name: client
      image: %s
      imagePullPolicy: Never
      command: [/bin/sleep, "2147483647"]
`, nodes[bookinfoClientNode].name, bookinfoImage)
	return b.String()
}

// bookinfoPIDs are the application's processes on this host (their CPU is
// the report's app CPU).
func (c *twoNode) bookinfoPIDs() []int {
	var pids []int
	for _, pid := range processesRootedIn(c.dir) {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if strings.TrimSpace(string(comm)) == "nagare-bookinfo" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// nodeProxy is one node's HAProxy.
type nodeProxy struct {
	n   *tnode
	cmd *exec.Cmd
}

// nodeProxies starts the lab's node proxy (lab.NodeHAProxyConf) in each
// node's network namespace, where the agent's redirection delivers (the
// lab's node placement starts it the same way, in its node's namespace),
// and stops them at cleanup. With redirection off nothing reaches them.
func (c *twoNode) nodeProxies() []nodeProxy {
	conf := c.path("haproxy.cfg")
	c.fatal(os.WriteFile(conf, []byte(lab.NodeHAProxyConf()), 0o644))
	var out []nodeProxy
	for _, n := range c.nodes {
		cmd := c.start(n, n.netns+"-haproxy", "haproxy", "-db", "-f", conf)
		out = append(out, nodeProxy{n, cmd})
		c.t.Cleanup(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-done
			}
		})
	}
	for _, p := range out {
		c.waitFor("HAProxy on "+p.n.name, 10*time.Second, func() error {
			_, err := lab.NodeProxyRequests(context.Background(), "/run/netns/"+p.n.netns)
			return err
		})
	}
	return out
}

// proxyRequests sums the node proxies' request counters.
func (c *twoNode) proxyRequests(hp []nodeProxy) (int64, error) {
	var total int64
	for _, p := range hp {
		n, err := lab.NodeProxyRequests(context.Background(), "/run/netns/"+p.n.netns)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// setProxyRedirect turns transparent redirection to the node proxies on
// (or back off) as a user does: the agents' settings in the DaemonSet's
// ConfigMap, then `kubectl rollout restart` (an agent reads its settings
// at start; a restart keeps established connections). On: the agents'
// nagare_agent_proxy_up must be 1 (the proxy answers their health check).
func (c *twoNode) setProxyRedirect(base string, on bool) {
	c.t.Helper()
	cfg := base + "\n"
	if on {
		if strings.Contains("\n"+base, "\nserviceCIDR:") || strings.Contains("\n"+base, "\nproxyRedirect:") {
			c.t.Fatalf("the ConfigMap sets serviceCIDR or proxyRedirect already:\n%s", base)
		}
		// serviceCIDR: the proxy's own connections to the ClusterIPs
		// leave the node through the switch (docs/agent.md).
		cfg += fmt.Sprintf("serviceCIDR: %s\nproxyRedirect:\n  ports: [%d]\n  destinations: [%s]\n  healthAddr: %s\n  healthIntervalMS: 200\n",
			serviceCIDR, bookinfo.Port, bookinfoServiceCIDR, lab.NodeProxyHealthAddr)
	}
	patch, _ := json.Marshal(map[string]any{"data": map[string]string{"cluster.yaml": cfg}})
	start := time.Now()
	c.mustKubectl("-n", "kube-system", "patch", "configmap", "nagare-config", "--type=merge", "-p", string(patch))
	c.mustKubectl("-n", "kube-system", "rollout", "restart", "daemonset/nagare")
	c.mustKubectl("-n", "kube-system", "rollout", "status", "daemonset/nagare", "--timeout=4m")
	want := 0.0
	if on {
		want = 1
	}
	for _, n := range c.nodes {
		c.waitFor("agent on "+n.name+" after the restart", 2*time.Minute, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := c.agentStatus(ctx, n)
			if err == nil && (!st.Switch.Connected || len(st.Remotes) < 1) {
				err = fmt.Errorf("switch connected %v, remote nodes %d", st.Switch.Connected, len(st.Remotes))
			}
			if err != nil {
				return err
			}
			return lab.WaitAgentMetric(ctx, filepath.Join(n.dir, "fs/run/nagare/agent.sock"), "nagare_agent_proxy_up", want, 2*time.Second)
		})
	}
	c.logf("transparent redirection %v: agents restarted in %v", on, time.Since(start).Round(time.Millisecond))
}

// bookinfoRun is one test: the product page checked from the client (ten
// pages, 200 and 5500 bytes each), then one lab.MeasureMeshStep per
// connection count, wrk in the client pod (kubectl exec, pinned to CPU
// s.CPUs.Client by taskset); the node proxies' counters before and after.
func (c *twoNode) bookinfoRun(url string, m lab.MeasurementSpec, hp []nodeProxy, proxied bool, app []int) (*lab.MeshResult, error) {
	ctx := context.Background()
	res := &lab.MeshResult{ProxyRequests: -1}
	before, err := c.proxyRequests(hp)
	if err != nil {
		return res, err
	}
	// Ten pages; the first may wait for the Services after a restart.
	var sizes string
	deadline := time.Now().Add(30 * time.Second)
	for {
		sizes, err = c.kubectl("exec", "bookinfo-client", "--", "sh", "-c",
			fmt.Sprintf("for i in 1 2 3 4 5 6 7 8 9 10; do wget -q -T 2 -O - %s | wc -c || exit 1; done", url))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		return res, fmt.Errorf("product page from the client: %w", err)
	}
	for _, f := range strings.Fields(sizes) {
		n, _ := strconv.Atoi(f)
		if n != bookinfo.ProductPageBytes {
			return res, fmt.Errorf("product page from the client: sizes %q, want %d each", strings.Join(strings.Fields(sizes), " "), bookinfo.ProductPageBytes)
		}
		res.PageBytes = n
		res.Requests++
	}
	var procs []int
	if proxied {
		for _, p := range hp {
			procs = append(procs, p.cmd.Process.Pid)
		}
	}
	wrk := func(ctx context.Context, args []string) (string, error) {
		a := append([]string{filepath.Join(k8sDir(), "kubectl"), "--kubeconfig", c.kubecfg, "exec", "bookinfo-client", "--",
			"taskset", "-c", "0"}, args...)
		out, err := exec.CommandContext(ctx, a[0], a[1:]...).CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	for _, conns := range m.Connections {
		st, err := lab.MeasureMeshStep(ctx, conns, time.Duration(m.Duration), url, wrk, procs, app)
		if err != nil {
			return res, err
		}
		res.Requests += int64(st.Requests)
		c.logf("%d connections: %d requests, %.0f/s, p50 %.2f p90 %.2f p99 %.2f ms, %d errors; CPU s host %.2f proxies %.2f app %.2f",
			conns, st.Requests, st.ReqPerSec, st.P50Ms, st.P90Ms, st.P99Ms, st.Errors, st.HostCPUs, st.ProxyCPUs, st.AppCPUs)
		res.Steps = append(res.Steps, st)
		if st.Errors > 0 || st.Requests == 0 {
			return res, fmt.Errorf("%d connections: %d requests, %d errors", conns, st.Requests, st.Errors)
		}
	}
	after, err := c.proxyRequests(hp)
	if err != nil {
		return res, err
	}
	// Each page is 1 call to productpage, 1 to details, 1 to reviews and
	// ⅔ to ratings (v2, v3): 3.67 through a node proxy when redirected
	// (the proxy's own connections are the node's, never redirected), 0
	// without.
	per := float64(after-before) / float64(res.Requests)
	c.logf("the node proxies counted %d requests for %d product pages (%.2f per page)", after-before, res.Requests, per)
	if proxied {
		res.ProxyRequests = after - before
		if math.Abs(per-11.0/3) > 0.5 {
			return res, fmt.Errorf("node proxies: %.2f requests per page, want ≈ 3.67: the redirection is not on the application's path", per)
		}
	} else if after != before {
		return res, fmt.Errorf("node proxies counted %d requests with redirection off", after-before)
	}
	return res, nil
}
