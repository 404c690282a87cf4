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

/* megaflow_lookup returns the flow id of the first mask (in probe order)
 * whose megaflow matches key, or NO_FLOW. Global, so verified once. */
__noinline __u32 megaflow_lookup(const struct flow_key *key, __u32 n_masks)
{
	const __u64 *k = (const __u64 *)key;
	struct megaflow_key *mk;
	__u32 i, zero = 0;

	if (!key)
		return NO_FLOW;
	mk = bpf_map_lookup_elem(&mf_scratch, &zero);
	if (!mk)
		return NO_FLOW;
	if (n_masks > MAX_MASKS)
		n_masks = MAX_MASKS;
	for (i = 0; i < MAX_MASKS; i++) {
		struct mf_mask *m;
		__u32 idx = i, slot, *cnt, *fid;
		const __u64 *mw;
		__u64 *o;

		if (i >= n_masks)
			break;
		m = bpf_map_lookup_elem(&masks, &idx);
		if (!m || !m->valid)
			continue;
		slot = idx * FILTER_SLOTS + filter_hash(k, m);
		cnt = bpf_map_lookup_elem(&mask_filter, &slot);
		if (!cnt || !*cnt)
			continue;

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
		if (fid)
			return *fid;
	}
	return NO_FLOW;
}

#endif
