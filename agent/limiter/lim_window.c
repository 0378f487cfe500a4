/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixed window and sliding window counter: the C twins of ratelimit.lua.
 *
 * Fixed window: windows of W µs aligned to the Unix epoch (a 1d window is
 * the UTC day), or the UTC calendar month (civil-from-days, no libc time
 * functions). State: (window index, count). Allowed iff count + cost <= L,
 * and only then charged; remaining = L - count after; next = full = end -
 * now; retry = end - now on a denial. The script keeps the counter in
 * field <index> of the hash "<base>", which expires at the window's end
 * plus a margin, so a rejected request is never counted and old windows
 * vanish by TTL.
 *
 * Sliding window: counters prev and cur of the windows idx - 1 and idx,
 * e = now - start of idx. The estimate prev * (W - e) / W + cur is a real
 * number, never rounded (ALGORITHMS.md), compared exactly in integers:
 *   allowed iff prev * (W - e) + (cur + cost) * W <= L * W
 * As cur, cost and L are integers, that is ceil(prev * (W - e) / W) + cur
 * + cost <= L: sw_units() is the estimate rounded up, one lim_muldiv on
 * __int128, so no product is ever formed in 64 bits (L <= 2^32, W <= 2^48
 * by lim_params_init; the script splits the same products, muldiv()).
 * Flooring prev's share instead would admit one request too many just
 * after a boundary. From it:
 *   remaining = floor(L - estimate) = L - units (0 at least)
 *   next      = µs until units drops by one (one more unit fits)
 *   full      = µs until the estimate is 0 (the whole limit fits)
 *   retry     = the first µs at which the inequality holds for <cost>
 * Each is the first instant units <= t (sw_until): inside this window if
 * prev's weight decays enough (the largest W - e' with prev * (W - e') <=
 * (t - cur) * W), else in the next window, where cur becomes prev and
 * decays the same way. The script keeps fields <index> and <index - 1> of
 * the hash "<base>", alive until the end of the next window (plus
 * margin), as <index> is that window's prev.
 */
#include <assert.h>

#include "limiter.h"

static int64_t
clamp0(int64_t v)
{
	return v > 0 ? v : 0;
}

/* ---- fixed window ------------------------------------------------------- */

static int64_t
fw_count(const struct lim_state *s, int64_t idx)
{
	return s->v[2] && s->v[0] == idx ? s->v[1] : 0;
}

int
lim__fw_eval(const struct lim_params *p, const struct lim_state *s, int op,
             int64_t cost, int64_t now, struct lim_result *out)
{
	int64_t start, end, idx = lim_window_bounds(p, now, &start, &end);
	int64_t count = fw_count(s, idx);

	if (op == LIM_OP_RELEASE)
		cost = 0;
	out->retry_after_us = 0;
	out->next_us = out->full_us = end - now;
	if (cost > p->rate) {
		out->allowed = -1;
		out->remaining = clamp0(p->rate - count);
		return op == LIM_OP_FORCE;
	}
	if (count + cost > p->rate) {
		out->allowed = 0;
		out->remaining = clamp0(p->rate - count);
		out->retry_after_us = end - now;
		return op == LIM_OP_FORCE;
	}
	out->allowed = 1;
	out->remaining = p->rate - count - cost;
	return cost > 0;
}

void
lim__fw_commit(const struct lim_params *p, struct lim_state *s, int op,
               int64_t cost, int64_t now)
{
	int64_t start, end, idx = lim_window_bounds(p, now, &start, &end);

	if (op == LIM_OP_RELEASE || cost <= 0)
		return;
	s->v[1] = fw_count(s, idx) + cost;
	s->v[0] = idx;
	s->v[2] = 1;
}

/* ---- sliding window ----------------------------------------------------- */

struct sw_view {
	int64_t prev, cur, e, w;
};

static void
sw_view(const struct lim_params *p, const struct lim_state *s, int64_t now,
        struct sw_view *v)
{
	int64_t start, end, idx = lim_window_bounds(p, now, &start, &end);

	v->w = p->period_us;
	v->e = now - start;
	v->prev = v->cur = 0;
	if (!s->n)
		return;
	if (s->v[0] == idx) {
		v->cur = s->v[1];
		v->prev = s->v[2];
	} else if (s->v[0] == idx - 1) {
		v->prev = s->v[1];
	}
}

/* The estimate rounded up: ceil(prev * (W - e) / W) + cur. */
static int64_t
sw_units(const struct sw_view *v)
{
	return lim_muldiv_ceil(v->prev, v->w - v->e, v->w) + v->cur;
}

/* Largest x in [0, W] with a * x <= t * W, for 0 <= t < a. */
static int64_t
sw_xmax(int64_t a, int64_t t, int64_t w)
{
	assert(t >= 0 && t < a);
	return lim_muldiv(t, w, a, NULL);
}

/* µs from now until sw_units() is <= <target> (>= 0). */
static int64_t
sw_until(const struct sw_view *v, int64_t target)
{
	int64_t t;

	assert(target >= 0);
	if (v->cur <= target) {
		t = target - v->cur;
		if (v->prev <= t)
			return 0;
		return clamp0(v->w - sw_xmax(v->prev, t, v->w) - v->e);
	}
	return v->w - v->e + (v->w - sw_xmax(v->cur, target, v->w));
}

int
lim__sw_eval(const struct lim_params *p, const struct lim_state *s, int op,
             int64_t cost, int64_t now, struct lim_result *out)
{
	struct sw_view v;
	int64_t        units;
	int            charge;

	if (op == LIM_OP_RELEASE)
		cost = 0;
	sw_view(p, s, now, &v);
	units = sw_units(&v);
	out->retry_after_us = 0;
	if (cost > p->rate) {
		out->allowed = -1;
		charge = op == LIM_OP_FORCE;
	} else if (units + cost > p->rate) {
		out->allowed = 0;
		out->retry_after_us = sw_until(&v, p->rate - cost);
		charge = op == LIM_OP_FORCE;
	} else {
		out->allowed = 1;
		v.cur += cost;
		units += cost;
		charge = cost > 0;
	}
	out->remaining = clamp0(p->rate - units);
	out->full_us = sw_until(&v, 0);
	out->next_us = units > 0 ? sw_until(&v, units - 1) : 0;
	return charge;
}

void
lim__sw_commit(const struct lim_params *p, struct lim_state *s, int op,
               int64_t cost, int64_t now)
{
	int64_t start, end, idx = lim_window_bounds(p, now, &start, &end);
	struct sw_view v;

	if (op == LIM_OP_RELEASE || cost <= 0)
		return;
	sw_view(p, s, now, &v);
	s->v[0] = idx;
	s->v[1] = v.cur + cost;
	s->v[2] = v.prev;
	s->n = 1;
}
