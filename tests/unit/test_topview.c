/* SPDX-License-Identifier: Apache-2.0 */
/*
 * topview: an agent's top view as text, read back as written, and what
 * the reader refuses (anyone who can write to Redis wrote it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "topview.h"
#include "util.h"

#define NOW_MS 1700000000000LL

/* Parses <len> bytes copied to a buffer of exactly that size, so that a
 * read past the view is a read past the allocation (ASan). */
static int64_t
parse(const char *s, size_t len, struct topk_merge *one)
{
	char   *copy = xmalloc(len ? len : 1);
	int64_t ts;

	memcpy(copy, s, len);
	memset(one, 0, sizeof(*one));
	ts = topview_parse(copy, len, one);
	free(copy);
	return ts;
}

static int64_t
parse_str(const char *s)
{
	struct topk_merge one;
	int64_t           ts = parse(s, strlen(s), &one);

	topk_merge_free(&one);
	return ts;
}

Test(topview, a_view_reads_back_as_it_was_written)
{
	struct topk_merge m = { 0 }, one;
	static const char bin[] = { 'a', '\0', '\n', ':', ' ' };
	size_t            len;
	char             *v;

	topk_merge_add(&m, "tenant:acme", 11, 40, 3);
	topk_merge_add(&m, bin, sizeof(bin), 7, 0);
	m.total = 99;
	topk_merge_finish(&m);
	v = topview_format(&m, NOW_MS, &len);
	cr_assert_eq(parse(v, len, &one), NOW_MS);
	cr_assert_eq(one.total, 99);
	cr_assert_eq(one.n, 2);
	cr_assert_eq(one.v[0].count, 40);
	cr_assert_eq(one.v[0].err, 3);
	cr_assert_eq(one.v[0].len, 11);
	cr_assert_eq(memcmp(one.v[0].key, "tenant:acme", 11), 0);
	cr_assert_eq(one.v[1].len, sizeof(bin), "a key's bytes as they are");
	cr_assert_eq(memcmp(one.v[1].key, bin, sizeof(bin)), 0);
	free(v);
	topk_merge_free(&one);
	topk_merge_free(&m);
}

Test(topview, the_view_format_is_the_one_older_agents_read)
{
	struct topk_merge m = { 0 };
	size_t            len;
	char             *v;

	topk_merge_add(&m, "x", 1, 10, 2);
	m.total = 100;
	topk_merge_finish(&m);
	v = topview_format(&m, NOW_MS, &len);
	cr_assert_eq(len, strlen("1700000000000 100\n10 2 1:x\n"));
	cr_assert_eq(memcmp(v, "1700000000000 100\n10 2 1:x\n", len), 0);
	free(v);
	topk_merge_free(&m);
}

Test(topview, a_view_lists_at_most_topk_k_keys_and_bounds_the_rest)
{
	struct topk_merge m = { 0 }, one;
	char              key[16];
	size_t            len;
	char             *v;

	for (int i = 0; i < TOPK_K + 8; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		topk_merge_add(&m, key, strlen(key), 1000 - i, 0);
	}
	topk_merge_finish(&m);
	v = topview_format(&m, NOW_MS, &len);
	cr_assert_eq(parse(v, len, &one), NOW_MS);
	cr_assert_eq(one.n, TOPK_K);
	cr_assert_eq(topview_bound(&m), 1000 - (TOPK_K - 1));
	free(v);
	topk_merge_free(&one);
	topk_merge_free(&m);
}

Test(topview, a_view_that_cuts_nothing_states_its_own_bound)
{
	struct topk_merge m = { 0 };

	topk_merge_add(&m, "x", 1, 10, 2);
	m.floor = 4; /* its summaries were full */
	topk_merge_finish(&m);
	cr_assert_eq(topview_bound(&m), 4);
	topk_merge_free(&m);
}

Test(topview, the_reader_refuses_what_publish_never_writes)
{
	static const char *bad[] = {
		"",                  /* empty */
		"1700000000000 100", /* no newline */
		"-5 100\n",          /* a sign */
		"+5 100\n",
		" 5 100\n", /* a blank before */
		"5  100\n", /* two blanks */
		"05 100\n", /* a leading zero */
		"5 100\n10 02 1:x\n",
		"5 100\n10 2 1:x",    /* the key's newline cut */
		"5 100\n10 2 2:x\n",  /* the key's length past the end */
		"5 100\n10 2 1:xy\n", /* more than its length */
		"5 100\n10 2 1x\n",   /* no colon */
		"5 100\n10 1:x\n",    /* a number missing */
		"5 100\n10 2 1:x\n3 0 1:x\n", /* a key twice */
		"5 100\n10 2 201:x\n",        /* a key past POLICY_KEY_MAX */
		"5 1000000000000001\n",       /* past TOPVIEW_COUNT_MAX */
		"5 100\n1000000000000001 0 1:x\n",
		"5 100\n1 99999999999999999999999 1:x\n", /* would overflow */
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(parse_str(bad[i]), -1, "took \"%s\"", bad[i]);
	cr_assert_eq(parse_str("5 100\n"), 5, "a view of no key");
	cr_assert_eq(parse_str("5 1000000000000000\n"), 5, "the most");
}

Test(topview, the_reader_refuses_more_than_topk_k_lines)
{
	char   buf[64 * (TOPK_K + 2)];
	size_t n = (size_t)snprintf(buf, sizeof(buf), "5 100\n");

	for (int i = 0; i < TOPK_K; i++)
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, "1 0 3:k%02d\n",
		                      i);
	cr_assert_eq(parse_str(buf), 5);
	snprintf(buf + n, sizeof(buf) - n, "1 0 3:kzz\n");
	cr_assert_eq(parse_str(buf), -1);
}

/* Two agents: A lists x (bound 5), B lists y and x (bound 0). Each key
 * counts, from an agent that does not list it, that agent's bound. */
Test(topview, the_sum_counts_an_agents_bound_for_a_key_it_leaves_out)
{
	struct topk_merge m = { 0 }, a, b;

	static const char       va[] = "1 100\n10 2 1:x\n";
	static const char       vb[] = "1 50\n8 0 1:y\n3 0 1:x\n";
	const struct topk_item *x, *y;

	cr_assert_eq(parse(va, sizeof(va) - 1, &a), 1);
	cr_assert_eq(parse(vb, sizeof(vb) - 1, &b), 1);
	topview_add(&m, &a, 5);
	topview_add(&m, &b, 0);
	topk_merge_finish(&m);
	cr_assert_eq(m.total, 150);
	cr_assert_eq(m.n, 2);
	x = strcmp(m.v[0].key, "x") == 0 ? &m.v[0] : &m.v[1];
	y = x == &m.v[0] ? &m.v[1] : &m.v[0];
	cr_assert_str_eq(x->key, "x");
	cr_assert_str_eq(y->key, "y");
	cr_assert_eq(x->count, 13, "10 on A, 3 on B");
	cr_assert_eq(x->err, 2, "B's bound is 0");
	cr_assert_eq(y->count, 13, "8 on B, at most 5 on A");
	cr_assert_eq(y->err, 5);
	cr_assert_eq(m.bound, 5, "a key neither lists: at most A's 5");
	topk_merge_free(&a);
	topk_merge_free(&b);
	topk_merge_free(&m);
}
