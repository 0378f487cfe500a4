/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host names for the Redis links, resolved off the worker loops.
 *
 * hiredis 0.14 resolves a name with a blocking getaddrinfo() inside
 * redisAsyncConnect(): a slow or dead DNS server would freeze the worker
 * that reconnects, and every SPOP connection on it, for seconds per try.
 * Here one thread per process resolves names and keeps the answers; the
 * workers only read the cache and connect to the address it holds.
 *
 *   - A numeric host (127.0.0.1, ::1) is returned as it is, at once.
 *   - A known name gives its last address at once; past RESOLVE_REFRESH_S
 *     it is resolved again in the background (a pod's new IP is picked up
 *     without a restart), the old address serving meanwhile.
 *   - A name not known yet, or whose lookup failed, gives NULL and the
 *     reason; the lookup runs in the background and the caller retries
 *     on its own backoff, as after any failed connect.
 *
 * resolve_warm() resolves names at once, blocking: for the start and the
 * reloads, before the workers need them. Not here: connecting, retries.
 */
#ifndef RESOLVE_H
#define RESOLVE_H

#include <netdb.h>
#include <stddef.h>

#define RESOLVE_REFRESH_S 10.0 /* an answer is re-checked this often */
#define RESOLVE_RETRY_S   1.0  /* a failed lookup is retried this often */
#define RESOLVE_MAX_NAMES 128  /* names held; the oldest idle one goes */
#define RESOLVE_ADDR_MAX  64   /* fits INET6_ADDRSTRLEN */

struct redisAsyncContext;

/* The address to connect to for <host>: <host> itself when it is numeric,
 * else the cached address copied into <buf> (RESOLVE_ADDR_MAX bytes).
 * NULL when there is none yet: <*why> then says why ("resolving", or the
 * lookup's error). Never blocks on DNS. Thread-safe. */
const char *resolve_addr(const char *host, char *buf, const char **why);

/* Resolves <host> now, in the caller's thread, and caches the answer. */
void resolve_warm(const char *host);

/* redisAsyncConnect() to resolve_addr(host): NULL with <*why> set when
 * there is no address yet; else hiredis' context (which may carry an
 * error of its own). */
struct redisAsyncContext *resolve_connect(const char *host, int port,
                                          const char **why);

/* Tests: the function the resolver thread calls instead of getaddrinfo. */
typedef int resolve_gai_fn(const char *node, const char *service,
                           const struct addrinfo *hints, struct addrinfo **res);
void        resolve_set_gai(resolve_gai_fn *fn);

#endif
