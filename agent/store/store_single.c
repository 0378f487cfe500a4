/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store backend for one Redis, or the master of a Sentinel group: one
 * link (link.h) per worker loop, and the requests queued for it.
 *
 * A flush takes every queued request (up to STORE_BATCH_MAX per call) into
 * one script call, encoded by batch.h into the call's own buffer and sent
 * as FCALL, EVALSHA or EVAL (link_call); the call keeps its buffer until
 * the reply, so NOSCRIPT (or a library gone missing) is answered by
 * resending the same bytes with EVAL. Calls and their buffers are pooled.
 * Each call entry remembers the request's <gen>: a request its caller has
 * already answered (deadline passed) has another gen and its late result is
 * dropped.
 *
 * The breaker (link.h) opens after BREAKER_FAILS consecutive failed calls
 * (lost, stalled, or answered with an error that says Redis cannot serve:
 * link_error_is_outage; a request refused by the cap on calls in flight
 * of a silent link counts as a stalled one: kept_waiting) and then
 * refuses work for BREAKER_COOLDOWN, after
 * which one request probes. A per-key error (WRONGTYPE) fails only its
 * call. While it is open, and while the link is down, submit refuses at
 * once so no request waits on a dead connection; a call of lease releases
 * alone goes through an open breaker (reqq_releases_only).
 *
 * A READONLY or MASTERDOWN reply (a demoted master, which keeps our
 * connection open) drops the link: a plain URL reconnects, at the backoff
 * pace, to wherever its name leads after the failover; Sentinel asks the
 * sentinels. Sentinel: the master is found through sentinel.h, verified
 * with ROLE by the link, and followed on +switch-master. A master that
 * never came up (ROLE said replica, no connection) sends the next
 * discovery to another sentinel first: the one that named it may be stale.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "batch.h"
#include "link.h"
#include "log.h"
#include "metrics.h"
#include "reqq.h"
#include "results.h"
#include "sentinel.h"
#include "store_single.h"
#include "util.h"

#define SINGLE_BACKOFF_MAX_US 1000000 /* back within 2 s of Redis */
#define SINGLE_MAX_QUEUE      4096    /* requests waiting for a connection */
#define SINGLE_MAX_INFLIGHT   256     /* calls sent and not answered */
#define CALL_POOL_MAX         32      /* free calls kept */

struct call_entry {
	struct store_req *sr;
	uint32_t          gen;
	int               n; /* its checks when sent: a request reused
	                      * meanwhile may have another count */
};

struct call {
	struct single    *s;
	struct call      *next; /* the pool of free calls */
	int               n;
	struct call_entry ent[STORE_BATCH_MAX];
	struct batch_buf  buf;
	int64_t           sent_us;
	int               retried; /* resent with EVAL */
	int               fcalled; /* last sent as FCALL */
};

struct single {
	struct ev_loop        *loop;
	struct metrics_worker *m;
	struct link            link;
	struct reqq            q;   /* queued, not sent */
	struct sentinel       *sen; /* NULL for a plain URL */
	int                    discovering;
	int                    unproven; /* a found master not up yet */
	int                    closing;
	struct call           *pool;
	int                    npool;
	struct batch_enc       enc;
	struct batch_check    *checks; /* the flush's scratch */
	int                   *part_n;
	int                    nscratch;
	struct results         res; /* the last reply, decoded */
};

/* ---- calls -------------------------------------------------------------- */

static void
call_free(struct call *c)
{
	struct single *s = c->s;

	if (s->npool < CALL_POOL_MAX) {
		c->next = s->pool;
		s->pool = c;
		s->npool++;
		return;
	}
	batch_buf_free(&c->buf);
	free(c);
}

static struct call *
call_get(struct single *s)
{
	struct call *c = s->pool;

	if (c == NULL) {
		c = xcalloc(1, sizeof(*c));
	} else {
		s->pool = c->next;
		s->npool--;
	}
	c->s = s;
	c->n = 0;
	c->retried = 0;
	return c;
}

static int
call_nchecks(const struct call *c)
{
	int n = 0;

	for (int i = 0; i < c->n; i++)
		n += c->ent[i].n;
	return n;
}

static void
call_fail(struct call *c, int err)
{
	for (int i = 0; i < c->n; i++)
		reqq_answer(c->ent[i].sr, c->ent[i].gen, err);
}

/* Distributes a good reply to the requests of <c>. The number of results
 * was fixed when the call was sent, so a request whose caller gave up (gen
 * changed) still takes its slots; only its callback is skipped. */
static int
call_deliver(struct single *s, struct call *c, const redisReply *reply)
{
	size_t k = 0;

	if (reply->type != REDIS_REPLY_STRING ||
	    results_decode(&s->res, reply->str, reply->len,
	                   (size_t)call_nchecks(c)) == -1)
		return -1;
	util_redis_seen(s->res.now_us);
	for (int i = 0; i < c->n; i++) {
		struct store_req *sr = c->ent[i].sr;

		if (sr->gen != c->ent[i].gen) {
			k += (size_t)c->ent[i].n;
			continue;
		}
		for (int j = 0; j < c->ent[i].n; j++)
			results_get(&s->res, k++, &sr->results[sr->index[j]]);
	}
	for (int i = 0; i < c->n; i++)
		reqq_answer(c->ent[i].sr, c->ent[i].gen, STORE_OK);
	return 0;
}

static void
breaker_failed(struct single *s)
{
	link_failed(&s->link);
	metrics_circuit(s->m, breaker_tripped(&s->link.br));
}

static void
breaker_succeeded(struct single *s)
{
	link_succeeded(&s->link);
	metrics_circuit(s->m, 0);
}

/* Redis answered <c> with the error <err>: its requests get their fail
 * modes. Only an error saying Redis cannot serve at all feeds the breaker;
 * a per-key one (WRONGTYPE) shows Redis answering, so it counts as a good
 * call for the breaker and the other keys keep being decided by Redis. */
static void
call_error(struct single *s, struct call *c, const char *err)
{
	int             outage = link_error_is_outage(err);
	struct log_text e;

	log_text(&e, err);
	log_warn("redis_error", "error=\"%s\" outage=%d%s", e.s, outage,
	         LOG_CUT(e.cut));
	/* on a replica now (a failover demoted our master): rediscover, or
	 * for a plain URL reconnect to wherever its name leads now; the
	 * demoted master keeps our connection open, so nothing else would */
	if (strncmp(err, "READONLY", 8) == 0 ||
	    strncmp(err, "MASTERDOWN", 10) == 0)
		link_kick(&s->link, 0);
	metrics_redis_error(s->m, METRICS_REDIS_REPLY);
	if (outage)
		breaker_failed(s);
	else
		breaker_succeeded(s);
	call_fail(c, STORE_EREPLY);
}

static void call_cb(redisAsyncContext *ac, void *r, void *privdata);

static int
call_send(struct single *s, struct call *c, int eval)
{
	return link_call(&s->link, &c->buf, LINK_RATELIMIT, eval, call_cb, c,
	                 &c->fcalled);
}

static void
call_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct call   *c = privdata;
	struct single *s = c->s;
	redisReply    *reply = r;
	int            resend;

	assert(c->n > 0 && c->n <= STORE_BATCH_MAX);
	resend = link_answered(&s->link, reply, c->fcalled);
	metrics_redis_latency(s->m, util_monotonic_us() - c->sent_us);
	if (reply == NULL) { /* link lost or context freed */
		metrics_redis_error(s->m, METRICS_REDIS_IO);
		breaker_failed(s);
		call_fail(c, STORE_EIO);
		call_free(c);
		return;
	}
	if (resend && !c->retried && s->link.state == LINK_UP) {
		c->retried = 1;
		if (call_send(s, c, 1) == 0)
			return;
	}
	if (reply->type == REDIS_REPLY_ERROR) {
		call_error(s, c, reply->str);
	} else if (call_deliver(s, c, reply) == -1) {
		metrics_redis_error(s->m, METRICS_REDIS_REPLY);
		breaker_failed(s);
		call_fail(c, STORE_EREPLY);
	} else {
		breaker_succeeded(s);
	}
	call_free(c);
}

/* ---- building a call ---------------------------------------------------- */

static void
scratch(struct single *s, int nchecks)
{
	if (nchecks <= s->nscratch)
		return;
	s->nscratch = nchecks;
	s->checks = xrealloc(s->checks, (size_t)nchecks * sizeof(*s->checks));
}

/* Takes up to STORE_BATCH_MAX queued requests into a call and encodes its
 * arguments into the call's own buffer: the keys and members are copied,
 * since a NOSCRIPT resend must not read requests that were answered and
 * reused meanwhile. */
static struct call *
call_take(struct single *s)
{
	struct call *c = call_get(s);
	int          k = 0;

	while (s->q.head != NULL && c->n < STORE_BATCH_MAX) {
		struct store_req *sr = reqq_pop(&s->q);

		c->ent[c->n].sr = sr;
		c->ent[c->n].n = sr->n;
		c->ent[c->n++].gen = sr->sent_gen;
		scratch(s, k + sr->n);
		for (int j = 0; j < sr->n; j++, k++) {
			const struct check *ck = &sr->checks[sr->index[j]];
			struct batch_check *v = &s->checks[k];

			v->key = ck->key;
			v->keylen = ck->keylen;
			v->member = ck->member;
			v->memberlen = ck->memberlen;
			v->algo = ck->lim.algo;
			v->op = ck->op;
			v->flags = ck->flags;
			v->cost = ck->cost;
			lim_script_params(&ck->lim, v->p);
		}
	}
	assert(c->n > 0); /* called with requests queued only */
	{
		int part_n[STORE_BATCH_MAX];

		for (int i = 0; i < c->n; i++)
			part_n[i] = c->ent[i].n;
		batch_encode(&s->enc, &c->buf, s->checks, k, part_n, c->n);
	}
	return c;
}

/* ---- operations --------------------------------------------------------- */

/* Redis kept a request waiting: its deadline passed with its call
 * unanswered (<timed_out>, from a timer), or the cap on calls in flight
 * refused it (from a submit, maybe inside a callback of the link). Once
 * the link has been silent for LINK_STALL_S that counts against the
 * breaker (late but answering, overload, is not stuck: shedding the link
 * or opening the breaker then only turns slow answers into none); when
 * the breaker has tripped twice over, the link is dropped so that the
 * calls stuck on it fail now and the next attempt starts on a fresh
 * connection. The cap counts as the deadlines do: under load a stopped
 * Redis holds SINGLE_MAX_INFLIGHT calls before it has been silent for
 * LINK_STALL_S, and from then on no request waited for a deadline, so
 * nothing else would ever drop the link. */
static void
kept_waiting(struct single *s, int timed_out)
{
	if (!link_stalled(&s->link, timed_out))
		return;
	breaker_failed(s);
	if (s->link.state != LINK_UP || s->link.br.fails < 2 * BREAKER_FAILS ||
	    !link_waiting(&s->link))
		return;
	if (timed_out)
		link_drop(&s->link);
	else
		link_drop_soon(&s->link);
}

static void
single_flush(void *be)
{
	struct single *s = be;
	int            sent = 0;

	while (s->q.head != NULL && s->link.state == LINK_UP) {
		struct call *c = call_take(s);

		c->sent_us = util_monotonic_us();
		if (call_send(s, c, 0) == -1) {
			/* never written: Redis did not see it (EIO would say
			 * it might have run, req.c "unconfirmed") */
			call_fail(c, STORE_EDOWN);
			call_free(c);
		} else {
			sent = 1;
		}
	}
	/* hiredis only queues the command and waits for EV_WRITE: a loop
	 * turn and an epoll_ctl pair per call. Write now instead. */
	if (sent)
		link_write(&s->link);
}

static int
single_submit(void *be, struct store_req *sr)
{
	struct single *s = be;

	if (s->link.state == LINK_DOWN || s->closing ||
	    s->q.queued >= SINGLE_MAX_QUEUE)
		return STORE_EDOWN;
	if (s->link.inflight >= SINGLE_MAX_INFLIGHT) {
		kept_waiting(s, 0);
		return STORE_EDOWN;
	}
	if (!reqq_releases_only(sr) &&
	    !breaker_admit(&s->link.br, ev_now(s->loop)))
		return STORE_EDOWN;
	reqq_push(&s->q, sr);
	return STORE_OK;
}

static int
single_up(const void *be)
{
	const struct single *s = be;

	return link_up(&s->link);
}

static int
single_hget(void *be, const char *hash, const char *field, size_t fieldlen,
            store_value_cb *cb, void *arg)
{
	struct single *s = be;

	if (!link_up(&s->link))
		return -1;
	return link_hget(&s->link, hash, field, fieldlen, 0, cb, arg, NULL);
}

static void
single_cancel(void *be, struct store_req *sr)
{
	struct single *s = be;

	reqq_remove(&s->q, sr);
}

static void
single_note_timeout(void *be)
{
	struct single *s = be;

	metrics_redis_error(s->m, METRICS_REDIS_TIMEOUT);
	kept_waiting(s, 1);
}

/* ---- the link's owner --------------------------------------------------- */

static void
link_up_cb(struct link *l)
{
	struct single *s = l->arg;

	s->unproven = 0;
	single_flush(s);
}

static void
link_down_cb(struct link *l)
{
	struct single *s = l->arg;

	reqq_fail_all(&s->q, STORE_EDOWN);
}

static void
link_retry_cb(struct link *l)
{
	struct single *s = l->arg;

	if (s->sen == NULL) {
		link_connect(l);
		return;
	}
	if (!s->discovering) {
		s->discovering = 1;
		/* the last sentinel's master was none: ask another */
		if (s->unproven)
			sentinel_distrust(s->sen);
		s->unproven = 0;
		sentinel_discover(s->sen);
	}
}

static const struct link_owner owner = {
	.up = link_up_cb,
	.down = link_down_cb,
	.retry = link_retry_cb,
};

/* Sentinel: the master's address, or NULL when no sentinel answered. */
static void
found_cb(void *arg, const char *host, int port)
{
	struct single *s = arg;

	s->discovering = 0;
	if (s->link.ac != NULL)
		return; /* a +switch-master got there first */
	if (host == NULL) {
		link_retry_later(&s->link);
		return;
	}
	link_set_addr(&s->link, host, port);
	s->unproven = 1;
	link_connect(&s->link);
}

static void
switched_cb(void *arg, const char *host, int port)
{
	struct single *s = arg;

	if (s->link.ac != NULL && s->link.addr.port == port &&
	    strcmp(s->link.addr.host, host) == 0)
		return;
	link_set_addr(&s->link, host, port);
	link_kick(&s->link, 1);
}

static void
single_free(void *be)
{
	struct single *s = be;

	s->closing = 1; /* what the callbacks below re-submit fails */
	sentinel_free(s->sen);
	reqq_fail_all(&s->q, STORE_EDOWN);
	link_close(&s->link); /* pending calls get a NULL reply */
	while (s->pool != NULL) {
		struct call *c = s->pool;

		s->pool = c->next;
		batch_buf_free(&c->buf);
		free(c);
	}
	batch_enc_free(&s->enc);
	free(s->checks);
	results_free(&s->res);
	free(s);
}

const struct store_ops store_single_ops = {
	.submit = single_submit,
	.flush = single_flush,
	.hget = single_hget,
	.cancel = single_cancel,
	.up = single_up,
	.note_timeout = single_note_timeout,
	.free = single_free,
};

void *
store_single_new(struct ev_loop *loop, const struct store_addr *addr,
                 const struct store_topo *sentinels, int64_t connect_timeout_us,
                 struct metrics_worker *m)
{
	struct single  *s = xcalloc(1, sizeof(*s));
	struct link_cfg cfg = {
		.addr = addr,
		.connect_timeout_us = connect_timeout_us,
		.backoff_max_us = SINGLE_BACKOFF_MAX_US,
		.verify_master = sentinels != NULL,
	};

	s->loop = loop;
	s->m = m;
	results_init(&s->res);
	link_init(&s->link, loop, m, &owner, s, &cfg);
	if (sentinels != NULL)
		s->sen = sentinel_new(loop, sentinels,
		                      s->link.connect_timeout_us, found_cb,
		                      switched_cb, s);
	link_retry_cb(&s->link);
	return s;
}
