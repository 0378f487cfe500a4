/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What every algorithm shares: parameter validation (lim_params_init), the
 * quota reported in headers, the script's p1..p3, rate and duration
 * parsing, algorithm names, exact integer helpers (muldiv on __int128,
 * the UTC calendar from Howard Hinnant's civil-from-days), and the
 * dispatch of lim_eval/lim_commit to the per-family twins.
 *
 * The maths lives in lim_gcra.c (gcra, leaky and token bucket),
 * lim_window.c (fixed and sliding window) and lim_log.c (sliding log and
 * concurrency). Nothing here allocates except lim_state arrays, reads a
 * clock, or includes libev or hiredis; every function is reentrant.
 *
 * Bounds checked here keep every intermediate value of the Lua script
 * below 2^53, where doubles are exact: tolerances and windows at most
 * LIM_TIME_MAX (2^48 µs), token-bucket capacity at most 2^50 millionths.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "limiter.h"
#include "util.h"

static const char *const algo_names[LIM_ALGO_COUNT] = {
	[LIM_GCRA] = "gcra",
	[LIM_TOKEN_BUCKET] = "token-bucket",
	[LIM_LEAKY_BUCKET] = "leaky-bucket",
	[LIM_FIXED_WINDOW] = "fixed-window",
	[LIM_SLIDING_WINDOW] = "sliding-window",
	[LIM_SLIDING_LOG] = "sliding-log",
	[LIM_CONCURRENCY] = "concurrency",
};

const char *
lim_algo_name(enum lim_algo a)
{
	if ((unsigned)a >= LIM_ALGO_COUNT)
		return "unknown";
	return algo_names[a];
}

int
lim_algo_from_name(const char *s)
{
	int i;

	for (i = 0; i < LIM_ALGO_COUNT; i++)
		if (strcmp(s, algo_names[i]) == 0)
			return i;
	return -1;
}

static int
is_gcra_family(enum lim_algo a)
{
	return a == LIM_GCRA || a == LIM_TOKEN_BUCKET || a == LIM_LEAKY_BUCKET;
}

int
lim_params_init(struct lim_params *p, const char **err)
{
	if ((unsigned)p->algo >= LIM_ALGO_COUNT)
		return *err = "unknown algorithm", -1;
	if (p->rate <= 0)
		return *err = "rate/limit must be positive", -1;
	if (p->rate > LIM_COST_MAX)
		return *err = "rate/limit too large", -1;
	if (p->algo == LIM_SLIDING_LOG && p->rate > LIM_LOG_MAX)
		return *err = "sliding-log limit above 1000000: it keeps one "
		              "entry per unit (memory, and a Redis call each); "
		              "use sliding-window",
		       -1;
	if (p->burst < 0)
		return *err = "burst must not be negative", -1;
	if (p->max_delay_us < 0)
		return *err = "max_delay must not be negative", -1;
	if (p->max_delay_us > 0 && p->algo != LIM_LEAKY_BUCKET)
		return *err = "max_delay is for leaky-bucket only", -1;
	if (p->max_delay_us > LIM_TIME_MAX)
		return *err = "max_delay too long", -1;
	if (p->calendar != LIM_CAL_NONE) {
		if (p->algo != LIM_FIXED_WINDOW)
			return *err = "calendar windows are fixed-window only",
			       -1;
		if (p->calendar == LIM_CAL_DAY)
			p->period_us = LIM_DAY_US;
		else if (p->calendar == LIM_CAL_MONTH)
			p->period_us = LIM_MONTH_US;
		else
			return *err = "unknown calendar", -1;
	}
	if (lim_block_check(p, err) == -1)
		return -1;
	if (p->period_us <= 0)
		return *err = "period/window must be positive", -1;
	if (p->period_us > LIM_TIME_MAX)
		return *err = "period/window too long", -1;
	if (!is_gcra_family(p->algo)) {
		p->ei_us = 0;
		p->dvt_us = 0;
		return 0;
	}
	if (p->burst == 0)
		p->burst = 1;
	/* EI is whole microseconds: a faster rate would silently be capped
	 * at 1000000/s, a lower limit than the policy says */
	p->ei_us = p->period_us / p->rate;
	if (p->ei_us < 1)
		return *err = "rate above 1000000/s (one per microsecond): count "
		              "in larger units (a cost in KB, say)",
		       -1;
	if (p->burst > LIM_TIME_MAX / p->ei_us)
		return *err = "burst * emission interval too long", -1;
	p->dvt_us = p->ei_us * p->burst;
	if (p->algo == LIM_TOKEN_BUCKET && p->burst > (1LL << 50) / LIM_MICRO)
		return *err = "token-bucket burst too large", -1;
	return 0;
}

int64_t
lim_quota(const struct lim_params *p)
{
	return is_gcra_family(p->algo) ? p->burst : p->rate;
}

int64_t
lim_window_s(const struct lim_params *p)
{
	int64_t us = is_gcra_family(p->algo) ? p->dvt_us : p->period_us;

	return (us + LIM_USEC_PER_SEC - 1) / LIM_USEC_PER_SEC;
}

/* For the GCRA family q is the burst and w its tolerance, a rate of one
 * per EI. A tolerance that is not whole seconds is rounded up, and the
 * burst per that w would understate the rate: 100/s with a burst of 1
 * would read 1 per second. Then q is the emission intervals that fit in
 * w: never more than the rate, and at least the burst. */
int64_t
lim_header_quota(const struct lim_params *p)
{
	if (!is_gcra_family(p->algo) || p->dvt_us % LIM_USEC_PER_SEC == 0)
		return lim_quota(p);
	return lim_window_s(p) * LIM_USEC_PER_SEC / p->ei_us;
}

double
lim_rate_excess(const struct lim_params *p)
{
	if (!is_gcra_family(p->algo) || p->ei_us <= 0)
		return 0.;
	return (double)p->period_us / ((double)p->ei_us * (double)p->rate) - 1.;
}

void
lim_script_params(const struct lim_params *p, int64_t out[LIM_SCRIPT_PARAMS])
{
	out[3] = p->block_us;
	out[4] = p->block_max_us;
	out[5] = p->reserve_lease_us;
	switch (p->algo) {
	case LIM_GCRA:
	case LIM_LEAKY_BUCKET:
		out[0] = p->ei_us;
		out[1] = p->dvt_us;
		out[2] = p->algo == LIM_LEAKY_BUCKET ? p->max_delay_us : 0;
		break;
	case LIM_TOKEN_BUCKET:
		out[0] = p->rate;
		out[1] = p->period_us;
		out[2] = p->burst;
		break;
	case LIM_FIXED_WINDOW:
		out[0] = p->rate;
		out[1] = p->period_us;
		out[2] = p->calendar;
		break;
	default:
		out[0] = p->rate;
		out[1] = p->period_us;
		out[2] = 0;
		break;
	}
}

/* ---- parsing ------------------------------------------------------------ */

struct unit {
	const char *name;
	int64_t     us;
};

static const struct unit duration_units[] = {
	{ "us", 1 },
	{ "ms", 1000 },
	{ "s", LIM_USEC_PER_SEC },
	{ "sec", LIM_USEC_PER_SEC },
	{ "m", 60 * LIM_USEC_PER_SEC },
	{ "min", 60 * LIM_USEC_PER_SEC },
	{ "h", 3600 * LIM_USEC_PER_SEC },
	{ "hour", 3600 * LIM_USEC_PER_SEC },
	{ "d", LIM_DAY_US },
	{ "day", LIM_DAY_US },
};

/* Reads a positive decimal integer (no sign, no spaces) into <*v>.
 * Returns the first byte after it, or NULL. */
static const char *
parse_uint(const char *s, int64_t *v)
{
	char     *end;
	long long n;

	if (!isdigit((unsigned char)*s))
		return NULL;
	errno = 0;
	n = strtoll(s, &end, 10);
	if (errno != 0 || n > LIM_TIME_MAX)
		return NULL;
	*v = n;
	return end;
}

static int
unit_lookup(const char *s, int64_t *us)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(duration_units); i++)
		if (strcmp(s, duration_units[i].name) == 0) {
			*us = duration_units[i].us;
			return 0;
		}
	return -1;
}

int
lim_parse_duration(const char *s, int64_t *us)
{
	int64_t n, mult;

	if ((s = parse_uint(s, &n)) == NULL || unit_lookup(s, &mult) == -1)
		return -1;
	if (n > LIM_TIME_MAX / mult)
		return -1;
	*us = n * mult;
	return 0;
}

int
lim_parse_rate(const char *s, int64_t *n, int64_t *period_us,
               enum lim_calendar *cal)
{
	const char *slash = strchr(s, '/');
	const char *u;
	char        num[32];
	int64_t     count, mult = 1, unit;
	size_t      len;

	if (slash == NULL || (size_t)(slash - s) >= sizeof(num))
		return -1;
	len = (size_t)(slash - s);
	memcpy(num, s, len);
	num[len] = '\0';
	if ((u = parse_uint(num, &count)) == NULL || *u != '\0' || count <= 0)
		return -1;
	u = slash + 1;
	if (isdigit((unsigned char)*u)) {
		if ((u = parse_uint(u, &mult)) == NULL || mult <= 0)
			return -1;
	}
	if (strcmp(u, "month") == 0) {
		if (u != slash + 1)
			return -1; /* "N/2month" is no calendar month */
		*n = count;
		*period_us = LIM_MONTH_US;
		if (cal != NULL)
			*cal = LIM_CAL_MONTH;
		return 0;
	}
	if (unit_lookup(u, &unit) == -1 || unit < LIM_USEC_PER_SEC)
		return -1;
	if (mult > LIM_TIME_MAX / unit)
		return -1;
	*n = count;
	*period_us = mult * unit;
	if (cal != NULL)
		*cal = LIM_CAL_NONE;
	return 0;
}

/* ---- exact integer helpers ---------------------------------------------- */

int64_t
lim_muldiv(int64_t a, int64_t b, int64_t c, int64_t *rem)
{
	__int128 x = (__int128)a * b;

	if (rem != NULL)
		*rem = (int64_t)(x % c);
	return (int64_t)(x / c);
}

int64_t
lim_muldiv_ceil(int64_t a, int64_t b, int64_t c)
{
	int64_t r, q = lim_muldiv(a, b, c, &r);

	return q + (r > 0);
}

int64_t
lim_charge_taken(int algo, const int64_t p[LIM_SCRIPT_PARAMS], int64_t cost,
                 const struct lim_result *r, int64_t *level)
{
	int64_t x, take;

	switch (algo) {
	case LIM_GCRA:
	case LIM_LEAKY_BUCKET: { /* ratelimit.lua gcra_commit() */
		int64_t ei = p[0], tol = p[1] + p[2];
		int64_t c = cost, cap;

		if (c > 2 * tol / ei + 1)
			c = 2 * tol / ei + 1;
		/* x: the TAT the charge started from, minus now (>= 0) */
		if (level != NULL && *level != LIM_LEVEL_NONE)
			x = *level;
		else if (r->allowed == 1) /* full is after the charge */
			x = r->full_us - c * ei;
		else
			x = r->full_us;
		if (x < 0)
			x = 0;
		cap = 2 * tol > x ? 2 * tol : x;
		take = x + c * ei <= cap ? c * ei : cap - x;
		break;
	}
	case LIM_TOKEN_BUCKET: { /* ratelimit.lua tb_commit() */
		int64_t full = p[2] * LIM_MICRO;
		int64_t ei = p[1] / p[0] > 1 ? p[1] / p[0] : 1;
		int64_t want = (cost < 2 * p[2] ? cost : 2 * p[2]) * LIM_MICRO;

		/* x: the tokens before the charge, never above the truth */
		if (level != NULL && *level != LIM_LEVEL_NONE)
			x = *level;
		else if (r->allowed == 1)
			x = r->remaining * LIM_MICRO + want;
		else {
			/* full_us = ceil((full - base) ei / M) - el, so
			 * tokens > full - full_us M / ei - 1 */
			x = full - lim_muldiv_ceil(r->full_us, LIM_MICRO, ei);
			if (r->remaining * LIM_MICRO > x)
				x = r->remaining * LIM_MICRO;
		}
		if (x < -full)
			x = -full;
		if (x > full)
			x = full;
		take = x - want < -full ? x + full : want;
		break;
	}
	default:
		return -1;
	}
	if (take < 0)
		take = 0;
	if (level != NULL)
		*level = algo == LIM_TOKEN_BUCKET ? x - take : x + take;
	return take;
}

/* days since 1970-01-01 of y-m-d (proleptic Gregorian). */
int64_t
lim_days_from_civil(int64_t y, int m, int d)
{
	int64_t era, yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

void
lim_civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
	int64_t era, doe, yoe, doy, mp;

	z += 719468;
	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	*d = (int)(doy - (153 * mp + 2) / 5 + 1);
	*m = (int)(mp < 10 ? mp + 3 : mp - 9);
	*y = yoe + era * 400 + (*m <= 2);
}

static int64_t
floor_div(int64_t a, int64_t b)
{
	int64_t q = a / b;

	return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

int64_t
lim_window_bounds(const struct lim_params *p, int64_t now_us, int64_t *start,
                  int64_t *end)
{
	int64_t days, y, idx;
	int     m, d;

	if (p->calendar != LIM_CAL_MONTH) {
		idx = floor_div(now_us, p->period_us);
		*start = idx * p->period_us;
		*end = *start + p->period_us;
		return idx;
	}
	days = floor_div(now_us, LIM_DAY_US);
	lim_civil_from_days(days, &y, &m, &d);
	*start = lim_days_from_civil(y, m, 1) * LIM_DAY_US;
	*end = (m == 12 ? lim_days_from_civil(y + 1, 1, 1)
	                : lim_days_from_civil(y, m + 1, 1)) *
	       LIM_DAY_US;
	return y * 12 + (m - 1);
}

uint64_t
lim_member_hash(const char *s, size_t len)
{
	return util_fnv1a(s, len);
}

/* ---- state and dispatch ------------------------------------------------- */

void
lim_state_init(struct lim_state *s)
{
	memset(s, 0, sizeof(*s));
}

void
lim_state_deinit(struct lim_state *s)
{
	free(s->ts);
	free(s->ids);
	memset(s, 0, sizeof(*s));
}

int
lim_vetoes(int op, int shadow, const struct lim_result *r)
{
	return (op == LIM_OP_CHECK || op == LIM_OP_PEEK) && !shadow &&
	       r->allowed != 1;
}

static void
never_fits(struct lim_result *out)
{
	out->allowed = -1;
	out->retry_after_us = 0;
}

int
lim_eval(const struct lim_params *p, const struct lim_state *s, int op,
         int64_t cost, uint64_t member, int64_t now_us, struct lim_result *out)
{
	if (cost < 0)
		cost = 0;
	if (op == LIM_OP_PEEK) { /* a CHECK whose charge is dropped */
		lim_eval(p, s, LIM_OP_CHECK, cost, member, now_us, out);
		return 0;
	}
	if (cost > LIM_COST_MAX) { /* report as a peek, charge nothing */
		lim_eval(p, s, LIM_OP_CHECK, 0, member, now_us, out);
		never_fits(out);
		return 0;
	}
	switch (p->algo) {
	case LIM_GCRA:
	case LIM_LEAKY_BUCKET:
		return lim__gcra_eval(p, s, op, cost, now_us, out);
	case LIM_TOKEN_BUCKET:
		return lim__tb_eval(p, s, op, cost, now_us, out);
	case LIM_FIXED_WINDOW:
		return lim__fw_eval(p, s, op, cost, now_us, out);
	case LIM_SLIDING_WINDOW:
		return lim__sw_eval(p, s, op, cost, now_us, out);
	case LIM_SLIDING_LOG:
		return lim__log_eval(p, s, op, cost, now_us, out);
	case LIM_CONCURRENCY:
		return lim__conc_eval(p, s, op, cost, member, now_us, out);
	default:
		memset(out, 0, sizeof(*out));
		never_fits(out);
		return 0;
	}
}

void
lim_commit(const struct lim_params *p, struct lim_state *s, int op,
           int64_t cost, uint64_t member, int64_t now_us)
{
	if (cost < 0)
		cost = 0;
	if (cost > LIM_COST_MAX)
		return;
	switch (p->algo) {
	case LIM_GCRA:
	case LIM_LEAKY_BUCKET:
		lim__gcra_commit(p, s, op, cost, now_us);
		break;
	case LIM_TOKEN_BUCKET:
		lim__tb_commit(p, s, op, cost, now_us);
		break;
	case LIM_FIXED_WINDOW:
		lim__fw_commit(p, s, op, cost, now_us);
		break;
	case LIM_SLIDING_WINDOW:
		lim__sw_commit(p, s, op, cost, now_us);
		break;
	case LIM_SLIDING_LOG:
		lim__log_commit(p, s, op, cost, now_us);
		break;
	case LIM_CONCURRENCY:
		lim__conc_commit(p, s, op, cost, member, now_us);
		break;
	default:
		break;
	}
}

int64_t
lim_state_idle_at(const struct lim_params *p, const struct lim_state *s,
                  int64_t now_us)
{
	struct lim_result r;

	lim_eval(p, s, LIM_OP_CHECK, 0, 0, now_us, &r);
	return now_us + (r.full_us > 0 ? r.full_us : 0);
}

int64_t
lim_delay_us(const struct lim_params *p, const struct lim_result *r)
{
	int64_t d;

	if (p->algo != LIM_LEAKY_BUCKET || p->max_delay_us <= 0 ||
	    r->allowed != 1)
		return 0;
	d = r->full_us - p->dvt_us;
	return d > 0 ? d : 0;
}
