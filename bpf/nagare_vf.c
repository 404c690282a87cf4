/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* nagare_vf.c — the host side of a DPU-mode VF link (bpf/lib/direct_forward.h,
 * docs/dpu.md). Loaded by nagare-agent, not by the switch: the host runs no
 * switch, only what a NIC's VF would do.
 *
 *   vf_host_ingress   clsact ingress of nag<h>: what the pod transmits.
 *                     Direct forward into a local pod, or across to the DPU.
 *   vf_wire_ingress   clsact ingress of nvf<h>: what the DPU sends the pod.
 */
#include "lib/common.h"
#include "lib/direct_forward.h"

SEC("tc")
int vf_host_ingress(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	struct vf_link *l = bpf_map_lookup_elem(&vf_links, &ifindex);
	__u32 why = VF_TO_DPU, to;

	if (!l) {
		vf_count(VF_DROP_NO_LINK);
		return TC_ACT_SHOT;
	}
	to = direct_forward(skb, l, &why);
	vf_count(why);
	if (to)
		return bpf_redirect_peer(to, 0);
	/* Transmit on the crossing: the packet arrives at the representor's
	 * ingress in the DPU domain, where the switch's fast path runs. */
	return bpf_redirect(l->wire_ifindex, 0);
}

SEC("tc")
int vf_wire_ingress(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	struct vf_link *l = bpf_map_lookup_elem(&vf_links, &ifindex);

	if (!l) {
		vf_count(VF_DROP_NO_LINK);
		return TC_ACT_SHOT;
	}
	vf_count(VF_FROM_DPU);
	return bpf_redirect_peer(l->host_ifindex, 0);
}

char _license[] SEC("license") = "Dual BSD/GPL";
