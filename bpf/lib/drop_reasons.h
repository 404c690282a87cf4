/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* drop_reasons.h — every packet the fast path drops has one of these
 * reasons, and each reason is a per-CPU counter that nagarectl reads. The
 * Go twin (pkg/datapath.DropReason) lists the same numbers with names;
 * keep them in step. */
#ifndef NAGARE_DROP_REASONS_H
#define NAGARE_DROP_REASONS_H

enum drop_reason {
	DROP_NONE = 0,
	DROP_SHORT_ETH = 1,          /* frame shorter than an Ethernet header */
	DROP_SHORT_VLAN = 2,         /* 802.1Q tag cut off */
	DROP_SHORT_IP = 3,           /* IPv4/IPv6 header cut off */
	DROP_BAD_IP_HDR = 4,         /* IPv4 IHL < 5, version mismatch, total length < IHL */
	DROP_SHORT_L4 = 5,           /* TCP/UDP/SCTP/ICMP header cut off */
	DROP_SHORT_ARP = 6,          /* ARP for Ethernet/IPv4 cut off */
	DROP_IPV6_EXT_CHAIN = 7,     /* more extension headers than the parser walks */
	DROP_TUNNEL_KEY = 8,         /* tunnel port without tunnel metadata */
	DROP_UPCALL_RING_FULL = 9,   /* miss, and the upcall ring had no room */
	DROP_TTL_EXCEEDED = 10,      /* dec_ttl on TTL/hop limit <= 1 */
	DROP_ACTION = 11,            /* the flow's actions say drop (or are empty) */
	DROP_REWRITE = 12,           /* a header rewrite helper failed */
	DROP_VLAN = 13,              /* push/pop VLAN failed */
	DROP_TUNNEL_SET = 14,        /* set tunnel key failed */
	DROP_REDIRECT = 15,          /* output to a port that is gone */
	DROP_EXEC_SLOT = 16,         /* execute request with a bad slot */
	DROP_BAD_ACTION = 17,        /* unknown action type or malformed list */
	DROP_MISS_NO_UPCALL = 18,    /* miss while upcalls are disabled */
	DROP_SHORT_MPLS = 19,        /* MPLS label stack entry cut off */
	DROP_MPLS = 20,              /* push/pop MPLS failed, or popped a non-MPLS packet */
	DROP_METER = 21,             /* a meter band (or a meter being deleted) dropped it */
	DROP_PBB = 22,               /* push/pop PBB failed */
	DROP_SHORT_PBB = 23,         /* PBB I-TAG cut off */
	DROP_ONLOAD_RING_FULL = 24,  /* onloaded flow, and the onload ring had no room */
	DROP_ONLOAD_OVERSIZE = 25,   /* onloaded flow's packet too big for the ring (over ONLOAD_GSO: BIG TCP) while earlier ones wait in userspace */
	DROP_RECIRC_DEPTH = 26,      /* more than RECIRC_MAX recirculations (recirc.h) */
	DROP_CT_TABLE_FULL = 27,     /* ct commit found the conntrack table full (conntrack.h) */
	DROP_CT_PORT_BUDGET = 28,    /* ct commit past the ingress port's share of the table */
	DROP_NAT_NO_PORT = 29,       /* no free source port (or tuple) in the NAT range (nat.h) */
	DROP_UPCALL_PORT_BUDGET = 30, /* miss past its port's upcall budget, or paced (upcall_admit, paced_admit) */
	DROP_UPCALL_CONTROLLER_BUDGET = 31, /* controller-action upcall past what the controllers accept (action_upcall_admit) */
	DROP_POLICY = 32,            /* a drop flow the controller marked as NetworkPolicy's (note:drop:policy, pkg/ofproto) */
	DROP__MAX = 33,
};

#endif
