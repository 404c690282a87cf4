package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/nscluster"
)

const nagareTinyScenario = `
name: nagare-tiny
nodes: [n1, n2, n3]
pods:
  - {name: a, node: n1}
  - {name: b, node: n1}
  - {name: c, node: n2}
  - {name: d, node: n3}
dataplanes: [nagare]
reps: 1
measurements:
  - {name: intra, kind: rtt, client: a, server: b, duration: 1s, placements: [same-core]}
  - {name: inter, kind: rtt, client: a, server: c, duration: 1s, placements: [same-core]}
  - {name: third, kind: tcp, client: d, server: c, duration: 1s}
`

// buildNagare builds nagare's commands (cmd/<name>) into a directory of
// t and returns it; it skips t where the fast path cannot load (no BTF) or
// there is no go command to build with.
func buildNagare(t *testing.T, names ...string) string {
	t.Helper()
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		t.Skip("kernel without BTF")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go toolchain to build %v", names)
	}
	dir := t.TempDir()
	args := []string{"build", "-o", dir + "/"}
	for _, n := range names {
		args = append(args, "github.com/nagare-net/nagare/cmd/"+n)
	}
	if out, err := exec.Command(gobin, args...).CombinedOutput(); err != nil {
		t.Fatalf("building %v: %v\n%s", names, err, out)
	}
	return dir
}

// useBuiltNagare builds nagare-switch, nagare-agent and nagare-cni (and
// more commands if asked) for t, makes the nagare planes run them until
// t ends, and returns their directory.
func useBuiltNagare(t *testing.T, more ...string) string {
	t.Helper()
	dir := buildNagare(t, append([]string{"nagare-switch", "nagare-agent", "nagare-cni"}, more...)...)
	bins := nscluster.Binaries{Switch: filepath.Join(dir, "nagare-switch"), Agent: filepath.Join(dir, "nagare-agent"), CNI: filepath.Join(dir, "nagare-cni")}
	saved := NagareBinaries
	NagareBinaries = func() (nscluster.Binaries, error) { return bins, nil }
	t.Cleanup(func() { NagareBinaries = saved })
	return dir
}

// TestNagarePlane runs the nagare plane as users run nagare: nagare-switch,
// nagare-agent and nagare-cni built here, pods attached through the CNI
// library, on three nodes (an underlay bridge). Every pod gets an address
// from its node's pod CIDR; traffic flows intra-node and across nodes;
// afterwards no namespace, process, pin directory or host link is left.
func TestNagarePlane(t *testing.T) {
	skipUnlessLab(t, "sockperf", "iperf3")
	dir := useBuiltNagare(t)

	s, err := ParseScenario([]byte(nagareTinyScenario))
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("nlna%d", os.Getpid())
	var topo *Topology
	testHookBuilt = func(tp *Topology) { topo = tp }
	defer func() { testHookBuilt = nil }()
	linksBefore := rootLinks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, _ := runScenario(ctx, t, s, prefix, true)

	for _, name := range []string{"nagare-switch", "nagare-agent", "nagare-cni"} {
		if pids := processesOf(filepath.Join(dir, name)); len(pids) > 0 {
			t.Errorf("%s processes left behind: %v", name, pids)
		}
	}
	if left, _ := filepath.Glob("/sys/fs/bpf/" + prefix + "-*"); len(left) > 0 {
		t.Errorf("pin directories left behind: %v", left)
	}
	if after := rootLinks(t); strings.Join(after, " ") != strings.Join(linksBefore, " ") {
		t.Errorf("host links changed: before %v after %v", linksBefore, after)
	}
	if len(res.Samples) != 3 {
		t.Fatalf("%d samples, want 3", len(res.Samples))
	}
	for _, smp := range res.Samples {
		if smp.Status != StatusOK {
			t.Errorf("%s: %s: %s", smp.Measurement, smp.Status, smp.Error)
		}
		if smp.SwitchProcs < 2 {
			t.Errorf("%s: %d processes accounted, want the switches and agents", smp.Measurement, smp.SwitchProcs)
		}
	}
	for _, r := range res.Rows() {
		if r.OK != 1 || (r.Kind == KindRTT && r.Cell("p50").Median <= 0) || (r.Kind == KindTCP && r.Cell("gbps").Median <= 0) {
			t.Errorf("%s: %d/%d ok: %v %v", r.Measurement, r.OK, r.Runs, r.Values, r.Errors)
		}
	}
	if topo == nil {
		t.Fatal("no topology built")
	}
	// Addresses come from the agents' IPAM: node j's pods in 10.99.j.0/24,
	// never its gateway (.1), never twice.
	seen := map[string]string{}
	for _, p := range topo.Pods {
		ip, err := netip.ParseAddr(p.IP)
		cidr := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 99, byte(p.Node.Index), 0}), 24)
		if err != nil || !cidr.Contains(ip) || ip == cidr.Addr().Next() {
			t.Errorf("pod %s on %s: address %q, want one of %s past the gateway", p.Name, p.Node.Name, p.IP, cidr)
		}
		if o, dup := seen[p.IP]; dup {
			t.Errorf("pods %s and %s both got %s", o, p.Name, p.IP)
		}
		seen[p.IP] = p.Name
		if !strings.HasPrefix(p.MAC, "0a:58:") || p.HostIf == "" {
			t.Errorf("pod %s: MAC %q, host end %q: not from the CNI result", p.Name, p.MAC, p.HostIf)
		}
	}
}
