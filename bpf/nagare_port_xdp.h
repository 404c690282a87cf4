/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* nagare_port_xdp.h — the AF_XDP onload path's entry point (included by
 * nagare_port.c: it shares its maps and helpers).
 *
 *   nagare_port_xdp  XDP on the device of a port whose flows may be
 *                    onloaded (only those: attaching XDP to a veth turns
 *                    off GSO on its peer)
 *
 * It classifies the frame as the tc program does (parse_frame, the
 * megaflow search) and, when the flow is onloaded or has packets in
 * userspace (onload.h's enq/done), counts it as tc would (stats, enq) and
 * redirects it to the port's AF_XDP socket with a header in front:
 * struct xsk_hdr, which names the flow generation and the packet's place
 * in its flow (enq after this packet). Everything else goes on to tc
 * unchanged (XDP_PASS): misses, offloaded flows, tunnel ports, a port
 * whose socket is not in xsks. tc does not onload packets on a PORT_XDP
 * port: XDP already decided where they go. */

struct xsk_hdr {
	__u64 cookie;  /* gen << 32 | flow id, as the onload ring's records */
	__u64 seq;     /* enq of the flow id once this packet was counted */
	__u32 in_port; /* OpenFlow port */
	__u32 len;     /* frame length after this header */
};

/* A socket per receive queue: a veth's frames arrive on the queue its
 * peer's sender picked. Devices with more queues keep the ring path. */
#define XSK_QUEUES 4

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, PORT_ARRAY * XSK_QUEUES);
	__type(key, __u32);   /* ifindex * XSK_QUEUES + receive queue */
	__type(value, __u32); /* AF_XDP socket */
} xsks SEC(".maps");

static __always_inline int drop_xdp(__u32 ifindex, __u32 reason)
{
	count_drop(ifindex, reason);
	return XDP_DROP;
}

SEC("xdp")
int nagare_port_xdp(struct xdp_md *ctx)
{
	struct flow_key key = {};
	struct parse_state ps = {};
	const struct flow_head *fh;
	struct onload_seq *s;
	struct port_info *port;
	struct dp_config *cfg;
	struct xsk_hdr *h;
	__u32 ifindex = ctx->ingress_ifindex, zero = 0, fid, gen, len, slot;
	void *data, *data_end;
	int ret;

	port = port_lookup(ifindex);
	if (!port || (port->flags & PORT_TUNNEL))
		return XDP_PASS;
	cfg = bpf_map_lookup_elem(&config, &zero);
	slot = ifindex * XSK_QUEUES + ctx->rx_queue_index;
	if (!cfg || ctx->rx_queue_index >= XSK_QUEUES || !bpf_map_lookup_elem(&xsks, &slot))
		return XDP_PASS;

	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	len = data_end - data;
	key.in_port = port->ofport;
	ret = parse_frame(data, data_end, 0, &key, &ps);
	if (ret < 0)
		return drop_xdp(ifindex, -ret);
	fid = megaflow_lookup(&key, cfg->n_masks, cfg->mask_cache);
	if (fid == NO_FLOW)
		return XDP_PASS;
	/* Only the head's flags and the generation: the actions are
	 * userspace's to run (a torn read here only misplaces one packet,
	 * whose cookie's generation the consumer checks). */
	fh = bpf_map_lookup_elem(&flows, &fid);
	gen = flow_gen(fid);
	if (!fh || !gen)
		return XDP_PASS;
	s = onload_seq_of(fid);
	if (!s || (!(fh->flags & FLOW_ONLOAD) && !onload_pending(s)))
		return XDP_PASS;

	count(CTR_MEGAFLOW_HIT);
	update_stats(fid, len, key.tcp_flags);
	if (bpf_xdp_adjust_head(ctx, -(int)sizeof(struct xsk_hdr)))
		return drop_xdp(ifindex, DROP_ONLOAD_RING_FULL);
	h = (void *)(long)ctx->data;
	if ((void *)(h + 1) > (void *)(long)ctx->data_end)
		return drop_xdp(ifindex, DROP_ONLOAD_RING_FULL);
	h->cookie = (__u64)gen << 32 | fid;
	h->in_port = key.in_port;
	h->len = len;
	h->seq = __sync_fetch_and_add(&s->enq, 1) + 1;
	count(CTR_ONLOAD);
	/* A full socket ring drops the frame after this returns: userspace
	 * sees the gap in seq, or the socket's drop counter (xsk.go). */
	return bpf_redirect_map(&xsks, slot, XDP_DROP);
}
