/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* ct_kfunc_bench.c — the measurement behind lib/conntrack.h's choice of
 * its own table over the kernel's nf_conntrack (docs/conntrack.md):
 * BenchmarkConntrackLookup (pkg/datapath) runs each program here with
 * BPF_PROG_RUN on one UDP packet whose connection exists in both tables.
 *
 *   ct_bench_none       the harness alone (parse the tuple, no lookup)
 *   ct_bench_own_orig   our table, a packet in the original direction (1 lookup)
 *   ct_bench_own_reply  our table, a reply (2 lookups: reply entry, connection)
 *   ct_bench_kfunc      bpf_skb_ct_lookup + bpf_ct_release
 *   ct_bench_kfunc_add  setup: bpf_skb_ct_alloc + bpf_ct_insert_entry
 *
 * Not part of the fast path: nothing loads it but the benchmark. */
#include "lib/common.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define __ksym __attribute__((section(".ksyms")))

/* Opaque here; a struct, not a forward declaration, so that the loader
 * matches the kfuncs' prototypes against the kernel's BTF (by name). */
struct nf_conn {
	__u64 opaque;
};
struct nf_conn___init {
	__u64 opaque;
};

struct bpf_ct_opts {
	__s32 netns_id;
	__s32 error;
	__u8 l4proto;
	__u8 dir;
	__u16 ct_zone_id;
	__u8 ct_zone_dir;
	__u8 reserved[3];
};

extern struct nf_conn *bpf_skb_ct_lookup(struct __sk_buff *, struct bpf_sock_tuple *, __u32,
					 struct bpf_ct_opts *, __u32) __ksym;
extern struct nf_conn___init *bpf_skb_ct_alloc(struct __sk_buff *, struct bpf_sock_tuple *, __u32,
					       struct bpf_ct_opts *, __u32) __ksym;
extern struct nf_conn *bpf_ct_insert_entry(struct nf_conn___init *) __ksym;
extern void bpf_ct_release(struct nf_conn *) __ksym;
extern void bpf_ct_set_timeout(struct nf_conn___init *, __u32) __ksym;

/* The same key and value sizes as lib/conntrack.h's conntrack map. */
struct bench_tuple {
	__be32 src[4];
	__be32 dst[4];
	__be16 sport, dport;
	__u16 zone;
	__u8 proto, family;
};

struct bench_entry {
	struct bench_tuple peer;
	__u64 expires;
	__u32 mark, in_port;
	__u8 label[16];
	__u8 kind, flags, tcp_state, pad;
	__u32 pad2;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 131072);
	__type(key, struct bench_tuple);
	__type(value, struct bench_entry);
} ct_bench SEC(".maps");

/* Both sides read the tuple from the packet: Ethernet, IPv4 (no
 * options), UDP. */
static __always_inline int read_tuple(struct __sk_buff *skb, struct iphdr **ip, struct udphdr **uh)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;

	*ip = data + sizeof(struct ethhdr);
	*uh = data + sizeof(struct ethhdr) + sizeof(struct iphdr);
	if ((void *)(*uh + 1) > end)
		return -1;
	return 0;
}

static __always_inline int own(struct __sk_buff *skb, int reply)
{
	struct bench_tuple t = {};
	struct bench_entry *e;
	struct iphdr *ip;
	struct udphdr *uh;

	if (read_tuple(skb, &ip, &uh) < 0)
		return 1;
	t.src[0] = ip->saddr;
	t.dst[0] = ip->daddr;
	t.sport = uh->source;
	t.dport = uh->dest;
	t.proto = ip->protocol;
	t.family = 4;
	e = bpf_map_lookup_elem(&ct_bench, &t);
	if (!e)
		return 1;
	if (reply) {
		e = bpf_map_lookup_elem(&ct_bench, &e->peer);
		if (!e)
			return 1;
	}
	return e->expires > bpf_ktime_get_coarse_ns() ? 0 : 1;
}

/* The harness alone: read the tuple, look nothing up. */
SEC("tc")
int ct_bench_none(struct __sk_buff *skb)
{
	struct iphdr *ip;
	struct udphdr *uh;

	return read_tuple(skb, &ip, &uh) < 0;
}

SEC("tc")
int ct_bench_own_orig(struct __sk_buff *skb)
{
	return own(skb, 0);
}

SEC("tc")
int ct_bench_own_reply(struct __sk_buff *skb)
{
	return own(skb, 1);
}

static __always_inline int kfunc_tuple(struct __sk_buff *skb, struct bpf_sock_tuple *t)
{
	struct iphdr *ip;
	struct udphdr *uh;

	if (read_tuple(skb, &ip, &uh) < 0)
		return -1;
	t->ipv4.saddr = ip->saddr;
	t->ipv4.daddr = ip->daddr;
	t->ipv4.sport = uh->source;
	t->ipv4.dport = uh->dest;
	return 0;
}

SEC("tc")
int ct_bench_kfunc(struct __sk_buff *skb)
{
	struct bpf_ct_opts opts = { .netns_id = -1, .l4proto = IPPROTO_UDP };
	struct bpf_sock_tuple t = {};
	struct nf_conn *ct;

	if (kfunc_tuple(skb, &t) < 0)
		return 1;
	ct = bpf_skb_ct_lookup(skb, &t, sizeof(t.ipv4), &opts, sizeof(opts));
	if (!ct)
		return 1;
	bpf_ct_release(ct);
	return 0;
}

SEC("tc")
int ct_bench_kfunc_add(struct __sk_buff *skb)
{
	struct bpf_ct_opts opts = { .netns_id = -1, .l4proto = IPPROTO_UDP };
	struct bpf_sock_tuple t = {};
	struct nf_conn___init *ct;
	struct nf_conn *ins;

	if (kfunc_tuple(skb, &t) < 0)
		return 1;
	ct = bpf_skb_ct_alloc(skb, &t, sizeof(t.ipv4), &opts, sizeof(opts));
	if (!ct)
		return 100 - opts.error;
	bpf_ct_set_timeout(ct, 3600 * 1000);
	ins = bpf_ct_insert_entry(ct);
	if (!ins)
		return 2;
	bpf_ct_release(ins);
	return 0;
}
