/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The decision script's reply, a msgpack array of integers (results.h).
 *
 * Every byte comes from the network: each read is bounded by <end>, the
 * array's count must be the one the batch expects, and nothing is
 * allocated for what the reply claims. The formats are msgpack's
 * (github.com/msgpack/msgpack/blob/master/spec.md): fixarray 0x90-0x9f,
 * array 16 0xdc, array 32 0xdd; positive fixint 0x00-0x7f, negative
 * fixint 0xe0-0xff, float 32 0xca, float 64 0xcb, uint 8-64 0xcc-0xcf,
 * int 8-64 0xd0-0xd3, big-endian.
 */
#include <stdlib.h>
#include <string.h>

#include "results.h"

/* <w> big-endian bytes at <p>. */
static uint64_t
be(const unsigned char *p, size_t w)
{
	uint64_t u = 0;

	for (size_t i = 0; i < w; i++)
		u = u << 8 | p[i];
	return u;
}

/* The array header at <*p>: its count, or -1. */
static int64_t
read_array(const unsigned char **p, const unsigned char *end)
{
	const unsigned char *q = *p;
	size_t               w;

	if (q >= end)
		return -1;
	if ((*q & 0xf0) == 0x90) {
		*p = q + 1;
		return *q & 0x0f;
	}
	if (*q != 0xdc && *q != 0xdd)
		return -1;
	w = *q == 0xdc ? 2 : 4;
	if ((size_t)(end - q - 1) < w)
		return -1;
	*p = q + 1 + w;
	return (int64_t)be(q + 1, w);
}

/* <v> within the script's range (limiter.h: every value below 2^53). */
static int64_t
clamp(int64_t v)
{
	return v > RESULTS_MAX    ? RESULTS_MAX
	       : v < -RESULTS_MAX ? -RESULTS_MAX
	                          : v;
}

/* An IEEE 754 double as the script's integer: truncated toward zero, as
 * Redis' own conversion of a Lua number did; NaN is 0. */
static int64_t
from_double(double d)
{
	if (d != d)
		return 0;
	if (d >= (double)RESULTS_MAX)
		return RESULTS_MAX;
	if (d <= -(double)RESULTS_MAX)
		return -RESULTS_MAX;
	return (int64_t)d;
}

/* The number at <*p> into <out>: 0, or -1 if it is not a number. */
static int
read_num(const unsigned char **p, const unsigned char *end, int64_t *out)
{
	const unsigned char *q = *p;
	size_t               w;
	uint64_t             u;

	if (q >= end)
		return -1;
	if (*q <= 0x7f || *q >= 0xe0) { /* fixint */
		*out = *q <= 0x7f ? *q : (int64_t)*q - 256;
		*p = q + 1;
		return 0;
	}
	if (*q < 0xca || *q > 0xd3)
		return -1;
	w = *q <= 0xcb ? (size_t)4 << (*q - 0xca)
	               : (size_t)1 << ((*q - 0xcc) % 4);
	if ((size_t)(end - q - 1) < w)
		return -1;
	u = be(q + 1, w);
	if (*q == 0xca) { /* float 32 */
		uint32_t b32 = (uint32_t)u;
		float    f;

		memcpy(&f, &b32, sizeof(f));
		*out = from_double(f);
	} else if (*q == 0xcb) { /* float 64 */
		double d;

		memcpy(&d, &u, sizeof(d));
		*out = from_double(d);
	} else if (*q <= 0xcf) { /* uint 8-64 */
		*out = u > (uint64_t)RESULTS_MAX ? RESULTS_MAX : (int64_t)u;
	} else if (u >> (8 * w - 1)) { /* int 8-64, negative */
		uint64_t mask =
			w == 8 ? ~(uint64_t)0 : ((uint64_t)1 << (8 * w)) - 1;

		*out = clamp(-(int64_t)(~u & mask) - 1);
	} else {
		*out = clamp((int64_t)u);
	}
	*p = q + 1 + w;
	return 0;
}

void
results_init(struct results *rs)
{
	rs->v = NULL;
	rs->cap = 0;
	rs->now_us = -1;
}

void
results_free(struct results *rs)
{
	free(rs->v);
	results_init(rs);
}

/* Room for <n> integers: 0, or -1 if it cannot be had. */
static int
reserve(struct results *rs, size_t n)
{
	int64_t *v;

	if (n <= rs->cap)
		return 0;
	if (n > SIZE_MAX / sizeof(*v) ||
	    (v = realloc(rs->v, n * sizeof(*v))) == NULL)
		return -1;
	rs->v = v;
	rs->cap = n;
	return 0;
}

int
results_decode(struct results *rs, const char *buf, size_t len, size_t nchecks)
{
	const unsigned char *p = (const unsigned char *)buf, *end = p + len;
	size_t               n;
	int64_t              count, now;

	if (nchecks > SIZE_MAX / LIM_SCRIPT_RESULT)
		return -1;
	n = nchecks * LIM_SCRIPT_RESULT;
	count = read_array(&p, end); /* the results, then the clock */
	if (count < 1 || (uint64_t)count != (uint64_t)n + 1 ||
	    reserve(rs, n) == -1)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (read_num(&p, end, &rs->v[i]) == -1)
			return -1;
	if (read_num(&p, end, &now) == -1 || now < 0 || p != end)
		return -1;
	for (size_t k = 0; k < n; k += LIM_SCRIPT_RESULT)
		if (rs->v[k] < -1 || rs->v[k] > 1)
			return -1;
	rs->now_us = now;
	return 0;
}

void
results_get(const struct results *rs, size_t k, struct lim_result *res)
{
	const int64_t *v = rs->v + k * LIM_SCRIPT_RESULT;

	res->allowed = (int)v[0];
	res->remaining = v[1];
	res->retry_after_us = v[2];
	res->next_us = v[3];
	res->full_us = v[4];
}
