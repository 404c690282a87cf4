package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Open vSwitch's userspace datapath as a FlowSetupPlane.
//
// The default NORMAL flow would not do: its translation reads only L2
// fields, so every new 5-tuple would hit one megaflow and nothing would be
// installed. And a plain `udp,tp_dst=N` rule un-wildcards only the leading
// port bits (the prefix trie), folding many ports into one megaflow. A rule
// whose actions read both whole port fields (copying them into registers)
// makes every translation un-wildcard them: one datapath flow per key.

// ovsFlowSetupFlow reads both UDP ports in full and forwards to out.
func ovsFlowSetupFlow(in, out int) string {
	return fmt.Sprintf("priority=100,udp,in_port=%d,actions=move:NXM_OF_UDP_SRC[]->NXM_NX_REG0[0..15],move:NXM_OF_UDP_DST[]->NXM_NX_REG1[0..15],output:%d", in, out)
}

// ovsFallbackFlow forwards everything else (ARP, ping) as a learning switch.
const ovsFallbackFlow = "priority=0,actions=NORMAL"

// ovsIdleMs is other_config:max-idle during flow-setup runs: installed flows
// must outlive the measurement (the default, 10 s, would expire them
// between fill and revalidation rounds).
const ovsIdleMs = 600_000

// ovsFlowSetup is the flow-setup state of an ovsNetdevPlane.
type ovsFlowSetup struct {
	o       *ovsInstance // the switch between client and server
	limit   string       // the flow limit set by PrepareFlowSetup
	changes int          // table changes made so far
	// maxRevalidator is the max-revalidator set last (0: OVS's default).
	maxRevalidator int
}

// instanceFor finds node n's switch (Setup starts one per node with pods,
// in that order).
func (d *ovsNetdevPlane) instanceFor(t *Topology, n *Node) (*ovsInstance, error) {
	for i, m := range t.NodesWithPods() {
		if m == n && i < len(d.ovs) {
			return d.ovs[i], nil
		}
	}
	return nil, fmt.Errorf("no Open vSwitch on node %s", n.Name)
}

// PrepareFlowSetup installs the one-flow-per-key pipeline between client
// and server and lifts the flow limit (dynamic and configured) and the idle
// timeout. It may be called again in the same topology.
func (d *ovsNetdevPlane) PrepareFlowSetup(ctx context.Context, t *Topology, client, server *Pod, maxFlows int) error {
	if client.Node != server.Node {
		return fmt.Errorf("ovs-netdev flow setup: %s and %s are on different nodes", client.Name, server.Name)
	}
	o, err := d.instanceFor(t, client.Node)
	if err != nil {
		return err
	}
	d.fs.o = o
	var ports [2]int
	for i, p := range []*Pod{client, server} {
		out, err := o.vsctl(ctx, "get", "Interface", p.HostIf, "ofport")
		if err != nil {
			return err
		}
		if ports[i], err = strconv.Atoi(strings.TrimSpace(out)); err != nil || ports[i] < 1 {
			return fmt.Errorf("ofport of %s: %q", p.HostIf, out)
		}
	}
	limit := strconv.Itoa(max(200_000, 4*maxFlows))
	if _, err := o.vsctl(ctx, "set", "Open_vSwitch", ".", "other_config:max-idle="+strconv.Itoa(ovsIdleMs), "other_config:flow-limit="+limit,
		"other_config:max-revalidator="+strconv.Itoa(ovsMaxRevalidatorDefault)); err != nil {
		return err
	}
	d.fs.maxRevalidator = ovsMaxRevalidatorDefault
	if _, err := o.appctl(ctx, "upcall/set-flow-limit", limit); err != nil {
		return err
	}
	if _, err := o.ofctl(ctx, "del-flows"); err != nil {
		return err
	}
	for _, f := range []string{ovsFlowSetupFlow(ports[0], ports[1]), ovsFlowSetupFlow(ports[1], ports[0]), ovsFallbackFlow} {
		if _, err := o.ofctl(ctx, "add-flow", f); err != nil {
			return err
		}
	}
	d.fs.limit = limit
	return nil
}

// InstalledFlows is the datapath's flow count (dpctl/show): exact and
// cheap, unlike dumping the flows.
func (d *ovsNetdevPlane) InstalledFlows(ctx context.Context) (int, error) {
	if d.fs.o == nil {
		return 0, fmt.Errorf("PrepareFlowSetup was not called")
	}
	out, err := d.fs.o.appctl(ctx, "dpctl/show")
	if err != nil {
		return 0, err
	}
	return ParseDpctlShowFlows(out)
}

// FlushFlows deletes every datapath flow and its revalidator state.
func (d *ovsNetdevPlane) FlushFlows(ctx context.Context) error {
	if d.fs.o == nil {
		return fmt.Errorf("PrepareFlowSetup was not called")
	}
	_, err := d.fs.o.appctl(ctx, "revalidator/purge")
	return err
}

// ovsMaxRevalidatorChange is other_config:max-revalidator (ms) while
// rounds after a table change are timed. OVS deletes, instead of
// re-translating, every flow slower than min-revalidate-pps (at least 1)
// once the previous round took half of max-revalidator (default 500 ms):
// from about 300k flows on, a table change would empty the datapath and
// the round would time deletions. The setting also spaces timer rounds
// this far apart, which is why steady rounds are timed with the default.
const (
	ovsMaxRevalidatorChange  = 20_000
	ovsMaxRevalidatorDefault = 500
)

// RevalidationRound times one round; its length is upcall/show's "dump
// duration" of the last completed round.
//
// Steady: revalidator/wait twice; the second wait is registered as a round
// has just ended, so the round it waits for starts afresh.
//
// After a table change: the wait must be registered before the change, or
// a round over few flows (1 ms at 1 000) may end before ovs-appctl gets
// there, and the wait would return only after the next timer round, a
// steady one. So the wait request is sent on a socket of our own, then a
// second unixctl call is answered (connections are served in order, so the
// wait is registered by then), then the table is changed. With
// max-revalidator at 20 s no timer round starts in between.
func (d *ovsNetdevPlane) RevalidationRound(ctx context.Context, tableChange bool) (RevalidationRound, error) {
	o := d.fs.o
	if o == nil {
		return RevalidationRound{}, fmt.Errorf("PrepareFlowSetup was not called")
	}
	// A round longer than 2 s divides the dynamic flow limit by its
	// length in seconds; restore it so that no round evicts flows.
	if _, err := o.appctl(ctx, "upcall/set-flow-limit", d.fs.limit); err != nil {
		return RevalidationRound{}, err
	}
	maxReval := ovsMaxRevalidatorDefault
	if tableChange {
		maxReval = ovsMaxRevalidatorChange
	}
	if d.fs.maxRevalidator != maxReval {
		if _, err := o.vsctl(ctx, "set", "Open_vSwitch", ".", "other_config:max-revalidator="+strconv.Itoa(maxReval)); err != nil {
			return RevalidationRound{}, err
		}
		d.fs.maxRevalidator = maxReval
		// The revalidators still sleep for the old interval: let that round
		// pass, so that none is running when the measurement starts.
		if _, err := o.appctl(ctx, "revalidator/wait"); err != nil {
			return RevalidationRound{}, err
		}
	}
	if !tableChange {
		for i := 0; i < 2; i++ {
			if _, err := o.appctl(ctx, "revalidator/wait"); err != nil {
				return RevalidationRound{}, err
			}
		}
	} else {
		ctl := filepath.Join(o.dir, "ovs-vswitchd.ctl")
		o.sh.logf("# unixctl %s revalidator/wait (own socket, answered after the table change below)", ctl)
		wait, err := unixctlStart(ctx, ctl, "revalidator/wait")
		if err != nil {
			return RevalidationRound{}, err
		}
		if _, err := o.appctl(ctx, "version"); err != nil {
			wait()
			return RevalidationRound{}, err
		}
		// An unrelated rule in an otherwise unused table: it matches none
		// of the measured packets but bumps the tables' version, so the
		// next round re-translates every flow.
		d.fs.changes++
		rule := fmt.Sprintf("table=200,priority=1,ip,nw_dst=192.0.2.%d,actions=drop", d.fs.changes%250+1)
		if _, err := o.ofctl(ctx, "add-flow", rule); err != nil {
			wait()
			return RevalidationRound{}, err
		}
		if err := wait(); err != nil {
			return RevalidationRound{}, fmt.Errorf("revalidator/wait: %w", err)
		}
	}
	out, err := o.appctl(ctx, "upcall/show")
	if err != nil {
		return RevalidationRound{}, err
	}
	u, err := ParseUpcallShow(out)
	if err != nil {
		return RevalidationRound{}, err
	}
	return RevalidationRound{Flows: u.Flows, Duration: u.DumpDuration}, nil
}

// unixctlStart sends one JSON-RPC request to an OVS unixctl socket (what
// ovs-appctl does) and returns a function that waits for the reply and
// closes the connection. When it returns, the request has been sent, not
// necessarily read.
func unixctlStart(ctx context.Context, path, method string, params ...string) (wait func() error, err error) {
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	if params == nil {
		params = []string{}
	}
	req, _ := json.Marshal(map[string]any{"id": 0, "method": method, "params": params})
	if _, err := conn.Write(req); err != nil {
		conn.Close()
		return nil, err
	}
	return func() error {
		defer conn.Close()
		stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
		defer stop()
		var reply struct {
			Result any `json:"result"`
			Error  any `json:"error"`
		}
		if err := json.NewDecoder(conn).Decode(&reply); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if reply.Error != nil {
			return fmt.Errorf("%s: %v", method, reply.Error)
		}
		return nil
	}, nil
}

// ofctl runs ovs-ofctl against the bridge br0 of this instance.
func (o *ovsInstance) ofctl(ctx context.Context, args ...string) (string, error) {
	cmd := append([]string{"ovs-ofctl", args[0], "unix:" + filepath.Join(o.dir, "br0.mgmt")}, args[1:]...)
	return o.sh.Run(ctx, cmd...)
}

// UpcallShow is the part of `ovs-appctl upcall/show` the lab uses (one
// datapath).
type UpcallShow struct {
	// Flows is the current datapath flow count, as the revalidators saw it.
	Flows, AvgFlows, MaxFlows, Limit int
	// DumpDuration is the length of the latest complete revalidator round
	// (OVS prints whole milliseconds).
	DumpDuration time.Duration
	// Keys are per revalidator thread.
	Keys []int
}

var (
	upcallFlowsRE = regexp.MustCompile(`flows\s*:\s*\(current (\d+)\)\s*\(avg (\d+)\)\s*\(max (\d+)\)\s*\(limit (\d+)\)`)
	upcallDumpRE  = regexp.MustCompile(`dump duration\s*:\s*(\d+)ms`)
	upcallKeysRE  = regexp.MustCompile(`(?m)^\s*\d+: \(keys (\d+)\)`)
	dpctlFlowsRE  = regexp.MustCompile(`(?m)^\s*flows: (\d+)\s*$`)
)

// ParseUpcallShow parses `ovs-appctl upcall/show` of a switch with one
// datapath:
//
//	netdev@ovs-netdev:
//	  flows         : (current 14) (avg 13) (max 14) (limit 2000000)
//	  dump duration : 1ms
//	  ufid enabled : true
//
//	  5: (keys 14)
func ParseUpcallShow(out string) (UpcallShow, error) {
	var u UpcallShow
	m := upcallFlowsRE.FindAllStringSubmatch(out, -1)
	if len(m) != 1 {
		return u, fmt.Errorf("upcall/show: want one datapath's flows line, found %d in %q", len(m), firstLines(out, 4))
	}
	vals := make([]int, 4)
	for i := range vals {
		vals[i], _ = strconv.Atoi(m[0][i+1])
	}
	u.Flows, u.AvgFlows, u.MaxFlows, u.Limit = vals[0], vals[1], vals[2], vals[3]
	d := upcallDumpRE.FindStringSubmatch(out)
	if d == nil {
		return u, fmt.Errorf("upcall/show: no dump duration in %q", firstLines(out, 4))
	}
	ms, _ := strconv.Atoi(d[1])
	u.DumpDuration = time.Duration(ms) * time.Millisecond
	for _, k := range upcallKeysRE.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(k[1])
		u.Keys = append(u.Keys, n)
	}
	return u, nil
}

// ParseDpctlShowFlows returns the flow count of `ovs-appctl dpctl/show`
// (summed if it lists several datapaths).
func ParseDpctlShowFlows(out string) (int, error) {
	m := dpctlFlowsRE.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return 0, fmt.Errorf("dpctl/show: no flows line in %q", firstLines(out, 4))
	}
	n := 0
	for _, x := range m {
		v, _ := strconv.Atoi(x[1])
		n += v
	}
	return n, nil
}

// CountDumpedFlows counts the flows in `ovs-appctl dpctl/dump-flows`
// output (one per line; the netdev datapath adds a "flow-dump from ..."
// header per thread).
func CountDumpedFlows(out string) int {
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "actions:") {
			n++
		}
	}
	return n
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
