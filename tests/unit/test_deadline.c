/* SPDX-License-Identifier: Apache-2.0 */
/* deadline: the worker's time-ordered list of Redis deadlines, run on a
 * real libev loop with util_now_us() replaced by a fake clock that the
 * test moves; the loop runs non-blocking so that only due timers fire. */
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <ev.h>

#include "deadline.h"
#include "util.h"

static int64_t fake_us;
static int64_t (*real_now)(void);
static struct ev_loop  *loop;
static struct deadlines dl;
static struct deadline  d[8];
static int              order[16], nfired;
static struct deadline *add_on_expiry; /* added when the first expires */

static int64_t
fake_clock(void)
{
	return fake_us;
}

static void
expired(struct deadlines *l, struct deadline *x)
{
	cr_assert(!deadlines_listed(x), "unlisted before the call");
	order[nfired++] = (int)(x - d);
	if (add_on_expiry != NULL) {
		deadlines_add(l, add_on_expiry, fake_us + 1000);
		add_on_expiry = NULL;
	}
}

static void
setup(void)
{
	real_now = util_now_us;
	util_now_us = fake_clock;
	fake_us = 1000000;
	loop = ev_loop_new(EVFLAG_AUTO);
	deadlines_init(&dl, loop, expired);
	nfired = 0;
	add_on_expiry = NULL;
	for (int i = 0; i < 8; i++)
		d[i].prev = d[i].next = NULL;
}

static void
teardown(void)
{
	deadlines_stop(&dl);
	ev_loop_destroy(loop);
	util_now_us = real_now;
}

TestSuite(deadline, .init = setup, .fini = teardown);

/* Moves the fake clock to <t> and lets the loop fire what is due: the
 * timer's own wait is real time, so wait it out (at most <ms>). */
static void
advance(int64_t t, int ms)
{
	fake_us = t;
	for (int i = 0; i < ms; i++) {
		ev_run(loop, EVRUN_NOWAIT);
		usleep(1000);
	}
	ev_run(loop, EVRUN_NOWAIT);
}

Test(deadline, fires_in_time_order_and_only_when_due)
{
	deadlines_add(&dl, &d[0], fake_us + 5000);
	deadlines_add(&dl, &d[1], fake_us + 10000);
	deadlines_add(&dl, &d[2], fake_us + 15000);
	advance(fake_us + 7000, 12);
	cr_assert_eq(nfired, 1);
	cr_assert_eq(order[0], 0);
	advance(fake_us + 10000, 20);
	cr_assert_eq(nfired, 3);
	cr_assert_eq(order[1], 1);
	cr_assert_eq(order[2], 2);
}

Test(deadline, a_removed_deadline_never_fires)
{
	deadlines_add(&dl, &d[0], fake_us + 2000);
	deadlines_add(&dl, &d[1], fake_us + 4000);
	deadlines_remove(&d[0]); /* the head */
	cr_assert(!deadlines_listed(&d[0]));
	deadlines_remove(&d[0]); /* twice: nothing */
	advance(fake_us + 5000, 10);
	cr_assert_eq(nfired, 1);
	cr_assert_eq(order[0], 1);
}

Test(deadline, an_earlier_deadline_added_last_goes_to_its_place)
{
	deadlines_add(&dl, &d[0], fake_us + 8000);
	deadlines_add(&dl, &d[1], fake_us + 9000);
	deadlines_add(&dl, &d[2], fake_us + 3000); /* a new head */
	deadlines_add(&dl, &d[3], fake_us + 8500); /* in the middle */
	advance(fake_us + 4000, 8);
	cr_assert_eq(nfired, 1, "the new head fires first, on its own time");
	cr_assert_eq(order[0], 2);
	advance(fake_us + 6000, 12);
	cr_assert_eq(nfired, 4);
	cr_assert_eq(order[1], 0);
	cr_assert_eq(order[2], 3);
	cr_assert_eq(order[3], 1);
}

Test(deadline, a_deadline_near_the_first_is_placed_from_the_front)
{
	deadlines_add(&dl, &d[0], fake_us + 1000);
	deadlines_add(&dl, &d[1], fake_us + 9000);
	deadlines_add(&dl, &d[2], fake_us + 10000);
	deadlines_add(&dl, &d[3], fake_us + 2000); /* nearer the front */
	deadlines_add(&dl, &d[4], fake_us + 1000); /* equal to the first */
	advance(fake_us + 10000, 12);
	cr_assert_eq(nfired, 5);
	cr_assert_eq(order[0], 0);
	cr_assert_eq(order[1], 4, "after the equal one added before it");
	cr_assert_eq(order[2], 3);
	cr_assert_eq(order[3], 1);
	cr_assert_eq(order[4], 2);
}

Test(deadline, equal_deadlines_fire_in_the_order_added)
{
	for (int i = 0; i < 4; i++)
		deadlines_add(&dl, &d[i], fake_us + 2000);
	advance(fake_us + 2000, 6);
	cr_assert_eq(nfired, 4);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(order[i], i);
}

Test(deadline, the_callback_may_add_a_deadline)
{
	add_on_expiry = &d[5];
	deadlines_add(&dl, &d[0], fake_us + 1000);
	advance(fake_us + 1000, 4);
	cr_assert_eq(nfired, 1);
	cr_assert(deadlines_listed(&d[5]));
	advance(fake_us + 1000, 4);
	cr_assert_eq(nfired, 2);
	cr_assert_eq(order[1], 5);
}

Test(deadline, a_list_emptied_and_filled_again_still_fires)
{
	deadlines_add(&dl, &d[0], fake_us + 1000);
	deadlines_remove(&d[0]);
	advance(fake_us + 2000, 4); /* the timer finds nothing */
	cr_assert_eq(nfired, 0);
	deadlines_add(&dl, &d[1], fake_us + 1000);
	advance(fake_us + 1000, 4);
	cr_assert_eq(nfired, 1);
	cr_assert_eq(order[0], 1);
}

/* A reply read in a turn records itself in order[] as 100. */
static void
reply_cb(struct ev_loop *l, ev_io *w, int revents)
{
	char b[8];

	cr_assert_eq(read(w->fd, b, sizeof(b)), 1);
	order[nfired++] = 100;
	ev_io_stop(l, w);
}

Test(deadline, a_reply_read_in_the_same_late_turn_comes_before_the_deadline)
{
	int   sv[2];
	ev_io io;

	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	ev_io_init(&io, reply_cb, sv[0], EV_READ);
	ev_io_start(loop, &io);
	deadlines_add(&dl, &d[0], fake_us + 5000);
	ev_run(loop, EVRUN_NOWAIT); /* the timer is set */
	cr_assert_eq(write(sv[1], "r", 1), 1); /* the reply comes in time... */
	usleep(20000);   /* ...but the worker is busy past the deadline */
	fake_us += 20000;
	ev_run(loop, EVRUN_ONCE); /* one turn finds both due */
	cr_assert_eq(nfired, 2, "%d callbacks in the turn", nfired);
	cr_assert_eq(order[0], 100, "the read runs first, so its reply decides");
	cr_assert_eq(order[1], 0);
	close(sv[0]);
	close(sv[1]);
}
