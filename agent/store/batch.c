/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The script call's input format (batch.h): RESP written into the call's
 * own buffer, the keys as bulk strings and the rest packed by msgpack-c
 * into one string.
 *
 * Why msgpack: Redis then parses one string instead of two or more per
 * decision and makes no Lua string of each. Instructions per decision in
 * Redis (callgrind): -5 to -7 % at 1, 10 and 47 decisions per call; in the
 * agent -3 % (BENCHMARKS.md, "msgpack as the batch format"). Not here:
 * sending (link.c), reading the reply (results.c).
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "util.h"

void
batch_enc_free(struct batch_enc *e)
{
	free(e->rules);
	free(e->codes);
	msgpack_sbuffer_destroy(&e->packed);
	memset(e, 0, sizeof(*e));
}

void
batch_buf_reset(struct batch_buf *b)
{
	b->len = 0;
	b->argc = 2;
}

void
batch_buf_free(struct batch_buf *b)
{
	free(b->buf);
	memset(b, 0, sizeof(*b));
}

/* Grows the buffer to hold <need> more bytes of arguments (it is kept
 * across calls, so this reallocates only for a call bigger than any
 * before it). */
static void
reserve(struct batch_buf *b, size_t need)
{
	if (BATCH_HEAD + b->len + need <= b->cap)
		return;
	b->cap = BATCH_HEAD + b->len + need + (b->len + need) / 2;
	b->buf = xrealloc(b->buf, b->cap);
}

static char *
resp_len(char *p, char mark, int64_t n)
{
	*p++ = mark;
	p = util_fmt_int(p, n);
	*p++ = '\r';
	*p++ = '\n';
	return p;
}

/* Writes the bulk string <s> ("$<n>\r\n<s>\r\n") at <p>; returns the end. */
static char *
put_bulk(char *p, const char *s, size_t n)
{
	p = resp_len(p, '$', (int64_t)n);
	memcpy(p, s, n);
	p[n] = '\r';
	p[n + 1] = '\n';
	return p + n + 2;
}

void
batch_arg_str(struct batch_buf *b, const char *s, size_t n)
{
	char *p;

	reserve(b, n + 28); /* "$" 20 digits "\r\n" s "\r\n" */
	p = put_bulk(b->buf + BATCH_HEAD + b->len, s, n);
	b->len = (size_t)(p - (b->buf + BATCH_HEAD));
	b->argc++;
}

void
batch_arg_int(struct batch_buf *b, int64_t v)
{
	char tmp[24];

	batch_arg_str(b, tmp, (size_t)(util_fmt_int(tmp, v) - tmp));
}

int
batch_rule(int64_t (*t)[LIM_SCRIPT_RULE], int *n, int algo,
           const int64_t p[LIM_SCRIPT_PARAMS])
{
	for (int i = *n - 1; i >= 0 && i >= *n - BATCH_RULE_SCAN; i--)
		if (t[i][0] == algo &&
		    memcmp(&t[i][1], p, LIM_SCRIPT_PARAMS * sizeof(*p)) == 0)
			return i + 1;
	t[*n][0] = algo;
	memcpy(&t[*n][1], p, LIM_SCRIPT_PARAMS * sizeof(*p));
	return ++*n;
}

/* Fills e->rules and e->codes for <c>; returns the number of rule tuples,
 * and counts the costs sent (those other than 1) in <*ncosts> and the
 * members in <*nmembers>. */
static int
encode_rules(struct batch_enc *e, const struct batch_check *c, int nchecks,
             int *ncosts, int *nmembers)
{
	int nrules = 0;

	if (nchecks > e->scratch) {
		e->scratch = nchecks;
		e->rules =
			xrealloc(e->rules, (size_t)nchecks * sizeof(*e->rules));
		e->codes =
			xrealloc(e->codes, (size_t)nchecks * sizeof(*e->codes));
	}
	*ncosts = *nmembers = 0;
	for (int k = 0; k < nchecks; k++) {
		e->codes[k] = lim_script_code(
			batch_rule(e->rules, &nrules, c[k].algo, c[k].p),
			c[k].op, (int)c[k].flags, c[k].cost);
		*ncosts += lim_script_has_cost(e->codes[k]);
		*nmembers += lim_script_sends_member(c[k].algo, c[k].p);
	}
	return nrules;
}

static void
pack_argv(struct batch_enc *e, const struct batch_check *c, const int *part_n,
          int nparts, int nrules, size_t nargv)
{
	msgpack_packer pk;
	int            k = 0;

	msgpack_sbuffer_clear(&e->packed);
	msgpack_packer_init(&pk, &e->packed, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, nargv);
	msgpack_pack_int64(&pk, nparts);
	msgpack_pack_int64(&pk, nrules);
	for (int r = 0; r < nrules; r++)
		for (int f = 0; f < LIM_SCRIPT_RULE; f++)
			msgpack_pack_int64(&pk, e->rules[r][f]);
	for (int i = 0; i < nparts; i++) {
		msgpack_pack_int64(&pk, part_n[i]);
		for (int j = 0; j < part_n[i]; j++, k++) {
			msgpack_pack_int64(&pk, e->codes[k]);
			if (lim_script_has_cost(e->codes[k]))
				msgpack_pack_int64(&pk, c[k].cost);
			if (lim_script_sends_member(c[k].algo, c[k].p)) {
				msgpack_pack_str(&pk, c[k].memberlen);
				msgpack_pack_str_body(&pk, c[k].member,
				                      c[k].memberlen);
			}
		}
	}
	assert(k == 0 || e->packed.size > 0);
}

void
batch_encode(struct batch_enc *e, struct batch_buf *b,
             const struct batch_check *c, int nchecks, const int *part_n,
             int nparts)
{
	int    ncosts, nmembers, nrules, sum = 0;
	size_t nargv;

	for (int i = 0; i < nparts; i++)
		sum += part_n[i];
	assert(sum == nchecks && nparts >= 0 && nchecks >= 0);
	nrules = encode_rules(e, c, nchecks, &ncosts, &nmembers);
	nargv = (size_t)(2 + nrules * LIM_SCRIPT_RULE + nparts + nchecks +
	                 ncosts + nmembers);
	batch_buf_reset(b);
	batch_arg_int(b, nchecks);
	for (int k = 0; k < nchecks; k++)
		batch_arg_str(b, c[k].key, c[k].keylen);
	pack_argv(e, c, part_n, nparts, nrules, nargv);
	batch_arg_str(b, e->packed.data, e->packed.size);
	assert(b->argc == 2 + 1 + nchecks + 1);
}

const char *
batch_head(struct batch_buf *b, const char *cmd, const char *name, size_t nlen,
           size_t *len)
{
	char   head[BATCH_HEAD], *p = head;
	size_t hlen;

	assert(b->buf != NULL && nlen <= 40);
	p = resp_len(p, '*', b->argc);
	p = put_bulk(p, cmd, strlen(cmd));
	p = put_bulk(p, name, nlen);
	hlen = (size_t)(p - head);
	assert(hlen <= BATCH_HEAD);
	memcpy(b->buf + BATCH_HEAD - hlen, head, hlen);
	*len = hlen + b->len;
	return b->buf + BATCH_HEAD - hlen;
}

char *
batch_with_text(const struct batch_buf *b, const char *cmd, const char *text,
                size_t *len)
{
	size_t tlen = strlen(text);
	char  *out = xmalloc(64 + tlen + b->len), *p = out;

	p = resp_len(p, '*', b->argc);
	p = put_bulk(p, cmd, strlen(cmd));
	p = put_bulk(p, text, tlen);
	memcpy(p, b->buf + BATCH_HEAD, b->len);
	p += b->len;
	*len = (size_t)(p - out);
	return out;
}
