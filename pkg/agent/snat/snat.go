// Package snat keeps the node's netfilter rules of the agent's own, in a
// table of its own ("ip nagare") so it never touches anyone else's: the
// masquerade for pod traffic leaving the cluster, and the tunnel's
// exemption from connection tracking:
//
//	table ip nagare {
//	  chain postrouting {
//	    type nat hook postrouting priority srcnat;
//	    oifname "ext0" ip saddr 10.77.1.0/24 ip daddr != 10.77.0.0/16 counter masquerade
//	  }
//	  chain tunnel-in {
//	    type filter hook prerouting priority raw;
//	    ip daddr 192.168.99.1 meta l4proto udp th dport 4789 counter notrack
//	  }
//	  chain tunnel-out {
//	    type filter hook output priority raw;
//	    ip saddr 192.168.99.1 meta l4proto udp th dport 4789 counter notrack
//	  }
//	}
//
// Why notrack: a nat chain turns the node's connection tracker on for
// every packet of its namespace, the tunnel's too. A VXLAN packet's
// source port is a hash of its inner flow and its reply comes from
// another, so each inner flow leaves an entry per direction that never
// sees a reply (UNREPLIED, taking room in the node's table), and every
// tunnel packet pays a lookup on the way out and on the way in, for
// nothing: the tunnel is never translated. OpenShift SDN, Calico and
// Cilium exempt their overlays the same way. Only the node's own tunnel
// endpoint is matched: a pod's UDP to another host's port 4789 is
// forwarded, not the node's, and is still tracked and masqueraded. A host
// firewall that matches "ct state new" for the tunnel port must match
// "ct state untracked" as well (docs/agent.md).
//
// Ensure replaces the table's whole content in one netlink batch (add the
// table, delete it, add it again with its chains and rules), so the kernel
// applies it atomically: no packet sees an empty chain, and a second Ensure
// leaves exactly one rule per chain. It speaks netlink
// (github.com/google/nftables): no nft binary is needed on the node or in
// the agent's image.
package snat

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/nagare-net/nagare/pkg/agent/inns"
	"golang.org/x/sys/unix"
)

// TableName is the agent's nftables table (family ip).
const TableName = "nagare"

const (
	chainName      = "postrouting"
	chainTunnelIn  = "tunnel-in"
	chainTunnelOut = "tunnel-out"
)

// Config says what to masquerade and which tunnel endpoint to leave
// untracked.
type Config struct {
	NetNS   string       // network namespace path ("" = the current one)
	PodCIDR netip.Prefix // this node's pods
	// PodNetwork: traffic to it is never masqueraded: the cluster CIDR,
	// or without one every known node's pod CIDR (empty: only the node's
	// own PodCIDR is excluded).
	PodNetwork []netip.Prefix
	// ExternalInterface: masquerade only out of it ("" = out of any
	// interface but Gateway).
	ExternalInterface string
	Gateway           string
	// Tunnel is the node's tunnel endpoint (its underlay address) and
	// TunnelPort the tunnel's UDP port: their packets are not tracked.
	// Either unset, or an IPv6 endpoint (the table is family ip): no
	// tunnel chains.
	Tunnel     netip.Addr
	TunnelPort uint16
}

func conn(ns string) (*nftables.Conn, func(), error) { return inns.Nftables(ns) }

// Ensure makes the table hold exactly the masquerade rule for cfg.
func Ensure(cfg Config) error {
	if !cfg.PodCIDR.IsValid() || !cfg.PodCIDR.Addr().Is4() {
		return fmt.Errorf("snat: pod CIDR %v: want IPv4", cfg.PodCIDR)
	}
	c, done, err := conn(cfg.NetNS)
	if err != nil {
		return err
	}
	defer done()
	t := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName}
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	ch := c.AddChain(&nftables.Chain{Name: chainName, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: masquerade(cfg)})
	if cfg.Tunnel.Is4() && cfg.TunnelPort != 0 {
		for _, tc := range []struct {
			name   string
			hook   *nftables.ChainHook
			offset uint32
		}{{chainTunnelIn, nftables.ChainHookPrerouting, 16}, {chainTunnelOut, nftables.ChainHookOutput, 12}} {
			ch := c.AddChain(&nftables.Chain{Name: tc.name, Table: t, Type: nftables.ChainTypeFilter,
				Hooknum: tc.hook, Priority: nftables.ChainPriorityRaw})
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: notrack(tc.offset, cfg.Tunnel, cfg.TunnelPort)})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("snat: nftables: %w", err)
	}
	return nil
}

// masquerade is the rule: out of the external interface (or not into
// the gateway), from the node's pods, to none of the pod network.
func masquerade(cfg Config) []expr.Any {
	var exprs []expr.Any
	if cfg.ExternalInterface != "" {
		exprs = append(exprs, ifname(cfg.ExternalInterface, expr.CmpOpEq)...)
	} else if cfg.Gateway != "" {
		exprs = append(exprs, ifname(cfg.Gateway, expr.CmpOpNeq)...)
	}
	exprs = append(exprs, prefixMatch(12, cfg.PodCIDR, expr.CmpOpEq)...)
	exclude := cfg.PodNetwork
	if len(exclude) == 0 {
		exclude = []netip.Prefix{cfg.PodCIDR}
	}
	for _, p := range exclude {
		exprs = append(exprs, prefixMatch(16, p, expr.CmpOpNeq)...)
	}
	return append(exprs, &expr.Counter{}, &expr.Masq{})
}

// notrack is a tunnel chain's rule: the node's endpoint at offset (12
// source: what the node sends, 16 destination: what it receives), UDP to
// the tunnel's port.
func notrack(offset uint32, addr netip.Addr, port uint16) []expr.Any {
	exprs := prefixMatch(offset, netip.PrefixFrom(addr, 32), expr.CmpOpEq)
	return append(exprs,
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_UDP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, port)},
		&expr.Counter{}, &expr.Notrack{})
}

func ifname(name string, op expr.CmpOp) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: b},
	}
}

// prefixMatch compares the IPv4 address at offset (12 source, 16
// destination) of the network header with a prefix.
func prefixMatch(offset uint32, p netip.Prefix, op expr.CmpOp) []expr.Any {
	mask := net.CIDRMask(p.Bits(), 32)
	a := p.Masked().Addr().As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: op, Register: 1, Data: a[:]},
	}
}

// Remove deletes the agent's table; an absent table is fine.
func Remove(ns string) error {
	c, done, err := conn(ns)
	if err != nil {
		return err
	}
	defer done()
	t, err := find(c)
	if err != nil || t == nil {
		return err
	}
	c.DelTable(t)
	return c.Flush()
}

func find(c *nftables.Conn) (*nftables.Table, error) {
	ts, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return nil, err
	}
	for _, t := range ts {
		if t.Name == TableName {
			return t, nil
		}
	}
	return nil, nil
}

// Describe prints the table's rules in nft's words with their counters,
// the masquerade first, then the tunnel's (for nagarectl agent and
// tests). No table: no lines.
func Describe(ns string) ([]string, error) {
	c, done, err := conn(ns)
	if err != nil {
		return nil, err
	}
	defer done()
	t, err := find(c)
	if err != nil || t == nil {
		return nil, err
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, name := range []string{chainName, chainTunnelIn, chainTunnelOut} {
		if !slices.ContainsFunc(chains, func(ch *nftables.Chain) bool { return ch.Table.Name == TableName && ch.Name == name }) {
			continue
		}
		rules, err := c.GetRules(t, &nftables.Chain{Name: name, Table: t})
		if err != nil {
			return nil, err
		}
		for _, r := range rules {
			out = append(out, describe(r.Exprs))
		}
	}
	return out, nil
}

func describe(es []expr.Any) string {
	var b bytes.Buffer
	var field string
	var mask []byte
	for _, e := range es {
		switch x := e.(type) {
		case *expr.Meta:
			field = map[expr.MetaKey]string{expr.MetaKeyOIFNAME: "oifname", expr.MetaKeyL4PROTO: "meta l4proto"}[x.Key]
		case *expr.Payload:
			if x.Base == expr.PayloadBaseTransportHeader {
				field = map[uint32]string{0: "th sport", 2: "th dport"}[x.Offset]
			} else {
				field = map[uint32]string{12: "ip saddr", 16: "ip daddr"}[x.Offset]
			}
			mask = nil
		case *expr.Bitwise:
			mask = x.Mask
		case *expr.Cmp:
			op := ""
			if x.Op == expr.CmpOpNeq {
				op = "!= "
			}
			switch field {
			case "oifname":
				fmt.Fprintf(&b, "oifname %s%q ", op, string(bytes.TrimRight(x.Data, "\x00")))
			case "ip saddr", "ip daddr":
				a, _ := netip.AddrFromSlice(x.Data)
				bits := 32
				if len(mask) == 4 {
					bits, _ = net.IPMask(mask).Size()
				}
				if bits == 32 {
					fmt.Fprintf(&b, "%s %s%s ", field, op, a)
				} else {
					fmt.Fprintf(&b, "%s %s%s ", field, op, netip.PrefixFrom(a, bits))
				}
			case "meta l4proto":
				if len(x.Data) == 1 {
					fmt.Fprintf(&b, "meta l4proto %s%s ", op, map[byte]string{unix.IPPROTO_UDP: "udp", unix.IPPROTO_TCP: "tcp"}[x.Data[0]])
				}
			case "th sport", "th dport":
				if len(x.Data) == 2 {
					fmt.Fprintf(&b, "%s %s%d ", field, op, binary.BigEndian.Uint16(x.Data))
				}
			}
		case *expr.Counter:
			fmt.Fprintf(&b, "counter packets %d bytes %d ", x.Packets, x.Bytes)
		case *expr.Masq:
			b.WriteString("masquerade")
		case *expr.Notrack:
			b.WriteString("notrack")
		}
	}
	return string(bytes.TrimSpace(b.Bytes()))
}
