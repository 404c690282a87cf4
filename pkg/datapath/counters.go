package datapath

import (
	"fmt"

	"github.com/nagare-net/nagare/pkg/flow"
)

// DropReason is why the fast path dropped a packet (bpf/lib/drop_reasons.h).
type DropReason uint32

// dropNames lists bpf/lib/drop_reasons.h in order; keep them in step.
var dropNames = []string{
	0:  "none",
	1:  "short-ethernet",
	2:  "short-vlan",
	3:  "short-ip",
	4:  "bad-ip-header",
	5:  "short-l4",
	6:  "short-arp",
	7:  "ipv6-ext-chain",
	8:  "no-tunnel-metadata",
	9:  "upcall-ring-full",
	10: "ttl-exceeded",
	11: "action-drop",
	12: "rewrite-failed",
	13: "vlan-failed",
	14: "set-tunnel-failed",
	15: "redirect-failed",
	16: "bad-exec-slot",
	17: "bad-action",
	18: "miss-upcalls-off",
	19: "short-mpls",
	20: "mpls-failed",
	21: "meter",
	22: "pbb-failed",
	23: "short-pbb",
	24: "onload-ring-full",
	25: "onload-oversize",
	26: "recirc-depth",
	27: "ct-table-full",
	28: "ct-port-budget",
	29: "nat-no-port",
	30: "upcall-port-budget",
	31: "controller-upcall-budget",
	32: "policy",
}

func (r DropReason) String() string {
	if int(r) < len(dropNames) && dropNames[r] != "" {
		return dropNames[r]
	}
	return fmt.Sprintf("drop(%d)", uint32(r))
}

// Drop reasons tests and tools refer to by value.
const (
	DropShortEth         DropReason = 1
	DropShortVLAN        DropReason = 2
	DropShortIP          DropReason = 3
	DropBadIPHeader      DropReason = 4
	DropShortL4          DropReason = 5
	DropShortARP         DropReason = 6
	DropIPv6ExtChain     DropReason = 7
	DropUpcallRingFull   DropReason = 9
	DropTTLExceeded      DropReason = 10
	DropAction           DropReason = 11
	DropMissNoUpcall     DropReason = 18
	DropShortMPLS        DropReason = 19
	DropMPLS             DropReason = 20
	DropMeter            DropReason = 21
	DropOnloadRingFull   DropReason = 24
	DropOnloadOversize   DropReason = 25
	DropRecircDepth      DropReason = 26
	DropCTTableFull      DropReason = 27
	DropCTPortBudget     DropReason = 28
	DropNATNoPort        DropReason = 29
	DropUpcallBudget     DropReason = 30
	DropControllerBudget DropReason = 31
	DropPolicy           DropReason = DropReason(flow.DropReasonPolicy)
)

// counterNames lists enum counter in bpf/lib/maps.h.
var counterNames = []string{0: "emc-hit", 1: "megaflow-hit", 2: "miss", 3: "upcall", 4: "executed", 5: "mask-probe", 6: "emc-insert", 7: "mask-cache-hit",
	8: "shortcut-hit", 9: "shortcut-learn",
	10: "onload", 11: "onload-gso", 12: "tunnel-encap", 13: "tunnel-decap", 14: "tunnel-kernel", 15: "tunnel-undo"}

// Drops returns the non-zero drop counters, summed over CPUs.
func (d *Datapath) Drops() (map[DropReason]uint64, error) {
	out := map[DropReason]uint64{}
	for r := range uint32(len(dropNames)) {
		v, err := d.percpuSum(d.objs.Drops.Lookup, r)
		if err != nil {
			return nil, err
		}
		if v != 0 {
			out[DropReason(r)] = v
		}
	}
	return out, nil
}

// Counters returns the event counters (hits, misses, upcalls, ...).
func (d *Datapath) Counters() (map[string]uint64, error) {
	out := map[string]uint64{}
	for i, name := range counterNames {
		if name == "" {
			continue
		}
		v, err := d.percpuSum(d.objs.Counters.Lookup, uint32(i))
		if err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, nil
}

func (d *Datapath) percpuSum(lookup func(key, value any) error, key uint32) (uint64, error) {
	vals := make([]uint64, d.ncpu)
	if err := lookup(key, &vals); err != nil {
		return 0, err
	}
	var s uint64
	for _, v := range vals {
		s += v
	}
	return s, nil
}
