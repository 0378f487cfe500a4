/*
 * Rate-limit algorithms: parameters, results, and the contract shared by
 * the C twins (lim_*.c, used by the local tier and the fail: local
 * fallback) and the Redis script (agent/lua/ratelimit.lua, the shared truth
 * of an agent pool). shared/reference/ALGORITHMS.md is the specification.
 *
 * All times are integer microseconds; there is no floating point in any
 * decision. Neither this header nor lim_*.c include libev or hiredis.
 *
 * Script contract (EVALSHA <sha> <nkeys> KEYS... ARGV...):
 *   KEYS  one base key per check, in ARGV order. A base key carries a hash
 *         tag, "rl:{<rule>:<key>}", and every key an algorithm derives from
 *         it (window index, ...) appends to it, so one check's keys share
 *         a Redis Cluster slot.
 *   ARGV  R, then for each of the R requests: C, then C checks of
 *         LIM_SCRIPT_FIELDS fields each:
 *           algo op cost p1 p2 p3 flags member
 *         with p1..p3 as lim_script_params() gives them, flags LIM_FL_*,
 *         and member a unique id (sliding-log) or the request id
 *         (concurrency), "" otherwise.
 *   Reply a flat array, LIM_SCRIPT_RESULT ints per check, in order:
 *           allowed remaining retry_after_us next_us full_us
 *         allowed is 1, 0, or -1 for a cost that can never fit.
 *   Requests are evaluated in order, each one atomically: if any check of a
 *   request without LIM_FL_SHADOW denies, none of its checks is charged.
 *   A shadow check that would deny is reported and not charged.
 *   Time comes from Redis TIME.
 */
#ifndef LIMITER_H
#define LIMITER_H

#include <stdbool.h>
#include <stdint.h>

#define LIM_SCRIPT_FIELDS 8
#define LIM_SCRIPT_RESULT 5
#define LIM_USEC_PER_SEC  1000000LL

enum lim_algo {
	LIM_GCRA = 0,
	LIM_TOKEN_BUCKET,
	LIM_LEAKY_BUCKET,
	LIM_FIXED_WINDOW,
	LIM_SLIDING_WINDOW,
	LIM_SLIDING_LOG,
	LIM_CONCURRENCY,
	LIM_ALGO_COUNT
};

enum lim_calendar {
	LIM_CAL_NONE = 0,
	LIM_CAL_DAY,
	LIM_CAL_MONTH,
};

enum lim_op {
	LIM_OP_CHECK = 0,	/* charge <cost> if allowed (cost 0 peeks) */
	LIM_OP_FORCE,		/* charge <cost> even if over (failure counting) */
	LIM_OP_RELEASE,		/* concurrency: free the lease of <member> */
};

#define LIM_FL_SHADOW 0x1

struct lim_params {
	enum lim_algo     algo;
	int64_t           rate;		/* N per period; the limit L for windows */
	int64_t           period_us;	/* P; the window W; the lease */
	int64_t           burst;	/* gcra, token-bucket, leaky-bucket */
	enum lim_calendar calendar;	/* fixed-window only */
	int64_t           max_delay_us;	/* leaky-bucket mode: delay; 0 = meter */
	/* derived by lim_params_init() */
	int64_t           ei_us;	/* emission interval P/N, >= 1 */
	int64_t           dvt_us;	/* ei * burst */
};

struct lim_result {
	int     allowed;		/* 1, 0, or -1: cost can never fit */
	int64_t remaining;		/* units left after this request */
	int64_t retry_after_us;		/* 0 when allowed */
	int64_t next_us;		/* until one more unit: the IETF t */
	int64_t full_us;		/* until the budget is fully restored */
};

/* Validates <p> and fills its derived fields. Returns 0, or -1 with a
 * static message in <*err>. */
int lim_params_init(struct lim_params *p, const char **err);

/* The quota reported in headers (IETF q) and its window in seconds (w). */
int64_t lim_quota(const struct lim_params *p);
int64_t lim_window_s(const struct lim_params *p);

/* Fills p1..p3 of the script's ARGV for <p>. */
void lim_script_params(const struct lim_params *p, int64_t out[3]);

/* Parses "100/s", "600/min", "5/15m", "10000/month" into N and P (µs;
 * calendar months set <*cal>). Returns 0 or -1. */
int lim_parse_rate(const char *s, int64_t *n, int64_t *period_us,
                   enum lim_calendar *cal);
/* Parses a duration: "5ms", "30s", "15m", "1h", "1d", "250us". */
int lim_parse_duration(const char *s, int64_t *us);

const char *lim_algo_name(enum lim_algo a);
int lim_algo_from_name(const char *s);	/* -1 if unknown */

#endif
