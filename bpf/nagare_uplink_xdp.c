/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* nagare_uplink_xdp.c — VS-extend steering at the uplink's receive point.
 *
 * Attached as XDP to the device tunnel traffic arrives on (the paper puts
 * it in the NIC driver, before the kernel builds an skb): each packet is
 * looked up in the Flow Table (bpf/lib/steer.h) and, on a hit, sent
 * through a cpumap to the CPU the entry names or chooses, where the kernel
 * builds the skb and runs the whole receive path (GRO, IP, UDP, VXLAN
 * decapsulation, the switch's fast path on the tunnel port, the socket).
 * A miss stays on the receiving CPU (XDP_PASS); so does anything the
 * parser cannot read: steering is an optimisation and never drops.
 */
#include "lib/common.h"
#include "lib/steer.h"

/* steer_deliver sends the packet to cpu, or leaves it where it is. */
static __always_inline int steer_deliver(__u32 cpu, __u32 self, __u64 bytes)
{
	long ret;

	if (cpu >= STEER_MAX_CPUS) {
		steer_count(&steer_cpus, STEER_MAX_CPUS, bytes);
		return XDP_PASS;
	}
	if (cpu == self) {
		/* The receiving CPU is the target: a cpumap hop would only
		 * add a queue. */
		steer_event(STEER_EV_LOCAL);
		steer_count(&steer_cpus, cpu, bytes);
		return XDP_PASS;
	}
	/* XDP_PASS in the flags is what a cpumap without this CPU answers. */
	ret = bpf_redirect_map(&steer_cpumap, cpu, XDP_PASS);
	if (ret != XDP_REDIRECT) {
		steer_event(STEER_EV_TARGET_DOWN);
		steer_count(&steer_cpus, STEER_MAX_CPUS, bytes);
		return XDP_PASS;
	}
	steer_count(&steer_cpus, cpu, bytes);
	return XDP_REDIRECT;
}

SEC("xdp")
int nagare_uplink_xdp(struct xdp_md *ctx)
{
	struct steer_key key = {};
	struct steer_parse sp = {};
	struct steer_settings *cfg;
	struct steer_entry *e;
	__u32 zero = 0, self, cpu;
	__u64 bytes = ctx->data_end - ctx->data;
	__u8 fcf;

	cfg = bpf_map_lookup_elem(&steer_config, &zero);
	if (!cfg || !cfg->n_masks)
		return XDP_PASS;
	self = bpf_get_smp_processor_id();
	if (steer_parse_packet(ctx, cfg, &key, &sp) < 0) {
		steer_event(STEER_EV_UNPARSED);
		steer_count(&steer_cpus, STEER_MAX_CPUS, bytes);
		return XDP_PASS;
	}
	/* The FCF rides in the outer ToS (the sender's tunnel copies it from
	 * the inner header, so ESP and outer fragments keep it); a tunnel that
	 * did not copy it leaves it in the inner header only. */
	fcf = steer_fcf(cfg, sp.tos_outer);
	if (!fcf && (key.flags & STEER_F_VXLAN))
		fcf = steer_fcf(cfg, sp.tos_inner);
	key.fcf = fcf;

	/* A later fragment goes where its datagram's first fragment went:
	 * the reassembly then happens on one CPU, whatever the entry matches. */
	if (sp.frag_later) {
		__u32 *to = bpf_map_lookup_elem(&steer_frags, &sp.frag);
		if (to) {
			steer_event(STEER_EV_FRAG_FOLLOW);
			return steer_deliver(*to, self, bytes);
		}
	}

	e = steer_classify(cfg, &key);
	if (!e) {
		steer_event(STEER_EV_MISS);
		cpu = STEER_CPU_RX;
	} else {
		steer_count(&steer_stats, e->id, bytes);
		cpu = e->cpu;
		if (e->action == STEER_ACT_CHOOSE && cpu == STEER_CPU_UNSET) {
			int prio = (e->flags & STEER_ENTRY_PRIO) || (fcf & 1);
			cpu = steer_take(e, steer_choose(cfg, prio), prio);
			steer_event(cpu == STEER_CPU_RX ? STEER_EV_CHOSE_RX : STEER_EV_CHOSE);
		}
	}
	if (sp.frag_first)
		bpf_map_update_elem(&steer_frags, &sp.frag, &cpu, BPF_ANY);
	return steer_deliver(cpu, self, bytes);
}

/* nagare_xdp_empty does nothing: the benchmarks' peer, so the cost the
 * steering program adds is read against the cost of running any XDP
 * program in the same run. */
SEC("xdp")
int nagare_xdp_empty(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char _license[] SEC("license") = "Dual BSD/GPL";
