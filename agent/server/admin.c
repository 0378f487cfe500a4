/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The admin API's routes (see admin.h): authentication, dispatch, the
 * JSON answers and the audit log lines. Key work is keyop.c's, the top
 * list topk.c's; this file only wires them to HTTP.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "admin.h"
#include "adminreq.h"
#include "keyop.h"
#include "log.h"
#include "ratelog.h"
#include "topk.h"
#include "toppool.h"
#include "util.h"

struct admin {
	struct ev_loop *loop;
	ev_timer        publish;
	struct policy  *p;
	struct policy  *boot;  /* redis.url and credentials: restart-only */
	char           *token; /* the last policy's that had one */
	char           *url;   /* NULL: the policy's */
	redisContext   *redis; /* NULL until needed, or after an error */
};

static void publish_cb(struct ev_loop *loop, ev_timer *w, int revents);
static redisContext **redis(struct admin *a, char *err);
static void           redis_drop(struct admin *a);

struct admin *
admin_new(struct ev_loop *loop, struct policy *p, const char *url)
{
	struct admin *a = xcalloc(1, sizeof(*a));

	a->loop = loop;
	a->p = policy_ref(p);
	a->boot = policy_ref(p);
	a->token = xstrdup(p->admin_token);
	a->url = url ? xstrdup(url) : NULL;
	keyop_dns_cached(1); /* never a blocking lookup on the main loop */
	ev_timer_init(&a->publish, publish_cb, ADMIN_PUBLISH_S,
	              ADMIN_PUBLISH_S);
	ev_timer_start(loop, &a->publish);
	return a;
}

void
admin_free(struct admin *a)
{
	if (a == NULL)
		return;
	ev_timer_stop(a->loop, &a->publish);
	policy_unref(a->p);
	policy_unref(a->boot);
	explicit_bzero(a->token, strlen(a->token));
	free(a->token);
	redisFree(a->redis);
	free(a->url);
	free(a);
}

void
admin_set_policy(struct admin *a, struct policy *p)
{
	policy_ref(p);
	policy_unref(a->p);
	a->p = p;
	/* no admin: block any more: the API runs on until a restart
	 * (needs_restart), with the token it has */
	if (p->admin_token != NULL) {
		explicit_bzero(a->token, strlen(a->token));
		free(a->token);
		a->token = xstrdup(p->admin_token);
	}
}

int
admin_token_equal(const char *a, size_t alen, const char *b, size_t blen)
{
	unsigned char d = alen != blen;

	for (size_t i = 0; i < blen; i++)
		d |= (unsigned char)(b[i] ^ (i < alen ? a[i] : 0));
	return d == 0;
}

static int
authorized(const struct admin *a, const struct httpd_req *rq)
{
	size_t      vlen;
	const char *v =
		httpd_header(rq->head, rq->hlen, "Authorization", &vlen);
	const char *tok = a->token;

	if (v == NULL || tok == NULL || vlen < 7 ||
	    strncasecmp(v, "Bearer ", 7))
		return 0;
	return admin_token_equal(v + 7, vlen - 7, tok, strlen(tok));
}

/* {"error": <msg>} as the body; returns <status>. */
static int
error_body(struct jsonw *w, int status, const char *msg)
{
	free(w->buf);
	memset(w, 0, sizeof(*w));
	jsonw_open(w, '{');
	jsonw_kstr(w, "error", msg);
	jsonw_close(w, '}');
	return status;
}

/* The audit line: <key> carries client bytes, and so does <rule> when
 * it is the one the request named (unknown, or not valid): both escaped,
 * the rule cut at 64 bytes (rule names are shorter), the key where its
 * escaped text passes 480 bytes (a key of POLICY_KEY_MAX bytes, each
 * escaped, would take 800). Either cut ends the line with LOG_CUT_MARK,
 * after result and status: the line stays under log_msg()'s 1024 bytes,
 * so those are never the part cut. */
static void
audit(const char *action, const char *rule, const char *key, size_t klen,
      const char *result, int status)
{
	char k[4 * 120 + 1], r[4 * 64 + 1]; /* 64 bytes fit, escaped */
	int  cut;

	cut = log_escape_value(k, sizeof(k), key ? key : "", key ? klen : 0,
	                       SIZE_MAX);
	rule = rule ? rule : "-";
	cut |= log_escape_value(r, sizeof(r), rule, strnlen(rule, 65), 64);
	log_info("admin", "action=%s rule=%s key=\"%s\" result=%s status=%d%s",
	         action, r, k, result, status, LOG_CUT(cut));
}

/* A 401's audit line, at most one per RATELOG_INTERVAL_US with the
 * count of those not logged since (suppressed=N), as the fail-mode lines:
 * anyone who can connect can send bad tokens, and one line per request
 * would flood the log (and push the agent's other lines out of a rate
 * limited journal). Main loop only. */
static void
audit_unauthorized(void)
{
	static struct ratelog rl;
	uint64_t              suppressed;

	if (!ratelog_allow(&rl, 0, util_now_us(), &suppressed))
		return;
	log_info("admin",
	         "action=auth rule=- key=\"\" result=unauthorized status=401 "
	         "suppressed=%llu",
	         (unsigned long long)suppressed);
}

/* 1 when <c>, idle since its last reply, can no longer be used: the
 * peer closed it (Redis' timeout for idle clients, a restart, a proxy)
 * or something is waiting on it that no command asked for. */
static int
stale(const redisContext *c)
{
	char    b;
	ssize_t n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);

	return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
}

static redisContext **
redis(struct admin *a, char *err)
{
	if (a->redis != NULL && stale(a->redis))
		redis_drop(a); /* else the request fails: connect again */
	if (a->redis == NULL)
		a->redis = keyop_connect(a->boot, a->url, ADMIN_REDIS_TIMEOUT_US,
		                         err);
	return a->redis ? &a->redis : NULL;
}

/* A Redis call failed: the next one connects again. */
static void
redis_drop(struct admin *a)
{
	redisFree(a->redis);
	a->redis = NULL;
}

/* The check a /admin/keys or /admin/key request names. */
static int
target_check(struct admin *a, const struct adminreq *q, struct check *ck,
             char *err)
{
	const char *names[ADMINREQ_MAX_PARAMS], *values[ADMINREQ_MAX_PARAMS];
	const struct adminreq_param *k;

	if (q->route == ADMINREQ_RAWKEY) {
		if ((k = adminreq_get(q, "key")) == NULL || q->nparams != 1) {
			snprintf(err, KEYOP_ERR_MAX, "want ?key=RAWKEY only");
			return -1;
		}
		return keyop_from_raw(a->p, k->value, ck, err);
	}
	for (int i = 0; i < q->nparams; i++) {
		names[i] = q->params[i].name;
		values[i] = q->params[i].value;
	}
	return keyop_from_args(a->p, q->rule, names, values, q->nparams, ck,
	                       err);
}

static int
key_route(struct admin *a, const struct adminreq *q, int del, struct jsonw *w)
{
	static struct check ck;
	struct keyop_state  st;
	char                err[KEYOP_ERR_MAX];
	const char         *action = del ? "key_reset" : "key_show";
	redisContext      **c;
	long long           n = 0;
	int                 rc;

	if (target_check(a, q, &ck, err) == -1) {
		audit(action, q->rule, NULL, 0, "bad_request", 400);
		return error_body(
			w, strncmp(err, "unknown rule", 12) ? 400 : 404, err);
	}
	if ((c = redis(a, err)) == NULL) {
		audit(action, ck.rule->name, ck.key, ck.keylen, "redis_error",
		      503);
		return error_body(w, 503, err);
	}
	rc = del ? keyop_reset(c, &ck, &n, err)
	         : keyop_show(c, &ck, a->boot->overrides, &st, err);
	if (rc == -1) {
		redis_drop(a);
		audit(action, ck.rule->name, ck.key, ck.keylen, "redis_error",
		      503);
		return error_body(w, 503, err);
	}
	if (del) {
		jsonw_open(w, '{');
		jsonw_kstr(w, "rule", ck.rule->name);
		jsonw_key(w, "key");
		jsonw_str(w, ck.key, ck.keylen);
		jsonw_kint(w, "deleted", n);
		jsonw_close(w, '}');
	} else {
		keyop_json(w, &ck, &st);
		free(st.raw.buf);
	}
	audit(action, ck.rule->name, ck.key, ck.keylen,
	      del ? (n ? "deleted" : "absent") : "shown", 200);
	return 200;
}

/* Publishes this agent's top list of each rule that denied lately. */
static void
publish_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct admin     *a = container_of(w, struct admin, publish);
	struct topk_merge m;
	char              err[KEYOP_ERR_MAX];
	int               failed = 0;

	for (int i = 0; i < a->p->nrules && !failed; i++) {
		memset(&m, 0, sizeof(m));
		topk_collect(a->p->rules[i].metrics_slot, util_now_us(), &m);
		topk_merge_finish(&m);
		if (m.total > 0)
			failed = redis(a, err) == NULL ||
			         toppool_publish(&a->redis, a->p->rules[i].name,
			                         &m,
			                         util_wall_us() / 1000) == -1;
		topk_merge_free(&m);
	}
	if (failed) {
		redis_drop(a);
		log_warn("admin_top_publish_failed", "retry_in=%.0fs",
		         ADMIN_BACKOFF_S);
	}
	/* ev_timer_again() would restart it at its repeat, the backoff
	 * lost: set on a stopped timer, the first wait is its own */
	ev_timer_stop(loop, w);
	ev_timer_set(w, failed ? ADMIN_BACKOFF_S : ADMIN_PUBLISH_S,
	             ADMIN_PUBLISH_S);
	ev_timer_start(loop, w);
}

/* GET /admin/top?rule=NAME[&n=N]: the pool's most denied keys. */
static int
admin_top(struct admin *a, const struct adminreq *q, struct jsonw *w)
{
	const struct adminreq_param *rule = adminreq_get(q, "rule"), *np;
	struct topk_merge            m = { 0 };
	char                         err[KEYOP_ERR_MAX], *end;
	long                         n = 20;
	int                          agents, known = 0;

	np = adminreq_get(q, "n");
	if (rule == NULL || q->nparams != 1 + (np != NULL)) {
		audit("top", rule ? rule->value : NULL, NULL, 0, "bad_request",
		      400);
		return error_body(w, 400, "want ?rule=NAME[&n=N]");
	}
	if (np != NULL &&
	    ((n = strtol(np->value, &end, 10)) < 1 || n > 1000 || *end != '\0')) {
		audit("top", rule->value, NULL, 0, "bad_request", 400);
		return error_body(w, 400, "n must be 1 to 1000");
	}
	for (int i = 0; i < a->p->nrules; i++)
		known |= strcmp(a->p->rules[i].name, rule->value) == 0;
	if (!known) {
		audit("top", rule->value, NULL, 0, "unknown_rule", 404);
		return error_body(w, 404, "unknown rule");
	}
	if (redis(a, err) == NULL ||
	    (agents = toppool_read(&a->redis, rule->value, util_wall_us() / 1000,
	                           &m)) < 0) {
		redis_drop(a);
		topk_merge_free(&m);
		audit("top", rule->value, NULL, 0, "redis_error", 503);
		return error_body(w, 503, "redis: cannot read the top lists");
	}
	toppool_json(w, rule->value, &m, agents, (int)n);
	topk_merge_free(&m);
	audit("top", rule->value, NULL, 0, "shown", 200);
	return 200;
}

static int
is(const char *s, size_t len, const char *lit)
{
	return len == strlen(lit) && memcmp(s, lit, len) == 0;
}

static int
dispatch(struct admin *a, const struct httpd_req *rq, struct jsonw *w)
{
	struct adminreq *q = xmalloc(sizeof(*q));
	const char      *err;
	int              get = is(rq->meth, rq->mlen, "GET"), status;
	int              del = is(rq->meth, rq->mlen, "DELETE");

	status = adminreq_parse(rq->target, rq->tlen, q, &err);
	if (status != 0) {
		audit("request", NULL, NULL, 0, "bad_request", status);
		status = error_body(w, status, err);
	} else if (!get && !(del && q->route != ADMINREQ_TOP)) {
		audit("request", NULL, NULL, 0, "bad_method", 405);
		status = error_body(w, 405,
		                    "method not allowed: GET, or "
		                    "DELETE on a key");
	} else if (q->route == ADMINREQ_TOP) {
		status = admin_top(a, q, w);
	} else {
		status = key_route(a, q, del, w);
	}
	free(q);
	return status;
}

int
admin_handle(void *arg, const struct httpd_req *rq, char **body, size_t *blen,
             const char **ctype)
{
	struct admin *a = arg;
	struct jsonw  w = { 0 };
	int           status;

	if (!authorized(a, rq)) {
		audit_unauthorized();
		status = error_body(&w, 401,
		                    "unauthorized: send "
		                    "Authorization: Bearer <token>");
	} else {
		status = dispatch(a, rq, &w);
	}
	if (w.err)
		status = error_body(&w, 500, "answer too large");
	jsonw_raw(&w, "\n", 1);
	*ctype = "application/json";
	*body = w.buf;
	*blen = w.len;
	return status;
}
