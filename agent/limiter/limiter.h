/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Rate-limit algorithms: parameters, results, and the contract shared by
 * the C twins (lim_*.c, used by the local tier and the fail: local
 * fallback) and the Redis script (agent/store/lua/ratelimit.lua, the shared
 * truth of an agent pool). shared/reference/ALGORITHMS.md is the specification.
 *
 * All times are integer microseconds; there is no floating point in any
 * decision. Neither this header nor lim_*.c include libev or hiredis.
 *
 * Script contract (EVALSHA <sha> <nkeys> KEYS... ARGV...):
 *   KEYS  one key per check, in ARGV order, carrying a hash tag,
 *         "rl:{<rule>:<key>}". A check touches that key alone (the windows
 *         are fields of a hash, keyed by window index), so a slot
 *         migration moves all of a check's state at once.
 *   ARGV  one string, a msgpack array (agent/store/batch.h writes it) of:
 *         R, U, then U rule tuples of LIM_SCRIPT_RULE fields each:
 *           algo p1 p2 p3 block_us block_max_us lease
 *         with p1..p3 as lim_script_params() gives them, then the
 *         rule's penalty box (0 0 when it has none; see "Penalty box"
 *         below and lim_block.c), then the reservation lease (> 0 only
 *         for a rule with reserve:, see below) (each distinct
 *         tuple once per call); then for each of the R requests: C, then
 *         C checks of up to LIM_SCRIPT_FIELDS fields each, plus a member for
 *         sliding-log, concurrency and reserving rules
 *         (lim_script_sends_member()):
 *           code [cost] [member]
 *         with code = (rule * 8 + op * 2 + shadow) * 2 + has_cost
 *         (lim_script_code(): rule the 1-based index of the check's tuple,
 *         shadow 1 for LIM_FL_SHADOW, has_cost 0 when the cost is 1 and
 *         not sent), and member a unique id (sliding-log) or the request
 *         id (concurrency).
 *         A second ARGV string "view" makes the call read-only (keyop.c,
 *         `key show`: an operator's look must change nothing): a TAT of
 *         another interval is rescaled but not written back, and a key
 *         of another algorithm's type fails the call instead of being
 *         dropped. Only PEEKs of rules without a penalty box may be sent
 *         so; any other op would still write.
 *   Reply one bulk string: a msgpack array of LIM_SCRIPT_RESULT integers
 *         per check, in order, then the call's Redis TIME in µs (results.h
 *         reads it):
 *           allowed remaining retry_after_us next_us full_us ... now_us
 *         allowed is 1, 0, or -1 for a cost that can never fit. now_us
 *         named every window the call charged (fixed and sliding window),
 *         so a Cluster refund (refund.lua) undoes that window's field.
 *   Requests are evaluated in order, each one atomically: if any check of a
 *   request without LIM_FL_SHADOW denies, none of its checks is charged.
 *   A shadow check that would deny is reported and not charged.
 *   Time comes from Redis TIME.
 *
 * Reserve, then settle (rules with reserve:, lease > 0; gcra,
 * token-bucket, fixed-window and sliding-window only):
 *   - A CHECK with a non-empty member (the request id) is the
 *     reservation: decided and charged as any CHECK with its cost (the
 *     units reserved); when its request passes, the script also writes
 *     the record "<base>:r:<member>" (same hash tag, so the same slot)
 *     with PX lease: "<cost>:<window index>" (fixed and sliding
 *     windows), "<cost>:-<emission interval>" (gcra), "<cost>:-0"
 *     (token bucket); a record the script cannot read is taken as none.
 *   - A FORCE with a non-empty member is the settle, applied at once,
 *     whatever the other checks of its request say: the record is read
 *     and deleted; none found changes nothing. Found, with the actual
 *     cost A and the reserved R: A > R charges A - R as a FORCE now;
 *     A < R refunds R - A, unless the rule's algorithm is no longer the
 *     record's (a GCRA TAT moved back by R - A of the record's emission
 *     intervals, never below now; tokens
 *     given back, never past the burst; the counter of the window the
 *     reservation went to lowered, never below 0); A < 0 (a malformed
 *     cost) keeps the reservation as the charge. Its result is allowed 1,
 *     remaining R (or -1 when no record was found), the rest 0.
 */
#ifndef LIMITER_H
#define LIMITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LIM_SCRIPT_RULE   7 /* algo p1 p2 p3 block block_max lease */
#define LIM_SCRIPT_PARAMS (LIM_SCRIPT_RULE - 1) /* all but algo */
#define LIM_SCRIPT_FIELDS 2 /* code [cost], + member (log, concurrency) */
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
	LIM_OP_CHECK = 0, /* charge <cost> if allowed (cost 0 peeks) */
	LIM_OP_FORCE,     /* charge <cost> even if over (failure counting) */
	LIM_OP_RELEASE,   /* concurrency: free the lease of <member> */
	LIM_OP_PEEK,      /* decide as CHECK with <cost>, charge nothing:
	                   * "would one more pass?" (failure counting) */
};

#define LIM_FL_SHADOW 0x1

/* The script's per-check code (contract above): <rule> is 1-based. The
 * usual cost, 1, is implied: its argument is left out. */
static inline long long
lim_script_code(int rule, int op, int flags, int64_t cost)
{
	return ((long long)rule * 8 + (op & 3) * 2 + (flags & LIM_FL_SHADOW)) *
	               2 +
	       (cost != 1);
}

/* 1 if the check with <code> sends its cost after it. */
static inline int
lim_script_has_cost(long long code)
{
	return (int)(code & 1);
}

/* 1 if checks of <algo> carry a member in the script's ARGV. */
static inline int
lim_script_has_member(int algo)
{
	return algo == LIM_SLIDING_LOG || algo == LIM_CONCURRENCY;
}

struct lim_params {
	enum lim_algo     algo;
	int64_t           rate;      /* N per period; the limit L for windows */
	int64_t           period_us; /* P; the window W; the lease */
	int64_t           burst;     /* gcra, token-bucket, leaky-bucket */
	enum lim_calendar calendar;  /* fixed-window only */
	int64_t max_delay_us;        /* leaky-bucket mode: delay; 0 = meter */
	int64_t block_us;            /* penalty box: 0 = none (lim_block.c) */
	int64_t block_max_us;        /* escalation cap; 0 = no escalation */
	int64_t reserve_lease_us;    /* reserve: how long a reservation's
	                              * record waits for its settle; 0 = the
	                              * rule does not reserve (limiter.h,
	                              * "Reserve, then settle") */
	/* derived by lim_params_init() */
	int64_t ei_us;  /* emission interval P/N, >= 1 */
	int64_t dvt_us; /* ei * burst */
};

struct lim_result {
	int     allowed;        /* 1, 0, or -1: cost can never fit */
	int64_t remaining;      /* units left after this request */
	int64_t retry_after_us; /* 0 when allowed */
	int64_t next_us;        /* until one more unit: the IETF t */
	int64_t full_us;        /* until the budget is fully restored */
};

/* Validates <p> and fills its derived fields. Returns 0, or -1 with a
 * static message in <*err>. */
int lim_params_init(struct lim_params *p, const char **err);

/* The rule's quota (the limit, or the burst: what one key may spend at
 * once) and the window in seconds it refills in (IETF w), rounded up. */
int64_t lim_quota(const struct lim_params *p);
int64_t lim_window_s(const struct lim_params *p);
/* The IETF q that goes with w = lim_window_s(): the quota, unless a GCRA
 * family tolerance of a fraction of a second makes it understate the rate
 * (then the units the rate gives in w). */
int64_t lim_header_quota(const struct lim_params *p);
/* GCRA family: how much faster the whole-µs emission interval lets
 * requests through than the rate says (0.01: 1 % more); 0 otherwise. */
double lim_rate_excess(const struct lim_params *p);

/* Fills the LIM_SCRIPT_PARAMS fields after algo of the script's rule
 * tuple for <p>: p1..p3, block_us, block_max_us and the reservation
 * lease. */
void lim_script_params(const struct lim_params *p,
                       int64_t                  out[LIM_SCRIPT_PARAMS]);

/* 1 if a check of <algo> whose rule tuple has <p> (lim_script_params())
 * carries a member: sliding-log, concurrency, and every check of a
 * reserving rule (its request id). */
static inline int
lim_script_sends_member(int algo, const int64_t p[LIM_SCRIPT_PARAMS])
{
	return lim_script_has_member(algo) || p[5] > 0;
}

/* Parses "100/s", "600/min", "5/15m", "10000/month" into N and P (µs;
 * calendar months set <*cal>). Returns 0 or -1. */
int lim_parse_rate(const char *s, int64_t *n, int64_t *period_us,
                   enum lim_calendar *cal);
/* Parses a duration: "5ms", "30s", "15m", "1h", "1d", "250us". */
int lim_parse_duration(const char *s, int64_t *us);

const char *lim_algo_name(enum lim_algo a);
int         lim_algo_from_name(const char *s); /* -1 if unknown */

/* ---- additions (lim_*.c) ----------------------------------------------
 *
 * Details the contract above leaves open, kept identical in C and Lua:
 *  - retry_after_us is 0 when allowed is 1 or -1 (-1 has no finite retry:
 *    the caller logs it and answers from its own default).
 *  - cost > LIM_COST_MAX is treated as a cost that can never fit (-1) and
 *    is never charged, not even by LIM_OP_FORCE.
 *  - LIM_OP_FORCE reports what LIM_OP_CHECK would have reported, then
 *    charges anyway; it never vetoes the other checks of its request (a
 *    non-shadow CHECK that denies still vetoes it). GCRA/leaky clamp a
 *    forced TAT to now + 2 * tolerance, token-bucket clamps forced tokens
 *    at -burst, sliding-log keeps only the newest L entries, concurrency
 *    keeps at most L leases: all exact for the decisions (see lim_*.c).
 *  - LIM_OP_RELEASE (concurrency) is always allowed; on other algorithms it
 *    is a peek.
 *  - Concurrency takes one lease per request (any cost > 0); re-acquiring
 *    a member already holding a lease refreshes its expiry.
 *  - next_us is the time until remaining grows by one (0 when the budget
 *    is full); for fixed windows next = full = end of window - now.
 *  - Fixed windows are aligned to the Unix epoch, so a 1d window is the
 *    UTC day: LIM_CAL_DAY and period 1d behave the same. LIM_CAL_MONTH is
 *    the UTC calendar month; its nominal period (quota w) is 30 days.
 *
 * Script ARGV p1..p3 per algorithm (lim_script_params()):
 *   gcra, leaky-bucket  ei_us   dvt_us     max_delay_us (0 = meter)
 *   token-bucket        rate    period_us  burst
 *   fixed-window        limit   window_us  calendar
 *   sliding-window      limit   window_us  0
 *   sliding-log         limit   window_us  0
 *   concurrency         limit   lease_us   0
 * Keys the script writes (each gets a PEXPIRE): gcra/leaky "<base>" (TAT),
 * token-bucket "<base>" (hash t=tokens, l=the refill's anchor),
 * fixed-window "<base>" (hash field <index>), sliding-window "<base>"
 * (hash fields <index> and <index-1>), sliding-log and concurrency
 * "<base>" (sorted set).
 */

#define LIM_COST_MAX (1LL << 32)
/* The largest sliding-log limit: an entry per unit charged, in the local
 * tier (8 bytes) and in Redis (a ZADD each, in one script call). */
#define LIM_LOG_MAX 1000000
#define LIM_TIME_MAX (1LL << 48) /* longest tolerance/window, µs (~8.9y) */
#define LIM_MICRO    1000000LL   /* token-bucket: millionths of a unit */
#define LIM_MONTH_US (30LL * 86400 * LIM_USEC_PER_SEC)
#define LIM_DAY_US   (86400LL * LIM_USEC_PER_SEC)

/* The Redis script, embedded by the Makefile from
 * agent/store/lua/ratelimit.lua. */
extern const char lua_ratelimit[];

/* One key's state for the C twins. <v> holds the algorithm's words (gcra:
 * TAT; token-bucket: tokens in millionths, anchor, windows: window index,
 * current count, previous count). Sliding-log keeps <n> timestamps in
 * <ts>, ascending; concurrency keeps <n> lease expiries in <ts> with the
 * member hashes in <ids>. <n> never exceeds the limit L, so a key costs
 * sizeof(struct lim_state) plus at most 8 * L (log) or 16 * L (leases)
 * bytes. Initialise with lim_state_init(), release with lim_state_deinit().
 */
struct lim_state {
	int64_t   v[3];
	int64_t  *ts;
	uint64_t *ids;
	uint32_t  n;
	uint32_t  cap;
};

void lim_state_init(struct lim_state *s);
void lim_state_deinit(struct lim_state *s);

/* Evaluates one check against <s> at <now_us> without changing anything,
 * and fills <out> as the script would. <member> is the 64-bit hash of the
 * member string (lim_member_hash(); concurrency only). Returns 1 if the
 * check must be charged when its request passes (allowed with cost > 0,
 * FORCE, RELEASE), 0 otherwise (denied, never fits, peek). */
int lim_eval(const struct lim_params *p, const struct lim_state *s, int op,
             int64_t cost, uint64_t member, int64_t now_us,
             struct lim_result *out);

/* Applies the charge lim_eval() returned 1 for, with the same arguments.
 * Two-phase use: lim_eval() every check of a request, then lim_commit()
 * those that returned 1 only if no non-shadow CHECK denied (allowed != 1).
 * May grow <s>'s arrays (bounded by the limit; OOM is fatal). */
void lim_commit(const struct lim_params *p, struct lim_state *s, int op,
                int64_t cost, uint64_t member, int64_t now_us);

/* The first time >= <now_us> at which <s> is equivalent to a fresh key (so
 * it may be dropped without changing any decision). */
int64_t lim_state_idle_at(const struct lim_params *p, const struct lim_state *s,
                          int64_t now_us);

/* 1 if <r> (the result of check <op> under <p>) vetoes its request: a
 * non-shadow CHECK whose allowed is not 1. */
int lim_vetoes(int op, int shadow, const struct lim_result *r);

/* Leaky bucket in delay mode (max_delay_us > 0): how long the agent holds
 * the ACK of an allowed request, derived from the result alone so that it
 * works on script replies too: max(0, full - dvt). 0 in every other case. */
int64_t lim_delay_us(const struct lim_params *p, const struct lim_result *r);

/* FNV-1a 64 of a member string (concurrency lease ids in the local tier). */
uint64_t lim_member_hash(const char *s, size_t len);

/* UTC calendar helpers (integer civil-from-days): the fixed window that
 * contains <now_us>, as [<*start>, <*end>) µs and its index. */
int64_t lim_window_bounds(const struct lim_params *p, int64_t now_us,
                          int64_t *start, int64_t *end);
int64_t lim_days_from_civil(int64_t y, int m, int d);
void    lim_civil_from_days(int64_t z, int64_t *y, int *m, int *d);

/* Exact floor(a * b / c) for a, b >= 0, c > 0, with <*rem> the remainder
 * if non-NULL; the Lua script has the same routine on doubles. */
int64_t lim_muldiv(int64_t a, int64_t b, int64_t c, int64_t *rem);
int64_t lim_muldiv_ceil(int64_t a, int64_t b, int64_t c);

/* What a charge took from its key, for refund.lua on Redis Cluster: the
 * charge of <cost> by a check of <algo> with the script's params <p>,
 * answered <r> (ratelimit.lua), in the unit the refund gives back: µs of
 * TAT (GCRA, leaky bucket), millionths of a token (token bucket); -1 for
 * the other algorithms, whose refund is the cost. A FORCE past the burst
 * is capped (a TAT at most now + 2 tolerance, at least -burst tokens), so
 * this can be less than the cost: a refund of the cost would leave the key
 * fresher than before. Exact for GCRA and leaky bucket; for a token bucket
 * denied, never more than was taken (the reply gives the level to within
 * a µs of refill). <level> (may be NULL) carries the key's level from a
 * check to the next check of the same key in one request, which the
 * script charges on top: LIM_LEVEL_NONE on the first. */
#define LIM_LEVEL_NONE INT64_MIN
int64_t lim_charge_taken(int algo, const int64_t p[LIM_SCRIPT_PARAMS],
                         int64_t cost, const struct lim_result *r,
                         int64_t *level);

/* Internal to lim_*.c: the per-family twins behind lim_eval/lim_commit. */
int  lim__gcra_eval(const struct lim_params *, const struct lim_state *, int,
                    int64_t, int64_t, struct lim_result *);
void lim__gcra_commit(const struct lim_params *, struct lim_state *, int,
                      int64_t, int64_t);
int  lim__tb_eval(const struct lim_params *, const struct lim_state *, int,
                  int64_t, int64_t, struct lim_result *);
void lim__tb_commit(const struct lim_params *, struct lim_state *, int, int64_t,
                    int64_t);
int  lim__fw_eval(const struct lim_params *, const struct lim_state *, int,
                  int64_t, int64_t, struct lim_result *);
void lim__fw_commit(const struct lim_params *, struct lim_state *, int, int64_t,
                    int64_t);
int  lim__sw_eval(const struct lim_params *, const struct lim_state *, int,
                  int64_t, int64_t, struct lim_result *);
void lim__sw_commit(const struct lim_params *, struct lim_state *, int, int64_t,
                    int64_t);
int  lim__log_eval(const struct lim_params *, const struct lim_state *, int,
                   int64_t, int64_t, struct lim_result *);
void lim__log_commit(const struct lim_params *, struct lim_state *, int,
                     int64_t, int64_t);
int  lim__conc_eval(const struct lim_params *, const struct lim_state *, int,
                    int64_t, uint64_t, int64_t, struct lim_result *);
void lim__conc_commit(const struct lim_params *, struct lim_state *, int,
                      int64_t, uint64_t, int64_t);

/* ---- reserve, then settle (lim_reserve.c) -----------------------------
 * The C twin of the script's settle (contract above), for the local tier,
 * which keeps the reservation records itself (local.c). */

/* 1 if rules of <algo> may reserve (the script settles them). */
int lim_reserve_supported(int algo);

/* What a reservation's record holds beside its units, for one made at
 * <now_us> under <p>: the window index it went to (fixed and sliding
 * windows), the emission interval it was charged at (gcra), 0 (token
 * bucket). */
int64_t lim_reserve_index(const struct lim_params *p, int64_t now_us);

/* Settles on <s> at <now_us> a reservation of algorithm <algo> that held
 * <held> (>= 0) units with <idx> (lim_reserve_index()), with the actual
 * <cost>: charges cost - held, or refunds held - cost, bounded (nothing
 * when <algo> is not p's), exactly as the script (lim_reserve.c). */
void lim_settle(const struct lim_params *p, struct lim_state *s, int64_t held,
                int64_t idx, int algo, int64_t cost, int64_t now_us);

/* ---- penalty box (lim_block.c) ---------------------------------------
 *
 * A rule with block_us > 0: a CHECK or PEEK it denies (allowed 0, not a
 * cost that can never fit) is an offence, and the key is then denied for
 * the block period whatever its algorithm says, Retry-After counting down
 * to the block's end; nothing is charged while it lasts. With
 * block_max_us > 0, an offence within block_max_us of the end of the last
 * block (the quiet period) doubles the period, capped at block_max_us;
 * past the quiet period the offences are forgotten.
 *
 * In Redis the record is the string "<until_us> <offences>" at
 * "<base>!b" (same hash tag, so the same Cluster slot), expiring at the
 * end of the quiet period (until + block_max, or until without
 * escalation). The script reads and writes it in the same call as the
 * check. The C twin below is the same arithmetic on a struct.
 */
struct lim_block {
	int64_t until_us;  /* the block ends; 0: none */
	int64_t offences;  /* since the last quiet period, >= 1 if any */
	int64_t forget_us; /* the record expires (until + quiet period) */
};

/* The block period of the <offences>-th offence under <p>: block_us
 * doubled offences - 1 times, capped at block_max_us (when set). */
int64_t lim_block_period(const struct lim_params *p, int64_t offences);

/* 1 if <b> blocks the key at <now_us>: fills <out> as the script does
 * (allowed 0, remaining 0, retry = next = full = the time left). */
int lim_block_held(const struct lim_block *b, int64_t now_us,
                   struct lim_result *out);

/* Records an offence at <now_us> in <b> (a record past its forget time
 * counts as none) and rewrites <out>'s times to the new block's end. */
void lim_block_offend(const struct lim_params *p, struct lim_block *b,
                      int64_t now_us, struct lim_result *out);

/* Validates <p>'s penalty box. Returns 0, or -1 with a static message in
 * <*err> (lim_params_init() calls it). */
int lim_block_check(const struct lim_params *p, const char **err);

/* 1 if <r>, the result of check <op> under <p>, is an offence. */
int lim_block_offence(const struct lim_params *p, int op,
                      const struct lim_result *r);

#endif
