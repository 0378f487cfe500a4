/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The server: listening sockets (TCP and unix), the worker threads (one
 * libev loop each, sharing nothing on the hot path), accepting, policy
 * reload and graceful drain.
 *
 * Every worker watches every listening socket and accepts what it can
 * (non-blocking accept; a worker that loses the race gets EAGAIN), so a
 * connection lives on the worker that accepted it, with that worker's
 * Redis link, local tier and metrics. The main thread owns signals and
 * reaches the workers with ev_async.
 */
#ifndef SERVER_H
#define SERVER_H

struct policy;
struct server;

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

#endif
