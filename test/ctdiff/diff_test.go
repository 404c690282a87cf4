package ctdiff

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ctCase is one row of the table: a pipeline and the packets sent
// through it, in order, each with what should come out.
type ctCase struct {
	name string
	// groups and flows are ovs-ofctl add-group / add-flow text.
	groups []string
	flows  []string
	steps  []step
	// knownDiff names a difference from Open vSwitch that nagare has on
	// purpose or has not closed yet (docs/conntrack.md lists them): the
	// case then passes when it shows a difference (reported in the log)
	// and fails when it no longer does, so the entry is removed once
	// the difference is gone.
	knownDiff string
	// learned: after the last packet, dump-flows of this table must show
	// the same flows on every switch (durations and counters aside), and
	// the text must hold each of want.
	learned learnedWant
	// counters: after the last packet, each flow of these tables (table
	// → the packets its flows count in all) must show the same n_packets
	// on every switch.
	counters map[int]uint64
}

// learnedWant is what a case expects learn actions to have added.
type learnedWant struct {
	table int
	want  []string
}

// step is one packet and what is expected of it.
type step struct {
	send pkt
	want want
}

// want is what should be observed of one packet, on each switch.
type want struct {
	// at: the endpoint that receives the packet; "" means dropped;
	// "b1|b2" means exactly one of them; "*" checks nothing (a behaviour
	// the test only compares between the switches).
	at string
	// state: the ct_state stamped on the recirculated pass ("+trk+new",
	// "-trk" for untracked); "" checks nothing.
	state string
	// state2: the second stamp (stamp2Table), e.g. after ct_clear.
	state2 string
	// src, dst: "ip:port" (ICMP: "ip") after the rewrites; a port may be
	// a range "lo-hi". "" checks nothing.
	src, dst string
	// sameAs > 0: delivered at the same endpoint as packet #sameAs was,
	// on the same switch (a select group keeps a connection on one bucket).
	sameAs int
	// copies: how many frames arrive at `at` (a fragmented datagram's
	// fragments); 0 means 1.
	copies int
	// badCsum: the frame was sent with a wrong L4 checksum and must
	// arrive with it (no switch repairs or recomputes it).
	badCsum bool
	// fields: other fields of the delivered frame, by describe's names.
	fields map[string]string
	// portApart > 0: the source port differs from the one packet
	// #portApart arrived with, on the same switch (two connections SNATed
	// to one address need two ports).
	portApart int
	// free: fields allowed to differ between the two switches ("at" for
	// the endpoint, else describe's names, e.g. "tp_src" for a SNAT port
	// chosen from a range, "eth_dst", "ip_dst" for a select bucket).
	free []string
	// note: a known difference between the switches, reported with it.
	note string
}

// Timing: a delivered packet normally arrives within milliseconds (a
// first packet takes the slow path of both switches); deliverTimeout is
// the deadline for it. A packet expected dropped is watched for
// dropWindow on both switches before the next one is sent; one that
// arrives later still counts (observations are read again at the end).
const (
	deliverTimeout = 5 * time.Second
	dropWindow     = 300 * time.Millisecond
)

// nextID numbers packets (their IPv4 identification), across the run.
var nextID uint16 = 0x4000

// observation is what one switch did with one packet.
type observation struct {
	sent    []byte // the frame sent (nil if it could not be built)
	from    string
	err     error // why it could not be sent
	arrived []arrival
}

// runCase programs both switches, sends the case's packets through both
// and reports the first step where they differ from each other or from
// the expectation.
func runCase(t *testing.T, c ctCase, benches []*bench) {
	dir := t.TempDir()
	for _, b := range benches {
		if b.flushConntrack != nil {
			if err := b.flushConntrack(); err != nil {
				t.Fatalf("%s: flushing conntrack: %v", b.name, err)
			}
		}
	}
	for _, b := range benches {
		if err := b.program(dir, c.groups, c.flows); err != nil {
			if b.name == "ovs" || len(benches) == 1 {
				t.Fatalf("the case's pipeline is refused by Open vSwitch (a mistake in the case): %v", err)
			}
			t.Fatalf("DIFFERENCE: Open vSwitch accepts the pipeline, %s refuses it: %v", b.name, err)
		}
	}
	for _, b := range benches {
		if err := b.flushCache(); err != nil {
			t.Fatalf("%s: flushing the datapath's flows: %v", b.name, err)
		}
	}
	obs := make([][]observation, len(benches)) // [bench][step]
	ids := make([]uint16, len(c.steps))
	for i, s := range c.steps {
		nextID++
		ids[i] = nextID
		for bi, b := range benches {
			prior := make([][]arrival, i)
			for j := 0; j < i; j++ {
				prior[j] = obs[bi][j].arrived
			}
			o := observation{}
			o.from, o.sent, o.err = s.send.build(ids[i], prior)
			if o.err == nil && s.send.fragment > 0 {
				for _, f := range fragments(o.sent, s.send.fragment) {
					if o.err = b.send(o.from, f); o.err != nil {
						break
					}
				}
			} else if o.err == nil {
				o.err = b.send(o.from, o.sent)
			}
			obs[bi] = append(obs[bi], o)
		}
		for bi, b := range benches {
			if obs[bi][i].err != nil {
				continue
			}
			if s.want.at == "" || s.want.at == "*" {
				obs[bi][i].arrived = b.frames.waitFor(ids[i], 1, time.Now().Add(dropWindow))
			} else {
				obs[bi][i].arrived = b.frames.waitFor(ids[i], max(1, s.want.copies), time.Now().Add(deliverTimeout))
			}
		}
		// The first difference ends the case: later packets depend on
		// what this one did. CTDIFF_KEEP_GOING=1 goes on, to see every
		// difference a case shows.
		if msg := compareStep(c, i, s, benches, obs); msg != "" {
			if c.knownDiff != "" && len(benches) > 1 {
				t.Logf("known difference (%s):\n%s", c.knownDiff, msg)
				return
			}
			t.Errorf("%s\n%s", msg, logTails(benches))
			if os.Getenv("CTDIFF_KEEP_GOING") == "" {
				return
			}
			continue
		}
		var got []string
		for bi, b := range benches {
			got = append(got, b.name+": "+describeObs(obs[bi][i]))
		}
		t.Logf("#%d %s:\n    %s", i+1, s.send, strings.Join(got, "\n    "))
	}
	// Copies that came late, or to a second endpoint, count too: every
	// step is compared again with all that arrived.
	for bi, b := range benches {
		for i := range c.steps {
			obs[bi][i].arrived = b.frames.get(ids[i])
		}
	}
	if t.Failed() {
		return
	}
	for i, s := range c.steps {
		if msg := compareStep(c, i, s, benches, obs); msg != "" {
			if c.knownDiff != "" && len(benches) > 1 {
				t.Logf("known difference (%s):\n%s", c.knownDiff, msg)
				return
			}
			t.Errorf("(after the last packet) %s\n%s", msg, logTails(benches))
			return
		}
	}
	if len(c.learned.want) > 0 {
		checkLearned(t, c, benches)
	}
	if len(c.counters) > 0 && len(benches) > 1 {
		checkCounters(t, c, benches)
	}
	if c.knownDiff != "" && len(benches) > 1 {
		t.Errorf("case %s: the known difference (%s) no longer shows: remove knownDiff", c.name, c.knownDiff)
	}
}

// volatileStat matches the parts of a dump-flows line that differ between
// two switches for the same flow: age, duration and counters.
var volatileStat = regexp.MustCompile(`(duration|n_packets|n_bytes|idle_age|hard_age)=[0-9.]+s?, ?`)

// learnedValue is a load's value in a learned flow.
var learnedValue = regexp.MustCompile(`load:0x[0-9a-f]+->`)

// checkLearned compares the flows learn added on each switch.
func checkLearned(t *testing.T, c ctCase, benches []*bench) {
	var first string
	for i, b := range benches {
		out, err := b.ofctl("dump-flows", fmt.Sprintf("table=%d", c.learned.table))
		if err != nil {
			t.Fatalf("%s: %v", b.name, err)
		}
		var flows []string
		for _, l := range strings.Split(out, "\n") {
			if l = strings.TrimSpace(volatileStat.ReplaceAllString(l, "")); strings.HasPrefix(l, "cookie=") {
				flows = append(flows, l)
			}
		}
		sort.Strings(flows)
		got := strings.Join(flows, "\n")
		t.Logf("%s: learned flows of table %d:\n%s", b.name, c.learned.table, got)
		for _, w := range c.learned.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: table %d has no %q:\n%s", b.name, c.learned.table, w, got)
			}
		}
		if hasFree(c) {
			// The switches may pick other buckets: the values learned
			// then differ, the flows' shape may not.
			got = learnedValue.ReplaceAllString(got, "load:X->")
		}
		if i == 0 {
			first = got
		} else if got != first {
			t.Errorf("DIFFERENCE in learned flows:\n%s:\n%s\n%s:\n%s", benches[0].name, first, b.name, got)
		}
	}
}

// counterStat matches what of a dump-flows line differs between two
// switches for the same flow, n_packets aside.
var counterStat = regexp.MustCompile(`(duration|n_bytes|idle_age|hard_age)=[0-9.]+s?, ?`)

// checkCounters compares the flows' packet counts of c.counters' tables.
// Both switches credit flows from their datapath's counters some time
// after the packets: the dumps are taken again until they agree, or
// statsWait passed.
func checkCounters(t *testing.T, c ctCase, benches []*bench) {
	const statsWait = 10 * time.Second
	packets := regexp.MustCompile(`n_packets=([0-9]+)`)
	dump := func(b *bench, table int) (string, uint64) {
		out, err := b.ofctl("dump-flows", fmt.Sprintf("table=%d", table))
		if err != nil {
			t.Fatalf("%s: %v", b.name, err)
		}
		var flows []string
		var sum uint64
		for _, l := range strings.Split(out, "\n") {
			if l = strings.TrimSpace(counterStat.ReplaceAllString(l, "")); strings.HasPrefix(l, "cookie=") {
				flows = append(flows, l)
				if m := packets.FindStringSubmatch(l); m != nil {
					n, _ := strconv.ParseUint(m[1], 10, 64)
					sum += n
				}
			}
		}
		sort.Strings(flows)
		return strings.Join(flows, "\n"), sum
	}
	for table, want := range c.counters {
		deadline := time.Now().Add(statsWait)
		for {
			var dumps []string
			done := true
			for _, b := range benches {
				d, sum := dump(b, table)
				dumps = append(dumps, d)
				done = done && sum == want
			}
			if done {
				for i, b := range benches[1:] {
					if dumps[i+1] != dumps[0] {
						t.Errorf("DIFFERENCE in table %d's counters:\n%s:\n%s\n%s:\n%s", table, benches[0].name, dumps[0], b.name, dumps[i+1])
					}
				}
				t.Logf("table %d counters:\n%s", table, dumps[0])
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("table %d: the flows' n_packets do not add up to %d after %v:\n%s", table, want, statsWait, strings.Join(dumps, "\n--\n"))
				break
			}
			time.Sleep(200 * time.Millisecond) // polling counters each switch updates on its own schedule
		}
	}
}

// hasFree reports whether a case lets the switches choose differently
// (a select bucket): then learned values may differ too.
func hasFree(c ctCase) bool {
	for _, s := range c.steps {
		if len(s.want.free) > 0 {
			return true
		}
	}
	return false
}

// compareStep checks step i: the switches against each other, then each
// against the expectation. It returns the report of the first problem.
func compareStep(c ctCase, i int, s step, benches []*bench, obs [][]observation) string {
	head := fmt.Sprintf("case %s, packet #%d (%s)", c.name, i+1, s.send)
	if s.want.note != "" {
		head += "\n  known: " + s.want.note
	}
	sides := func() string {
		var b strings.Builder
		for bi, be := range benches {
			o := obs[bi][i]
			fmt.Fprintf(&b, "  %s:\n", be.name)
			if o.err != nil {
				fmt.Fprintf(&b, "    not sent: %v\n", o.err)
				continue
			}
			fmt.Fprintf(&b, "    sent from %s: %s\n      %x\n", o.from, summary(describe(o.sent)), o.sent)
			if len(o.arrived) == 0 {
				fmt.Fprintf(&b, "    dropped (nothing arrived anywhere)\n")
			}
			for _, a := range o.arrived {
				fmt.Fprintf(&b, "    arrived at %s: %s\n      %x\n", a.at, summary(describe(a.frame)), a.frame)
			}
		}
		return b.String()
	}
	// Both switches alike, up to the fields the case leaves free.
	base := obs[0][i]
	for bi := 1; bi < len(benches); bi++ {
		if d := diffObs(base, obs[bi][i], s.want.free); d != "" {
			return fmt.Sprintf("%s: DIFFERENCE between %s and %s: %s\n%s%s", head, benches[0].name, benches[bi].name, d, sides(), traces(s, benches, obs, i))
		}
	}
	// Each against the expectation.
	for bi, be := range benches {
		if d := checkWant(s.want, obs[bi], i); d != "" {
			who := be.name
			if len(benches) > 1 && bi == 0 {
				who += " (and so the other switch too, up to the free fields)"
			}
			return fmt.Sprintf("%s: %s differs from the expectation: %s\n%s%s", head, who, d, sides(), traces(s, benches, obs, i))
		}
	}
	return ""
}

// diffObs compares what two switches did with one packet.
func diffObs(a, b observation, free []string) string {
	isFree := map[string]bool{}
	for _, f := range free {
		isFree[f] = true
	}
	if (a.err == nil) != (b.err == nil) {
		return fmt.Sprintf("sent on one side only (%v / %v)", a.err, b.err)
	}
	if len(a.arrived) != len(b.arrived) {
		return fmt.Sprintf("%d copies delivered against %d", len(a.arrived), len(b.arrived))
	}
	as, bs := sortedArrivals(a.arrived), sortedArrivals(b.arrived)
	for k := range as {
		if as[k].at != bs[k].at && !isFree["at"] {
			return fmt.Sprintf("delivered at %s against %s", as[k].at, bs[k].at)
		}
		fa, fb := describe(as[k].frame), describe(bs[k].frame)
		if len(fa) != len(fb) {
			return fmt.Sprintf("different headers:\n    %s\n    %s", summary(fa), summary(fb))
		}
		var diffs []string
		for j := range fa {
			if fa[j].name != fb[j].name {
				return fmt.Sprintf("different headers at %s / %s", fa[j].name, fb[j].name)
			}
			if fa[j].name == "eth_src" && strings.HasPrefix(fa[j].value, stampPrefix) && strings.HasPrefix(fb[j].value, stampPrefix) {
				continue // the stamp: compared as ct_state
			}
			if fa[j].value != fb[j].value && !isFree[fa[j].name] {
				diffs = append(diffs, fmt.Sprintf("%s: %s against %s", fa[j].name, fa[j].value, fb[j].value))
			}
		}
		if len(diffs) > 0 {
			return strings.Join(diffs, "; ")
		}
	}
	return ""
}

func sortedArrivals(as []arrival) []arrival {
	s := append([]arrival(nil), as...)
	sort.SliceStable(s, func(i, j int) bool { return s[i].at < s[j].at })
	return s
}

// checkWant checks packet i of one switch against w.
func checkWant(w want, obs []observation, i int) string {
	o := obs[i]
	if o.err != nil {
		return "not sent: " + o.err.Error()
	}
	if w.at == "*" {
		return ""
	}
	if w.at == "" {
		if len(o.arrived) > 0 {
			return fmt.Sprintf("expected dropped, delivered at %s", o.arrived[0].at)
		}
		return ""
	}
	if len(o.arrived) != max(1, w.copies) {
		return fmt.Sprintf("expected %d frame(s) at %s, got %d", max(1, w.copies), w.at, len(o.arrived))
	}
	a := o.arrived[0]
	for _, x := range o.arrived[1:] {
		if x.at != a.at {
			return fmt.Sprintf("frames at %s and %s", a.at, x.at)
		}
	}
	ok := false
	for _, at := range strings.Split(w.at, "|") {
		ok = ok || at == a.at
	}
	if !ok {
		return fmt.Sprintf("expected at %s, delivered at %s", w.at, a.at)
	}
	if w.sameAs > 0 {
		prev := obs[w.sameAs-1].arrived
		if len(prev) == 0 || prev[0].at != a.at {
			return fmt.Sprintf("expected at the same endpoint as #%d, which went to %v", w.sameAs, prev)
		}
	}
	if w.portApart > 0 {
		prev := obs[w.portApart-1].arrived
		if len(prev) == 0 {
			return fmt.Sprintf("packet #%d, whose port this one must not share, was dropped", w.portApart)
		}
		p, q := value(describe(a.frame), "tp_src"), value(describe(prev[0].frame), "tp_src")
		if p == q {
			return fmt.Sprintf("source port %s, the same as packet #%d's", p, w.portApart)
		}
	}
	for _, x := range o.arrived {
		if d := checkFrame(w, x.frame); d != "" {
			return d
		}
	}
	return ""
}

// checkFrame checks one delivered frame against w's fields.
func checkFrame(w want, frame []byte) string {
	fs := describe(frame)
	for _, f := range fs {
		if w.badCsum && f.name == "l4_csum" {
			if !strings.HasPrefix(f.value, "BAD") {
				return fmt.Sprintf("l4_csum %s: the bad checksum sent was repaired", f.value)
			}
			continue
		}
		if strings.HasSuffix(f.name, "csum") && f.value != "ok" && f.value != "(partial)" && f.value != "none" {
			return fmt.Sprintf("%s is %s", f.name, f.value)
		}
	}
	for _, st := range []struct{ name, want string }{{"ct_state", w.state}, {"ct_state2", w.state2}} {
		if st.want == "" {
			continue
		}
		bits, err := parseCTState(st.want)
		if err != nil {
			return err.Error()
		}
		if got := value(fs, st.name); got != ctStateString(bits) {
			return fmt.Sprintf("%s %s, expected %s", st.name, got, ctStateString(bits))
		}
	}
	for name, v := range w.fields {
		if got := value(fs, name); got != v {
			return fmt.Sprintf("%s=%s, expected %s", name, got, v)
		}
	}
	for _, e := range []struct{ what, want, ipf, portf string }{{"source", w.src, "ip_src", "tp_src"}, {"destination", w.dst, "ip_dst", "tp_dst"}} {
		if e.want == "" {
			continue
		}
		if d := checkAddr(e.want, value(fs, e.ipf), value(fs, e.portf)); d != "" {
			return e.what + " " + d
		}
	}
	return ""
}

// checkAddr compares ip (and port, if the expectation has one) with
// "ip[:port[-port]]" ("[ip6]:port" for IPv6).
func checkAddr(want, ip, port string) string {
	wip, wport, hasPort := want, "", false
	if h, p, err := net.SplitHostPort(want); err == nil && (strings.HasPrefix(want, "[") || strings.Count(want, ":") == 1) {
		wip, wport, hasPort = h, p, true
	}
	if !net.ParseIP(wip).Equal(net.ParseIP(ip)) {
		return fmt.Sprintf("%s:%s, expected %s", ip, port, want)
	}
	if !hasPort || port == "" { // no port to check (a later fragment)
		return ""
	}
	lo, hi := wport, wport
	if j := strings.IndexByte(wport, '-'); j >= 0 {
		lo, hi = wport[:j], wport[j+1:]
	}
	p, _ := strconv.Atoi(port)
	l, _ := strconv.Atoi(lo)
	h, _ := strconv.Atoi(hi)
	if p < l || p > h {
		return fmt.Sprintf("%s:%s, expected %s", ip, port, want)
	}
	return ""
}

// describeObs is a one-line account of what happened to a packet.
func describeObs(o observation) string {
	if o.err != nil {
		return "not sent: " + o.err.Error()
	}
	if len(o.arrived) == 0 {
		return "dropped"
	}
	var parts []string
	for _, a := range o.arrived {
		fs := describe(a.frame)
		d := fmt.Sprintf("at %s %s:%s→%s:%s ct_state=%s", a.at, value(fs, "ip_src"), value(fs, "tp_src"), value(fs, "ip_dst"), value(fs, "tp_dst"), value(fs, "ct_state"))
		parts = append(parts, d)
	}
	return strings.Join(parts, "; ")
}

// logTails is the end of each switch's log, for a failure report.
func logTails(benches []*bench) string {
	var b strings.Builder
	for _, be := range benches {
		data, err := os.ReadFile(be.log)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(&b, "  last lines of %s's log (%s):\n    %s\n", be.name, be.log, strings.Join(lines, "\n    "))
		if be.diag != nil {
			b.WriteString(be.diag())
		}
	}
	return b.String()
}

// traces asks each switch how it translates the packet of step i, the
// tracker answering on a recirculation what Open vSwitch's conntrack
// answered (its stamp), else what the step expects.
func traces(s step, benches []*bench, obs [][]observation, i int) string {
	ctNext := ""
	if bits, err := parseCTState(s.want.state); s.want.state != "" && err == nil {
		ctNext = ctNextArg(bits)
	}
	for _, a := range obs[0][i].arrived {
		if v := value(describe(a.frame), "ct_state"); strings.HasPrefix(v, "+") {
			bits, _ := parseCTState(v)
			ctNext = ctNextArg(bits)
		}
	}
	var b strings.Builder
	for bi, be := range benches {
		o := obs[bi][i]
		if be.trace == nil || o.err != nil {
			continue
		}
		port := 0
		for _, e := range endpoints {
			if e.name == o.from {
				port = e.port
			}
		}
		fmt.Fprintf(&b, "  %s's trace (in_port=%d, ct-next %q):\n    %s\n", be.name, port, ctNext,
			strings.ReplaceAll(strings.TrimSpace(be.trace(o.sent, port, ctNext)), "\n", "\n    "))
	}
	return b.String()
}

// ctNextArg writes ct_state bits as ofproto/trace's --ct-next takes them.
func ctNextArg(bits uint8) string {
	var f []string
	for _, c := range ctFlags {
		if bits&c.bit != 0 {
			f = append(f, c.name)
		}
	}
	return strings.Join(f, ",")
}
