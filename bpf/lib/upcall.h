/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* upcall.h — hand a packet and its key to userspace through the ring.
 *
 * A record carries up to UPCALL_SNAP bytes of the packet: enough for any
 * packet userspace can execute again (BPF_PROG_RUN takes at most a page
 * of packet data), so a first packet up to that size is delivered, not
 * lost. A larger missed packet is a GSO super-packet (a pod with TSO, or
 * UDP_SEGMENT, whose flow expired mid-connection): its record carries all
 * of it, up to UPCALL_GSO bytes, and its gso_size, so that userspace can
 * cut it into the segments the device would have sent and deliver those.
 * Past UPCALL_GSO (BIG TCP) and for userspace actions (a PACKET_IN needs
 * no more) the record is cut at UPCALL_SNAP, cap_len < pkt_len;
 * userspace installs the flow and counts the packet as truncated. */
#ifndef NAGARE_UPCALL_H
#define NAGARE_UPCALL_H

#include "maps.h"

#define UPCALL_SNAP 3072
#define UPCALL_GSO 65536

enum upcall_reason {
	UPCALL_MISS = 1,   /* no cached flow */
	UPCALL_ACTION = 2, /* a flow's userspace action */
	UPCALL_ONLOAD = 3, /* a packet of an onloaded flow (onload ring): cookie = gen << 32 | flow id */
};

struct upcall {
	__u32 reason;
	__u32 ifindex;  /* device the packet arrived on */
	__u32 pkt_len;  /* length of the packet */
	__u32 cap_len;  /* bytes in pkt[] */
	__u64 cookie;   /* userspace action argument */
	/* A VLAN tag the kernel holds in skb metadata, not in pkt[] (any
	 * tagged packet at tc ingress of a real device, or one pushed):
	 * proto << 16 | tci, 0 for none. Userspace puts it back in the
	 * packet, so that every slow-path delivery (PACKET_IN, the first
	 * packet's execution) carries the packet as it arrived. */
	__u32 vlan;
	__u32 gso_size; /* the skb's MSS when it is a GSO packet, else 0 */
	struct flow_key key;
	__u8 pkt[UPCALL_SNAP];
};

/* Records are as long as the packet needs: a small record for small
 * packets (most first packets: SYNs, DNS, 64 B UDP) keeps ~15 times more
 * upcalls in the ring than a full-size one, so a burst of new flows is
 * queued, not dropped. The size must be a constant for the verifier,
 * hence fixed sizes. The least one fits a minimum-size frame (64 B: a
 * bare ACK, a short UDP datagram, ARP): with the 160-byte key its record
 * is 264 B, so a burst of such first packets finds room for 31 700 in
 * the ring (25 500 in the tiny one's 328 B). The tiny one fits a SYN with
 * every option (74 B) and most DNS queries. */
#define UPCALL_MIN 64
#define UPCALL_TINY 128
#define UPCALL_SMALL 256

/* Wakeups. Every record submitted to an idle ring wakes the handler
 * thread; a stream of controller-action upcalls (a port whose packets go
 * to the controller) would wake it thousands of times a second, and each
 * wakeup takes the handler's core from whatever runs there (a victim pod
 * on the same core: its p99 doubled at 2000 a second). A PACKET_IN can
 * wait a few milliseconds, a first packet cannot: an action upcall wakes
 * the handler only if this CPU has not woken it in the last
 * ACTION_WAKE_GAP_NS; misses always do. A record that wakes forces the
 * wakeup: the ring's default wakes only a reader that has read everything
 * before the record, and records left unread without a wakeup would
 * silence every later one. The reader keeps looking (upcallLinger in
 * pkg/datapath/upcall.go, longer than the gap) until a while after its
 * last action upcall, so a record submitted without a wakeup is never
 * left in the ring. */
#define ACTION_WAKE_GAP_NS (4 * 1000 * 1000)

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} upcall_wake SEC(".maps");

static __always_inline __u64 upcall_wakeup(__u32 reason)
{
	__u32 zero = 0;
	__u64 *last, now;

	if (reason != UPCALL_ACTION)
		return BPF_RB_FORCE_WAKEUP;
	last = bpf_map_lookup_elem(&upcall_wake, &zero);
	if (!last)
		return BPF_RB_FORCE_WAKEUP;
	now = bpf_ktime_get_ns();
	if (now - *last < ACTION_WAKE_GAP_NS)
		return BPF_RB_NO_WAKEUP;
	*last = now;
	return BPF_RB_FORCE_WAKEUP;
}

/* ring_packet writes one record to ring (a ring buffer map) with up to
 * snap bytes of the packet; with seq, it counts the record in seq->enq
 * before userspace can see it. Returns 0, or -1 when the ring is full. */
static __always_inline int ring_packet(void *ring, struct __sk_buff *skb, const struct flow_key *key,
				       __u32 reason, __u64 cookie, const __u32 snap, __u64 *seq)
{
	struct upcall *u;
	__u64 cap = skb->len;

	u = bpf_ringbuf_reserve(ring, offsetof(struct upcall, pkt) + snap, 0);
	if (!u)
		return -1;
	u->reason = reason;
	u->ifindex = skb->ifindex;
	u->pkt_len = skb->len;
	u->cookie = cookie;
	u->vlan = skb->vlan_present ? (__u32)bpf_ntohs((__u16)skb->vlan_proto) << 16 | (skb->vlan_tci & 0xffff) : 0;
	u->gso_size = skb->gso_size;
	__builtin_memcpy(&u->key, key, sizeof(*key));
	if (cap > snap)
		cap = snap;
	/* Keep the bounds check and the use on one register for the verifier. */
	asm volatile("" : "+r"(cap));
	if (cap < 1 || bpf_skb_load_bytes(skb, 0, (void *)u + offsetof(struct upcall, pkt), cap) < 0)
		cap = 0;
	u->cap_len = cap;
	if (seq)
		__sync_fetch_and_add(seq, 1);
	/* Onload rings keep the ring's default wakeup; the upcall ring's
	 * action records are throttled (upcall_wakeup). */
	bpf_ringbuf_submit(u, seq ? 0 : upcall_wakeup(reason));
	count(seq ? CTR_ONLOAD : CTR_UPCALL);
	return 0;
}

/* Per-port upcall budget. The ring and the handler thread are shared by
 * every port: a port sending never-repeating 5-tuples would otherwise
 * fill the ring with its misses, and every other port's first packets
 * would be dropped or wait behind them. Each port gets a token bucket —
 * cfg->upcall_rate upcalls per second, cfg->upcall_burst at once — checked
 * here, before the ring; a miss past it is dropped and counted
 * (upcall-port-budget, by port). Credit is kept in nanoseconds so one
 * subtraction both refills and spends. The bucket is made on a port's
 * first upcall, full; a full map admits (the ring limit still holds). */
struct upcall_meter {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 credit_ns;
	__u64 last_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct upcall_meter);
} upcall_meters SEC(".maps");

static __always_inline int upcall_admit(const struct __sk_buff *skb, const struct dp_config *cfg)
{
	struct upcall_meter *m, fresh = {};
	__u32 ifindex = skb->ifindex;
	__u64 cost, cap, now, credit;
	int ok;

	if (!cfg->upcall_rate)
		return 1;
	cost = 1000000000ull / cfg->upcall_rate;
	cap = cost * (cfg->upcall_burst ? cfg->upcall_burst : 1);
	now = bpf_ktime_get_ns();
	m = bpf_map_lookup_elem(&upcall_meters, &ifindex);
	if (!m) {
		fresh.credit_ns = cap - cost;
		fresh.last_ns = now;
		bpf_map_update_elem(&upcall_meters, &ifindex, &fresh, BPF_NOEXIST);
		return 1;
	}
	bpf_spin_lock(&m->lock);
	credit = m->credit_ns;
	if (now > m->last_ns)
		credit += now - m->last_ns;
	m->last_ns = now;
	if (credit > cap)
		credit = cap;
	ok = credit >= cost;
	if (ok)
		credit -= cost;
	m->credit_ns = credit;
	bpf_spin_unlock(&m->lock);
	return ok;
}

/* Paced upcalls. Two kinds of a port's upcalls can be work the handler
 * thread does for nothing, on a core it may share with pods:
 *
 * - Controller actions. A cached flow whose action is the controller
 *   sends each packet up as an action upcall, which only turns into a
 *   PACKET_IN if a controller connection's budget takes it (pkg/switchd,
 *   pinsched.go). When the controllers take far fewer than the port's
 *   upcall budget admits, the rest is refused after the handler read it.
 * - Misses of a port past its cache budget. Their flows are refused
 *   (per-port flow and mask budgets): each is translated and executed and
 *   not cached, and its next packet misses again.
 *
 * Userspace watches what is refused (pacer, pkg/switchd/pinfeedback.go)
 * and writes here, per ingress device and kind, the rate it accepts:
 * the device's ifindex for controller actions, ifindex | MISS_METER for
 * misses. Upcalls past it are dropped before the ring (counted:
 * controller-upcall-budget, upcall-port-budget). No entry: no limit
 * beyond the port's budget. Userspace writes cost_ns and cap_ns with a
 * full credit; the fast path spends it.
 *
 * The bucket lets upcalls through in clumps: once full it stays open
 * until spent, then closes until full again. The rate is the same, but
 * the upcalls of a paced port (a tenth of a second's worth per clump)
 * reach the ring back to back, and the handler thread wakes once per
 * clump rather than once per upcall (upcall_wakeup). What a paced port
 * sends up was being refused anyway; waiting up to a tenth of a second
 * costs it little. */
#define MISS_METER (1u << 31)

struct action_meter {
	struct bpf_spin_lock lock;
	__u32 open;     /* spending a full bucket, see paced_admit */
	__u64 credit_ns;
	__u64 last_ns;
	__u64 cost_ns; /* 1e9 / rate */
	__u64 cap_ns;  /* credit kept at most: the burst */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct action_meter);
} action_meters SEC(".maps");

static __always_inline int paced_admit(const struct __sk_buff *skb, __u32 kind)
{
	struct action_meter *m;
	__u32 key = skb->ifindex | kind;
	__u64 now, credit;
	int ok;

	m = bpf_map_lookup_elem(&action_meters, &key);
	if (!m)
		return 1;
	now = bpf_ktime_get_ns();
	bpf_spin_lock(&m->lock);
	credit = m->credit_ns;
	if (now > m->last_ns)
		credit += now - m->last_ns;
	m->last_ns = now;
	if (credit >= m->cap_ns) {
		credit = m->cap_ns;
		m->open = 1;
	}
	ok = m->open && credit >= m->cost_ns;
	if (ok)
		credit -= m->cost_ns;
	if (credit < m->cost_ns)
		m->open = 0;
	m->credit_ns = credit;
	bpf_spin_unlock(&m->lock);
	return ok;
}

static __always_inline int action_upcall_admit(const struct __sk_buff *skb)
{
	return paced_admit(skb, 0);
}

/* upcall_admit_port is upcall_admit for code without the config at hand. */
static __always_inline int upcall_admit_port(const struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct dp_config *cfg = bpf_map_lookup_elem(&config, &zero);

	return !cfg || upcall_admit(skb, cfg);
}

/* send_upcall returns 0, or -1 when the ring is full. */
static __always_inline int send_upcall(struct __sk_buff *skb, const struct flow_key *key,
				       __u32 reason, __u64 cookie)
{
	if (skb->len <= UPCALL_MIN)
		return ring_packet(&upcalls, skb, key, reason, cookie, UPCALL_MIN, NULL);
	if (skb->len <= UPCALL_TINY)
		return ring_packet(&upcalls, skb, key, reason, cookie, UPCALL_TINY, NULL);
	if (skb->len <= UPCALL_SMALL)
		return ring_packet(&upcalls, skb, key, reason, cookie, UPCALL_SMALL, NULL);
	if (skb->len <= UPCALL_SNAP || reason != UPCALL_MISS)
		return ring_packet(&upcalls, skb, key, reason, cookie, UPCALL_SNAP, NULL);
	return ring_packet(&upcalls, skb, key, reason, cookie, UPCALL_GSO, NULL);
}

#endif
