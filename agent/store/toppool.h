/* SPDX-License-Identifier: Apache-2.0 */
/*
 * toppool: the top denied keys of a whole agent pool, through Redis.
 *
 * Each agent with an admin: block publishes, once a second, its merged
 * summary of each rule that denied something in the last minute (topk.h)
 * as one field of the hash rl:top:{RULE}: the field is the agent's id
 * (host/pid/random), the value "ts_ms total" then one "count err len:key"
 * line per key, TOPK_K lines at most. In the same transaction it writes
 * its bound to the hash rl:top:{RULE}:b, same field: the most a key it
 * does not list may have been denied there (its view cut at TOPK_K keys,
 * or its summaries full). The views keep the format older agents read;
 * an older agent writes no bound (read as 0). Both hashes expire
 * TOPPOOL_TTL_MS after the last write. A reader (`spoa-ratelimit top`,
 * GET /admin/top) reads both in one transaction, takes the views written
 * in the last TOPPOOL_FRESH_MS, sums each key over the agents, counting
 * an agent's bound for a key it does not list, and sorts; fields older
 * than a minute (an agent gone) are deleted as it reads. Counts are
 * Space-Saving's: never too low, at most <err> too high, summed.
 *
 * Blocking hiredis, off the request path (the main loop, the CLI).
 */
#ifndef TOPPOOL_H
#define TOPPOOL_H

#include <hiredis/hiredis.h>

#include "topk.h"

#define TOPPOOL_TTL_MS   10000
#define TOPPOOL_FRESH_MS 3000

/* This process's field name (made once). */
const char *toppool_agent_id(void);

/* Writes <m> (finished) as this agent's view of <rule> at <now_ms>.
 * Returns 0 or -1 (Redis failed). <*c> (keyop_connect()'s) may be
 * replaced: a Cluster's MOVED is followed once. */
int toppool_publish(redisContext **c, const char *rule,
                    const struct topk_merge *m, int64_t now_ms);

/* Reads and merges the pool's views of <rule> at <now_ms> into <m>
 * (finished). Returns the number of agents counted, or -1. <*c> as for
 * toppool_publish(). */
int toppool_read(redisContext **c, const char *rule, int64_t now_ms,
                 struct topk_merge *m);

/* {"rule", "window_s", "agents", "denied", "keys": [{"key", "denied",
 * "error"}...]} of the first <n> keys of <m>, as many as fit in
 * JSONW_MAX; when that cuts the list, "truncated": true after it. */
struct jsonw;
void toppool_json(struct jsonw *w, const char *rule, const struct topk_merge *m,
                  int agents, int n);

#endif
