/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin: the operator's HTTP API, served by httpd (httpd_set_handler) on
 * the policy's admin.listen, loopback by default, and only when the
 * policy has an admin: block with a token.
 *
 *   GET    /admin/keys/RULE?ARG=VALUE&...  show one key (keyop.h)
 *   DELETE /admin/keys/RULE?ARG=VALUE&...  reset it
 *   GET    /admin/key?key=RAWKEY           show a key as logs print it
 *   DELETE /admin/key?key=RAWKEY           reset it
 *   GET    /admin/top?rule=NAME&n=20       the most denied keys (topk.h)
 *
 * Every request needs "Authorization: Bearer <token>", compared in
 * constant time: 401 without it or with a wrong one. Answers are JSON;
 * a bad request is a 4xx with {"error": "<one line>"}. Every action is
 * logged at info (action, rule, key, result), never the token; a 401
 * at most once per RATELOG_INTERVAL_US, with the count not logged.
 *
 * Runs on the main loop: its Redis calls block that loop (ADMIN_REDIS_
 * TIMEOUT_US at most per command), never a worker, so no request waits.
 */
#ifndef ADMIN_H
#define ADMIN_H

#include <stddef.h>

#include <ev.h>

#include "httpd.h"
#include "policy.h"

#define ADMIN_REDIS_TIMEOUT_US 500000

struct admin;

/* An API over <p> (a reference is taken) and Redis at <url> (NULL: the
 * policy's redis.url). On <loop> it publishes, every ADMIN_PUBLISH_S,
 * this agent's top denied keys of each rule that denied in the last
 * minute (toppool.h); after a Redis failure it waits ADMIN_BACKOFF_S. */
#define ADMIN_PUBLISH_S 1.0
#define ADMIN_BACKOFF_S 10.0
struct admin *admin_new(struct ev_loop *loop, struct policy *p,
                        const char *url);
void          admin_free(struct admin *a);

/* A reload: rules and token from <p> from now on. */
void admin_set_policy(struct admin *a, struct policy *p);

/* The httpd_handler of the routes above; <arg> is the struct admin. */
int admin_handle(void *arg, const struct httpd_req *rq, char **body,
                 size_t *blen, const char **ctype);

/* 1 when <a,alen> equals <b,blen>; the time taken depends on <blen>
 * only, never on where the two differ. */
int admin_token_equal(const char *a, size_t alen, const char *b, size_t blen);

#endif
