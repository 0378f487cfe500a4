/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The limiter parameters the tests build: an algorithm, N per period and a
 * burst, validated by lim_params_init() as the policy loader does, so a
 * test never runs on parameters the agent would refuse. Shared by the unit
 * suites (test_limiter, test_local, test_reserve) and the script's twin
 * suite (tests/integration/test_script.c); the Makefile puts tests/unit on
 * their include path. Needs Criterion: a bad vector fails the test there.
 */
#ifndef LIM_MK_H
#define LIM_MK_H

#include <criterion/criterion.h>
#include <string.h>

#include "limiter.h"

/* <rate> per <period> µs, <burst> (0: the algorithm's default), checked
 * by lim_params_init(); returns the parameters by value. */
static inline struct lim_params
mk(enum lim_algo a, int64_t rate, int64_t period, int64_t burst)
{
	struct lim_params p;
	const char       *err = NULL;

	memset(&p, 0, sizeof(p));
	p.algo = a;
	p.rate = rate;
	p.period_us = period;
	p.burst = burst;
	cr_assert_eq(lim_params_init(&p, &err), 0, "init: %s", err);
	return p;
}

/* mk(), for a reserving rule: reservations held <lease> µs at most (set
 * after lim_params_init(), as policy.c does). */
static inline struct lim_params
mk_lease(enum lim_algo a, int64_t rate, int64_t period, int64_t burst,
         int64_t lease)
{
	struct lim_params p = mk(a, rate, period, burst);

	p.reserve_lease_us = lease;
	return p;
}

#endif /* LIM_MK_H */
