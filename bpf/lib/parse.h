/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* parse.h — packet → struct flow_key, plus the offsets the actions need.
 *
 * Parsed: Ethernet, one 802.1Q/802.1ad tag (in the packet or, as the kernel
 * usually delivers it, already stripped into skb->vlan_tci), the top MPLS
 * label stack entry, ARP for
 * Ethernet/IPv4, IPv4 (options skipped, fragments flagged), IPv6 with up to
 * IPV6_MAX_EXT extension headers (hop-by-hop, routing, fragment,
 * destination options, AH), TCP, UDP, SCTP, ICMP, ICMPv6.
 *
 * A header that is cut off or self-contradictory drops the packet with a
 * typed reason (drop_reasons.h). An unknown EtherType or IP protocol is not
 * an error: the key just stops at what was understood.
 */
#ifndef NAGARE_PARSE_H
#define NAGARE_PARSE_H

#include "common.h"
#include "flow_key.h"
#include "drop_reasons.h"

#define IPV6_MAX_EXT 4

enum l3_kind { L3_NONE = 0, L3_IPV4 = 1, L3_IPV6 = 2, L3_ARP = 3, L3_MPLS = 4 };

#define ETH_P_MPLS_UC_BE bpf_htons(0x8847)
#define ETH_P_MPLS_MC_BE bpf_htons(0x8848)

struct parse_state {
	__u16 l3_off;    /* offset of the IP/ARP header */
	__u16 l4_off;    /* offset of the L4 header, 0 when absent */
	__u8 l3;         /* enum l3_kind */
	__u8 vlan_in_data; /* the tag sits in the packet, not in skb metadata */
	__u16 nd_lla_off;  /* offset of an ND link-layer address option, 0 when absent */
	/* Not the parser's: run_actions' verdict so far (actions.h). */
	__s32 verdict;
	__u32 have_output;
	/* Not the parser's: an action changed the packet or the key words a
	 * recirculation parses again (recirc.h); 0 lets the next pass keep
	 * this key and state. */
	__u32 dirty;
};

struct arp_eth_ipv4 {
	__be16 htype, ptype;
	__u8 hlen, plen;
	__be16 op;
	__u8 sha[6];
	__be32 spa;
	__u8 tha[6];
	__be32 tpa;
} __attribute__((packed));

struct ipv6_opt_hdr_min {
	__u8 nexthdr;
	__u8 hdrlen;
} __attribute__((packed));

struct ipv6_frag_hdr {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off; /* offset << 3 | M */
	__be32 id;
};

/* Headers the parser reads sit in the first PARSE_PULL bytes: if the skb's
 * linear area is shorter (GSO packets, some tunnels), pull them in first so
 * direct packet access sees them. */
#define PARSE_PULL 192

static __always_inline void copy_mac(__u8 *dst, const __u8 *src)
{
	__builtin_memcpy(dst, src, 6);
}

#define ND_NEIGHBOR_SOLICIT 135
#define ND_NEIGHBOR_ADVERT 136
#define ND_OPT_SOURCE_LL 1
#define ND_OPT_TARGET_LL 2
#define ND_MAX_OPTS 4

/* parse_nd reads an IPv6 neighbour solicitation or advertisement at off:
 * the target address, and the link-layer address option that goes with
 * the message (source for NS, target for NA), as Open vSwitch keys them.
 * A message too short to hold a target is keyed as plain ICMPv6.
 * Options past the first ND_MAX_OPTS are not looked at. Malformed options
 * (length 0, past the end) leave the ND fields zero, as in Open vSwitch:
 * the packet is still ICMPv6 and is forwarded by its other fields. */
static __always_inline int parse_nd(void *data, void *data_end, __u32 off, __u8 type,
				    struct flow_key *key, struct parse_state *ps)
{
	__u8 want = type == ND_NEIGHBOR_SOLICIT ? ND_OPT_SOURCE_LL : ND_OPT_TARGET_LL;
	__u8 *lla = type == ND_NEIGHBOR_SOLICIT ? key->arp_sha : key->arp_tha;
	__u32 o = off + 24;
	int i;

	off &= 0x3ff;
	if (data + off + 24 > data_end)
		return 0; /* too short for ND: plain ICMPv6, as in Open vSwitch */
	__builtin_memcpy(key->nd_target, data + off + 8, 16);

	for (i = 0; i < ND_MAX_OPTS; i++) {
		__u8 *opt;

		if (o > 0x7ff)
			break;
		opt = data + (o & 0x7ff);
		if ((void *)(opt + 2) > data_end)
			break;
		if (opt[1] == 0 || (void *)(opt + opt[1] * 8) > data_end)
			goto invalid;
		if (opt[0] == want && opt[1] == 1) {
			if ((void *)(opt + 8) > data_end)
				goto invalid; /* for the verifier: checked above */
			if (ps->nd_lla_off)
				goto invalid; /* twice */
			copy_mac(lla, opt + 2);
			ps->nd_lla_off = o;
		}
		o += opt[1] * 8;
	}
	return 0;
invalid:
	__builtin_memset(key->nd_target, 0, 16);
	__builtin_memset(lla, 0, 6);
	ps->nd_lla_off = 0;
	return 0;
}

static __always_inline int parse_l4(void *data, void *data_end, __u32 off, __u8 proto,
				    struct flow_key *key, struct parse_state *ps)
{
	void *l4 = data + (off & 0x3ff);

	switch (proto) {
	case IPPROTO_TCP: {
		struct tcphdr *th = l4;
		if ((void *)(th + 1) > data_end)
			return -DROP_SHORT_L4;
		key->tp_src = th->source;
		key->tp_dst = th->dest;
		/* flags live in the low 12 bits of the 16-bit word at offset 12 */
		key->tcp_flags = *(__be16 *)((void *)th + 12) & bpf_htons(0x0fff);
		break;
	}
	case IPPROTO_UDP:
	case IPPROTO_SCTP: { /* both start with 16-bit source and destination ports */
		struct udphdr *uh = l4;
		if ((void *)(uh + 1) > data_end)
			return -DROP_SHORT_L4;
		key->tp_src = uh->source;
		key->tp_dst = uh->dest;
		break;
	}
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6: {
		__u8 *ic = l4;
		if ((void *)(ic + 4) > data_end)
			return -DROP_SHORT_L4;
		key->tp_src = bpf_htons(ic[0]);
		key->tp_dst = bpf_htons(ic[1]);
		if (proto == IPPROTO_ICMPV6 && ic[1] == 0 &&
		    (ic[0] == ND_NEIGHBOR_SOLICIT || ic[0] == ND_NEIGHBOR_ADVERT)) {
			int err = parse_nd(data, data_end, off, ic[0], key, ps);
			if (err < 0)
				return err;
		}
		break;
	}
	default:
		return 0;
	}
	ps->l4_off = off;
	return 0;
}

static __always_inline int parse_ipv4(void *data, void *data_end, __u32 off,
				      struct flow_key *key, struct parse_state *ps)
{
	struct iphdr *ip = data + off;
	__u32 ihl;
	__u16 frag;

	if ((void *)(ip + 1) > data_end)
		return -DROP_SHORT_IP;
	if (ip->version != 4 || ip->ihl < 5)
		return -DROP_BAD_IP_HDR;
	ihl = ip->ihl * 4;
	if (bpf_ntohs(ip->tot_len) < ihl)
		return -DROP_BAD_IP_HDR;
	if (data + off + ihl > data_end)
		return -DROP_SHORT_IP;

	ps->l3 = L3_IPV4;
	ps->l3_off = off;
	key->ip_src[0] = ip->saddr;
	key->ip_dst[0] = ip->daddr;
	key->nw_proto = ip->protocol;
	key->nw_tos = ip->tos;
	key->nw_ttl = ip->ttl;

	frag = bpf_ntohs(ip->frag_off);
	if (frag & (IP_MF | IP_OFFSET)) {
		key->nw_frag = FRAG_ANY;
		if (frag & IP_OFFSET) {
			key->nw_frag |= FRAG_LATER;
			return 0; /* no L4 header in later fragments */
		}
	}
	return parse_l4(data, data_end, off + ihl, ip->protocol, key, ps);
}

static __always_inline int parse_ipv6(void *data, void *data_end, __u32 off,
				      struct flow_key *key, struct parse_state *ps)
{
	struct ipv6hdr *ip6 = data + off;
	__u8 nexthdr;
	int i;

	if ((void *)(ip6 + 1) > data_end)
		return -DROP_SHORT_IP;
	if (ip6->version != 6)
		return -DROP_BAD_IP_HDR;

	ps->l3 = L3_IPV6;
	ps->l3_off = off;
	__builtin_memcpy(key->ip_src, &ip6->saddr, 16);
	__builtin_memcpy(key->ip_dst, &ip6->daddr, 16);
	key->nw_tos = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
	key->ipv6_label = *(__be32 *)ip6 & bpf_htonl(0x000fffff);
	key->nw_ttl = ip6->hop_limit;
	nexthdr = ip6->nexthdr;
	off += sizeof(*ip6);

#pragma unroll
	for (i = 0; i < IPV6_MAX_EXT; i++) {
		/* Offsets are bounded for the verifier (off & 0x3ff below); a
		 * chain reaching past that is not walked. */
		if (off > 0x3ff)
			return -DROP_IPV6_EXT_CHAIN;
		switch (nexthdr) {
		case IPPROTO_HOPOPTS:
		case IPPROTO_ROUTING:
		case IPPROTO_DSTOPTS: {
			struct ipv6_opt_hdr_min *h = data + (off & 0x3ff);
			if ((void *)(h + 1) > data_end)
				return -DROP_SHORT_IP;
			nexthdr = h->nexthdr;
			off += (h->hdrlen + 1) * 8;
			break;
		}
		case IPPROTO_AH: {
			struct ipv6_opt_hdr_min *h = data + (off & 0x3ff);
			if ((void *)(h + 1) > data_end)
				return -DROP_SHORT_IP;
			nexthdr = h->nexthdr;
			off += (h->hdrlen + 2) * 4;
			break;
		}
		case IPPROTO_FRAGMENT: {
			struct ipv6_frag_hdr *fh = data + (off & 0x3ff);
			if ((void *)(fh + 1) > data_end)
				return -DROP_SHORT_IP;
			nexthdr = fh->nexthdr;
			off += sizeof(*fh);
			key->nw_frag = FRAG_ANY;
			if (fh->frag_off & bpf_htons(0xfff8)) {
				key->nw_frag |= FRAG_LATER;
				key->nw_proto = nexthdr;
				return 0;
			}
			break;
		}
		default:
			goto done;
		}
	}
	/* Still inside the extension chain after IPV6_MAX_EXT headers. */
	switch (nexthdr) {
	case IPPROTO_HOPOPTS:
	case IPPROTO_ROUTING:
	case IPPROTO_DSTOPTS:
	case IPPROTO_AH:
	case IPPROTO_FRAGMENT:
		return -DROP_IPV6_EXT_CHAIN;
	}
done:
	key->nw_proto = nexthdr;
	if (off > 0x3ff)
		return -DROP_IPV6_EXT_CHAIN;
	return parse_l4(data, data_end, off, nexthdr, key, ps);
}

static __always_inline int parse_arp(void *data, void *data_end, __u32 off,
				     struct flow_key *key, struct parse_state *ps)
{
	struct arp_eth_ipv4 *arp = data + off;

	if ((void *)(arp + 1) > data_end)
		return -DROP_SHORT_ARP;
	ps->l3 = L3_ARP;
	ps->l3_off = off;
	/* Only Ethernet/IPv4 ARP has these fields; others keep a bare key. */
	if (arp->htype != bpf_htons(1) || arp->ptype != bpf_htons(ETH_P_IP) ||
	    arp->hlen != 6 || arp->plen != 4)
		return 0;
	if (bpf_ntohs(arp->op) <= 0xff)
		key->nw_proto = bpf_ntohs(arp->op);
	key->ip_src[0] = arp->spa;
	key->ip_dst[0] = arp->tpa;
	copy_mac(key->arp_sha, arp->sha);
	copy_mac(key->arp_tha, arp->tha);
	return 0;
}

/* parse_frame fills key (zeroed by the caller) and ps from the frame
 * between data and data_end. vlan_meta is a tag the frame's metadata holds
 * (network order, VLAN_CFI set), 0 for none. Returns 0 or -DROP_*. Used by
 * tc (parse_packet) and by XDP (nagare_port_xdp), which see the same frame. */
static __always_inline int parse_frame(void *data, void *data_end, __be16 vlan_meta,
				       struct flow_key *key, struct parse_state *ps)
{
	struct ethhdr *eth = data;
	__u32 off = sizeof(struct ethhdr);
	__be16 proto;

	if ((void *)(eth + 1) > data_end)
		return -DROP_SHORT_ETH;

	copy_mac(key->eth_src, eth->h_source);
	copy_mac(key->eth_dst, eth->h_dest);
	proto = eth->h_proto;

	if (vlan_meta) {
		key->vlan_tci = vlan_meta;
	} else if (proto == ETH_P_8021Q_BE || proto == ETH_P_8021AD_BE) {
		__be16 *tag = data + off;
		if ((void *)(tag + 2) > data_end)
			return -DROP_SHORT_VLAN;
		key->vlan_tci = tag[0] | bpf_htons(VLAN_CFI);
		proto = tag[1];
		off += 4;
		ps->vlan_in_data = 1;
	}
	key->eth_type = proto;

	switch (proto) {
	case bpf_htons(ETH_P_IP):
		return parse_ipv4(data, data_end, off, key, ps);
	case bpf_htons(ETH_P_IPV6):
		return parse_ipv6(data, data_end, off, key, ps);
	case bpf_htons(ETH_P_ARP):
		return parse_arp(data, data_end, off, key, ps);
	case bpf_htons(0x88e7): {
		/* PBB: the I-TAG (flags, I-SID) only, like an MPLS entry. */
		__be32 *itag = data + off;

		if ((void *)(itag + 1) > data_end)
			return -DROP_SHORT_PBB;
		key->ip_src[0] = *itag;
		return 0;
	}
	case ETH_P_MPLS_UC_BE:
	case ETH_P_MPLS_MC_BE: {
		/* The top label stack entry only; what it carries is not
		 * parsed (its type is not on the wire). */
		__be32 *lse = data + off;

		if ((void *)(lse + 1) > data_end)
			return -DROP_SHORT_MPLS;
		key->ip_src[0] = *lse;
		ps->l3 = L3_MPLS;
		ps->l3_off = off;
		return 0;
	}
	}
	return 0;
}

/* parse_packet fills key (zeroed by the caller) and ps from skb. Returns 0
 * or -DROP_*. */
static __always_inline int parse_packet(struct __sk_buff *skb, struct flow_key *key,
					struct parse_state *ps)
{
	if (skb->data_end - skb->data < PARSE_PULL && skb->len > skb->data_end - skb->data)
		bpf_skb_pull_data(skb, skb->len < PARSE_PULL ? skb->len : PARSE_PULL);

	return parse_frame((void *)(long)skb->data, (void *)(long)skb->data_end,
			   skb->vlan_present ? bpf_htons(skb->vlan_tci | VLAN_CFI) : 0, key, ps);
}

#endif
