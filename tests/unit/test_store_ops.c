/* SPDX-License-Identifier: Apache-2.0 */
/* store.h dispatches every call through the backend's operations table
 * (store_new_with_ops): a fake backend records what it was asked. */
#include <criterion/criterion.h>
#include <ev.h>

#include "store.h"

struct fake {
	int submits, flushes, hgets, cancels, ups, timeouts, frees;
	int accept; /* submit answers STORE_OK */
	struct store_req *last;
};

static int
f_submit(void *be, struct store_req *sr)
{
	struct fake *f = be;

	f->submits++;
	f->last = sr;
	return f->accept ? STORE_OK : STORE_EDOWN;
}

static void
f_flush(void *be)
{
	((struct fake *)be)->flushes++;
}

static int
f_hget(void *be, const char *hash, const char *field, size_t len,
       store_value_cb *cb, void *arg)
{
	((struct fake *)be)->hgets++;
	cb(arg, "v", 1, 0);
	return 0;
}

static void
f_cancel(void *be, struct store_req *sr)
{
	struct fake *f = be;

	f->cancels++;
	f->last = sr;
}

static int
f_up(const void *be)
{
	return ((const struct fake *)be)->ups;
}

static void
f_timeout(void *be)
{
	((struct fake *)be)->timeouts++;
}
static void
f_free(void *be)
{
	((struct fake *)be)->frees++;
}

static const struct store_ops fake_ops = {
	.submit = f_submit,
	.flush = f_flush,
	.hget = f_hget,
	.cancel = f_cancel,
	.up = f_up,
	.note_timeout = f_timeout,
	.free = f_free,
};

static int got_value;

static void
value_cb(void *arg, const char *val, size_t len, int err)
{
	got_value = err == 0 && len == 1 && val[0] == 'v';
}

Test(store_ops, every_call_reaches_the_backend_once)
{
	struct fake      f = { 0 };
	struct store    *st = store_new_with_ops(&fake_ops, &f);
	struct store_req sr = { .gen = 7 };

	cr_assert_eq(store_submit(st, &sr), STORE_EDOWN,
	             "the backend's answer");
	cr_assert_eq(f.submits, 1);
	cr_assert_eq(f.last, &sr);
	store_flush(st);
	cr_assert_eq(f.flushes, 1);
	cr_assert_eq(store_hget(st, "h", "k", 1, value_cb, NULL), 0);
	cr_assert(got_value);
	cr_assert_eq(store_up(st), 0);
	f.ups = 1;
	cr_assert_eq(store_up(st), 1);
	store_note_timeout(st);
	cr_assert_eq(f.timeouts, 1);
	store_cancel(st, &sr);
	cr_assert_eq(f.cancels, 1);
	cr_assert_eq(sr.gen, 8, "a cancelled request's late reply is stale");
	store_free(st);
	cr_assert_eq(f.frees, 1);
}

Test(store_ops, a_null_store_is_down_and_flushes_and_cancels_nothing)
{
	struct store_req sr = { .gen = 1 };

	cr_assert_eq(store_up(NULL), 0);
	store_flush(NULL);
	store_cancel(NULL, &sr);
	cr_assert_eq(sr.gen, 2);
	store_free(NULL);
}

/* ---- the batch wait (redis.batch_wait) ---------------------------------- */

Test(store_ops, a_batch_wait_holds_a_small_flush_until_the_oldest_has_waited)
{
	struct ev_loop  *loop = ev_loop_new(EVFLAG_AUTO);
	struct fake      f = { .accept = 1 };
	struct store    *st = store_new_with_ops(&fake_ops, &f);
	struct store_req a = { 0 }, b = { 0 };
	ev_tstamp        t0;

	store_set_batch_wait(st, loop, 20000);
	ev_now_update(loop);
	t0 = ev_now(loop);
	cr_assert_eq(store_submit(st, &a), STORE_OK);
	store_flush(st);
	cr_assert_eq(f.flushes, 0, "one request waits for company");
	cr_assert_eq(store_submit(st, &b), STORE_OK);
	store_flush(st);
	cr_assert_eq(f.flushes, 0, "two still wait");
	ev_run(loop, 0); /* the timer is the only watcher: runs it, returns */
	cr_assert_eq(f.flushes, 1, "the wait ended in one flush");
	cr_assert_geq(ev_now(loop) - t0, 0.019, "not before the wait");
	store_flush(st);
	cr_assert_eq(f.flushes, 2, "nothing queued: a flush goes through");
	store_free(st);
	ev_loop_destroy(loop);
}

Test(store_ops, a_batch_wait_ends_at_once_when_the_batch_is_full)
{
	struct ev_loop  *loop = ev_loop_new(EVFLAG_AUTO);
	struct fake      f = { .accept = 1 };
	struct store    *st = store_new_with_ops(&fake_ops, &f);
	struct store_req sr[STORE_WAIT_FULL] = { { 0 } };

	store_set_batch_wait(st, loop, 1000000);
	for (int i = 0; i < STORE_WAIT_FULL - 1; i++)
		store_submit(st, &sr[i]);
	store_flush(st);
	cr_assert_eq(f.flushes, 0);
	store_submit(st, &sr[STORE_WAIT_FULL - 1]);
	store_flush(st);
	cr_assert_eq(f.flushes, 1, "a full batch does not wait");
	cr_assert_eq(ev_run(loop, EVRUN_NOWAIT), 0, "and no timer is left");
	store_free(st);
	ev_loop_destroy(loop);
}

Test(store_ops, a_refused_request_starts_no_wait)
{
	struct ev_loop  *loop = ev_loop_new(EVFLAG_AUTO);
	struct fake      f = { .accept = 0 };
	struct store    *st = store_new_with_ops(&fake_ops, &f);
	struct store_req sr = { 0 };

	store_set_batch_wait(st, loop, 1000000);
	cr_assert_eq(store_submit(st, &sr), STORE_EDOWN);
	store_flush(st);
	cr_assert_eq(f.flushes, 1, "nothing was queued, nothing to wait for");
	store_free(st);
	ev_loop_destroy(loop);
}
