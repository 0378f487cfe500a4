/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Request deadlines in one time-ordered list with one timer (deadline.h).
 */
#include "deadline.h"
#include "util.h"

/* Sets the timer on the first deadline, unless it is set or none is left.
 * <now> is called only then. */
static void
arm(struct deadlines *dl, int64_t (*now)(void))
{
	struct deadline *first = dl->head.next;
	int64_t          wait, t;

	if (first == &dl->head || ev_is_active(&dl->timer))
		return;
	t = now();
	wait = first->at > t ? first->at - t : 0;
	ev_timer_set(&dl->timer, (double)wait / 1e6, 0.);
	ev_timer_start(dl->loop, &dl->timer);
}

static void
timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct deadlines *dl = container_of(t, struct deadlines, timer);
	int64_t now = util_loop_us(); /* the clock the deadlines were set on */

	while (dl->head.next != &dl->head && dl->head.next->at <= now) {
		struct deadline *d = dl->head.next;

		deadlines_remove(d);
		dl->expired(dl, d);
	}
	arm(dl, util_loop_us);
}

void
deadlines_init(struct deadlines *dl, struct ev_loop *loop,
               void (*expired)(struct deadlines *dl, struct deadline *d))
{
	dl->head.prev = dl->head.next = &dl->head;
	dl->loop = loop;
	dl->expired = expired;
	ev_timer_init(&dl->timer, timer_cb, 0., 0.);
	ev_set_priority(&dl->timer, EV_MINPRI); /* after its turn's reads */
}

void
deadlines_stop(struct deadlines *dl)
{
	ev_timer_stop(dl->loop, &dl->timer);
}

/* The entry <at> goes after: found from the end nearer in time, so that
 * the usual deadline (the latest) costs no step, and one that waited for
 * its plan while Redis is slow walks the shorter way. */
static struct deadline *
place(struct deadlines *dl, int64_t at)
{
	struct deadline *first = dl->head.next, *last = dl->head.prev, *e;

	if (last == &dl->head || last->at <= at)
		return last;
	if (at - first->at < last->at - at) {
		for (e = first; e != &dl->head && e->at <= at; e = e->next)
			;
		return e->prev;
	}
	for (e = last; e != &dl->head && e->at > at; e = e->prev)
		;
	return e;
}

void
deadlines_add(struct deadlines *dl, struct deadline *d, int64_t at)
{
	struct deadline *after = place(dl, at);

	d->at = at;
	d->prev = after;
	d->next = after->next;
	after->next->prev = d;
	after->next = d;
	if (d->prev == &dl->head && ev_is_active(&dl->timer))
		ev_timer_stop(dl->loop, &dl->timer); /* a new first: sooner */
	arm(dl, util_loop_us);
}

void
deadlines_remove(struct deadline *d)
{
	if (d->next == NULL)
		return;
	d->prev->next = d->next;
	d->next->prev = d->prev;
	d->prev = d->next = NULL;
}

int
deadlines_listed(const struct deadline *d)
{
	return d->next != NULL;
}
