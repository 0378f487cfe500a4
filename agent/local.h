/*
 * The local tier: limiter state kept in process, for `store: local` rules
 * (flood guards) and for the `fail: local` fallback while Redis is down.
 * It runs the same C twins as the Redis script (lim_eval/lim_commit), on
 * the agent's monotonic clock.
 *
 * One struct local per worker thread, never shared: no locks. (The one
 * exception is the agent's table of concurrency leases, which a release
 * landing on any worker must find: server.h's <leases>, under its lock.) The table is
 * bounded: it never holds more than <max_keys> keys, whatever the flood of
 * distinct keys. When full, a new key evicts one chosen by CLOCK (second
 * chance), preferring a key whose state has become equivalent to a fresh
 * one (evicting it changes no decision). An evicted busy key restarts
 * fresh: under a flood of distinct keys the local tier forgets, it never
 * grows.
 *
 * Memory per key: one entry of local_bytes_per_key(keylen) bytes, plus,
 * for sliding-log and concurrency, an array bounded by the rule's limit L
 * (8 * L or 16 * L bytes, allocated as used). Keys longer than
 * LOCAL_KEY_MAX are refused (evaluated as fresh keys, never stored).
 */
#ifndef LOCAL_H
#define LOCAL_H

#include <stddef.h>
#include <stdint.h>

#include "limiter.h"

#define LOCAL_KEY_MAX 1024

struct local;

/* One check of a request, for local_eval_request(). The caller fills the
 * inputs; <result> is the output. Borrowed pointers need only last for
 * the call. */
struct local_check {
	const struct lim_params *params;
	const char              *key;
	size_t                   keylen;
	int                      op;		/* enum lim_op */
	int64_t                  cost;
	const char              *member;	/* concurrency lease id */
	size_t                   memberlen;
	int                      shadow;	/* never vetoes the request */
	struct lim_result        result;	/* out */
	int                      charge;	/* local.c */
};

/* Returns a new, empty table holding at most <max_keys> (>= 1) keys;
 * release it with local_free(). OOM is fatal. */
struct local *local_new(size_t max_keys);
void local_free(struct local *l);

/* Evaluates the <n> checks of one request atomically at <now_us>: all are
 * evaluated first, and they are charged only if no non-shadow CHECK denies
 * (lim_vetoes()), exactly as the Redis script does. Fills every
 * <c[i].result>. Returns 1 if the request passed (and was charged), 0 if a
 * check vetoed it (nothing charged). */
int local_eval_request(struct local *l, struct local_check *c, size_t n,
                       int64_t now_us);

/* local_eval_request() without the charge: fills every <c[i].result> as
 * it would, and returns what it would, but changes nothing. For a request
 * that also has Redis checks: the local ones are charged only once Redis
 * has not vetoed either (req.c). */
int local_peek_request(struct local *l, struct local_check *c, size_t n,
                       int64_t now_us);

/* Charges what the local_peek_request() just before it evaluated on the
 * same table at the same <now_us> (the <c[i].charge> it set). For the
 * callers that must see several tables pass before charging any: the
 * table must not change in between. */
void local_commit_request(struct local *l, struct local_check *c, size_t n,
                          int64_t now_us);

/* Keys held now (<= max_keys). */
size_t local_count(const struct local *l);

/* Bytes the table spends on one key of <keylen> bytes, excluding the
 * per-key array of sliding-log and concurrency (see above). */
size_t local_bytes_per_key(size_t keylen);

/* Divides the limit of <p> among <pool_size> agents (fail: local): rate
 * and burst, or the window/concurrency limit, become floor(x / pool_size),
 * at least 1, and the derived fields are recomputed. Rounding down keeps
 * the pool's total at or under the limit (unless pool_size > x). */
void local_share(struct lim_params *p, int pool_size);

#endif
