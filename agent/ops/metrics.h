/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Metrics: counters, gauges and one histogram, rendered as Prometheus text
 * exposition format 0.0.4 for GET /metrics (httpd.h).
 *
 * Hot path without locks: each worker thread owns one struct metrics_worker
 * (metrics_worker_new()) and is its only writer. An increment is a relaxed
 * load plus a relaxed store of the same _Atomic word: with a single writer
 * no update can be lost, and on x86-64 and arm64 it compiles to a plain
 * load/add/store, no lock prefix (atomic_fetch_add would emit one). The
 * scrape reads every word with a relaxed load, so it never sees a torn
 * value, and sums the blocks. Blocks are never freed: Prometheus counters
 * must not go backwards, and a scrape may be reading one at any time.
 *
 * The struct is in this header, not in metrics.c, only so the increment
 * helpers below inline into the workers; its fields are private.
 *
 * Labels are bounded by construction: rule names come from the policy and
 * at most METRICS_MAX_RULES distinct names are ever kept; tenant, key, IP
 * and user never appear in a label.
 *
 * Rule names and reload. Decisions are counted by rule *slot*, a stable
 * number per rule name for the life of the process, so a counter keeps its
 * name when a reload reorders, adds or removes rules (counting by rule
 * index would move counts between names). Each rule keeps its slot from
 * metrics_rule_slot(), taken at load, and counts with
 * metrics_decision_slot(): a request evaluated under the old policy and
 * counted after a reload still counts under its own rule.
 * metrics_set_rules() interns a new policy's names, so that its rules are
 * exported (at 0) before their first decision. Names of rules a reload
 * removed keep being exported with their last values.
 */
#ifndef METRICS_H
#define METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define METRICS_MAX_WORKERS 64  /* worker blocks per process */
#define METRICS_MAX_RULES   256 /* distinct rule names per process */
#define METRICS_RULE_OTHER  METRICS_MAX_RULES /* slot of rule="_other" */
#define METRICS_LAT_BUCKETS 14 /* finite buckets; +Inf is extra */

/* Outcome of one rule for one request. */
enum metrics_outcome {
	METRICS_ALLOWED = 0,
	METRICS_DENIED,        /* over the limit: 429 */
	METRICS_SHADOW_DENIED, /* shadow rule that would have denied */
	METRICS_DEGRADED,      /* decided by its fail mode, any answer */
	METRICS_OUTCOME_COUNT
};

/* Why a Redis request failed (spoa_rl_redis_errors_total{kind}). */
enum metrics_redis_err {
	METRICS_REDIS_TIMEOUT = 0, /* deadline passed, fail mode applied */
	METRICS_REDIS_IO,          /* connection lost, read/write error */
	METRICS_REDIS_REPLY,       /* error reply or unexpected shape */
	METRICS_REDIS_NOSCRIPT,    /* EVALSHA NOSCRIPT (script reloaded) */
	METRICS_REDIS_REFUSED,     /* connect refused or failed */
	METRICS_REDIS_ERR_COUNT
};

/* SPOP frames (spoa_rl_spop_frames_total{type}): hello, notify and
 * disconnect are frames received from HAProxy (a health-check HELLO counts
 * as healthcheck, not hello); ack counts ACK frames sent. */
enum metrics_frame {
	METRICS_FRM_HELLO = 0,
	METRICS_FRM_NOTIFY,
	METRICS_FRM_ACK,
	METRICS_FRM_DISCONNECT,
	METRICS_FRM_HEALTHCHECK,
	METRICS_FRM_COUNT
};

/* SPOP status codes 0..13 and 99 (spop.h enum spop_status). */
#define METRICS_SPOP_STATUS_COUNT 15

struct metrics_worker {
	/* decisions[slot][outcome]; the last slot is METRICS_RULE_OTHER */
	_Atomic uint64_t
		decisions[METRICS_MAX_RULES + 1][METRICS_OUTCOME_COUNT];
	_Atomic uint64_t
		lat_bucket[METRICS_LAT_BUCKETS + 1]; /* not cumulative */
	_Atomic uint64_t lat_sum_us;
	_Atomic uint64_t redis_errors[METRICS_REDIS_ERR_COUNT];
	_Atomic uint64_t frames[METRICS_FRM_COUNT];
	_Atomic uint64_t spop_errors[METRICS_SPOP_STATUS_COUNT];
	_Atomic uint64_t near_cache_hits;
	_Atomic uint64_t notify_overflows;
	_Atomic uint64_t inflight_full; /* a connection waited for room */
	_Atomic uint64_t self_releases;
	_Atomic uint64_t releases_lost;
	_Atomic uint64_t conns_opened;
	_Atomic uint64_t conns_closed; /* written with release, see .c */
	/* response phase (issue 19), per rule slot like decisions */
	_Atomic uint64_t units_charged[METRICS_MAX_RULES + 1];
	_Atomic uint64_t costs_rejected[METRICS_MAX_RULES + 1];
	/* penalty box (issue 18): requests denied by a block, per rule slot */
	_Atomic uint64_t blocked[METRICS_MAX_RULES + 1];
	/* reserve, then settle (issue 19, item 3), per rule slot */
	_Atomic uint64_t units_reserved[METRICS_MAX_RULES + 1];
	_Atomic uint64_t units_refunded[METRICS_MAX_RULES + 1];
	_Atomic uint64_t settles_unmatched[METRICS_MAX_RULES + 1];
	_Atomic uint64_t settles_unconfirmed[METRICS_MAX_RULES + 1];
	_Atomic uint64_t self_settles[METRICS_MAX_RULES + 1];
	_Atomic uint64_t self_settles_lost[METRICS_MAX_RULES + 1];
	_Atomic uint64_t settles_orphaned; /* no rule left to label it */
	_Atomic int64_t  local_keys;       /* gauge */
	_Atomic int64_t  near_keys;        /* gauge: this worker's near-cache */
	_Atomic int64_t  requests;         /* gauge: requests out of the pool */
	_Atomic int      circuit_open;     /* gauge, 0 or 1 */
};

/* Upper bounds of the latency buckets in µs (rendered in seconds):
 * 50µs 100µs 250µs 500µs 1ms 2ms 5ms 10ms 25ms 50ms 100ms 250ms 500ms 1s. */
extern const uint32_t metrics_lat_bounds_us[METRICS_LAT_BUCKETS];

/* ---- setup (any thread, not the hot path) ------------------------------ */

/* Returns a new zeroed block registered for the scrape. Call once per
 * worker thread at its start; only that thread may pass it to the update
 * functions below. The block lives until exit (never freed). More than
 * METRICS_MAX_WORKERS calls is a fatal() configuration bug. Thread-safe. */
struct metrics_worker *metrics_worker_new(void);

/* Sets the version in spoa_rl_build_info{version="<version>"} 1 (copied;
 * "unknown" until called) and the process start time. Call once from
 * main() before the first scrape. */
void metrics_init(const char *version);

/* Returns the stable slot (0..METRICS_MAX_RULES-1) of rule <name>,
 * interning it on first use; once METRICS_MAX_RULES names are known, new
 * names get METRICS_RULE_OTHER (exported as rule="_other"), and so does a
 * rule named "_other" (one series with the overflow's). Thread-safe
 * (a mutex: call it at policy load, not per request). */
int metrics_rule_slot(const char *name);

/* Interns <names>[0..<n>-1], the rules of a policy just loaded, so that
 * each is exported from now on. <names> is borrowed for the call only.
 * Call from one thread at a time (main: initial load and SIGHUP). */
void metrics_set_rules(const char *const *names, int n);

/* spoa_rl_policy_reloads_total{result="ok"|"error"} += 1 and, when <ok>,
 * spoa_rl_policy_last_reload_success_timestamp_seconds = now. */
void metrics_policy_reload(bool ok);
/* The initial load: sets the success timestamp without counting a reload. */
void metrics_policy_loaded(void);

/* ---- scrape ------------------------------------------------------------- */

/* Writes the whole exposition text into <buf,size>, NUL-terminated when
 * <size> > 0, like snprintf: returns the length of the full text (without
 * the NUL); a return >= <size> means it was cut. Any thread, concurrently
 * with the workers; values are each exact, not a snapshot across counters. */
size_t metrics_render(char *buf, size_t size);

/* Same, into a new buffer of the right size. Returns it NUL-terminated
 * with its length in <*len>; the caller frees it with free(). */
char *metrics_render_alloc(size_t *len);

/* Test helper: forgets every worker block (leaked on purpose: a scrape may
 * still hold one), every rule name and every global value. Not
 * thread-safe; never call it while workers run. */
void metrics_reset(void);

/* ---- hot path (the owning worker thread only) --------------------------- */

static inline void
metrics__add(_Atomic uint64_t *c, uint64_t n)
{
	atomic_store_explicit(c,
	                      atomic_load_explicit(c, memory_order_relaxed) + n,
	                      memory_order_relaxed);
}

/* Counts one decision of the rule at <slot> (metrics_rule_slot()).
 * Out-of-range slots count as METRICS_RULE_OTHER. */
static inline void
metrics_decision_slot(struct metrics_worker *w, int slot,
                      enum metrics_outcome o)
{
	if (slot < 0 || slot > METRICS_RULE_OTHER)
		slot = METRICS_RULE_OTHER;
	if ((unsigned)o < METRICS_OUTCOME_COUNT)
		metrics__add(&w->decisions[slot][o], 1);
}

/* Response phase: <units> charged to the rule at <slot> by a response
 * (spoa_rl_response_units_charged_total), or a response whose cost was
 * missing or malformed and charged nothing
 * (spoa_rl_response_costs_rejected_total). */
static inline int
metrics__slot(int slot)
{
	return slot < 0 || slot > METRICS_RULE_OTHER ? METRICS_RULE_OTHER
	                                             : slot;
}

static inline void
metrics_units_charged(struct metrics_worker *w, int slot, uint64_t units)
{
	metrics__add(&w->units_charged[metrics__slot(slot)], units);
}

static inline void
metrics_cost_rejected(struct metrics_worker *w, int slot)
{
	metrics__add(&w->costs_rejected[metrics__slot(slot)], 1);
}

/* Penalty box: one request of the rule at <slot> denied by a block (the
 * offence that starts it included), from Redis or the near-cache. */
static inline void
metrics_blocked(struct metrics_worker *w, int slot)
{
	metrics__add(&w->blocked[metrics__slot(slot)], 1);
}

/* Reserve, then settle: <units> held by requests that passed
 * (spoa_rl_reserve_units_reserved_total), given back by settles
 * (spoa_rl_reserve_units_refunded_total; what settles charged beyond the
 * reservation goes to metrics_units_charged()), and settles that found
 * no reservation (spoa_rl_reserve_settles_unmatched_total). */
static inline void
metrics_units_reserved(struct metrics_worker *w, int slot, uint64_t units)
{
	metrics__add(&w->units_reserved[metrics__slot(slot)], units);
}

static inline void
metrics_units_refunded(struct metrics_worker *w, int slot, uint64_t units)
{
	metrics__add(&w->units_refunded[metrics__slot(slot)], units);
}

static inline void
metrics_settle_unmatched(struct metrics_worker *w, int slot)
{
	metrics__add(&w->settles_unmatched[metrics__slot(slot)], 1);
}

/* A settle of the rule at <slot> sent to Redis whose answer never came in
 * time (past redis.timeout, or the connection lost with it in flight):
 * Redis may or may not have applied it
 * (spoa_rl_reserve_settles_unconfirmed_total). Not unmatched. */
static inline void
metrics_settle_unconfirmed(struct metrics_worker *w, int slot)
{
	metrics__add(&w->settles_unconfirmed[metrics__slot(slot)], 1);
}

/* The agent settled at 0 itself a reservation of the rule at <slot> that
 * Redis holds or may hold for a refused request: HAProxy sends no
 * rl-response for it (spoa_rl_reserve_self_settles_total; counted when
 * sent, once whatever its retries). */
static inline void
metrics_self_settle(struct metrics_worker *w, int slot)
{
	metrics__add(&w->self_settles[metrics__slot(slot)], 1);
}

/* ... and that settle was given up, Redis never answering it while it was
 * retried (spoa_rl_reserve_self_settles_lost_total): the reservation
 * stays held until its lease ends. */
static inline void
metrics_self_settle_lost(struct metrics_worker *w, int slot)
{
	metrics__add(&w->self_settles_lost[metrics__slot(slot)], 1);
}

/* <n> settle messages no rule takes since a reload removed every
 * reserving rule they settled (spoa_rl_reserve_settles_orphaned_total;
 * policy_orphan.h). No rule label: the message does not say which rule
 * reserved. */
static inline void
metrics_settle_orphaned(struct metrics_worker *w, int n)
{
	metrics__add(&w->settles_orphaned, (uint64_t)n);
}

/* Observes one Redis round trip of <us> microseconds (negative counts as
 * 0) in spoa_rl_redis_request_duration_seconds. Requests answered by
 * their deadline are counted by metrics_redis_error(TIMEOUT), and their
 * late reply, if any, should be observed here too. */
static inline void
metrics_redis_latency(struct metrics_worker *w, int64_t us)
{
	int i = 0;

	if (us < 0)
		us = 0;
	while (i < METRICS_LAT_BUCKETS &&
	       (uint64_t)us > metrics_lat_bounds_us[i])
		i++;
	metrics__add(&w->lat_bucket[i], 1);
	metrics__add(&w->lat_sum_us, (uint64_t)us);
}

static inline void
metrics_redis_error(struct metrics_worker *w, enum metrics_redis_err kind)
{
	if ((unsigned)kind < METRICS_REDIS_ERR_COUNT)
		metrics__add(&w->redis_errors[kind], 1);
}

static inline void
metrics_frame(struct metrics_worker *w, enum metrics_frame type)
{
	if ((unsigned)type < METRICS_FRM_COUNT)
		metrics__add(&w->frames[type], 1);
}

/* Counts a connection the agent ended with AGENT-DISCONNECT <status>
 * (an SPOP status code, spop.h). Status 0 (normal) is not an error and is
 * ignored; codes outside 1..13 count as 99. */
static inline void
metrics_spop_error(struct metrics_worker *w, int status)
{
	if (status == 0)
		return;
	if (status < 0 || status > 13)
		status = 14; /* the slot of 99 */
	metrics__add(&w->spop_errors[status], 1);
}

static inline void
metrics_near_cache_hit(struct metrics_worker *w)
{
	metrics__add(&w->near_cache_hits, 1);
}

/* A NOTIFY whose messages gave more checks than one request holds
 * (spoa_rl_notify_too_many_checks_total). */
static inline void
metrics_notify_overflow(struct metrics_worker *w)
{
	metrics__add(&w->notify_overflows, 1);
}

/* A connection stopped reading: its worker had max_inflight requests in
 * flight (spoa_rl_inflight_full_total). */
static inline void
metrics_inflight_full(struct metrics_worker *w)
{
	metrics__add(&w->inflight_full, 1);
}

/* <n> concurrency leases the agent released itself, HAProxy being
 * unable to (spoa_rl_lease_self_releases_total). */
static inline void
metrics_self_release(struct metrics_worker *w, uint64_t n)
{
	metrics__add(&w->self_releases, n);
}

/* A lease release Redis never answered, retried until the lease's end or
 * given up (spoa_rl_lease_releases_lost_total). */
static inline void
metrics_release_lost(struct metrics_worker *w)
{
	metrics__add(&w->releases_lost, 1);
}

/* An SPOP connection was accepted / was closed (each accepted one closes
 * at most once, on the same worker). */
static inline void
metrics_conn_open(struct metrics_worker *w)
{
	metrics__add(&w->conns_opened, 1);
}

static inline void
metrics_conn_close(struct metrics_worker *w)
{
	/* Release: a scrape that sees this close also sees its open, so
	 * opened - closed never goes negative. */
	atomic_store_explicit(
		&w->conns_closed,
		atomic_load_explicit(&w->conns_closed, memory_order_relaxed) +
			1,
		memory_order_release);
}

/* Gauges. spoa_rl_local_keys is the sum over blocks of <n> (keys in this
 * worker's local tier and near-cache; a tier shared by all workers is
 * reported through one block only). spoa_rl_redis_circuit_open is 1 when
 * any block says <open>. */
static inline void
metrics_local_keys(struct metrics_worker *w, int64_t n)
{
	atomic_store_explicit(&w->local_keys, n, memory_order_relaxed);
}

/* Also in spoa_rl_local_keys: <n> keys live in this worker's near-cache. */
static inline void
metrics_near_keys(struct metrics_worker *w, int64_t n)
{
	atomic_store_explicit(&w->near_keys, n, memory_order_relaxed);
}

/* spoa_rl_requests_in_flight: the sum over blocks of <n>, this worker's
 * requests being decided (or giving leases back) now. */
static inline void
metrics_requests(struct metrics_worker *w, int64_t n)
{
	atomic_store_explicit(&w->requests, n, memory_order_relaxed);
}

static inline void
metrics_circuit(struct metrics_worker *w, bool open)
{
	atomic_store_explicit(&w->circuit_open, open ? 1 : 0,
	                      memory_order_relaxed);
}

#endif
