/*
 * util.c: the integer formatter of the hot path (the script call's
 * arguments, the RateLimit header values) against printf.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

static void
same_as_printf(int64_t v)
{
	char want[32], got[32], *end;

	snprintf(want, sizeof(want), "%" PRId64, v);
	end = util_fmt_int(got, v);
	*end = '\0';
	cr_assert_str_eq(got, want);
}

Test(util, fmt_int_writes_what_printf_writes)
{
	static const int64_t edges[] = { 0, 9, 10, 99, 100, 101, 999, 1000,
	                                  4294967296LL, INT64_MAX, INT64_MIN,
	                                  INT64_MIN + 1, -1, -10, -100 };
	uint64_t x = 1;

	for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++)
		same_as_printf(edges[i]);
	for (int64_t v = -1000; v <= 100000; v++)
		same_as_printf(v);
	for (int i = 0; i < 64; i++, x *= 3) {	/* every length */
		same_as_printf((int64_t)(x >> 1));
		same_as_printf(-(int64_t)(x >> 1));
	}
}
