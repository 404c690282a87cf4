package flow

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ParsePacket builds the flow key of an Ethernet frame the way the fast
// path's parser does (bpf/lib/parse.h), minus the metadata (in_port,
// tunnel) that the caller fills. The datapath tests check that both agree
// on every packet they parse. Errors name the header that is cut off or
// malformed, as the fast path's drop reasons do.
func ParsePacket(pkt []byte) (Key, error) {
	var k Key
	if len(pkt) < 14 {
		return k, errors.New("short Ethernet header")
	}
	copy(k.EthDst[:], pkt[0:6])
	copy(k.EthSrc[:], pkt[6:12])
	typ := binary.BigEndian.Uint16(pkt[12:])
	off := 14
	if typ == 0x8100 || typ == 0x88a8 {
		if len(pkt) < off+4 {
			return k, errors.New("short VLAN tag")
		}
		k.VlanTCI = binary.BigEndian.Uint16(pkt[off:]) | VLANCFI
		typ = binary.BigEndian.Uint16(pkt[off+2:])
		off += 4
	}
	k.EthType = typ
	switch typ {
	case 0x0800:
		return k, parseIPv4(pkt, off, &k)
	case 0x86dd:
		return k, parseIPv6(pkt, off, &k)
	case 0x0806:
		return k, parseARP(pkt, off, &k)
	case 0x88e7:
		if len(pkt) < off+4 {
			return k, errors.New("short PBB I-TAG")
		}
		copy(k.IPSrc[:4], pkt[off:])
	case 0x8847, 0x8848:
		if len(pkt) < off+4 {
			return k, errors.New("short MPLS label stack entry")
		}
		k.SetMPLSLSE(binary.BigEndian.Uint32(pkt[off:]))
	}
	return k, nil
}

func parseIPv4(pkt []byte, off int, k *Key) error {
	if len(pkt) < off+20 {
		return errors.New("short IPv4 header")
	}
	ip := pkt[off:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[0]>>4 != 4 || ihl < 20 || int(binary.BigEndian.Uint16(ip[2:])) < ihl {
		return errors.New("bad IPv4 header")
	}
	if len(ip) < ihl {
		return errors.New("short IPv4 header")
	}
	copy(k.IPSrc[:4], ip[12:16])
	copy(k.IPDst[:4], ip[16:20])
	k.NwProto, k.NwTOS, k.NwTTL = ip[9], ip[1], ip[8]
	frag := binary.BigEndian.Uint16(ip[6:])
	if frag&0x3fff != 0 {
		k.NwFrag = FragAny
		if frag&0x1fff != 0 {
			k.NwFrag |= FragLater
			return nil
		}
	}
	return parseL4(pkt, off+ihl, k.NwProto, k)
}

func parseIPv6(pkt []byte, off int, k *Key) error {
	if len(pkt) < off+40 {
		return errors.New("short IPv6 header")
	}
	ip := pkt[off:]
	if ip[0]>>4 != 6 {
		return errors.New("bad IPv6 header")
	}
	copy(k.IPSrc[:], ip[8:24])
	copy(k.IPDst[:], ip[24:40])
	k.NwTOS = ip[0]<<4 | ip[1]>>4
	k.IPv6Label = binary.BigEndian.Uint32(ip) & 0xfffff
	k.NwTTL = ip[7]
	next := ip[6]
	off += 40
	for i := 0; ; i++ {
		switch next {
		case 0, 43, 60, 51, 44: // hop-by-hop, routing, dest opts, AH, fragment
		default:
			k.NwProto = next
			if off > maxParseOffset {
				return errors.New("IPv6 extension header chain too long")
			}
			return parseL4(pkt, off, next, k)
		}
		if i == 4 || off > maxParseOffset {
			return errors.New("IPv6 extension header chain too long")
		}
		if len(pkt) < off+2 {
			return errors.New("short IPv6 extension header")
		}
		h := pkt[off:]
		switch next {
		case 44:
			if len(h) < 8 {
				return errors.New("short IPv6 extension header")
			}
			next = h[0]
			off += 8
			k.NwFrag = FragAny
			if binary.BigEndian.Uint16(h[2:])&0xfff8 != 0 {
				k.NwFrag |= FragLater
				k.NwProto = next
				return nil
			}
		case 51:
			next, off = h[0], off+(int(h[1])+2)*4
		default:
			next, off = h[0], off+(int(h[1])+1)*8
		}
	}
}

// maxParseOffset is the deepest header offset the fast path's parser
// follows (it bounds offsets for the verifier).
const maxParseOffset = 0x3ff

func parseARP(pkt []byte, off int, k *Key) error {
	if len(pkt) < off+28 {
		return errors.New("short ARP")
	}
	a := pkt[off:]
	if binary.BigEndian.Uint16(a) != 1 || binary.BigEndian.Uint16(a[2:]) != 0x0800 || a[4] != 6 || a[5] != 4 {
		return nil
	}
	if op := binary.BigEndian.Uint16(a[6:]); op <= 0xff {
		k.NwProto = uint8(op)
	}
	copy(k.ArpSHA[:], a[8:14])
	copy(k.IPSrc[:4], a[14:18])
	copy(k.ArpTHA[:], a[18:24])
	copy(k.IPDst[:4], a[24:28])
	return nil
}

func parseL4(pkt []byte, off int, proto uint8, k *Key) error {
	need := map[uint8]int{6: 20, 17: 8, 132: 8, 1: 4, 58: 4}[proto]
	if need == 0 {
		return nil
	}
	if len(pkt) < off+need {
		return fmt.Errorf("short L4 header (protocol %d)", proto)
	}
	l4 := pkt[off:]
	switch proto {
	case 1, 58:
		k.TpSrc, k.TpDst = uint16(l4[0]), uint16(l4[1])
		if proto == 58 && l4[1] == 0 && (l4[0] == 135 || l4[0] == 136) {
			parseND(l4, k)
		}
	default:
		k.TpSrc, k.TpDst = binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
		if proto == 6 {
			k.TCPFlags = binary.BigEndian.Uint16(l4[12:]) & 0x0fff
		}
	}
	return nil
}

// ndMaxOpts is how many ND options the fast path looks at.
const ndMaxOpts = 4

// parseND keys an IPv6 neighbour solicitation (type 135) or advertisement
// (136) in m (from the ICMPv6 header on): the target address, and the
// source (NS) or target (NA) link-layer address option. A message too
// short for a target is plain ICMPv6; malformed options leave the ND
// fields zero (Open vSwitch's behaviour; the packet is not dropped).
func parseND(m []byte, k *Key) {
	if len(m) < 24 {
		return
	}
	want, lla := byte(1), &k.ArpSHA
	if m[0] == 136 {
		want, lla = 2, &k.ArpTHA
	}
	copy(k.NDTarget[:], m[8:24])
	seen := false
	for i, o := 0, 24; i < ndMaxOpts && len(m) >= o+2; i++ {
		n := int(m[o+1]) * 8
		if n == 0 || len(m) < o+n {
			*lla, k.NDTarget = [6]byte{}, [16]byte{}
			return
		}
		if m[o] == want && n == 8 {
			if seen {
				*lla, k.NDTarget = [6]byte{}, [16]byte{}
				return
			}
			copy(lla[:], m[o+2:o+8])
			seen = true
		}
		o += n
	}
}
