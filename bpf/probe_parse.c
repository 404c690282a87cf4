/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* probe_parse.c — test-only: run the parser on a packet and store the key,
 * the parse state and the verdict, so Go tests can check every parse path
 * with BPF_PROG_RUN. Not loaded by the switch. */
#include "lib/common.h"
#include "lib/parse.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct probe_result {
	__s32 ret;
	__u32 pad;
	struct parse_state ps;
	struct flow_key key;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct probe_result);
} probe_out SEC(".maps");

SEC("tc")
int probe_parse(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct probe_result *r = bpf_map_lookup_elem(&probe_out, &zero);

	if (!r)
		return TC_ACT_SHOT;
	__builtin_memset(&r->key, 0, sizeof(r->key));
	__builtin_memset(&r->ps, 0, sizeof(r->ps));
	r->ret = parse_packet(skb, &r->key, &r->ps);
	return TC_ACT_OK;
}
