/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store's dispatch (store.h): store_new() reads the URL and picks the
 * backend, a single Redis or Sentinel group (store_single.c) or a Redis
 * Cluster (store_cluster.c); every other call goes through the backend's
 * table of operations (store_ops.h). Nothing here talks to Redis.
 *
 * It also holds the batch wait (store_cfg.batch_wait_us): a flush with
 * fewer than STORE_WAIT_FULL requests queued is put off until the oldest
 * of them has waited that long, so that at a moderate rate one script call
 * carries several loop iterations' requests. Zero (the default) flushes
 * at every loop iteration, as before.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>

#include "resolve.h"
#include "store.h"
#include "store_cluster.h"
#include "store_single.h"
#include "util.h"

struct store {
	const struct store_ops *ops;
	void                   *be;
	/* the batch wait; loop is NULL when there is none */
	struct ev_loop *loop;
	ev_tstamp       wait;    /* s */
	ev_tstamp       first;   /* when the oldest unsent request came */
	int             pending; /* requests submitted since the last flush */
	ev_timer        due;     /* ends the wait when no request comes */
};

struct store *
store_new_with_ops(const struct store_ops *ops, void *backend)
{
	struct store *st = xmalloc(sizeof(*st));

	assert(ops->submit && ops->flush && ops->hget && ops->cancel &&
	       ops->up && ops->note_timeout && ops->free);
	st->ops = ops;
	st->be = backend;
	st->loop = NULL;
	st->pending = 0;
	return st;
}

/* The URL's credentials and db into <a>, the policy's user and password
 * winning. Returns 0, or -1 with <*err> set. */
static int
parse(const struct store_cfg *cfg, struct store_addr *a, struct store_topo *t,
      const char **err)
{
	memset(a, 0, sizeof(*a));
	if (strncmp(cfg->url, "redis+", 6) == 0) {
		if (store_parse_topo_url(cfg->url, t) == -1) {
			*err = "bad redis url (want redis+sentinel://host:port[,host:port...]/master[?db=N] or redis+cluster://host:port[,host:port...])";
			return -1;
		}
		snprintf(a->user, sizeof(a->user), "%s", t->user);
		snprintf(a->pass, sizeof(a->pass), "%s", t->pass);
		a->db = t->db;
	} else if (store_parse_url(cfg->url, a) == -1) {
		*err = "bad redis url (want redis://[user:pass@]host[:port][/db] or unix:/path)";
		return -1;
	}
	if (cfg->username != NULL)
		snprintf(a->user, sizeof(a->user), "%s", cfg->username);
	if (cfg->password != NULL)
		snprintf(a->pass, sizeof(a->pass), "%s", cfg->password);
	return 0;
}

static void flush_now(struct store *st);

/* The wait is over: flush, whatever the clock says (libev fires a timer
 * when it is due on its own clock, which may read a hair before <first> +
 * <wait>; waiting again would cost a whole poll timeout, 1 ms on epoll). */
static void
due_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	flush_now(w->data);
}

void
store_set_batch_wait(struct store *st, struct ev_loop *loop, int64_t wait_us)
{
	assert(st->pending == 0 && wait_us > 0);
	st->loop = loop;
	st->wait = (ev_tstamp)wait_us / 1e6;
	ev_init(&st->due, due_cb);
	st->due.data = st;
}

struct store *
store_new(struct ev_loop *loop, const struct store_cfg *cfg,
          struct metrics_worker *m, const char **err)
{
	struct store_addr a;
	struct store_topo t = { 0 };
	struct store     *st;
	int64_t           timeout_us =
                cfg->connect_timeout_us > 0 ? cfg->connect_timeout_us : 1000000;

	if (parse(cfg, &a, &t, err) == -1)
		return NULL;
	if (strncmp(cfg->url, "redis+cluster://", 16) == 0)
		st = store_new_with_ops(&store_cluster_ops,
		                        store_cluster_new(loop, &t, a.user,
		                                          a.pass, timeout_us, m));
	else
		st = store_new_with_ops(
			&store_single_ops,
			store_single_new(loop, &a,
		                         strncmp(cfg->url, "redis+sentinel://",
		                                 17) == 0
		                                 ? &t
		                                 : NULL,
		                         timeout_us, m));
	if (cfg->batch_wait_us > 0)
		store_set_batch_wait(st, loop, cfg->batch_wait_us);
	return st;
}

void
store_free(struct store *st)
{
	if (st == NULL)
		return;
	if (st->loop != NULL)
		ev_timer_stop(st->loop, &st->due);
	st->ops->free(st->be);
	free(st);
}

int
store_up(const struct store *st)
{
	return st != NULL && st->ops->up(st->be);
}

/* 1 if the flush is put off: a wait is set, fewer than STORE_WAIT_FULL
 * requests are queued and the oldest has waited less than it (the timer
 * then ends the wait if nothing else wakes the loop first). */
static int
wait_more(struct store *st)
{
	ev_tstamp left;

	if (st->loop == NULL || st->pending == 0)
		return 0;
	left = st->first + st->wait - ev_now(st->loop);
	if (st->pending >= STORE_WAIT_FULL || left <= 0)
		return 0;
	if (!ev_is_active(&st->due)) {
		ev_timer_set(&st->due, left, 0.);
		ev_timer_start(st->loop, &st->due);
	}
	return 1;
}

static void
flush_now(struct store *st)
{
	if (st->loop != NULL)
		ev_timer_stop(st->loop, &st->due);
	st->pending = 0;
	st->ops->flush(st->be);
}

void
store_flush(struct store *st)
{
	if (st != NULL && !wait_more(st))
		flush_now(st);
}

int
store_submit(struct store *st, struct store_req *sr)
{
	int rc = st->ops->submit(st->be, sr);

	if (rc == STORE_OK && st->loop != NULL && st->pending++ == 0)
		st->first = ev_now(st->loop);
	return rc;
}

int
store_hget(struct store *st, const char *hash, const char *field,
           size_t fieldlen, store_value_cb *cb, void *arg)
{
	return st->ops->hget(st->be, hash, field, fieldlen, cb, arg);
}

void
store_cancel(struct store *st, struct store_req *sr)
{
	sr->gen++; /* the reply, if it ever comes, is dropped */
	if (st != NULL)
		st->ops->cancel(st->be, sr);
}

void
store_note_timeout(struct store *st)
{
	st->ops->note_timeout(st->be);
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
