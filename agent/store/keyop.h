/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keyop: one limiter key as an operator sees it, for `spoa-ratelimit key
 * show|reset` and the admin API's /admin/keys (admin.c).
 *
 * The key is built by the agent's own code: the rule's template expanded
 * by policy_build_checks() against a message made of the operator's
 * ARG=VALUE pairs (strings; one that reads as an IP address is one, as
 * from HAProxy), so a reset cannot miss the key the agent charges. A key
 * copied from a log line (rl:{rule:...}) is taken as it is, once its
 * prefix names a rule of the policy.
 *
 * Show asks the decision script itself with a PEEK of cost 1 (reads
 * only: nothing is charged), so remaining/reset/retry_after are the
 * algorithm's own numbers, then reads the raw state (TYPE, PTTL and the
 * value), and for a rule with block: its penalty box (the PEEK is sent
 * without it, so a show is never an offence). Reset is a DEL of the key
 * and its block record, then a bump of the pool's reset counter (the
 * agents drop their near-cached blocks on it: ovcache.c). Both talk to Redis
 * through a blocking hiredis context with a timeout: callers run them off the
 * request path (the CLI, the agent's main loop). A Cluster's MOVED and ASK
 * are followed (an ASK during a slot migration: ASKING, then the command,
 * on the node that holds the key now), a few in a row at most; a Sentinel
 * group is asked for its master.
 *
 * Not here: HTTP and tokens (admin.c), the command line (main.c).
 */
#ifndef KEYOP_H
#define KEYOP_H

#include <stdint.h>
#include <stdio.h>

#include <hiredis/hiredis.h>

#include "adminreq.h"
#include "policy.h"

#define KEYOP_ERR_MAX 256

struct keyop_state {
	struct lim_result res;      /* PEEK at cost 1 */
	long long         pttl_ms;  /* -2: no key, -1: no expiry */
	char              type[16]; /* Redis TYPE: none, string, hash, zset */
	struct jsonw      raw;      /* the value, as a JSON value */
	/* penalty box (rules with block:): its record at "<key>!b" */
	int       has_block;
	int64_t   block_left_us;   /* > 0 while blocked (res says so too) */
	long long block_offences;  /* 0: none remembered */
	long long block_forget_ms; /* PTTL of the record; -2: none */
	/* a runtime override of the key (override.h), as the agents
	 * apply it: OV_NONE, or the kind (OV_LIMIT: the check's limit
	 * was replaced before the PEEK) */
	int ov_kind;
};

/* Builds the check of rule <rule> from <n> pairs <names>/<values>.
 * Returns 0, or -1 with a one-line reason in <err> (unknown rule, an arg
 * the template lacks or does not use, a missing one). */
int keyop_from_args(const struct policy *p, const char *rule,
                    const char *const *names, const char *const *values, int n,
                    struct check *out, char *err);

/* The check of <raw>, a key as logs print it ("rl:{login:u:alice}",
 * log escapes undone). Returns 0 or -1 with <err>. */
int keyop_from_raw(const struct policy *p, const char *raw, struct check *out,
                   char *err);

/* Connects to <url> (NULL: the policy's redis.url) with the policy's
 * credentials, <timeout_us> per connect and command. NULL with <err>. */
/* <on> 1: host names are taken from the agent's resolver (resolve.h),
 * never looked up in the calling thread, so that a dead DNS server cannot
 * hold a loop for the resolver's timeout (the admin API, on the main
 * loop); a name not resolved yet fails at once. 0 (the default, the CLI):
 * getaddrinfo() in place. */
void keyop_dns_cached(int on);
redisContext *keyop_connect(const struct policy *p, const char *url,
                            int64_t timeout_us, char *err);

/* A Cluster's "MOVED <slot> <host>:<port>" in <r> (a reply on a context
 * of keyop_connect()'s, on this thread): reconnects <*c> there. Returns 1
 * when it did (send again), 0 otherwise. */
int keyop_follow_moved(redisContext **c, const redisReply *r, char *err);

/* Fills <st> (free its raw.buf). When <overrides> (the policy's
 * overrides:, restart-only: the agents' own), a live override of the key
 * applies as on the agents: a limit replaces <ck>'s (shown and peeked), a
 * deny or an allow gives the answer the agents give. Returns 0 or -1 with
 * <err>; <*c> may be replaced (a Cluster redirect). */
int keyop_show(redisContext **c, struct check *ck, int overrides,
               struct keyop_state *st, char *err);

/* DELs the key and its block record (<*deleted>: how many existed) and
 * bumps the pool's reset counter (OV_RESETS). Returns 0 or -1. */
int keyop_reset(redisContext **c, const struct check *ck, long long *deleted,
                char *err);

/* <ck> and <st> as one JSON object / as text lines. */
void keyop_json(struct jsonw *w, const struct check *ck,
                const struct keyop_state *st);
void keyop_text(FILE *f, const struct check *ck, const struct keyop_state *st);

#endif
