/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One agent's top view as text, and the sum of views (see topview.h).
 * The parser reads a view's bytes and no further, and takes only what
 * topview_format writes.
 */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topview.h"
#include "util.h"

/* A line's largest part besides its key: two numbers, a length, the
 * separators. */
#define LINE_MAX_NUMS 64

char *
topview_format(const struct topk_merge *m, int64_t now_ms, size_t *len)
{
	size_t cap = LINE_MAX_NUMS, n;
	char  *buf, *p;

	for (int i = 0; i < m->n && i < TOPK_K; i++)
		cap += LINE_MAX_NUMS + m->v[i].len;
	p = buf = xmalloc(cap);
	n = (size_t)snprintf(p, LINE_MAX_NUMS, "%" PRId64 " %" PRId64 "\n",
	                     now_ms, m->total);
	p += n;
	for (int i = 0; i < m->n && i < TOPK_K; i++) {
		n = (size_t)snprintf(p, LINE_MAX_NUMS,
		                     "%" PRId64 " %" PRId64 " %zu:",
		                     m->v[i].count, m->v[i].err, m->v[i].len);
		memcpy(p + n, m->v[i].key, m->v[i].len);
		p += n + m->v[i].len;
		*p++ = '\n';
	}
	assert((size_t)(p - buf) <= cap);
	*len = (size_t)(p - buf);
	return buf;
}

int64_t
topview_bound(const struct topk_merge *m)
{
	return m->n > TOPK_K ? m->v[TOPK_K - 1].count : m->bound;
}

/* The decimal number at <*p>, at most <max>, followed by <sep>: moves
 * <*p> past both. -1 when there is none, it has a leading zero, it is
 * larger, or <sep> is not next; <max> is at most TOPVIEW_COUNT_MAX, so nothing
 * overflows. */
static int64_t
field(const char **p, const char *end, int64_t max, char sep)
{
	const char *s = *p;
	int64_t     v = 0;

	if (s == end || *s < '0' || *s > '9' ||
	    (*s == '0' && s + 1 < end && s[1] >= '0' && s[1] <= '9'))
		return -1; /* none, or a leading zero: not written so */
	for (; s < end && *s >= '0' && *s <= '9'; s++) {
		v = v * 10 + (*s - '0');
		if (v > max)
			return -1;
	}
	if (s == end || *s != sep)
		return -1;
	*p = s + 1;
	return v;
}

/* 1 if <m> (at most TOPK_K items) lists a key twice. */
static int
has_dup(const struct topk_merge *m)
{
	for (int i = 0; i < m->n; i++)
		for (int j = i + 1; j < m->n; j++)
			if (m->v[i].len == m->v[j].len &&
			    memcmp(m->v[i].key, m->v[j].key, m->v[i].len) == 0)
				return 1;
	return 0;
}

int64_t
topview_parse(const char *s, size_t len, struct topk_merge *one)
{
	const char *p = s, *end = s + len;
	int64_t     ts, count, err, klen;
	int         lines = 0;

	if ((ts = field(&p, end, TOPVIEW_COUNT_MAX, ' ')) < 0 ||
	    (one->total = field(&p, end, TOPVIEW_COUNT_MAX, '\n')) < 0)
		return -1;
	while (p < end) {
		if (++lines > TOPK_K ||
		    (count = field(&p, end, TOPVIEW_COUNT_MAX, ' ')) < 0 ||
		    (err = field(&p, end, TOPVIEW_COUNT_MAX, ' ')) < 0 ||
		    (klen = field(&p, end, POLICY_KEY_MAX, ':')) < 0 ||
		    klen >= end - p || p[klen] != '\n')
			return -1;
		topk_merge_add(one, p, (size_t)klen, count, err);
		p += klen + 1;
	}
	return has_dup(one) ? -1 : ts;
}

void
topview_add(struct topk_merge *m, const struct topk_merge *one, int64_t bound)
{
	m->floor += bound;
	for (int k = 0; k < one->n; k++)
		topk_merge_add(m, one->v[k].key, one->v[k].len,
		               one->v[k].count - bound, one->v[k].err - bound);
	m->total += one->total;
}
