/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Sentinel discovery and +switch-master, on one worker loop.
 *
 * Two hiredis async contexts, both to sentinels:
 *  - the query context asks SENTINEL get-master-addr-by-name. A try is
 *    bounded by <qtimer>; a failed try (no connection, error reply, nil,
 *    timeout) moves to the next sentinel, and after a full round with no
 *    answer <found> gets NULL so the store backs off and asks again. The
 *    context is kept open between discoveries.
 *  - the subscription context, in SUBSCRIBE mode on +switch-master. It is
 *    up once the sentinel confirms the SUBSCRIBE, not when TCP connects:
 *    a sentinel that accepts and never answers (stopped, hung) or
 *    refuses (an ACL without SUBSCRIBE, an error) would otherwise leave
 *    us believing we hear failovers. <stimer> bounds connect and
 *    confirmation together. Once up, the same timer sends the SUBSCRIBE
 *    again every SUB_KEEPALIVE_S (or the connect timeout, if longer): a
 *    sentinel that has not confirmed one by the next is taken for dead
 *    (stopped, a black hole keeping TCP up) and dropped, or the failovers
 *    the others announce would be missed for as long as its TCP stays
 *    up. Not PING: hiredis 0.14 hands a subscribed context's ["pong", ""]
 *    to no callback (reply.c even refuses an array that short, failing
 *    the link) and keeps every PING's callback queued until the context
 *    is freed, while a SUBSCRIBE of a channel already subscribed
 *    is answered with the confirmation sub_cb already reads and changes
 *    nothing. When the subscription drops, is refused or is dropped so,
 *    it is reopened on the next sentinel after a short delay. A failover
 *    announced before the new SUBSCRIBE took effect (the sentinel died
 *    mid-failover, the next one was slow to answer) would go unheard, so
 *    every SUBSCRIBE is preceded, on the same connection, by SENTINEL
 *    get-master-addr-by-name: hiredis writes both at once and the
 *    sentinel runs them back to back, so any failover after its answer
 *    reaches us as a message. An answer other than the master last given
 *    to the store goes the way of a +switch-master (switch_to). It never
 *    touches a discovery running on the query context, whose <found>
 *    still comes. Asked there rather than on a third context once the
 *    SUBSCRIBE is confirmed: no context, timer or state more, and the
 *    confirmation's timer bounds both.
 *  - a server that answers that question with "unknown command" is a plain
 *    Redis listed by mistake, and a sentinel that answers it with nil
 *    monitors no group of that name (its sentinel.conf names another, or
 *    the URL does): either would confirm the SUBSCRIBE all the same and
 *    never announce a failover of our group. Both contexts log it (an
 *    error, once per RATELOG_INTERVAL_US per address and kind for the
 *    whole process: each worker meets it) and go on to the next sentinel.
 * Contexts are freed only from our own timers, never inside one of their
 * callbacks; a callback that finds its context is no longer the current
 * one ignores its reply. Sentinels are not authenticated (their password,
 * if any, is not the data nodes').
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <ev.h>
#include <hiredis/adapters/libev.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "log.h"
#include "ratelog.h"
#include "reply.h"
#include "resolve.h"
#include "sentinel.h"
#include "util.h"

#define SUB_RETRY_S     0.5
#define SUB_KEEPALIVE_S 1.0 /* a confirmed subscription checked this often */

struct sentinel {
	struct ev_loop   *loop;
	struct store_topo t;
	double            timeout_s;
	sentinel_addr_cb *found, *switched;
	void             *arg;
	/* discovery */
	redisAsyncContext *qac;
	int                qidx;     /* sentinel of qac / of the next try */
	int                querying; /* a discovery is running */
	int                pending;  /* a query is in flight on qac */
	int                tried;    /* tries in this round */
	ev_timer           qtimer;   /* try timeout, or "next try now" */
	/* subscription */
	redisAsyncContext *sac;
	int                sidx;
	int                sub_up;
	int                ka_pending; /* a keepalive not confirmed yet */
	int                sub_skip;   /* sac's server is no sentinel of
	                                  <t.master> (not_ours) */
	ev_timer           stimer;     /* connect timeout / resubscribe /
	                                  keepalive */
	/* the master last given to <found> or <switched> (the store may
	 * have ignored it); port 0: none yet */
	char           master_host[256];
	int            master_port;
};

/* sentinel_not_a_sentinel and sentinel_unknown_group, by address, for the
 * whole process: every worker's sentinel meets the same addresses. */
static struct ratelog_shared not_sentinel_logs = RATELOG_SHARED_INIT;
static struct ratelog_shared unknown_group_logs = RATELOG_SHARED_INIT;

static redisAsyncContext *
open_ctx(struct sentinel *s, int idx, redisConnectCallback *ccb,
         redisDisconnectCallback *dcb)
{
	const struct store_seed *sd = &s->t.seeds[idx];
	const char              *why = "out of memory";
	redisAsyncContext       *ac = resolve_connect(sd->host, sd->port, &why);

	if (ac == NULL || ac->err) {
		log_warn("sentinel_connect_failed",
		         "host=%s port=%d error=\"%s\"", sd->host, sd->port,
		         ac ? ac->errstr : why);
		if (ac != NULL)
			redisAsyncFree(ac);
		return NULL;
	}
	ac->data = s;
	ac->c.reader->fn = &reply_fns; /* what hiredis would assert on: */
	ac->c.reader->privdata = ac;   /* refused (reply.h) */
	redisLibevAttach(s->loop, ac);
	redisAsyncSetConnectCallback(ac, ccb);
	redisAsyncSetDisconnectCallback(ac, dcb);
	return ac;
}

static void
arm(struct sentinel *s, ev_timer *t, double after)
{
	ev_timer_stop(s->loop, t);
	ev_timer_set(t, after, 0.);
	ev_timer_start(s->loop, t);
}

/* ---- discovery ------------------------------------------------------------
 */

static void
q_connect_cb(const redisAsyncContext *ac, int status)
{
	struct sentinel *s = ac->data;

	if (s != NULL && status != REDIS_OK)
		log_warn("sentinel_connect_failed",
		         "host=%s port=%d error=\"%s\"",
		         s->t.seeds[s->qidx].host, s->t.seeds[s->qidx].port,
		         ac->errstr);
}

static void
q_disconnect_cb(const redisAsyncContext *ac, int status)
{
	struct sentinel *s = ac->data;

	if (s != NULL && s->qac == ac)
		s->qac = NULL;
}

/* Drops qac; only from a timer or from outside any of its callbacks. */
static void
q_close(struct sentinel *s)
{
	redisAsyncContext *ac = s->qac;

	if (ac == NULL)
		return;
	s->qac = NULL;
	s->pending = 0;
	ac->data = NULL;
	redisAsyncFree(ac);
}

/* The try failed: go on with the next sentinel from the timer. */
static void
q_fail(struct sentinel *s)
{
	s->pending = 0;
	s->qidx = (s->qidx + 1) % s->t.nseeds;
	arm(s, &s->qtimer, 0.);
}

static int
parse_addr(redisReply *r, char *host, size_t hsize, int *port)
{
	long  v;
	char *e;

	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    r->element[0]->type != REDIS_REPLY_STRING ||
	    r->element[1]->type != REDIS_REPLY_STRING ||
	    r->element[0]->len == 0 || r->element[0]->len >= hsize)
		return -1;
	memcpy(host, r->element[0]->str, r->element[0]->len);
	host[r->element[0]->len] = '\0';
	v = strtol(r->element[1]->str, &e, 10);
	if (*e != '\0' || v <= 0 || v > 65535)
		return -1;
	*port = (int)v;
	return 0;
}

/* ratelog_addr_allow() in <rl> for the address of seed <idx>. */
static int
seed_log_allow(const struct sentinel *s, struct ratelog_shared *rl, int idx,
               uint64_t *suppressed)
{
	return ratelog_addr_allow(rl, s->t.seeds[idx].host, s->t.seeds[idx].port,
	                          util_now_us(), suppressed);
}

/* <reply>, a server's answer to SENTINEL get-master-addr-by-name, says
 * that it knows no such command: seed <idx> is a plain Redis listed among
 * the sentinels. Logs so, naming it, at most once per RATELOG_INTERVAL_US
 * per address in the process (both contexts of every worker meet it), and
 * returns 1; 0 for any other reply. The error text is the server's:
 * escaped, and cut visibly. */
static int
not_sentinel(struct sentinel *s, int idx, const redisReply *reply)
{
	struct log_text e;
	uint64_t        suppressed;

	if (reply->type != REDIS_REPLY_ERROR ||
	    strncasecmp(reply->str, "ERR unknown command", 19) != 0)
		return 0;
	if (!seed_log_allow(s, &not_sentinel_logs, idx, &suppressed))
		return 1;
	log_text(&e, reply->str);
	log_error("sentinel_not_a_sentinel",
	          "host=%s port=%d master=%s error=\"%s\" suppressed=%llu%s",
	          s->t.seeds[idx].host, s->t.seeds[idx].port, s->t.master, e.s,
	          (unsigned long long)suppressed, LOG_CUT(e.cut));
	return 1;
}

/* <reply>, a sentinel's answer to SENTINEL get-master-addr-by-name, is
 * nil: seed <idx> monitors no group named <t.master>. It would confirm
 * the SUBSCRIBE and announce only other groups' failovers. Logs so at
 * most once per RATELOG_INTERVAL_US per address, as not_sentinel(), and
 * returns 1; 0 for any other reply. */
static int
unknown_group(struct sentinel *s, int idx, const redisReply *reply)
{
	uint64_t suppressed;

	if (reply->type != REDIS_REPLY_NIL)
		return 0;
	if (seed_log_allow(s, &unknown_group_logs, idx, &suppressed))
		log_error("sentinel_unknown_group",
		          "host=%s port=%d master=%s suppressed=%llu",
		          s->t.seeds[idx].host, s->t.seeds[idx].port,
		          s->t.master, (unsigned long long)suppressed);
	return 1;
}

/* 1 when <reply> to SENTINEL get-master-addr-by-name says that seed <idx>
 * cannot tell us of <t.master>'s failovers (logged): a plain Redis, or a
 * sentinel of other groups. */
static int
not_ours(struct sentinel *s, int idx, const redisReply *reply)
{
	return not_sentinel(s, idx, reply) || unknown_group(s, idx, reply);
}

/* Sentinel <qidx> gave no master address: <reply> says why. */
static void
no_master(const struct sentinel *s, const redisReply *reply)
{
	struct log_text e;

	log_text(&e, reply->type == REDIS_REPLY_ERROR ? reply->str
	                                              : "unexpected reply");
	log_warn("sentinel_no_master", "host=%s port=%d master=%s error=\"%s\"%s",
	         s->t.seeds[s->qidx].host, s->t.seeds[s->qidx].port,
	         s->t.master, e.s, LOG_CUT(e.cut));
}

/* Notes <host>:<port> as the master the store was last given. */
static void
remember(struct sentinel *s, const char *host, int port)
{
	snprintf(s->master_host, sizeof(s->master_host), "%s", host);
	s->master_port = port;
}

static void
query_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct sentinel *s = privdata;
	redisReply      *reply = r;
	char             host[256];
	int              port;

	if (ac != s->qac || !s->pending)
		return; /* abandoned (timeout) or freed */
	ev_timer_stop(s->loop, &s->qtimer);
	if (reply == NULL) {
		s->qac = NULL; /* hiredis frees it after this */
		q_fail(s);
		return;
	}
	if (parse_addr(reply, host, sizeof(host), &port) == -1) {
		if (!not_ours(s, s->qidx, reply))
			no_master(s, reply);
		q_fail(s);
		return;
	}
	s->pending = 0;
	s->querying = 0;
	remember(s, host, port);
	log_info("sentinel_master", "master=%s host=%s port=%d", s->t.master,
	         host, port);
	s->found(s->arg, host, port);
}

static void
query_try(struct sentinel *s)
{
	if (s->qac == NULL)
		s->qac = open_ctx(s, s->qidx, q_connect_cb, q_disconnect_cb);
	if (s->qac == NULL ||
	    redisAsyncCommand(s->qac, query_cb, s,
	                      "SENTINEL get-master-addr-by-name %s",
	                      s->t.master) != REDIS_OK) {
		q_close(s);
		q_fail(s);
		return;
	}
	s->pending = 1;
	arm(s, &s->qtimer, s->timeout_s);
}

/* Fires for a try that timed out and to start the next try. */
static void
qtimer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct sentinel *s = container_of(w, struct sentinel, qtimer);

	if (s->pending) { /* this try timed out */
		log_warn("sentinel_timeout", "host=%s port=%d",
		         s->t.seeds[s->qidx].host, s->t.seeds[s->qidx].port);
		q_close(s);
		q_fail(s);
		return;
	}
	if (!s->querying)
		return;
	if (s->tried++ == s->t.nseeds) {
		s->querying = 0;
		s->found(s->arg, NULL, 0);
		return;
	}
	q_close(s); /* a previous try's sentinel */
	query_try(s);
}

void
sentinel_discover(struct sentinel *s)
{
	if (s->querying)
		return;
	s->querying = 1;
	s->tried = 0;
	if (s->qac != NULL) { /* reuse the open context first */
		s->tried = 1;
		query_try(s);
		return;
	}
	arm(s, &s->qtimer, 0.);
}

void
sentinel_distrust(struct sentinel *s)
{
	if (s->querying)
		return;
	q_close(s);
	s->qidx = (s->qidx + 1) % s->t.nseeds;
}

/* ---- +switch-master ---------------------------------------------------- */

static void sub_cb(redisAsyncContext *ac, void *r, void *privdata);

/* Frees the subscription's context, its callbacks detached; from a timer
 * or outside every callback of the context only. */
static void
sub_close(struct sentinel *s)
{
	redisAsyncContext *ac = s->sac;

	if (ac == NULL)
		return;
	s->sac = NULL;
	ac->data = NULL;
	redisAsyncFree(ac);
}

/* The subscription is gone (<sac> NULL): the next sentinel's turn, soon. */
static void
sub_next(struct sentinel *s)
{
	s->sub_up = 0;
	s->sidx = (s->sidx + 1) % s->t.nseeds;
	arm(s, &s->stimer, SUB_RETRY_S);
}

static void
s_disconnect_cb(const redisAsyncContext *ac, int status)
{
	struct sentinel *s = ac->data;

	if (s == NULL || ac != s->sac)
		return;
	s->sac = NULL;
	sub_next(s);
}

/* How long a keepalive may wait for its confirmation: until the next. */
static double
keepalive_s(const struct sentinel *s)
{
	return s->timeout_s > SUB_KEEPALIVE_S ? s->timeout_s : SUB_KEEPALIVE_S;
}

/* The sentinel confirmed the SUBSCRIBE: failovers reach us from now. */
static void
sub_confirmed(struct sentinel *s)
{
	s->sub_up = 1;
	s->ka_pending = 0;
	arm(s, &s->stimer, keepalive_s(s));
	log_info("sentinel_subscribed", "host=%s port=%d",
	         s->t.seeds[s->sidx].host, s->t.seeds[s->sidx].port);
}

/* Asks the subscribed sentinel to confirm again; the next tick of
 * <stimer> finds it answered or not. A SUBSCRIBE that cannot be queued
 * (the context is going) is left unanswered the same. */
static void
keepalive(struct sentinel *s)
{
	s->ka_pending = 1;
	redisAsyncCommand(s->sac, sub_cb, s, "SUBSCRIBE +switch-master");
	arm(s, &s->stimer, keepalive_s(s));
}

/* The one way a master the store did not ask for reaches it: announced
 * by a +switch-master, or named by a new subscription's sentinel (<via>
 * says which). The store ignores a master it is already on. */
static void
switch_to(struct sentinel *s, const char *host, int port, const char *via)
{
	remember(s, host, port);
	log_info("sentinel_switch_master", "master=%s host=%s port=%d via=%s",
	         s->t.master, host, port, via);
	s->switched(s->arg, host, port);
}

/* "<name> <old-ip> <old-port> <new-ip> <new-port>" */
static void
on_switch(struct sentinel *s, const char *msg, size_t len)
{
	char name[128], host[256], buf[512];
	int  port;

	if (len >= sizeof(buf))
		return;
	memcpy(buf, msg, len);
	buf[len] = '\0';
	if (sscanf(buf, "%127s %*s %*s %255s %d", name, host, &port) != 3 ||
	    strcmp(name, s->t.master) != 0 || port <= 0 || port > 65535)
		return;
	switch_to(s, host, port, "switch-master");
}

/* The answer to the get-master-addr-by-name that precedes the SUBSCRIBE
 * (sub_open). A master other than the one the store was last given was
 * announced while no subscription listened: switch to it. None given yet
 * means the store's first discovery is running, and answers it. A plain
 * Redis, or a sentinel that does not know <t.master> (nil), is left at
 * the next tick (not from inside its callback); another error changes
 * nothing. */
static void
check_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct sentinel *s = privdata;
	redisReply      *reply = r;
	char             host[256];
	int              port;

	if (ac != s->sac || reply == NULL)
		return; /* gone: sub_cb sees the NULL too */
	if (not_ours(s, s->sidx, reply)) {
		s->sub_skip = 1;
		arm(s, &s->stimer, 0.);
	} else if (parse_addr(reply, host, sizeof(host), &port) == 0 &&
	           s->master_port != 0 &&
	           (port != s->master_port ||
	            strcmp(host, s->master_host) != 0)) {
		switch_to(s, host, port, "subscribe_check");
	}
}

static void
sub_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct sentinel *s = privdata;
	redisReply      *reply = r;

	if (ac != s->sac)
		return;
	if (reply == NULL) { /* the disconnect callback follows */
		if (s->sac != NULL && !s->sub_up) {
			/* connect failed, or the SUBSCRIBE was refused (hiredis
			 * drops the link on its error): hiredis frees it */
			struct log_text e;

			log_text(&e, ac->errstr[0] != '\0' ? ac->errstr
			                                    : "closed");
			log_warn("sentinel_subscribe_failed",
			         "host=%s port=%d error=\"%s\"%s",
			         s->t.seeds[s->sidx].host,
			         s->t.seeds[s->sidx].port, e.s, LOG_CUT(e.cut));
			s->sac = NULL;
			sub_next(s);
		}
		return;
	}
	if (s->sub_skip || reply->type != REDIS_REPLY_ARRAY ||
	    reply->elements != 3 ||
	    reply->element[0]->type != REDIS_REPLY_STRING)
		return;
	if (strcmp(reply->element[0]->str, "subscribe") == 0 && !s->sub_up)
		sub_confirmed(s);
	else if (strcmp(reply->element[0]->str, "subscribe") == 0)
		s->ka_pending = 0; /* a keepalive's */
	else if (strcmp(reply->element[0]->str, "message") == 0 &&
	         reply->element[2]->type == REDIS_REPLY_STRING)
		on_switch(s, reply->element[2]->str, reply->element[2]->len);
}

/* Subscribes on sentinel <sidx>, asking it for the master first: its two
 * answers come in that order, with no failover between them unheard. */
static void
sub_open(struct sentinel *s)
{
	/* no connect callback: a failed connect comes as a NULL reply, and
	 * up is the SUBSCRIBE's confirmation (sub_cb), not the connect */
	s->sub_skip = 0;
	s->sac = open_ctx(s, s->sidx, NULL, s_disconnect_cb);
	if (s->sac == NULL ||
	    redisAsyncCommand(s->sac, check_cb, s,
	                      "SENTINEL get-master-addr-by-name %s",
	                      s->t.master) != REDIS_OK ||
	    redisAsyncCommand(s->sac, sub_cb, s, "SUBSCRIBE +switch-master") !=
	            REDIS_OK) {
		sub_close(s);
		sub_next(s);
		return;
	}
	arm(s, &s->stimer, s->timeout_s); /* connect and confirmation */
}

/* Gives up on the subscription's sentinel, which did not confirm in time
 * (<what>: the first SUBSCRIBE or a keepalive), for the next sentinel
 * soon. From <stimer> only, outside every callback of the context. */
static void
sub_drop(struct sentinel *s, const char *what)
{
	log_warn("sentinel_timeout", "host=%s port=%d %s=1",
	         s->t.seeds[s->sidx].host, s->t.seeds[s->sidx].port, what);
	sub_close(s);
	sub_next(s);
}

/* Reopens a dropped subscription, leaves a plain Redis or a sentinel of
 * other groups (check_cb logged it), gives up on a sentinel that has not confirmed the SUBSCRIBE or the
 * last keepalive in time (connect or answer hangs), or sends the next
 * keepalive. */
static void
stimer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct sentinel *s = container_of(w, struct sentinel, stimer);

	if (s->sac == NULL) {
		sub_open(s);
	} else if (s->sub_skip) {
		sub_close(s);
		sub_next(s);
	} else if (!s->sub_up) {
		sub_drop(s, "subscribe");
	} else if (s->ka_pending) {
		sub_drop(s, "keepalive");
	} else {
		keepalive(s);
	}
}

/* ---- life ------------------------------------------------------------- */

struct sentinel *
sentinel_new(struct ev_loop *loop, const struct store_topo *t,
             int64_t timeout_us, sentinel_addr_cb *found,
             sentinel_addr_cb *switched, void *arg)
{
	struct sentinel *s = xcalloc(1, sizeof(*s));

	s->loop = loop;
	s->t = *t;
	s->timeout_s = (double)timeout_us / 1e6;
	s->found = found;
	s->switched = switched;
	s->arg = arg;
	ev_init(&s->qtimer, qtimer_cb);
	ev_init(&s->stimer, stimer_cb);
	sub_open(s);
	return s;
}

void
sentinel_free(struct sentinel *s)
{
	if (s == NULL)
		return;
	ev_timer_stop(s->loop, &s->qtimer);
	ev_timer_stop(s->loop, &s->stimer);
	q_close(s);
	sub_close(s);
	free(s);
}
