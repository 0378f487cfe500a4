/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reserve, then settle (limiter.h): the C twin of the script's settle(),
 * settle_refund() and settle_charge(), on one key's lim_state, for the
 * local tier (store: local rules and the fail: local fallback). The
 * reservation's record itself (units held, window index, lease) is kept
 * by local.c; this file only does the arithmetic, exactly the script's:
 *  - actual A > reserved R: A - R (at most LIM_COST_MAX) charged as a
 *    FORCE now;
 *  - A < R: R - A given back, bounded by the state as it is now: a GCRA
 *    TAT moved back by R - A emission intervals of the reservation's
 *    rate, never below now (at or below now: a fresh key);
 *    token-bucket tokens given back, never past the burst; the counter of
 *    the window the reservation went to lowered, never below 0 (a window
 *    already gone gets nothing back);
 *  - A < 0 (a malformed cost) or A = R: nothing changes; nor is anything
 *    given back when the rule's algorithm changed since the reservation.
 */
#include <assert.h>

#include "limiter.h"

int
lim_reserve_supported(int algo)
{
	return algo == LIM_GCRA || algo == LIM_TOKEN_BUCKET ||
	       algo == LIM_FIXED_WINDOW || algo == LIM_SLIDING_WINDOW;
}

int64_t
lim_reserve_index(const struct lim_params *p, int64_t now_us)
{
	int64_t start, end;

	if (p->algo == LIM_GCRA)
		return p->ei_us; /* what one unit held moved the TAT */
	if (p->algo != LIM_FIXED_WINDOW && p->algo != LIM_SLIDING_WINDOW)
		return 0;
	return lim_window_bounds(p, now_us, &start, &end);
}

/* The script's settle_refund(): <d> units back to the window <idx>. */
static void
refund(const struct lim_params *p, struct lim_state *s, int64_t d, int64_t idx,
       int64_t now)
{
	int64_t *n = NULL;

	assert(d > 0);
	switch (p->algo) {
	case LIM_GCRA: {
		/* the reservation's own emission interval (<idx>): a rate
		 * changed since (reload, override) must not re-price it */
		int64_t ei = idx > 0 ? idx : p->ei_us;

		if (s->v[0] <= now)
			return; /* fresh: nothing held any more */
		if (d >= (s->v[0] - now + ei - 1) / ei)
			s->v[0] = 0;
		else
			s->v[0] -= ei * d;
		if (s->v[0] <= now)
			s->v[0] = 0;
		return;
	}
	case LIM_TOKEN_BUCKET:
		if (!s->v[2])
			return;
		s->v[0] += d * LIM_MICRO;
		if (s->v[0] > p->burst * LIM_MICRO)
			s->v[0] = p->burst * LIM_MICRO;
		return;
	case LIM_FIXED_WINDOW:
		if (s->v[2] && s->v[0] == idx)
			n = &s->v[1];
		break;
	case LIM_SLIDING_WINDOW:
		/* v[1] counts window v[0], v[2] the one before it */
		if (s->n && s->v[0] == idx)
			n = &s->v[1];
		else if (s->n && s->v[0] == idx + 1)
			n = &s->v[2];
		break;
	default:
		assert(!"reserve: on an algorithm the policy refuses");
		return;
	}
	if (n != NULL && *n > 0)
		*n -= d < *n ? d : *n;
}

void
lim_settle(const struct lim_params *p, struct lim_state *s, int64_t held,
           int64_t idx, int algo, int64_t cost, int64_t now_us)
{
	struct lim_result r;
	int64_t           d;

	assert(held >= 0 && lim_reserve_supported(p->algo));
	if (cost < 0 || cost == held)
		return;
	if (cost < held) {
		/* held by another algorithm (a reload changed it): its units
		 * went to state this one does not keep */
		if (algo == (int)p->algo)
			refund(p, s, held - cost, idx, now_us);
		return;
	}
	d = cost - held;
	if (d > LIM_COST_MAX)
		d = LIM_COST_MAX;
	if (lim_eval(p, s, LIM_OP_FORCE, d, 0, now_us, &r))
		lim_commit(p, s, LIM_OP_FORCE, d, 0, now_us);
}
