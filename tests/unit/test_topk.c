/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The heavy-hitters summary of denied keys (topk.c): a flood from one key
 * among 10,000 quiet ones comes first, its count exact within the stated
 * error; a minute later it is gone; and 1,000,000 distinct keys fit in
 * the same fixed memory (no allocation after the first).
 */
#include <criterion/criterion.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>

#include "topk.h"

#define S 1000000LL

static void
add(struct topk *t, const char *key, int64_t now)
{
	topk_add(t, key, strlen(key), now);
}

Test(topk, a_flood_among_ten_thousand_quiet_keys_comes_first)
{
	static struct topk t;
	struct topk_merge  m = { 0 };
	char               key[64];
	int64_t            now = 1000 * S;

	for (int i = 0; i < 10000; i++) {
		snprintf(key, sizeof(key), "rl:{login:u:quiet%d}", i);
		add(&t, key, now);
		if (i % 4 == 0) /* a quarter of the traffic */
			add(&t, "rl:{login:u:flood}", now);
	}
	topk_merge_summary(&m, &t, now + S);
	topk_merge_finish(&m);
	cr_assert_gt(m.n, 0);
	cr_assert_str_eq(m.v[0].key, "rl:{login:u:flood}");
	cr_assert_eq(m.total, 12500, "every denial is counted in the total");
	cr_assert_geq(m.v[0].count, 2500, "Space-Saving never undercounts");
	cr_assert_leq(m.v[0].count - m.v[0].err, 2500,
	              "the true count is within [count - err, count]");
	topk_merge_free(&m);
}

Test(topk, a_minute_later_the_flood_is_forgotten)
{
	static struct topk t;
	struct topk_merge  m = { 0 };
	int64_t            now = 5000 * S;

	for (int i = 0; i < 100; i++)
		add(&t, "rl:{login:u:flood}", now);
	topk_merge_summary(&m, &t, now + 30 * S);
	cr_assert_eq(m.total, 100, "within the minute");
	topk_merge_free(&m);
	topk_merge_summary(&m, &t, now + TOPK_SLOTS * TOPK_SLOT_US + 1);
	cr_assert_eq(m.total, 0, "past the minute");
	cr_assert_eq(m.n, 0);
	topk_merge_free(&m);
}

Test(topk, merging_sums_one_key_over_workers)
{
	static struct topk a, b;
	struct topk_merge  m = { 0 };
	int64_t            now = 9000 * S;

	for (int i = 0; i < 30; i++)
		add(&a, "k1", now);
	for (int i = 0; i < 20; i++)
		add(&b, "k1", now);
	for (int i = 0; i < 40; i++)
		add(&b, "k2", now);
	topk_merge_summary(&m, &a, now);
	topk_merge_summary(&m, &b, now);
	topk_merge_finish(&m);
	cr_assert_eq(m.n, 2);
	cr_assert_str_eq(m.v[0].key, "k1");
	cr_assert_eq(m.v[0].count, 50);
	cr_assert_eq(m.v[1].count, 40);
	topk_merge_free(&m);
}

/* The bound: TOPK_BYTES per rule per worker, whatever the keys. */
Test(topk, a_million_distinct_keys_stay_within_the_bound)
{
	struct mallinfo2 before, after;
	char             key[64];
	int64_t          now = 20000 * S;

	topk_note(0, 0, "first", 5, now); /* the one allocation */
	before = mallinfo2();
	for (int i = 0; i < 1000000; i++) {
		int n = snprintf(key, sizeof(key), "rl:{r:ip:10.%d.%d.%d}",
		                 (i >> 16) & 255, (i >> 8) & 255, i & 255);

		topk_note(0, 0, key, (size_t)n, now + i);
	}
	after = mallinfo2();
	cr_assert_eq(after.uordblks, before.uordblks,
	             "no memory taken after the first denial (%zu -> %zu)",
	             before.uordblks, after.uordblks);
	cr_assert_lt(TOPK_BYTES, 64 * 1024, "the stated bound: %zu bytes",
	             TOPK_BYTES);
}

/* A key a full summary counted and then evicted may have been denied
 * there up to that summary's smallest count: the merge must count it so,
 * or the merged count is below the truth (worker b saw "x" once, then 32
 * other keys pushed it out; worker a saw it 5 times: denied 6 times). */
Test(topk, a_merge_never_undercounts_a_key_a_full_summary_evicted)
{
	static struct topk a, b;
	struct topk_merge  m = { 0 };
	char               key[32];
	int64_t            now = 30000 * S;

	for (int i = 0; i < 5; i++)
		add(&a, "x", now);
	add(&b, "x", now);
	for (int i = 0; i < TOPK_K; i++) {
		snprintf(key, sizeof(key), "other%d", i);
		add(&b, key, now);
	}
	topk_merge_summary(&m, &a, now);
	topk_merge_summary(&m, &b, now);
	topk_merge_finish(&m);
	for (int i = 0; i < m.n; i++) {
		if (strcmp(m.v[i].key, "x") != 0)
			continue;
		cr_assert_geq(m.v[i].count, 6, "x: count %lld, denied 6 times",
		              (long long)m.v[i].count);
		cr_assert_leq(m.v[i].count - m.v[i].err, 6,
		              "x: true count within [count - err, count]");
	}
	/* every key of the merge obeys the bound, "x" listed or not */
	cr_assert_eq(m.total, 5 + 1 + TOPK_K);
	topk_merge_free(&m);
}
