/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A request: one NOTIFY, from its messages to its ACK. Builds the checks
 * the policy gives for each message, decides what it can at once (missing
 * keys, local-tier rules), sends the rest to Redis in one script call with
 * a deadline, applies each rule's fail mode when Redis is down or late,
 * and queues the ACK on its connection.
 *
 * Every NOTIFY gets exactly one ACK (or none if the connection is gone),
 * whatever happens: the request ends through req_finish() on every path.
 */
#ifndef REQ_H
#define REQ_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <ev.h>

#include "ratelog.h"
#include "spop.h"

struct conn;
struct local;
struct metrics_worker;
struct nearcache;
struct ovcache;
struct plancache;
struct policy_pin;
struct reqpool;
struct store;

/* What every worker's requests share (the server owns it): the shadow
 * denials already logged, under its lock. */
/* shadow_deny lines per rule per RATELOG_INTERVAL_US, all workers: a
 * key is logged once per window, but keys are the client's to choose. */
#define SHADOW_LOG_LINES 10

struct req_shared {
	/* Shadow denials logged, one set for all workers (HAProxy spreads
	 * a key's requests over them); locked only on a would-be denial. */
	pthread_mutex_t   shadow_lock;
	struct nearcache *shadow_seen;
	/* per rule index (as ratelog.h): the interval's start, its lines,
	 * and the new keys not logged since the rule's last line */
	int64_t  shadow_win_us[RATELOG_MAX_RULES];
	int      shadow_lines[RATELOG_MAX_RULES];
	uint64_t shadow_suppressed[RATELOG_MAX_RULES];
};

/* What the requests of one worker work with; the worker fills it and
 * owns what it points to. */
struct req_env {
	int                    id; /* the worker's, for logs */
	struct ev_loop        *loop;
	struct store          *store;     /* NULL once the worker exits */
	struct plancache      *plans;     /* tenant -> plan from Redis */
	struct ovcache        *overrides; /* runtime overrides (ovcache.h) */
	struct nearcache      *near;      /* keys Redis denied, until when */
	struct local          *local;     /* the agent's local tier (local.h) */
	struct metrics_worker *m;
	struct req_shared     *shared;
	struct policy_pin     *pin;  /* the current policy's */
	struct reqpool        *pool; /* req_pool_new() */
	int64_t                hold_until_us; /* draining: no ACK held
	                                      * past it (0: none) */
};

/* Starts the request for NOTIFY <f> on <c>. Returns 0, or -1 with an SPOP
 * status in <*status> when the payload is malformed (no request made). */
int req_start(struct req_env *e, struct conn *c, const struct spop_frame *f,
              int *status);

/* The worker drains and exits at its deadline: an ACK a leaky bucket in
 * delay mode holds, now or later, goes by <until_us> (util_loop_us()'s
 * clock) at the latest; one due before keeps its delay. Else it would
 * never be sent: HAProxy fails such a NOTIFY, and a lease the request
 * took is never released. */
void req_drain(struct req_env *e, int64_t until_us);

/* The pool of a worker's requests (reqpool.h), their Redis deadlines
 * included. */
struct reqpool *req_pool_new(struct ev_loop *loop, struct metrics_worker *m);
/* Frees every request of <e>'s pool at the worker's exit, with those still
 * waiting (on a timer, or on a store already freed) released first: their
 * conns and policy pins go too. Call before the plan cache and the loop
 * go. */
void req_pool_free(struct req_env *e);

#endif
