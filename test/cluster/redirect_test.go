package cluster

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/agent"
	"github.com/nagare-net/nagare/pkg/agent/config"
	"github.com/nagare-net/nagare/pkg/nscluster"
	"github.com/nagare-net/nagare/pkg/switchd"
)

// TestProxyRedirect runs a real HAProxy as node1's proxy with transparent
// redirection of TCP port 9090: a pod's connection to a ClusterIP on 9090
// goes through the proxy (its log names the client and the original
// destination; the endpoint sees node1's gateway address as the client),
// an opted-out pod's goes direct (the endpoint sees the pod), an
// established redirected connection lives through a switch restart and
// an agent restart, and with the proxy killed new connections go direct
// (failMode open) and come back to the proxy when it returns; with
// failMode closed they are refused (ICMP port unreachable from the agent).
func TestProxyRedirect(t *testing.T) {
	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy not installed (make deps)")
	}
	cc := config.Default()
	cc.Services = append(cc.Services, config.Service{Name: "who", ClusterIP: "10.96.0.20",
		Ports: []config.ServicePort{{Name: "tcp", Protocol: "TCP", Port: 9090}}, Endpoints: []string{"10.77.1.2", "10.77.2.2"}})
	cc.ProxyRedirect = &config.ProxyRedirect{Ports: []uint16{9090}, OptOut: []string{"default/optout"}, HealthIntervalMS: 200}
	c := newCluster(t, cc)
	ctx := ctxT(t, 3*time.Minute)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	srv1, srv2 := addPod(ctx, t, n1, "srv1"), addPod(ctx, t, n2, "srv2")
	for _, s := range []*nscluster.Pod{srv1, srv2} {
		serveWho(t, podNS(s), s.Name)
	}
	cli := addPod(ctx, t, n1, "cli")
	optout := addPod(ctx, t, n1, "optout")
	gateway := n1.Config.Gateway().String()

	top := t
	hp := startHAProxy(t, haproxy, n1)
	waitProxyUp(t, n1, true)

	// who connects from ns to the ClusterIP and returns the client address the endpoint saw.
	who := func(t *testing.T, ns nstest.NS) string {
		t.Helper()
		_, seen, err := tcpWho(t, ns, "10.96.0.20:9090")
		if err != nil {
			diag := ofctl(t, n1.SwitchSocket(), "dump-flows", "table=24")
			for _, cmd := range [][]string{{"ip", "-s", "link", "show", "nagare-px0"}, {"ip", "rule"}, {"ip", "route", "show", "table", "15001"}, {"ss", "-tlnp"}, {"ss", "-tanp"}, {"sh", "-c", "nstat -az | grep -v ' 0 ' ; sysctl -a 2>/dev/null | grep -E 'rp_filter|src_valid|accept_local'"}} {
				o, _ := exec.Command("ip", append([]string{"netns", "exec", n1.NS}, cmd...)...).CombinedOutput()
				diag += "\n$ " + strings.Join(cmd, " ") + "\n" + string(o)
			}
			for _, cmd := range []string{"conntrack", "dump-cache"} {
				if resp, err := switchd.Call(ctx, n1.SwitchSocket(), switchd.CtlRequest{Cmd: cmd}); err == nil {
					for _, l := range resp.Lines {
						if strings.Contains(l, "9090") || strings.Contains(l, "10.96.0.20") {
							diag += "\n" + cmd + ": " + l
						}
					}
				}
			}
			t.Fatalf("%s → 10.96.0.20:9090: %v\n%s\nproxy log:\n%s", ns.Name, err, diag, hp.text())
		}
		return seen
	}
	t.Run("redirected", func(t *testing.T) {
		before := hp.lines(cli.IP.String())
		for i := 0; i < 4; i++ {
			if seen := who(t, podNS(cli)); seen != gateway {
				t.Fatalf("the endpoint saw %s, want the node's gateway %s (through the proxy)", seen, gateway)
			}
		}
		logged := hp.lines(cli.IP.String())
		if len(logged)-len(before) != 4 {
			t.Fatalf("proxy log: %d new connections from %s, want 4:\n%s", len(logged)-len(before), cli.IP, hp.text())
		}
		if !strings.Contains(logged[len(logged)-1], "-> 10.96.0.20:9090") {
			t.Errorf("the proxy did not see the original destination: %s", logged[len(logged)-1])
		}
	})
	t.Run("opted-out-goes-direct", func(t *testing.T) {
		for i := 0; i < 4; i++ {
			if seen := who(t, podNS(optout)); seen != optout.IP.String() {
				t.Fatalf("the endpoint saw %s, want the pod %s (direct)", seen, optout.IP)
			}
		}
		if l := hp.lines(optout.IP.String()); len(l) != 0 {
			t.Fatalf("the proxy saw the opted-out pod: %v", l)
		}
	})
	t.Run("node-goes-direct", func(t *testing.T) {
		if seen := who(t, nodeNS(n2)); seen != n2.Config.Gateway().String() {
			t.Fatalf("node2's own connection: the endpoint saw %s", seen)
		}
	})

	t.Run("proxy-down-fails-open", func(t *testing.T) {
		m0, _ := agent.FetchMetrics(ctx, n1.AgentSocket())
		hp.kill()
		waitProxyUp(t, n1, false)
		for i := 0; i < 4; i++ {
			if seen := who(t, podNS(cli)); seen != cli.IP.String() {
				t.Fatalf("proxy down, fail open: the endpoint saw %s, want the pod %s (direct)", seen, cli.IP)
			}
		}
		m1, _ := agent.FetchMetrics(ctx, n1.AgentSocket())
		if d := metricSum(m1, "nagare_agent_proxy_down_total") - metricSum(m0, "nagare_agent_proxy_down_total"); d != 1 {
			t.Errorf("nagare_agent_proxy_down_total went up by %v, want 1", d)
		}
		// A direct connection opened while the proxy was down stays direct when it is back.
		conn, err := dialIn(t, podNS(cli), "10.96.0.20:9090")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		r := bufio.NewReader(conn)
		if line, _ := r.ReadString('\n'); !strings.HasSuffix(strings.TrimSpace(line), cli.IP.String()) {
			t.Fatalf("direct connection's first line %q", line)
		}
		hp = startHAProxy(top, haproxy, n1) // lives on into the next subtest
		waitProxyUp(t, n1, true)
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(conn, "still direct\n")
		if got, err := r.ReadString('\n'); err != nil || got != "still direct\n" {
			t.Fatalf("the direct connection after the proxy came back: %q %v", got, err)
		}
		if seen := who(t, podNS(cli)); seen != gateway {
			t.Fatalf("proxy back: a new connection went direct (%s)", seen)
		}
	})

	t.Run("proxy-down-fails-closed", func(t *testing.T) {
		// The same node with failMode closed (the agent restarted on the new file).
		c.Config.ProxyRedirect.FailMode = "closed"
		if err := c.WriteClusterFile(); err != nil {
			t.Fatal(err)
		}
		n1.Agent.Stop()
		if err := n1.StartAgent(ctx); err != nil {
			t.Fatal(err)
		}
		waitProxyUp(t, n1, true)
		m0, _ := agent.FetchMetrics(ctx, n1.AgentSocket())
		hp.kill()
		waitProxyUp(t, n1, false)
		start := time.Now()
		_, _, err := tcpWho(t, podNS(cli), "10.96.0.20:9090")
		if err == nil || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("proxy down, fail closed: %v, want connection refused", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("refused after %v: a silent drop and a retry, not an answer", d)
		}
		m1, _ := agent.FetchMetrics(ctx, n1.AgentSocket())
		if d := metricSum(m1, "nagare_agent_service_rejects_total") - metricSum(m0, "nagare_agent_service_rejects_total"); d < 1 {
			t.Errorf("rejects counted: %v, want at least 1", d)
		}
		// The opted-out pod is not refused: it never meets the proxy.
		if seen := who(t, podNS(optout)); seen != optout.IP.String() {
			t.Fatalf("opted-out pod with the proxy down: %s", seen)
		}
	})

	// Last: nothing after it opens a new connection through the node's
	// Service path (see the report: the node's first connection to a
	// ClusterIP after a switch restart can be lost, with or without
	// redirection).
	hp = startHAProxy(t, haproxy, n1)
	waitProxyUp(t, n1, true)
	t.Run("established-survives-restarts", func(t *testing.T) {
		conn, err := dialIn(t, podNS(cli), "10.96.0.20:9090")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		r := bufio.NewReader(conn)
		if line, err := r.ReadString('\n'); err != nil || !strings.HasSuffix(strings.TrimSpace(line), gateway) {
			t.Fatalf("first line %q %v: want one through the proxy", line, err)
		}
		echo := func(step string) {
			t.Helper()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			msg := "after " + step + "\n"
			if _, err := io.WriteString(conn, msg); err != nil {
				t.Fatalf("%s: write: %v", step, err)
			}
			if got, err := r.ReadString('\n'); err != nil || got != msg {
				t.Fatalf("%s: echo %q %v", step, got, err)
			}
		}
		echo("nothing")
		n1.Agent.Stop()
		echo("the agent stopped")
		if err := n1.StartAgent(ctx); err != nil {
			t.Fatal(err)
		}
		st, err := n1.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Switch.LastSync.Added != 0 || st.Switch.LastSync.Deleted != 0 {
			t.Errorf("agent restart changed flows: %+v", st.Switch.LastSync)
		}
		echo("an agent restart")
		if seen := who(t, podNS(cli)); seen != gateway {
			t.Fatalf("after the agent's restart a new connection went direct: %s", seen)
		}
		st0, err := n1.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n1.Switch.Stop()
		if err := n1.StartSwitch(ctx); err != nil {
			t.Fatal(err)
		}
		waitResync(t, n1, st0.Switch.Reconnects)
		echo("a switch restart")
	})
}

// haproxyRun is one HAProxy process the test started in a node's namespace.
type haproxyRun struct {
	cmd *exec.Cmd
	log string
}

// startHAProxy runs HAProxy in n's namespace as its transparent proxy for
// TCP 9090: it accepts redirected connections (bind ... transparent: the
// accepted socket's address is the original destination) and connects to
// that destination (server 0.0.0.0:0); health on 127.0.0.1:15021. Each
// connection is logged as "client -> original destination".
func startHAProxy(t *testing.T, bin string, n *nscluster.Node) *haproxyRun {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "haproxy.cfg")
	os.WriteFile(cfg, []byte(`global
    log stdout format raw local0
defaults
    mode tcp
    log global
    timeout connect 3s
    timeout client 60s
    timeout server 60s
frontend redirected
    bind 0.0.0.0:9090 transparent
    log-format "%ci:%cp -> %fi:%fp"
    default_backend original
backend original
    server original 0.0.0.0:0
frontend health
    mode http
    bind 127.0.0.1:15021
    monitor-uri /healthz
`), 0o644)
	h := &haproxyRun{log: filepath.Join(dir, "haproxy.log")}
	out, err := os.Create(h.log)
	if err != nil {
		t.Fatal(err)
	}
	h.cmd = exec.Command("ip", "netns", "exec", n.NS, bin, "-db", "-f", cfg)
	h.cmd.Stdout, h.cmd.Stderr = out, out
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out.Close()
	t.Cleanup(h.kill)
	return h
}

func (h *haproxyRun) kill() {
	if h.cmd.ProcessState == nil {
		h.cmd.Process.Kill()
		h.cmd.Wait()
	}
}

func (h *haproxyRun) text() string {
	b, _ := os.ReadFile(h.log)
	return string(b)
}

// lines are the log's connections from client address ip.
func (h *haproxyRun) lines(ip string) []string {
	var out []string
	for _, l := range strings.Split(h.text(), "\n") {
		if strings.HasPrefix(l, ip+":") {
			out = append(out, l)
		}
	}
	return out
}

// waitProxyUp waits until n's agent reports the proxy up (or down).
func waitProxyUp(t *testing.T, n *nscluster.Node, up bool) {
	t.Helper()
	want := 0.0
	if up {
		want = 1
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := agent.FetchMetrics(ctxT(t, 5*time.Second), n.AgentSocket())
		if err == nil && strings.Contains(m, "nagare_agent_proxy_up ") && metricSum(m, "nagare_agent_proxy_up") == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent does not report the proxy up=%v: %v\n%s", up, err, m)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitResync waits until n's agent, which had reconnected to its switch
// reconnects times, has synced the restarted switch.
func waitResync(t *testing.T, n *nscluster.Node, reconnects int) {
	t.Helper()
	waitStatus(t, n, 20*time.Second, "re-synced with the restarted switch", func(st *agent.Status) bool {
		return st.Switch.Connected && st.Switch.Reconnects > reconnects
	})
}
