package lab

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestBuiltinScenariosAreValid(t *testing.T) {
	names := ScenarioNames()
	for _, want := range []string{"quickstart", "seed0-latency", "seed3-containers"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("built-in scenario %s missing (have %v)", want, names)
		}
	}
	for _, n := range names {
		s, err := LoadScenario(n)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		if s.Name != n {
			t.Errorf("file %s.yaml has name %q", n, s.Name)
		}
	}
}

func TestQuickstartCoversIntraAndInterBothPlacements(t *testing.T) {
	s, err := LoadScenario("quickstart")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range s.Measurements {
		for _, p := range m.Placements {
			seen[m.Kind+" "+s.scope(m.Client, m.Server).String()+" "+p] = true
		}
	}
	for _, want := range []string{"rtt intra-node cross-core", "rtt intra-node same-core", "rtt inter-node cross-core",
		"rtt inter-node same-core", "tcp intra-node cross-core", "tcp inter-node cross-core"} {
		if !seen[want] {
			t.Errorf("quickstart lacks %s", want)
		}
	}
	// The README's main job shows the peers beside each way nagare runs.
	planes := map[string]bool{}
	for _, d := range s.PlaneNames() {
		planes[d] = true
	}
	for _, want := range []string{"veth", "linux-bridge", "ovs-netdev", "linux-bridge+vxlan", "ovs-vxlan",
		"nagare", "nagare-dpu-df", "nagare-switch", "nagare-switch-onload"} {
		if !planes[want] {
			t.Errorf("quickstart lacks data plane %s", want)
		}
	}
}

const validBase = `
name: t
nodes: [n1, n2]
pods:
  - {name: a, node: n1}
  - {name: b, node: n2}
  - {name: x, node: n1}
  - {name: y, node: n2}
  - {name: z, node: n1}
dataplanes: [veth, linux-bridge]
reps: 2
measurements:
  - {name: m, kind: rtt, client: a, server: b, duration: 2s}
`

func TestParseScenarioDefaults(t *testing.T) {
	s, err := ParseScenario([]byte(validBase))
	if err != nil {
		t.Fatal(err)
	}
	m := s.Measurements[0]
	if m.Size != 128 || len(m.Placements) != 1 || m.Placements[0] != CrossCore || time.Duration(m.Duration) != 2*time.Second {
		t.Errorf("measurement defaults: %+v", m)
	}
	if s.Underlay.MTU != 1500 || s.CPUs != (CPUSpec{0, 1}) || len(s.Loads) != 1 || s.Loads[0].Name != "none" {
		t.Errorf("scenario defaults: mtu %d cpus %+v loads %+v", s.Underlay.MTU, s.CPUs, s.Loads)
	}
	if s.scope("a", "b") != ScopeInterNode || s.scope("a", "x") != ScopeIntraNode || s.scope("a", "a") != ScopeLocal {
		t.Error("scope classification wrong")
	}
}

func TestScenarioValidationErrors(t *testing.T) {
	for _, c := range []struct {
		name, from, to, want string
	}{
		{"unknown data plane", "dataplanes: [veth, linux-bridge]", "dataplanes: [veth, hyperswitch]", `unknown data plane "hyperswitch"`},
		{"no data planes", "dataplanes: [veth, linux-bridge]", "dataplanes: []", "dataplanes: none given"},
		{"all plus others", "dataplanes: [veth, linux-bridge]", "dataplanes: [all, veth]", `"all" must be the only entry`},
		{"pod on unknown node", "{name: b, node: n2}", "{name: b, node: n9}", `pod "b" is on unknown node "n9"`},
		{"zero reps", "reps: 2", "reps: 0", "reps: 0, need at least 1"},
		{"unknown kind", "kind: rtt", "kind: latency", `unknown kind "latency"`},
		{"client not a pod", "client: a, server: b", "client: q, server: b", `client "q" is not a pod`},
		{"bad placement", "duration: 2s}", "duration: 2s, placements: [same-socket]}", `unknown placement "same-socket"`},
		{"too short", "duration: 2s", "duration: 100ms", "need at least 1s"},
		{"bad duration", "duration: 2s", "duration: soon", `duration "soon"`},
		{"typo field", "reps: 2", "reps: 2\nrepetitions: 3", "field repetitions not found"},
		{"pod name = node name", "{name: x, node: n1}", "{name: n1, node: n1}", `"n1" is already a node`},
		{"long name", "{name: x, node: n1}", "{name: waytoolongname, node: n1}", "1-8 characters"},
		{"same cpus", "reps: 2", "reps: 2\ncpus: {client: 1, server: 1}", "cross-core needs two CPUs"},
		{"net load on measured pod", "reps: 2", "reps: 2\nloads:\n  - {name: l, net: {client: a, server: y, rate: 1G}}", `net load pod "a" is also measured`},
		{"bad rate", "reps: 2", "reps: 2\nloads:\n  - {name: l, net: {client: x, server: y, rate: fast}}", `net.rate "fast"`},
		{"cpu load percent", "reps: 2", "reps: 2\nloads:\n  - {name: l, cpu: {percent: 150, cpus: [0]}}", "cpu.percent 150"},
		{"cpu pods node", "reps: 2", "reps: 2\nloads:\n  - {name: l, cpu_pods: {node: n7, count: 3}}", `cpu_pods.node "n7"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			y := strings.Replace(validBase, c.from, c.to, 1)
			if y == validBase {
				t.Fatalf("replacement %q not found", c.from)
			}
			_, err := ParseScenario([]byte(y))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v\nwant it to contain %q", err, c.want)
			}
		})
	}
}

func TestValidationListsEveryProblem(t *testing.T) {
	y := strings.NewReplacer("reps: 2", "reps: 0", "dataplanes: [veth, linux-bridge]", "dataplanes: [nope]").Replace(validBase)
	_, err := ParseScenario([]byte(y))
	if err == nil || !strings.Contains(err.Error(), "reps: 0") || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("err = %v, want both problems", err)
	}
}

func TestLoadScenarioUnknownNameListsBuiltins(t *testing.T) {
	_, err := LoadScenario("no-such-scenario")
	if err == nil || !strings.Contains(err.Error(), "quickstart") {
		t.Errorf("err = %v", err)
	}
}

func TestApplicableTestsRespectScope(t *testing.T) {
	y := validBase + `loads:
  - {name: none}
  - {name: net, net: {client: x, server: y, rate: 1G}}
`
	y = strings.Replace(y, "duration: 2s}", "duration: 2s, placements: [cross-core, same-core]}\n  - {name: intra, kind: tcp, client: a, server: z}", 1)
	s, err := ParseScenario([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	count := func(sc Scope) int { return len(applicableTests(s, sc)) }
	// intra-only: only "intra" (1 placement) under "none"; the net step's
	// inter-node load pair is out of scope.
	if n := count(ScopeIntraNode); n != 1 {
		t.Errorf("intra-only plane: %d tests, want 1", n)
	}
	// both: (2 + 1) tests x 2 load steps.
	if n := count(ScopeIntraNode | ScopeInterNode); n != 6 {
		t.Errorf("intra+inter plane: %d tests, want 6", n)
	}
}

func TestParseDuration(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"5s", 5 * time.Second, ""},
		{"500ms", 500 * time.Millisecond, ""},
		{"2m", 2 * time.Minute, ""},
		{"1m30s", 90 * time.Second, ""},
		{"5", 5 * time.Second, ""}, // a bare number is seconds, as before
		{"0.5", 500 * time.Millisecond, ""},
		{" 3s ", 3 * time.Second, ""},
		{"0", 0, ""},
		{"", 0, "want e.g. 5s"},
		{"5 s", 0, "want e.g. 5s"},
		{"five", 0, "want e.g. 5s"},
		{"5x", 0, "want e.g. 5s"},
		{"NaN", 0, "out of range"},
		{"Inf", 0, "out of range"},
		{"1e300", 0, "out of range"},
	} {
		got, err := ParseDuration(c.in)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("ParseDuration(%q): %v", c.in, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("ParseDuration(%q) = %v, %v; want an error with %q", c.in, got, err, c.err)
		case c.err == "" && got != c.want:
			t.Errorf("ParseDuration(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestDurationFlag(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var d Duration
	fs.Var(&d, "duration", "")
	if err := fs.Parse([]string{"--duration", "1500ms"}); err != nil || time.Duration(d) != 1500*time.Millisecond {
		t.Errorf("--duration 1500ms: %v, %v", time.Duration(d), err)
	}
	if err := fs.Parse([]string{"--duration", "7"}); err != nil || time.Duration(d) != 7*time.Second {
		t.Errorf("--duration 7: %v, %v", time.Duration(d), err)
	}
	err := fs.Parse([]string{"--duration", "soon"})
	if err == nil || !strings.Contains(err.Error(), `duration "soon"`) {
		t.Errorf("--duration soon: %v", err)
	}
	if d.String() != "7s" {
		t.Errorf("String() = %q", d.String())
	}
}

func TestScenarioDurationYAML(t *testing.T) {
	parse := func(d string) (*Scenario, error) {
		return ParseScenario([]byte(`
name: d
nodes: [n1]
pods: [{name: a, node: n1}, {name: b, node: n1}]
dataplanes: [veth]
reps: 1
measurements:
  - {name: r, kind: rtt, client: a, server: b, duration: ` + d + `}
`))
	}
	for in, want := range map[string]time.Duration{"3s": 3 * time.Second, "2": 2 * time.Second, "1500ms": 1500 * time.Millisecond} {
		s, err := parse(in)
		if err != nil {
			t.Errorf("duration %s: %v", in, err)
			continue
		}
		if got := time.Duration(s.Measurements[0].Duration); got != want {
			t.Errorf("duration %s: got %v, want %v", in, got, want)
		}
	}
	if _, err := parse("soon"); err == nil || !strings.Contains(err.Error(), `line 8: duration "soon"`) {
		t.Errorf("bad duration: %v", err)
	}
}

// TestPaperScenariosRunNagare: every scenario that rebuilds a paper's
// experiment (seed*) measures nagare beside the peers, or (seed 002)
// nagare with the proxy in several places: there the compared setups are
// the proxy placements (ProxyPlacement), not data planes.
func TestPaperScenariosRunNagare(t *testing.T) {
	papers := 0
	for _, name := range ScenarioNames() {
		if !strings.HasPrefix(name, "seed") {
			continue
		}
		papers++
		s, err := LoadScenario(name)
		if err != nil {
			t.Fatal(err)
		}
		planes := strings.Join(s.PlaneNames(), " ")
		if !strings.Contains(" "+planes+" ", " nagare ") {
			t.Errorf("%s runs %s: no nagare", name, planes)
		}
		placements := 0
		for _, m := range s.Measurements {
			placements = max(placements, len(m.Proxies))
		}
		if len(s.PlaneNames()) < 2 && placements < 2 {
			t.Errorf("%s runs %s: no peer beside nagare", name, planes)
		}
	}
	if papers < 2 {
		t.Errorf("%d paper scenarios found", papers)
	}
}
