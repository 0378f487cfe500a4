/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The local tier: limiter state kept in process, for `store: local` rules
 * (flood guards) and for the `fail: local` fallback while Redis is down.
 * It runs the same C twins as the Redis script (lim_eval/lim_commit), on
 * the agent's monotonic clock.
 *
 * One table per agent, shared by all its workers (server.c allocates it),
 * so a rule's limit (or fail: local's share of it) is the agent's whatever
 * worker HAProxy hands a connection to. The table owns its locking;
 * callers take no lock around it.
 *
 * Concurrency design:
 *  - The keys are split by hash into S stripes (a power of two, at most
 *    64, at least 1024 keys each; one for small tables). A stripe is a
 *    complete table of its own: an index, a CLOCK ring, a hand, and
 *    max_keys / S of the keys (the remainder spread over the first ones,
 *    so the stripes hold exactly max_keys together), under one rwlock.
 *    Under a flood of new keys a stripe may evict while another still
 *    has room: the bound is kept per stripe.
 *  - The stripe's lock guards its index, ring, hand and the lifetime of
 *    its entries: an entry is unlinked and freed (eviction) only under
 *    the write lock, so a reader holding the read lock may use the entry
 *    it looked up until it unlocks. No entry is ever reused for another
 *    key while someone may still hold it: no ABA.
 *  - GCRA, leaky bucket and token bucket keep one 64-bit word per key, the
 *    TAT (the token bucket's tokens and anchor map to the same TAT: see
 *    local.c). A request of one such check on a key already stored takes
 *    the stripe's read lock and updates the word with a compare-and-swap
 *    loop: readers never wait for each other, and two of them racing on
 *    one key are ordered by the CAS, so the key admits exactly its burst.
 *  - Every other request (fixed and sliding window, sliding log,
 *    concurrency, a new key, a changed algorithm, several checks) takes
 *    the write locks of the stripes its keys fall in, in ascending order
 *    (no deadlock), then evaluates and charges all its checks as one
 *    atomic step, exactly as with one table per thread. Holding the write
 *    lock also excludes the CAS readers of those stripes, so a request of
 *    several checks sees and charges a consistent state.
 *  - local_peek_request() takes read locks only: what it reports may be
 *    stale by the time the caller acts on it (req.c evaluates again, with
 *    the charge, when Redis has answered).
 *
 * The table is bounded: it never holds more than <max_keys> keys, whatever
 * the flood of distinct keys. When a stripe is full, a new key evicts one
 * chosen by CLOCK (second chance), preferring a key whose state has become
 * equivalent to a fresh one (evicting it changes no decision). An evicted
 * busy key restarts fresh: under a flood of distinct keys the local tier
 * forgets, it never grows.
 *
 * Penalty box (a rule's block:, limiter.h): a request with a check of
 * such a rule runs under one agent-wide mutex, which checks the key's
 * block record first (a blocked key answers with its block and is charged
 * nothing; a blocked CHECK or PEEK that is not shadow vetoes its request,
 * a blocked FORCE or shadow check does not) and records the offences
 * after (local_eval_request, a peek that vetoes: req.c ends such a
 * request there, or local_refused_request; a peek that passes records
 * nothing), with
 * lim_block.c's arithmetic, as the script does. At most 16384 records (a
 * fixed table made on first use, 512 KiB). Requests without such a check
 * never take the mutex.
 *
 * Reserve, then settle (limiter.h): a request that passes with a CHECK of
 * a reserving rule (params->reserve_lease_us > 0, the request id as
 * member) records what it was charged, keyed by the key and the request
 * id, until the lease ends; a FORCE of such a rule with the id is the
 * settle: applied at once whatever the request's other checks say, it
 * reads and deletes the record and charges or refunds the difference
 * with lim_settle() (lim_reserve.c), under the key's stripe write lock.
 * No record (never reserved, settled already, lease over, evicted):
 * nothing changes, remaining -1. At most LOCAL_RES_SLOTS records (a
 * fixed table of 48 B each, 3 MiB, made on first use, under one
 * mutex); when a probe window is full of live records, the one whose
 * lease ends soonest is given up: its reservation stays charged in full.
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

#define LOCAL_KEY_MAX   1024
#define LOCAL_RES_SLOTS 65536 /* reservation records (48 B each) */
#define LOCAL_RES_PROBE 8

struct local;

/* One check of a request, for local_eval_request(). The caller fills the
 * inputs; <result> is the output. Borrowed pointers need only last for
 * the call. */
struct local_check {
	const struct lim_params *params;
	const char              *key;
	size_t                   keylen;
	int                      op; /* enum lim_op */
	int64_t                  cost;
	const char              *member; /* concurrency lease id */
	size_t                   memberlen;
	int                      shadow; /* never vetoes the request */
	struct lim_result        result; /* out */
	int                      charge; /* local.c */
	int                      settle; /* local.c */
	int                      held;   /* local.c: key in a penalty box */
	uint64_t                 hash;   /* local.c */
};

/* Returns a new, empty table holding at most <max_keys> (>= 1) keys;
 * release it with local_free() once no thread uses it. OOM is fatal.
 * Every other function may be called from any thread at once. */
struct local *local_new(size_t max_keys);
void          local_free(struct local *l);

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
 * has not vetoed either (req.c), by a local_eval_request() then. */
int local_peek_request(struct local *l, struct local_check *c, size_t n,
                       int64_t now_us);

/* local_peek_request() for a request that ends uncharged because another
 * check (Redis, a fail: closed rule) refused it: the same results, and
 * the offences among them (penalty box) recorded, as the script records
 * those of a request it refuses, a shadow check's included. */
int local_refused_request(struct local *l, struct local_check *c, size_t n,
                          int64_t now_us);

/* Reservation records held now, live or past their lease but not yet
 * reused (<= LOCAL_RES_SLOTS; a snapshot). */
size_t local_reservations(struct local *l);

/* Keys held now (<= max_keys; a snapshot while other threads run). */
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
