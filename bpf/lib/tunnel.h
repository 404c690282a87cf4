/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* tunnel.h — VXLAN in the fast path.
 *
 * An output to an external-mode VXLAN device hands the packet to the
 * kernel's tunnel: the device's transmit encapsulates it and sends it
 * through the node's IP stack (routing, the netfilter hooks of OUTPUT and
 * POSTROUTING), and the receiving node takes it through its stack
 * (PREROUTING, INPUT, the UDP socket lookup) into the driver, which queues
 * it once more on the device's GRO cell before the switch sees it on the
 * tunnel port. For a tunnel with an entry in native_tunnels the fast path
 * does both ends itself, with the same wire format and the same metadata:
 *
 *   tunnel_xmit  an output to the tunnel device: the outer headers the
 *                driver would write (the tunnel key of the set_tunnel
 *                before it, the inner ECN copied out, DF, a source port
 *                from the flow hash, UDP checksum zero) put in front with
 *                bpf_skb_adjust_room, which keeps GSO packets GSO
 *                (UDP_TUNNEL); out of the underlay by bpf_redirect_neigh.
 *   tunnel_recv  the underlay's ingress hook: a VXLAN packet for this
 *                node's address and port is decapsulated in place and
 *                enters the switch on the tunnel device's port with the
 *                tunnel fields the driver would have given it.
 *
 * What either leaves alone goes the kernel's way, which stays in place:
 * packets that are not IP (ARP), carry a VLAN tag in their metadata, or
 * do not fit the underlay or the path (a PMTU exception: the driver
 * answers the pod's PMTU, docs/agent.md#mtu); and on receipt GSO packets
 * whose flow does more than deliver into pods (tunnel_recv says why) and
 * anything unusual (IP options, fragments, a
 * UDP checksum nobody has verified, VXLAN flags beyond the VNI's, an
 * outer CE mark to fold into the inner header). Both ends interoperate
 * with the driver: one node may use either path.
 */
#ifndef NAGARE_TUNNEL_H
#define NAGARE_TUNNEL_H

#include "maps.h"

#define VXLAN_HLEN 8
#define TUNNEL_OVERHEAD 50 /* outer IPv4 20 + UDP 8 + VXLAN 8 + inner Ethernet 14 */
#define VXLAN_FLAGS_VNI bpf_htonl(0x08000000) /* the I flag: a valid VNI, nothing else */

#ifndef BPF_F_ADJ_ROOM_DECAP_L3_IPV4
#define BPF_F_ADJ_ROOM_DECAP_L3_IPV4 (1ULL << 7)
#define BPF_F_ADJ_ROOM_DECAP_L3_IPV6 (1ULL << 8)
#endif

/* The driver's source port range when it is configured with none: the
 * local port range's defaults (udp_flow_src_port). */
#define TUNNEL_SPORT_MIN 32768
#define TUNNEL_SPORT_MAX 60999

/* What sits in front of the inner packet's network header. */
struct vxlan_frame {
	struct ethhdr eth;
	struct iphdr ip;
	struct udphdr udp;
	__be32 vx_flags;
	__be32 vx_vni;
	struct ethhdr inner;
} __attribute__((packed));

_Static_assert(sizeof(struct vxlan_frame) == ETH_HLEN + TUNNEL_OVERHEAD, "vxlan_frame");

/* The outer headers of the GSO packet this CPU has just decapsulated
 * (tunnel_recv), for tunnel_undo. */
struct tunnel_saved_hdrs {
	__u8 b[sizeof(struct vxlan_frame)];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tunnel_saved_hdrs);
} tunnel_saved SEC(".maps");

/* ip_fold is the ones' complement sum of f's outer IPv4 header (no
 * options), folded: 0 for a header with a correct checksum, the checksum
 * to write for one whose check field is zero. */
static __always_inline __u16 ip_fold(const struct vxlan_frame *f)
{
	const __u16 *w = (const __u16 *)((const __u8 *)f + ETH_HLEN);
	__u32 s = 0;

#pragma unroll
	for (int i = 0; i < 10; i++)
		s += w[i];
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/* ecn_encap is the outer ToS for inner ToS inner (RFC 6040's normal
 * mode, as INET_ECN_encapsulate): the inner ECN field copied out, CE as
 * ECT(0). */
static __always_inline __u8 ecn_encap(__u8 outer, __u8 inner)
{
	outer &= ~3;
	return (inner & 3) == 3 ? outer | 2 : outer | (inner & 3);
}

/* tunnel_xmit sends the packet into the tunnel of device dev, whose
 * tunnel key the flow's set_tunnel has just set. Returns TC_ACT_REDIRECT
 * (sent on the underlay), 1 (left to the device: see the top of this
 * file) or a negative drop reason (the packet was changed and cannot go
 * either way).
 *
 * bpf_redirect_neigh routes the outer packet out of the underlay and
 * writes its Ethernet header from the neighbour table, resolving (and
 * queueing behind) an unknown next hop as the driver's transmit would;
 * unlike bpf_fib_lookup it does not need the node to forward. */
__noinline int tunnel_xmit(struct __sk_buff *skb, __u32 dev)
{
	/* The tunnel key is read before the FIB is asked: one stack slot for
	 * both keeps this frame, run_actions' and the entry program's within
	 * the verifier's 512 bytes. */
	union {
		struct bpf_tunnel_key tk;
		struct bpf_fib_lookup fib;
	} u = {};
	struct vxlan_frame h = {};
	struct native_tunnel *nt;
	__u32 mtu = 0, len, hash, underlay, vni;
	__u8 inner_tos, tos, ttl, b[2];
	__be16 proto;
	long rc;

	if (!skb)
		return 1;
	nt = bpf_map_lookup_elem(&native_tunnels, &dev);
	if (!nt || nt->tunnel != dev)
		return 1;
	underlay = nt->underlay;
	proto = skb->protocol;
	if ((proto != bpf_htons(ETH_P_IP) && proto != bpf_htons(ETH_P_IPV6)) || skb->vlan_present)
		return 1;
	if (bpf_skb_get_tunnel_key(skb, &u.tk, sizeof(u.tk), 0) < 0)
		return 1;
	/* The helper reads a key the way a receiver sees one: on a key set
	 * for transmit, "remote" is this end and "local" the far one. */
	h.ip.saddr = u.tk.remote_ipv4 ? bpf_htonl(u.tk.remote_ipv4) : nt->local;
	h.ip.daddr = bpf_htonl(u.tk.local_ipv4);
	vni = u.tk.tunnel_id;
	tos = u.tk.tunnel_tos;
	ttl = u.tk.tunnel_ttl ? u.tk.tunnel_ttl : 64;
	if (!h.ip.saddr || !h.ip.daddr)
		return 1;
	/* The underlay's MTU. A GSO packet's segments are checked without
	 * the overhead (the helper applies len_diff to skb->len only); the
	 * pods' MTU leaves room for it (docs/agent.md#mtu). */
	if (bpf_check_mtu(skb, underlay, &mtu, TUNNEL_OVERHEAD, 0) != BPF_MTU_CHK_RET_SUCCESS)
		return 1;
	/* The path's MTU: asked about a 64 KiB packet, the FIB answers
	 * FRAG_NEEDED with the route's MTU, a PMTU exception included (an
	 * ICMP frag-needed a router on the underlay sent). Below the
	 * underlay's, the driver takes the endpoint's packets: it answers the
	 * pod with the ICMP that lowers its path MTU (docs/agent.md#mtu).
	 * A node that does not forward (FWD_DISABLED: an agent's node always
	 * does) is not told; its tunnel keeps to the underlay's MTU. */
	__builtin_memset(&u, 0, sizeof(u));
	u.fib.family = AF_INET;
	u.fib.ifindex = underlay;
	u.fib.ipv4_src = h.ip.saddr;
	u.fib.ipv4_dst = h.ip.daddr;
	u.fib.tot_len = 0xffff;
	rc = bpf_fib_lookup(skb, &u.fib, sizeof(u.fib), BPF_FIB_LOOKUP_OUTPUT);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		if (u.fib.mtu_result < mtu)
			return 1;
	} else if (rc != BPF_FIB_LKUP_RET_FWD_DISABLED) {
		return 1; /* no route, or a 64 KiB path: the driver's */
	}
	len = skb->len;
	if (len < ETH_HLEN || len - ETH_HLEN + TUNNEL_OVERHEAD > 0xffff)
		return 1;
	if (bpf_skb_load_bytes(skb, 0, &h.inner, ETH_HLEN) < 0 ||
	    bpf_skb_load_bytes(skb, ETH_HLEN, b, 2) < 0)
		return 1;
	inner_tos = proto == bpf_htons(ETH_P_IP) ? b[1] : (b[0] << 4) | (b[1] >> 4);
	hash = bpf_get_hash_recalc(skb);

	h.ip.version = 4;
	h.ip.ihl = 5;
	h.ip.tos = ecn_encap(tos, inner_tos);
	h.ip.tot_len = bpf_htons(len - ETH_HLEN + TUNNEL_OVERHEAD);
	h.ip.frag_off = bpf_htons(0x4000); /* DF, as set_tunnel asks of the driver */
	h.ip.ttl = ttl;
	h.ip.protocol = IPPROTO_UDP;
	h.ip.check = ip_fold(&h);
	h.udp.source = bpf_htons((__u16)((((__u64)hash * (TUNNEL_SPORT_MAX - TUNNEL_SPORT_MIN)) >> 32) + TUNNEL_SPORT_MIN));
	h.udp.dest = nt->port;
	h.udp.len = bpf_htons(len + sizeof(struct udphdr) + VXLAN_HLEN);
	h.vx_flags = VXLAN_FLAGS_VNI;
	h.vx_vni = bpf_htonl(vni << 8);

	/* FIXED_GSO: the pods' MTU already leaves room for the outer headers
	 * (docs/agent.md#mtu), so a GSO packet's segments stay as big. */
	if (bpf_skb_adjust_room(skb, TUNNEL_OVERHEAD, BPF_ADJ_ROOM_MAC,
				BPF_F_ADJ_ROOM_FIXED_GSO | BPF_F_ADJ_ROOM_ENCAP_L3_IPV4 |
				BPF_F_ADJ_ROOM_ENCAP_L4_UDP | BPF_F_ADJ_ROOM_ENCAP_L2_ETH |
				BPF_F_ADJ_ROOM_ENCAP_L2(ETH_HLEN)) < 0)
		return 1;
	/* The outer Ethernet header is redirect_neigh's to write. */
	if (bpf_skb_store_bytes(skb, ETH_HLEN, (__u8 *)&h + ETH_HLEN, TUNNEL_OVERHEAD, 0) < 0)
		return -DROP_TUNNEL_SET;
	count(CTR_TUNNEL_ENCAP);
	return bpf_redirect_neigh(underlay, NULL, 0, 0);
}

/* tunnel_recv decapsulates a VXLAN packet for this node (outer
 * destination local, UDP port port) arriving on the underlay and fills
 * the key's tunnel fields as the driver's metadata would. Returns 0
 * (decapsulated), 2 (decapsulated, GSO: see below), 1 (not one to take:
 * the stack gets it as it is) or a negative drop reason. */
__noinline int tunnel_recv(struct __sk_buff *skb, struct flow_key *key, __u32 local, __u32 port)
{
	struct vxlan_frame h;
	__u64 flags;
	int gso = 0;

	if (!skb || !key)
		return 1;
	if (skb->protocol != bpf_htons(ETH_P_IP) || skb->pkt_type != 0 /* PACKET_HOST */ || skb->vlan_present)
		return 1;

	if (bpf_skb_load_bytes(skb, 0, &h, sizeof(h)) < 0)
		return 1;
	if (h.ip.version != 4 || h.ip.ihl != 5 || h.ip.protocol != IPPROTO_UDP ||
	    h.udp.dest != (__be16)port || (local && h.ip.daddr != local))
		return 1;
	if ((h.ip.frag_off & bpf_htons(0x3fff)) || (h.ip.tos & 3) == 3 ||
	    h.vx_flags != VXLAN_FLAGS_VNI || (h.vx_vni & bpf_htonl(0xff)))
		return 1;
	/* A UDP checksum is taken only when the NIC has verified it (the
	 * driver's default sends one; tunnel_xmit does not). */
	if (h.udp.check && bpf_csum_level(skb, BPF_CSUM_LEVEL_QUERY) < 0)
		return 1;
	if (bpf_ntohs(h.ip.tot_len) != skb->len - ETH_HLEN || ip_fold(&h) != 0)
		return 1;
	if (h.inner.h_proto == bpf_htons(ETH_P_IP))
		flags = BPF_F_ADJ_ROOM_DECAP_L3_IPV4;
	else if (h.inner.h_proto == bpf_htons(ETH_P_IPV6))
		flags = BPF_F_ADJ_ROOM_DECAP_L3_IPV6;
	else
		return 1; /* ARP and the rest: skb->protocol must change, which adjust_room cannot do */
	/* A GSO packet (a sender's TSO segment, or GRO's work on a NIC)
	 * keeps SKB_GSO_UDP_TUNNEL and skb->encapsulation through
	 * adjust_room's decapsulation (this kernel has no flag that clears
	 * them; the driver's iptunnel_pull_offloads does). A pod's TCP does
	 * not mind; a NIC that segments tunnels in hardware would take the
	 * TCP header for the outer UDP one if the node forwarded the packet
	 * on (a NodePort's reply). So its outer headers are kept, and a
	 * flow that does anything but deliver into pods gets the packet back
	 * as it came (tunnel_undo), for the driver. Inner IPv4 only: undoing
	 * cannot set skb->protocol back from IPv6. */
	if (skb->gso_size) {
		__u32 zero = 0;
		struct tunnel_saved_hdrs *saved;

		if (flags != BPF_F_ADJ_ROOM_DECAP_L3_IPV4)
			return 1;
		saved = bpf_map_lookup_elem(&tunnel_saved, &zero);
		if (!saved)
			return 1;
		__builtin_memcpy(saved, &h, sizeof(h));
		gso = 2;
	}

	key->tun_id = bpf_ntohl(h.vx_vni) >> 8;
	key->tun_src = h.ip.saddr;
	key->tun_dst = h.ip.daddr;
	key->tun_tos = h.ip.tos;
	key->tun_ttl = h.ip.ttl;
	key->tun_flags = TUN_PRESENT;
	/* The inner Ethernet header over the outer one, then the outer IP,
	 * UDP and VXLAN headers and the inner header's old place cut out. */
	if (bpf_skb_store_bytes(skb, 0, &h.inner, ETH_HLEN, 0) < 0 ||
	    bpf_skb_adjust_room(skb, -TUNNEL_OVERHEAD, BPF_ADJ_ROOM_MAC, flags | BPF_F_ADJ_ROOM_FIXED_GSO) < 0)
		return -DROP_TUNNEL_KEY;
	count(CTR_TUNNEL_DECAP);
	return gso;
}

/* gso_safe: does flow fe only deliver into pods (redirect_peer, which
 * hands the packet to the pod's stack as it is)? Then a GSO packet
 * tunnel_recv decapsulated may follow it. */
__noinline int gso_safe(const struct flow_entry *fe)
{
	int peer = 0;
	__u32 i;

	if (!fe)
		return 0;
	for (i = 0; i < MAX_ACTIONS; i++) {
		const struct action *a = &fe->actions[i];

		if (i >= fe->n_actions)
			break;
		switch (a->type) {
		case ACT_OUTPUT:
			if (!(a->flags & OUT_PEER))
				return 0;
			peer = 1;
			break;
		case ACT_OUTPUT_SET:
		case ACT_LOCAL:
		case ACT_RECIRC:
		case ACT_USERSPACE:
			return 0;
		}
	}
	return peer;
}

/* tunnel_undo puts back the outer headers tunnel_recv took off a GSO
 * packet and lets it go up the stack to the VXLAN driver, which will
 * hand it to the switch again on the tunnel device. */
__noinline int tunnel_undo(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct tunnel_saved_hdrs *saved = bpf_map_lookup_elem(&tunnel_saved, &zero);

	if (!skb || !saved)
		return -DROP_TUNNEL_KEY;
	if (bpf_skb_adjust_room(skb, TUNNEL_OVERHEAD, BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_FIXED_GSO) < 0 ||
	    bpf_skb_store_bytes(skb, 0, saved, sizeof(*saved), 0) < 0)
		return -DROP_TUNNEL_KEY;
	count(CTR_TUNNEL_UNDO);
	return 0;
}

#endif
