/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Listeners and workers.
 *
 * Each worker thread runs its own libev loop with its own Redis link
 * (store) and metrics block: nothing on the request path is shared
 * between threads but the agent's local tier, which locks itself
 * (local.h). The listening sockets are
 * watched by every worker; accept4() is non-blocking and the loser of a
 * race simply gets EAGAIN. The only cross-thread state is the connection
 * count (an atomic, for max_conns) and the newest policy pointer, which the
 * main thread publishes before waking the workers with ev_async.
 *
 * A worker owns its connections' registry and counts (the agent's, for
 * max_conns, and its own): conn.c reaches it only through struct
 * conn_cbs. struct worker and struct server are private to this file;
 * the request path gets what it works with as a struct req_env.
 *
 * Drain: the main thread sets <draining> and wakes every worker, which
 * stops accepting, lets each connection answer what is in flight, sends a
 * normal AGENT-DISCONNECT and closes; the loop ends when the worker has no
 * connection left, or at the drain deadline.
 *
 * A unix listener never takes its path over from a live instance (one
 * that answers a connect): only a stale socket file is replaced, and at
 * stop the file is removed only if it is still the one this process bound.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <ev.h>

#include "conn.h"
#include "local.h"
#include "log.h"
#include "metrics.h"
#include "nearcache.h"
#include "ovcache.h"
#include "plancache.h"
#include "policy.h"
#include "ratelog.h"
#include "req.h"
#include "reqpool.h"
#include "server.h"
#include "store.h"
#include "util.h"

#define SERVER_MAX_LISTEN     8
#define SERVER_BACKLOG        1024
#define SERVER_DRAIN_S        5.0
#define SERVER_DRAIN_HOLD_S   4.0 /* held ACKs (delay mode) go by then */
#define SERVER_ACCEPT_RETRY_S 0.1 /* after accept4() ran out of fds */

/* One worker thread: its loop, its listeners' watchers, its connections
 * and what its requests work with (struct req_env). */
struct worker {
	int                    id;
	struct server         *srv;
	struct ev_loop        *loop;
	pthread_t              thread;
	ev_io                  accept_io[SERVER_MAX_LISTEN];
	ev_timer               accept_retry;  /* resumes accepting (EMFILE) */
	int64_t                paused_log_us; /* last accept_paused line */
	uint64_t               pauses;        /* since that line */
	ev_async               wake;          /* reload or drain requested */
	ev_prepare             flush;         /* once per loop iteration */
	ev_check               tick; /* after each poll: util_loop_tick */
	ev_timer               drain_timer;
	ev_timer               near_count; /* spoa_rl_local_keys, 1/s */
	struct req_env         env;    /* store, tables, pin, request pool */
	struct metrics_worker *m;      /* env.m */
	struct policy         *policy; /* current: env.pin->p */
	struct conn           *conns;  /* all connections of this worker */
	int                    nconns;
	struct conn           *dirty;  /* connections with output to flush */
	struct conn_budget     budget; /* requests in flight: max_inflight */
	int                    draining;
	int                    started;        /* thread created */
	int64_t                refused_log_us; /* last conn_refused line */
	uint64_t               refused;        /* refused since that line */
	atomic_int             redis_up;       /* for /healthz, read by main */
};

struct server {
	int            fds[SERVER_MAX_LISTEN];
	char          *addrs[SERVER_MAX_LISTEN];
	struct stat    bound[SERVER_MAX_LISTEN]; /* unix: the file bound */
	int            nfds;
	struct worker *workers;
	int            nworkers;
	struct policy *policy; /* the newest policy, under
	                        * policy_lock: a worker takes
	                        * its ref in the same hold */
	pthread_mutex_t   policy_lock;
	atomic_int        nconns;    /* all workers */
	atomic_int        max_conns; /* set again at reload */
	const char       *redis_url; /* override of policy redis.url */
	struct req_shared shared;    /* shadow set, all workers */
	struct local     *local;     /* the local tier, all workers */
};

static atomic_int server_draining;

/* ---- listening sockets -------------------------------------------------- */

static int
path_error(const char *path, int e, char **err)
{
	asprintf(err, "unix:%s: %s", path, strerror(e));
	return -1;
}

/* Makes <sun>'s path free to bind. Nothing there, or a stale socket (a
 * connect() is refused: its agent is gone), which is removed. A socket
 * something answers on (another instance, live) or a file that is not a
 * socket is an error: unlinking it would cut that one off silently. */
static int
unix_path_free(const struct sockaddr_un *sun, char **err)
{
	const char *path = sun->sun_path;
	struct stat st;
	int         fd, rc, e;

	if (lstat(path, &st) == -1)
		return errno == ENOENT ? 0 : path_error(path, errno, err);
	if (!S_ISSOCK(st.st_mode)) {
		asprintf(err, "unix:%s: exists and is not a socket", path);
		return -1;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1)
		return path_error(path, errno, err);
	rc = connect(fd, (const struct sockaddr *)sun, sizeof(*sun));
	e = errno;
	close(fd);
	if (rc == 0 || e == EAGAIN || e == EINPROGRESS) {
		asprintf(err,
		         "unix:%s: in use: something answers on it "
		         "(another instance?); not taking it over",
		         path);
		return -1;
	}
	if (e != ECONNREFUSED && e != ENOENT)
		return path_error(path, e, err);
	if (unlink(path) == -1 && errno != ENOENT)
		return path_error(path, errno, err);
	log_info("stale_socket_removed", "path=%s", path);
	return 0;
}

/* Binds and listens on unix:<path>; <*st> gets the socket file's device
 * and inode, so that stopping removes it only if it is still ours. */
static int
listen_unix(const char *path, struct stat *st, char **err)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int                fd = -1;

	if (strlen(path) >= sizeof(sun.sun_path)) {
		asprintf(err, "unix:%s: path too long", path);
		return -1;
	}
	strcpy(sun.sun_path, path);
	if (unix_path_free(&sun, err) == -1)
		return -1;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1)
		goto fail;
	/* HAProxy runs as its own user (Debian drops supplementary groups),
	 * so the socket must be reachable by others; it grants nothing but
	 * rate-limit answers. Restrict access with the directory's mode. */
	if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1 ||
	    lstat(path, st) == -1 || chmod(path, 0666) == -1 ||
	    listen(fd, SERVER_BACKLOG) == -1)
		goto fail;
	return fd;
fail:
	path_error(path, errno, err);
	if (fd != -1)
		close(fd);
	return -1;
}

/* Removes unix:<path> at stop if it is still the socket this process
 * bound (<st>): another instance may have replaced it since. */
static void
unlink_if_ours(const char *path, const struct stat *st)
{
	struct stat now;

	if (lstat(path, &now) == -1)
		return;
	if (now.st_dev == st->st_dev && now.st_ino == st->st_ino)
		unlink(path);
	else
		log_warn("socket_not_removed",
		         "path=%s reason=\"not the one "
		         "this process bound\"",
		         path);
}

/* Splits "host:port" or "[v6]:port" into <host> and <port>. */
static int
split_hostport(const char *addr, char *host, size_t size, const char **port)
{
	const char *colon;
	size_t      n;

	if (addr[0] == '[') {
		const char *rb = strchr(addr, ']');

		if (rb == NULL || rb[1] != ':')
			return -1;
		n = (size_t)(rb - addr - 1);
		addr++;
		colon = rb + 1;
	} else {
		colon = strrchr(addr, ':');
		if (colon == NULL)
			return -1;
		n = (size_t)(colon - addr);
	}
	if (n >= size)
		return -1;
	memcpy(host, addr, n);
	host[n] = '\0';
	*port = colon + 1;
	return 0;
}

static int
listen_tcp(const char *addr, char **err)
{
	struct addrinfo  hints = { .ai_socktype = SOCK_STREAM,
		                   .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	char             host[256];
	const char      *port;
	int              fd = -1, one = 1, rc;

	if (split_hostport(addr, host, sizeof(host), &port) == -1) {
		asprintf(err, "%s: want host:port, [v6]:port or unix:/path",
		         addr);
		return -1;
	}
	rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &ai);
	if (rc != 0) {
		asprintf(err, "%s: %s", addr, gai_strerror(rc));
		return -1;
	}
	fd = socket(ai->ai_family,
	            ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
	            ai->ai_protocol);
	if (fd == -1)
		goto fail;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) == -1 ||
	    listen(fd, SERVER_BACKLOG) == -1)
		goto fail;
	freeaddrinfo(ai);
	return fd;
fail:
	asprintf(err, "%s: %s", addr, strerror(errno));
	if (fd != -1)
		close(fd);
	freeaddrinfo(ai);
	return -1;
}

static int
open_listeners(struct server *s, const char *listen, char **err)
{
	char *copy = xstrdup(listen), *save = NULL, *tok;
	int   rc = 0;

	for (tok = strtok_r(copy, ",", &save); tok != NULL;
	     tok = strtok_r(NULL, ",", &save)) {
		int fd;

		while (*tok == ' ')
			tok++;
		if (s->nfds == SERVER_MAX_LISTEN) {
			asprintf(err, "more than %d listen addresses",
			         SERVER_MAX_LISTEN);
			rc = -1;
			break;
		}
		fd = strncmp(tok, "unix:", 5) == 0
		             ? listen_unix(tok + 5, &s->bound[s->nfds], err)
		             : listen_tcp(tok, err);
		if (fd == -1) {
			rc = -1;
			break;
		}
		s->addrs[s->nfds] = xstrdup(tok);
		s->fds[s->nfds++] = fd;
		log_info("listening", "addr=%s", tok);
	}
	if (rc == 0 && s->nfds == 0) { /* "" or ",": listening nowhere */
		asprintf(err, "no listen address in '%s'", listen);
		rc = -1;
	}
	free(copy);
	return rc;
}

/* ---- connections ------------------------------------------------------ */

/* <c> joins <w>'s registry: its count was taken at accept (s->nconns). */
static void
conn_opened(struct worker *w, struct conn *c)
{
	assert(c->arg == w && c->next == NULL && c->prev == NULL);
	c->next = w->conns;
	if (w->conns != NULL)
		w->conns->prev = c;
	w->conns = c;
	w->nconns++;
	metrics_conn_open(w->m);
}

/* conn_cbs: <c>'s socket is closed. */
static void
conn_closed(void *arg, struct conn *c)
{
	struct worker *w = arg;

	assert(w->nconns > 0 && c->state == CONN_ST_CLOSED);
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		w->conns = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	c->next = c->prev = NULL;
	w->nconns--;
	atomic_fetch_sub(&w->srv->nconns, 1);
	metrics_conn_close(w->m);
}

/* conn_cbs: a NOTIFY on <c>. */
static int
conn_request(void *arg, struct conn *c, const struct spop_frame *f, int *status)
{
	struct worker *w = arg;

	assert(c->arg == w && c->loop == w->loop);
	return req_start(&w->env, c, f, status);
}

/* conn_cbs: <c> has output, written before the loop blocks (flush_cb). */
static void
conn_output(void *arg, struct conn *c)
{
	struct worker *w = arg;

	assert(c->arg == w && c->refs > 0);
	if (c->dirty)
		return;
	c->dirty = 1;
	conn_ref(c);
	c->next_dirty = w->dirty;
	w->dirty = c;
}

static const struct conn_cbs worker_conn_cbs = {
	.on_request = conn_request,
	.on_output = conn_output,
	.on_close = conn_closed,
};

/* ---- accepting ---------------------------------------------------------- */

static void
peer_name(const struct sockaddr_storage *ss, char *buf, size_t size)
{
	char ip[INET6_ADDRSTRLEN] = "unix";
	int  port = 0;

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)ss;
		inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
		port = ntohs(in->sin_port);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)ss;
		inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
		port = ntohs(in6->sin6_port);
	}
	snprintf(buf, size, "%s:%d", ip, port);
}

/* A connection past max_conns was closed: one line per worker per
 * RATELOG_INTERVAL_US, counting the refusals since the last, so that
 * HAProxy retrying against a full agent cannot flood the log. */
static void
log_refused(struct worker *w)
{
	int64_t now = util_now_us();

	w->refused++;
	if (w->refused_log_us != 0 &&
	    now - w->refused_log_us < RATELOG_INTERVAL_US)
		return;
	log_warn("conn_refused",
	         "reason=max_conns max=%d worker=%d refused=%llu",
	         atomic_load_explicit(&w->srv->max_conns, memory_order_relaxed),
	         w->id, (unsigned long long)w->refused);
	w->refused_log_us = now;
	w->refused = 0;
}

/* accept4() failed for want of a descriptor or memory (EMFILE, ENFILE,
 * ENOBUFS, ENOMEM, ...): the listener stays readable, so accepting again
 * at once would spin a core and flood the log. The worker stops watching
 * its listeners for SERVER_ACCEPT_RETRY_S and says so at most once per
 * RATELOG_INTERVAL_US. */
static void
accept_pause(struct worker *w, int err)
{
	int64_t now = util_now_us();

	for (int i = 0; i < w->srv->nfds; i++)
		ev_io_stop(w->loop, &w->accept_io[i]);
	/* set again: a fired one-shot timer keeps no delay of its own */
	ev_timer_set(&w->accept_retry, SERVER_ACCEPT_RETRY_S, 0.);
	ev_timer_start(w->loop, &w->accept_retry);
	w->pauses++;
	if (w->paused_log_us != 0 &&
	    now - w->paused_log_us < RATELOG_INTERVAL_US)
		return;
	log_warn("accept_paused", "error=\"%s\" worker=%d conns=%d pauses=%llu",
	         strerror(err), w->id, w->nconns,
	         (unsigned long long)w->pauses);
	w->paused_log_us = now;
	w->pauses = 0;
}

static void
accept_retry_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = container_of(t, struct worker, accept_retry);

	if (w->draining)
		return;
	for (int i = 0; i < w->srv->nfds; i++)
		ev_io_start(loop, &w->accept_io[i]);
}

static void
accept_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct worker          *w = ev_userdata(loop);
	struct server          *s = w->srv;
	struct sockaddr_storage ss;
	socklen_t               len;
	char                    peer[64];
	struct conn_opts        o = { peer, w->policy->idle_timeout_us, w->m,
		                      &w->budget };
	int                     fd, one = 1;

	for (int i = 0; i < 64; i++) { /* bounded: let other events run */
		len = sizeof(ss);
		fd = accept4(io->fd, (struct sockaddr *)&ss, &len,
		             SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd == -1) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK &&
			    !atomic_load(&server_draining)) /* shut: EINVAL */
				accept_pause(w, errno);
			return;
		}
		if (atomic_fetch_add(&s->nconns, 1) >=
		    atomic_load_explicit(&s->max_conns, memory_order_relaxed)) {
			atomic_fetch_sub(&s->nconns, 1);
			log_refused(w);
			close(fd);
			continue;
		}
		if (ss.ss_family != AF_UNIX)
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one,
			           sizeof(one));
		peer_name(&ss, peer, sizeof(peer));
		conn_opened(w, conn_new(loop, fd, &worker_conn_cbs, w, &o));
	}
}

/* ---- worker loop -------------------------------------------------------- */

/* Runs before the loop blocks: first the Redis batch, so Redis works
 * while we write, then every connection with output. */
static void
flush_cb(struct ev_loop *loop, ev_prepare *p, int revents)
{
	struct worker *w = container_of(p, struct worker, flush);
	struct conn   *c;

	if (w->env.store == NULL) /* worker_deinit: only output is left */
		goto conns;
	store_flush(w->env.store);
	atomic_store_explicit(&w->redis_up, store_up(w->env.store),
	                      memory_order_relaxed);
	/* the agent's one local tier, counted once: in worker 0's block,
	 * by whichever worker ran last */
	metrics_local_keys(w->srv->workers[0].m,
	                   (int64_t)local_count(w->env.local));
conns:
	while ((c = w->dirty) != NULL) {
		assert(c->dirty);
		w->dirty = c->next_dirty;
		c->dirty = 0;
		conn_flush(c);
		conn_unref(c);
	}
	if (w->draining && w->nconns == 0)
		ev_break(loop, EVBREAK_ALL);
}

static void
drain_timeout_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = container_of(t, struct worker, drain_timer);

	log_warn("drain_timeout", "worker=%d conns=%d", w->id, w->nconns);
	ev_break(loop, EVBREAK_ALL);
}

static void
worker_start_drain(struct worker *w)
{
	struct conn *c, *next;

	w->draining = 1;
	ev_timer_stop(w->loop, &w->accept_retry);
	for (int i = 0; i < w->srv->nfds; i++)
		ev_io_stop(w->loop, &w->accept_io[i]);
	for (c = w->conns; c != NULL; c = next) {
		next = c->next;
		conn_drain(c);
	}
	req_drain(&w->env,
	          util_loop_us() + (int64_t)(SERVER_DRAIN_HOLD_S * 1e6));
	ev_timer_init(&w->drain_timer, drain_timeout_cb, SERVER_DRAIN_S, 0.);
	ev_timer_start(w->loop, &w->drain_timer);
}

/* A reference of the caller's own to the newest policy. Taken under the
 * lock a reload swaps it under: between reading the pointer and taking
 * the reference, two quick reloads could free it (review, under ASan). */
static struct policy *
newest_policy(struct server *s)
{
	struct policy *p;

	pthread_mutex_lock(&s->policy_lock);
	p = policy_ref(s->policy);
	pthread_mutex_unlock(&s->policy_lock);
	return p;
}

/* Swaps in the newest policy; requests in flight keep their own ref.
 * A new idle_timeout applies to the open connections too, and a new
 * max_inflight at once. */
static void
wake_cb(struct ev_loop *loop, ev_async *a, int revents)
{
	struct worker *w = container_of(a, struct worker, wake);
	struct policy *p = newest_policy(w->srv);

	if (p != w->policy) {
		if (p->idle_timeout_us != w->policy->idle_timeout_us)
			for (struct conn *c = w->conns; c != NULL; c = c->next)
				conn_set_idle(c, p->idle_timeout_us);
		if (p->max_inflight != w->budget.cap)
			conn_budget_set(&w->budget, p->max_inflight);
		policy_pin_retire(w->env.pin);
		w->env.pin = policy_pin_new(p);
		w->policy = p;
	}
	policy_unref(p); /* the pin holds its own */
	if (atomic_load(&server_draining) && !w->draining)
		worker_start_drain(w);
}

/* The near-cache's live keys for spoa_rl_local_keys: a scan of its
 * table (NEARCACHE_SETS x NEARCACHE_WAYS), so once a second, not per
 * loop iteration; a timer, so that an idle worker's count drops too. */
static void
near_count_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = container_of(t, struct worker, near_count);

	metrics_near_keys(w->m, (int64_t)nearcache_count(w->env.near,
	                                                 util_now_us()));
}

static void
tick_cb(struct ev_loop *loop, ev_check *c, int revents)
{
	util_loop_tick();
}

static void *
worker_main(void *arg)
{
	struct worker *w = arg;

	util_loop_tick();
	ev_run(w->loop, 0);
	util_loop_untick();
	return NULL;
}

static int
worker_init(struct worker *w, struct server *s, int id, char **err)
{
	struct store_cfg sc = { 0 };
	const char      *serr = NULL;

	w->id = id;
	w->srv = s;
	w->env.pin = policy_pin_new(s->policy); /* before the workers run */
	w->policy = w->env.pin->p;
	w->loop = ev_loop_new(EVFLAG_AUTO);
	if (w->loop == NULL) {
		asprintf(err, "cannot create an event loop");
		return -1;
	}
	ev_set_userdata(w->loop, w);
	conn_budget_init(&w->budget, w->policy->max_inflight);
	w->m = metrics_worker_new();
	w->env.local = s->local; /* the agent's, shared */
	sc.url = s->redis_url ? s->redis_url : w->policy->redis_url;
	sc.username = w->policy->redis_username;
	sc.password = w->policy->redis_password;
	sc.batch_wait_us = w->policy->redis_batch_wait_us;
	w->env.store = store_new(w->loop, &sc, w->m, &serr);
	if (w->env.store == NULL) {
		asprintf(err, "redis.url %s: %s", sc.url, serr);
		return -1;
	}
	w->env.plans = plancache_new(w->env.store);
	w->env.near = nearcache_new();
	if (w->policy->overrides) { /* else none: no table, no poll */
		w->env.overrides = ovcache_new(w->loop, w->env.store);
		ovcache_watch_resets(w->env.overrides, w->env.near);
	}
	for (int i = 0; i < s->nfds; i++) {
		ev_io_init(&w->accept_io[i], accept_cb, s->fds[i], EV_READ);
		ev_io_start(w->loop, &w->accept_io[i]);
	}
	ev_timer_init(&w->accept_retry, accept_retry_cb, SERVER_ACCEPT_RETRY_S,
	              0.);
	ev_async_init(&w->wake, wake_cb);
	ev_async_start(w->loop, &w->wake);
	ev_prepare_init(&w->flush, flush_cb);
	ev_prepare_start(w->loop, &w->flush);
	/* checks run after the poll, before the I/O callbacks of the same or
	 * lower priority: the clock is read before any request is handled */
	ev_timer_init(&w->near_count, near_count_cb, 1., 1.);
	ev_timer_start(w->loop, &w->near_count);
	ev_check_init(&w->tick, tick_cb);
	ev_set_priority(&w->tick, EV_MAXPRI);
	ev_check_start(w->loop, &w->tick);
	w->env.id = id;
	w->env.loop = w->loop;
	w->env.m = w->m;
	w->env.shared = &s->shared;
	w->env.pool = req_pool_new(w->loop, w->m);
	return 0;
}

static void
worker_deinit(struct worker *w)
{
	struct conn *c;

	if (w->loop == NULL)
		return;
	while ((c = w->conns) != NULL) /* past the drain deadline */
		conn_abort(c);
	assert(w->nconns == 0);
	store_free(w->env.store); /* pending requests get their fail mode */
	w->env.store = NULL;
	if (w->env.pool != NULL) /* no deadline passes any more */
		reqpool_stop(w->env.pool);
	flush_cb(w->loop, &w->flush, 0);
	req_pool_free(&w->env);
	plancache_free(w->env.plans);
	ovcache_free(w->env.overrides);
	nearcache_free(w->env.near);
	policy_pin_retire(w->env.pin);
	w->env.pin = NULL;
	w->policy = NULL;
	ev_loop_destroy(w->loop);
	w->loop = NULL;
}

/* ---- server ------------------------------------------------------------- */

static int
conns_cap(const struct policy *p)
{
	return p->max_conns > 0 ? p->max_conns : 10000;
}

struct server *
server_new(struct policy *p, const char *listen, int nworkers,
           const char *redis_url, char **err)
{
	struct server *s = xcalloc(1, sizeof(*s));

	s->policy = policy_ref(p);
	pthread_mutex_init(&s->policy_lock, NULL);
	atomic_init(&s->max_conns, conns_cap(p));
	s->redis_url = redis_url;
	pthread_mutex_init(&s->shared.shadow_lock, NULL);
	s->shared.shadow_seen = nearcache_new();
	nworkers = nworkers > 0 ? nworkers : 1;
	s->local = local_new(p->local_max_keys);
	if (open_listeners(s, listen, err) == -1)
		goto fail;
	s->nworkers = nworkers;
	s->workers = xcalloc((size_t)s->nworkers, sizeof(*s->workers));
	for (int i = 0; i < s->nworkers; i++)
		if (worker_init(&s->workers[i], s, i, err) == -1)
			goto fail;
	return s;
fail:
	server_stop(s);
	return NULL;
}

int
server_start(struct server *s)
{
	for (int i = 0; i < s->nworkers; i++) {
		int rc = pthread_create(&s->workers[i].thread, NULL,
		                        worker_main, &s->workers[i]);
		if (rc != 0)
			fatal("pthread_create: %s", strerror(rc));
		s->workers[i].started = 1;
	}
	return 0;
}

int
server_healthy(struct server *s)
{
	for (int i = 0; i < s->nworkers; i++)
		if (!atomic_load_explicit(&s->workers[i].redis_up,
		                          memory_order_relaxed))
			return 0;
	return 1;
}

void
server_reload(struct server *s, struct policy *p)
{
	struct policy *old;

	pthread_mutex_lock(&s->policy_lock);
	old = s->policy;
	s->policy = policy_ref(p);
	pthread_mutex_unlock(&s->policy_lock);

	atomic_store(&s->max_conns, conns_cap(p));
	for (int i = 0; i < s->nworkers; i++)
		ev_async_send(s->workers[i].loop, &s->workers[i].wake);
	policy_unref(old);
}

/* Every worker is told to drain before any is joined: they drain side by
 * side, so stopping takes one drain deadline, not one per worker. */
void
server_stop(struct server *s)
{
	atomic_store(&server_draining, 1);
	/* Refuse new connections at once rather than leave them in the
	 * backlog, never answered: HAProxy's health check then fails fast,
	 * and a new SPOE applet it opens fails at connect, before it was
	 * given any NOTIFY, instead of at its hello timeout. */
	for (int i = 0; i < s->nfds; i++)
		shutdown(s->fds[i], SHUT_RD);
	for (int i = 0; i < s->nworkers; i++)
		if (s->workers[i].started)
			ev_async_send(s->workers[i].loop, &s->workers[i].wake);
	for (int i = 0; i < s->nworkers; i++) {
		struct worker *w = &s->workers[i];

		if (w->started)
			pthread_join(w->thread, NULL);
		worker_deinit(w);
	}
	for (int i = 0; i < s->nfds; i++) {
		close(s->fds[i]);
		if (strncmp(s->addrs[i], "unix:", 5) == 0)
			unlink_if_ours(s->addrs[i] + 5, &s->bound[i]);
		free(s->addrs[i]);
	}
	free(s->workers);
	policy_unref(s->policy);
	pthread_mutex_destroy(&s->policy_lock);
	nearcache_free(s->shared.shadow_seen);
	pthread_mutex_destroy(&s->shared.shadow_lock);
	local_free(s->local);
	free(s);
}
