/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The C twins of the limiter (lim_*.c) on numbers alone: the GCRA vectors
 * of ALGORITHMS.md row by row, burst and window edges for every algorithm,
 * cost 0 (peek) and impossible costs, microsecond rounding, the UTC
 * calendar, the two-phase rule, and the parsers. The clock is an argument,
 * so nothing here sleeps or times anything.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "lim_mk.h"
#include "limiter.h"

#define S  LIM_USEC_PER_SEC
#define T0 (1700000000LL * S) /* 2023-11-14, a realistic epoch offset */

/* Evaluates and commits one single-check request; returns the result. */
static struct lim_result
run(const struct lim_params *p, struct lim_state *s, int op, int64_t cost,
    int64_t now)
{
	struct lim_result r;

	if (lim_eval(p, s, op, cost, 0, now, &r))
		lim_commit(p, s, op, cost, 0, now);
	return r;
}

static struct lim_result
run_m(const struct lim_params *p, struct lim_state *s, int op, int64_t cost,
      const char *member, int64_t now)
{
	struct lim_result r;
	uint64_t          h = lim_member_hash(member, strlen(member));

	if (lim_eval(p, s, op, cost, h, now, &r))
		lim_commit(p, s, op, cost, h, now);
	return r;
}

#define expect(r, a, rem, retry, full)                                         \
	do {                                                                   \
		cr_expect_eq((r).allowed, (a), "allowed %d", (r).allowed);     \
		cr_expect_eq((r).remaining, (rem), "remaining %lld",           \
		             (long long)(r).remaining);                        \
		cr_expect_eq((r).retry_after_us, (retry), "retry %lld",        \
		             (long long)(r).retry_after_us);                   \
		cr_expect_eq((r).full_us, (full), "full %lld",                 \
		             (long long)(r).full_us);                          \
	} while (0)

/* ---- GCRA --------------------------------------------------------------- */

Test(gcra, algorithms_md_table_row_by_row)
{
	struct lim_params p = mk(LIM_GCRA, 1, S, 5);
	struct lim_state  s;
	struct lim_result r;
	int               i;

	lim_state_init(&s);
	r = run(&p, &s, LIM_OP_CHECK, 6, T0);
	expect(r, -1, 5, 0, 0);
	for (i = 0; i < 5; i++) {
		r = run(&p, &s, LIM_OP_CHECK, 1, T0);
		expect(r, 1, 4 - i, 0, (i + 1) * S);
	}
	r = run(&p, &s, LIM_OP_CHECK, 1, T0);
	expect(r, 0, 0, 1 * S, 5 * S);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + 3 * S);
	expect(r, 1, 2, 0, 3 * S);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + 3 * S + S / 10);
	expect(r, 1, 1, 0, 3 * S + 9 * S / 10);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + 4 * S);
	expect(r, 1, 1, 0, 4 * S);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + 8 * S);
	expect(r, 1, 4, 0, 1 * S);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + 9 * S + S / 2);
	expect(r, 1, 4, 0, 1 * S);
	r = run(&p, &s, LIM_OP_CHECK, 0, T0 + 9 * S + S / 2);
	expect(r, 1, 4, 0, 1 * S);
	r = run(&p, &s, LIM_OP_CHECK, 2, T0 + 9 * S + S / 2);
	expect(r, 1, 2, 0, 3 * S);
	r = run(&p, &s, LIM_OP_CHECK, 5, T0 + 9 * S + S / 2);
	expect(r, 0, 2, 3 * S, 3 * S);
	lim_state_deinit(&s);
}

Test(gcra, next_is_time_until_one_more_unit)
{
	struct lim_params p = mk(LIM_GCRA, 1, S, 5);
	struct lim_state  s;
	struct lim_result r;

	lim_state_init(&s);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0);
	cr_expect_eq(r.next_us, S);
	run(&p, &s, LIM_OP_CHECK, 1, T0);
	r = run(&p, &s, LIM_OP_CHECK, 0, T0 + S / 10);
	cr_expect_eq(r.full_us, 19 * S / 10);
	cr_expect_eq(r.next_us, 9 * S / 10);
	r = run(&p, &s, LIM_OP_CHECK, 0, T0 + 10 * S);
	cr_expect_eq(r.next_us, 0);
	cr_expect_eq(r.full_us, 0);
	cr_expect_eq(r.remaining, 5);
	lim_state_deinit(&s);
}

Test(gcra, denial_leaves_state_unchanged)
{
	struct lim_params p = mk(LIM_GCRA, 10, S, 2);
	struct lim_state  s;
	struct lim_result r;
	int64_t           tat;

	lim_state_init(&s);
	run(&p, &s, LIM_OP_CHECK, 2, T0);
	tat = s.v[0];
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + 1);
	cr_expect_eq(r.allowed, 0);
	cr_expect_eq(r.retry_after_us, S / 10 - 1);
	cr_expect_eq(s.v[0], tat);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + S / 10);
	cr_expect_eq(r.allowed, 1);
	lim_state_deinit(&s);
}

Test(gcra, burst_edge_exactly_at_tolerance)
{
	struct lim_params p = mk(LIM_GCRA, 1, S, 3);
	struct lim_state  s;
	struct lim_result r;

	lim_state_init(&s);
	r = run(&p, &s, LIM_OP_CHECK, 3, T0);
	expect(r, 1, 0, 0, 3 * S);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + S - 1);
	expect(r, 0, 0, 1, 2 * S + 1);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + S);
	expect(r, 1, 0, 0, 3 * S);
	lim_state_deinit(&s);
}

Test(gcra, impossible_cost_is_minus_one_and_charges_nothing)
{
	struct lim_params p = mk(LIM_GCRA, 100, S, 10);
	struct lim_state  s;
	struct lim_result r;

	lim_state_init(&s);
	r = run(&p, &s, LIM_OP_CHECK, 11, T0);
	expect(r, -1, 10, 0, 0);
	cr_expect_eq(s.v[0], 0);
	r = run(&p, &s, LIM_OP_CHECK, 10, T0);
	expect(r, 1, 0, 0, 10 * p.ei_us);
	r = run(&p, &s, LIM_OP_CHECK, LIM_COST_MAX + 1, T0);
	cr_expect_eq(r.allowed, -1);
	lim_state_deinit(&s);
}

Test(gcra, peek_does_not_change_state)
{
	struct lim_params p = mk(LIM_GCRA, 1, S, 5);
	struct lim_state  s;
	struct lim_result r;

	lim_state_init(&s);
	run(&p, &s, LIM_OP_CHECK, 2, T0);
	r = run(&p, &s, LIM_OP_CHECK, 0, T0);
	expect(r, 1, 3, 0, 2 * S);
	cr_expect_eq(s.v[0], T0 + 2 * S);
	cr_expect_eq(lim_eval(&p, &s, LIM_OP_CHECK, 0, 0, T0, &r), 0);
	lim_state_deinit(&s);
}

/* Microsecond rounding, shared by the GCRA family (gcra, leaky-bucket
 * meter, token-bucket: ALGORITHMS.md gives all three the same decisions).
 * 3/s burst 3: EI = floor(10^6 / 3) = 333333, DVT = 3 * EI = 999999, not
 * 10^6. After 3 units at T0 the TAT is T0 + 999999: one more needs TAT +
 * EI - DVT = T0 + 333333, so at T0 + 333332 retry = 1, full = 999999 -
 * 333332 = 666667, next = 666667 - floor(666666 / 333333) * 333333 = 1.
 * At T0 + 333333 the TAT becomes T0 + 1333332 (full 999999), and the
 * bucket is full again 999999 µs later. */
static void
rounding_3_per_second(enum lim_algo a)
{
	struct lim_params p = mk(a, 3, S, 3);
	struct lim_state  s;
	struct lim_result r;

	cr_assert_eq(p.ei_us, 333333);
	cr_assert_eq(p.dvt_us, 999999);
	lim_state_init(&s);
	r = run(&p, &s, LIM_OP_CHECK, 3, T0);
	expect(r, 1, 0, 0, 999999);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + 333332);
	expect(r, 0, 0, 1, 666667);
	cr_expect_eq(r.next_us, 1);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + 333333);
	expect(r, 1, 0, 0, 999999);
	r = run(&p, &s, LIM_OP_CHECK, 0, T0 + 333333 + 999999);
	expect(r, 1, 3, 0, 0);
	cr_expect_eq(lim_quota(&p), 3);
	cr_expect_eq(lim_window_s(&p), 1);
	lim_state_deinit(&s);
}

/* 7/min, burst 1 (the default): EI = floor(60 * 10^6 / 7) = 8571428, not
 * 8571428.57: the unit is back 8571428 µs after it was taken, and w =
 * ceil(8571428 / 10^6) = 9 s. */
static void
rounding_7_per_minute(enum lim_algo a)
{
	struct lim_params p = mk(a, 7, 60 * S, 0);
	struct lim_state  s;
	struct lim_result r;

	cr_assert_eq(p.ei_us, 8571428);
	cr_assert_eq(p.burst, 1);
	lim_state_init(&s);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0);
	expect(r, 1, 0, 0, 8571428);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + 8571427);
	expect(r, 0, 0, 1, 1);
	cr_expect_eq(r.next_us, 1);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + 8571428);
	expect(r, 1, 0, 0, 8571428);
	cr_expect_eq(lim_window_s(&p), 9);
	lim_state_deinit(&s);
}

/* The RateLimit-Policy q and w: for the GCRA family the burst per its
 * tolerance, unless the tolerance is a fraction of a second: w is then
 * rounded up to whole seconds and q is what the rate gives in w, so the
 * header never states a rate 100 times too low (100/s, burst 1 read
 * q=1;w=1 before). */
Test(gcra, header_quota_keeps_the_rate_of_a_subsecond_tolerance)
{
	struct lim_params p = mk(LIM_GCRA, 100, S, 0);

	cr_expect_eq(lim_header_quota(&p), 100);
	cr_expect_eq(lim_window_s(&p), 1);
	cr_expect_eq(lim_quota(&p), 1, "the limit stays the burst");
	p = mk(LIM_LEAKY_BUCKET, 100, S, 0);
	cr_expect_eq(lim_header_quota(&p), 100);
	p = mk(LIM_TOKEN_BUCKET, 1000, S, 10); /* tolerance 10 ms */
	cr_expect_eq(lim_header_quota(&p), 1000);
	cr_expect_eq(lim_window_s(&p), 1);
	p = mk(LIM_GCRA, 3, S, 3); /* 999,999 µs */
	cr_expect_eq(lim_header_quota(&p), 3);
	p = mk(LIM_GCRA, 7, 60 * S, 0); /* 8,571,428 µs */
	cr_expect_eq(lim_header_quota(&p), 1);
	cr_expect_eq(lim_window_s(&p), 9);
}

/* EI is whole microseconds: 1000000/s is the fastest rate it can state,
 * and a faster one is refused rather than capped there. */
Test(gcra, a_rate_above_one_per_microsecond_is_refused)
{
	struct lim_params p;
	const char       *err = NULL;

	for (int a = LIM_GCRA; a <= LIM_LEAKY_BUCKET; a++) {
		memset(&p, 0, sizeof(p));
		p.algo = (enum lim_algo)a;
		p.rate = 2000000;
		p.period_us = S;
		cr_expect_eq(lim_params_init(&p, &err), -1, "algo %d", a);
		cr_expect(err != NULL && strstr(err, "1000000/s") != NULL);
	}
	p = mk(LIM_GCRA, 1000000, S, 0);
	cr_expect_eq(p.ei_us, 1);
	p = mk(LIM_TOKEN_BUCKET, 1000000000LL, 1000 * S, 5);
	cr_expect_eq(p.ei_us, 1);
}

Test(gcra, header_quota_is_the_burst_over_whole_seconds)
{
	struct lim_params p = mk(LIM_GCRA, 600, 60 * S, 100); /* 10 s */

	cr_expect_eq(lim_header_quota(&p), 100);
	cr_expect_eq(lim_window_s(&p), 10);
	p = mk(LIM_FIXED_WINDOW, 50, 60 * S, 0);
	cr_expect_eq(lim_header_quota(&p), 50);
	cr_expect_eq(lim_window_s(&p), 60);
}

Test(gcra, microsecond_rounding_3_per_second)
{
	rounding_3_per_second(LIM_GCRA);
}

Test(gcra, microsecond_rounding_7_per_minute)
{
	rounding_7_per_minute(LIM_GCRA);
}

Test(gcra, force_charges_over_the_limit_but_bounded)
{
	struct lim_params p = mk(LIM_GCRA, 1, S, 5);
	struct lim_state  s;
	struct lim_result r;
	int               i;

	lim_state_init(&s);
	for (i = 0; i < 100; i++)
		run(&p, &s, LIM_OP_FORCE, 1, T0);
	cr_expect_eq(s.v[0], T0 + 10 * S); /* now + 2 * DVT */
	r = run(&p, &s, LIM_OP_CHECK, 1, T0);
	expect(r, 0, 0, 6 * S, 10 * S);
	r = run(&p, &s, LIM_OP_FORCE, 1000000000, T0);
	cr_expect_eq(r.allowed, -1);
	cr_expect_eq(s.v[0], T0 + 10 * S);
	lim_state_deinit(&s);
}

Test(gcra, denied_until_t_for_every_cost_one_request)
{
	struct lim_params p = mk(LIM_GCRA, 2, S, 4);
	struct lim_state  s;
	struct lim_result r;
	int64_t           until, t;

	lim_state_init(&s);
	run(&p, &s, LIM_OP_CHECK, 4, T0);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0);
	until = T0 + r.retry_after_us;
	for (t = T0; t < until; t += 7919) {
		r = run(&p, &s, LIM_OP_CHECK, 1, t);
		cr_assert_eq(r.allowed, 0);
		cr_assert_eq(t + r.retry_after_us, until);
	}
	r = run(&p, &s, LIM_OP_CHECK, 1, until);
	cr_expect_eq(r.allowed, 1);
	lim_state_deinit(&s);
}

/* ---- leaky bucket ------------------------------------------------------- */

Test(leaky, meter_matches_gcra)
{
	struct lim_params g = mk(LIM_GCRA, 5, S, 3);
	struct lim_params l = mk(LIM_LEAKY_BUCKET, 5, S, 3);
	struct lim_state  sg, sl;
	struct lim_result rg, rl;
	int64_t           t;

	lim_state_init(&sg);
	lim_state_init(&sl);
	for (t = T0; t < T0 + 3 * S; t += 37337) {
		rg = run(&g, &sg, LIM_OP_CHECK, 1, t);
		rl = run(&l, &sl, LIM_OP_CHECK, 1, t);
		cr_assert(rg.allowed == rl.allowed &&
		          rg.remaining == rl.remaining &&
		          rg.retry_after_us == rl.retry_after_us &&
		          rg.next_us == rl.next_us && rg.full_us == rl.full_us);
	}
}

Test(leaky, delay_mode_spaces_requests_and_denies_past_max_delay)
{
	struct lim_params p;
	const char       *err;
	struct lim_state  s;
	struct lim_result r;
	int               i;

	memset(&p, 0, sizeof(p));
	p.algo = LIM_LEAKY_BUCKET;
	p.rate = 10;
	p.period_us = S;
	p.burst = 2;
	p.max_delay_us = 300000;
	cr_assert_eq(lim_params_init(&p, &err), 0);
	lim_state_init(&s);
	for (i = 0; i < 2; i++) { /* the burst passes at once */
		r = run(&p, &s, LIM_OP_CHECK, 1, T0);
		cr_expect_eq(r.allowed, 1);
		cr_expect_eq(lim_delay_us(&p, &r), 0);
	}
	for (i = 1; i <= 3; i++) { /* then one slot every 100ms */
		r = run(&p, &s, LIM_OP_CHECK, 1, T0);
		cr_expect_eq(r.allowed, 1);
		cr_expect_eq(lim_delay_us(&p, &r), i * 100000);
		cr_expect_eq(r.remaining, 0);
	}
	r = run(&p, &s, LIM_OP_CHECK, 1, T0); /* 400ms > max_delay */
	cr_expect_eq(r.allowed, 0);
	cr_expect_eq(r.retry_after_us, 100000);
	cr_expect_eq(lim_delay_us(&p, &r), 0);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + 100000);
	cr_expect_eq(r.allowed, 1);
	cr_expect_eq(lim_delay_us(&p, &r), 300000);
	lim_state_deinit(&s);
}

Test(leaky, delay_is_zero_in_meter_mode)
{
	struct lim_params p = mk(LIM_LEAKY_BUCKET, 1, S, 1);
	struct lim_state  s;
	struct lim_result r;

	lim_state_init(&s);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0);
	cr_expect_eq(lim_delay_us(&p, &r), 0);
	lim_state_deinit(&s);
}

Test(leaky, meter_microsecond_rounding_3_per_second)
{
	rounding_3_per_second(LIM_LEAKY_BUCKET);
}

Test(leaky, meter_microsecond_rounding_7_per_minute)
{
	rounding_7_per_minute(LIM_LEAKY_BUCKET);
}

/* 1/s burst 5: cost 3 moves the TAT 3 s; a second 3 would need TAT + 3 s
 * - DVT = 1 s of waiting, and is refused without moving it; 2 still fit. */
Test(leaky, meter_cost_above_one_takes_that_many_slots)
{
	struct lim_params p = mk(LIM_LEAKY_BUCKET, 1, S, 5);
	struct lim_state  s;
	struct lim_result r;

	lim_state_init(&s);
	r = run(&p, &s, LIM_OP_CHECK, 3, T0);
	expect(r, 1, 2, 0, 3 * S);
	r = run(&p, &s, LIM_OP_CHECK, 3, T0);
	expect(r, 0, 2, 1 * S, 3 * S); /* T0+6s - 5s - T0 */
	cr_expect_eq(s.v[0], T0 + 3 * S);
	r = run(&p, &s, LIM_OP_CHECK, 2, T0);
	expect(r, 1, 0, 0, 5 * S);
	lim_state_deinit(&s);
}

/* Cost 0 reports without charging: at T0 + 0.5 s with TAT T0 + 2 s,
 * full = 1.5 s, remaining = floor((5 s - 1.5 s) / 1 s) = 3, next = 1.5 s -
 * floor((1.5 s - 1) / 1 s) * 1 s = 0.5 s. A full bucket peeks allowed. */
Test(leaky, meter_cost_zero_peeks_without_charging)
{
	struct lim_params p = mk(LIM_LEAKY_BUCKET, 1, S, 5);
	struct lim_state  s;
	struct lim_result r;

	lim_state_init(&s);
	run(&p, &s, LIM_OP_CHECK, 2, T0);
	r = run(&p, &s, LIM_OP_CHECK, 0, T0 + S / 2);
	expect(r, 1, 3, 0, 3 * S / 2);
	cr_expect_eq(r.next_us, S / 2);
	cr_expect_eq(s.v[0], T0 + 2 * S);
	run(&p, &s, LIM_OP_CHECK, 3, T0 + S / 2);
	r = run(&p, &s, LIM_OP_CHECK, 0, T0 + S / 2);
	expect(r, 1, 0, 0, 9 * S / 2);
	cr_expect_eq(s.v[0], T0 + 5 * S);
	lim_state_deinit(&s);
}

/* cost 6 > DVT / EI = 5 can never fit: -1, no retry, nothing charged. */
Test(leaky, meter_impossible_cost_is_minus_one_and_charges_nothing)
{
	struct lim_params p = mk(LIM_LEAKY_BUCKET, 1, S, 5);
	struct lim_state  s;
	struct lim_result r;

	lim_state_init(&s);
	r = run(&p, &s, LIM_OP_CHECK, 6, T0);
	expect(r, -1, 5, 0, 0);
	cr_expect_eq(s.v[0], 0);
	run(&p, &s, LIM_OP_CHECK, 2, T0);
	r = run(&p, &s, LIM_OP_CHECK, 6, T0);
	expect(r, -1, 3, 0, 2 * S);
	r = run(&p, &s, LIM_OP_CHECK, LIM_COST_MAX + 1, T0);
	expect(r, -1, 3, 0, 2 * S);
	cr_expect_eq(s.v[0], T0 + 2 * S);
	lim_state_deinit(&s);
}

/* ---- token bucket ------------------------------------------------------- */

Test(token_bucket, matches_gcra_decisions_on_a_sequence)
{
	struct lim_params g = mk(LIM_GCRA, 10, S, 5);
	struct lim_params tb = mk(LIM_TOKEN_BUCKET, 10, S, 5);
	struct lim_state  sg, st;
	struct lim_result rg, rt;
	int64_t           t = T0, cost;
	unsigned          x = 12345;
	int               i, allowed = 0;

	lim_state_init(&sg);
	lim_state_init(&st);
	for (i = 0; i < 2000; i++) {
		x = x * 1103515245 + 12345;
		t += (x >> 8) % 150000;
		cost = (x >> 4) % 4;
		rg = run(&g, &sg, LIM_OP_CHECK, cost, t);
		rt = run(&tb, &st, LIM_OP_CHECK, cost, t);
		cr_assert_eq(rt.allowed, rg.allowed, "step %d", i);
		cr_assert_eq(rt.remaining, rg.remaining, "step %d", i);
		cr_assert_eq(rt.retry_after_us, rg.retry_after_us, "step %d",
		             i);
		cr_assert_eq(rt.full_us, rg.full_us, "step %d", i);
		cr_assert_eq(rt.next_us, rg.next_us, "step %d", i);
		allowed += rg.allowed == 1;
	}
	cr_expect(allowed > 100 && allowed < 1900);
}

Test(token_bucket, refill_capped_after_a_long_idle)
{
	struct lim_params p = mk(LIM_TOKEN_BUCKET, 1000000, 86400 * S, 1000000);
	struct lim_state  s;
	struct lim_result r;

	lim_state_init(&s);
	r = run(&p, &s, LIM_OP_CHECK, 1000000, T0);
	expect(r, 1, 0, 0, 86400 * S);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + 100000LL * 365 * 86400 * S);
	cr_expect_eq(r.allowed, 1);
	cr_expect_eq(r.remaining, 999999);
	r = run(&p, &s, LIM_OP_CHECK, 1000001, T0);
	cr_expect_eq(r.allowed, -1);
	lim_state_deinit(&s);
}

/* The token bucket refills one unit per EI, as GCRA's TAT moves: at 7/min
 * every 8571428 µs, not every 60 s / 7 = 8571428.57 µs (the 8571429 a
 * refill at N / P gave, 1 µs later than GCRA). */
Test(token_bucket, microsecond_rounding_3_per_second)
{
	rounding_3_per_second(LIM_TOKEN_BUCKET);
}

Test(token_bucket, microsecond_rounding_7_per_minute)
{
	rounding_7_per_minute(LIM_TOKEN_BUCKET);
}

/* Random sequences of cost 0..burst+1, CHECK and FORCE, every field equal
 * to GCRA's, at rates that do not divide the period. */
static void
tb_equals_gcra(int64_t rate, int64_t period, int64_t burst, unsigned seed)
{
	struct lim_params g = mk(LIM_GCRA, rate, period, burst);
	struct lim_params tb = mk(LIM_TOKEN_BUCKET, rate, period, burst);
	struct lim_state  sg, st;
	struct lim_result rg, rt;
	int64_t           t = T0, cost;
	unsigned          x = seed;
	int               i, op, allowed = 0, denied = 0;

	lim_state_init(&sg);
	lim_state_init(&st);
	for (i = 0; i < 5000; i++) {
		x = x * 1103515245 + 12345;
		t += (int64_t)((x >> 8) % 1000) * g.ei_us / 700 + (x >> 20) % 3;
		cost = (x >> 4) % (burst + 2);
		op = (x >> 12) % 16 == 0 ? LIM_OP_FORCE : LIM_OP_CHECK;
		rg = run(&g, &sg, op, cost, t);
		rt = run(&tb, &st, op, cost, t);
		cr_assert_eq(rt.allowed, rg.allowed, "step %d", i);
		cr_assert_eq(rt.remaining, rg.remaining, "step %d", i);
		cr_assert_eq(rt.retry_after_us, rg.retry_after_us, "step %d",
		             i);
		cr_assert_eq(rt.full_us, rg.full_us, "step %d", i);
		cr_assert_eq(rt.next_us, rg.next_us, "step %d", i);
		allowed += rg.allowed == 1;
		denied += rg.allowed == 0;
	}
	cr_expect(allowed > 500 && denied > 500, "%d allowed, %d denied",
	          allowed, denied);
	lim_state_deinit(&sg);
	lim_state_deinit(&st);
}

Test(token_bucket, equals_gcra_at_3_per_second)
{
	tb_equals_gcra(3, S, 3, 7);
	tb_equals_gcra(3, S, 1, 8);
}

Test(token_bucket, equals_gcra_at_7_per_minute)
{
	tb_equals_gcra(7, 60 * S, 1, 9);
	tb_equals_gcra(7, 60 * S, 4, 10);
}

Test(token_bucket, peek_and_force)
{
	struct lim_params p = mk(LIM_TOKEN_BUCKET, 1, S, 2);
	struct lim_state  s;
	struct lim_result r;

	lim_state_init(&s);
	r = run(&p, &s, LIM_OP_CHECK, 0, T0);
	expect(r, 1, 2, 0, 0);
	cr_expect_eq(s.v[2], 0);
	run(&p, &s, LIM_OP_FORCE, 5, T0);
	cr_expect_eq(s.v[0], -2 * LIM_MICRO); /* clamped at -burst */
	r = run(&p, &s, LIM_OP_CHECK, 1, T0);
	expect(r, 0, 0, 3 * S, 4 * S);
	lim_state_deinit(&s);
}

/* ---- fixed window ------------------------------------------------------- */

Test(fixed_window, count_then_deny_then_next_window)
{
	struct lim_params p = mk(LIM_FIXED_WINDOW, 3, 60 * S, 0);
	struct lim_state  s;
	struct lim_result r;
	int64_t           start = T0 / (60 * S) * 60 * S, t = start + 10 * S;

	lim_state_init(&s);
	r = run(&p, &s, LIM_OP_CHECK, 2, t);
	expect(r, 1, 1, 0, 50 * S);
	cr_expect_eq(r.next_us, 50 * S);
	r = run(&p, &s, LIM_OP_CHECK, 2, t);
	expect(r, 0, 1, 50 * S, 50 * S);
	r = run(&p, &s, LIM_OP_CHECK, 1, t);
	expect(r, 1, 0, 0, 50 * S);
	r = run(&p, &s, LIM_OP_CHECK, 1, start + 60 * S - 1);
	expect(r, 0, 0, 1, 1);
	r = run(&p, &s, LIM_OP_CHECK, 1, start + 60 * S);
	expect(r, 1, 2, 0, 60 * S);
	r = run(&p, &s, LIM_OP_CHECK, 4, start + 60 * S);
	cr_expect_eq(r.allowed, -1);
	r = run(&p, &s, LIM_OP_CHECK, 0, start + 60 * S);
	expect(r, 1, 2, 0, 60 * S);
	lim_state_deinit(&s);
}

Test(fixed_window, force_counts_past_the_limit)
{
	struct lim_params p = mk(LIM_FIXED_WINDOW, 2, 3600 * S, 0);
	struct lim_state  s;
	struct lim_result r;

	lim_state_init(&s);
	run(&p, &s, LIM_OP_FORCE, 1, T0);
	run(&p, &s, LIM_OP_FORCE, 1, T0);
	r = run(&p, &s, LIM_OP_FORCE, 1, T0);
	cr_expect_eq(r.allowed, 0);
	cr_expect_eq(s.v[1], 3);
	r = run(&p, &s, LIM_OP_CHECK, 0, T0);
	cr_expect_eq(r.allowed, 0);
	cr_expect_eq(r.remaining, 0);
	lim_state_deinit(&s);
}

static int64_t
utc(int64_t y, int m, int d)
{
	return lim_days_from_civil(y, m, d) * LIM_DAY_US;
}

Test(fixed_window, civil_days_round_trip)
{
	int64_t z, y;
	int     m, d;

	cr_expect_eq(lim_days_from_civil(1970, 1, 1), 0);
	cr_expect_eq(lim_days_from_civil(2000, 3, 1), 11017);
	cr_expect_eq(utc(2023, 11, 14) / S, 1699920000);
	for (z = -1000; z < 200000; z += 13) {
		lim_civil_from_days(z, &y, &m, &d);
		cr_assert_eq(lim_days_from_civil(y, m, d), z);
	}
	lim_civil_from_days(lim_days_from_civil(2024, 2, 29), &y, &m, &d);
	cr_expect(y == 2024 && m == 2 && d == 29);
}

Test(fixed_window, calendar_month_boundaries)
{
	struct lim_params p;
	const char       *err;
	struct lim_state  s;
	struct lim_result r;

	memset(&p, 0, sizeof(p));
	p.algo = LIM_FIXED_WINDOW;
	p.rate = 2;
	p.calendar = LIM_CAL_MONTH;
	cr_assert_eq(lim_params_init(&p, &err), 0);
	cr_expect_eq(lim_window_s(&p), 2592000);
	lim_state_init(&s);
	/* Jan 31 23:59:59.999999 -> Feb 1 */
	r = run(&p, &s, LIM_OP_CHECK, 2, utc(2023, 2, 1) - 1);
	expect(r, 1, 0, 0, 1);
	r = run(&p, &s, LIM_OP_CHECK, 1, utc(2023, 2, 1) - 1);
	expect(r, 0, 0, 1, 1);
	r = run(&p, &s, LIM_OP_CHECK, 1, utc(2023, 2, 1));
	expect(r, 1, 1, 0, 28 * LIM_DAY_US);
	/* leap year: February has 29 days */
	r = run(&p, &s, LIM_OP_CHECK, 1, utc(2024, 2, 29) + 12 * 3600 * S);
	expect(r, 1, 1, 0, 12 * 3600 * S);
	r = run(&p, &s, LIM_OP_CHECK, 1, utc(2024, 2, 1));
	cr_expect_eq(r.full_us, 29 * LIM_DAY_US);
	/* December -> January */
	r = run(&p, &s, LIM_OP_CHECK, 2, utc(2023, 12, 31) + 1);
	expect(r, 1, 0, 0, LIM_DAY_US - 1);
	r = run(&p, &s, LIM_OP_CHECK, 1, utc(2024, 1, 1));
	expect(r, 1, 1, 0, 31 * LIM_DAY_US);
	lim_state_deinit(&s);
}

Test(fixed_window, calendar_day_is_the_utc_day)
{
	struct lim_params p;
	const char       *err;
	struct lim_state  s;
	struct lim_result r;

	memset(&p, 0, sizeof(p));
	p.algo = LIM_FIXED_WINDOW;
	p.rate = 1;
	p.calendar = LIM_CAL_DAY;
	cr_assert_eq(lim_params_init(&p, &err), 0);
	lim_state_init(&s);
	r = run(&p, &s, LIM_OP_CHECK, 1, utc(2024, 2, 29) - 10);
	expect(r, 1, 0, 0, 10);
	r = run(&p, &s, LIM_OP_CHECK, 1, utc(2024, 2, 29) - 1);
	expect(r, 0, 0, 1, 1);
	r = run(&p, &s, LIM_OP_CHECK, 1, utc(2024, 2, 29));
	expect(r, 1, 0, 0, LIM_DAY_US);
	lim_state_deinit(&s);
}

/* Windows take no per-unit interval, so nothing rounds: retry is the exact
 * end of the window. 3/s: limit 3 in a 1 s window from <st>; 3 units at st
 * + 333333 leave full = 10^6 - 333333 = 666667; at st + 999999 the 4th
 * waits 1 µs; at st + 10^6 a new window holds 3 - 1 = 2. */
Test(fixed_window, window_end_exact_to_the_microsecond_3_per_second)
{
	struct lim_params p = mk(LIM_FIXED_WINDOW, 3, S, 0);
	struct lim_state  s;
	struct lim_result r;
	int64_t           st = T0 / S * S;

	lim_state_init(&s);
	r = run(&p, &s, LIM_OP_CHECK, 3, st + 333333);
	expect(r, 1, 0, 0, 666667);
	r = run(&p, &s, LIM_OP_CHECK, 1, st + 999999);
	expect(r, 0, 0, 1, 1);
	r = run(&p, &s, LIM_OP_CHECK, 1, st + S);
	expect(r, 1, 2, 0, S);
	lim_state_deinit(&s);
}

/* 7/min: 7 units at st + 8571428 (one EI of 7/min in) leave full = 60 s -
 * 8571428 = 51428572; denied until the window's last µs, then 7 - 1 = 6. */
Test(fixed_window, window_end_exact_to_the_microsecond_7_per_minute)
{
	struct lim_params p = mk(LIM_FIXED_WINDOW, 7, 60 * S, 0);
	struct lim_state  s;
	struct lim_result r;
	int64_t           st = T0 / (60 * S) * 60 * S;

	lim_state_init(&s);
	r = run(&p, &s, LIM_OP_CHECK, 7, st + 8571428);
	expect(r, 1, 0, 0, 51428572);
	r = run(&p, &s, LIM_OP_CHECK, 1, st + 60 * S - 1);
	expect(r, 0, 0, 1, 1);
	r = run(&p, &s, LIM_OP_CHECK, 1, st + 60 * S);
	expect(r, 1, 6, 0, 60 * S);
	lim_state_deinit(&s);
}

/* ---- sliding window -----------------------------------------------------
 * Allowed iff prev * (W - e) + (cur + cost) * W <= L * W: the estimate
 * prev * (W - e) / W + cur is never rounded (ALGORITHMS.md). */

/* The window of W µs that holds T0, and the one after it. */
#define SW_START(w) (T0 / (w) * (w))

/* 15 s into the next window prev = 8 weighs 8 * 45 / 60 = 6 exactly. A
 * cost 1 on top of 6 + 4 needs 8 * (W - e') <= 5 * W: W - e' <= 37.5 s,
 * e' = 22.5 s, so the retry is 7.5 s (floor(8 * x / W) would have let it
 * in 1 µs later, at 5.99 weighed as 5). */
Test(sliding_window, estimate_weights_the_previous_window)
{
	struct lim_params p = mk(LIM_SLIDING_WINDOW, 10, 60 * S, 0);
	struct lim_state  s;
	struct lim_result r;
	int64_t           start = SW_START(60 * S);

	lim_state_init(&s);
	r = run(&p, &s, LIM_OP_CHECK, 8, start + 30 * S);
	cr_expect_eq(r.allowed, 1);
	cr_expect_eq(r.remaining, 2);
	r = run(&p, &s, LIM_OP_CHECK, 0, start + 75 * S);
	expect(r, 1, 4, 0, 45 * S);
	r = run(&p, &s, LIM_OP_CHECK, 4, start + 75 * S);
	expect(r, 1, 0, 0, 105 * S);
	r = run(&p, &s, LIM_OP_CHECK, 1, start + 75 * S);
	expect(r, 0, 0, 7500000, 105 * S);
	r = run(&p, &s, LIM_OP_CHECK, 1, start + 75 * S + 7499999);
	expect(r, 0, 0, 1, 105 * S - 7499999);
	r = run(&p, &s, LIM_OP_CHECK, 1, start + 75 * S + 7500000);
	cr_expect_eq(r.allowed, 1);
	cr_expect_eq(r.remaining, 0);
	lim_state_deinit(&s);
}

/* cur = 4 of 4 at e = 2 s: a cost 2 waits for the next window, where 4
 * weighs 4 * (W - e) / W and 4 * (W - e) + 2 * W <= 4 * W from W - e =
 * 5 s: retry = 8 s + 5 s. */
Test(sliding_window, retry_after_the_boundary_when_cur_is_full)
{
	struct lim_params p = mk(LIM_SLIDING_WINDOW, 4, 10 * S, 0);
	struct lim_state  s;
	struct lim_result r;
	int64_t           start = SW_START(10 * S);

	lim_state_init(&s);
	run(&p, &s, LIM_OP_CHECK, 4, start + 2 * S);
	r = run(&p, &s, LIM_OP_CHECK, 2, start + 2 * S);
	expect(r, 0, 0, 13 * S, 18 * S);
	r = run(&p, &s, LIM_OP_CHECK, 2, start + 15 * S - 1);
	expect(r, 0, 1, 1, 5 * S + 1);
	r = run(&p, &s, LIM_OP_CHECK, 2, start + 15 * S);
	cr_expect_eq(r.allowed, 1);
	cr_expect_eq(r.remaining, 0);
	lim_state_deinit(&s);
}

/* ALGORITHMS.md's vector: limit 3, window 1h, fresh key. Three requests
 * at e pass, the fourth is denied with retry (W - e) + W / 3 (the
 * boundary, then 1200 s for the old window's 3 to weigh 2); one second
 * after the boundary it is still denied; at boundary + 1200 s one passes.
 * At e = 0 and at e = 10 min. */
static void
sw_algorithms_md_vector(int64_t e)
{
	const int64_t     w = 3600 * S;
	struct lim_params p = mk(LIM_SLIDING_WINDOW, 3, w, 0);
	struct lim_state  s;
	struct lim_result r;
	int64_t           start = SW_START(w), i;

	lim_state_init(&s);
	for (i = 0; i < 3; i++) {
		r = run(&p, &s, LIM_OP_CHECK, 1, start + e);
		expect(r, 1, 2 - i, 0, 2 * w - e);
	}
	r = run(&p, &s, LIM_OP_CHECK, 1, start + e);
	expect(r, 0, 0, (w - e) + w / 3, 2 * w - e);
	r = run(&p, &s, LIM_OP_CHECK, 1, start + w + S);
	expect(r, 0, 0, 1200 * S - S, w - S);
	r = run(&p, &s, LIM_OP_CHECK, 1, start + w + 1200 * S - 1);
	expect(r, 0, 0, 1, w - 1200 * S + 1);
	r = run(&p, &s, LIM_OP_CHECK, 1, start + w + 1200 * S);
	expect(r, 1, 0, 0, 2 * w - 1200 * S);
	lim_state_deinit(&s);
}

Test(sliding_window, algorithms_md_vector_at_the_window_start)
{
	sw_algorithms_md_vector(0);
}

Test(sliding_window, algorithms_md_vector_ten_minutes_in)
{
	sw_algorithms_md_vector(600 * S);
}

/* The acceptance test of the exact window (issue 17): L = 10 spent 1 µs
 * before a boundary. Just after it the old window weighs 10 * (W - e) / W,
 * more than 9 until e = W / 10: nothing fits before 6 s. Flooring that
 * share (9 from e = 1 µs) admitted an eleventh request in W. */
Test(sliding_window, limit_spent_before_a_boundary_admits_nothing_after_it)
{
	const int64_t     w = 60 * S;
	struct lim_params p = mk(LIM_SLIDING_WINDOW, 10, w, 0);
	struct lim_state  s;
	struct lim_result r;
	int64_t           b = SW_START(w) + w;

	lim_state_init(&s);
	r = run(&p, &s, LIM_OP_CHECK, 10, b - 1);
	expect(r, 1, 0, 0, w + 1);
	r = run(&p, &s, LIM_OP_CHECK, 1, b);
	expect(r, 0, 0, 6 * S, w);
	r = run(&p, &s, LIM_OP_CHECK, 1, b + 1);
	expect(r, 0, 0, 6 * S - 1, w - 1);
	cr_expect_eq(r.next_us, 6 * S - 1);
	r = run(&p, &s, LIM_OP_CHECK, 1, b + 6 * S - 1);
	expect(r, 0, 0, 1, w - 6 * S + 1);
	r = run(&p, &s, LIM_OP_CHECK, 1, b + 6 * S);
	expect(r, 1, 0, 0, 2 * w - 6 * S);
	r = run(&p, &s, LIM_OP_CHECK, 1, b + 6 * S);
	expect(r, 0, 0, 6 * S, 2 * w - 6 * S);
	lim_state_deinit(&s);
}

/* Each decision, remaining, next and full against the inequality itself
 * on a model of the two windows (__int128, no shortcut): allowed iff
 * prev * (W - e) + (cur + cost) * W <= L * W; remaining = floor(L -
 * estimate); next and full the first µs at which one more unit, and the
 * whole limit, fit (found by stepping the model). W = 997 µs, a prime,
 * so the weights are rarely whole. */
struct sw_model {
	int64_t idx, prev, cur;
};

static __int128
sw_model_lhs(const struct sw_model *m, int64_t w, int64_t t, int64_t cost)
{
	int64_t idx = t / w, e = t % w, prev = 0, cur = 0;

	if (idx == m->idx) {
		prev = m->prev;
		cur = m->cur;
	} else if (idx == m->idx + 1) {
		prev = m->cur;
	}
	return (__int128)prev * (w - e) + (__int128)(cur + cost) * w;
}

static int64_t
sw_model_wait(const struct sw_model *m, int64_t w, int64_t lim, int64_t t,
              int64_t cost)
{
	int64_t u = t;

	while (sw_model_lhs(m, w, u, cost) > (__int128)lim * w)
		u++;
	return u - t;
}

static void
sw_model_charge(struct sw_model *m, int64_t w, int64_t t, int64_t cost)
{
	int64_t idx = t / w;

	if (idx == m->idx + 1) {
		m->prev = m->cur;
		m->cur = 0;
	} else if (idx != m->idx) {
		m->prev = m->cur = 0;
	}
	m->idx = idx;
	m->cur += cost;
}

Test(sliding_window, decisions_match_the_exact_inequality)
{
	const int64_t     w = 997, lim = 7;
	struct lim_params p = mk(LIM_SLIDING_WINDOW, lim, w, 0);
	struct sw_model   m = { 0, 0, 0 };
	struct lim_state  s;
	struct lim_result r;
	__int128          lhs;
	unsigned          x = 7;
	int64_t           t = 1000 * w, cost, rem;
	int               i, ok;

	lim_state_init(&s);
	for (i = 0; i < 3000; i++) {
		x = x * 1103515245 + 12345;
		t += (x >> 8) % 400;
		cost = (x >> 4) % 4;
		lhs = sw_model_lhs(&m, w, t, cost);
		ok = lhs <= (__int128)lim * w;
		r = run(&p, &s, LIM_OP_CHECK, cost, t);
		cr_assert_eq(r.allowed, ok, "step %d", i);
		if (ok)
			sw_model_charge(&m, w, t, cost);
		else
			cr_assert_eq(r.retry_after_us,
			             sw_model_wait(&m, w, lim, t, cost),
			             "step %d", i);
		/* floor(L - lhs / W), lhs the estimate * W after the charge
		 * (never above L * W: only CHECKs here) */
		lhs = sw_model_lhs(&m, w, t, 0);
		rem = (int64_t)(((__int128)lim * w - lhs) / w);
		cr_assert_eq(r.remaining, rem, "step %d", i);
		cr_assert_eq(r.full_us, sw_model_wait(&m, w, 0, t, 0),
		             "step %d", i);
		cr_assert_eq(
			r.next_us,
			rem == lim ? 0
				   : sw_model_wait(&m, w, lim - rem - 1, t, 0),
			"step %d", i);
	}
	lim_state_deinit(&s);
}

Test(sliding_window, retry_matches_brute_force)
{
	struct lim_params p = mk(LIM_SLIDING_WINDOW, 7, 1000, 0);
	struct lim_state  s, c;
	struct lim_result r, q;
	unsigned          x = 99;
	int64_t           t = 1000000, u;
	int               i;

	lim_state_init(&s);
	for (i = 0; i < 400; i++) {
		x = x * 1103515245 + 12345;
		t += (x >> 8) % 300;
		r = run(&p, &s, LIM_OP_CHECK, 1 + (x >> 4) % 3, t);
		if (r.allowed != 0)
			continue;
		c = s;
		for (u = t; u < t + r.retry_after_us; u++) {
			lim_eval(&p, &c, LIM_OP_CHECK, 1 + (x >> 4) % 3, 0, u,
			         &q);
			cr_assert_eq(q.allowed, 0, "step %d at +%lld", i,
			             (long long)(u - t));
		}
		lim_eval(&p, &c, LIM_OP_CHECK, 1 + (x >> 4) % 3, 0, u, &q);
		cr_assert_eq(q.allowed, 1, "step %d", i);
	}
	lim_state_deinit(&s);
}

/* 4e9 per day: 3999999999 in one window weigh 1999999999.5 halfway
 * through the next; products pass 2^64 (lim_muldiv on __int128). The
 * estimate is not rounded down: remaining = floor(4e9 - 1999999999.5). */
Test(sliding_window, huge_products_stay_exact)
{
	struct lim_params p =
		mk(LIM_SLIDING_WINDOW, 4000000000LL, 86400 * S, 0);
	struct lim_state  s;
	struct lim_result r;
	int64_t           start = SW_START(86400 * S);

	lim_state_init(&s);
	run(&p, &s, LIM_OP_CHECK, 3999999999LL, start + 1);
	r = run(&p, &s, LIM_OP_CHECK, 0, start + 86400 * S + 43200 * S);
	cr_expect_eq(r.remaining, 2000000000LL);
	r = run(&p, &s, LIM_OP_CHECK, 2000000001LL,
	        start + 86400 * S + 43200 * S);
	cr_expect_eq(r.allowed, 0);
	/* 3999999999 * (W - e) <= 1999999999 * W: e' = W - 43200000010.8.. */
	cr_expect_eq(r.retry_after_us, 11);
	r = run(&p, &s, LIM_OP_CHECK, 2000000000LL,
	        start + 86400 * S + 43200 * S);
	cr_expect_eq(r.allowed, 1);
	cr_expect_eq(r.remaining, 0);
	lim_state_deinit(&s);
}

/* The largest sliding window lim_params_init (so spoa-ratelimit -c)
 * accepts: limit 2^32 (LIM_COST_MAX), window 2^48 µs (LIM_TIME_MAX);
 * one more of either is refused. prev = L weighs L - e / 2^16 at e: at e
 * = 1 that is 2^32 - 2^-16, so nothing fits (a floor would admit one);
 * one unit fits from e = 2^16, where it is 2^32 - 1 exactly. */
Test(sliding_window, largest_limit_and_window_stay_exact)
{
	const int64_t     lim = LIM_COST_MAX, w = LIM_TIME_MAX;
	struct lim_params p = mk(LIM_SLIDING_WINDOW, lim, w, 0), q = p;
	struct lim_state  s;
	struct lim_result r;
	int64_t           b = SW_START(w) + w;
	const char       *err;

	q.rate = lim + 1;
	cr_expect_eq(lim_params_init(&q, &err), -1, "limit 2^32 + 1");
	q.rate = lim;
	q.period_us = w + 1;
	cr_expect_eq(lim_params_init(&q, &err), -1, "window 2^48 + 1 µs");
	lim_state_init(&s);
	r = run(&p, &s, LIM_OP_CHECK, lim, b - 1);
	expect(r, 1, 0, 0, w + 1);
	r = run(&p, &s, LIM_OP_CHECK, 1, b + 1);
	expect(r, 0, 0, 65535, w - 1);
	r = run(&p, &s, LIM_OP_CHECK, 0, b + 65535);
	expect(r, 1, 0, 0, w - 65535);
	cr_expect_eq(r.next_us, 1);
	r = run(&p, &s, LIM_OP_CHECK, 0, b + 65536);
	expect(r, 1, 1, 0, w - 65536);
	cr_expect_eq(r.next_us, 65536);
	/* half-way: L / 2 left; L / 2 + 1 waits 2^16 µs */
	r = run(&p, &s, LIM_OP_CHECK, lim / 2 + 1, b + w / 2);
	expect(r, 0, lim / 2, 65536, w / 2);
	r = run(&p, &s, LIM_OP_CHECK, lim / 2, b + w / 2);
	expect(r, 1, 0, 0, w + w / 2);
	lim_state_deinit(&s);
}

/* 3/s (L = 3, W = 10^6): prev = 3, then at e into the next window the
 * estimate is 3 * (W - e) / W + cur. At e = 0 a cost 1 waits until 3 *
 * (W - e) <= 2 * W: W - e <= 666666, retry 333334; at e = 333333 it is
 * 2000001 / W + 1 > 3, at e = 333334 1999998 / W + 1 <= 3. The next unit
 * needs 3 * (W - e) <= W: W - e <= 333333, e = 666667. */
Test(sliding_window, microsecond_rounding_3_per_second)
{
	struct lim_params p = mk(LIM_SLIDING_WINDOW, 3, S, 0);
	struct lim_state  s;
	struct lim_result r;
	int64_t           st = T0 / S * S + S; /* the window after the charge */

	lim_state_init(&s);
	run(&p, &s, LIM_OP_CHECK, 3, st - 1);
	r = run(&p, &s, LIM_OP_CHECK, 1, st);
	expect(r, 0, 0, 333334, S);
	r = run(&p, &s, LIM_OP_CHECK, 1, st + 333333);
	expect(r, 0, 0, 1, S - 333333);
	r = run(&p, &s, LIM_OP_CHECK, 1, st + 333334);
	expect(r, 1, 0, 0, 2 * S - 333334);
	r = run(&p, &s, LIM_OP_CHECK, 1, st + 333334);
	expect(r, 0, 0, 333333, 2 * S - 333334);
	r = run(&p, &s, LIM_OP_CHECK, 1, st + 666666);
	expect(r, 0, 0, 1, 2 * S - 666666);
	r = run(&p, &s, LIM_OP_CHECK, 1, st + 666667);
	expect(r, 1, 0, 0, 2 * S - 666667);
	lim_state_deinit(&s);
}

/* 7/min (L = 7, W = 60 s): prev = 7. A cost 7 waits until prev weighs
 * nothing, the window's end (retry = full = 60 s); a cost 1 until 7 * (W
 * - e) <= 6 * W: W - e <= 51428571 (of 51428571.43), e = 8571429. At e =
 * 8571428: 7 * 51428572 = 360000004 > 6 * W, denied for 1 µs more. A
 * cost 7 on cur = 1 waits for the window after next. */
Test(sliding_window, microsecond_rounding_7_per_minute)
{
	struct lim_params p = mk(LIM_SLIDING_WINDOW, 7, 60 * S, 0);
	struct lim_state  s;
	struct lim_result r;
	int64_t           st = T0 / (60 * S) * 60 * S + 60 * S;

	lim_state_init(&s);
	run(&p, &s, LIM_OP_CHECK, 7, st - 1);
	r = run(&p, &s, LIM_OP_CHECK, 7, st);
	expect(r, 0, 0, 60 * S, 60 * S);
	r = run(&p, &s, LIM_OP_CHECK, 1, st);
	expect(r, 0, 0, 8571429, 60 * S);
	r = run(&p, &s, LIM_OP_CHECK, 1, st + 8571428);
	expect(r, 0, 0, 1, 60 * S - 8571428);
	r = run(&p, &s, LIM_OP_CHECK, 1, st + 8571429);
	cr_expect_eq(r.allowed, 1);
	cr_expect_eq(r.remaining, 0);
	/* 1 µs before the end: 7 weigh 7 / W, rounded up 1, plus cur 1 */
	r = run(&p, &s, LIM_OP_CHECK, 7, st + 60 * S - 1);
	expect(r, 0, 5, 60 * S + 1, 60 * S + 1);
	lim_state_deinit(&s);
}

/* cost > L can never fit: -1, no retry, and the counters stay as they
 * were (the next peek still sees 3 - 1 = 2 left). full after one unit at
 * st: that unit is the next window's prev and weighs 1 * (W - e) / W > 0
 * until its end, so full = 2 * W. */
Test(sliding_window, impossible_cost_is_minus_one_and_charges_nothing)
{
	struct lim_params p = mk(LIM_SLIDING_WINDOW, 3, 60 * S, 0);
	struct lim_state  s;
	struct lim_result r;
	int64_t           st = T0 / (60 * S) * 60 * S;

	lim_state_init(&s);
	r = run(&p, &s, LIM_OP_CHECK, 4, st);
	expect(r, -1, 3, 0, 0);
	cr_expect_eq(s.n, 0);
	run(&p, &s, LIM_OP_CHECK, 1, st);
	r = run(&p, &s, LIM_OP_CHECK, 4, st);
	expect(r, -1, 2, 0, 120 * S);
	r = run(&p, &s, LIM_OP_CHECK, LIM_COST_MAX + 1, st);
	expect(r, -1, 2, 0, 120 * S);
	r = run(&p, &s, LIM_OP_CHECK, 0, st);
	expect(r, 1, 2, 0, 120 * S);
	lim_state_deinit(&s);
}

/* ---- sliding log -------------------------------------------------------- */

Test(sliding_log, window_edge_and_retry)
{
	struct lim_params p = mk(LIM_SLIDING_LOG, 3, 10 * S, 0);
	struct lim_state  s;
	struct lim_result r;

	lim_state_init(&s);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0);
	expect(r, 1, 2, 0, 10 * S);
	run(&p, &s, LIM_OP_CHECK, 1, T0 + 2 * S);
	run(&p, &s, LIM_OP_CHECK, 1, T0 + 4 * S);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + 5 * S);
	expect(r, 0, 0, 5 * S, 9 * S);
	r = run(&p, &s, LIM_OP_CHECK, 2, T0 + 5 * S); /* 2nd oldest */
	expect(r, 0, 0, 7 * S, 9 * S);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + 10 * S - 1);
	cr_expect_eq(r.allowed, 0);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + 10 * S); /* oldest dropped */
	expect(r, 1, 0, 0, 10 * S);
	cr_expect_eq(r.next_us, 2 * S);
	cr_expect_eq(s.n, 3);
	r = run(&p, &s, LIM_OP_CHECK, 4, T0 + 10 * S);
	cr_expect_eq(r.allowed, -1);
	lim_state_deinit(&s);
}

Test(sliding_log, force_keeps_only_newest_limit_entries)
{
	struct lim_params p = mk(LIM_SLIDING_LOG, 5, 900 * S, 0);
	struct lim_state  s;
	struct lim_result r;
	int               i;

	lim_state_init(&s);
	for (i = 0; i < 50; i++)
		run(&p, &s, LIM_OP_FORCE, 1, T0 + i * S);
	cr_expect_eq(s.n, 5);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + 50 * S);
	expect(r, 0, 0, 895 * S, 899 * S);
	lim_state_deinit(&s);
}

Test(sliding_log, peek_changes_nothing)
{
	struct lim_params p = mk(LIM_SLIDING_LOG, 2, S, 0);
	struct lim_state  s;
	struct lim_result r;

	lim_state_init(&s);
	r = run(&p, &s, LIM_OP_CHECK, 0, T0);
	expect(r, 1, 2, 0, 0);
	cr_expect_eq(s.n, 0);
	lim_state_deinit(&s);
}

/* The log keeps exact timestamps: an entry at t is live while t > now - W,
 * so it frees its unit at t + W to the µs. 3/s (L = 3, W = 10^6) with
 * entries at T0, T0 + 333333, T0 + 666666: at T0 + 999999 the oldest has
 * 1 µs left (retry 1, full = 666666 + W - 999999 = 666667); at T0 + 10^6
 * it is gone, next = 333333 + W - 10^6 = 333333. */
Test(sliding_log, entries_expire_to_the_microsecond_3_per_second)
{
	struct lim_params p = mk(LIM_SLIDING_LOG, 3, S, 0);
	struct lim_state  s;
	struct lim_result r;

	lim_state_init(&s);
	run(&p, &s, LIM_OP_CHECK, 1, T0);
	run(&p, &s, LIM_OP_CHECK, 1, T0 + 333333);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + 666666);
	expect(r, 1, 0, 0, S);
	cr_expect_eq(r.next_us, 333334);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + 999999);
	expect(r, 0, 0, 1, 666667);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + S);
	expect(r, 1, 0, 0, S);
	cr_expect_eq(r.next_us, 333333);
	lim_state_deinit(&s);
}

/* 7/min (L = 7, W = 60 s), one entry every EI = 8571428 µs from T0, the
 * newest at T0 + 6 * 8571428 = T0 + 51428568: at T0 + 60 s - 1 the oldest
 * has 1 µs left (full = 51428568 + 1 = 51428569); at T0 + 60 s it goes,
 * and the next one leaves 8571428 µs later. */
Test(sliding_log, entries_expire_to_the_microsecond_7_per_minute)
{
	struct lim_params p = mk(LIM_SLIDING_LOG, 7, 60 * S, 0);
	struct lim_state  s;
	struct lim_result r;
	int               i;

	lim_state_init(&s);
	for (i = 0; i < 7; i++)
		run(&p, &s, LIM_OP_CHECK, 1, T0 + i * 8571428LL);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + 60 * S - 1);
	expect(r, 0, 0, 1, 51428569);
	r = run(&p, &s, LIM_OP_CHECK, 1, T0 + 60 * S);
	expect(r, 1, 0, 0, 60 * S);
	cr_expect_eq(r.next_us, 8571428);
	lim_state_deinit(&s);
}

/* ---- concurrency -------------------------------------------------------- */

Test(concurrency, acquire_release_expire)
{
	struct lim_params p = mk(LIM_CONCURRENCY, 2, 60 * S, 0);
	struct lim_state  s;
	struct lim_result r;

	lim_state_init(&s);
	r = run_m(&p, &s, LIM_OP_CHECK, 1, "a", T0);
	expect(r, 1, 1, 0, 60 * S);
	r = run_m(&p, &s, LIM_OP_CHECK, 1, "b", T0 + S);
	expect(r, 1, 0, 0, 60 * S);
	cr_expect_eq(r.next_us, 59 * S);
	r = run_m(&p, &s, LIM_OP_CHECK, 1, "c", T0 + 2 * S);
	expect(r, 0, 0, 58 * S, 59 * S);
	r = run_m(&p, &s, LIM_OP_RELEASE, 1, "a", T0 + 3 * S);
	expect(r, 1, 1, 0, 58 * S);
	r = run_m(&p, &s, LIM_OP_CHECK, 1, "c", T0 + 3 * S);
	expect(r, 1, 0, 0, 60 * S);
	/* a lost release: b's lease runs out at T0 + 61 s */
	r = run_m(&p, &s, LIM_OP_CHECK, 1, "d", T0 + 61 * S - 1);
	cr_expect_eq(r.allowed, 0);
	cr_expect_eq(r.retry_after_us, 1);
	r = run_m(&p, &s, LIM_OP_CHECK, 1, "d", T0 + 61 * S);
	expect(r, 1, 0, 0, 60 * S);
	cr_expect_eq(s.n, 2);
	lim_state_deinit(&s);
}

Test(concurrency, reacquire_refreshes_and_peek_reports)
{
	struct lim_params p = mk(LIM_CONCURRENCY, 1, 10 * S, 0);
	struct lim_state  s;
	struct lim_result r;

	lim_state_init(&s);
	run_m(&p, &s, LIM_OP_CHECK, 1, "a", T0);
	r = run_m(&p, &s, LIM_OP_CHECK, 1, "a", T0 + 5 * S);
	expect(r, 1, 0, 0, 10 * S);
	r = run_m(&p, &s, LIM_OP_CHECK, 0, "z", T0 + 5 * S);
	expect(r, 1, 0, 0, 10 * S);
	r = run_m(&p, &s, LIM_OP_RELEASE, 0, "nobody", T0 + 5 * S);
	expect(r, 1, 0, 0, 10 * S);
	cr_expect_eq(s.n, 1);
	lim_state_deinit(&s);
}

/* Concurrency has no rate to round; what must be exact is the lease end:
 * a lease taken at T0 is live while T0 + lease > now. With the 3/s and
 * 7/min intervals as leases (333333 and 8571428 µs), L = 1: at T0 + lease
 * - 1 another request waits 1 µs, at T0 + lease it gets the slot. */
static void
lease_ends_to_the_microsecond(int64_t lease)
{
	struct lim_params p = mk(LIM_CONCURRENCY, 1, lease, 0);
	struct lim_state  s;
	struct lim_result r;

	lim_state_init(&s);
	r = run_m(&p, &s, LIM_OP_CHECK, 1, "a", T0);
	expect(r, 1, 0, 0, lease);
	r = run_m(&p, &s, LIM_OP_CHECK, 1, "b", T0 + lease - 1);
	expect(r, 0, 0, 1, 1);
	r = run_m(&p, &s, LIM_OP_CHECK, 1, "b", T0 + lease);
	expect(r, 1, 0, 0, lease);
	cr_expect_eq(s.n, 1);
	lim_state_deinit(&s);
}

Test(concurrency, lease_ends_to_the_microsecond_3_per_second)
{
	lease_ends_to_the_microsecond(S / 3);
}

Test(concurrency, lease_ends_to_the_microsecond_7_per_minute)
{
	lease_ends_to_the_microsecond(60 * S / 7);
}

/* A request holds one lease whatever its cost (limiter.h): L = 2 admits
 * two requests of cost 5 and 3, and the third waits for the first lease. */
Test(concurrency, cost_above_one_takes_one_lease)
{
	struct lim_params p = mk(LIM_CONCURRENCY, 2, 60 * S, 0);
	struct lim_state  s;
	struct lim_result r;

	lim_state_init(&s);
	r = run_m(&p, &s, LIM_OP_CHECK, 5, "a", T0);
	expect(r, 1, 1, 0, 60 * S);
	cr_expect_eq(s.n, 1);
	r = run_m(&p, &s, LIM_OP_CHECK, 3, "b", T0 + S);
	expect(r, 1, 0, 0, 60 * S);
	r = run_m(&p, &s, LIM_OP_CHECK, 2, "c", T0 + 2 * S);
	expect(r, 0, 0, 58 * S, 59 * S);
	cr_expect_eq(s.n, 2);
	lim_state_deinit(&s);
}

/* The only cost that can never fit is one past LIM_COST_MAX: -1, no
 * retry, reported as a peek, and no lease taken. */
Test(concurrency, impossible_cost_is_minus_one_and_takes_no_lease)
{
	struct lim_params p = mk(LIM_CONCURRENCY, 2, 60 * S, 0);
	struct lim_state  s;
	struct lim_result r;

	lim_state_init(&s);
	r = run_m(&p, &s, LIM_OP_CHECK, LIM_COST_MAX + 1, "a", T0);
	expect(r, -1, 2, 0, 0);
	cr_expect_eq(s.n, 0);
	run_m(&p, &s, LIM_OP_CHECK, 1, "b", T0);
	r = run_m(&p, &s, LIM_OP_CHECK, LIM_COST_MAX + 1, "a", T0 + S);
	expect(r, -1, 1, 0, 59 * S);
	cr_expect_eq(s.n, 1);
	lim_state_deinit(&s);
}

/* ---- two-phase, quota, parsing ------------------------------------------ */

Test(limiter, two_phase_denial_charges_no_check)
{
	struct lim_params a = mk(LIM_GCRA, 10, S, 10);
	struct lim_params b = mk(LIM_FIXED_WINDOW, 1, 60 * S, 0);
	struct lim_state  sa, sb;
	struct lim_result ra, rb;
	int               ca, cb;

	lim_state_init(&sa);
	lim_state_init(&sb);
	run(&b, &sb, LIM_OP_CHECK, 1, T0);
	ca = lim_eval(&a, &sa, LIM_OP_CHECK, 1, 0, T0, &ra);
	cb = lim_eval(&b, &sb, LIM_OP_CHECK, 1, 0, T0, &rb);
	cr_expect_eq(ca, 1);
	cr_expect_eq(cb, 0);
	cr_expect_eq(lim_vetoes(LIM_OP_CHECK, 0, &ra), 0);
	cr_expect_eq(lim_vetoes(LIM_OP_CHECK, 0, &rb), 1);
	cr_expect_eq(lim_vetoes(LIM_OP_CHECK, 1, &rb), 0);
	cr_expect_eq(lim_vetoes(LIM_OP_FORCE, 0, &rb), 0);
	cr_expect_eq(sa.v[0], 0);
}

Test(limiter, quota_and_window)
{
	struct lim_params g = mk(LIM_GCRA, 600, 60 * S, 100);
	struct lim_params w = mk(LIM_SLIDING_WINDOW, 100, 900 * S, 0);
	struct lim_params c = mk(LIM_CONCURRENCY, 2, 300 * S, 0);
	int64_t           v[LIM_SCRIPT_PARAMS];

	cr_expect_eq(lim_quota(&g), 100);
	cr_expect_eq(lim_window_s(&g), 10);
	cr_expect_eq(lim_quota(&w), 100);
	cr_expect_eq(lim_window_s(&w), 900);
	cr_expect_eq(lim_quota(&c), 2);
	cr_expect_eq(lim_window_s(&c), 300);
	lim_script_params(&g, v);
	cr_expect(v[0] == 100000 && v[1] == 10000000 && v[2] == 0);
	cr_expect(v[3] == 0 && v[4] == 0, "no penalty box: block 0 0");
}

/* The script's per-check code: (rule * 8 + op * 2 + shadow) * 2, plus 1
 * when a cost other than 1 follows it. */
Test(limiter, script_code_leaves_out_a_cost_of_one)
{
	cr_expect_eq(lim_script_code(1, LIM_OP_CHECK, 0, 1), 16);
	cr_expect_eq(
		lim_script_has_cost(lim_script_code(1, LIM_OP_CHECK, 0, 1)), 0);
	cr_expect_eq(lim_script_code(1, LIM_OP_CHECK, 0, 3), 17);
	cr_expect_eq(
		lim_script_has_cost(lim_script_code(1, LIM_OP_CHECK, 0, 0)), 1);
	cr_expect_eq(lim_script_code(2, LIM_OP_PEEK, LIM_FL_SHADOW, 1),
	             (2 * 8 + LIM_OP_PEEK * 2 + 1) * 2);
}

Test(limiter, params_init_rejects_bad_values)
{
	struct lim_params p;
	const char       *err = NULL;

	memset(&p, 0, sizeof(p));
	p.algo = LIM_GCRA;
	p.rate = 0;
	p.period_us = S;
	cr_expect_eq(lim_params_init(&p, &err), -1);
	cr_expect_not_null(err);
	p.rate = 1;
	p.period_us = 0;
	cr_expect_eq(lim_params_init(&p, &err), -1);
	p.period_us = S;
	p.burst = -1;
	cr_expect_eq(lim_params_init(&p, &err), -1);
	p.burst = 0;
	p.calendar = LIM_CAL_MONTH;
	cr_expect_eq(lim_params_init(&p, &err), -1);
	p.calendar = LIM_CAL_NONE;
	p.max_delay_us = 5;
	cr_expect_eq(lim_params_init(&p, &err), -1);
	p.max_delay_us = 0;
	p.algo = LIM_ALGO_COUNT;
	cr_expect_eq(lim_params_init(&p, &err), -1);
	p.algo = LIM_GCRA;
	p.burst = 1LL << 40;
	cr_expect_eq(lim_params_init(&p, &err), -1);
	p.burst = 0;
	p.rate = 2000000; /* EI under 1 µs: refused */
	cr_expect_eq(lim_params_init(&p, &err), -1);
}

Test(limiter, parse_rate)
{
	static const struct {
		const char *s;
		int64_t     n, p;
		int         cal;
	} ok[] = {
		{ "100/s", 100, S, 0 },
		{ "100/sec", 100, S, 0 },
		{ "600/m", 600, 60 * S, 0 },
		{ "600/min", 600, 60 * S, 0 },
		{ "5/h", 5, 3600 * S, 0 },
		{ "5/hour", 5, 3600 * S, 0 },
		{ "7/d", 7, LIM_DAY_US, 0 },
		{ "7/day", 7, LIM_DAY_US, 0 },
		{ "10000/month", 10000, LIM_MONTH_US, LIM_CAL_MONTH },
		{ "5/15m", 5, 900 * S, 0 },
		{ "3/10s", 3, 10 * S, 0 },
	};
	static const char *const bad[] = {
		"",
		"100",
		"/s",
		"0/s",
		"-1/s",
		"100/",
		"100/x",
		"100/0s",
		"100/2month",
		"1.5/s",
		"100/ms",
		"100/5us",
		" 1/s",
		"1/s ",
		"99999999999999999999/s",
		"1/99999999999999999999s",
	};
	enum lim_calendar cal;
	int64_t           n, p;
	size_t            i;

	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		cal = LIM_CAL_DAY;
		cr_expect_eq(lim_parse_rate(ok[i].s, &n, &p, &cal), 0, "%s",
		             ok[i].s);
		cr_expect(n == ok[i].n && p == ok[i].p && (int)cal == ok[i].cal,
		          "%s", ok[i].s);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_expect_eq(lim_parse_rate(bad[i], &n, &p, &cal), -1, "'%s'",
		             bad[i]);
}

Test(limiter, parse_duration)
{
	static const struct {
		const char *s;
		int64_t     us;
	} ok[] = {
		{ "250us", 250 },   { "5ms", 5000 },    { "30s", 30 * S },
		{ "15m", 900 * S }, { "1h", 3600 * S }, { "1d", LIM_DAY_US },
		{ "0s", 0 },
	};
	static const char *const bad[] = {
		"",     "5",    "ms",
		"-5ms", "5 ms", "5xs",
		"1.5s", "5msx", "999999999999999999d",
	};
	int64_t us;
	size_t  i;

	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		cr_expect_eq(lim_parse_duration(ok[i].s, &us), 0, "%s",
		             ok[i].s);
		cr_expect_eq(us, ok[i].us, "%s", ok[i].s);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_expect_eq(lim_parse_duration(bad[i], &us), -1, "'%s'",
		             bad[i]);
}

Test(limiter, algo_names_round_trip)
{
	int i;

	for (i = 0; i < LIM_ALGO_COUNT; i++)
		cr_expect_eq(lim_algo_from_name(lim_algo_name(i)), i);
	cr_expect_eq(lim_algo_from_name("nope"), -1);
	cr_expect_str_eq(lim_algo_name(LIM_SLIDING_LOG), "sliding-log");
}

Test(limiter, muldiv_is_exact)
{
	int64_t r;

	cr_expect_eq(lim_muldiv(4000000000LL, 86400000000LL, 86400000001LL, &r),
	             3999999999LL);
	cr_expect_eq(lim_muldiv_ceil(7, 3, 7), 3);
	cr_expect_eq(lim_muldiv_ceil(7, 3, 2), 11);
	cr_expect_eq(lim_member_hash("", 0), 0xcbf29ce484222325ULL);
}

/* PEEK answers "would <cost> more pass?" and never charges: a failure
 * budget of L is refused once L failures are recorded, not after L+1. */
Test(peek, decides_like_check_and_charges_nothing)
{
	struct lim_params p = { .algo = LIM_SLIDING_LOG,
		                .rate = 3,
		                .period_us = 60 * LIM_USEC_PER_SEC };
	struct lim_state  s;
	struct lim_result r;
	const char       *err;

	cr_assert_eq(lim_params_init(&p, &err), 0);
	lim_state_init(&s);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(lim_eval(&p, &s, LIM_OP_PEEK, 1, 0, 1000 + i, &r),
		             0);
		cr_assert_eq(r.allowed, 1, "failure %d may still be tried", i);
		if (lim_eval(&p, &s, LIM_OP_FORCE, 1, 0, 1000 + i, &r))
			lim_commit(&p, &s, LIM_OP_FORCE, 1, 0, 1000 + i);
	}
	cr_assert_eq(lim_eval(&p, &s, LIM_OP_PEEK, 1, 0, 2000, &r), 0);
	cr_assert_eq(r.allowed, 0,
	             "the 4th attempt after 3 failures is refused");
	cr_assert(lim_vetoes(LIM_OP_PEEK, 0, &r));
	cr_assert_not(lim_vetoes(LIM_OP_PEEK, 1, &r), "shadow never vetoes");
	cr_assert_eq(s.n, 3, "peeks never add to the log");
	lim_state_deinit(&s);
}
