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
//     (`kubectl rollout restart`), and back for the others.
//   - sidecar-in, sidecar-inout: the Deployments rolled out again with an
//     NGINX sidecar (the host's nginx and its libraries in the image, run as
//     uid 1337 with the lab's lab.SidecarNginxConf) and an init container that
//     installs the lab's capture rules (lab.SidecarRules, nft) in the pod, as
//     istio-init does.
//
// Placements alternate within each repetition (none node sidecar-in ...
// none node ...), so each is compared with the others in the same run.
//
// Never part of a default run (CI is at its budget):
//
//	make k8s-bookinfo   # flock /tmp/nagare-k8s.lock; NAGARE_K8S_BOOKINFO=1
//
// Output (results.json, samples.csv, summary.md, plots) in
// NAGARE_K8S_BOOKINFO_OUT (default /var/tmp/nagare-k8s-bookinfo).

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"

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
		switch p {
		case "none", "node", "sidecar-in", "sidecar-inout":
		default:
			t.Fatalf("NAGARE_K8S_BOOKINFO_PROXIES: %q: the real cluster has none, node, sidecar-in and sidecar-inout", p)
		}
	}
	for _, tool := range []string{"wrk", "haproxy", "nginx", "nft", "ldd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (make deps): %v", tool, err)
		}
	}
	started := time.Now()
	c := upTwoNode(t)
	c.bookinfoImage()
	c.apply(bookinfoConfigMaps())
	app, sidecars := c.deployBookinfo("")
	c.logf("Bookinfo up: %s", c.mustKubectl("get", "pods", "-o", "wide"))
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
	redirect, sidecar := false, ""
	for rep := 1; rep <= reps; rep++ {
		for _, proxy := range proxies {
			wantSidecar := "" // the pods' sidecars
			if strings.HasPrefix(proxy, "sidecar-") {
				wantSidecar = proxy
			}
			if want := proxy == "node"; want != redirect {
				c.setProxyRedirect(baseCfg, want)
				redirect = want
			}
			if wantSidecar != sidecar {
				app, sidecars = c.deployBookinfo(wantSidecar)
				sidecar = wantSidecar
			}
			smp := lab.Sample{DataPlane: bookinfoPlane, Measurement: m.Name, Kind: lab.KindBookinfo, Client: m.Client,
				Server: m.Server, Scope: "cross-node", Placement: lab.CrossCore, Load: "none", Rep: rep, Status: lab.StatusOK,
				Proxy: proxy, Start: time.Now()}
			smp.BackgroundBusyPct = lab.BackgroundBusyPct(context.Background())
			c.logf("rep %d/%d, proxies %s (bg busy %.0f %%)", rep, reps, proxy, smp.BackgroundBusyPct)
			var pl bookinfoProxies
			switch proxy {
			case "node":
				pl = bookinfoProxies{procs: hpPIDs(hp), count: func() (int64, error) { return c.proxyRequests(hp) }, perPage: [2]float64{3, 4}}
			case "sidecar-in", "sidecar-inout":
				// A page: productpage, details, reviews and r ratings
				// inbound (3 + r); outbound adds productpage's two calls
				// and reviews v2/v3's r (5 + 2r). r is the share of pages
				// served by reviews v2 and v3: ⅔ balanced per connection,
				// but the outbound sidecar's kept-alive upstream
				// connections each stay on one version, so anything in
				// [0, 1] (the lab saw 6.26-6.79 with inout).
				per := [2]float64{3, 4}
				if proxy == "sidecar-inout" {
					per = [2]float64{5, 7}
				}
				pl = bookinfoProxies{procs: sidecars, count: func() (int64, error) { return sidecarRequests(sidecars) }, perPage: per}
			default:
				pl = bookinfoProxies{count: func() (int64, error) { return c.proxyRequests(hp) }}
			}
			r, err := c.bookinfoRun(url, m, pl, app)
			smp.Mesh = r
			if err != nil {
				smp.Status, smp.Error = lab.StatusFailed, err.Error()
				t.Errorf("rep %d, proxies %s: %v", rep, proxy, err)
			}
			res.Samples = append(res.Samples, smp)
			// Written after each test: a later failure keeps these.
			res.WallSeconds = time.Since(started).Seconds()
			c.fatal(os.MkdirAll(out, 0o755))
			c.fatal(res.WriteFiles(out))
		}
	}
	if redirect {
		c.setProxyRedirect(baseCfg, false)
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
// nagare-bookinfo, the host's wrk (the client pod's load tool), nginx
// (the sidecar) and nft (the sidecars' capture rules), each with its
// shared libraries, busybox for sh, sleep, taskset and wget; and imports
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
	nginx, err := exec.LookPath("nginx")
	c.fatal(err)
	nft, err := exec.LookPath("nft")
	c.fatal(err)
	c.fatal(oci.AddDynamic(files, wrk, nginx, nft))
	tar := c.path("bookinfo-image.tar")
	c.fatal(oci.Build(tar, bookinfoImage, files, []string{"/usr/local/bin/nagare-bookinfo"}))
	for _, n := range c.nodes {
		if out, err := run("ctr", "--address", n.sock, "-n", "k8s.io", "images", "import", tar); err != nil {
			c.t.Fatalf("import %s into %s: %v %s", bookinfoImage, n.name, err, out)
		}
	}
	c.logf("%s imported on both nodes", bookinfoImage)
}

// bookinfoConfigMaps are the sidecars' settings, one ConfigMap per
// placement: the lab's NGINX configuration and capture rules.
func bookinfoConfigMaps() string {
	ips := map[string]string{}
	for _, r := range bookinfo.Roles {
		ips[r] = bookinfoClusterIP(r)
	}
	var b strings.Builder
	for _, out := range []bool{false, true} {
		name := "sidecar-in"
		if out {
			name = "sidecar-inout"
		}
		cm := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]string{"name": "bookinfo-" + name},
			"data": map[string]string{"nginx.conf": lab.SidecarNginxConf("/tmp", ips, out), "rules.nft": lab.SidecarRules(out)}}
		j, _ := json.Marshal(cm)
		b.Write(j)
		b.WriteString("\n---\n")
	}
	return b.String()
}

// bookinfoManifest: a Deployment per service (reviews in three, one per
// version, behind one Service), each pinned to its node, a Service per
// role at its fixed ClusterIP, and the client pod. With sidecar
// (sidecar-in, sidecar-inout) each serving pod also has the sidecar and
// the init container that captures its traffic into it.
func bookinfoManifest(nodes []*tnode, sidecar string) string {
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
    metadata: {labels: {app: %[2]s, deploy: %[1]s}, annotations: {nagare.io/bookinfo-proxies: %[8]q}}
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
%[7]s---
`, d.name, d.role, nodes[d.node].name, bookinfoImage, q, bookinfo.Port, sidecarSpec(sidecar), cmp.Or(sidecar, "none"))
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

// sidecarSpec is the pod spec's part for the sidecar placement (""
// none): istio-init's role played by nft in an init container with
// NET_ADMIN, the proxy NGINX as uid 1337 with its stub_status on
// loopback (the request counter), both from the placement's ConfigMap.
func sidecarSpec(sidecar string) string {
	if sidecar == "" {
		return ""
	}
	return fmt.Sprintf(`        - name: proxy
          image: %[1]s
          imagePullPolicy: Never
          command: [/usr/sbin/nginx, -p, /tmp, -c, /etc/sidecar/nginx.conf, -e, stderr]
          securityContext: {runAsUser: %[2]d, runAsGroup: %[2]d}
          volumeMounts: [{name: sidecar, mountPath: /etc/sidecar}]
      initContainers:
        - name: capture
          image: %[1]s
          imagePullPolicy: Never
          command: [/usr/sbin/nft, -f, /etc/sidecar/rules.nft]
          securityContext: {runAsUser: 0, capabilities: {add: [NET_ADMIN]}}
          volumeMounts: [{name: sidecar, mountPath: /etc/sidecar}]
      volumes: [{name: sidecar, configMap: {name: bookinfo-%[3]s}}]
`, bookinfoImage, lab.SidecarUID, sidecar)
}

// deployBookinfo applies the application (with the sidecar placement's
// pods, "" none) and waits until every Deployment has rolled out, the old
// pods are gone and the client runs; it returns the application's and the
// sidecars' processes. TIME_WAIT reuse in the application's pods, as the
// lab sets it: every call is a new connection (as Bookinfo's), and it is
// not a sysctl Kubernetes lets a pod set without --allowed-unsafe-sysctls.
func (c *twoNode) deployBookinfo(sidecar string) (app, sidecars []int) {
	c.t.Helper()
	start := time.Now()
	c.apply(bookinfoManifest(c.nodes, sidecar))
	for _, d := range bookinfoPlacement {
		c.mustKubectl("rollout", "status", "deploy/"+d.name, "--timeout=4m")
	}
	c.waitFor("the client pod Ready", 2*time.Minute, func() error {
		_, err := c.kubectl("wait", "--for=condition=Ready", "pod/bookinfo-client", "--timeout=5s")
		return err
	})
	wantSidecars := 0
	if sidecar != "" {
		wantSidecars = len(bookinfoPlacement)
	}
	c.waitFor("the old pods gone", 2*time.Minute, func() error {
		app, sidecars = c.containerPIDs("nagare-bookinfo"), c.containerPIDs("nginx")
		if len(app) != len(bookinfoPlacement) || len(sidecars) != wantSidecars {
			return fmt.Errorf("nagare-bookinfo processes %v, nginx %v: want %d and %d", app, sidecars, len(bookinfoPlacement), wantSidecars)
		}
		return nil
	})
	for _, pid := range app {
		if o, err := run("nsenter", fmt.Sprintf("--net=/proc/%d/ns/net", pid), "sysctl", "-qw", "net.ipv4.tcp_tw_reuse=1"); err != nil {
			c.t.Fatal(o, err)
		}
	}
	c.logf("Bookinfo with proxies %q rolled out in %v", sidecar, time.Since(start).Round(time.Millisecond))
	return app, sidecars
}

// containerPIDs are the cluster's container processes named comm on this
// host (nagare-bookinfo: the report's app CPU; nginx: the sidecars'): in
// a cgroup under a kubelet's cgroupRoot (their root directory is a mount
// of the node's mount namespace, not visible from here).
func (c *twoNode) containerPIDs(name string) []int {
	return procPIDs(func(pid int) bool {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if strings.TrimSpace(string(comm)) != name {
			return false
		}
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		for _, n := range c.nodes {
			if strings.Contains(string(cg), n.cgroup+"/") {
				return true
			}
		}
		return false
	})
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
		c.t.Cleanup(func() { stopGroup(cmd, 10*time.Second) })
	}
	for _, p := range out {
		c.waitFor("HAProxy on "+p.n.name, 10*time.Second, func() error {
			_, err := lab.NodeProxyRequests(context.Background(), "/run/netns/"+p.n.netns)
			return err
		})
	}
	return out
}

func hpPIDs(hp []nodeProxy) []int {
	var out []int
	for _, p := range hp {
		out = append(out, p.cmd.Process.Pid)
	}
	return out
}

// sidecarRequests sums the sidecars' request counters.
func sidecarRequests(pids []int) (int64, error) {
	var total int64
	for _, pid := range pids {
		n, err := lab.SidecarRequests(context.Background(), fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			return 0, fmt.Errorf("sidecar %d: %w", pid, err)
		}
		total += n
	}
	return total, nil
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

// bookinfoProxies is a placement's proxies as a test sees them: their
// processes (proxy CPU), their request counter, and the range of requests
// each product page must cost them (zero: none; the node proxies' counter
// then must not move).
type bookinfoProxies struct {
	procs   []int
	count   func() (int64, error)
	perPage [2]float64
}

// bookinfoRun is one test: the product page checked from the client pod
// (lab.CheckProductPage: 200 and 5500 bytes), then one lab.MeasureMeshStep per
// connection count, wrk in the client pod (kubectl exec, pinned to CPU 0
// by taskset); the proxies' counters before and after.
func (c *twoNode) bookinfoRun(url string, m lab.MeasurementSpec, pl bookinfoProxies, app []int) (*lab.MeshResult, error) {
	ctx := context.Background()
	res := &lab.MeshResult{ProxyRequests: -1}
	before, err := pl.count()
	if err != nil {
		return res, err
	}
	// Ten pages from the client pod's namespace (the lab's check); the
	// first may wait for the Services after a restart.
	client := c.containerPIDs("sleep")
	if len(client) != 1 {
		return res, fmt.Errorf("the client pod's process: %v", client)
	}
	n, size, err := lab.CheckProductPage(ctx, fmt.Sprintf("/proc/%d/ns/net", client[0]), url, 30*time.Second)
	res.Requests, res.PageBytes = n, size
	if err != nil {
		return res, err
	}
	wrkPath, err := exec.LookPath("wrk") // where bookinfoImage put it: the image sets no PATH
	if err != nil {
		return res, err
	}
	wrk := func(ctx context.Context, args []string) (string, error) {
		a := append([]string{filepath.Join(k8sDir(), "kubectl"), "--kubeconfig", c.kubecfg, "exec", "bookinfo-client", "--",
			"taskset", "-c", "0", wrkPath}, args[1:]...)
		out, err := exec.CommandContext(ctx, a[0], a[1:]...).CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	for _, conns := range m.Connections {
		st, err := lab.MeasureMeshStep(ctx, conns, time.Duration(m.Duration), url, wrk, pl.procs, app)
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
	after, err := pl.count()
	if err != nil {
		return res, err
	}
	per := float64(after-before) / float64(res.Requests)
	c.logf("the proxies counted %d requests for %d product pages (%.2f per page, want %.0f-%.0f)", after-before, res.Requests, per, pl.perPage[0], pl.perPage[1])
	if pl.perPage[1] > 0 {
		res.ProxyRequests = after - before
		// Slack: each read of a sidecar's stub_status counts itself.
		if per < pl.perPage[0]-0.05 || per > pl.perPage[1]+0.05 {
			return res, fmt.Errorf("proxies: %.2f requests per page, want %.0f-%.0f: they are not on the application's path", per, pl.perPage[0], pl.perPage[1])
		}
	} else if after != before {
		return res, fmt.Errorf("the node proxies counted %d requests without redirection", after-before)
	}
	return res, nil
}

// TestBookinfoManifest checks the study's manifests without a cluster
// (field names and shapes, strictly decoded into the API types): a typo
// would otherwise show only after a two-node bring-up.
func TestBookinfoManifest(t *testing.T) {
	nodes := []*tnode{{name: "n1"}, {name: "n2"}}
	for _, sidecar := range []string{"", "sidecar-in", "sidecar-inout"} {
		kinds := map[string]int{}
		for _, doc := range strings.Split(bookinfoConfigMaps()+bookinfoManifest(nodes, sidecar), "\n---\n") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var meta metav1.TypeMeta
			if err := sigsyaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%v:\n%s", err, doc)
			}
			var obj any
			switch meta.Kind {
			case "Deployment":
				obj = &appsv1.Deployment{}
			case "Service":
				obj = &corev1.Service{}
			case "Pod":
				obj = &corev1.Pod{}
			case "ConfigMap":
				obj = &corev1.ConfigMap{}
			default:
				t.Fatalf("kind %q:\n%s", meta.Kind, doc)
			}
			if err := sigsyaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s: %v:\n%s", meta.Kind, err, doc)
			}
			kinds[meta.Kind]++
			if d, ok := obj.(*appsv1.Deployment); ok {
				spec := d.Spec.Template.Spec
				want := 1
				if sidecar != "" {
					want = 2
					if len(spec.InitContainers) != 1 || len(spec.Volumes) != 1 || spec.Volumes[0].ConfigMap.Name != "bookinfo-"+sidecar {
						t.Errorf("%s with %s: init containers %d, volumes %+v", d.Name, sidecar, len(spec.InitContainers), spec.Volumes)
					}
				}
				if len(spec.Containers) != want {
					t.Errorf("%s with %q: %d containers, want %d", d.Name, sidecar, len(spec.Containers), want)
				}
			}
		}
		if kinds["Deployment"] != len(bookinfoPlacement) || kinds["Service"] != len(bookinfo.Roles) || kinds["Pod"] != 1 || kinds["ConfigMap"] != 2 {
			t.Errorf("proxies %q: objects %v", sidecar, kinds)
		}
	}
}
