/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host names for the Redis links, resolved off the worker loops (see
 * resolve.h for the contract).
 *
 * A fixed table of names under one mutex, and one detached thread, started
 * by the first name that needs a lookup, that takes the names marked
 * queued one at a time and runs getaddrinfo() on them with the lock
 * released. Entries never move; one is reused (the least recently asked
 * for) only when the table is full and it has no lookup queued. Like
 * hiredis 0.14, an IPv4 address is preferred and IPv6 is asked for when
 * the name has none.
 *
 * Not here: connecting and its retries (the callers' backoff), the names'
 * TTLs (getaddrinfo does not give them: answers are re-checked every
 * RESOLVE_REFRESH_S instead).
 */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <hiredis/async.h>

#include "log.h"
#include "resolve.h"
#include "util.h"

#define RESOLVE_HOST_MAX 256

struct name {
	char    host[RESOLVE_HOST_MAX];
	char    addr[RESOLVE_ADDR_MAX]; /* the last answer; "" before one */
	int     queued;                 /* a lookup is queued or running */
	int     failed;                 /* the last lookup failed */
	int64_t done_us; /* when the last lookup ended; 0: never */
	int64_t used_us; /* when last asked for */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  wake = PTHREAD_COND_INITIALIZER;
static pthread_once_t  once = PTHREAD_ONCE_INIT;
static struct name     names[RESOLVE_MAX_NAMES];
static int             nnames;
static resolve_gai_fn *gai = getaddrinfo;

void
resolve_set_gai(resolve_gai_fn *fn)
{
	pthread_mutex_lock(&lock);
	gai = fn != NULL ? fn : getaddrinfo;
	pthread_mutex_unlock(&lock);
}

static int
is_numeric(const char *host)
{
	unsigned char sa[sizeof(struct in6_addr)];

	return inet_pton(AF_INET, host, sa) == 1 ||
	       inet_pton(AF_INET6, host, sa) == 1;
}

/* Resolves <host> into <out> with <fn>; 0, or -1 with <*err>. */
static int
lookup(resolve_gai_fn *fn, const char *host, char *out, const char **err)
{
	static const int families[] = { AF_INET, AF_INET6 };
	struct addrinfo  hints, *res = NULL;
	int              rc = EAI_NONAME;

	for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
		memset(&hints, 0, sizeof(hints));
		hints.ai_family = families[i];
		hints.ai_socktype = SOCK_STREAM;
		rc = fn(host, NULL, &hints, &res);
		if (rc == 0 || (rc != EAI_NONAME && rc != EAI_ADDRFAMILY &&
		                rc != EAI_NODATA))
			break;
	}
	if (rc != 0) {
		*err = gai_strerror(rc);
		return -1;
	}
	if (res->ai_family == AF_INET)
		inet_ntop(AF_INET,
		          &((struct sockaddr_in *)res->ai_addr)->sin_addr, out,
		          RESOLVE_ADDR_MAX);
	else
		inet_ntop(AF_INET6,
		          &((struct sockaddr_in6 *)res->ai_addr)->sin6_addr,
		          out, RESOLVE_ADDR_MAX);
	freeaddrinfo(res);
	return 0;
}

/* Records the outcome of a lookup of <e>; the lock is held. */
static void
record(struct name *e, int rc, const char *addr, const char *err)
{
	if (rc == 0) {
		if (strcmp(e->addr, addr) != 0)
			log_info("resolved", "host=%s addr=%s", e->host, addr);
		snprintf(e->addr, sizeof(e->addr), "%s", addr);
	} else if (!e->failed) {
		log_warn("resolve_failed", "host=%s error=\"%s\" serving=%s",
		         e->host, err, e->addr[0] ? e->addr : "none");
	}
	e->failed = rc != 0;
	e->done_us = util_monotonic_us();
	if (e->done_us == 0)
		e->done_us = 1;
}

static void *
resolver_main(void *arg)
{
	pthread_mutex_lock(&lock);
	for (;;) {
		struct name    *e = NULL;
		char            host[RESOLVE_HOST_MAX], addr[RESOLVE_ADDR_MAX];
		const char     *err = NULL;
		resolve_gai_fn *fn;
		int             rc;

		for (int i = 0; i < nnames && e == NULL; i++)
			if (names[i].queued)
				e = &names[i];
		if (e == NULL) {
			pthread_cond_wait(&wake, &lock);
			continue;
		}
		memcpy(host, e->host, sizeof(host));
		fn = gai;
		pthread_mutex_unlock(&lock);
		rc = lookup(fn, host, addr, &err);
		pthread_mutex_lock(&lock);
		record(e, rc, addr, err); /* queued: never reused meanwhile */
		e->queued = 0;
	}
	return arg;
}

static void
start_thread(void)
{
	pthread_t      t;
	pthread_attr_t a;

	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &a, resolver_main, NULL) != 0)
		fatal("resolve: cannot start the resolver thread");
	pthread_attr_destroy(&a);
}

/* The entry of <host>, made if new (reusing the least recently asked for
 * with no lookup queued when the table is full); NULL if none is free.
 * The lock is held. */
static struct name *
entry(const char *host)
{
	struct name *e = NULL;

	for (int i = 0; i < nnames; i++)
		if (strcmp(names[i].host, host) == 0)
			return &names[i];
	if (nnames < RESOLVE_MAX_NAMES) {
		e = &names[nnames++];
	} else {
		for (int i = 0; i < nnames; i++)
			if (!names[i].queued &&
			    (e == NULL || names[i].used_us < e->used_us))
				e = &names[i];
		if (e == NULL)
			return NULL;
	}
	memset(e, 0, sizeof(*e));
	snprintf(e->host, sizeof(e->host), "%s", host);
	return e;
}

/* Queues a lookup of <e> if it is due; the lock is held. */
static void
maybe_queue(struct name *e, int64_t now)
{
	double age = (double)(now - e->done_us) / 1e6;

	if (e->queued ||
	    (e->done_us != 0 &&
	     age < (e->failed ? RESOLVE_RETRY_S : RESOLVE_REFRESH_S)))
		return;
	e->queued = 1;
	pthread_once(&once, start_thread);
	pthread_cond_signal(&wake);
}

const char *
resolve_addr(const char *host, char *buf, const char **why)
{
	int64_t      now = util_monotonic_us();
	const char  *out = NULL;
	struct name *e;

	if (is_numeric(host))
		return host;
	if (strlen(host) >= RESOLVE_HOST_MAX) {
		*why = "host name too long";
		return NULL;
	}
	pthread_mutex_lock(&lock);
	e = entry(host);
	if (e == NULL) {
		*why = "every resolver slot busy";
	} else {
		e->used_us = now;
		maybe_queue(e, now);
		if (e->addr[0] != '\0') {
			memcpy(buf, e->addr, RESOLVE_ADDR_MAX);
			out = buf;
		} else {
			*why = e->failed
			               ? "host name lookup failed (see resolve_failed)"
			               : "resolving the host name";
		}
	}
	pthread_mutex_unlock(&lock);
	return out;
}

void
resolve_warm(const char *host)
{
	char            addr[RESOLVE_ADDR_MAX];
	const char     *err = NULL;
	resolve_gai_fn *fn;
	struct name    *e;
	int             rc;

	if (is_numeric(host) || strlen(host) >= RESOLVE_HOST_MAX)
		return;
	pthread_mutex_lock(&lock);
	fn = gai;
	pthread_mutex_unlock(&lock);
	rc = lookup(fn, host, addr, &err);
	pthread_mutex_lock(&lock);
	e = entry(host);
	if (e != NULL && !e->queued) {
		record(e, rc, addr, err);
		e->used_us = util_monotonic_us();
	}
	pthread_mutex_unlock(&lock);
}

redisAsyncContext *
resolve_connect(const char *host, int port, const char **why)
{
	char        buf[RESOLVE_ADDR_MAX];
	const char *addr = resolve_addr(host, buf, why);

	if (addr == NULL)
		return NULL;
	*why = "out of memory";
	return redisAsyncConnect(addr, port);
}
