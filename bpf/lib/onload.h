/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* onload.h — hand the packets of onloaded flows to userspace.
 *
 * An onloaded flow is still a cached megaflow: the fast path classifies
 * its packets and counts them (so statistics, revalidation and OpenFlow
 * counters are the same whatever the placement), then, instead of running
 * the actions, puts the packet on the onload ring. The switch reads the
 * ring in batches and executes each packet with the flow's cached actions.
 *
 * Order across a placement change. Offload → onload: packets before the
 * change already left through the fast path; later ones queue behind
 * them. Onload → offload: packets may still wait in the ring or in the
 * switch; a later packet that took the fast path would overtake them. So
 * every flow id counts packets handed up (enq, here) and packets sent on
 * (done, by userspace in the mmapped onload_seqs array): while they differ,
 * a packet of that flow goes to userspace whatever the placement. Flows
 * of one flow id handled on several CPUs at once have no order to keep. */
#ifndef NAGARE_ONLOAD_H
#define NAGARE_ONLOAD_H

#include "maps.h"
#include "upcall.h"

/* The largest frame the onload path carries in a jumbo record: a
 * 9000-byte MTU frame and a VLAN tag. */
#define ONLOAD_SNAP 9216
/* GSO packets (a pod with TSO or UDP_SEGMENT) up to 64 KiB go whole in a
 * record of this size, with their gso_size (struct upcall): userspace
 * cuts them into the segments the device would have sent (Segment in
 * pkg/datapath/gso.go; the kind, TCP or UDP, is read from the headers).
 * A record takes a constant-size reservation, hence one more size. Past
 * it (BIG TCP) a packet stays on the fast path when no packet of its flow
 * is in userspace (counted: onload-gso), and is dropped when one is
 * (counted: onload-oversize). */
#define ONLOAD_GSO 65536
/* Record sizes: small packets, standard MTU frames, jumbo frames. */
#define ONLOAD_MID 1536

enum onload_verdict {
	ONLOAD_NO = 0,     /* run the actions here */
	ONLOAD_TAKEN = 1,  /* userspace owns the packet */
	ONLOAD_DROP = 2,   /* dropped, reason counted */
};

static __always_inline struct onload_seq *onload_seq_of(__u32 fid)
{
	return bpf_map_lookup_elem(&onload_seqs, &fid);
}

/* onload_pending: are packets of flow id fid still in userspace? */
static __always_inline int onload_pending(const struct onload_seq *s)
{
	return s && READ_ONCE(s->enq) != READ_ONCE(s->done);
}

/* onload_packet decides whether the packet of flow fid (entry fe) goes to
 * userspace, and sends it there. */
static __always_inline int onload_packet(struct __sk_buff *skb, const struct flow_key *key,
					 const struct flow_entry *fe, __u32 fid)
{
	struct onload_seq *s = onload_seq_of(fid);
	__u64 cookie;
	int pending, ret;

	if (!s)
		return ONLOAD_NO;
	pending = onload_pending(s);
	if (!(fe->flags & FLOW_ONLOAD) && !pending)
		return ONLOAD_NO;
	if (skb->len > ONLOAD_SNAP && (!skb->gso_size || skb->len > ONLOAD_GSO)) {
		if (pending) {
			drop(DROP_ONLOAD_OVERSIZE);
			return ONLOAD_DROP;
		}
		count(CTR_ONLOAD_GSO);
		return ONLOAD_NO;
	}
	cookie = (__u64)fe->gen << 32 | fid;
	if (skb->len <= UPCALL_SMALL)
		ret = ring_packet(&onload, skb, key, UPCALL_ONLOAD, cookie, UPCALL_SMALL, &s->enq);
	else if (skb->len <= ONLOAD_MID)
		ret = ring_packet(&onload, skb, key, UPCALL_ONLOAD, cookie, ONLOAD_MID, &s->enq);
	else if (skb->len <= ONLOAD_SNAP)
		ret = ring_packet(&onload, skb, key, UPCALL_ONLOAD, cookie, ONLOAD_SNAP, &s->enq);
	else
		ret = ring_packet(&onload, skb, key, UPCALL_ONLOAD, cookie, ONLOAD_GSO, &s->enq);
	if (ret < 0) {
		drop(DROP_ONLOAD_RING_FULL);
		return ONLOAD_DROP;
	}
	return ONLOAD_TAKEN;
}

#endif
