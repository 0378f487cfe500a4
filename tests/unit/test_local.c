/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The local tier (local.c): the two-phase rule across a request's checks,
 * shadow checks, the bound on keys under a flood of distinct keys (count
 * and resident memory), eviction order (idle keys first, CLOCK second
 * chance), and pool sharing. The clock is an argument; nothing is timed.
 *
 * Shared by threads: N threads deciding on one key admit exactly its
 * budget, no more and no less, on the CAS path (GCRA, token bucket, leaky
 * bucket meter) and the striped-lock path (windows, sliding log,
 * concurrency); a request of several checks stays atomic under contention;
 * inserts and evictions racing with CAS readers keep the bound; and the
 * token bucket kept as a TAT word decides exactly as its lim_state twin.
 * Every thread uses the same instant, so no budget refills in a test.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "lim_mk.h"
#include "limiter.h"
#include "local.h"

/* ASan's redzones and quarantine make RSS meaningless: the RSS bound is
 * checked in normal builds only (the count bound always). */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

#define S        LIM_USEC_PER_SEC
#define T0       (1000LL * S)
#define NTHREADS 8

/* A request of one check (local_eval_request() with n = 1): what the
 * tests below drive one step at a time. Returns what that returns. */
static int
local_eval(struct local *l, const struct lim_params *p, const char *key,
           size_t keylen, int op, int64_t cost, const char *member,
           size_t memberlen, int64_t now_us, struct lim_result *out)
{
	struct local_check c;
	int                rc;

	memset(&c, 0, sizeof(c));
	c.params = p;
	c.key = key;
	c.keylen = keylen;
	c.op = op;
	c.cost = cost;
	c.member = member;
	c.memberlen = memberlen;
	rc = local_eval_request(l, &c, 1, now_us);
	*out = c.result;
	return rc;
}

static struct lim_result
one(struct local *l, const struct lim_params *p, const char *key, int64_t cost,
    int64_t now)
{
	struct lim_result r;

	local_eval(l, p, key, strlen(key), LIM_OP_CHECK, cost, NULL, 0, now,
	           &r);
	return r;
}

static void
check_init(struct local_check *c, const struct lim_params *p, const char *key,
           int64_t cost, int shadow)
{
	memset(c, 0, sizeof(*c));
	c->params = p;
	c->key = key;
	c->keylen = strlen(key);
	c->op = LIM_OP_CHECK;
	c->cost = cost;
	c->shadow = shadow;
}

Test(local, denial_by_one_check_charges_none)
{
	struct local      *l = local_new(100);
	struct lim_params  g = mk(LIM_GCRA, 10, S, 5);
	struct lim_params  w = mk(LIM_FIXED_WINDOW, 1, 60 * S, 0);
	struct local_check c[2];

	check_init(&c[0], &g, "rl:{a:1}", 1, 0);
	check_init(&c[1], &w, "rl:{b:1}", 1, 0);
	cr_expect_eq(local_eval_request(l, c, 2, T0), 1);
	cr_expect_eq(c[0].result.remaining, 4);
	cr_expect_eq(local_count(l), 2);
	cr_expect_eq(local_eval_request(l, c, 2, T0), 0);
	cr_expect_eq(c[0].result.allowed, 1);
	cr_expect_eq(c[1].result.allowed, 0);
	/* the gcra check was not charged by the vetoed request */
	cr_expect_eq(one(l, &g, "rl:{a:1}", 0, T0).remaining, 4);
	local_free(l);
}

Test(local, peek_reports_the_request_and_charges_nothing)
{
	struct local      *l = local_new(100);
	struct lim_params  g = mk(LIM_GCRA, 10, S, 5);
	struct local_check c[1];

	check_init(&c[0], &g, "rl:{p:1}", 1, 0);
	cr_expect_eq(local_peek_request(l, c, 1, T0), 1);
	cr_expect_eq(c[0].result.allowed, 1);
	cr_expect_eq(c[0].result.remaining, 4);
	cr_expect_eq(local_peek_request(l, c, 1, T0), 1);
	cr_expect_eq(c[0].result.remaining, 4, "a peek changes nothing");
	cr_expect_eq(local_count(l), 0);
	cr_expect_eq(local_eval_request(l, c, 1, T0), 1);
	cr_expect_eq(one(l, &g, "rl:{p:1}", 0, T0).remaining, 4,
	             "the one real request was charged once");
	local_free(l);
}

Test(local, same_key_twice_in_a_request_charges_both)
{
	struct local      *l = local_new(100);
	struct lim_params  g = mk(LIM_GCRA, 1, 3600 * S, 10);
	struct lim_params  t = mk(LIM_TOKEN_BUCKET, 1, 3600 * S, 10);
	struct local_check c[2];

	check_init(&c[0], &g, "g", 1, 0);
	check_init(&c[1], &g, "g", 2, 0);
	cr_expect_eq(local_eval_request(l, c, 2, T0), 1);
	cr_expect_eq(one(l, &g, "g", 0, T0).remaining, 7);
	check_init(&c[0], &t, "t", 1, 0);
	check_init(&c[1], &t, "t", 2, 0);
	cr_expect_eq(local_eval_request(l, c, 2, T0), 1);
	cr_expect_eq(one(l, &t, "t", 0, T0).remaining, 7);
	local_free(l);
}

Test(local, denial_on_a_fresh_key_stores_nothing)
{
	struct local      *l = local_new(100);
	struct lim_params  g = mk(LIM_GCRA, 1, S, 1);
	struct lim_params  w = mk(LIM_SLIDING_LOG, 1, 60 * S, 0);
	struct local_check c[2];

	one(l, &w, "w", 1, T0);
	check_init(&c[0], &g, "fresh", 1, 0);
	check_init(&c[1], &w, "w", 1, 0);
	cr_expect_eq(local_eval_request(l, c, 2, T0), 0);
	cr_expect_eq(local_count(l), 1);
	local_free(l);
}

Test(local, shadow_denial_does_not_veto_and_is_not_charged)
{
	struct local      *l = local_new(100);
	struct lim_params  g = mk(LIM_GCRA, 10, S, 5);
	struct lim_params  w = mk(LIM_FIXED_WINDOW, 1, 60 * S, 0);
	struct local_check c[2];

	check_init(&c[0], &g, "g", 1, 0);
	check_init(&c[1], &w, "w", 2, 1);
	cr_expect_eq(local_eval_request(l, c, 2, T0), 1);
	cr_expect_eq(c[1].result.allowed, -1);
	cr_expect_eq(one(l, &g, "g", 0, T0).remaining, 4);
	cr_expect_eq(one(l, &w, "w", 0, T0).remaining, 1);
	local_free(l);
}

Test(local, force_counts_failures_past_the_limit)
{
	struct local     *l = local_new(10);
	struct lim_params p = mk(LIM_SLIDING_LOG, 3, 900 * S, 0);
	struct lim_result r;
	int               i;

	for (i = 0; i < 5; i++)
		local_eval(l, &p, "u", 1, LIM_OP_FORCE, 1, NULL, 0, T0 + i, &r);
	r = one(l, &p, "u", 1, T0 + 10);
	cr_expect_eq(r.allowed, 0);
	cr_expect_eq(r.retry_after_us, 900 * S - 8);
	local_free(l);
}

Test(local, concurrency_leases_by_member)
{
	struct local     *l = local_new(10);
	struct lim_params p = mk(LIM_CONCURRENCY, 1, 60 * S, 0);
	struct lim_result r;

	local_eval(l, &p, "k", 1, LIM_OP_CHECK, 1, "id-1", 4, T0, &r);
	cr_expect_eq(r.allowed, 1);
	local_eval(l, &p, "k", 1, LIM_OP_CHECK, 1, "id-2", 4, T0, &r);
	cr_expect_eq(r.allowed, 0);
	local_eval(l, &p, "k", 1, LIM_OP_RELEASE, 1, "id-1", 4, T0, &r);
	cr_expect_eq(r.remaining, 1);
	local_eval(l, &p, "k", 1, LIM_OP_CHECK, 1, "id-2", 4, T0, &r);
	cr_expect_eq(r.allowed, 1);
	local_free(l);
}

Test(local, idle_keys_are_evicted_before_busy_ones)
{
	struct local     *l = local_new(100);
	struct lim_params idle = mk(LIM_GCRA, 1, S, 1);
	struct lim_params busy = mk(LIM_GCRA, 1, 3600 * S, 1);
	char              key[32];
	int               i;

	cr_expect_eq(one(l, &busy, "hot", 1, T0).allowed, 1);
	for (i = 0; i < 99; i++) {
		snprintf(key, sizeof(key), "idle-%d", i);
		one(l, &idle, key, 1, T0);
	}
	cr_assert_eq(local_count(l), 100);
	for (i = 0; i < 99; i++) { /* all idle-* are idle by now */
		snprintf(key, sizeof(key), "new-%d", i);
		one(l, &busy, key, 1, T0 + 10 * S);
	}
	cr_expect_eq(local_count(l), 100);
	cr_expect_eq(one(l, &busy, "hot", 1, T0 + 10 * S).allowed, 0,
	             "the busy key was evicted before an idle one");
	local_free(l);
}

Test(local, recently_used_keys_get_a_second_chance)
{
	struct local     *l = local_new(64);
	struct lim_params p = mk(LIM_GCRA, 1, 3600 * S, 1);
	char              key[32];
	int               i, kept = 0;

	for (i = 0; i < 64; i++) {
		snprintf(key, sizeof(key), "k-%d", i);
		one(l, &p, key, 1, T0);
	}
	for (i = 0; i < 200; i++) { /* a flood... */
		snprintf(key, sizeof(key), "flood-%d", i);
		one(l, &p, key, 1, T0);
		one(l, &p, "hot", 1, T0); /* ...and one key in use */
	}
	kept = one(l, &p, "hot", 1, T0).allowed == 0;
	cr_expect(kept, "the key used all along was evicted");
	cr_expect_eq(local_count(l), 64);
	local_free(l);
}

/* A key that is only being denied (a flood on a flood guard) is in use:
 * eviction must not forget it, or its budget comes back within the hour. */
Test(local, a_key_under_a_flood_of_denials_keeps_its_state)
{
	struct local     *l = local_new(4);
	struct lim_params p = mk(LIM_GCRA, 1, 3600 * S, 1);
	char              key[32];

	cr_assert_eq(one(l, &p, "x", 1, T0).allowed, 1);
	for (int i = 0; i < 12; i++) {
		for (int j = 0; j < 10; j++)
			cr_assert_eq(one(l, &p, "x", 1, T0).allowed, 0,
			             "x allowed again after %d other keys", i);
		snprintf(key, sizeof(key), "other-%d", i);
		one(l, &p, key, 1, T0);
	}
	local_free(l);
}

Test(local, idle_entry_state_is_reset)
{
	struct local     *l = local_new(8);
	struct lim_params p = mk(LIM_GCRA, 1, S, 2);

	one(l, &p, "a", 2, T0);
	cr_expect_eq(one(l, &p, "a", 1, T0).allowed, 0);
	cr_expect_eq(one(l, &p, "a", 0, T0 + 2 * S).remaining, 2);
	cr_expect_eq(one(l, &p, "a", 2, T0 + 2 * S).allowed, 1);
	local_free(l);
}

Test(local, overlong_key_is_evaluated_but_never_stored)
{
	struct local     *l = local_new(8);
	struct lim_params p = mk(LIM_GCRA, 1, S, 1);
	static char       key[LOCAL_KEY_MAX + 2];
	struct lim_result r;

	memset(key, 'x', sizeof(key) - 1);
	local_eval(l, &p, key, sizeof(key) - 1, LIM_OP_CHECK, 1, NULL, 0, T0,
	           &r);
	cr_expect_eq(r.allowed, 1);
	cr_expect_eq(local_count(l), 0);
	local_free(l);
}

Test(local, share_divides_limits_among_the_pool)
{
	struct lim_params g = mk(LIM_GCRA, 100, S, 200);
	struct lim_params w = mk(LIM_FIXED_WINDOW, 5, 60 * S, 0);

	local_share(&g, 3);
	cr_expect_eq(g.rate, 33);
	cr_expect_eq(g.burst, 66);
	cr_expect_eq(g.ei_us, S / 33);
	local_share(&w, 10);
	cr_expect_eq(w.rate, 1);
	local_share(&w, 1);
	cr_expect_eq(w.rate, 1);
}

/* Rounded down: the pool together never allows more than the limit. */
Test(local, share_never_exceeds_the_limit_over_the_pool)
{
	for (int limit = 1; limit <= 200; limit++)
		for (int pool = 2; pool <= limit; pool++) {
			struct lim_params w =
				mk(LIM_FIXED_WINDOW, limit, 60 * S, 0);

			local_share(&w, pool);
			cr_expect_leq(w.rate * pool, limit,
			              "%d over %d: %lld each", limit, pool,
			              (long long)w.rate);
			cr_expect_gt((w.rate + 1) * pool, limit);
		}
}

static long
rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char  line[256];
	long  kb = -1;

	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

Test(local, flood_of_a_million_keys_stays_bounded, .timeout = 120)
{
	const size_t      max = 100000;
	struct lim_params p = mk(LIM_GCRA, 1, 3600 * S, 5);
	struct lim_params q = mk(LIM_SLIDING_LOG, 4, 3600 * S, 0);
	struct local     *l;
	char              key[64];
	long              before, after, bound;
	int               i, n;

	before = rss_kb();
	l = local_new(max);
	for (i = 0; i < 1000000; i++) {
		n = snprintf(key, sizeof(key), "rl:{ip:10.%d.%d.%d}", i >> 16,
		             (i >> 8) & 255, i & 255);
		local_eval(l, i % 4 ? &p : &q, key, (size_t)n, LIM_OP_CHECK,
		           1 + i % 3, NULL, 0, T0 + i,
		           &(struct lim_result){ 0 });
		if (i % 4096 == 0)
			cr_assert(local_count(l) <= max, "count %zu at %d",
			          local_count(l), i);
	}
	cr_expect_eq(local_count(l), max);
	after = rss_kb();
	/* entries, plus the sliding-log arrays (4 slots of 8 bytes, with
	 * malloc's 16 bytes of overhead) for a quarter of them */
	bound = (long)((max * local_bytes_per_key(24) + max / 4 * 48) * 2 /
	               1024) +
	        8192;
	cr_expect(UNDER_ASAN || after - before < bound,
	          "RSS grew %ld kB, bound %ld kB", after - before, bound);
	local_free(l);
}

/* ---- shared by threads ------------------------------------------------- */

/* One hammering thread: <tries> requests of the checks <p>[0..n) on keys
 * <keys>[0..n), counting those admitted. */
struct hammer {
	struct local            *l;
	const struct lim_params *p[2];
	const char              *keys[2];
	size_t                   n;
	int                      tries;
	int                      id;
	atomic_int              *admitted;
	pthread_barrier_t       *start;
};

static void *
hammer_run(void *arg)
{
	struct hammer     *h = arg;
	struct local_check c[2];
	char               member[32];

	pthread_barrier_wait(h->start);
	for (int i = 0; i < h->tries; i++) {
		snprintf(member, sizeof(member), "t%d-%d", h->id, i);
		for (size_t j = 0; j < h->n; j++) {
			check_init(&c[j], h->p[j], h->keys[j], 1, 0);
			c[j].member = member;
			c[j].memberlen = strlen(member);
		}
		if (local_eval_request(h->l, c, h->n, T0))
			atomic_fetch_add(h->admitted, 1);
	}
	return NULL;
}

/* Runs NTHREADS hammers of <tries> requests each; returns the admitted. */
static int
hammer(struct local *l, const struct lim_params *p, const char *key,
       const struct lim_params *q, const char *key2, int tries)
{
	pthread_t         t[NTHREADS];
	struct hammer     h[NTHREADS];
	pthread_barrier_t start;
	atomic_int        admitted = 0;

	pthread_barrier_init(&start, NULL, NTHREADS);
	for (int i = 0; i < NTHREADS; i++) {
		h[i] = (struct hammer){
			.l = l,
			.p = { p, q },
			.keys = { key, key2 },
			.n = q ? 2 : 1,
			.tries = tries,
			.id = i,
			.admitted = &admitted,
			.start = &start,
		};
		cr_assert_eq(pthread_create(&t[i], NULL, hammer_run, &h[i]), 0);
	}
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&start);
	return atomic_load(&admitted);
}

/* The key is stored first, so the hammers take the CAS path. */
static void
exactly_the_burst(enum lim_algo a)
{
	struct local      *l = local_new(100000);
	struct lim_params  p = mk(a, 1, 3600 * S, 1000);
	struct local_check c;

	check_init(&c, &p, "hot", 1, 0);
	cr_assert_eq(local_eval_request(l, &c, 1, T0), 1);
	cr_expect_eq(hammer(l, &p, "hot", NULL, NULL, 2000), 999,
	             "%s: 8 threads on one key", lim_algo_name(a));
	c.cost = 0;
	local_peek_request(l, &c, 1, T0);
	cr_expect_eq(c.result.remaining, 0);
	local_free(l);
}

Test(local, threads_on_one_gcra_key_admit_exactly_the_burst)
{
	exactly_the_burst(LIM_GCRA);
}

Test(local, threads_on_one_token_bucket_key_admit_exactly_the_burst)
{
	exactly_the_burst(LIM_TOKEN_BUCKET);
}

Test(local, threads_on_one_leaky_bucket_key_admit_exactly_the_burst)
{
	exactly_the_burst(LIM_LEAKY_BUCKET);
}

/* A fresh key: the first requests race to insert it. */
Test(local, threads_on_a_new_key_admit_exactly_the_burst)
{
	struct local     *l = local_new(100000);
	struct lim_params p = mk(LIM_GCRA, 1, 3600 * S, 500);

	cr_expect_eq(hammer(l, &p, "new", NULL, NULL, 1000), 500);
	cr_expect_eq(local_count(l), 1);
	local_free(l);
}

static void
exactly_the_limit(enum lim_algo a, int64_t limit)
{
	struct local     *l = local_new(100000);
	struct lim_params p = mk(a, limit, 3600 * S, 0);

	cr_expect_eq(hammer(l, &p, "k", NULL, NULL, 2 * (int)limit / NTHREADS),
	             limit, "%s: 8 threads on one key", lim_algo_name(a));
	local_free(l);
}

Test(local, threads_on_one_fixed_window_key_admit_exactly_the_limit)
{
	exactly_the_limit(LIM_FIXED_WINDOW, 1000);
}

Test(local, threads_on_one_sliding_window_key_admit_exactly_the_limit)
{
	exactly_the_limit(LIM_SLIDING_WINDOW, 1000);
}

Test(local, threads_on_one_sliding_log_key_admit_exactly_the_limit)
{
	exactly_the_limit(LIM_SLIDING_LOG, 1000);
}

Test(local, threads_on_one_concurrency_key_hold_exactly_the_limit)
{
	exactly_the_limit(LIM_CONCURRENCY, 200);
}

/* Each request checks a GCRA key (budget 1000, the CAS kind) and a fixed
 * window (limit 300): 300 pass, and the GCRA key is charged for exactly
 * those, none for the requests the window vetoed. */
Test(local, a_request_of_two_checks_is_charged_all_or_nothing)
{
	struct local      *l = local_new(100000);
	struct lim_params  p = mk(LIM_GCRA, 1, 3600 * S, 1000);
	struct lim_params  q = mk(LIM_FIXED_WINDOW, 300, 3600 * S, 0);
	struct local_check c;

	check_init(&c, &p, "a", 1, 0); /* stored: a CAS key */
	local_eval_request(l, &c, 1, T0);
	cr_expect_eq(hammer(l, &p, "a", &q, "b", 200), 300);
	c.cost = 0;
	local_peek_request(l, &c, 1, T0);
	cr_expect_eq(c.result.remaining, 1000 - 1 - 300);
	local_free(l);
}

/* Four threads insert distinct keys (so the stripes evict) while four
 * hammer a hot key on the CAS path: the table stays within max_keys, and
 * the hot key admits its burst (again if an eviction made it forget: the
 * local tier forgets under a flood, it never grows). Meant for ASan too. */
struct churn {
	struct local            *l;
	const struct lim_params *p;
	int                      id;
	size_t                   most; /* keys seen at once */
};

static void *
churn_run(void *arg)
{
	struct churn      *ch = arg;
	struct local_check c;
	char               key[32];

	for (int i = 0; i < 200000; i++) {
		snprintf(key, sizeof(key), "c%d-%d", ch->id, i);
		check_init(&c, ch->p, key, 1, 0);
		local_eval_request(ch->l, &c, 1, T0);
		if (local_count(ch->l) > ch->most)
			ch->most = local_count(ch->l);
	}
	return NULL;
}

struct hot {
	struct local            *l;
	const struct lim_params *p;
	int                      admitted;
};

static void *
hot_run(void *arg)
{
	struct hot        *h = arg;
	struct local_check c;

	for (int i = 0; i < 200000; i++) {
		check_init(&c, h->p, "hot", 1, 0);
		h->admitted += local_eval_request(h->l, &c, 1, T0);
	}
	return NULL;
}

Test(local, evictions_racing_with_cas_readers_keep_the_bound, .timeout = 120)
{
	struct local     *l = local_new(4096);
	struct lim_params p = mk(LIM_GCRA, 1, 3600 * S, 100);
	pthread_t         t[8];
	struct churn      ch[4];
	struct hot        h[4];
	int               admitted = 0;

	for (int i = 0; i < 4; i++) {
		ch[i] = (struct churn){ .l = l, .p = &p, .id = i };
		h[i] = (struct hot){ .l = l, .p = &p };
		pthread_create(&t[i], NULL, churn_run, &ch[i]);
		pthread_create(&t[4 + i], NULL, hot_run, &h[i]);
	}
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 4; i++) {
		admitted += h[i].admitted;
		cr_expect_leq(ch[i].most, 4096);
	}
	cr_expect_eq(local_count(l), 4096);
	cr_expect_geq(admitted, 100);
	local_free(l);
}

/* The token bucket kept as a TAT word against its lim_state twin: the
 * same results at every step of a sequence of costs, times, FORCEs and
 * peeks, at a rate whose EI is not P / N (7/min). */
Test(local, token_bucket_word_decides_as_its_state_twin)
{
	struct local      *l = local_new(16);
	struct lim_params  p = mk(LIM_TOKEN_BUCKET, 7, 60 * S, 5);
	struct lim_state   st;
	struct lim_result  want;
	struct local_check c;
	uint64_t           x = 42;
	int64_t            now = T0;

	lim_state_init(&st);
	for (int i = 0; i < 20000; i++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		now += (int64_t)(x >> 33) % (12 * S);
		check_init(&c, &p, "tb", 1, 0);
		c.op = (x >> 20) % 8 == 0   ? LIM_OP_FORCE
		       : (x >> 20) % 8 == 1 ? LIM_OP_PEEK
		                            : LIM_OP_CHECK;
		c.cost = (int64_t)((x >> 24) % 4);
		if (lim_eval(&p, &st, c.op, c.cost, 0, now, &want) &&
		    !lim_vetoes(c.op, 0, &want))
			lim_commit(&p, &st, c.op, c.cost, 0, now);
		local_eval_request(l, &c, 1, now);
		cr_assert_eq(c.result.allowed, want.allowed, "step %d", i);
		cr_assert_eq(c.result.remaining, want.remaining, "step %d", i);
		cr_assert_eq(c.result.retry_after_us, want.retry_after_us,
		             "step %d", i);
		cr_assert_eq(c.result.next_us, want.next_us, "step %d", i);
		cr_assert_eq(c.result.full_us, want.full_us, "step %d", i);
	}
	lim_state_deinit(&st);
	local_free(l);
}
/* A token bucket's word written under a slow rate and read under a fast
 * one (a reload, a plan or an override raising the rate): owed far more
 * units than a FORCE can owe. It was (burst - units) * 10^6 past int64,
 * undefined, in practice a full bucket: the key, FORCEd to its floor,
 * passed at once. Now held at the floor, -burst: the word keeps the debt
 * in time (local.c's comment), so the key stays refused until the old
 * word's time comes near, as for any smaller debt. */
Test(local, token_bucket_word_of_a_slower_rate_is_held_at_the_floor)
{
	struct local     *l = local_new(16);
	struct lim_params slow = mk(LIM_TOKEN_BUCKET, 1, 100 * 86400 * S, 1);
	struct lim_params fast = mk(LIM_TOKEN_BUCKET, 1000000, S, 10);
	struct lim_result r;

	local_eval(l, &slow, "tb", 2, LIM_OP_FORCE, 5, NULL, 0, T0, &r);
	r = one(l, &fast, "tb", 1, T0);
	cr_expect_eq(r.allowed, 0, "owed past the floor: refused, not full");
	cr_expect_eq(r.remaining, 0);
	r = one(l, &fast, "tb", 1, T0 + 3600 * S);
	cr_expect_eq(r.allowed, 0, "an hour on, the debt (200 days) holds");
	local_free(l);
}

/* Workers read the clock (util_now_us) before they take the stripe's
 * lock: under contention a request stamped a µs before a window boundary
 * can be committed after one stamped just after it. The local tier must
 * not let that request overwrite the newer window's state: the sliding
 * window then forgets the whole previous window (its prev weight). */
Test(local, sliding_window_stale_stamp_at_a_boundary_forgets_the_window)
{
	struct local     *l = local_new(100);
	struct lim_params p = mk(LIM_SLIDING_WINDOW, 10, 3600 * S, 0);
	int64_t           b = 1000 * 3600 * S; /* a window boundary */
	struct lim_result r;
	int               rc;

	rc = local_eval(l, &p, "sw", 2, LIM_OP_CHECK, 8, NULL, 0, b - 10 * S,
	                &r);
	cr_assert_eq(rc, 1);
	/* worker B, stamped b + 1, commits first */
	rc = local_eval(l, &p, "sw", 2, LIM_OP_CHECK, 1, NULL, 0, b + 1, &r);
	cr_assert_eq(rc, 1);
	/* worker A, stamped b - 1 before B, commits second */
	rc = local_eval(l, &p, "sw", 2, LIM_OP_CHECK, 1, NULL, 0, b - 1, &r);
	cr_assert_eq(rc, 1, "9 of 10 in the old window");
	/* truth: prev = 9, cur = 1: the estimate at b + 2 is 10, full */
	rc = local_eval(l, &p, "sw", 2, LIM_OP_CHECK, 1, NULL, 0, b + 2, &r);
	cr_expect_eq(rc, 0,
	             "the limit is spent (prev 9 at full weight + cur 1), "
	             "yet allowed with remaining %lld",
	             (long long)r.remaining);
	local_free(l);
}

/* The same for the fixed window: a request stamped in a window already
 * closed is counted against a fresh count (the newer window's state is
 * not its own), and the newer window's count is then lost. */
Test(local, fixed_window_stale_stamp_at_a_boundary_loses_the_new_count)
{
	struct local     *l = local_new(100);
	struct lim_params p = mk(LIM_FIXED_WINDOW, 3, 3600 * S, 0);
	int64_t           b = 1000 * 3600 * S;
	struct lim_result r;
	int               rc;

	rc = local_eval(l, &p, "fw", 2, LIM_OP_CHECK, 3, NULL, 0, b - 10 * S,
	                &r);
	cr_assert_eq(rc, 1);
	rc = local_eval(l, &p, "fw", 2, LIM_OP_CHECK, 3, NULL, 0, b + 1,
	                &r); /* B */
	cr_assert_eq(rc, 1);
	rc = local_eval(l, &p, "fw", 2, LIM_OP_CHECK, 1, NULL, 0, b - 1,
	                &r); /* A */
	cr_expect_eq(rc, 0, "the old window was full (3 of 3)");
	rc = local_eval(l, &p, "fw", 2, LIM_OP_CHECK, 1, NULL, 0, b + 2, &r);
	cr_expect_eq(rc, 0,
	             "the new window holds 3 of 3, yet allowed with "
	             "remaining %lld",
	             (long long)r.remaining);
	local_free(l);
}

/* limit: 4294967296 (LIM_COST_MAX) passes lim_params_init(), and the
 * policy's limit: range (up to 1e12); lim_log.c casts it to uint32_t:
 * 0. A concurrency lease on a fresh key then reads ts[n - 1] with n = 0
 * (index UINT32_MAX of a NULL array) and wraps n: the agent crashes on
 * the first request of a store: local (or fail: local) rule. */
Test(local, concurrency_limit_two_to_the_32_takes_a_lease)
{
	struct local     *l = local_new(100);
	struct lim_params p = mk(LIM_CONCURRENCY, LIM_COST_MAX, 60 * S, 0);
	struct lim_result r;
	int               rc;

	rc = local_eval(l, &p, "c", 1, LIM_OP_CHECK, 1, "req-1", 5, 1000 * S,
	                &r);
	cr_expect_eq(rc, 1);
	rc = local_eval(l, &p, "c", 1, LIM_OP_CHECK, 0, "peek", 4, 1000 * S,
	                &r);
	cr_expect_eq(r.remaining, LIM_COST_MAX - 1, "one lease held: %lld",
	             (long long)r.remaining);
	local_free(l);
}

/* A sliding log keeps an entry per unit charged: its limit stops at
 * LIM_LOG_MAX (one of 2^32 made the local tier's capacity doubling wrap
 * and spin, and the script loop over billions of ZADDs), and below it
 * the twin records every unit. */
Test(local, sliding_log_limit_is_capped_and_records_its_entries)
{
	struct lim_params p = { .algo = LIM_SLIDING_LOG,
		                .rate = LIM_LOG_MAX + 1,
		                .period_us = 60 * S };
	struct lim_state  s;
	struct lim_result r;
	const char       *err;

	cr_assert_eq(lim_params_init(&p, &err), -1);
	cr_assert(strstr(err, "sliding-window") != NULL, "%s", err);
	p = mk(LIM_SLIDING_LOG, LIM_LOG_MAX, 60 * S, 0);
	lim_state_init(&s);
	cr_assert(lim_eval(&p, &s, LIM_OP_FORCE, LIM_LOG_MAX, 0, 1000 * S, &r));
	lim_commit(&p, &s, LIM_OP_FORCE, LIM_LOG_MAX, 0, 1000 * S);
	lim_eval(&p, &s, LIM_OP_CHECK, 0, 0, 1000 * S, &r);
	cr_expect_eq(r.remaining, 0, "all charged: %lld",
	             (long long)r.remaining);
	lim_state_deinit(&s);
}

/* fail: local divides rate and burst by pool_size; when the divided
 * parameters fail lim_params_init() (the emission interval grows by more
 * than the burst shrinks: 3/d over 2 agents is 1/d), local_share() keeps
 * the WHOLE limit for every agent: the pool admits pool_size times it. */
Test(local, share_never_falls_back_to_the_whole_limit)
{
	struct lim_params p = mk(LIM_GCRA, 3, 86400 * S, 9000);
	struct lim_params q = p;

	local_share(&q, 2);
	cr_expect_leq(q.burst * 2, p.burst,
	              "each of 2 agents may burst %lld of %lld",
	              (long long)q.burst, (long long)p.burst);
	cr_expect_leq(2 * p.period_us / q.ei_us, p.rate,
	              "rate per agent * 2 within the rule's");
}
