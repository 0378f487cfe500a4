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
 * worker gets to it: the deadline is for calls still unanswered. A late
 * turn (a busy worker) has the timer and such a reply due together, and
 * libev runs a turn's timers before its reads at equal priority; a turn
 * woken by a signal (a stopped or frozen process) has polled nothing at
 * all. So the timer has the lowest priority, to run after its turn's
 * reads, and when a deadline is due it first lets the loop poll once
 * more without waiting, and expires what is still listed after that
 * turn's reads: one more turn per firing, nothing per request.
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
	int polled; /* a due deadline waits one poll: timer_cb */
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
