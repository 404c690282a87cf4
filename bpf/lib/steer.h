/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* steer.h — VS-extend receive steering: which CPU runs the receive path of
 * a tunnelled packet (seed 001). Everything the uplink's XDP program needs
 * is here: the key, the maps, the parser, the Flow Table lookup and the
 * Core Table choice.
 *
 *   steer_config  [0] → knobs (masks in use, threshold, FCF bit layout, VXLAN port)
 *   steer_masks   [slot] → {mask, highest entry priority under it}
 *                 probed in slot order, which userspace keeps sorted by
 *                 priority (highest first), so the first hit usually ends
 *                 the search
 *   steer_flows   key & mask, mask id in flags' high nibble → entry id
 *                 the Flow Table's index
 *   steer_entries [entry id] → entry (priority, action, cpu)  an array: the
 *                 mutable part (the chosen CPU) is one inlined load away
 *   steer_emc     per-CPU [hash(key)] → {key, table generation, entry id}
 *                 an exact-match cache of lookups, hits and misses alike:
 *                 a packet of a known flow costs one cheap hash and a
 *                 48-byte compare instead of a jhash probe per mask. Any
 *                 Flow Table change bumps the generation, so a cached
 *                 answer is never stale.
 *   steer_cores   [cpu] → {load %, pinned workload, flows chosen onto it}
 *                 the Core Table: userspace writes loads and pins
 *   steer_cpumap  [cpu] → queue                   cpumap redirect targets
 *   steer_frags   {src, dst, IP id, proto, level} → cpu  where the first
 *                 fragment of a datagram went (LRU): the others follow it
 *   steer_stats   per-CPU [entry id] → packets, bytes
 *   steer_cpus    per-CPU [target cpu, or STEER_MAX_CPUS for "stayed"] → packets, bytes
 *   steer_events  per-CPU [event] → count
 *
 * A packet that matches no entry, or that the parser cannot read, is
 * passed (XDP_PASS) and stays on the receiving CPU: steering never drops.
 */
#ifndef NAGARE_STEER_H
#define NAGARE_STEER_H

#include "common.h"

#define STEER_MAX_MASKS 16
#define STEER_MAX_ENTRIES 4096
#define STEER_MAX_CPUS 64
#define STEER_FRAGS 8192
#define STEER_EMC_BITS 12
#define STEER_EMC_SLOTS (1 << STEER_EMC_BITS)
#define STEER_NO_ENTRY 0xffffffffu

/* Key flags. */
#define STEER_F_VXLAN (1 << 0)     /* VXLAN header parsed: vni and inner fields valid */
#define STEER_F_FRAG (1 << 1)      /* a non-first fragment (outer or inner): no L4 ports */
#define STEER_F_OUTER_V6 (1 << 2)  /* outer header is IPv6 (addresses not in the key) */
#define STEER_F_INNER_V6 (1 << 3)  /* inner header is IPv6 (addresses not in the key) */
/* flags bits 4..7: the mask id, in Flow Table keys only */

/* The key every packet is looked up with: 48 bytes, 6 words. IPv4
 * addresses only: nagare's tunnel endpoints are IPv4, and a 16-byte
 * address pair would double the bytes every probe masks and hashes.
 * FCF is normalised to id << 1 | priority whatever its layout in ToS. */
struct steer_key {
	__be32 o_src;        /* outer IPv4 source */
	__be32 o_dst;        /* outer IPv4 destination */
	__be32 spi;          /* ESP SPI (outer protocol 50), else 0 */
	__u32 vni;           /* VXLAN VNI, host order */
	__be32 i_src;        /* inner IPv4 source */
	__be32 i_dst;        /* inner IPv4 destination */
	__be16 i_sport;      /* inner TCP/UDP/SCTP ports */
	__be16 i_dport;
	__be16 o_dport;      /* outer UDP destination port */
	__be16 i_eth_type;   /* inner EtherType */
	__u8 i_eth_src[6];
	__u8 i_eth_dst[6];
	__u8 o_proto;        /* outer IP protocol */
	__u8 i_proto;        /* inner IP protocol */
	__u8 fcf;            /* FCF: id << 1 | priority */
	__u8 flags;          /* STEER_F_* */
};

#define STEER_KEY_WORDS (sizeof(struct steer_key) / 8)

struct steer_mask {
	struct steer_key mask;
	__u32 max_prio;  /* highest priority of an entry under this mask */
	__u32 id;        /* the mask's id in steer_flow_key: stable while slots are re-sorted */
};

/* A Flow Table key is the packet's key & the mask, with the mask's id in
 * the high nibble of flags: 48 bytes hashed per probe, not 56. */
#define STEER_MASK_ID_SHIFT 4

/* Entry actions. */
#define STEER_ACT_CPU 0     /* cpu is fixed by the controller */
#define STEER_ACT_CHOOSE 1  /* cpu is chosen on the first packet (the paper's IRQ:-) */

/* Entry cpu values besides a CPU number. */
#define STEER_CPU_UNSET 0xffffffffu  /* choose: not chosen yet */
#define STEER_CPU_RX 0xfffffffeu     /* chosen: stay on the receiving CPU */

#define STEER_ENTRY_PRIO (1 << 0)    /* a priority flow, whatever its FCF bit says */
#define STEER_ENTRY_CHOSE_PRIO (1 << 1) /* set by the datapath: chosen as a priority flow */

struct steer_entry {
	__u32 id;        /* index into steer_stats */
	__u32 priority;  /* OpenFlow-style: the highest matching entry wins */
	__u32 action;    /* STEER_ACT_* */
	__u32 cpu;       /* target CPU, STEER_CPU_UNSET or STEER_CPU_RX */
	__u32 flags;     /* STEER_ENTRY_* */
	__u32 changes;   /* times cpu was chosen or re-chosen */
};

/* Userspace rewrites a CPU's whole slot every sample period, flow counts
 * recomputed from the entries; between two periods the datapath's own
 * choices raise them atomically, so a burst of new flows spreads. */
struct steer_core {
	__u32 load;       /* percent busy over the last sample period */
	__u32 pinned;     /* workload id pinned to this CPU, 0 = none */
	__u32 flows;      /* choose entries that chose this CPU */
	__u32 prio_flows; /* of which priority flows */
	__u32 online;     /* 1 when the CPU is a cpumap target */
	__u32 pad;
};

struct steer_settings {
	__u32 n_masks;     /* steer_masks[0 .. n_masks) are probed */
	__u32 threshold;   /* a CPU is a candidate when its load is below this (%) */
	__u32 n_cpus;      /* steer_cores[0 .. n_cpus) are considered */
	__u8 fcf_id_shift; /* FCF id = (tos >> shift) & ((1 << bits) - 1) */
	__u8 fcf_id_bits;
	__u8 fcf_prio_bit; /* priority = tos >> bit & 1; 8 or more: no priority bit */
	__u8 pad;
	__be16 vxlan_port; /* outer UDP port of VXLAN (network order) */
	__u16 pad2;
	__u32 gen;         /* Flow Table generation: bumped on every change */
	__u32 emc_off;     /* 1: skip the exact-match cache (benchmarks of the probe) */
};

struct steer_emc_entry {
	struct steer_key key;
	__u32 gen;       /* steer_settings.gen when cached */
	__u32 entry;     /* entry id, or STEER_NO_ENTRY for a cached miss */
};

struct steer_frag_key {
	__be32 src;
	__be32 dst;
	__u32 vni;    /* 0 for outer fragments */
	__be16 id;    /* IPv4 identification */
	__u8 proto;
	__u8 inner;   /* 1: the inner header is the fragmented one */
};

struct steer_counters {
	__u64 packets;
	__u64 bytes;
};

/* Events: per-CPU counters that say why a packet went where it went. */
enum steer_event {
	STEER_EV_UNUSED0 = 0,     /* hits: the entries' counters hold them */
	STEER_EV_MISS = 1,        /* no entry: stayed */
	STEER_EV_UNPARSED = 2,    /* not IP or cut off: stayed */
	STEER_EV_CHOSE = 3,       /* a choose entry picked a CPU */
	STEER_EV_CHOSE_RX = 4,    /* a choose entry found no candidate: receiving CPU */
	STEER_EV_FRAG_FOLLOW = 5, /* a non-first fragment followed its first fragment */
	STEER_EV_UNUSED6 = 6,     /* redirects: steer_cpus holds them */
	STEER_EV_LOCAL = 7,       /* the target is the receiving CPU: passed */
	STEER_EV_TARGET_DOWN = 8, /* the target is not in the cpumap: stayed */
	STEER_EV__MAX = 16,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct steer_settings);
} steer_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STEER_MAX_MASKS);
	__type(key, __u32);
	__type(value, struct steer_mask);
} steer_masks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, STEER_MAX_ENTRIES);
	__type(key, struct steer_key);
	__type(value, __u32);
} steer_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STEER_MAX_ENTRIES);
	__type(key, __u32);
	__type(value, struct steer_entry);
} steer_entries SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STEER_EMC_SLOTS);
	__type(key, __u32);
	__type(value, struct steer_emc_entry);
} steer_emc SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STEER_MAX_CPUS);
	__type(key, __u32);
	__type(value, struct steer_core);
} steer_cores SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_CPUMAP);
	__uint(max_entries, STEER_MAX_CPUS);
	__type(key, __u32);
	__type(value, struct bpf_cpumap_val);
} steer_cpumap SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, STEER_FRAGS);
	__type(key, struct steer_frag_key);
	__type(value, __u32);
} steer_frags SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STEER_MAX_ENTRIES);
	__type(key, __u32);
	__type(value, struct steer_counters);
} steer_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STEER_MAX_CPUS + 1);
	__type(key, __u32);
	__type(value, struct steer_counters);
} steer_cpus SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STEER_EV__MAX);
	__type(key, __u32);
	__type(value, __u64);
} steer_events SEC(".maps");

static __always_inline void steer_event(__u32 ev)
{
	__u64 *c = bpf_map_lookup_elem(&steer_events, &ev);

	if (c)
		*c += 1;
}

static __always_inline void steer_count(void *map, __u32 idx, __u64 bytes)
{
	struct steer_counters *c = bpf_map_lookup_elem(map, &idx);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

/* What the parser learnt besides the key: enough to find a datagram's
 * fragments again. frag_first is set on a first fragment (MF, offset 0). */
struct steer_parse {
	struct steer_frag_key frag;
	__u8 frag_first;
	__u8 frag_later;
	__u8 tos_outer;
	__u8 tos_inner;
};

struct vxlanhdr_min {
	__be32 flags;
	__be32 vni; /* VNI << 8 */
};

#define VXLAN_F_VNI bpf_htonl(0x08000000)
#define ESP_PROTO 50

/* steer_ipv4 reads one IPv4 header at off: addresses, protocol, ToS and
 * fragment state. Returns the L4 offset, 0 for a non-first fragment (no L4
 * header follows), -1 when cut off or malformed. */
static __always_inline int steer_ipv4(void *data, void *data_end, __u32 off, __be32 *src, __be32 *dst,
				      __u8 *proto, __u8 *tos, struct steer_parse *sp, int inner, __u32 vni)
{
	struct iphdr *ip = data + (off & 0xff);
	__u16 fo;

	if ((void *)(ip + 1) > data_end || ip->ihl < 5)
		return -1;
	*src = ip->saddr;
	*dst = ip->daddr;
	*proto = ip->protocol;
	*tos = ip->tos;
	fo = bpf_ntohs(ip->frag_off);
	if (fo & (IP_MF | IP_OFFSET)) {
		sp->frag.src = ip->saddr;
		sp->frag.dst = ip->daddr;
		sp->frag.id = ip->id;
		sp->frag.proto = ip->protocol;
		sp->frag.inner = inner;
		sp->frag.vni = vni;
		if (fo & IP_OFFSET) {
			sp->frag_later = 1;
			return 0;
		}
		sp->frag_first = 1;
	}
	return off + ip->ihl * 4;
}

/* steer_ipv6 reads the fixed IPv6 header: traffic class and next header.
 * Extension headers are not walked: an IPv6 packet's L4 fields are taken
 * only when the next header is L4 itself. Returns the L4 offset or -1. */
static __always_inline int steer_ipv6(void *data, void *data_end, __u32 off, __u8 *proto, __u8 *tos)
{
	struct ipv6hdr *ip6 = data + (off & 0xff);

	if ((void *)(ip6 + 1) > data_end)
		return -1;
	*proto = ip6->nexthdr;
	*tos = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
	return off + sizeof(*ip6);
}

/* steer_parse_packet fills key from the packet: outer Ethernet (one VLAN
 * tag), outer IPv4/IPv6, UDP to the VXLAN port → VNI, inner Ethernet,
 * inner IPv4/IPv6, inner L4 ports; outer ESP → SPI. Returns 0, or -1 when
 * the outer headers cannot be read (the packet is then just passed). */
static __always_inline int steer_parse_packet(struct xdp_md *ctx, const struct steer_settings *cfg,
					      struct steer_key *key, struct steer_parse *sp)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 off = sizeof(*eth);
	__be16 proto;
	int l4;

	if ((void *)(eth + 1) > data_end)
		return -1;
	proto = eth->h_proto;
	if (proto == ETH_P_8021Q_BE || proto == ETH_P_8021AD_BE) {
		__be16 *inner = data + off + 2;
		if ((void *)(inner + 1) > data_end)
			return -1;
		proto = *inner;
		off += 4;
	}
	if (proto == bpf_htons(ETH_P_IP)) {
		l4 = steer_ipv4(data, data_end, off, &key->o_src, &key->o_dst, &key->o_proto,
				&sp->tos_outer, sp, 0, 0);
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		key->flags |= STEER_F_OUTER_V6;
		l4 = steer_ipv6(data, data_end, off, &key->o_proto, &sp->tos_outer);
	} else {
		return -1;
	}
	if (l4 < 0)
		return -1;
	if (l4 == 0) {
		key->flags |= STEER_F_FRAG;
		return 0;
	}
	off = l4;

	if (key->o_proto == ESP_PROTO) {
		__be32 *spi = data + (off & 0x1ff);
		if ((void *)(spi + 1) <= data_end)
			key->spi = *spi;
		return 0;
	}
	if (key->o_proto != IPPROTO_UDP)
		return 0;
	{
		struct udphdr *uh = data + (off & 0x1ff);
		if ((void *)(uh + 1) > data_end)
			return 0;
		key->o_dport = uh->dest;
		if (uh->dest != cfg->vxlan_port)
			return 0;
		off += sizeof(*uh);
	}
	{
		struct vxlanhdr_min *vh = data + (off & 0x1ff);
		if ((void *)(vh + 1) > data_end || !(vh->flags & VXLAN_F_VNI))
			return 0;
		key->vni = bpf_ntohl(vh->vni) >> 8;
		key->flags |= STEER_F_VXLAN;
		off += sizeof(*vh);
	}
	{
		struct ethhdr *ie = data + (off & 0x1ff);
		if ((void *)(ie + 1) > data_end)
			return 0;
		__builtin_memcpy(key->i_eth_src, ie->h_source, 6);
		__builtin_memcpy(key->i_eth_dst, ie->h_dest, 6);
		key->i_eth_type = ie->h_proto;
		off += sizeof(*ie);
	}
	if (key->i_eth_type == bpf_htons(ETH_P_IP)) {
		l4 = steer_ipv4(data, data_end, off, &key->i_src, &key->i_dst, &key->i_proto,
				&sp->tos_inner, sp, 1, key->vni);
	} else if (key->i_eth_type == bpf_htons(ETH_P_IPV6)) {
		key->flags |= STEER_F_INNER_V6;
		l4 = steer_ipv6(data, data_end, off, &key->i_proto, &sp->tos_inner);
	} else {
		return 0;
	}
	if (l4 < 0)
		return 0;
	if (l4 == 0) {
		key->flags |= STEER_F_FRAG;
		return 0;
	}
	if (key->i_proto == IPPROTO_TCP || key->i_proto == IPPROTO_UDP || key->i_proto == IPPROTO_SCTP) {
		__be16 *ports = data + (l4 & 0x3ff);
		if ((void *)(ports + 2) <= data_end) {
			key->i_sport = ports[0];
			key->i_dport = ports[1];
		}
	}
	return 0;
}

/* steer_fcf extracts the FCF from a ToS byte with the configured layout
 * and normalises it to id << 1 | priority. */
static __always_inline __u8 steer_fcf(const struct steer_settings *cfg, __u8 tos)
{
	__u8 id = (tos >> (cfg->fcf_id_shift & 7)) & ((1u << (cfg->fcf_id_bits & 7 ? cfg->fcf_id_bits & 7 : 7)) - 1);
	__u8 prio = cfg->fcf_prio_bit < 8 ? (tos >> (cfg->fcf_prio_bit & 7)) & 1 : 0;

	return (id << 1) | prio;
}

/* steer_lookup probes the masks in slot order and returns the entry of the
 * highest priority that matches. Slots are sorted by their highest entry
 * priority, so the search stops at the first slot that cannot beat the hit. */
static __always_inline struct steer_entry *steer_lookup(const struct steer_settings *cfg, const struct steer_key *key)
{
	struct steer_entry *best = NULL;
	__u32 n = cfg->n_masks;
	__u32 i;

#pragma clang loop unroll(disable)
	for (i = 0; i < STEER_MAX_MASKS; i++) {
		struct steer_key fk;
		struct steer_mask *m;
		struct steer_entry *e;
		__u32 *id;
		const __u64 *kw = (const __u64 *)key;
		const __u64 *mw;
		__u64 *fw = (__u64 *)&fk;
		__u32 slot = i;

		if (i >= n)
			break;
		m = bpf_map_lookup_elem(&steer_masks, &slot);
		if (!m)
			continue;
		if (best && best->priority >= m->max_prio)
			break;
		mw = (const __u64 *)&m->mask;
#pragma clang loop unroll(full)
		for (int w = 0; w < STEER_KEY_WORDS; w++)
			fw[w] = kw[w] & mw[w];
		fk.flags = (fk.flags & 0x0f) | (m->id << STEER_MASK_ID_SHIFT);
		id = bpf_map_lookup_elem(&steer_flows, &fk);
		if (!id)
			continue;
		e = bpf_map_lookup_elem(&steer_entries, id);
		if (e && (!best || e->priority > best->priority))
			best = e;
	}
	return best;
}

/* steer_emc_hash folds the key's six words (multiply-xor: a handful of
 * instructions, where the hash map's jhash of 48 bytes costs a probe). */
static __always_inline __u32 steer_emc_hash(const struct steer_key *key)
{
	const __u64 *w = (const __u64 *)key;
	__u64 h = 0;

#pragma clang loop unroll(full)
	for (int i = 0; i < STEER_KEY_WORDS; i++) {
		h ^= w[i];
		h *= 0x9e3779b97f4a7c15ULL;
	}
	return (__u32)(h >> (64 - STEER_EMC_BITS));
}

static __always_inline int steer_key_eq(const struct steer_key *a, const struct steer_key *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;
	__u64 d = 0;

#pragma clang loop unroll(full)
	for (int i = 0; i < STEER_KEY_WORDS; i++)
		d |= x[i] ^ y[i];
	return d == 0;
}

/* steer_classify is steer_lookup behind the exact-match cache. */
static __always_inline struct steer_entry *steer_classify(const struct steer_settings *cfg, const struct steer_key *key)
{
	__u32 slot = steer_emc_hash(key);
	struct steer_emc_entry *c = bpf_map_lookup_elem(&steer_emc, &slot);
	struct steer_entry *e;
	__u32 gen = cfg->gen;

	if (cfg->emc_off)
		return steer_lookup(cfg, key);
	if (c && c->gen == gen && steer_key_eq(&c->key, key)) {
		__u32 id = c->entry;
		if (id == STEER_NO_ENTRY)
			return NULL;
		return bpf_map_lookup_elem(&steer_entries, &id);
	}
	e = steer_lookup(cfg, key);
	if (c) {
		c->key = *key;
		c->gen = gen;
		c->entry = e ? e->id : STEER_NO_ENTRY;
	}
	return e;
}

struct steer_choice {
	const struct steer_settings *cfg;
	__u64 best_score;
	__u64 best_any_load;
	__u32 best;
	__u32 best_any;
	__u32 prio;
	__u32 pad;
};

/* steer_choose_one weighs CPU i (a bpf_loop callback: the verifier checks
 * the body once instead of once per CPU with every combination of loads). */
static long steer_choose_one(__u32 i, void *arg)
{
	struct steer_choice *ch = arg;
	struct steer_core *c;
	__u32 cpu = i;
	__u64 score;

	c = bpf_map_lookup_elem(&steer_cores, &cpu);
	if (!c || !c->online || c->pinned)
		return 0;
	if (c->load < ch->best_any_load) {
		ch->best_any_load = c->load;
		ch->best_any = i;
	}
	if (c->load >= ch->cfg->threshold)
		return 0;
	if (ch->prio)
		score = c->load;
	else
		score = ((__u64)(c->prio_flows ? 1 : 0) << 48) | ((__u64)(c->flows & 0xffff) << 32) | c->load;
	if (score < ch->best_score) {
		ch->best_score = score;
		ch->best = i;
	}
	return 0;
}

/* steer_choose applies the Core Table rule (seed 001, §3.2):
 * a candidate is an online CPU with no pinned workload whose load is below
 * the threshold.
 *   priority flow: the least-loaded candidate; with none (overcommit), the
 *                  least-loaded unpinned CPU whatever its load;
 *   other flow:    the candidate holding no priority flow, then the fewest
 *                  chosen flows, then the least load: heavy flows spread
 *                  apart and keep off the CPUs priority flows hold;
 *   none:          STEER_CPU_RX, the receiving CPU.
 * pkg/steering.Choose is the same rule in Go (the re-evaluation uses it);
 * the tests hold the two to the same answers. */
static __always_inline __u32 steer_choose(const struct steer_settings *cfg, int prio)
{
	struct steer_choice ch = {
		.cfg = cfg, .best_score = ~0ULL, .best_any_load = ~0ULL,
		.best = STEER_CPU_RX, .best_any = STEER_CPU_RX, .prio = prio,
	};
	__u32 n = cfg->n_cpus;

	if (n > STEER_MAX_CPUS)
		n = STEER_MAX_CPUS;
	bpf_loop(n, steer_choose_one, &ch, 0);
	if (ch.best == STEER_CPU_RX && prio)
		return ch.best_any;
	return ch.best;
}

/* steer_take records that an entry chose cpu: the entry keeps it (the
 * first packet's choice wins when two CPUs race), the CPU's flow counts
 * grow. Returns the CPU the entry holds afterwards. */
static __always_inline __u32 steer_take(struct steer_entry *e, __u32 cpu, int prio)
{
	__u32 old = __sync_val_compare_and_swap(&e->cpu, STEER_CPU_UNSET, cpu);

	if (old != STEER_CPU_UNSET)
		return old;
	__sync_fetch_and_add(&e->changes, 1);
	if (prio)
		__sync_fetch_and_or(&e->flags, STEER_ENTRY_CHOSE_PRIO);
	if (cpu < STEER_MAX_CPUS) {
		struct steer_core *c = bpf_map_lookup_elem(&steer_cores, &cpu);
		if (c) {
			__sync_fetch_and_add(&c->flows, 1);
			if (prio)
				__sync_fetch_and_add(&c->prio_flows, 1);
		}
	}
	return cpu;
}

#endif
