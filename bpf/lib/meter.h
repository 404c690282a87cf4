/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* meter.h — OpenFlow meters, enforced in the fast path.
 *
 * One map entry per meter, shared by every CPU under a spin lock (the
 * rate is the meter's, not a CPU's). Each band has a token bucket, as in
 * Open vSwitch's userspace datapath: every packet refills the buckets by
 * the time since the last one, a band whose bucket holds the packet's
 * cost takes it from there, and among the bands that cannot, the one with
 * the highest rate acts: DROP drops the packet, DSCP_REMARK raises its
 * AF drop precedence by prec_level.
 *
 * Units keep the arithmetic exact: one second of refill is rate * 1e9 for
 * both kinds, so kbit/s buckets count 1e-6 bits (a frame costs len * 8e6)
 * and packet/s buckets 1e-9 packets (a packet costs 1e9). Refills are
 * capped at one second, which keeps every product inside 64 bits.
 */
#ifndef NAGARE_METER_H
#define NAGARE_METER_H

#include "common.h"

#define MAX_METER_BANDS 4
#define MAX_METERS 4096
#define METER_PKTPS (1 << 0)   /* rates in packets/s, else kbit/s */
#define METER_BAND_DROP 1
#define METER_BAND_DSCP_REMARK 2
#define NSEC_PER_SEC 1000000000ull

struct meter_band {
	__u64 rate;     /* kbit/s or packets/s */
	__u64 cap;      /* bucket size, in the units above */
	__u64 tokens;
	__u64 packets;  /* packets this band acted on */
	__u64 bytes;
	__u32 type;     /* METER_BAND_* */
	__u32 prec_level;
};

struct meter {
	struct bpf_spin_lock lock;
	__u32 flags;    /* METER_PKTPS */
	__u32 n_bands;
	__u32 pad;
	__u64 last;     /* bpf_ktime_get_ns() of the last packet */
	__u64 packets;  /* packets in */
	__u64 bytes;
	struct meter_band band[MAX_METER_BANDS];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_METERS);
	__type(key, __u32);
	__type(value, struct meter);
} meters SEC(".maps");

enum meter_verdict { METER_PASS = 0, METER_DROP = 1, METER_REMARK = 2 };

/* meter_apply runs a packet of len bytes through meter id. It returns a
 * meter_verdict, with *prec the drop precedence levels to add for
 * METER_REMARK. A meter that is gone (its flows are being removed) drops. */
static __always_inline int meter_apply(__u32 id, __u32 len, __u32 *prec)
{
	struct meter *m = bpf_map_lookup_elem(&meters, &id);
	__u64 now = bpf_ktime_get_ns(), el, cost, best_rate = 0;
	int best = -1, ret = METER_PASS;
	__u32 i;

	if (!m)
		return METER_DROP;
	bpf_spin_lock(&m->lock);
	el = now - m->last;
	if (el > NSEC_PER_SEC)
		el = NSEC_PER_SEC;
	m->last = now;
	m->packets++;
	m->bytes += len;
	cost = (m->flags & METER_PKTPS) ? NSEC_PER_SEC : (__u64)len * 8000000;
	for (i = 0; i < MAX_METER_BANDS; i++) {
		struct meter_band *b = &m->band[i];

		if (i >= m->n_bands)
			break;
		b->tokens += el * b->rate;
		if (b->tokens > b->cap)
			b->tokens = b->cap;
		if (b->tokens >= cost)
			b->tokens -= cost;
		else if (b->rate > best_rate) {
			best_rate = b->rate;
			best = i;
		}
	}
	if (best >= 0 && best < MAX_METER_BANDS) {
		struct meter_band *b = &m->band[best];

		b->packets++;
		b->bytes += len;
		ret = b->type == METER_BAND_DSCP_REMARK ? METER_REMARK : METER_DROP;
		*prec = b->prec_level;
	}
	bpf_spin_unlock(&m->lock);
	return ret;
}

/* af_remark raises the drop precedence of an AF DSCP (class 1-4, drop
 * precedence 1-3: DSCP = 8 class + 2 precedence) by prec, at most to 3;
 * other code points are left alone (they have no drop precedence). */
static __always_inline __u8 af_remark(__u8 dscp, __u32 prec)
{
	__u8 class = dscp >> 3, dp = (dscp >> 1) & 3;

	if ((dscp & 1) || class < 1 || class > 4 || dp < 1)
		return dscp;
	dp = dp + prec > 3 ? 3 : dp + prec;
	return class << 3 | dp << 1;
}

#endif
