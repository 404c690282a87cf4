// Package nodeport steers NodePort traffic that reaches the node's own
// stack into the switch, in nftables, in a table of the agent's own
// ("ip nagare-nodeport"), the way Antrea's proxyAll does with its
// NodePort virtual IP:
//
//	table ip nagare-nodeport {
//	  set nodeports { type inet_proto . inet_service; }   # every NodePort
//	  set local     { type inet_proto . inet_service; }   # externalTrafficPolicy: Local
//	  chain prerouting {                                   # from outside the node
//	    type nat hook prerouting priority dstnat;
//	    fib daddr type local meta l4proto . th dport @nodeports counter dnat to 169.254.0.252
//	  }
//	  chain output {                                       # from the node itself
//	    type nat hook output priority dstnat;
//	    ip daddr != 127.0.0.0/8 fib daddr type local meta l4proto . th dport @nodeports counter dnat to 169.254.0.252
//	  }
//	  set external  { type ipv4_addr . inet_proto . inet_service; }  # LoadBalancer / external IPs, Cluster policy
//	  chain postrouting {                                  # Cluster policy: replies must come back here
//	    type nat hook postrouting priority srcnat;
//	    oifname "nagare-gw0" ip daddr 169.254.0.252 meta l4proto . th dport != @local counter masquerade
//	    oifname "nagare-gw0" ip daddr . meta l4proto . th dport @external counter masquerade
//	  }
//	}
//
// LoadBalancer ingress IPs and external IPs are not the node's: the agent
// routes each into the switch (a /32 like the service CIDR), whose
// ServiceLB has them as frontends, so they need no DNAT; the external set
// only masquerades those of Cluster policy, for the same reason as above.
//
// Why a virtual address: the node's addresses belong to its stack, which
// answers or drops what arrives for them; the switch only sees what is
// routed through the gateway. DNAT to Address (routed into the switch
// like the service CIDR, nodenet.EnsureServiceRoute) keeps the port, and
// the switch's ServiceLB has a frontend Address:nodePort for every
// NodePort (the agent gives the proxy Address as one of the node's
// addresses), so the rest is the ClusterIP path: select group, DNAT to an
// endpoint, replies un-NATed by the switch and then by the node's own
// tracker.
//
// Why masquerade for Cluster policy: an endpoint on another node would
// answer the client directly from that node, which the client never
// talked to; with the gateway's address as source the reply comes back
// through this node. Local policy keeps the client's address (its
// endpoints are all on this node, kube-proxy's contract).
//
// Sets make ten thousand NodePorts one rule each; Update replaces their
// elements in one netlink batch, which the kernel applies atomically.
// Loopback destinations are left alone: a packet from 127.0.0.1 may not
// leave the node (kube-proxy's nftables mode does not serve
// localhost:nodePort either).
package nodeport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"github.com/nagare-net/nagare/pkg/agent/inns"
	"golang.org/x/sys/unix"
)

// TableName is the agent's NodePort table (family ip).
const TableName = "nagare-nodeport"

// Address is the virtual NodePort address: NodePort traffic to the node's
// own addresses is DNATed to it and routed into the switch.
var Address = netip.MustParseAddr("169.254.0.252")

const (
	setAll      = "nodeports"
	setLocal    = "local"
	setExternal = "external"
)

// Port is one NodePort, or with Addr one LoadBalancer ingress or external
// IP's Service port.
type Port struct {
	Addr  netip.Addr // zero for a NodePort
	Proto uint8      // 6 TCP, 17 UDP, 132 SCTP
	Port  uint16
	// Local: externalTrafficPolicy Local (the client's address is kept).
	Local bool
}

// Config says where and for which gateway.
type Config struct {
	NetNS   string // network namespace path ("" = the current one)
	Gateway string // the gateway device (nagare-gw0)
}

func conn(ns string) (*nftables.Conn, func(), error) {
	return inns.Nftables(ns, nftables.WithSockOptions(bigSendBuffer))
}

// sendBuffer holds one batch of ten thousand NodePorts and more: the
// kernel applies a batch atomically only if it comes in one sendmsg, and
// the default socket buffer (208 KiB) refuses 10 000 set elements
// (EMSGSIZE). SO_SNDBUFFORCE: the agent is privileged, wmem_max is no cap.
const sendBuffer = 16 << 20

func bigSendBuffer(c *netlink.Conn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = errors.Join(unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sendBuffer),
			// Reading the sets back: one dump of 10 000 elements.
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, sendBuffer))
	}); err != nil {
		return err
	}
	return serr
}

func table() *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName}
}

func portSet(t *nftables.Table, name string) *nftables.Set {
	return &nftables.Set{Table: t, Name: name, Concatenation: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeInetProto, nftables.TypeInetService)}
}

// key is a set element's key: each part of a concatenation takes a whole
// 4-byte register, the protocol in its first byte, the port big-endian.
func key(p Port) []byte {
	return []byte{p.Proto, 0, 0, 0, byte(p.Port >> 8), byte(p.Port), 0, 0}
}

func externalSet(t *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: t, Name: setExternal, Concatenation: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)}
}

// elements are a set's elements: NodePorts for setAll, those of Local
// policy for setLocal, addresses of Cluster policy for setExternal.
func elements(ports []Port, set string) []nftables.SetElement {
	var out []nftables.SetElement
	for _, p := range ports {
		switch {
		case set == setExternal && p.Addr.Is4() && !p.Local:
			a := p.Addr.As4()
			out = append(out, nftables.SetElement{Key: append(a[:], key(p)...)})
		case p.Addr.IsValid():
		case set == setAll, set == setLocal && p.Local:
			out = append(out, nftables.SetElement{Key: key(p)})
		}
	}
	return out
}

// Ensure makes the table hold exactly the chains above and the given
// NodePorts, in one batch (the table deleted and made again: no packet
// sees half of it).
func Ensure(cfg Config, ports []Port) error {
	if cfg.Gateway == "" {
		return fmt.Errorf("nodeport: no gateway device")
	}
	c, done, err := conn(cfg.NetNS)
	if err != nil {
		return err
	}
	defer done()
	t := table()
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	all, local, external := portSet(t, setAll), portSet(t, setLocal), externalSet(t)
	for _, s := range []*nftables.Set{all, local, external} {
		if err := c.AddSet(s, nil); err != nil {
			return fmt.Errorf("nodeport: set %s: %w", s.Name, err)
		}
		if err := addElements(c, s, elements(ports, s.Name)); err != nil {
			return err
		}
	}
	pre := c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	out := c.AddChain(&nftables.Chain{Name: "output", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest})
	post := c.AddChain(&nftables.Chain{Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	c.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: concat(localDst(), lookup(all, false), dnat())})
	c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: concat(notLoopback(), localDst(), lookup(all, false), dnat())})
	c.AddRule(&nftables.Rule{Table: t, Chain: post, Exprs: concat(oifname(cfg.Gateway), daddr(Address), lookup(local, true),
		[]expr.Any{&expr.Counter{}, &expr.Masq{}})})
	c.AddRule(&nftables.Rule{Table: t, Chain: post, Exprs: concat(oifname(cfg.Gateway), lookupExternal(external),
		[]expr.Any{&expr.Counter{}, &expr.Masq{}})})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nodeport: nftables: %w", err)
	}
	return nil
}

// Update replaces the sets' elements with ports, atomically (one batch:
// flush and refill both sets).
func Update(ns string, ports []Port) error {
	c, done, err := conn(ns)
	if err != nil {
		return err
	}
	defer done()
	t := table()
	for _, s := range []*nftables.Set{portSet(t, setAll), portSet(t, setLocal), externalSet(t)} {
		c.FlushSet(s)
		if err := addElements(c, s, elements(ports, s.Name)); err != nil {
			return err
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nodeport: update sets: %w", err)
	}
	return nil
}

// elementsPerMessage keeps one message's element list under the 64 KiB
// a netlink attribute can hold (an element is about 40 bytes; 10 000 in
// one list overflow its 16-bit length and the kernel sees a truncated
// list). The messages go in the same batch: still one transaction.
const elementsPerMessage = 1000

func addElements(c *nftables.Conn, s *nftables.Set, els []nftables.SetElement) error {
	for len(els) > 0 {
		n := min(len(els), elementsPerMessage)
		if err := c.SetAddElements(s, els[:n]); err != nil {
			return fmt.Errorf("nodeport: set %s: %w", s.Name, err)
		}
		els = els[n:]
	}
	return nil
}

func concat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// localDst: fib daddr type local.
func localDst() []expr.Any {
	return []expr.Any{
		&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: nativeU32(unix.RTN_LOCAL)},
	}
}

// notLoopback: ip daddr != 127.0.0.0/8.
func notLoopback() []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 0, 0, 0}, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{127, 0, 0, 0}},
	}
}

func daddr(a netip.Addr) []expr.Any {
	b := a.As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b[:]},
	}
}

func oifname(name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b},
	}
}

// lookup: meta l4proto . th dport [!=] @set. The protocol goes into the
// first 32-bit slice of register 1, the port into the second (register 9
// in the kernel's 32-bit numbering), as nft compiles a concatenation.
func lookup(s *nftables.Set, invert bool) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Payload{DestRegister: 9, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID, Invert: invert},
	}
}

// lookupExternal: ip daddr . meta l4proto . th dport @set (registers 1, 9, 10).
func lookupExternal(s *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 9},
		&expr.Payload{DestRegister: 10, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID},
	}
}

// dnat: counter dnat to Address (the port is kept).
func dnat() []expr.Any {
	a := Address.As4()
	return []expr.Any{
		&expr.Counter{},
		&expr.Immediate{Register: 1, Data: a[:]},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1},
	}
}

// nativeU32: fib's address type is compared in host byte order.
func nativeU32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

// Remove deletes the table; an absent table is fine.
func Remove(ns string) error {
	c, done, err := conn(ns)
	if err != nil {
		return err
	}
	defer done()
	ts, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return err
	}
	for _, t := range ts {
		if t.Name == TableName {
			c.DelTable(t)
			return c.Flush()
		}
	}
	return nil
}

// Ports reads the sets back from the kernel, sorted: every NodePort (with
// its policy), and the LoadBalancer / external IPs' ports of Cluster
// policy (Local ones have no element: nothing to masquerade). No table:
// none. For the agent's restart (Ensure keeps them) and tests.
func Ports(ns string) ([]Port, error) {
	c, done, err := conn(ns)
	if err != nil {
		return nil, err
	}
	defer done()
	ts, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil || !slices.ContainsFunc(ts, func(t *nftables.Table) bool { return t.Name == TableName }) {
		return nil, err
	}
	t := table()
	read := func(name string) ([][]byte, error) {
		s, err := c.GetSetByName(t, name)
		if err != nil {
			return nil, err
		}
		els, err := c.GetSetElements(s)
		var keys [][]byte
		for _, e := range els {
			keys = append(keys, e.Key)
		}
		return keys, err
	}
	port := func(k []byte) Port { return Port{Proto: k[0], Port: uint16(k[4])<<8 | uint16(k[5])} }
	var all []Port
	local := map[Port]bool{}
	for _, name := range []string{setAll, setLocal, setExternal} {
		keys, err := read(name)
		if err != nil {
			return nil, fmt.Errorf("nodeport: set %s: %w", name, err)
		}
		for _, k := range keys {
			switch {
			case name == setExternal && len(k) >= 10:
				p := port(k[4:])
				p.Addr = netip.AddrFrom4([4]byte(k[:4]))
				all = append(all, p)
			case name == setLocal && len(k) >= 6:
				local[port(k)] = true
			case name == setAll && len(k) >= 6:
				all = append(all, port(k))
			}
		}
	}
	for i := range all {
		all[i].Local = !all[i].Addr.IsValid() && local[all[i]]
	}
	SortPorts(all)
	return all, nil
}

// SortPorts orders ports by address (NodePorts first), protocol, then port.
func SortPorts(ps []Port) {
	slices.SortFunc(ps, func(a, b Port) int {
		if c := a.Addr.Compare(b.Addr); c != 0 {
			return c
		}
		if a.Proto != b.Proto {
			return int(a.Proto) - int(b.Proto)
		}
		return int(a.Port) - int(b.Port)
	})
}

// Equal reports whether two sorted port lists are the same.
func Equal(a, b []Port) bool { return slices.Equal(a, b) }
