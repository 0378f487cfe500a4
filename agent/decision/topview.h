/* SPDX-License-Identifier: Apache-2.0 */
/*
 * topview: the text of one agent's top list as the pool shares it in
 * Redis (toppool.h), written and read; and the sum of several agents'.
 *
 * A view is "ts_ms total\n", then one "count err len:key\n" line per
 * key, most denied first, TOPK_K lines at most, each key once: decimal
 * numbers, one space between them, the key's <len> bytes as they are.
 * The reader trusts nothing in it: another agent, or anyone who can
 * write to Redis, wrote it (fuzz_topview). Nothing here talks to Redis.
 */
#ifndef TOPVIEW_H
#define TOPVIEW_H

#include <stddef.h>
#include <stdint.h>

#include "topk.h"

/* The most denials a view may claim: no sum of them overflows. */
#define TOPVIEW_COUNT_MAX 1000000000000000LL

/* The view of <m> (finished) at <now_ms>, malloc'd, in <*len> bytes. */
char *topview_format(const struct topk_merge *m, int64_t now_ms, size_t *len);

/* The most a key that topview_format(<m>) leaves out may have been
 * denied: the last listed key's count when the view cuts <m>, else its
 * own bound. */
int64_t topview_bound(const struct topk_merge *m);

/* Parses the view <s> (<len> bytes, read no further) into <one>, empty.
 * Returns its ts_ms, or -1 when it is not a view as topview_format
 * writes them (a bad number, a count past TOPVIEW_COUNT_MAX, a key past
 * POLICY_KEY_MAX, more than TOPK_K lines, a key twice); <one> is then
 * left to free. */
int64_t topview_parse(const char *s, size_t len, struct topk_merge *one);

/* Adds the parsed view <one> of an agent whose bound is <bound> to <m>
 * (not finished): topk_merge_finish() adds every agent's bound to each
 * key, so a key this agent does not list counts its bound there. */
void topview_add(struct topk_merge *m, const struct topk_merge *one,
                 int64_t bound);

#endif
