/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The sampled decision log (policy log.sample): a fraction of the requests
 * decided gets one logfmt line each,
 *
 *   ts=... level=info msg=decision status=429 policy=tenant retry_after=12
 *     remaining=0 degraded=0 shadow=0
 *     checks="tenant:denied:rl:{tenant:acme} login:not_run:rl:{login:bob}"
 *
 * with, per check, "<rule>:<outcome>:<key>" (outcome as in the metrics:
 * allowed, denied, shadow_denied, degraded, plus not_run for checks a
 * denial made unnecessary). Keys are the Redis keys, so they carry what
 * the rules key on (tenant, IP, user): this log is opt-in for that reason.
 * Key bytes that are a space, a quote, a backslash or not printable ASCII
 * are written \xHH, so one entry never contains a space.
 *
 * Cheap when off: declog_sample() is one branch on the policy's
 * threshold. When on, a per-thread xorshift generator draws one number per
 * request; nothing is shared between workers.
 */
#ifndef DECLOG_H
#define DECLOG_H

#include <stddef.h>
#include <stdint.h>

#include "decide.h"
#include "policy.h"

/* Formats the decision line's key=value pairs (everything after
 * "msg=decision ") into <buf,size>, NUL-terminated when <size> > 0. When
 * it does not fit it is cut between two keys' bytes (never inside a \xHH
 * escape), its quote closed and " truncated=1" appended; a <size> under
 * 15 gives "". Returns the length written (< <size>). Pure. */
size_t declog_format(char *buf, size_t size, const struct check *checks,
                     const struct outcome *out, int n,
                     const struct decision *d);

/* Draws from this thread's generator: returns 1 with probability
 * <thresh> / 2^32 (so 0 never, 2^32 always). */
int declog_draw(uint64_t thresh);

/* Seeds this thread's generator (tests; otherwise seeded on first use
 * from the clock and the thread). */
void declog_seed(uint64_t seed);

/* Draws and, when sampled and the log level is info or more verbose,
 * logs the line. Use declog_sample(). */
void declog__log(const struct policy *p, const struct check *checks,
                 const struct outcome *out, int n, const struct decision *d);

/* Logs the decision <d> of the <n> <checks> of one request with
 * probability <p>->log_sample. <p> is the policy the request was built
 * under. Call once per decided request, from its worker thread. */
static inline void
declog_sample(const struct policy *p, const struct check *checks,
              const struct outcome *out, int n, const struct decision *d)
{
	if (p->log_sample_thresh == 0)
		return;
	declog__log(p, checks, out, n, d);
}

#endif
