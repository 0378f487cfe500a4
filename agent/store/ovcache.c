/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A worker's copy of the runtime overrides (ovcache.h): a timer, an HGET
 * of the generation, an HGET of the table when it moved; on the same
 * timer, an HGET of the pool's reset counter for the near-cache's
 * penalty-box entries. Nothing else.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>

#include "log.h"
#include "nearcache.h"
#include "ovcache.h"
#include "store.h"
#include "util.h"

#define GEN_MAX 32

struct ovcache {
	struct ev_loop   *loop;
	struct store     *st;
	ev_timer          timer;
	struct ov_table  *table;
	char              gen[GEN_MAX];    /* of <table>; "" before any */
	char              want[GEN_MAX];   /* the generation being fetched */
	int               busy;            /* an HGET in flight */
	struct nearcache *near;            /* its blocks dropped on a reset */
	char              resets[GEN_MAX]; /* "" before the first answer */
	int               rbusy;           /* the resets HGET in flight */
};

static void
all_cb(void *arg, const char *val, size_t len, int err)
{
	struct ovcache  *oc = arg;
	struct ov_table *t;
	int              bad;

	oc->busy = 0;
	if (err != 0)
		return;
	t = ov_table_parse(val ? val : "", val ? len : 0, &bad);
	if (bad > 0)
		log_warn(
			"override_table_bad_entries",
			"skipped=%d held=%zu "
			"hint=\"rewrite them with spoa-ratelimit override set\"",
			bad, ov_table_count(t));
	ov_table_free(oc->table);
	oc->table = t;
	memcpy(oc->gen, oc->want, sizeof(oc->gen));
}

static void
gen_cb(void *arg, const char *val, size_t len, int err)
{
	struct ovcache *oc = arg;

	oc->busy = 0;
	if (err != 0)
		return;
	if (!val || len == 0 || len >= GEN_MAX) {
		val = "0"; /* never set: an empty table */
		len = 1;
	}
	if (strlen(oc->gen) == len && memcmp(oc->gen, val, len) == 0)
		return;
	memcpy(oc->want, val, len);
	oc->want[len] = '\0';
	if (store_hget(oc->st, OV_HASH, "all", 3, all_cb, oc) == 0)
		oc->busy = 1;
}

/* The reset counter (OV_RESETS): a move since the last answer means a
 * `key reset` somewhere in the pool, so the worker's held blocks go. No
 * answer: blocks are held only briefly until the poll answers again. */
static void
resets_cb(void *arg, const char *val, size_t len, int err)
{
	struct ovcache *oc = arg;

	oc->rbusy = 0;
	if (err != 0 || len >= GEN_MAX - 1) {
		nearcache_watch_resets(oc->near, 0, util_loop_us());
		return;
	}
	if (!val) { /* never bumped */
		val = "";
		len = 0;
	}
	if (oc->resets[0] != '\0' && (strlen(oc->resets + 1) != len ||
	                              memcmp(oc->resets + 1, val, len) != 0))
		nearcache_drop_blocks(oc->near, util_loop_us());
	oc->resets[0] = '=';
	memcpy(oc->resets + 1, val, len);
	oc->resets[len + 1] = '\0';
	nearcache_watch_resets(oc->near, 1, util_loop_us());
}

static void
poll_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct ovcache *oc = t->data;

	if (oc->near != NULL && !oc->rbusy) {
		if (store_hget(oc->st, OV_HASH, OV_RESETS, strlen(OV_RESETS),
		               resets_cb, oc) == 0)
			oc->rbusy = 1;
		else /* not sent (the link is down): a failed poll */
			nearcache_watch_resets(oc->near, 0, util_loop_us());
	}
	if (oc->busy)
		return;
	if (store_hget(oc->st, OV_HASH, "gen", 3, gen_cb, oc) == 0)
		oc->busy = 1;
}

struct ovcache *
ovcache_new(struct ev_loop *loop, struct store *st)
{
	struct ovcache *oc = xcalloc(1, sizeof(*oc));

	oc->loop = loop;
	oc->st = st;
	ev_timer_init(&oc->timer, poll_cb, 0., OVCACHE_POLL_S);
	oc->timer.data = oc;
	ev_timer_start(loop, &oc->timer);
	return oc;
}

void
ovcache_free(struct ovcache *oc)
{
	if (!oc)
		return;
	ev_timer_stop(oc->loop, &oc->timer);
	ov_table_free(oc->table);
	free(oc);
}

void
ovcache_watch_resets(struct ovcache *oc, struct nearcache *nc)
{
	oc->near = nc;
}

const struct ov_table *
ovcache_table(const struct ovcache *oc)
{
	return oc ? oc->table : NULL;
}
