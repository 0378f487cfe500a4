/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Near-cache: keys Redis has just denied, answered locally for a moment
 * (until they can pass again, 0.5 s at most), so a flood on a denied key
 * costs Redis next to nothing.
 *
 * Exact, not a guess: for gcra, token-bucket, leaky-bucket (meter) and
 * fixed-window, a key denied to a cost-1 request until T stays denied to
 * every cost-1 (or larger) request until T: other agents can only push
 * the state later, never earlier (ALGORITHMS.md). T is taken from the time
 * the request was sent, so the local view never outlasts Redis's.
 * Only CHECK requests with cost >= 1 on non-shadow rules use it.
 *
 * Held briefly, not until T: Redis's state is the truth, and it can move
 * earlier than "other agents only push it later" allows: an operator's
 * DEL, a Redis restarting empty, a failover that loses writes. An entry
 * answers for NEARCACHE_HOLD_US at most, then Redis is asked again; the
 * Retry-After it answers is still the true time left, T - now.
 *
 * Penalty box (a rule with block:): every denial of such a rule is a
 * block until T (limiter.h), for any algorithm and any cost. It is held
 * to T, at most NEARCACHE_BLOCK_HOLD_US, while the worker watches the
 * pool's resets (nearcache_watch_resets(): ovcache.c polls the counter
 * `key reset` bumps, every OVCACHE_POLL_S) and dropped when one comes
 * (nearcache_drop_blocks()); without the watch (overrides: false) a block
 * is held as any denial, NEARCACHE_HOLD_US. So a blocked key costs Redis
 * one call per worker per NEARCACHE_BLOCK_HOLD_US, and a reset still
 * reaches every agent within a second.
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

/* The longest a denial is answered locally (0.5 s): how late a reset in
 * Redis (`spoa-ratelimit key reset`, a DEL) is seen by every agent of a
 * pool, under the 1 s the admin API promises (docs/OPERATING.md). A flood
 * on a denied key then costs Redis one call per worker per 0.5 s, 0.04
 * per denied request from 50 requests a second on a worker, which is
 * where a flood starts to matter. */
#define NEARCACHE_HOLD_US 500000LL

/* The longest a block is answered locally while resets are watched. */
#define NEARCACHE_BLOCK_HOLD_US (60 * 1000000LL)

struct nearcache;

struct nearcache *nearcache_new(void);
void              nearcache_free(struct nearcache *nc);

/* 1 if <c>'s algorithm, op, cost and rule allow near-caching. */
int nearcache_eligible(const struct check *c);

/* If <c>'s key is held as denied at <now_us>, fills <out> as Redis would
 * answer (allowed 0, remaining 0, retry/next/full until the denial's end,
 * not the hold's; for a cost above 1, retry one emission interval later
 * per unit in the GCRA family) and returns 1. A cost that can never fit
 * is left to Redis (0). */
int nearcache_lookup(struct nearcache *nc, const struct check *c,
                     int64_t now_us, struct lim_result *out);

/* Records Redis's answer <r> to <c>, sent at <sent_us> and received at
 * <recv_us>: a cost-1 denial is denied until sent_us + retry_after (the
 * earliest its end can be: never denied longer than Redis would), held
 * for NEARCACHE_HOLD_US at most, and answered as ending recv_us - sent_us
 * later (the latest it can be: a Retry-After from here is never earlier
 * than Redis's own). Other answers are ignored. */
void nearcache_learn(struct nearcache *nc, const struct check *c,
                     const struct lim_result *r, int64_t sent_us,
                     int64_t recv_us);

/* The same table as a "seen" set: returns 1 (and remembers <c>'s key
 * until <until_us>) unless the key is already remembered at <now_us>.
 * Used to log a shadow rule's denial once per key per window: it answers
 * no request, so it is held the whole window. */
int nearcache_once(struct nearcache *nc, const struct check *c, int64_t now_us,
                   int64_t until_us);

size_t nearcache_count(const struct nearcache *nc, int64_t now_us);

/* <on> 1: this worker sees every pool reset within a second (its reset
 * poll answers), so blocks may be held to their end; 0: it may not, and
 * the blocks held longer are held NEARCACHE_HOLD_US from <now_us> at most
 * (a reset the failed poll missed is seen as soon as that). */
void nearcache_watch_resets(struct nearcache *nc, int on, int64_t now_us);

/* A key was reset somewhere in the pool: forgets every held block, and
 * any block learnt from a request sent before <now_us> (util_loop_us()). */
void nearcache_drop_blocks(struct nearcache *nc, int64_t now_us);

#endif
