package ofproto

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// The megaflow property: every packet that agrees with a translated
// packet on the bits of its mask must translate to the same actions.
// Random pipelines (several tables, goto, write_metadata, overlapping
// prefixes and priorities, rewrites read by later tables, VLAN push/pop,
// select/all/fast-failover groups, NORMAL, CONTROLLER) and random packets
// from a small universe so that rules actually hit.

var (
	uInPort = []uint32{1, 2, 3, 4}
	uMAC    = []string{"00:00:00:00:00:01", "00:00:00:00:00:02", "00:00:00:00:00:03", "ff:ff:ff:ff:ff:ff"}
	uIPv4   = []string{"10.0.0.1", "10.0.0.2", "10.0.1.1", "10.1.0.1", "192.168.0.1", "192.168.7.9"}
	uIPv4P  = []string{"10.0.0.0/8", "10.0.0.0/16", "10.0.0.0/24", "10.0.0.1/32", "10.0.1.0/24", "192.168.0.0/16", "0.0.0.0/1"}
	uIPv6   = []string{"2001:db8::1", "2001:db8::2", "2001:db8:1::1"}
	uPorts  = []uint16{22, 80, 443, 1000}
	uVID    = []uint16{0, flow.VLANCFI | 10, flow.VLANCFI | 20, flow.VLANCFI | 3<<13 | 10}
)

func pick[T any](r *rand.Rand, s []T) T { return s[r.IntN(len(s))] }

// randPacket returns a packet key from the universe.
func randPacket(r *rand.Rand) flow.Key {
	k := flow.Key{InPort: pick(r, uInPort), VlanTCI: pick(r, uVID), EthSrc: mac(pick(r, uMAC[:3])), EthDst: mac(pick(r, uMAC)), NwTTL: 64}
	if r.IntN(4) == 0 {
		k.TunID = 5
	}
	switch r.IntN(5) {
	case 0: // ARP
		k.EthType = 0x0806
		k.NwProto = uint8(1 + r.IntN(2))
		k.SetIPSrc(mustAddr(pick(r, uIPv4)))
		k.SetIPDst(mustAddr(pick(r, uIPv4)))
	case 1: // IPv6
		k.EthType = 0x86dd
		k.NwProto = pick(r, []uint8{6, 17, 58})
		k.SetIPSrc(mustAddr(pick(r, uIPv6)))
		k.SetIPDst(mustAddr(pick(r, uIPv6)))
		k.TpSrc, k.TpDst = pick(r, uPorts), pick(r, uPorts)
	default:
		k.EthType = 0x0800
		k.NwProto = pick(r, []uint8{6, 17, 1})
		k.NwTOS = uint8(r.IntN(4)) << 2
		k.SetIPSrc(mustAddr(pick(r, uIPv4)))
		k.SetIPDst(mustAddr(pick(r, uIPv4)))
		k.TpSrc, k.TpDst = pick(r, uPorts), pick(r, uPorts)
	}
	return k
}

// randMatch returns a match in ovs-ofctl syntax with consistent
// prerequisites, and what kind of packet it is limited to.
func randMatch(r *rand.Rand, table int) (string, string) {
	var f []string
	kind := ""
	switch r.IntN(6) {
	case 0:
		kind = "ip"
	case 1:
		kind = pick(r, []string{"tcp", "udp"})
	case 2:
		kind = "arp"
	case 3:
		kind = "tcp6"
	}
	if kind != "" {
		f = append(f, kind)
	}
	if r.IntN(3) == 0 {
		f = append(f, fmt.Sprintf("in_port=%d", pick(r, uInPort)))
	}
	if r.IntN(4) == 0 {
		f = append(f, "dl_dst="+pick(r, uMAC))
	}
	if r.IntN(5) == 0 {
		f = append(f, "dl_src="+pick(r, uMAC[:3]))
	}
	if r.IntN(5) == 0 {
		switch v := pick(r, uVID); {
		case v == 0:
			f = append(f, "vlan_tci=0x0000/0x1fff")
		default:
			f = append(f, fmt.Sprintf("dl_vlan=%d", v&0xfff))
		}
	}
	if r.IntN(6) == 0 {
		f = append(f, "tun_id=5")
	}
	if table > 0 && r.IntN(3) == 0 {
		f = append(f, fmt.Sprintf("metadata=%#x/0xf", r.IntN(3)))
	}
	switch kind {
	case "ip", "tcp", "udp":
		if r.IntN(2) == 0 {
			f = append(f, "nw_src="+pick(r, uIPv4P))
		}
		if r.IntN(2) == 0 {
			f = append(f, "nw_dst="+pick(r, uIPv4P))
		}
		if kind != "ip" && r.IntN(2) == 0 {
			if r.IntN(3) == 0 { // a port range as a prefix: 0-511 holds 22, 80, 443
				f = append(f, "tp_dst=0x0000/0xfe00")
			} else {
				f = append(f, fmt.Sprintf("tp_dst=%d", pick(r, uPorts)))
			}
		}
		if kind == "ip" && r.IntN(4) == 0 {
			f = append(f, fmt.Sprintf("ip_dscp=%d", r.IntN(4)))
		}
	case "arp":
		if r.IntN(2) == 0 {
			f = append(f, "arp_tpa="+pick(r, uIPv4P))
		}
		if r.IntN(2) == 0 {
			f = append(f, fmt.Sprintf("arp_op=%d", 1+r.IntN(2)))
		}
	case "tcp6":
		if r.IntN(2) == 0 {
			f = append(f, "ipv6_dst="+pick(r, uIPv6))
		}
		if r.IntN(2) == 0 {
			f = append(f, fmt.Sprintf("tp_src=%d", pick(r, uPorts)))
		}
	}
	return strings.Join(f, ","), kind
}

// randActions returns instructions valid for a match of kind in table.
func randActions(r *rand.Rand, kind string, table, tables int) string {
	var a []string
	n := r.IntN(4)
	for range n {
		switch r.IntN(12) {
		case 0, 1, 2:
			a = append(a, fmt.Sprintf("output:%d", pick(r, uInPort)))
		case 3:
			switch kind {
			case "ip", "tcp", "udp":
				a = append(a, "set_field:"+pick(r, uIPv4)+"->ip_dst")
			case "tcp6":
				a = append(a, "set_field:"+pick(r, uIPv6)+"->ipv6_src")
			default:
				a = append(a, "set_field:"+pick(r, uMAC[:3])+"->eth_dst")
			}
		case 4:
			if kind == "tcp" {
				a = append(a, fmt.Sprintf("set_field:%d->tcp_dst", pick(r, uPorts)))
			} else {
				a = append(a, "set_field:"+pick(r, uMAC[:3])+"->eth_src")
			}
		case 5:
			a = append(a, "push_vlan:0x8100", fmt.Sprintf("set_field:%d->vlan_vid", 0x1000|pick(r, []int{10, 20, 30})))
		case 6:
			a = append(a, "pop_vlan")
		case 7:
			a = append(a, fmt.Sprintf("group:%d", 1+r.IntN(3)))
		case 8:
			a = append(a, pick(r, []string{"FLOOD", "ALL", "IN_PORT", "LOCAL", "CONTROLLER:64", "NORMAL"}))
		case 9:
			if kind == "ip" || kind == "tcp" || kind == "udp" {
				a = append(a, "dec_ttl", "set_field:10->ip_dscp")
			}
		}
	}
	inst := strings.Join(a, ",")
	var more []string
	if inst != "" {
		more = append(more, inst)
	}
	if r.IntN(4) == 0 {
		more = append(more, fmt.Sprintf("write_actions(output:%d)", pick(r, uInPort)))
	}
	if r.IntN(5) == 0 {
		more = append(more, "clear_actions")
	}
	if table < tables-1 && r.IntN(3) > 0 {
		if r.IntN(3) == 0 {
			more = append(more, fmt.Sprintf("write_metadata:%#x/0xf", r.IntN(3)))
		}
		more = append(more, fmt.Sprintf("goto_table:%d", table+1+r.IntN(tables-1-table)))
	}
	if len(more) == 0 {
		return "drop"
	}
	return strings.Join(more, ",")
}

// randPipeline builds a random pipeline; it returns the flows for
// failure messages.
func randPipeline(t *testing.T, r *rand.Rand) (*Pipeline, []string) {
	p, _ := newTestPipeline(t, 0)
	p.SetPorts([]Port{{No: 1}, {No: 2}, {No: 3, Config: PortConfigNoFlood}, {No: 4, State: openflow.PortStateLinkDown},
		{No: 6, Tunnel: &TunnelConfig{Remote: mustAddr("192.0.2.1")}}})
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	acts := func(s string) openflow.Actions {
		as, err := openflow.ParseActions(s)
		must(err)
		return as
	}
	b := func(weight uint16, watchPort uint32, s string) openflow.Bucket {
		return openflow.Bucket{Weight: weight, WatchPort: watchPort, WatchGroup: openflow.GroupAny, Actions: acts(s)}
	}
	any := openflow.PortAny
	must(p.GroupMod(&openflow.GroupMod{Command: openflow.GroupAdd, GroupType: openflow.GroupTypeSelect, GroupID: 1,
		Buckets: []openflow.Bucket{b(1, any, "output:1"), b(3, any, "output:2"), b(2, 4, "output:6"),
			b(1, any, "set_field:10.9.9.9->ip_dst,output:6")}}))
	must(p.GroupMod(&openflow.GroupMod{Command: openflow.GroupAdd, GroupType: openflow.GroupTypeAll, GroupID: 2,
		Buckets: []openflow.Bucket{b(0, any, "set_field:00:00:00:00:00:09->eth_dst,output:1"),
			b(0, any, "push_vlan:0x8100,set_field:4097->vlan_vid,output:2"), b(0, any, "group:1"), b(0, any, "output:6")}}))
	must(p.GroupMod(&openflow.GroupMod{Command: openflow.GroupAdd, GroupType: openflow.GroupTypeFF, GroupID: 3,
		Buckets: []openflow.Bucket{b(0, 4, "output:4"), b(0, 2, "set_field:7->tcp_dst,output:2")}}))
	const tables = 4
	var flows []string
	for table := range tables {
		for range 1 + r.IntN(10) {
			m, kind := randMatch(r, table)
			s := fmt.Sprintf("table=%d,priority=%d", table, r.IntN(6)*10)
			if m != "" {
				s += "," + m
			}
			s += ",actions=" + randActions(r, kind, table, tables)
			fm := flowMod(t, openflow.FlowAdd, s)
			if _, err := p.FlowMod(fm); err != nil {
				continue // e.g. set_field vlan_vid on a match without a tag
			}
			flows = append(flows, s)
		}
	}
	return p, flows
}

// maskVariant returns a packet that agrees with p1 on mask: the other
// bits from a random packet of the universe (even v) or random (odd v).
func maskVariant(r *rand.Rand, v int, p1 flow.Key, mask flow.Mask) flow.Key {
	if v%2 == 0 {
		return mixOutside(p1, randPacket(r), mask)
	}
	w := p1.Words()
	for i := range w {
		w[i] ^= r.Uint64()
	}
	return mixOutside(p1, flow.KeyFromWords(w), mask)
}

// mixOutside returns p1 with the bits outside mask taken from other.
func mixOutside(p1, other flow.Key, mask flow.Mask) flow.Key {
	a, b, m := p1.Words(), other.Words(), mask.Words()
	for i := range a {
		a[i] = a[i]&m[i] | b[i]&^m[i]
	}
	return flow.KeyFromWords(a)
}

var (
	maskSeed      = flag.Uint64("mask.seed", 1, "seed of TestMegaflowMaskProperty")
	maskPipelines = flag.Int("mask.pipelines", 300, "random pipelines TestMegaflowMaskProperty builds")
)

// classifierModes runs f with each lookup strategy: the tuple space as
// configured, the tuple space hashing every subtable, and the linear scan.
func classifierModes(t *testing.T, f func(t *testing.T)) {
	for _, m := range []struct {
		name   string
		small  int
		linear bool
	}{{"tss", smallSubtable, false}, {"tss-hashed", 0, false}, {"linear", smallSubtable, true}} {
		t.Run(m.name, func(t *testing.T) {
			oldSmall, oldLinear := smallSubtable, linearLookup
			smallSubtable, linearLookup = m.small, m.linear
			defer func() { smallSubtable, linearLookup = oldSmall, oldLinear }()
			f(t)
		})
	}
}

func TestMegaflowMaskProperty(t *testing.T) { classifierModes(t, testMegaflowMaskProperty) }

func testMegaflowMaskProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(*maskSeed, 2))
	pipelines, packets, variants := *maskPipelines, 25, 12
	if testing.Short() || linearLookup || smallSubtable == 0 {
		pipelines /= 3
	}
	checked := 0
	for pi := 0; pi < pipelines; pi++ {
		p, flows := randPipeline(t, r)
		for range packets {
			p1 := randPacket(r)
			translate(t, p, p1) // let NORMAL learn first
			tr1 := translate(t, p, p1)
			for v := range variants {
				p2 := maskVariant(r, v, p1, tr1.Mask)
				translate(t, p, p2)
				tr2 := translate(t, p, p2)
				if a1, a2 := actions(tr1), actions(tr2); a1 != a2 {
					t.Fatalf("pipeline %d: packets agree under the mask but translate differently\nflows:\n  %s\np1: %s\n  -> %s\np2: %s\n  -> %s\nmask: %s\ntrace p1:\n%s\ntrace p2:\n%s",
						pi, strings.Join(flows, "\n  "), flow.Format(p1, flow.ExactMask()), a1, flow.Format(p2, flow.ExactMask()), a2,
						flow.Format(flow.ExactMask(), tr1.Mask), FormatTrace(tr1.Trace), FormatTrace(tr2.Trace))
				}
				checked++
			}
		}
	}
	t.Logf("%d packet pairs checked", checked)
}

// The mask must stay narrow: on a pipeline matching only in_port and
// ip_dst, other fields stay wildcarded.
func TestMaskIsNarrow(t *testing.T) {
	p, _ := newTestPipeline(t, 3)
	mustAdd(t, p,
		"priority=30,in_port=2,actions=output:1",
		"priority=20,ip,nw_dst=10.0.0.0/24,actions=output:2",
		"priority=10,actions=output:3",
	)
	k := tcpKey(1, "10.0.0.1", "10.0.0.7", 1234, 80)
	tr := translate(t, p, k)
	want := flow.Mask{InPort: ^uint32(0), EthType: 0xffff, RecircID: ^uint32(0)}
	want.IPDst[0], want.IPDst[1], want.IPDst[2] = 0xff, 0xff, 0xff
	if tr.Mask != want {
		t.Fatalf("mask %s, want %s", flow.Format(flow.ExactMask(), tr.Mask), flow.Format(flow.ExactMask(), want))
	}
}
