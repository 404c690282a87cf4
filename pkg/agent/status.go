package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nagare-net/nagare/pkg/agent/cniserver"
	"github.com/nagare-net/nagare/pkg/agent/pipeline"
	"github.com/nagare-net/nagare/pkg/agent/proxy"
	"github.com/nagare-net/nagare/pkg/agent/snat"
)

// Status is what `nagarectl agent` prints (GET /status on the agent socket).
type Status struct {
	Node        string                `json:"node"`
	PodCIDR     string                `json:"podCIDR"`
	Gateway     string                `json:"gateway"`
	GatewayMAC  string                `json:"gatewayMAC"`
	GatewayPort uint32                `json:"gatewayPort"`
	Underlay    string                `json:"underlay"`
	Source      string                `json:"source"` // cluster-file or kubernetes
	Uptime      string                `json:"uptime"`
	Switch      SwitchStatus          `json:"switch"`
	IPAM        IPAMStatus            `json:"ipam"`
	Pods        []PodStatus           `json:"pods"`
	Remotes     []RemoteState         `json:"remotes"`
	Tables      []pipeline.TableCount `json:"tables,omitempty"`
	Masquerade  []string              `json:"masquerade,omitempty"` // the node's nftables rules of the agent (package snat): masquerade, the tunnel's notrack
	// NodePorts says what the nagare-nodeport table steers into the switch.
	NodePorts string     `json:"nodePorts,omitempty"`
	Mode      string     `json:"mode"`          // host or dpu
	DPU       *DPUStatus `json:"dpu,omitempty"` // DPU mode: control network, lease, direct forward
	// Services is the desired service state (pkg/agent/proxy); not yet
	// programmed as flows.
	Services []ServiceStatus `json:"services,omitempty"`
	// ServicesPending is how many Services changed in the desired state
	// and are not yet programmed in the switch (they are coalesced for
	// 100 ms, then programmed together).
	ServicesPending int `json:"servicesPending,omitempty"`
	// ServiceProblems is the bad input refused or skipped, one line each.
	ServiceProblems []string `json:"serviceProblems,omitempty"`
	// Policies are the realized NetworkPolicy rules programmed on this
	// node, and each pod's default-deny drops, with the switch's counters.
	Policies       []PolicyRuleStatus `json:"policies,omitempty"`
	PolicyDrops    []PolicyDropStatus `json:"policyDrops,omitempty"`
	PolicyProblems []string           `json:"policyProblems,omitempty"`
}

// PolicyRuleStatus is one realized rule: new connections between its
// pods and peers on its ports are allowed.
type PolicyRuleStatus struct {
	Rule      string   `json:"rule"` // namespace/name/direction/index[/port=...]
	Direction string   `json:"direction"`
	Pods      []string `json:"pods"` // local pods (addresses) it applies to
	Peers     string   `json:"peers"`
	Ports     string   `json:"ports"`
	ConjID    uint32   `json:"conjID,omitempty"`
	Cookie    uint64   `json:"cookie"`            // its flows' cookie (nagarectl trace names the rule by it)
	Packets   *uint64  `json:"packets,omitempty"` // new-connection packets it allowed (nil: switch not asked)
	Bytes     *uint64  `json:"bytes,omitempty"`
}

// PolicyDropStatus is one isolated pod's default deny in one direction.
type PolicyDropStatus struct {
	Pod       string `json:"pod"` // address
	Direction string `json:"direction"`
	Cookie    uint64 `json:"cookie"`  // the drop flow's cookie
	Packets   uint64 `json:"packets"` // dropped, reason policy
	Bytes     uint64 `json:"bytes"`
}

// ServiceStatus is one Service as the agent wants it on this node.
type ServiceStatus struct {
	Service        string              `json:"service"` // namespace/name
	Type           string              `json:"type"`
	InternalPolicy string              `json:"internalTrafficPolicy"`
	ExternalPolicy string              `json:"externalTrafficPolicy"`
	Affinity       string              `json:"sessionAffinity"` // None, or ClientIP and its timeout
	Ports          []ServicePortStatus `json:"ports"`
}

// ServicePortStatus is one Service port: where it answers, what happens
// when it has no endpoint for a kind of traffic, its endpoints.
type ServicePortStatus struct {
	Name      string           `json:"name"`
	Protocol  string           `json:"protocol"`
	Frontends []string         `json:"frontends"` // "ClusterIP 10.96.0.10:80"
	Internal  string           `json:"internal"`  // forward, reject or drop
	External  string           `json:"external"`
	Endpoints []EndpointStatus `json:"endpoints"`
}

// EndpointStatus is one endpoint: its state and which traffic uses it.
type EndpointStatus struct {
	Address  string `json:"address"` // IP:target port
	Node     string `json:"node,omitempty"`
	Pod      string `json:"pod,omitempty"`
	State    string `json:"state"`    // ready, serving-terminating, terminating, not-ready
	Internal bool   `json:"internal"` // ClusterIP traffic goes to it
	External bool   `json:"external"` // NodePort, LoadBalancer, external IP traffic goes to it
	// Connections sent to this endpoint since its EndpointDNAT flow was
	// programmed (that flow's packet count: a connection's first packet);
	// nil when the switch could not be asked.
	Connections *int `json:"connections,omitempty"`
}

func serviceStatus(s *proxy.Service) ServiceStatus {
	policy := func(local bool) string {
		if local {
			return "Local"
		}
		return "Cluster"
	}
	st := ServiceStatus{Service: s.Key.String(), Type: string(s.Type), InternalPolicy: policy(s.InternalLocal),
		ExternalPolicy: policy(s.ExternalLocal), Affinity: "None"}
	if s.Affinity.ClientIP {
		st.Affinity = "ClientIP " + s.Affinity.Timeout.String()
	}
	for _, p := range s.Ports {
		ps := ServicePortStatus{Name: p.Name, Protocol: string(p.Protocol), Internal: string(p.Internal), External: string(p.External),
			Frontends: []string{}, Endpoints: []EndpointStatus{}}
		for _, f := range p.Frontends {
			ps.Frontends = append(ps.Frontends, string(f.Kind)+" "+f.String())
		}
		in, ex := map[string]bool{}, map[string]bool{}
		for _, e := range p.InternalEndpoints {
			in[e.String()] = true
		}
		for _, e := range p.ExternalEndpoints {
			ex[e.String()] = true
		}
		for _, e := range p.Endpoints {
			ps.Endpoints = append(ps.Endpoints, EndpointStatus{Address: e.String(), Node: e.NodeName, Pod: e.Pod, State: e.State(),
				Internal: in[e.String()], External: ex[e.String()]})
		}
		st.Ports = append(st.Ports, ps)
	}
	return st
}

type SwitchStatus struct {
	Socket     string             `json:"socket"`
	Connected  bool               `json:"connected"`
	Reconnects int                `json:"reconnects"`
	LastSync   pipeline.SyncStats `json:"lastSync"`
	LastSyncAt time.Time          `json:"lastSyncAt"`
	SyncTook   string             `json:"syncTook"`
}

type IPAMStatus struct {
	Used  int `json:"used"`
	Total int `json:"total"`
}

type PodStatus struct {
	Pod         string `json:"pod"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	Netns       string `json:"netns"`
	IP          string `json:"ip"`
	MAC         string `json:"mac"`
	Host        string `json:"host"`
	OFPort      uint32 `json:"ofport"`
}

type RemoteState struct {
	Name     string `json:"name"`
	Underlay string `json:"underlay"`
	PodCIDR  string `json:"podCIDR"`
	Port     uint32 `json:"port"`
}

// Snapshot collects the agent's state.
func (a *Agent) Snapshot(ctx context.Context) Status {
	a.mu.Lock()
	st := Status{Node: a.node.Name, PodCIDR: a.node.PodCIDR.String(), Gateway: a.node.Gateway().String(),
		GatewayMAC: a.gw.MAC.String(), GatewayPort: a.gwPort, Underlay: a.node.Underlay.String(), Source: "cluster-file",
		Uptime: time.Since(a.started).Round(time.Second).String(),
		Mode:   a.cfg.Mode, Switch: SwitchStatus{Socket: a.sw.String(), Connected: a.ready, Reconnects: a.reconnects,
			LastSync: a.lastSync, LastSyncAt: a.lastSyncAt, SyncTook: a.lastSyncDur.String()}}
	if a.cfg.Kube != nil {
		st.Source = "kubernetes"
	}
	for _, p := range a.pods {
		st.Pods = append(st.Pods, PodStatus{Pod: p.Pod, ContainerID: p.ContainerID, IfName: p.IfName, Netns: p.Netns, IP: p.IP.String(),
			MAC: p.MAC, Host: p.Host, OFPort: p.OFPort})
	}
	for _, r := range a.remotes {
		st.Remotes = append(st.Remotes, RemoteState{Name: r.node.Name, Underlay: r.node.Underlay.String(), PodCIDR: r.node.PodCIDR.String(), Port: r.port})
	}
	pl, ready := a.pl, a.ready
	a.mu.Unlock()
	sort.Slice(st.Pods, func(i, j int) bool { return st.Pods[i].IP < st.Pods[j].IP })
	sort.Slice(st.Remotes, func(i, j int) bool { return st.Remotes[i].Name < st.Remotes[j].Name })
	st.IPAM.Used, st.IPAM.Total = a.ipam.Stats()
	var conns map[string]int // service/protocol/endpoint → connections
	if ready && pl != nil {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st.Tables, _ = pl.TableCounts(tctx)
		if scs, err := pl.ServiceCounters(tctx); err == nil {
			conns = map[string]int{}
			for _, c := range scs {
				if c.Endpoint != "" {
					conns[c.Service.String()+"/"+c.Protocol+"/"+c.Endpoint] += int(c.Connections)
				}
			}
		}
		cancel()
	}
	if a.services != nil {
		for _, s := range a.services.Services() {
			ss := serviceStatus(s)
			for i := range ss.Ports {
				for j := range ss.Ports[i].Endpoints {
					e := &ss.Ports[i].Endpoints[j]
					if n, ok := conns[ss.Service+"/"+ss.Ports[i].Protocol+"/"+e.Address]; ok && (e.Internal || e.External) {
						e.Connections = &n
					}
				}
			}
			st.Services = append(st.Services, ss)
		}
		st.ServicesPending = a.servicesPending()
		for _, p := range a.services.Problems() {
			st.ServiceProblems = append(st.ServiceProblems, p.String())
		}
	}
	a.policyStatus(ctx, &st, pl, ready)
	st.Masquerade, _ = snat.Describe(a.nodeNetns())
	st.NodePorts = a.nodePortSummary()
	st.DPU = a.dpuStatus()
	return st
}

// serveStatus serves GET /status and /metrics on the agent socket (0600).
func (a *Agent) serveStatus() (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(a.cfg.AgentSocket), 0o700); err != nil {
		return nil, err
	}
	l, err := cniserver.Listen(a.cfg.AgentSocket)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(a.Snapshot(r.Context()))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
	// The DaemonSet's probes (nagarectl agent live|ready): live = the
	// agent answers; ready = the switch is connected and its pipeline
	// programmed (every port and flow synced), else 503 and why.
	mux.HandleFunc("/livez", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if ok, why := a.Ready(); !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n")
	})
	// POST /direct-forward?on=true|false (DPU mode; the lab's rows).
	mux.HandleFunc("/direct-forward", func(w http.ResponseWriter, r *http.Request) {
		on, err := strconv.ParseBool(r.URL.Query().Get("on"))
		if r.Method != http.MethodPost || err != nil {
			http.Error(w, "POST /direct-forward?on=true|false", http.StatusBadRequest)
			return
		}
		if err := a.SetDirectForward(on); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		a.log.Info("direct forward", "on", on)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) && !strings.Contains(err.Error(), "closed") {
			a.log.Error("status socket", "err", err)
		}
	}()
	return l, nil
}

// ServeMetrics serves /metrics on a TCP address too (Prometheus scrapes).
func (a *Agent) ServeMetrics(ctx context.Context, addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// cniMetrics counts and times the CNI calls the agent serves.
type cniMetrics struct {
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
}

func newCNIMetrics(r prometheus.Registerer) *cniMetrics {
	m := &cniMetrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "nagare_cni_call_duration_seconds",
			Help:    "CNI calls served by the agent, by command.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"command"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nagare_cni_call_errors_total",
			Help: "CNI calls that ended in an error, by command and CNI error code."}, []string{"command", "code"}),
	}
	r.MustRegister(m.duration, m.errors)
	return m
}

// ObserveCall is cniserver.Observer.
func (m *cniMetrics) ObserveCall(command string, took time.Duration, code uint) {
	m.duration.WithLabelValues(command).Observe(took.Seconds())
	if code != 0 {
		m.errors.WithLabelValues(command, strconv.FormatUint(uint64(code), 10)).Inc()
	}
}

type metrics struct {
	cni      *cniMetrics
	pods     prometheus.Gauge
	remotes  prometheus.Gauge
	services prometheus.Gauge
	// NetworkPolicy: realized rules, and the time from a change's first
	// event to the switch's barrier (coalescing included).
	policyRules   prometheus.Gauge
	policyRealize prometheus.Histogram
	policyCut     prometheus.Counter // established connections cut by a policy change
	reconnects    prometheus.Counter
	gcReleased    prometheus.Counter
}

func newMetrics(a *Agent) *metrics {
	m := &metrics{
		cni:         newCNIMetrics(a.reg),
		pods:        prometheus.NewGauge(prometheus.GaugeOpts{Name: "nagare_agent_pods", Help: "Pods attached on this node."}),
		remotes:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "nagare_agent_remote_nodes", Help: "Remote nodes with a tunnel."}),
		services:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "nagare_agent_services", Help: "Services in the desired service state (not yet programmed as flows)."}),
		reconnects:  prometheus.NewCounter(prometheus.CounterOpts{Name: "nagare_agent_switch_reconnects_total", Help: "Times the switch connection was lost."}),
		policyRules: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nagare_agent_policy_rules", Help: "NetworkPolicy rules realized on this node."}),
		policyRealize: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nagare_agent_policy_realization_seconds",
			Help:    "From a NetworkPolicy, pod or namespace change to the switch's barrier after its flows.",
			Buckets: []float64{.005, .01, .02, .05, .1, .2, .5, 1, 2, 5}}),
		policyCut: prometheus.NewCounter(prometheus.CounterOpts{Name: "nagare_agent_policy_cut_connections_total",
			Help: "Established connections deleted from the switch's tracker because a NetworkPolicy change denies them."}),
		gcReleased: prometheus.NewCounter(prometheus.CounterOpts{Name: "nagare_agent_gc_released_total", Help: "Allocations released by garbage collection."}),
	}
	a.reg.MustRegister(m.pods, m.remotes, m.services, m.reconnects, m.gcReleased, m.policyRules, m.policyRealize, m.policyCut,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nagare_agent_ip_allocations", Help: "Addresses allocated in the node's pod subnet."},
			func() float64 {
				if a.ipam == nil {
					return 0
				}
				u, _ := a.ipam.Stats()
				return float64(u)
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nagare_agent_ip_capacity", Help: "Addresses the node's pod subnet can give."},
			func() float64 {
				if a.ipam == nil {
					return 0
				}
				_, t := a.ipam.Stats()
				return float64(t)
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nagare_agent_proxy_up",
			Help: "Transparent redirection: 1 while the node's proxy answers its health address (new selected connections go to it)."},
			func() float64 {
				if a.redirect.up.Load() {
					return 1
				}
				return 0
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "nagare_agent_proxy_down_total",
			Help: "Transparent redirection: times the node's proxy stopped answering (new selected connections then went direct, or were refused with failMode closed)."},
			func() float64 { return float64(a.redirect.downs.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "nagare_agent_service_rejects_total",
			Help: "New connections answered with ICMP port unreachable: to a Service without endpoints, or (transparent redirection, failMode closed) selected while the node proxy is down."},
			func() float64 { return float64(a.rejecter.Sent.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "nagare_agent_service_rejects_limited_total",
			Help: "Service rejects not answered: their ingress port was over its budget (100/s, burst 20)."},
			func() float64 { return float64(a.rejecter.Limited.Load()) }),
		&serviceCollector{a: a,
			frontend: prometheus.NewDesc("nagare_agent_service_frontend_connections_total",
				"New connections to a Service frontend (its ServiceLB flow's packets), by what was done with them.",
				[]string{"namespace", "service", "protocol", "frontend", "verdict"}, nil),
			endpoint: prometheus.NewDesc("nagare_agent_service_endpoint_connections_total",
				"New connections sent to a Service endpoint (its EndpointDNAT flow's packets).",
				[]string{"namespace", "service", "protocol", "endpoint"}, nil)},
		&flowCollector{a: a, desc: prometheus.NewDesc("nagare_agent_flows", "OpenFlow flows per pipeline table.", []string{"table", "stage"}, nil)},
	)
	return m
}

// serviceCollector reads the Services' connection counters from the
// switch's flow counters at scrape time (pipeline/service_stats.go).
type serviceCollector struct {
	a                  *Agent
	frontend, endpoint *prometheus.Desc
}

func (c *serviceCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.frontend; ch <- c.endpoint }

func (c *serviceCollector) Collect(ch chan<- prometheus.Metric) {
	pl, err := c.a.connected()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	scs, err := pl.ServiceCounters(ctx)
	if err != nil {
		return
	}
	for _, s := range scs {
		if s.Frontend != "" {
			ch <- prometheus.MustNewConstMetric(c.frontend, prometheus.CounterValue, float64(s.Connections),
				s.Service.Namespace, s.Service.Name, s.Protocol, s.Frontend, s.Verdict)
		} else {
			ch <- prometheus.MustNewConstMetric(c.endpoint, prometheus.CounterValue, float64(s.Connections),
				s.Service.Namespace, s.Service.Name, s.Protocol, s.Endpoint)
		}
	}
}

// flowCollector reads the flows per table from the switch at scrape time.
type flowCollector struct {
	a    *Agent
	desc *prometheus.Desc
}

func (c *flowCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *flowCollector) Collect(ch chan<- prometheus.Metric) {
	pl, err := c.a.connected()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tcs, err := pl.TableCounts(ctx)
	if err != nil {
		return
	}
	for _, t := range tcs {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(t.Flows), t.Name, t.Stage)
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// agentClient is an HTTP client on the agent's Unix socket.
func agentClient(socket string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
}

func agentGet(ctx context.Context, socket, path string) ([]byte, error) {
	return agentDo(ctx, socket, http.MethodGet, path)
}

// SetDirectForward turns direct forward on or off on the agent serving
// socket (DPU mode).
func SetDirectForward(ctx context.Context, socket string, on bool) error {
	_, err := agentDo(ctx, socket, http.MethodPost, "/direct-forward?on="+strconv.FormatBool(on))
	return err
}

func agentDo(ctx context.Context, socket, method, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := agentClient(socket).Do(req)
	if err != nil {
		return nil, fmt.Errorf("agent at %s: %w", socket, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("agent at %s: %w", socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("agent at %s: %s: %s", socket, resp.Status, b)
	}
	return b, nil
}

// FetchStatus asks the agent serving socket for its status (what
// `nagarectl agent` prints).
func FetchStatus(ctx context.Context, socket string) (*Status, error) {
	b, err := agentGet(ctx, socket, "/status")
	if err != nil {
		return nil, err
	}
	var st Status
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("agent at %s: %w", socket, err)
	}
	return &st, nil
}

// Ready says whether the node's switch is connected and its pipeline
// programmed, and if not, why.
func (a *Agent) Ready() (bool, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ready {
		return true, ""
	}
	if a.downReason != "" {
		return false, a.downReason
	}
	return false, errSwitchDown.Error()
}

// Probe asks the agent serving socket whether it is alive (what "live"
// asks: /livez) or ready (/readyz); an error says why not.
func Probe(ctx context.Context, socket, what string) error {
	if what != "live" && what != "ready" {
		return fmt.Errorf("probe %q: want live or ready", what)
	}
	_, err := agentGet(ctx, socket, "/"+what+"z")
	return err
}

// FetchMetrics returns the agent's /metrics text.
func FetchMetrics(ctx context.Context, socket string) (string, error) {
	b, err := agentGet(ctx, socket, "/metrics")
	return string(b), err
}
