/* SPDX-License-Identifier: Apache-2.0 */
/* results: the script's reply, a msgpack array of five integers per check
 * then the call's Redis TIME, read whole or refused whole. The replies
 * here are packed with msgpack-c, which writes the shortest header and
 * integer forms, as Redis' cmsgpack does. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <msgpack.h>

#include "results.h"

static msgpack_sbuffer sb;
static msgpack_packer  pk;
static struct results  rs;

static void
setup(void)
{
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	results_init(&rs);
}

static void
teardown(void)
{
	msgpack_sbuffer_destroy(&sb);
	results_free(&rs);
}

TestSuite(results, .init = setup, .fini = teardown);

/* The call's clock at the end of every reply (2026-12-07, in µs). */
#define NOW 1796668633462720LL

/* Packs <n> checks, check k being (allowed, k, 2k, 3k, 4k), then NOW. */
static void
pack_checks(size_t n, int allowed)
{
	msgpack_pack_array(&pk, n * LIM_SCRIPT_RESULT + 1);
	for (size_t k = 0; k < n; k++) {
		msgpack_pack_int64(&pk, allowed);
		for (int f = 1; f < LIM_SCRIPT_RESULT; f++)
			msgpack_pack_int64(&pk, (int64_t)(k * (size_t)f));
	}
	msgpack_pack_int64(&pk, NOW);
}

Test(results, reads_each_checks_five_fields_in_order)
{
	struct lim_result r;

	msgpack_pack_array(&pk, 11);
	msgpack_pack_int64(&pk, 1);
	msgpack_pack_int64(&pk, 9);
	msgpack_pack_int64(&pk, 0);
	msgpack_pack_int64(&pk, 100000);
	msgpack_pack_int64(&pk, 1000000);
	msgpack_pack_int64(&pk, 0);
	msgpack_pack_int64(&pk, 0);
	msgpack_pack_int64(&pk, 2419200000000LL); /* 28 days in µs */
	msgpack_pack_int64(&pk, 5);
	msgpack_pack_int64(&pk, RESULTS_MAX);
	msgpack_pack_int64(&pk, NOW);
	cr_assert_eq(results_decode(&rs, sb.data, sb.size, 2), 0);
	results_get(&rs, 0, &r);
	cr_assert_eq(r.allowed, 1);
	cr_assert_eq(r.remaining, 9);
	cr_assert_eq(r.retry_after_us, 0);
	cr_assert_eq(r.next_us, 100000);
	cr_assert_eq(r.full_us, 1000000);
	results_get(&rs, 1, &r);
	cr_assert_eq(r.allowed, 0);
	cr_assert_eq(r.remaining, 0);
	cr_assert_eq(r.retry_after_us, 2419200000000LL);
	cr_assert_eq(r.next_us, 5);
	cr_assert_eq(r.full_us, RESULTS_MAX);
}

/* The TIME the call ran at, which named the windows it charged: a Cluster
 * refund undoes those (store_cluster.c). */
Test(results, reads_the_calls_clock_after_the_checks)
{
	pack_checks(2, 1);
	cr_assert_eq(results_decode(&rs, sb.data, sb.size, 2), 0);
	cr_assert_eq(rs.now_us, NOW);
	msgpack_sbuffer_clear(&sb);
	pack_checks(0, 1);
	cr_assert_eq(results_decode(&rs, sb.data, sb.size, 0), 0);
	cr_assert_eq(rs.now_us, NOW);
}

/* An older script's reply, the checks alone: without the clock a refund
 * would not know the window its charge went to. */
Test(results, refuses_a_reply_without_the_clock)
{
	msgpack_pack_array(&pk, LIM_SCRIPT_RESULT);
	for (int i = 0; i < LIM_SCRIPT_RESULT; i++)
		msgpack_pack_int64(&pk, 1);
	cr_assert_eq(results_decode(&rs, sb.data, sb.size, 1), -1);
}

Test(results, refuses_a_clock_before_1970)
{
	msgpack_pack_array(&pk, LIM_SCRIPT_RESULT + 1);
	for (int i = 0; i < LIM_SCRIPT_RESULT; i++)
		msgpack_pack_int64(&pk, 1);
	msgpack_pack_int64(&pk, -1);
	cr_assert_eq(results_decode(&rs, sb.data, sb.size, 1), -1);
}

Test(results, reads_a_cost_that_can_never_fit_as_minus_one)
{
	struct lim_result r;

	pack_checks(1, -1);
	cr_assert_eq(results_decode(&rs, sb.data, sb.size, 1), 0);
	results_get(&rs, 0, &r);
	cr_assert_eq(r.allowed, -1);
}

Test(results, reads_every_header_size)
{
	/* fixarray (2 checks and the clock: 11), array 16 (3: 16), array 32
	 * (13,107: 65,536) */
	size_t counts[] = { 0, 2, 3, 13107 };

	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
		struct lim_result r;
		size_t            n = counts[i];

		msgpack_sbuffer_clear(&sb);
		pack_checks(n, 1);
		cr_assert_eq(results_decode(&rs, sb.data, sb.size, n), 0,
		             "%zu checks", n);
		if (n == 0)
			continue;
		results_get(&rs, n - 1, &r);
		cr_assert_eq(r.remaining, (int64_t)(n - 1));
		cr_assert_eq(r.full_us, (int64_t)(4 * (n - 1)));
	}
}

Test(results, refuses_another_number_of_checks)
{
	pack_checks(3, 1);
	cr_assert_eq(results_decode(&rs, sb.data, sb.size, 2), -1);
	cr_assert_eq(results_decode(&rs, sb.data, sb.size, 4), -1);
	cr_assert_eq(results_decode(&rs, sb.data, sb.size, 3), 0);
}

Test(results, refuses_a_truncated_reply)
{
	pack_checks(3, 1);
	for (size_t len = 0; len < sb.size; len++)
		cr_assert_eq(results_decode(&rs, sb.data, len, 3), -1, "%zu",
		             len);
}

Test(results, refuses_bytes_after_the_array)
{
	pack_checks(1, 1);
	msgpack_pack_int64(&pk, 7);
	cr_assert_eq(results_decode(&rs, sb.data, sb.size, 1), -1);
}

Test(results, refuses_an_array_not_of_five_per_check)
{
	msgpack_pack_array(&pk, 5);
	for (int i = 0; i < 5; i++)
		msgpack_pack_int64(&pk, 1);
	cr_assert_eq(results_decode(&rs, sb.data, sb.size, 1), -1);
}

Test(results, refuses_a_value_that_is_not_a_number)
{
	for (int bad = 0; bad < 4; bad++) {
		msgpack_sbuffer_clear(&sb);
		msgpack_pack_array(&pk, 6);
		msgpack_pack_int64(&pk, 1);
		msgpack_pack_int64(&pk, 1);
		if (bad == 0)
			msgpack_pack_nil(&pk);
		else if (bad == 1)
			msgpack_pack_str_with_body(&pk, "1", 1);
		else if (bad == 2)
			msgpack_pack_true(&pk);
		else
			msgpack_pack_bin_with_body(&pk, "\x01", 1);
		msgpack_pack_int64(&pk, 1);
		msgpack_pack_int64(&pk, 1);
		msgpack_pack_int64(&pk, NOW);
		cr_assert_eq(results_decode(&rs, sb.data, sb.size, 1), -1,
		             "kind %d", bad);
	}
}

Test(results, refuses_an_allowed_other_than_minus_one_zero_one)
{
	pack_checks(1, 2);
	cr_assert_eq(results_decode(&rs, sb.data, sb.size, 1), -1);
	msgpack_sbuffer_clear(&sb);
	pack_checks(1, -2);
	cr_assert_eq(results_decode(&rs, sb.data, sb.size, 1), -1);
}

Test(results, reads_a_header_longer_than_the_count_needs)
{
	/* 6 elements in an array 16 header: cmsgpack never writes it, but it
	 * is msgpack all the same */
	static const char wide[] = "\xdc\x00\x06\x01\x01\x01\x01\x01\x07";
	struct lim_result r;

	cr_assert_eq(results_decode(&rs, wide, sizeof(wide) - 1, 1), 0);
	results_get(&rs, 0, &r);
	cr_assert_eq(r.full_us, 1);
	cr_assert_eq(rs.now_us, 7);
}

Test(results, reads_every_integer_width_and_sign)
{
	struct lim_result r;

	msgpack_pack_array(&pk, 11);
	msgpack_pack_fix_int8(&pk, -1);
	msgpack_pack_fix_int16(&pk, -30000);
	msgpack_pack_fix_int32(&pk, -2000000000);
	msgpack_pack_fix_int64(&pk, -RESULTS_MAX);
	msgpack_pack_fix_int64(&pk, 5000000000000LL);
	msgpack_pack_fix_uint8(&pk, 1);
	msgpack_pack_fix_uint8(&pk, 200);
	msgpack_pack_fix_uint16(&pk, 60000);
	msgpack_pack_fix_uint32(&pk, 4000000000U);
	msgpack_pack_fix_uint64(&pk, (uint64_t)RESULTS_MAX);
	msgpack_pack_fix_uint64(&pk, (uint64_t)NOW);
	cr_assert_eq(results_decode(&rs, sb.data, sb.size, 2), 0);
	results_get(&rs, 0, &r);
	cr_assert_eq(r.allowed, -1);
	cr_assert_eq(r.remaining, -30000);
	cr_assert_eq(r.retry_after_us, -2000000000);
	cr_assert_eq(r.next_us, -RESULTS_MAX);
	cr_assert_eq(r.full_us, 5000000000000LL);
	results_get(&rs, 1, &r);
	cr_assert_eq(r.allowed, 1);
	cr_assert_eq(r.remaining, 200);
	cr_assert_eq(r.retry_after_us, 60000);
	cr_assert_eq(r.next_us, 4000000000LL);
	cr_assert_eq(r.full_us, RESULTS_MAX);
}

Test(results, clamps_values_to_the_scripts_range)
{
	struct lim_result r;

	msgpack_pack_array(&pk, 6);
	msgpack_pack_int64(&pk, 0);
	msgpack_pack_fix_int64(&pk, INT64_MIN);
	msgpack_pack_fix_int64(&pk, INT64_MAX);
	msgpack_pack_fix_uint64(&pk, UINT64_MAX);
	msgpack_pack_fix_int64(&pk, -RESULTS_MAX - 1);
	msgpack_pack_int64(&pk, NOW);
	cr_assert_eq(results_decode(&rs, sb.data, sb.size, 1), 0);
	results_get(&rs, 0, &r);
	cr_assert_eq(r.remaining, -RESULTS_MAX);
	cr_assert_eq(r.retry_after_us, RESULTS_MAX);
	cr_assert_eq(r.next_us, RESULTS_MAX);
	cr_assert_eq(r.full_us, -RESULTS_MAX);
}

Test(results, reads_a_float_as_an_integer_truncated_toward_zero)
{
	/* what cmsgpack packs when a key another writer set held "12.5" */
	struct lim_result r;

	msgpack_pack_array(&pk, 11);
	msgpack_pack_double(&pk, 1.0);
	msgpack_pack_double(&pk, 12.5);
	msgpack_pack_double(&pk, -2.7);
	msgpack_pack_float(&pk, 1000.75f);
	msgpack_pack_double(&pk, 1e300);
	msgpack_pack_float(&pk, 0.0f);
	msgpack_pack_double(&pk, 0.0 / 0.0); /* NaN */
	msgpack_pack_double(&pk, -1e300);
	msgpack_pack_double(&pk, 1.0 / 0.0); /* inf */
	msgpack_pack_double(&pk, 9007199254740991.0);
	msgpack_pack_double(&pk, (double)NOW); /* Lua's numbers are doubles */
	cr_assert_eq(results_decode(&rs, sb.data, sb.size, 2), 0);
	results_get(&rs, 0, &r);
	cr_assert_eq(r.allowed, 1);
	cr_assert_eq(r.remaining, 12);
	cr_assert_eq(r.retry_after_us, -2);
	cr_assert_eq(r.next_us, 1000);
	cr_assert_eq(r.full_us, RESULTS_MAX);
	results_get(&rs, 1, &r);
	cr_assert_eq(r.allowed, 0);
	cr_assert_eq(r.remaining, 0);
	cr_assert_eq(r.retry_after_us, -RESULTS_MAX);
	cr_assert_eq(r.next_us, RESULTS_MAX);
	cr_assert_eq(r.full_us, 9007199254740991LL);
	cr_assert_eq(rs.now_us, NOW);
}

Test(results, refuses_an_allowed_that_is_a_fraction_of_another)
{
	msgpack_pack_array(&pk, 6);
	msgpack_pack_double(&pk, 2.5); /* 2 once truncated */
	for (int i = 0; i < 4; i++)
		msgpack_pack_int64(&pk, 0);
	msgpack_pack_int64(&pk, NOW);
	cr_assert_eq(results_decode(&rs, sb.data, sb.size, 1), -1);
}

Test(results, refuses_a_container_inside_the_array)
{
	/* the fuzz target's find: a map 32 claiming 2^32 - 1 entries where an
	 * integer belongs */
	static const char map[] =
		"\x96\x01\x02\xdf\xff\xff\xff\xff\x01\x01\x01";

	cr_assert_eq(results_decode(&rs, map, sizeof(map) - 1, 1), -1);
}

Test(results, refuses_a_header_claiming_more_elements_than_bytes)
{
	/* an array 32 header claiming 2^32 - 1 elements, then five */
	static const char huge[] = "\xdd\xff\xff\xff\xff\x01\x01\x01\x01\x01";

	cr_assert_eq(results_decode(&rs, huge, sizeof(huge) - 1, 1), -1);
}

Test(results, refuses_a_reply_that_is_not_an_array)
{
	msgpack_pack_map(&pk, 0);
	cr_assert_eq(results_decode(&rs, sb.data, sb.size, 0), -1);
	cr_assert_eq(results_decode(&rs, "", 0, 0), -1);
}
