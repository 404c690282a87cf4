package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nagare-net/nagare/pkg/agent"
	"github.com/nagare-net/nagare/pkg/switchd"
)

// Switch commands talk to nagare-switch's socket (the one ovs-ofctl uses
// too) with the JSON control protocol:
//
//	nagarectl [--switch unix:PATH] port add IFNAME [--ofport N] [--kind K] [--remote IP [--local IP]]
//	nagarectl [--switch unix:PATH] port del IFNAME
//	nagarectl [--switch unix:PATH] dump-flows | dump-ports | dump-cache | show | flush-cache
//	nagarectl [--switch unix:PATH] revalidate [--change]
//	nagarectl [--switch unix:PATH] trace 'in_port=1,tcp,nw_dst=10.0.0.2,tp_dst=80' [--hex FRAME] [--agent-socket PATH]
//	nagarectl [--switch unix:PATH] placement set PORT|cookie=V[/M] offload|onload|auto
//	nagarectl [--switch unix:PATH] placement show

// switchTarget is the global --switch flag (taken out of the arguments
// before the subcommand runs).
var switchTarget string

// defaultRunDir is where nagare-switch puts its sockets by default.
const defaultRunDir = "/var/run/nagare"

func init() {
	register(&command{name: "port", summary: "add or remove a switch port",
		usage: "nagarectl [--switch unix:PATH] port add IFNAME [--ofport N] [--kind pod|uplink|tunnel|internal] [--remote IP [--local IP] [--tos inherit]] [--workload ID --tenant T --pin-cpu N] | port del IFNAME",
		run:   runPort})
	for _, c := range []struct{ name, summary string }{
		{"dump-flows", "the OpenFlow rules with their counters"},
		{"dump-ports", "the switch ports with their counters"},
		{"dump-cache", "the fast path's cached flows: masks, actions, counters, placement and rate"},
		{"show", "switch summary: fast path, slow path and revalidator counters, drops"},
		{"flush-cache", "delete every cached flow (they are set up again on demand)"},
	} {
		name := c.name
		register(&command{name: name, summary: c.summary, usage: "nagarectl [--switch unix:PATH] " + name,
			run: func(args []string, stdout, _ io.Writer) error {
				if len(args) > 0 {
					return usagef("no arguments expected")
				}
				return ctlPrint(stdout, switchd.CtlRequest{Cmd: name})
			}})
	}
	register(&command{name: "revalidate", summary: "run one revalidator round now and print its time",
		usage: "nagarectl [--switch unix:PATH] revalidate [--change]   (--change: translate every cached flow again, as a table change would; the tables are not touched)",
		run: func(args []string, stdout, _ io.Writer) error {
			fs := flag.NewFlagSet("revalidate", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			change := fs.Bool("change", false, "translate every cached flow again")
			if err := fs.Parse(args); err != nil {
				return usagef("%v", err)
			}
			return ctlPrint(stdout, switchd.CtlRequest{Cmd: "revalidate", Change: *change})
		}})
	register(&command{name: "placement", summary: "where flows run: fast path (offload) or userspace (onload)",
		usage: "nagarectl [--switch unix:PATH] placement set PORT|cookie=VALUE[/MASK] offload|onload|auto | placement show   (PORT: name or OpenFlow number)",
		run: func(args []string, stdout, _ io.Writer) error {
			switch {
			case len(args) == 3 && args[0] == "set":
				return ctlPrint(stdout, switchd.CtlRequest{Cmd: "placement-set", Target: args[1], Mode: args[2]})
			case len(args) == 1 && args[0] == "show":
				return ctlPrint(stdout, switchd.CtlRequest{Cmd: "placement-show"})
			}
			return usagef("want set TARGET MODE or show")
		}})
	register(&command{name: "conntrack", summary: "the fast path's tracked connections, or flush some",
		usage: "nagarectl [--switch unix:PATH] conntrack [flush] [--zone N] [--proto tcp|udp|sctp|icmp] [--addr IP] [--port N]",
		run:   runConntrack})
	register(&command{name: "trace", summary: "show how a packet goes through the OpenFlow tables",
		usage: "nagarectl [--switch unix:PATH] trace PACKET [--hex FRAME] [--ct-next trk,est] [--agent-socket PATH]   (PACKET in ovs-ofctl match syntax, e.g. in_port=1,udp,nw_dst=10.0.0.2,tp_dst=53; the agent names the NetworkPolicy rules hit)",
		run:   runTrace})
}

// takeGlobalFlags removes --switch VALUE / --switch=VALUE in front of the
// subcommand.
func takeGlobalFlags(args []string) []string {
	for len(args) > 0 {
		switch {
		case args[0] == "--switch" || args[0] == "-switch":
			if len(args) < 2 {
				return args
			}
			switchTarget, args = args[1], args[2:]
		case strings.HasPrefix(args[0], "--switch="):
			switchTarget, args = strings.TrimPrefix(args[0], "--switch="), args[1:]
		default:
			return args
		}
	}
	return args
}

// socketPath resolves --switch, or the only switch in the default run
// directory.
func socketPath() (string, error) {
	if switchTarget != "" {
		t, err := switchd.ParseTarget(switchTarget)
		if err != nil {
			return "", err
		}
		if t.Network != "unix" || t.Passive {
			return "", fmt.Errorf("--switch %s: want unix:PATH", switchTarget)
		}
		return t.Address, nil
	}
	m, _ := filepath.Glob(filepath.Join(defaultRunDir, "*.mgmt"))
	switch len(m) {
	case 1:
		return m[0], nil
	case 0:
		return "", fmt.Errorf("no switch socket in %s; give --switch unix:PATH", defaultRunDir)
	}
	return "", fmt.Errorf("several switches in %s (%s); give --switch unix:PATH", defaultRunDir, strings.Join(m, ", "))
}

// ctl sends one request and returns the response.
func ctl(req switchd.CtlRequest) (*switchd.CtlResponse, error) {
	path, err := socketPath()
	if err != nil {
		return nil, err
	}
	return switchd.Call(context.Background(), path, req)
}

func ctlPrint(w io.Writer, req switchd.CtlRequest) error {
	resp, err := ctl(req)
	if err != nil {
		return err
	}
	for _, l := range resp.Lines {
		fmt.Fprintln(w, l)
	}
	return nil
}

func runPort(args []string, stdout, _ io.Writer) error {
	if len(args) < 2 {
		return usagef("want add IFNAME or del IFNAME")
	}
	verb, name := args[0], args[1]
	switch verb {
	case "add":
		fs := flag.NewFlagSet("port add", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		ofport := fs.Uint("ofport", 0, "OpenFlow port number (default: lowest free)")
		kind := fs.String("kind", "", "pod, uplink, tunnel or internal (default: detected)")
		remote := fs.String("remote", "", "tunnel endpoint: remote IP (makes a virtual port on a tunnel device)")
		local := fs.String("local", "", "tunnel endpoint: local IP")
		tos := fs.String("tos", "", "tunnel endpoint: \"inherit\" copies the inner ToS to the outer header (VS-extend's flow control field)")
		workload := fs.Uint("workload", 0, "VS-extend: the pod/VM id behind the port (its FCF id)")
		tenant := fs.Uint("tenant", 0, "VS-extend: the workload's tenant")
		pin := fs.Int("pin-cpu", -1, "VS-extend: the CPU the workload is pinned to (-1: none)")
		if err := fs.Parse(args[2:]); err != nil {
			return usagef("%v", err)
		}
		return ctlPrint(stdout, switchd.CtlRequest{Cmd: "port-add", Name: name, OFPort: uint32(*ofport), Kind: *kind, Remote: *remote, Local: *local, TOS: *tos,
			Workload: uint32(*workload), Tenant: uint32(*tenant), PinCPU: uint32(*pin + 1)})
	case "del":
		if len(args) != 2 {
			return usagef("port del takes one name")
		}
		return ctlPrint(stdout, switchd.CtlRequest{Cmd: "port-del", Name: name})
	}
	return usagef("unknown port command %q", verb)
}

func runConntrack(args []string, stdout, _ io.Writer) error {
	cmd := "conntrack"
	if len(args) > 0 && args[0] == "flush" {
		cmd, args = "conntrack-flush", args[1:]
	}
	fs := flag.NewFlagSet("conntrack", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	zone := fs.Int("zone", -1, "only this zone")
	proto := fs.String("proto", "", "only this protocol")
	addr := fs.String("addr", "", "only connections with this address at either end, either direction")
	port := fs.Uint("port", 0, "only connections with this port (of --addr, when given)")
	if err := fs.Parse(args); err != nil {
		return usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected %q", fs.Arg(0))
	}
	if *zone > 0xffff || *port > 0xffff {
		return usagef("--zone and --port take 0..65535")
	}
	req := switchd.CtlRequest{Cmd: cmd, Proto: *proto, Addr: *addr, L4Port: uint16(*port)}
	if *zone >= 0 {
		z := uint16(*zone)
		req.Zone = &z
	}
	return ctlPrint(stdout, req)
}

func runTrace(args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("trace", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	hex := fs.String("hex", "", "the frame in hex (the PACKET argument then only gives in_port)")
	ctNext := fs.String("ct-next", "", "ct_state of each recirculated pass after a ct action, e.g. trk,new (default) or trk,est; several passes: trk,new;trk,est")
	agentSock := fs.String("agent-socket", agent.DefaultAgentSocket, "the node agent's status socket: it names the NetworkPolicy rules the packet hit (none: no names)")
	var pkt string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		pkt, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return usagef("%v", err)
	}
	if pkt == "" && *hex == "" {
		return usagef("give a packet description or --hex")
	}
	resp, err := ctl(switchd.CtlRequest{Cmd: "trace", Packet: pkt, Hex: *hex, CtNext: *ctNext})
	if err != nil {
		return err
	}
	var names map[uint64]string
	if *agentSock != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if st, err := agent.FetchStatus(ctx, *agentSock); err == nil {
			names = st.PolicyCookies()
		}
		cancel()
	}
	for _, l := range resp.Lines {
		fmt.Fprintln(stdout, l)
		if n := policyNote(l, names); n != "" {
			fmt.Fprintln(stdout, "    "+n)
		}
	}
	return nil
}

// traceCookie finds a traced rule's cookie in its line ("table 34:
// priority=200,... cookie=0x6... actions=...").
var traceCookie = regexp.MustCompile(`^table \d+: priority=\d+,.* cookie=(0x[0-9a-f]+) actions=(.*)$`)

// policyNote is what the agent's names say of a traced rule's line: the
// NetworkPolicy rule that allowed the packet, or the pod's default deny
// that dropped it. A conjunction clause's line says nothing: its flow is
// shared by every rule with that clause, the conj_id flow after it names
// the rule.
func policyNote(line string, names map[uint64]string) string {
	m := traceCookie.FindStringSubmatch(line)
	if m == nil || strings.HasPrefix(m[2], "conjunction(") {
		return ""
	}
	c, err := strconv.ParseUint(m[1], 0, 64)
	if err != nil {
		return ""
	}
	return names[c]
}
