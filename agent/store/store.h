/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Redis store of one worker, as the request path sees it: queue a
 * request's checks for the script (store_submit), send what is queued once
 * per loop iteration (store_flush), HGET a plan, give up on a request.
 *
 * A store is a table of operations (store_ops.h) and a backend behind it,
 * picked by store_new() from the URL: a single Redis or a Sentinel group
 * (store_single.c), or a Redis Cluster (store_cluster.c). Callers never
 * know which; store_new_with_ops() plugs any other (a fake, for tests).
 *
 * Requests are batched: store_submit() only queues; the worker calls
 * store_flush() once per loop iteration (from an ev_prepare watcher), which
 * sends everything queued as one script call per STORE_BATCH_MAX requests
 * (per slot on a Cluster). So a batch is whatever is ready; nothing waits
 * for a batch to fill, unless the policy sets redis.batch_wait: then a
 * request waits at most that long for others to share its call.
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

#include "store_ops.h"

struct ev_loop;
struct store;
struct metrics_worker;

struct store_cfg {
	const char *url; /* redis://[user[:pass]@]host[:port][/db], unix:/path,
	                  * redis+sentinel://..., redis+cluster://... */
	const char *username; /* overrides the URL's; may be NULL */
	const char *password;
	int64_t     connect_timeout_us;
	int64_t     batch_wait_us; /* 0: flush at every loop iteration */
};

/* With a batch wait, a flush waits for no more than this many requests. */
#define STORE_WAIT_FULL 64

/* Creates the store and starts connecting. Returns NULL with <*err> (a
 * static text) if the URL is bad. */
struct store *store_new(struct ev_loop *loop, const struct store_cfg *cfg,
                        struct metrics_worker *m, const char **err);

/* A store over <backend>, served by <ops> (which must outlive it, and have
 * every operation set): for tests of the request path against a fake
 * Redis, and for store_new(). store_free() calls ops->free(backend). */
struct store *store_new_with_ops(const struct store_ops *ops, void *backend);
void          store_free(struct store *st);

/* From now on a flush with fewer than STORE_WAIT_FULL requests waits until
 * the oldest of them has waited <wait_us> (> 0), on a timer of <loop>.
 * store_new() calls it for store_cfg.batch_wait_us; before any submit. */
void store_set_batch_wait(struct store *st, struct ev_loop *loop,
                          int64_t wait_us);

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
int store_hget(struct store *st, const char *hash, const char *field,
               size_t fieldlen, store_value_cb *cb, void *arg);

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
int store_parse_url(const char *url, struct store_addr *a);

/* ---- topologies (store_url.c) --------------------------------------------
 *
 *   redis+sentinel://[user[:pass]@]host[:port][,host[:port]...]/master[?db=N]
 *   redis+cluster://[user[:pass]@]host[:port][,host[:port]...][/]
 *
 * Sentinel ports default to 26379, cluster ports to 6379; IPv6 hosts go in
 * brackets. The userinfo (or the policy's redis.username/password, which
 * win) authenticates to the data nodes, never to the sentinels. */
/* Parses a redis+sentinel:// or redis+cluster:// URL. Returns 0 or -1. */
int store_parse_topo_url(const char *url, struct store_topo *t);

/* Resolves the host names of <url> now (blocking): for the start, so that
 * the workers' first connects find them (resolve.h). */
void store_resolve_url(const char *url);

#endif
