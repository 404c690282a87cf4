// Package steering is VS-extend (seed 001): per flow, the CPU that runs the
// receive path of tunnelled traffic, chosen at the uplink's XDP hook from a
// Flow Table and a Core Table.
//
// Entries are plain data (Entry, Match) with their own syntax and tests;
// Uplink installs them into the kernel (uplink.go); Choose is the Core
// Table rule (choice.go); Sampler reads CPU loads from /proc/stat
// (sampler.go).
package steering

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Key is the header fields of one received packet that entries match on,
// the Go twin of struct steer_key (bpf/lib/steer.h). Addresses are IPv4:
// nagare's tunnel endpoints are IPv4 and the datapath's key stays small.
type Key struct {
	OuterSrc, OuterDst netip.Addr
	SPI                uint32 // ESP security parameter index (outer protocol 50)
	VNI                uint32
	InnerSrc, InnerDst netip.Addr
	InnerSrcPort       uint16
	InnerDstPort       uint16
	OuterDstPort       uint16
	InnerEthType       uint16
	InnerEthSrc        [6]byte
	InnerEthDst        [6]byte
	OuterProto         uint8
	InnerProto         uint8
	FCFID              uint8 // pod/VM id from the flow control field, 0..127
	FCFPrio            bool  // the FCF's priority bit
	Flags              uint8 // KeyVXLAN, KeyFragment
}

// Key flags, as the datapath sets them.
const (
	KeyVXLAN    = 1 << 0 // a VXLAN header was parsed: VNI and inner fields are valid
	KeyFragment = 1 << 1 // a non-first fragment: no L4 ports
)

// Match is a Flow Table match: the fields of Key under Mask (a set bit
// must be equal, a clear bit is a wildcard), as OpenFlow's masked OXMs.
type Match struct {
	Key  Key
	Mask Key
}

// Action of an entry.
type Action uint8

const (
	ActionCPU    Action = iota // run on a fixed CPU
	ActionChoose               // choose a CPU on the first packet and keep it (the paper's IRQ:-)
)

// Entry is one VS-extend Flow Table entry as a controller or nagarectl
// gives it.
type Entry struct {
	Priority uint16 // the highest-priority matching entry wins
	Match    Match
	Action   Action
	CPU      uint32 // for ActionCPU
	// PriorityFlow treats every packet matched as a priority flow, as if
	// its FCF priority bit were set.
	PriorityFlow bool
}

// ErrSyntax is wrapped by every parse error of this package.
var ErrSyntax = errors.New("steering: syntax")

// fields lists the match fields by their text name, in key order.
var fields = []struct {
	name string
	kind byte // 'a' IPv4 prefix, 'm' MAC, 'n' number
	bits int
	get  func(*Key) any
}{
	{"o_src", 'a', 32, func(k *Key) any { return &k.OuterSrc }},
	{"o_dst", 'a', 32, func(k *Key) any { return &k.OuterDst }},
	{"o_proto", 'n', 8, func(k *Key) any { return &k.OuterProto }},
	{"o_dport", 'n', 16, func(k *Key) any { return &k.OuterDstPort }},
	{"spi", 'n', 32, func(k *Key) any { return &k.SPI }},
	{"vni", 'n', 24, func(k *Key) any { return &k.VNI }},
	{"i_eth_src", 'm', 48, func(k *Key) any { return &k.InnerEthSrc }},
	{"i_eth_dst", 'm', 48, func(k *Key) any { return &k.InnerEthDst }},
	{"i_eth_type", 'n', 16, func(k *Key) any { return &k.InnerEthType }},
	{"i_src", 'a', 32, func(k *Key) any { return &k.InnerSrc }},
	{"i_dst", 'a', 32, func(k *Key) any { return &k.InnerDst }},
	{"i_proto", 'n', 8, func(k *Key) any { return &k.InnerProto }},
	{"i_sport", 'n', 16, func(k *Key) any { return &k.InnerSrcPort }},
	{"i_dport", 'n', 16, func(k *Key) any { return &k.InnerDstPort }},
	{"fcf_id", 'n', 7, func(k *Key) any { return &k.FCFID }},
	{"fcf_prio", 'b', 1, func(k *Key) any { return &k.FCFPrio }},
}

// ParseEntry reads an entry in the syntax String writes:
//
//	priority=100,vni=5,i_dst=10.1.0.2,i_proto=17,i_dport=5001 actions=cpu:1
//	fcf_id=3 actions=choose,priority_flow
//
// Numbers take an optional /mask (o_dport=4789/0xff00), addresses a
// prefix length or a dotted mask.
func ParseEntry(s string) (Entry, error) {
	var e Entry
	s = strings.TrimSpace(s)
	matchPart, actPart, ok := strings.Cut(s, "actions=")
	if !ok {
		return e, fmt.Errorf("%w: %q has no actions=", ErrSyntax, s)
	}
	m, prio, err := parseMatch(matchPart, true)
	if err != nil {
		return e, err
	}
	e.Match, e.Priority = m, prio
	for _, a := range strings.Split(strings.TrimSpace(actPart), ",") {
		switch {
		case a == "choose":
			e.Action = ActionChoose
		case a == "priority_flow":
			e.PriorityFlow = true
		case strings.HasPrefix(a, "cpu:"):
			n, err := strconv.ParseUint(a[4:], 0, 32)
			if err != nil || n >= MaxCPUs {
				return e, fmt.Errorf("%w: bad cpu %q (0..%d)", ErrSyntax, a[4:], MaxCPUs-1)
			}
			e.Action, e.CPU = ActionCPU, uint32(n)
		default:
			return e, fmt.Errorf("%w: unknown action %q (cpu:N, choose, priority_flow)", ErrSyntax, a)
		}
	}
	if !strings.Contains(actPart, "cpu:") && e.Action != ActionChoose {
		return e, fmt.Errorf("%w: actions need cpu:N or choose", ErrSyntax)
	}
	return e, nil
}

// ParseMatch reads a match alone (for deletes): "vni=5,i_dst=10.1.0.2".
func ParseMatch(s string) (Match, error) {
	m, _, err := parseMatch(s, false)
	return m, err
}

func parseMatch(s string, allowPrio bool) (Match, uint16, error) {
	var m Match
	var prio uint16
	s = strings.Trim(strings.TrimSpace(s), ",")
	if s == "" {
		return m, 0, nil
	}
	for _, kv := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return m, 0, fmt.Errorf("%w: %q is not field=value", ErrSyntax, kv)
		}
		if name == "priority" && allowPrio {
			n, err := strconv.ParseUint(val, 0, 16)
			if err != nil {
				return m, 0, fmt.Errorf("%w: priority %q", ErrSyntax, val)
			}
			prio = uint16(n)
			continue
		}
		if err := m.set(name, val); err != nil {
			return m, 0, err
		}
	}
	return m, prio, nil
}

// set parses one field's value (and mask) into m.
func (m *Match) set(name, val string) error {
	for _, f := range fields {
		if f.name != name {
			continue
		}
		kp, mp := f.get(&m.Key), f.get(&m.Mask)
		v, mask, hasMask := strings.Cut(val, "/")
		switch f.kind {
		case 'a':
			a, err := netip.ParseAddr(v)
			if err != nil || !a.Is4() {
				return fmt.Errorf("%w: %s=%q is not an IPv4 address", ErrSyntax, name, val)
			}
			mk := netip.AddrFrom4([4]byte{255, 255, 255, 255})
			if hasMask {
				if n, err := strconv.Atoi(mask); err == nil && n >= 0 && n <= 32 {
					mk = prefixMask(n)
				} else if ma, err := netip.ParseAddr(mask); err == nil && ma.Is4() {
					mk = ma
				} else {
					return fmt.Errorf("%w: %s mask %q", ErrSyntax, name, mask)
				}
			}
			*kp.(*netip.Addr) = and4(a, mk)
			*mp.(*netip.Addr) = mk
		case 'm':
			hw, err := net.ParseMAC(v)
			if err != nil || len(hw) != 6 {
				return fmt.Errorf("%w: %s=%q is not a MAC", ErrSyntax, name, val)
			}
			mk := [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
			if hasMask {
				mhw, err := net.ParseMAC(mask)
				if err != nil || len(mhw) != 6 {
					return fmt.Errorf("%w: %s mask %q", ErrSyntax, name, mask)
				}
				mk = [6]byte(mhw)
			}
			k := [6]byte(hw)
			for i := range k {
				k[i] &= mk[i]
			}
			*kp.(*[6]byte) = k
			*mp.(*[6]byte) = mk
		case 'b':
			switch v {
			case "1", "true":
				*kp.(*bool) = true
			case "0", "false":
			default:
				return fmt.Errorf("%w: %s=%q (0 or 1)", ErrSyntax, name, val)
			}
			*mp.(*bool) = true
		case 'n':
			full := uint64(1)<<f.bits - 1
			n, err := strconv.ParseUint(v, 0, 64)
			if err != nil || n > full {
				return fmt.Errorf("%w: %s=%q (0..%d)", ErrSyntax, name, val, full)
			}
			mk := full
			if hasMask {
				mk, err = strconv.ParseUint(mask, 0, 64)
				if err != nil || mk > full {
					return fmt.Errorf("%w: %s mask %q", ErrSyntax, name, mask)
				}
			}
			setNum(kp, n&mk)
			setNum(mp, mk)
		}
		return nil
	}
	return fmt.Errorf("%w: unknown field %q", ErrSyntax, name)
}

func setNum(p any, v uint64) {
	switch p := p.(type) {
	case *uint8:
		*p = uint8(v)
	case *uint16:
		*p = uint16(v)
	case *uint32:
		*p = uint32(v)
	}
}

func getNum(p any) uint64 {
	switch p := p.(type) {
	case *uint8:
		return uint64(*p)
	case *uint16:
		return uint64(*p)
	case *uint32:
		return uint64(*p)
	}
	return 0
}

func prefixMask(n int) netip.Addr {
	v := uint32(0)
	if n > 0 {
		v = ^uint32(0) << (32 - n)
	}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

func and4(a, m netip.Addr) netip.Addr {
	if !a.Is4() || !m.Is4() {
		return netip.Addr{}
	}
	x, y := a.As4(), m.As4()
	for i := range x {
		x[i] &= y[i]
	}
	return netip.AddrFrom4(x)
}

// String writes the match in ParseMatch's syntax; the empty match is "".
func (m Match) String() string {
	var parts []string
	for _, f := range fields {
		kp, mp := f.get(&m.Key), f.get(&m.Mask)
		switch f.kind {
		case 'a':
			mk := *mp.(*netip.Addr)
			if !mk.IsValid() || mk == netip.AddrFrom4([4]byte{}) {
				continue
			}
			s := f.name + "=" + kp.(*netip.Addr).String()
			if mk != netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
				if prefixMask(bitsOf(mk)) == mk {
					s += "/" + strconv.Itoa(bitsOf(mk))
				} else {
					s += "/" + mk.String()
				}
			}
			parts = append(parts, s)
		case 'm':
			mk := *mp.(*[6]byte)
			if mk == [6]byte{} {
				continue
			}
			s := f.name + "=" + net.HardwareAddr(kp.(*[6]byte)[:]).String()
			if mk != [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff} {
				s += "/" + net.HardwareAddr(mk[:]).String()
			}
			parts = append(parts, s)
		case 'b':
			if *mp.(*bool) {
				v := "0"
				if *kp.(*bool) {
					v = "1"
				}
				parts = append(parts, f.name+"="+v)
			}
		case 'n':
			mk := getNum(mp)
			if mk == 0 {
				continue
			}
			s := f.name + "=" + strconv.FormatUint(getNum(kp), 10)
			if mk != uint64(1)<<f.bits-1 {
				s += fmt.Sprintf("/0x%x", mk)
			}
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, ",")
}

func bitsOf(m netip.Addr) int {
	b := m.As4()
	return popcount(binary.BigEndian.Uint32(b[:]))
}

func popcount(v uint32) int {
	n := 0
	for ; v != 0; v &= v - 1 {
		n++
	}
	return n
}

// String writes the entry in ParseEntry's syntax.
func (e Entry) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "priority=%d", e.Priority)
	if m := e.Match.String(); m != "" {
		b.WriteString("," + m)
	}
	b.WriteString(" actions=")
	if e.Action == ActionChoose {
		b.WriteString("choose")
	} else {
		fmt.Fprintf(&b, "cpu:%d", e.CPU)
	}
	if e.PriorityFlow {
		b.WriteString(",priority_flow")
	}
	return b.String()
}

// Validate reports what the datapath could not hold.
func (e Entry) Validate() error {
	if e.Action == ActionCPU && e.CPU >= MaxCPUs {
		return fmt.Errorf("steering: cpu %d out of range (0..%d)", e.CPU, MaxCPUs-1)
	}
	if e.Action > ActionChoose {
		return fmt.Errorf("steering: unknown action %d", e.Action)
	}
	if e.Match.Mask.FCFID > 0x7f || e.Match.Key.FCFID > 0x7f {
		return fmt.Errorf("steering: fcf_id is 7 bits")
	}
	if e.Match.Mask.VNI > 0xffffff || e.Match.Key.VNI > 0xffffff {
		return fmt.Errorf("steering: vni is 24 bits")
	}
	for _, a := range []netip.Addr{e.Match.Key.OuterSrc, e.Match.Key.OuterDst, e.Match.Key.InnerSrc, e.Match.Key.InnerDst,
		e.Match.Mask.OuterSrc, e.Match.Mask.OuterDst, e.Match.Mask.InnerSrc, e.Match.Mask.InnerDst} {
		if a.IsValid() && !a.Is4() {
			return fmt.Errorf("steering: %s: addresses are IPv4", a)
		}
	}
	return nil
}

// Matches reports whether k is matched by m (the datapath's rule, in Go:
// the tests check the two agree).
func (m Match) Matches(k Key) bool {
	a, b := m.Key.wire(), m.Mask.wire()
	x := k.wire()
	for i := range x {
		if x[i]&b[i] != a[i]&b[i] {
			return false
		}
	}
	return true
}
