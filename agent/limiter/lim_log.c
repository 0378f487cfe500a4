/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Sliding log and concurrency: the two algorithms whose state is a set,
 * a sorted set in the script and a small array here (bounded by L).
 *
 * Sliding log: one timestamp per unit charged; an entry is live while
 * ts > now - W. Allowed iff live + cost <= L. On a denial, k = live + cost
 * - L entries must expire first: retry = ts of the k-th oldest live + W -
 * now (the cost-th oldest when the log is full). remaining = L - live
 * after; next = oldest + W - now; full = newest + W - now. Only the newest
 * L entries are kept (LIM_OP_FORCE may add more): any decision that the
 * dropped, older entries could change is already blocked by the kept
 * ones, so the trim is exact and the set never exceeds L members.
 *
 * Concurrency: one lease per request id, score = expiry = now + lease; a
 * lease is live while expiry > now. Allowed iff live + (member not yet
 * holding a live lease) <= L; a member that holds one refreshes it.
 * retry = earliest expiry - now; next = earliest - now; full = latest -
 * now. RELEASE removes the member's lease. At most L leases are kept.
 *
 * The script keeps each set under one key, "<base>", with PEXPIRE of the
 * window (log) or lease (concurrency) on every write; evaluation only
 * reads, so a denial or a peek changes nothing.
 */
#include <string.h>

#include "limiter.h"
#include "util.h"

static int64_t
clamp0(int64_t v)
{
	return v > 0 ? v : 0;
}

static void
reserve(struct lim_state *s, uint32_t want, int ids)
{
	uint32_t cap = s->cap ? s->cap : 4;

	if (want <= s->cap)
		return;
	while (cap < want)
		cap *= 2;
	s->ts = xrealloc(s->ts, cap * sizeof(*s->ts));
	if (ids)
		s->ids = xrealloc(s->ids, cap * sizeof(*s->ids));
	s->cap = cap;
}

/* ---- sliding log -------------------------------------------------------- */

/* Index of the first live entry. */
static uint32_t
log_first_live(const struct lim_state *s, int64_t now, int64_t w)
{
	uint32_t lo = 0, hi = s->n, mid;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (s->ts[mid] <= now - w)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int
lim__log_eval(const struct lim_params *p, const struct lim_state *s, int op,
              int64_t cost, int64_t now, struct lim_result *out)
{
	int64_t  w = p->period_us, lim = p->rate;
	uint32_t first = log_first_live(s, now, w);
	int64_t  live = s->n - first, after = live;
	int64_t  oldest = live ? s->ts[first] : now;
	int64_t  newest = live ? s->ts[s->n - 1] : now;
	int      charge;

	if (op == LIM_OP_RELEASE)
		cost = 0;
	out->retry_after_us = 0;
	if (cost > lim) {
		out->allowed = -1;
		charge = op == LIM_OP_FORCE;
	} else if (live + cost > lim) {
		out->allowed = 0;
		out->retry_after_us =
			s->ts[first + (live + cost - lim) - 1] + w - now;
		charge = op == LIM_OP_FORCE;
	} else {
		out->allowed = 1;
		if (cost > 0) {
			after += cost;
			newest = now;
		}
		charge = cost > 0;
	}
	out->remaining = clamp0(lim - after);
	out->next_us = after ? oldest + w - now : 0;
	out->full_us = after ? newest + w - now : 0;
	return charge;
}

void
lim__log_commit(const struct lim_params *p, struct lim_state *s, int op,
                int64_t cost, int64_t now)
{
	/* L may be 2^32 (LIM_COST_MAX): not a uint32_t */
	int64_t  lim = p->rate;
	uint32_t first, add, i, pos;

	if (op == LIM_OP_RELEASE || cost <= 0)
		return;
	first = log_first_live(s, now, p->period_us);
	if (first > 0) {
		memmove(s->ts, s->ts + first, (s->n - first) * sizeof(*s->ts));
		s->n -= first;
	}
	add = (uint32_t)(cost > lim ? lim : cost);
	if ((int64_t)s->n + add > lim) { /* FORCE: keep the newest L */
		uint32_t drop = (uint32_t)((int64_t)s->n + add - lim);

		if (drop > s->n)
			drop = s->n;
		if (drop > 0)
			memmove(s->ts, s->ts + drop,
			        (s->n - drop) * sizeof(*s->ts));
		s->n -= drop;
	}
	reserve(s, s->n + add, 0);
	pos = s->n; /* keep ascending if the clock stepped back */
	while (pos > 0 && s->ts[pos - 1] > now)
		pos--;
	memmove(s->ts + pos + add, s->ts + pos, (s->n - pos) * sizeof(*s->ts));
	for (i = 0; i < add; i++)
		s->ts[pos + i] = now;
	s->n += add;
}

/* ---- concurrency -------------------------------------------------------- */

struct conc_view {
	int64_t  live;     /* live leases, the member's included */
	int      has;      /* the member holds a live lease */
	int64_t  earliest; /* among live leases other than the member's */
	int64_t  latest;
	uint32_t others;
};

static void
conc_view(const struct lim_state *s, uint64_t member, int64_t now,
          struct conc_view *v)
{
	uint32_t i;

	memset(v, 0, sizeof(*v));
	for (i = 0; i < s->n; i++) {
		if (s->ts[i] <= now)
			continue;
		v->live++;
		if (s->ids[i] == member) {
			v->has = 1;
			continue;
		}
		if (v->others == 0 || s->ts[i] < v->earliest)
			v->earliest = s->ts[i];
		if (v->others == 0 || s->ts[i] > v->latest)
			v->latest = s->ts[i];
		v->others++;
	}
}

/* Fills next/full from the other leases plus an optional own expiry. */
static void
conc_times(const struct conc_view *v, int64_t own, int64_t now,
           struct lim_result *out)
{
	int64_t lo = v->earliest, hi = v->latest;

	if (own > 0) {
		if (v->others == 0 || own < lo)
			lo = own;
		if (v->others == 0 || own > hi)
			hi = own;
	} else if (v->others == 0) {
		out->next_us = out->full_us = 0;
		return;
	}
	out->next_us = lo - now;
	out->full_us = hi - now;
}

int
lim__conc_eval(const struct lim_params *p, const struct lim_state *s, int op,
               int64_t cost, uint64_t member, int64_t now,
               struct lim_result *out)
{
	struct conc_view v;
	int64_t          own_exp = 0, need;
	uint32_t         i;

	conc_view(s, member, now, &v);
	out->retry_after_us = 0;
	out->allowed = 1;
	if (op == LIM_OP_RELEASE) {
		out->remaining = clamp0(p->rate - v.others);
		conc_times(&v, 0, now, out);
		return v.has;
	}
	if (v.has)
		for (i = 0; i < s->n; i++)
			if (s->ids[i] == member && s->ts[i] > now)
				own_exp = s->ts[i];
	need = cost > 0 && !v.has;
	if (v.live + need > p->rate) {
		out->allowed = 0;
		out->remaining = clamp0(p->rate - v.live);
		conc_times(&v, own_exp, now, out);
		out->retry_after_us = out->next_us; /* earliest expiry */
		return op == LIM_OP_FORCE;
	}
	if (cost > 0)
		own_exp = now + p->period_us;
	out->remaining = clamp0(p->rate - v.live - need);
	conc_times(&v, own_exp, now, out);
	return cost > 0;
}

void
lim__conc_commit(const struct lim_params *p, struct lim_state *s, int op,
                 int64_t cost, uint64_t member, int64_t now)
{
	uint32_t i, j, low;
	int64_t  lim = p->rate; /* may be 2^32: not a uint32_t */

	for (i = j = 0; i < s->n; i++) { /* drop expired, and the member */
		if (s->ts[i] <= now || s->ids[i] == member)
			continue;
		s->ts[j] = s->ts[i];
		s->ids[j++] = s->ids[i];
	}
	s->n = j;
	if (op == LIM_OP_RELEASE || cost <= 0)
		return;
	if ((int64_t)s->n >= lim) { /* FORCE: drop the earliest */
		low = 0;
		for (i = 1; i < s->n; i++)
			if (s->ts[i] < s->ts[low])
				low = i;
		s->ts[low] = s->ts[s->n - 1];
		s->ids[low] = s->ids[s->n - 1];
		s->n--;
	}
	reserve(s, s->n + 1, 1);
	s->ts[s->n] = now + p->period_us;
	s->ids[s->n++] = member;
}
