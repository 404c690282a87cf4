/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* maps.h — every map of the fast path, in one place, with its layout.
 *
 *   ports        [ifindex] → {OpenFlow port, flags}     which devices are ours
 *   ports_big    ifindex → ... for ifindex >= PORT_ARRAY (long-lived hosts)
 *   config       [0] → {n_masks, emc on/off, ...}       knobs userspace flips
 *   native_tunnels tunnel or underlay ifindex → {port, devices, address,
 *                UDP port}: tunnels whose VXLAN the fast path does (tunnel.h)
 *   masks        [mask id] → {mask, word bitmap, valid}  the tuple-space masks
 *   mask_filter  [mask id * FILTER_SLOTS + h] → count    "may a flow under this
 *                mask match a key hashing to h?" — lets a probe skip the hash
 *                map for masks that cannot hit (most of them)
 *   megaflows    {mask id, key & mask} → flow id         the megaflow table
 *   flows        flow id → {generation, actions}         what to do
 *   flow_gens    [flow id] → generation (0 = dead)       validates cache hits
 *   stats        flow id → per-CPU {packets, bytes, used, tcp flags}
 *   emc          per-CPU [hash(key)] → {key, flow id, generation, actions}
 *                the exact-match cache: one array slot per hash, no locks,
 *                a copy of the actions so a hit needs no second lookup
 *   upcalls      ring buffer of misses and userspace actions
 *   onload       ring buffer of the packets of onloaded flows
 *   onload_seqs  [flow id] → {enqueued, done}: packets of the flow in
 *                userspace (mmapped by userspace, which counts done)
 *   exec_actions [slot] → action list for packets userspace executes
 *   drops        [reason] → per-CPU count
 *   port_drops   {ifindex, reason} → per-CPU count (the same drops by port)
 *   upcall_meters ifindex → token bucket of the port's upcalls
 *   counters     [event] → per-CPU count (hits, misses, upcalls)
 *
 * Flow ids index stats, so they are small integers that userspace
 * allocates; a generation number makes every allocation distinct, so an
 * exact-match entry left behind by a deleted flow never matches the flow
 * that reuses its id.
 */
#ifndef NAGARE_MAPS_H
#define NAGARE_MAPS_H

#include "common.h"
#include "flow_key.h"
#include "drop_reasons.h"

#define MAX_MASKS 64
#define FILTER_BITS 13
#define FILTER_SLOTS (1 << FILTER_BITS)
#define MAX_ACTIONS 16
#define DEFAULT_MAX_FLOWS 262144 /* userspace may resize before load */
#define EMC_BITS 13
#define EMC_ENTRIES (1 << EMC_BITS) /* per CPU, as Open vSwitch's EMC */
#define PORT_ARRAY 65536
#define EXEC_SLOTS 64
#define UPCALL_RING_BYTES (16 << 20) /* pkg/datapath upcallRingBytes */

#define PORT_TUNNEL (1 << 0) /* external-mode tunnel device: read tunnel metadata */
#define PORT_XDP (1 << 1)    /* XDP hands its onloaded packets to AF_XDP (nagare_port_xdp.h); tc does not onload */

struct port_info {
	__u32 ofport;
	__u32 flags;
};

struct dp_config {
	__u32 n_masks;   /* masks[0 .. n_masks) are probed, in order */
	__u32 emc;       /* exact-match cache: 0 off; N > 0 inserts a megaflow hit with probability 1/N */
	__u32 upcalls;   /* send misses to userspace (1) or drop them (0) */
	__u32 layout;    /* 0 until userspace has initialised the maps; the fourth
	                  * word in every release (pkg/datapath/migrate.go reads
	                  * it from pins another build made) */
	__u32 upcall_rate;  /* upcalls per second per port; 0 = no limit */
	__u32 upcall_burst; /* upcalls a port may send at once */
	__u32 mask_cache;   /* megaflow.h's mask cache: 0 off, 1 on */
};

struct mf_mask {
	struct flow_key mask;
	__u32 words; /* bit w set: mask word w is not zero */
	__u32 valid;
	__u64 pad;
};

struct megaflow_key {
	__u32 mask_id;
	__u32 pad;
	struct flow_key masked;
};

enum action_type {
	ACT_OUTPUT = 1,       /* arg32 = ifindex; flags OUT_* */
	ACT_LOCAL = 2,        /* deliver into the stack of the ingress device */
	ACT_SET_ETH_SRC = 3,  /* mac */
	ACT_SET_ETH_DST = 4,  /* mac */
	ACT_SET_IPV4_SRC = 5, /* arg32 (network order) */
	ACT_SET_IPV4_DST = 6,
	ACT_SET_IPV6_SRC = 7, /* ip6 */
	ACT_SET_IPV6_DST = 8,
	ACT_SET_TP_SRC = 9,   /* arg16 (network order) */
	ACT_SET_TP_DST = 10,
	ACT_SET_TOS = 11,     /* arg16 = new bits, arg32 = mask of the ToS byte to replace */
	ACT_DEC_TTL = 12,
	ACT_PUSH_VLAN = 13,   /* arg16 = TCI (host order), arg32 = TPID (network order) */
	ACT_POP_VLAN = 14,
	ACT_SET_TUNNEL = 15,  /* arg32 = VNI, tun.* ; flags TUN_TOS_INHERIT */
	ACT_USERSPACE = 16,   /* u64[0] = cookie */
	ACT_DROP = 17,
	ACT_OUTPUT_SET = 18,  /* arg32 = output_sets index: a copy to each of its ports */
	ACT_SET_TTL = 19,     /* arg16 = IPv4 TTL / IPv6 hop limit */
	ACT_SET_ND_TARGET = 20, /* ip6 */
	ACT_SET_ND_LL = 21,   /* mac: the ND link-layer address option the parser found */
	ACT_PUSH_MPLS = 22,   /* arg16 = EtherType, arg32 = LSE (both network order) */
	ACT_POP_MPLS = 23,    /* arg16 = EtherType of what is left (network order) */
	ACT_SET_MPLS = 24,    /* arg32 = LSE bits, ip6[0] = mask (network order) */
	ACT_SET_MPLS_TTL = 25, /* arg16 = TTL */
	ACT_DEC_MPLS_TTL = 26,
	ACT_COPY_TTL_OUT = 27, /* inner header's TTL → top LSE */
	ACT_COPY_TTL_IN = 28,  /* top LSE's TTL → inner header */
	ACT_METER = 29,       /* arg32 = meter id (meter.h) */
	ACT_PUSH_PBB = 30,    /* arg32 = I-SID (pbb.h) */
	ACT_POP_PBB = 31,
	ACT_SET_PBB_ISID = 32, /* arg32 = I-SID */
	ACT_CT = 33,          /* conntrack.h: flags CT_*, arg16 = zone, arg32 = mark, u32 mark mask ... */
	ACT_CT_EXT = 34,      /* what an ACT_CT after it needs that does not fit its slot (label, NAT range) */
	ACT_CT_CLEAR = 35,
	ACT_RECIRC = 36,      /* arg32 = recirc_id: look the packet up again (recirc.h); last in a list */
	ACT_HASH = 37,        /* arg32 = basis: key.dp_hash = hash of the 5-tuple */
	ACT_SET_ETH_ADDRS = 38, /* ip6 bytes 0..11 = destination, source: both MACs in one store */
	ACT__MAX,
};

#define OUT_PEER (1 << 0)    /* redirect_peer: into the netns of the veth's peer */
#define OUT_INGRESS (1 << 1) /* deliver as if received on the device */
#define OUT_LAST (1 << 2)    /* the final output: redirect instead of clone */
#define OUT_TUNNEL (1 << 3)  /* to an external-mode tunnel device: tunnel_xmit may encapsulate here (tunnel.h) */

#define TUN_TOS_INHERIT (1 << 0) /* outer ToS = inner ToS (VS-extend FCF) */

struct action {
	__u8 type;
	__u8 flags;
	__u16 arg16;
	__u32 arg32;
	union {
		__u8 mac[8];
		__be32 ip6[4];
		struct {
			__be32 remote;
			__be32 local;
			__u8 tos;
			__u8 ttl;
			__u16 pad;
			__u32 pad2;
		} tun;
		__u64 u64[2];
	};
};

/* An output set: the ports a flood (FLOOD, ALL, NORMAL broadcast, a group)
 * sends copies to, kept apart from the flow so that a flow's 16 actions
 * can reach every port of a large bridge. Filled by userspace before any
 * flow refers to it. */
#define MAX_SET_PORTS 256
#define OUTPUT_SETS 1024

struct output_set {
	__u32 n;
	__u32 pad;
	struct {
		__u32 ifindex;
		__u32 flags; /* OUT_* */
	} port[MAX_SET_PORTS];
};

/* flow_entry.flags */
#define FLOW_ONLOAD (1 << 0) /* placement onload: packets go to userspace (onload.h) */

struct flow_entry {
	__u32 gen;        /* 0 = unused */
	__u16 n_actions;
	__u16 flags;      /* FLOW_* */
	struct action actions[MAX_ACTIONS];
};

/* An installed flow's entry is kept in two parts (flow_fetch in
 * megaflow.h puts them together): its head — a flow_entry's first
 * FLOW_INLINE_ACTIONS actions — in the flows array at the flow id, and,
 * for a longer list, the rest in flow_tails under the same id. The array
 * is BPF_F_MMAPABLE: userspace writes a head with stores into its mapping
 * (pkg/datapath/flowarrays.go), not a system call, and it costs memory
 * from the start (128 bytes a flow id), where a hash map's element is
 * allocated by the kernel at each insert — which was the larger part of
 * an install (docs/lab.md, issue 19). */
#define FLOW_INLINE_ACTIONS 5

struct flow_head {
	__u32 gen;        /* as flow_gens says while the head is whole */
	__u16 n_actions;
	__u16 flags;      /* FLOW_* */
	struct action actions[FLOW_INLINE_ACTIONS];
};

struct flow_tail {
	__u32 gen;        /* the head's generation it belongs to */
	__u32 pad;
	struct action actions[MAX_ACTIONS - FLOW_INLINE_ACTIONS];
};

struct flow_stats {
	__u64 packets;
	__u64 bytes;
	__u64 used;       /* bpf_ktime_get_coarse_ns() of the last packet */
	__u16 tcp_flags;  /* OR of the TCP flags seen */
	__u16 pad[3];
};

struct emc_entry {
	struct flow_key key;
	__u32 flow_id;
	__u32 gen;       /* 0 = empty; valid while flow_gens[flow_id] == gen */
	struct flow_entry fe;
};

enum counter {
	CTR_EMC_HIT = 0,
	CTR_MEGAFLOW_HIT = 1,
	CTR_MISS = 2,
	CTR_UPCALL = 3,       /* upcall records written (misses + userspace actions) */
	CTR_EXECUTED = 4,     /* packets executed for userspace */
	CTR_MASK_PROBES = 5,  /* hash map lookups done by the megaflow search */
	CTR_EMC_INSERT = 6,   /* exact-match cache entries written */
	CTR_MASK_CACHE_HIT = 7, /* megaflow hits found under the mask cache's slot (megaflow.h) */
	CTR_SHORTCUT_HIT = 8, /* packets sent on by their connection's shortcut (shortcut.h) */
	CTR_SHORTCUT_LEARN = 9, /* shortcuts written */
	CTR_ONLOAD = 10,      /* packets of onloaded flows handed to userspace */
	CTR_ONLOAD_GSO = 11,  /* packets of onloaded flows run here: too big for the ring (over ONLOAD_GSO) */
	CTR_TUNNEL_ENCAP = 12, /* packets the fast path put into VXLAN itself and sent on the underlay (tunnel.h) */
	CTR_TUNNEL_DECAP = 13, /* VXLAN packets the fast path took off the underlay and decapsulated (tunnel.h) */
	CTR_TUNNEL_KERNEL = 14, /* tunnel outputs left to the tunnel device (tunnel_xmit's reasons) */
	CTR_TUNNEL_UNDO = 15, /* decapsulated GSO packets given back to the VXLAN driver (tunnel_undo) */
	CTR__MAX = 16,
};

/* Port lookups happen for every packet: an array indexed by ifindex is an
 * inlined load, a hash lookup is not. Devices with larger ifindexes (hosts
 * that have created many veths) fall back to ports_big. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PORT_ARRAY);
	__type(key, __u32);
	__type(value, struct port_info);
} ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct port_info);
} ports_big SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dp_config);
} config SEC(".maps");

/* A tunnel device whose VXLAN the fast path does itself (tunnel.h): one
 * value under two keys, the tunnel device's ifindex (transmit: an output
 * to it) and the underlay's (receive: the underlay's ingress hook). */
struct native_tunnel {
	__u32 ofport;   /* the tunnel device's port: decapsulated packets arrive on it */
	__u32 tunnel;   /* the tunnel device's ifindex */
	__u32 underlay; /* the underlay device's ifindex */
	__be32 local;   /* this node's outer address */
	__be16 port;    /* the VXLAN UDP port */
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct native_tunnel);
} native_tunnels SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, OUTPUT_SETS);
	__type(key, __u32);
	__type(value, struct output_set);
} output_sets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_MASKS);
	__type(key, __u32);
	__type(value, struct mf_mask);
} masks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_MASKS * FILTER_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE); /* written by userspace's stores (pkg/datapath/flowarrays.go) */
	__type(key, __u32);
	__type(value, __u32);
} mask_filter SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DEFAULT_MAX_FLOWS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct megaflow_key);
	__type(value, __u32);
} megaflows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DEFAULT_MAX_FLOWS);
	__uint(map_flags, BPF_F_MMAPABLE); /* written by userspace's stores (pkg/datapath/flowarrays.go) */
	__type(key, __u32);
	__type(value, struct flow_head);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DEFAULT_MAX_FLOWS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct flow_tail);
} flow_tails SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DEFAULT_MAX_FLOWS);
	__type(key, __u32);
	__type(value, struct flow_stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DEFAULT_MAX_FLOWS);
	__uint(map_flags, BPF_F_MMAPABLE); /* written by userspace's stores (pkg/datapath/flowarrays.go) */
	__type(key, __u32);
	__type(value, __u32);
} flow_gens SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EMC_ENTRIES);
	__type(key, __u32);
	__type(value, struct emc_entry);
} emc SEC(".maps");

/* emc_tags[cpu << EMC_BITS | slot]: a tag of the key in this CPU's
 * emc[slot] (the low 32 bits of its key_hash, never 0; 0 = empty),
 * checked before the entry: a lookup that misses (every packet of a new
 * connection) reads one word of a 32 KB table instead of the entry's
 * three cold cache lines. A plain array with a block per CPU (userspace
 * sizes it by the possible CPUs), not a per-CPU array: the lookup of an
 * element of a per-CPU array loads the element's pointer first, and with
 * thousands of small elements both loads miss the cache (~150 ns more per
 * packet, BenchmarkShortConnections). Neither map is pinned
 * (pkg/datapath's unpinned). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, EMC_ENTRIES); /* × possible CPUs, set by userspace */
	__type(key, __u32);
	__type(value, __u32);
} emc_tags SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, EXEC_SLOTS);
	__type(key, __u32);
	__type(value, struct flow_entry);
} exec_actions SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DROP__MAX);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CTR__MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* Drops by port: one port's malformed or denied traffic must be
 * attributable to that port (nagarectl show, Prometheus). A hash, not an
 * array: ifindexes are sparse. Full: the drop is still counted in drops. */
struct port_drop_key {
	__u32 ifindex;
	__u32 reason;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct port_drop_key);
	__type(value, __u64);
} port_drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, UPCALL_RING_BYTES);
} upcalls SEC(".maps");

/* The packets of onloaded flows: a ring of their own, so a busy onloaded
 * flow cannot crowd first packets (misses) out of the upcall ring, and
 * userspace reads it on a thread of its own. */
#define ONLOAD_RING_BYTES (16 << 20)

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, ONLOAD_RING_BYTES);
} onload SEC(".maps");

/* Per flow id: packets handed to userspace (the fast path counts, atomic
 * across CPUs) and packets userspace has sent on (userspace counts, in
 * the mmapped array). While they differ, packets of that flow id are
 * still in userspace, and a later packet must follow them there even if
 * the flow is offloaded again, or it would overtake them (onload.h). The
 * counts never reset: a reused flow id inherits them, still consistent. */
struct onload_seq {
	__u64 enq;
	__u64 done;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DEFAULT_MAX_FLOWS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct onload_seq);
} onload_seqs SEC(".maps");

static __always_inline void count(__u32 ctr)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &ctr);
	if (v)
		*v += 1;
}

/* count_drop counts a drop of reason, globally and for device ifindex. */
static __always_inline void count_drop(__u32 ifindex, __u32 reason)
{
	struct port_drop_key pk = { .ifindex = ifindex, .reason = reason };
	__u64 *v = bpf_map_lookup_elem(&drops, &reason), one = 1;

	if (v)
		*v += 1;
	v = bpf_map_lookup_elem(&port_drops, &pk);
	if (v)
		*v += 1;
	else
		bpf_map_update_elem(&port_drops, &pk, &one, BPF_NOEXIST);
}

/* drop_skb counts the reason, globally and for the packet's device, and
 * returns the verdict that drops the packet. */
static __always_inline int drop_skb(const struct __sk_buff *skb, __u32 reason)
{
	__u32 ifindex;

	/* One load from the context at a constant offset, in asm: inside the
	 * action loop clang hoists &skb->ifindex into a register, and the
	 * verifier refuses loads through a context pointer that was moved. */
	asm volatile("%[res] = *(u32 *)(%[skb] + %[off])"
		     : [res] "=r"(ifindex)
		     : [skb] "r"(skb), [off] "i"(offsetof(struct __sk_buff, ifindex)));
	count_drop(ifindex, reason);
	return TC_ACT_SHOT;
}

/* drop(reason) is drop_skb for the skb in scope: every program and action
 * helper here names its packet skb. */
#define drop(reason) drop_skb(skb, (reason))

#endif
