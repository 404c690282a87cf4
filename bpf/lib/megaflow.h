/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* megaflow.h — the lookup: exact-match cache, then tuple-space search.
 *
 * Tuple-space search probes each mask in turn with the key masked by it.
 * A probe of the hash map costs a hash of a 168-byte key; with tens of
 * masks that would dominate, so each mask has a counting filter
 * (mask_filter) indexed by a cheap multiplicative hash of the masked key's
 * non-zero words. Userspace raises a slot's count before inserting a flow
 * and lowers it after deleting one, so the filter has false positives but
 * never false negatives, and a probe of a mask with no candidate flow
 * costs a few ALU instructions and one array load. The Go twin of
 * filter_hash is pkg/datapath.filterHash; a test keeps them equal.
 */
#ifndef NAGARE_MEGAFLOW_H
#define NAGARE_MEGAFLOW_H

#include "maps.h"

#define NO_FLOW 0xffffffffu
#define FILTER_MUL 0x9E3779B97F4A7C15ull

#define FILTER_WORD(w)                                          \
	if (m->words & (1u << (w)))                             \
		h = (h ^ (k[w] & mw[w])) * FILTER_MUL;

static __always_inline __u32 filter_hash(const __u64 *k, const struct mf_mask *m)
{
	const __u64 *mw = (const __u64 *)&m->mask;
	__u64 h = 0;

	FILTER_WORD(0) FILTER_WORD(1) FILTER_WORD(2) FILTER_WORD(3)
	FILTER_WORD(4) FILTER_WORD(5) FILTER_WORD(6) FILTER_WORD(7)
	FILTER_WORD(8) FILTER_WORD(9) FILTER_WORD(10) FILTER_WORD(11)
	FILTER_WORD(12) FILTER_WORD(13)
	/* The recirculation and conntrack words: one test for the masks
	 * (most) that touch none of them. */
	if (m->words >> 14) {
		FILTER_WORD(14) FILTER_WORD(15) FILTER_WORD(16) FILTER_WORD(17)
		FILTER_WORD(18) FILTER_WORD(19)
	}
	return h >> (64 - FILTER_BITS);
}

/* The masked key being probed: 168 bytes that do not fit the stack next
 * to the entry program's own key (the verifier allows 512 bytes for all
 * frames together), so it lives in a per-CPU slot. Nothing else runs on
 * this CPU between writing it and the lookup that reads it. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct megaflow_key);
} mf_scratch SEC(".maps");

/* The TCP flags in word 10 (tcp_flags, flow_key.h): they change from
 * packet to packet of one connection (SYN, ACK, PSH|ACK, FIN|ACK), so the
 * mask cache leaves them out of its hash and, while no mask it walked
 * looks at them, out of its compare. */
#define KEY_W10_TCP_FLAGS 0x000000000000ffffull /* bytes 80-81 of the key */

/* key_hash_but spreads a whole key, the bits of word 10 in ign10 left
 * out, over 64 bits: two xor lanes, two multiplies, a final mix (cheaper
 * than hashing 160 bytes word by word). The exact-match cache and the mask
 * cache index by its top bits. */
static __always_inline __u64 key_hash_but(const struct flow_key *key, __u64 ign10)
{
	const __u64 *k = (const __u64 *)key;
	__u64 a = k[0] ^ k[2] ^ k[4] ^ k[6] ^ k[8] ^ (k[10] & ~ign10) ^ k[12] ^ k[14] ^ k[16] ^ k[18];
	__u64 b = k[1] ^ k[3] ^ k[5] ^ k[7] ^ k[9] ^ k[11] ^ k[13] ^ k[15] ^ k[17] ^ k[19];
	__u64 h = a * 0x9E3779B97F4A7C15ull ^ b * 0xC2B2AE3D27D4EB4Full;

	h ^= h >> 29;
	h *= 0x165667B19E3779F9ull;
	return h;
}

static __always_inline __u64 key_hash(const struct flow_key *key) { return key_hash_but(key, 0); }

/* mask_cache_hash: all packets of one connection's direction share a mask
 * cache entry. */
static __always_inline __u64 mask_cache_hash(const struct flow_key *key)
{
	return key_hash_but(key, KEY_W10_TCP_FLAGS);
}

/* key_equal_but compares two keys, the bits of word 10 in ign10 left out. */
static __always_inline int key_equal_but(const struct flow_key *a, const struct flow_key *b, __u64 ign10)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;

	return !((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3]) |
		 (x[4] ^ y[4]) | (x[5] ^ y[5]) | (x[6] ^ y[6]) | (x[7] ^ y[7]) |
		 (x[8] ^ y[8]) | (x[9] ^ y[9]) | ((x[10] ^ y[10]) & ~ign10) | (x[11] ^ y[11]) |
		 (x[12] ^ y[12]) | (x[13] ^ y[13]) | (x[14] ^ y[14]) | (x[15] ^ y[15]) |
		 (x[16] ^ y[16]) | (x[17] ^ y[17]) | (x[18] ^ y[18]) | (x[19] ^ y[19]));
}

static __always_inline int key_equal(const struct flow_key *a, const struct flow_key *b)
{
	return key_equal_but(a, b, 0);
}

/* The mask cache: per CPU, a key → the mask slot where the walk last
 * found that key's megaflow, probed first next time, so an established
 * flow costs one probe however many masks come before its own. Open
 * vSwitch's kernel datapath keeps one in front of its mask walk
 * (flow_table.c), keyed by the skb hash alone: any flow under the
 * remembered mask that matches is taken, right because its megaflows do
 * not overlap. Ours may overlap, and the first mask in probe order wins
 * (docs/architecture.md), so a hit must be the walk's answer:
 *   - an entry holds the whole key (hashes are easy to collide on
 *     purpose: key_hash xors words), so it speaks for that key only;
 *   - it says "when mask_seqs[0] was seq, no slot before this one had a
 *     megaflow matching the key". Installing a megaflow under slot j can
 *     make that false for the slots after j, so userspace, once the
 *     megaflows are in, bumps mask_seqs[0] and writes the new value into
 *     mask_seqs[1 + c] for every c > j; an entry is used only while
 *     mask_seqs[1 + slot] <= its seq. The walk reads mask_seqs[0] before
 *     its first probe, so a megaflow it may have missed went in after
 *     that read, and the bump that follows it invalidates the entry (on
 *     x86, which does not reorder loads with loads; a weaker CPU would
 *     need a barrier between that read and the probes).
 *   - a deletion needs no bump: it cannot make an earlier slot match. If
 *     it removed the remembered megaflow, the probe misses and the walk
 *     runs. A slot that got a new mask is the same: the probe finds the
 *     key's megaflow under it, which the walk would find too (no earlier
 *     slot matches), or misses.
 *   - it leaves the TCP flags out (hash and compare) unless a mask the
 *     walk passed, or the one it found the megaflow under, looks at them
 *     (MC_FLAGS_EXACT): a connection's SYN, ACK, PSH|ACK and FIN|ACK then
 *     share one entry. That is sound because the flags can change which
 *     megaflow matches only under a mask that looks at them, and a later
 *     install of such a mask before the slot bumps the entry's sequence.
 *   - it remembers the megaflow too (flow id and generation): while
 *     flow_gens still says so, that is what the probe under the slot
 *     would find (the slot's mask ignores the flags unless the entry is
 *     exact), and the probe's hash of a 168-byte key is saved. A deleted
 *     or replaced megaflow has another generation: the probe runs.
 *   - its first word is a tag (the hash's low 32 bits), compared before
 *     the key, so that a miss reads one cache line of the entry, not its
 *     three: a load of short connections misses on every new key.
 * Unlike the exact-match cache the entry holds no actions (184 bytes, not
 * 700), so every walk that hits writes one. The map is not pinned
 * (datapath.go's unpinned): each switch process makes its own, so its
 * layout can change across an upgrade. */
#define MASK_CACHE_BITS 12
#define MASK_CACHE_ENTRIES (1 << MASK_CACHE_BITS)
#define MASK_CACHE_MIN_MASKS 0 /* used above this many masks: a hit saves the probe, even of one mask */
#define MC_FLAGS_EXACT (1u << 31) /* in slot: compare the TCP flags too */

struct mask_cache_entry {
	__u32 tag;  /* low 32 bits of mask_cache_hash(key); 0 with slot 0: empty */
	__u32 slot; /* the mask slot where it found key's megaflow | MC_FLAGS_EXACT */
	__u32 fid;  /* that megaflow's flow id */
	__u32 gen;  /* and its generation then (flow_gens) */
	__u64 seq;  /* mask_seqs[0] when the walk that wrote it began */
	struct flow_key key;
};

/* mask_cache[cpu << MASK_CACHE_BITS | bucket]: a block per CPU of a
 * plain array (userspace sizes it by the possible CPUs), for the reason
 * emc_tags is one (maps.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MASK_CACHE_ENTRIES); /* × possible CPUs, set by userspace */
	__type(key, __u32);
	__type(value, struct mask_cache_entry);
} mask_cache SEC(".maps");

/* [0]: install sequence; [1 + slot]: the sequence of the last install
 * under a slot before slot. Mmapped by userspace
 * (pkg/datapath.bumpMaskSeqs), which alone writes it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 + MAX_MASKS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} mask_seqs SEC(".maps");

/* flow_gen is flow id fid's generation now (0: dead or out of range). */
static __always_inline __u32 flow_gen(__u32 fid)
{
	volatile __u32 *g = bpf_map_lookup_elem(&flow_gens, &fid);

	return g ? *g : 0;
}

/* flow_fetch copies flow fid's entry, head and tail, into *out and
 * returns 1, or 0 when fid is dead or was rewritten under the copy.
 * Userspace writes a head in place (an array element, not a swapped hash
 * element), so the generation is the entry's sequence lock: a writer
 * zeroes flow_gens[fid] before it touches the head or the tail and stores
 * the new generation (never one used before) after; a copy that read the
 * same non-zero generation before and after is whole. A reader that loses
 * the race misses, and the slow path has the packet. (x86 reorders
 * neither loads with loads nor stores with stores; the barrier keeps the
 * compiler from moving the second read up. A weaker CPU would need real
 * barriers here and in the writer.) Global, so verified once. */
__noinline int flow_fetch(__u32 fid, struct flow_entry *out)
{
	const struct flow_head *h;
	const struct flow_tail *t;
	__u32 gen;

	if (!out)
		return 0;
	gen = flow_gen(fid);
	if (!gen)
		return 0;
	h = bpf_map_lookup_elem(&flows, &fid);
	if (!h)
		return 0;
	__builtin_memcpy(out, h, sizeof(*h));
	if (out->n_actions > FLOW_INLINE_ACTIONS) {
		t = bpf_map_lookup_elem(&flow_tails, &fid);
		if (!t || t->gen != gen)
			return 0;
		__builtin_memcpy(&out->actions[FLOW_INLINE_ACTIONS], t->actions, sizeof(t->actions));
	}
	asm volatile("" ::: "memory");
	return out->gen == gen && flow_gen(fid) == gen;
}

/* mask_probe looks key up under mask slot idx: the filter first, then
 * the megaflow table. *flags gets MC_FLAGS_EXACT if the slot's mask looks
 * at the TCP flags. */
static __always_inline __u32 mask_probe(const __u64 *k, struct megaflow_key *mk, __u32 idx, __u32 *flags)
{
	struct mf_mask *m;
	__u32 slot, *cnt, *fid;
	const __u64 *mw;
	__u64 *o;

	m = bpf_map_lookup_elem(&masks, &idx);
	if (!m || !m->valid)
		return NO_FLOW;
	if (m->mask.tcp_flags)
		*flags |= MC_FLAGS_EXACT;
	slot = idx * FILTER_SLOTS + filter_hash(k, m);
	cnt = bpf_map_lookup_elem(&mask_filter, &slot);
	if (!cnt || !*cnt)
		return NO_FLOW;

	mw = (const __u64 *)&m->mask;
	o = (__u64 *)&mk->masked;
	mk->mask_id = idx;
	mk->pad = 0;
	o[0] = k[0] & mw[0]; o[1] = k[1] & mw[1]; o[2] = k[2] & mw[2];
	o[3] = k[3] & mw[3]; o[4] = k[4] & mw[4]; o[5] = k[5] & mw[5];
	o[6] = k[6] & mw[6]; o[7] = k[7] & mw[7]; o[8] = k[8] & mw[8];
	o[9] = k[9] & mw[9]; o[10] = k[10] & mw[10]; o[11] = k[11] & mw[11];
	o[12] = k[12] & mw[12]; o[13] = k[13] & mw[13];
	if (m->words >> 14) {
		o[14] = k[14] & mw[14]; o[15] = k[15] & mw[15]; o[16] = k[16] & mw[16];
		o[17] = k[17] & mw[17]; o[18] = k[18] & mw[18]; o[19] = k[19] & mw[19];
	} else {
		o[14] = 0; o[15] = 0; o[16] = 0; o[17] = 0; o[18] = 0; o[19] = 0;
	}
	count(CTR_MASK_PROBES);
	fid = bpf_map_lookup_elem(&megaflows, mk);
	return fid ? *fid : NO_FLOW;
}

/* megaflow_lookup returns the flow id of the first mask (in probe order)
 * whose megaflow matches key, or NO_FLOW: through the mask cache when it
 * is on (cache != 0) and knows the key, else by walking the masks.
 * Global, so verified once. */
__noinline __u32 megaflow_lookup(const struct flow_key *key, __u32 n_masks, __u32 cache)
{
	const __u64 *k = (const __u64 *)key;
	struct mask_cache_entry *mc = NULL;
	struct megaflow_key *mk;
	__u32 i, zero = 0, fid, flags = 0, tag = 0;
	__u64 seq = 0, *s;

	if (!key)
		return NO_FLOW;
	mk = bpf_map_lookup_elem(&mf_scratch, &zero);
	if (!mk)
		return NO_FLOW;
	if (n_masks > MAX_MASKS)
		n_masks = MAX_MASKS;
	if (cache && n_masks > MASK_CACHE_MIN_MASKS) {
		__u64 hash = mask_cache_hash(key);
		__u32 b = bpf_get_smp_processor_id() << MASK_CACHE_BITS | hash >> (64 - MASK_CACHE_BITS);

		tag = (__u32)hash;
		s = bpf_map_lookup_elem(&mask_seqs, &zero);
		if (s)
			seq = *s;
		mc = bpf_map_lookup_elem(&mask_cache, &b);
		if (mc && mc->tag == tag) {
			__u32 slot = mc->slot & ~MC_FLAGS_EXACT;

			if (slot < n_masks &&
			    key_equal_but(&mc->key, key, mc->slot & MC_FLAGS_EXACT ? 0 : KEY_W10_TCP_FLAGS)) {
				__u32 at = 1 + slot;

				s = bpf_map_lookup_elem(&mask_seqs, &at);
				if (s && *s <= mc->seq) {
					fid = mc->fid;
					if (mc->gen && flow_gen(fid) == mc->gen) {
						count(CTR_MASK_CACHE_HIT);
						return fid;
					}
					fid = mask_probe(k, mk, slot, &flags);
					if (fid != NO_FLOW) {
						mc->fid = fid;
						mc->gen = flow_gen(fid);
						count(CTR_MASK_CACHE_HIT);
						return fid;
					}
				}
			}
		}
	}
	for (i = 0; i < MAX_MASKS; i++) {
		if (i >= n_masks)
			break;
		fid = mask_probe(k, mk, i, &flags);
		if (fid != NO_FLOW) {
			if (mc) {
				mc->tag = tag;
				mc->slot = i | flags;
				mc->fid = fid;
				mc->gen = flow_gen(fid);
				mc->seq = seq;
				__builtin_memcpy(&mc->key, key, sizeof(*key));
			}
			return fid;
		}
	}
	return NO_FLOW;
}

#endif
