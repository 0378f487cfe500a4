/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Address ranges (CIDRs) for the policy's static allow lists: parsed once
 * at load, strictly, and matched against a client address per request.
 *
 * Every address is kept as 16 bytes: an IPv4 address a.b.c.d as its
 * IPv4-mapped IPv6 form ::ffff:a.b.c.d and an IPv4 prefix /N as /(96+N),
 * so one comparison serves both families and a client seen as
 * ::ffff:10.1.2.3 (a dual-stack listener) matches 10.0.0.0/8. Hence
 * 0.0.0.0/0 is every IPv4 client and ::/0 every client.
 *
 * Pure: no allocation, no I/O. Not here: where the client address comes
 * from (policy.c) or what a match means (the rule skips its check).
 */
#ifndef CIDR_H
#define CIDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CIDR_TEXT_MAX 64 /* longest accepted text, "addr/len" */

struct cidr {
	uint8_t addr[16]; /* host bits zero */
	int     prefix;   /* 0..128, on the 16-byte form */
};

/* Reads "<address>" or "<address>/<len>" (IPv4 dotted quad or IPv6 text,
 * len a plain decimal in range for the family written: 0..32 or 0..128).
 * A bare address is the whole /32 or /128. Host bits past the prefix are
 * an error (10.0.0.1/8 is most likely a typo for 10.0.0.0/8 or
 * 10.0.0.1/32). Returns 0, or -1 with <*err> set to a static message. */
int cidr_parse(const char *s, struct cidr *out, const char **err);

/* Reads the address text <s> (<len> bytes, no prefix) into its 16-byte
 * form. Returns 0, or -1 when it is not an IPv4 or IPv6 address. */
int cidr_addr_text(const char *s, size_t len, uint8_t out[16]);

/* The 16-byte form of the IPv4 address <v4> (network order). */
void cidr_addr_v4(const uint8_t v4[4], uint8_t out[16]);

/* 1 if <a> (16-byte form) is inside <c>. */
bool cidr_match(const struct cidr *c, const uint8_t a[16]);

/* 1 if <a> is inside one of the <n> ranges of <v>. Linear: the lists
 * are short (the parser bounds them) and each test is a memcmp. */
bool cidr_match_any(const struct cidr *v, int n, const uint8_t a[16]);

/* Writes <c> as text ("10.0.0.0/8", "2001:db8::/32") into <buf> of
 * <size> bytes (CIDR_TEXT_MAX is enough). */
void cidr_format(const struct cidr *c, char *buf, size_t size);

#endif
