/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reserve, then settle in the local tier (local.c's reservation records,
 * lim_reserve.c's arithmetic): a reservation that passes is recorded, a
 * denied one is not; the settle refunds or charges the difference exactly
 * once; a settle after the lease, or of a reservation never made, changes
 * nothing (remaining -1); the table of records stays bounded. The Redis
 * script's results for the same vectors are compared in
 * tests/integration/test_script.c. The clock is an argument.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "lim_mk.h"
#include "limiter.h"
#include "local.h"

#define S  LIM_USEC_PER_SEC
#define T0 (1000LL * 86400 * S + 3600 * S) /* an hour into a UTC day */

/* A check of <p> on <key> with request id <id>: op CHECK reserves,
 * FORCE settles (for a reserving rule). */
static struct local_check
chk(const struct lim_params *p, const char *key, int op, int64_t cost,
    const char *id)
{
	struct local_check c;

	memset(&c, 0, sizeof(c));
	c.params = p;
	c.key = key;
	c.keylen = strlen(key);
	c.op = op;
	c.cost = cost;
	c.member = id;
	c.memberlen = strlen(id);
	return c;
}

/* One check on key "k", a request of its own. */
static struct lim_result
one(struct local *l, const struct lim_params *p, int op, int64_t cost,
    const char *id, int64_t now)
{
	struct local_check c = chk(p, "k", op, cost, id);

	local_eval_request(l, &c, 1, now);
	return c.result;
}

/* The units left on "k" now (a CHECK of 0: charges nothing). */
static int64_t
left(struct local *l, const struct lim_params *p, int64_t now)
{
	return one(l, p, LIM_OP_CHECK, 0, "", now).remaining;
}

Test(reserve, a_passed_reservation_is_recorded_a_denied_one_is_not)
{
	struct local     *l = local_new(100);
	struct lim_params p =
		mk_lease(LIM_FIXED_WINDOW, 10, 86400 * S, 0, 30 * S);

	cr_assert_eq(one(l, &p, LIM_OP_CHECK, 6, "r1", T0).allowed, 1);
	cr_assert_eq(local_reservations(l), 1);
	cr_assert_eq(one(l, &p, LIM_OP_CHECK, 6, "r2", T0).allowed, 0);
	cr_assert_eq(local_reservations(l), 1, "a denial holds nothing");
	cr_assert_eq(one(l, &p, LIM_OP_FORCE, 0, "r2", T0).remaining, -1);
	cr_assert_eq(left(l, &p, T0), 4);
	local_free(l);
}

Test(reserve, settle_refunds_the_unused_units)
{
	struct local     *l = local_new(100);
	struct lim_params g = mk_lease(LIM_GCRA, 10, 86400 * S, 10, 30 * S);
	struct lim_result r;

	one(l, &g, LIM_OP_CHECK, 8, "r1", T0);
	cr_assert_eq(left(l, &g, T0), 2);
	r = one(l, &g, LIM_OP_FORCE, 3, "r1", T0);
	cr_assert_eq(r.allowed, 1);
	cr_assert_eq(r.remaining, 8, "the units the reservation held");
	cr_assert_eq(left(l, &g, T0), 7, "5 of 8 given back");
	cr_assert_eq(local_reservations(l), 0, "the record is deleted");
	local_free(l);
}

Test(reserve, settle_charges_what_the_reservation_missed)
{
	struct local     *l = local_new(100);
	struct lim_params t =
		mk_lease(LIM_TOKEN_BUCKET, 10, 86400 * S, 10, 30 * S);

	one(l, &t, LIM_OP_CHECK, 2, "r1", T0);
	cr_assert_eq(one(l, &t, LIM_OP_FORCE, 9, "r1", T0).remaining, 2);
	cr_assert_eq(left(l, &t, T0), 1, "7 more charged, as a FORCE");
	local_free(l);
}

Test(reserve, a_second_settle_finds_nothing_and_charges_once)
{
	struct local     *l = local_new(100);
	struct lim_params p =
		mk_lease(LIM_SLIDING_WINDOW, 10, 60 * S, 0, 30 * S);

	one(l, &p, LIM_OP_CHECK, 2, "r1", T0);
	cr_assert_eq(one(l, &p, LIM_OP_FORCE, 5, "r1", T0).remaining, 2);
	cr_assert_eq(left(l, &p, T0), 5);
	cr_assert_eq(one(l, &p, LIM_OP_FORCE, 5, "r1", T0).remaining, -1);
	cr_assert_eq(left(l, &p, T0), 5, "charged once");
	cr_assert_eq(one(l, &p, LIM_OP_FORCE, 0, "r1", T0).remaining, -1);
	cr_assert_eq(left(l, &p, T0), 5, "and refunded never");
	local_free(l);
}

Test(reserve, a_settle_after_the_lease_is_unmatched)
{
	struct local     *l = local_new(100);
	struct lim_params p = mk_lease(LIM_FIXED_WINDOW, 100, 86400 * S, 0, S);

	one(l, &p, LIM_OP_CHECK, 50, "r1", T0);
	cr_assert_eq(one(l, &p, LIM_OP_FORCE, 0, "r1", T0 + S + 1).remaining,
	             -1);
	cr_assert_eq(left(l, &p, T0 + S + 1), 50, "held in full");
	local_free(l);
}

Test(reserve, a_refund_goes_to_the_window_the_reservation_went_to)
{
	struct local     *l = local_new(100);
	struct lim_params f =
		mk_lease(LIM_FIXED_WINDOW, 10, 60 * S, 0, 120 * S);
	struct lim_params w =
		mk_lease(LIM_SLIDING_WINDOW, 10, 60 * S, 0, 120 * S);
	int64_t end = (T0 / (60 * S) + 1) * 60 * S;

	/* fixed: the next window's count is not lowered */
	one(l, &f, LIM_OP_CHECK, 8, "r1", end - S);
	one(l, &f, LIM_OP_CHECK, 3, "r2", end);
	one(l, &f, LIM_OP_FORCE, 0, "r1", end);
	cr_assert_eq(left(l, &f, end), 7);
	local_free(l);
	/* sliding: the previous window's count is */
	l = local_new(100);
	one(l, &w, LIM_OP_CHECK, 8, "r1", end - S);
	cr_assert_eq(left(l, &w, end), 2);
	one(l, &w, LIM_OP_FORCE, 0, "r1", end);
	cr_assert_eq(left(l, &w, end), 10);
	local_free(l);
}

Test(reserve, a_settle_is_applied_whatever_the_request_says)
{
	struct local      *l = local_new(100);
	struct lim_params  g = mk_lease(LIM_GCRA, 10, 86400 * S, 10, 30 * S);
	struct lim_params  d = mk_lease(LIM_GCRA, 1, 86400 * S, 1, 0);
	struct local_check c[2];

	one(l, &g, LIM_OP_CHECK, 8, "r1", T0);
	/* the first denies: the request is vetoed */
	c[0] = chk(&d, "other", LIM_OP_CHECK, 2, "");
	c[1] = chk(&g, "k", LIM_OP_FORCE, 0, "r1");
	cr_assert_eq(local_eval_request(l, c, 2, T0), 0);
	cr_assert_eq(c[1].result.remaining, 8);
	cr_assert_eq(left(l, &g, T0), 10);
	local_free(l);
}

Test(reserve, a_peek_of_a_settle_changes_nothing)
{
	struct local      *l = local_new(100);
	struct lim_params  g = mk_lease(LIM_GCRA, 10, 86400 * S, 10, 30 * S);
	struct local_check c;

	one(l, &g, LIM_OP_CHECK, 8, "r1", T0);
	c = chk(&g, "k", LIM_OP_FORCE, 0, "r1");
	local_peek_request(l, &c, 1, T0);
	cr_assert_eq(c.result.remaining, 8);
	cr_assert_eq(left(l, &g, T0), 2);
	cr_assert_eq(one(l, &g, LIM_OP_FORCE, 0, "r1", T0).remaining, 8);
	cr_assert_eq(left(l, &g, T0), 10);
	local_free(l);
}

Test(reserve, the_records_stay_bounded, .timeout = 60)
{
	struct local     *l = local_new(100);
	struct lim_params p =
		mk_lease(LIM_FIXED_WINDOW, 1000000000, 86400 * S, 0, 30 * S);
	int64_t n = LOCAL_RES_SLOTS + LOCAL_RES_SLOTS / 4, matched = 0;
	char    id[32];

	for (int64_t i = 0; i < n; i++) {
		snprintf(id, sizeof(id), "r%lld", (long long)i);
		cr_assert_eq(one(l, &p, LIM_OP_CHECK, 1, id, T0).allowed, 1);
	}
	cr_assert_leq(local_reservations(l), LOCAL_RES_SLOTS);
	for (int64_t i = 0; i < n; i++) {
		snprintf(id, sizeof(id), "r%lld", (long long)i);
		matched += one(l, &p, LIM_OP_FORCE, 0, id, T0).remaining == 1;
	}
	cr_assert_leq(matched, LOCAL_RES_SLOTS);
	cr_assert_geq(matched, LOCAL_RES_SLOTS * 9 / 10);
	/* the given-up reservations stay charged in full */
	cr_assert_eq(left(l, &p, T0), 1000000000 - (n - matched));
	cr_assert_eq(local_reservations(l), 0);
	local_free(l);
}

/* A settle gives back what its reservation took, in the state's own unit,
 * not the units re-priced at the limit in force at the settle. An
 * override (or a reload) that cuts a gcra rule from 1000/d to 100/d
 * between a reservation of 10 (10 x 86.4 s of TAT) and its settle at 0
 * must give back those 864 s (one unit at the new rate), not 10 x 864 s:
 * that wiped the unit another request was charged since. */
Test(reserve, a_refund_after_a_rate_cut_gives_back_only_what_was_held)
{
	struct local     *l = local_new(100);
	struct lim_params g1 =
		mk_lease(LIM_GCRA, 1000, 86400 * S, 1000, 600 * S);
	struct lim_params g2 = mk_lease(LIM_GCRA, 100, 86400 * S, 100, 600 * S);

	cr_assert_eq(one(l, &g1, LIM_OP_CHECK, 10, "r1", T0).allowed, 1);
	/* the limit is cut: the 864 s held are one unit of 100/d */
	cr_assert_eq(left(l, &g2, T0), 99);
	cr_assert_eq(one(l, &g2, LIM_OP_CHECK, 1, "", T0).allowed, 1);
	cr_assert_eq(left(l, &g2, T0), 98);
	cr_assert_eq(one(l, &g2, LIM_OP_FORCE, 0, "r1", T0).remaining, 10);
	cr_assert_eq(left(l, &g2, T0), 99,
	             "the other request's unit stays charged");
	local_free(l);
}

/* A reload that changes a reserving rule's algorithm (same name, same
 * key) leaves the reservations made under the old one: their units went
 * to state the new algorithm dropped, so a settle has nothing to give
 * back. It gave back 10 gcra units it never took. */
Test(reserve, a_refund_after_an_algorithm_change_gives_back_nothing)
{
	struct local     *l = local_new(100);
	struct lim_params f =
		mk_lease(LIM_FIXED_WINDOW, 10, 86400 * S, 0, 600 * S);
	struct lim_params g = mk_lease(LIM_GCRA, 10, 86400 * S, 10, 600 * S);

	cr_assert_eq(one(l, &f, LIM_OP_CHECK, 10, "r1", T0).allowed, 1);
	cr_assert_eq(one(l, &g, LIM_OP_CHECK, 5, "", T0).allowed, 1);
	cr_assert_eq(left(l, &g, T0), 5);
	one(l, &g, LIM_OP_FORCE, 0, "r1", T0);
	cr_assert_eq(left(l, &g, T0), 5, "the 5 gcra units stay charged");
	local_free(l);
}
