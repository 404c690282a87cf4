package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nagare-net/nagare/pkg/lab/pktgen"
	"github.com/nagare-net/nagare/pkg/openflow"
	"github.com/nagare-net/nagare/pkg/switchd"
)

// The isolation scenario: can one pod degrade another pod's forwarding?
// A victim pair is measured (RTT, TCP) while an attacker pod sends a
// hostile pattern (pktgen attack patterns) through an allow-list ACL that
// the scenario installs on every switch plane (Scenario.Flows), and, for
// the controller step, at a controller that reads slowly. After each
// step the switch's cache is sampled: cached flows and masks, in total
// and the attacker's own.

// AttackSpec is a load step's attacker.
type AttackSpec struct {
	// From is the attacking pod (it may be a measured pod: the attacker
	// inside the victim's own pod); To is the pod whose MAC the frames
	// carry.
	From string `yaml:"from"`
	To   string `yaml:"to"`
	// Pattern is random, tse or scan (pktgen attack patterns).
	Pattern string `yaml:"pattern"`
	// Rate in packets/s, 0 = flat out.
	Rate int `yaml:"rate"`
	// Target is the allowed tuple a tse pattern works around (a scan's
	// address): destination address, or a pod's name for its address, and
	// UDP port (default 10.96.0.10:53, the ACL's DNS rule).
	Target string `yaml:"target"`
	// Flows are added to Scenario.Flows for this step only (e.g. a
	// table-miss rule to the controller).
	Flows []string `yaml:"flows"`
	// SlowController connects a controller that reads one message every
	// this long (and answers echoes) for the step; 0: none.
	SlowController Duration `yaml:"slow_controller"`
}

// IsolationResult is the switch's cache after a load step, and the
// victim's losses.
type IsolationResult struct {
	Flows         int `json:"flows"`
	Masks         int `json:"masks"`
	AttackerFlows int `json:"attacker_flows"`
	// AttackerMasks: distinct masks of the attacker's flows (-1: unknown).
	AttackerMasks int `json:"attacker_masks"`
	// VictimDrops: packets the switch dropped on the measured pods' ports
	// during the step (-1: the switch does not count by port). With the attacker inside
	// a victim's pod, its own dropped packets count here too.
	VictimDrops int64 `json:"victim_drops"`
}

// cachePlane is a switch plane whose flow cache the isolation scenarios
// sample after each step.
type cachePlane interface {
	DataPlane
	// Isolation samples the cache of p's node's switch: totals, the
	// attacker's share and drops on the victims' ports.
	Isolation(ctx context.Context, t *Topology, attacker *Pod, victims []*Pod) (IsolationResult, error)
}

// FlowTablePlane is a switch plane whose OpenFlow table a scenario can set.
type FlowTablePlane interface {
	cachePlane
	// ReplaceFlows replaces the table of every node's switch by flows
	// (ovs-ofctl syntax, no in_port).
	ReplaceFlows(ctx context.Context, t *Topology, flows []string) error
	// ControllerSocket is the OpenFlow socket a controller connects to on
	// pod p's node.
	ControllerSocket(p *Pod) string
}

// defaultTarget is the ACL's DNS rule.
const defaultTarget = "10.96.0.10:53"

// startAttack starts a step's attacker (and slow controller).
func (r *planeRun) startAttack(ctx context.Context, a *AttackSpec, step *Cleanup, budget time.Duration) error {
	t := r.topo
	fp, ok := r.dp.(FlowTablePlane)
	if !ok && (len(a.Flows) > 0 || a.SlowController > 0) {
		return fmt.Errorf("%s cannot take an OpenFlow table (this attack step needs one)", r.dp.Name())
	}
	from, to := t.Pod(a.From), t.Pod(a.To)
	if len(a.Flows) > 0 {
		if err := fp.ReplaceFlows(ctx, t, append(append([]string{}, r.s.Flows...), a.Flows...)); err != nil {
			return err
		}
		step.Add("restore the scenario's flows", func() error {
			return fp.ReplaceFlows(context.Background(), t, r.s.Flows)
		})
	}
	if a.SlowController > 0 {
		cmd, err := SlowControllerCommand()
		if err != nil {
			return err
		}
		// On the client CPU, with the attacker: a controller runs on
		// some other machine, never on the victim's core; left to the
		// scheduler, its wakeups landed there in some runs.
		args := append([]string{"ip", "netns", "exec", from.Node.NS, "taskset", "-c", strconv.Itoa(r.s.CPUs.Client)}, cmd...)
		args = append(args, "--connect", "unix:"+fp.ControllerSocket(from), "--read-every", time.Duration(a.SlowController).String())
		p, err := r.sh.Start(step, slowControllerReady, args...)
		if err != nil {
			return err
		}
		if err := p.WaitReady(ctx, 10*time.Second); err != nil {
			return err
		}
	}
	gen, err := PktgenCommand()
	if err != nil {
		return err
	}
	target := a.Target
	if target == "" {
		target = defaultTarget
	}
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return fmt.Errorf("attack target %q: %w", target, err)
	}
	if p := t.Pod(host); p != nil {
		host = p.IP // a pod's address, known once the plane gave it one
	}
	// The attacker runs on the client CPU: the victims (and, same-core,
	// the switch) are on the server CPU. What the attack costs the victim
	// is then what the switch makes it share, not the scheduler.
	args := append([]string{"ip", "netns", "exec", from.NS, "taskset", "-c", strconv.Itoa(r.s.CPUs.Client)}, gen...)
	args = append(args, "send", "--pattern", a.Pattern, "--rate", strconv.Itoa(a.Rate), "--duration", budget.String(),
		"--dev", "eth0", "--dst-mac", to.MAC, "--src-ip", from.IP, "--dst-ip", host, "--dst-port", port,
		"--out", filepath.Join(r.tmp, "attack-send.json"))
	p, err := r.sh.Start(step, pktgen.SendMarker, args...)
	if err != nil {
		return err
	}
	return p.WaitReady(ctx, 10*time.Second)
}

// sampleIsolation samples the switch's cache for a step's tests: before
// the step (before is nil) it returns the sample; after it (before is the
// sample from before), it fills the step's samples, with the drops on the
// victims' ports counted over the step.
func (r *planeRun) sampleIsolation(ctx context.Context, tests []test, samples []Sample, before *IsolationResult) *IsolationResult {
	fp, ok := r.dp.(cachePlane)
	if !ok || (len(r.s.Flows) == 0 && !r.s.hasAttacks()) {
		return nil
	}
	t := r.topo
	var attacker *Pod
	if a := tests[0].load.Attack; a != nil {
		attacker = t.Pod(a.From)
	}
	victims := map[string]*Pod{}
	for _, tc := range tests {
		victims[tc.m.Client], victims[tc.m.Server] = t.Pod(tc.m.Client), t.Pod(tc.m.Server)
	}
	var vs []*Pod
	for _, p := range victims {
		vs = append(vs, p)
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].Index < vs[j].Index })
	res, err := fp.Isolation(ctx, t, attacker, vs)
	if err != nil {
		r.sh.logf("# isolation sample: %v", err)
		return nil
	}
	if before == nil {
		return &res
	}
	if res.VictimDrops >= 0 && before.VictimDrops >= 0 {
		res.VictimDrops -= before.VictimDrops
	}
	for i := range samples {
		samples[i].Isolation = &res
	}
	return &res
}

// SlowControllerCommand returns the command that runs SlowControllerMain:
// by default this executable as `nagarectl lab slowctl`.
var SlowControllerCommand = func() ([]string, error) {
	exe, err := os.Executable()
	return []string{exe, "lab", "slowctl"}, err
}

// slowControllerReady is printed by `nagarectl lab slowctl` once connected.
const slowControllerReady = "slowctl: connected"

// SlowControllerMain is `nagarectl lab slowctl --connect unix:PATH
// --read-every D`: an OpenFlow controller that says HELLO, asks for
// PACKET_INs (SET_CONFIG miss_send_len 128, which Open vSwitch needs on a
// service connection), answers echoes and reads one message every D,
// with a small receive buffer: a controller that cannot keep up.
func SlowControllerMain(args []string) error {
	var target string
	every := 10 * time.Millisecond
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--connect":
			i++
			if i < len(args) {
				target = args[i]
			}
		case "--read-every":
			i++
			if i < len(args) {
				d, err := time.ParseDuration(args[i])
				if err != nil {
					return err
				}
				every = d
			}
		default:
			return fmt.Errorf("slowctl: unknown argument %q", args[i])
		}
	}
	path, ok := strings.CutPrefix(target, "unix:")
	if !ok {
		return fmt.Errorf("slowctl: --connect unix:PATH, got %q", target)
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.(*net.UnixConn).SetReadBuffer(4096)
	if err := openflow.WriteMessage(c, openflow.NewHello(1, 0x04)); err != nil {
		return err
	}
	if err := openflow.WriteMessage(c, &openflow.SetConfig{SwitchConfig: openflow.SwitchConfig{MissSendLen: 128}}); err != nil {
		return err
	}
	fmt.Println(slowControllerReady)
	rd := openflow.NewReader(c)
	for {
		m, _, err := rd.ReadMessage()
		if err != nil {
			return nil
		}
		if e, ok := m.(*openflow.EchoRequest); ok {
			_ = openflow.WriteMessage(c, e.Reply())
		}
		time.Sleep(every)
	}
}

// nagareIsolation reads the cache from the switch's `show`.
func nagareIsolation(ctx context.Context, sw *nagareSwitch, attacker *Pod, victims []*Pod) (IsolationResult, error) {
	return switchIsolation(ctx, sw.socket(), func(p switchd.PortReport, pod *Pod) bool { return p.OFPort == sw.ports[pod] }, attacker, victims)
}

// switchIsolation reads the cache of the nagare-switch on socket from its
// `show`; isPort says whether a port is a pod's.
func switchIsolation(ctx context.Context, socket string, isPort func(switchd.PortReport, *Pod) bool, attacker *Pod, victims []*Pod) (IsolationResult, error) {
	r, err := switchd.Call(ctx, socket, switchd.CtlRequest{Cmd: "show"})
	if err != nil {
		return IsolationResult{}, err
	}
	var d struct {
		CachedFlows int                  `json:"cached_flows"`
		Masks       int                  `json:"masks"`
		Ports       []switchd.PortReport `json:"ports"`
	}
	if err := json.Unmarshal(r.Data, &d); err != nil {
		return IsolationResult{}, fmt.Errorf("show: %w", err)
	}
	res := IsolationResult{Flows: d.CachedFlows, Masks: d.Masks}
	for _, p := range d.Ports {
		for _, v := range victims {
			if isPort(p, v) {
				for _, n := range p.Drops {
					res.VictimDrops += int64(n)
				}
			}
		}
		if attacker != nil && isPort(p, attacker) {
			res.AttackerFlows, res.AttackerMasks = p.Flows, p.Masks
		}
	}
	return res, nil
}

var (
	dpctlPortRE = regexp.MustCompile(`(?m)^\s*port (\d+): (\S+)`)
	odpFieldRE  = regexp.MustCompile(`([a-z_0-9]+)\(([^()]*)\)`)
)

// OVSIsolation reads the cache from `ovs-appctl dpctl/show` and
// `dpctl/dump-flows` output: flows, distinct masks (a flow's mask is
// which fields it names and each field's mask), and the attacker's share
// (flows whose in_port is the attacker's datapath port).
func OVSIsolation(show, dump, attackerIf string) IsolationResult {
	res := IsolationResult{AttackerMasks: -1, VictimDrops: -1}
	odp := ""
	for _, m := range dpctlPortRE.FindAllStringSubmatch(show, -1) {
		if m[2] == attackerIf {
			odp = m[1]
		}
	}
	masks, amasks := map[string]bool{}, map[string]bool{}
	for _, line := range strings.Split(dump, "\n") {
		key, _, ok := strings.Cut(line, ", packets:")
		if !ok {
			continue
		}
		res.Flows++
		var sig []string
		in := ""
		for _, f := range odpFieldRE.FindAllStringSubmatch(key, -1) {
			if f[1] == "in_port" {
				in = f[2]
			}
			var parts []string
			for _, kv := range strings.Split(f[2], ",") {
				k, v, _ := strings.Cut(kv, "=")
				_, m, masked := strings.Cut(v, "/")
				if masked {
					parts = append(parts, k+"/"+m)
				} else {
					parts = append(parts, k)
				}
			}
			sig = append(sig, f[1]+"("+strings.Join(parts, ",")+")")
		}
		s := strings.Join(sig, ",")
		masks[s] = true
		if odp != "" && (in == odp || in == attackerIf) {
			res.AttackerFlows++
			amasks[s] = true
		}
	}
	res.Masks = len(masks)
	if odp != "" {
		res.AttackerMasks = len(amasks)
	}
	return res
}

// writeIsolation writes, for scenarios with attack steps, each plane's
// victim numbers under each step against the same plane's steps without
// an attack (the best of them: lowest p99, highest TCP — a noisy
// reference step makes the ratios worse, never better), and the cache
// after the step.
func (res *Result) writeIsolation(w io.Writer, rows []*Row) {
	s := res.Scenario
	var bases []string
	attacks := false
	for _, l := range s.Loads {
		if l.Attack == nil {
			bases = append(bases, l.Name)
		}
		attacks = attacks || l.Attack != nil
	}
	if !attacks || len(bases) == 0 {
		return
	}
	var rtt, tcp *MeasurementSpec
	for i := range s.Measurements {
		switch m := &s.Measurements[i]; m.Kind {
		case KindRTT:
			if rtt == nil {
				rtt = m
			}
		case KindTCP:
			if tcp == nil {
				tcp = m
			}
		}
	}
	find := func(m *MeasurementSpec, load, plane string) *Row {
		if m == nil {
			return nil
		}
		for _, r := range rows {
			if r.Measurement == m.Name && r.Placement == m.Placements[0] && r.Load == load && r.DataPlane == plane && r.OK > 0 {
				return r
			}
		}
		return nil
	}
	med := func(r *Row, col string) (float64, bool) {
		if r == nil || len(r.Values[col]) == 0 {
			return 0, false
		}
		return r.Cell(col).Median, true
	}
	// best is the plane's reference: the lowest (or highest) median of col
	// over the no-attack steps.
	best := func(m *MeasurementSpec, plane, col string, lowest bool) (float64, bool) {
		var v float64
		found := false
		for _, b := range bases {
			x, ok := med(find(m, b, plane), col)
			if ok && (!found || (lowest && x < v) || (!lowest && x > v)) {
				v, found = x, true
			}
		}
		return v, found
	}
	num := func(v float64, ok bool, prec int) string {
		if !ok {
			return "–"
		}
		return strconv.FormatFloat(v, 'f', prec, 64)
	}
	fmt.Fprintf(w, "\n### Isolation: the victim under attack against its own steps without attack (%s)\n\n", strings.Join(bases, ", "))
	fmt.Fprintf(w, "p99 ×, TCP ×: the victim's RTT p99 and TCP throughput over the same plane's best value in the steps without attack (lowest p99, highest TCP; targets for nagare: p99 ≤ 2×, TCP ≥ 0.8×). "+
		"lost: victim requests without a reply (sent − received, ±1 in flight). Cache after the step: cached flows and masks in total and the attacker's own "+
		"(–: not counted by port); drops on victim ports: the switch's drops on the victim pods' ports (–: not counted by port; with the attacker inside a victim's pod they are the attacker's). The attacker runs on the client CPU, the victims and the switch on the server CPU.\n\n")
	fmt.Fprintf(w, "| load | data plane | RTT p50 | RTT p99 | RTT p99.9 | p99 × | TCP Gbit/s | TCP × | lost | flows | masks | attacker flows | attacker masks | drops on victim ports |\n")
	fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", 14))
	for _, l := range s.Loads {
		for _, p := range res.Planes {
			rr, tr := find(rtt, l.Name, p.Name), find(tcp, l.Name, p.Name)
			if rr == nil && tr == nil {
				continue
			}
			p50, ok50 := med(rr, "p50")
			p99, ok99 := med(rr, "p99")
			p999, ok999 := med(rr, "p99.9")
			b99, okb99 := best(rtt, p.Name, "p99", true)
			g, okg := med(tr, "gbps")
			bg, okbg := best(tcp, p.Name, "gbps", false)
			lost, okl := med(rr, "lost")
			cache := rr
			if cache == nil || len(cache.Values["flows"]) == 0 {
				cache = tr
			}
			fl, okf := med(cache, "flows")
			ms, okm := med(cache, "masks")
			af, okaf := med(cache, "attacker flows")
			am, okam := med(cache, "attacker masks")
			vd, okvd := med(cache, "victim drops")
			cells := []string{l.Name, p.Name, num(p50, ok50, 1), num(p99, ok99, 1), num(p999, ok999, 1),
				num(p99/b99, ok99 && okb99 && b99 > 0, 2), num(g, okg, 2), num(g/bg, okg && okbg && bg > 0, 2), num(lost, okl, 0),
				num(fl, okf, 0), num(ms, okm, 0), num(af, okaf, 0), num(am, okam && am >= 0, 0), num(vd, okvd && vd >= 0, 0)}
			fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
		}
	}
}
