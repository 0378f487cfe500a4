/*
 * The server: listening sockets (TCP and unix), the worker threads (one
 * libev loop each, sharing nothing on the hot path), accepting, policy
 * reload and graceful drain.
 *
 * Every worker watches every listening socket and accepts what it can
 * (non-blocking accept; a worker that loses the race gets EAGAIN), so a
 * connection lives on the worker that accepted it, with that worker's
 * Redis link and metrics; the local tier is the agent's, one for all. The main thread owns signals and
 * reaches the workers with ev_async.
 */
#ifndef SERVER_H
#define SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include <ev.h>

#include "deadline.h"
#include "policy.h"

#define SERVER_MAX_LISTEN 8

struct conn;
struct req;
struct store;
struct local;
struct plancache;
struct nearcache;
struct metrics_worker;
struct server;

/* A policy as one worker uses it: requests pin it with a plain counter
 * (the worker's own), so the request path pays no atomic; the policy's
 * shared refcount moves only at reload. */
struct policy_pin {
	struct policy *p;
	int            inflight;	/* requests built under it */
	int            retired;	/* a newer policy took over */
};

struct worker {
	int                    id;
	struct server         *srv;
	struct ev_loop        *loop;
	pthread_t              thread;
	ev_io                  accept_io[SERVER_MAX_LISTEN];
	ev_timer               accept_retry;	/* resumes accepting (EMFILE) */
	int64_t                paused_log_us;	/* last accept_paused line */
	uint64_t               pauses;		/* since that line */
	ev_async               wake;	/* reload or drain requested */
	ev_prepare             flush;	/* once per loop iteration */
	ev_check               tick;	/* after each poll: util_loop_tick */
	ev_timer               drain_timer;
	struct deadlines       deadlines;	/* of requests Redis has */
	struct store          *store;
	struct plancache      *plans;	/* tenant -> plan from Redis */
	struct nearcache      *near;	/* keys Redis denied, until when */
	struct metrics_worker *m;
	struct policy         *policy;	/* current; this worker holds a ref */
	struct policy_pin     *pin;	/* the current policy's pin */
	struct conn           *conns;	/* all connections of this worker */
	int                    nconns;
	struct conn           *dirty;	/* connections with output to flush */
	struct req            *free_reqs;	/* recycled requests */
	int64_t                nreqs;		/* out of the pool */
	int                    nretrying;	/* requests retrying a release */
	struct req            *all_reqs;	/* every request, for the exit */
	int                    draining;
	int                    started;	/* thread created */
	int64_t                refused_log_us;	/* last conn_refused line */
	uint64_t               refused;	/* refused since that line */
	atomic_int             redis_up;	/* for /healthz, read by main */
};

struct server {
	int                    fds[SERVER_MAX_LISTEN];
	char                  *addrs[SERVER_MAX_LISTEN];
	struct stat            bound[SERVER_MAX_LISTEN];	/* unix: the file bound */
	int                    nfds;
	struct worker         *workers;
	int                    nworkers;
	struct policy         *policy;	/* the newest policy, under
						 * policy_lock: a worker takes
						 * its ref in the same hold */
	pthread_mutex_t        policy_lock;
	atomic_int             nconns;	/* all workers */
	atomic_int             max_conns;	/* set again at reload */
	const char            *redis_url;	/* override of policy redis.url */
	/* Shadow denials logged, one set for all workers (HAProxy spreads
	 * a key's requests over them); locked only on a would-be denial. */
	pthread_mutex_t        shadow_lock;
	struct nearcache      *shadow_seen;
	/* The local tier (store: local rules, the fail: local fallback and
	 * their concurrency leases), one table for all workers; it locks
	 * itself (local.h). */
	struct local          *local;
};

/* Opens every address of <listen> (comma-separated; "host:port",
 * "[v6]:port" or "unix:/path"), creates <nworkers> workers. Returns NULL
 * with <*err> (malloc'ed) on failure. Takes a reference on <p>. */
struct server *server_new(struct policy *p, const char *listen, int nworkers,
                          const char *redis_url, char **err);
/* Starts the worker threads. */
int server_start(struct server *s);
/* Publishes <p> (the server takes a reference) to every worker, with
 * its max_conns (for the next accepts; connections over a lowered cap stay
 * open) and idle_timeout (new and open connections). */
void server_reload(struct server *s, struct policy *p);
/* Stops accepting, answers what is in flight, closes connections with a
 * normal AGENT-DISCONNECT, joins the workers (bounded by a drain timeout),
 * and frees everything. */
void server_stop(struct server *s);

/* 1 when every worker has a working Redis link (for /healthz). */
int server_healthy(struct server *s);

/* Worker-side helpers for conn.c and req.c. */
void worker_mark_dirty(struct worker *w, struct conn *c);
struct policy *worker_policy(struct worker *w);
/* The agent's local tier, shared by its workers. */
struct local *worker_local(struct worker *w);
/* Pins the current policy for one request; unpin when it ends. */
struct policy_pin *worker_pin(struct worker *w);
void worker_unpin(struct policy_pin *pin);

#endif
