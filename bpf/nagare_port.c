/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* nagare_port.c — the fast path's entry points.
 *
 *   nagare_port_ingress  tcx ingress of every switch port (pod-side veths,
 *                        the uplink, external-mode tunnel devices)
 *   nagare_execute       run by userspace with BPF_PROG_RUN to send a packet
 *                        through an action list (upcalled first packets,
 *                        OpenFlow PACKET_OUT)
 *   nagare_port_xdp      XDP on ports whose flows may be onloaded: their
 *                        packets to an AF_XDP socket (nagare_port_xdp.h)
 *
 * One packet's way: port lookup → parse → exact-match cache → megaflow
 * search → stats → actions; a miss goes to userspace on the upcall ring,
 * a packet of an onloaded flow on the onload ring (lib/onload.h).
 * Everything the fast path does is decided by userspace: it replays flows,
 * it never makes policy. */
#include "lib/common.h"
#include "lib/flow_key.h"
#include "lib/maps.h"
#include "lib/parse.h"
#include "lib/megaflow.h"
#include "lib/upcall.h"
#include "lib/actions.h"
#include "lib/onload.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Tunnel ports read the metadata the external-mode device left on the
 * skb after decapsulation. */
static __always_inline int tunnel_key(struct __sk_buff *skb, struct flow_key *key)
{
	struct bpf_tunnel_key tk = {};

	if (bpf_skb_get_tunnel_key(skb, &tk, sizeof(tk), 0) < 0)
		return -DROP_TUNNEL_KEY;
	key->tun_id = tk.tunnel_id;
	key->tun_src = bpf_htonl(tk.remote_ipv4);
	key->tun_dst = bpf_htonl(tk.local_ipv4);
	key->tun_tos = tk.tunnel_tos;
	key->tun_ttl = tk.tunnel_ttl;
	key->tun_flags = TUN_PRESENT;
	return 0;
}

static __always_inline void update_stats(__u32 fid, __u32 len, __be16 tcp_flags)
{
	struct flow_stats *st = bpf_map_lookup_elem(&stats, &fid);

	if (!st)
		return;
	st->packets++;
	st->bytes += len;
	st->used = bpf_ktime_get_coarse_ns();
	st->tcp_flags |= bpf_ntohs(tcp_flags);
}

static __always_inline struct port_info *port_lookup(__u32 ifindex)
{
	if (ifindex < PORT_ARRAY) {
		struct port_info *p = bpf_map_lookup_elem(&ports, &ifindex);

		return p && p->ofport ? p : NULL;
	}
	return bpf_map_lookup_elem(&ports_big, &ifindex);
}

/* emc_hash spreads a key over the EMC slots: two xor lanes, two
 * multiplies, a final mix (cheaper than hashing 112 bytes word by word). */
static __always_inline __u32 emc_hash(const struct flow_key *key)
{
	const __u64 *k = (const __u64 *)key;
	__u64 a = k[0] ^ k[2] ^ k[4] ^ k[6] ^ k[8] ^ k[10] ^ k[12];
	__u64 b = k[1] ^ k[3] ^ k[5] ^ k[7] ^ k[9] ^ k[11] ^ k[13];
	__u64 h = a * 0x9E3779B97F4A7C15ull ^ b * 0xC2B2AE3D27D4EB4Full;

	h ^= h >> 29;
	h *= 0x165667B19E3779F9ull;
	return h >> (64 - EMC_BITS);
}

static __always_inline int key_equal(const struct flow_key *a, const struct flow_key *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;

	return !((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3]) |
		 (x[4] ^ y[4]) | (x[5] ^ y[5]) | (x[6] ^ y[6]) | (x[7] ^ y[7]) |
		 (x[8] ^ y[8]) | (x[9] ^ y[9]) | (x[10] ^ y[10]) | (x[11] ^ y[11]) |
		 (x[12] ^ y[12]) | (x[13] ^ y[13]));
}

/* flow_alive: is (fid, gen) still the installed flow? */
static __always_inline int flow_alive(__u32 fid, __u32 gen)
{
	__u32 *g = bpf_map_lookup_elem(&flow_gens, &fid);

	return g && gen && *g == gen;
}

static __always_inline void trace_reset(void)
{
	__u32 zero = 0;
	struct out_trace *t;

	if (!trace_outputs)
		return;
	t = bpf_map_lookup_elem(&out_traces, &zero);
	if (t)
		t->n = 0;
}

SEC("tc")
int nagare_port_ingress(struct __sk_buff *skb)
{
	struct flow_key key = {};
	struct parse_state ps = {};
	const struct flow_entry *fe = NULL;
	struct emc_entry *emc_slot = NULL;
	struct port_info *port;
	struct dp_config *cfg;
	__u32 ifindex = skb->ifindex, zero = 0, fid = NO_FLOW;
	int ret;

	if (skb->mark == NAGARE_MARK_BYPASS) {
		skb->mark = 0;
		return TC_ACT_OK;
	}
	port = port_lookup(ifindex);
	if (!port)
		return TC_ACT_OK; /* not a switch port (being added or removed) */
	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return TC_ACT_OK;
	trace_reset();

	key.in_port = port->ofport;
	if (port->flags & PORT_TUNNEL) {
		ret = tunnel_key(skb, &key);
		if (ret < 0)
			return drop(-ret);
	}
	ret = parse_packet(skb, &key, &ps);
	if (ret < 0)
		return drop(-ret);

	if (cfg->emc) {
		__u32 slot = emc_hash(&key);

		emc_slot = bpf_map_lookup_elem(&emc, &slot);
		if (emc_slot && key_equal(&emc_slot->key, &key) &&
		    flow_alive(emc_slot->flow_id, emc_slot->gen)) {
			fid = emc_slot->flow_id;
			fe = &emc_slot->fe;
			count(CTR_EMC_HIT);
		}
	}
	if (!fe) {
		fid = megaflow_lookup(&key, cfg->n_masks);
		if (fid != NO_FLOW)
			fe = bpf_map_lookup_elem(&flows, &fid);
		if (fe) {
			count(CTR_MEGAFLOW_HIT);
			/* Remember it in this CPU's slot; a colliding key is
			 * evicted. Only one hit in cfg->emc is remembered (Open
			 * vSwitch's emc-insert-inv-prob): a flow with many
			 * packets gets its entry soon, while a sender of ever-new
			 * keys (random ports or TTLs under one wide megaflow)
			 * can no longer evict everyone else's entries at its
			 * own packet rate. */
			if (emc_slot && flow_alive(fid, fe->gen) &&
			    (cfg->emc <= 1 || bpf_get_prandom_u32() % cfg->emc == 0)) {
				__builtin_memcpy(&emc_slot->key, &key, sizeof(key));
				emc_slot->flow_id = fid;
				emc_slot->gen = fe->gen;
				__builtin_memcpy(&emc_slot->fe, fe, sizeof(*fe));
				count(CTR_EMC_INSERT);
			}
		}
	}
	if (!fe) {
		count(CTR_MISS);
		if (!cfg->upcalls)
			return drop(DROP_MISS_NO_UPCALL);
		if (!upcall_admit(skb, cfg))
			return drop(DROP_UPCALL_PORT_BUDGET);
		if (send_upcall(skb, &key, UPCALL_MISS, 0) < 0)
			return drop(DROP_UPCALL_RING_FULL);
		/* Userspace executes the packet once it has decided. */
		return TC_ACT_SHOT;
	}

	update_stats(fid, skb->len, key.tcp_flags);
	/* On a PORT_XDP port, XDP saw this packet first and left it to the
	 * fast path. */
	if (!(port->flags & PORT_XDP) &&
	    onload_packet(skb, &key, fe, fid) != ONLOAD_NO)
		return TC_ACT_SHOT; /* userspace sends it on, or dropped and counted */
	return run_actions(skb, fe, &ps, &key, MODE_PATH);
}

SEC("tc")
int nagare_execute(struct __sk_buff *skb)
{
	struct flow_key key = {};
	struct parse_state ps = {};
	const struct flow_entry *fe;
	__u32 slot = skb->cb[0];
	int ret;

	trace_reset();
	fe = bpf_map_lookup_elem(&exec_actions, &slot);
	if (!fe || !fe->gen)
		return drop(DROP_EXEC_SLOT);
	key.in_port = skb->cb[1];
	ret = parse_packet(skb, &key, &ps);
	if (ret < 0)
		return drop(-ret);
	count(CTR_EXECUTED);
	run_actions(skb, fe, &ps, &key, MODE_EXECUTE);
	return TC_ACT_SHOT;
}

#include "nagare_port_xdp.h"
