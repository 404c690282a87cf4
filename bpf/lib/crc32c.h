/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* crc32c.h — keep an SCTP packet's CRC32c right after a port rewrite.
 *
 * SCTP protects a packet with CRC32c over all of it (RFC 4960 appendix B),
 * not with a ones'-complement sum, so the kernel's csum helpers cannot fix
 * it and recomputing it would read the whole packet. A CRC is linear:
 * for messages of equal length, crc(A ^ D) = crc(A) ^ crc0(D), crc0 being
 * the CRC without initial value and final xor. A port rewrite changes only
 * the first 4 bytes, so D is zero past them and crc0(D) is the register
 * of those 4 bytes carried through len-4 zero bytes — a multiplication by
 * x^(8(len-4)) mod P, done with a table of x^(8*2^i) (zlib's
 * crc32_combine). The cost is fixed (16 multiplications of 32 steps)
 * whatever the packet's length.
 *
 * The Go twin used by the tests is hash/crc32's Castagnoli table.
 */
#ifndef NAGARE_CRC32C_H
#define NAGARE_CRC32C_H

#include "common.h"

#define CRC32C_POLY 0x82f63b78u /* reflected */

/* crc32c_x8n[i] = x^(8 * 2^i) mod P, reflected: zero bytes to carry a
 * register through, by powers of two. */
static const __u32 crc32c_x8n[16] = {
	0x00800000, 0x00008000, 0x82f63b78, 0x6ea2d55c, 0x18b8ea18, 0x510ac59a, 0xb82be955, 0xb8fdb1e7,
	0x88e56f72, 0x74c360a4, 0xe4172b16, 0x0d65762a, 0x35d73a62, 0x28461564, 0xbf455269, 0xe2ea32dc,
};

/* crc32c_mul returns a * b mod P (reflected), branch-free so that the
 * verifier walks one path. */
static __always_inline __u32 crc32c_mul(__u32 a, __u32 b)
{
	__u32 p = 0;
	int i;

	for (i = 0; i < 32; i++) {
		p ^= b & -((a >> (31 - i)) & 1);
		b = (b >> 1) ^ (CRC32C_POLY & -(b & 1));
	}
	return p;
}

/* sctp_crc_fix updates the CRC32c of the SCTP packet of len bytes at l4_off
 * whose first 4 bytes changed by delta (old ^ new, as loaded little-endian
 * from the packet). Global, so the verifier checks its loops once. */
__noinline int sctp_crc_fix(struct __sk_buff *skb, __u32 l4_off, __u32 len, __u32 delta)
{
	__u32 reg = delta, crc, n, i;

	if (!skb || len < 12 || len > 0xffff || l4_off > 0x3ff)
		return -1;
	for (i = 0; i < 32; i++)
		reg = (reg >> 1) ^ (CRC32C_POLY & -(reg & 1));
	n = len - 4;
	for (i = 0; i < 16; i++) {
		if (n & (1u << i))
			reg = crc32c_mul(crc32c_x8n[i], reg);
	}
	if (bpf_skb_load_bytes(skb, l4_off + 8, &crc, 4) < 0)
		return -1;
	crc ^= reg;
	return bpf_skb_store_bytes(skb, l4_off + 8, &crc, 4, 0);
}

#endif
