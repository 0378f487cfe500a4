/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Key templates: "tenant:{tenant}", "login:{user}:{ip/64}" compiled once at
 * policy load and expanded per request against a decoded SPOE message.
 *
 * Expansion never allocates and never fails for lack of room: it writes
 * into the caller's buffer and, when the result would be longer than the
 * buffer allows, keeps a readable prefix and ends with "~" and a 128-bit
 * hash (two independent 64-bit hashes) of the whole untruncated text, so
 * two distinct long values never share a key by truncation.
 *
 * How a value becomes text (see keys_expand()):
 *   string   copied byte for byte, except '{', '}', '%' and '~', written
 *            as %7B, %7D, %25 and %7E so no value can open or close the
 *            Redis Cluster hash tag or spell out a hashed key's "~" tail,
 *            and the mapping stays one-to-one; a string
 *            that inet_pton() reads as an address is treated as one
 *   int      decimal; bool "true"/"false"; binary lowercase hex
 *   ipv4     dotted quad (IPv4 is always the whole /32)
 *   ipv6     masked to the placeholder's prefix ({ip/48}; default the
 *            rule's ipv6_prefix, 64), printed as RFC 5952 text plus "/N"
 *            when N < 128; ::ffff:a.b.c.d is the IPv4 address a.b.c.d
 * A placeholder whose arg is absent, NULL, or an empty string/binary makes
 * the whole expansion "missing": the policy then applies missing:.
 */
#ifndef KEYS_H
#define KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "spop.h"

#define KEYS_MISSING  (-1) /* keys_expand(): an arg is missing */
#define KEYS_HASH_LEN 33   /* "~" + 32 hex digits */
#define KEYS_NAME_MAX 64   /* longest arg name in a placeholder */

struct tmpl;

/* Compiles <src>. <default_prefix> (0..128) applies to IPv6 values of
 * placeholders written without "/N". Returns a new template (free with
 * keys_free()), or NULL with <*err> set to a static message and <*errpos>
 * to the byte offset in <src> where the problem is. */
struct tmpl *keys_compile(const char *src, int default_prefix, const char **err,
                          size_t *errpos);

/* Frees <t>; NULL is a no-op. */
void keys_free(struct tmpl *t);

/* The source text <t> was compiled from (owned by <t>). */
const char *keys_source(const struct tmpl *t);

/* Number of placeholders in <t>, and the arg name of the <i>th (owned by
 * <t>, NUL-terminated). */
int         keys_nvars(const struct tmpl *t);
const char *keys_var(const struct tmpl *t, int i);

/* True when <t> is exactly one placeholder with no literal text and no
 * prefix ("{size}"): the form cost: and id: accept as a bare arg. */
int keys_is_single_var(const struct tmpl *t);

/* Writes <pre>, the expansion of <t> against <m>, then <suf> into <out>
 * (which has room for <max> + 1 bytes; the result is NUL-terminated) and
 * its length into <*len>. When the text would exceed <max>, it is cut to
 * <max> - KEYS_HASH_LEN - strlen(<suf>) bytes, then "~<hash>" and <suf>
 * are appended; <pre> must leave room for that. <pre> is included in the
 * hash, <suf> is not (it is constant per caller). <t> may be NULL (expands
 * to nothing). Returns 0, or KEYS_MISSING with <out> unspecified. Never
 * allocates. */
int keys_expand(const struct tmpl *t, const struct spop_message *m,
                const char *pre, const char *suf, char *out, size_t max,
                size_t *len);

/* Returns the first arg of <m> named <name> (<len> bytes), or NULL. */
const struct spop_arg *keys_find_arg(const struct spop_message *m,
                                     const char *name, size_t len);

/* Reads arg <name> of <m> as an integer: INT32/INT64/UINT32/UINT64 in
 * int64 range, or a STRING of decimal digits (optional leading '-'; at
 * most 18 past its leading zeros). Returns 0 with <*v>, KEYS_INT_RANGE
 * for a positive integer past that range (a client's "more than any
 * budget"), or -1 when the arg is missing or not an integer. */
#define KEYS_INT_RANGE (-2)
int keys_arg_int(const struct spop_message *m, const char *name, int64_t *v);

#endif
