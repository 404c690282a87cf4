package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// skipUnlessLab skips tests that build namespaces: they need root, the
// tools, and are not for -short runs.
func skipUnlessLab(t *testing.T, tools ...string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds network namespaces and runs real traffic; skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if m := MissingTools(append([]string{"ip", "ethtool", "ping", "taskset", "sysctl"}, tools...)...); len(m) > 0 {
		t.Skipf("missing %v", m)
	}
	if numCPU() < 2 {
		t.Skip("needs 2 CPUs")
	}
}

// unavailablePlane is a data plane that cannot run here, to check that it is
// reported as skipped rather than failing the run.
type unavailablePlane struct{ vethPlane }

func (*unavailablePlane) Name() string     { return "test-unavailable" }
func (*unavailablePlane) Available() error { return notAvailable("no such hardware (test)") }

func init() { RegisterDataPlane(func() DataPlane { return &unavailablePlane{} }) }

// rootLinks lists the host namespace's interfaces, to prove the lab adds
// none there.
func rootLinks(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			names = append(names, strings.TrimSuffix(strings.SplitN(f[1], "@", 2)[0], ":"))
		}
	}
	sort.Strings(names)
	return names
}

const tinyScenario = `
name: tiny
nodes: [n1]
pods:
  - {name: a, node: n1}
  - {name: b, node: n1}
  - {name: x, node: n1}
  - {name: y, node: n1}
  - {name: p, node: n1}
  - {name: q, node: n1}
dataplanes: [veth, linux-bridge, test-unavailable]
reps: 1
measurements:
  - {name: rtt, kind: rtt, client: a, server: b, duration: 1s, placements: [cross-core, same-core]}
  - {name: tcp, kind: tcp, client: a, server: b, duration: 1s}
  - {name: udp, kind: udp-pps, client: a, server: b, duration: 1s, with: [{client: p, server: q}]}
loads:
  - {name: none}
  - name: busy
    cpu: {percent: 20, cpus: [0]}
    net: {client: x, server: y, rate: 100M}
    cpu_pods: {node: n1, count: 2, percent: 20}
`

func TestRunTinyScenarioEndToEnd(t *testing.T) {
	skipUnlessLab(t, "sockperf", "iperf3", "stress-ng")
	s, err := ParseScenario([]byte(tinyScenario))
	if err != nil {
		t.Fatal(err)
	}
	linksBefore := rootLinks(t)
	prefix := fmt.Sprintf("nlt%d", os.Getpid())
	inodes := map[uint64]bool{}
	testHookBuilt = func(topo *Topology) {
		for _, ns := range topo.namespaces() {
			ino, err := nsInode("/run/netns/" + ns)
			if err != nil {
				t.Errorf("namespace %s: %v", ns, err)
			}
			inodes[ino] = true
		}
	}
	defer func() { testHookBuilt = nil }()

	res, md := runScenario(context.Background(), t, s, prefix, true)
	if pids := pidsWithNetnsInode(inodes); len(pids) > 0 {
		t.Errorf("processes left in the lab's namespaces: %v", pids)
	}
	if after := rootLinks(t); strings.Join(after, " ") != strings.Join(linksBefore, " ") {
		t.Errorf("host links changed: before %v after %v", linksBefore, after)
	}

	rows := map[string]*Row{}
	for _, r := range res.Rows() {
		rows[r.DataPlane+"/"+r.Measurement+"/"+r.Placement+"/"+r.Load] = r
	}
	for _, dp := range []string{"veth", "linux-bridge"} {
		for _, load := range []string{"none", "busy"} {
			for _, key := range []string{"rtt/cross-core", "rtt/same-core", "tcp/cross-core", "udp/cross-core"} {
				r := rows[dp+"/"+key+"/"+load]
				if r == nil {
					t.Errorf("%s %s %s: no row", dp, key, load)
					continue
				}
				if r.OK != 1 {
					t.Errorf("%s %s %s: %d/%d ok: %v", dp, key, load, r.OK, r.Runs, r.Errors)
					continue
				}
				c := func(col string) float64 { return r.Cell(col).Median }
				switch r.Kind {
				case KindRTT:
					if !(c("min") > 0 && c("min") <= c("p50") && c("p50") <= c("p90") && c("p90") <= c("p99") && c("trans/s") > 0) {
						t.Errorf("%s %s %s: implausible RTT %v", dp, key, load, r.Values)
					}
				case KindTCP:
					if c("gbps") <= 0 {
						t.Errorf("%s %s %s: TCP %v Gbit/s", dp, key, load, c("gbps"))
					}
				case KindUDPPPS:
					if c("rx kpps") <= 0 || c("tx kpps") < c("rx kpps")*0.99 {
						t.Errorf("%s %s %s: UDP rx %v tx %v kpps", dp, key, load, c("rx kpps"), c("tx kpps"))
					}
					// Both flows ran at once, each measured on its own.
					if c("flow0 mbps") != c("rx mbps") || c("flow1 mbps") <= 0 || c("flows mbps") != c("flow0 mbps")+c("flow1 mbps") {
						t.Errorf("%s %s %s: flows %v", dp, key, load, r.Values)
					}
				}
				if c("host cpu") <= 0 || c("softirqs") <= 0 {
					t.Errorf("%s %s %s: no host CPU/softirqs accounted: %v", dp, key, load, r.Values)
				}
			}
		}
	}
	skipped := rows["test-unavailable/rtt/cross-core/none"]
	if skipped == nil || !strings.Contains(skipped.Skipped, "no such hardware") {
		t.Errorf("unavailable plane not reported as skipped: %+v", skipped)
	}
	if !strings.Contains(md, "skipped: not available: no such hardware (test)") {
		t.Error("markdown lacks the skip reason")
	}
}

// TestEveryDataPlaneCarriesTraffic runs one short round trip intra-node and
// inter-node through every registered data plane that is available here.
func TestEveryDataPlaneCarriesTraffic(t *testing.T) {
	skipUnlessLab(t, "sockperf")
	s, err := ParseScenario([]byte(`
name: planes
nodes: [n1, n2]
pods: [{name: a, node: n1}, {name: b, node: n1}, {name: c, node: n2}]
dataplanes: [all]
reps: 1
measurements:
  - {name: intra, kind: rtt, client: a, server: b, duration: 1s, placements: [same-core]}
  - {name: inter, kind: rtt, client: a, server: c, duration: 1s, placements: [same-core]}
`))
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("nlp%d", os.Getpid())
	res, _ := runScenario(context.Background(), t, s, prefix, false)
	ran := map[string]int{}
	for _, r := range res.Rows() {
		if r.Skipped != "" {
			t.Logf("%s: skipped: %s", r.DataPlane, r.Skipped)
			continue
		}
		ran[r.DataPlane]++
		if r.OK != r.Runs || r.Cell("p50").Median <= 0 {
			t.Errorf("%s %s: %d/%d ok, p50 %v: %v", r.DataPlane, r.Measurement, r.OK, r.Runs, r.Cell("p50").Median, r.Errors)
		}
	}
	for _, p := range res.Planes {
		dp, _ := NewDataPlane(p.Name)
		want := 0
		if dp.Scope().Has(ScopeIntraNode) {
			want++
		}
		if dp.Scope().Has(ScopeInterNode) {
			want++
		}
		if p.Skipped == "" && ran[p.Name] != want {
			t.Errorf("%s (%s): %d rows, want %d", p.Name, p.Scope, ran[p.Name], want)
		}
	}
	t.Logf("data planes that ran: %v", ran)
}

// TestThreeNodesOverUnderlayBridge checks the >2-node underlay (a bridge in
// its own namespace) with the planes that support any number of nodes.
func TestThreeNodesOverUnderlayBridge(t *testing.T) {
	skipUnlessLab(t, "sockperf")
	s, err := ParseScenario([]byte(`
name: three
nodes: [n1, n2, n3]
pods: [{name: a, node: n1}, {name: b, node: n2}, {name: c, node: n3}]
dataplanes: [routed, linux-bridge+vxlan]
reps: 1
measurements:
  - {name: ac, kind: rtt, client: a, server: c, duration: 1s, placements: [same-core]}
  - {name: bc, kind: rtt, client: b, server: c, duration: 1s, placements: [same-core]}
`))
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("nl3n%d", os.Getpid())
	var built []string
	testHookBuilt = func(topo *Topology) { built = topo.namespaces() }
	defer func() { testHookBuilt = nil }()
	res, _ := runScenario(context.Background(), t, s, prefix, false)
	if !strings.Contains(strings.Join(built, " "), prefix+"-ul") {
		t.Errorf("no underlay namespace among %v", built)
	}
	rows := res.Rows()
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4", len(rows))
	}
	for _, r := range rows {
		if r.OK != 1 || r.Cell("p50").Median <= 0 {
			t.Errorf("%s %s: %d/%d ok: %v", r.DataPlane, r.Measurement, r.OK, r.Runs, r.Errors)
		}
	}
}

// runScenario runs s under prefix as the root tests do (no files, no
// progress bar), returns the result and its Markdown report (logged when
// asked), and fails the test when a namespace of the run is left behind.
func runScenario(ctx context.Context, t *testing.T, s *Scenario, prefix string, logReport bool) (*Result, string) {
	t.Helper()
	res, err := Run(ctx, s, Options{Prefix: prefix, Progress: io.Discard, NoFiles: true})
	if err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	res.WriteMarkdown(&md)
	if logReport {
		t.Log("\n" + md.String())
	}
	if left := ListNamespaces(prefix); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
	return res, md.String()
}
