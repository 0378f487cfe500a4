/*
 * Near-cache: keys Redis has just denied, answered locally until they can
 * pass again, so a flood on a denied key costs Redis nothing.
 *
 * Exact, not a guess: for gcra, token-bucket, leaky-bucket (meter) and
 * fixed-window, a key denied to a cost-1 request until T stays denied to
 * every cost-1 (or larger) request until T: other agents can only push
 * the state later, never earlier (ALGORITHMS.md). T is taken from the time
 * the request was sent, so the local view never outlasts Redis's.
 * Only CHECK requests with cost >= 1 on non-shadow rules use it.
 *
 * Bounded: 4-way set-associative, NEARCACHE_SETS sets; an insert takes an
 * empty or expired way first, else the one expiring soonest. Keys are
 * held as two independent 64-bit hashes of the key and its limits (so a
 * plan or algorithm change is never answered with the old denial). One per
 * worker: not thread-safe.
 */
#ifndef NEARCACHE_H
#define NEARCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "policy.h"

#define NEARCACHE_SETS 4096
#define NEARCACHE_WAYS 4

struct nearcache;

struct nearcache *nearcache_new(void);
void nearcache_free(struct nearcache *nc);

/* 1 if <c>'s algorithm, op, cost and rule allow near-caching. */
int nearcache_eligible(const struct check *c);

/* If <c>'s key is denied at <now_us>, fills <out> as Redis would answer
 * (allowed 0, remaining 0, retry/next/full until the end) and returns 1. */
int nearcache_lookup(struct nearcache *nc, const struct check *c,
                     int64_t now_us, struct lim_result *out);

/* Records Redis's answer <r> to <c>, sent at <sent_us>: a cost-1 denial
 * is kept until sent_us + retry_after. Other answers are ignored. */
void nearcache_learn(struct nearcache *nc, const struct check *c,
                     const struct lim_result *r, int64_t sent_us);

/* The same table as a "seen" set: returns 1 (and remembers <c>'s key
 * until <until_us>) unless the key is already remembered at <now_us>.
 * Used to log a shadow rule's denial once per key per window. */
int nearcache_once(struct nearcache *nc, const struct check *c,
                   int64_t now_us, int64_t until_us);

size_t nearcache_count(const struct nearcache *nc, int64_t now_us);

#endif
