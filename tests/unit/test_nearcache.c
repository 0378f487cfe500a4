/* SPDX-License-Identifier: Apache-2.0 */
/* nearcache: exact local denials, eligibility, bounded eviction. */
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "nearcache.h"

static struct rule rule = { .name = (char[]){ "r" } };

/* <c> under <rate> per second, burst <burst>, as the policy sets it. */
static void
limits(struct check *c, int64_t rate, int64_t burst)
{
	const char *err;

	c->lim.rate = rate;
	c->lim.period_us = LIM_USEC_PER_SEC;
	c->lim.burst = burst;
	cr_assert_eq(lim_params_init(&c->lim, &err), 0);
}

static struct check
mk(const char *key, enum lim_algo algo, int op, int64_t cost)
{
	struct check c;

	memset(&c, 0, sizeof(c));
	c.rule = &rule;
	c.kind = CHECK_EVAL;
	c.lim.algo = algo;
	c.op = op;
	c.cost = cost;
	c.keylen = (size_t)snprintf(c.key, sizeof(c.key), "%s", key);
	limits(&c, 10, 5);
	return c;
}

static const struct lim_result denied = { 0, 0, 5000, 5000, 9000 };

Test(nearcache, a_cost1_denial_is_answered_locally_until_it_ends)
{
	struct nearcache *nc = nearcache_new();
	struct check      c = mk("rl:{t:a}", LIM_GCRA, LIM_OP_CHECK, 1);
	struct lim_result r;

	nearcache_learn(nc, &c, &denied, 1000, 1000);
	cr_assert_eq(nearcache_lookup(nc, &c, 1000, &r), 1);
	cr_assert_eq(r.allowed, 0);
	cr_assert_eq(r.retry_after_us, 5000);
	cr_assert_eq(nearcache_lookup(nc, &c, 5999, &r), 1);
	cr_assert_eq(r.retry_after_us, 1);
	cr_assert_eq(nearcache_lookup(nc, &c, 6000, &r), 0);
	nearcache_free(nc);
}

Test(nearcache, other_keys_are_not_affected)
{
	struct nearcache *nc = nearcache_new();
	struct check      a = mk("rl:{t:a}", LIM_GCRA, LIM_OP_CHECK, 1);
	struct check      b = mk("rl:{t:b}", LIM_GCRA, LIM_OP_CHECK, 1);
	struct lim_result r;

	nearcache_learn(nc, &a, &denied, 0, 0);
	cr_assert_eq(nearcache_lookup(nc, &b, 0, &r), 0);
	nearcache_free(nc);
}

Test(nearcache, allowed_and_costly_answers_are_not_learned)
{
	struct nearcache *nc = nearcache_new();
	struct check      c = mk("rl:{t:a}", LIM_GCRA, LIM_OP_CHECK, 1);
	struct check      c3 = mk("rl:{t:a}", LIM_GCRA, LIM_OP_CHECK, 3);
	struct lim_result ok = { 1, 3, 0, 100, 100 }, r;

	nearcache_learn(nc, &c, &ok, 0, 0);
	nearcache_learn(nc, &c3, &denied, 0, 0);
	cr_assert_eq(nearcache_lookup(nc, &c, 0, &r), 0);
	nearcache_free(nc);
}

Test(nearcache, eligibility_by_algorithm_op_cost_and_shadow)
{
	struct check c = mk("k", LIM_GCRA, LIM_OP_CHECK, 1);

	cr_assert(nearcache_eligible(&c));
	c.lim.algo = LIM_FIXED_WINDOW;
	cr_assert(nearcache_eligible(&c));
	c.lim.algo = LIM_SLIDING_LOG;
	cr_assert_not(nearcache_eligible(&c));
	c.lim.algo = LIM_LEAKY_BUCKET;
	c.lim.max_delay_us = 1000;
	cr_assert_not(nearcache_eligible(&c));
	c = mk("k", LIM_GCRA, LIM_OP_CHECK, 0);
	cr_assert_not(nearcache_eligible(&c), "peeks go to Redis");
	c = mk("k", LIM_GCRA, LIM_OP_FORCE, 1);
	cr_assert_not(nearcache_eligible(&c));
	c = mk("k", LIM_GCRA, LIM_OP_CHECK, 1);
	c.flags = LIM_FL_SHADOW;
	cr_assert_not(nearcache_eligible(&c), "shadow checks never deny");
}

Test(nearcache, stays_bounded_under_a_flood_of_keys)
{
	struct nearcache *nc = nearcache_new();
	char              key[32];

	for (int i = 0; i < 200000; i++) {
		struct check c;

		snprintf(key, sizeof(key), "rl:{t:%d}", i);
		c = mk(key, LIM_GCRA, LIM_OP_CHECK, 1);
		nearcache_learn(nc, &c, &denied, i, i);
	}
	cr_assert_leq(nearcache_count(nc, 0),
	              (size_t)NEARCACHE_SETS * NEARCACHE_WAYS);
	cr_assert_gt(nearcache_count(nc, 0), (size_t)NEARCACHE_SETS);
	nearcache_free(nc);
}

/* ALGORITHMS.md: for token-bucket and fixed-window too, a cost-1 denial
 * until T holds for every cost >= 1 request until T. */
Test(nearcache, token_bucket_and_fixed_window_denials_are_answered_locally)
{
	static const enum lim_algo algos[] = { LIM_TOKEN_BUCKET,
		                               LIM_FIXED_WINDOW };

	for (size_t i = 0; i < sizeof(algos) / sizeof(algos[0]); i++) {
		struct nearcache *nc = nearcache_new();
		struct check      c = mk("rl:{t:a}", algos[i], LIM_OP_CHECK, 1);
		struct check c2 = mk("rl:{t:a}", algos[i], LIM_OP_CHECK, 2);
		struct lim_result r;

		limits(&c, 10, 5);
		limits(&c2, 10, 5);
		cr_assert(nearcache_eligible(&c));
		nearcache_learn(nc, &c, &denied, 0, 0);
		cr_assert_eq(nearcache_lookup(nc, &c, 4999, &r), 1);
		cr_assert_eq(nearcache_lookup(nc, &c2, 4999, &r), 1,
		             "a larger cost is denied as well");
		cr_assert_eq(nearcache_lookup(nc, &c, 5000, &r), 0);
		nearcache_free(nc);
	}
}

/* GCRA 1/s, burst 5, denied to cost 1 for 5 ms: Redis tells a cost of 3
 * to come back two emission intervals later, and a cost of 6 that it can
 * never fit; the cache must not answer the first sooner nor the second
 * at all. A fixed window lets any cost within its limit through at its
 * end. */
Test(nearcache,
     a_larger_cost_waits_longer_and_one_that_never_fits_goes_to_redis)
{
	struct nearcache *nc = nearcache_new();
	struct check      c1 = mk("rl:{t:a}", LIM_GCRA, LIM_OP_CHECK, 1);
	struct check      c3 = mk("rl:{t:a}", LIM_GCRA, LIM_OP_CHECK, 3);
	struct check      c6 = mk("rl:{t:a}", LIM_GCRA, LIM_OP_CHECK, 6);
	struct check w1 = mk("rl:{t:w}", LIM_FIXED_WINDOW, LIM_OP_CHECK, 1);
	struct check w10 = mk("rl:{t:w}", LIM_FIXED_WINDOW, LIM_OP_CHECK, 10);
	struct check w11 = mk("rl:{t:w}", LIM_FIXED_WINDOW, LIM_OP_CHECK, 11);
	struct lim_result r;

	limits(&c1, 1, 5);
	limits(&c3, 1, 5);
	limits(&c6, 1, 5);
	nearcache_learn(nc, &c1, &denied, 0, 0);
	cr_assert_eq(nearcache_lookup(nc, &c3, 0, &r), 1);
	cr_assert_eq(r.allowed, 0);
	cr_assert_eq(r.retry_after_us, 5000 + 2 * LIM_USEC_PER_SEC);
	cr_assert_eq(nearcache_lookup(nc, &c6, 0, &r), 0);
	limits(&w1, 10, 1);
	limits(&w10, 10, 1);
	limits(&w11, 10, 1);
	nearcache_learn(nc, &w1, &denied, 0, 0);
	cr_assert_eq(nearcache_lookup(nc, &w10, 0, &r), 1);
	cr_assert_eq(r.retry_after_us, 5000);
	cr_assert_eq(nearcache_lookup(nc, &w11, 0, &r), 0);
	nearcache_free(nc);
}

/* A full set gives up the entry that expires soonest: a long denial
 * outlives a flood of short ones through every set. */
Test(nearcache, a_full_set_evicts_the_entry_expiring_soonest)
{
	struct nearcache *nc = nearcache_new();
	struct check      lng = mk("rl:{t:long}", LIM_GCRA, LIM_OP_CHECK, 1);
	struct lim_result far = { 0, 0, 3600000000LL, 3600000000LL,
		                  3600000000LL };
	struct lim_result r;
	char              key[32];

	nearcache_learn(nc, &lng, &far, 0, 0);
	for (int i = 0; i < 200000; i++) {
		struct check c;

		snprintf(key, sizeof(key), "rl:{t:%d}", i);
		c = mk(key, LIM_GCRA, LIM_OP_CHECK, 1);
		nearcache_learn(nc, &c, &denied, 0, 0);
	}
	cr_assert_eq(nearcache_lookup(nc, &lng, 10000, &r), 1);
	cr_assert_eq(r.retry_after_us, 3600000000LL - 10000);
	nearcache_free(nc);
}

Test(nearcache, a_denial_under_other_limits_does_not_apply)
{
	struct nearcache *nc = nearcache_new();
	struct check      free_plan = mk("rl:{t:a}", LIM_GCRA, LIM_OP_CHECK, 1);
	struct check      pro_plan = free_plan;
	struct lim_result r;

	free_plan.lim.burst = 2;
	pro_plan.lim.burst = 5;
	nearcache_learn(nc, &free_plan, &denied, 0, 0);
	cr_assert_eq(nearcache_lookup(nc, &free_plan, 0, &r), 1);
	cr_assert_eq(nearcache_lookup(nc, &pro_plan, 0, &r), 0);
	nearcache_free(nc);
}

Test(nearcache, once_per_key_until_the_window_ends)
{
	struct nearcache *nc = nearcache_new();
	struct check      a = mk("rl:{s:a}", LIM_GCRA, LIM_OP_CHECK, 1);
	struct check      b = mk("rl:{s:b}", LIM_GCRA, LIM_OP_CHECK, 1);

	cr_assert_eq(nearcache_once(nc, &a, 0, 1000), 1);
	cr_assert_eq(nearcache_once(nc, &a, 500, 1500), 0,
	             "still in its window");
	cr_assert_eq(nearcache_once(nc, &b, 500, 1500), 1, "another key");
	cr_assert_eq(nearcache_once(nc, &a, 1000, 2000), 1, "a new window");
	nearcache_free(nc);
}

/* A reload that changes a rule's algorithm (same key, same numbers) must
 * not answer with the old algorithm's denial: Redis decides it afresh. */
Test(nearcache, a_denial_under_another_algorithm_does_not_apply)
{
	static const enum lim_algo algos[] = { LIM_GCRA, LIM_TOKEN_BUCKET,
		                               LIM_LEAKY_BUCKET,
		                               LIM_FIXED_WINDOW };
	struct lim_result          r;

	for (size_t i = 0; i < sizeof(algos) / sizeof(algos[0]); i++) {
		struct nearcache *nc = nearcache_new();
		struct check      learned =
			mk("rl:{t:a}", algos[i], LIM_OP_CHECK, 1);

		learned.lim.rate = 1;
		learned.lim.period_us = 60000000;
		learned.lim.burst = 1;
		nearcache_learn(nc, &learned, &denied, 0, 0);
		cr_assert_eq(nearcache_lookup(nc, &learned, 0, &r), 1);
		for (size_t j = 0; j < sizeof(algos) / sizeof(algos[0]); j++) {
			struct check other = learned;

			if (j == i)
				continue;
			other.lim.algo = algos[j];
			cr_assert_eq(nearcache_lookup(nc, &other, 0, &r), 0,
			             "learned under %s, looked up under %s",
			             lim_algo_name(algos[i]),
			             lim_algo_name(algos[j]));
		}
		nearcache_free(nc);
	}
}

/* Redis's state is the truth and can be reset (DEL, a restart, a
 * failover): a denial until the end of a month is held NEARCACHE_HOLD_US
 * (under the 1 s a `key reset` promises the pool), not a month, for every
 * algorithm; while held, its Retry-After is the true time left, not the hold.
 */
Test(nearcache, a_long_denial_is_held_briefly_with_the_true_retry_after)
{
	static const enum lim_algo algos[] = { LIM_GCRA, LIM_TOKEN_BUCKET,
		                               LIM_LEAKY_BUCKET,
		                               LIM_FIXED_WINDOW };
	const int64_t              month = 30LL * 86400 * 1000000;
	struct lim_result          far = { 0, 0, month, month, month }, r;

	for (size_t i = 0; i < sizeof(algos) / sizeof(algos[0]); i++) {
		struct nearcache *nc = nearcache_new();
		struct check      c = mk("rl:{t:a}", algos[i], LIM_OP_CHECK, 1);

		nearcache_learn(nc, &c, &far, 1000, 1000);
		cr_assert_eq(nearcache_lookup(nc, &c,
		                              1000 + NEARCACHE_HOLD_US / 2, &r),
		             1);
		cr_assert_eq(r.retry_after_us, month - NEARCACHE_HOLD_US / 2,
		             "the time left in the window, not the hold");
		cr_assert_eq(r.full_us, month - NEARCACHE_HOLD_US / 2);
		cr_assert_eq(
			nearcache_lookup(nc, &c, 1000 + NEARCACHE_HOLD_US, &r),
			0, "%s: after the hold Redis is asked again",
			lim_algo_name(algos[i]));
		cr_assert_eq(nearcache_lookup(nc, &c, 1000 + 10000000, &r), 0,
		             "%s: after 10 s Redis is asked again",
		             lim_algo_name(algos[i]));
		cr_assert_eq(nearcache_count(nc, 1000 + 10000000), 0);
		nearcache_free(nc);
	}
}

/* reserve: a settle's refund moves a key's state back, so a denial "until
 * T" does not hold: a reserving rule's checks never use the near-cache. */
Test(nearcache, a_reserving_rule_is_not_eligible)
{
	struct check c = mk("rl:{t:a}", LIM_GCRA, LIM_OP_CHECK, 1);

	cr_assert_eq(nearcache_eligible(&c), 1);
	c.lim.reserve_lease_us = 600 * LIM_USEC_PER_SEC;
	cr_assert_eq(nearcache_eligible(&c), 0);
}

/* Redis's retry counts from when its script ran, somewhere in the round
 * trip: the cache denies from the send (never longer than Redis would),
 * but the retry it answers must count from the reply, or a Retry-After
 * from here is earlier than Redis's own: a reply 1 ms into a 1.0005 s
 * denial is 2 s of Retry-After (ceil), not 1, at which Redis denies. */
Test(nearcache, a_cached_retry_is_never_earlier_than_redis_said)
{
	struct nearcache       *nc = nearcache_new();
	struct check            c = mk("rl:{t:a}", LIM_GCRA, LIM_OP_CHECK, 1);
	const struct lim_result d = { 0, 0, 1000500, 1000500, 1000500 };
	struct lim_result       r;

	nearcache_learn(nc, &c, &d, 0, 1000);
	cr_assert_eq(nearcache_lookup(nc, &c, 1000, &r), 1);
	cr_expect_geq(r.retry_after_us, 1000500, "retry %lld",
	              (long long)r.retry_after_us);
	cr_expect_geq(r.next_us, 1000500);
	nearcache_free(nc);
}
