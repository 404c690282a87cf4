package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nagare-net/nagare/pkg/agent"
)

func init() {
	register(&command{name: "agent", summary: "the node agent: pods, IPAM, nodes, tunnels, Services, NetworkPolicies, pipeline flows per table",
		usage: "nagarectl agent [--agent-socket PATH] [status|pods|nodes|services|policies|pipeline|dpu|metrics] [--json]\n       nagarectl agent [--agent-socket PATH] direct-forward on|off\n       nagarectl agent [--agent-socket PATH] live|ready   # the DaemonSet's probes: exit 0 when alive / the pipeline is programmed",
		run:   runAgent})
}

func runAgent(args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	sock := fs.String("agent-socket", agent.DefaultAgentSocket, "the agent's status socket")
	asJSON := fs.Bool("json", false, "print the agent's status as JSON")
	// The verb may come before the flags or after them (the usage line
	// puts --agent-socket first).
	what := ""
	for {
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") && what == "" {
			what, args = args[0], args[1:]
		}
		if err := fs.Parse(args); err != nil {
			return usagef("%v", err)
		}
		if args = fs.Args(); what != "" || len(args) == 0 {
			break
		}
	}
	if what == "" {
		what = "status"
	}
	if what == "live" || what == "ready" {
		if fs.NArg() > 0 {
			return usagef("unexpected arguments %q", fs.Args())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := agent.Probe(ctx, *sock, what); err != nil {
			return err
		}
		_, err := fmt.Fprintln(stdout, what)
		return err
	}
	if what == "direct-forward" {
		if fs.NArg() != 1 || (fs.Arg(0) != "on" && fs.Arg(0) != "off") {
			return usagef("direct-forward on|off")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		return agent.SetDirectForward(ctx, *sock, fs.Arg(0) == "on")
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if what == "metrics" {
		m, err := agent.FetchMetrics(ctx, *sock)
		if err != nil {
			return err
		}
		_, err = io.WriteString(stdout, m)
		return err
	}
	st, err := agent.FetchStatus(ctx, *sock)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	defer w.Flush()
	switch what {
	case "status":
		conn := "connected"
		if !st.Switch.Connected {
			conn = "NOT CONNECTED"
		}
		fmt.Fprintf(w, "node %s (%s)\tpod CIDR %s\tgateway %s %s (port %d)\tunderlay %s\tup %s\n",
			st.Node, st.Source, st.PodCIDR, st.Gateway, st.GatewayMAC, st.GatewayPort, st.Underlay, st.Uptime)
		fmt.Fprintf(w, "switch %s: %s, %d reconnects; last sync %s ago: %d added, %d deleted, %d kept (%s)\n",
			st.Switch.Socket, conn, st.Switch.Reconnects, time.Since(st.Switch.LastSyncAt).Round(time.Second),
			st.Switch.LastSync.Added, st.Switch.LastSync.Deleted, st.Switch.LastSync.Kept, st.Switch.SyncTook)
		pending := ""
		if st.ServicesPending > 0 {
			pending = fmt.Sprintf(", %d being programmed", st.ServicesPending)
		}
		fmt.Fprintf(w, "IPAM: %d of %d addresses in use; %d pods; %d remote nodes; %d Services (%d problems%s)\n",
			st.IPAM.Used, st.IPAM.Total, len(st.Pods), len(st.Remotes), len(st.Services), len(st.ServiceProblems), pending)
		for _, m := range st.Masquerade {
			what := "masquerade"
			if strings.HasSuffix(m, "notrack") {
				what = "untracked"
			}
			fmt.Fprintf(w, "%s: %s\n", what, m)
		}
		if st.NodePorts != "" {
			fmt.Fprintf(w, "into the switch: %s\n", st.NodePorts)
		}
		printDPU(w, st)
		fmt.Fprintln(w)
		printPods(w, st)
		fmt.Fprintln(w)
		printNodes(w, st)
		fmt.Fprintln(w)
		printTables(w, st)
	case "pods":
		printPods(w, st)
	case "nodes":
		printNodes(w, st)
	case "services":
		printServices(w, st)
	case "policies":
		printPolicies(w, st)
	case "pipeline":
		printTables(w, st)
	case "dpu":
		printDPU(w, st)
	default:
		return usagef("unknown view %q (status, pods, nodes, services, policies, pipeline, dpu, metrics)", what)
	}
	return nil
}

func printPods(w io.Writer, st *agent.Status) {
	fmt.Fprintln(w, "POD\tIP\tMAC\tPORT\tHOST END\tCONTAINER")
	for _, p := range st.Pods {
		id := p.ContainerID
		if len(id) > 12 {
			id = id[:12]
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s/%s\n", orDash(p.Pod), p.IP, p.MAC, p.OFPort, p.Host, id, p.IfName)
	}
}

func printNodes(w io.Writer, st *agent.Status) {
	fmt.Fprintln(w, "REMOTE NODE\tUNDERLAY\tPOD CIDR\tTUNNEL PORT")
	for _, r := range st.Remotes {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\n", r.Name, r.Underlay, r.PodCIDR, r.Port)
	}
}

// printServices prints the desired service state: per Service port its
// frontends and verdicts (forward; reject or drop when no endpoint is
// usable), then one row per endpoint. USE says which traffic goes to the endpoint (int: ClusterIP,
// ext: NodePort, LoadBalancer, external IPs). CONNS: connections sent to
// the endpoint since its flow was programmed ("-": not in use, or the
// switch was not asked).
func printServices(w io.Writer, st *agent.Status) {
	fmt.Fprintln(w, "SERVICE\tTYPE\tPORT\tFRONTENDS\tVERDICT INT/EXT\tENDPOINT\tSTATE\tUSE\tNODE\tPOD\tCONNS")
	for _, s := range st.Services {
		typ := s.Type
		if s.InternalPolicy == "Local" || s.ExternalPolicy == "Local" {
			typ += fmt.Sprintf(" (int %s, ext %s)", s.InternalPolicy, s.ExternalPolicy)
		}
		if s.Affinity != "None" {
			typ += ", " + s.Affinity
		}
		for _, p := range s.Ports {
			port := p.Protocol
			if p.Name != "" {
				port = p.Name + "/" + p.Protocol
			}
			first := fmt.Sprintf("%s\t%s\t%s\t%s\t%s/%s", s.Service, typ, port, strings.Join(p.Frontends, ", "), p.Internal, p.External)
			if len(p.Endpoints) == 0 {
				fmt.Fprintf(w, "%s\t-\t-\t-\t-\t-\t-\n", first)
				continue
			}
			for i, e := range p.Endpoints {
				if i > 0 {
					first = "\t\t\t\t"
				}
				var use []string
				if e.Internal {
					use = append(use, "int")
				}
				if e.External {
					use = append(use, "ext")
				}
				conns := "-"
				if e.Connections != nil {
					conns = fmt.Sprint(*e.Connections)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", first, e.Address, e.State, orDash(strings.Join(use, ",")), orDash(e.Node), orDash(e.Pod), conns)
			}
		}
	}
	for _, p := range st.ServiceProblems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
}

func printTables(w io.Writer, st *agent.Status) {
	fmt.Fprintln(w, "TABLE\tNAME\tSTAGE\tFLOWS")
	for _, t := range st.Tables {
		fmt.Fprintf(w, "%d\t%s\t%s\t%d\n", t.ID, t.Name, t.Stage, t.Flows)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printDPU prints DPU mode's control network, lease, direct-forward table
// and the packets each VF path took.
func printDPU(w io.Writer, st *agent.Status) {
	d := st.DPU
	if d == nil {
		fmt.Fprintf(w, "mode %s\n", st.Mode)
		return
	}
	lease := "none (DPU down: " + d.Down + ")"
	if !d.LeaseUntil.IsZero() {
		lease = fmt.Sprintf("held, %s left", time.Until(d.LeaseUntil).Round(time.Millisecond))
	}
	fmt.Fprintf(w, "mode dpu: switch %s, DPU domain %s, lease %s, direct forward %v (%d entries)\n", d.Switch, d.Netns, lease, d.DirectForward, len(d.Table))
	var names []string
	for n := range d.Paths {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s=%d", n, d.Paths[n]))
	}
	fmt.Fprintf(w, "VF paths: %s\n", strings.Join(parts, " "))
}

// printPolicies prints the realized NetworkPolicy rules on this node, one
// row per rule: the local pods it applies to, its peers and ports, and the
// new-connection packets it allowed (its conj_id flow's counters); then
// each isolated pod's default-deny drops (reason: policy); then bad input.
func printPolicies(w io.Writer, st *agent.Status) {
	fmt.Fprintln(w, "RULE\tDIR\tPODS\tPEERS\tPORTS\tALLOWED PKTS\tBYTES")
	for _, r := range st.Policies {
		pk, by := "-", "-"
		if r.Packets != nil {
			pk, by = fmt.Sprint(*r.Packets), fmt.Sprint(*r.Bytes)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Rule, r.Direction, strings.Join(r.Pods, ","), r.Peers, r.Ports, pk, by)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "ISOLATED POD\tDIR\tDROPPED PKTS (policy)\tBYTES")
	for _, d := range st.PolicyDrops {
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\n", d.Pod, d.Direction, d.Packets, d.Bytes)
	}
	for _, p := range st.PolicyProblems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
}
