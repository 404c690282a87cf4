/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* mpls.h — MPLS label stack actions: push, pop, rewrite, TTLs.
 *
 * The parser keys the top label stack entry (LSE) only and records its
 * offset in ps->l3_off; nothing behind the stack is parsed, so after a
 * push or pop the IP-level rewrites of the same action list find no
 * header (the translation never emits them there).
 *
 * No helper inserts or removes bytes at the MAC layer of a non-IP packet:
 * bpf_skb_adjust_room refuses anything but skb->protocol IPv4/IPv6, and an
 * MPLS packet's protocol is 0x8847. So a push grows the head
 * (bpf_skb_change_head, any protocol) and moves the Ethernet header
 * forward, and a pop uses the VLAN helpers, which do remove 4 bytes after
 * the MAC addresses: it makes the 4 bytes ahead of the payload look like
 * two stacked 802.1Q tags and pops them (see mpls_pop).
 */
#ifndef NAGARE_MPLS_H
#define NAGARE_MPLS_H

#include "parse.h"

#define MPLS_BOS_BE bpf_htonl(0x100)
#define MPLS_TTL_BE bpf_htonl(0xff)

/* l2_len is the bytes before the L3 header: Ethernet, plus a VLAN tag the
 * packet carries in its data (one in skb metadata takes no room). */
static __always_inline __u32 l2_len(const struct parse_state *ps)
{
	return ps->vlan_in_data ? ETH_HLEN + 4 : ETH_HLEN;
}

/* ps_at records where the L3 header is after a push or pop; the L4 and ND
 * offsets of the old headers no longer apply. */
static __always_inline void ps_at(struct parse_state *ps, __u8 l3, __u16 off)
{
	ps->l3 = l3;
	ps->l3_off = off;
	ps->l4_off = 0;
	ps->nd_lla_off = 0;
}

/* mpls_push puts lse (network order, computed by userspace) in front of
 * the L3 header and sets the EtherType to ethertype (0x8847/0x8848). */
static __always_inline int mpls_push(struct __sk_buff *skb, struct parse_state *ps, __be16 ethertype, __be32 lse)
{
	__u8 hdr[ETH_HLEN + 4];
	__u32 n = l2_len(ps);

	if (bpf_skb_change_head(skb, 4, 0) < 0)
		return -1;
	if (n == ETH_HLEN + 4) {
		if (bpf_skb_load_bytes(skb, 4, hdr, ETH_HLEN + 4) < 0 ||
		    bpf_skb_store_bytes(skb, 0, hdr, ETH_HLEN + 4, BPF_F_RECOMPUTE_CSUM) < 0)
			return -1;
	} else {
		if (bpf_skb_load_bytes(skb, 4, hdr, ETH_HLEN) < 0 ||
		    bpf_skb_store_bytes(skb, 0, hdr, ETH_HLEN, BPF_F_RECOMPUTE_CSUM) < 0)
			return -1;
	}
	if (bpf_skb_store_bytes(skb, n - 2, &ethertype, 2, BPF_F_RECOMPUTE_CSUM) < 0 ||
	    bpf_skb_store_bytes(skb, n, &lse, 4, BPF_F_RECOMPUTE_CSUM) < 0)
		return -1;
	ps_at(ps, L3_MPLS, n);
	return 0;
}

/* mpls_reparse finds the headers behind a popped entry again, so that a
 * group bucket that pushed an entry and the pop that undoes it leave the
 * packet as rewritable as before: the L3 kind and offsets (an IPv6
 * extension header or a later fragment leaves no L4 offset). */
static __always_inline int mpls_reparse(struct __sk_buff *skb, struct parse_state *ps, __be16 ethertype)
{
	__u8 h[10];
	__u32 l4 = 0;

	ps->l3 = L3_NONE;
	if (ethertype == ETH_P_MPLS_UC_BE || ethertype == ETH_P_MPLS_MC_BE) {
		ps->l3 = L3_MPLS;
		return 0;
	}
	if (ethertype == bpf_htons(ETH_P_IP)) {
		if (bpf_skb_load_bytes(skb, ETH_HLEN, h, 10) < 0 || h[0] >> 4 != 4 || (h[0] & 0xf) < 5)
			return 0;
		ps->l3 = L3_IPV4;
		if (!(h[6] & 0x1f) && !h[7])
			l4 = ETH_HLEN + (h[0] & 0xf) * 4;
		h[0] = h[9];
	} else if (ethertype == bpf_htons(ETH_P_IPV6)) {
		if (bpf_skb_load_bytes(skb, ETH_HLEN, h, 7) < 0 || h[0] >> 4 != 6)
			return 0;
		ps->l3 = L3_IPV6;
		l4 = ETH_HLEN + sizeof(struct ipv6hdr);
		h[0] = h[6];
	} else {
		return 0;
	}
	switch (h[0]) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
	case IPPROTO_SCTP:
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		ps->l4_off = l4;
	}
	return 0;
}

/* mpls_pop removes the top LSE; the EtherType becomes ethertype.
 *
 * bpf_skb_vlan_push with a tag already in skb metadata moves that tag
 * into the packet (after the MAC addresses) and sets skb->protocol to
 * 802.1Q; bpf_skb_vlan_pop on a packet whose protocol is 802.1Q removes
 * the tag from the packet and, when the next EtherType is 802.1Q again,
 * moves that one into metadata. So: take away any real tag (put back at
 * the end), push two tags (the first goes to metadata, the second moves
 * it into the packet), overwrite the EtherType and LSE behind it with a
 * second tag header and the new EtherType, and pop three times. The
 * packet is then [MACs][ethertype][payload] with no tag anywhere. */
static __always_inline int mpls_pop(struct __sk_buff *skb, struct parse_state *ps, __be16 ethertype)
{
	int tag = 0; /* a VLAN tag to put back after the pop */
	__be16 tpid = 0;
	__u16 tci = 0;
	__u8 fake[6] = { 0x81, 0x00, 0, 0 };

	if (ps->l3 != L3_MPLS)
		return 0;
	if (skb->vlan_present) {
		tag = 1;
		tpid = skb->vlan_proto;
		tci = skb->vlan_tci;
	} else if (ps->vlan_in_data) {
		__be16 t[2];

		if (bpf_skb_load_bytes(skb, 12, t, 4) < 0)
			return -1;
		tag = 1;
		tpid = t[0];
		tci = bpf_ntohs(t[1]);
	}
	if (tag && bpf_skb_vlan_pop(skb) < 0)
		return -1;
	if (bpf_skb_vlan_push(skb, ETH_P_8021Q_BE, 0) < 0 || bpf_skb_vlan_push(skb, ETH_P_8021Q_BE, 0) < 0)
		return -1;
	__builtin_memcpy(fake + 4, &ethertype, 2);
	if (bpf_skb_store_bytes(skb, ETH_HLEN + 2, fake, 6, BPF_F_RECOMPUTE_CSUM) < 0)
		return -1;
	if (bpf_skb_vlan_pop(skb) < 0 || bpf_skb_vlan_pop(skb) < 0 || bpf_skb_vlan_pop(skb) < 0)
		return -1;
	if (tag && bpf_skb_vlan_push(skb, tpid, tci) < 0)
		return -1;
	ps->vlan_in_data = 0;
	ps_at(ps, L3_NONE, ETH_HLEN);
	return mpls_reparse(skb, ps, ethertype);
}

/* mpls_set writes the bits of lse under mask into the top LSE. */
static __always_inline int mpls_set(struct __sk_buff *skb, struct parse_state *ps, __be32 lse, __be32 mask)
{
	__be32 old;

	if (ps->l3 != L3_MPLS)
		return 0;
	if (bpf_skb_load_bytes(skb, ps->l3_off, &old, 4) < 0)
		return -1;
	old = (old & ~mask) | (lse & mask);
	return bpf_skb_store_bytes(skb, ps->l3_off, &old, 4, BPF_F_RECOMPUTE_CSUM);
}

/* mpls_dec_ttl decrements the top LSE's TTL: 1 when it runs out (drop). */
static __always_inline int mpls_dec_ttl(struct __sk_buff *skb, struct parse_state *ps)
{
	__u8 ttl;

	if (ps->l3 != L3_MPLS)
		return 0;
	if (bpf_skb_load_bytes(skb, ps->l3_off + 3, &ttl, 1) < 0)
		return -1;
	if (ttl <= 1)
		return 1;
	ttl--;
	return bpf_skb_store_bytes(skb, ps->l3_off + 3, &ttl, 1, BPF_F_RECOMPUTE_CSUM);
}

/* inner_ttl_off finds the TTL of the header behind the top LSE: the next
 * LSE's, or the IPv4 TTL / IPv6 hop limit under the bottom of the stack
 * (told apart by the version nibble, as MPLS does not say). *ipv4 is set
 * when the IPv4 header checksum covers it. 0 when there is none. */
static __always_inline __u32 inner_ttl_off(struct __sk_buff *skb, struct parse_state *ps, int *ipv4)
{
	__u32 inner = ps->l3_off + 4;
	__be32 lse;
	__u8 v;

	if (bpf_skb_load_bytes(skb, ps->l3_off, &lse, 4) < 0)
		return 0;
	if (!(lse & MPLS_BOS_BE))
		return inner + 3;
	if (bpf_skb_load_bytes(skb, inner, &v, 1) < 0)
		return 0;
	if (v >> 4 == 4) {
		*ipv4 = 1;
		return inner + offsetof(struct iphdr, ttl);
	}
	if (v >> 4 == 6)
		return inner + offsetof(struct ipv6hdr, hop_limit);
	return 0;
}

/* mpls_copy_ttl copies the TTL outwards (inner header → top LSE, out=1)
 * or inwards (top LSE → inner header). Non-MPLS packets are left alone. */
static __always_inline int mpls_copy_ttl(struct __sk_buff *skb, struct parse_state *ps, int out)
{
	int ipv4 = 0;
	__u32 in_off;
	__u8 ttl;

	if (ps->l3 != L3_MPLS)
		return 0;
	in_off = inner_ttl_off(skb, ps, &ipv4);
	if (!in_off || in_off > 0x3ff)
		return 0;
	if (out) {
		if (bpf_skb_load_bytes(skb, in_off, &ttl, 1) < 0)
			return -1;
		return bpf_skb_store_bytes(skb, ps->l3_off + 3, &ttl, 1, BPF_F_RECOMPUTE_CSUM);
	}
	if (bpf_skb_load_bytes(skb, ps->l3_off + 3, &ttl, 1) < 0)
		return -1;
	if (ipv4) {
		__be16 old, new;
		__u8 *b = (__u8 *)&new;

		if (bpf_skb_load_bytes(skb, in_off, &old, 2) < 0)
			return -1;
		new = old;
		b[0] = ttl;
		if (bpf_l3_csum_replace(skb, in_off - offsetof(struct iphdr, ttl) + offsetof(struct iphdr, check),
					old, new, 2) < 0)
			return -1;
	}
	return bpf_skb_store_bytes(skb, in_off, &ttl, 1, BPF_F_RECOMPUTE_CSUM);
}

#endif
