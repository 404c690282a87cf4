package datapath

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/nagare-net/nagare/pkg/flow"
)

// GSO packets sent whole. A packet socket with PACKET_VNET_HDR takes a
// struct virtio_net_hdr before each frame, as a tap device does from
// QEMU: with it a GSO packet goes to the kernel whole, with its gso_size
// and CHECKSUM_PARTIAL, and the output veth carries it to the pod as the
// one skb it was (the pod's TCP takes it as GRO would have made it; a
// device that cannot take it whole has the kernel cut it). The Onloader
// sends GSO packets this way instead of cutting them (Segment) and
// summing every byte in userspace.
//
// Only a packet whose L4 checksum field holds its pseudo-header sum (a
// CHECKSUM_PARTIAL packet: what a pod with TSO sends, and what GRO makes
// of what it merged) is sent with "needs checksum": the kernel then sums
// the payload. A GSO packet with anything else in the field was never
// checksummed partially; it is cut by Segment instead, as before.

// vnetHdrLen is sizeof(struct virtio_net_hdr) (no num_buffers: the packet
// socket's PACKET_VNET_HDR header).
const vnetHdrLen = 10

// struct virtio_net_hdr fields (include/uapi/linux/virtio_net.h).
const (
	vnetFlagNeedsCsum = 1    // VIRTIO_NET_HDR_F_NEEDS_CSUM
	vnetGSOTCPv4      = 1    // VIRTIO_NET_HDR_GSO_TCPV4
	vnetGSOTCPv6      = 4    // VIRTIO_NET_HDR_GSO_TCPV6
	vnetGSOUDPL4      = 5    // VIRTIO_NET_HDR_GSO_UDP_L4
	vnetGSOECN        = 0x80 // VIRTIO_NET_HDR_GSO_ECN
)

// vnetHdr is a struct virtio_net_hdr; the packet socket reads its 16-bit
// fields in the host's byte order (legacy virtio, little-endian hosts).
type vnetHdr [vnetHdrLen]byte

// vnetGSOHeader returns the header that hands the GSO packet pkt (segment
// size gsoSize) whole to the kernel, or ok false when it must be cut in
// userspace: not TCP or UDP over IPv4 or IPv6 without a VLAN tag, a frame
// longer than its IP packet, or an L4 checksum field that does not hold
// the pseudo-header sum of the whole packet.
func vnetGSOHeader(pkt []byte, gsoSize int) (h vnetHdr, ok bool) {
	if gsoSize <= 0 || gsoSize > 0xffff {
		return h, false
	}
	g, err := parseGSO(pkt)
	// A VLAN tag: the kernel reads the GSO type's protocol at the frame's
	// ethertype; such packets are rare on the onload path, cut them.
	if err != nil || g.l3 != 14 || g.end != len(pkt) || g.hdr >= g.end {
		return h, false
	}
	field := g.l4 + g.csumField()
	if binary.BigEndian.Uint16(pkt[field:]) != fold(g.pseudoSum(pkt, g.end-g.l4)) {
		return h, false
	}
	var typ byte
	switch {
	case g.proto == 17:
		typ = vnetGSOUDPL4
	case g.typ == 0x0800:
		typ = vnetGSOTCPv4
	default:
		typ = vnetGSOTCPv6
	}
	if g.proto == 6 && pkt[g.l4+13]&0x80 != 0 { // CWR: the kernel sets SKB_GSO_TCP_ECN
		typ |= vnetGSOECN
	}
	h[0], h[1] = vnetFlagNeedsCsum, typ
	binary.NativeEndian.PutUint16(h[2:], uint16(g.hdr))
	binary.NativeEndian.PutUint16(h[4:], uint16(gsoSize))
	binary.NativeEndian.PutUint16(h[6:], uint16(g.l4))
	binary.NativeEndian.PutUint16(h[8:], uint16(g.csumField()))
	return h, true
}

// enableVnetHdr makes every frame b sends start with a struct
// virtio_net_hdr (all zero for a plain frame), so that AddGSO can hand
// GSO packets whole to the kernel. Call it before anything is queued.
func (b *ExecBatch) enableVnetHdr() error {
	if b.fd < 0 {
		return fmt.Errorf("datapath: no packet socket")
	}
	if err := unix.SetsockoptInt(b.fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
		return fmt.Errorf("datapath: PACKET_VNET_HDR: %w", err)
	}
	b.hdrs = make([]vnetHdr, execBatchMax)
	b.iovs = make([]unix.Iovec, 2*execBatchMax)
	for i := range b.msgs {
		b.iovs[2*i].Base = &b.hdrs[i][0]
		b.iovs[2*i].SetLen(vnetHdrLen)
		b.msgs[i].Hdr.Iov = &b.iovs[2*i]
		b.msgs[i].Hdr.SetIovlen(2)
	}
	return nil
}

// AddGSO queues the GSO packet pkt (segment size gsoSize) to be sent whole
// to the devices its actions output to, and reports whether it did: only
// with vnet headers on, actions that are nothing but outputs to device
// ports, and a packet vnetGSOHeader takes. Otherwise the caller cuts it.
func (b *ExecBatch) AddGSO(pkt []byte, gsoSize int, inPort uint32, actions []flow.Action) bool {
	if b.hdrs == nil {
		return false
	}
	h, ok := vnetGSOHeader(pkt, gsoSize)
	if !ok {
		return false
	}
	var devs [MaxActions]int
	n, ok := b.d.outputDevices(actions, devs[:])
	if !ok {
		return false
	}
	b.queue(pkt, inPort, actions, devs[:n], h, gsoSize)
	return true
}

// sendSegmented sends the GSO packet q, which the kernel refused whole,
// as Segment cuts it: one sendmsg per segment (rare: a kernel without the
// GSO type).
func (b *ExecBatch) sendSegmented(q queued, to *unix.RawSockaddrLinklayer) error {
	segs, err := Segment(q.pkt, q.gso)
	if err != nil {
		return err
	}
	b.GSORefused++
	var zero vnetHdr
	sa := &unix.SockaddrLinklayer{Protocol: to.Protocol, Ifindex: int(to.Ifindex)}
	for _, seg := range segs {
		if _, err := unix.SendmsgBuffers(b.fd, [][]byte{zero[:], seg}, nil, sa, 0); err != nil {
			return err
		}
	}
	return nil
}
