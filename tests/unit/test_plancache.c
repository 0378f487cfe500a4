/* SPDX-License-Identifier: Apache-2.0 */
/* plancache: waiting for the first answer (coalesced), negative caching,
 * failures, long tenant ids, and bounded eviction one entry at a time.
 * The fetch is a fake that records each HGET; a test answers it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "plancache.h"
#include "util.h"

#define MAXF 64

struct fetch {
	char  *hash;
	char  *field;
	size_t len;
	void (*cb)(void *, const char *, size_t, int);
	void *arg;
};

static struct fetch fetches[MAXF];
static int          nfetch;
static int          down;        /* the fake store refuses */
static int          sync_answer; /* answer "pro" inside the call */

static int
fake_fetch(void *ctx, const char *hash, const char *field, size_t len,
           void (*cb)(void *, const char *, size_t, int), void *arg)
{
	if (down)
		return -1;
	if (sync_answer) {
		nfetch++;
		cb(arg, "pro", 3, 0);
		return 0;
	}
	cr_assert_lt(nfetch, MAXF);
	fetches[nfetch] = (struct fetch){ xstrdup(hash), xstrndup(field, len),
		                          len, cb, arg };
	nfetch++;
	return 0;
}

/* Answers fetch <i> with <val> (NULL: absent), or fails it (<err>). */
static void
answer(int i, const char *val, int err)
{
	fetches[i].cb(fetches[i].arg, val, val ? strlen(val) : 0, err);
}

static int64_t now;
static int64_t
clock_now(void)
{
	return now;
}

static void wake_cb(struct plancache_waiter *pw, int ok);

static struct plancache       *pc; /* the suite's: 16 entries, 4 KiB */
static struct plancache_waiter w;  /* a waiter on it */

/* Replaces the suite's cache with one of <max> entries, <bytes> bytes. */
static void
use(size_t max, size_t bytes)
{
	plancache_free(pc);
	pc = plancache_new_fetch(fake_fetch, NULL, max, bytes);
	plancache_waiter_init(&w, pc, wake_cb);
}

static struct plan   plans[] = { { .name = (char[]){ "free" } },
	                         { .name = (char[]){ "pro" } } };
static struct policy pol;

static void
setup(void)
{
	pol.plans = plans;
	pol.nplans = 2;
	pol.plan_lookup.redis_hash = (char[]){ "plans" };
	pol.plan_lookup.redis_hash_id = 1;
	pol.plan_lookup.default_plan = 0;
	pol.plan_lookup.cache_us = 30 * LIM_USEC_PER_SEC;
	util_now_us = clock_now;
	now = 1000;
	nfetch = down = sync_answer = 0;
	pc = NULL;
	use(16, 4096);
}

static void
teardown(void)
{
	plancache_free(pc);
	for (int i = 0; i < nfetch && i < MAXF; i++) {
		free(fetches[i].hash);
		free(fetches[i].field);
	}
}

static int woken, woken_ok;

static void
wake_cb(struct plancache_waiter *pw, int ok)
{
	woken++;
	woken_ok += ok;
}

static int
resolve(struct plancache_waiter *pw, const char *t)
{
	return plancache_resolve(pw, &pol, t, strlen(t));
}

TestSuite(plancache, .init = setup, .fini = teardown);

Test(plancache, a_first_lookup_waits_for_redis_and_is_coalesced)
{
	struct plancache_waiter a, b, c;

	plancache_waiter_init(&a, pc, wake_cb);
	plancache_waiter_init(&b, pc, wake_cb);
	plancache_waiter_init(&c, pc, wake_cb);
	cr_assert_eq(resolve(&a, "bigco"), POLICY_PLAN_WAIT);
	cr_assert_eq(resolve(&b, "bigco"), POLICY_PLAN_WAIT);
	cr_assert_eq(nfetch, 1, "one HGET for both");
	cr_assert_str_eq(fetches[0].field, "bigco");
	answer(0, "pro", 0);
	cr_assert_eq(woken, 2);
	cr_assert_eq(woken_ok, 2);
	cr_assert_eq(resolve(&c, "bigco"), 1, "pro, from memory");
	cr_assert_eq(nfetch, 1);
	cr_assert_null(c.pprev, "an answered lookup parks nothing");
}

Test(plancache, a_tenant_not_in_the_hash_is_cached_too)
{
	cr_assert_eq(resolve(&w, "nobody"), POLICY_PLAN_WAIT);
	answer(0, NULL, 0);
	cr_assert_eq(woken_ok, 1);
	for (int i = 0; i < 100; i++)
		cr_assert_eq(resolve(&w, "nobody"), -1);
	cr_assert_eq(nfetch, 1, "no round trip per request");
	/* past the cache time: answered at once, refreshed in the background */
	now += pol.plan_lookup.cache_us;
	cr_assert_eq(resolve(&w, "nobody"), -1);
	cr_assert_eq(nfetch, 2);
	cr_assert_null(w.pprev);
	answer(1, "pro", 0);
	cr_assert_eq(resolve(&w, "nobody"), 1, "the new answer applies");
}

Test(plancache, a_plan_name_the_policy_lacks_means_the_default)
{
	resolve(&w, "odd");
	answer(0, "gold", 0);
	cr_assert_eq(resolve(&w, "odd"), -1);
}

Test(plancache, a_failed_lookup_wakes_its_waiters_and_caches_nothing)
{
	cr_assert_eq(resolve(&w, "bigco"), POLICY_PLAN_WAIT);
	answer(0, NULL, -1);
	cr_assert_eq(woken, 1);
	cr_assert_eq(woken_ok, 0);
	w.nowait = 1;
	cr_assert_eq(resolve(&w, "bigco"), POLICY_PLAN_UNKNOWN);
	cr_assert_eq(nfetch, 1, "nowait asks nothing");
	w.nowait = 0;
	now += PLANCACHE_RETRY_US;
	cr_assert_eq(resolve(&w, "bigco"), POLICY_PLAN_WAIT, "asked again");
	cr_assert_eq(nfetch, 2);
}

Test(plancache, a_failed_lookup_is_not_asked_again_before_the_retry_time)
{
	cr_assert_eq(resolve(&w, "bigco"), POLICY_PLAN_WAIT);
	answer(0, NULL, -1); /* say, WRONGTYPE: not a hash */
	for (int i = 0; i < 100; i++)
		cr_assert_eq(resolve(&w, "bigco"), POLICY_PLAN_UNKNOWN,
		             "fail modes at once, no wait");
	now += PLANCACHE_RETRY_US - 1;
	cr_assert_eq(resolve(&w, "bigco"), POLICY_PLAN_UNKNOWN);
	cr_assert_eq(nfetch, 1, "no round trip per request");
	now += 1;
	cr_assert_eq(resolve(&w, "bigco"), POLICY_PLAN_WAIT);
	cr_assert_eq(nfetch, 2);
	answer(1, "pro", 0);
	cr_assert_eq(resolve(&w, "bigco"), 1);
}

Test(plancache, a_known_plan_survives_a_failed_refresh)
{
	resolve(&w, "bigco");
	answer(0, "pro", 0);
	now += pol.plan_lookup.cache_us;
	cr_assert_eq(resolve(&w, "bigco"), 1, "stale, at once");
	answer(1, NULL, -1);
	for (int i = 0; i < 10; i++)
		cr_assert_eq(resolve(&w, "bigco"), 1);
	cr_assert_eq(nfetch, 2, "the refresh waits for the retry time");
	now += PLANCACHE_RETRY_US;
	cr_assert_eq(resolve(&w, "bigco"), 1);
	cr_assert_eq(nfetch, 3, "then refreshes again");
}

/* A reload that shortens plan_lookup.cache: the answers held are as old
 * as they are, and are refreshed once past the new cache time, not kept
 * for the old one (an HSET then applies within the new cache time). */
Test(plancache, a_reload_shortening_the_cache_time_applies_to_held_answers)
{
	pol.plan_lookup.cache_us = 3600 * LIM_USEC_PER_SEC;
	resolve(&w, "bigco");
	answer(0, "pro", 0);
	pol.plan_lookup.cache_us = 30 * LIM_USEC_PER_SEC; /* the reload */
	now += 30 * LIM_USEC_PER_SEC;
	cr_assert_eq(resolve(&w, "bigco"), 1, "stale, at once");
	cr_assert_eq(nfetch, 2, "refreshed past the new cache time");
}

/* A reload that points plan_lookup.redis_hash at another hash: an answer
 * of the old hash is no answer of the new one; it is refreshed from the
 * new hash at once, as a stale answer is. */
Test(plancache, a_reload_to_another_hash_asks_that_hash)
{
	resolve(&w, "bigco");
	answer(0, "pro", 0);
	pol.plan_lookup.redis_hash = (char[]){ "plans:v2" }; /* the reload */
	pol.plan_lookup.redis_hash_id = 2;
	cr_assert_eq(resolve(&w, "bigco"), 1, "the old answer, while asked");
	cr_assert_eq(nfetch, 2, "asked at once, not after the cache time");
	cr_assert_str_eq(fetches[1].hash, "plans:v2");
	answer(1, NULL, 0); /* not in the new hash: the default */
	cr_assert_eq(resolve(&w, "bigco"), -1);
	cr_assert_eq(nfetch, 2);
}

Test(plancache, store_down_is_unknown_at_once)
{
	down = 1;
	cr_assert_eq(resolve(&w, "bigco"), POLICY_PLAN_UNKNOWN);
	cr_assert_null(w.pprev, "nothing to wait for");
}

Test(plancache, a_cancelled_waiter_is_not_called)
{
	struct plancache_waiter a, b;

	plancache_waiter_init(&a, pc, wake_cb);
	plancache_waiter_init(&b, pc, wake_cb);
	resolve(&a, "bigco");
	resolve(&b, "bigco");
	plancache_cancel(&a);
	plancache_cancel(&a); /* twice: a no-op */
	answer(0, "pro", 0);
	cr_assert_eq(woken, 1);
}

Test(plancache, a_waiter_waits_on_one_tenant_but_asks_for_all)
{
	cr_assert_eq(resolve(&w, "a"), POLICY_PLAN_WAIT);
	cr_assert_eq(resolve(&w, "b"), POLICY_PLAN_WAIT);
	cr_assert_eq(nfetch, 2, "both HGETs leave at once");
	answer(1, "pro", 0);
	cr_assert_eq(woken, 0, "parked on a only");
	answer(0, "free", 0);
	cr_assert_eq(woken, 1);
	cr_assert_eq(resolve(&w, "b"), 1);
}

/* Tenants longer than the old 127-byte cap are cached and looked up whole:
 * two that share a long prefix are two entries. */
Test(plancache, long_tenant_ids_are_cached_whole)
{
	size_t len = 10000;
	char  *a = xmalloc(len + 1), *b = xmalloc(len + 1);

	memset(a, 'x', len);
	a[len] = '\0';
	memcpy(b, a, len + 1);
	b[len - 1] = 'y';
	use(16, 1 << 20);
	cr_assert_eq(resolve(&w, a), POLICY_PLAN_WAIT);
	cr_assert_eq(fetches[0].len, len, "the HGET names the whole tenant");
	answer(0, "pro", 0);
	plancache_cancel(&w);
	cr_assert_eq(resolve(&w, b), POLICY_PLAN_WAIT, "another tenant");
	answer(1, "free", 0);
	cr_assert_eq(resolve(&w, a), 1);
	cr_assert_eq(resolve(&w, b), 0);
	cr_assert_eq(plancache_bytes(pc), 2 * len);
	cr_assert_eq(nfetch, 2);
	free(a);
	free(b);
}

/* Full: one entry goes, the least recently used by CLOCK order; the
 * others stay (the old table was emptied whole, so every tenant waited
 * or got the default again). */
Test(plancache, a_full_table_evicts_one_entry_at_a_time)
{
	const char *t[] = { "a", "b", "c", "d", "e", "f", "g" };

	sync_answer = 1;
	use(4, 4096);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(resolve(&w, t[i]), 1);
	cr_assert_eq(resolve(&w, "e"), 1); /* evicts a */
	cr_assert_eq(plancache_count(pc), 4);
	cr_assert_eq(nfetch, 5);
	for (int i = 1; i < 5; i++)
		resolve(&w, t[i]);
	cr_assert_eq(nfetch, 5, "b..e still cached");
	resolve(&w, "a"); /* back; evicts one */
	cr_assert_eq(nfetch, 6);
	cr_assert_eq(plancache_count(pc), 4);
	/* c used since the hand passed, d not: d goes first */
	resolve(&w, "c");
	resolve(&w, "f");
	int before = nfetch;

	resolve(&w, "c");
	cr_assert_eq(nfetch, before, "the entry used lately is kept");
}

Test(plancache, entries_waited_on_are_not_evicted)
{
	struct plancache_waiter a, b, c;

	use(2, 4096);
	plancache_waiter_init(&a, pc, wake_cb);
	plancache_waiter_init(&b, pc, wake_cb);
	plancache_waiter_init(&c, pc, wake_cb);
	resolve(&a, "a");
	resolve(&b, "b");
	cr_assert_eq(resolve(&c, "c"), POLICY_PLAN_UNKNOWN, "all busy");
	cr_assert_eq(plancache_count(pc), 2);
	answer(0, "pro", 0);
	answer(1, "pro", 0);
	cr_assert_eq(woken, 2);
	cr_assert_eq(resolve(&c, "c"), POLICY_PLAN_WAIT, "room again");
}

/* A stalled Redis and many new tenants: every entry pending. The count
 * of pending entries is what lets a full table refuse at once instead
 * of walking all of it per request; it must follow every way an HGET
 * ends: answered, failed, refused by the store, answered at once. */
Test(plancache, pending_lookups_are_counted_until_each_ends)
{
	struct plancache_waiter a, b, c;
	int                     n;

	use(3, 4096);
	plancache_waiter_init(&a, pc, wake_cb);
	plancache_waiter_init(&b, pc, wake_cb);
	plancache_waiter_init(&c, pc, wake_cb);
	resolve(&a, "a");
	resolve(&b, "b");
	resolve(&c, "c");
	cr_assert_eq(plancache_pending(pc), 3);
	cr_assert_eq(resolve(&w, "d"), POLICY_PLAN_UNKNOWN, "all pending");
	cr_assert_eq(plancache_pending(pc), 3);
	answer(0, "pro", 0);
	cr_assert_eq(plancache_pending(pc), 2, "answered");
	answer(1, NULL, -1);
	cr_assert_eq(plancache_pending(pc), 1, "failed");
	cr_assert_eq(resolve(&w, "d"), POLICY_PLAN_WAIT, "a or b evicted");
	cr_assert_eq(plancache_pending(pc), 2);
	plancache_cancel(&w);
	down = 1;
	now += 60 * LIM_USEC_PER_SEC; /* a's answer and b's retry time past */
	resolve(&a, "a");
	cr_assert_eq(plancache_pending(pc), 2, "the store refused: none more");
	down = 0;
	sync_answer = 1;
	n = nfetch;
	cr_assert_eq(resolve(&a, "a"), 1, "pro");
	cr_assert_eq(nfetch, n + 1);
	cr_assert_eq(plancache_pending(pc), 2, "answered inside the fetch");
}

Test(plancache, tenant_bytes_are_bounded)
{
	char t[401];

	sync_answer = 1;
	use(100, 1000);
	for (int i = 0; i < 10; i++) {
		memset(t, 'a' + i, 400);
		t[400] = '\0';
		cr_assert_eq(resolve(&w, t), 1);
		cr_assert_leq(plancache_bytes(pc), 1000);
	}
	cr_assert_eq(plancache_count(pc), 2);
}

/* Churn through a small table: the index stays whole (backward-shift
 * deletion), so the newest entries are all found without a fetch. */
Test(plancache, churn_keeps_the_newest_entries_findable)
{
	char t[32];

	sync_answer = 1;
	use(64, 1 << 20);
	for (int i = 0; i < 5000; i++) {
		snprintf(t, sizeof(t), "tenant-%d", i);
		resolve(&w, t);
	}
	cr_assert_eq(nfetch, 5000);
	cr_assert_eq(plancache_count(pc), 64);
	for (int i = 5000 - 63; i < 5000; i++) {
		snprintf(t, sizeof(t), "tenant-%d", i);
		cr_assert_eq(resolve(&w, t), 1);
	}
	cr_assert_eq(nfetch, 5000, "the newest 63 were all cached");
}
