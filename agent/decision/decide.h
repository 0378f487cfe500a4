/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Decide: turns the per-check outcomes of one request into the answer
 * HAProxy gets: the most restrictive result (ALGORITHMS.md "Several rules
 * on one request"), the IETF RateLimit / RateLimit-Policy field values, and
 * the txn variables of the DESIGN.md contract, encoded as ACK actions.
 *
 * Pure: no I/O, no allocation, no libev or hiredis.
 */
#ifndef DECIDE_H
#define DECIDE_H

#include <stdint.h>

#include "limiter.h"
#include "policy.h"
#include "spop.h"

#define DECIDE_HDR_MAX 1024

/* Retry-After (and the rule's t / reset) for a check whose cost can never
 * fit (lim_result allowed -1, ALGORITHMS.md "denied with no finite
 * retry"): no wait makes it pass, only a policy change does, so the client
 * is told "not soon", one hour, rather than invited back every second. */
#define DECIDE_NEVER_FITS_S 3600

/* How one check was decided. */
enum outcome_src {
	SRC_STORE = 0,   /* by Redis or the local tier: <res> is valid */
	SRC_FAIL_OPEN,   /* store unavailable, rule skipped */
	SRC_FAIL_CLOSED, /* store unavailable, rule denies with 503 */
	SRC_FAIL_LOCAL,  /* store unavailable, <res> from the local tier */
	SRC_MISSING,     /* key arg missing and missing: deny */
	SRC_NOT_RUN,     /* not evaluated: another check denied first */
};

struct outcome {
	enum outcome_src         src;
	struct lim_result        res;
	const struct lim_params *lim; /* what <res> was decided under, when
	                               * not the check's own: fail: local's
	                               * share of the pool; NULL otherwise */
	int redis_lease;              /* a concurrency CHECK whose lease,
	                               * or a reserving CHECK whose
	                               * reservation, Redis holds or may
	                               * hold: granted (decide_mark_leases),
	                               * or sent and never answered */
};

struct decision {
	int         status;      /* 0, 429 or 503 */
	int64_t     retry_after; /* s, rounded up; when status != 0 */
	int64_t     limit;
	int64_t     remaining;
	int64_t     reset;  /* s, rounded up: the IETF t */
	const char *policy; /* deciding rule, or NULL */
	int         degraded;
	int         shadow;
	int         has_limits; /* a rule gave limit/remaining/reset */
	int         legacy;     /* X-RateLimit-* wanted: headers legacy
	                         * or both, deciding rule with headers */
	char    ratelimit[DECIDE_HDR_MAX];
	char    ratelimit_policy[DECIDE_HDR_MAX];
	size_t  ratelimit_len;
	size_t  ratelimit_policy_len;
	int64_t delay_us; /* leaky-bucket delay mode: hold the ACK */
	int     release;  /* a concurrency lease was taken: the
	                   * response phase must send its release */
	int response;     /* a count: response rule passed the
	                   * request: the response phase must
	                   * send its cost (rl-response) */
};

/* Fills <d> from the <n> checks and their outcomes. <headers> is the
 * policy's global header mode: the IETF strings are built for ietf and
 * both, <legacy> is set for legacy and both. */
void decide(const struct check *checks, const struct outcome *out, int n,
            enum headers_mode headers, struct decision *d);

/* Writes the ACK actions for <d> (set-var, scope txn) into <w>. */
void decide_encode(const struct decision *d, struct spop_writer *w);

/* The same without the two IETF strings (ratelimit, ratelimit_policy):
 * for a peer whose frame size cannot hold them. */
void decide_encode_nohdr(const struct decision *d, struct spop_writer *w);

/* The verdict alone (status, retry_after, release, response, degraded,
 * shadow): for a peer whose frame size cannot hold even that. It fits in
 * the smallest frame (256). */
void decide_encode_min(const struct decision *d, struct spop_writer *w);

/* Marks which of the Redis checks <idx>[0..<n>) of a request hold a lease
 * or a reservation in Redis (outcome redis_lease; a reservation as a
 * concurrency CHECK's lease below). <answered>: Redis answered them (<out>
 * filled): a concurrency CHECK holds its lease if it was allowed and no
 * other check vetoed the call, whatever the local tier says after. Not
 * <answered>: the call was sent and its answer lost (deadline, link
 * failure, error reply): the script may have run, so every concurrency
 * CHECK may hold one. */
void decide_mark_leases(const struct check *checks, struct outcome *out,
                        const int *idx, int n, int answered);

/* The leases of check <c> that the agent must release itself because
 * HAProxy will not send the release: DECIDE_FREE_REDIS for a lease Redis
 * holds or may hold, DECIDE_FREE_LOCAL for one the local tier (store:
 * local, fail: local) handed out; 0 when HAProxy's release covers it. That
 * is every Redis lease of a request refused with <status> 429 or 503
 * (release is only set on status 0), and, when <lost> (the ACK missed
 * HAProxy's timeout processing, or its connection is gone), every lease an
 * allowed request took. Releasing a lease never taken is a no-op. */
#define DECIDE_FREE_REDIS 0x1
#define DECIDE_FREE_LOCAL 0x2
/* ... and for a reserving CHECK (reserve:): DECIDE_SETTLE_REDIS when the
 * request was refused (<status> != 0, not <lost>) while Redis holds or may
 * hold its reservation: HAProxy sends no rl-response for a refused
 * request, so the agent settles it at 0 (all given back; a settle that
 * finds no record is a no-op). Not when <lost>: HAProxy then answers by
 * its own error handling and may serve the request, uncharged but for the
 * reservation (never an overspend). */
#define DECIDE_SETTLE_REDIS 0x4
int decide_orphan(const struct check *c, const struct outcome *o, int status,
                  int lost);

/* Seconds from microseconds, rounded up, never negative. */
int64_t decide_ceil_s(int64_t us);

#endif
