package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/nagare-net/nagare/pkg/switchd"
)

// VS-extend steering over the switch's control socket:
//
//	nagarectl steering show
//	nagarectl steering add 'priority=10,vni=5,i_dst=10.2.0.2,i_dport=5001 actions=cpu:1'
//	nagarectl steering add 'fcf_id=3 actions=choose,priority_flow'
//	nagarectl steering del 'vni=5,i_dst=10.2.0.2,i_dport=5001'
//	nagarectl steering pin CPU WORKLOAD     (WORKLOAD 0 unpins)
func init() {
	register(&command{name: "steering", summary: "VS-extend receive steering: Core Table, Flow Table entries, counters",
		usage: "nagarectl [--switch unix:PATH] steering show | add 'MATCH actions=cpu:N|choose[,priority_flow]' | del 'MATCH' | pin CPU WORKLOAD",
		run:   runSteering})
}

func runSteering(args []string, stdout, _ io.Writer) error {
	if len(args) == 0 {
		return ctlPrint(stdout, switchd.CtlRequest{Cmd: "steering-show"})
	}
	switch args[0] {
	case "show":
		if len(args) != 1 {
			return usagef("steering show takes no arguments")
		}
		return ctlPrint(stdout, switchd.CtlRequest{Cmd: "steering-show"})
	case "add", "del":
		if len(args) < 2 {
			return usagef("steering %s needs an entry", args[0])
		}
		return ctlPrint(stdout, switchd.CtlRequest{Cmd: "steering-" + args[0], Entry: strings.Join(args[1:], " ")})
	case "pin":
		if len(args) != 3 {
			return usagef("steering pin CPU WORKLOAD")
		}
		cpu, err := strconv.ParseUint(args[1], 10, 32)
		if err != nil {
			return usagef("cpu %q: %v", args[1], err)
		}
		w, err := strconv.ParseUint(args[2], 0, 32)
		if err != nil {
			return usagef("workload %q: %v", args[2], err)
		}
		return ctlPrint(stdout, switchd.CtlRequest{Cmd: "steering-pin", CPU: uint32(cpu), Workload: uint32(w)})
	}
	return usagef("steering %s: want show, add, del or pin", fmt.Sprint(args[0]))
}
