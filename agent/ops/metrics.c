/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Metrics registry and the Prometheus text renderer (format 0.0.4).
 *
 * What it does: keeps the table of per-worker counter blocks (filled by
 * the inline helpers of metrics.h, one writer each), the interned rule
 * names with the rule index -> slot map, and a few process-wide values
 * (reload counters, build info); metrics_render() sums the blocks and
 * writes the whole exposition text in one pass.
 *
 * What it does not do: no I/O (httpd.c serves the text), no locks on the
 * hot path (the one mutex guards name interning at policy load), no
 * dynamic label sets beyond rule names, and no snapshot: each value is
 * read atomically, but counters are not frozen together, which
 * Prometheus does not need. The histogram's _count is derived from its
 * buckets so that _count always equals the +Inf bucket.
 *
 * Reentrancy: every function may run on any thread alongside the workers,
 * except metrics_reset() (tests) and the documented one-thread-at-a-time
 * calls (metrics_set_rules(), metrics_init()).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "util.h"

const uint32_t metrics_lat_bounds_us[METRICS_LAT_BUCKETS] = {
	50,    100,   250,   500,    1000,   2000,   5000,
	10000, 25000, 50000, 100000, 250000, 500000, 1000000,
};

static struct metrics_worker *_Atomic workers[METRICS_MAX_WORKERS];
static _Atomic int nworkers; /* slots reserved, may exceed the max */

static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER;
static char       *rule_names[METRICS_MAX_RULES]; /* written before nnames */
static _Atomic int nnames;
/* A rule of the policy is named "_other" (a valid name): it counts in the
 * overflow slot, whose label it is, and is listed before it counts. */
static _Atomic bool other_named;

static _Atomic uint64_t reloads_ok;
static _Atomic uint64_t reloads_err;
static _Atomic int64_t  last_reload_us; /* wall clock; 0 = never */
static _Atomic int64_t  start_us;
static char             version[64] = "unknown";

static const char *const outcome_names[METRICS_OUTCOME_COUNT] = {
	"allowed",
	"denied",
	"shadow_denied",
	"degraded",
};
static const char *const redis_err_names[METRICS_REDIS_ERR_COUNT] = {
	"timeout", "io", "reply", "noscript", "refused",
};
static const char *const frame_names[METRICS_FRM_COUNT] = {
	"hello", "notify", "ack", "disconnect", "healthcheck",
};

/* ---- registry ----------------------------------------------------------- */

struct metrics_worker *
metrics_worker_new(void)
{
	struct metrics_worker *w;
	size_t                 size = (sizeof(*w) + 63) & ~(size_t)63;
	int                    i = atomic_fetch_add(&nworkers, 1);

	if (i >= METRICS_MAX_WORKERS)
		fatal("metrics: more than %d worker threads",
		      METRICS_MAX_WORKERS);
	/* Cache-line aligned so two workers never share a line. */
	w = aligned_alloc(64, size);
	if (w == NULL)
		fatal("out of memory allocating %zu bytes", size);
	memset(w, 0, size);
	atomic_store_explicit(&workers[i], w, memory_order_release);
	return w;
}

void
metrics_init(const char *version_str)
{
	snprintf(version, sizeof(version), "%s", version_str);
	atomic_store(&start_us, util_wall_us());
}

int
metrics_rule_slot(const char *name)
{
	int i, n, slot = METRICS_RULE_OTHER;

	/* Its own slot would be exported with the overflow's label: two
	 * samples of one series, invalid exposition. */
	if (strcmp(name, "_other") == 0) {
		atomic_store(&other_named, true);
		return METRICS_RULE_OTHER;
	}
	pthread_mutex_lock(&names_lock);
	n = atomic_load_explicit(&nnames, memory_order_relaxed);
	for (i = 0; i < n; i++)
		if (strcmp(rule_names[i], name) == 0)
			break;
	if (i < n) {
		slot = i;
	} else if (n < METRICS_MAX_RULES) {
		rule_names[n] = xstrdup(name);
		/* Release: a scrape that sees the count sees the name. */
		atomic_store_explicit(&nnames, n + 1, memory_order_release);
		slot = n;
	}
	pthread_mutex_unlock(&names_lock);
	return slot;
}

void
metrics_set_rules(const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		metrics_rule_slot(names[i]);
}

void
metrics_policy_reload(bool ok)
{
	atomic_fetch_add(ok ? &reloads_ok : &reloads_err, 1);
	if (ok)
		metrics_policy_loaded();
}

void
metrics_policy_loaded(void)
{
	atomic_store(&last_reload_us, util_wall_us());
}

void
metrics_reset(void)
{
	for (int i = 0; i < METRICS_MAX_WORKERS; i++)
		atomic_store(&workers[i], NULL);
	atomic_store(&nworkers, 0);
	for (int i = 0; i < atomic_load(&nnames); i++) {
		free(rule_names[i]);
		rule_names[i] = NULL;
	}
	atomic_store(&nnames, 0);
	atomic_store(&other_named, false);
	atomic_store(&reloads_ok, 0);
	atomic_store(&reloads_err, 0);
	atomic_store(&last_reload_us, 0);
	atomic_store(&start_us, 0);
	snprintf(version, sizeof(version), "unknown");
}

/* ---- summing ------------------------------------------------------------ */

/* Calls the blocks registered so far; a slot reserved by a worker that has
 * not stored its pointer yet is skipped. */
#define FOREACH_WORKER(w)                                                      \
	for (int wi_ = 0, wn_ = load_nworkers(); wi_ < wn_; wi_++)             \
		if (((w) = atomic_load_explicit(                               \
			     &workers[wi_], memory_order_acquire)) != NULL)

static int
load_nworkers(void)
{
	int n = atomic_load_explicit(&nworkers, memory_order_relaxed);

	return n > METRICS_MAX_WORKERS ? METRICS_MAX_WORKERS : n;
}

static uint64_t
rd(_Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

/* Sums the counter at byte offset <off> in every block. */
static uint64_t
sum_at(size_t off)
{
	struct metrics_worker *w;
	uint64_t               s = 0;

	FOREACH_WORKER(w)
	s += rd((_Atomic uint64_t *)(void *)((char *)w + off));
	return s;
}

#define SUM(field) sum_at(offsetof(struct metrics_worker, field))
/* Element <i> of the array <field> (offsetof needs constant indexes). */
#define SUM_IDX(field, i)                                                      \
	sum_at(offsetof(struct metrics_worker, field) +                        \
	       (size_t)(i) * sizeof(_Atomic uint64_t))

/* ---- text output -------------------------------------------------------- */

/* snprintf-style accumulator: counts what it could not store. */
struct out {
	char  *buf;
	size_t size;
	size_t len;
};

static void out_printf(struct out *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void
out_printf(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int     n;

	va_start(ap, fmt);
	if (o->len < o->size)
		n = vsnprintf(o->buf + o->len, o->size - o->len, fmt, ap);
	else
		n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		o->len += (size_t)n;
}

static void
out_putc(struct out *o, char c)
{
	if (o->len + 1 < o->size) {
		o->buf[o->len] = c;
		o->buf[o->len + 1] = '\0';
	}
	o->len++;
}

/* A label value, escaped as the exposition format wants: \\ \" \n. */
static void
out_label_value(struct out *o, const char *s)
{
	for (; *s != '\0'; s++) {
		if (*s == '\\' || *s == '"') {
			out_putc(o, '\\');
			out_putc(o, *s);
		} else if (*s == '\n') {
			out_putc(o, '\\');
			out_putc(o, 'n');
		} else {
			out_putc(o, *s);
		}
	}
}

static void
out_head(struct out *o, const char *name, const char *type, const char *help)
{
	out_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A family of one unlabelled sample. */
static void
out_scalar(struct out *o, const char *name, const char *type, const char *help,
           uint64_t v)
{
	out_head(o, name, type, help);
	out_printf(o, "%s %" PRIu64 "\n", name, v);
}

/* Integer microseconds as decimal seconds, trailing zeros dropped:
 * 50 -> "0.00005", 1000000 -> "1". */
static void
out_seconds(struct out *o, uint64_t us)
{
	char frac[8];
	int  n;

	if (us % 1000000 == 0) {
		out_printf(o, "%" PRIu64, us / 1000000);
		return;
	}
	n = snprintf(frac, sizeof(frac), "%06" PRIu64, us % 1000000);
	while (n > 0 && frac[n - 1] == '0')
		frac[--n] = '\0';
	out_printf(o, "%" PRIu64 ".%s", us / 1000000, frac);
}

static void
render_decisions(struct out *o)
{
	const char *name = "spoa_rl_decisions_total";
	int         n = atomic_load_explicit(&nnames, memory_order_acquire);
	uint64_t    v[METRICS_OUTCOME_COUNT];

	out_head(o, name, "counter",
	         "Rule decisions by rule and outcome "
	         "(degraded: decided by the rule's fail mode).");
	for (int s = 0; s <= METRICS_RULE_OTHER; s++) {
		bool any = false;

		if (s >= n && s != METRICS_RULE_OTHER)
			continue;
		for (int k = 0; k < METRICS_OUTCOME_COUNT; k++) {
			v[k] = SUM_IDX(decisions,
			               (size_t)s * METRICS_OUTCOME_COUNT +
			                       (size_t)k);
			any = any || v[k] != 0;
		}
		/* "_other" only shows up once something was counted there,
		 * or a rule has that name. */
		if (s == METRICS_RULE_OTHER && !any &&
		    !atomic_load(&other_named))
			continue;
		for (int k = 0; k < METRICS_OUTCOME_COUNT; k++) {
			out_printf(o, "%s{rule=\"", name);
			out_label_value(o, s == METRICS_RULE_OTHER
			                           ? "_other"
			                           : rule_names[s]);
			out_printf(o, "\",outcome=\"%s\"} %" PRIu64 "\n",
			           outcome_names[k], v[k]);
		}
	}
}

/* A per-rule counter family, <off> the offset of its array in the worker
 * block; a rule at 0 is listed, "_other" only once it counted. */
static void
render_per_rule(struct out *o, const char *name, const char *help, size_t off)
{
	int n = atomic_load_explicit(&nnames, memory_order_acquire);

	out_head(o, name, "counter", help);
	for (int s = 0; s <= METRICS_RULE_OTHER; s++) {
		uint64_t v = sum_at(off + (size_t)s * sizeof(_Atomic uint64_t));

		if ((s >= n && s != METRICS_RULE_OTHER) ||
		    (s == METRICS_RULE_OTHER && v == 0 &&
		     !atomic_load(&other_named)))
			continue;
		out_printf(o, "%s{rule=\"", name);
		out_label_value(o, s == METRICS_RULE_OTHER ? "_other"
		                                           : rule_names[s]);
		out_printf(o, "\"} %" PRIu64 "\n", v);
	}
}

static void
render_response(struct out *o)
{
	render_per_rule(o, "spoa_rl_response_units_charged_total",
	                "Units charged by responses (count: response, "
	                "charge: response), by rule.",
	                offsetof(struct metrics_worker, units_charged));
	render_per_rule(o, "spoa_rl_response_costs_rejected_total",
	                "Responses whose cost was missing or malformed "
	                "(negative, fractional, not a number, over 2^53): "
	                "nothing charged.",
	                offsetof(struct metrics_worker, costs_rejected));
	render_per_rule(o, "spoa_rl_reserve_units_reserved_total",
	                "Units held at admission by reserve: rules, by rule.",
	                offsetof(struct metrics_worker, units_reserved));
	render_per_rule(o, "spoa_rl_reserve_units_refunded_total",
	                "Units given back by settles (reserved minus actual), "
	                "by rule.",
	                offsetof(struct metrics_worker, units_refunded));
	render_per_rule(o, "spoa_rl_reserve_settles_unmatched_total",
	                "Settles that found no reservation (repeated, after "
	                "the lease, never reserved, rule reloaded, store "
	                "unavailable): nothing changed.",
	                offsetof(struct metrics_worker, settles_unmatched));
	render_per_rule(o, "spoa_rl_reserve_settles_unconfirmed_total",
	                "Settles sent to Redis whose answer did not come in "
	                "time (redis.timeout, connection lost): Redis may or "
	                "may not have applied them.",
	                offsetof(struct metrics_worker, settles_unconfirmed));
	render_per_rule(o, "spoa_rl_reserve_self_settles_total",
	                "Reservations of refused requests the agent settled at "
	                "0 itself (HAProxy sends no rl-response for a refused "
	                "request), by rule.",
	                offsetof(struct metrics_worker, self_settles));
	render_per_rule(o, "spoa_rl_reserve_self_settles_lost_total",
	                "The agent's own settles at 0 given up: Redis did not "
	                "answer them while retried until the lease's end or "
	                "60 s; each such reservation stays held until its "
	                "lease ends.",
	                offsetof(struct metrics_worker, self_settles_lost));
	out_scalar(o, "spoa_rl_reserve_settles_orphaned_total", "counter",
	           "Settle messages that no rule takes since a reload "
	           "removed the reserving rules they settled: nothing "
	           "refunded; the reservations expire with their lease.",
	           SUM(settles_orphaned));
}

static void
render_latency(struct out *o)
{
	const char *name = "spoa_rl_redis_request_duration_seconds";
	uint64_t    cum = 0;

	out_head(o, name, "histogram", "Redis round trip of one script call.");
	for (int i = 0; i <= METRICS_LAT_BUCKETS; i++) {
		cum += SUM_IDX(lat_bucket, i);
		out_printf(o, "%s_bucket{le=\"", name);
		if (i < METRICS_LAT_BUCKETS)
			out_seconds(o, metrics_lat_bounds_us[i]);
		else
			out_printf(o, "+Inf");
		out_printf(o, "\"} %" PRIu64 "\n", cum);
	}
	out_printf(o, "%s_sum ", name);
	out_seconds(o, SUM(lat_sum_us));
	out_printf(o, "\n%s_count %" PRIu64 "\n", name, cum);
}

static void
render_labelled(struct out *o, const char *name, const char *help,
                const char *label, const char *const *values, size_t off, int n)
{
	out_head(o, name, "counter", help);
	for (int i = 0; i < n; i++)
		out_printf(o, "%s{%s=\"%s\"} %" PRIu64 "\n", name, label,
		           values[i],
		           sum_at(off + (size_t)i * sizeof(_Atomic uint64_t)));
}

static void
render_spop(struct out *o)
{
	struct metrics_worker *w;
	uint64_t               opened = 0, closed = 0;
	const char            *name = "spoa_rl_spop_errors_total";

	/* closed first, with acquire: see metrics_conn_close(). */
	FOREACH_WORKER(w)
	{
		uint64_t c = atomic_load_explicit(&w->conns_closed,
		                                  memory_order_acquire);
		uint64_t op = rd(&w->conns_opened);

		opened += op;
		closed += c <= op ? c : op;
	}
	out_scalar(o, "spoa_rl_spop_connections", "gauge",
	           "SPOP connections from HAProxy open now.", opened - closed);
	out_scalar(o, "spoa_rl_spop_connections_total", "counter",
	           "SPOP connections accepted.", opened);
	render_labelled(o, "spoa_rl_spop_frames_total",
	                "SPOP frames received (ack: sent).", "type",
	                frame_names, offsetof(struct metrics_worker, frames),
	                METRICS_FRM_COUNT);
	out_head(o, name, "counter",
	         "Connections the agent closed with an SPOP error status.");
	for (int i = 1; i < METRICS_SPOP_STATUS_COUNT; i++)
		out_printf(o, "%s{status=\"%d\"} %" PRIu64 "\n", name,
		           i == 14 ? 99 : i, SUM_IDX(spop_errors, i));
	out_scalar(o, "spoa_rl_notify_too_many_checks_total", "counter",
	           "NOTIFY frames whose messages gave more checks than one "
	           "request holds; those beyond were decided by their rules' "
	           "fail modes.",
	           SUM(notify_overflows));
	out_scalar(o, "spoa_rl_inflight_full_total", "counter",
	           "Times an SPOP connection stopped reading because its "
	           "worker had max_inflight requests in flight; it reads again "
	           "as they end.",
	           SUM(inflight_full));
	out_scalar(o, "spoa_rl_lease_self_releases_total", "counter",
	           "Concurrency leases the agent released itself: taken for a "
	           "request it refused, or whose ACK HAProxy did not use, so "
	           "HAProxy would never send their release.",
	           SUM(self_releases));
	out_scalar(o, "spoa_rl_lease_releases_lost_total", "counter",
	           "Lease release calls given up: Redis did not answer them "
	           "(link lost, outage) while retried until the lease's end or "
	           "60 s; each such slot stays taken until its lease ends.",
	           SUM(releases_lost));
}

static void
render_gauges(struct out *o)
{
	struct metrics_worker *w;
	int64_t                keys = 0, reqs = 0;
	int                    open = 0;

	FOREACH_WORKER(w)
	{
		keys += atomic_load_explicit(&w->local_keys,
		                             memory_order_relaxed) +
		        atomic_load_explicit(&w->near_keys,
		                             memory_order_relaxed);
		reqs += atomic_load_explicit(&w->requests,
		                             memory_order_relaxed);
		open |= atomic_load_explicit(&w->circuit_open,
		                             memory_order_relaxed);
	}
	out_scalar(o, "spoa_rl_redis_circuit_open", "gauge",
	           "1 while Redis is considered down and fail modes apply.",
	           open ? 1 : 0);
	out_scalar(o, "spoa_rl_local_keys", "gauge",
	           "Keys held in the local tier and near-cache.",
	           keys < 0 ? 0 : (uint64_t)keys);
	out_scalar(o, "spoa_rl_requests_in_flight", "gauge",
	           "NOTIFYs being decided now (at most 64 per SPOP connection, "
	           "and max_inflight per worker).",
	           reqs < 0 ? 0 : (uint64_t)reqs);
	out_scalar(o, "spoa_rl_near_cache_hits_total", "counter",
	           "Requests denied from the near-cache without asking Redis.",
	           SUM(near_cache_hits));
}

static void
render_process(struct out *o)
{
	int64_t t = atomic_load(&last_reload_us);
	int64_t st = atomic_load(&start_us);

	out_head(o, "spoa_rl_build_info", "gauge",
	         "Build information; the value is always 1.");
	out_printf(o, "spoa_rl_build_info{version=\"");
	out_label_value(o, version);
	out_printf(o, "\"} 1\n");
	if (st > 0) {
		out_head(o, "process_start_time_seconds", "gauge",
		         "Start time of the process since the epoch.");
		out_printf(o, "process_start_time_seconds ");
		out_seconds(o, (uint64_t)st);
		out_printf(o, "\n");
	}
	out_head(o, "spoa_rl_policy_reloads_total", "counter",
	         "Policy reloads (SIGHUP) by result; a refused file is error.");
	out_printf(o,
	           "spoa_rl_policy_reloads_total{result=\"ok\"} %" PRIu64 "\n",
	           atomic_load(&reloads_ok));
	out_printf(o,
	           "spoa_rl_policy_reloads_total{result=\"error\"} %" PRIu64
	           "\n",
	           atomic_load(&reloads_err));
	out_head(o, "spoa_rl_policy_last_reload_success_timestamp_seconds",
	         "gauge", "When the policy in use was loaded (0: never).");
	out_printf(o, "spoa_rl_policy_last_reload_success_timestamp_seconds ");
	out_seconds(o, t > 0 ? (uint64_t)t : 0);
	out_printf(o, "\n");
}

size_t
metrics_render(char *buf, size_t size)
{
	struct out o = { buf, size, 0 };

	if (size > 0)
		buf[0] = '\0';
	render_process(&o);
	render_decisions(&o);
	render_response(&o);
	render_per_rule(&o, "spoa_rl_blocked_total",
	                "Requests denied by a rule's penalty box (block:), "
	                "the offence that starts a block included, by rule.",
	                offsetof(struct metrics_worker, blocked));
	render_latency(&o);
	render_labelled(&o, "spoa_rl_redis_errors_total",
	                "Failed Redis requests by kind.", "kind",
	                redis_err_names,
	                offsetof(struct metrics_worker, redis_errors),
	                METRICS_REDIS_ERR_COUNT);
	render_gauges(&o);
	render_spop(&o);
	return o.len;
}

char *
metrics_render_alloc(size_t *len)
{
	size_t size = 16384, n;
	char  *buf = NULL;

	/* Counters can grow between the two passes; loop until it fits. */
	for (;;) {
		buf = xrealloc(buf, size);
		n = metrics_render(buf, size);
		if (n < size)
			break;
		size = n + 1024;
	}
	*len = n;
	return buf;
}
