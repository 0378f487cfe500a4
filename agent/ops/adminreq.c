/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The admin API's decoder of request targets and its JSON writer (see
 * adminreq.h). Pure: no I/O, no clock, no allocation in the decoder; the
 * writer grows one buffer up to JSONW_MAX.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adminreq.h"
#include "util.h"

/* util_pct_decode() into <o> (room checked by the caller: decoding never
 * lengthens), refusing control bytes, escaped or not. Returns the decoded
 * length or -1. */
static long
pct_decode(const char *s, size_t n, char *o)
{
	long k = util_pct_decode(s, n, o, n + 1);

	for (long i = 0; i < k; i++)
		if ((unsigned char)o[i] < 0x20 || o[i] == 0x7f)
			return -1;
	return k;
}

/* Decodes one "name=value" of <s,n> into the next param, text at *<pos>
 * of rq->buf. Returns 0 or -1 with <*err>. */
static int
add_param(struct adminreq *rq, const char *s, size_t n, size_t *pos,
          const char **err)
{
	const char            *eq = memchr(s, '=', n);
	struct adminreq_param *pa;
	size_t                 nl = eq ? (size_t)(eq - s) : n;
	long                   a, b;

	if (rq->nparams == ADMINREQ_MAX_PARAMS) {
		*err = "too many query parameters";
		return -1;
	}
	pa = &rq->params[rq->nparams];
	pa->name = rq->buf + *pos;
	if ((a = pct_decode(s, nl, rq->buf + *pos)) <= 0) {
		*err = a == 0 ? "empty parameter name" : "bad percent-encoding";
		return -1;
	}
	*pos += (size_t)a + 1;
	pa->value = rq->buf + *pos;
	b = eq ? pct_decode(eq + 1, n - nl - 1, rq->buf + *pos) : 0;
	if (b < 0) {
		*err = "bad percent-encoding";
		return -1;
	}
	rq->buf[*pos + (size_t)b] = '\0';
	*pos += (size_t)b + 1;
	pa->nlen = (size_t)a;
	pa->vlen = (size_t)b;
	if (adminreq_get(rq, pa->name) != NULL) {
		*err = "a parameter is given twice";
		return -1;
	}
	rq->nparams++;
	return 0;
}

static int
parse_query(struct adminreq *rq, const char *q, size_t n, size_t pos,
            const char **err)
{
	const char *amp;
	size_t      part;

	while (n > 0) {
		amp = memchr(q, '&', n);
		part = amp ? (size_t)(amp - q) : n;
		if (part > 0 && add_param(rq, q, part, &pos, err) == -1)
			return 400;
		if (amp == NULL)
			break;
		n -= part + 1;
		q = amp + 1;
	}
	return 0;
}

static int
starts(const char *s, size_t n, const char *lit)
{
	size_t l = strlen(lit);

	return n >= l && memcmp(s, lit, l) == 0;
}

int
adminreq_parse(const char *target, size_t len, struct adminreq *rq,
               const char **err)
{
	const char *q = memchr(target, '?', len);
	size_t      plen = q ? (size_t)(q - target) : len, pos = 0;
	long        r;

	memset(rq, 0, offsetof(struct adminreq, buf));
	*err = "no such admin route: try /admin/keys/RULE, /admin/key, /admin/top";
	if (len > ADMINREQ_MAX_BYTES) {
		*err = "request target too long";
		return 400;
	}
	if (starts(target, plen, "/admin/keys/") && plen > 12) {
		rq->route = ADMINREQ_KEYS;
		if ((r = pct_decode(target + 12, plen - 12, rq->buf)) <= 0 ||
		    memchr(rq->buf, '/', (size_t)r) != NULL) {
			*err = "bad rule name in the path";
			return 400;
		}
		rq->rule = rq->buf;
		pos = (size_t)r + 1;
	} else if (plen == 10 && starts(target, plen, "/admin/key")) {
		rq->route = ADMINREQ_RAWKEY;
	} else if (plen == 10 && starts(target, plen, "/admin/top")) {
		rq->route = ADMINREQ_TOP;
	} else {
		return 404;
	}
	if (q == NULL)
		return 0;
	return parse_query(rq, q + 1, len - plen - 1, pos, err);
}

const struct adminreq_param *
adminreq_get(const struct adminreq *rq, const char *name)
{
	for (int i = 0; i < rq->nparams; i++)
		if (strcmp(rq->params[i].name, name) == 0)
			return &rq->params[i];
	return NULL;
}

/* ---- JSON --------------------------------------------------------------- */

void
jsonw_raw(struct jsonw *w, const char *s, size_t n)
{
	size_t cap;

	if (w->err || n == 0)
		return;
	if (w->len + n + 1 > JSONW_MAX) {
		w->err = 1;
		return;
	}
	if (w->len + n + 1 > w->cap) {
		cap = w->cap ? w->cap : 256;
		while (cap < w->len + n + 1)
			cap *= 2;
		w->buf = xrealloc(w->buf, cap);
		w->cap = cap;
	}
	memcpy(w->buf + w->len, s, n);
	w->len += n;
	w->buf[w->len] = '\0';
}

/* Length of the valid UTF-8 sequence at <s> (of <n> bytes), or 0. */
static size_t
utf8_len(const unsigned char *s, size_t n)
{
	size_t l = s[0] >= 0xf0 && s[0] <= 0xf4  ? 4
	           : s[0] >= 0xe0 && s[0] < 0xf0 ? 3
	           : s[0] >= 0xc2 && s[0] < 0xe0 ? 2
	                                         : 0;

	if (l == 0 || l > n)
		return 0;
	for (size_t i = 1; i < l; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if ((l == 3 && s[0] == 0xe0 && s[1] < 0xa0) ||
	    (l == 3 && s[0] == 0xed && s[1] >= 0xa0) ||
	    (l == 4 && s[0] == 0xf0 && s[1] < 0x90) ||
	    (l == 4 && s[0] == 0xf4 && s[1] >= 0x90))
		return 0;
	return l;
}

void
jsonw_str(struct jsonw *w, const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	char                 esc[8];
	size_t               i = 0, l;

	jsonw_raw(w, "\"", 1);
	while (i < n) {
		if (u[i] == '"' || u[i] == '\\') {
			esc[0] = '\\';
			esc[1] = (char)u[i];
			jsonw_raw(w, esc, 2);
			l = 1;
		} else if (u[i] < 0x20 || u[i] == 0x7f ||
		           (u[i] >= 0x80 && utf8_len(u + i, n - i) == 0)) {
			snprintf(esc, sizeof(esc), "\\u%04x", u[i]);
			jsonw_raw(w, esc, 6);
			l = 1;
		} else {
			l = u[i] < 0x80 ? 1 : utf8_len(u + i, n - i);
			jsonw_raw(w, s + i, l);
		}
		i += l;
	}
	jsonw_raw(w, "\"", 1);
}

void
jsonw_elem(struct jsonw *w)
{
	if (w->comma)
		jsonw_raw(w, ",", 1);
	w->comma = 1;
}

void
jsonw_key(struct jsonw *w, const char *name)
{
	jsonw_elem(w);
	jsonw_str(w, name, strlen(name));
	jsonw_raw(w, ":", 1);
}

void
jsonw_int(struct jsonw *w, int64_t v)
{
	char num[24];
	int  n = snprintf(num, sizeof(num), "%lld", (long long)v);

	jsonw_raw(w, num, (size_t)n);
}

void
jsonw_open(struct jsonw *w, char c)
{
	jsonw_raw(w, &c, 1);
	w->comma = 0;
}

void
jsonw_close(struct jsonw *w, char c)
{
	jsonw_raw(w, &c, 1);
	w->comma = 1;
}

void
jsonw_kstr(struct jsonw *w, const char *name, const char *s)
{
	jsonw_key(w, name);
	jsonw_str(w, s, strlen(s));
}

void
jsonw_kint(struct jsonw *w, const char *name, int64_t v)
{
	jsonw_key(w, name);
	jsonw_int(w, v);
}
