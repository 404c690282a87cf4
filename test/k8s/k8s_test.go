package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/agent"
	"github.com/nagare-net/nagare/pkg/switchd"
)

// deployManifest is deploy/ as kubectl apply -k renders it
// (kustomization.yaml's image and pull policy over nagare.yaml).
func deployManifest(t *testing.T, repoRoot string) string {
	t.Helper()
	out, err := run("kubectl", "kustomize", filepath.Join(repoRoot, "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// manifest is deploy/ (rendered) with the node paths moved into the
// test's directory, and the API server reached on loopback (this cluster
// has no kube-proxy to serve the kubernetes Service's ClusterIP).
func (c *cluster) manifest() string {
	b := deployManifest(c.t, c.repoRoot)
	s := strings.NewReplacer(
		"/var/run/nagare", c.path("nagare-run"),
		"/var/lib/nagare", c.path("nagare-state"),
		"/opt/cni/bin", c.cniBin,
		"/etc/cni/net.d", c.cniConf,
	).Replace(string(b))
	s = strings.Replace(s, "        - name: NODE_NAME\n", `        - {name: KUBERNETES_SERVICE_HOST, value: "127.0.0.1"}
        - {name: KUBERNETES_SERVICE_PORT, value: "6443"}
        - name: NODE_NAME
`, 1)
	if !strings.Contains(s, "KUBERNETES_SERVICE_HOST") {
		c.t.Fatal("deploy/ rendered: no NODE_NAME entry where the test puts the API server's address")
	}
	out := c.path("nagare.yaml")
	if err := os.WriteFile(out, []byte(s), 0o644); err != nil {
		c.t.Fatal(err)
	}
	return out
}

func (c *cluster) agentStatus(ctx context.Context) (*agent.Status, error) {
	return agent.FetchStatus(ctx, c.path("nagare-run", "agent.sock"))
}

func (c *cluster) podSpec(name string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default, labels: {app: nagare-test}}
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 0
  containers:
    - name: main
      image: busybox:local
      imagePullPolicy: Never
      command: [/bin/sleep, "3600"]
`, name, c.node)
}

func (c *cluster) podIP(name string) netip.Addr {
	c.t.Helper()
	var ip netip.Addr
	c.waitFor("pod "+name+" running with an address", 90*time.Second, func() error {
		out, err := c.kubectl("get", "pod", name, "-o", "jsonpath={.status.phase} {.status.podIP}")
		if err != nil {
			return err
		}
		f := strings.Fields(out)
		if len(f) != 2 || f[0] != "Running" {
			return fmt.Errorf("pod %s: %q", name, out)
		}
		ip, err = netip.ParseAddr(f[1])
		return err
	})
	return ip
}

// podNetns finds a pod's network namespace in the agent's records.
func (c *cluster) podNetns(ctx context.Context, name string) string {
	c.t.Helper()
	st, err := c.agentStatus(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	for _, p := range st.Pods {
		if p.Pod == "default/"+name {
			return p.Netns
		}
	}
	c.t.Fatalf("the agent has no record of pod %s: %+v", name, st.Pods)
	return ""
}

// pingFrom pings ip from inside a pod's network namespace.
func pingFrom(netns string, ip string) error {
	_, err := run("nsenter", "--net="+netns, "ping", "-n", "-q", "-c", "2", "-i", "0.2", "-W", "2", ip)
	return err
}

// TestKubernetesNagare is the Kubernetes acceptance: kubectl apply
// of deploy/ brings nagare up; pods get addresses from the node's pod CIDR
// through containerd -> nagare-cni, reach each other and the node, lose
// their allocation when deleted; Node objects make tunnels appear and go;
// deleting the DaemonSet leaves running pods forwarding.
func TestKubernetesNagare(t *testing.T) {
	c := up(t)
	ctx := ctxFor(t, 8*time.Minute)
	cidrOut := c.mustKubectl("get", "node", c.node, "-o", "jsonpath={.spec.podCIDR}")
	podCIDR := netip.MustParsePrefix(strings.TrimSpace(cidrOut))
	c.logf("node %s has pod CIDR %s", c.node, podCIDR)

	c.mustKubectl("apply", "-f", c.manifest())
	c.waitFor("nagare agent synced with its switch", 3*time.Minute, func() error {
		st, err := c.agentStatus(ctx)
		if err != nil {
			out, _ := c.kubectl("-n", "kube-system", "get", "pods", "-o", "wide")
			return fmt.Errorf("%v; pods: %s", err, out)
		}
		if !st.Switch.Connected || st.Source != "kubernetes" {
			return fmt.Errorf("agent status %+v", st.Switch)
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(c.cniConf, "10-nagare.conflist")); err != nil {
		t.Fatalf("install-cni did not write the conflist: %v", err)
	}

	names := []string{"web-a", "web-b", "web-c"}
	for _, n := range names {
		if _, err := runStdin(c.podSpec(n), "kubectl", "--kubeconfig", c.kubecfg, "apply", "-f", "-"); err != nil {
			t.Fatal(err)
		}
	}
	ips := map[string]netip.Addr{}
	for _, n := range names {
		ips[n] = c.podIP(n)
		if !podCIDR.Contains(ips[n]) {
			t.Fatalf("pod %s got %s, outside the node's pod CIDR %s", n, ips[n], podCIDR)
		}
	}
	c.logf("pods: %v", ips)
	gw := podCIDR.Masked().Addr().Next()
	for _, a := range names {
		ns := c.podNetns(ctx, a)
		for _, b := range names {
			if a != b {
				if err := pingFrom(ns, ips[b].String()); err != nil {
					t.Errorf("%s -> %s: %v", a, b, err)
				}
			}
		}
		if err := pingFrom(ns, gw.String()); err != nil {
			t.Errorf("%s -> the node (%s): %v", a, gw, err)
		}
	}
	// The node reaches its pods.
	if _, err := run("ping", "-n", "-q", "-c", "2", "-i", "0.2", "-W", "2", ips["web-a"].String()); err != nil {
		t.Errorf("node -> web-a: %v", err)
	}

	t.Run("nodes-make-tunnels", func(t *testing.T) {
		remote := `{"apiVersion":"v1","kind":"Node","metadata":{"name":"nagare-remote-1"}}`
		if _, err := runStdin(remote, "kubectl", "--kubeconfig", c.kubecfg, "create", "-f", "-"); err != nil {
			t.Fatal(err)
		}
		c.mustKubectl("patch", "node", "nagare-remote-1", "--subresource=status", "--type=merge",
			"-p", `{"status":{"addresses":[{"type":"InternalIP","address":"192.0.2.10"}]}}`)
		hasEndpoint := func() (bool, error) {
			resp, err := switchd.Call(ctx, c.path("nagare-run", "br-int.mgmt"), switchd.CtlRequest{Cmd: "list-ports"})
			if err != nil {
				return false, err
			}
			var ps []switchd.PortInfo
			if err := json.Unmarshal(resp.Data, &ps); err != nil {
				return false, err
			}
			for _, p := range ps {
				if p.Remote == "192.0.2.10" {
					return true, nil
				}
			}
			return false, nil
		}
		c.waitFor("tunnel endpoint to the new node", 60*time.Second, func() error {
			ok, err := hasEndpoint()
			if err == nil && !ok {
				err = fmt.Errorf("no endpoint port for 192.0.2.10 yet")
			}
			return err
		})
		c.mustKubectl("delete", "node", "nagare-remote-1")
		c.waitFor("tunnel endpoint gone with the node", 60*time.Second, func() error {
			ok, err := hasEndpoint()
			if err == nil && ok {
				err = fmt.Errorf("endpoint port for 192.0.2.10 still there")
			}
			return err
		})
	})

	t.Run("delete-frees-allocation", func(t *testing.T) {
		st, err := c.agentStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		before := st.IPAM.Used
		c.mustKubectl("delete", "pod", "web-c", "--grace-period=0", "--force", "--wait=true", "--timeout=60s")
		c.waitFor("web-c's allocation released", 60*time.Second, func() error {
			st, err := c.agentStatus(ctx)
			if err != nil {
				return err
			}
			for _, p := range st.Pods {
				if p.IP == ips["web-c"].String() {
					return fmt.Errorf("%s still allocated (%d of %d before)", p.IP, st.IPAM.Used, before)
				}
			}
			return nil
		})
	})

	t.Run("daemonset-deleted-pods-forward", func(t *testing.T) {
		nsA := c.podNetns(ctx, "web-a")
		c.mustKubectl("-n", "kube-system", "delete", "daemonset", "nagare", "--wait=true", "--timeout=90s")
		c.waitFor("nagare pods gone", 90*time.Second, func() error {
			out, err := c.kubectl("-n", "kube-system", "get", "pods", "-l", "app=nagare", "-o", "name")
			if err == nil && strings.TrimSpace(out) != "" {
				err = fmt.Errorf("still running: %s", out)
			}
			return err
		})
		if err := pingFrom(nsA, ips["web-b"].String()); err != nil {
			t.Errorf("web-a -> web-b after the DaemonSet was deleted: %v", err)
		}

		// Back again: the new agent finds its pods in its IPAM records and
		// its new switch gets their flows; a new pod gets a fresh address.
		c.mustKubectl("apply", "-f", c.manifest())
		c.waitFor("the re-applied agent has web-a and web-b again", 3*time.Minute, func() error {
			st, err := c.agentStatus(ctx)
			if err != nil {
				return err
			}
			if !st.Switch.Connected || len(st.Pods) != 2 {
				return fmt.Errorf("connected %v, pods %+v", st.Switch.Connected, st.Pods)
			}
			return nil
		})
		if err := pingFrom(nsA, ips["web-b"].String()); err != nil {
			t.Errorf("web-a -> web-b after the DaemonSet came back: %v", err)
		}
		if _, err := runStdin(c.podSpec("web-d"), "kubectl", "--kubeconfig", c.kubecfg, "apply", "-f", "-"); err != nil {
			t.Fatal(err)
		}
		d := c.podIP("web-d")
		if d == ips["web-a"] || d == ips["web-b"] || !podCIDR.Contains(d) {
			t.Errorf("web-d got %s (web-a %s, web-b %s, pod CIDR %s)", d, ips["web-a"], ips["web-b"], podCIDR)
		}
		if err := pingFrom(c.podNetns(ctx, "web-d"), ips["web-a"].String()); err != nil {
			t.Errorf("web-d -> web-a: %v", err)
		}
	})
}

func runStdin(stdin string, args ...string) (string, error) {
	cmd := execCommand(args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
