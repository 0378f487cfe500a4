/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The runtime overrides as one worker sees them (override.h): a copy of
 * the table in Redis, polled every OVCACHE_POLL_S. Each poll is one small
 * HGET of the table's generation; the table itself (HGET "all") is fetched
 * only when the generation moved. So a change made with `spoa-ratelimit
 * override` applies on every agent of the pool within OVCACHE_POLL_S plus
 * two round trips (under a second), and costs the request path nothing
 * but a lookup by key (none at all while the table is empty). Expiry is
 * exact: the table keeps each override's end and the lookup compares it
 * with the clock.
 *
 * When Redis cannot be asked, the last table stays: overrides keep
 * applying to the fail: local fallback. One per worker, not thread-safe;
 * free it after the store (store_free() answers the HGETs in flight).
 */
#ifndef OVCACHE_H
#define OVCACHE_H

#include "override.h"

#define OVCACHE_POLL_S 0.5

struct ev_loop;
struct nearcache;
struct ovcache;
struct store;

/* Starts polling through <st> on <loop> (the first poll at once). */
struct ovcache *ovcache_new(struct ev_loop *loop, struct store *st);
void            ovcache_free(struct ovcache *oc);

/* Polls the pool's reset counter (OV_RESETS, bumped by every `key
 * reset`) on the same timer, and drops <nc>'s penalty-box entries when it
 * moves (nearcache.h), so a reset reaches this worker within
 * OVCACHE_POLL_S plus a round trip. */
void ovcache_watch_resets(struct ovcache *oc, struct nearcache *nc);

/* The current table (NULL when none was ever fetched). Valid until the
 * worker's loop runs again. */
const struct ov_table *ovcache_table(const struct ovcache *oc);

#endif
