/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The policy: the YAML file (DESIGN.md "Policy file") read with libyaml
 * into an immutable struct policy, validated as a whole, and the per-request
 * step that turns one SPOE message into the limit checks that apply to it
 * (rule matching, key templates, cost, missing args).
 *
 * A struct policy never changes after policy_load() returns; a reload
 * builds a new one and swaps the pointer (policy_ref/unref keep the old
 * one alive for requests still in flight). No libev, no hiredis here.
 */
#ifndef POLICY_H
#define POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "limiter.h"
#include "spop.h"

#define POLICY_KEY_MAX    200 /* longest Redis key; longer ones are hashed */
#define POLICY_MEMBER_MAX 128
#define POLICY_MAX_CHECKS                                                      \
	16 /* rules evaluated for one message, and                             \
	    * checks for one NOTIFY in all */

enum fail_mode {
	FAIL_OPEN = 0,
	FAIL_CLOSED,
	FAIL_LOCAL,
};

enum missing_mode {
	MISSING_DENY = 0,
	MISSING_SKIP,
	MISSING_FALLBACK,
};

enum store_kind {
	STORE_REDIS = 0,
	STORE_LOCAL,
};

enum headers_mode {
	HEADERS_IETF = 0,
	HEADERS_LEGACY,
	HEADERS_BOTH,
	HEADERS_NONE,
};

/* count: what a rule charges. */
enum count_mode {
	COUNT_ALL = 0,  /* every request of <message> */
	COUNT_FAILURES, /* only results whose status is a failure */
	COUNT_RESPONSE, /* the response's cost, when its status
	                 * matches (count: response, charge:
	                 * response) */
};

/* plan: where a rule takes its parameters from. */
enum rule_plan {
	RULE_PLAN_NONE = 0, /* the rule's own rate/limit */
	RULE_PLAN_RATE,     /* the tenant plan's rate and burst */
	RULE_PLAN_QUOTA,    /* the tenant plan's quota (fixed window) */
};

#define POLICY_NAME_MAX   64  /* rule and plan names */
#define POLICY_MAX_STATUS 16  /* failure_status entries */
#define POLICY_ADDR_MAX   128 /* metrics.listen, with its NUL */
#define POLICY_STATUS_MAX 600 /* statuses 0..599 in rule->status_bits */
#define POLICY_RESPONSE_MSG                                                    \
	"rl-response"       /* result_message of count:                        \
	                     * response by default */
#define POLICY_TOKEN_MIN 16 /* admin token bytes */
#define POLICY_TOKEN_MAX 256

/* A plan (plans: { name: { rate, burst, quota } }). A field given as
 * "none" means "no limit of that kind for this plan": rules taking it
 * from the plan produce no check for tenants on it. */
struct plan {
	char             *name;
	bool              has_rate; /* rate given and not "none" */
	int64_t           rate;     /* N per <period_us> */
	int64_t           period_us;
	enum lim_calendar rate_cal; /* "/month" -> LIM_CAL_MONTH (a
	                             * fixed-window rule's calendar) */
	int64_t           burst; /* default 1 */
	bool              has_quota;
	int64_t           quota; /* N per <quota_period_us> or calendar */
	int64_t           quota_period_us;
	enum lim_calendar quota_cal; /* "/month" -> LIM_CAL_MONTH */
	int               line;
};

/* tenants: { tenant: plan }, sorted by tenant for bsearch. */
struct tenant_plan {
	char  *tenant;
	size_t len;
	int    plan; /* index in policy->plans */
};

/* plan_lookup: how a request finds its tenant's plan (policy_tenant_plan). */
struct plan_lookup {
	char   *arg;          /* message arg naming the plan; "plan" */
	char   *tenant_arg;   /* message arg naming the tenant; "tenant" */
	char   *redis_hash;   /* HGET <redis_hash> <tenant>; NULL = none */
	uint64_t redis_hash_id; /* util_fnv1a of redis_hash, set with it:
	                         * which hash a cached answer came from */
	int     default_plan; /* index, or -1 when no plans */
	int64_t cache_us;     /* how long a Redis answer may be reused */
};

/* What one message means to one rule (see policy->msgs). */
enum rule_role {
	ROLE_REQUEST = 0, /* rule->message: check (or acquire) */
	ROLE_RESULT,      /* rule->result_message: count a failure */
	ROLE_RELEASE,     /* rule->release: free a concurrency slot */
};

struct policy_binding {
	const struct rule *rule;
	enum rule_role     role;
};

/* Per-message rule lists, built at load time so the request path does one
 * lookup by message name and walks only the rules that apply. */
struct policy_msg {
	char                  *name;
	size_t                 len;
	struct policy_binding *b; /* in rule order */
	int                    n; /* <= POLICY_MAX_CHECKS (checked at load) */
	bool                   needs_plan; /* some bound rule has plan: */
};

struct tmpl; /* a compiled key template (keys.c) */
struct cidr; /* an address range (cidr.h) */

#define POLICY_ALLOW_ARG "ip" /* the message arg an allow: list tests */
#define POLICY_ALLOW_MAX 1024 /* ranges in one rule's allow:, all told */

struct rule {
	char             *name;
	char             *message; /* the SPOE message it applies to */
	struct tmpl      *key;
	struct tmpl      *fallback; /* missing: <template> */
	struct lim_params lim;
	enum fail_mode    fail;
	enum missing_mode missing;
	enum store_kind   store;
	bool              shadow;
	bool              headers;  /* listed in the RateLimit headers */
	int64_t           cost;     /* when cost_arg is NULL */
	char             *cost_arg; /* integer message arg giving the cost */
	int               index;    /* position in policy->rules */
	int               metrics_slot; /* its counters' slot, set by main
	                                 * before the workers see the policy */
	int line;                       /* in the policy file */
	/* added after the first contract */
	int             col;
	char           *key_prefix; /* "rl:{<name>:" */
	enum count_mode count;
	char        *result_message; /* count: failures; "<message>-result" */
	int          failure_status[POLICY_MAX_STATUS]; /* 401, 403 */
	int          nfailure_status;
	char        *release; /* concurrency: message freeing the slot */
	struct tmpl *id;      /* member: concurrency (default "{id}"),
	                       * sliding-log when given */
	enum rule_plan     plan;
	struct lim_params *plan_lim; /* [policy->nplans] when plan != NONE;
	                              * .rate == 0: no limit on that plan */
	int ipv6_prefix;             /* default for {ip} without /N; 64 */
	/* added for operators (issue 18) */
	struct cidr *allow; /* allow: the ranges, lists expanded;
	                     * a request whose "ip" arg is in one
	                     * gets no check of this rule */
	int nallow;
	/* added for issue 19 (the response phase) */
	uint64_t status_bits[(POLICY_STATUS_MAX + 63) / 64];
	/* statuses the result message charges:
	 * failure_status, or status: classes
	 * (5xx); all set for count: response
	 * without status: */
	/* added for issue 19, item 3 (reserve, then settle) */
	bool    reserves;    /* reserve: given; lim.reserve_lease_us > 0 */
	int64_t reserve;     /* the units held when reserve_arg is NULL */
	char   *reserve_arg; /* integer message arg giving the units */
};

/* A settle message a reload left without a rule (policy_orphan.h). */
#define POLICY_MAX_ORPHANS 8
struct policy_orphan {
	char    message[64]; /* the removed rules' result message */
	char    rules[128];  /* their names, comma-separated (cut) */
	int64_t until_us;    /* util_now_us() at the reload + lease */
};

struct policy {
	char   *path;
	char   *listen; /* host:port or unix:/path */
	int     workers;
	char   *redis_url;
	int64_t redis_timeout_us;
	int64_t redis_batch_wait_us; /* read at start only */
	int     pool_size;
	int     max_conns;
	int     max_inflight; /* per worker (struct conn_budget) */
	int64_t idle_timeout_us;
	int64_t processing_timeout_us; /* HAProxy's, to validate against */
	size_t  local_max_keys;
	enum headers_mode headers;
	bool              shadow_all; /* global shadow switch */
	struct rule      *rules;
	int               nrules;
	_Atomic int       refs; /* C11 atomic; see policy_ref() */
	/* added after the first contract */
	char               *redis_username; /* NULL: from the URL, or none */
	char               *redis_password;
	struct plan        *plans;
	int                 nplans;
	struct tenant_plan *tenants; /* sorted by tenant */
	int                 ntenants;
	struct plan_lookup  plan_lookup;
	struct policy_msg  *msgs; /* one per distinct message name */
	int                 nmsgs;
	/* added for operations (issue 7); fixed arrays, nothing to free */
	char metrics_listen[POLICY_ADDR_MAX]; /* metrics.listen:
	                                       * host:port for /metrics and
	                                       * /healthz;
	                                       * "" = no metrics server */
	int log_level;              /* log.level (enum log_level), or -1
	                             * when the file does not say */
	double log_sample;          /* log.sample: fraction of decisions
	                             * logged, 0 (none) .. 1 (all) */
	uint64_t log_sample_thresh; /* log_sample * 2^32: a decision
	                             * is logged when a 32-bit random
	                             * number is below it; 0 = off */
	/* added for operators (issue 18) */
	bool overrides; /* poll the runtime overrides
	                 * (ovcache.h); default true; read at
	                 * start only */
	/* added for the admin API (issue 18) */
	char  admin_listen[POLICY_ADDR_MAX]; /* "" = off */
	char *admin_token;                   /* NULL = off; never logged */
	/* added for issue 19 (settles orphaned by a reload); set before
	 * the workers see the policy (policy_note_orphans) */
	struct policy_orphan orphans[POLICY_MAX_ORPHANS];
	int                  norphans;
};

/* One limit check for one request, built by policy_build_checks(). */
enum check_kind {
	CHECK_EVAL = 0,     /* evaluate <lim> on <key> */
	CHECK_DENY_MISSING, /* key arg missing and missing: deny */
};

struct check {
	const struct rule *rule;
	enum check_kind    kind;
	struct lim_params  lim; /* the rule's, or its tenant plan's */
	int                op;  /* enum lim_op */
	int64_t            cost;
	char               key[POLICY_KEY_MAX + 1]; /* "rl:{rule:key}" */
	size_t             keylen;
	char               member[POLICY_MEMBER_MAX + 1];
	size_t             memberlen;
	/* added after the first contract */
	unsigned flags; /* LIM_FL_*: SHADOW for shadow rules or
	                 * the global shadow switch */
	int plan;       /* plan index used for <lim>, or -1 */
};

/* Defaults of what the file does not say. */
#define POLICY_DEF_LISTEN    "127.0.0.1:12345"
#define POLICY_DEF_WORKERS   2
#define POLICY_DEF_REDIS_URL "redis://127.0.0.1:6379/0"
#define POLICY_DEF_REDIS_TIMEOUT                                               \
	(10 * 1000) /* 10ms: one LAN round                                     \
	             * trip plus the script,                                   \
	             * well inside HAProxy's                                   \
	             * timeout processing */
#define POLICY_DEF_POOL_SIZE 1
#define POLICY_DEF_MAX_CONNS 10000
/* 4096 requests of about 14 KB: 56 MB per worker at most, and room for
 * 40,000 decisions/s per worker each waiting 100 ms */
#define POLICY_DEF_MAX_INFLIGHT 4096
#define POLICY_DEF_IDLE_TIMEOUT                                                \
	(120 * LIM_USEC_PER_SEC) /* past HAProxy's                             \
	                          * timeout idle (30s)                         \
	                          * and the shipped                            \
	                          * timeout server (1m):                       \
	                          * HAProxy closes first */
#define POLICY_DEF_ADMIN_LISTEN "127.0.0.1:9181"
#define POLICY_DEF_PROCESSING                                                  \
	(100 * 1000) /* the shipped timeout processing                         \
	              */
#define POLICY_DEF_LOCAL_KEYS    100000
#define POLICY_DEF_PLAN_CACHE    (30 * LIM_USEC_PER_SEC)
#define POLICY_DEF_LEASE         (60 * LIM_USEC_PER_SEC)
#define POLICY_DEF_RESERVE_LEASE (10 * 60 * LIM_USEC_PER_SEC) /* reserve: */
#define POLICY_DEF_MAX_DELAY     (250 * 1000)                 /* mode: delay */
#define POLICY_WARN_LOG_LIMIT    5000 /* sliding-log memory is O(limit) */
#define POLICY_BLOCK_MAX                                                       \
	(30LL * 86400 * LIM_USEC_PER_SEC) /* longest block or block_max: 30d   \
	                                   */
#define POLICY_WARN_RATE_EXCESS 0.01      /* whole-µs emission interval, 1 % */
#define POLICY_WARN_MAX_DELAY   LIM_USEC_PER_SEC

/* Reads and validates <path>. Returns a new policy (refs = 1; release with
 * policy_unref()), or NULL with <*err> set to a malloc'ed text listing every
 * error as "file:line:col: field: message", one per line. Warnings (the
 * file is valid but probably not what was meant) go to log_warn(). */
struct policy *policy_load(const char *path, char **err);

/* policy_load() that hands warnings to the caller instead of the log: on
 * return <*warn> is NULL or a malloc'ed text, one "file:line:col: field:
 * message" per line, whether the load succeeded or not. <warn> may be
 * NULL (then warnings are logged). The caller frees <*err> and <*warn>. */
struct policy *policy_load_with_warnings(const char *path, char **err,
                                         char **warn);

/* Takes a reference (atomic; any thread). Returns <p>. */
struct policy *policy_ref(struct policy *p);
/* Drops a reference; the last one frees <p>. NULL is a no-op. */
void policy_unref(struct policy *p);

/* A policy as one worker uses it: requests pin it with a plain counter
 * (the worker's own, one thread), so the request path pays no atomic; the
 * policy's shared refcount moves only at reload. */
struct policy_pin {
	struct policy *p;
	int            inflight; /* requests built under it */
	int            retired;  /* a newer policy took over */
};

/* A pin of its own on <p> (a reference taken). */
struct policy_pin *policy_pin_new(struct policy *p);
/* Pins <pin>'s policy for one request; policy_unpin() when it ends. */
struct policy_pin *policy_pin(struct policy_pin *pin);
void               policy_unpin(struct policy_pin *pin);
/* A newer policy took over: <pin> goes now, or with its last request. */
void policy_pin_retire(struct policy_pin *pin);

/* Builds the checks that <m> triggers under <p> into <out> (at most <max>).
 * Rules whose key arg is missing follow their missing: mode (skip: no
 * check; deny: a CHECK_DENY_MISSING check; fallback: the fallback key).
 * Returns the number of checks written. Never fails: a message that names
 * no rule yields 0 checks. Allocation-free; safe from any thread.
 *
 * This is policy_build_checks_in_plan() with the plan policy_tenant_plan(p,
 * m, NULL, NULL) gives (static tenants, the plan arg, the default; never
 * Redis).
 *
 * What each binding of <m> produces (policy_msg):
 *   request, count: all      op CHECK, cost = cost: (constant or arg)
 *   request, count: failures op PEEK, cost 1: decided as one more
 *                            failure would be, charged nothing, so a client
 *                            whose failure budget is spent is refused
 *   result (rule->result_message, "<message>-result" by default) of a
 *            count: failures rule: op FORCE, cost 1, only when the
 *            message's "status" arg (int or decimal string) is one of
 *            failure_status (401, 403); any other status, or none: no check
 *   request, count: response (or charge: response) op PEEK, cost 1, as
 *            for failures: a key with no unit left (in debt) is refused
 *   result (POLICY_RESPONSE_MSG by default) of a count: response rule:
 *            op FORCE, cost = cost: (a constant, or the arg it names read
 *            from the response, 0..POLICY_COST_MAX), only when "status" is
 *            in status_bits (status: [401, 403] or 5xx; every status
 *            without status:); a cost arg missing or malformed: no check,
 *            the rule listed in policy_rejects
 *   request, concurrency     op CHECK, cost, member = expanded id:
 *   release (rule->release)  op RELEASE, cost 0, same key and member
 * A missing key or id arg at request time follows missing:; at result and
 * release time there is nothing to refuse, so deny behaves as skip (a
 * fallback key is still used). A cost arg that is missing, negative or not
 * an integer follows missing: too (deny, skip; a fallback means cost 1);
 * one past int64 is a cost that can never fit (LIM_COST_MAX + 1).
 * If the fallback key is missing as well, the check is CHECK_DENY_MISSING:
 * a rule is never silently unlimited. Sliding-log checks get the expanded
 * id: as member when the rule has one, else an empty member (the store
 * makes a unique one). */
int policy_build_checks(const struct policy *p, const struct spop_message *m,
                        struct check *out, int max);

/* ---- plans ---------------------------------------------------------------
 *
 * A tenant's plan is resolved in this order:
 *   1. tenants: the static override for the value of the <tenant_arg> arg;
 *   2. the <plan_lookup.arg> arg, when it names a known plan;
 *   3. <resolve>, when given: the Redis-hash lookup (HGET <redis_hash>
 *      <tenant>). It is a callback so the store can answer from its own
 *      cache (kept for <plan_lookup.cache_us>) without this module knowing
 *      about hiredis; it must not block. It returns a plan index, -1 (the
 *      tenant has no plan there: the default applies), or one of
 *      POLICY_PLAN_WAIT (the answer is on its way: the caller holds the
 *      request until it comes, then resolves again) and POLICY_PLAN_UNKNOWN
 *      (Redis cannot say now), which policy_tenant_plan() passes on;
 *   4. plan_lookup.default.
 * A plan passed to policy_build_checks_in_plan() that is not an index (the
 * two above included) means the default plan.
 */
#define POLICY_PLAN_WAIT    (-2)
#define POLICY_PLAN_UNKNOWN (-3)

typedef int policy_plan_resolver(void *ctx, const struct policy *p,
                                 const char *tenant, size_t len);

/* Returns the plan index for <m> (see above), -1 when <p> has no plans,
 * or what <resolve> said when it has no answer (POLICY_PLAN_WAIT,
 * POLICY_PLAN_UNKNOWN). Allocation-free. */
int policy_tenant_plan(const struct policy *p, const struct spop_message *m,
                       policy_plan_resolver *resolve, void *ctx);

/* Returns the index of the plan named <name> (<len> bytes), or -1. */
int policy_plan_index(const struct policy *p, const char *name, size_t len);

/* Returns true when some rule bound to <m>'s name takes its limits from a
 * plan, i.e. when resolving the plan is worth anything for this message. */
bool policy_needs_plan(const struct policy *p, const struct spop_message *m);

/* policy_build_checks() with the tenant plan already resolved: <plan> is a
 * plan index, or -1 for plan_lookup.default. Rules with plan: rate or
 * quota take their lim_params from it (no check when that plan has "none"
 * for it); the others ignore it. */
int policy_build_checks_in_plan(const struct policy       *p,
                                const struct spop_message *m, int plan,
                                struct check *out, int max);

/* What did not fit in the <max> checks of
 * policy_build_checks_with_overflow(): a NOTIFY may carry several messages
 * (a spoe-group), and one request holds POLICY_MAX_CHECKS checks in all,
 * which the validator, seeing one message at a time, cannot enforce. */
struct policy_overflow {
	int           n;     /* checks that did not fit */
	struct check *worst; /* the caller's; when n > 0, the one of
	                      * them that weighs most on the
	                      * request: a fail: closed rule not in
	                      * shadow, then one in shadow, then the
	                      * first */
};

/* count: response rules whose response carried a cost that is missing or
 * malformed (result_cost() in policy.c): no check, nothing charged; the caller
 * counts and logs them. */
struct policy_rejects {
	int                n;
	const struct rule *rule[POLICY_MAX_CHECKS];
};

/* policy_build_checks_in_plan() that also accounts for the checks beyond
 * <max> (a binding that would give no check, say missing: skip, is no
 * overflow): adds their number to <ov->n> and keeps the weightiest in
 * <*ov->worst> across calls, so one <ov> (n = 0 to start) can follow all
 * the messages of a NOTIFY. <ov> may be NULL. */
int policy_build_checks_with_overflow(const struct policy       *p,
                                      const struct spop_message *m, int plan,
                                      struct check *out, int max,
                                      struct policy_overflow *ov);

/* The largest cost a response may report: 2^53, the largest integer the
 * script's doubles hold exactly. More, or a negative, fractional or
 * non-numeric cost, is rejected (policy_rejects). */
#define POLICY_COST_MAX (INT64_C(1) << 53)

/* 1 if <status> is one <r>'s result message charges (status_bits). */
bool policy_status_matches(const struct rule *r, int64_t status);

/* policy_build_checks_with_overflow() that also lists in <rej> (n = 0 to
 * start; may be NULL) the rules whose response cost was rejected. */
int policy_build_checks_full(const struct policy       *p,
                             const struct spop_message *m, int plan,
                             struct check *out, int max,
                             struct policy_overflow *ov,
                             struct policy_rejects  *rej);

/* Returns the bindings of the message named <name>, or NULL. */
const struct policy_msg *policy_find_msg(const struct policy *p,
                                         const char *name, size_t len);

/* ---- internal: between policy_parse.c and policy.c ----------------------- */

/* Builds p->msgs from p->rules. Returns 0, or -1 when a message has more
 * than POLICY_MAX_CHECKS bindings (<*name> says which). */
int policy__index(struct policy *p, const char **name);
/* Frees <p> and everything it owns, whatever its refs. NULL is a no-op. */
void policy__free(struct policy *p);

#endif
