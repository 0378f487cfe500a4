/* SPDX-License-Identifier: Apache-2.0 */
/*
 * localbench: contention in the local tier (issue 17: "2 to 8 threads on
 * one hot key and on 1M cold keys, against today's per-worker tables").
 * Each round runs T threads (2, 4, 8) of GCRA decisions through
 * local_eval_request(), a warm-up then a timed stretch, in two designs:
 *   shared:     one table for the agent, every thread on it (local.c now);
 *   per-thread: a table per thread of max_keys / T keys, what each worker
 *               kept before, emulated with the same API (its stripe locks
 *               are then never contended: the old table had none, so
 *               per-thread here pays a little more than the old code did).
 * Workloads: one hot key (every decision charges it: a huge burst, and
 * each thread's clock advances 1 µs per decision), and keys drawn at
 * random from 1M (HAProxy spreads a key's requests over the workers, so a
 * per-thread table of 1M / T keys sees all 1M and evicts; the shared one,
 * sized for 1M, is filled first and keeps them all).
 *
 * Prints one line per workload and thread count:
 *   <workload> threads=T cpu_ns shared=S per_thread=P ratio=S/P
 *     wall_ns shared=S' per_thread=P'
 * cpu_ns: the threads' CPU time (CLOCK_THREAD_CPUTIME_ID) over their
 * decisions, what contention costs whatever else runs on the machine;
 * wall_ns: the timed stretch over all threads' decisions (past the core
 * count threads share cores, and other load shows).
 *
 *   localbench [-m MS]     MS: timed stretch per round (default 400)
 *
 * Not part of the agent: a measurement, kept so anyone can rerun it.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "limiter.h"
#include "local.h"

#define COLD_KEYS   1000000
#define MAX_THREADS 8
#define WARM_MS     100

static char (*keys)[16]; /* the 1M cold keys */
static size_t            keylens[COLD_KEYS];
static struct lim_params params;
static atomic_int        phase; /* 0 warm-up, 1 timed, 2 stop */

struct worker {
	pthread_t     t;
	struct local *l;
	int           cold;
	uint64_t      seed;
	uint64_t      done; /* decisions in the timed stretch */
	double        cpu;  /* this thread's CPU seconds in it */
};

static double
clock_s(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

static void
decide(struct local *l, const char *key, size_t len, int64_t now)
{
	struct local_check c;

	memset(&c, 0, sizeof(c));
	c.params = &params;
	c.key = key;
	c.keylen = len;
	c.op = LIM_OP_CHECK;
	c.cost = 1;
	local_eval_request(l, &c, 1, now);
}

static void *
run(void *arg)
{
	struct worker *w = arg;
	int64_t        now = 1000LL * LIM_USEC_PER_SEC;
	uint64_t       x = w->seed, n = 0;
	double         cpu0 = 0;
	size_t         k;
	int            ph;

	while ((ph = atomic_load_explicit(&phase, memory_order_relaxed)) < 2) {
		if (ph == 1 && n == 0)
			cpu0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
		for (int i = 0; i < 64; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			k = w->cold ? (size_t)(x % COLD_KEYS) : 0;
			decide(w->l, w->cold ? keys[k] : "hot",
			       w->cold ? keylens[k] : 3, now++);
		}
		if (ph == 1)
			n += 64;
	}
	w->done = n;
	w->cpu = n ? clock_s(CLOCK_THREAD_CPUTIME_ID) - cpu0 : 0;
	return NULL;
}

struct ns {
	double cpu, wall;
};

/* One round: <n> threads on <shared>, or each on a table of its own.
 * Returns CPU and wall ns per decision. */
static struct ns
round_ns(int n, int cold, struct local *shared, int ms)
{
	struct worker w[MAX_THREADS];
	uint64_t      total = 0;
	double        t0, t1, cpu = 0;

	atomic_store(&phase, 0);
	for (int i = 0; i < n; i++) {
		w[i] = (struct worker){
			.l = shared ? shared
			            : local_new(cold ? COLD_KEYS / (size_t)n
			                             : 16),
			.cold = cold,
			.seed = 0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1),
		};
		pthread_create(&w[i].t, NULL, run, &w[i]);
	}
	sleep_ms(WARM_MS);
	atomic_store(&phase, 1);
	t0 = clock_s(CLOCK_MONOTONIC);
	sleep_ms(ms);
	atomic_store(&phase, 2);
	t1 = clock_s(CLOCK_MONOTONIC);
	for (int i = 0; i < n; i++) {
		pthread_join(w[i].t, NULL);
		total += w[i].done;
		cpu += w[i].cpu;
		if (!shared)
			local_free(w[i].l);
	}
	if (total == 0)
		return (struct ns){ 0, 0 };
	return (struct ns){ cpu * 1e9 / (double)total,
		            (t1 - t0) * 1e9 / (double)total };
}

int
main(int argc, char **argv)
{
	static const int threads[] = { 2, 4, 8 };
	struct local    *hot, *cold;
	const char      *err;
	int              ms = 400, opt;

	while ((opt = getopt(argc, argv, "m:")) != -1)
		if (opt == 'm')
			ms = atoi(optarg);
		else
			return fprintf(stderr, "usage: localbench [-m MS]\n"),
			       2;
	params = (struct lim_params){ .algo = LIM_GCRA,
		                      .rate = 1000000,
		                      .period_us = LIM_USEC_PER_SEC,
		                      .burst = 1LL << 40 };
	if (lim_params_init(&params, &err) != 0)
		return fprintf(stderr, "localbench: %s\n", err), 1;
	keys = malloc(sizeof(*keys) * COLD_KEYS);
	if (keys == NULL)
		return 1;
	for (int i = 0; i < COLD_KEYS; i++)
		keylens[i] =
			(size_t)snprintf(keys[i], sizeof(keys[i]), "ip:%d", i);
	hot = local_new(COLD_KEYS);
	cold = local_new(COLD_KEYS);
	for (int i = 0; i < COLD_KEYS; i++) /* the shared table, filled */
		decide(cold, keys[i], keylens[i], 1000LL * LIM_USEC_PER_SEC);
	printf("# localbench: GCRA decisions, %ld cores, %d ms per round\n",
	       sysconf(_SC_NPROCESSORS_ONLN), ms);
	for (int c = 0; c < 2; c++)
		for (size_t i = 0; i < sizeof(threads) / sizeof(*threads);
		     i++) {
			int       n = threads[i];
			struct ns s = round_ns(n, c, c ? cold : hot, ms);
			struct ns p = round_ns(n, c, NULL, ms);

			printf("%s threads=%d cpu_ns shared=%.0f per_thread=%.0f "
			       "ratio=%.2f wall_ns shared=%.0f per_thread=%.0f\n",
			       c ? "cold_1m" : "hot_key", n, s.cpu, p.cpu,
			       p.cpu > 0 ? s.cpu / p.cpu : 0, s.wall, p.wall);
			fflush(stdout);
		}
	local_free(hot);
	local_free(cold);
	free(keys);
	return 0;
}
