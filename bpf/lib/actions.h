/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* actions.h — replay a flow's action list on a packet.
 *
 * Two modes share this code, so a packet userspace executes is treated
 * exactly like a cached one:
 *   MODE_PATH     the packet is on its way through a port's ingress hook;
 *                 the last output becomes the program's redirect verdict
 *                 (bpf_redirect / bpf_redirect_peer), earlier outputs are
 *                 clones.
 *   MODE_EXECUTE  the packet came from userspace through BPF_PROG_RUN,
 *                 which ignores redirect verdicts: every output is a clone
 *                 sent at once (bpf_clone_redirect transmits immediately).
 *
 * Header rewrites go through the skb helpers with the offsets found by the
 * parser, and fix IPv4 and L4 checksums incrementally. For packets with
 * CHECKSUM_PARTIAL (a pod with tx offload), l4_csum_replace only adjusts
 * the pseudo-header part, which is what the device will complete later.
 */
#ifndef NAGARE_ACTIONS_H
#define NAGARE_ACTIONS_H

#include "maps.h"
#include "parse.h"
#include "upcall.h"
#include "crc32c.h"
#include "mpls.h"
#include "meter.h"
#include "pbb.h"
#include "recirc.h"
#include "tunnel.h"

enum exec_mode { MODE_PATH = 0, MODE_EXECUTE = 1 };

/* A packet marked so has been handled already (delivered to the stack by
 * ACT_LOCAL as a clone); let it pass when it comes back to a port hook. */
#define NAGARE_MARK_BYPASS 0x4e470001

/* Test builds record every output decision (bpf2go tests set this). */
volatile const __u32 trace_outputs = 0;

#define TRACE_MAX 8
struct out_trace {
	__u32 n;
	__u32 verdict;
	struct {
		__u32 ifindex;
		__u32 flags;
	} out[TRACE_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct out_trace);
} out_traces SEC(".maps");

static __always_inline void trace_output(__u32 ifindex, __u32 flags)
{
	__u32 zero = 0;
	struct out_trace *t;

	if (!trace_outputs)
		return;
	t = bpf_map_lookup_elem(&out_traces, &zero);
	if (t && t->n < TRACE_MAX) {
		__u32 n = t->n & (TRACE_MAX - 1);
		t->out[n].ifindex = ifindex;
		t->out[n].flags = flags;
		t->n++;
	}
}

static __always_inline int l4_csum_off(__u8 proto)
{
	switch (proto) {
	case IPPROTO_TCP:
		return offsetof(struct tcphdr, check);
	case IPPROTO_UDP:
		return offsetof(struct udphdr, check);
	case IPPROTO_ICMPV6:
		return 2;
	}
	return -1;
}

static __always_inline __u64 l4_csum_flags(__u8 proto, __u64 size)
{
	/* A zero UDP checksum means "none" and must stay zero. */
	return proto == IPPROTO_UDP ? size | BPF_F_MARK_MANGLED_0 : size;
}

static __always_inline int set_ipv4_addr(struct __sk_buff *skb, struct parse_state *ps,
					 __u8 proto, __u32 field, __be32 new)
{
	__u32 off = ps->l3_off + field;
	__be32 old;
	int csum = l4_csum_off(proto);

	if (ps->l3 != L3_IPV4)
		return 0;
	if (bpf_skb_load_bytes(skb, off, &old, 4) < 0)
		return -1;
	if (ps->l4_off && csum >= 0 && proto != IPPROTO_ICMPV6 &&
	    bpf_l4_csum_replace(skb, ps->l4_off + csum, old, new,
				l4_csum_flags(proto, 4) | BPF_F_PSEUDO_HDR) < 0)
		return -1;
	if (bpf_l3_csum_replace(skb, ps->l3_off + offsetof(struct iphdr, check), old, new, 4) < 0)
		return -1;
	return bpf_skb_store_bytes(skb, off, &new, 4, 0);
}

static __always_inline int set_ipv6_addr(struct __sk_buff *skb, struct parse_state *ps,
					 __u8 proto, __u32 field, const __be32 *new6)
{
	__u32 off = ps->l3_off + field;
	__be32 old[4], new[4];
	int csum = l4_csum_off(proto);

	if (ps->l3 != L3_IPV6)
		return 0;
	__builtin_memcpy(new, new6, 16);
	if (bpf_skb_load_bytes(skb, off, old, 16) < 0)
		return -1;
	if (ps->l4_off && csum >= 0) {
		__s64 diff = bpf_csum_diff(old, 16, new, 16, 0);
		if (bpf_l4_csum_replace(skb, ps->l4_off + csum, 0, diff,
					l4_csum_flags(proto, 0) | BPF_F_PSEUDO_HDR) < 0)
			return -1;
	}
	return bpf_skb_store_bytes(skb, off, new, 16, 0);
}

/* sctp_len is the length of the SCTP packet from the IP header's length
 * (an Ethernet frame may be padded past it); 0 if unreadable. */
static __always_inline __u32 sctp_len(struct __sk_buff *skb, struct parse_state *ps)
{
	__be16 l;

	if (ps->l3 == L3_IPV4) {
		if (bpf_skb_load_bytes(skb, ps->l3_off + offsetof(struct iphdr, tot_len), &l, 2) < 0)
			return 0;
		return bpf_ntohs(l) - (ps->l4_off - ps->l3_off);
	}
	if (bpf_skb_load_bytes(skb, ps->l3_off + offsetof(struct ipv6hdr, payload_len), &l, 2) < 0)
		return 0;
	return bpf_ntohs(l) + sizeof(struct ipv6hdr) - (ps->l4_off - ps->l3_off);
}

static __always_inline int set_tp_port(struct __sk_buff *skb, struct parse_state *ps,
				       __u8 proto, __u32 field, __be16 new)
{
	__be16 old;
	int csum = l4_csum_off(proto);

	if (!ps->l4_off || (proto != IPPROTO_TCP && proto != IPPROTO_UDP && proto != IPPROTO_SCTP))
		return 0;
	if (bpf_skb_load_bytes(skb, ps->l4_off + field, &old, 2) < 0)
		return -1;
	if (proto == IPPROTO_SCTP) {
		__u32 len = sctp_len(skb, ps);

		if (bpf_skb_store_bytes(skb, ps->l4_off + field, &new, 2, 0) < 0)
			return -1;
		return sctp_crc_fix(skb, ps->l4_off, len, (__u32)(__u16)(old ^ new) << (field * 8));
	}
	if (bpf_l4_csum_replace(skb, ps->l4_off + csum, old, new, l4_csum_flags(proto, 2)) < 0)
		return -1;
	return bpf_skb_store_bytes(skb, ps->l4_off + field, &new, 2, 0);
}

static __always_inline int set_tos(struct __sk_buff *skb, struct parse_state *ps,
				   __u8 bits, __u8 mask)
{
	if (ps->l3 == L3_IPV4) {
		__be16 old, new;
		__u8 *b = (__u8 *)&new;

		if (bpf_skb_load_bytes(skb, ps->l3_off, &old, 2) < 0)
			return -1;
		new = old;
		b[1] = (b[1] & ~mask) | (bits & mask);
		if (bpf_l3_csum_replace(skb, ps->l3_off + offsetof(struct iphdr, check), old, new, 2) < 0)
			return -1;
		return bpf_skb_store_bytes(skb, ps->l3_off, &new, 2, 0);
	}
	if (ps->l3 == L3_IPV6) {
		__be32 w;
		__u32 h, tc;

		if (bpf_skb_load_bytes(skb, ps->l3_off, &w, 4) < 0)
			return -1;
		h = bpf_ntohl(w);
		tc = (h >> 20) & 0xff;
		tc = (tc & ~mask) | (bits & mask);
		h = (h & ~(0xffu << 20)) | (tc << 20);
		w = bpf_htonl(h);
		return bpf_skb_store_bytes(skb, ps->l3_off, &w, 4, 0);
	}
	return 0;
}

/* rewrite_ttl decrements (dec) or sets (to ttl) the IPv4 TTL, header
 * checksum fixed, or the IPv6 hop limit; other packets are left alone, as
 * Open vSwitch's dec_ttl and set_nw_ttl leave them. Returns 0, -1 on
 * helper failure, or 1 when a decrement finds the TTL run out. */
static __always_inline int rewrite_ttl(struct __sk_buff *skb, struct parse_state *ps, int dec, __u8 ttl)
{
	if (ps->l3 == L3_IPV4) {
		__be16 old, new;
		__u8 *b = (__u8 *)&new;
		__u32 off = ps->l3_off + offsetof(struct iphdr, ttl);

		if (bpf_skb_load_bytes(skb, off, &old, 2) < 0)
			return -1;
		new = old;
		if (dec && b[0] <= 1)
			return 1;
		b[0] = dec ? b[0] - 1 : ttl;
		if (bpf_l3_csum_replace(skb, ps->l3_off + offsetof(struct iphdr, check), old, new, 2) < 0)
			return -1;
		return bpf_skb_store_bytes(skb, off, &new, 2, 0);
	}
	if (ps->l3 == L3_IPV6) {
		__u8 hl = ttl;
		__u32 off = ps->l3_off + offsetof(struct ipv6hdr, hop_limit);

		if (dec) {
			if (bpf_skb_load_bytes(skb, off, &hl, 1) < 0)
				return -1;
			if (hl <= 1)
				return 1;
			hl--;
		}
		return bpf_skb_store_bytes(skb, off, &hl, 1, 0);
	}
	return 0;
}

/* packet_tos is the IP ToS (IPv6 traffic class) as the packet carries it
 * now: a set_field ip_dscp/ip_ecn earlier in the list has rewritten it
 * since the key was parsed, and the flow control field VS-extend reads on
 * the receiving node (bpf/lib/steer.h) is whatever the sender set last. */
static __always_inline __u8 packet_tos(struct __sk_buff *skb, struct parse_state *ps, __u8 parsed)
{
	__u8 b[2];

	if (ps->l3 == L3_IPV4) {
		if (bpf_skb_load_bytes(skb, ps->l3_off, b, 2) == 0)
			return b[1];
	} else if (ps->l3 == L3_IPV6) {
		if (bpf_skb_load_bytes(skb, ps->l3_off, b, 2) == 0)
			return (b[0] << 4) | (b[1] >> 4);
	}
	return parsed;
}

/* set_nd rewrites len bytes at off inside an ICMPv6 ND message (the
 * target, or a whole 8-byte link-layer address option), fixing the
 * ICMPv6 checksum. Packets without the field are left alone. */
static __always_inline int set_nd(struct __sk_buff *skb, struct parse_state *ps, __u32 off,
				  const void *new, __u32 len)
{
	__be32 old[4];
	__s64 diff;

	if (!ps->l4_off || off > 0x7ff || len > 16)
		return 0;
	if (bpf_skb_load_bytes(skb, off, old, len) < 0)
		return -1;
	diff = bpf_csum_diff(old, len, (void *)new, len, 0);
	if (diff < 0 || bpf_l4_csum_replace(skb, ps->l4_off + 2, 0, diff, 0) < 0)
		return -1;
	return bpf_skb_store_bytes(skb, off, new, len, 0);
}

/* meter_remark applies a DSCP_REMARK band to an IP packet (others are
 * left alone: set_tos ignores them). */
static __always_inline int meter_remark(struct __sk_buff *skb, struct parse_state *ps, __u32 prec)
{
	return set_tos(skb, ps, af_remark(packet_tos(skb, ps, 0) >> 2, prec) << 2, 0xfc);
}

/* Out of line: its bpf_tunnel_key would sit in run_actions' frame, which
 * shares the verifier's 512 bytes with the entry program's and the
 * connection tracker's (conntrack.h). */
__noinline int set_tunnel(struct __sk_buff *skb, struct parse_state *ps, const struct action *a,
			  const struct flow_key *key)
{
	struct bpf_tunnel_key tk = {};

	if (!skb || !ps || !a || !key)
		return -1;

	tk.tunnel_id = a->arg32;
	tk.remote_ipv4 = bpf_ntohl(a->tun.remote);
	tk.local_ipv4 = bpf_ntohl(a->tun.local);
	tk.tunnel_tos = (a->flags & TUN_TOS_INHERIT) ? packet_tos(skb, ps, key->nw_tos) : a->tun.tos;
	tk.tunnel_ttl = a->tun.ttl ? a->tun.ttl : 64;
	/* DF on the outer header, as OVS's df_default=true: an external-mode
	 * device takes DF only from the key (drivers/net/vxlan ignores its
	 * own df setting then). Without it an oversized outer packet is
	 * fragmented on the way, or dropped by a router that will not, and
	 * no ICMP frag-needed ever tells the pod (docs/agent.md#mtu).
	 * No UDP checksum, as OVS's csum=false and tunnel_xmit (tunnel.h):
	 * the inner packet has its own, and the receiving fast path takes
	 * a checksummed packet only when a NIC has verified it. */
	return bpf_skb_set_tunnel_key(skb, &tk, sizeof(tk), BPF_F_DONT_FRAGMENT | BPF_F_ZERO_CSUM_TX);
}

/* output_set sends a copy of the packet, as it is now, to every port of
 * set idx (a flood): outside run_actions, so that the verifier checks
 * its loop once, not once per action slot. */
__noinline int output_set(struct __sk_buff *skb, __u32 idx)
{
	struct output_set *set;
	__u32 j;

	if (!skb)
		return -1;
	set = bpf_map_lookup_elem(&output_sets, &idx);
	if (!set)
		return -1;
	for (j = 0; j < MAX_SET_PORTS; j++) {
		__u32 ifindex, flags;

		if (j >= set->n)
			break;
		ifindex = set->port[j].ifindex;
		flags = set->port[j].flags;
		trace_output(ifindex, flags);
		if (bpf_clone_redirect(skb, ifindex, (flags & OUT_INGRESS) ? BPF_F_INGRESS : 0) < 0)
			drop(DROP_REDIRECT);
	}
	return 0;
}

/* clone_out sends a copy of the packet as it is now. */
static __always_inline int clone_out(struct __sk_buff *skb, const struct action *a)
{
	__u64 flags = (a->flags & OUT_INGRESS) ? BPF_F_INGRESS : 0;

	return bpf_clone_redirect(skb, a->arg32, flags);
}

/* The connection tracker rewrites packets with the helpers above. */
#include "conntrack.h"

/* run_rare runs the actions that change the packet or the key for
 * run_actions: out of line, so that the verifier checks them once rather
 * than once per slot of run_actions' loop (it walks all sixteen). Returns
 * 0, or -DROP_*. */
__noinline int run_rare(struct __sk_buff *skb, struct parse_state *ps, struct flow_key *key,
			const struct action *a, int mode)
{
	__u8 proto;
	int err = 0;

	if (!skb || !ps || !key || !a)
		return -DROP_BAD_ACTION;
	proto = key->nw_proto;
	switch (a->type) {
	case ACT_SET_ETH_SRC:
		err = bpf_skb_store_bytes(skb, offsetof(struct ethhdr, h_source), a->mac, 6, 0);
		break;
	case ACT_SET_ETH_DST:
		err = bpf_skb_store_bytes(skb, offsetof(struct ethhdr, h_dest), a->mac, 6, 0);
		break;
	case ACT_SET_ETH_ADDRS:
		/* A routed hop's two rewrites (pkg/datapath compileActions
		 * folds them): one helper call instead of two. */
		err = bpf_skb_store_bytes(skb, 0, a->ip6, 12, 0);
		break;
	case ACT_SET_IPV4_SRC:
		err = set_ipv4_addr(skb, ps, proto, offsetof(struct iphdr, saddr), a->arg32);
		break;
	case ACT_SET_IPV4_DST:
		err = set_ipv4_addr(skb, ps, proto, offsetof(struct iphdr, daddr), a->arg32);
		break;
	case ACT_SET_IPV6_SRC:
		err = set_ipv6_addr(skb, ps, proto, offsetof(struct ipv6hdr, saddr), a->ip6);
		break;
	case ACT_SET_IPV6_DST:
		err = set_ipv6_addr(skb, ps, proto, offsetof(struct ipv6hdr, daddr), a->ip6);
		break;
	case ACT_SET_TP_SRC:
		err = set_tp_port(skb, ps, proto, 0, a->arg16);
		break;
	case ACT_SET_TP_DST:
		err = set_tp_port(skb, ps, proto, 2, a->arg16);
		break;
	case ACT_SET_TOS:
		err = set_tos(skb, ps, a->arg16, a->arg32);
		break;
	case ACT_DEC_TTL:
		err = rewrite_ttl(skb, ps, 1, 0);
		if (err > 0)
			return -DROP_TTL_EXCEEDED;
		break;
	case ACT_SET_TTL:
		err = rewrite_ttl(skb, ps, 0, a->arg16);
		break;
	case ACT_PUSH_VLAN:
		/* A tag already in skb metadata (every tagged packet at tc
		 * ingress of a real device; an earlier push) is moved into
		 * the packet by this push, ahead of L3: later rewrites
		 * must find their headers 4 bytes further in. */
		if (skb->vlan_present) {
			ps->vlan_in_data = 1;
			ps->l3_off += 4;
			if (ps->l4_off)
				ps->l4_off += 4;
			if (ps->nd_lla_off)
				ps->nd_lla_off += 4;
		}
		if (bpf_skb_vlan_push(skb, a->arg32, a->arg16) < 0)
			return -DROP_VLAN;
		break;
	case ACT_POP_VLAN:
		if (bpf_skb_vlan_pop(skb) < 0)
			return -DROP_VLAN;
		if (ps->vlan_in_data) {
			ps->vlan_in_data = 0;
			ps->l3_off -= 4;
			if (ps->l4_off)
				ps->l4_off -= 4;
			if (ps->nd_lla_off)
				ps->nd_lla_off -= 4;
		}
		break;
	case ACT_CT_EXT:
		ct_ext(a, mode);
		break;
	case ACT_CT_CLEAR:
		ct_clear(key);
		break;
	case ACT_HASH:
		key->dp_hash = dp_hash_of(key, a->arg32);
		break;
	case ACT_SET_ND_TARGET:
		if (proto == IPPROTO_ICMPV6 &&
		    (key->tp_src == bpf_htons(ND_NEIGHBOR_SOLICIT) || key->tp_src == bpf_htons(ND_NEIGHBOR_ADVERT)) &&
		    key->tp_dst == 0 && skb->len >= ps->l4_off + 24) /* else no target: as parse_nd */
			err = set_nd(skb, ps, ps->l4_off + 8, a->ip6, 16);
		break;
	case ACT_SET_ND_LL:
		if (ps->nd_lla_off) {
			__u8 opt[8];

			if (bpf_skb_load_bytes(skb, ps->nd_lla_off, opt, 2) < 0) {
				err = -1;
				break;
			}
			__builtin_memcpy(opt + 2, a->mac, 6);
			err = set_nd(skb, ps, ps->nd_lla_off, opt, 8);
		}
		break;
	case ACT_METER: {
		__u32 prec = 0;
		int v = meter_apply(a->arg32, skb->len, &prec);

		if (v == METER_DROP)
			return -DROP_METER;
		if (v == METER_REMARK)
			err = meter_remark(skb, ps, prec);
		break;
	}
	case ACT_PUSH_PBB:
		if (pbb_push(skb, ps, a->arg32) < 0)
			return -DROP_PBB;
		break;
	case ACT_POP_PBB:
		if (pbb_pop(skb, ps) < 0)
			return -DROP_PBB;
		break;
	case ACT_SET_PBB_ISID:
		err = pbb_set_isid(skb, a->arg32);
		break;
	case ACT_PUSH_MPLS:
		if (mpls_push(skb, ps, a->arg16, a->arg32) < 0)
			return -DROP_MPLS;
		break;
	case ACT_POP_MPLS:
		if (mpls_pop(skb, ps, a->arg16) < 0)
			return -DROP_MPLS;
		break;
	case ACT_SET_MPLS:
		err = mpls_set(skb, ps, a->arg32, a->ip6[0]);
		break;
	case ACT_SET_MPLS_TTL:
		err = mpls_set(skb, ps, bpf_htonl(a->arg16 & 0xff), MPLS_TTL_BE);
		break;
	case ACT_DEC_MPLS_TTL:
		err = mpls_dec_ttl(skb, ps);
		if (err > 0)
			return -DROP_TTL_EXCEEDED;
		break;
	case ACT_COPY_TTL_OUT:
	case ACT_COPY_TTL_IN:
		err = mpls_copy_ttl(skb, ps, a->type == ACT_COPY_TTL_OUT);
		break;
	default:
		return -DROP_BAD_ACTION;
	}
	return err < 0 ? -DROP_REWRITE : 0;
}

/* run_actions stops at an ACT_CT (slot i) and returns ACTS_AT_CT | i;
 * run_list runs the ct action and resumes at slot i + 1 (the verdict so
 * far is kept in the parse state). The connection
 * tracker is called from the entry program, not from run_actions: the
 * verifier gives all frames of a call chain 512 bytes together, and
 * entry + run_actions + ct_action + nat_choose would need more. */
#define ACTS_AT_CT 0x10000
#define ACTS_EXECUTE 0x200 /* mode (five arguments at most for a BPF function) */
/* At most this many ct actions in one list (Open vSwitch pipelines have
 * one or two per pass). */
#define MAX_CT_PER_LIST 4

/* run_actions applies fe's actions from slot resume & 0xff on and returns
 * (ACTS_EXECUTE: in MODE_EXECUTE) and returns the TC verdict, TC_ACT_RECIRC when the list ends in a recirculation
 * (recirc.h: key's words 14..19 then hold what the next pass looks up
 * with), or ACTS_AT_CT | slot at a ct action.
 *
 * A global (non-inlined) function: the verifier checks it once on its own
 * instead of once for every path through the lookup that reaches it, which
 * keeps the entry program far below the verifier's complexity limit. */
__noinline int run_actions(struct __sk_buff *skb, const struct flow_entry *fe,
			   struct parse_state *ps, struct flow_key *key, __u32 resume)
{
	int mode = (resume & ACTS_EXECUTE) ? MODE_EXECUTE : MODE_PATH;
	__u32 i, n, start = resume & 0xff;

	if (!skb || !fe || !ps || !key)
		return TC_ACT_SHOT;
	n = fe->n_actions;
	if (n == 0)
		return drop(DROP_ACTION);
	/* The verdict so far lives in *ps, not in registers: to the verifier
	 * it is then one unknown value, and the loop's states at each slot
	 * do not multiply by every verdict and output seen before it. */
	if (!(resume & 0xff)) {
		ps->verdict = TC_ACT_SHOT;
		ps->have_output = 0;
	}

	for (i = 0; i < MAX_ACTIONS; i++) {
		const struct action *a;
		int err = 0;

		if (i >= n)
			break;
		if (i < start)
			continue;
		a = &fe->actions[i];
		switch (a->type) {
		case ACT_OUTPUT:
			trace_output(a->arg32, a->flags);
			ps->have_output = 1;
			if (mode == MODE_EXECUTE || !(a->flags & OUT_LAST)) {
				if (clone_out(skb, a) < 0)
					drop(DROP_REDIRECT);
				break;
			}
			if (a->flags & OUT_PEER) {
				ps->verdict = bpf_redirect_peer(a->arg32, 0);
			} else if (a->flags & OUT_TUNNEL) {
				int r = tunnel_xmit(skb, a->arg32);

				if (r < 0)
					return drop(-r);
				if (r == 1) {
					count(CTR_TUNNEL_KERNEL);
					r = bpf_redirect(a->arg32, 0);
				}
				ps->verdict = r;
			} else {
				ps->verdict = bpf_redirect(a->arg32, (a->flags & OUT_INGRESS) ? BPF_F_INGRESS : 0);
			}
			if (ps->verdict != TC_ACT_REDIRECT)
				return drop(DROP_REDIRECT);
			break;
		case ACT_OUTPUT_SET:
			ps->have_output = 1;
			if (output_set(skb, a->arg32) < 0)
				return drop(DROP_BAD_ACTION);
			break;
		case ACT_LOCAL:
			trace_output(skb->ifindex, OUT_INGRESS);
			ps->have_output = 1;
			if (mode == MODE_EXECUTE || !(a->flags & OUT_LAST)) {
				__u32 mark = skb->mark;

				skb->mark = NAGARE_MARK_BYPASS;
				if (bpf_clone_redirect(skb, skb->ifindex, BPF_F_INGRESS) < 0)
					drop(DROP_REDIRECT);
				skb->mark = mark;
				break;
			}
			ps->verdict = TC_ACT_OK;
			break;
		case ACT_SET_TUNNEL:
			ps->dirty = 1;
			if (set_tunnel(skb, ps, a, key) < 0)
				return drop(DROP_TUNNEL_SET);
			break;
		case ACT_USERSPACE:
			ps->have_output = 1; /* userspace now owns the packet */
			/* A cached flow's controller action shares the port's
			 * upcall budget with its misses: otherwise a flow to the
			 * controller would be a way around it. Before that, the
			 * rate the controllers accept (action_upcall_admit): what
			 * they would refuse does not spend the port's budget. */
			if (mode == MODE_PATH && !action_upcall_admit(skb))
				drop(DROP_UPCALL_CONTROLLER_BUDGET);
			else if (mode == MODE_PATH && !upcall_admit_port(skb))
				drop(DROP_UPCALL_PORT_BUDGET);
			else if (send_upcall(skb, key, UPCALL_ACTION, a->u64[0]) < 0)
				drop(DROP_UPCALL_RING_FULL);
			break;
		case ACT_CT:
			/* The caller runs it (run_list) and resumes after it. */
			return ACTS_AT_CT | i;
		case ACT_RECIRC:
			/* Last in its list (pkg/datapath compileActions); outputs
			 * before it were clones. */
			key->recirc_id = a->arg32;
			return TC_ACT_RECIRC;
		case ACT_DROP:
			/* The reason the controller gave the drop (a policy's
			 * deny), else the generic one. */
			if (a->arg32 > DROP_NONE && a->arg32 < DROP__MAX)
				return drop(a->arg32);
			return drop(DROP_ACTION);
		default: {
			int r;

			/* All but these change the packet or the key's parsed
			 * words (ct_clear and hash write words 14..19 only,
			 * which a recirculation carries over). */
			if (a->type != ACT_CT_EXT && a->type != ACT_CT_CLEAR && a->type != ACT_HASH && a->type != ACT_METER)
				ps->dirty = 1;
			r = run_rare(skb, ps, key, a, mode);

			if (r < 0)
				return drop(-r);
			break;
		}
		}
		if (err < 0)
			return drop(DROP_REWRITE);
	}
	if (!ps->have_output && mode == MODE_PATH)
		return drop(DROP_ACTION);
	return ps->verdict;
}

/* run_list runs fe's whole list: run_actions, and the connection tracker
 * for each ct action it stops at. */
static __always_inline int run_list(struct __sk_buff *skb, const struct flow_entry *fe,
				    struct parse_state *ps, struct flow_key *key, int mode)
{
	__u32 resume = mode == MODE_EXECUTE ? ACTS_EXECUTE : 0;
	int k, ret, err;

	for (k = 0; k <= MAX_CT_PER_LIST; k++) {
		ret = run_actions(skb, fe, ps, key, resume);
		if (!(ret & ACTS_AT_CT) || ret < 0)
			return ret;
		err = ct_action(skb, ps, key, &fe->actions[ret & (MAX_ACTIONS - 1)], mode);
		if (err < 0)
			return drop(-err);
		resume = ((ret & ~ACTS_AT_CT) + 1) | (mode == MODE_EXECUTE ? ACTS_EXECUTE : 0);
	}
	return drop(DROP_BAD_ACTION);
}

#endif
