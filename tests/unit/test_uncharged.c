/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A vetoed request's allowed check must be reported as the key
 * really is (uncharged): r and t equal what a peek (CHECK, cost 0) of the
 * same state at the same instant reports, for every algorithm, against
 * the real C twins (limiter.h's contract), not hand-made results.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "decide.h"

static struct rule  rules[2];
static struct check checks[2];

static void
mk(struct lim_params *p, enum lim_algo a, int64_t rate, int64_t per,
   int64_t burst, int64_t max_delay)
{
	const char *err;

	memset(p, 0, sizeof(*p));
	p->algo = a;
	p->rate = rate;
	p->period_us = per;
	p->burst = burst;
	p->max_delay_us = max_delay;
	cr_assert_eq(lim_params_init(p, &err), 0, "%s", err);
}

/* One algorithm: <runs> random states, each checked at a random now. */
static int
sweep(const struct lim_params *p, int maxcost, unsigned seed, char *why,
      size_t whylen)
{
	srand(seed);
	for (int run = 0; run < 3000; run++) {
		struct lim_state  s;
		struct lim_result ch, pk;
		struct outcome    out[2];
		struct decision   d;
		int64_t           now = 1000 * LIM_USEC_PER_SEC;
		int               k = rand() % 12;
		int64_t           cost = 1 + rand() % maxcost;
		char              want[128];

		lim_state_init(&s);
		for (int i = 0; i < k; i++) { /* a history */
			struct lim_result tmp;
			uint64_t          m = (uint64_t)rand();
			int64_t           hc = 1 + rand() % maxcost;

			now += rand() % (p->period_us / 4 + 1);
			if (lim_eval(p, &s, LIM_OP_CHECK, hc, m, now, &tmp) ==
			    1)
				lim_commit(p, &s, LIM_OP_CHECK, hc, m, now);
		}
		now += rand() % (p->period_us / 2 + 1);
		lim_eval(p, &s, LIM_OP_CHECK, cost, 4242, now, &ch);
		lim_eval(p, &s, LIM_OP_CHECK, 0, 4242, now, &pk);
		lim_state_deinit(&s);
		if (ch.allowed != 1)
			continue;
		checks[1].lim = *p;
		checks[1].cost = cost;
		memset(out, 0, sizeof(out));
		out[0].src = out[1].src = SRC_STORE;
		out[0].res =
			(struct lim_result){ 0, 0, 2000000, 2000000, 2000000 };
		out[1].res = ch;
		decide(checks, out, 2, HEADERS_IETF, &d);
		snprintf(want, sizeof(want),
		         "\"ip\";r=0;t=2, \"tenant\";r=%lld;t=%lld",
		         (long long)pk.remaining,
		         (long long)decide_ceil_s(pk.next_us));
		if (strcmp(d.ratelimit, want) != 0) {
			snprintf(why, whylen,
			         "algo %s cost %lld: got [%.200s] want [%s] "
			         "(charged r=%lld next=%lld full=%lld)",
			         lim_algo_name(p->algo), (long long)cost,
			         d.ratelimit, want, (long long)ch.remaining,
			         (long long)ch.next_us, (long long)ch.full_us);
			return -1;
		}
	}
	return 0;
}

static void
setup(void)
{
	memset(rules, 0, sizeof(rules));
	memset(checks, 0, sizeof(checks));
	static char n0[] = "ip", n1[] = "tenant";

	rules[0].name = n0;
	rules[1].name = n1;
	for (int i = 0; i < 2; i++) {
		rules[i].headers = true;
		checks[i].rule = &rules[i];
		checks[i].op = LIM_OP_CHECK;
		checks[i].cost = 1;
	}
	mk(&checks[0].lim, LIM_GCRA, 60, 60 * LIM_USEC_PER_SEC, 10, 0);
}

TestSuite(uncharged, .init = setup, .timeout = 30);

#define SWEEP(name, algo, rate, per, burst, md, maxcost)                       \
	Test(uncharged, name)                                                  \
	{                                                                      \
		struct lim_params p;                                           \
		char              why[2048] = "";                              \
                                                                               \
		mk(&p, algo, rate, per, burst, md);                            \
		cr_assert_eq(sweep(&p, maxcost, 7, why, sizeof(why)), 0, "%s", \
		             why);                                             \
	}

SWEEP(gcra, LIM_GCRA, 10, 10 * LIM_USEC_PER_SEC, 5, 0, 3)
SWEEP(token_bucket, LIM_TOKEN_BUCKET, 10, 10 * LIM_USEC_PER_SEC, 5, 0, 3)
SWEEP(leaky_meter, LIM_LEAKY_BUCKET, 10, 10 * LIM_USEC_PER_SEC, 5, 0, 3)
SWEEP(leaky_delay_cost1, LIM_LEAKY_BUCKET, 10, 10 * LIM_USEC_PER_SEC, 5,
      10 * LIM_USEC_PER_SEC, 1)
SWEEP(leaky_delay, LIM_LEAKY_BUCKET, 10, 10 * LIM_USEC_PER_SEC, 5,
      10 * LIM_USEC_PER_SEC, 3)
SWEEP(fixed_window, LIM_FIXED_WINDOW, 10, 10 * LIM_USEC_PER_SEC, 0, 0, 3)
SWEEP(sliding_window, LIM_SLIDING_WINDOW, 10, 60 * LIM_USEC_PER_SEC, 0, 0, 3)
SWEEP(sliding_log, LIM_SLIDING_LOG, 10, 10 * LIM_USEC_PER_SEC, 0, 0, 3)
SWEEP(concurrency, LIM_CONCURRENCY, 5, 10 * LIM_USEC_PER_SEC, 0, 0, 1)
SWEEP(leaky_delay_costly, LIM_LEAKY_BUCKET, 10, 10 * LIM_USEC_PER_SEC, 5,
      10 * LIM_USEC_PER_SEC, 12)
SWEEP(sliding_window_costly, LIM_SLIDING_WINDOW, 7, 9 * LIM_USEC_PER_SEC, 0, 0,
      5)
