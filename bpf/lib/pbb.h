/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* pbb.h — 802.1ah Provider Backbone Bridging: push and pop an I-TAG.
 *
 *   [B-DA B-SA][0x88e7 | I-TAG: PCP DEI UCA res, I-SID (24 bits)][C-DA C-SA][EtherType ...]
 *
 * A push inserts 18 bytes after the MAC addresses (the EtherType, the
 * I-TAG and the customer addresses, copied from the frame's, which stay as
 * the backbone ones); a pop removes the first 18 bytes, so the customer
 * addresses become the frame's. The parser keys the I-TAG (in ip_src[0],
 * like an MPLS entry) and nothing behind it.
 *
 * Removing bytes at the front of a non-IP packet has no helper (see
 * mpls.h); 18 is not a multiple of the 4 bytes a VLAN pop removes, so a
 * pop grows the head by 2 first and then removes 20 bytes as five stacked
 * VLAN tags.
 */
#ifndef NAGARE_PBB_H
#define NAGARE_PBB_H

#include "mpls.h"

#define ETH_P_PBB_BE bpf_htons(0x88e7)
#define PBB_HLEN 18 /* EtherType, I-TAG, customer addresses */

/* pbb_push encapsulates the frame with I-SID isid (I-TAG flags 0). */
static __always_inline int pbb_push(struct __sk_buff *skb, struct parse_state *ps, __u32 isid)
{
	__u8 addrs[12];
	__u8 itag[6] = { 0x88, 0xe7, 0, isid >> 16, isid >> 8, isid };

	if (ps->vlan_in_data)
		return -1; /* a C-tag in the packet: not supported */
	if (bpf_skb_change_head(skb, PBB_HLEN, 0) < 0)
		return -1;
	/* The frame now starts PBB_HLEN bytes in: its addresses are already
	 * where the customer addresses go; copy them to the front too. */
	if (bpf_skb_load_bytes(skb, PBB_HLEN, addrs, 12) < 0 ||
	    bpf_skb_store_bytes(skb, 0, addrs, 12, BPF_F_RECOMPUTE_CSUM) < 0 ||
	    bpf_skb_store_bytes(skb, 12, itag, 6, BPF_F_RECOMPUTE_CSUM) < 0)
		return -1;
	ps_at(ps, L3_NONE, ETH_HLEN);
	return 0;
}

/* pbb_pop decapsulates a PBB frame (the EtherType at 12 is 0x88e7): the
 * customer frame is left, keyed as nothing (not parsed). */
static __always_inline int pbb_pop(struct __sk_buff *skb, struct parse_state *ps)
{
	__u64 tags = bpf_cpu_to_be64(0x8100000081000000ull); /* two empty 802.1Q tags */
	__u8 addrs[12];
	__be16 et;
	int tag = 0, i;
	__be16 tpid = 0;
	__u16 tci = 0;

	if (ps->vlan_in_data)
		return -1;
	if (bpf_skb_load_bytes(skb, 12, &et, 2) < 0 || et != ETH_P_PBB_BE)
		return 0;
	if (skb->vlan_present) {
		tag = 1;
		tpid = skb->vlan_proto;
		tci = skb->vlan_tci;
		if (bpf_skb_vlan_pop(skb) < 0)
			return -1;
	}
	/* [B-DA B-SA][88e7 I-TAG][C-DA C-SA][ET] → grow by 2 and push one
	 * tag into the packet: [addrs][8100 0][2 bytes][88e7 ...] puts ET at
	 * 12 + 4 + 2 + 18 = 36, with 24 bytes (six tags) before it. */
	if (bpf_skb_load_bytes(skb, ETH_HLEN + 4, addrs, 12) < 0)
		return -1;
	if (bpf_skb_change_head(skb, 2, 0) < 0)
		return -1;
	if (bpf_skb_store_bytes(skb, 0, addrs, 12, BPF_F_RECOMPUTE_CSUM) < 0)
		return -1;
	if (bpf_skb_vlan_push(skb, ETH_P_8021Q_BE, 0) < 0 || bpf_skb_vlan_push(skb, ETH_P_8021Q_BE, 0) < 0)
		return -1;
	for (i = 0; i < 3; i++) {
		if (bpf_skb_store_bytes(skb, 12 + 8 * i, &tags, 8, BPF_F_RECOMPUTE_CSUM) < 0)
			return -1;
	}
	for (i = 0; i < 7; i++) {
		if (bpf_skb_vlan_pop(skb) < 0)
			return -1;
	}
	if (tag && bpf_skb_vlan_push(skb, tpid, tci) < 0)
		return -1;
	ps_at(ps, L3_NONE, ETH_HLEN);
	return 0;
}

/* pbb_set_isid rewrites the I-SID of a PBB frame. */
static __always_inline int pbb_set_isid(struct __sk_buff *skb, __u32 isid)
{
	__be16 et;
	__u8 v[3] = { isid >> 16, isid >> 8, isid };

	if (bpf_skb_load_bytes(skb, 12, &et, 2) < 0 || et != ETH_P_PBB_BE)
		return 0;
	return bpf_skb_store_bytes(skb, 15, v, 3, BPF_F_RECOMPUTE_CSUM);
}

#endif
