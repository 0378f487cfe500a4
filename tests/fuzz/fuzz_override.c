/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the runtime override table as an agent reads it from
 * Redis ("all" of rl:{overrides}, override.h). The input is the table's
 * text; it is parsed, then every key it holds (and a few it does not) is
 * looked up through ov_apply() on checks of each algorithm and op. Checks:
 * nothing crashes, a value ov_parse() accepts formats back to itself, and
 * a limit override never leaves a check with an invalid limit.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "override.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The bytes of <s> up to the first newline, as a value: reread. */
static void
value_roundtrip(const char *s, size_t len)
{
	char            buf[OV_VALUE_MAX];
	struct ov_value v;
	const char     *nl = memchr(s, '\n', len);

	if (nl)
		len = (size_t)(nl - s);
	if (ov_parse(s, len, &v) == -1)
		return;
	ov_format(&v, buf, sizeof(buf));
	if (strlen(buf) != len || memcmp(buf, s, len) != 0)
		abort();
}

static void
apply_all(const struct ov_table *t, const char *key, size_t keylen)
{
	static const int ops[] = { LIM_OP_CHECK, LIM_OP_FORCE, LIM_OP_RELEASE,
		                   LIM_OP_PEEK };
	const char      *err;

	for (int a = 0; a < LIM_ALGO_COUNT; a++)
		for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
			struct check c = { .kind = CHECK_EVAL, .op = ops[o] };
			struct lim_result res;

			c.lim = (struct lim_params){ .algo = (enum lim_algo)a,
				                     .rate = 10,
				                     .period_us = 1000000,
				                     .burst = 5 };
			if (lim_params_init(&c.lim, &err) == -1)
				abort();
			if (keylen > POLICY_KEY_MAX)
				keylen = POLICY_KEY_MAX;
			memcpy(c.key, key, keylen);
			c.keylen = keylen;
			if (ov_apply(t, &c, 12345, &res) == OV_LIMIT &&
			    lim_params_init(&c.lim, &err) == -1)
				abort();
		}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char      *s = (const char *)data;
	struct ov_table *t;
	int              bad;

	value_roundtrip(s, size);
	t = ov_table_parse(s, size, &bad);
	/* keys as the table reads them: "<len> <key> ..." at each line */
	for (size_t i = 0; i < size; i++) {
		if (i == 0 || s[i - 1] == '\n') {
			size_t n = 0, j = i;

			while (j < size && s[j] >= '0' && s[j] <= '9' &&
			       n < 1000)
				n = n * 10 + (size_t)(s[j++] - '0');
			if (j < size && s[j] == ' ' && n <= size - j - 1)
				apply_all(t, s + j + 1, n);
		}
	}
	apply_all(t, "rl:{t:x}", 8);
	ov_table_free(t);
	return 0;
}
