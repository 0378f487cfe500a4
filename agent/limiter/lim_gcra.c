/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GCRA, the leaky bucket (its meter is GCRA; delay mode widens the
 * tolerance) and the token bucket: the C twins of ratelimit.lua.
 *
 * GCRA keeps one word per key, the theoretical arrival time TAT:
 *   EI = P / N (>= 1 µs), DVT = EI * burst, tol = DVT (+ max_delay in the
 *   leaky bucket's delay mode)
 *   tat = max(stored, now); new = tat + EI * cost
 *   new - tol > now: denied, retry = new - tol - now, state unchanged
 *   else allowed, store new (the script with PX ceil((new - now) / 1000))
 *   remaining = max(0, floor((DVT - (T - now)) / EI)), T = new or tat
 *   full = T - now; next = full - floor((full - 1) / EI) * EI (0 if full <= 0)
 * Invariant the script keeps: the stored TAT never exceeds now + tol (now +
 * 2 tol after LIM_OP_FORCE), and a denial never moves it, so a key denied
 * until T stays denied until T for cost 1. cost > tol / EI never fits.
 *
 * The token bucket keeps (tokens in millionths, last), <last> the anchor
 * of the refill, and refills one unit per EI, GCRA's emission interval:
 *   tokens = min(full, stored + floor((now - last) * 10^6 / EI)),
 *   full = burst * 10^6; allowed if tokens >= cost * 10^6.
 * A charge subtracts from the stored tokens and keeps <last>; only a full
 * bucket (or a FORCE clamp) moves the anchor to now. The stored tokens are
 * then whole units, and the bucket is exactly GCRA with TAT = last +
 * (burst - stored / 10^6) * EI: the same decisions, remaining, retry, next
 * and full at every rate, also those like 7/min where EI = floor(P / N)
 * is not P / N (ALGORITHMS.md: "Same behaviour as GCRA"). Refilling at
 * N / P instead, or re-anchoring at every charge, would drift from GCRA
 * by a µs or more. The refill is computed only while the bucket is not
 * full at <now>, so no product overflows. FORCE may drive tokens
 * negative, never below -full.
 */
#include "limiter.h"

/* ---- GCRA and leaky bucket --------------------------------------------- */

static int64_t
gcra_tol(const struct lim_params *p)
{
	return p->dvt_us + (p->algo == LIM_LEAKY_BUCKET ? p->max_delay_us : 0);
}

static void
gcra_fill(const struct lim_params *p, int64_t t, int64_t now,
          struct lim_result *out)
{
	int64_t full = t - now;
	int64_t rem = (p->dvt_us - full) / p->ei_us;

	if (p->dvt_us - full < 0)
		rem = 0;
	out->remaining = rem;
	out->full_us = full > 0 ? full : 0;
	out->next_us = full <= 0 ? 0 : full - (full - 1) / p->ei_us * p->ei_us;
}

int
lim__gcra_eval(const struct lim_params *p, const struct lim_state *s, int op,
               int64_t cost, int64_t now, struct lim_result *out)
{
	int64_t tol = gcra_tol(p);
	int64_t tat = s->v[0] > now ? s->v[0] : now;
	int64_t nw;

	out->retry_after_us = 0;
	if (op == LIM_OP_RELEASE)
		cost = 0;
	if (cost > tol / p->ei_us) {
		out->allowed = -1;
		gcra_fill(p, tat, now, out);
		return op == LIM_OP_FORCE;
	}
	nw = tat + p->ei_us * cost;
	if (nw - tol > now) {
		out->allowed = 0;
		out->retry_after_us = nw - tol - now;
		gcra_fill(p, tat, now, out);
		return op == LIM_OP_FORCE;
	}
	out->allowed = 1;
	gcra_fill(p, nw, now, out);
	return cost > 0;
}

void
lim__gcra_commit(const struct lim_params *p, struct lim_state *s, int op,
                 int64_t cost, int64_t now)
{
	int64_t tol = gcra_tol(p);
	int64_t tat = s->v[0] > now ? s->v[0] : now;
	int64_t cmax = 2 * tol / p->ei_us + 1;
	int64_t cap = now + 2 * tol;
	int64_t nw;

	if (op == LIM_OP_RELEASE || cost <= 0)
		return;
	nw = tat + p->ei_us * (cost < cmax ? cost : cmax);
	if (cap < tat)
		cap = tat;
	s->v[0] = nw < cap ? nw : cap;
}

/* ---- token bucket -------------------------------------------------------- */

static int64_t
floor_mod(int64_t a, int64_t b)
{
	int64_t r = a % b;

	return r < 0 ? r + b : r;
}

/* The bucket at <now>: <tok> millionths, refilled from <base> millionths
 * at the anchor <at> = now - <el> (el = 0 when full or fresh: the anchor
 * is now). Times are computed from the anchor, so a peek or a denial
 * reports the exact instant the floor()ed refill reaches a level. */
struct tb_view {
	int64_t tok, base, el, at;
};

static void
tb_view(const struct lim_params *p, const struct lim_state *s, int64_t now,
        struct tb_view *v)
{
	int64_t full = p->burst * LIM_MICRO;
	int64_t need;

	v->tok = v->base = full;
	v->el = 0;
	v->at = now;
	if (!s->v[2] || (need = full - s->v[0]) <= 0)
		return;
	v->base = v->tok = s->v[0];
	v->at = s->v[1];
	v->el = now - s->v[1];
	if (v->el <= 0) {
		v->el = 0;
		return;
	}
	if (v->el >= lim_muldiv_ceil(need, p->ei_us, LIM_MICRO)) {
		v->tok = v->base = full;
		v->el = 0;
		v->at = now;
		return;
	}
	v->tok += lim_muldiv(v->el, LIM_MICRO, p->ei_us, NULL);
}

/* µs from now until the bucket holds <level> millionths. */
static int64_t
tb_until(const struct lim_params *p, const struct tb_view *v, int64_t level)
{
	int64_t t;

	if (v->tok >= level)
		return 0;
	t = lim_muldiv_ceil(level - v->base, p->ei_us, LIM_MICRO);
	return t > v->el ? t - v->el : 0;
}

static void
tb_fill(const struct lim_params *p, const struct tb_view *v,
        struct lim_result *out)
{
	int64_t full = p->burst * LIM_MICRO;

	out->remaining = v->tok > 0 ? v->tok / LIM_MICRO : 0;
	out->full_us = tb_until(p, v, full);
	/* as GCRA's next: until the next whole unit boundary */
	out->next_us =
		v->tok >= full
			? 0
			: tb_until(p, v,
	                           v->tok - floor_mod(v->tok, LIM_MICRO) +
	                                   LIM_MICRO);
}

int
lim__tb_eval(const struct lim_params *p, const struct lim_state *s, int op,
             int64_t cost, int64_t now, struct lim_result *out)
{
	struct tb_view v;
	int64_t        want;

	tb_view(p, s, now, &v);
	out->retry_after_us = 0;
	if (op == LIM_OP_RELEASE)
		cost = 0;
	if (cost > p->burst) {
		out->allowed = -1;
		tb_fill(p, &v, out);
		return op == LIM_OP_FORCE;
	}
	want = cost * LIM_MICRO;
	if (v.tok < want) {
		out->allowed = 0;
		out->retry_after_us = tb_until(p, &v, want);
		tb_fill(p, &v, out);
		return op == LIM_OP_FORCE;
	}
	out->allowed = 1;
	v.tok -= want; /* the state the commit writes */
	v.base -= want;
	tb_fill(p, &v, out);
	return cost > 0;
}

/* The charge keeps the anchor, so no fraction of a refill is ever lost.
 * A FORCE that would take the bucket below -full starts it again at
 * exactly -full now, as GCRA's TAT clamp at now + 2 * DVT. */
void
lim__tb_commit(const struct lim_params *p, struct lim_state *s, int op,
               int64_t cost, int64_t now)
{
	int64_t        full = p->burst * LIM_MICRO;
	struct tb_view v;

	if (op == LIM_OP_RELEASE || cost <= 0)
		return;
	tb_view(p, s, now, &v);
	if (cost > 2 * p->burst)
		cost = 2 * p->burst;
	if (v.tok - cost * LIM_MICRO < -full) {
		s->v[0] = -full;
		s->v[1] = now;
	} else {
		s->v[0] = v.base - cost * LIM_MICRO;
		s->v[1] = v.at;
	}
	s->v[2] = 1;
}
