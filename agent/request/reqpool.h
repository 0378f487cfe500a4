/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A worker's pool of requests: the free list that recycles them (no
 * allocation per request once the pool is warm), the list of every one
 * (freed at the worker's exit), the deadlines of those Redis has, and the
 * count of those retrying a lease release, capped so that an outage under
 * load cannot grow the pool without bound.
 *
 * It knows nothing of what a request does: a request embeds a struct
 * reqpool_item and the pool hands items out and takes them back. Not
 * thread-safe: a pool belongs to one worker loop.
 */
#ifndef REQPOOL_H
#define REQPOOL_H

#include <stdint.h>

#include <ev.h>

#include "deadline.h"

struct metrics_worker;
struct reqpool;

struct reqpool_item {
	struct reqpool_item *next_free;
	struct reqpool_item *next_all; /* every item of the pool */
	int                  live;     /* out of the pool */
	int                  retrying; /* counted in the retry cap */
};

/* A pool on <loop>; <expired> is called for a deadline that passes; at
 * most <max_retrying> items retry at once; <m> counts the live items. */
struct reqpool *reqpool_new(struct ev_loop *loop, struct metrics_worker *m,
                            void (*expired)(struct deadlines *dl,
                                            struct deadline  *d),
                            int max_retrying);
/* A recycled item, now live, or NULL: the caller then allocates one and
 * gives it to reqpool_adopt(). */
struct reqpool_item *reqpool_take(struct reqpool *pool);
/* <it>, new, joins the pool, live. */
void reqpool_adopt(struct reqpool *pool, struct reqpool_item *it);
/* <it>, live and holding nothing, goes back on the free list. */
void reqpool_put(struct reqpool *pool, struct reqpool_item *it);

/* <d> passes at <at> (µs, util_loop_us()'s clock). */
void reqpool_deadline(struct reqpool *pool, struct deadline *d, int64_t at);
/* No deadline passes any more (the worker is exiting). */
void reqpool_stop(struct reqpool *pool);

/* Calls <fn> on each live item (an item <fn> puts back is not reached
 * again). */
void reqpool_each_live(struct reqpool *pool,
                       void (*fn)(struct reqpool_item *it, void *arg),
                       void *arg);

/* <it> starts retrying: 1, or 0 if it was not retrying and the cap is
 * reached. Already retrying: 1. */
int reqpool_retry_begin(struct reqpool *pool, struct reqpool_item *it);
/* <it> retries no more (a no-op if it was not retrying). */
void reqpool_retry_end(struct reqpool *pool, struct reqpool_item *it);

/* Frees the pool at the worker's exit: <release> is called for each live
 * item first (it must reqpool_put() it), then <destroy> for every item. */
void reqpool_free(struct reqpool *pool,
                  void (*release)(struct reqpool_item *it),
                  void (*destroy)(struct reqpool_item *it));

#endif
