/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pool's top lists in Redis (see toppool.h): the transactions that
 * write one agent's view and read them all. The views' text and their
 * sum are topview.c's.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "adminreq.h"
#include "keyop.h"
#include "toppool.h"
#include "topview.h"
#include "util.h"

#define STALE_MS 60000
/* Views summed at most: with one count per key per view, no sum of
 * TOPVIEW_COUNT_MAX each reaches INT64_MAX. */
#define VIEWS_MAX 4096
/* toppool_json(): a key's element past its key's text, at most ({"key":
 * , "denied": and "error": with two 20-digit numbers), and what follows
 * the last one (the array's end, "truncated":true, the object's end, the
 * API's line end). */
#define TOPJSON_ELEM 96
#define TOPJSON_TAIL 64

const char *
toppool_agent_id(void)
{
	static char id[300];
	char        host[256] = "?";
	unsigned    r = 0;

	if (id[0] == '\0') {
		gethostname(host, sizeof(host) - 1);
		if (getrandom(&r, sizeof(r), 0) != sizeof(r))
			r = (unsigned)util_now_us();
		snprintf(id, sizeof(id), "%s/%d/%08x", host, (int)getpid(), r);
	}
	return id;
}

static void
hash_name(char *buf, size_t size, const char *rule)
{
	snprintf(buf, size, "rl:top:{%s}", rule);
}

/* The hash of the agents' bounds, beside the views' (same slot). */
static void
bounds_name(char *buf, size_t size, const char *rule)
{
	snprintf(buf, size, "rl:top:{%s}:b", rule);
}

/* Reads the <n> replies of what was appended to <c>; the last, EXEC's,
 * must be an array. Returns it (to free), or NULL if any failed. A
 * Cluster node's MOVED among them is left in <*moved> (to free). */
static redisReply *
transaction_replies(redisContext *c, int n, redisReply **moved)
{
	redisReply *r = NULL;
	int         bad = 0;

	*moved = NULL;
	for (int i = 0; i < n; i++) {
		freeReplyObject(r);
		if (redisGetReply(c, (void **)&r) != REDIS_OK)
			return NULL;
		bad |= r->type == REDIS_REPLY_ERROR;
		if (r->type == REDIS_REPLY_ERROR && *moved == NULL &&
		    strncmp(r->str, "MOVED ", 6) == 0) {
			*moved = r;
			r = NULL;
		}
	}
	if (bad || r == NULL || r->type != REDIS_REPLY_ARRAY) {
		freeReplyObject(r);
		return NULL;
	}
	return r;
}

/* After a transaction on <*c>: 1 if it is to be sent again, <*c> now on
 * the node of its <moved> (freed), as keyop follows one MOVED. */
static int
again_on(redisContext **c, redisReply *moved, int first)
{
	char err[KEYOP_ERR_MAX];
	int again = first && moved != NULL && keyop_follow_moved(c, moved, err);

	freeReplyObject(moved);
	return again;
}

int
toppool_publish(redisContext **c, const char *rule, const struct topk_merge *m,
                int64_t now_ms)
{
	char        name[POLICY_NAME_MAX + 16], bname[POLICY_NAME_MAX + 16];
	size_t      len;
	char       *view = topview_format(m, now_ms, &len);
	redisReply *r, *moved;
	int         n;

	hash_name(name, sizeof(name), rule);
	bounds_name(bname, sizeof(bname), rule);
	for (int first = 1;; first = 0) {
		redisAppendCommand(*c, "MULTI");
		redisAppendCommand(*c, "HSET %s %s %b", name,
		                   toppool_agent_id(), view, len);
		redisAppendCommand(*c, "PEXPIRE %s %d", name, TOPPOOL_TTL_MS);
		redisAppendCommand(*c, "HSET %s %s %lld", bname,
		                   toppool_agent_id(),
		                   (long long)topview_bound(m));
		redisAppendCommand(*c, "PEXPIRE %s %d", bname, TOPPOOL_TTL_MS);
		redisAppendCommand(*c, "EXEC");
		r = transaction_replies(*c, 6, &moved);
		if (!again_on(c, moved, first && r == NULL))
			break;
	}
	free(view);
	n = r != NULL && r->elements == 4;
	for (size_t i = 0; n && i < r->elements; i++)
		n = r->element[i]->type != REDIS_REPLY_ERROR;
	freeReplyObject(r);
	return n ? 0 : -1;
}

/* The value of field <f> in the HGETALL array <h>, or NULL. */
static const redisReply *
field_value(const redisReply *h, const redisReply *f)
{
	for (size_t i = 0; i + 1 < h->elements; i += 2)
		if (h->element[i]->type == REDIS_REPLY_STRING &&
		    h->element[i]->len == f->len &&
		    memcmp(h->element[i]->str, f->str, f->len) == 0)
			return h->element[i + 1];
	return NULL;
}

/* The bound <bounds> (HGETALL's array) holds for the agent <f>, or 0
 * (an agent from before bounds were written). */
static int64_t
bound_of(const redisReply *bounds, const redisReply *f)
{
	const redisReply *v = field_value(bounds, f);
	long long         b;
	char             *end;

	if (v == NULL || v->type != REDIS_REPLY_STRING)
		return 0;
	b = strtoll(v->str, &end, 10);
	return end != v->str && *end == '\0' && b > 0 && b <= TOPVIEW_COUNT_MAX
	               ? b
	               : 0;
}

int
toppool_read(redisContext **c, const char *rule, int64_t now_ms,
             struct topk_merge *m)
{
	char name[POLICY_NAME_MAX + 16], bname[POLICY_NAME_MAX + 16];
	struct topk_merge one;
	redisReply       *x, *r, *b, *f, *v, *moved;
	int64_t           ts;
	int               agents = 0;

	hash_name(name, sizeof(name), rule);
	bounds_name(bname, sizeof(bname), rule);
	for (int first = 1;; first = 0) {
		redisAppendCommand(*c, "MULTI");
		redisAppendCommand(*c, "HGETALL %s", name);
		redisAppendCommand(*c, "HGETALL %s", bname);
		redisAppendCommand(*c, "EXEC");
		x = transaction_replies(*c, 4, &moved);
		if (!again_on(c, moved, first && x == NULL))
			break;
	}
	if (x == NULL || x->elements != 2 ||
	    x->element[0]->type != REDIS_REPLY_ARRAY ||
	    x->element[1]->type != REDIS_REPLY_ARRAY) {
		freeReplyObject(x);
		return -1;
	}
	r = x->element[0];
	b = x->element[1];
	for (size_t i = 0; i + 1 < r->elements; i += 2) {
		f = r->element[i];
		v = r->element[i + 1];
		if (f->type != REDIS_REPLY_STRING ||
		    v->type != REDIS_REPLY_STRING)
			continue; /* not what publish writes: no str to read */
		memset(&one, 0, sizeof(one));
		ts = topview_parse(v->str, v->len, &one);
		if (ts >= 0 && ts > now_ms - TOPPOOL_FRESH_MS &&
		    agents < VIEWS_MAX) {
			topview_add(m, &one, bound_of(b, f));
			agents++;
		} else if (ts < now_ms - STALE_MS) {
			freeReplyObject(redisCommand(*c, "HDEL %s %b", name,
			                             f->str, f->len));
			freeReplyObject(redisCommand(*c, "HDEL %s %b", bname,
			                             f->str, f->len));
		}
		topk_merge_free(&one);
	}
	/* a bound whose view is gone (deleted by a reader that knows no
	 * bounds, or its HDEL lost): both are written in one transaction */
	for (size_t i = 0; i + 1 < b->elements; i += 2)
		if (b->element[i]->type == REDIS_REPLY_STRING &&
		    field_value(r, b->element[i]) == NULL)
			freeReplyObject(redisCommand(*c, "HDEL %s %b", bname,
			                             b->element[i]->str,
			                             b->element[i]->len));
	freeReplyObject(x);
	topk_merge_finish(m);
	return agents;
}

void
toppool_json(struct jsonw *w, const char *rule, const struct topk_merge *m,
             int agents, int n)
{
	int cut = 0;

	jsonw_open(w, '{');
	jsonw_kstr(w, "rule", rule);
	jsonw_kint(w, "window_s", TOPK_SLOTS * TOPK_SLOT_US / 1000000);
	jsonw_kint(w, "agents", agents);
	jsonw_kint(w, "denied", m->total);
	jsonw_key(w, "keys");
	jsonw_open(w, '[');
	for (int i = 0; i < m->n && i < n; i++) {
		/* the most this key's element takes (each byte escaped), and
		 * room for the end: past JSONW_MAX the writer would fail the
		 * whole answer (a 500, or cut JSON from the CLI) */
		if (w->len + 6 * m->v[i].len + TOPJSON_ELEM + TOPJSON_TAIL >
		    JSONW_MAX) {
			cut = 1;
			break;
		}
		jsonw_elem(w);
		jsonw_open(w, '{');
		jsonw_key(w, "key");
		jsonw_str(w, m->v[i].key, m->v[i].len);
		jsonw_kint(w, "denied", m->v[i].count);
		jsonw_kint(w, "error", m->v[i].err);
		jsonw_close(w, '}');
	}
	jsonw_close(w, ']');
	if (cut) {
		jsonw_key(w, "truncated");
		jsonw_raw(w, "true", 4);
	}
	jsonw_close(w, '}');
}
