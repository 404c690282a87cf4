/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* direct_forward.h — the host side of DPU mode's "VF" links (docs/dpu.md).
 *
 * A pod's VF link is two veth pairs: eth0 (pod) ↔ nag<h> (host), and
 * nvf<h> (host) ↔ rep<h> (the DPU domain, the pod's representor, a port of
 * the DPU's nagare-switch). What the pod transmits arrives at nag<h>'s
 * ingress: the VF's transmit point. There the direct-forward table may send
 * it straight into a local pod; anything else crosses into the DPU domain.
 *
 *   vf_links   ifindex → link     both host-side devices of every VF link
 *   df_fib     {network, MAC} → local pod's host end and address
 *   df_config  [0] → on/off
 *   vf_counters per-CPU [reason] → packets: which path each packet took
 *
 * The agent fills df_fib only after the DPU pipeline's flows for the pod
 * are in (and empties it before they go), and only with what the pipeline
 * lets that pod send: its own MAC and address on its own network. A packet
 * is forwarded directly only if the pipeline would forward it to the same
 * place unchanged (an IPv4 packet from the pod's own MAC and address to
 * another local pod's MAC and address, untagged); everything else (ARP,
 * broadcast, a spoofed source, a routed packet, another network) goes to
 * the DPU, which decides as it always does.
 */
#ifndef NAGARE_DIRECT_FORWARD_H
#define NAGARE_DIRECT_FORWARD_H

#include "common.h"

#define LIBBPF_PIN_BY_NAME 1

struct vf_link {
	__u32 host_ifindex; /* nag<h>: the VF's host-side end (its peer is the pod's eth0) */
	__u32 wire_ifindex; /* nvf<h>: the host end of the crossing into the DPU domain */
	__u32 net;          /* the pod's network (the VNI) */
	__be32 ip;          /* the pod's address */
	__u8 mac[6];        /* the pod's MAC */
	__u16 pad;
};

struct df_key {
	__u32 net;
	__u8 mac[6];
	__u16 pad;
};

struct df_dest {
	__u32 host_ifindex; /* nag<h> of the destination pod: redirect_peer lands in its eth0 */
	__be32 ip;
};

struct df_settings {
	__u32 enabled;
};

/* Which way a packet went. Go twin: pkg/agent/vf.Counter. */
enum vf_counter {
	VF_DIRECT = 0,          /* pod → local pod, straight (direct forward) */
	VF_TO_DPU = 1,          /* pod → DPU: direct forward off */
	VF_TO_DPU_NOT_IP = 2,   /* pod → DPU: not untagged IPv4 (ARP, IPv6, VLAN) */
	VF_TO_DPU_SPOOFED = 3,  /* pod → DPU: source MAC or address not the pod's own */
	VF_TO_DPU_NO_DEST = 4,  /* pod → DPU: destination MAC not a local pod on its network */
	VF_TO_DPU_ADDR = 5,     /* pod → DPU: local pod's MAC, another address (routed or odd) */
	VF_FROM_DPU = 6,        /* DPU → pod */
	VF_DROP_NO_LINK = 7,    /* a device with our program but no vf_links entry */
	VF_DROP_SHORT = 8,      /* shorter than an Ethernet + IPv4 header where one was promised */
	VF_COUNTER_MAX = 16,
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct vf_link);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} vf_links SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct df_key);
	__type(value, struct df_dest);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} df_fib SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct df_settings);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} df_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, VF_COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} vf_counters SEC(".maps");

static __always_inline void vf_count(__u32 c)
{
	__u64 *v = bpf_map_lookup_elem(&vf_counters, &c);
	if (v)
		*v += 1;
}

static __always_inline int mac_eq(const __u8 *a, const __u8 *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] &&
	       a[3] == b[3] && a[4] == b[4] && a[5] == b[5];
}

/* direct_forward decides for a packet the pod behind `l` sent: the
 * ifindex of a local pod's host end to redirect_peer into, or 0 (to the
 * DPU) with the counter that says why. */
static __always_inline __u32 direct_forward(struct __sk_buff *skb, const struct vf_link *l, __u32 *why)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct df_key k = {};
	struct df_dest *d;
	__u32 zero = 0;
	struct df_settings *cfg = bpf_map_lookup_elem(&df_config, &zero);

	if (!cfg || !cfg->enabled) {
		*why = VF_TO_DPU;
		return 0;
	}
	/* A tag the kernel holds in skb metadata is invisible in the bytes;
	 * the pipeline treats tagged frames differently, so they go there. */
	if (skb->vlan_present || (void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP)) {
		*why = VF_TO_DPU_NOT_IP;
		return 0;
	}
	/* The pipeline's spoof guard: in_port + eth_src + nw_src. */
	if (!mac_eq(eth->h_source, l->mac) || ip->saddr != l->ip) {
		*why = VF_TO_DPU_SPOOFED;
		return 0;
	}
	k.net = l->net;
	__builtin_memcpy(k.mac, eth->h_dest, 6);
	d = bpf_map_lookup_elem(&df_fib, &k);
	if (!d || d->host_ifindex == l->host_ifindex) {
		*why = VF_TO_DPU_NO_DEST;
		return 0;
	}
	if (ip->daddr != d->ip) {
		*why = VF_TO_DPU_ADDR;
		return 0;
	}
	*why = VF_DIRECT;
	return d->host_ifindex;
}

#endif
