package lab

import (
	"context"
	"encoding/csv"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/nagare-net/nagare/pkg/agent"
	"github.com/nagare-net/nagare/pkg/agent/config"
	"github.com/nagare-net/nagare/pkg/lab/bookinfo"
)

// The node placement: one L7 proxy per node, in the node's own namespace,
// that every pod's connection to a Service's port (meshServiceCIDR,
// :9080) is sent to by nagare's fast path (transparent redirection:
// docs/agent.md; no rule in any pod), with the original destination
// kept: the proxy accepts with IP_TRANSPARENT and opens its own
// connection to the ClusterIP the client asked for, which the switch
// load-balances as any node traffic. Istio's ambient mode puts ztunnel
// there, with iptables rules in each pod; here the switch does it.
//
// The proxy is HAProxy (Debian's haproxy, `make deps`) in HTTP mode:
// NGINX, the sidecars' proxy, cannot accept transparently (its listen has
// no IP_TRANSPARENT), so the placements differ in proxy software too; both
// terminate HTTP, route the request and keep upstream connections alive,
// each with one thread.

// Node proxy ports.
const (
	nodeProxyHealth = 15021 // HAProxy monitor-uri and stats, loopback of the node
	// NodeProxyHealthAddr is where the agents check the node proxy (proxyRedirect.healthAddr).
	NodeProxyHealthAddr = "127.0.0.1:15021"
)

func init() {
	RegisterProxyPlacement(func() ProxyPlacement { return &nodeProxyPlacement{} })
	RegisterProxyPlacement(func() ProxyPlacement { return &nodeProxyPlacement{dpu: true} })
}

// nodeProxyPlacement is one HAProxy per node behind nagare's redirection;
// with dpu, in the node's DPU domain (nagare in DPU mode: the switch, the
// node's devices and so the proxy link are there), on the DPU's CPUs,
// reached over the VF hairpin (pod → VF → representor → switch → proxy).
type nodeProxyPlacement struct {
	dpu   bool
	procs []int
	nodes []string // namespaces whose proxy counts requests
}

func (p *nodeProxyPlacement) Name() string {
	if p.dpu {
		return "dpu"
	}
	return "node"
}

func (p *nodeProxyPlacement) Description() string {
	if p.dpu {
		return "HAProxy per node in its DPU domain, on the DPU's CPU (" + dpuCPUs() + "): pods' connections to the Services (:9080) cross the VF hairpin to the DPU's switch, which redirects them to it (transparent redirection); it connects to the original ClusterIP from there"
	}
	return "HAProxy per node in the node's namespace: pods' connections to the Services (:9080) sent to it by nagare's fast path (transparent redirection, no rule in the pods), which connects to the original ClusterIP"
}

func (p *nodeProxyPlacement) Available(dp DataPlane) error {
	np, ok := dp.(*nagarePlane)
	if !ok {
		return notAvailable("transparent redirection is nagare's (%s has none)", dp.Name())
	}
	if np.dpu != p.dpu {
		if p.dpu {
			return notAvailable("the dpu placement needs nagare in DPU mode")
		}
		return notAvailable("with the switch in a DPU domain the node's proxy is the dpu placement")
	}
	if _, err := exec.LookPath("haproxy"); err != nil {
		return notAvailable("haproxy: %v (make deps)", err)
	}
	return nil
}

func (p *nodeProxyPlacement) Processes() []int { return p.procs }

// Setup starts each node's HAProxy, then turns redirection on in the
// agents' cluster file and restarts them (a restart keeps every
// connection; the agents add the redirect flows once the proxy answers);
// cleanup turns it off the same way.
func (p *nodeProxyPlacement) Setup(ctx context.Context, app *MeshApp, c *Cleanup) error {
	np := app.Plane.(*nagarePlane)
	cl := np.cluster
	t := app.Topo
	seen := map[string]bool{}
	for _, pod := range append([]*Pod{app.Client}, app.ServicePods()...) {
		n := pod.Node
		if seen[n.Name] {
			continue
		}
		seen[n.Name] = true
		conf, err := writeFileIn(t, "haproxy-"+n.Name+".cfg", NodeHAProxyConf())
		if err != nil {
			return err
		}
		ns, args := n.NS, []string{"haproxy", "-db", "-f", conf}
		if p.dpu {
			cn := cl.Node(n.Name)
			if cn == nil || cn.DPUNS == "" {
				return fmt.Errorf("node %s has no DPU domain", n.Name)
			}
			ns, args = cn.DPUNS, append([]string{"taskset", "-c", dpuCPUs()}, args...)
		}
		proc, err := t.Sh.Start(c, "", append([]string{"ip", "netns", "exec", ns}, args...)...)
		if err != nil {
			return err
		}
		if err := waitListening(ctx, &Pod{Name: "proxy of " + n.Name, NS: ns}, fmt.Sprintf("127.0.0.1:%d", nodeProxyHealth), proc, 10*time.Second); err != nil {
			return fmt.Errorf("%s proxy on %s: %w", p.Name(), n.Name, err)
		}
		p.procs = append(p.procs, proc.Pid)
		p.nodes = append(p.nodes, ns)
	}
	old := cl.Config.ProxyRedirect
	oldCIDR := cl.Config.ServiceCIDR
	restart := func(ctx context.Context) error {
		if err := cl.WriteClusterFile(); err != nil {
			return err
		}
		for _, n := range cl.Nodes {
			n.Agent.Stop()
			if err := n.StartAgent(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	cl.Config.ProxyRedirect = &config.ProxyRedirect{Ports: []uint16{bookinfo.Port},
		Destinations: []netip.Prefix{netip.MustParsePrefix(meshServiceCIDR)},
		HealthAddr:   NodeProxyHealthAddr, HealthIntervalMS: 200}
	if !cl.Config.ServiceCIDR.IsValid() {
		// The proxy's own connections to the ClusterIPs leave the node
		// through its route to the Services' range.
		cl.Config.ServiceCIDR = netip.MustParsePrefix(meshServiceCIDR)
	}
	if err := cl.Config.Complete(); err != nil {
		return err
	}
	c.Add("nagare: transparent redirection off, agents restarted", func() error {
		cl.Config.ProxyRedirect, cl.Config.ServiceCIDR = old, oldCIDR
		tctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return restart(tctx)
	})
	if err := restart(ctx); err != nil {
		return err
	}
	for _, n := range cl.Nodes {
		if err := WaitAgentMetric(ctx, n.AgentSocket(), "nagare_agent_proxy_up", 1, 10*time.Second); err != nil {
			return fmt.Errorf("agent on %s: %w", n.Config.Name, err)
		}
	}
	t.Sh.logf("# %s proxy: redirection of tcp %s:%d on, agents restarted", p.Name(), meshServiceCIDR, bookinfo.Port)
	return nil
}

// NodeHAProxyConf is one node's proxy: one thread, HTTP, accepting
// redirected connections transparently and sending each request to the
// connection's original destination (server 0.0.0.0:0) over kept-alive
// connections; health and stats on the node's loopback (NodeProxyRequests). The
// real-Kubernetes study (test/k8s) runs the same proxy on its nodes.
func NodeHAProxyConf() string {
	return fmt.Sprintf(`global
    nbthread 1
    maxconn 8000
defaults
    mode http
    timeout connect 3s
    timeout client 60s
    timeout server 60s
    option http-keep-alive
    http-reuse always
frontend redirected
    bind 0.0.0.0:%[1]d transparent
    default_backend original
backend original
    server original 0.0.0.0:0
frontend health
    bind 127.0.0.1:%[2]d
    monitor-uri /healthz
    stats enable
    stats uri /stats
`, bookinfo.Port, nodeProxyHealth)
}

// Requests sums the redirected frontend's request counters of every
// node's proxy.
func (p *nodeProxyPlacement) Requests(ctx context.Context) (int64, error) {
	var total int64
	for _, ns := range p.nodes {
		n, err := NodeProxyRequests(ctx, netnsPath(ns))
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// NodeProxyRequests is the req_tot of the redirected frontend of the
// node proxy (NodeHAProxyConf) in network namespace netns (a path), from
// its stats CSV.
func NodeProxyRequests(ctx context.Context, netns string) (int64, error) {
	body, err := netnsGet(ctx, netns, fmt.Sprintf("http://127.0.0.1:%d/stats;csv", nodeProxyHealth))
	if err != nil {
		return 0, fmt.Errorf("node proxy in %s: %w", netns, err)
	}
	n, err := ParseHAProxyRequests(body, "redirected")
	if err != nil {
		return 0, fmt.Errorf("node proxy in %s: %w", netns, err)
	}
	return n, nil
}

// ParseHAProxyRequests returns req_tot of frontend name in HAProxy's stats CSV.
func ParseHAProxyRequests(page, name string) (int64, error) {
	r := csv.NewReader(strings.NewReader(strings.TrimPrefix(page, "# ")))
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil || len(recs) < 2 {
		return 0, fmt.Errorf("stats CSV: %v (%q)", err, lastLines(page, 3))
	}
	col := -1
	for i, h := range recs[0] {
		if h == "req_tot" {
			col = i
		}
	}
	for _, rec := range recs[1:] {
		if col >= 0 && len(rec) > col && rec[0] == name && rec[1] == "FRONTEND" {
			return strconv.ParseInt(rec[col], 10, 64)
		}
	}
	return 0, fmt.Errorf("stats CSV: no req_tot of frontend %s", name)
}

// WaitAgentMetric waits until the metric name (unlabelled) of the agent at
// socket is want.
func WaitAgentMetric(ctx context.Context, socket, name string, want float64, timeout time.Duration) error {
	var last string
	for deadline := time.Now().Add(timeout); ; {
		text, err := agent.FetchMetrics(ctx, socket)
		if err == nil {
			for _, l := range strings.Split(text, "\n") {
				if v, ok := strings.CutPrefix(l, name+" "); ok {
					last = v
					if f, err := strconv.ParseFloat(v, 64); err == nil && f == want {
						return nil
					}
				}
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s is %q (want %v): %v", name, last, want, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
