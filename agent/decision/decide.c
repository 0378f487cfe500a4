/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Most-restrictive-wins over a request's checks, and the header values.
 *
 * Denied if any non-shadow check denies (over its limit, store down with
 * fail: closed, or a missing key with missing: deny). 429 wins over 503: a
 * rule that knows the client is over its limit says more than one that
 * could not ask. retry_after is the largest among the denying checks and
 * never earlier than the deciding check's t. limit, remaining and reset
 * come from the check with the smallest remaining (among the denying ones
 * when denied). Shadow checks that would deny only raise <shadow>.
 * A cost that can never fit (allowed -1) is read as a denial whose retry is
 * DECIDE_NEVER_FITS_S: its Retry-After, t and reset all say so.
 *
 * Header values follow draft-ietf-httpapi-ratelimit-headers (-10, RFC 9651
 * structured fields): `"name";r=R;t=T` and `"name";q=Q;w=W`, members joined
 * by ", ", one per rule with headers on that is not in shadow mode. A member that would overflow the
 * buffer is left out whole, never cut. The legacy X-RateLimit-Limit,
 * -Remaining and -Reset are limit, remaining and reset themselves: the
 * agent only says whether HAProxy should send them (var legacy).
 */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "decide.h"
#include "util.h"

int64_t
decide_ceil_s(int64_t us)
{
	if (us <= 0)
		return 0;
	return (us + LIM_USEC_PER_SEC - 1) / LIM_USEC_PER_SEC;
}

/* Appends the member `"<name>";<k1>=<v1>;<k2>=<v2>` to the list in <buf>
 * (<*len> bytes so far), or nothing if it would not fit whole. */
static void
hdr_member(char *buf, size_t *len, const char *name, size_t nlen, char k1,
           int64_t v1, char k2, int64_t v2)
{
	char m[POLICY_NAME_MAX + 64], *p = m;

	if (nlen > POLICY_NAME_MAX)
		return;
	if (*len != 0) {
		*p++ = ',';
		*p++ = ' ';
	}
	*p++ = '"';
	memcpy(p, name, nlen);
	p += nlen;
	*p++ = '"';
	*p++ = ';';
	*p++ = k1;
	*p++ = '=';
	p = util_fmt_int(p, v1);
	*p++ = ';';
	*p++ = k2;
	*p++ = '=';
	p = util_fmt_int(p, v2);
	if (*len + (size_t)(p - m) >= DECIDE_HDR_MAX)
		return;
	memcpy(buf + *len, m, (size_t)(p - m));
	*len += (size_t)(p - m);
	buf[*len] = '\0';
}

/* The limits <o> was decided under: the rule's, or the fail: local
 * fallback's share of them (the quota the headers must state). */
static const struct lim_params *
lim_of(const struct check *c, const struct outcome *o)
{
	return o->lim != NULL ? o->lim : &c->lim;
}

static void
add_headers(const struct check *c, const struct lim_params *lim,
            const struct lim_result *r, struct decision *d)
{
	const char *name = c->rule->name;
	size_t      nlen = strlen(name);
	int64_t     t = r->allowed == 1 ? r->next_us
	                                : (r->retry_after_us > r->next_us
	                                           ? r->retry_after_us
	                                           : r->next_us);

	if (!c->rule->headers)
		return;
	hdr_member(d->ratelimit, &d->ratelimit_len, name, nlen, 'r',
	           r->remaining > 0 ? r->remaining : 0, 't', decide_ceil_s(t));
	hdr_member(d->ratelimit_policy, &d->ratelimit_policy_len, name, nlen,
	           'q', lim_header_quota(lim), 'w', lim_window_s(lim));
}

/* <r> as decide reads it: a cost that can never fit has no finite retry
 * (the limiter reports 0); the answer gives it DECIDE_NEVER_FITS_S. */
static struct lim_result
effective(struct lim_result r)
{
	if (r.allowed == -1)
		r.retry_after_us = DECIDE_NEVER_FITS_S * LIM_USEC_PER_SEC;
	return r;
}

/* Is check <i> a better "deciding" candidate than the current one? */
static int
better(const struct outcome *o, int denies, int cur, int cur_denies,
       const struct outcome *out)
{
	if (cur < 0)
		return 1;
	if (denies != cur_denies)
		return denies;
	if (o->res.remaining != out[cur].res.remaining)
		return o->res.remaining < out[cur].res.remaining;
	return o->res.retry_after_us > out[cur].res.retry_after_us;
}

static void
deny(struct decision *d, int status, int64_t retry_s)
{
	if (d->status == 0 || (status == 429 && d->status == 503))
		d->status = status;
	if (retry_s < 1)
		retry_s = 1;
	if (retry_s > d->retry_after)
		d->retry_after = retry_s;
}

/* Was <o> decided by a limiter (Redis, a store: local rule, or the
 * fail: local fallback), so that its <res> is valid? */
static int
evaluated(const struct outcome *o)
{
	return o->src == SRC_STORE || o->src == SRC_FAIL_LOCAL;
}

/* A concurrency CHECK: the request takes a lease if it passes. */
static int
is_lease(const struct check *c)
{
	return c->lim.algo == LIM_CONCURRENCY && c->op == LIM_OP_CHECK;
}

/* A reserving CHECK (reserve:): the request holds its reservation in
 * Redis, under its request id, if it passes; only its settle gives it
 * back. */
static int
is_reservation(const struct check *c)
{
	return c->kind == CHECK_EVAL && c->rule->reserves &&
	       c->op == LIM_OP_CHECK && c->memberlen > 0 &&
	       c->lim.reserve_lease_us > 0;
}

/* A request that passed holds a lease for each concurrency CHECK it made,
 * in Redis or in the local tier (store: local, or fail: local while Redis
 * is down), and may hold one in Redis for a CHECK whose answer was lost
 * (sent, then its deadline passed or the link failed: the script may have
 * run late). Each one needs its release: a lease left without one blocks
 * its slot for the whole lease. */
static int
took_lease(const struct check *checks, const struct outcome *out, int n)
{
	for (int i = 0; i < n; i++)
		if (is_lease(&checks[i]) &&
		    ((evaluated(&out[i]) && out[i].res.allowed == 1) ||
		     out[i].redis_lease))
			return 1;
	return 0;
}

/* 1 if a request-phase check of a count: response (or failures-like)
 * rule is among <checks>: its charge comes with the response. */
static int
charged_later(const struct check *checks, int n)
{
	for (int i = 0; i < n; i++)
		if (checks[i].kind == CHECK_EVAL &&
		    checks[i].rule->count == COUNT_RESPONSE &&
		    (checks[i].op == LIM_OP_PEEK ||
		     (checks[i].rule->reserves &&
		      checks[i].op == LIM_OP_CHECK)))
			return 1;
	return 0;
}

void
decide_mark_leases(const struct check *checks, struct outcome *out,
                   const int *idx, int n, int answered)
{
	int veto = 0;

	for (int j = 0; answered && j < n; j++) {
		const struct check *c = &checks[idx[j]];

		veto |= lim_vetoes(c->op, (c->flags & LIM_FL_SHADOW) != 0,
		                   &out[idx[j]].res);
	}
	for (int j = 0; j < n; j++) {
		struct outcome *o = &out[idx[j]];

		o->redis_lease = (is_lease(&checks[idx[j]]) ||
		                  is_reservation(&checks[idx[j]])) &&
		                 (!answered || (!veto && o->res.allowed == 1));
	}
}

int
decide_orphan(const struct check *c, const struct outcome *o, int status,
              int lost)
{
	int what = 0, local;

	if (is_reservation(c))
		return o->redis_lease && status != 0 && !lost
		               ? DECIDE_SETTLE_REDIS
		               : 0;
	if (o->redis_lease && (status != 0 || lost))
		what |= DECIDE_FREE_REDIS;
	local = o->src == SRC_FAIL_LOCAL ||
	        (o->src == SRC_STORE && c->rule->store == STORE_LOCAL);
	if (status == 0 && lost && is_lease(c) && local && o->res.allowed == 1)
		what |= DECIDE_FREE_LOCAL;
	return what;
}

/* Does some non-shadow check deny, so that nothing was charged? */
static int
vetoed(const struct check *checks, const struct outcome *out, int n)
{
	for (int i = 0; i < n; i++) {
		if (checks[i].flags & LIM_FL_SHADOW)
			continue;
		if (out[i].src == SRC_MISSING || out[i].src == SRC_FAIL_CLOSED)
			return 1;
		if (evaluated(&out[i]) && out[i].res.allowed != 1)
			return 1;
	}
	return 0;
}

/* An allowed check of a vetoed request was evaluated as if charged, and
 * was not: report what it really has left, and, given back to a full
 * budget, no time to wait (limiter.h: next_us is 0 when the budget is
 * full; a fixed window's stays the end of its window). */
static struct lim_result
as_uncharged(const struct check *c, const struct lim_params *lim,
             struct lim_result r)
{
	int64_t q = lim_quota(lim), add = c->cost;

	if (r.allowed != 1 || c->op != LIM_OP_CHECK || c->cost <= 0)
		return r;
	if (lim->algo == LIM_CONCURRENCY) {
		add = 1; /* one lease a request, whatever its cost */
	} else if (lim_delay_us(lim, &r) > 0) {
		/* a slot ahead: its remaining was held at 0; before the
		 * charge the TAT was cost emission intervals earlier */
		int64_t left = lim->dvt_us - (r.full_us - c->cost * lim->ei_us);

		add = left > 0 ? left / lim->ei_us : 0;
	} else if (lim->algo == LIM_SLIDING_WINDOW &&
	           r.next_us > r.full_us - lim->period_us) {
		/* no previous window (its share would make next <= W - e
		 * = full - W): the units are the current window's count,
		 * and the next one goes as that count decays in the next
		 * window (lim_window.c, sw_until) */
		int64_t cur = lim_quota(lim) - r.remaining - c->cost;

		if (cur > 0)
			r.next_us = r.full_us - lim_muldiv(cur - 1,
			                                   lim->period_us, cur,
			                                   NULL);
	}
	r.remaining += add;
	if (r.remaining >= q) {
		r.remaining = q;
		if (lim->algo != LIM_FIXED_WINDOW)
			r.next_us = r.full_us = 0;
	}
	return r;
}

void
decide(const struct check *checks, const struct outcome *out, int n,
       enum headers_mode headers, struct decision *d)
{
	int best = -1, best_denies = 0, veto = vetoed(checks, out, n);

	/* not memset: the two header buffers are 2 KB, and empty is enough */
	d->status = 0;
	d->retry_after = d->limit = d->remaining = d->reset = 0;
	d->policy = NULL;
	d->degraded = d->shadow = d->has_limits = d->release = 0;
	d->response = 0;
	d->legacy = 0;
	d->delay_us = 0;
	d->ratelimit[0] = d->ratelimit_policy[0] = '\0';
	d->ratelimit_len = d->ratelimit_policy_len = 0;
	assert(n >= 0 && (n == 0 || (checks != NULL && out != NULL)));
	for (int i = 0; i < n; i++) {
		const struct check   *c = &checks[i];
		const struct outcome *o = &out[i];
		int shadow = (c->flags & LIM_FL_SHADOW) != 0, denies;
		struct lim_result er;

		if (o->src == SRC_NOT_RUN)
			continue;
		if (o->src != SRC_STORE && o->src != SRC_MISSING)
			d->degraded = 1;
		if (o->src == SRC_FAIL_OPEN)
			continue;
		if (o->src == SRC_FAIL_CLOSED || o->src == SRC_MISSING) {
			if (shadow) {
				d->shadow = 1;
				continue;
			}
			deny(d, o->src == SRC_MISSING ? 429 : 503, 1);
			if (d->policy == NULL)
				d->policy = c->rule->name;
			continue;
		}
		er = effective(o->res);
		denies = er.allowed != 1;
		if (denies && shadow) {
			d->shadow = 1;
			denies = 0;
		}
		if (denies)
			deny(d, 429, decide_ceil_s(er.retry_after_us));
		else if (!shadow &&
		         lim_delay_us(lim_of(c, o), &er) > d->delay_us)
			d->delay_us = lim_delay_us(
				lim_of(c, o),
				&er); /* a shadow
			               * rule never holds traffic */
		/* a shadow rule is reported to the operator (shadow,
		 * metrics, logs), not to the client, who would stop at an
		 * r=0 never enforced: as for the legacy fields (best) */
		if (!shadow &&
		    (headers == HEADERS_IETF || headers == HEADERS_BOTH)) {
			const struct lim_params *lim = lim_of(c, o);
			struct lim_result        r =
                                veto ? as_uncharged(c, lim, er) : er;

			add_headers(c, lim, &r, d);
		}
		if (!shadow && better(o, denies, best, best_denies, out)) {
			best = i;
			best_denies = denies;
		}
	}
	if (best >= 0) {
		struct lim_result        eb = effective(out[best].res);
		const struct lim_result *r = &eb;
		const struct lim_params *lim =
			lim_of(&checks[best], &out[best]);

		d->has_limits = 1;
		d->limit = lim_quota(lim);
		if (veto && !best_denies)
			eb = as_uncharged(&checks[best], lim, eb);
		d->remaining = r->remaining > 0 ? r->remaining : 0;
		d->reset = decide_ceil_s(r->next_us);
		if (best_denies || d->policy == NULL)
			d->policy = checks[best].rule->name;
		if (best_denies && d->reset < decide_ceil_s(r->retry_after_us))
			d->reset = decide_ceil_s(r->retry_after_us);
		d->legacy = (headers == HEADERS_LEGACY ||
		             headers == HEADERS_BOTH) &&
		            checks[best].rule->headers;
	}
	if (d->status != 0 && d->retry_after < d->reset && best_denies)
		d->retry_after = d->reset;
	if (d->status == 0) {
		d->release = took_lease(checks, out, n);
		d->response = charged_later(checks, n);
	}
	/* a denial always says when to come back; a 429 of a limiter is its
	 * deciding rule's */
	assert(d->status == 0 || d->retry_after >= 1);
	assert(!best_denies || (d->status == 429 && d->policy != NULL));
}

/* The ACK actions; the two IETF strings only when <hdrs>. */
static void
encode(const struct decision *d, struct spop_writer *w, int hdrs)
{
	spop_w_set_var_int(w, SPOP_SCOPE_TXN, "status", d->status);
	if (d->status != 0)
		spop_w_set_var_int(w, SPOP_SCOPE_TXN, "retry_after",
		                   d->retry_after);
	if (d->has_limits) {
		spop_w_set_var_int(w, SPOP_SCOPE_TXN, "limit", d->limit);
		spop_w_set_var_int(w, SPOP_SCOPE_TXN, "remaining",
		                   d->remaining);
		spop_w_set_var_int(w, SPOP_SCOPE_TXN, "reset", d->reset);
	}
	if (d->policy != NULL)
		spop_w_set_var_str(w, SPOP_SCOPE_TXN, "policy", d->policy,
		                   strlen(d->policy));
	if (hdrs && d->ratelimit_len != 0) {
		spop_w_set_var_str(w, SPOP_SCOPE_TXN, "ratelimit", d->ratelimit,
		                   d->ratelimit_len);
		spop_w_set_var_str(w, SPOP_SCOPE_TXN, "ratelimit_policy",
		                   d->ratelimit_policy,
		                   d->ratelimit_policy_len);
	}
	if (d->release)
		spop_w_set_var_int(w, SPOP_SCOPE_TXN, "release", 1);
	if (d->response)
		spop_w_set_var_int(w, SPOP_SCOPE_TXN, "response", 1);
	if (d->legacy)
		spop_w_set_var_int(w, SPOP_SCOPE_TXN, "legacy", 1);
	spop_w_set_var_int(w, SPOP_SCOPE_TXN, "degraded", d->degraded);
	spop_w_set_var_int(w, SPOP_SCOPE_TXN, "shadow", d->shadow);
}

void
decide_encode(const struct decision *d, struct spop_writer *w)
{
	encode(d, w, 1);
}

void
decide_encode_nohdr(const struct decision *d, struct spop_writer *w)
{
	encode(d, w, 0);
}

void
decide_encode_min(const struct decision *d, struct spop_writer *w)
{
	spop_w_set_var_int(w, SPOP_SCOPE_TXN, "status", d->status);
	if (d->status != 0)
		spop_w_set_var_int(w, SPOP_SCOPE_TXN, "retry_after",
		                   d->retry_after);
	/* what HAProxy must send back: without them a lease stays taken
	 * for its whole length and a count: response rule is never
	 * charged */
	if (d->release)
		spop_w_set_var_int(w, SPOP_SCOPE_TXN, "release", 1);
	if (d->response)
		spop_w_set_var_int(w, SPOP_SCOPE_TXN, "response", 1);
	spop_w_set_var_int(w, SPOP_SCOPE_TXN, "degraded", d->degraded);
	spop_w_set_var_int(w, SPOP_SCOPE_TXN, "shadow", d->shadow);
}
