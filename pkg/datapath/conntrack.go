package datapath

// The fast path's connection tracker (bpf/lib/conntrack.h, nat.h): the
// encoding of the CT action, and what userspace does with the table —
// dump, flush, sweep of expired connections, counts, timeouts.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/nagare-net/nagare/pkg/flow"
)

// ACT_CT slot (bpf/lib/conntrack.h), after the common header:
//
//	1  flags   u8   ctCommit | ctForce | ctNAT | ctLabel
//	2  zone    u16
//	4  mark    u32
//	8  mark mask u32, 12 NAT kind u8, 13 NAT flags u8
//	16 port min u16, 18 port max u16 (host order)
//
// What does not fit comes in ACT_CT_EXT slots just before it, each 16
// bytes at 8: the label and its mask, the lowest and highest NAT address.
// A CT costs one slot, plus two with a label, plus one (IPv4) or two
// (IPv6) with a NAT address range: five at most of a flow's MaxActions.
const (
	ctCommit = 1 << 0
	ctForce  = 1 << 1
	ctNAT    = 1 << 2
	ctLabel  = 1 << 3

	ctExtLabel     = 1
	ctExtLabelMask = 2
	ctExtNATMin    = 3
	ctExtNATMax    = 4
)

// encodeCT writes a's ACT_CT slot into r and returns the ACT_CT_EXT slots
// that go before it.
func encodeCT(a flow.CT, r *rawAction) ([]rawAction, error) {
	var ext []rawAction
	add := func(kind byte, v [16]byte) {
		var e rawAction
		e[0], e[1] = actCTExt, kind
		copy(e[8:], v[:])
		ext = append(ext, e)
	}
	r[0] = actCT
	r[1] = a.Flags & (ctCommit | ctForce)
	binary.NativeEndian.PutUint16(r[2:], a.Zone)
	binary.NativeEndian.PutUint32(r[4:], a.Mark&a.MarkMask)
	binary.NativeEndian.PutUint32(r[8:], a.MarkMask)
	if a.LabelMask != [16]byte{} {
		r[1] |= ctLabel
		var l [16]byte
		for i := range l {
			l[i] = a.Label[i] & a.LabelMask[i]
		}
		add(ctExtLabel, l)
		add(ctExtLabelMask, a.LabelMask)
	}
	if n := a.NAT; n != nil {
		r[1] |= ctNAT
		if n.Kind > flow.NATDst {
			return nil, fmt.Errorf("datapath: NAT kind %d", n.Kind)
		}
		r[12], r[13] = n.Kind, n.Flags
		binary.NativeEndian.PutUint16(r[16:], n.PortMin)
		binary.NativeEndian.PutUint16(r[18:], max(n.PortMax, n.PortMin))
		if n.Kind != flow.NATNone && n.AddrMin.IsValid() {
			hi := n.AddrMax
			if !hi.IsValid() {
				hi = n.AddrMin
			}
			if hi.Is4() != n.AddrMin.Is4() || hi.Less(n.AddrMin) {
				return nil, fmt.Errorf("datapath: bad NAT range %v-%v", n.AddrMin, hi)
			}
			pad := func(a netip.Addr) (v [16]byte) {
				if a.Is4() {
					b := a.As4()
					copy(v[:], b[:])
					return v
				}
				return a.As16()
			}
			add(ctExtNATMin, pad(n.AddrMin))
			add(ctExtNATMax, pad(hi)) // the fast path reads both ends
		}
	}
	return ext, nil
}

// decodeCT is encodeCT's inverse (dumps of flows a previous process
// installed).
func decodeCT(r rawAction, ext []rawAction) flow.CT {
	a := flow.CT{
		Flags:    r[1] & (ctCommit | ctForce),
		Zone:     binary.NativeEndian.Uint16(r[2:]),
		Mark:     binary.NativeEndian.Uint32(r[4:]),
		MarkMask: binary.NativeEndian.Uint32(r[8:]),
	}
	var nmin, nmax [16]byte
	haveAddr := false
	for _, e := range ext {
		var v [16]byte
		copy(v[:], e[8:])
		switch e[1] {
		case ctExtLabel:
			a.Label = v
		case ctExtLabelMask:
			a.LabelMask = v
		case ctExtNATMin:
			nmin, haveAddr = v, true
		case ctExtNATMax:
			nmax = v
		}
	}
	if r[1]&ctNAT != 0 {
		n := &flow.NAT{Kind: r[12], Flags: r[13],
			PortMin: binary.NativeEndian.Uint16(r[16:]), PortMax: binary.NativeEndian.Uint16(r[18:])}
		if n.PortMax == n.PortMin {
			n.PortMax = 0
		}
		if haveAddr {
			// IPv4 when the rest of both ends is zero: an IPv6 range
			// never starts in ::/96 in practice.
			if [12]byte(nmin[4:]) == [12]byte{} && [12]byte(nmax[4:]) == [12]byte{} {
				n.AddrMin, n.AddrMax = netip.AddrFrom4([4]byte(nmin[:4])), netip.AddrFrom4([4]byte(nmax[:4]))
			} else {
				n.AddrMin, n.AddrMax = netip.AddrFrom16(nmin), netip.AddrFrom16(nmax)
			}
		}
		a.NAT = n
	}
	return a
}

// Conntrack configuration (Config fields, and their defaults).
const (
	// DefaultConntrackMax is the connections the table holds (two
	// entries each: one per direction).
	DefaultConntrackMax = 65536
	ctLayout            = 1 // ct_settings.layout of this build (bpf/lib/conntrack.h CT_LAYOUT)
)

// ConntrackTimeouts are how long a connection lives after its last packet,
// by what it has seen. Zero fields take the kernel nf_conntrack's defaults
// (DefaultConntrackTimeouts).
type ConntrackTimeouts struct {
	TCPSynSent, TCPSynRecv, TCPEstablished time.Duration
	TCPFinWait, TCPCloseWait, TCPTimeWait  time.Duration
	TCPClose                               time.Duration // after an RST
	UDPFirst, UDPReplied                   time.Duration // before and after a reply
	ICMP, Other                            time.Duration
}

// DefaultConntrackTimeouts are nf_conntrack's defaults.
var DefaultConntrackTimeouts = ConntrackTimeouts{
	TCPSynSent: 120 * time.Second, TCPSynRecv: 60 * time.Second, TCPEstablished: 432000 * time.Second,
	TCPFinWait: 120 * time.Second, TCPCloseWait: 60 * time.Second, TCPTimeWait: 120 * time.Second,
	TCPClose: 10 * time.Second, UDPFirst: 30 * time.Second, UDPReplied: 120 * time.Second,
	ICMP: 30 * time.Second, Other: 600 * time.Second,
}

func (t ConntrackTimeouts) seconds() [12]uint32 {
	def := DefaultConntrackTimeouts
	pick := func(v, d time.Duration) uint32 {
		if v <= 0 {
			v = d
		}
		return uint32((v + time.Second - 1) / time.Second)
	}
	return [12]uint32{
		pick(t.TCPSynSent, def.TCPSynSent), pick(t.TCPSynRecv, def.TCPSynRecv), pick(t.TCPEstablished, def.TCPEstablished),
		pick(t.TCPFinWait, def.TCPFinWait), pick(t.TCPCloseWait, def.TCPCloseWait), pick(t.TCPTimeWait, def.TCPTimeWait),
		pick(t.TCPClose, def.TCPClose), pick(t.UDPFirst, def.UDPFirst), pick(t.UDPReplied, def.UDPReplied),
		pick(t.ICMP, def.ICMP), pick(t.Other, def.Other),
	}
}

// conntrackPortMax is the per-port share: Config.ConntrackPortMax, or a
// quarter of the table.
func (d *Datapath) conntrackPortMax() uint32 {
	switch {
	case d.cfg.ConntrackPortMax < 0:
		return 0
	case d.cfg.ConntrackPortMax > 0:
		return uint32(d.cfg.ConntrackPortMax)
	}
	return uint32(d.cfg.ConntrackMax / 4)
}

// initConntrack writes ct_config for a new instance, or checks the layout
// of a restarted one and applies this process's timeouts and budget.
func (d *Datapath) initConntrack() error {
	var c nagareCtConfig
	if err := d.objs.CtSettings.Lookup(uint32(0), &c); err != nil {
		return err
	}
	if c.Layout != 0 && c.Layout != ctLayoutVersion {
		return fmt.Errorf("pinned conntrack table has layout %d, this build understands %d", c.Layout, ctLayoutVersion)
	}
	c.Layout = ctLayoutVersion
	c.Timeout = d.cfg.ConntrackTimeouts.seconds()
	c.PortMax = d.conntrackPortMax()
	return d.objs.CtSettings.Put(uint32(0), c)
}

// SetConntrackTimeouts changes the timeouts of what the fast path sees
// from now on (a connection's deadline moves at its next packet).
func (d *Datapath) SetConntrackTimeouts(t ConntrackTimeouts) error {
	var c nagareCtConfig
	if err := d.objs.CtSettings.Lookup(uint32(0), &c); err != nil {
		return err
	}
	c.Timeout = t.seconds()
	if err := d.objs.CtSettings.Put(uint32(0), c); err != nil {
		return err
	}
	// A shortcut refreshes a deadline once a tick (bpf/lib/shortcut.h):
	// the next packet takes the new timeout.
	return d.bumpCTEpoch()
}

// bumpCTEpoch tells the connections' shortcuts that userspace changed
// the tracker's entries or timeouts: each checks its connection again at
// its next packet (ct_epoch in bpf/lib/conntrack.h; userspace owns the
// second word, the fast path the first).
func (d *Datapath) bumpCTEpoch() error {
	d.ctEpochMu.Lock()
	defer d.ctEpochMu.Unlock()
	var v uint64
	if err := d.objs.CtEpoch.Lookup(uint32(1), &v); err != nil {
		return err
	}
	return d.objs.CtEpoch.Put(uint32(1), v+1)
}

// SetConntrackPortMax sets how many live connections one ingress port may
// hold (0: no limit).
func (d *Datapath) SetConntrackPortMax(n uint32) error {
	var c nagareCtConfig
	if err := d.objs.CtSettings.Lookup(uint32(0), &c); err != nil {
		return err
	}
	c.PortMax = n
	return d.objs.CtSettings.Put(uint32(0), c)
}

// ConnTuple is one direction of a connection.
type ConnTuple struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16 // ICMP echo: the id, in both
	Proto            uint8
}

func (t ConnTuple) String() string {
	if t.Proto == 1 || t.Proto == 58 {
		return fmt.Sprintf("src=%v dst=%v id=%d", t.Src, t.Dst, t.SrcPort)
	}
	return fmt.Sprintf("src=%v dst=%v sport=%d dport=%d", t.Src, t.Dst, t.SrcPort, t.DstPort)
}

// TCP states of a tracked connection (ct_entry.tcp_state).
var tcpStateNames = []string{"NONE", "SYN_SENT", "SYN_RECV", "ESTABLISHED", "FIN_WAIT", "CLOSE_WAIT", "TIME_WAIT", "CLOSE"}

const (
	tcpTimeWait = 6
	tcpClose    = 7
)

// Conn is one tracked connection.
type Conn struct {
	Zone      uint16
	Orig      ConnTuple // as its first packet had it
	Reply     ConnTuple // as replies have it (after NAT)
	TCPState  string    // TCP only: SYN_SENT ... CLOSE
	SeenReply bool
	SNAT      bool
	DNAT      bool
	Mark      uint32
	Label     [16]byte
	InPort    uint32        // the port whose packet committed it
	Expires   time.Duration // left until it expires (negative: expired, not swept yet)
}

// String prints c as conntrack -L does, with the zone first.
func (c Conn) String() string {
	var b strings.Builder
	name := map[uint8]string{1: "icmp", 6: "tcp", 17: "udp", 58: "icmpv6", 132: "sctp"}[c.Orig.Proto]
	if name == "" {
		name = fmt.Sprint(c.Orig.Proto)
	}
	fmt.Fprintf(&b, "zone=%d %s %d %d", c.Zone, name, c.Orig.Proto, int64(c.Expires/time.Second))
	if c.TCPState != "" {
		b.WriteString(" " + c.TCPState)
	}
	fmt.Fprintf(&b, " %v %v", c.Orig, c.Reply)
	if !c.SeenReply {
		b.WriteString(" [UNREPLIED]")
	}
	if c.SNAT {
		b.WriteString(" [SNAT]")
	}
	if c.DNAT {
		b.WriteString(" [DNAT]")
	}
	fmt.Fprintf(&b, " mark=%d", c.Mark)
	if c.Label != [16]byte{} {
		fmt.Fprintf(&b, " labels=0x%x", c.Label[:])
	}
	fmt.Fprintf(&b, " in_port=%d", c.InPort)
	return b.String()
}

// ct_tuple (bpf/lib/conntrack.h): src [16], dst [16], sport be16, dport
// be16, zone u16, proto u8, family u8 = 40 bytes. ct_entry: peer tuple,
// expires u64 at 40, mark u32 at 48, in_port u32 at 52, label [16] at 56,
// kind u8 at 72, flags at 73, tcp_state at 74, fin [2] at 76, rst at 78,
// released at 79 = 80 bytes.
const (
	ctTupleSize = 40
	ctEntrySize = 80

	ctKindConn  = 1
	ctKindReply = 2

	ctfSeenReply = 1 << 0
	ctfSNAT      = 1 << 1
	ctfDNAT      = 1 << 2
	ctfFinOrig   = 1 << 3 // older builds: now fin[0] at 76
	ctfFinReply  = 1 << 4 // older builds: now fin[1] at 77
)

type ctKey [ctTupleSize]byte
type ctValue [ctEntrySize]byte

func (k *ctKey) tuple() (ConnTuple, uint16) {
	t := ConnTuple{SrcPort: binary.BigEndian.Uint16(k[32:]), DstPort: binary.BigEndian.Uint16(k[34:]), Proto: k[38]}
	if k[39] == 6 {
		t.Src, t.Dst = netip.AddrFrom16([16]byte(k[0:16])), netip.AddrFrom16([16]byte(k[16:32]))
	} else {
		t.Src, t.Dst = netip.AddrFrom4([4]byte(k[0:4])), netip.AddrFrom4([4]byte(k[16:20]))
	}
	return t, binary.NativeEndian.Uint16(k[36:])
}

func (v *ctValue) peer() ctKey     { return ctKey(v[:ctTupleSize]) }
func (v *ctValue) expires() uint64 { return binary.NativeEndian.Uint64(v[40:]) }
func (v *ctValue) inPort() uint32  { return binary.NativeEndian.Uint32(v[52:]) }
func (v *ctValue) kind() byte      { return v[72] }

// released: the connection no longer counts against its port's budget
// (the fast path saw it close, or deleted it).
func (v *ctValue) released() bool { return v[79] != 0 }

// closedTCP: both sides sent FIN, or a reset (TIME_WAIT, CLOSE).
func (v *ctValue) closedTCP() bool {
	finOrig, finReply := v[76] != 0 || v[73]&ctfFinOrig != 0, v[77] != 0 || v[73]&ctfFinReply != 0
	return v[78] != 0 || finOrig && finReply || v[74] == tcpTimeWait || v[74] == tcpClose
}

// monoCoarse is the fast path's clock: bpf_ktime_get_coarse_ns is
// CLOCK_MONOTONIC_COARSE.
func monoCoarse() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts)
	return uint64(ts.Nano())
}

func (d *Datapath) conn(k *ctKey, v *ctValue, now uint64) Conn {
	orig, zone := k.tuple()
	p := v.peer()
	reply, _ := p.tuple()
	c := Conn{Zone: zone, Orig: orig, Reply: reply, Mark: binary.NativeEndian.Uint32(v[48:]),
		InPort: v.inPort(), SeenReply: v[73]&ctfSeenReply != 0, SNAT: v[73]&ctfSNAT != 0, DNAT: v[73]&ctfDNAT != 0,
		Expires: time.Duration(int64(v.expires()) - int64(now))}
	copy(c.Label[:], v[56:72])
	if orig.Proto == 6 && int(v[74]) < len(tcpStateNames) {
		// fin[] and rst decide a close (each its own byte, set by one
		// store: no racing update loses them); tcp_state may lag one
		// racing update behind.
		st := v[74]
		if v.closedTCP() && st != tcpClose {
			st = tcpTimeWait
			if v[78] != 0 {
				st = tcpClose
			}
		}
		c.TCPState = tcpStateNames[st]
	}
	return c
}

// Conntrack lists the tracked connections (expired ones not swept yet
// included, with a negative Expires).
func (d *Datapath) Conntrack() ([]Conn, error) {
	now := monoCoarse()
	var out []Conn
	err := d.rangeConntrack(func(k *ctKey, v *ctValue) {
		if v.kind() == ctKindConn {
			out = append(out, d.conn(k, v, now))
		}
	})
	return out, err
}

// ctReadBatch is how many table entries one read takes.
const ctReadBatch = 4096

// rangeConntrack calls fn with every entry of the conntrack table, read a
// batch at a time: one system call per ctReadBatch entries where an
// iterator takes two per entry. One port may hold a quarter of the table
// (an attacker committing every tuple it can), and the revalidator's
// sweep reads all of it every few seconds on a thread that may share its
// core with pods: a sweep of 16384 connections took 112 ms iterated, 22-25
// ms in batches, the read ConntrackStats does 99 and 13 ms
// (BenchmarkConntrackSweep). fn must not keep k or v. An entry added or
// deleted while the table is read may be seen or not; none is seen twice
// (the kernel reads a hash map a bucket at a time, and entries stay in
// their bucket).
func (d *Datapath) rangeConntrack(fn func(k *ctKey, v *ctValue)) error {
	keys := make([]ctKey, ctReadBatch)
	vals := make([]ctValue, ctReadBatch)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := d.objs.Conntrack.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			fn(&keys[i], &vals[i])
		}
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			return nil // the end of the table
		case err != nil:
			return fmt.Errorf("datapath: reading the conntrack table: %w", err)
		}
	}
}

// ConnMatch selects connections to flush. Zero fields match everything;
// Addr and Port match either end of either direction (an endpoint that
// went away: its connections as client, as server, or through NAT).
type ConnMatch struct {
	Zone  *uint16
	Proto uint8
	Addr  netip.Addr
	Port  uint16
	// Origs, when not empty, selects only the connections whose original
	// tuple is one of them (the agent cuts the connections a new
	// NetworkPolicy denies, one by one).
	Origs map[ConnTuple]bool
}

// Matches reports whether m selects c.
func (m ConnMatch) Matches(c *Conn) bool { return m.match(c) }

func (m ConnMatch) match(c *Conn) bool {
	if m.Zone != nil && *m.Zone != c.Zone {
		return false
	}
	if m.Proto != 0 && m.Proto != c.Orig.Proto {
		return false
	}
	if len(m.Origs) > 0 && !m.Origs[c.Orig] {
		return false
	}
	if m.Addr.IsValid() && m.Addr != c.Orig.Src && m.Addr != c.Orig.Dst && m.Addr != c.Reply.Src && m.Addr != c.Reply.Dst {
		return false
	}
	if m.Port != 0 {
		t := [...]uint16{c.Orig.SrcPort, c.Orig.DstPort, c.Reply.SrcPort, c.Reply.DstPort}
		if m.Port != t[0] && m.Port != t[1] && m.Port != t[2] && m.Port != t[3] {
			return false
		}
		if m.Addr.IsValid() {
			// The port must be the address's own.
			ok := (c.Orig.Src == m.Addr && c.Orig.SrcPort == m.Port) || (c.Orig.Dst == m.Addr && c.Orig.DstPort == m.Port) ||
				(c.Reply.Src == m.Addr && c.Reply.SrcPort == m.Port) || (c.Reply.Dst == m.Addr && c.Reply.DstPort == m.Port)
			if !ok {
				return false
			}
		}
	}
	return true
}

// FlushConntrack deletes the connections m selects (ConnMatch{}: all) and
// returns how many.
func (d *Datapath) FlushConntrack(m ConnMatch) (int, error) {
	now := monoCoarse()
	return d.deleteConns(func(k *ctKey, v *ctValue, _ int) bool {
		c := d.conn(k, v, now)
		return m.match(&c)
	})
}

// SweepConntrack deletes the connections whose deadline has passed (and
// reply entries left without their connection), in batches, and returns
// how many connections went. The switch's revalidator calls it every few
// seconds; until then an expired connection is already treated as gone
// by the fast path, it only still takes room in the table.
func (d *Datapath) SweepConntrack() (int, error) {
	return d.sweepConntrackAt(monoCoarse())
}

func (d *Datapath) sweepConntrackAt(now uint64) (int, error) {
	// Closed TCP connections keep their entries for TIME_WAIT (120 s),
	// so that late segments are +est; they no longer count against
	// their port's budget, but fill the table: past three quarters of
	// it they go early, as the kernel's conntrack drops closing
	// connections first when full (tcp_can_early_drop).
	pressure := int(d.objs.Conntrack.MaxEntries()/2) * 3 / 4
	return d.deleteConns(func(_ *ctKey, v *ctValue, conns int) bool {
		return v.expires() < now || conns > pressure && v.closedTCP()
	})
}

// ctBatch is how many entries one delete call takes.
const ctBatch = 256

// deleteConns deletes every connection sel picks, both of its entries,
// plus reply entries whose connection is gone, and counts the released
// connections against their ports (ct_released).
func (d *Datapath) deleteConns(sel func(k *ctKey, v *ctValue, conns int) bool) (int, error) {
	type entry struct {
		k ctKey
		v ctValue
	}
	var conns []entry
	replies := map[ctKey]ctKey{} // reply entry → the connection it names
	err := d.rangeConntrack(func(k *ctKey, v *ctValue) {
		switch v.kind() {
		case ctKindConn:
			conns = append(conns, entry{*k, *v})
		case ctKindReply:
			replies[*k] = v.peer()
		}
	})
	if err != nil {
		return 0, err
	}
	var dead []ctKey
	released := map[uint32]uint64{}
	n := 0
	for i := range conns {
		k, v := &conns[i].k, &conns[i].v
		p := v.peer()
		// Its reply entry, if it names it back, goes with it or stays
		// with it; the reply entries no connection claims are left.
		orig, ok := replies[p]
		mine := ok && orig == *k
		if mine {
			delete(replies, p)
		}
		if !sel(k, v, len(conns)) {
			continue
		}
		dead = append(dead, *k)
		if mine {
			dead = append(dead, p)
		}
		if !v.released() {
			released[v.inPort()]++
		}
		n++
	}
	for r := range replies {
		dead = append(dead, r) // its connection went before it
	}
	if len(dead) > 0 {
		// After the deletes, whatever else returns: a connection's
		// shortcut then checks its entry again (bumpCTEpoch).
		defer func() { _ = d.bumpCTEpoch() }()
	}
	for len(dead) > 0 {
		b := dead[:min(ctBatch, len(dead))]
		dead = dead[len(b):]
		if _, err := d.objs.Conntrack.BatchDelete(b, nil); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			// One entry the fast path deleted meanwhile fails the batch
			// where it stands: delete the rest one by one.
			for i := range b {
				if err := d.objs.Conntrack.Delete(&b[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
					return n, err
				}
			}
		}
	}
	for port, cnt := range released {
		var cur uint64
		_ = d.objs.CtReleased.Lookup(port, &cur)
		// Never more than the port has live: a count past it would wrap
		// the fast path's unsigned live count (committed - freed -
		// released) and refuse the port every commit.
		var pc nagareCtPort
		if err := d.objs.CtPorts.Lookup(port, &pc); err != nil {
			continue // no counts (a forgotten port): nothing to release against
		}
		if live := pc.Committed - pc.Freed; live < cur+cnt {
			if live < cur {
				continue
			}
			cnt = live - cur
		}
		if err := d.objs.CtReleased.Put(port, cur+cnt); err != nil {
			return n, err
		}
	}
	return n, nil
}

// forgetConntrackPort drops a removed port's budget counts, so that the
// per-port maps do not fill up as ports come and go (a port added again
// under the same number starts with a fresh budget; connections it left
// behind expire uncounted).
//
// The connections the port committed go first: left behind, they would
// be counted against the next port of that number when they expire (the
// sweep's ct_released, the fast path's reap into freed) and take its
// live count below zero, which the fast path's unsigned budget check
// reads as a full budget: every new connection of the new pod dropped
// (ct-port-budget). Kubernetes' Netpol e2e, nine pods a spec, found it.
func (d *Datapath) forgetConntrackPort(ofport uint32) {
	_, _ = d.deleteConns(func(_ *ctKey, v *ctValue, _ int) bool { return v.inPort() == ofport })
	_ = d.objs.CtPorts.Delete(ofport)
	_ = d.objs.CtReleased.Delete(ofport)
}

// ConntrackStats are the table's counts.
type ConntrackStats struct {
	Conns   int               // live connections (expired ones not swept yet included)
	Max     int               // connections the table holds
	PortMax uint32            // live connections one port may hold, 0: no limit
	ByPort  map[uint32]uint64 // live connections by the port that committed them
}

// ConntrackStats counts the table.
func (d *Datapath) ConntrackStats() (ConntrackStats, error) {
	st := ConntrackStats{Max: int(d.objs.Conntrack.MaxEntries() / 2), ByPort: map[uint32]uint64{}}
	var c nagareCtConfig
	if err := d.objs.CtSettings.Lookup(uint32(0), &c); err != nil {
		return st, err
	}
	st.PortMax = c.PortMax
	var port uint32
	var p nagareCtPort
	it := d.objs.CtPorts.Iterate()
	for it.Next(&port, &p) {
		var rel uint64
		_ = d.objs.CtReleased.Lookup(port, &rel)
		if live := int64(p.Committed - p.Freed - rel); live > 0 {
			st.ByPort[port] = uint64(live)
		}
	}
	if err := it.Err(); err != nil {
		return st, err
	}
	err := d.rangeConntrack(func(_ *ctKey, v *ctValue) {
		if v.kind() == ctKindConn {
			st.Conns++
		}
	})
	return st, err
}
