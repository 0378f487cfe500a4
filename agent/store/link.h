/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One hiredis async connection to one Redis, on a worker's libev loop:
 * used by the single/Sentinel backend and by every Cluster node.
 *
 *   - connect with our own timeout (hiredis 0.14 has none), through
 *     resolve.h (no blocking DNS on the loop);
 *   - the setup pipeline, queued ahead of anything else: AUTH, SELECT,
 *     SCRIPT LOAD of ratelimit.lua (and refund.lua for a Cluster node),
 *     FUNCTION LOAD of the library (scriptlib.h), and ROLE when the link
 *     must reach a master (Sentinel); a load refused with LOADING or BUSY
 *     is sent again once a call is answered;
 *   - capped exponential backoff with jitter before each reconnect; it
 *     restarts from its minimum only once the link proved usable (the
 *     script loaded, ROLE said master, a call answered), not on connect;
 *   - the circuit breaker over the owner's calls;
 *   - stall detection: calls waiting and no reply for LINK_STALL_S.
 *
 * The owner (store_single.c, store_cluster.c) builds the calls (batch.h),
 * queues requests and reads replies; the link tells it when it is up and
 * when it went down. Contexts are freed only from timers or by the owner
 * outside the link's callbacks (link_kick from inside one).
 */
#ifndef LINK_H
#define LINK_H

#include <stdint.h>

#include <ev.h>
#include <hiredis/async.h>

#include "batch.h"
#include "store_ops.h"

#define BREAKER_FAILS       5   /* consecutive failed calls that open it */
#define BREAKER_COOLDOWN    0.5 /* seconds it then refuses work */
#define BREAKER_PROBE_S     1.0 /* a probe with no outcome by then is lost */
#define LINK_STALL_S        1.0 /* calls waiting, no reply for this long */
#define LINK_BACKOFF_MIN_US 50000

struct metrics_worker;

/* ---- breaker (pure) ------------------------------------------------------ */

/* Consecutive failures and, once open, the end of the cooldown. Embedded;
 * all zero is closed. */
struct breaker {
	int    fails;
	double until; /* ev_tstamp */
	double probe; /* when the half-open probe was admitted, or 0 */
};

/* 1 while <b> has tripped and <now> is within its cooldown. */
int breaker_is_open(const struct breaker *b, double now);

/* 1 if work may be sent now: always while closed, never while open. Once
 * the cooldown is over (half-open) it admits one probe, and no more until
 * that probe's outcome is counted (breaker_fail, breaker_ok) or
 * BREAKER_PROBE_S have passed: a Redis still stuck makes one request wait
 * its deadline, not every request until the first timeout. */
int breaker_admit(struct breaker *b, double now);

/* 1 once BREAKER_FAILS failures in a row have been counted. */
int breaker_tripped(const struct breaker *b);

/* Counts a failed call at <now>; past the threshold each failure pushes
 * the cooldown on. Returns 1 when this failure opened the breaker. */
int breaker_fail(struct breaker *b, double now);

/* Counts a good call: the failures restart from 0. Returns 1 when the
 * breaker had tripped (it just closed). */
int breaker_ok(struct breaker *b);

/* 1 when the error reply <err> says Redis as a whole cannot serve now
 * (loading, busy with a script, a replica, out of memory, unauthenticated,
 * a cluster without quorum...): that counts against the breaker. Any
 * other error (WRONGTYPE on one key, a script error, a Cluster's TRYAGAIN
 * for the keys of one slot being migrated, or its CLUSTERDOWN for one
 * slot no node serves) is about the request and
 * proves Redis is answering, so it must not open the breaker and turn
 * one bad key, or one slot, into fail modes for every key. */
int link_error_is_outage(const char *err);

/* ---- backoff (pure) ------------------------------------------------------ */

struct backoff {
	int64_t      cur_us, min_us, max_us;
	unsigned int seed;
};

void backoff_init(struct backoff *b, int64_t min_us, int64_t max_us,
                  unsigned int seed);

/* The next delay, jittered over the upper half of the current step
 * (cur/2 .. cur); the step then doubles, up to max_us. */
int64_t backoff_next(struct backoff *b);

/* The link proved usable: the next delay is the minimum's again. */
void backoff_reset(struct backoff *b);

/* ---- the link ------------------------------------------------------------ */

enum link_state {
	LINK_DOWN = 0,
	LINK_CONNECTING, /* commands may be queued; not yet usable */
	LINK_UP,
};

enum link_script {
	LINK_RATELIMIT = 0, /* ratelimit.lua: FCALL, EVALSHA or EVAL */
	LINK_REFUND,        /* refund.lua: EVALSHA or EVAL */
};

#define LINK_RELOAD_LIBRARY (1u << 2) /* FUNCTION LOAD, in link.reload */

struct link;

/* What the owner hears. <up>: the link can take calls (connected, and a
 * master when verify_master). <down>: it was lost or dropped (state is
 * DOWN already; calls in flight have had their NULL replies). <retry>: the
 * backoff is over, reconnect (link_connect, maybe after a discovery);
 * NULL for a lazy link, which link_usable() reconnects when asked. */
struct link_owner {
	void (*up)(struct link *l);
	void (*down)(struct link *l);
	void (*retry)(struct link *l);
};

struct link_cfg {
	const struct store_addr *addr; /* copied */
	int64_t                  connect_timeout_us;
	int64_t                  backoff_max_us;
	int         verify_master; /* ROLE must say master before up */
	int         load_refund;   /* SCRIPT LOAD refund.lua too */
	const char *tag;           /* added after port= in log lines */
};

struct link {
	struct ev_loop          *loop;
	struct metrics_worker   *m;
	const struct link_owner *owner;
	void                    *arg; /* the owner's */
	struct store_addr        addr;
	char                     where[300]; /* its log fields: set_where() */
	int64_t                  connect_timeout_us;
	int                      verify_master, load_refund;
	const char              *tag;
	redisAsyncContext       *ac;
	enum link_state          state;
	int                      in_connect; /* in hiredis' connect callback */
	int                      freeing;    /* in detach_free(): no connect */
	ev_timer                 timer;      /* connect timeout, or backoff */
	ev_timer                 kick;       /* drop outside callbacks */
	int                      kick_direct;
	struct backoff           bo;
	ev_tstamp                retry_at; /* lazy: no reconnect before */
	char                     sha[41], refund_sha[41];
	unsigned                 reload; /* loads refused for now: bits
	                                  * 1 << LINK_RATELIMIT, LINK_REFUND,
	                                  * LINK_RELOAD_LIBRARY */
	int                      fcall;      /* this link has the library */
	int                      inflight;   /* calls sent, not answered */
	ev_tstamp                last_reply; /* a reply (a call's, the set-up's),
	                                     * not a lost call */
	ev_tstamp                busy_since; /* waiting started */
	ev_tstamp                last_call;  /* a call or an HGET sent */
	struct breaker           br;
};

void link_init(struct link *l, struct ev_loop *loop, struct metrics_worker *m,
               const struct link_owner *owner, void *arg,
               const struct link_cfg *cfg);

/* Stops everything: no owner callback runs after it; calls in flight get
 * NULL replies (their own callbacks run). */
void link_close(struct link *l);

/* The address the next connect goes to (a Sentinel's new master). */
void link_set_addr(struct link *l, const char *host, int port);

/* Connects to l->addr now (DOWN only); a failure schedules the retry. */
void link_connect(struct link *l);

/* Schedules the next retry after the backoff (a discovery found nothing). */
void link_retry_later(struct link *l);

/* Lazy links: 1 if commands may be queued now (connecting or up),
 * connecting first when down and the backoff has passed. */
int link_usable(struct link *l);

/* 1 when up and the breaker is not open. */
int link_up(const struct link *l);

/* Drops the link now, from outside its callbacks: its calls get NULL
 * replies, the owner's <down> runs, the retry is scheduled. Logged as
 * redis_link_dropped. No-op when there is no context. */
void link_drop(struct link *l);

/* link_drop, safe from inside any callback: logged now, done by
 * link_kick (no new work from now on, the drop at the next loop turn). */
void link_drop_soon(struct link *l);

/* Drops the link soon, safe from inside any callback; then reconnects at
 * once to l->addr when <direct>, else after the backoff (<retry>). */
void link_kick(struct link *l, int direct);

/* Sends the call in <b> to <s>: FCALL when the link has the library
 * (ratelimit only) and not <eval>; else EVALSHA once the script's sha is
 * known and not <eval>; else EVAL with its text. <*fcalled> says which.
 * Returns 0, or -1 with nothing sent. */
int link_call(struct link *l, struct batch_buf *b, enum link_script s, int eval,
              redisCallbackFn *cb, void *arg, int *fcalled);

/* A call's reply came (NULL: lost). Returns 1 when the call should be
 * resent once as EVAL (scriptlib_resend), after reloading the library
 * if it went missing. */
int link_answered(struct link *l, const void *reply, int fcalled);

/* Feeds the breaker with a call's outcome; logged when it opens or
 * closes. Each returns 1 on that transition. */
int link_failed(struct link *l);
int link_succeeded(struct link *l);

/* 1 if the link has not answered for LINK_STALL_S while something waits
 * on it. <timed_out>: a caller's deadline just passed on it, which proves
 * a wait, so the silence counts from the last reply (a Redis stopped while
 * the link was idle is stuck at the first deadline); else something must
 * be waiting (calls, other commands), and the silence counts from when it
 * started waiting at the earliest (a periodic check must not drop a link
 * idle until just now). */
int link_stalled(const struct link *l, int timed_out);

/* 1 if calls or other commands (an HGET) wait for a reply. */
int link_waiting(const struct link *l);

/* Call before queuing any command on <l> with redisAsyncCommand: an idle
 * link starts waiting now (what link_stalled counts from). */
void link_busy(struct link *l);

/* A Cluster's redirect of an HGET: <err> is its error reply (MOVED,
 * ASK, or any other). Returns 1 when it sent the HGET again, whose
 * answer then goes to the <cb> of link_hget() from there; 0 when <cb>
 * must get this failure now. */
typedef int link_redirect_fn(void *arg, const char *err);

/* HGET on the link; see store_hget. <asking>: ASKING goes first (the
 * target of an ASK). <redirect> (may be NULL) is offered an error reply
 * before <cb>, with <arg>. Returns -1 (no call to come) when the link
 * cannot take it. */
int link_hget(struct link *l, const char *hash, const char *field,
              size_t fieldlen, int asking, store_value_cb *cb, void *arg,
              link_redirect_fn *redirect);

/* Writes what is queued now rather than at the next EV_WRITE, unless
 * inside one of hiredis' callbacks. */
void link_write(struct link *l);

#endif
