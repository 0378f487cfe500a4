/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Deadlines of one worker's requests waiting for Redis: a list kept in
 * time order, with one ev_timer on its head.
 *
 * Every such request has about the same deadline (its start plus
 * redis.timeout), so a new one almost always goes last and an answered
 * one leaves from anywhere: O(1) both, where an ev_timer per request is
 * a heap insert and a heap delete (3 % of a worker's CPU under load,
 * perf). A deadline that is not the latest (a request that waited for its
 * plan, a reload that shortened the timeout) is walked back to its place.
 * The timer is not moved when the head leaves: it fires at the old head's
 * time, finds nothing due, and is set again.
 *
 * A reply that came before its deadline decides, however late the
 * worker gets to it in a busy turn: such a turn has the timer and that
 * reply due together, and libev runs a turn's timers before its reads at
 * equal priority, so the timer has the lowest. (A turn woken by a signal,
 * a stopped or frozen process, polls nothing: one more poll before
 * expiring was tried for it; global_count_cluster.sh's flood then timed
 * out in 5 runs of 15, against 1 of 10 without, while the machine's own
 * stalls spoil about 1 run in 10 of any code. Not shown either way; not
 * done.)
 *
 * What this is not: the other timers of a request (plan wait, ACK delay),
 * which stay ev_timers. Times are util_loop_us()'s, the clock the
 * worker's requests are stamped with; the timer compares with it too, as
 * an ev_timer compares with the loop's time. One per worker: not
 * thread-safe.
 */
#ifndef DEADLINE_H
#define DEADLINE_H

#include <stdint.h>

#include <ev.h>

struct deadline {
	int64_t          at;          /* µs, util_loop_us()'s clock */
	struct deadline *prev, *next; /* NULL, NULL: not listed */
};

struct deadlines {
	struct deadline head; /* sentinel: head.next is the first */
	ev_timer        timer;
	struct ev_loop *loop;
	void (*expired)(struct deadlines *dl, struct deadline *d);
};

/* <expired> is called for each deadline that passes, after it has been
 * unlisted; it may add and remove deadlines. */
void deadlines_init(struct deadlines *dl, struct ev_loop *loop,
                    void (*expired)(struct deadlines *dl, struct deadline *d));
/* Stops the timer; the deadlines still listed are left alone. */
void deadlines_stop(struct deadlines *dl);

/* Lists <d> (not listed) to pass at <at>. */
void deadlines_add(struct deadlines *dl, struct deadline *d, int64_t at);
/* Unlists <d> if it is listed. */
void deadlines_remove(struct deadline *d);
int  deadlines_listed(const struct deadline *d);

#endif
