/* SPDX-License-Identifier: Apache-2.0 */
/* link.h's pure parts: the reconnect backoff and the circuit breaker. */
#include <criterion/criterion.h>

#include "link.h"

Test(backoff, each_delay_is_jittered_over_the_upper_half_of_its_step)
{
	struct backoff b;
	int64_t        step = 50000;

	backoff_init(&b, 50000, 1000000, 7);
	for (int i = 0; i < 12; i++) {
		int64_t d = backoff_next(&b);

		cr_assert(d >= step / 2 && d <= step,
		          "try %d: %lld not in [%lld, %lld]", i, (long long)d,
		          (long long)step / 2, (long long)step);
		step = step * 2 > 1000000 ? 1000000 : step * 2;
	}
}

Test(backoff, the_step_is_capped_and_a_reset_starts_again_from_the_minimum)
{
	struct backoff b;

	backoff_init(&b, 50000, 2000000, 1);
	for (int i = 0; i < 40; i++)
		cr_assert_leq(backoff_next(&b), 2000000);
	cr_assert_eq(b.cur_us, 2000000);
	backoff_reset(&b);
	cr_assert_leq(backoff_next(&b), 50000);
}

Test(backoff, the_jitter_spreads_the_delays)
{
	struct backoff a, b;
	int            differ = 0;

	for (unsigned s = 1; s < 20; s++) {
		backoff_init(&a, 1000000, 1000000, s);
		backoff_init(&b, 1000000, 1000000, s + 100);
		differ += backoff_next(&a) != backoff_next(&b);
	}
	cr_assert_gt(differ, 10);
}

Test(breaker, opens_after_the_threshold_and_refuses_during_the_cooldown)
{
	struct breaker b = { 0 };

	for (int i = 1; i < BREAKER_FAILS; i++) {
		cr_assert_eq(breaker_fail(&b, 10.0), 0);
		cr_assert(breaker_admit(&b, 10.0));
	}
	cr_assert_eq(breaker_fail(&b, 10.0), 1, "the fifth failure opens it");
	cr_assert(breaker_tripped(&b));
	cr_assert(breaker_is_open(&b, 10.0 + BREAKER_COOLDOWN / 2));
	cr_assert_not(breaker_admit(&b, 10.0 + BREAKER_COOLDOWN / 2));
}

Test(breaker, half_open_admits_one_probe_until_its_outcome)
{
	struct breaker b = { 0 };
	double         t = 10.0 + BREAKER_COOLDOWN + 0.01;

	for (int i = 0; i < BREAKER_FAILS; i++)
		breaker_fail(&b, 10.0);
	cr_assert_not(breaker_is_open(&b, t));
	cr_assert(breaker_admit(&b, t), "the probe");
	cr_assert_not(breaker_admit(&b, t + 0.1), "one probe at a time");
	cr_assert(breaker_admit(&b, t + BREAKER_PROBE_S),
	          "a lost probe is replaced");
	cr_assert_eq(breaker_fail(&b, t + BREAKER_PROBE_S), 0, "already open");
	cr_assert_not(breaker_admit(&b, t + BREAKER_PROBE_S + 0.1),
	              "the failed probe pushed the cooldown on");
	cr_assert_eq(breaker_ok(&b), 1, "a good call closes it");
	cr_assert_not(breaker_tripped(&b));
	cr_assert(breaker_admit(&b, t));
	cr_assert_eq(breaker_ok(&b), 0,
	             "closing a closed breaker is no transition");
}

Test(breaker, a_success_restarts_the_count)
{
	struct breaker b = { 0 };

	for (int i = 0; i < BREAKER_FAILS - 1; i++)
		breaker_fail(&b, 1.0);
	breaker_ok(&b);
	for (int i = 0; i < BREAKER_FAILS - 1; i++)
		cr_assert_eq(breaker_fail(&b, 1.0), 0);
	cr_assert_not(breaker_tripped(&b));
}
