/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* flow_key.h — the flow key: everything a cached flow can match on.
 *
 * The key is 160 bytes = 20 little-endian u64 words. Masks have the same
 * layout, so masking a key is 20 ANDs and a mask says, word by word, which
 * words it touches at all (struct mf_mask.words). Words 14..19 hold the
 * recirculation and connection tracking state (conntrack.h, recirc.h):
 * zero for a packet fresh from a port. The Go twin is
 * pkg/flow.Key; a layout test keeps the two identical (offsets from BTF).
 *
 * Field conventions follow Open vSwitch's datapath so that OpenFlow fields
 * map one to one:
 *   - ICMP/ICMPv6 type and code live in tp_src / tp_dst (network order u16
 *     whose low byte is the value).
 *   - ARP: opcode in nw_proto, SPA/TPA in ip_src[0]/ip_dst[0], SHA/THA in
 *     arp_sha/arp_tha.
 *   - vlan_tci carries the 802.1Q TCI with bit 0x1000 (CFI) forced on when a
 *     tag is present, so "no tag" and "tag with VID 0" differ.
 *   - nw_frag: FRAG_ANY for every fragment, plus FRAG_LATER when offset != 0
 *     (later fragments carry no L4 header: tp_* stay zero).
 *   - IPv6 ND (ICMPv6 type 135/136, code 0): the target address in
 *     nd_target, the source link-layer option of a solicitation in arp_sha,
 *     the target link-layer option of an advertisement in arp_tha.
 *   - MPLS (eth_type 0x8847/0x8848): the top label stack entry, as on the
 *     wire (label 20 bits, TC 3, BOS 1, TTL 8), in ip_src[0]; nothing past
 *     the label stack is parsed. PBB (0x88e7): the I-TAG (flags, 24-bit
 *     I-SID) in ip_src[0]; the customer frame is not parsed.
 *
 * Overlaid fields are sound for megaflows: a rule on them also matches
 * their prerequisites (eth_type, ip_proto, ICMPv6 type), and the
 * classifier and the cache compare the same bytes.
 */
#ifndef NAGARE_FLOW_KEY_H
#define NAGARE_FLOW_KEY_H

#define FLOW_KEY_WORDS 20

#define FRAG_ANY (1 << 0)
#define FRAG_LATER (1 << 1)

#define TUN_PRESENT (1 << 0)

#define VLAN_CFI 0x1000

struct flow_key {
	/* word 0 */
	__u32 in_port;   /* OpenFlow port number of the ingress port */
	__u32 tun_id;    /* tunnel VNI (VXLAN: 24 bits) */
	/* word 1 */
	__be32 tun_src;  /* outer IPv4 source */
	__be32 tun_dst;  /* outer IPv4 destination */
	/* word 2 */
	__u8 tun_tos;    /* outer ToS (DSCP+ECN) */
	__u8 tun_ttl;
	__u8 tun_flags;  /* TUN_PRESENT */
	__u8 nw_frag;    /* FRAG_* */
	__be16 vlan_tci; /* TCI | VLAN_CFI when tagged, network order */
	__be16 eth_type; /* after the VLAN tag */
	/* words 3-4 */
	__u8 eth_src[6];
	__u8 eth_dst[6];
	__u8 nw_proto;   /* IP protocol, or ARP opcode (low byte) */
	__u8 nw_tos;     /* DSCP << 2 | ECN */
	__u8 nw_ttl;     /* TTL / hop limit */
	__u8 pad0;
	/* word 5 */
	__be32 ipv6_label; /* flow label (20 bits) */
	__be32 ip_src[4];  /* IPv4 in [0], IPv6 in [0..3]; ARP SPA; MPLS LSE */
	__be32 ip_dst[4];  /* ARP TPA */
	/* bytes 76-83: the last half of word 9, the first of word 10 */
	__be16 tp_src;     /* L4 source port / ICMP type */
	__be16 tp_dst;     /* L4 destination port / ICMP code */
	__be16 tcp_flags;  /* TCP flags (12 bits) */
	__u16 pad1;
	/* bytes 84-95 */
	__u8 arp_sha[6];   /* ARP SHA; ND source link-layer address */
	__u8 arp_tha[6];   /* ARP THA; ND target link-layer address */
	/* words 12-13 */
	__be32 nd_target[4]; /* IPv6 ND target address */
	/* word 14: set by the actions of an earlier pass (recirc.h) */
	__u32 recirc_id;     /* 0: the packet's first pass */
	__u32 ct_mark;
	/* word 15 */
	__u16 ct_zone;
	__u8 ct_state;       /* CS_* (conntrack.h), Open vSwitch's ct_state bits */
	__u8 ct_nw_proto;    /* original direction tuple of the connection */
	__be16 ct_tp_src;    /* ICMP: type */
	__be16 ct_tp_dst;    /* ICMP: code */
	/* words 16-17 */
	__u8 ct_label[16];   /* big-endian 128 bits */
	/* word 18 */
	__be32 ct_nw_src;    /* IPv4 only, as Open vSwitch's ct_nw_src */
	__be32 ct_nw_dst;
	/* word 19 */
	__u32 dp_hash;       /* hash action (recirc.h) */
	__u32 pad2;
};

_Static_assert(sizeof(struct flow_key) == FLOW_KEY_WORDS * 8, "flow_key must be 20 words");

#endif
