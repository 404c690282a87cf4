package flow

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
)

// Action is one step of a flow's action list. The concrete types below are
// the whole set the fast path can replay; ports are OpenFlow port numbers,
// which the datapath resolves to devices when it installs the flow.
type Action interface {
	fmt.Stringer
	isAction()
}

// Output sends the packet out of a port. Several outputs send copies.
type Output struct{ Port uint32 }

// Local hands the packet to the network stack of the node, as if the port
// it arrived on had received it normally.
type Local struct{}

// SetEthSrc rewrites the Ethernet source address.
type SetEthSrc struct{ MAC net.HardwareAddr }

// SetEthDst rewrites the Ethernet destination address.
type SetEthDst struct{ MAC net.HardwareAddr }

// SetIPSrc rewrites the IPv4 or IPv6 source address (checksums fixed up).
type SetIPSrc struct{ Addr netip.Addr }

// SetIPDst rewrites the IPv4 or IPv6 destination address.
type SetIPDst struct{ Addr netip.Addr }

// SetTpSrc rewrites the TCP or UDP source port.
type SetTpSrc struct{ Port uint16 }

// SetTpDst rewrites the TCP or UDP destination port.
type SetTpDst struct{ Port uint16 }

// SetDSCP rewrites the 6-bit DSCP of IPv4 ToS / IPv6 traffic class.
type SetDSCP struct{ DSCP uint8 }

// SetECN rewrites the 2-bit ECN field.
type SetECN struct{ ECN uint8 }

// SetNDTarget rewrites the target address of an IPv6 neighbour
// solicitation or advertisement (ICMPv6 checksum fixed).
type SetNDTarget struct{ Addr netip.Addr }

// SetNDLL rewrites the link-layer address option of an IPv6 neighbour
// solicitation (source) or advertisement (target) when it has one.
type SetNDLL struct{ MAC net.HardwareAddr }

// PushMPLS puts a label stack entry (label<<12 | tc<<9 | bos<<8 | ttl, as
// on the wire) in front of the L3 header; EthType is 0x8847 or 0x8848.
type PushMPLS struct {
	EthType uint16
	LSE     uint32
}

// PopMPLS removes the top label stack entry; EthType is what follows.
type PopMPLS struct{ EthType uint16 }

// SetMPLS rewrites the bits of the top label stack entry under Mask.
type SetMPLS struct{ LSE, Mask uint32 }

// SetMPLSTTL sets the top label stack entry's TTL.
type SetMPLSTTL struct{ TTL uint8 }

// DecMPLSTTL decrements the top label stack entry's TTL; a packet whose TTL
// would reach zero is dropped and counted.
type DecMPLSTTL struct{}

// CopyTTLOut copies the TTL of the header behind the top label stack entry
// (the next entry, or the IP header) into it; CopyTTLIn the other way.
type CopyTTLOut struct{}

// CopyTTLIn copies the top label stack entry's TTL inwards.
type CopyTTLIn struct{}

// Meter runs the packet through an OpenFlow meter: a band whose rate it
// exceeds drops it, or remarks its DSCP to a higher drop precedence.
type Meter struct{ ID uint32 }

// PushPBB encapsulates the frame in an 802.1ah I-TAG with ISID (the
// backbone addresses start as copies of the frame's).
type PushPBB struct{ ISID uint32 }

// PopPBB removes the backbone addresses and I-TAG of a PBB frame.
type PopPBB struct{}

// SetPBBISID rewrites the I-SID of a PBB frame.
type SetPBBISID struct{ ISID uint32 }

// DecTTL decrements the IPv4 TTL or IPv6 hop limit; a packet whose TTL
// would reach zero is dropped and counted.
type DecTTL struct{}

// SetTTL sets the IPv4 TTL (header checksum fixed) or IPv6 hop limit;
// other packets are left alone.
type SetTTL struct{ TTL uint8 }

// PushVLAN adds an 802.1Q (TPID 0x8100) or 802.1ad (0x88a8) tag.
type PushVLAN struct {
	TPID uint16 // 0 means 0x8100
	TCI  uint16 // PCP<<13 | VID
}

// PopVLAN removes the outer VLAN tag.
type PopVLAN struct{}

// SetTunnel sets the metadata the next output to a tunnel port encapsulates
// with.
type SetTunnel struct {
	VNI        uint32
	Remote     netip.Addr // outer destination
	Local      netip.Addr // outer source; zero: chosen by routing
	TOS        uint8
	TTL        uint8 // 0 means 64
	InheritTOS bool  // outer ToS = inner ToS (VS-extend's flow control field)
}

// Userspace sends a copy of the packet to userspace with a cookie.
type Userspace struct{ Cookie uint64 }

// Drop drops the packet (an empty action list drops too). Reason is the
// fast path's drop reason it is counted under (pkg/datapath.DropReason,
// bpf/lib/drop_reasons.h); 0 counts it as action-drop.
type Drop struct{ Reason uint32 }

// DropReasonPolicy is the fast path's drop reason of a NetworkPolicy deny
// (DROP_POLICY in bpf/lib/drop_reasons.h, pkg/datapath.DropPolicy).
const DropReasonPolicy uint32 = 32

// CT flags.
const (
	CTCommit = 1 << 0 // create the connection if new, and keep it
	CTForce  = 1 << 1 // a committed connection seen in the reply direction is ended and started anew in this one
)

// CT sends the packet through the connection tracker in Zone (Open
// vSwitch's ct action, bpf/lib/conntrack.h): it fills the key's Ct* fields
// for a following Recirc, and with CTCommit creates the connection and
// sets its mark and label under their masks. NAT, when not nil, translates
// the packet as the connection says (a new committed connection takes its
// translation from NAT's range).
type CT struct {
	Zone      uint16
	Flags     uint8 // CTCommit | CTForce
	NAT       *NAT
	Mark      uint32
	MarkMask  uint32 // 0: the mark is not set
	Label     [16]byte
	LabelMask [16]byte // all zero: the label is not set
}

// NAT kinds.
const (
	NATNone = 0 // only the connection's existing translation (OVS "nat")
	NATSrc  = 1
	NATDst  = 2
)

// NAT flags (how an address and port are chosen from the range).
const (
	NATPersistent = 1 << 0
	NATHash       = 1 << 1
	NATRandom     = 1 << 2
)

// NAT is the translation part of a CT action. AddrMin..AddrMax and
// PortMin..PortMax are the range a new connection's translated address and
// port come from (zero ports: the port is kept unless it collides, for
// SNAT); both ends of the address range have the packet's family.
type NAT struct {
	Kind             uint8 // NATNone, NATSrc, NATDst
	Flags            uint8
	AddrMin, AddrMax netip.Addr
	PortMin, PortMax uint16
}

// CTClear forgets the packet's connection tracking state (Ct* key fields
// zero for a following Recirc).
type CTClear struct{}

// Recirc looks the packet up again with Key.RecircID = ID (and the Ct*
// fields the last CT action set): translation resumes where the slow path
// froze it.
type Recirc struct{ ID uint32 }

// Hash sets Key.DpHash to a hash of the packet's 5-tuple (addresses,
// protocol, ports) mixed with Basis, for a following Recirc: a select
// group's bucket is then chosen by cached flows on DpHash bits, without a
// trip to userspace per connection.
type Hash struct{ Basis uint32 }

func (Output) isAction()      {}
func (Local) isAction()       {}
func (SetEthSrc) isAction()   {}
func (SetEthDst) isAction()   {}
func (SetIPSrc) isAction()    {}
func (SetIPDst) isAction()    {}
func (SetTpSrc) isAction()    {}
func (SetTpDst) isAction()    {}
func (SetDSCP) isAction()     {}
func (SetECN) isAction()      {}
func (DecTTL) isAction()      {}
func (SetNDTarget) isAction() {}
func (SetNDLL) isAction()     {}
func (PushMPLS) isAction()    {}
func (PopMPLS) isAction()     {}
func (SetMPLS) isAction()     {}
func (SetMPLSTTL) isAction()  {}
func (DecMPLSTTL) isAction()  {}
func (CopyTTLOut) isAction()  {}
func (CopyTTLIn) isAction()   {}
func (Meter) isAction()       {}
func (PushPBB) isAction()     {}
func (PopPBB) isAction()      {}
func (SetPBBISID) isAction()  {}
func (SetTTL) isAction()      {}
func (PushVLAN) isAction()    {}
func (PopVLAN) isAction()     {}
func (SetTunnel) isAction()   {}
func (Userspace) isAction()   {}
func (Drop) isAction()        {}
func (CT) isAction()          {}
func (CTClear) isAction()     {}
func (Recirc) isAction()      {}
func (Hash) isAction()        {}

func (a Output) String() string      { return fmt.Sprintf("output:%d", a.Port) }
func (Local) String() string         { return "local" }
func (a SetEthSrc) String() string   { return "set(eth_src=" + a.MAC.String() + ")" }
func (a SetEthDst) String() string   { return "set(eth_dst=" + a.MAC.String() + ")" }
func (a SetIPSrc) String() string    { return "set(ip_src=" + a.Addr.String() + ")" }
func (a SetIPDst) String() string    { return "set(ip_dst=" + a.Addr.String() + ")" }
func (a SetTpSrc) String() string    { return fmt.Sprintf("set(tp_src=%d)", a.Port) }
func (a SetTpDst) String() string    { return fmt.Sprintf("set(tp_dst=%d)", a.Port) }
func (a SetDSCP) String() string     { return fmt.Sprintf("set(dscp=%d)", a.DSCP) }
func (a SetECN) String() string      { return fmt.Sprintf("set(ecn=%d)", a.ECN) }
func (DecTTL) String() string        { return "dec_ttl" }
func (a SetNDTarget) String() string { return "set(nd_target=" + a.Addr.String() + ")" }
func (a SetNDLL) String() string     { return "set(nd_ll=" + a.MAC.String() + ")" }
func (a PushMPLS) String() string {
	return fmt.Sprintf("push_mpls(eth_type=0x%04x,%s)", a.EthType, lseString(a.LSE, ^uint32(0)))
}
func (a PopMPLS) String() string    { return fmt.Sprintf("pop_mpls(eth_type=0x%04x)", a.EthType) }
func (a SetMPLS) String() string    { return "set(mpls(" + lseString(a.LSE, a.Mask) + "))" }
func (a SetMPLSTTL) String() string { return fmt.Sprintf("set(mpls(ttl=%d))", a.TTL) }
func (DecMPLSTTL) String() string   { return "dec_mpls_ttl" }
func (CopyTTLOut) String() string   { return "copy_ttl_out" }
func (CopyTTLIn) String() string    { return "copy_ttl_in" }
func (a Meter) String() string      { return fmt.Sprintf("meter(%d)", a.ID) }
func (a PushPBB) String() string    { return fmt.Sprintf("push_pbb(isid=%d)", a.ISID) }
func (PopPBB) String() string       { return "pop_pbb" }
func (a SetPBBISID) String() string { return fmt.Sprintf("set(pbb(isid=%d))", a.ISID) }

// LSEFields are the fields of an MPLS label stack entry (as on the wire:
// label 20 bits, TC 3, BOS 1, TTL 8), for printing.
var LSEFields = []struct {
	Name  string
	Shift uint
	Bits  uint32
}{{"label", 12, 0xfffff}, {"tc", 9, 7}, {"bos", 8, 1}, {"ttl", 0, 0xff}}

// lseString names the fields of an MPLS label stack entry under mask.
func lseString(lse, mask uint32) string {
	var s []string
	for _, f := range LSEFields {
		if mask>>f.Shift&f.Bits != 0 {
			s = append(s, fmt.Sprintf("%s=%d", f.Name, lse>>f.Shift&f.Bits))
		}
	}
	return strings.Join(s, ",")
}
func (a SetTTL) String() string { return fmt.Sprintf("set(ttl=%d)", a.TTL) }
func (a PushVLAN) String() string {
	tpid := a.TPID
	if tpid == 0 {
		tpid = 0x8100
	}
	return fmt.Sprintf("push_vlan(tpid=0x%04x,vid=%d,pcp=%d)", tpid, a.TCI&0xfff, a.TCI>>13)
}
func (PopVLAN) String() string { return "pop_vlan" }
func (a SetTunnel) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "set(tunnel(vni=%d,dst=%s", a.VNI, a.Remote)
	if a.Local.IsValid() {
		fmt.Fprintf(&b, ",src=%s", a.Local)
	}
	if a.InheritTOS {
		b.WriteString(",tos=inherit")
	} else if a.TOS != 0 {
		fmt.Fprintf(&b, ",tos=0x%x", a.TOS)
	}
	if a.TTL != 0 {
		fmt.Fprintf(&b, ",ttl=%d", a.TTL)
	}
	b.WriteString("))")
	return b.String()
}
func (a Userspace) String() string { return fmt.Sprintf("userspace(cookie=0x%x)", a.Cookie) }
func (a Drop) String() string {
	switch a.Reason {
	case 0:
		return "drop"
	case DropReasonPolicy:
		return "drop(policy)"
	}
	return fmt.Sprintf("drop(reason %d)", a.Reason)
}
func (CTClear) String() string  { return "ct_clear" }
func (a Recirc) String() string { return fmt.Sprintf("recirc(0x%x)", a.ID) }
func (a Hash) String() string   { return fmt.Sprintf("hash(l4(%d))", a.Basis) }

// String prints a CT action as Open vSwitch's dpctl does:
// ct(commit,zone=5,mark=0x1/0xff,nat(dst=10.0.0.1:80)).
func (a CT) String() string {
	var p []string
	if a.Flags&CTCommit != 0 {
		p = append(p, "commit")
	}
	if a.Flags&CTForce != 0 {
		p = append(p, "force")
	}
	if a.Zone != 0 {
		p = append(p, fmt.Sprintf("zone=%d", a.Zone))
	}
	if a.MarkMask != 0 {
		p = append(p, fmt.Sprintf("mark=0x%x/0x%x", a.Mark, a.MarkMask))
	}
	if a.LabelMask != [16]byte{} {
		p = append(p, fmt.Sprintf("label=0x%x/0x%x", a.Label[:], a.LabelMask[:]))
	}
	if a.NAT != nil {
		p = append(p, a.NAT.String())
	}
	return "ct(" + strings.Join(p, ",") + ")"
}

// String prints nat(dst=10.0.0.1-10.0.0.2:80-81,random).
func (n NAT) String() string {
	if n.Kind == NATNone {
		return "nat"
	}
	var b strings.Builder
	b.WriteString("nat(")
	b.WriteString(map[uint8]string{NATSrc: "src", NATDst: "dst"}[n.Kind])
	if n.AddrMin.IsValid() {
		b.WriteByte('=')
		addr := func(a netip.Addr) string {
			if a.Is6() {
				return "[" + a.String() + "]"
			}
			return a.String()
		}
		b.WriteString(addr(n.AddrMin))
		if n.AddrMax.IsValid() && n.AddrMax != n.AddrMin {
			b.WriteString("-" + addr(n.AddrMax))
		}
		if n.PortMin != 0 {
			fmt.Fprintf(&b, ":%d", n.PortMin)
			if n.PortMax > n.PortMin {
				fmt.Fprintf(&b, "-%d", n.PortMax)
			}
		}
	}
	for _, f := range []struct {
		bit  uint8
		name string
	}{{NATPersistent, "persistent"}, {NATHash, "hash"}, {NATRandom, "random"}} {
		if n.Flags&f.bit != 0 {
			b.WriteString("," + f.name)
		}
	}
	b.WriteByte(')')
	return b.String()
}

// FormatActions prints an action list the way dump-cache shows it.
func FormatActions(acts []Action) string {
	if len(acts) == 0 {
		return "drop"
	}
	s := make([]string, len(acts))
	for i, a := range acts {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// Flow is one cached flow: packets whose key matches Key under Mask get
// Actions. An Onload flow's packets are classified and counted by the fast
// path, then executed with Actions in userspace (its placement).
type Flow struct {
	Key     Key
	Mask    Mask
	Actions []Action
	Onload  bool
}

// Normalize returns f with Key masked, so equal flows compare equal.
func (f Flow) Normalize() Flow {
	f.Key = f.Key.And(f.Mask)
	return f
}

func (f Flow) String() string {
	return Format(f.Key, f.Mask) + " actions:" + FormatActions(f.Actions)
}

// LogValue is f formatted, made only when a record naming it is written
// (slog.LogValuer): pass a *Flow to a debug record on a hot path, which
// costs nothing then while debug logging is off (the upcall handler
// refuses a port past its flow budget every upcall).
func (f *Flow) LogValue() slog.Value { return slog.StringValue(f.String()) }
