/*
 * The Redis store of one worker: a hiredis async context on the worker's
 * libev loop, the rate-limit script (SCRIPT LOAD once, EVALSHA after, EVAL
 * on NOSCRIPT), request batching, reconnect with capped exponential backoff
 * and jitter, and a circuit breaker.
 *
 * Requests are batched: store_submit() only queues; the worker calls
 * store_flush() once per loop iteration (from an ev_prepare watcher), which
 * sends everything queued as one EVALSHA per STORE_BATCH_MAX requests. So a
 * batch is whatever is ready; nothing ever waits for a batch to fill.
 *
 * A store never waits for Redis on behalf of a request: it answers through
 * the request's callback, once, with STORE_OK or an error. Deadlines are
 * the caller's (see req.c): a caller that has given up on a request bumps
 * its <gen>, and a late reply that finds a different <gen> is dropped.
 * Not thread-safe: one store per worker loop.
 */
#ifndef STORE_H
#define STORE_H

#include <stdint.h>

#include "limiter.h"
#include "policy.h"

struct ev_loop;
struct store;
struct metrics_worker;

#define STORE_BATCH_MAX 128	/* requests per script call */
#define STORE_RULE_SCAN 16	/* rule tuples searched for a repeat */

enum store_err {
	STORE_OK = 0,
	STORE_EDOWN,		/* not connected, or the breaker is open */
	STORE_EIO,		/* connection lost with the request in flight */
	STORE_EREPLY,		/* Redis answered an error or a bad reply */
};

struct store_req;
typedef void store_cb(struct store_req *sr, int err);

/* Embedded in the caller's request. <checks> and <results> belong to the
 * caller and must stay valid until <cb> runs or <gen> changes. */
struct store_req {
	const struct check *checks;
	int                *index;	/* which checks go to Redis */
	int                 n;		/* how many of them */
	struct lim_result  *results;	/* filled at index[i], on STORE_OK */
	store_cb           *cb;
	uint32_t            gen;	/* bumped by the caller to cancel */
	struct store_req   *next, *prev;	/* queue links (reqq.c) */
	uint32_t            sent_gen;	/* gen when queued (reqq.c) */
	int                 queued;	/* linked in a queue (reqq.c) */
};

struct store_cfg {
	const char *url;	/* redis://[user[:pass]@]host[:port][/db], unix:/path,
				 * redis+sentinel://..., redis+cluster://... */
	const char *username;	/* overrides the URL's; may be NULL */
	const char *password;
	int64_t     connect_timeout_us;
};

/* Creates the store and starts connecting. Returns NULL with <*err> (a
 * static text) if the URL is bad. */
struct store *store_new(struct ev_loop *loop, const struct store_cfg *cfg,
                        struct metrics_worker *m, const char **err);
void store_free(struct store *st);

/* Queues <sr>. If the store cannot take it now (down, breaker open) the
 * callback is NOT called and STORE_EDOWN is returned: the caller decides
 * at once. Returns STORE_OK when queued. A call of releases alone
 * (reqq_releases_only) is taken even while the breaker is open. */
int store_submit(struct store *st, struct store_req *sr);

/* Sends what is queued. Called once per loop iteration. NULL is a no-op
 * (so a worker may flush its connections after store_free() once it has
 * cleared its pointer). */
void store_flush(struct store *st);

/* HGET <hash> <field>, in the background. <cb> gets the value (NULL when
 * the field does not exist) and err 0, or err -1 when Redis failed; it is
 * called exactly once unless this returns -1 (store down: no call). */
typedef void store_value_cb(void *arg, const char *val, size_t len, int err);
int store_hget(struct store *st, const char *hash, const char *field,
               size_t fieldlen, store_value_cb *cb, void *arg);

/* The script's rule tuples (limiter.h): returns the 1-based index of
 * <algo, p> in <t> (<*n> in use), appending it if it is not among the last
 * STORE_RULE_SCAN (so a call with many rules may repeat one). <t> must
 * have room for one more. Shared by store.c and cluster.c. */
int store_script_rule(int64_t (*t)[LIM_SCRIPT_RULE], int *n, int algo,
                      const int64_t p[3]);

/* Tells the store a request's deadline passed before its reply: feeds the
 * breaker, and drops a link that has stopped answering. Call it from a
 * timer, never from inside a store callback. */
void store_note_timeout(struct store *st);

/* Gives up on <sr> (its deadline passed): its callback will not run, and
 * it leaves the queue if it was still waiting there (for a connect that
 * takes longer than the deadline), so that its memory may be reused at
 * once. */
void store_cancel(struct store *st, struct store_req *sr);

/* 1 when connected and the breaker is closed (cluster: the slot map is
 * known and the breaker is closed). 0 for NULL. */
int store_up(const struct store *st);

/* Parses a redis URL into host/port/db or a unix path. Exposed for tests.
 * Returns 0 or -1. <host> and <path> get at most 255 bytes. */
struct store_addr {
	char host[256];
	int  port;
	char path[256];		/* unix socket when non-empty */
	int  db;
	char user[128];
	char pass[256];
};
int store_parse_url(const char *url, struct store_addr *a);

/* ---- topologies (store_url.c) --------------------------------------------
 *
 *   redis+sentinel://[user[:pass]@]host[:port][,host[:port]...]/master[?db=N]
 *   redis+cluster://[user[:pass]@]host[:port][,host[:port]...][/]
 *
 * Sentinel ports default to 26379, cluster ports to 6379; IPv6 hosts go in
 * brackets. The userinfo (or the policy's redis.username/password, which
 * win) authenticates to the data nodes, never to the sentinels. */
#define STORE_MAX_SEEDS 16

enum store_topo_kind {
	STORE_TOPO_SINGLE = 0,
	STORE_TOPO_SENTINEL,
	STORE_TOPO_CLUSTER,
};

struct store_seed {
	char host[256];
	int  port;
};

struct store_topo {
	enum store_topo_kind kind;
	int                  nseeds;
	struct store_seed    seeds[STORE_MAX_SEEDS];
	char                 master[128];	/* sentinel: the master's name */
	int                  db;		/* sentinel only; cluster is db 0 */
	char                 user[128];
	char                 pass[256];
};

/* Parses a redis+sentinel:// or redis+cluster:// URL. Returns 0 or -1. */
int store_parse_topo_url(const char *url, struct store_topo *t);

/* Resolves the host names of <url> now (blocking): for the start, so that
 * the workers' first connects find them (resolve.h). */
void store_resolve_url(const char *url);

#endif
