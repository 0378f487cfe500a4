/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One Redis link (link.h): connect with a timeout, the setup pipeline,
 * backoff, breaker and stall detection, for the single/Sentinel backend
 * and for every Cluster node alike.
 *
 * Life: DOWN -> CONNECTING (our timer bounds it; the setup commands are
 * queued at once, so hiredis writes them first thing) -> UP (on connect,
 * or once ROLE said master when verify_master). Any error drops the
 * context and schedules the next try with capped exponential backoff and
 * jitter: from our timer (the owner's <retry>, which may ask the
 * sentinels first), or, for a lazy link (a Cluster node), when the owner
 * next needs it. A Redis that accepts and then drops us (a wrong
 * password), or a sentinel that keeps giving a replica's address, is so
 * retried at the backoff pace, not in a loop.
 *
 * Not here: what a call carries (batch.h), queues and replies (the
 * owners), finding a master (sentinel.h), the slot map (store_cluster.c).
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/adapters/libev.h>
#include <hiredis/hiredis.h>

#include "link.h"
#include "log.h"
#include "metrics.h"
#include "ratelog.h"
#include "reply.h"
#include "resolve.h"
#include "scriptlib.h"
#include "util.h"

extern const char lua_ratelimit[];
extern const char lua_refund[];

/* redis_not_master names a server every worker's link meets: one line
 * per address per interval for the whole process, not one per link. */
static struct ratelog_shared not_master_logs = RATELOG_SHARED_INIT;

/* ---- breaker ------------------------------------------------------------ */

int
breaker_is_open(const struct breaker *b, double now)
{
	return breaker_tripped(b) && now < b->until;
}

int
breaker_admit(struct breaker *b, double now)
{
	if (!breaker_tripped(b))
		return 1;
	if (now < b->until ||
	    (b->probe != 0 && now < b->probe + BREAKER_PROBE_S))
		return 0;
	b->probe = now;
	return 1;
}

int
breaker_tripped(const struct breaker *b)
{
	return b->fails >= BREAKER_FAILS;
}

int
breaker_fail(struct breaker *b, double now)
{
	int opened = ++b->fails == BREAKER_FAILS;

	if (breaker_tripped(b))
		b->until = now + BREAKER_COOLDOWN;
	b->probe = 0;
	return opened;
}

int
breaker_ok(struct breaker *b)
{
	int closed = breaker_tripped(b);

	b->fails = 0;
	b->probe = 0;
	return closed;
}

int
link_error_is_outage(const char *err)
{
	static const char *const codes[] = {
		"LOADING", "BUSY",        "MASTERDOWN", "READONLY",
		"NOAUTH",  "NOPERM",      "WRONGPASS",  "OOM",
		"MISCONF", "CLUSTERDOWN", "NOREPLICAS",
	};
	size_t n = strcspn(err, " ");

	/* one unassigned slot (cluster-require-full-coverage no), not the
	 * node nor the cluster: as TRYAGAIN */
	if (strncmp(err, "CLUSTERDOWN Hash slot not served", 32) == 0)
		return 0;
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		if (strlen(codes[i]) == n && strncmp(err, codes[i], n) == 0)
			return 1;
	return 0;
}

/* ---- backoff ------------------------------------------------------------ */

void
backoff_init(struct backoff *b, int64_t min_us, int64_t max_us,
             unsigned int seed)
{
	assert(min_us > 0 && max_us >= min_us);
	b->cur_us = b->min_us = min_us;
	b->max_us = max_us;
	b->seed = seed;
}

int64_t
backoff_next(struct backoff *b)
{
	int64_t d = b->cur_us;

	assert(d >= b->min_us && d <= b->max_us);
	d = d / 2 + (int64_t)(rand_r(&b->seed) % (unsigned)(d / 2 + 1));
	b->cur_us *= 2;
	if (b->cur_us > b->max_us)
		b->cur_us = b->max_us;
	return d;
}

void
backoff_reset(struct backoff *b)
{
	b->cur_us = b->min_us;
}

/* ---- going down and coming back ----------------------------------------- */

static void
arm(struct link *l, double after)
{
	ev_timer_stop(l->loop, &l->timer);
	ev_timer_set(&l->timer, after, 0.);
	ev_timer_start(l->loop, &l->timer);
}

static void
schedule(struct link *l)
{
	double d = (double)backoff_next(&l->bo) / 1e6;

	if (l->owner->retry != NULL)
		arm(l, d);
	else
		l->retry_at = ev_now(l->loop) + d;
}

void
link_retry_later(struct link *l)
{
	schedule(l);
}

/* The context is gone (hiredis frees it, or we did): tell the owner, then
 * schedule the next try. */
static void
lost(struct link *l)
{
	assert(l->ac == NULL);
	l->state = LINK_DOWN;
	l->fcall = 0;
	l->owner->down(l);
	schedule(l);
}

/* Frees the context now, its callbacks detached; calls in flight get NULL
 * replies. Never from one of its own callbacks. */
static void
detach_free(struct link *l)
{
	redisAsyncContext *ac = l->ac;

	l->state = LINK_DOWN;
	if (ac == NULL)
		return;
	l->ac = NULL;
	ac->data = NULL;
	/* the NULL replies run now may ask for the link again (a Cluster
	 * refund to this node): no reconnect until the caller is done */
	l->freeing = 1;
	redisAsyncFree(ac);
	l->freeing = 0;
}

/* ---- setup -------------------------------------------------------------- */

/* A reply to the set-up on <ac> (NULL: lost) is one as much as a call's:
 * stall detection counts silence from it. Else a new link, whose calls
 * had never been answered, was stalled at its first deadline (its
 * last_reply 0, or the old link's), however short Redis' pause. */
static void
setup_replied(redisAsyncContext *ac, const void *reply)
{
	struct link *l = ac->data;

	if (reply != NULL && l != NULL && l->ac == ac)
		l->last_reply = ev_now(l->loop);
}

static void
setup_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	redisReply *reply = r;

	struct log_text e;

	setup_replied(ac, reply);
	if (reply != NULL && reply->type == REDIS_REPLY_ERROR) {
		log_text(&e, reply->str);
		log_error("redis_setup", "command=%s error=\"%s\"%s",
		          (const char *)privdata, e.s, LOG_CUT(e.cut));
	}
}

/* 1 when the error reply <r> to a load says Redis cannot serve yet, but
 * will: loading its dataset (a restart, a full resync), or busy with
 * someone's long script. Such a load is sent again later (reload()):
 * else the link would call EVAL with the whole script text, or EVALSHA
 * instead of FCALL, for as long as it lives. */
static int
load_later(const redisReply *r)
{
	return r->type == REDIS_REPLY_ERROR &&
	       (strncmp(r->str, "LOADING", 7) == 0 ||
	        strncmp(r->str, "BUSY", 4) == 0);
}

/* SCRIPT LOAD answered on <ac>: <which> is LINK_RATELIMIT or
 * LINK_REFUND. */
static void
script_cb(redisAsyncContext *ac, void *r, void *which)
{
	struct link    *l = ac->data;
	redisReply     *reply = r;
	char           *sha;
	struct log_text e;

	setup_replied(ac, reply);
	if (reply == NULL || l == NULL)
		return;
	sha = (uintptr_t)which == LINK_REFUND ? l->refund_sha : l->sha;
	if (reply->type == REDIS_REPLY_STRING && reply->len == 40) {
		memcpy(sha, reply->str, 40);
		sha[40] = '\0';
		if (!l->verify_master) /* a usable link; Sentinel: role_cb */
			backoff_reset(&l->bo);
		return;
	}
	log_text(&e, reply->type == REDIS_REPLY_ERROR ? reply->str : "bad reply");
	log_error("redis_script_load", "error=\"%s\"%s%s", e.s,
	          load_later(reply) ? " retry=1" : "", LOG_CUT(e.cut));
	if (load_later(reply))
		l->reload |= 1u << (uintptr_t)which;
}

/* FUNCTION LOAD answered: FCALL from now on, if the load worked. */
static void
library_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct link *l = ac->data;

	setup_replied(ac, r);
	if (r == NULL || l == NULL || l->ac != ac)
		return;
	if (load_later(r))
		l->reload |= LINK_RELOAD_LIBRARY;
	else
		l->fcall = scriptlib_loaded(r, l->where);
}

/* TIME answered: the worker's view of Redis' clock (util_redis_seen())
 * from the link's set-up on, not only from its first decision script's
 * reply: a fresh agent on a host whose clock is off compares override
 * ends in Redis' clock from its first request. A refusal (an ACL without
 * TIME) leaves the script replies to bring it. */
static void
time_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	int64_t us;

	setup_replied(ac, r);
	if (r != NULL && reply_time_us(r, &us) == 0)
		util_redis_seen(us);
}

/* EVALSHA until this link's FUNCTION LOAD has answered. */
static void
load_library(struct link *l)
{
	l->fcall = 0;
	if (l->ac != NULL)
		scriptlib_load(l->ac, library_cb, NULL);
}

static void
load_script(struct link *l, enum link_script which)
{
	redisAsyncCommand(l->ac, script_cb, (void *)(uintptr_t)which,
	                  "SCRIPT LOAD %s",
	                  which == LINK_REFUND ? lua_refund : lua_ratelimit);
}

/* Sends again the loads Redis refused for now (load_later): from the
 * first call it answered, which shows it serves. One try each per
 * refusal: a load refused again is marked again by its callback. */
static void
reload(struct link *l)
{
	unsigned r = l->reload;

	l->reload = 0;
	if (r & (1u << LINK_RATELIMIT))
		load_script(l, LINK_RATELIMIT);
	if (r & (1u << LINK_REFUND))
		load_script(l, LINK_REFUND);
	if (r & LINK_RELOAD_LIBRARY)
		load_library(l);
}

static void up(struct link *l);

/* Sentinel: a master found through the sentinels may have been demoted by
 * the time we connect; only a master takes writes. */
static void
role_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct link *l = ac->data;
	redisReply  *reply = r;
	uint64_t     suppressed;

	setup_replied(ac, reply);
	if (reply == NULL || l == NULL || l->ac != ac ||
	    l->state != LINK_CONNECTING)
		return; /* the link is going: disconnect_cb */
	if (reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
	    reply->element[0]->type == REDIS_REPLY_STRING &&
	    strcmp(reply->element[0]->str, "master") == 0) {
		backoff_reset(&l->bo); /* a usable link */
		up(l);
		return;
	}
	if (log_level >= LOG_WARN &&
	    ratelog_addr_allow(&not_master_logs, l->addr.host, l->addr.port,
	                       util_now_us(), &suppressed))
		log_warn("redis_not_master",
		         "%s role=%.40s suppressed=%llu", l->where,
		         reply->type == REDIS_REPLY_ARRAY &&
		                         reply->elements > 0 &&
		                         reply->element[0]->type ==
		                                 REDIS_REPLY_STRING
		                 ? reply->element[0]->str
		                 : "?",
		         (unsigned long long)suppressed);
	link_kick(l, 0); /* rediscover, at the backoff pace */
}

/* Pipelines AUTH, SELECT, TIME, SCRIPT LOAD and FUNCTION LOAD; the
 * password never reaches a log line. */
static void
send_setup(struct link *l)
{
	const struct store_addr *a = &l->addr;
	redisAsyncContext       *ac = l->ac;

	if (a->pass[0] != '\0' && a->user[0] != '\0')
		redisAsyncCommand(ac, setup_cb, (void *)"AUTH", "AUTH %s %s",
		                  a->user, a->pass);
	else if (a->pass[0] != '\0')
		redisAsyncCommand(ac, setup_cb, (void *)"AUTH", "AUTH %s",
		                  a->pass);
	if (a->db != 0)
		redisAsyncCommand(ac, setup_cb, (void *)"SELECT", "SELECT %d",
		                  a->db);
	redisAsyncCommand(ac, time_cb, NULL, "TIME");
	l->reload = 0;
	load_script(l, LINK_RATELIMIT);
	if (l->load_refund)
		load_script(l, LINK_REFUND);
	load_library(l);
}

/* ---- hiredis callbacks -------------------------------------------------- */

static void
up(struct link *l)
{
	ev_timer_stop(l->loop, &l->timer);
	l->state = LINK_UP;
	l->busy_since = ev_now(l->loop); /* the set-up waits from here */
	l->owner->up(l);
}

static void
connect_cb(const redisAsyncContext *ac, int status)
{
	struct link *l = ac->data;

	if (l == NULL)
		return;
	ev_timer_stop(l->loop, &l->timer);
	if (status != REDIS_OK) {
		log_warn("redis_connect_failed", "%s error=\"%s\"",
		         l->where, ac->errstr);
		metrics_redis_error(l->m, METRICS_REDIS_REFUSED);
		l->ac = NULL; /* hiredis frees it after this callback */
		lost(l);
		return;
	}
	log_info("redis_connected", "%s%s", l->where, l->tag);
	if (l->verify_master) { /* UP once ROLE says master */
		redisAsyncCommand(l->ac, role_cb, NULL, "ROLE");
		arm(l, (double)l->connect_timeout_us / 1e6);
		return;
	}
	/* hiredis 0.14 does not flag its connect callback, which it runs from
	 * its own write handler, and writes right after it anyway */
	l->in_connect = 1;
	up(l);
	l->in_connect = 0;
}

static void
disconnect_cb(const redisAsyncContext *ac, int status)
{
	struct link    *l = ac->data;
	struct log_text e;

	if (l == NULL)
		return;
	/* hiredis' protocol errors quote the byte the server sent */
	log_text(&e, status == REDIS_OK ? "closed"
	                                : reply_why(ac->err, ac->errstr));
	log_warn("redis_disconnected", "%s%s error=\"%s\"%s",
	         l->where, l->tag, e.s, LOG_CUT(e.cut));
	l->ac = NULL;
	lost(l);
}

/* The timer both bounds a connect that hangs (CONNECTING: hiredis 0.14
 * has no connect timeout) and ends the backoff (DOWN). */
static void
timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct link *l = container_of(w, struct link, timer);

	if (l->state == LINK_CONNECTING) {
		log_warn("redis_connect_timeout", "%s%s", l->where, l->tag);
		metrics_redis_error(l->m, METRICS_REDIS_TIMEOUT);
		detach_free(l);
		lost(l);
		return;
	}
	if (l->state == LINK_DOWN && l->ac == NULL && l->owner->retry != NULL)
		l->owner->retry(l);
}

static void
kick_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct link *l = container_of(w, struct link, kick);

	ev_timer_stop(l->loop, &l->timer);
	detach_free(l);
	l->owner->down(l);
	if (l->kick_direct)
		link_connect(l);
	else
		schedule(l);
}

/* ---- the owner's side --------------------------------------------------- */

/* The log fields naming <l>'s address: a unix socket has no host nor
 * port. */
static void
set_where(struct link *l)
{
	if (l->addr.path[0] != '\0')
		snprintf(l->where, sizeof(l->where), "path=%s", l->addr.path);
	else
		snprintf(l->where, sizeof(l->where), "host=%s port=%d",
		         l->addr.host, l->addr.port);
}

void
link_init(struct link *l, struct ev_loop *loop, struct metrics_worker *m,
          const struct link_owner *owner, void *arg, const struct link_cfg *cfg)
{
	assert(owner->up != NULL && owner->down != NULL);
	memset(l, 0, sizeof(*l));
	l->loop = loop;
	l->m = m;
	l->owner = owner;
	l->arg = arg;
	l->addr = *cfg->addr;
	l->connect_timeout_us =
		cfg->connect_timeout_us > 0 ? cfg->connect_timeout_us : 1000000;
	l->verify_master = cfg->verify_master;
	l->load_refund = cfg->load_refund;
	l->tag = cfg->tag != NULL ? cfg->tag : "";
	set_where(l);
	backoff_init(&l->bo, LINK_BACKOFF_MIN_US, cfg->backoff_max_us,
	             (unsigned int)(uintptr_t)l ^ (unsigned int)util_wall_us());
	ev_init(&l->timer, timer_cb);
	ev_init(&l->kick, kick_cb);
}

void
link_close(struct link *l)
{
	ev_timer_stop(l->loop, &l->timer);
	ev_timer_stop(l->loop, &l->kick);
	detach_free(l);
}

void
link_set_addr(struct link *l, const char *host, int port)
{
	snprintf(l->addr.host, sizeof(l->addr.host), "%s", host);
	l->addr.port = port;
	set_where(l);
}

void
link_connect(struct link *l)
{
	redisAsyncContext *ac;
	const char        *why = "out of memory";

	assert(l->ac == NULL);
	if (l->addr.path[0] != '\0')
		ac = redisAsyncConnectUnix(l->addr.path);
	else
		ac = resolve_connect(l->addr.host, l->addr.port, &why);
	if (ac == NULL || ac->err) {
		log_warn("redis_connect_failed", "%s error=\"%s\"",
		         l->where, ac ? ac->errstr : why);
		/* refused at once (a unix socket with no Redis, a name not
		 * resolved yet) as much as through connect_cb */
		metrics_redis_error(l->m, METRICS_REDIS_REFUSED);
		if (ac != NULL)
			redisAsyncFree(ac);
		lost(l);
		return;
	}
	ac->data = l;
	ac->c.reader->fn = &reply_fns; /* integers without allocations */
	ac->c.reader->privdata = ac;   /* unsolicited replies refused */
	redisLibevAttach(l->loop, ac);
	redisAsyncSetConnectCallback(ac, connect_cb);
	redisAsyncSetDisconnectCallback(ac, disconnect_cb);
	l->ac = ac;
	l->state = LINK_CONNECTING;
	l->in_connect = 0;
	l->busy_since = ev_now(l->loop);
	send_setup(l);
	arm(l, (double)l->connect_timeout_us / 1e6);
}

int
link_usable(struct link *l)
{
	assert(l->owner->retry == NULL);
	if (l->state == LINK_DOWN && l->ac == NULL && !l->freeing &&
	    ev_now(l->loop) >= l->retry_at)
		link_connect(l);
	return l->state != LINK_DOWN;
}

int
link_up(const struct link *l)
{
	return l->state == LINK_UP && !breaker_is_open(&l->br, ev_now(l->loop));
}

static void
log_dropped(const struct link *l)
{
	ev_tstamp seen =
		l->last_reply > l->busy_since ? l->last_reply : l->busy_since;

	log_warn("redis_link_dropped", "%s%s inflight=%d silent_ms=%.0f",
	         l->where, l->tag, l->inflight,
	         (ev_now(l->loop) - seen) * 1e3);
}

void
link_drop(struct link *l)
{
	if (l->ac == NULL)
		return;
	log_dropped(l);
	ev_timer_stop(l->loop, &l->timer);
	detach_free(l);
	lost(l);
}

void
link_drop_soon(struct link *l)
{
	if (l->ac == NULL || ev_is_active(&l->kick))
		return;
	log_dropped(l);
	link_kick(l, 0);
}

void
link_kick(struct link *l, int direct)
{
	if (ev_is_active(&l->kick)) {
		l->kick_direct |= direct;
		return;
	}
	l->kick_direct = direct;
	l->state = LINK_DOWN;              /* refuse new work at once */
	ev_timer_stop(l->loop, &l->timer); /* kick_cb reconnects */
	ev_timer_set(&l->kick, 0., 0.);
	ev_timer_start(l->loop, &l->kick);
}

int
link_call(struct link *l, struct batch_buf *b, enum link_script s, int eval,
          redisCallbackFn *cb, void *arg, int *fcalled)
{
	const char        *sha = s == LINK_REFUND ? l->refund_sha : l->sha;
	redisAsyncContext *ac = l->ac;
	const char        *cmd;
	char              *own = NULL;
	size_t             len;
	int                rc;

	if (ac == NULL || (ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING)))
		return -1;
	*fcalled = s == LINK_RATELIMIT && l->fcall && !eval;
	if (*fcalled)
		cmd = batch_head(b, "FCALL", scriptlib_name(),
		                 scriptlib_name_len(), &len);
	else if (eval || sha[0] == '\0')
		cmd = own = batch_with_text(
			b, "EVAL",
			s == LINK_REFUND ? lua_refund : lua_ratelimit, &len);
	else
		cmd = batch_head(b, "EVALSHA", sha, 40, &len);
	rc = redisAsyncFormattedCommand(ac, cb, arg, cmd, len);
	free(own); /* hiredis copied it */
	if (rc != REDIS_OK)
		return -1;
	l->last_call = ev_now(l->loop);
	if (l->inflight++ == 0)
		l->busy_since = l->last_call;
	return 0;
}

int
link_answered(struct link *l, const void *r, int fcalled)
{
	const redisReply *reply = r;
	int               why;

	assert(l->inflight > 0);
	l->inflight--;
	if (reply == NULL)
		return 0;
	l->last_reply = ev_now(l->loop);
	if (reply->type != REDIS_REPLY_ERROR) {
		backoff_reset(&l->bo); /* a usable link */
		if (l->reload != 0 && l->ac != NULL)
			reload(l);
		return 0;
	}
	why = scriptlib_resend(reply->str, fcalled);
	if (why == SCRIPTLIB_MISSING) {
		metrics_redis_error(l->m, METRICS_REDIS_NOSCRIPT);
		if (scriptlib_missing(reply->str) && l->fcall)
			load_library(l);
	}
	return why != 0 && l->ac != NULL;
}

int
link_failed(struct link *l)
{
	if (!breaker_fail(&l->br, ev_now(l->loop)))
		return 0;
	log_warn("redis_breaker_open", "%s%s cooldown_s=%.1f",
	         l->where, l->tag, BREAKER_COOLDOWN);
	return 1;
}

int
link_succeeded(struct link *l)
{
	if (!breaker_ok(&l->br))
		return 0;
	log_info("redis_breaker_closed", "%s%s", l->where, l->tag);
	return 1;
}

int
link_waiting(const struct link *l)
{
	return l->ac != NULL &&
	       (l->inflight > 0 || l->ac->replies.head != NULL);
}

void
link_busy(struct link *l)
{
	if (!link_waiting(l))
		l->busy_since = ev_now(l->loop);
}

int
link_stalled(const struct link *l, int timed_out)
{
	ev_tstamp seen = l->last_reply;

	if (!timed_out && l->busy_since > seen)
		seen = l->busy_since;
	return l->ac != NULL && (timed_out || link_waiting(l)) &&
	       ev_now(l->loop) - seen >= LINK_STALL_S;
}

/* ---- HGET --------------------------------------------------------------- */

struct hget {
	store_value_cb   *cb;
	void             *arg;
	link_redirect_fn *redirect;
};

static void
hget_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct hget *h = privdata;
	struct link *l = ac->data;
	redisReply  *reply = r;

	if (reply != NULL && l != NULL)
		l->last_reply = ev_now(l->loop);
	if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
		/* a redirect that resent the HGET answers it later */
		if (reply == NULL || h->redirect == NULL ||
		    !h->redirect(h->arg, reply->str))
			h->cb(h->arg, NULL, 0, -1);
	} else if (reply->type == REDIS_REPLY_STRING) {
		h->cb(h->arg, reply->str, reply->len, 0);
	} else {
		h->cb(h->arg, NULL, 0, 0);
	}
	free(h);
}

int
link_hget(struct link *l, const char *hash, const char *field, size_t fieldlen,
          int asking, store_value_cb *cb, void *arg,
          link_redirect_fn *redirect)
{
	redisAsyncContext *ac = l->ac;
	struct hget       *h;

	if (ac == NULL || (ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING)))
		return -1;
	h = xmalloc(sizeof(*h));
	*h = (struct hget){ cb, arg, redirect };
	link_busy(l);
	/* ASKING holds for the next command only: nothing between them */
	if ((asking &&
	     redisAsyncCommand(ac, NULL, NULL, "ASKING") != REDIS_OK) ||
	    redisAsyncCommand(ac, hget_cb, h, "HGET %s %b", hash, field,
	                      fieldlen) != REDIS_OK) {
		free(h);
		return -1;
	}
	l->last_call = ev_now(l->loop);
	return 0;
}

void
link_write(struct link *l)
{
	if (l->ac != NULL && !l->in_connect &&
	    !(l->ac->c.flags & REDIS_IN_CALLBACK))
		redisAsyncHandleWrite(l->ac);
}
