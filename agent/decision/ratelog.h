/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Rate-limited logging of fail-mode activations (DESIGN.md "Failure
 * behaviour", issue 7 "Logs"): when Redis cannot decide, every request
 * applies its rules' fail modes, and logging each of them would turn an
 * outage into a log flood. So each worker logs
 *
 *   ts=... level=warn msg=fail_mode rule=tenant mode=open reason=redis_down
 *     worker=0 suppressed=1234
 *
 * at most once per RATELOG_INTERVAL_US per rule, where <suppressed> counts
 * the activations of that rule on that worker not logged since its last
 * line. State is per thread (the worker's), indexed by rule index, so no
 * lock and no sharing; a reload that renumbers rules at worst shifts one
 * interval's line to another rule name. Rule indexes past
 * RATELOG_MAX_RULES share the last slot.
 */
#ifndef RATELOG_H
#define RATELOG_H

#include <pthread.h>
#include <stdint.h>

#include "policy.h"

#define RATELOG_INTERVAL_US (10LL * 1000 * 1000)
#define RATELOG_MAX_RULES   256

/* Per-rule state for ratelog_allow(); zeroed = nothing logged yet. */
struct ratelog {
	int64_t  last_us[RATELOG_MAX_RULES]; /* 0: never logged */
	uint64_t suppressed[RATELOG_MAX_RULES];
};

/* Returns 1 when rule <index> may log at <now_us> (the first time, or
 * RATELOG_INTERVAL_US after its last line), with <*suppressed> set to the
 * calls refused since then and the count reset; 0 (and one more refused
 * call counted) otherwise. Pure apart from <rl>. */
int ratelog_allow(struct ratelog *rl, int index, int64_t now_us,
                  uint64_t *suppressed);

/* ---- one process-wide interval per key ---------------------------------
 *
 * For a line that every worker would log about the same thing, a server
 * address they all meet (a plain Redis among the sentinels): ratelog_allow()
 * is per worker, so N workers would log N lines per interval. This state
 * is shared by all threads, keyed by a string (an address), behind one
 * mutex (taken for a lookup of at most RATELOG_SHARED_KEYS keys; a line
 * is seldom asked for). Keys past RATELOG_SHARED_KEYS, or longer than
 * RATELOG_SHARED_KEY_MAX - 1 bytes (cut), share the last slot: a line
 * held back, never one more. Define one per kind of line with static
 * storage:
 *
 *   static struct ratelog_shared logs = RATELOG_SHARED_INIT;
 */
#define RATELOG_SHARED_KEYS    32
#define RATELOG_SHARED_KEY_MAX 272 /* "host:port", host up to 255 bytes */

struct ratelog_shared {
	pthread_mutex_t lock;
	int             n; /* slots in use */
	struct {
		char     key[RATELOG_SHARED_KEY_MAX];
		int64_t  last_us; /* 0: never logged */
		uint64_t suppressed;
	} slot[RATELOG_SHARED_KEYS];
};
#define RATELOG_SHARED_INIT { .lock = PTHREAD_MUTEX_INITIALIZER }

/* ratelog_allow() for <key> (a NUL-terminated string, copied) in <rl>,
 * whichever thread asks: 1 and <*suppressed> at most once per
 * RATELOG_INTERVAL_US per key for the whole process. Thread-safe. */
int ratelog_shared_allow(struct ratelog_shared *rl, const char *key,
                         int64_t now_us, uint64_t *suppressed);

/* ratelog_shared_allow() keyed by the server address <host>:<port>. */
int ratelog_addr_allow(struct ratelog_shared *rl, const char *host, int port,
                       int64_t now_us, uint64_t *suppressed);

/* A fail mode was applied to <rule> on worker <worker> because Redis could
 * not decide; <store_up> says whether the link was up (then the cause was
 * a timeout or an error reply) or not (down, or the breaker open). Logs
 * the line above at warn when this thread's ratelog_allow() says so, with
 * util_now_us() as the clock. Returns 1 when it logged. */
int ratelog_fail_mode(const struct rule *rule, int worker, int store_up);

/* A request was denied by <rule> because its <cost> can never fit (the
 * limiter's allowed -1: more than the rule's <quota> at once; ALGORITHMS.md
 * "denied with no finite retry"). Logs, with the same per-rule interval
 * and <suppressed> count as fail_mode but a state of its own,
 *
 *   ts=... level=warn msg=cost_never_fits rule=upload cost=6 quota=5
 *     retry_after=3600 worker=0 suppressed=0
 *
 * where retry_after is what the client was told (DECIDE_NEVER_FITS_S).
 * Returns 1 when it logged. */
int ratelog_never_fits(const struct rule *rule, int worker, int64_t cost,
                       int64_t quota, int64_t retry_after_s);

/* A response reported a cost for <rule> that is missing or malformed
 * (negative, fractional, over 2^53): nothing was charged. Logs, with the
 * same per-rule interval and <suppressed> count but a state of its own,
 *
 *   ts=... level=warn msg=response_cost_rejected rule=llm-tokens
 *     arg=cost worker=0 suppressed=0
 *
 * Returns 1 when it logged. */
int ratelog_cost_rejected(const struct rule *rule, int worker);

/* A settle of <rule> (reserve:) found no reservation: repeated, after the
 * lease, never reserved, or the store was unavailable. Nothing changed.
 * Logs, at most once per interval per rule, with a state of its own,
 *
 *   ts=... level=warn msg=settle_unmatched rule=llm-tokens worker=0
 *     suppressed=0
 *
 * Returns 1 when it logged. */
int ratelog_settle_unmatched(const struct rule *rule, int worker);

/* A settle of <rule> went to Redis and its answer did not come in time
 * (past redis.timeout, or the connection lost with it in flight): Redis
 * may or may not have applied it. Logs as ratelog_settle_unmatched(),
 * with a state of its own,
 *
 *   ts=... level=warn msg=settle_unconfirmed rule=llm-tokens worker=0
 *     suppressed=0
 *
 * Returns 1 when it logged. */
int ratelog_settle_unconfirmed(const struct rule *rule, int worker);

/* A settle message (<message>, a policy's own string) that no rule takes
 * since a reload removed the reserving rules <rules> (comma-separated)
 * that it settled. At most once per interval in all (no rule to key it
 * by), with a state of its own,
 *
 *   ts=... level=warn msg=settle_orphaned message=rl-response
 *     removed_rules=llm-tokens worker=0 suppressed=0
 *
 * Returns 1 when it logged. */
int ratelog_settle_orphaned(const char *message, const char *rules,
                            int worker);

#endif
