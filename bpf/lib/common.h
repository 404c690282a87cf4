/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* common.h — includes and small helpers shared by every nagare BPF program. */
#ifndef NAGARE_COMMON_H
#define NAGARE_COMMON_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <linux/icmp.h>
#include <linux/icmpv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define __always_inline inline __attribute__((always_inline))

#ifndef likely
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
/* A load the compiler must do now, once: memory another CPU or userspace writes. */
#define READ_ONCE(x) (*(const volatile typeof(x) *)&(x))
#endif

#define ETH_P_8021Q_BE bpf_htons(ETH_P_8021Q)
#define ETH_P_8021AD_BE bpf_htons(ETH_P_8021AD)

/* IP fragment offset field bits (host order after ntohs). */
#define IP_MF 0x2000
#define IP_OFFSET 0x1fff

#endif
