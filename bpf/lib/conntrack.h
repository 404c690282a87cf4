/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* conntrack.h — the fast path's connection tracker: Open vSwitch's ct().
 *
 * nagare keeps its own table (the conntrack map), not the kernel's
 * nf_conntrack reached through the bpf_skb_ct_* kfuncs: packets the fast
 * path redirects at tc ingress never pass netfilter, so the kernel's TCP
 * state machine and timeouts would never run for them, the kfuncs do not
 * translate packets (bpf_ct_set_nat_info only records a translation),
 * ct_label cannot be written, and a lookup + release costs more than ours
 * (docs/conntrack.md has the numbers and the command).
 *
 * A connection is two entries of one hash map: CT_CONN keyed by its
 * original direction's tuple holds the state; CT_REPLY keyed by its reply
 * direction's tuple (after NAT) names the CT_CONN. A packet in the
 * original direction costs one lookup, a reply two. Tuples carry the zone,
 * so zones never see each other's connections.
 *
 * States follow Open vSwitch's userspace conntrack (lib/conntrack.c,
 * conntrack-tcp.c), which a differential test compares against:
 *   - no connection: +trk+new if the packet may start one (TCP: no
 *     invalid flag combination, not SYN+ACK; ICMP: an echo request), else
 *     +trk+inv; created only by a commit.
 *   - original direction: +est once a reply has been seen, else +new;
 *     reply direction: +est+rpl.
 *   - an ICMP error whose embedded packet belongs to a connection:
 *     +rel (+rpl when the error travels in the reply direction).
 *   - +inv: not IP, a fragment (Open vSwitch reassembles; the fast path
 *     cannot), a truncated header, invalid TCP flags, an ICMP error of no
 *     connection, ICMP other than echo and errors.
 *   - +snat/+dnat: the ct action translated the packet.
 * Timeouts are the kernel nf_conntrack's defaults (ct_config, written by
 * userspace; pkg/datapath.ConntrackTimeouts). An entry whose deadline
 * passed is treated as absent; userspace's sweep deletes it
 * ((*Datapath).SweepConntrack).
 *
 * The table is preallocated and never evicts: a commit into a full table
 * drops the packet (DROP_CT_TABLE_FULL) while established connections keep
 * flowing. Each ingress port may hold ct_settings.port_max live connections
 * (DROP_CT_PORT_BUDGET past it), so one pod cannot take another's.
 */
#ifndef NAGARE_CONNTRACK_H
#define NAGARE_CONNTRACK_H

#include "maps.h"
#include "parse.h"
#include "recirc.h"

#define CT_DEFAULT_MAX 131072 /* entries: two per connection; userspace may resize */
#define CT_LAYOUT 1           /* ct_settings.layout: the entry layout of this build */

/* ct_state bits (Open vSwitch's). */
#define CS_NEW (1 << 0)
#define CS_EST (1 << 1)
#define CS_REL (1 << 2)
#define CS_RPL (1 << 3)
#define CS_INV (1 << 4)
#define CS_TRK (1 << 5)
#define CS_SNAT (1 << 6)
#define CS_DNAT (1 << 7)

/* ACT_CT: flags, arg16 = zone, arg32 = mark; u32 at 8 = mark mask,
 * nat kind at 12, nat flags at 13, port min/max (host order) at 16/18. */
#define CT_COMMIT (1 << 0)
#define CT_FORCE (1 << 1)
#define CT_NAT (1 << 2)   /* nat present (kind NAT_NONE: the connection's own) */
#define CT_LABEL (1 << 3) /* an ACT_CT_EXT label pair precedes */

#define NAT_NONE 0
#define NAT_SRC 1
#define NAT_DST 2

/* ACT_CT_EXT flags: which part of the next ACT_CT this slot holds. */
#define CT_EXT_LABEL 1      /* ip6 = label */
#define CT_EXT_LABEL_MASK 2 /* ip6 = label mask */
#define CT_EXT_NAT_MIN 3    /* ip6 = lowest address (IPv4 in [0]) */
#define CT_EXT_NAT_MAX 4    /* ip6 = highest address */

struct ct_tuple {
	__be32 src[4];  /* IPv4 in [0] */
	__be32 dst[4];
	__be16 sport;   /* ICMP echo: the id (both ports) */
	__be16 dport;
	__u16 zone;
	__u8 proto;
	__u8 family;    /* 4 or 6 */
};

enum ct_kind { CT_CONN = 1, CT_REPLY = 2 };

/* ct_entry.flags */
#define CTF_SEEN_REPLY (1 << 0)
#define CTF_SNAT (1 << 1)
#define CTF_DNAT (1 << 2)
#define CTF_FIN_ORIG (1 << 3)  /* older builds; now close_word CT_CW_FIN(0) */
#define CTF_FIN_REPLY (1 << 4) /* older builds; now close_word CT_CW_FIN(1) */

enum ct_tcp_state {
	TCP_CT_NONE = 0,
	TCP_CT_SYN_SENT = 1,
	TCP_CT_SYN_RECV = 2,
	TCP_CT_ESTABLISHED = 3,
	TCP_CT_FIN_WAIT = 4,
	TCP_CT_CLOSE_WAIT = 5,
	TCP_CT_TIME_WAIT = 6,
	TCP_CT_CLOSE = 7,
};

struct ct_entry {
	struct ct_tuple peer; /* CT_CONN: the reply tuple; CT_REPLY: the original tuple */
	__u64 expires;        /* bpf_ktime_get_coarse_ns() deadline (CLOCK_MONOTONIC_COARSE) */
	__u32 mark;
	__u32 in_port;        /* the port whose packet committed it (budget) */
	__u8 label[16];
	__u8 kind;            /* enum ct_kind */
	__u8 flags;           /* CTF_*: set at commit, but CTF_SEEN_REPLY */
	__u8 tcp_state;       /* enum ct_tcp_state; closes: close_word */
	__u8 pad;
	/* A side's FIN (fin[reply]), a reset, and whether the connection
	 * stopped counting against its port's budget (closed, or deleted),
	 * set by atomic ORs of the word: the two sides of a connection are
	 * often handled on two CPUs at once (the client's FIN and the
	 * server's cross), and a plain read-modify-write would lose one of
	 * them, leaving the connection half closed (its tuple taken) for
	 * minutes. Entries of older builds have CTF_FIN_ORIG / CTF_FIN_REPLY
	 * in flags instead. */
	__u32 close_word; /* CT_CW_*: bytes fin[orig], fin[reply], rst, released */
};

/* close_word's bits: a byte each (little endian, as BPF on x86). */
#define CT_CW_FIN(reply) (1u << ((reply) ? 8 : 0))
#define CT_CW_RST (1u << 16)
#define CT_CW_RELEASED (1u << 24)

/* ct_tcp_closed: both sides closed (both FINs seen: TIME_WAIT) or reset
 * (CLOSE). Decided by close_word, which no CPU's update loses;
 * tcp_state is what is displayed and may lag one racing update behind. */
static __always_inline int ct_fin_seen(const struct ct_entry *c, int reply)
{
	return (c->close_word & CT_CW_FIN(reply)) || (c->flags & (reply ? CTF_FIN_REPLY : CTF_FIN_ORIG));
}

static __always_inline int ct_tcp_closed(const struct ct_entry *c)
{
	return (c->close_word & CT_CW_RST) || (ct_fin_seen(c, 0) && ct_fin_seen(c, 1)) || c->tcp_state == TCP_CT_TIME_WAIT ||
	       c->tcp_state == TCP_CT_CLOSE;
}

/* Timeouts in seconds, by what the connection has seen. */
enum ct_timeout {
	CT_TO_TCP_SYN_SENT = 0,
	CT_TO_TCP_SYN_RECV = 1,
	CT_TO_TCP_EST = 2,
	CT_TO_TCP_FIN_WAIT = 3,
	CT_TO_TCP_CLOSE_WAIT = 4,
	CT_TO_TCP_TIME_WAIT = 5,
	CT_TO_TCP_CLOSE = 6,
	CT_TO_UDP_FIRST = 7,
	CT_TO_UDP_REPLIED = 8,
	CT_TO_ICMP = 9,
	CT_TO_OTHER = 10,
	CT_TO__MAX = 12,
};

struct ct_config {
	__u32 timeout[CT_TO__MAX]; /* seconds */
	__u32 port_max;            /* live connections per ingress port, 0 = no limit */
	__u32 layout;              /* CT_LAYOUT once userspace has written it; the
	                            * last word in every release (migrate.go) */
};

/* Per ingress port: connections committed and freed by the fast path (a
 * TCP connection closed, a forced or reopened connection replaces the old
 * one, an expired one is reaped: ct_release, once per connection),
 * atomically; ct_released: those userspace deleted (sweep, flush) and the
 * fast path had not released, written by userspace only. A map of its
 * own, so that no writer ever overwrites another's count: live =
 * committed - freed - released. */
struct ct_port {
	__u64 committed;
	__u64 freed;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} ct_released SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, CT_DEFAULT_MAX);
	__type(key, struct ct_tuple);
	__type(value, struct ct_entry);
} conntrack SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ct_config);
} ct_settings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct ct_port);
} ct_ports SEC(".maps");

/* The tracker's epoch: [0] moves (atomically) whenever the fast path
 * closes or deletes a connection, [1] whenever userspace deletes entries
 * or changes the timeouts (pkg/datapath bumpCTEpoch, one writer). A
 * connection's shortcut (shortcut.h) that checked its entry in this
 * coarse-clock tick, at this epoch, knows the entry is as it saw it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} ct_epoch SEC(".maps");

static __always_inline void ct_epoch_bump(void)
{
	__u32 zero = 0;
	__u64 *e = bpf_map_lookup_elem(&ct_epoch, &zero);

	if (e)
		__sync_fetch_and_add(e, 1);
}

/* ct_epoch_now: both halves in one number; both only grow, so any bump
 * changes it. */
static __always_inline __u64 ct_epoch_now(void)
{
	__u32 zero = 0, one = 1;
	__u64 *a = bpf_map_lookup_elem(&ct_epoch, &zero), *b = bpf_map_lookup_elem(&ct_epoch, &one);

	return (a ? READ_ONCE(*a) : 0) + (b ? READ_ONCE(*b) : 0);
}

/* ct_release stops connection c counting against its port's budget, once
 * however many CPUs close or delete it at the same moment: a closed TCP
 * connection (its TIME_WAIT keeps the entry 120 s) or a deleted one. */
static __always_inline void ct_release(struct ct_entry *c)
{
	struct ct_port *p;

	if ((c->close_word & CT_CW_RELEASED) ||
	    (__sync_fetch_and_or(&c->close_word, CT_CW_RELEASED) & CT_CW_RELEASED))
		return;
	p = bpf_map_lookup_elem(&ct_ports, &c->in_port);
	if (p)
		__sync_fetch_and_add(&p->freed, 1);
}

/* Per-CPU working space, by mode (see recirc.h for why by mode): the
 * parts of a ct action that precede it (ACT_CT_EXT), and the tuples and
 * entries being built, which do not fit on the stack under run_actions. */
struct ct_scratch {
	__u8 label[16];
	__u8 label_mask[16];
	__be32 nat_min[4];
	__be32 nat_max[4];
	struct ct_tuple tuple;  /* the packet's (or an ICMP error's inner) tuple */
	struct ct_tuple orig;   /* the connection's original tuple */
	struct ct_tuple rtuple; /* ... its reply tuple being chosen */
	struct ct_entry conn;
	struct ct_entry alias;
	__u8 hdr[48];           /* an ICMP error's embedded headers */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct ct_scratch);
} ct_scratch SEC(".maps");

static __always_inline void ct_reverse(struct ct_tuple *r, const struct ct_tuple *t)
{
	__builtin_memcpy(r->src, t->dst, 16);
	__builtin_memcpy(r->dst, t->src, 16);
	r->sport = t->dport;
	r->dport = t->sport;
	r->zone = t->zone;
	r->proto = t->proto;
	r->family = t->family;
}

#include "nat.h"

/* ct_ext keeps what an ACT_CT_EXT slot holds for the ACT_CT after it. */
static __always_inline void ct_ext(const struct action *a, int mode)
{
	__u32 idx = mode & 1;
	struct ct_scratch *s = bpf_map_lookup_elem(&ct_scratch, &idx);

	if (!s)
		return;
	switch (a->flags) {
	case CT_EXT_LABEL:
		__builtin_memcpy(s->label, a->ip6, 16);
		break;
	case CT_EXT_LABEL_MASK:
		__builtin_memcpy(s->label_mask, a->ip6, 16);
		break;
	case CT_EXT_NAT_MIN:
		__builtin_memcpy(s->nat_min, a->ip6, 16);
		break;
	case CT_EXT_NAT_MAX:
		__builtin_memcpy(s->nat_max, a->ip6, 16);
		break;
	}
}

/* ct_clear forgets the packet's tracking state (Open vSwitch's ct_clear):
 * the key's ct words except recirc_id and dp_hash. */
static __always_inline void ct_clear(struct flow_key *key)
{
	__u64 *w = (__u64 *)key;

	key->ct_mark = 0;
	w[15] = 0;
	w[16] = 0;
	w[17] = 0;
	w[18] = 0;
}


static __always_inline __u64 ct_timeout(const struct ct_config *cfg, __u32 which)
{
	__u32 sec = which < CT_TO__MAX ? cfg->timeout[which] : 0;

	return (__u64)(sec ? sec : 30) * 1000000000ull;
}

#define TH_FIN 0x01
#define TH_SYN 0x02
#define TH_RST 0x04
#define TH_PSH 0x08
#define TH_ACK 0x10
#define TH_URG 0x20

/* tcp_invalid_flags is Open vSwitch's (conntrack-tcp.c), from the kernel. */
static __always_inline int tcp_invalid_flags(__u16 f)
{
	if (f & TH_SYN) {
		if (f & (TH_RST | TH_FIN))
			return 1;
	} else if (!(f & (TH_ACK | TH_RST))) {
		return 1;
	}
	if (!(f & TH_ACK) && (f & (TH_FIN | TH_PSH | TH_URG)))
		return 1;
	return 0;
}

/* ct_tcp_update moves a connection's TCP state on a packet of direction
 * reply with flags f and returns the timeout that state keeps. The
 * kernel's machine reduced to what timeouts and closes need: the first
 * FIN of either side starts fin_wait, the other side then is in
 * close_wait until its own FIN (time_wait); an RST closes. */
static __always_inline __u32 ct_tcp_update(struct ct_entry *c, int reply, __u16 f)
{
	int fin_orig, fin_reply;

	if (f & TH_RST) {
		__sync_fetch_and_or(&c->close_word, CT_CW_RST);
		ct_epoch_bump();
	} else if ((f & TH_FIN) && !(c->close_word & CT_CW_FIN(reply))) {
		__sync_fetch_and_or(&c->close_word, CT_CW_FIN(reply));
		ct_epoch_bump();
	}
	if (c->close_word & CT_CW_RST) {
		c->tcp_state = TCP_CT_CLOSE;
		ct_release(c);
		return CT_TO_TCP_CLOSE;
	}
	fin_orig = ct_fin_seen(c, 0);
	fin_reply = ct_fin_seen(c, 1);
	if (fin_orig && fin_reply) {
		c->tcp_state = TCP_CT_TIME_WAIT;
		ct_release(c);
		return CT_TO_TCP_TIME_WAIT;
	}
	if (fin_orig || fin_reply) {
		/* A packet of the side that has not closed yet. */
		int fin_side = fin_reply;

		if (c->tcp_state == TCP_CT_FIN_WAIT && reply != fin_side) {
			c->tcp_state = TCP_CT_CLOSE_WAIT;
			return CT_TO_TCP_CLOSE_WAIT;
		}
		if (c->tcp_state == TCP_CT_CLOSE_WAIT)
			return CT_TO_TCP_CLOSE_WAIT;
		c->tcp_state = TCP_CT_FIN_WAIT;
		return CT_TO_TCP_FIN_WAIT;
	}
	switch (c->tcp_state) {
	case TCP_CT_SYN_SENT:
		if (reply) {
			c->tcp_state = TCP_CT_SYN_RECV;
			return CT_TO_TCP_SYN_RECV;
		}
		return CT_TO_TCP_SYN_SENT;
	case TCP_CT_SYN_RECV:
		if (!reply && (f & TH_ACK)) {
			c->tcp_state = TCP_CT_ESTABLISHED;
			return CT_TO_TCP_EST;
		}
		return CT_TO_TCP_SYN_RECV;
	case TCP_CT_NONE:
		if ((f & TH_SYN) && !(f & TH_ACK)) {
			c->tcp_state = TCP_CT_SYN_SENT;
			return CT_TO_TCP_SYN_SENT;
		}
		/* Picked up mid-stream, as Open vSwitch does. */
		c->tcp_state = TCP_CT_ESTABLISHED;
		return CT_TO_TCP_EST;
	case TCP_CT_CLOSE:
		/* Reset: late packets do not bring it back (a new SYN
		 * replaces it, in the caller). */
		return CT_TO_TCP_CLOSE;
	}
	if (c->tcp_state != TCP_CT_ESTABLISHED) /* not written on every packet (ct_action) */
		c->tcp_state = TCP_CT_ESTABLISHED;
	return CT_TO_TCP_EST;
}

static __always_inline __u32 ct_update(struct ct_entry *c, __u8 proto, int reply, __u16 tcp_flags)
{
	/* The only flag set after commit, always the same bit: racing
	 * read-modify-writes agree. */
	if (reply && !(c->flags & CTF_SEEN_REPLY))
		c->flags |= CTF_SEEN_REPLY;
	switch (proto) {
	case IPPROTO_TCP:
		return ct_tcp_update(c, reply, tcp_flags);
	case IPPROTO_UDP:
		return (c->flags & CTF_SEEN_REPLY) ? CT_TO_UDP_REPLIED : CT_TO_UDP_FIRST;
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		return CT_TO_ICMP;
	}
	return CT_TO_OTHER;
}

/* ct_nat_state is the +snat/+dnat of a translated packet: the translation
 * done to this packet, as Open vSwitch reports it, not the connection's
 * kind. A reply of a DNAT connection has its source rewritten (+snat), a
 * reply of an SNAT connection its destination (+dnat). */
static __always_inline __u8 ct_nat_state(__u8 conn_flags, int reply)
{
	__u8 snat = (conn_flags & CTF_SNAT) ? CS_SNAT : 0, dnat = (conn_flags & CTF_DNAT) ? CS_DNAT : 0;

	if (reply)
		return (snat ? CS_DNAT : 0) | (dnat ? CS_SNAT : 0);
	return snat | dnat;
}

/* ct_port_admit: may port in_port commit one more connection? */
static __always_inline struct ct_port *ct_port_of(__u32 in_port)
{
	struct ct_port *p = bpf_map_lookup_elem(&ct_ports, &in_port), fresh = {};

	if (p)
		return p;
	bpf_map_update_elem(&ct_ports, &in_port, &fresh, BPF_NOEXIST);
	return bpf_map_lookup_elem(&ct_ports, &in_port);
}

/* ct_free deletes the connection s->conn keyed by s->orig (and its reply
 * entry), counting it freed for its port. */
static __always_inline void ct_free(struct ct_scratch *s)
{
	struct ct_entry *e = bpf_map_lookup_elem(&conntrack, &s->orig);

	if (e && e->kind == CT_CONN)
		ct_release(e);
	bpf_map_delete_elem(&conntrack, &s->conn.peer);
	bpf_map_delete_elem(&conntrack, &s->orig);
	ct_epoch_bump();
}

enum ct_tuple_ret { TUPLE_OK = 0, TUPLE_INV = 1, TUPLE_RELATED = 2 };

#define ICMP_ECHOREPLY_T 0
#define ICMP_DEST_UNREACH_T 3
#define ICMP_ECHO_T 8
#define ICMP_TIME_EXCEEDED_T 11
#define ICMP_PARAMPROB_T 12
#define ICMPV6_ECHO_REQUEST_T 128
#define ICMPV6_ECHO_REPLY_T 129

/* ct_inner_tuple reads the packet an ICMP error at l4 embeds into t:
 * the tuple of that packet, as it went. */
static __always_inline int ct_inner_tuple(struct __sk_buff *skb, __u32 l4, int v6, struct ct_tuple *t,
					  __u8 *hdr)
{
	__u32 off = l4 + 8, l4in;
	__u8 proto;

	if (!v6) {
		struct iphdr *ip = (struct iphdr *)hdr;

		if (bpf_skb_load_bytes(skb, off, hdr, sizeof(*ip)) < 0 || ip->ihl < 5)
			return TUPLE_INV;
		t->src[0] = ip->saddr;
		t->dst[0] = ip->daddr;
		proto = ip->protocol;
		l4in = off + ip->ihl * 4;
	} else {
		struct ipv6hdr *ip6 = (struct ipv6hdr *)hdr;

		if (bpf_skb_load_bytes(skb, off, hdr, sizeof(*ip6)) < 0)
			return TUPLE_INV;
		__builtin_memcpy(t->src, &ip6->saddr, 16);
		__builtin_memcpy(t->dst, &ip6->daddr, 16);
		proto = ip6->nexthdr; /* extension headers in errors: not followed */
		l4in = off + sizeof(*ip6);
	}
	t->proto = proto;
	t->sport = t->dport = 0;
	if (proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_SCTP) {
		if (bpf_skb_load_bytes(skb, l4in, hdr, 4) < 0)
			return TUPLE_INV;
		__builtin_memcpy(&t->sport, hdr, 2);
		__builtin_memcpy(&t->dport, hdr + 2, 2);
	} else if (proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6) {
		if (bpf_skb_load_bytes(skb, l4in, hdr, 8) < 0)
			return TUPLE_INV;
		if (hdr[0] != (v6 ? ICMPV6_ECHO_REQUEST_T : ICMP_ECHO_T) &&
		    hdr[0] != (v6 ? ICMPV6_ECHO_REPLY_T : ICMP_ECHOREPLY_T))
			return TUPLE_INV;
		__builtin_memcpy(&t->sport, hdr + 4, 2);
		t->dport = t->sport;
	}
	return TUPLE_RELATED;
}

/* ct_packet_tuple fills t with the packet's tuple (zone aside). */
static __always_inline int ct_packet_tuple(struct __sk_buff *skb, const struct parse_state *ps,
					   const struct flow_key *key, struct ct_tuple *t, int *valid_new,
					   __u8 *hdr)
{
	int v6 = ps->l3 == L3_IPV6;
	__u8 type;

	*valid_new = 1;
	if ((ps->l3 != L3_IPV4 && !v6) || key->nw_frag)
		return TUPLE_INV;
	t->family = v6 ? 6 : 4;
	__builtin_memcpy(t->src, key->ip_src, 16);
	__builtin_memcpy(t->dst, key->ip_dst, 16);
	t->proto = key->nw_proto;
	t->sport = t->dport = 0;
	switch (key->nw_proto) {
	case IPPROTO_TCP:
		if (!ps->l4_off)
			return TUPLE_INV;
		if (tcp_invalid_flags(bpf_ntohs(key->tcp_flags)))
			return TUPLE_INV;
		if ((bpf_ntohs(key->tcp_flags) & (TH_SYN | TH_ACK)) == (TH_SYN | TH_ACK))
			*valid_new = 0;
		/* fall through */
	case IPPROTO_UDP:
	case IPPROTO_SCTP:
		if (!ps->l4_off)
			return TUPLE_INV;
		t->sport = key->tp_src;
		t->dport = key->tp_dst;
		return TUPLE_OK;
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		if (!ps->l4_off)
			return TUPLE_INV;
		type = bpf_ntohs(key->tp_src);
		if (type == (v6 ? ICMPV6_ECHO_REQUEST_T : ICMP_ECHO_T) ||
		    type == (v6 ? ICMPV6_ECHO_REPLY_T : ICMP_ECHOREPLY_T)) {
			if (bpf_skb_load_bytes(skb, ps->l4_off + 4, &t->sport, 2) < 0)
				return TUPLE_INV;
			t->dport = t->sport;
			*valid_new = type == (v6 ? ICMPV6_ECHO_REQUEST_T : ICMP_ECHO_T);
			return TUPLE_OK;
		}
		if (v6 ? (type >= 1 && type <= 4) :
			 (type == ICMP_DEST_UNREACH_T || type == ICMP_TIME_EXCEEDED_T || type == ICMP_PARAMPROB_T)) {
			int r = ct_inner_tuple(skb, ps->l4_off, v6, t, hdr);

			t->family = v6 ? 6 : 4;
			return r;
		}
		return TUPLE_INV;
	}
	return TUPLE_OK;
}

/* ct_lookup finds t's connection: fills s->orig and s->conn, sets *conn
 * to its entry (the original direction's), returns 1 (original
 * direction), 2 (reply direction) or 0. Expired entries are not found. */
static __always_inline int ct_lookup(struct ct_scratch *s, const struct ct_tuple *t, __u64 now,
				     struct ct_entry **conn)
{
	struct ct_entry *e = bpf_map_lookup_elem(&conntrack, t);
	int dir = 1;

	if (!e)
		return 0;
	if (e->kind == CT_REPLY) {
		__builtin_memcpy(&s->orig, &e->peer, sizeof(s->orig));
		e = bpf_map_lookup_elem(&conntrack, &s->orig);
		if (!e)
			return 0;
		dir = 2;
	} else {
		__builtin_memcpy(&s->orig, t, sizeof(s->orig));
	}
	if (e->kind != CT_CONN || e->expires < now)
		return 0;
	__builtin_memcpy(&s->conn, e, sizeof(s->conn));
	*conn = e;
	return dir;
}

/* ct_write_key puts what the next pass matches on into the key. */
static __always_inline void ct_write_key(struct flow_key *key, __u8 state, __u16 zone,
					 const struct ct_entry *c, const struct ct_tuple *orig)
{
	ct_clear(key);
	key->ct_state = state;
	key->ct_zone = zone;
	if (c) {
		key->ct_mark = c->mark;
		__builtin_memcpy(key->ct_label, c->label, 16);
	}
	if (!orig)
		return;
	key->ct_nw_proto = orig->proto;
	if (orig->family == 4) {
		key->ct_nw_src = orig->src[0];
		key->ct_nw_dst = orig->dst[0];
	}
	if (orig->proto == IPPROTO_ICMP || orig->proto == IPPROTO_ICMPV6) {
		/* Open vSwitch: an ICMP tuple's "ports" are type and code. */
		key->ct_tp_src = bpf_htons(orig->family == 6 ? ICMPV6_ECHO_REQUEST_T : ICMP_ECHO_T);
		key->ct_tp_dst = 0;
	} else {
		key->ct_tp_src = orig->sport;
		key->ct_tp_dst = orig->dport;
	}
}

/* ct_set_mark_label applies a commit's mark and label to c; 1 when that
 * changed them. Unchanged fields are not written (see ct_action). */
static __always_inline int ct_set_mark_label(struct ct_entry *c, const struct action *a,
					     const struct ct_scratch *s)
{
	__u32 mmask = *(const __u32 *)&a->u64[0], mark;
	int i, changed = 0;

	if (mmask) {
		mark = (c->mark & ~mmask) | (a->arg32 & mmask);
		if (mark != c->mark) {
			c->mark = mark;
			changed = 1;
		}
	}
	if (a->flags & CT_LABEL) {
#pragma unroll
		for (i = 0; i < 16; i++) {
			__u8 b = (c->label[i] & ~s->label_mask[i]) | (s->label[i] & s->label_mask[i]);

			if (b != c->label[i]) {
				c->label[i] = b;
				changed = 1;
			}
		}
	}
	return changed;
}

/* ct_commit creates the connection of s->tuple (original direction),
 * with the translation a's NAT asks for. 0 or -DROP_*. */
static __always_inline int ct_commit(struct __sk_buff *skb, struct ct_scratch *s, const struct action *a,
				     __u32 in_port, const struct ct_config *cfg, __u64 now, __u16 tcp_flags)
{
	struct ct_port *p = NULL;
	__u32 to;
	int err, try;

	if (cfg->port_max) {
		__u64 *rel = bpf_map_lookup_elem(&ct_released, &in_port);

		p = ct_port_of(in_port);
		/* Signed: userspace deletes an entry the fast path is
		 * releasing at the same moment now and then, and counts it
		 * too; the budget may then be one too lax, never stuck. */
		if (p && (__s64)(p->committed - p->freed - (rel ? *rel : 0)) >= (__s64)cfg->port_max)
			return -DROP_CT_PORT_BUDGET;
	}
	__builtin_memcpy(&s->orig, &s->tuple, sizeof(s->orig));
	__builtin_memset(&s->conn, 0, sizeof(s->conn));
	s->conn.kind = CT_CONN;
	s->conn.in_port = in_port;
	ct_set_mark_label(&s->conn, a, s);
	to = ct_update(&s->conn, s->orig.proto, 0, tcp_flags);
	s->conn.expires = now + ct_timeout(cfg, to);
	__builtin_memset(&s->alias, 0, sizeof(s->alias));
	__builtin_memcpy(&s->alias.peer, &s->orig, sizeof(s->alias.peer));
	s->alias.kind = CT_REPLY;

	/* Twice at most: another CPU may commit a connection with the same
	 * reply tuple between nat_choose's look and the insert (a client's
	 * SYNs to an endpoint and to its Service from one port, at once);
	 * with nat the second choice sees that tuple held and moves. */
	for (try = 0; try < 2; try++) {
		ct_reverse(&s->rtuple, &s->orig);
		s->conn.flags &= ~(CTF_SNAT | CTF_DNAT);
		if (a->flags & CT_NAT) {
			err = nat_choose(s, a);
			if (err < 0)
				return err;
		}
		__builtin_memcpy(&s->conn.peer, &s->rtuple, sizeof(s->conn.peer));
		/* An expired connection (or a stale reply entry) with the
		 * same tuple is replaced. The reply tuple was checked by
		 * nat_choose. */
		ct_reap(&s->orig, now, 1);
		if (!(s->conn.flags & (CTF_SNAT | CTF_DNAT)))
			ct_reap(&s->rtuple, now, 1);
		err = bpf_map_update_elem(&conntrack, &s->orig, &s->conn, BPF_NOEXIST);
		if (err)
			return err == -17 /* EEXIST: another CPU just made it */ ? 0 : -DROP_CT_TABLE_FULL;
		err = bpf_map_update_elem(&conntrack, &s->rtuple, &s->alias, BPF_NOEXIST);
		if (!err)
			break;
		bpf_map_delete_elem(&conntrack, &s->orig);
		if (err != -17)
			return -DROP_CT_TABLE_FULL;
		if (!(a->flags & CT_NAT) || try)
			return -DROP_NAT_NO_PORT;
	}
	if (!p)
		p = ct_port_of(in_port);
	if (p)
		__sync_fetch_and_add(&p->committed, 1);
	return 0;
}

/* ct_action runs one ct action (a) on the packet: Open vSwitch's ct(),
 * the result in the key's ct words for the next pass. Returns 0 or
 * -DROP_*. A global function: verified once, on its own stack. */
__noinline int ct_action(struct __sk_buff *skb, struct parse_state *ps, struct flow_key *key,
			 const struct action *a, int mode)
{
	__u32 idx = mode & 1, zero = 0, to;
	struct ct_scratch *s;
	struct ct_config *cfg;
	struct ct_entry *e;
	__u16 zone, tcp_flags;
	__u8 state = CS_TRK;
	__u64 now;
	int kind, dir, valid_new, err, ret = 0;

	if (!skb || !ps || !key || !a)
		return -DROP_BAD_ACTION;
	s = bpf_map_lookup_elem(&ct_scratch, &idx);
	cfg = bpf_map_lookup_elem(&ct_settings, &zero);
	if (!s || !cfg)
		return -DROP_BAD_ACTION;
	zone = a->arg16;
	tcp_flags = bpf_ntohs(key->tcp_flags);
	now = bpf_ktime_get_coarse_ns();

	__builtin_memset(&s->tuple, 0, sizeof(s->tuple));
	kind = ct_packet_tuple(skb, ps, key, &s->tuple, &valid_new, s->hdr);
	s->tuple.zone = zone;
	if (kind == TUPLE_INV) {
		ct_write_key(key, CS_TRK | CS_INV, zone, NULL, NULL);
		goto out;
	}
	if (kind == TUPLE_RELATED) {
		/* The error travels against the embedded packet: its
		 * connection is found by the embedded tuple reversed, and
		 * in the reply direction when that is the reply tuple. */
		ct_reverse(&s->rtuple, &s->tuple);
		__builtin_memcpy(&s->tuple, &s->rtuple, sizeof(s->tuple));
		dir = ct_lookup(s, &s->tuple, now, &e);
		if (!dir) {
			ct_write_key(key, CS_TRK | CS_INV, zone, NULL, NULL);
			goto out;
		}
		state |= CS_REL | (dir == 2 ? CS_RPL : 0);
		if ((a->flags & CT_COMMIT) && ct_set_mark_label(e, a, s))
			__builtin_memcpy(&s->conn, e, sizeof(s->conn));
		if ((a->flags & CT_NAT) && (s->conn.flags & (CTF_SNAT | CTF_DNAT))) {
			ps->dirty = 1;
			err = nat_related(skb, ps, key, s, dir);
			if (err < 0)
				return err;
			if (err == 0)
				state |= ct_nat_state(s->conn.flags, dir == 2);
		}
		ct_write_key(key, state, zone, &s->conn, &s->orig);
		goto out;
	}

	dir = ct_lookup(s, &s->tuple, now, &e);
	if (dir) {
		if (((a->flags & (CT_COMMIT | CT_FORCE)) == (CT_COMMIT | CT_FORCE) && dir == 2) ||
		    (s->orig.proto == IPPROTO_TCP && ct_tcp_closed(e) && (tcp_flags & (TH_SYN | TH_ACK)) == TH_SYN)) {
			/* force: a connection seen from its reply side ends
			 * and starts anew from this side; a SYN on a closed
			 * TCP connection starts a new one (Open vSwitch's
			 * CT_UPDATE_NEW). */
			ct_free(s);
			dir = 0;
		} else {
			__u64 expires;

			/* What an established connection's packets write to its
			 * entry, only when it changes: the two sides of a
			 * connection are often handled on two CPUs, and a store
			 * of the same value still takes the cache line from the
			 * other. The coarse clock moves once a tick, so the
			 * deadline is written at most once a tick (the kernel's
			 * nf_ct_refresh does the same). */
			to = ct_update(e, s->orig.proto, dir == 2, tcp_flags);
			expires = now + ct_timeout(cfg, to);
			if (e->expires != expires)
				e->expires = expires;
			if (a->flags & CT_COMMIT)
				ct_set_mark_label(e, a, s);
			__builtin_memcpy(&s->conn, e, sizeof(s->conn));
			state |= dir == 2 ? CS_EST | CS_RPL : ((e->flags & CTF_SEEN_REPLY) ? CS_EST : CS_NEW);
		}
	}
	if (!dir) {
		if (!valid_new) {
			ct_write_key(key, CS_TRK | CS_INV, zone, NULL, NULL);
			goto out;
		}
		state |= CS_NEW;
		if (!(a->flags & CT_COMMIT)) {
			/* Not kept; Open vSwitch still reports the tuple the
			 * connection would have. */
			ct_write_key(key, state, zone, NULL, &s->tuple);
			goto out;
		}
		ret = ct_commit(skb, s, a, key->in_port, cfg, now, tcp_flags);
		if (ret < 0)
			return ret;
		e = bpf_map_lookup_elem(&conntrack, &s->orig);
		if (e)
			__builtin_memcpy(&s->conn, e, sizeof(s->conn));
		dir = 1;
	}
	if ((a->flags & CT_NAT) && (s->conn.flags & (CTF_SNAT | CTF_DNAT))) {
		ps->dirty = 1;
		err = nat_packet(skb, ps, key, s, dir);
		if (err < 0)
			return err;
		state |= ct_nat_state(s->conn.flags, dir == 2);
	}
	ct_write_key(key, state, zone, &s->conn, &s->orig);
out:
	/* What ACT_CT_EXT slots gave this action is not the next one's. */
	__builtin_memset(s->label, 0, sizeof(s->label));
	__builtin_memset(s->label_mask, 0, sizeof(s->label_mask));
	return 0;
}

#endif
