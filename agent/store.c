/*
 * Redis store: one hiredis async context per worker loop.
 *
 * Life of a connection: DOWN -> CONNECTING (our own connect timer, since
 * hiredis 0.14 has none) -> UP. On UP we pipeline AUTH, SELECT, SCRIPT
 * LOAD and FUNCTION LOAD (scriptlib.h) ahead of any call, so the script is
 * there before the first call even on a Redis restarted empty. Batches go
 * as FCALL once this link's FUNCTION LOAD has answered; before, or if it
 * failed (Redis < 7, a user without FUNCTION rights), as EVALSHA. Any error on the context drops it and
 * schedules a reconnect with capped exponential backoff and jitter. The
 * backoff restarts from its minimum only once the link has proved usable
 * (SCRIPT LOAD or a script call answered; on Sentinel, ROLE answered
 * master, since a replica loads the script too), not on connect: a Redis
 * that accepts and then drops us (a wrong password), or a sentinel that
 * keeps giving a replica's address, is retried at the backoff pace, not
 * in a loop.
 *
 * A batch is one EVALSHA carrying every queued request (up to
 * STORE_BATCH_MAX), written as RESP straight into the batch's own buffer
 * (its keys as bulk strings, the rest of its arguments packed by msgpack-c
 * into one) and sent with redisAsyncFormattedCommand; the batch keeps it until the
 * reply, so NOSCRIPT (or a library gone missing) is answered by resending
 * the same arguments with EVAL.
 * Batches and their buffers are pooled per store. Each batch entry
 * remembers the request's <gen>: a request its caller has already answered
 * (deadline passed) has another gen and its late result is dropped.
 *
 * The breaker (reqq.h) opens after BREAKER_FAILS consecutive failed
 * batches (lost, stalled, or answered with an error that says Redis cannot
 * serve: reqq_error_is_outage) and then refuses work for BREAKER_COOLDOWN,
 * after which one request probes: until its outcome, nothing more is
 * taken (breaker_admit). A per-key error (WRONGTYPE) fails only its
 * batch. While it is open, and while the link is down, store_submit()
 * refuses at once so no request waits on a dead connection.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <hiredis/adapters/libev.h>
#include <msgpack.h>

#include "cluster.h"
#include "log.h"
#include "metrics.h"
#include "ratelog.h"
#include "reply.h"
#include "reqq.h"
#include "resolve.h"
#include "results.h"
#include "scriptlib.h"
#include "sentinel.h"
#include "store.h"
#include "util.h"

extern const char lua_ratelimit[];

#define STORE_BACKOFF_MIN_US   50000
#define STORE_BACKOFF_MAX_US   1000000	/* back within 2 s of Redis */
#define STORE_MAX_QUEUE        4096	/* requests waiting for a connection */
#define STORE_MAX_INFLIGHT     256	/* batches sent and not answered */
#define STORE_STALL_S          1.0	/* no reply for this long: stuck */

/* Lines that can repeat at the reconnect pace: one per RATELOG_INTERVAL_US
 * per store (so per worker) at most, with the count of those left out. */
enum store_log {
	STORE_LOG_NOT_MASTER = 0,
};

enum store_state {
	ST_DOWN = 0,
	ST_CONNECTING,
	ST_UP,
};

struct batch_entry {
	struct store_req *sr;
	uint32_t          gen;
	int               n;		/* its checks when sent: a request reused
					 * meanwhile may have another count */
};

struct batch {
	struct store       *st;
	struct batch       *next;	/* the store's pool of free batches */
	int                 n;
	struct batch_entry  ent[STORE_BATCH_MAX];
	int                 argc;	/* of the whole command */
	char               *buf;	/* BATCH_HEAD spare bytes, then the RESP
					 * of every argument after the sha: the
					 * batch's own copy of all it sends */
	size_t              len;	/* bytes used, from BATCH_HEAD */
	size_t              cap;
	int64_t             sent_us;
	int                 retried;	/* resent with EVAL (scriptlib_resend) */
	int                 fcalled;	/* last sent as FCALL */
};

#define BATCH_HEAD     96	/* room for "*argc $7 EVALSHA $40 <sha>" or
				 * "*argc $5 FCALL $24 <name>" */
#define BATCH_POOL_MAX 32	/* free batches kept per store */

struct store {
	struct ev_loop        *loop;
	struct store_addr      addr;
	struct metrics_worker *m;
	redisAsyncContext     *ac;
	enum store_state       state;
	int                    in_connect;	/* inside hiredis' connect callback */
	ev_timer               retry;	/* reconnect backoff / connect timeout */
	int64_t                backoff_us;
	int64_t                connect_timeout_us;
	char                   sha[41];
	int                    fcall;		/* this link has the library */
	int                    inflight;	/* batches sent, not answered */
	struct breaker         br;		/* over batches */
	ev_tstamp              last_reply;	/* when Redis last answered */
	struct reqq            q;		/* queued, not sent */
	unsigned int           seed;
	/* Sentinel: the master is found, verified with ROLE, and followed */
	struct sentinel       *sen;		/* NULL for a plain URL */
	int                    discovering;
	ev_timer               kick;		/* drop the link outside its
						 * callbacks, then reconnect */
	int                    kick_direct;	/* to addr, not rediscovering */
	struct ratelog         logs;		/* STORE_LOG_* lines, rate-limited */
	struct cluster        *cl;		/* redis+cluster: all goes there */
	struct batch          *pool;		/* free batches, buffers kept */
	int                    npool;
	/* batch_take's scratch: the call's rule tuples, each check's code */
	int64_t              (*rules)[LIM_SCRIPT_RULE];
	long long             *codes;
	int                    scratch;	/* entries of both */
	msgpack_sbuffer        packed;	/* the batch's ARGV, packed */
	struct results         res;	/* the last reply, decoded */
};

static void store_connect(struct store *st);
static void connect_addr(struct store *st);
static void kick_link(struct store *st, int direct);

/* ---- breaker and backoff ------------------------------------------------ */

int
store_up(const struct store *st)
{
	if (st == NULL)
		return 0;
	if (st->cl != NULL)
		return cluster_up(st->cl);
	return st->state == ST_UP &&
	       !breaker_is_open(&st->br, ev_now(st->loop));
}

static void
batch_failed(struct store *st)
{
	if (breaker_fail(&st->br, ev_now(st->loop)))
		log_warn("redis_breaker_open", "host=%s port=%d cooldown_s=%.1f",
		         st->addr.host, st->addr.port, BREAKER_COOLDOWN);
	metrics_circuit(st->m, breaker_tripped(&st->br));
}

static void
batch_succeeded(struct store *st)
{
	if (breaker_ok(&st->br))
		log_info("redis_breaker_closed", "host=%s port=%d",
		         st->addr.host, st->addr.port);
	metrics_circuit(st->m, 0);
	st->backoff_us = STORE_BACKOFF_MIN_US;
}

static void
schedule_reconnect(struct store *st)
{
	int64_t d = st->backoff_us;

	/* full jitter over the upper half: d/2 .. d */
	d = d / 2 + (int64_t)(rand_r(&st->seed) % (unsigned)(d / 2 + 1));
	st->backoff_us *= 2;
	if (st->backoff_us > STORE_BACKOFF_MAX_US)
		st->backoff_us = STORE_BACKOFF_MAX_US;
	ev_timer_stop(st->loop, &st->retry);
	ev_timer_set(&st->retry, (double)d / 1e6, 0.);
	ev_timer_start(st->loop, &st->retry);
}

/* ---- batches ------------------------------------------------------------ */

/* Returns <b> to its store's pool (buffer kept), or frees it. */
static void
batch_free(struct batch *b)
{
	struct store *st = b->st;

	if (st != NULL && st->npool < BATCH_POOL_MAX) {
		b->next = st->pool;
		st->pool = b;
		st->npool++;
		return;
	}
	free(b->buf);
	free(b);
}

/* A batch from the pool, emptied, owned by <st>. */
static struct batch *
batch_get(struct store *st)
{
	struct batch *b = st->pool;

	if (b == NULL) {
		b = xcalloc(1, sizeof(*b));
	} else {
		st->pool = b->next;
		st->npool--;
	}
	b->st = st;
	b->n = 0;
	b->len = 0;
	b->retried = 0;
	return b;
}

static void
pool_free(struct store *st)
{
	while (st->pool != NULL) {
		struct batch *b = st->pool;

		st->pool = b->next;
		free(b->buf);
		free(b);
	}
	st->npool = 0;
}

static int
batch_nchecks(const struct batch *b)
{
	int n = 0;

	for (int i = 0; i < b->n; i++)
		n += b->ent[i].n;
	return n;
}

/* Distributes a good reply to the requests of <b>. The number of results
 * was fixed when the batch was sent, so a request whose caller gave up (gen
 * changed) still takes its slots; only its callback is skipped. */
static int
batch_deliver(struct store *st, struct batch *b, redisReply *reply)
{
	size_t k = 0;

	if (reply->type != REDIS_REPLY_STRING ||
	    results_decode(&st->res, reply->str, reply->len,
	                   (size_t)batch_nchecks(b)) == -1)
		return -1;
	for (int i = 0; i < b->n; i++) {
		struct store_req *sr = b->ent[i].sr;

		if (sr->gen != b->ent[i].gen) {
			k += (size_t)b->ent[i].n;
			continue;
		}
		for (int j = 0; j < b->ent[i].n; j++)
			results_get(&st->res, k++, &sr->results[sr->index[j]]);
	}
	for (int i = 0; i < b->n; i++)
		reqq_answer(b->ent[i].sr, b->ent[i].gen, STORE_OK);
	return 0;
}

static void
batch_fail(struct batch *b, int err)
{
	for (int i = 0; i < b->n; i++)
		reqq_answer(b->ent[i].sr, b->ent[i].gen, err);
}

static void batch_cb(redisAsyncContext *ac, void *r, void *privdata);
static void load_library(struct store *st);

/* Redis answered <b> with the error <err>: its requests get their fail
 * modes. Only an error saying Redis cannot serve at all feeds the breaker;
 * a per-key one (WRONGTYPE) shows Redis answering, so it counts as a good
 * call for the breaker and the other keys keep being decided by Redis. */
static void
batch_error(struct store *st, struct batch *b, const char *err)
{
	int outage = reqq_error_is_outage(err);

	log_warn("redis_error", "error=\"%.200s\" outage=%d", err, outage);
	if (st->sen != NULL && (strncmp(err, "READONLY", 8) == 0 ||
	                        strncmp(err, "MASTERDOWN", 10) == 0))
		kick_link(st, 0);	/* on a replica now: rediscover */
	metrics_redis_error(st->m, METRICS_REDIS_REPLY);
	if (outage)
		batch_failed(st);
	else
		batch_succeeded(st);
	batch_fail(b, STORE_EREPLY);
}

/* Writes "$<len>\r\n" at <p>; returns the end. */
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

/* EVAL <script> then the batch's arguments, in a buffer of its own (the
 * rare NOSCRIPT path: hiredis copies it, so it is freed at once). */
static int
send_eval(struct store *st, struct batch *b)
{
	size_t slen = strlen(lua_ratelimit);
	char *cmd = xmalloc(64 + slen + b->len), *p = cmd;
	int rc;

	p = resp_len(p, '*', b->argc);
	p = put_bulk(p, "EVAL", 4);
	p = put_bulk(p, lua_ratelimit, slen);
	memcpy(p, b->buf + BATCH_HEAD, b->len);
	p += b->len;
	rc = redisAsyncFormattedCommand(st->ac, batch_cb, b, cmd,
	                                (size_t)(p - cmd));
	free(cmd);
	return rc;
}

/* <cmd> <name> (EVALSHA <sha>, FCALL <library function>): the header goes
 * into the BATCH_HEAD bytes just before the arguments, so the command is
 * sent from the batch's buffer as it is. */
static int
send_named(struct store *st, struct batch *b, const char *cmd,
           const char *name, size_t nlen)
{
	char head[BATCH_HEAD], *p = head;
	size_t hlen;

	p = resp_len(p, '*', b->argc);
	p = put_bulk(p, cmd, strlen(cmd));
	p = put_bulk(p, name, nlen);
	hlen = (size_t)(p - head);
	memcpy(b->buf + BATCH_HEAD - hlen, head, hlen);
	return redisAsyncFormattedCommand(st->ac, batch_cb, b,
	                                  b->buf + BATCH_HEAD - hlen,
	                                  hlen + b->len);
}

/* FCALL if this link loaded the library, else EVALSHA, else (no sha yet,
 * or <with_eval>) EVAL with the script's text. */
static int
batch_send(struct store *st, struct batch *b, int with_eval)
{
	int rc;

	b->fcalled = !with_eval && st->fcall;
	if (with_eval || (!st->fcall && st->sha[0] == '\0'))
		rc = send_eval(st, b);
	else
		rc = st->fcall ?
		     send_named(st, b, "FCALL", scriptlib_name(),
		                scriptlib_name_len()) :
		     send_named(st, b, "EVALSHA", st->sha, 40);
	if (rc != REDIS_OK)
		return -1;
	st->inflight++;
	return 0;
}

/* Resends <b>, answered <err>, once as EVAL when that may help
 * (scriptlib_resend); a missing library is loaded again, and until it is,
 * batches go as EVALSHA. Returns 1 if <b> is on its way again. */
static int
resend_as_eval(struct store *st, struct batch *b, const char *err)
{
	int why = scriptlib_resend(err, b->fcalled);

	if (why == 0 || b->retried || st->state != ST_UP)
		return 0;
	if (why == SCRIPTLIB_MISSING) {
		metrics_redis_error(st->m, METRICS_REDIS_NOSCRIPT);
		if (scriptlib_missing(err) && st->fcall)
			load_library(st);
	}
	b->retried = 1;
	return batch_send(st, b, 1) == 0;
}

static void
batch_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct batch *b = privdata;
	struct store *st = b->st;
	redisReply *reply = r;

	st->inflight--;
	metrics_redis_latency(st->m, util_monotonic_us() - b->sent_us);
	if (reply != NULL)
		st->last_reply = ev_now(st->loop);
	if (reply == NULL) {		/* link lost or context freed */
		metrics_redis_error(st->m, METRICS_REDIS_IO);
		batch_failed(st);
		batch_fail(b, STORE_EIO);
		batch_free(b);
		return;
	}
	if (reply->type == REDIS_REPLY_ERROR && resend_as_eval(st, b, reply->str))
		return;
	if (reply->type == REDIS_REPLY_ERROR) {
		batch_error(st, b, reply->str);
	} else if (batch_deliver(st, b, reply) == -1) {
		metrics_redis_error(st->m, METRICS_REDIS_REPLY);
		batch_failed(st);
		batch_fail(b, STORE_EREPLY);
	} else {
		batch_succeeded(st);
	}
	batch_free(b);
}

/* ---- building a batch --------------------------------------------------- */

/* Appends the bulk string <s> to the batch's RESP (room reserved). */
static void
arg_str(struct batch *b, const char *s, size_t n)
{
	char *p = put_bulk(b->buf + BATCH_HEAD + b->len, s, n);

	b->len = (size_t)(p - (b->buf + BATCH_HEAD));
}

/* Appends the decimal <v> as a bulk string. */
static void
arg_int(struct batch *b, int64_t v)
{
	char tmp[24];

	arg_str(b, tmp, (size_t)(util_fmt_int(tmp, v) - tmp));
}

/* Grows the buffer to hold <need> bytes of arguments (it is kept across
 * the pool, so this reallocates only when a batch is bigger than any of
 * its predecessors). */
static void
batch_reserve(struct batch *b, size_t need)
{
	if (BATCH_HEAD + need <= b->cap)
		return;
	b->cap = BATCH_HEAD + need + need / 2;
	b->buf = xrealloc(b->buf, b->cap);
}

/* Moves up to STORE_BATCH_MAX queued requests into <b>; returns their
 * checks, and adds the bytes of their keys and members to <*strings>. */
static int
take_requests(struct store *st, struct batch *b, size_t *strings)
{
	int nchecks = 0;

	while (st->q.head != NULL && b->n < STORE_BATCH_MAX) {
		struct store_req *sr = reqq_pop(&st->q);

		b->ent[b->n].sr = sr;
		b->ent[b->n].n = sr->n;
		b->ent[b->n++].gen = sr->sent_gen;
		nchecks += sr->n;
		for (int j = 0; j < sr->n; j++)
			*strings += sr->checks[sr->index[j]].keylen +
			            sr->checks[sr->index[j]].memberlen;
	}
	return nchecks;
}

int
store_script_rule(int64_t (*t)[LIM_SCRIPT_RULE], int *n, int algo,
                  const int64_t p[3])
{
	for (int i = *n - 1; i >= 0 && i >= *n - STORE_RULE_SCAN; i--)
		if (t[i][0] == algo && t[i][1] == p[0] && t[i][2] == p[1] &&
		    t[i][3] == p[2])
			return i + 1;
	t[*n][0] = algo;
	memcpy(&t[*n][1], p, 3 * sizeof(*p));
	return ++*n;
}

/* Fills st->rules and st->codes for the <nchecks> checks of <b>; returns
 * the number of rule tuples, and counts the costs sent (those other than
 * 1) in <*ncosts> and the members in <*nmembers>. */
static int
batch_rules(struct store *st, const struct batch *b, int nchecks,
            int *ncosts, int *nmembers)
{
	int nrules = 0, k = 0;

	if (nchecks > st->scratch) {
		st->scratch = nchecks;
		st->rules = xrealloc(st->rules, (size_t)nchecks *
		                     sizeof(*st->rules));
		st->codes = xrealloc(st->codes, (size_t)nchecks *
		                     sizeof(*st->codes));
	}
	*ncosts = *nmembers = 0;
	for (int i = 0; i < b->n; i++) {
		const struct store_req *sr = b->ent[i].sr;

		for (int j = 0; j < sr->n; j++, k++) {
			const struct check *c = &sr->checks[sr->index[j]];
			int64_t p[3];

			lim_script_params(&c->lim, p);
			st->codes[k] = lim_script_code(store_script_rule(st->rules,
			                &nrules, c->lim.algo, p), c->op, c->flags,
			                c->cost);
			*ncosts += lim_script_has_cost(st->codes[k]);
			*nmembers += lim_script_has_member(c->lim.algo);
		}
	}
	return nrules;
}

/* The script's ARGV: the requests and rule tuples, then each request's
 * checks (agent/limiter.h), as one msgpack array of <nargv> items. */
static void
pack_argv(struct store *st, struct batch *b, int nrules, size_t nargv,
          msgpack_packer *pk)
{
	int k = 0;

	msgpack_pack_array(pk, nargv);
	msgpack_pack_int64(pk, b->n);
	msgpack_pack_int64(pk, nrules);
	for (int r = 0; r < nrules; r++)
		for (int f = 0; f < LIM_SCRIPT_RULE; f++)
			msgpack_pack_int64(pk, st->rules[r][f]);
	for (int i = 0; i < b->n; i++) {
		const struct store_req *sr = b->ent[i].sr;

		msgpack_pack_int64(pk, sr->n);
		for (int j = 0; j < sr->n; j++, k++) {
			const struct check *c = &sr->checks[sr->index[j]];

			msgpack_pack_int64(pk, st->codes[k]);
			if (lim_script_has_cost(st->codes[k]))
				msgpack_pack_int64(pk, c->cost);
			if (lim_script_has_member(c->lim.algo)) {
				msgpack_pack_str(pk, c->memberlen);
				msgpack_pack_str_body(pk, c->member, c->memberlen);
			}
		}
	}
}

/* The batch's ARGV goes as one msgpack array, which the script unpacks
 * (Redis' cmsgpack): Redis then parses one string instead of two or more
 * per decision and makes no Lua string of each. Instructions per decision
 * in Redis (callgrind): -5 to -7 % at 1, 10 and 47 decisions per call;
 * in the agent -3 % (BENCHMARKS.md, "msgpack as the batch format"). */
static void
put_packed(struct store *st, struct batch *b, int nrules, size_t nargv)
{
	msgpack_packer pk;

	msgpack_sbuffer_clear(&st->packed);
	msgpack_packer_init(&pk, &st->packed, msgpack_sbuffer_write);
	pack_argv(st, b, nrules, nargv, &pk);
	batch_reserve(b, b->len + 28 + st->packed.size);
	arg_str(b, st->packed.data, st->packed.size);
}

/* Takes up to STORE_BATCH_MAX queued requests into a batch and writes its
 * arguments as RESP into the batch's own buffer: the keys and members are
 * copied, since a NOSCRIPT resend must not read requests that were
 * answered and reused meanwhile. */
static struct batch *
batch_take(struct store *st)
{
	struct batch *b = batch_get(st);
	size_t strings = 0;
	int nchecks = take_requests(st, b, &strings), ncosts, nmembers;
	int nrules = batch_rules(st, b, nchecks, &ncosts, &nmembers);
	int nints = 3 + nrules * LIM_SCRIPT_RULE + b->n + nchecks + ncosts;
	int nargv = nints - 1 + nmembers;

	b->argc = 2 + 1 + nchecks + 1;
	/* the key count and the keys, each at most "$20\r\n" + 20 digits
	 * + "\r\n" around its bytes; put_packed reserves for the rest */
	batch_reserve(b, (size_t)(1 + nchecks) * 28 + strings);
	arg_int(b, nchecks);
	for (int i = 0; i < b->n; i++) {
		const struct store_req *sr = b->ent[i].sr;

		for (int j = 0; j < sr->n; j++) {
			const struct check *c = &sr->checks[sr->index[j]];
			arg_str(b, c->key, c->keylen);
		}
	}
	put_packed(st, b, nrules, (size_t)nargv);
	return b;
}

void
store_flush(struct store *st)
{
	if (st == NULL)
		return;
	if (st->cl != NULL) {
		cluster_flush(st->cl);
		return;
	}
	int sent = 0;

	while (st->q.head != NULL && st->state == ST_UP) {
		struct batch *b = batch_take(st);

		b->sent_us = util_monotonic_us();
		if (batch_send(st, b, 0) == -1) {
			batch_fail(b, STORE_EIO);
			batch_free(b);
		} else {
			sent = 1;
		}
	}
	/* hiredis only queues the command and waits for EV_WRITE: a loop
	 * turn and an epoll_ctl pair per batch. Write now instead, unless
	 * inside one of its callbacks (a failed write frees the context).
	 * hiredis 0.14 does not flag its connect callback, which it runs from
	 * its own write handler, and writes right after it anyway. */
	if (sent && st->ac != NULL && !st->in_connect &&
	    !(st->ac->c.flags & REDIS_IN_CALLBACK))
		redisAsyncHandleWrite(st->ac);
}

int
store_submit(struct store *st, struct store_req *sr)
{
	if (st->cl != NULL)
		return cluster_submit(st->cl, sr);
	if (st->state == ST_DOWN || st->q.queued >= STORE_MAX_QUEUE ||
	    st->inflight >= STORE_MAX_INFLIGHT ||
	    (!reqq_releases_only(sr) &&
	     !breaker_admit(&st->br, ev_now(st->loop))))
		return STORE_EDOWN;
	reqq_push(&st->q, sr);
	return STORE_OK;
}

int
store_hget(struct store *st, const char *hash, const char *field,
           size_t fieldlen, store_value_cb *cb, void *arg)
{
	if (st->cl != NULL)
		return cluster_hget(st->cl, hash, field, fieldlen, cb, arg);
	if (!store_up(st))
		return -1;
	return reqq_hget(st->ac, hash, field, fieldlen, cb, arg, NULL, NULL);
}

void
store_cancel(struct store *st, struct store_req *sr)
{
	sr->gen++;			/* the reply, if it ever comes, is dropped */
	if (st == NULL)
		return;
	if (st->cl != NULL)
		cluster_cancel(st->cl, sr);
	else
		reqq_remove(&st->q, sr);
}

/* 1 if the link has commands unanswered besides the batches counted in
 * inflight: plan HGETs. A stalled link carrying only those (new tenants
 * after a start or a reload) must be dropped too, or every lookup times
 * out on it until TCP gives up. */
static int
awaiting_hget(const struct store *st)
{
	return st->ac != NULL && st->ac->replies.head != NULL;
}

/* A request's deadline passed with its batch unanswered: Redis is slow or
 * stopped. That counts against the breaker; when the breaker has tripped
 * twice over, the link is dropped so that the batches stuck on it fail now
 * and the next attempt starts on a fresh connection. */
void
store_note_timeout(struct store *st)
{
	if (st->cl != NULL) {
		cluster_note_timeout(st->cl);
		return;
	}
	metrics_redis_error(st->m, METRICS_REDIS_TIMEOUT);
	/* Late but answering (overload) is not stuck: shedding the link or
	 * opening the breaker then only turns slow answers into none. */
	if (ev_now(st->loop) - st->last_reply < STORE_STALL_S)
		return;
	batch_failed(st);
	if (st->state == ST_UP && st->br.fails >= 2 * BREAKER_FAILS &&
	    (st->inflight > 0 || awaiting_hget(st))) {
		log_warn("redis_link_dropped", "host=%s port=%d inflight=%d",
		         st->addr.host, st->addr.port, st->inflight);
		redisAsyncFree(st->ac);	/* disconnect_cb schedules a retry */
	}
}

/* ---- connection --------------------------------------------------------- */

static void
script_loaded_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct store *st = privdata;
	redisReply *reply = r;

	if (reply == NULL)
		return;
	if (reply->type == REDIS_REPLY_STRING && reply->len == 40) {
		memcpy(st->sha, reply->str, 40);
		st->sha[40] = '\0';
		if (st->sen == NULL)	/* a usable link; Sentinel: role_cb */
			st->backoff_us = STORE_BACKOFF_MIN_US;
	} else {
		log_error("redis_script_load", "error=\"%.200s\"",
		          reply->type == REDIS_REPLY_ERROR ? reply->str : "bad reply");
	}
}

/* FUNCTION LOAD answered on link <ac>: FCALL from now on, if it is still
 * the link and the load worked. */
static void
library_loaded_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct store *st = privdata;

	if (r != NULL && st->ac == ac)
		st->fcall = scriptlib_loaded(r, st->addr.host, st->addr.port);
}

/* EVALSHA until this link's FUNCTION LOAD has answered. */
static void
load_library(struct store *st)
{
	st->fcall = 0;
	scriptlib_load(st->ac, library_loaded_cb, st);
}

static void
setup_reply_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	redisReply *reply = r;

	if (reply != NULL && reply->type == REDIS_REPLY_ERROR)
		log_error("redis_setup", "command=%s error=\"%.200s\"",
		          (const char *)privdata, reply->str);
}

/* Pipelines AUTH, SELECT, SCRIPT LOAD and FUNCTION LOAD; the password
 * never reaches a log line. */
static void
send_setup(struct store *st)
{
	const struct store_addr *a = &st->addr;

	if (a->pass[0] != '\0' && a->user[0] != '\0')
		redisAsyncCommand(st->ac, setup_reply_cb, (void *)"AUTH", "AUTH %s %s",
		                  a->user, a->pass);
	else if (a->pass[0] != '\0')
		redisAsyncCommand(st->ac, setup_reply_cb, (void *)"AUTH", "AUTH %s", a->pass);
	if (a->db != 0)
		redisAsyncCommand(st->ac, setup_reply_cb, (void *)"SELECT", "SELECT %d", a->db);
	redisAsyncCommand(st->ac, script_loaded_cb, st, "SCRIPT LOAD %s",
	                  lua_ratelimit);
	load_library(st);
}

static void
link_up(struct store *st)
{
	ev_timer_stop(st->loop, &st->retry);
	st->state = ST_UP;
	store_flush(st);
}

/* Sentinel: a master found through the sentinels may have been demoted by
 * the time we connect; only a master takes writes. */
static void
role_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct store *st = privdata;
	redisReply *reply = r;
	uint64_t suppressed;

	if (reply == NULL || st->ac != ac || st->state != ST_CONNECTING)
		return;			/* the link is going: disconnect_cb */
	if (reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
	    reply->element[0]->type == REDIS_REPLY_STRING &&
	    strcmp(reply->element[0]->str, "master") == 0) {
		st->backoff_us = STORE_BACKOFF_MIN_US;	/* a usable link */
		link_up(st);
		return;
	}
	if (log_level >= LOG_WARN &&
	    ratelog_allow(&st->logs, STORE_LOG_NOT_MASTER, util_now_us(),
	                  &suppressed))
		log_warn("redis_not_master", "host=%s port=%d role=%.40s "
		         "suppressed=%llu", st->addr.host, st->addr.port,
		         reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
		         reply->element[0]->type == REDIS_REPLY_STRING ?
		         reply->element[0]->str : "?",
		         (unsigned long long)suppressed);
	kick_link(st, 0);		/* rediscover, at the backoff pace */
}

static void
connect_cb(const redisAsyncContext *ac, int status)
{
	struct store *st = ac->data;

	ev_timer_stop(st->loop, &st->retry);
	if (status != REDIS_OK) {
		log_warn("redis_connect_failed", "host=%s port=%d error=\"%s\"",
		         st->addr.host, st->addr.port, ac->errstr);
		metrics_redis_error(st->m, METRICS_REDIS_REFUSED);
		st->ac = NULL;		/* hiredis frees it after this callback */
		st->state = ST_DOWN;
		reqq_fail_all(&st->q, STORE_EDOWN);
		schedule_reconnect(st);
		return;
	}
	log_info("redis_connected", "host=%s port=%d", st->addr.host, st->addr.port);
	send_setup(st);
	if (st->sen != NULL) {		/* UP once ROLE says master */
		redisAsyncCommand(st->ac, role_cb, st, "ROLE");
		ev_timer_set(&st->retry, (double)st->connect_timeout_us / 1e6, 0.);
		ev_timer_start(st->loop, &st->retry);
		return;
	}
	st->in_connect = 1;
	link_up(st);
	st->in_connect = 0;
}

static void
disconnect_cb(const redisAsyncContext *ac, int status)
{
	struct store *st = ac->data;

	if (st == NULL)
		return;
	log_warn("redis_disconnected", "host=%s port=%d error=\"%s\"",
	         st->addr.host, st->addr.port,
	         status == REDIS_OK ? "closed" : ac->errstr);
	st->ac = NULL;
	st->state = ST_DOWN;
	reqq_fail_all(&st->q, STORE_EDOWN);
	schedule_reconnect(st);
}

/* The retry timer both reconnects (when DOWN) and bounds a connect that
 * hangs (when CONNECTING): hiredis 0.14 has no connect timeout. */
static void
retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct store *st = container_of(w, struct store, retry);

	if (st->state == ST_CONNECTING) {
		redisAsyncContext *ac = st->ac;

		log_warn("redis_connect_timeout", "host=%s port=%d",
		         st->addr.host, st->addr.port);
		metrics_redis_error(st->m, METRICS_REDIS_TIMEOUT);
		ac->data = NULL;
		st->ac = NULL;
		st->state = ST_DOWN;
		redisAsyncFree(ac);
		reqq_fail_all(&st->q, STORE_EDOWN);
		schedule_reconnect(st);
		return;
	}
	if (st->state == ST_DOWN)
		store_connect(st);
}

/* Sentinel: the master's address, or NULL when no sentinel answered. */
static void
found_cb(void *arg, const char *host, int port)
{
	struct store *st = arg;

	st->discovering = 0;
	if (st->ac != NULL)
		return;			/* a +switch-master got there first */
	if (host == NULL) {
		schedule_reconnect(st);
		return;
	}
	snprintf(st->addr.host, sizeof(st->addr.host), "%s", host);
	st->addr.port = port;
	connect_addr(st);
}

static void
switched_cb(void *arg, const char *host, int port)
{
	struct store *st = arg;

	if (st->ac != NULL && st->addr.port == port &&
	    strcmp(st->addr.host, host) == 0)
		return;
	snprintf(st->addr.host, sizeof(st->addr.host), "%s", host);
	st->addr.port = port;
	kick_link(st, 1);
}

/* Drops the link now: pending batches get a NULL reply (and their fail
 * mode), queued requests are refused. Never call it from one of the
 * link's own callbacks: use kick_link(). */
static void
drop_link(struct store *st)
{
	redisAsyncContext *ac = st->ac;

	st->state = ST_DOWN;
	if (ac != NULL) {
		st->ac = NULL;
		ac->data = NULL;
		redisAsyncFree(ac);
	}
	reqq_fail_all(&st->q, STORE_EDOWN);
}

static void
kick_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct store *st = container_of(w, struct store, kick);

	ev_timer_stop(st->loop, &st->retry);
	drop_link(st);
	if (st->kick_direct)
		connect_addr(st);
	else
		schedule_reconnect(st);
}

/* Schedules drop_link() and a reconnect: at once to <st->addr> when
 * <direct> (a sentinel announced the new master), else through the
 * sentinels after the backoff (a replica answered: the sentinels may keep
 * giving its address until the failover completes; the first retry comes
 * within STORE_BACKOFF_MIN_US of a link that was good). Safe from inside
 * any callback. */
static void
kick_link(struct store *st, int direct)
{
	if (ev_is_active(&st->kick)) {
		st->kick_direct |= direct;
		return;
	}
	st->kick_direct = direct;
	st->state = ST_DOWN;		/* refuse new work at once */
	ev_timer_stop(st->loop, &st->retry);	/* kick_cb reconnects */
	ev_timer_set(&st->kick, 0., 0.);
	ev_timer_start(st->loop, &st->kick);
}

static void
store_connect(struct store *st)
{
	if (st->sen == NULL) {
		connect_addr(st);
		return;
	}
	if (!st->discovering) {
		st->discovering = 1;
		sentinel_discover(st->sen);
	}
}

static void
connect_addr(struct store *st)
{
	redisAsyncContext *ac;
	const char *why = "out of memory";

	if (st->addr.path[0] != '\0')
		ac = redisAsyncConnectUnix(st->addr.path);
	else
		ac = resolve_connect(st->addr.host, st->addr.port, &why);
	if (ac == NULL || ac->err) {
		log_warn("redis_connect_failed", "host=%s port=%d error=\"%s\"",
		         st->addr.host, st->addr.port, ac ? ac->errstr : why);
		if (ac != NULL)
			redisAsyncFree(ac);
		schedule_reconnect(st);
		return;
	}
	ac->data = st;
	ac->c.reader->fn = &reply_fns;	/* integers without allocations */
	redisLibevAttach(st->loop, ac);
	redisAsyncSetConnectCallback(ac, connect_cb);
	redisAsyncSetDisconnectCallback(ac, disconnect_cb);
	st->ac = ac;
	st->state = ST_CONNECTING;
	ev_timer_stop(st->loop, &st->retry);
	ev_timer_set(&st->retry, (double)st->connect_timeout_us / 1e6, 0.);
	ev_timer_start(st->loop, &st->retry);
}

struct store *
store_new(struct ev_loop *loop, const struct store_cfg *cfg,
          struct metrics_worker *m, const char **err)
{
	struct store *st = xcalloc(1, sizeof(*st));
	struct store_topo t;

	results_init(&st->res);

	if (strncmp(cfg->url, "redis+", 6) == 0) {
		if (store_parse_topo_url(cfg->url, &t) == -1) {
			*err = "bad redis url (want redis+sentinel://host:port[,host:port...]/master[?db=N] or redis+cluster://host:port[,host:port...])";
			free(st);
			return NULL;
		}
		snprintf(st->addr.user, sizeof(st->addr.user), "%s", t.user);
		snprintf(st->addr.pass, sizeof(st->addr.pass), "%s", t.pass);
		st->addr.db = t.db;
	} else if (store_parse_url(cfg->url, &st->addr) == -1) {
		*err = "bad redis url (want redis://[user:pass@]host[:port][/db] or unix:/path)";
		free(st);
		return NULL;
	}
	if (cfg->username != NULL)
		snprintf(st->addr.user, sizeof(st->addr.user), "%s", cfg->username);
	if (cfg->password != NULL)
		snprintf(st->addr.pass, sizeof(st->addr.pass), "%s", cfg->password);
	st->loop = loop;
	st->m = m;
	st->backoff_us = STORE_BACKOFF_MIN_US;
	st->connect_timeout_us = cfg->connect_timeout_us > 0 ?
	                         cfg->connect_timeout_us : 1000000;
	st->seed = (unsigned int)(uintptr_t)st ^ (unsigned int)util_wall_us();
	ev_init(&st->retry, retry_cb);
	ev_init(&st->kick, kick_cb);
	if (strncmp(cfg->url, "redis+cluster://", 16) == 0) {
		st->cl = cluster_new(loop, &t, st->addr.user, st->addr.pass,
		                     st->connect_timeout_us, m);
		return st;
	}
	if (strncmp(cfg->url, "redis+sentinel://", 17) == 0)
		st->sen = sentinel_new(loop, &t, st->connect_timeout_us, found_cb,
		                       switched_cb, st);
	store_connect(st);
	return st;
}

void
store_free(struct store *st)
{
	if (st == NULL)
		return;
	st->state = ST_DOWN;	/* what the callbacks below re-submit fails */
	ev_timer_stop(st->loop, &st->retry);
	ev_timer_stop(st->loop, &st->kick);
	sentinel_free(st->sen);
	cluster_free(st->cl);
	reqq_fail_all(&st->q, STORE_EDOWN);
	if (st->ac != NULL) {
		st->ac->data = NULL;
		redisAsyncFree(st->ac);	/* pending batches get a NULL reply */
	}
	pool_free(st);
	free(st->rules);
	free(st->codes);
	msgpack_sbuffer_destroy(&st->packed);
	results_free(&st->res);
	free(st);
}

void
store_resolve_url(const char *url)
{
	struct store_topo t;
	struct store_addr a;

	if (store_parse_topo_url(url, &t) == 0) {
		for (int i = 0; i < t.nseeds; i++)
			resolve_warm(t.seeds[i].host);
	} else if (store_parse_url(url, &a) == 0 && a.path[0] == '\0') {
		resolve_warm(a.host);
	}
}
