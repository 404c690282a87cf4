package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nagare-net/nagare/pkg/lab/bookinfo"
)

// The proxy placements that need nothing of the data plane: none, and
// sidecars in the pods, captured the way Istio's istio-init captures
// them: nat rules in the pod's own namespace (nftables here, where
// istio-init writes iptables; the same REDIRECT), the proxy running as
// its own user (uid 1337, as Envoy does) so that its own connections are
// not captured again.
//
// The proxy is NGINX (Debian's nginx-light, `make deps`), an L7 HTTP
// proxy doing what the sidecar Envoy does on this path: terminate the
// HTTP connection, route the request, and forward it over a pool of
// kept-alive upstream connections. Envoy, the proxy seed 002 measured, is
// not packaged for Debian and cannot be downloaded here.

// Sidecar ports, Istio's; SidecarUID is the sidecar's user (Envoy's).
const (
	SidecarUID      = 1337
	sidecarInbound  = 15006 // captured inbound connections
	sidecarOutbound = 15001 // captured outbound connections
	sidecarStats    = 15020 // nginx stub_status, loopback only
)

func init() {
	RegisterProxyPlacement(func() ProxyPlacement { return &noProxy{} })
	RegisterProxyPlacement(func() ProxyPlacement { return &sidecarPlacement{} })
	RegisterProxyPlacement(func() ProxyPlacement { return &sidecarPlacement{outbound: true} })
}

// noProxy is the application alone: every call through its Service.
type noProxy struct{}

func (noProxy) Name() string { return "none" }
func (noProxy) Description() string {
	return "no proxy: each service calls the next by its ClusterIP, load-balanced by the data plane's Service path"
}
func (noProxy) Available(DataPlane) error                       { return nil }
func (noProxy) Setup(context.Context, *MeshApp, *Cleanup) error { return nil }
func (noProxy) Processes() []int                                { return nil }
func (noProxy) Requests(context.Context) (int64, error)         { return -1, nil }

// sidecarPlacement is a proxy in every serving pod. Inbound: connections
// to the service's port are redirected (prerouting) to the sidecar, which
// forwards to the application on loopback. With outbound too, the
// application's connections to the Services' port are redirected
// (output) to the sidecar, which routes each request by its Host (the
// ClusterIP the application asked for) to that Service, over kept-alive
// connections, as Envoy's outbound listener routes by Host to a cluster.
type sidecarPlacement struct {
	outbound bool
	procs    []int
	stats    []*Pod // pods whose sidecar counts requests
}

func (p *sidecarPlacement) Name() string {
	if p.outbound {
		return "sidecar-inout"
	}
	return "sidecar-in"
}

func (p *sidecarPlacement) Description() string {
	d := "NGINX sidecar in every serving pod, inbound only: connections to :9080 redirected (nftables in the pod) to it, forwarded to the application on loopback"
	if p.outbound {
		d = "NGINX sidecar in every serving pod, inbound and outbound: inbound as sidecar-in; the application's connections to the Services (:9080) redirected to the same sidecar, which routes each request by Host to the Service over kept-alive connections"
	}
	return d
}

func (p *sidecarPlacement) Available(DataPlane) error { return nil }

func (p *sidecarPlacement) Processes() []int { return p.procs }

// Setup starts a sidecar in each serving pod, then installs the capture
// rules (after the sidecar listens: no connection is captured into a
// closed port).
func (p *sidecarPlacement) Setup(ctx context.Context, app *MeshApp, c *Cleanup) error {
	t := app.Topo
	for _, pod := range app.ServicePods() {
		// Not under the run's temp dir: that is root's alone (0700), and
		// the sidecar's user must reach its files.
		dir, err := os.MkdirTemp("", t.Prefix+"-sidecar-"+pod.Name+"-")
		if err != nil {
			return err
		}
		c.Add("remove "+dir, func() error { return os.RemoveAll(dir) })
		conf := filepath.Join(dir, "nginx.conf")
		if err := os.WriteFile(conf, []byte(SidecarNginxConf(dir, app.ClusterIP, p.outbound)), 0o644); err != nil {
			return err
		}
		// The sidecar's user writes its pid and temp files there.
		if err := os.Chown(dir, SidecarUID, SidecarUID); err != nil {
			return err
		}
		proc, err := t.Sh.Start(c, "", "ip", "netns", "exec", pod.NS, "setpriv", "--reuid", strconv.Itoa(SidecarUID),
			"--regid", strconv.Itoa(SidecarUID), "--clear-groups", "nginx", "-p", dir, "-c", conf, "-e", "stderr")
		if err != nil {
			return err
		}
		if err := waitListening(ctx, pod, "127.0.0.1:"+strconv.Itoa(sidecarStats), proc, 10*time.Second); err != nil {
			return fmt.Errorf("sidecar in %s: %w", pod.Name, err)
		}
		p.procs = append(p.procs, proc.Pid)
		p.stats = append(p.stats, pod)
		rules, err := writeFileIn(t, "sidecar-"+pod.Name+".nft", SidecarRules(p.outbound))
		if err != nil {
			return err
		}
		if _, err := t.Sh.NS(ctx, pod.NS, "nft", "-f", rules); err != nil {
			return err
		}
		ns := pod.NS
		c.Add("remove the capture rules in "+ns, func() error {
			tctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			_, err := t.Sh.NS(tctx, ns, "nft", "delete", "table", "ip", "nagare_sidecar")
			return err
		})
	}
	return nil
}

// SidecarRules are the capture rules of one pod (nft -f): istio-init's
// ISTIO_INBOUND/ISTIO_OUTPUT, reduced to the application's one port (the
// real-Kubernetes study, test/k8s, applies them from an init container).
func SidecarRules(outbound bool) string {
	out := ""
	if outbound {
		out = fmt.Sprintf(`
	chain output {
		type nat hook output priority -100; policy accept;
		meta skuid %d return
		ip daddr %s tcp dport %d redirect to :%d
	}`, SidecarUID, meshServiceCIDR, bookinfo.Port, sidecarOutbound)
	}
	return fmt.Sprintf(`table ip nagare_sidecar {
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		tcp dport %d redirect to :%d
	}%s
}
`, bookinfo.Port, sidecarInbound, out)
}

// SidecarNginxConf is one sidecar: one process (its CPU is all of the
// proxy's), the inbound listener forwarding to the application on
// loopback, with outbound the listener routing by Host to the Services,
// and stub_status on loopback (the request counter).
func SidecarNginxConf(dir string, clusterIPs map[string]string, outbound bool) string {
	var b strings.Builder
	b.WriteString(nginxPreamble(dir))
	fmt.Fprintf(&b, `  proxy_http_version 1.1;
  proxy_set_header Connection "";
  proxy_set_header Host $http_host;
  upstream inbound_app { server 127.0.0.1:%[1]d; keepalive 64; }
  server { listen %[2]d backlog=4096; location / { proxy_pass http://inbound_app; } }
  server { listen 127.0.0.1:%[3]d; location = /stats { stub_status; } }
`, bookinfo.Port, sidecarInbound, sidecarStats)
	if outbound {
		b.WriteString("  map $host $outbound_service {\n")
		for _, role := range bookinfo.Roles {
			fmt.Fprintf(&b, "    %s svc_%s;\n", clusterIPs[role], role)
		}
		b.WriteString("  }\n")
		for _, role := range bookinfo.Roles {
			fmt.Fprintf(&b, "  upstream svc_%s { server %s:%d; keepalive 64; }\n", role, clusterIPs[role], bookinfo.Port)
		}
		fmt.Fprintf(&b, "  server { listen %d backlog=4096; location / { proxy_pass http://$outbound_service; } }\n", sidecarOutbound)
	}
	b.WriteString("}\n")
	return b.String()
}

// waitListening connects to addr in pod's namespace until it accepts,
// for at most timeout, or until proc exits.
func waitListening(ctx context.Context, pod *Pod, addr string, proc *Proc, timeout time.Duration) error {
	for deadline := time.Now().Add(timeout); ; {
		c, err := dialInNetns(ctx, netnsPath(pod.NS), "tcp", addr)
		if err == nil {
			c.Close()
			return nil
		}
		if proc.Exited() || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: %v: %s", addr, err, lastLines(proc.Output(), 5))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var stubRequestsRE = regexp.MustCompile(`(?m)^\s*(\d+)\s+(\d+)\s+(\d+)\s*$`)

// ParseStubStatus returns the requests counter of nginx's stub_status page.
func ParseStubStatus(page string) (int64, error) {
	m := stubRequestsRE.FindStringSubmatch(page)
	if m == nil {
		return 0, fmt.Errorf("stub_status: no accepts/handled/requests line in %q", lastLines(page, 3))
	}
	return strconv.ParseInt(m[3], 10, 64)
}

// Requests sums the sidecars' request counters (each read counts itself
// once; the difference of two reads is what went through them, plus one
// per sidecar).
func (p *sidecarPlacement) Requests(ctx context.Context) (int64, error) {
	var total int64
	for _, pod := range p.stats {
		n, err := SidecarRequests(ctx, netnsPath(pod.NS))
		if err != nil {
			return 0, fmt.Errorf("sidecar in %s: %w", pod.Name, err)
		}
		total += n
	}
	return total, nil
}

// SidecarRequests is the requests counter of the sidecar (SidecarNginxConf)
// in network namespace netns (a path), from its stub_status.
func SidecarRequests(ctx context.Context, netns string) (int64, error) {
	body, err := netnsGet(ctx, netns, fmt.Sprintf("http://127.0.0.1:%d/stats", sidecarStats))
	if err != nil {
		return 0, err
	}
	return ParseStubStatus(body)
}
