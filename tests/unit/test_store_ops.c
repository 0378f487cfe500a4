/* SPDX-License-Identifier: Apache-2.0 */
/* store.h dispatches every call through the backend's operations table
 * (store_new_with_ops): a fake backend records what it was asked. */
#include <criterion/criterion.h>

#include "store.h"

struct fake {
	int submits, flushes, hgets, cancels, ups, timeouts, frees;
	struct store_req *last;
};

static int
f_submit(void *be, struct store_req *sr)
{
	struct fake *f = be;

	f->submits++;
	f->last = sr;
	return STORE_EDOWN;
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
