package datapath

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/nagare-net/nagare/pkg/flow"
)

// Kernel action encoding (struct action, bpf/lib/maps.h), 24 bytes:
//
//	0  type  u8
//	1  flags u8
//	2  arg16 u16   (network order where the C side says __be16)
//	4  arg32 u32   (network order for IPv4 addresses)
//	8  union [16]  mac | ip6 | tunnel {remote be32, local be32, tos, ttl} | u64 cookie
const actionSize = 24

// flow_entry: gen u32, n_actions u16, flags u16, actions[16].
const flowEntrySize = 8 + MaxActions*actionSize

const (
	actOutput     = 1
	actLocal      = 2
	actSetEthSrc  = 3
	actSetEthDst  = 4
	actSetIP4Src  = 5
	actSetIP4Dst  = 6
	actSetIP6Src  = 7
	actSetIP6Dst  = 8
	actSetTpSrc   = 9
	actSetTpDst   = 10
	actSetTOS     = 11
	actDecTTL     = 12
	actPushVLAN   = 13
	actPopVLAN    = 14
	actSetTunnel  = 15
	actUserspace  = 16
	actDrop       = 17
	actSetTTL     = 19 // 18 is actOutputSet (outputsets.go)
	actSetNDTgt   = 20
	actSetNDLL    = 21
	actPushMPLS   = 22
	actPopMPLS    = 23
	actSetMPLS    = 24
	actSetMPLSTTL = 25
	actDecMPLSTTL = 26
	actCopyTTLOut = 27
	actCopyTTLIn  = 28
	actMeter      = 29
	actPushPBB    = 30
	actPopPBB     = 31
	actSetPBBISID = 32
	actCT         = 33 // conntrack.go
	actCTExt      = 34
	actCTClear    = 35
	actRecirc     = 36
	actHash       = 37
	actSetEthBoth = 38 // a SetEthSrc and a SetEthDst next to each other: r[8:14] destination, r[14:20] source

	ethSrcFirst = 1 << 0 // actSetEthBoth's flags: the flow said the source first (decodeActions keeps its order)

	outPeer    = 1 << 0
	outIngress = 1 << 1
	outLast    = 1 << 2
	outTunnel  = 1 << 3 // OUT_TUNNEL: to a tunnel device, which the fast path may do itself (tunnel.go)

	tunTOSInherit = 1 << 0
)

type rawAction [actionSize]byte

// compileActions turns a flow's actions into the kernel encoding, resolving
// ports to devices. Rewrites after the last output have no effect on any
// copy of the packet and are left out (the last output is a redirect that
// happens when the program returns, so it must see the packet as it was).
// Callers hold d.mu.
func (d *Datapath) compileActions(acts []flow.Action) ([]rawAction, error) {
	// A recirculation is an output too (the next pass sees the packet as
	// the actions before it left it), and a commit keeps a connection:
	// neither may be cut off as a rewrite after the last output.
	last, recirc := -1, -1
	for i, a := range acts {
		switch a := a.(type) {
		case flow.Output, flow.Local:
			last = i
		case flow.Recirc:
			last, recirc = i, i
		case flow.CT:
			if a.Flags&flow.CTCommit != 0 {
				last = i
			}
		}
	}
	if recirc >= 0 && recirc != len(acts)-1 {
		return nil, fmt.Errorf("datapath: %v must be the last action", acts[recirc])
	}
	var out []rawAction
	for i, a := range acts {
		if i > last && last >= 0 {
			if _, ok := a.(flow.Userspace); !ok {
				continue
			}
		}
		var r rawAction
		switch a := a.(type) {
		case flow.CT:
			ext, err := encodeCT(a, &r)
			if err != nil {
				return nil, err
			}
			out = append(out, ext...)
		case flow.CTClear:
			r[0] = actCTClear
		case flow.Recirc:
			r[0] = actRecirc
			binary.NativeEndian.PutUint32(r[4:], a.ID)
		case flow.Hash:
			r[0] = actHash
			binary.NativeEndian.PutUint32(r[4:], a.Basis)
		case flow.Output:
			p, ok := d.ports[a.Port]
			if !ok {
				return nil, fmt.Errorf("datapath: output to %w %d", ErrUnknownPort, a.Port)
			}
			r[0] = actOutput
			switch p.Kind {
			case PortPod:
				r[1] |= outPeer
			case PortTunnel:
				r[1] |= outTunnel
			}
			binary.NativeEndian.PutUint32(r[4:], uint32(p.Ifindex))
		case flow.Local:
			r[0] = actLocal
		case flow.SetEthSrc:
			if len(a.MAC) != 6 {
				return nil, fmt.Errorf("datapath: bad MAC %v", a.MAC)
			}
			r[0] = actSetEthSrc
			copy(r[8:], a.MAC)
		case flow.SetEthDst:
			if len(a.MAC) != 6 {
				return nil, fmt.Errorf("datapath: bad MAC %v", a.MAC)
			}
			r[0] = actSetEthDst
			copy(r[8:], a.MAC)
		case flow.SetIPSrc:
			if err := putIP(&r, a.Addr, actSetIP4Src, actSetIP6Src); err != nil {
				return nil, err
			}
		case flow.SetIPDst:
			if err := putIP(&r, a.Addr, actSetIP4Dst, actSetIP6Dst); err != nil {
				return nil, err
			}
		case flow.SetTpSrc:
			r[0] = actSetTpSrc
			binary.BigEndian.PutUint16(r[2:], a.Port)
		case flow.SetTpDst:
			r[0] = actSetTpDst
			binary.BigEndian.PutUint16(r[2:], a.Port)
		case flow.SetDSCP:
			if a.DSCP > 63 {
				return nil, fmt.Errorf("datapath: DSCP %d out of range", a.DSCP)
			}
			r[0] = actSetTOS
			binary.NativeEndian.PutUint16(r[2:], uint16(a.DSCP)<<2)
			binary.NativeEndian.PutUint32(r[4:], 0xfc)
		case flow.SetECN:
			if a.ECN > 3 {
				return nil, fmt.Errorf("datapath: ECN %d out of range", a.ECN)
			}
			r[0] = actSetTOS
			binary.NativeEndian.PutUint16(r[2:], uint16(a.ECN))
			binary.NativeEndian.PutUint32(r[4:], 0x03)
		case flow.DecTTL:
			r[0] = actDecTTL
		case flow.SetTTL:
			r[0] = actSetTTL
			binary.NativeEndian.PutUint16(r[2:], uint16(a.TTL))
		case flow.SetNDTarget:
			if !a.Addr.Is6() {
				return nil, fmt.Errorf("datapath: bad ND target %v", a.Addr)
			}
			r[0] = actSetNDTgt
			v := a.Addr.As16()
			copy(r[8:], v[:])
		case flow.SetNDLL:
			if len(a.MAC) != 6 {
				return nil, fmt.Errorf("datapath: bad MAC %v", a.MAC)
			}
			r[0] = actSetNDLL
			copy(r[8:], a.MAC)
		case flow.PushMPLS:
			if a.EthType != 0x8847 && a.EthType != 0x8848 {
				return nil, fmt.Errorf("datapath: MPLS EtherType 0x%04x", a.EthType)
			}
			r[0] = actPushMPLS
			binary.BigEndian.PutUint16(r[2:], a.EthType)
			binary.BigEndian.PutUint32(r[4:], a.LSE)
		case flow.PopMPLS:
			r[0] = actPopMPLS
			binary.BigEndian.PutUint16(r[2:], a.EthType)
		case flow.SetMPLS:
			r[0] = actSetMPLS
			binary.BigEndian.PutUint32(r[4:], a.LSE&a.Mask)
			binary.BigEndian.PutUint32(r[8:], a.Mask)
		case flow.SetMPLSTTL:
			r[0] = actSetMPLSTTL
			binary.NativeEndian.PutUint16(r[2:], uint16(a.TTL))
		case flow.DecMPLSTTL:
			r[0] = actDecMPLSTTL
		case flow.CopyTTLOut:
			r[0] = actCopyTTLOut
		case flow.CopyTTLIn:
			r[0] = actCopyTTLIn
		case flow.Meter:
			r[0] = actMeter
			binary.NativeEndian.PutUint32(r[4:], a.ID)
		case flow.PushPBB:
			r[0] = actPushPBB
			binary.NativeEndian.PutUint32(r[4:], a.ISID&0xffffff)
		case flow.PopPBB:
			r[0] = actPopPBB
		case flow.SetPBBISID:
			r[0] = actSetPBBISID
			binary.NativeEndian.PutUint32(r[4:], a.ISID&0xffffff)
		case flow.PushVLAN:
			tpid := a.TPID
			if tpid == 0 {
				tpid = 0x8100
			}
			if tpid != 0x8100 && tpid != 0x88a8 {
				return nil, fmt.Errorf("datapath: VLAN TPID 0x%04x not supported", tpid)
			}
			r[0] = actPushVLAN
			binary.NativeEndian.PutUint16(r[2:], a.TCI&^flow.VLANCFI)
			// The helper takes the TPID as a __be16 in a register.
			binary.NativeEndian.PutUint32(r[4:], uint32(tpid>>8|tpid<<8&0xff00))
		case flow.PopVLAN:
			r[0] = actPopVLAN
		case flow.SetTunnel:
			if !a.Remote.Is4() || (a.Local.IsValid() && !a.Local.Is4()) {
				return nil, fmt.Errorf("datapath: tunnel endpoints must be IPv4 (remote %v local %v)", a.Remote, a.Local)
			}
			r[0] = actSetTunnel
			if a.InheritTOS {
				r[1] |= tunTOSInherit
			}
			binary.NativeEndian.PutUint32(r[4:], a.VNI)
			rem := a.Remote.As4()
			copy(r[8:], rem[:])
			if a.Local.IsValid() {
				loc := a.Local.As4()
				copy(r[12:], loc[:])
			}
			r[16], r[17] = a.TOS, a.TTL
		case flow.Userspace:
			r[0] = actUserspace
			binary.NativeEndian.PutUint64(r[8:], a.Cookie)
		case flow.Drop:
			r[0] = actDrop
			binary.NativeEndian.PutUint32(r[4:], a.Reason)
		default:
			return nil, fmt.Errorf("datapath: unsupported action %T", a)
		}
		out = append(out, r)
	}
	out = foldEthRewrites(out)
	// The last output becomes the program's redirect verdict, unless a
	// recirculation follows it (its next pass decides the verdict) or a
	// ct action does (the fast path runs those between two calls of its
	// action loop, which do not share a verdict): the outputs before
	// either are clones.
	for i := len(out) - 1; i >= 0 && recirc < 0; i-- {
		if out[i][0] == actCT {
			break
		}
		if out[i][0] == actOutput || out[i][0] == actLocal {
			out[i][1] |= outLast
			break
		}
	}
	if len(out) > MaxActions {
		var err error
		if out, err = d.compressOutputs(out); err != nil {
			return nil, err
		}
	}
	if len(out) > MaxActions {
		return nil, fmt.Errorf("datapath: %d actions: %w", len(out), ErrTooManyActs)
	}
	return out, nil
}

// foldEthRewrites puts a source and a destination MAC rewrite next to
// each other (a routed hop's pair) into one slot: the fast path writes
// both with one helper call (32 ns a packet less in BPF_PROG_RUN,
// BenchmarkCTRecirc/plain-flow-routed).
func foldEthRewrites(in []rawAction) []rawAction {
	out := in[:0]
	for i := 0; i < len(in); i++ {
		r := in[i]
		if i+1 < len(in) && ethPair(r[0], in[i+1][0]) {
			src, dst := r, in[i+1]
			var b rawAction
			b[0] = actSetEthBoth
			if r[0] == actSetEthSrc {
				b[1] = ethSrcFirst
			} else {
				src, dst = dst, src
			}
			copy(b[8:14], dst[8:14])
			copy(b[14:20], src[8:14])
			out = append(out, b)
			i++
			continue
		}
		out = append(out, r)
	}
	return out
}

// ethPair says whether a and b are a source and a destination MAC
// rewrite, in either order.
func ethPair(a, b byte) bool {
	return a == actSetEthSrc && b == actSetEthDst || a == actSetEthDst && b == actSetEthSrc
}

func putIP(r *rawAction, a netip.Addr, op4, op6 byte) error {
	switch {
	case a.Is4():
		r[0] = op4
		v := a.As4()
		copy(r[4:], v[:])
	case a.Is6():
		r[0] = op6
		v := a.As16()
		copy(r[8:], v[:])
	default:
		return fmt.Errorf("datapath: bad address %v", a)
	}
	return nil
}

// macAt is a copy of the MAC at offset off of r.
func macAt(r rawAction, off int) net.HardwareAddr {
	return net.HardwareAddr(append([]byte(nil), r[off:off+6]...))
}

// decodeActions is the inverse of compileActions (for dumps of flows a
// previous process installed). Callers hold d.mu.
func (d *Datapath) decodeActions(raw []rawAction) []flow.Action {
	out := make([]flow.Action, 0, len(raw))
	var ext []rawAction // ACT_CT_EXT slots of the next ACT_CT
	for _, r := range raw {
		switch r[0] {
		case actOutput:
			ifindex := int(binary.NativeEndian.Uint32(r[4:]))
			port := uint32(0)
			if p := d.portByIfindex(ifindex); p != nil {
				port = p.OFPort
			}
			out = append(out, flow.Output{Port: port})
		case actLocal:
			out = append(out, flow.Local{})
		case actSetEthSrc:
			out = append(out, flow.SetEthSrc{MAC: macAt(r, 8)})
		case actSetEthDst:
			out = append(out, flow.SetEthDst{MAC: macAt(r, 8)})
		case actSetEthBoth:
			dst := flow.SetEthDst{MAC: macAt(r, 8)}
			src := flow.SetEthSrc{MAC: macAt(r, 14)}
			if r[1]&ethSrcFirst != 0 {
				out = append(out, src, dst)
			} else {
				out = append(out, dst, src)
			}
		case actSetIP4Src:
			out = append(out, flow.SetIPSrc{Addr: netip.AddrFrom4([4]byte(r[4:8]))})
		case actSetIP4Dst:
			out = append(out, flow.SetIPDst{Addr: netip.AddrFrom4([4]byte(r[4:8]))})
		case actSetIP6Src:
			out = append(out, flow.SetIPSrc{Addr: netip.AddrFrom16([16]byte(r[8:24]))})
		case actSetIP6Dst:
			out = append(out, flow.SetIPDst{Addr: netip.AddrFrom16([16]byte(r[8:24]))})
		case actSetTpSrc:
			out = append(out, flow.SetTpSrc{Port: binary.BigEndian.Uint16(r[2:])})
		case actSetTpDst:
			out = append(out, flow.SetTpDst{Port: binary.BigEndian.Uint16(r[2:])})
		case actSetTOS:
			bits := binary.NativeEndian.Uint16(r[2:])
			if binary.NativeEndian.Uint32(r[4:]) == 0x03 {
				out = append(out, flow.SetECN{ECN: uint8(bits)})
			} else {
				out = append(out, flow.SetDSCP{DSCP: uint8(bits >> 2)})
			}
		case actDecTTL:
			out = append(out, flow.DecTTL{})
		case actSetTTL:
			out = append(out, flow.SetTTL{TTL: uint8(binary.NativeEndian.Uint16(r[2:]))})
		case actSetNDTgt:
			out = append(out, flow.SetNDTarget{Addr: netip.AddrFrom16([16]byte(r[8:24]))})
		case actSetNDLL:
			out = append(out, flow.SetNDLL{MAC: macAt(r, 8)})
		case actPushMPLS:
			out = append(out, flow.PushMPLS{EthType: binary.BigEndian.Uint16(r[2:]), LSE: binary.BigEndian.Uint32(r[4:])})
		case actPopMPLS:
			out = append(out, flow.PopMPLS{EthType: binary.BigEndian.Uint16(r[2:])})
		case actSetMPLS:
			out = append(out, flow.SetMPLS{LSE: binary.BigEndian.Uint32(r[4:]), Mask: binary.BigEndian.Uint32(r[8:])})
		case actSetMPLSTTL:
			out = append(out, flow.SetMPLSTTL{TTL: uint8(binary.NativeEndian.Uint16(r[2:]))})
		case actDecMPLSTTL:
			out = append(out, flow.DecMPLSTTL{})
		case actCopyTTLOut:
			out = append(out, flow.CopyTTLOut{})
		case actCopyTTLIn:
			out = append(out, flow.CopyTTLIn{})
		case actMeter:
			out = append(out, flow.Meter{ID: binary.NativeEndian.Uint32(r[4:])})
		case actPushPBB:
			out = append(out, flow.PushPBB{ISID: binary.NativeEndian.Uint32(r[4:])})
		case actPopPBB:
			out = append(out, flow.PopPBB{})
		case actSetPBBISID:
			out = append(out, flow.SetPBBISID{ISID: binary.NativeEndian.Uint32(r[4:])})
		case actPushVLAN:
			be := uint16(binary.NativeEndian.Uint32(r[4:]))
			out = append(out, flow.PushVLAN{TPID: be>>8 | be<<8, TCI: binary.NativeEndian.Uint16(r[2:])})
		case actPopVLAN:
			out = append(out, flow.PopVLAN{})
		case actSetTunnel:
			t := flow.SetTunnel{
				VNI:        binary.NativeEndian.Uint32(r[4:]),
				Remote:     netip.AddrFrom4([4]byte(r[8:12])),
				TOS:        r[16],
				TTL:        r[17],
				InheritTOS: r[1]&tunTOSInherit != 0,
			}
			if l := [4]byte(r[12:16]); l != [4]byte{} {
				t.Local = netip.AddrFrom4(l)
			}
			out = append(out, t)
		case actUserspace:
			out = append(out, flow.Userspace{Cookie: binary.NativeEndian.Uint64(r[8:])})
		case actDrop:
			out = append(out, flow.Drop{Reason: binary.NativeEndian.Uint32(r[4:])})
		case actOutputSet:
			out = append(out, d.expandOutputSet(binary.NativeEndian.Uint32(r[4:]))...)
		case actCTExt:
			ext = append(ext, r)
		case actCT:
			out = append(out, decodeCT(r, ext))
			ext = ext[:0]
		case actCTClear:
			out = append(out, flow.CTClear{})
		case actRecirc:
			out = append(out, flow.Recirc{ID: binary.NativeEndian.Uint32(r[4:])})
		case actHash:
			out = append(out, flow.Hash{Basis: binary.NativeEndian.Uint32(r[4:])})
		}
	}
	return out
}

// flow_entry.flags (bpf/lib/maps.h).
const flowOnload = 1 << 0

// encodeEntry builds a struct flow_entry.
func encodeEntry(gen uint32, acts []rawAction, onload bool) []byte {
	b := make([]byte, flowEntrySize)
	putEntry(b, gen, acts, onload)
	return b
}

// putEntry writes a struct flow_entry into b (flowEntrySize bytes, zero).
func putEntry(b []byte, gen uint32, acts []rawAction, onload bool) {
	binary.NativeEndian.PutUint32(b[0:], gen)
	binary.NativeEndian.PutUint16(b[4:], uint16(len(acts)))
	if onload {
		binary.NativeEndian.PutUint16(b[6:], flowOnload)
	}
	for i, a := range acts {
		copy(b[8+i*actionSize:], a[:])
	}
}

// decodeEntry splits a struct flow_entry.
func decodeEntry(b []byte) (gen uint32, acts []rawAction, onload bool) {
	gen = binary.NativeEndian.Uint32(b[0:])
	onload = binary.NativeEndian.Uint16(b[6:])&flowOnload != 0
	n := int(binary.NativeEndian.Uint16(b[4:]))
	if n > MaxActions {
		n = MaxActions
	}
	acts = make([]rawAction, n)
	for i := range acts {
		copy(acts[i][:], b[8+i*actionSize:])
	}
	return gen, acts, onload
}
