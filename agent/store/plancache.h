/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Plan cache: the tenant -> plan answers of the Redis hash named by
 * plan_lookup.redis_hash, kept per worker for plan_lookup.cache.
 *
 * It is the resolver policy_tenant_plan() calls (policy_plan_resolver).
 * A tenant with no answer yet (first sight, after a restart or an
 * eviction) starts one HGET and the caller waits for it: its waiter is
 * parked on the tenant's entry and called back when the answer comes, so
 * a pro tenant is never judged against the default plan's limits while
 * the lookup runs. Every lookup of that tenant meanwhile joins the same
 * HGET. "Not in the hash" is an answer too, cached the same way, so an
 * unknown tenant costs one round trip per cache time, not one per request.
 * An answer older than the cache time is still used at once while one
 * HGET refreshes it in the background, so a plan changed in Redis applies
 * within the cache time plus one round trip, with no reload. Answers
 * outlive a reload, judged by its plan_lookup: past its cache time, or
 * from another redis_hash, they are refreshed as above. An HGET that
 * fails (an error reply such as WRONGTYPE, a lost link) is not sent again
 * for that tenant for PLANCACHE_RETRY_US: meanwhile a tenant with no
 * answer yet gets its rules' fail modes at once instead of a round trip
 * per request, and one with an older answer keeps it.
 *
 * What it does not do: time. The caller bounds the wait (its own deadline)
 * and gives up with plancache_cancel().
 *
 * Bounded: at most <max> entries and <max_bytes> bytes of tenant names
 * (PLANCACHE_MAX, PLANCACHE_BYTES); past either, entries are evicted one
 * at a time by CLOCK (second chance: an entry used since the hand last
 * passed is kept for another turn). An entry with an HGET in flight or a
 * waiter is not evicted. Tenants of any length are cached (an SPOP frame
 * bounds them). One per worker: not thread-safe.
 */
#ifndef PLANCACHE_H
#define PLANCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "policy.h"

#define PLANCACHE_MAX      65536
#define PLANCACHE_BYTES    (16u << 20) /* tenant bytes per worker */
#define PLANCACHE_PLAN_MAX 63          /* longer plan names: not a plan */
#define PLANCACHE_RETRY_US 1000000     /* after a failed HGET */

struct plancache;
struct store;

/* Fetches <field> of <hash> in the background: calls <cb> exactly once
 * (err 0 and the value, NULL when absent; err -1 when Redis failed), or
 * returns -1 at once with no call to come. store_hget() is one. */
typedef int
plancache_fetch(void *ctx, const char *hash, const char *field, size_t len,
                void (*cb)(void *arg, const char *val, size_t vlen, int err),
                void *arg);

/* A request waiting for a tenant's answer; embedded in the caller. Set
 * <pc> and <cb>, zero the rest (plancache_waiter_init). <cb> runs once
 * the answer lands (<ok> 1) or the HGET failed (<ok> 0), after the waiter
 * has been unlinked; it may resolve again. */
struct plancache_waiter {
	struct plancache *pc;
	void (*cb)(struct plancache_waiter *w, int ok);
	int nowait; /* answer from what is known:
	             * never park, never fetch */
	struct plancache_waiter  *next;
	struct plancache_waiter **pprev; /* NULL: not waiting */
};

/* A cache that fetches through store_hget(<st>). Free it after the store
 * (store_free() answers the HGETs in flight, which write to the cache). */
struct plancache *plancache_new(struct store *st);

/* A cache of at most <max> entries and <max_bytes> tenant bytes that
 * fetches through <fetch> (tests). */
struct plancache *plancache_new_fetch(plancache_fetch *fetch, void *ctx,
                                      size_t max, size_t max_bytes);
void              plancache_free(struct plancache *pc);

void plancache_waiter_init(struct plancache_waiter *w, struct plancache *pc,
                           void (*cb)(struct plancache_waiter *w, int ok));

/* The policy_plan_resolver: <ctx> is a struct plancache_waiter. Returns
 * the plan index the hash names, -1 when the tenant is not in the hash
 * (or names no plan of <p>: the default applies), or, with no answer yet:
 *   POLICY_PLAN_WAIT     an HGET is in flight; the waiter is parked on it
 *                        unless it already waits on another tenant or
 *                        has <nowait> set (then POLICY_PLAN_UNKNOWN);
 *   POLICY_PLAN_UNKNOWN  Redis cannot be asked (store down) or the table
 *                        is all busy. */
int plancache_resolve(void *ctx, const struct policy *p, const char *tenant,
                      size_t len);

/* Unparks <w> if it waits; its callback will not run. */
void plancache_cancel(struct plancache_waiter *w);

/* Entries held now, the bytes of their tenant names, and the entries
 * with an HGET in flight. */
size_t plancache_count(const struct plancache *pc);
size_t plancache_bytes(const struct plancache *pc);
size_t plancache_pending(const struct plancache *pc);

#endif
