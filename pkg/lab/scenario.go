package lab

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/nagare-net/nagare/lab/scenarios"
	"github.com/nagare-net/nagare/pkg/lab/pktgen"
)

// Scenario is one lab experiment as written in a YAML file under
// lab/scenarios/: the nodes and pods to build, the data planes to compare,
// what to measure between which pods, under which background loads, and how
// many interleaved repetitions to run.
type Scenario struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	// Nodes are the node network namespaces, joined by the underlay.
	Nodes []string `yaml:"nodes"`
	// Pods are network namespaces placed on a node. Their order fixes the
	// address plan: the i-th pod (1-based) is 10.99.0.i.
	Pods []PodSpec `yaml:"pods"`
	// Underlay is the link that joins the nodes.
	Underlay UnderlaySpec `yaml:"underlay"`
	// DataPlanes lists the data planes to compare, in report order. The
	// single entry "all" means every registered data plane.
	DataPlanes []string `yaml:"dataplanes"`
	// Reps is the number of interleaved repetitions (A B C, B C A, C A B ...: each rep starts one plane further).
	Reps int `yaml:"reps"`
	// CPUs places the processes: the cross-core placement runs the client on
	// CPUs.Client and the server on CPUs.Server; the same-core placement puts
	// client, server and the switch processes on CPUs.Server.
	CPUs         CPUSpec           `yaml:"cpus"`
	Measurements []MeasurementSpec `yaml:"measurements"`
	// Loads are background-load steps; every measurement runs once per step.
	// No steps means one step without load, named "none".
	Loads []LoadSpec `yaml:"loads"`
	// Paper holds the source paper's numbers, printed beside ours.
	Paper []PaperRow `yaml:"paper"`
	// Flows, if given, replace the OpenFlow table of every switch plane
	// (ovs-ofctl syntax; planes that take no table fail): the isolation
	// scenario's allow-list ACL.
	Flows []string `yaml:"flows"`
	// Policies are allows a policy plane enforces besides the measured
	// traffic (netpol.go): e.g. the isolation scenario's allow-list for
	// an attacker pod.
	Policies []PolicyAllow `yaml:"policies"`
	// BPFStats turns the kernel's BPF run-time statistics on for the run
	// and reports the fast path's own time per packet and switch
	// (bpfstats.go). Each run of every BPF program then costs two clock
	// reads more: compare planes with it on against each other.
	BPFStats bool `yaml:"bpfStats"`
}

// PaperRow is one row of the source paper's results: its numbers for a
// measurement, and the data plane of ours that stands for its setup.
type PaperRow struct {
	Label       string `yaml:"label"`       // the paper's name for the setup
	Measurement string `yaml:"measurement"` // one of Measurements
	DataPlane   string `yaml:"dataplane"`   // our row beside it
	// RTT µs: min, avg, p50, p90, p99 (Table 3/4).
	RTT []float64 `yaml:"rtt"`
	// Mbps and Loss are a udp-pps measurement's throughput (Mbit/s) and
	// loss (%) per flow, the measured flow first, then its With flows;
	// either may be left out when the paper gives only the other.
	Mbps []float64 `yaml:"mbps"`
	Loss []float64 `yaml:"loss"`
	// Proxy and P90Ms are a bookinfo measurement's: the proxy placement
	// of ours beside the paper's setup, and the paper's p90 latency of
	// the product page at one connection (ms).
	Proxy string  `yaml:"proxy"`
	P90Ms float64 `yaml:"p90_ms"`
}

// PodSpec places one pod on a node.
type PodSpec struct {
	Name string `yaml:"name"`
	Node string `yaml:"node"`
	// Uplink, if set, makes this "pod" an uplink port of its node's switch
	// instead: a veth whose node end is a switch port like a pod's and
	// whose far end is in the tester namespace of that name (a peer node
	// without a switch, seed 004's traffic generator). The interface there
	// is named after the pod and has the pod's address; several uplinks
	// may share one tester, whose replies leave by the uplink of the
	// address they come from (source routing).
	Uplink string `yaml:"uplink"`
}

// flowPods returns the client pods of m's flows (the measured one, Also,
// With) and the uplink ports among its flows' ends.
func (s *Scenario) flowPods(m MeasurementSpec) (clients int, uplinks []string) {
	up := map[string]bool{}
	for _, p := range s.Pods {
		if p.Uplink != "" {
			up[p.Name] = true
		}
	}
	seen := map[string]bool{}
	add := func(names ...string) {
		for _, n := range names {
			if up[n] && !seen[n] {
				seen[n] = true
				uplinks = append(uplinks, n)
			}
		}
	}
	add(m.Client, m.Server)
	for range m.Also {
		add(m.Server)
	}
	for _, f := range m.With {
		add(f.Client, f.Server)
	}
	return 1 + len(m.Also) + len(m.With), uplinks
}

// HasUplinks reports whether any pod of s is an uplink port (PodSpec.Uplink).
func (s *Scenario) HasUplinks() bool {
	for _, p := range s.Pods {
		if p.Uplink != "" {
			return true
		}
	}
	return false
}

// UnderlaySpec describes the link between nodes. Two nodes are joined by one
// veth pair; more nodes by a Linux bridge in an underlay namespace.
type UnderlaySpec struct {
	MTU int `yaml:"mtu"`
}

// CPUSpec names the CPUs used by the two placements.
type CPUSpec struct {
	Client int `yaml:"client"`
	Server int `yaml:"server"`
}

// Measurement kinds.
const (
	// KindRTT is a sockperf ping-pong (UDP request/response) latency test.
	KindRTT = "rtt"
	// KindTCP is a one-stream iperf3 TCP throughput test.
	KindTCP = "tcp"
	// KindUDPPPS is an iperf3 UDP flood of small datagrams (packet rate).
	KindUDPPPS = "udp-pps"
)

// Placements of the client, server and switch processes on CPUs.
const (
	// CrossCore runs the client on CPUs.Client and the server on CPUs.Server;
	// switch processes are left unpinned.
	CrossCore = "cross-core"
	// SameCore pins client, server and switch processes on CPUs.Server.
	SameCore = "same-core"
)

// MeasurementSpec is one test between two pods.
type MeasurementSpec struct {
	Name string `yaml:"name"`
	// Kind is rtt, tcp or udp-pps.
	Kind string `yaml:"kind"`
	// Client and Server are pod names. Client == Server measures over the
	// pod's loopback (the host stack without any data plane).
	Client string `yaml:"client"`
	Server string `yaml:"server"`
	// Placements lists cross-core and/or same-core; default cross-core.
	Placements []string `yaml:"placements"`
	// Duration of each test; default 5s.
	Duration Duration `yaml:"duration"`
	// Size is the message size in bytes (rtt: default 128; udp-pps: default
	// 64); for flow-setup and revalidation the Ethernet frame length
	// (default 64).
	Size int `yaml:"size"`
	// Flows is the number of new flows (5-tuples) of a flow-setup or
	// revalidation measurement (flowsetup.go).
	Flows int `yaml:"flows"`
	// Rate is the offered rate of a flow-setup measurement in packets/s,
	// 0 = flat out; for revalidation the fill rate (0 = default).
	Rate int `yaml:"rate"`
	// Also lists more client pods (tcp only) that run the same test at
	// the same time against the server, each with its own iperf3 server:
	// seed 004's "N VMs". Results are summed.
	Also []string `yaml:"also"`
	// Reverse (tcp only) makes the server send (iperf3 -R): the clients
	// receive.
	Reverse bool `yaml:"reverse"`
	// With lists further flows that run at the same time as the measured
	// one (Client → Server), each with its own iperf3 server and its
	// clients on the same CPUs: seed 001's colliding "VM" flows and its
	// overcommit (udp-pps: each flow's throughput and loss are reported),
	// seed 004's VMs split over two uplinks (tcp: summed, as Also).
	With []FlowSpec `yaml:"with"`
	// Via is where the client sends: "pod" (default) the server pod's
	// address, "clusterip" a Service's ClusterIP whose endpoint is the
	// server pod, "nodeport" that Service's NodePort on the node's
	// address (services.go).
	Via string `yaml:"via"`
	// Baseline (via clusterip or nodeport) names the pod-to-pod measurement this one
	// is compared with in the report.
	Baseline string `yaml:"baseline"`
	// Streams (tcp) is iperf3's parallel streams (-P), default 1.
	Streams int `yaml:"streams"`
	// Conns (conn-rate) is wrk's open connections (-c), default 16.
	Conns int `yaml:"conns"`
	// Services (service-scale) are the Service counts to step through.
	Services []int `yaml:"services"`
	// Bookinfo (kind bookinfo) names the application's pods; Proxies
	// are the proxy placements to compare (ProxyPlacement), Connections
	// wrk's connection counts (mesh.go).
	Bookinfo    *BookinfoSpec `yaml:"bookinfo"`
	Proxies     []string      `yaml:"proxies"`
	Connections []int         `yaml:"connections"`
}

// FlowSpec is one more flow of a multi-flow measurement.
type FlowSpec struct {
	Client string `yaml:"client"`
	Server string `yaml:"server"`
}

// LoadSpec is one step of background load. All parts given run together.
type LoadSpec struct {
	Name string `yaml:"name"`
	// CPU runs stress-ng CPU workers at a percentage on the given CPUs.
	CPU *CPULoadSpec `yaml:"cpu"`
	// Net runs iperf3 TCP streams at a rate between two pods.
	Net *NetLoadSpec `yaml:"net"`
	// CPUPods creates extra pods on a node, each running one CPU-heavy
	// stress-ng worker.
	CPUPods *CPUPodsSpec `yaml:"cpu_pods"`
	// Attack runs a hostile pod's traffic (isolation.go).
	Attack *AttackSpec `yaml:"attack"`
}

// CPULoadSpec is stress-ng --cpu len(CPUs) --cpu-load Percent, pinned to CPUs.
type CPULoadSpec struct {
	Percent int   `yaml:"percent"`
	CPUs    []int `yaml:"cpus"`
}

// NetLoadSpec is iperf3 TCP from Client to Server at Rate (iperf3 -b syntax,
// e.g. 500M, 2G) with Streams parallel streams.
type NetLoadSpec struct {
	Client  string `yaml:"client"`
	Server  string `yaml:"server"`
	Rate    string `yaml:"rate"`
	Streams int    `yaml:"streams"`
}

// CPUPodsSpec is Count extra namespaces on Node, each with one stress-ng CPU
// worker at Percent (default 100).
type CPUPodsSpec struct {
	Node    string `yaml:"node"`
	Count   int    `yaml:"count"`
	Percent int    `yaml:"percent"`
}

// Duration is a time.Duration that YAML and command-line flags may give as
// a Go duration ("2s", "500ms", "2m") or a bare number of seconds.
type Duration time.Duration

// ParseDuration reads a Go duration ("5s", "500ms", "1m30s") or, as the
// flags and scenario files took before, a bare number of seconds ("5",
// "0.5").
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > math.MaxInt64/float64(time.Second) {
			return 0, fmt.Errorf("duration %q: out of range", s)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("duration %q: want e.g. 5s, 500ms, 2m or a number of seconds", s)
	}
	return v, nil
}

// UnmarshalYAML accepts what ParseDuration does.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

// Set makes *Duration a flag.Value: --duration 5s, --duration 500ms, or
// --duration 5 (seconds).
func (d *Duration) Set(s string) error {
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// String is the duration as Go writes it ("5s").
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalYAML writes the duration as a Go duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Seconds returns the duration in seconds.
func (d Duration) Seconds() float64 { return time.Duration(d).Seconds() }

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,7}$`)

// maxWith bounds a measurement's extra flows (their iperf3 ports).
const maxWith = 15

// maxPods bounds the 10.99.0.0/24 address plan (leaves room for CPU pods,
// which have no address).
const maxPods = 200

// ParseScenario decodes and validates a scenario. Unknown YAML fields are
// errors, so that a typo does not silently drop a setting.
func ParseScenario(data []byte) (*Scenario, error) {
	var s Scenario
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	s.applyDefaults()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

func (s *Scenario) applyDefaults() {
	if s.Underlay.MTU == 0 {
		s.Underlay.MTU = 1500
	}
	if s.CPUs == (CPUSpec{}) {
		s.CPUs = CPUSpec{Client: 0, Server: 1}
	}
	for i := range s.Measurements {
		m := &s.Measurements[i]
		if len(m.Placements) == 0 {
			m.Placements = []string{CrossCore}
		}
		if m.Duration == 0 {
			m.Duration = Duration(5 * time.Second)
		}
		if m.Size == 0 {
			switch m.Kind {
			case KindRTT:
				m.Size = 128
			case KindUDPPPS, KindFlowSetup, KindRevalidation:
				m.Size = 64
			}
		}
	}
	if len(s.Loads) == 0 {
		s.Loads = []LoadSpec{{Name: "none"}}
	}
	for i := range s.Loads {
		if n := s.Loads[i].Net; n != nil && n.Streams == 0 {
			n.Streams = 1
		}
		if p := s.Loads[i].CPUPods; p != nil && p.Percent == 0 {
			p.Percent = 100
		}
	}
}

// Validate checks the scenario and returns all problems found, one per line.
func (s *Scenario) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	if s.Name == "" {
		bad("name: missing")
	}
	for i, pr := range s.Paper {
		if validateMeshPaper(s, i, pr, bad) {
			continue
		}
		var m *MeasurementSpec
		for k := range s.Measurements {
			if s.Measurements[k].Name == pr.Measurement && (s.Measurements[k].Kind == KindRTT || s.Measurements[k].Kind == KindUDPPPS) {
				m = &s.Measurements[k]
			}
		}
		if m == nil {
			bad("paper[%d]: %q is not an rtt or udp-pps measurement of the scenario", i, pr.Measurement)
		}
		switch {
		case (m == nil || m.Kind == KindRTT) && len(pr.RTT) != 5:
			bad("paper[%d]: rtt: want 5 numbers (min, avg, p50, p90, p99), got %d", i, len(pr.RTT))
		case m != nil && m.Kind == KindUDPPPS:
			flows := 1 + len(m.With)
			if len(pr.RTT) > 0 || len(pr.Mbps)+len(pr.Loss) == 0 {
				bad("paper[%d]: %q is udp-pps: give mbps and/or loss, not rtt", i, pr.Measurement)
			}
			for _, f := range []struct {
				name string
				v    []float64
			}{{"mbps", pr.Mbps}, {"loss", pr.Loss}} {
				if len(f.v) > 0 && len(f.v) != flows {
					bad("paper[%d]: %s: want one number per flow (%d), got %d", i, f.name, flows, len(f.v))
				}
			}
		}
		if pr.Label == "" || pr.DataPlane == "" {
			bad("paper[%d]: label and dataplane are required", i)
		}
	}
	names := map[string]string{} // namespace-producing names must not collide
	nodes := map[string]bool{}
	if len(s.Nodes) == 0 {
		bad("nodes: at least one node is needed")
	}
	for _, n := range s.Nodes {
		if !nameRE.MatchString(n) {
			bad("nodes: %q: names are 1-8 characters [a-z0-9], starting with a letter", n)
		}
		if what, dup := names[n]; dup {
			bad("nodes: %q is already a %s", n, what)
		}
		names[n] = "node"
		nodes[n] = true
	}
	pods := map[string]PodSpec{}
	if len(s.Pods) > maxPods {
		bad("pods: %d pods, at most %d", len(s.Pods), maxPods)
	}
	for _, p := range s.Pods {
		if !nameRE.MatchString(p.Name) {
			bad("pods: %q: names are 1-8 characters [a-z0-9], starting with a letter", p.Name)
		}
		if what, dup := names[p.Name]; dup {
			bad("pods: %q is already a %s", p.Name, what)
		}
		names[p.Name] = "pod"
		if p.Uplink != "" {
			if !nameRE.MatchString(p.Uplink) {
				bad("pods: %q: uplink %q: names are 1-8 characters [a-z0-9], starting with a letter", p.Name, p.Uplink)
			}
		}
		if !nodes[p.Node] {
			bad("pods: pod %q is on unknown node %q (nodes: %s)", p.Name, p.Node, strings.Join(s.Nodes, ", "))
		}
		pods[p.Name] = p
	}
	for _, p := range s.Pods {
		if p.Uplink != "" {
			if what, dup := names[p.Uplink]; dup && what != "tester" {
				bad("pods: %q: uplink tester %q is already a %s", p.Name, p.Uplink, what)
				continue
			}
			names[p.Uplink] = "tester"
		}
	}
	if s.Underlay.MTU < 1280 || s.Underlay.MTU > 9000 {
		bad("underlay.mtu: %d, want 1280-9000", s.Underlay.MTU)
	}
	if len(s.DataPlanes) == 0 {
		bad("dataplanes: none given (list names or [all]; known: %s)", strings.Join(DataPlaneNames(), ", "))
	}
	seenDP := map[string]bool{}
	for _, d := range s.DataPlanes {
		if d == "all" {
			if len(s.DataPlanes) != 1 {
				bad("dataplanes: \"all\" must be the only entry")
			}
			continue
		}
		if _, ok := lookupDataPlane(d); !ok {
			bad("dataplanes: unknown data plane %q (known: %s)", d, strings.Join(DataPlaneNames(), ", "))
		}
		if seenDP[d] {
			bad("dataplanes: %q listed twice", d)
		}
		seenDP[d] = true
	}
	if s.Reps < 1 {
		bad("reps: %d, need at least 1", s.Reps)
	}
	if s.CPUs.Client < 0 || s.CPUs.Server < 0 {
		bad("cpus: negative CPU number")
	}
	if s.CPUs.Client == s.CPUs.Server {
		bad("cpus: client and server CPU are both %d; cross-core needs two CPUs", s.CPUs.Client)
	}
	if len(s.Measurements) == 0 {
		bad("measurements: none given")
	}
	mnames := map[string]bool{}
	for i, m := range s.Measurements {
		where := fmt.Sprintf("measurements[%d] %q", i, m.Name)
		if m.Name == "" {
			bad("measurements[%d]: name missing", i)
		} else if mnames[m.Name] {
			bad("%s: name used twice", where)
		}
		mnames[m.Name] = true
		switch m.Kind {
		case KindRTT, KindTCP, KindUDPPPS:
		case KindFlowSetup, KindRevalidation:
			validateFlowSetup(m, where, bad)
		case KindConnRate, KindServiceScale, KindBookinfo:
		default:
			bad("%s: unknown kind %q (want rtt, tcp, udp-pps, flow-setup, revalidation, conn-rate, service-scale or bookinfo)", where, m.Kind)
		}
		validateServices(m, where, bad)
		validateMesh(m, where, pods, bad)
		if m.Baseline != "" && !slices.ContainsFunc(s.Measurements, func(b MeasurementSpec) bool {
			return b.Name == m.Baseline && b.Kind == m.Kind && !b.throughService()
		}) {
			bad("%s: baseline %q is not a pod-to-pod measurement of the same kind", where, m.Baseline)
		}
		for _, role := range []struct{ name, pod string }{{"client", m.Client}, {"server", m.Server}} {
			if _, ok := pods[role.pod]; !ok {
				bad("%s: %s %q is not a pod", where, role.name, role.pod)
			}
		}
		for _, p := range m.Also {
			if _, ok := pods[p]; !ok || p == m.Server || p == m.Client {
				bad("%s: also %q: want another pod than the client and the server", where, p)
			}
		}
		if (len(m.Also) > 0 || m.Reverse) && m.Kind != KindTCP {
			bad("%s: also and reverse are for tcp", where)
		}
		if len(m.Also) > maxWith {
			bad("%s: also: %d clients, at most %d", where, len(m.Also), maxWith)
		}
		if len(m.With) > 0 && m.Kind != KindUDPPPS && m.Kind != KindTCP {
			bad("%s: with: more flows are for udp-pps and tcp measurements only", where)
		}
		if len(m.Also)+len(m.With) > maxWith {
			bad("%s: also and with: %d flows, at most %d", where, len(m.Also)+len(m.With), maxWith)
		}
		if len(m.With) > maxWith {
			bad("%s: with: %d flows, at most %d", where, len(m.With), maxWith)
		}
		for k, f := range m.With {
			for _, role := range []struct{ name, pod string }{{"client", f.Client}, {"server", f.Server}} {
				if _, ok := pods[role.pod]; !ok {
					bad("%s: with[%d].%s %q is not a pod", where, k, role.name, role.pod)
				}
			}
			if f.Client == f.Server {
				bad("%s: with[%d]: client and server are the same pod", where, k)
			} else if s.scope(f.Client, f.Server) != s.scope(m.Client, m.Server) {
				bad("%s: with[%d]: %s → %s is not %s like the measured flow", where, k, f.Client, f.Server, s.scope(m.Client, m.Server))
			}
		}
		for _, p := range m.Placements {
			if p != CrossCore && p != SameCore {
				bad("%s: unknown placement %q (want cross-core or same-core)", where, p)
			}
		}
		if m.Duration < Duration(time.Second) {
			bad("%s: duration %s, need at least 1s", where, time.Duration(m.Duration))
		}
		switch {
		case m.Kind == KindUDPPPS && (m.Size < 16 || m.Size > 8192):
			// Past the pod MTU the datagram is fragmented: seed 001's 8192 B case.
			bad("%s: size %d, want 16-8192 bytes", where, m.Size)
		case m.Kind != KindTCP && m.Kind != KindUDPPPS && m.Kind != KindConnRate && m.Kind != KindServiceScale && m.Kind != KindBookinfo && (m.Size < 16 || m.Size > 1400):
			bad("%s: size %d, want 16-1400 bytes", where, m.Size)
		}
	}
	if n := len(slices.DeleteFunc(slices.Clone(s.Measurements), func(m MeasurementSpec) bool { return m.Kind != KindBookinfo })); n > 0 {
		if s.usesServices() {
			// The agents take Services from the API server then, and
			// ignore their cluster file's, where the application's are.
			bad("measurements: bookinfo cannot share a scenario with measurements through the API server's Services (via, service-scale)")
		}
		if n > 1 {
			// Its Services have fixed ClusterIPs (meshClusterIP).
			bad("measurements: %d bookinfo measurements, at most one per scenario (list its proxies and connections instead)", n)
		}
	}
	lnames := map[string]bool{}
	for i, l := range s.Loads {
		where := fmt.Sprintf("loads[%d] %q", i, l.Name)
		if l.Name == "" {
			bad("loads[%d]: name missing", i)
		} else if lnames[l.Name] {
			bad("%s: name used twice", where)
		}
		lnames[l.Name] = true
		if c := l.CPU; c != nil {
			if c.Percent < 1 || c.Percent > 100 {
				bad("%s: cpu.percent %d, want 1-100", where, c.Percent)
			}
			if len(c.CPUs) == 0 {
				bad("%s: cpu.cpus: list the CPUs to load", where)
			}
		}
		if n := l.Net; n != nil {
			for _, role := range []struct{ name, pod string }{{"client", n.Client}, {"server", n.Server}} {
				if _, ok := pods[role.pod]; !ok {
					bad("%s: net.%s %q is not a pod", where, role.name, role.pod)
				}
			}
			if n.Client == n.Server {
				bad("%s: net: client and server are the same pod", where)
			}
			if !regexp.MustCompile(`^[0-9]+(\.[0-9]+)?[KMG]?$`).MatchString(n.Rate) {
				bad("%s: net.rate %q, want iperf3 -b syntax such as 500M or 2G", where, n.Rate)
			}
			if n.Streams < 1 || n.Streams > 32 {
				bad("%s: net.streams %d, want 1-32", where, n.Streams)
			}
			for _, m := range s.Measurements {
				for _, p := range []string{n.Client, n.Server} {
					if p == m.Client || p == m.Server {
						bad("%s: net load pod %q is also measured by %q; use other pods", where, p, m.Name)
					}
				}
			}
		}
		if a := l.Attack; a != nil {
			for _, role := range []struct{ name, pod string }{{"from", a.From}, {"to", a.To}} {
				if _, ok := pods[role.pod]; !ok {
					bad("%s: attack.%s %q is not a pod", where, role.name, role.pod)
				}
			}
			if a.Pattern != pktgen.PatternRandom && a.Pattern != pktgen.PatternTSE && a.Pattern != pktgen.PatternScan {
				bad("%s: attack.pattern %q, want random, tse or scan", where, a.Pattern)
			}
			if a.Rate < 0 {
				bad("%s: attack.rate %d, want >= 0 (0: flat out)", where, a.Rate)
			}
			if len(s.Flows) == 0 && !s.usesPolicyPlanes() {
				bad("%s: an attack needs the scenario's flows or a policy plane (the ACL or the policies it attacks)", where)
			}
		}
		if p := l.CPUPods; p != nil {
			if !nodes[p.Node] {
				bad("%s: cpu_pods.node %q is not a node", where, p.Node)
			}
			if p.Count < 0 || p.Count > 100 {
				bad("%s: cpu_pods.count %d, want 0-100", where, p.Count)
			}
			if p.Percent < 1 || p.Percent > 100 {
				bad("%s: cpu_pods.percent %d, want 1-100", where, p.Percent)
			}
		}
	}
	validatePolicies(s, pods, bad)
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("scenario %q is invalid:\n  %w", s.Name, joinIndented(errs))
}

func joinIndented(errs []error) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "\n  "))
}

// PlaneNames returns the data planes the scenario compares, "all" expanded.
func (s *Scenario) PlaneNames() []string {
	if len(s.DataPlanes) == 1 && s.DataPlanes[0] == "all" {
		return DataPlaneNames()
	}
	return s.DataPlanes
}

func (s *Scenario) pod(name string) PodSpec {
	for _, p := range s.Pods {
		if p.Name == name {
			return p
		}
	}
	return PodSpec{}
}

// scope of the traffic between two pods of the scenario.
func (s *Scenario) scope(client, server string) Scope {
	switch {
	case client == server:
		return ScopeLocal
	case s.pod(client).Node == s.pod(server).Node:
		return ScopeIntraNode
	default:
		return ScopeInterNode
	}
}

// LoadScenario finds a scenario by name among the embedded ones
// (lab/scenarios/NAME.yaml) or, if arg names an existing file, reads it.
func LoadScenario(arg string) (*Scenario, error) {
	if st, err := os.Stat(arg); err == nil && !st.IsDir() {
		data, err := os.ReadFile(arg)
		if err != nil {
			return nil, err
		}
		return ParseScenario(data)
	}
	data, err := fs.ReadFile(scenarios.FS, arg+".yaml")
	if err != nil {
		return nil, fmt.Errorf("no scenario %q: not a file, and not one of the built-in scenarios (%s)", arg, strings.Join(ScenarioNames(), ", "))
	}
	return ParseScenario(data)
}

// ScenarioNames lists the built-in scenarios.
func ScenarioNames() []string {
	ents, _ := fs.ReadDir(scenarios.FS, ".")
	var names []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}
