/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The request pool: see reqpool.h. A free list and a list of every item,
 * both singly linked through the items; the deadlines are a struct
 * deadlines (deadline.c) the pool owns. Does not allocate items itself (it
 * does not know their size) and never frees one before reqpool_free().
 */
#include <assert.h>
#include <stdlib.h>

#include "metrics.h"
#include "reqpool.h"
#include "util.h"

struct reqpool {
	struct reqpool_item   *free;
	struct reqpool_item   *all;
	int64_t                nlive;
	int                    nretrying;
	int                    max_retrying;
	struct deadlines       deadlines;
	struct metrics_worker *m;
};

struct reqpool *
reqpool_new(struct ev_loop *loop, struct metrics_worker *m,
            void (*expired)(struct deadlines *dl, struct deadline *d),
            int max_retrying)
{
	struct reqpool *pool = xcalloc(1, sizeof(*pool));

	pool->m = m;
	pool->max_retrying = max_retrying;
	deadlines_init(&pool->deadlines, loop, expired);
	return pool;
}

static void
went_live(struct reqpool *pool, struct reqpool_item *it)
{
	assert(!it->live && !it->retrying);
	it->live = 1;
	metrics_requests(pool->m, ++pool->nlive);
}

struct reqpool_item *
reqpool_take(struct reqpool *pool)
{
	struct reqpool_item *it = pool->free;

	if (it == NULL)
		return NULL;
	pool->free = it->next_free;
	went_live(pool, it);
	return it;
}

void
reqpool_adopt(struct reqpool *pool, struct reqpool_item *it)
{
	it->next_all = pool->all;
	pool->all = it;
	went_live(pool, it);
}

void
reqpool_put(struct reqpool *pool, struct reqpool_item *it)
{
	assert(it->live && !it->retrying && pool->nlive > 0);
	metrics_requests(pool->m, --pool->nlive);
	it->live = 0;
	it->next_free = pool->free;
	pool->free = it;
}

void
reqpool_deadline(struct reqpool *pool, struct deadline *d, int64_t at)
{
	deadlines_add(&pool->deadlines, d, at);
}

void
reqpool_stop(struct reqpool *pool)
{
	deadlines_stop(&pool->deadlines);
}

void
reqpool_each_live(struct reqpool *pool,
                  void (*fn)(struct reqpool_item *it, void *arg), void *arg)
{
	for (struct reqpool_item *it = pool->all; it != NULL; it = it->next_all)
		if (it->live)
			fn(it, arg);
}

int
reqpool_retry_begin(struct reqpool *pool, struct reqpool_item *it)
{
	assert(it->live);
	if (it->retrying)
		return 1;
	if (pool->nretrying >= pool->max_retrying)
		return 0;
	it->retrying = 1;
	pool->nretrying++;
	return 1;
}

void
reqpool_retry_end(struct reqpool *pool, struct reqpool_item *it)
{
	if (!it->retrying)
		return;
	assert(pool->nretrying > 0);
	it->retrying = 0;
	pool->nretrying--;
}

void
reqpool_free(struct reqpool *pool, void (*release)(struct reqpool_item *it),
             void (*destroy)(struct reqpool_item *it))
{
	struct reqpool_item *it;

	if (pool == NULL)
		return;
	for (it = pool->all; it != NULL; it = it->next_all)
		if (it->live)
			release(it);
	assert(pool->nlive == 0 && pool->nretrying == 0);
	while ((it = pool->all) != NULL) {
		pool->all = it->next_all;
		destroy(it);
	}
	free(pool);
}
