/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* shortcut.h — established connections past the flow key and the caches.
 *
 * Every packet of a tracked pod-to-pod connection takes the same walk:
 * parse into the 160-byte key, hash it, the exact-match cache, the flow's
 * copy, its list of actions, and the tracker's commit (tuple, lookup,
 * state update, key words). For the same packet again, nothing of that
 * walk can come out differently but the tracker's verdict on the
 * connection, so a shortcut keeps the walk's outcome per connection
 * direction and replays it:
 *
 *   key    the device, both MACs, the IPv4 addresses, ToS, TTL, protocol,
 *          ports and TCP flags: with the preconditions below (a plain IPv4
 *          TCP/UDP frame with no VLAN tag, IP options or fragment, on a
 *          port that is no tunnel), every word of the flow key the parser
 *          would make follows from these, so the key is the exact-match
 *          cache's, in 36 bytes;
 *   value  the megaflow's id and generation (as an EMC entry: used only
 *          while flow_gens says so), the port's OpenFlow number, and the
 *          list compiled: ct's zone, the MACs to write, dec_ttl, the
 *          output (redirect_peer or redirect).
 *
 * A shortcut is learnt (shortcut_learn) from a packet the walk sent on,
 * when its list is exactly [ct(zone, commit?, nat?) without mark, label or
 * force] [set both MACs] [dec_ttl] output, the ct found the connection
 * established and translated nothing, and the flow is not onloaded. It
 * is taken (shortcut_run) only while the tracker would do nothing but
 * refresh the deadline: the connection (found as the commit finds it:
 * the packet's tuple, through the reply entry for a reply) is live, has
 * seen a reply, is not translated, and for TCP is ESTABLISHED with no FIN
 * or RST seen and the packet carries ACK or PSH|ACK. Anything else (a FIN,
 * an expired or deleted connection, a flow replaced by the revalidator
 * after a policy change, a port renumbered) falls back to the walk, which
 * does what it always did. So the shortcut does what the walk would: the
 * same deadline, the same flow statistics, the same rewrites and output;
 * only the counters say which way the packet went (shortcut-hit).
 *
 * The connection is looked up at most once per coarse-clock tick: the
 * deadline the walk would write moves once a tick, and what else could
 * change the check's answer within one — a FIN or RST, a connection
 * deleted by the fast path (ct_free, ct_reap) or by userspace, new
 * timeouts — moves the tracker's epoch (ct_epoch, conntrack.h), which
 * the shortcut stores with the tick of its last check. So most packets
 * cost one slot of an array (the shortcut's) where the walk costs the key's
 * hash, the exact-match cache and one or two of the tracker's.
 *
 * The table is a cache with a block of slots per CPU in one plain array
 * (shortcuts[cpu << SHORTCUT_BITS | slot], userspace sizes it by the
 * possible CPUs, as emc_tags), direct-mapped by a hash of the key and not
 * pinned: each switch process starts it empty. A CPU reads and writes
 * only its own block, with bottom halves off, so an entry is never read
 * half written, and the per-tick check's writes stay in this CPU's cache.
 * Not a hash map: on this machine kind every call costs a return through
 * the kernel's return thunk (Safe RET, spec_rstack_overflow), and a hash
 * map lookup is three calls, where an array's is inlined: 50-60 ns of a
 * packet's 190 (docs/lab.md, "Shortcuts without calls"). An entry is made
 * only for an established connection (at most two flag sets a direction);
 * a key that hashes to a taken slot evicts its entry, whose packets then
 * take the walk, as before there were shortcuts, until one of them learns
 * it back. Learning is paced like the exact-match cache's inserts
 * (dp_config.emc): off with it.
 */
#ifndef NAGARE_SHORTCUT_H
#define NAGARE_SHORTCUT_H

#include "maps.h"
#include "conntrack.h"
#include "actions.h"

#define SHORTCUT_BITS 13
#define SHORTCUT_SLOTS (1 << SHORTCUT_BITS) /* per CPU, as the exact-match cache */

/* Set at load (pkg/datapath Config.NoShortcuts): benchmarks measure the
 * walk beside the shortcut. */
volatile const __u32 shortcuts_off = 0;

/* shortcut.flags */
#define SC_CT (1 << 0)      /* ct: refresh the connection (zone) */
#define SC_MACS (1 << 1)    /* write both MACs (macs: destination, source) */
#define SC_DEC_TTL (1 << 2) /* dec_ttl */
#define SC_PEER (1 << 3)    /* output by redirect_peer */
#define SC_INGRESS (1 << 4) /* output by redirect to the device's ingress */

struct shortcut_key {
	__u32 ifindex;
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__u8 eth[12];     /* destination, source: the frame's first 12 bytes */
	__u8 proto;
	__u8 tos;
	__u8 ttl;
	__u8 pad;
	__be16 tcp_flags; /* the 12 bits the flow key has */
	__u16 pad2;
	__u32 pad3;       /* 40 bytes: compared as five words */
};

struct shortcut {
	__u32 fid;
	__u32 gen;         /* flow_gens[fid] when learnt */
	__u32 in_port;     /* the port's OpenFlow number when learnt */
	__u32 out_ifindex;
	__u16 zone;
	__u8 flags;        /* SC_* */
	__u8 pad;
	__u8 macs[12];
	/* When a packet last checked and refreshed the connection
	 * (shortcut_ct): the coarse clock (bpf_ktime_get_coarse_ns), its
	 * tick (bpf_jiffies64) and the tracker's epoch (ct_epoch_now). */
	__u64 checked;
	__u64 checked_tick;
	__u64 epoch;
};

_Static_assert(sizeof(struct shortcut_key) == 40, "shortcut_key must be 5 words");

/* A slot: ifindex 0 (no packet's) marks it empty. */
struct shortcut_slot {
	struct shortcut_key key;
	struct shortcut sc;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SHORTCUT_SLOTS); /* × possible CPUs, set by userspace */
	__type(key, __u32);
	__type(value, struct shortcut_slot);
} shortcuts SEC(".maps");

/* shortcut_slot_of is this CPU's slot for key k: the key's five words,
 * each times its own odd constant, summed and mixed; the top bits pick
 * the slot. */
static __always_inline struct shortcut_slot *shortcut_slot_of(const struct shortcut_key *k)
{
	const __u64 *w = (const __u64 *)k;
	__u64 h = w[0] * 0x9E3779B97F4A7C15ull + w[1] * 0xC2B2AE3D27D4EB4Full + w[2] * 0x165667B19E3779F9ull +
		  w[3] * 0xD6E8FEB86659FD93ull + w[4] * 0xFF51AFD7ED558CCDull;
	__u32 at;

	h ^= h >> 29;
	h *= 0x94D049BB133111EBull;
	at = bpf_get_smp_processor_id() << SHORTCUT_BITS | (__u32)(h >> (64 - SHORTCUT_BITS));
	return bpf_map_lookup_elem(&shortcuts, &at);
}

static __always_inline int shortcut_key_equal(const struct shortcut_key *a, const struct shortcut_key *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;

	return !((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3]) | (x[4] ^ y[4]));
}

/* The devices whose packets have made a shortcut: the others' (a switch
 * with no tracked traffic, a port of untracked flows) skip the lookup and
 * pay one load. By ifindex, as ports (maps.h); past PORT_ARRAY every
 * device looks. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PORT_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
} shortcut_ports SEC(".maps");

#define SC_ACK bpf_htons(TH_ACK)
#define SC_PSH_ACK bpf_htons(TH_ACK | TH_PSH)

/* shortcut_ct is ct_action's work on a packet of an established, untranslated
 * connection, or -1 when the packet would change more than the deadline
 * (then nothing was written). */
static __always_inline int shortcut_ct(const struct shortcut_key *k, __u16 zone, __u64 now)
{
	struct ct_tuple t = {};
	struct ct_config *cfg;
	struct ct_entry *e;
	__u32 zero = 0, to;
	__u64 expires;

	t.src[0] = k->saddr;
	t.dst[0] = k->daddr;
	t.sport = k->sport;
	t.dport = k->dport;
	t.zone = zone;
	t.proto = k->proto;
	t.family = 4;
	e = bpf_map_lookup_elem(&conntrack, &t);
	if (!e)
		return -1;
	if (e->kind == CT_REPLY) {
		__builtin_memcpy(&t, &e->peer, sizeof(t));
		e = bpf_map_lookup_elem(&conntrack, &t);
		if (!e)
			return -1;
	}
	if (e->kind != CT_CONN || e->expires < now)
		return -1;
	/* Seen a reply (ct_update writes nothing more), untranslated (nat
	 * does nothing), no FIN or RST (no close to record). */
	if ((e->flags & (CTF_SNAT | CTF_DNAT | CTF_FIN_ORIG | CTF_FIN_REPLY | CTF_SEEN_REPLY)) != CTF_SEEN_REPLY ||
	    READ_ONCE(e->close_word))
		return -1;
	if (k->proto == IPPROTO_TCP) {
		if (e->tcp_state != TCP_CT_ESTABLISHED)
			return -1;
		to = CT_TO_TCP_EST;
	} else {
		to = CT_TO_UDP_REPLIED;
	}
	cfg = bpf_map_lookup_elem(&ct_settings, &zero);
	if (!cfg)
		return -1;
	expires = now + ct_timeout(cfg, to);
	if (e->expires != expires) /* once a tick, as ct_action */
		e->expires = expires;
	return 0;
}

/* shortcut_run sends the packet on by its connection's shortcut and
 * returns the verdict, or -1 when it has none (the walk then runs, and
 * nothing was written). in_port is the device's OpenFlow number. Global,
 * so verified once. */
__noinline int shortcut_run(struct __sk_buff *skb, __u32 in_port)
{
	struct shortcut_slot *slot;
	struct shortcut_key k;
	struct shortcut *sc;
	struct iphdr *ip;
	void *data, *data_end;
	__u64 now, tick, epoch;
	__u8 *l4;
	int ret;

	if (shortcuts_off || !skb || skb->vlan_present)
		return -1;
	if (skb->ifindex < PORT_ARRAY) {
		__u32 i = skb->ifindex, *on = bpf_map_lookup_elem(&shortcut_ports, &i);

		if (!on || !*on)
			return -1;
	}
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	ip = data + sizeof(struct ethhdr);
	l4 = (__u8 *)(ip + 1);
	if ((void *)(l4 + sizeof(struct udphdr)) > data_end)
		return -1;
	/* The parser's checks (parse_ipv4) hold: version 4, a 20-byte
	 * header (no options: the ports at a fixed offset), tot_len at least
	 * the header, not a fragment. */
	if (((struct ethhdr *)data)->h_proto != bpf_htons(ETH_P_IP) || *(__u8 *)ip != 0x45 ||
	    (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET)) || bpf_ntohs(ip->tot_len) < sizeof(*ip))
		return -1;
	__builtin_memset(&k, 0, sizeof(k));
	if (ip->protocol == IPPROTO_TCP) {
		if ((void *)(l4 + sizeof(struct tcphdr)) > data_end)
			return -1;
		k.tcp_flags = *(__be16 *)(l4 + 12) & bpf_htons(0x0fff);
		/* Any other flag moves the connection's TCP state. */
		if (k.tcp_flags != SC_ACK && k.tcp_flags != SC_PSH_ACK)
			return -1;
	} else if (ip->protocol != IPPROTO_UDP) {
		return -1;
	}
	k.ifindex = skb->ifindex;
	k.saddr = ip->saddr;
	k.daddr = ip->daddr;
	k.sport = *(__be16 *)l4;
	k.dport = *(__be16 *)(l4 + 2);
	__builtin_memcpy(k.eth, data, 12);
	k.proto = ip->protocol;
	k.tos = ip->tos;
	k.ttl = ip->ttl;

	slot = shortcut_slot_of(&k);
	if (!slot || !shortcut_key_equal(&slot->key, &k))
		return -1;
	sc = &slot->sc;
	if (sc->in_port != in_port || !flow_alive(sc->fid, sc->gen) || !(sc->flags & SC_CT))
		return -1;
	/* In the tick the connection was last checked, with no connection
	 * closed or deleted since (the epoch), the tracker's entry is as that
	 * check left it, deadline included (it moves once a tick): the walk's
	 * ct would read it and write nothing. The epoch is read before the
	 * check, so a close racing with it invalidates what it stores.
	 *
	 * The tick is jiffies, which the verifier inlines (a load), where
	 * reading the coarse clock is a helper call, ~20 ns here: the clock
	 * moves with jiffies, in the same tick handler (jiffies first, the
	 * clock right after), so within one jiffy the clock read at the check
	 * is the clock. (A check in the handler's instant between the two
	 * keeps the previous tick's clock for this jiffy: the deadline it
	 * writes, and the flow's last use, are then one tick early, as the
	 * walk's would be for a packet in that instant.) */
	tick = bpf_jiffies64();
	epoch = ct_epoch_now();
	if (sc->checked_tick != tick || sc->epoch != epoch) {
		now = bpf_ktime_get_coarse_ns();
		if (shortcut_ct(&k, sc->zone, now) < 0)
			return -1;
		sc->checked = now;
		sc->checked_tick = tick;
		sc->epoch = epoch;
	} else {
		now = sc->checked;
	}

	/* From here on the packet is the shortcut's: what the walk would do.
	 * The rewrites are direct writes (no helper calls): the frame was
	 * checked above, and an skb shared with a clone was made private at
	 * the program's entry (the verifier's prologue for direct writes). */
	update_stats_at(sc->fid, skb->len, k.tcp_flags, now);
	count(CTR_SHORTCUT_HIT);
	if (sc->flags & SC_MACS)
		__builtin_memcpy(data, sc->macs, 12);
	if (sc->flags & SC_DEC_TTL) {
		__u32 check;

		if (ip->ttl <= 1)
			return drop(DROP_TTL_EXCEEDED);
		/* The header checksum as the kernel's ip_decrease_ttl: the TTL
		 * is the high byte of its 16-bit word. */
		check = ip->check;
		check += bpf_htons(0x0100);
		ip->check = (__u16)(check + (check >= 0xffff));
		ip->ttl--;
	}
	trace_reset();
	if (sc->flags & SC_PEER) {
		trace_output(sc->out_ifindex, OUT_PEER | OUT_LAST);
		ret = bpf_redirect_peer(sc->out_ifindex, 0);
	} else {
		trace_output(sc->out_ifindex, (sc->flags & SC_INGRESS) ? OUT_INGRESS | OUT_LAST : OUT_LAST);
		ret = bpf_redirect(sc->out_ifindex, (sc->flags & SC_INGRESS) ? BPF_F_INGRESS : 0);
	}
	if (ret != TC_ACT_REDIRECT)
		return drop(DROP_REDIRECT);
	return ret;
}

/* shortcut_learn makes the shortcut of the packet the walk just sent on
 * (key as parsed, flow fid's entry fe, its one ct's verdict in the key's
 * ct words), when it has one (above). Paced as the exact-match cache's
 * inserts: one in emc (dp_config.emc). Global, so verified once and on a
 * stack of its own. */
__noinline int shortcut_learn(struct __sk_buff *skb, const struct flow_key *key, const struct flow_entry *fe,
			      __u32 fid, __u32 emc)
{
	struct shortcut_key k = {};
	struct shortcut sc = {};
	struct shortcut_slot *slot;
	const struct action *a;
	__u32 n, i = 1;

	if (shortcuts_off || !skb || !key || !fe)
		return 0;
	n = fe->n_actions;
	if (key->eth_type != bpf_htons(ETH_P_IP) || key->vlan_tci || key->nw_frag || key->tun_flags ||
	    (key->nw_proto != IPPROTO_TCP && key->nw_proto != IPPROTO_UDP) || (fe->flags & FLOW_ONLOAD))
		return 0;
	if ((key->ct_state & (CS_TRK | CS_EST | CS_NEW | CS_INV | CS_REL | CS_SNAT | CS_DNAT)) != (CS_TRK | CS_EST))
		return 0;
	if (key->nw_proto == IPPROTO_TCP && key->tcp_flags != SC_ACK && key->tcp_flags != SC_PSH_ACK)
		return 0;
	/* The list: ct, then optionally both MACs and dec_ttl, then the
	 * output that ends it. */
	if (n < 2 || n > 4)
		return 0;
	a = &fe->actions[0];
	if (a->type != ACT_CT || (a->flags & (CT_FORCE | CT_LABEL)) || *(const __u32 *)&a->u64[0] ||
	    a->arg16 != key->ct_zone)
		return 0;
	sc.flags = SC_CT;
	sc.zone = a->arg16;
	a = &fe->actions[1];
	if (a->type == ACT_SET_ETH_ADDRS) {
		__builtin_memcpy(sc.macs, a->ip6, 12);
		sc.flags |= SC_MACS;
		if (n < 3)
			return 0;
		i = 2;
		a = &fe->actions[2];
	}
	if (a->type == ACT_DEC_TTL) {
		sc.flags |= SC_DEC_TTL;
		if (i + 1 >= n)
			return 0;
		a = &fe->actions[(i + 1) & 3];
		i++;
	}
	if (i + 1 != n || a->type != ACT_OUTPUT || !(a->flags & OUT_LAST) || (a->flags & OUT_TUNNEL))
		return 0;
	if (a->flags & OUT_PEER)
		sc.flags |= SC_PEER;
	else if (a->flags & OUT_INGRESS)
		sc.flags |= SC_INGRESS;
	sc.out_ifindex = a->arg32;
	if (emc > 1 && bpf_get_prandom_u32() % emc)
		return 0;
	sc.fid = fid;
	sc.gen = fe->gen;
	sc.in_port = key->in_port;

	k.ifindex = skb->ifindex;
	k.saddr = key->ip_src[0];
	k.daddr = key->ip_dst[0];
	k.sport = key->tp_src;
	k.dport = key->tp_dst;
	__builtin_memcpy(k.eth, key->eth_dst, 6);
	__builtin_memcpy(k.eth + 6, key->eth_src, 6);
	k.proto = key->nw_proto;
	k.tos = key->nw_tos;
	k.ttl = key->nw_ttl;
	k.tcp_flags = key->tcp_flags;
	slot = shortcut_slot_of(&k);
	if (!slot)
		return 0;
	slot->key = k;
	slot->sc = sc;
	count(CTR_SHORTCUT_LEARN);
	if (k.ifindex < PORT_ARRAY) {
		__u32 *on = bpf_map_lookup_elem(&shortcut_ports, &k.ifindex);

		if (on && !*on)
			*on = 1;
	}
	return 0;
}

#endif
