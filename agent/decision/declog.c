/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The sampled decision log (see declog.h for the line).
 *
 * Sampling is per request, independent between requests: a thread-local
 * xorshift64* generator, seeded on first use from the monotonic clock and
 * the address of its own state (distinct per thread), gives one 32-bit
 * number per request, compared with the policy's precomputed threshold.
 * Not cryptographic and not meant to be: it only has to be uniform enough
 * that 1% of the requests means about 1%.
 *
 * The line is formatted into a stack buffer and written by log_msg(), one
 * write(2), so lines of several workers never interleave. Nothing here
 * allocates.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "declog.h"
#include "log.h"
#include "util.h"

static _Thread_local uint64_t rng;

void
declog_seed(uint64_t seed)
{
	rng = seed ? seed : 0x9e3779b97f4a7c15ULL;
}

static uint32_t
next32(void)
{
	if (rng == 0)
		declog_seed((uint64_t)util_monotonic_us() ^
		            ((uint64_t)(uintptr_t)&rng << 16));
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return (uint32_t)((rng * 0x2545f4914f6cdd1dULL) >> 32);
}

int
declog_draw(uint64_t thresh)
{
	return (uint64_t)next32() < thresh;
}

static const char *
outcome_name(const struct check *c, const struct outcome *o)
{
	switch (o->src) {
	case SRC_NOT_RUN:
		return "not_run";
	case SRC_FAIL_OPEN:
	case SRC_FAIL_CLOSED:
	case SRC_FAIL_LOCAL:
		return "degraded";
	case SRC_MISSING:
		break;
	default:
		if (o->res.allowed == 1)
			return "allowed";
		break;
	}
	return (c->flags & LIM_FL_SHADOW) ? "shadow_denied" : "denied";
}

/* snprintf at <*off> that never moves <*off> past <size> - 1; sets
 * <*cut> when the text did not fit whole. */
static void __attribute__((format(printf, 5, 6)))
put(char *buf, size_t size, size_t *off, int *cut, const char *fmt, ...)
{
	va_list ap;
	int     k;

	if (*off + 1 >= size) {
		*cut = 1;
		return;
	}
	va_start(ap, fmt);
	k = vsnprintf(buf + *off, size - *off, fmt, ap);
	va_end(ap);
	if (k < 0)
		return;
	if ((size_t)k >= size - *off)
		*cut = 1;
	*off += (size_t)k < size - *off ? (size_t)k : size - *off - 1;
}

/* The end of a cut line: the quote closed, then the mark. */
#define DECLOG_CUT_END "\"" LOG_CUT_MARK

size_t
declog_format(char *buf, size_t size, const struct check *checks,
              const struct outcome *out, int n, const struct decision *d)
{
	size_t off = 0, lim;
	int    cut = 0;

	if (size < sizeof(DECLOG_CUT_END) + 1) {
		if (size)
			buf[0] = '\0';
		return 0;
	}
	/* Room kept for DECLOG_CUT_END (or the closing quote alone). */
	lim = size - (sizeof(DECLOG_CUT_END) - 1);
	buf[0] = '\0';
	put(buf, lim, &off, &cut, "status=%d policy=%s", d->status,
	    d->policy ? d->policy : "-");
	if (d->status != 0)
		put(buf, lim, &off, &cut, " retry_after=%lld",
		    (long long)d->retry_after);
	if (d->has_limits)
		put(buf, lim, &off, &cut, " limit=%lld remaining=%lld",
		    (long long)d->limit, (long long)d->remaining);
	put(buf, lim, &off, &cut, " degraded=%d shadow=%d checks=\"",
	    d->degraded, d->shadow);
	for (int i = 0; i < n && !cut; i++) {
		put(buf, lim, &off, &cut, "%s%s:%s:", i ? " " : "",
		    checks[i].rule->name, outcome_name(&checks[i], &out[i]));
		/* it stops only when the next byte's text does not fit */
		if (log_put_escaped(buf, lim, &off, checks[i].key,
		                    checks[i].keylen) < checks[i].keylen)
			cut = 1;
	}
	if (cut) {
		/* the quote of checks= may not be written yet: the mark says
		 * the line is cut, a lone quote would open a value */
		int         quotes = 0;
		const char *end;
		size_t      len;

		for (size_t j = 0; j < off; j++)
			quotes += buf[j] == '"';
		/* the mark with its quote, or without when none is open */
		end = &DECLOG_CUT_END[quotes % 2 == 0];
		len = strlen(end);
		memcpy(buf + off, end, len);
		off += len;
	} else {
		buf[off++] = '"';
	}
	buf[off] = '\0';
	return off;
}

void
declog__log(const struct policy *p, const struct check *checks,
            const struct outcome *out, int n, const struct decision *d)
{
	char line[900]; /* log_msg() holds 1024 with its prefix */

	if (log_level < LOG_INFO || !declog_draw(p->log_sample_thresh))
		return;
	declog_format(line, sizeof(line), checks, out, n, d);
	log_msg(LOG_INFO, "decision", "%s", line);
}
