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
 *   nagare_recirc        the passes after the first (tail call, lib/recirc.h)
 *
 * One packet's way: port lookup → parse → exact-match cache → megaflow
 * search → stats → actions; a packet of an established connection whose
 * walk is known goes the connection's shortcut instead (lib/shortcut.h);
 * a miss goes to userspace on the upcall ring,
 * a packet of an onloaded flow on the onload ring (lib/onload.h). A
 * recirc action ends the pass and starts the next one (lib/recirc.h).
 * Everything the fast path does is decided by userspace: it replays flows,
 * it never makes policy. */
#include "lib/common.h"
#include "lib/flow_key.h"
#include "lib/maps.h"
#include "lib/parse.h"
#include "lib/megaflow.h"
#include "lib/upcall.h"
#include "lib/recirc.h"
#include "lib/actions.h"
#include "lib/onload.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Tunnel ports read the metadata the external-mode device left on the
 * skb after decapsulation. Out of line: its bpf_tunnel_key must not sit
 * on the entry program's stack, which run_actions' frame shares the
 * verifier's 512 bytes with. */
__noinline int tunnel_key(struct __sk_buff *skb, struct flow_key *key)
{
	struct bpf_tunnel_key tk = {};

	if (!skb || !key)
		return -DROP_TUNNEL_KEY;
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

/* update_stats_at counts a packet of flow fid at now
 * (bpf_ktime_get_coarse_ns()). */
static __always_inline void update_stats_at(__u32 fid, __u32 len, __be16 tcp_flags, __u64 now)
{
	struct flow_stats *st = bpf_map_lookup_elem(&stats, &fid);

	if (!st)
		return;
	st->packets++;
	st->bytes += len;
	st->used = now;
	st->tcp_flags |= bpf_ntohs(tcp_flags);
}

static __always_inline void update_stats(__u32 fid, __u32 len, __be16 tcp_flags)
{
	update_stats_at(fid, len, tcp_flags, bpf_ktime_get_coarse_ns());
}

static __always_inline struct port_info *port_lookup(__u32 ifindex)
{
	if (ifindex < PORT_ARRAY) {
		struct port_info *p = bpf_map_lookup_elem(&ports, &ifindex);

		return p && p->ofport ? p : NULL;
	}
	return bpf_map_lookup_elem(&ports_big, &ifindex);
}

/* flow_alive: is (fid, gen) still the installed flow? */
static __always_inline int flow_alive(__u32 fid, __u32 gen)
{
	return gen && flow_gen(fid) == gen;
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

/* After update_stats, flow_alive and trace_reset, which it uses. */
#include "lib/shortcut.h"

/* pass_run looks st->key up (EMC, then megaflow search) and runs what
 * it finds; a miss is an upcall. Every pass of a packet runs it: the first
 * (from a port, or from userspace) and each recirculation (recirc.h). */
static __always_inline int pass_run(struct __sk_buff *skb, struct pass *st, struct dp_config *cfg,
				    __u32 port_flags, int mode, int first, int gso_decap)
{
	struct flow_key *key = &st->key;
	const struct flow_entry *fe = NULL;
	struct emc_entry *emc_slot = NULL;
	__u32 fid = NO_FLOW, emc_idx = 0, emc_tag = 0, *tag = NULL;
	int ret;

	if (cfg->emc) {
		__u64 h = key_hash(key);

		__u32 at;

		emc_idx = h >> (64 - EMC_BITS);
		emc_tag = (__u32)h | 1;
		at = bpf_get_smp_processor_id() << EMC_BITS | emc_idx;
		tag = bpf_map_lookup_elem(&emc_tags, &at);
		if (tag && *tag == emc_tag)
			emc_slot = bpf_map_lookup_elem(&emc, &emc_idx);
		if (emc_slot && key_equal(&emc_slot->key, key) &&
		    flow_alive(emc_slot->flow_id, emc_slot->gen)) {
			fid = emc_slot->flow_id;
			fe = &emc_slot->fe;
			count(CTR_EMC_HIT);
		}
	}
	if (!fe) {
		fid = megaflow_lookup(key, cfg->n_masks, cfg->mask_cache);
		if (fid != NO_FLOW && flow_fetch(fid, &st->fe))
			fe = &st->fe;
		if (fe) {
			count(CTR_MEGAFLOW_HIT);
			/* Remember it in this CPU's slot; a colliding key is
			 * evicted. Only one hit in cfg->emc is remembered (Open
			 * vSwitch's emc-insert-inv-prob): a flow with many
			 * packets gets its entry soon, while a sender of ever-new
			 * keys (random ports or TTLs under one wide megaflow)
			 * can no longer evict everyone else's entries at its
			 * own packet rate. */
			if (tag && flow_alive(fid, fe->gen) &&
			    (cfg->emc <= 1 || bpf_get_prandom_u32() % cfg->emc == 0) &&
			    (emc_slot || (emc_slot = bpf_map_lookup_elem(&emc, &emc_idx)))) {
				__builtin_memcpy(&emc_slot->key, key, sizeof(*key));
				emc_slot->flow_id = fid;
				emc_slot->gen = fe->gen;
				__builtin_memcpy(&emc_slot->fe, fe, sizeof(*fe));
				*tag = emc_tag;
				count(CTR_EMC_INSERT);
			}
		}
	}
	if (!fe) {
		count(CTR_MISS);
		if (!cfg->upcalls)
			return drop(DROP_MISS_NO_UPCALL);
		/* A packet userspace executes came from userspace: its
		 * miss after a recirculation is not the port's to pay for.
		 * A port whose flows userspace refuses for its cache budget
		 * has its misses paced (paced_admit) before they spend the
		 * budget. */
		if (mode == MODE_PATH && (!paced_admit(skb, MISS_METER) || !upcall_admit(skb, cfg)))
			return drop(DROP_UPCALL_PORT_BUDGET);
		if (send_upcall(skb, key, UPCALL_MISS, 0) < 0)
			return drop(DROP_UPCALL_RING_FULL);
		/* Userspace executes the packet once it has decided. */
		return TC_ACT_SHOT;
	}

	/* A GSO packet tunnel_recv decapsulated goes on only into pods;
	 * any other flow's copy goes back to the VXLAN driver as it came
	 * (tunnel.h), which clears its tunnel GSO state. */
	if (gso_decap && !gso_safe(fe)) {
		int r = tunnel_undo(skb);

		return r < 0 ? drop(-r) : TC_ACT_OK;
	}
	update_stats(fid, skb->len, key->tcp_flags);
	/* On a PORT_XDP port, XDP saw this packet first and left it to the
	 * fast path. Only first passes are onloaded: the onload ring's
	 * userspace runs a flow's actions on the packet as it arrived. */
	if (first && mode == MODE_PATH && !(port_flags & PORT_XDP) &&
	    onload_packet(skb, key, fe, fid) != ONLOAD_NO)
		return TC_ACT_SHOT; /* userspace sends it on, or dropped and counted */
	ret = run_list(skb, fe, &st->ps, key, mode);
	if (first && mode == MODE_PATH && ret == TC_ACT_REDIRECT && cfg->emc && !(port_flags & (PORT_TUNNEL | PORT_XDP)))
		shortcut_learn(skb, key, fe, fid, cfg->emc);
	return ret;
}

/* recirculate hands the packet to nagare_recirc for its next pass. */
static __always_inline int recirculate(struct __sk_buff *skb, __u32 mode, __u32 depth)
{
	skb->cb[RECIRC_CB_MODE] = mode;
	skb->cb[RECIRC_CB_DEPTH] = depth;
	bpf_tail_call(skb, &recirc_progs, 0);
	/* Only when userspace has not filled recirc_progs (being loaded). */
	return drop(DROP_BAD_ACTION);
}

SEC("tc")
int nagare_port_ingress(struct __sk_buff *skb)
{
	struct native_tunnel *nt = NULL;
	struct port_info *port;
	struct dp_config *cfg;
	struct pass *st;
	__u32 ifindex = skb->ifindex, zero = 0, ofport, flags = 0;
	int ret, gso_decap = 0;

	if (skb->mark == NAGARE_MARK_BYPASS) {
		skb->mark = 0;
		return TC_ACT_OK;
	}
	port = port_lookup(ifindex);
	if (port) {
		ofport = port->ofport;
		flags = port->flags;
	} else {
		/* Not a switch port (being added or removed), or the underlay
		 * of a tunnel whose VXLAN the fast path does (tunnel.h). */
		nt = bpf_map_lookup_elem(&native_tunnels, &ifindex);
		if (!nt || nt->underlay != ifindex)
			return TC_ACT_OK;
		ofport = nt->ofport;
	}
	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return TC_ACT_OK;
	if (port && cfg->emc && !(flags & (PORT_TUNNEL | PORT_XDP))) {
		ret = shortcut_run(skb, ofport);
		if (ret >= 0)
			return ret;
	}
	st = pass_of(MODE_PATH);
	if (!st)
		return TC_ACT_OK;
	trace_reset();

	__builtin_memset(&st->key, 0, sizeof(st->key));
	__builtin_memset(&st->ps, 0, sizeof(st->ps));
	st->key.in_port = ofport;
	if (nt) {
		ret = tunnel_recv(skb, &st->key, nt->local, nt->port);
		if (ret == 1)
			return TC_ACT_OK;
		if (ret < 0)
			return drop(-ret);
		gso_decap = ret == 2;
	} else if (flags & PORT_TUNNEL) {
		ret = tunnel_key(skb, &st->key);
		if (ret < 0)
			return drop(-ret);
	}
	ret = parse_packet(skb, &st->key, &st->ps);
	if (ret < 0)
		return drop(-ret);
	ret = pass_run(skb, st, cfg, flags, MODE_PATH, 1, gso_decap);
	if (ret == TC_ACT_RECIRC)
		return recirculate(skb, MODE_PATH, 1);
	return ret;
}

/* nagare_recirc is every pass after the first (recirc.h): entered by tail
 * call only, with the mode and depth in skb->cb. */
SEC("tc")
int nagare_recirc(struct __sk_buff *skb)
{
	__u32 mode = skb->cb[RECIRC_CB_MODE] & 1, depth = skb->cb[RECIRC_CB_DEPTH], zero = 0;
	struct dp_config *cfg;
	struct pass *st;
	int ret;

	cfg = bpf_map_lookup_elem(&config, &zero);
	st = pass_of(mode);
	if (!cfg || !st)
		return TC_ACT_SHOT;
	if (depth >= RECIRC_MAX)
		return drop(DROP_RECIRC_DEPTH);
	/* A pass that changed neither the packet nor the key's parsed words
	 * (a ct without NAT, then recirc: every packet of a pipeline that
	 * tracks connections) leaves the key as a new parse would make it:
	 * the next pass keeps it. */
	if (st->ps.dirty) {
		recirc_save(&st->carry, &st->key);
		__builtin_memset(&st->key, 0, sizeof(st->key));
		__builtin_memset(&st->ps, 0, sizeof(st->ps));
		ret = parse_packet(skb, &st->key, &st->ps);
		if (ret < 0)
			return drop(-ret);
		recirc_restore(&st->key, &st->carry);
	}
	ret = pass_run(skb, st, cfg, 0, mode, 0, 0);
	if (ret == TC_ACT_RECIRC)
		return recirculate(skb, mode, depth + 1);
	return mode == MODE_EXECUTE ? TC_ACT_SHOT : ret;
}

SEC("tc")
int nagare_execute(struct __sk_buff *skb)
{
	const struct flow_entry *fe;
	struct pass *st = pass_of(MODE_EXECUTE);
	__u32 slot = skb->cb[0];
	int ret;

	trace_reset();
	fe = bpf_map_lookup_elem(&exec_actions, &slot);
	if (!fe || !fe->gen)
		return drop(DROP_EXEC_SLOT);
	if (!st)
		return TC_ACT_SHOT;
	__builtin_memset(&st->key, 0, sizeof(st->key));
	__builtin_memset(&st->ps, 0, sizeof(st->ps));
	st->key.in_port = skb->cb[1];
	ret = parse_packet(skb, &st->key, &st->ps);
	if (ret < 0)
		return drop(-ret);
	count(CTR_EXECUTED);
	ret = run_list(skb, fe, &st->ps, &st->key, MODE_EXECUTE);
	if (ret == TC_ACT_RECIRC)
		return recirculate(skb, MODE_EXECUTE, 1);
	return TC_ACT_SHOT;
}

#include "nagare_port_xdp.h"
