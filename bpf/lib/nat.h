/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* nat.h — the translation part of ct(): Open vSwitch's nat(src=...),
 * nat(dst=...) and bare nat.
 *
 * A connection's translation is its reply tuple: a new committed
 * connection with nat(dst=range[:ports]) gets a reply tuple whose source is
 * the chosen address (and port); nat(src=...) one whose destination is.
 * A packet is then rewritten to look like the reverse of the other
 * direction's tuple — in the original direction to reverse(reply), in the
 * reply direction to reverse(original) — which covers SNAT, DNAT and both.
 *
 * Choosing: the address (and a DNAT port) by a hash of the original
 * tuple, so every connection of a client does not land on the same
 * backend; an SNAT port is the original one if free, else the next ones
 * from the range (1024-65535 without one), NAT_TRIES at most — a reply
 * tuple must not be another connection's, or replies would go to it —
 * then the packet is dropped (DROP_NAT_NO_PORT). ICMP echo keeps its id.
 * A DNAT whose reply tuple another connection holds moves the client's
 * port instead (netfilter's clash resolution), and tuples no connection
 * holds are preferred to closed connections' (ct_reap, nat_choose).
 *
 * Rewrites go through the same helpers as set_field (actions.h), so L3
 * and L4 checksums are fixed, CHECKSUM_PARTIAL packets from pods with tx
 * offload included. An ICMPv4 error about a translated connection is
 * translated back, outer and embedded headers (nat_related). Included by
 * conntrack.h after its types.
 */
#ifndef NAGARE_NAT_H
#define NAGARE_NAT_H

#define NAT_TRIES 16

static __always_inline __u32 ct_tuple_hash(const struct ct_tuple *t)
{
	__u64 h = 0x9E3779B97F4A7C15ull;
	int i;

#pragma unroll
	for (i = 0; i < 4; i++)
		h = (h ^ t->src[i] ^ ((__u64)t->dst[i] << 32)) * 0xC2B2AE3D27D4EB4Full;
	h = (h ^ t->sport ^ ((__u64)t->dport << 16) ^ ((__u64)t->proto << 32)) * 0x165667B19E3779F9ull;
	h ^= h >> 29;
	return (__u32)h;
}

/* ct_reap deletes the entry of t if it is stale (an expired connection,
 * a reply entry whose connection is gone or expired; with take_closed,
 * also a closed one). Returns 1 when t is free now, 0 when a connection
 * holds it.
 *
 * A closed TCP connection (ct_tcp_closed: TIME_WAIT, or CLOSE after a
 * reset) may give its tuples up, as Linux lets a SYN reopen a TIME_WAIT
 * conntrack and its NAT reuse such a tuple when nothing else is free
 * (nf_nat_used_tuple_harder). */
static __always_inline int ct_reap(const struct ct_tuple *t, __u64 now, int take_closed)
{
	struct ct_entry *e = bpf_map_lookup_elem(&conntrack, t), *c;

	if (!e)
		return 1;
	if (e->kind == CT_CONN) {
		if (e->expires >= now && !(take_closed && ct_tcp_closed(e)))
			return 0;
		ct_release(e);
		bpf_map_delete_elem(&conntrack, &e->peer);
		bpf_map_delete_elem(&conntrack, t);
		ct_epoch_bump();
		return 1;
	}
	c = bpf_map_lookup_elem(&conntrack, &e->peer);
	if (c && c->kind == CT_CONN && c->expires >= now) {
		if (!(take_closed && ct_tcp_closed(c)))
			return 0;
		/* The alias of a closed connection: both go. */
		ct_release(c);
		bpf_map_delete_elem(&conntrack, &e->peer);
	}
	bpf_map_delete_elem(&conntrack, t);
	ct_epoch_bump();
	return 1;
}

/* nat_addr picks an address of [min, max] by h into out (16 bytes). For
 * IPv6 the range varies in the last 32 bits only. */
static __always_inline void nat_addr(__be32 *out, const __be32 *min, const __be32 *max, int v6, __u32 h)
{
	__u32 lo, hi;
	int w = v6 ? 3 : 0;

	out[0] = min[0];
	out[1] = v6 ? min[1] : 0;
	out[2] = v6 ? min[2] : 0;
	out[3] = v6 ? min[3] : 0;
	if (v6 && (min[0] != max[0] || min[1] != max[1] || min[2] != max[2]))
		return;
	lo = bpf_ntohl(w ? min[3] : min[0]);
	hi = bpf_ntohl(w ? max[3] : max[0]);
	if (hi > lo) {
		lo += h % (hi - lo + 1);
		if (w)
			out[3] = bpf_htonl(lo);
		else
			out[0] = bpf_htonl(lo);
	}
}

/* nat_move_client looks for another client port (the reply tuple's
 * destination port) when the wanted reply tuple is another connection's,
 * as netfilter's NAT resolves such a clash with its null source binding:
 * up to NAT_TRIES ports of 1024-65535 that ct_reap frees (take_closed:
 * closed connections' too). Found: 1, the connection is then translated
 * at its source too (CTF_SNAT). Not found, or a privileged client port
 * (never moved): 0, with s->rtuple as it came. */
static __always_inline int nat_move_client(struct ct_scratch *s, __u32 h, __u64 now, int take_closed)
{
	__be16 client = s->rtuple.dport;
	__u32 i;

	if (bpf_ntohs(client) < 1024)
		return 0;
	for (i = 0; i < NAT_TRIES; i++) {
		s->rtuple.dport = bpf_htons(1024 + (h + i * 7919) % 64512);
		if (ct_reap(&s->rtuple, now, take_closed)) {
			s->conn.flags |= CTF_SNAT;
			return 1;
		}
	}
	s->rtuple.dport = client;
	return 0;
}

/* nat_choose sets s->rtuple (the reverse of s->orig so far) to the
 * translated reply tuple the action's NAT asks for, and the conn's
 * CTF_SNAT/CTF_DNAT. Returns 0 or -DROP_NAT_NO_PORT. A global function:
 * its bounded search is verified once. */
__noinline int nat_choose(struct ct_scratch *s, const struct action *a)
{
	const __u8 *nb;
	const __u16 *np;
	__u32 h, span, i;
	__u16 pmin, pmax, first;
	__be16 client;
	__u8 kind;
	int ports, v6, pass;
	__u64 now = bpf_ktime_get_coarse_ns();

	if (!s || !a)
		return -DROP_BAD_ACTION;
	nb = (const __u8 *)&a->u64[0];
	np = (const __u16 *)&a->u64[1];
	kind = nb[4];
	pmin = np[0];
	pmax = np[1] < pmin ? pmin : np[1];
	h = ct_tuple_hash(&s->orig);
	v6 = s->orig.family == 6;
	ports = s->orig.proto == IPPROTO_TCP || s->orig.proto == IPPROTO_UDP || s->orig.proto == IPPROTO_SCTP;

	if (kind == NAT_DST) {
		if (s->nat_min[0] | s->nat_min[1] | s->nat_min[2] | s->nat_min[3])
			nat_addr(s->rtuple.src, s->nat_min, s->nat_max, v6, h);
		if (ports && pmin)
			s->rtuple.sport = bpf_htons(pmin + h % (pmax - pmin + 1));
		s->conn.flags |= CTF_DNAT;
		first = bpf_ntohs(s->rtuple.sport);
		span = pmax - pmin + 1;
		client = s->rtuple.dport;
		/* A free reply tuple first; a closed connection's only when
		 * none is: the endpoint may still hold that 4-tuple in
		 * TIME_WAIT from the other connection (a client that reached
		 * the pod directly from the same port a moment ago), with
		 * sequence numbers and timestamps of another origin, and
		 * answers the SYN with a challenge ACK (the client resets and
		 * retries 10 ms later). */
		for (pass = 0; pass < 2; pass++) {
			s->rtuple.sport = bpf_htons(first);
			s->rtuple.dport = client;
			if (ct_reap(&s->rtuple, now, pass))
				return 0;
			/* Another port of the endpoints' range. */
			if (ports && pmin && pmax != pmin) {
				for (i = 1; i < NAT_TRIES; i++) {
					s->rtuple.sport = bpf_htons(pmin + (h + i) % span);
					if (ct_reap(&s->rtuple, now, pass))
						return 0;
				}
				s->rtuple.sport = bpf_htons(first);
			}
			/* Another client port, as netfilter's NAT resolves a
			 * clash (the null source binding): the connection is
			 * then translated both ways (+snat+dnat). */
			if (ports && nat_move_client(s, h, now, pass))
				return 0;
		}
		return -DROP_NAT_NO_PORT;
	}
	if (kind == NAT_NONE) {
		/* Bare nat on a new connection: the null binding Linux's OVS
		 * datapath makes (nf_nat_alloc_null_binding): no translation,
		 * unless the reply tuple is another connection's — a client
		 * that reached the same endpoint through a Service from this
		 * port — then the client's port moves, as above. */
		if (ct_reap(&s->rtuple, now, 0))
			return 0;
		if (ports && nat_move_client(s, h, now, 0))
			return 0;
		return ct_reap(&s->rtuple, now, 1) ? 0 : -DROP_NAT_NO_PORT;
	}
	if (kind != NAT_SRC)
		return 0;
	if (s->nat_min[0] | s->nat_min[1] | s->nat_min[2] | s->nat_min[3])
		nat_addr(s->rtuple.dst, s->nat_min, s->nat_max, v6, h);
	s->conn.flags |= CTF_SNAT;
	if (!pmin) {
		pmin = 1024;
		pmax = 65535;
	}
	span = pmax - pmin + 1;
	first = bpf_ntohs(s->orig.sport);
	/* The original port first when the range allows it; free tuples
	 * before closed connections' (above). */
	for (pass = 0; pass < 2; pass++) {
		if (!ports || (first >= pmin && first <= pmax)) {
			s->rtuple.dport = s->orig.sport;
			if (ct_reap(&s->rtuple, now, pass))
				return 0;
			if (!ports)
				continue;
		}
		for (i = 0; i < NAT_TRIES; i++) {
			s->rtuple.dport = bpf_htons(pmin + (h + i) % span);
			if (ct_reap(&s->rtuple, now, pass))
				return 0;
		}
	}
	return -DROP_NAT_NO_PORT;
}

/* nat_rewrite makes the packet's addresses and ports (now those of
 * s->tuple) those of want. */
static __always_inline int nat_rewrite(struct __sk_buff *skb, struct parse_state *ps, __u8 proto,
				       const struct ct_tuple *have, const struct ct_tuple *want)
{
	if (want->family == 4) {
		if (want->src[0] != have->src[0] &&
		    set_ipv4_addr(skb, ps, proto, offsetof(struct iphdr, saddr), want->src[0]) < 0)
			return -1;
		if (want->dst[0] != have->dst[0] &&
		    set_ipv4_addr(skb, ps, proto, offsetof(struct iphdr, daddr), want->dst[0]) < 0)
			return -1;
	} else {
		if ((want->src[0] ^ have->src[0]) | (want->src[1] ^ have->src[1]) |
		    (want->src[2] ^ have->src[2]) | (want->src[3] ^ have->src[3]))
			if (set_ipv6_addr(skb, ps, proto, offsetof(struct ipv6hdr, saddr), want->src) < 0)
				return -1;
		if ((want->dst[0] ^ have->dst[0]) | (want->dst[1] ^ have->dst[1]) |
		    (want->dst[2] ^ have->dst[2]) | (want->dst[3] ^ have->dst[3]))
			if (set_ipv6_addr(skb, ps, proto, offsetof(struct ipv6hdr, daddr), want->dst) < 0)
				return -1;
	}
	if (proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6)
		return 0; /* the echo id is kept */
	if (want->sport != have->sport && set_tp_port(skb, ps, proto, 0, want->sport) < 0)
		return -1;
	if (want->dport != have->dport && set_tp_port(skb, ps, proto, 2, want->dport) < 0)
		return -1;
	return 0;
}

/* nat_packet applies the connection's translation to a packet of
 * direction dir (1 original, 2 reply). */
static __always_inline int nat_packet(struct __sk_buff *skb, struct parse_state *ps,
				      const struct flow_key *key, struct ct_scratch *s, int dir)
{
	/* rtuple is free here: reuse it for the wanted tuple. */
	ct_reverse(&s->rtuple, dir == 1 ? &s->conn.peer : &s->orig);
	if (nat_rewrite(skb, ps, key->nw_proto, &s->tuple, &s->rtuple) < 0)
		return -DROP_REWRITE;
	return 0;
}

/* nat_patch_csum moves the 16-bit checksum at csum_off by the change of
 * len bytes old → nv, and the ICMP checksum by the change of that field
 * (the field is inside the ICMP message). A zero UDP checksum (none)
 * stays zero. */
static __always_inline int nat_patch_csum(struct __sk_buff *skb, __u32 icmp_csum, __u32 csum_off,
					  __be32 old, __be32 nv, __u32 len, int udp)
{
	__be16 c0, c1;

	if (!csum_off)
		return 0;
	if (bpf_skb_load_bytes(skb, csum_off, &c0, 2) < 0)
		return -1;
	if (udp && c0 == 0)
		return 0;
	if (bpf_l3_csum_replace(skb, csum_off, old, nv, len) < 0)
		return -1;
	if (bpf_skb_load_bytes(skb, csum_off, &c1, 2) < 0)
		return -1;
	return bpf_l4_csum_replace(skb, icmp_csum, c0, c1, 2);
}

/* nat_fix_inner rewrites len (2 or 4) bytes at off inside an ICMP error's
 * embedded packet to new: the checksums at csum_a and csum_b (0: none)
 * that cover them move with them, and so does the ICMP checksum, which
 * covers all of it without a pseudo header. */
static __always_inline int nat_fix_inner(struct __sk_buff *skb, __u32 icmp_csum, __u32 off, const void *new,
					 __u32 len, __u32 csum_a, __u32 csum_b, int b_udp)
{
	__be32 old = 0, nv = 0;

	if (bpf_skb_load_bytes(skb, off, &old, len) < 0)
		return -1;
	__builtin_memcpy(&nv, new, len);
	if (old == nv)
		return 0;
	if (nat_patch_csum(skb, icmp_csum, csum_a, old, nv, len, 0) < 0 ||
	    nat_patch_csum(skb, icmp_csum, csum_b, old, nv, len, b_udp) < 0)
		return -1;
	if (bpf_l4_csum_replace(skb, icmp_csum, old, nv, len) < 0)
		return -1;
	return bpf_skb_store_bytes(skb, off, &nv, len, 0);
}

/* nat_related translates an ICMPv4 error about a translated connection
 * as Open vSwitch's userspace conntrack does (reverse_nat_packet): the
 * embedded packet back to what its sender sent (dir 2: the error comes
 * from the reply side, the embedded packet was an original-direction one
 * we translated) or on to what its receiver got (dir 1), and the outer
 * header's address of the translated side with it; the embedded IP and
 * L4 checksums and the ICMP checksum patched. IPv6 errors are reported
 * +rel untranslated (returns 1: no +snat/+dnat). A global function: it
 * runs below ct_action with its own stack. */
__noinline int nat_related(struct __sk_buff *skb, struct parse_state *ps, const struct flow_key *key,
			   struct ct_scratch *s, int dir)
{
	const struct ct_tuple *want;
	__u32 icmp_csum, in_off, in_l4, csum_off = 0;
	__u8 ihl, proto;
	int snat, dnat, pseudo = 0;

	if (!skb || !ps || !key || !s)
		return -DROP_BAD_ACTION;
	if (ps->l3 != L3_IPV4 || !ps->l4_off)
		return 1;
	snat = !!(s->conn.flags & CTF_SNAT);
	dnat = !!(s->conn.flags & CTF_DNAT);
	/* The embedded packet as it should look: the original tuple (dir 2)
	 * or the reply tuple (dir 1). */
	want = dir == 2 ? &s->orig : &s->conn.peer;
	icmp_csum = ps->l4_off + 2;
	in_off = ps->l4_off + 8;
	if (bpf_skb_load_bytes(skb, in_off, &ihl, 1) < 0 ||
	    bpf_skb_load_bytes(skb, in_off + 9, &proto, 1) < 0)
		return -DROP_REWRITE;
	ihl = (ihl & 0xf) * 4;
	in_l4 = in_off + ihl;
	if (proto == IPPROTO_UDP)
		pseudo = 2, csum_off = in_l4 + 6;
	else if (proto == IPPROTO_TCP)
		pseudo = 1, csum_off = in_l4 + 16;
	if (csum_off && skb->len < csum_off + 2)
		csum_off = 0; /* the error did not carry it */

	/* Outer header: the side the translation hid. */
	if ((dir == 2 && snat) || (dir == 1 && dnat)) {
		if (set_ipv4_addr(skb, ps, IPPROTO_ICMP, offsetof(struct iphdr, daddr),
				  dir == 2 ? want->src[0] : want->dst[0]) < 0)
			return -DROP_REWRITE;
	}
	if ((dir == 2 && dnat) || (dir == 1 && snat)) {
		if (set_ipv4_addr(skb, ps, IPPROTO_ICMP, offsetof(struct iphdr, saddr),
				  dir == 2 ? want->dst[0] : want->src[0]) < 0)
			return -DROP_REWRITE;
	}
	/* Embedded header: addresses (its IP checksum, and its L4 checksum
	 * through the pseudo header), then ports (L4 checksum). */
	if (nat_fix_inner(skb, icmp_csum, in_off + 12, &want->src[0], 4, in_off + 10, csum_off, pseudo == 2) < 0 ||
	    nat_fix_inner(skb, icmp_csum, in_off + 16, &want->dst[0], 4, in_off + 10, csum_off, pseudo == 2) < 0)
		return -DROP_REWRITE;
	if (proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_SCTP) {
		if (nat_fix_inner(skb, icmp_csum, in_l4, &want->sport, 2, 0, csum_off, pseudo == 2) < 0 ||
		    nat_fix_inner(skb, icmp_csum, in_l4 + 2, &want->dport, 2, 0, csum_off, pseudo == 2) < 0)
			return -DROP_REWRITE;
	}
	return 0;
}

#endif
