package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/agent"
	"github.com/nagare-net/nagare/pkg/agent/vf"
	"github.com/nagare-net/nagare/pkg/controlnet"
	"github.com/nagare-net/nagare/pkg/nscluster"
	"github.com/nagare-net/nagare/pkg/switchd"
)

// TestDPUMode is issue 12's acceptance on a namespace cluster of two
// nodes in DPU mode (docs/dpu.md): every switch runs in its node's DPU
// domain, reached by the agent over mutual TLS; pods come through the real
// nagare-cni.
func TestDPUMode(t *testing.T) {
	c := newClusterWith(t, func(o *nscluster.Options) { o.DPU = true })
	ctx := ctxT(t, 4*time.Minute)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	for _, n := range c.Nodes {
		if out, _ := exec.Command("ip", "netns", "pids", n.NS).Output(); len(strings.Fields(string(out))) != 0 {
			// Only the agent is started with --netns; no process lives in
			// the host namespace, and the switch's namespace is the DPU's.
			t.Errorf("%s: processes in the host namespace: %s", n.Config.Name, out)
		}
		if !strings.Contains(strings.Join(n.Switch.Cmd.Args, " "), "--netns "+n.DPUNS) {
			t.Errorf("%s: the switch is not in the DPU domain: %v", n.Config.Name, n.Switch.Cmd.Args)
		}
		// Every thread of the switch runs on the DPU domain's CPUs.
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", n.Switch.Cmd.Process.Pid))
		for _, task := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", n.Switch.Cmd.Process.Pid, task.Name()))
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok && strings.TrimSpace(v) != c.DPUCPUs() {
					t.Errorf("%s: switch thread %s may run on CPUs %s, want the DPU's %s", n.Config.Name, task.Name(), strings.TrimSpace(v), c.DPUCPUs())
				}
			}
		}
		if len(tasks) == 0 {
			t.Errorf("%s: no threads of the switch", n.Config.Name)
		}
	}
	var pods []*nscluster.Pod
	for i := 0; i < 4; i++ {
		p, err := c.Nodes[i%2].AddPod(ctx, fmt.Sprintf("d%d", i))
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	a, b := pods[0], pods[2] // both on node 1
	allPairs := func(t *testing.T) { t.Helper(); pingAllPairs(t, pods, 1) }
	t.Run("control-network", func(t *testing.T) {
		// The switch listens on the control address only, in the DPU
		// domain, bound to the control link.
		out, err := exec.Command("ip", "netns", "exec", n1.DPUNS, "ss", "-Hltn").CombinedOutput()
		if err != nil {
			t.Fatal(err, string(out))
		}
		if !strings.Contains(string(out), nscluster.DPUControlAddr+"%"+nscluster.DPULink+":"+nscluster.DPUControlPort) {
			t.Errorf("no listener on %s%%%s:%s: %s", nscluster.DPUControlAddr, nscluster.DPULink, nscluster.DPUControlPort, out)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f := strings.Fields(l); len(f) > 3 && (strings.HasPrefix(f[3], "0.0.0.0:") || strings.HasPrefix(f[3], "*:") || strings.HasPrefix(f[3], "[::]:")) {
				t.Errorf("a wildcard listener in the DPU domain: %s", l)
			}
		}
		// The agent's certificate opens the control protocol; without a
		// client certificate the switch answers nothing.
		pki, err := controlnet.EnsurePKI(n1.PKIDir(), controlnet.RoleAgent, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctrl := net.ParseIP(nscluster.DPUControlAddr)
		call := func(cfg *tls.Config) error {
			e := controlnet.Endpoint{Network: "tcp", Address: nscluster.DPUControlAddr + ":" + nscluster.DPUControlPort, Netns: n1.NetnsPath(), TLS: cfg}
			c, err := e.Dial(ctx)
			if err != nil {
				return err
			}
			_, err = switchd.CallConn(ctx, c, switchd.CtlRequest{Cmd: "list-ports"})
			return err
		}
		if err := call(pki.ClientConfig(ctrl)); err != nil {
			t.Errorf("list-ports with the agent's certificate: %v", err)
		}
		noCert := pki.ClientConfig(ctrl)
		noCert.Certificates = nil
		if err := call(noCert); err == nil {
			t.Error("list-ports without a client certificate was answered")
		}
		// A pod cannot reach the control address through the DPU's stack.
		if out, err := a.Exec("timeout", "3", "bash", "-c", "exec 3<>/dev/tcp/"+nscluster.DPUControlAddr+"/"+nscluster.DPUControlPort); err == nil {
			t.Errorf("a pod connected to the DPU's control port: %s", out)
		}
	})
	t.Run("vf-crossing-steered", func(t *testing.T) {
		// What crosses into the DPU domain is processed on its CPUs.
		st := dpuStatus(t, n1)
		for _, p := range st.Pods {
			rep := "rep" + p.Host[3:]
			out, err := exec.Command("ip", "netns", "exec", n1.DPUNS, "cat", "/sys/class/net/"+rep+"/queues/rx-0/rps_cpus").CombinedOutput()
			mask, _ := vf.CPUMask(c.DPUCPUs())
			if err != nil || strings.TrimLeft(strings.TrimSpace(string(out)), "0,") != mask {
				t.Errorf("%s: rps_cpus %q (%v), want the DPU's CPUs %s = %s", rep, out, err, c.DPUCPUs(), mask)
			}
		}
	})
	t.Run("all-pairs-ping", allPairs)
	t.Run("all-pairs-tcp", func(t *testing.T) {
		for i, x := range pods {
			for j, y := range pods {
				if x != y {
					nstest.TCPTransfer(t, podNS(y), podNS(x), fmt.Sprintf("%s:%d", y.IP, 7100+i*10+j), 128<<10)
				}
			}
		}
	})
	t.Run("host-pod", func(t *testing.T) {
		for _, p := range pods {
			if err := ping(p.NS, nscluster.DPUHostAddr, 1); err != nil {
				t.Error(err)
			}
			if err := ping(p.Node.NS, p.IP.String(), 1); err != nil {
				t.Error(err)
			}
		}
	})
	t.Run("external-snat-on-dpu-address", func(t *testing.T) {
		ext := nstest.NS{Name: c.External, Path: "/var/run/netns/" + c.External}
		for i, p := range pods {
			got := nstest.UDPPeer(t, podNS(p), ext, fmt.Sprintf("%s:%d", nscluster.ExternalHost, 7600+i))
			if got != p.Node.ExtAddr {
				t.Errorf("the external host saw %s from %s, want its DPU's %s", got, p.Name, p.Node.ExtAddr)
			}
		}
		// The tunnel endpoints are the DPU domains' uplink addresses.
		st := dpuStatus(t, n1)
		if len(st.Remotes) != 1 || st.Remotes[0].Underlay != n2.Config.Underlay.String() {
			t.Errorf("node1's remotes: %+v", st.Remotes)
		}
		if out, _ := exec.Command("ip", "-n", n1.DPUNS, "-o", "addr", "show", "dev", "ul0").Output(); !strings.Contains(string(out), n1.Config.Underlay.String()+"/") {
			t.Errorf("ul0 of the DPU domain lacks %s: %s", n1.Config.Underlay, out)
		}
	})
	t.Run("direct-forward-path", func(t *testing.T) {
		for _, on := range []bool{true, false, true} {
			if err := agent.SetDirectForward(ctx, n1.AgentSocket(), on); err != nil {
				t.Fatal(err)
			}
			before := dpuStatus(t, n1).DPU.Paths
			if err := ping(a.NS, b.IP.String(), 20); err != nil {
				t.Fatal(err)
			}
			after := dpuStatus(t, n1).DPU.Paths
			direct, toDPU := after["direct"]-before["direct"], after["to-dpu"]-before["to-dpu"]
			fromDPU := after["from-dpu"] - before["from-dpu"]
			t.Logf("direct forward %v: direct %d, to-dpu %d, from-dpu %d", on, direct, toDPU, fromDPU)
			if on && (direct < 40 || fromDPU > 5) {
				t.Errorf("direct forward on: 20 echo requests + 20 replies, but direct %d, from DPU %d", direct, fromDPU)
			}
			if !on && (direct != 0 || toDPU < 40 || fromDPU < 40) {
				t.Errorf("direct forward off: every packet must hairpin, but direct %d, to DPU %d, from DPU %d", direct, toDPU, fromDPU)
			}
		}
	})
	t.Run("spoofed-source-dropped", func(t *testing.T) {
		thief := pods[3].IP.String() // node 2's pod's address, taken by a
		if out, err := a.Exec("ip", "addr", "add", thief+"/32", "dev", "eth0"); err != nil {
			t.Fatal(out, err)
		}
		defer a.Exec("ip", "addr", "del", thief+"/32", "dev", "eth0")
		before := dpuStatus(t, n1).DPU.Paths
		out, _ := exec.Command("ip", "netns", "exec", a.NS, "ping", "-n", "-q", "-c", "5", "-i", "0.1", "-W", "1",
			"-I", thief, b.IP.String()).CombinedOutput()
		if !strings.Contains(string(out), " 0 received") {
			t.Errorf("a ping with a stolen source address got through with direct forward on: %s", out)
		}
		after := dpuStatus(t, n1).DPU.Paths
		if d := after["to-dpu-spoofed"] - before["to-dpu-spoofed"]; d < 5 {
			t.Errorf("spoofed packets sent to the DPU: %d, want >= 5", d)
		}
		if d := after["direct"] - before["direct"]; d != 0 {
			t.Errorf("%d packets went direct during the spoofing", d)
		}
	})
	t.Run("dpu-down-add-fails-fast", func(t *testing.T) {
		// A hung DPU (its switch stopped, the TCP connection still open):
		// only the lease can tell.
		if err := n1.Switch.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		waitAgent(t, n1, false)
		p, err := n1.NewPod("d-late")
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = p.Add(ctx)
		took := time.Since(start)
		var ce *types.Error
		if !errors.As(err, &ce) || ce.Code != types.ErrTryAgainLater || !strings.Contains(ce.Msg, "lease expired") {
			t.Errorf("ADD while the DPU is down: %v, want code 11 saying the lease expired", err)
		}
		if took > 2*time.Second {
			t.Errorf("ADD while the DPU is down took %v, want it to fail at once", took)
		}
		cl, _ := n1.ConfList()
		err = c.CNI().GetStatusNetworkList(ctx, cl)
		if !errors.As(err, &ce) || ce.Code != 50 {
			t.Errorf("STATUS while the DPU is down: %v, want code 50", err)
		}
		// The DPU comes back empty: no flows, no ports.
		n1.Switch.Kill()
		if err := n1.DestroySwitch(); err != nil {
			t.Fatal(err)
		}
		if err := n1.StartSwitch(ctx); err != nil {
			t.Fatal(err)
		}
		waitAgent(t, n1, true)
		allPairs(t)
		for _, p := range pods {
			if err := p.Check(ctx); err != nil {
				t.Errorf("CHECK %s after the DPU came back: %v", p.Name, err)
			}
		}
		if err := p.Add(ctx); err != nil {
			t.Errorf("ADD after the DPU came back: %v", err)
		} else if err := ping(p.NS, a.IP.String(), 1); err != nil {
			t.Error(err)
		}
	})
	t.Run("dpu-domain-loses-representors", func(t *testing.T) {
		// A DPU rebuilt from scratch has no representors: the agent makes
		// the VF crossings again and re-attaches every pod, deleting none.
		n1.Switch.Kill()
		if err := n1.DestroySwitch(); err != nil {
			t.Fatal(err)
		}
		out, _ := exec.Command("ip", "-n", n1.DPUNS, "-o", "link", "show").Output()
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], "rep") {
				name := strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0]
				if out, err := exec.Command("ip", "-n", n1.DPUNS, "link", "del", name).CombinedOutput(); err != nil {
					t.Fatal(err, string(out))
				}
			}
		}
		if err := n1.StartSwitch(ctx); err != nil {
			t.Fatal(err)
		}
		waitAgent(t, n1, true)
		allPairs(t)
	})
	t.Run("agent-restart", func(t *testing.T) {
		lv := startLiveness(t, podNS(a), podNS(b), b.IP.String(), 7900)
		lv.waitTraffic(t)
		n1.Agent.Kill()
		if err := n1.StartAgent(ctx); err != nil {
			t.Fatal(err)
		}
		udp, tcp, _, _ := lv.finish()
		if udp > time.Second || tcp > time.Second {
			t.Errorf("pods stopped talking for %v (UDP) / %v (TCP) across an agent restart", udp, tcp)
		}
		allPairs(t)
	})
}

func dpuStatus(t *testing.T, n *nscluster.Node) *agent.Status {
	t.Helper()
	st, err := n.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode != agent.ModeDPU || st.DPU == nil {
		t.Fatalf("%s is not in DPU mode: %+v", n.Config.Name, st)
	}
	return st
}

// waitAgent waits until n's agent reports its switch connected (or not).
func waitAgent(t *testing.T, n *nscluster.Node, connected bool) {
	t.Helper()
	waitStatus(t, n, 15*time.Second, fmt.Sprintf("switch connected=%v", connected), func(st *agent.Status) bool {
		return st.Switch.Connected == connected
	})
}
