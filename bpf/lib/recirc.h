/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* recirc.h — recirculation: look a packet up again after some actions.
 *
 * A Recirc{ID} action (ACT_RECIRC, always the last of its list) ends the
 * pass: run_actions returns TC_ACT_RECIRC, the entry program tail-calls
 * nagare_recirc (recirc_progs[0]), which parses the packet as it is now (a
 * NAT or set_field before the recirc changed its headers), carries over
 * in_port, the tunnel metadata and words 14..19 of the key (recirc_id,
 * ct_*, dp_hash), and runs the lookup and the actions again: EMC,
 * megaflow, stats, upcall on a miss — the slow path translates the rest
 * of the pipeline from the recirc_id it chose (Open vSwitch's datapath
 * recirculation).
 *
 * Why a tail call and not a loop in the entry program: the verifier walks
 * a loop body once per iteration, and one pass (parse, EMC, megaflow,
 * actions) is most of what it can afford; a tail call is verified once.
 *
 * The key of the pass being run lives in a per-CPU slot (passes[mode]),
 * not on the stack: a 160-byte key in the entry program's frame leaves too
 * little of the verifier's 512 bytes for run_actions and the conntrack
 * (conntrack.h) below it, and the key must survive the tail call anyway.
 * One slot per mode, because the two modes can nest on a CPU and nothing
 * else can: tc ingress runs with bottom halves off, so one port's
 * ingress never runs inside another's, but BPF_PROG_RUN (MODE_EXECUTE)
 * runs in process context, and a clone it transmits may run a port's
 * ingress (MODE_PATH) on the same CPU before bpf_clone_redirect returns.
 *
 * Depth: skb->cb[RECIRC_CB_DEPTH] counts the passes; past RECIRC_MAX a
 * packet is dropped with DROP_RECIRC_DEPTH (a loop of flows that
 * recirculate into each other, which the slow path should never make).
 */
#ifndef NAGARE_RECIRC_H
#define NAGARE_RECIRC_H

#include "maps.h"
#include "parse.h"

#define RECIRC_MAX 8
/* A verdict no tc program returns: run_actions ended with ACT_RECIRC. */
#define TC_ACT_RECIRC 0x7e

/* skb->cb words the passes use (nagare_execute reads cb[0], cb[1] on entry
 * only). tc owns cb[] while the packet is in its ingress hook. */
#define RECIRC_CB_MODE 3
#define RECIRC_CB_DEPTH 4

/* The words a recirculation carries over from one pass to the next, the
 * rest of the key is parsed from the packet again. */
struct recirc_carry {
	__u32 in_port, tun_id;
	__be32 tun_src, tun_dst;
	__u8 tun_tos, tun_ttl, tun_flags, pad;
	__u64 ct[FLOW_KEY_WORDS - 14];
};

struct pass {
	struct flow_key key;   /* the key this pass looked up; actions update words 14..19 */
	struct parse_state ps;
	__u32 pad;
	struct recirc_carry carry; /* nagare_recirc's, off its stack */
	struct flow_entry fe;      /* the flow this pass found (flow_fetch's copy) */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2); /* by enum exec_mode */
	__type(key, __u32);
	__type(value, struct pass);
} passes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} recirc_progs SEC(".maps");

static __always_inline struct pass *pass_of(__u32 mode)
{
	__u32 idx = mode & 1;

	return bpf_map_lookup_elem(&passes, &idx);
}


static __always_inline void recirc_save(struct recirc_carry *c, const struct flow_key *key)
{
	const __u64 *w = (const __u64 *)key;

	c->in_port = key->in_port;
	c->tun_id = key->tun_id;
	c->tun_src = key->tun_src;
	c->tun_dst = key->tun_dst;
	c->tun_tos = key->tun_tos;
	c->tun_ttl = key->tun_ttl;
	c->tun_flags = key->tun_flags;
	c->ct[0] = w[14]; c->ct[1] = w[15]; c->ct[2] = w[16];
	c->ct[3] = w[17]; c->ct[4] = w[18]; c->ct[5] = w[19];
}

static __always_inline void recirc_restore(struct flow_key *key, const struct recirc_carry *c)
{
	__u64 *w = (__u64 *)key;

	key->in_port = c->in_port;
	key->tun_id = c->tun_id;
	key->tun_src = c->tun_src;
	key->tun_dst = c->tun_dst;
	key->tun_tos = c->tun_tos;
	key->tun_ttl = c->tun_ttl;
	key->tun_flags = c->tun_flags;
	w[14] = c->ct[0]; w[15] = c->ct[1]; w[16] = c->ct[2];
	w[17] = c->ct[3]; w[18] = c->ct[4]; w[19] = c->ct[5];
}

/* dp_hash_of is the hash action's hash (Open vSwitch's hash(l4(basis))):
 * addresses, protocol and ports of the key, mixed with basis. Not
 * symmetric, as in Open vSwitch. */
static __always_inline __u32 dp_hash_of(const struct flow_key *key, __u32 basis)
{
	const __u32 *s = (const __u32 *)key->ip_src, *d = (const __u32 *)key->ip_dst;
	__u64 h = basis ^ 0x9E3779B97F4A7C15ull;

	h = (h ^ s[0] ^ ((__u64)s[1] << 32)) * 0xC2B2AE3D27D4EB4Full;
	h = (h ^ s[2] ^ ((__u64)s[3] << 32)) * 0xC2B2AE3D27D4EB4Full;
	h = (h ^ d[0] ^ ((__u64)d[1] << 32)) * 0xC2B2AE3D27D4EB4Full;
	h = (h ^ d[2] ^ ((__u64)d[3] << 32)) * 0xC2B2AE3D27D4EB4Full;
	h = (h ^ key->nw_proto ^ ((__u64)key->tp_src << 16) ^ ((__u64)key->tp_dst << 32)) * 0x165667B19E3779F9ull;
	h ^= h >> 32;
	return (__u32)h;
}

#endif
