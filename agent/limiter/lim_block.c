/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The penalty box's arithmetic (limiter.h, "penalty box"): the C twin of
 * the block record ratelimit.lua keeps at "<base>!b", used by the local
 * tier (local.c keeps one record per key of a rule with block:) and the
 * near-cache's answers. Pure: no clock, no I/O, no table of keys. Not
 * here: where the records live (the script, local.c, the near-cache).
 */
#include <assert.h>

#include "limiter.h"

int
lim_block_check(const struct lim_params *p, const char **err)
{
	if (p->block_us < 0 || p->block_max_us < 0)
		return *err = "block/block_max must not be negative", -1;
	if (p->block_us > LIM_TIME_MAX || p->block_max_us > LIM_TIME_MAX)
		return *err = "block/block_max too long", -1;
	if (p->block_max_us > 0 && p->block_us == 0)
		return *err = "block_max needs block", -1;
	if (p->block_max_us > 0 && p->block_max_us < p->block_us)
		return *err = "block_max must be at least block", -1;
	if (p->block_us > 0 && p->algo == LIM_CONCURRENCY)
		return *err = "block does not apply to concurrency", -1;
	return 0;
}

int64_t
lim_block_period(const struct lim_params *p, int64_t offences)
{
	int64_t d = p->block_us;

	assert(p->block_us > 0 && offences >= 1);
	if (p->block_max_us <= 0)
		return d;
	/* both below LIM_TIME_MAX (2^48): a doubling never overflows */
	for (int64_t i = 1; i < offences && d < p->block_max_us; i++)
		d *= 2;
	return d < p->block_max_us ? d : p->block_max_us;
}

static void
blocked(int64_t left, struct lim_result *out)
{
	out->allowed = 0;
	out->remaining = 0;
	out->retry_after_us = left;
	out->next_us = left;
	out->full_us = left;
}

int
lim_block_held(const struct lim_block *b, int64_t now_us,
               struct lim_result *out)
{
	if (b->until_us <= now_us)
		return 0;
	blocked(b->until_us - now_us, out);
	return 1;
}

void
lim_block_offend(const struct lim_params *p, struct lim_block *b,
                 int64_t now_us, struct lim_result *out)
{
	int64_t n = b->forget_us > now_us ? b->offences + 1 : 1;
	int64_t d = lim_block_period(p, n);

	b->offences = p->block_max_us > 0 ? n : 1;
	b->until_us = now_us + d;
	b->forget_us = b->until_us + p->block_max_us;
	blocked(d, out);
}

int
lim_block_offence(const struct lim_params *p, int op,
                  const struct lim_result *r)
{
	return p->block_us > 0 && r->allowed == 0 &&
	       (op == LIM_OP_CHECK || op == LIM_OP_PEEK);
}
