package lab

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Measurements through Services: the same tests as pod to pod, but to a
// ClusterIP (MeasurementSpec.Via), connections per second through one
// (wrk against nginx), and the cost of many Services (first-packet
// latency and programming time at 1, 1000, 10 000 Services). The Service
// and EndpointSlice objects are made with client-go in the run's API
// server (kubeapi.go); each data plane's Service proxy (nagare-agent
// --kubernetes, kube-proxy) reads them from there.

// Measurement kinds of Services.
const (
	// KindConnRate is HTTP connections per second (wrk, one request per
	// connection, "Connection: close") against nginx in the server pod.
	KindConnRate = "conn-rate"
	// KindServiceScale programs MeasurementSpec.Services Services in turn
	// and, at each count, times how long the new ones took to work
	// (objects to datapath) and a new connection's first round trip.
	KindServiceScale = "service-scale"
)

// Targets of a measurement (MeasurementSpec.Via).
const (
	ViaPod       = "pod"
	ViaClusterIP = "clusterip"
	// ViaNodePort sends to the node's address and the Service's
	// NodePort (a NodePort Service), from the client pod.
	ViaNodePort = "nodeport"
)

// ServicePlane is a data plane with a Service proxy fed by the run's API
// server (Topology.KubeAPI). Other planes are not applicable to the
// measurements through Services.
type ServicePlane interface {
	// NodePortAddress is the node's address a pod sends NodePort
	// traffic to, or an error (wrapping ErrNotAvailable) saying why this
	// plane has no NodePort in the lab yet; its NodePort tests are then
	// skipped with that reason.
	NodePortAddress(t *Topology, n *Node) (string, error)
}

// throughService says whether m needs a Service proxy.
func (m MeasurementSpec) throughService() bool {
	return m.Via == ViaClusterIP || m.Via == ViaNodePort || m.Kind == KindServiceScale
}

// serviceTests keeps, of a data plane's tests, those it can run: bookinfo
// tests need a MeshPlane (others are not applicable; one that cannot
// carry them here gets skipped samples), tests
// through Services need a ServicePlane (others are not applicable), and
// NodePort tests one with NodePorts (others get skipped samples, with
// the plane's reason).
func serviceTests(s *Scenario, dp DataPlane, tests []test) (keep []test, skipped []Sample) {
	sp, isSP := dp.(ServicePlane)
	mp, isMP := dp.(MeshPlane)
	for _, tc := range tests {
		switch {
		case tc.m.Kind == KindBookinfo && !isMP:
			continue
		case tc.m.Kind == KindBookinfo:
			if err := mp.MeshServices(); err != nil {
				skipped = append(skipped, newSample(s, dp.Name(), tc, 0, StatusSkipped, err.Error()))
				continue
			}
		case !tc.m.throughService():
		case !isSP:
			continue
		case tc.m.Via == ViaNodePort:
			if _, err := sp.NodePortAddress(nil, nil); err != nil {
				skipped = append(skipped, newSample(s, dp.Name(), tc, 0, StatusSkipped, err.Error()))
				continue
			}
		}
		keep = append(keep, tc)
	}
	return keep, skipped
}

// serviceTarget is where a measurement through a Service sends: the
// measured port's address, and the probe port's.
type serviceTarget struct {
	host, port string
	probe      string // host:port
}

// Ports of the Service measurements, in the server pod.
const (
	// httpPort is nginx's (conn-rate).
	httpPort = 80
	// probePort is the run's probe listener (the lab's own process,
	// accepting and closing): every lab Service has it, so a connect
	// through the Service says its endpoints are programmed, whatever the
	// measured port's protocol; service-scale times connects to it.
	probePort = 5999
)

// defaultConns is wrk's connection count unless MeasurementSpec.Conns.
const defaultConns = 16

// usesServices says whether the scenario measures through Services.
func (s *Scenario) usesServices() bool {
	for _, m := range s.Measurements {
		if m.throughService() {
			return true
		}
	}
	return false
}

// validateServices checks a measurement's Service fields.
func validateServices(m MeasurementSpec, where string, bad func(string, ...any)) {
	switch m.Via {
	case "", ViaPod, ViaClusterIP, ViaNodePort:
	default:
		bad("%s: via %q, want pod, clusterip or nodeport", where, m.Via)
	}
	if (m.Via == ViaClusterIP || m.Via == ViaNodePort) && m.Client == m.Server {
		bad("%s: via %s needs a client other than the server", where, m.Via)
	}
	if m.Via != "" && m.Via != ViaPod && m.Kind != KindRTT && m.Kind != KindTCP && m.Kind != KindConnRate {
		bad("%s: via %s: for rtt, tcp and conn-rate", where, m.Via)
	}
	if m.Streams != 0 && (m.Kind != KindTCP || m.Streams < 1 || m.Streams > 128) {
		bad("%s: streams %d: for tcp, 1-128", where, m.Streams)
	}
	if m.Conns != 0 && (m.Kind != KindConnRate || m.Conns < 1 || m.Conns > 4096) {
		bad("%s: conns %d: for conn-rate, 1-4096", where, m.Conns)
	}
	if m.Kind == KindServiceScale {
		if len(m.Services) == 0 {
			bad("%s: services: list the Service counts to step through, e.g. [1, 1000, 10000]", where)
		}
		for _, n := range m.Services {
			if n < 1 || n > maxServices {
				bad("%s: services: %d, want 1-%d", where, n, maxServices)
			}
		}
	} else if len(m.Services) > 0 {
		bad("%s: services: for service-scale only", where)
	}
	if m.Baseline != "" && m.Via != ViaClusterIP && m.Via != ViaNodePort {
		bad("%s: baseline is for measurements through a Service (via clusterip or nodeport)", where)
	}
}

// maxServices bounds a service-scale step (the ClusterIP range is a /16).
const maxServices = 30000

// labServiceName is the Service of measurement m.
func labServiceName(m string) string {
	return "lab-" + strings.ToLower(regexp.MustCompile(`[^a-zA-Z0-9]+`).ReplaceAllString(m, "-"))
}

// servicePorts are the ports of measurement m's Service: the measured
// one (its protocol) and the probe port.
func (r *planeRun) servicePorts(m MeasurementSpec) []corev1.ServicePort {
	probe := corev1.ServicePort{Name: "probe", Protocol: corev1.ProtocolTCP, Port: probePort, TargetPort: intstr.FromInt32(probePort)}
	idx := r.measurementIndex(m.Name)
	var port int32
	proto := corev1.ProtocolTCP
	switch m.Kind {
	case KindRTT:
		port, proto = int32(sockperfBasePort+idx), corev1.ProtocolUDP
	case KindTCP:
		port = int32(iperfBasePort + idx)
	case KindConnRate:
		port = httpPort
	default:
		return []corev1.ServicePort{probe}
	}
	return []corev1.ServicePort{{Name: "measured", Protocol: proto, Port: port, TargetPort: intstr.FromInt32(port)}, probe}
}

// serviceObjects are a ClusterIP Service (address left to the API
// server) and its EndpointSlice: one ready endpoint, the server pod.
func serviceObjects(name, endpoint string, typ corev1.ServiceType, ports []corev1.ServicePort) (*corev1.Service, *discoveryv1.EndpointSlice) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.ServiceSpec{Type: typ, Ports: ports}}
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-lab", Namespace: metav1.NamespaceDefault,
		Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "nagare-lab"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{endpoint}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}}}
	for _, p := range ports {
		es.Ports = append(es.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Protocol: ptr.To(p.Protocol), Port: ptr.To(p.TargetPort.IntVal)})
	}
	return svc, es
}

// createService makes a Service and its EndpointSlice and returns the
// Service as the API server completed it (ClusterIP, NodePorts).
func (a *kubeAPI) createService(ctx context.Context, name, endpoint string, typ corev1.ServiceType, ports []corev1.ServicePort) (*corev1.Service, error) {
	svc, es := serviceObjects(name, endpoint, typ, ports)
	got, err := a.Client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", name, err)
	}
	if _, err := a.Client.DiscoveryV1().EndpointSlices(es.Namespace).Create(ctx, es, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("endpointslice of %s: %w", name, err)
	}
	return got, nil
}

// deleteService removes a Service and its EndpointSlice.
func (a *kubeAPI) deleteService(ctx context.Context, name string) error {
	err := a.Client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Delete(ctx, name+"-lab", metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	err = a.Client.CoreV1().Services(metav1.NamespaceDefault).Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		err = nil
	}
	return err
}

// setupServices starts the probe listener in every server pod and makes
// each measurement's Service, then waits until every one answers
// through it from its client: the data plane's proxy has them.
func (r *planeRun) setupServices(ctx context.Context) error {
	t := r.topo
	sp, ok := r.dp.(ServicePlane)
	if !ok || t.kubeAPI == nil {
		return fmt.Errorf("%s runs no Service proxy", r.dp.Name())
	}
	r.svc = map[string]serviceTarget{}
	listening := map[string]bool{}
	for _, tc := range r.tests {
		m := tc.m
		if !m.throughService() {
			continue
		}
		if _, done := r.svc[m.Name]; done {
			continue
		}
		server := t.Pod(m.Server)
		if !listening[server.Name] {
			if err := startProbeListener(t, server); err != nil {
				return err
			}
			listening[server.Name] = true
		}
		name := labServiceName(m.Name)
		typ := corev1.ServiceTypeClusterIP
		if m.Via == ViaNodePort {
			typ = corev1.ServiceTypeNodePort
		}
		ports := r.servicePorts(m)
		svc, err := t.kubeAPI.createService(ctx, name, server.IP, typ, ports)
		if err != nil {
			return err
		}
		st := serviceTarget{host: svc.Spec.ClusterIP, port: strconv.Itoa(int(ports[0].Port))}
		st.probe = net.JoinHostPort(st.host, strconv.Itoa(probePort))
		if m.Via == ViaNodePort {
			if st.host, err = sp.NodePortAddress(t, server.Node); err != nil {
				return err
			}
			for _, p := range svc.Spec.Ports {
				if p.Name == "probe" {
					st.probe = net.JoinHostPort(st.host, strconv.Itoa(int(p.NodePort)))
				} else {
					st.port = strconv.Itoa(int(p.NodePort))
				}
			}
		}
		r.svc[m.Name] = st
		r.sh.logf("# Service default/%s (%s): %s:%s → %s (%s)", name, typ, st.host, st.port, server.Name, server.IP)
		start := time.Now()
		if err := waitServing(ctx, t.Pod(m.Client), []string{st.probe}, 120*time.Second); err != nil {
			return fmt.Errorf("service %s (%s) from %s: %w", name, st.probe, m.Client, err)
		}
		r.sh.logf("#   answers from %s after %s", m.Client, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// startProbeListener accepts (and closes) connections on the pod's
// probePort, from this process, until the run's cleanup.
func startProbeListener(t *Topology, pod *Pod) error {
	l, err := acceptAndClose(pod, probePort)
	if err != nil {
		return fmt.Errorf("probe listener in %s: %w", pod.Name, err)
	}
	t.Cleanup.Add(fmt.Sprintf("close probe listener %s:%d", pod.IP, probePort), l.Close)
	return nil
}

// acceptAndClose listens on pod's TCP port from this process and
// accepts and closes every connection until the listener is closed.
func acceptAndClose(pod *Pod, port int) (net.Listener, error) {
	var l net.Listener
	err := ns.WithNetNSPath(netnsPath(pod.NS), func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp", net.JoinHostPort(pod.IP, strconv.Itoa(port)))
		return err
	})
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l, nil
}

func netnsPath(name string) string { return filepath.Join("/var/run/netns", name) }

// waitServing connects from pod to every address (host:port) until each
// connect succeeds (a refused or unanswered one is retried), for at
// most timeout.
func waitServing(ctx context.Context, pod *Pod, addrs []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	left := append([]string(nil), addrs...)
	var last error
	err := ns.WithNetNSPath(netnsPath(pod.NS), func(ns.NetNS) error {
		for len(left) > 0 {
			var still []string
			for _, addr := range left {
				c, err := (&net.Dialer{Timeout: 200 * time.Millisecond}).DialContext(ctx, "tcp", addr)
				if err != nil {
					still, last = append(still, addr), err
					continue
				}
				c.Close()
			}
			left = still
			if len(left) == 0 {
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d of %d not answering after %s (last: %v)", len(left), len(addrs), timeout, last)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	})
	return err
}

// ConnRateResult is a wrk run: one HTTP request per connection.
type ConnRateResult struct {
	// ConnPerSec is wrk's requests/s: each request is a new connection.
	ConnPerSec float64 `json:"conn_per_s"`
	Requests   int     `json:"requests"`
	// Errors are wrk's socket errors (connect, read, write, timeout)
	// and non-2xx/3xx responses.
	Errors   int     `json:"errors"`
	LatP50Us float64 `json:"lat_p50_us"`
	LatP90Us float64 `json:"lat_p90_us,omitempty"`
	LatP99Us float64 `json:"lat_p99_us"`
}

var (
	wrkRateRE  = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkReqRE   = regexp.MustCompile(`(\d+) requests in `)
	wrkSockRE  = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	wrkNon2RE  = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	wrkPctRE   = regexp.MustCompile(`(?m)^\s+(50|90|99)%\s+([0-9.]+)(us|ms|s)\s*$`)
	wrkUnitsUs = map[string]float64{"us": 1, "ms": 1e3, "s": 1e6}
)

// ParseWrk parses wrk's report (run with --latency).
func ParseWrk(out string) (ConnRateResult, error) {
	var r ConnRateResult
	m := wrkRateRE.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("wrk: no Requests/sec line in output: %s", lastLines(out, 3))
	}
	r.ConnPerSec, _ = strconv.ParseFloat(m[1], 64)
	if m := wrkReqRE.FindStringSubmatch(out); m != nil {
		r.Requests, _ = strconv.Atoi(m[1])
	}
	if m := wrkSockRE.FindStringSubmatch(out); m != nil {
		for _, v := range m[1:] {
			n, _ := strconv.Atoi(v)
			r.Errors += n
		}
	}
	if m := wrkNon2RE.FindStringSubmatch(out); m != nil {
		n, _ := strconv.Atoi(m[1])
		r.Errors += n
	}
	for _, p := range wrkPctRE.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(p[2], 64)
		v *= wrkUnitsUs[p[3]]
		switch p[1] {
		case "50":
			r.LatP50Us = v
		case "90":
			r.LatP90Us = v
		default:
			r.LatP99Us = v
		}
	}
	if r.Requests == 0 {
		return r, fmt.Errorf("wrk: no request completed: %s", lastLines(out, 3))
	}
	return r, nil
}

// nginxPreamble starts the configuration of a one-process nginx (in the
// foreground, no master: its PID is all of its CPU) keeping its files in
// dir, up to the opened http block.
func nginxPreamble(dir string) string {
	return fmt.Sprintf(`worker_processes 1;
daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log stderr warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path %[1]s/body; proxy_temp_path %[1]s/proxy; fastcgi_temp_path %[1]s/fcgi;
  uwsgi_temp_path %[1]s/uwsgi; scgi_temp_path %[1]s/scgi;
`, dir)
}

// nginxConf is a one-process nginx answering "ok" to everything on
// ip:port, closing each connection after its response.
func nginxConf(dir, ip string, port int) string {
	return nginxPreamble(dir) + fmt.Sprintf(`  keepalive_timeout 0;
  server { listen %[1]s:%[2]d backlog=8192; location / { return 200 "ok\n"; } }
}
`, ip, port)
}

// startNginx starts nginx in the server pod, pinned to cpu, and waits
// until it accepts connections.
func (r *planeRun) startNginx(ctx context.Context, server *Pod, cpu string) (*Proc, error) {
	dir := filepath.Join(r.topo.TempDir, "nginx-"+server.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxConf(dir, server.IP, httpPort)), 0o644); err != nil {
		return nil, err
	}
	p, err := r.sh.Start(r.topo.Cleanup, "", "ip", "netns", "exec", server.NS, "taskset", "-c", cpu,
		"nginx", "-p", dir, "-c", conf, "-e", "stderr")
	if err != nil {
		return nil, err
	}
	if err := waitListening(ctx, server, net.JoinHostPort(server.IP, strconv.Itoa(httpPort)), p, 10*time.Second); err != nil {
		p.Stop()
		return nil, fmt.Errorf("nginx: %w", err)
	}
	return p, nil
}

// ScaleStep is one Service count of a service-scale measurement.
type ScaleStep struct {
	// Services is how many Services the step programs: the measured one
	// and Services-1 fillers (the API server's own "kubernetes" Service
	// aside).
	Services int `json:"services"`
	// Changed is how many fillers the step created (> 0) or deleted (< 0).
	Changed int `json:"changed"`
	// APISeconds is how long the API server took to take the objects
	// (Service + EndpointSlice each, 16 writers).
	APISeconds float64 `json:"api_s"`
	// ProgrammedSeconds is from the step's first write to every probed
	// new Service answering through its ClusterIP (objects to datapath);
	// 0 for a step that only deletes.
	ProgrammedSeconds float64 `json:"programmed_s,omitempty"`
	// First-packet latency: a new TCP connection's connect() time (SYN
	// out, SYN-ACK back) to the measured Service's ClusterIP, from the
	// client pod, over Connects connections.
	Connects int     `json:"connects"`
	Failed   int     `json:"failed"`
	P50Us    float64 `json:"first_p50_us"`
	P99Us    float64 `json:"first_p99_us"`
}

// scaleWriters is how many goroutines write the fillers.
const scaleWriters = 16

// firstPacketConnects bounds the connects per step (fewer if the
// measurement's duration runs out first).
const firstPacketConnects = 2000

func fillerName(i int) string { return fmt.Sprintf("fill-%05d", i) }

// runServiceScale steps through m.Services: each step creates or deletes
// fillers (Services to the server pod's probe port) to reach the count,
// times their programming, then times new connections to the measured
// Service.
func (r *planeRun) runServiceScale(ctx context.Context, tests []test) []Sample {
	var out []Sample
	for _, tc := range tests {
		r.bar.Describe(fmt.Sprintf("rep %d/%d %-18s %s", r.rep, r.s.Reps, r.dp.Name(), tc.m.Name))
		s := r.sample(tc, StatusOK, "")
		s.Start = time.Now()
		steps, err := r.serviceScale(ctx, tc.m)
		s.Scale = steps
		if err != nil {
			s.Status, s.Error = StatusFailed, err.Error()
		}
		out = append(out, s)
		r.bar.Add(1)
	}
	return out
}

func (r *planeRun) serviceScale(ctx context.Context, m MeasurementSpec) ([]ScaleStep, error) {
	t := r.topo
	api := t.kubeAPI
	client, server := t.Pod(m.Client), t.Pod(m.Server)
	target := r.svc[m.Name].probe
	fillers := 0 // fill-00001 .. fill-<fillers> exist
	ports := []corev1.ServicePort{{Name: "probe", Protocol: corev1.ProtocolTCP, Port: probePort, TargetPort: intstr.FromInt32(probePort)}}
	var steps []ScaleStep
	// The fillers are gone with the API server; deleting them one by one
	// at teardown would only cost time.
	for _, n := range m.Services {
		want := n - 1
		st := ScaleStep{Services: n, Changed: want - fillers}
		start := time.Now()
		ips := make([]string, want+1)
		var err error
		if want > fillers {
			err = parallel(ctx, fillers+1, want, func(i int) error {
				svc, err := api.createService(ctx, fillerName(i), server.IP, corev1.ServiceTypeClusterIP, ports)
				if err == nil {
					ips[i] = net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(probePort))
				}
				return err
			})
		} else if want < fillers {
			err = parallel(ctx, want+1, fillers, func(i int) error { return api.deleteService(ctx, fillerName(i)) })
		}
		st.APISeconds = time.Since(start).Seconds()
		if err != nil {
			return steps, fmt.Errorf("%d Services: %w", n, err)
		}
		r.sh.logf("# %s: %+d Services (now %d) written in %.2f s", m.Name, st.Changed, n, st.APISeconds)
		if want > fillers {
			// The last written and a spread of the others must answer.
			probe := []string{ips[want]}
			for k := 1; k <= 8; k++ {
				if i := fillers + k*(want-fillers)/9; i > fillers {
					probe = append(probe, ips[i])
				}
			}
			if err := waitServing(ctx, client, probe, 5*time.Minute); err != nil {
				return steps, fmt.Errorf("%d Services not programmed: %w", n, err)
			}
			st.ProgrammedSeconds = time.Since(start).Seconds()
			r.sh.logf("#   programmed (probed %d of them answer from %s) %.2f s after the first write", len(probe), client.Name, st.ProgrammedSeconds)
		}
		fillers = want
		lat, failed, err := firstPackets(ctx, client, target, time.Duration(m.Duration), firstPacketConnects)
		if err != nil {
			return steps, err
		}
		st.Connects, st.Failed = len(lat), failed
		if len(lat) > 0 {
			st.P50Us, st.P99Us = percentile(lat, 50), percentile(lat, 99)
		}
		r.sh.logf("#   first packet at %d Services: %d connects (%d failed), p50 %.1f µs, p99 %.1f µs", n, st.Connects, failed, st.P50Us, st.P99Us)
		steps = append(steps, st)
	}
	return steps, nil
}

// parallel runs f(lo..hi) on scaleWriters goroutines; the first error
// stops the rest.
func parallel(ctx context.Context, lo, hi int, f func(i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for w := 0; w < scaleWriters; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					cancel()
				}
			}
		}()
	}
feed:
	for i := lo; i <= hi; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		return errs[0]
	}
	return ctx.Err()
}

// firstPackets times new TCP connections to addr from pod's namespace,
// one at a time, for d or n connections: each connect() is one SYN and
// its SYN-ACK, the connection's first round trip (a new conntrack entry,
// the Service's NAT decision). Each is reset right after (no TIME_WAIT
// piling up). A connect that fails or takes over a second counts as
// failed.
func firstPackets(ctx context.Context, pod *Pod, addr string, d time.Duration, n int) (lat []float64, failed int, err error) {
	err = ns.WithNetNSPath(netnsPath(pod.NS), func(ns.NetNS) error {
		end := time.Now().Add(d)
		dialer := &net.Dialer{Timeout: time.Second}
		for len(lat)+failed < n && time.Now().Before(end) && ctx.Err() == nil {
			t0 := time.Now()
			c, err := dialer.DialContext(ctx, "tcp", addr)
			el := time.Since(t0)
			if err != nil {
				failed++
				continue
			}
			lat = append(lat, float64(el.Nanoseconds())/1e3)
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			c.Close()
		}
		return ctx.Err()
	})
	return lat, failed, err
}

// percentile is the p-th percentile (nearest rank) of v.
func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	k := int(p/100*float64(len(s))+0.5) - 1
	return s[min(max(k, 0), len(s)-1)]
}
