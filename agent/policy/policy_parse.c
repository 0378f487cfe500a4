/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Policy file -> struct policy: libyaml's document API gives a node tree
 * with line and column marks; keyword tables (one per section: top level,
 * redis, local, metrics, log, plan_lookup, plans.<name>, rules[i]) say
 * what each key is, its type, bounds and default, and drive the generic
 * mapping walker of yamlkw.c. The walker stores typed values into the
 * target struct and remembers which node set which keyword, so the
 * cross-field checks here that follow (a rule's algorithm against its
 * rate/limit/window, plan names, templates) can point at the right line
 * too.
 *
 * Every problem is collected, never just the first: errors as
 * "file:line:col: field.path: message" lines, warnings likewise in their
 * own list. Nothing here runs per request and nothing here is shared
 * with other threads until policy_load_with_warnings() returns.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "keys.h"
#include "log.h"
#include "policy.h"
#include "policy_allow.h"
#include "store.h"
#include "util.h"
#include "yamlkw.h"

#define MS  1000LL
#define SEC LIM_USEC_PER_SEC

struct ctx {
	struct yamlkw  y; /* the document and its reports */
	struct policy *p;
	/* plan_lookup.default, resolved once the plans are known */
	char               *plan_default;
	yaml_node_t        *plan_default_node;
	struct allow_lists *allow; /* allow_lists:, while rules are read */
};

static void __attribute__((format(printf, 4, 5)))
error_at(struct ctx *c, const yaml_node_t *n, const char *path, const char *fmt,
         ...)
{
	va_list ap;

	va_start(ap, fmt);
	yamlkw_verror(&c->y, n, path, fmt, ap);
	va_end(ap);
}

static void __attribute__((format(printf, 4, 5)))
warn_at(struct ctx *c, const yaml_node_t *n, const char *path, const char *fmt,
        ...)
{
	va_list ap;

	va_start(ap, fmt);
	yamlkw_vwarn(&c->y, n, path, fmt, ap);
	va_end(ap);
}

/* ---- keyword tables ----------------------------------------------------- */

static const char *const headers_names[] = { "ietf", "legacy", "both", "none",
	                                     NULL };
static const char *const fail_names[] = { "open", "closed", "local", NULL };
static const char *const store_names[] = { "redis", "local", NULL };
static const char *const count_names[] = { "all", "failures", "response",
	                                   NULL };
static const char *const charge_names[] = { "request", "response", NULL };
static const char *const plan_names[] = { "none", "rate", "quota", NULL };
static const char *const mode_names[] = { "meter", "delay", NULL };

static const struct kw redis_kw[] = {
	{ "url", KW_STR, FIELD(struct policy, redis_url), 0, 0, NULL, NULL, 0,
	  "redis://host:port/db, redis+sentinel://..., redis+cluster://..., unix:/path" },
	{ "timeout", KW_DURATION, FIELD(struct policy, redis_timeout_us), 100,
	  10 * SEC, NULL, NULL, 0,
	  "per decision; past it the fail mode applies (10ms)" },
	{ "batch_wait", KW_DURATION, FIELD(struct policy, redis_batch_wait_us),
	  0, 10 * MS, NULL, NULL, 0,
	  "longest a request waits for others to share its script call (0)" },
	{ "password", KW_STR, FIELD(struct policy, redis_password), 0, 0, NULL,
	  NULL, 0, "AUTH password" },
	{ "username", KW_STR, FIELD(struct policy, redis_username), 0, 0, NULL,
	  NULL, 0, "ACL user (Redis 6+)" },
	/* Handled by redis_env(): the value is the name of a variable. */
	{ "password_env", KW_NODE, 0, 0, 0, 0, NULL, NULL, 0,
	  "environment variable holding the AUTH password" },
	{ "username_env", KW_NODE, 0, 0, 0, 0, NULL, NULL, 0,
	  "environment variable holding the ACL user" },
};

static const struct kw local_kw[] = {
	{ "max_keys", KW_INT, FIELD(struct policy, local_max_keys), 1,
	  100000000, NULL, NULL, 0,
	  "keys kept by the in-process tier (100000)" },
};

enum top_kw {
	TK_LISTEN = 0,
	TK_WORKERS,
	TK_REDIS,
	TK_POOL,
	TK_MAXCONNS,
	TK_MAXINFLIGHT,
	TK_IDLE,
	TK_HEADERS,
	TK_SHADOW,
	TK_LOCAL,
	TK_PLANS,
	TK_TENANTS,
	TK_LOOKUP,
	TK_RULES,
	TK_METRICS,
	TK_LOG,
	TK_PROCESSING,
	TK_ALLOW,
	TK_OVERRIDES,
	TK_ADMIN,
	TK_COUNT
};

static const struct kw top_kw[TK_COUNT] = {
	[TK_LISTEN] = { "listen", KW_STR, FIELD(struct policy, listen), 0, 0,
	                NULL, NULL, 0,
	                "host:port or unix:/path (127.0.0.1:12345)" },
	[TK_WORKERS] = { "workers", KW_INT, FIELD(struct policy, workers), 1,
	                 256, NULL, NULL, 0, "event-loop threads (2)" },
	[TK_REDIS] = { "redis", KW_SECTION, 0, 0, 0, 0, NULL, redis_kw,
	               ARRAY_SIZE(redis_kw), "the Redis store" },
	[TK_POOL] = { "pool_size", KW_INT, FIELD(struct policy, pool_size), 1,
	              10000, NULL, NULL, 0,
	              "agents sharing this Redis; fail: local divides limits by it (1)" },
	[TK_MAXCONNS] = { "max_conns", KW_INT, FIELD(struct policy, max_conns),
	                  1, 10000000, NULL, NULL, 0,
	                  "HAProxy connections accepted (10000)" },
	[TK_MAXINFLIGHT] = { "max_inflight", KW_INT,
	                     FIELD(struct policy, max_inflight), 1, 1000000,
	                     NULL, NULL, 0,
	                     "requests in flight per worker; past it reads wait (4096)" },
	[TK_PROCESSING] = { "processing_timeout", KW_DURATION,
	                    FIELD(struct policy, processing_timeout_us),
	                    SEC / 1000, 60 * SEC, NULL, NULL, 0,
	                    "HAProxy's spoe timeout processing: every answer must fit (100ms)" },
	[TK_IDLE] = { "idle_timeout", KW_DURATION,
	              FIELD(struct policy, idle_timeout_us), SEC / 10,
	              24 * 3600 * SEC, NULL, NULL, 0,
	              "idle SPOP connections are closed (30s)" },
	[TK_HEADERS] = { "headers", KW_ENUM, FIELD(struct policy, headers), 0,
	                 0, headers_names, NULL, 0,
	                 "ietf | legacy | both | none (ietf)" },
	[TK_SHADOW] = { "shadow", KW_BOOL, FIELD(struct policy, shadow_all), 0,
	                0, NULL, NULL, 0,
	                "every rule reports and never denies (false)" },
	[TK_LOCAL] = { "local", KW_SECTION, 0, 0, 0, 0, NULL, local_kw,
	               ARRAY_SIZE(local_kw), "the in-process tier" },
	[TK_PLANS] = { "plans", KW_NODE, 0, 0, 0, 0, NULL, NULL, 0,
	               "name: { rate, burst, quota }" },
	[TK_TENANTS] = { "tenants", KW_NODE, 0, 0, 0, 0, NULL, NULL, 0,
	                 "tenant: plan (static overrides)" },
	[TK_LOOKUP] = { "plan_lookup", KW_NODE, 0, 0, 0, 0, NULL, NULL, 0,
	                "{ arg, tenant_arg, redis_hash, default, cache }" },
	[TK_RULES] = { "rules", KW_NODE, 0, 0, 0, 0, NULL, NULL, 0,
	               "the limits" },
	[TK_METRICS] = { "metrics", KW_NODE, 0, 0, 0, 0, NULL, NULL, 0,
	                 "{ listen }: /metrics and /healthz (none)" },
	[TK_LOG] = { "log", KW_NODE, 0, 0, 0, 0, NULL, NULL, 0,
	             "{ level, sample }" },
	[TK_ALLOW] = { "allow_lists", KW_NODE, 0, 0, 0, 0, NULL, NULL, 0,
	               "name: [address ranges] for rules' allow:" },
	[TK_OVERRIDES] = { "overrides", KW_BOOL,
	                   FIELD(struct policy, overrides), 0, 0, NULL, NULL, 0,
	                   "poll Redis for runtime overrides (true; at restart)" },
	[TK_ADMIN] = { "admin", KW_NODE, 0, 0, 0, 0, NULL, NULL, 0,
	               "{ listen, token_file | token_env }: the admin API (off)" },
};

struct metrics_src {
	char *listen;
};

static const struct kw metrics_kw[] = {
	{ "listen", KW_STR, FIELD(struct metrics_src, listen), 0, 0, NULL, NULL,
	  0, "host:port, [v6]:port or :port for GET /metrics and /healthz" },
};

struct log_src {
	int   level;
	char *sample;
};

static const char *const level_names[] = { "error", "warn", "info", "debug",
	                                   NULL };

enum log_kw { LGK_LEVEL = 0, LGK_SAMPLE, LGK_COUNT };

static const struct kw log_kw[LGK_COUNT] = {
	[LGK_LEVEL] = { "level", KW_ENUM, FIELD(struct log_src, level), 0, 0,
	                level_names, NULL, 0,
	                "error | warn | info (default) | debug; -v and -q win" },
	[LGK_SAMPLE] = { "sample", KW_STR, FIELD(struct log_src, sample), 0, 0,
	                 NULL, NULL, 0,
	                 "fraction of decisions logged, 0 (default) to 1" },
};

struct plan_src {
	char   *rate;
	char   *quota;
	int64_t burst;
};

enum plan_kw { PK_RATE = 0, PK_BURST, PK_QUOTA, PK_COUNT };

static const struct kw plan_kw[PK_COUNT] = {
	[PK_RATE] = { "rate", KW_STR, FIELD(struct plan_src, rate), 0, 0, NULL,
	              NULL, 0, "N/period, or none" },
	[PK_BURST] = { "burst", KW_INT, FIELD(struct plan_src, burst), 1,
	               1000000000000LL, NULL, NULL, 0, "(1)" },
	[PK_QUOTA] = { "quota", KW_STR, FIELD(struct plan_src, quota), 0, 0,
	               NULL, NULL, 0,
	               "N/period (N/month: calendar month, UTC), or none" },
};

struct lookup_src {
	char   *arg;
	char   *tenant_arg;
	char   *redis_hash;
	char   *def;
	int64_t cache_us;
};

enum lookup_kw {
	LK_ARG = 0,
	LK_TENANT,
	LK_HASH,
	LK_DEFAULT,
	LK_CACHE,
	LK_COUNT
};

static const struct kw lookup_kw[LK_COUNT] = {
	[LK_ARG] = { "arg", KW_STR, FIELD(struct lookup_src, arg), 0, 0, NULL,
	             NULL, 0, "message arg naming the plan (plan)" },
	[LK_TENANT] = { "tenant_arg", KW_STR,
	                FIELD(struct lookup_src, tenant_arg), 0, 0, NULL, NULL,
	                0, "message arg naming the tenant (tenant)" },
	[LK_HASH] = { "redis_hash", KW_STR,
	              FIELD(struct lookup_src, redis_hash), 0, 0, NULL, NULL, 0,
	              "Redis hash tenant -> plan" },
	[LK_DEFAULT] = { "default", KW_STR, FIELD(struct lookup_src, def), 0, 0,
	                 NULL, NULL, 0, "plan of tenants found nowhere" },
	[LK_CACHE] = { "cache", KW_DURATION, FIELD(struct lookup_src, cache_us),
	               0, 24 * 3600 * SEC, NULL, NULL, 0,
	               "reuse a Redis answer this long (30s)" },
};

struct rule_src {
	char   *name, *message, *key, *algorithm, *rate, *window, *missing;
	char   *cost, *result_message, *release, *id, *reserve;
	int64_t burst, limit, lease_us, max_delay_us, ipv6_prefix;
	int64_t block_us, block_max_us;
	int     fail, count, store, plan, mode, charge;
	bool    shadow, headers;
	int     status[POLICY_MAX_STATUS];
	int     nstatus;
};

enum rule_kw {
	RK_NAME = 0,
	RK_MESSAGE,
	RK_KEY,
	RK_ALGO,
	RK_RATE,
	RK_BURST,
	RK_LIMIT,
	RK_WINDOW,
	RK_FAIL,
	RK_SHADOW,
	RK_HEADERS,
	RK_MISSING,
	RK_COST,
	RK_COUNT_,
	RK_STATUS,
	RK_RESULT,
	RK_RELEASE,
	RK_ID,
	RK_LEASE,
	RK_MODE,
	RK_MAXDELAY,
	RK_STORE,
	RK_PLAN,
	RK_PREFIX,
	RK_ALLOW,
	RK_STATUS2,
	RK_CHARGE,
	RK_BLOCK,
	RK_BLOCKMAX,
	RK_RESERVE,
	RK_COUNT
};

static const struct kw rule_kw[RK_COUNT] = {
	[RK_NAME] = { "name", KW_STR, FIELD(struct rule_src, name), 0, 0, NULL,
	              NULL, 0, "unique; letters, digits, '-', '_', '.'" },
	[RK_MESSAGE] = { "message", KW_STR, FIELD(struct rule_src, message), 0,
	                 0, NULL, NULL, 0, "the SPOE message it applies to" },
	[RK_KEY] = { "key", KW_STR, FIELD(struct rule_src, key), 0, 0, NULL,
	             NULL, 0,
	             "template over message args: \"tenant:{tenant}\", \"{ip/64}\"" },
	[RK_ALGO] = { "algorithm", KW_STR, FIELD(struct rule_src, algorithm), 0,
	              0, NULL, NULL, 0,
	              "gcra (default), token-bucket, leaky-bucket, fixed-window, "
	              "sliding-window, sliding-log, concurrency" },
	[RK_RATE] = { "rate", KW_STR, FIELD(struct rule_src, rate), 0, 0, NULL,
	              NULL, 0, "N/period: 100/s, 600/min, 5/15m" },
	[RK_BURST] = { "burst", KW_INT, FIELD(struct rule_src, burst), 1,
	               1000000000000LL, NULL, NULL, 0,
	               "requests a fresh key may make at once (1)" },
	[RK_LIMIT] = { "limit", KW_INT, FIELD(struct rule_src, limit), 1,
	               1000000000000LL, NULL, NULL, 0,
	               "windows: units per window; concurrency: in flight" },
	[RK_WINDOW] = { "window", KW_STR, FIELD(struct rule_src, window), 0, 0,
	                NULL, NULL, 0,
	                "a duration, or day / month (fixed-window, UTC)" },
	[RK_FAIL] = { "fail", KW_ENUM, FIELD(struct rule_src, fail), 0, 0,
	              fail_names, NULL, 0,
	              "open (default) | closed (default with count: failures) | local" },
	[RK_SHADOW] = { "shadow", KW_BOOL, FIELD(struct rule_src, shadow), 0, 0,
	                NULL, NULL, 0, "evaluate and report, never deny" },
	[RK_HEADERS] = { "headers", KW_BOOL, FIELD(struct rule_src, headers), 0,
	                 0, NULL, NULL, 0,
	                 "listed in the RateLimit headers (true)" },
	[RK_MISSING] = { "missing", KW_STR, FIELD(struct rule_src, missing), 0,
	                 0, NULL, NULL, 0,
	                 "deny (default) | skip | a fallback key template" },
	[RK_COST] = { "cost", KW_STR, FIELD(struct rule_src, cost), 0, 0, NULL,
	              NULL, 0, "a constant (1) or \"{arg}\"" },
	[RK_COUNT_] = { "count", KW_ENUM, FIELD(struct rule_src, count), 0, 0,
	                count_names, NULL, 0,
	                "all (default) | failures | response" },
	[RK_STATUS] = { "failure_status", KW_NODE, 0, 0, 0, 0, NULL, NULL, 0,
	                "statuses counted as failures ([401, 403])" },
	[RK_RESULT] = { "result_message", KW_STR,
	                FIELD(struct rule_src, result_message), 0, 0, NULL,
	                NULL, 0,
	                "message carrying status (<message>-result for count: "
	                "failures, rl-response for count: response)" },
	[RK_RELEASE] = { "release", KW_STR, FIELD(struct rule_src, release), 0,
	                 0, NULL, NULL, 0,
	                 "concurrency: message that frees the slot" },
	[RK_ID] = { "id", KW_STR, FIELD(struct rule_src, id), 0, 0, NULL, NULL,
	            0, "concurrency: request id template ({id})" },
	[RK_LEASE] = { "lease", KW_DURATION, FIELD(struct rule_src, lease_us),
	               1000, 7 * 24 * 3600 * SEC, NULL, NULL, 0,
	               "concurrency: a lost release frees the slot after (60s); "
	               "reserve: an unsettled reservation is forgotten after "
	               "(10m)" },
	[RK_MODE] = { "mode", KW_ENUM, FIELD(struct rule_src, mode), 0, 0,
	              mode_names, NULL, 0,
	              "leaky-bucket: meter (default) | delay" },
	[RK_MAXDELAY] = { "max_delay", KW_DURATION,
	                  FIELD(struct rule_src, max_delay_us), 1, 60 * SEC,
	                  NULL, NULL, 0, "mode: delay: longest hold (250ms)" },
	[RK_STORE] = { "store", KW_ENUM, FIELD(struct rule_src, store), 0, 0,
	               store_names, NULL, 0, "redis (default) | local" },
	[RK_PLAN] = { "plan", KW_ENUM, FIELD(struct rule_src, plan), 0, 0,
	              plan_names, NULL, 0,
	              "rate | quota: limits from the tenant's plan" },
	[RK_PREFIX] = { "ipv6_prefix", KW_INT,
	                FIELD(struct rule_src, ipv6_prefix), 0, 128, NULL, NULL,
	                0, "IPv6 prefix of {ip} placeholders without /N (64)" },
	[RK_ALLOW] = { "allow", KW_NODE, 0, 0, 0, 0, NULL, NULL, 0,
	               "allow-list names or address ranges never limited by this rule" },
	[RK_STATUS2] = { "status", KW_NODE, 0, 0, 0, 0, NULL, NULL, 0,
	                 "count: response: statuses charged, a list of 401 or 5xx, or one "
	                 "(all)" },
	[RK_CHARGE] = { "charge", KW_ENUM, FIELD(struct rule_src, charge), 0, 0,
	                charge_names, NULL, 0,
	                "request (default) | response: the response's "
	                "cost (count: response for every status)" },
	[RK_BLOCK] = { "block", KW_DURATION, FIELD(struct rule_src, block_us),
	               SEC, POLICY_BLOCK_MAX, NULL, NULL, 0,
	               "penalty box: a key this rule denies is denied for this "
	               "long (10m)" },
	[RK_BLOCKMAX] = { "block_max", KW_DURATION,
	                  FIELD(struct rule_src, block_max_us), SEC,
	                  POLICY_BLOCK_MAX, NULL, NULL, 0,
	                  "penalty box: each repeat offence doubles the block, "
	                  "up to this (24h)" },
	[RK_RESERVE] = { "reserve", KW_STR, FIELD(struct rule_src, reserve), 0,
	                 0, NULL, NULL, 0,
	                 "units held at the request, settled by the "
	                 "response: a constant or \"{arg}\"" },
};

/* ---- top level ---------------------------------------------------------- */

static void
check_listen(struct ctx *c, yaml_node_t *n)
{
	const char *s = c->p->listen, *colon;
	int64_t     port;

	if (strncmp(s, "unix:", 5) == 0) {
		if (!s[5])
			error_at(c, n, "listen", "unix: needs a path");
		return;
	}
	colon = strrchr(s, ':');
	if (!colon || colon == s) {
		error_at(c, n, "listen",
		         "expected host:port or unix:/path, got \"%s\"", s);
		return;
	}
	if (yamlkw_parse_int(colon + 1, &port) == -1 || port < 1 ||
	    port > 65535)
		error_at(c, n, "listen", "port must be between 1 and 65535");
	if (s[0] != '[' && memchr(s, ':', (size_t)(colon - s)))
		error_at(c, n, "listen",
		         "IPv6 address must be in brackets: [::1]:port");
}

/* The whole URL is parsed here, as the store will, so that -c refuses
 * what the agent could not start with. */
static void
check_redis_url(struct ctx *c, yaml_node_t *n)
{
	const char       *u = c->p->redis_url;
	struct store_addr a;
	struct store_topo t;

	if (strncmp(u, "redis+sentinel://", 17) == 0) {
		if (store_parse_topo_url(u, &t) == -1)
			error_at(
				c, n, "redis.url",
				"expected redis+sentinel://"
				"[user:pass@]host[:port][,host[:port]...]/master[?db=N]");
	} else if (strncmp(u, "redis+cluster://", 16) == 0) {
		if (store_parse_topo_url(u, &t) == -1)
			error_at(c, n, "redis.url",
			         "expected redis+cluster://"
			         "[user:pass@]host[:port][,host[:port]...]");
	} else if (strncmp(u, "rediss://", 9) == 0) {
		error_at(c, n, "redis.url",
		         "TLS (rediss://) is not supported by hiredis 0.14");
	} else if (store_parse_url(u, &a) == -1) {
		error_at(c, n, "redis.url",
		         "expected redis://[user:pass@]host[:port][/db] "
		         "or unix:/path (a '@', ':' or '/' in the password is "
		         "written %%40, %%3A, %%2F)");
	}
}

static void
set_defaults(struct policy *p)
{
	p->listen = xstrdup(POLICY_DEF_LISTEN);
	p->workers = POLICY_DEF_WORKERS;
	p->redis_url = xstrdup(POLICY_DEF_REDIS_URL);
	p->redis_timeout_us = POLICY_DEF_REDIS_TIMEOUT;
	p->pool_size = POLICY_DEF_POOL_SIZE;
	p->max_conns = POLICY_DEF_MAX_CONNS;
	p->max_inflight = POLICY_DEF_MAX_INFLIGHT;
	p->idle_timeout_us = POLICY_DEF_IDLE_TIMEOUT;
	p->processing_timeout_us = POLICY_DEF_PROCESSING;
	p->local_max_keys = POLICY_DEF_LOCAL_KEYS;
	p->headers = HEADERS_IETF;
	p->overrides = true;
	p->plan_lookup.default_plan = -1;
	p->plan_lookup.cache_us = POLICY_DEF_PLAN_CACHE;
	p->log_level = -1;
	atomic_init(&p->refs, 1);
}

/* ---- operations: metrics, log, secrets from the environment ------------ */

/* A decision waits redis.timeout at most, then the rule's fail mode
 * answers; HAProxy waits processing_timeout (its timeout processing). At
 * or above it HAProxy gives up first, and the fail modes never apply. */
static void
check_timeouts(struct ctx *c, yaml_node_t *redis, yaml_node_t *processing)
{
	const struct policy *p = c->p;
	yaml_node_t         *n = yamlkw_get(&c->y, redis, "timeout");

	if (p->redis_timeout_us < p->processing_timeout_us)
		return;
	error_at(
		c, n ? n : processing,
		n ? "redis.timeout" : "processing_timeout",
		"redis.timeout (%lldms) must stay below processing_timeout "
		"(HAProxy's timeout processing, %lldms): past it HAProxy gives "
		"up first and the rules' fail modes never apply",
		(long long)(p->redis_timeout_us / 1000),
		(long long)(p->processing_timeout_us / 1000));
}

/* metrics.listen: what httpd_new() takes, "host:port", "[v6]:port" or
 * ":port" (all IPv4 interfaces); no unix sockets (Prometheus scrapes TCP). */
static void
check_metrics_listen(struct ctx *c, yaml_node_t *n, const char *s)
{
	const char *colon, *path = "metrics.listen";
	int64_t     port;

	if (strncmp(s, "unix:", 5) == 0) {
		error_at(c, n, path,
		         "unix sockets are not supported: host:port");
		return;
	}
	if (strlen(s) >= POLICY_ADDR_MAX) {
		error_at(c, n, path, "longer than %d characters",
		         POLICY_ADDR_MAX - 1);
		return;
	}
	colon = strrchr(s, ':');
	if (!colon) {
		error_at(c, n, path,
		         "expected host:port, [v6]:port or :port, got \"%s\"",
		         s);
		return;
	}
	if (s[0] == '[' ? colon[-1] != ']'
	                : memchr(s, ':', (size_t)(colon - s)) != NULL) {
		error_at(c, n, path,
		         "IPv6 address must be in brackets: [::1]:port");
		return;
	}
	if (yamlkw_parse_int(colon + 1, &port) == -1 || port < 1 ||
	    port > 65535 || colon[1] == '-')
		error_at(c, n, path, "port must be between 1 and 65535");
}

static void
parse_metrics(struct ctx *c, yaml_node_t *n)
{
	struct metrics_src src = { 0 };
	yaml_node_t       *seen[ARRAY_SIZE(metrics_kw)] = { 0 };

	if (n->type != YAML_MAPPING_NODE) {
		error_at(c, n, "metrics", "expected a mapping { listen }");
		return;
	}
	yamlkw_map(&c->y, n, "metrics", metrics_kw, ARRAY_SIZE(metrics_kw),
	           &src, seen);
	if (src.listen) {
		check_metrics_listen(c, seen[0], src.listen);
		snprintf(c->p->metrics_listen, sizeof(c->p->metrics_listen),
		         "%s", src.listen);
	}
	free(src.listen);
}

/* ---- admin: the operator's API (admin.h) --------------------------------- */

struct admin_src {
	char *listen;
	char *token_file;
	char *token_env;
};

enum admin_kw { AK_LISTEN = 0, AK_FILE, AK_ENV, AK_COUNT };

static const struct kw admin_kw[AK_COUNT] = {
	[AK_LISTEN] = { "listen", KW_STR, FIELD(struct admin_src, listen), 0, 0,
	                NULL, NULL, 0,
	                "host:port for /admin/ (" POLICY_DEF_ADMIN_LISTEN ")" },
	[AK_FILE] = { "token_file", KW_STR, FIELD(struct admin_src, token_file),
	              0, 0, NULL, NULL, 0, "file holding the bearer token" },
	[AK_ENV] = { "token_env", KW_STR, FIELD(struct admin_src, token_env), 0,
	             0, NULL, NULL, 0,
	             "environment variable holding the token" },
};

/* The token: the file's or the variable's text without its line end.
 * Never echoed in a message. Returns a malloc'ed copy or NULL. */
static char *
admin_token(struct ctx *c, yaml_node_t *n, const struct admin_src *s)
{
	char   buf[POLICY_TOKEN_MAX + 2];
	size_t len = 0;
	FILE  *f;

	if (s->token_file != NULL) {
		if ((f = fopen(s->token_file, "r")) == NULL) {
			error_at(c, n, "admin.token_file", "%s: %s",
			         s->token_file, strerror(errno));
			return NULL;
		}
		len = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
	} else if (getenv(s->token_env) != NULL) {
		len = strlen(getenv(s->token_env));
		if (len < sizeof(buf))
			memcpy(buf, getenv(s->token_env), len);
	}
	while (len > 0 && len < sizeof(buf) &&
	       (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
		len--;
	if (len < POLICY_TOKEN_MIN || len > POLICY_TOKEN_MAX ||
	    memchr(buf, '\0', len) != NULL) {
		error_at(c, n,
		         s->token_file ? "admin.token_file" : "admin.token_env",
		         "the token must be %d to %d bytes of text",
		         POLICY_TOKEN_MIN, POLICY_TOKEN_MAX);
		return NULL;
	}
	buf[len] = '\0';
	return xstrdup(buf);
}

/* Loopback: 127.0.0.0/8, [::1] or localhost; anything else is reachable
 * from elsewhere, which -c points out. */
static int
admin_loopback(const char *addr)
{
	return strncmp(addr, "127.", 4) == 0 ||
	       strncmp(addr, "[::1]:", 6) == 0 ||
	       strncmp(addr, "localhost:", 10) == 0;
}

static void
parse_admin(struct ctx *c, yaml_node_t *n)
{
	struct admin_src src = { 0 };
	yaml_node_t     *seen[AK_COUNT] = { 0 };
	const char      *addr;

	if (n->type != YAML_MAPPING_NODE) {
		error_at(c, n, "admin",
		         "expected a mapping { listen, token_file }");
		return;
	}
	yamlkw_map(&c->y, n, "admin", admin_kw, AK_COUNT, &src, seen);
	addr = src.listen ? src.listen : POLICY_DEF_ADMIN_LISTEN;
	if (src.listen)
		check_metrics_listen(c, seen[AK_LISTEN], src.listen);
	if ((src.token_file == NULL) == (src.token_env == NULL))
		error_at(c, n, "admin",
		         "give exactly one of token_file and "
		         "token_env: the API is never open without a token");
	else
		c->p->admin_token = admin_token(c, n, &src);
	if (!admin_loopback(addr))
		warn_at(c, seen[AK_LISTEN], "admin.listen",
		        "%s is not a loopback "
		        "address: the admin API is reachable from the network",
		        addr);
	snprintf(c->p->admin_listen, sizeof(c->p->admin_listen), "%s", addr);
	free(src.listen);
	free(src.token_file);
	free(src.token_env);
}

/* Strict fraction in [0, 1]: a decimal number, the whole text. */
static int
parse_fraction(const char *s, double *v)
{
	char  *end;
	double x;

	if (!*s || !((*s >= '0' && *s <= '9') || *s == '.'))
		return -1;
	errno = 0;
	x = strtod(s, &end);
	if (errno || *end || !isfinite(x) || x < 0 || x > 1)
		return -1;
	*v = x;
	return 0;
}

static void
parse_log(struct ctx *c, yaml_node_t *n)
{
	struct log_src src = { .level = -1 };
	yaml_node_t   *seen[LGK_COUNT] = { 0 };
	struct policy *p = c->p;
	double         x;

	if (n->type != YAML_MAPPING_NODE) {
		error_at(c, n, "log", "expected a mapping { level, sample }");
		return;
	}
	yamlkw_map(&c->y, n, "log", log_kw, LGK_COUNT, &src, seen);
	p->log_level = src.level;
	if (src.sample && parse_fraction(src.sample, &x) == -1) {
		error_at(c, seen[LGK_SAMPLE], "log.sample",
		         "expected a fraction "
		         "between 0 and 1 such as 0.01, got \"%s\"",
		         src.sample);
	} else if (src.sample) {
		p->log_sample = x;
		/* x * 2^32 is exact for the sample rates anyone writes and
		 * reaches 2^32 at 1: every draw of a 32-bit number is below. */
		p->log_sample_thresh = (uint64_t)ldexp(x, 32);
		if (x > 0 && p->log_sample_thresh == 0)
			p->log_sample_thresh = 1; /* tiny but not off */
	}
	free(src.sample);
}

/* redis.<field>_env: NAME -> the value of $NAME into <*dst>. <inline_kw>
 * is the plain keyword it excludes. The value is a secret: no message
 * ever quotes it, only the variable's name. */
static void
redis_env(struct ctx *c, yaml_node_t *redis, const char *key,
          const char *inline_kw, char **dst)
{
	yaml_node_t *n = yamlkw_get(&c->y, redis, key), *other;
	char         path[YAMLKW_PATH_MAX];
	const char  *name, *val;

	if (!n)
		return;
	yamlkw_path(path, "redis", key);
	if (!(name = yamlkw_scalar(&c->y, n, path,
	                           "an environment variable name")))
		return;
	if (!*name || strchr(name, '=')) {
		error_at(c, n, path, "not a variable name: \"%s\"", name);
		return;
	}
	if ((other = yamlkw_get(&c->y, redis, inline_kw)) != NULL) {
		error_at(c, n, path, "redis.%s is given too (line %d): use one",
		         inline_kw, (int)other->start_mark.line + 1);
		return;
	}
	if (!(val = getenv(name))) {
		error_at(c, n, path, "environment variable %s is not set",
		         name);
		return;
	}
	if (!*val) {
		error_at(c, n, path, "environment variable %s is empty", name);
		return;
	}
	free(*dst);
	*dst = xstrdup(val);
}

/* ---- plans -------------------------------------------------------------- */

static bool
valid_name(const char *s)
{
	size_t i, n = strlen(s);

	if (n == 0 || n > POLICY_NAME_MAX)
		return false;
	for (i = 0; i < n; i++) {
		char ch = s[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' ||
		      ch == '.'))
			return false;
	}
	return true;
}

/* Parses a rate "N/period" for <path>. Returns 0 or -1 (reported). */
static int
rate_of(struct ctx *c, yaml_node_t *n, const char *path, const char *s,
        int64_t *rate, int64_t *period, enum lim_calendar *cal)
{
	int64_t lead;
	char    num[24];
	size_t  k = strcspn(s, "/");

	*cal = LIM_CAL_NONE;
	if (k < sizeof(num)) {
		memcpy(num, s, k);
		num[k] = '\0';
		if (yamlkw_parse_int(num, &lead) == 0 && lead <= 0) {
			error_at(c, n, path, "rate must be > 0");
			return -1;
		}
	}
	if (lim_parse_rate(s, rate, period, cal) == -1 || *rate <= 0 ||
	    (*period <= 0 && *cal == LIM_CAL_NONE)) {
		error_at(c, n, path,
		         "expected N/period such as 100/s, 600/min, "
		         "5/15m, 10000/month, got \"%s\"",
		         s);
		return -1;
	}
	return 0;
}

static void
parse_plan(struct ctx *c, yaml_node_t *kn, yaml_node_t *vn, struct plan *pl)
{
	struct plan_src   src = { .burst = 1 };
	yaml_node_t      *seen[PK_COUNT] = { 0 };
	char              path[YAMLKW_PATH_MAX], sub[YAMLKW_PATH_MAX];

	snprintf(path, sizeof(path), "plans.%s", pl->name);
	pl->line = (int)kn->start_mark.line + 1;
	pl->burst = 1;
	if (!valid_name(pl->name))
		error_at(c, kn, path,
		         "plan name must be 1-%d letters, digits, "
		         "'-', '_' or '.'",
		         POLICY_NAME_MAX);
	if (vn->type != YAML_MAPPING_NODE) {
		error_at(c, vn, path,
		         "expected a mapping { rate, burst, quota }");
		return;
	}
	yamlkw_map(&c->y, vn, path, plan_kw, PK_COUNT, &src, seen);
	if (src.rate && strcmp(src.rate, "none") != 0 &&
	    rate_of(c, seen[PK_RATE], yamlkw_path(sub, path, "rate"), src.rate,
	            &pl->rate, &pl->period_us, &pl->rate_cal) == 0)
		pl->has_rate = true;
	if (src.quota && strcmp(src.quota, "none") != 0 &&
	    rate_of(c, seen[PK_QUOTA], yamlkw_path(sub, path, "quota"),
	            src.quota, &pl->quota, &pl->quota_period_us,
	            &pl->quota_cal) == 0)
		pl->has_quota = true;
	pl->burst = src.burst;
	if (!src.rate && !src.quota)
		error_at(c, vn, path,
		         "a plan needs rate or quota (or \"none\")");
	free(src.rate);
	free(src.quota);
}

static void
parse_plans(struct ctx *c, yaml_node_t *n)
{
	struct policy    *p = c->p;
	yaml_node_pair_t *pr;
	int               i;

	if (n->type != YAML_MAPPING_NODE) {
		error_at(c, n, "plans", "expected a mapping of plan names");
		return;
	}
	p->plans = xcalloc((size_t)(n->data.mapping.pairs.top -
	                            n->data.mapping.pairs.start) +
	                           1,
	                   sizeof(*p->plans));
	for (pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top;
	     pr++) {
		yaml_node_t *kn = yamlkw_node(&c->y, pr->key);
		yaml_node_t *vn = yamlkw_node(&c->y, pr->value);
		const char  *name =
			yamlkw_scalar(&c->y, kn, "plans", "a plan name");

		if (!name)
			continue;
		for (i = 0; i < p->nplans; i++)
			if (strcmp(p->plans[i].name, name) == 0)
				break;
		if (i < p->nplans) {
			error_at(c, kn, "plans", "duplicate plan \"%s\"", name);
			continue;
		}
		p->plans[p->nplans].name = xstrdup(name);
		parse_plan(c, kn, vn, &p->plans[p->nplans]);
		p->nplans++;
	}
}

static int
tenant_sort_cmp(const void *a, const void *b)
{
	const struct tenant_plan *x = a, *y = b;
	int r = memcmp(x->tenant, y->tenant, x->len < y->len ? x->len : y->len);

	if (r)
		return r;
	return x->len < y->len ? -1 : x->len > y->len;
}

static void
parse_tenants(struct ctx *c, yaml_node_t *n)
{
	struct policy    *p = c->p;
	yaml_node_pair_t *pr;
	char              path[YAMLKW_PATH_MAX];
	int              *first;

	if (n->type != YAML_MAPPING_NODE) {
		error_at(c, n, "tenants", "expected a mapping tenant: plan");
		return;
	}
	first = yamlkw_dups(&c->y, n);
	p->tenants = xcalloc((size_t)(n->data.mapping.pairs.top -
	                              n->data.mapping.pairs.start) +
	                             1,
	                     sizeof(*p->tenants));
	for (pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top;
	     pr++) {
		yaml_node_t *kn = yamlkw_node(&c->y, pr->key);
		yaml_node_t *vn = yamlkw_node(&c->y, pr->value);
		const char *t = yamlkw_scalar(&c->y, kn, "tenants", "a tenant"),
			   *plan;
		int idx;

		if (!t)
			continue;
		yamlkw_path(path, "tenants", t);
		if (!(plan = yamlkw_scalar(&c->y, vn, path, "a plan name")))
			continue;
		if ((idx = policy_plan_index(p, plan, strlen(plan))) < 0) {
			error_at(c, vn, path, "unknown plan \"%s\"", plan);
			continue;
		}
		if (first[pr - n->data.mapping.pairs.start] >= 0) {
			error_at(c, kn, path, "duplicate tenant");
			continue;
		}
		p->tenants[p->ntenants].tenant = xstrdup(t);
		p->tenants[p->ntenants].len = strlen(t);
		p->tenants[p->ntenants].plan = idx;
		p->ntenants++;
	}
	free(first);
	qsort(p->tenants, (size_t)p->ntenants, sizeof(*p->tenants),
	      tenant_sort_cmp);
}

static void
parse_lookup(struct ctx *c, yaml_node_t *n)
{
	struct lookup_src   src = { .cache_us = POLICY_DEF_PLAN_CACHE };
	yaml_node_t        *seen[LK_COUNT] = { 0 };
	struct plan_lookup *pl = &c->p->plan_lookup;

	if (n && n->type != YAML_MAPPING_NODE) {
		error_at(c, n, "plan_lookup", "expected a mapping");
		n = NULL;
	}
	if (n)
		yamlkw_map(&c->y, n, "plan_lookup", lookup_kw, LK_COUNT, &src,
		           seen);
	pl->arg = src.arg ? src.arg : xstrdup("plan");
	pl->tenant_arg = src.tenant_arg ? src.tenant_arg : xstrdup("tenant");
	pl->redis_hash = src.redis_hash;
	if (pl->redis_hash)
		pl->redis_hash_id = util_fnv1a(pl->redis_hash,
		                               strlen(pl->redis_hash));
	pl->cache_us = src.cache_us;
	c->plan_default = src.def;
	c->plan_default_node = seen[LK_DEFAULT] ? seen[LK_DEFAULT] : n;
	if (src.def) {
		pl->default_plan =
			policy_plan_index(c->p, src.def, strlen(src.def));
		if (pl->default_plan < 0)
			error_at(c, seen[LK_DEFAULT], "plan_lookup.default",
			         "unknown plan \"%s\"", src.def);
	}
}

/* ---- rules -------------------------------------------------------------- */

enum algo_family { FAM_TOKEN = 0, FAM_WINDOW, FAM_CONC };

static enum algo_family
family(enum lim_algo a)
{
	switch (a) {
	case LIM_FIXED_WINDOW:
	case LIM_SLIDING_WINDOW:
	case LIM_SLIDING_LOG:
		return FAM_WINDOW;
	case LIM_CONCURRENCY:
		return FAM_CONC;
	default:
		return FAM_TOKEN;
	}
}

struct rule_ctx {
	struct ctx      *c;
	struct rule     *r;
	struct rule_src *s;
	yaml_node_t    **seen;
	yaml_node_t     *node; /* the rule's mapping */
	char             path[YAMLKW_PATH_MAX];
	char             sub[YAMLKW_PATH_MAX];
};

static const char *
rpath(struct rule_ctx *rc, int kw)
{
	return yamlkw_path(rc->sub, rc->path, rule_kw[kw].name);
}

/* The node to blame for keyword <kw>: its value, else the rule itself. */
static yaml_node_t *
rnode(struct rule_ctx *rc, int kw)
{
	return rc->seen[kw] ? rc->seen[kw] : rc->node;
}

/* Reports keywords of <list> present in the rule but meaningless for it. */
static void
reject_fields(struct rule_ctx *rc, const int *list, size_t n, const char *why)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (rc->seen[list[i]])
			error_at(rc->c, rc->seen[list[i]], rpath(rc, list[i]),
			         "not used %s", why);
}

static struct tmpl *
compile_tmpl(struct rule_ctx *rc, int kw, const char *src)
{
	const char  *err;
	size_t       pos;
	struct tmpl *t;

	if (!*src) {
		error_at(rc->c, rnode(rc, kw), rpath(rc, kw), "empty template");
		return NULL;
	}
	t = keys_compile(src, (int)rc->s->ipv6_prefix, &err, &pos);
	if (!t)
		error_at(rc->c, rnode(rc, kw), rpath(rc, kw),
		         "%s at character %zu of \"%s\"", err, pos + 1, src);
	return t;
}

/* One status of failure_status: or status:, "401" or a class "5xx",
 * into s->status (a class N as N). Returns 0 or -1. */
static int
status_item(struct rule_ctx *rc, yaml_node_t *in, const char *ipath)
{
	struct rule_src *s = rc->s;
	const char      *v;
	int64_t          st;

	if (!(v = yamlkw_scalar(&rc->c->y, in, ipath, "a status")))
		return 0;
	if (strlen(v) == 3 && v[0] >= '1' && v[0] <= '5' &&
	    strcmp(v + 1, "xx") == 0) {
		st = v[0] - '0';
	} else if (yamlkw_parse_int(v, &st) == -1 || st < 100 || st > 599) {
		error_at(rc->c, in, ipath,
		         "expected an HTTP status 100-599 or "
		         "a class 1xx-5xx, got \"%s\"",
		         v);
		return 0;
	}
	if (s->nstatus == POLICY_MAX_STATUS) {
		error_at(rc->c, in, ipath, "at most %d statuses",
		         POLICY_MAX_STATUS);
		return -1;
	}
	s->status[s->nstatus++] = (int)st;
	return 0;
}

/* failure_status: or its newer name status: (one of them), a list or, for
 * status:, a single status or class. */
static void
rule_statuses(struct rule_ctx *rc)
{
	int               kw = rc->seen[RK_STATUS2] ? RK_STATUS2 : RK_STATUS;
	yaml_node_t      *n = rc->seen[kw];
	yaml_node_item_t *it;
	struct rule_src  *s = rc->s;
	const char       *path = rpath(rc, kw);
	char              ipath[YAMLKW_PATH_MAX];

	if (!n)
		return;
	s->nstatus = 0;
	if (rc->seen[RK_STATUS] && rc->seen[RK_STATUS2])
		error_at(rc->c, n, path,
		         "give status or failure_status, not both");
	if (n->type == YAML_SCALAR_NODE && kw == RK_STATUS2) {
		status_item(rc, n, path);
		return;
	}
	if (n->type != YAML_SEQUENCE_NODE) {
		error_at(rc->c, n, path, "expected a list of HTTP statuses");
		return;
	}
	for (it = n->data.sequence.items.start; it < n->data.sequence.items.top;
	     it++) {
		snprintf(ipath, sizeof(ipath), "%s[%d]", path,
		         (int)(it - n->data.sequence.items.start));
		if (status_item(rc, yamlkw_node(&rc->c->y, *it), ipath) == -1)
			break;
	}
	if (s->nstatus == 0 &&
	    n->data.sequence.items.start == n->data.sequence.items.top)
		error_at(rc->c, n, path, "empty list");
}

/* rate, or limit + window, into rc->r->lim for a window algorithm. */
static void
rule_window(struct rule_ctx *rc)
{
	struct rule_src   *s = rc->s;
	struct lim_params *l = &rc->r->lim;
	enum lim_calendar  cal;

	if (s->rate) {
		if (s->window || rc->seen[RK_LIMIT]) {
			error_at(
				rc->c, rnode(rc, RK_RATE), rpath(rc, RK_RATE),
				"give either rate or limit and window, not both");
			return;
		}
		if (rate_of(rc->c, rnode(rc, RK_RATE), rpath(rc, RK_RATE),
		            s->rate, &l->rate, &l->period_us, &cal) == 0)
			l->calendar = l->algo == LIM_FIXED_WINDOW
			                      ? cal
			                      : LIM_CAL_NONE;
		if (cal != LIM_CAL_NONE && l->algo != LIM_FIXED_WINDOW)
			error_at(
				rc->c, rnode(rc, RK_RATE), rpath(rc, RK_RATE),
				"calendar periods need algorithm fixed-window");
		return;
	}
	if (!rc->seen[RK_LIMIT])
		error_at(rc->c, rc->node, rpath(rc, RK_LIMIT),
		         "required for algorithm %s", lim_algo_name(l->algo));
	if (!s->window) {
		error_at(rc->c, rc->node, rpath(rc, RK_WINDOW),
		         "required for algorithm %s", lim_algo_name(l->algo));
		return;
	}
	l->rate = s->limit;
	if (strcmp(s->window, "day") == 0 || strcmp(s->window, "month") == 0) {
		if (l->algo != LIM_FIXED_WINDOW) {
			error_at(
				rc->c, rnode(rc, RK_WINDOW),
				rpath(rc, RK_WINDOW),
				"calendar windows need algorithm fixed-window");
			return;
		}
		l->calendar = s->window[0] == 'd' ? LIM_CAL_DAY : LIM_CAL_MONTH;
		l->period_us = l->calendar == LIM_CAL_DAY ? 86400 * SEC
		                                          : 30 * 86400 * SEC;
		return;
	}
	if (lim_parse_duration(s->window, &l->period_us) == -1 ||
	    l->period_us <= 0)
		error_at(
			rc->c, rnode(rc, RK_WINDOW), rpath(rc, RK_WINDOW),
			"expected a duration (1m, 1h, 1d) or day or month, got \"%s\"",
			s->window);
}

/* The algorithm-specific part: rc->r->lim, id, release. */
static void
rule_params(struct rule_ctx *rc)
{
	static const int conc_only[] = { RK_LEASE, RK_RELEASE };
	static const int conc_only_r[] = { RK_RELEASE }; /* reserve: leases */
	static const int token_only[] = { RK_BURST };
	static const int not_token[] = { RK_LIMIT, RK_WINDOW };
	static const int not_conc[] = { RK_RATE, RK_BURST, RK_WINDOW, RK_PLAN };
	static const int leaky_only[] = { RK_MODE, RK_MAXDELAY };
	struct rule_src *s = rc->s;
	struct rule     *r = rc->r;
	struct lim_params *l = &r->lim;
	enum algo_family   fam = family(l->algo);
	enum lim_calendar  cal;
	char               why[64];

	snprintf(why, sizeof(why), "by algorithm %s", lim_algo_name(l->algo));
	if (fam != FAM_CONC && s->reserve)
		reject_fields(rc, conc_only_r, ARRAY_SIZE(conc_only_r), why);
	else if (fam != FAM_CONC)
		reject_fields(rc, conc_only, ARRAY_SIZE(conc_only), why);
	if (fam != FAM_TOKEN)
		reject_fields(rc, token_only, ARRAY_SIZE(token_only), why);
	if (l->algo != LIM_LEAKY_BUCKET)
		reject_fields(rc, leaky_only, ARRAY_SIZE(leaky_only), why);
	if (rc->seen[RK_ID] && l->algo == LIM_SLIDING_LOG) {
		/* an id as the log's member would count a repeated id once in
		 * Redis (ZADD updates it): a client sending the same id would
		 * never be limited. Each request is its own entry instead. */
		warn_at(rc->c, rc->seen[RK_ID], rpath(rc, RK_ID),
		        "ignored by "
		        "sliding-log: each request is its own entry in the log");
		keys_free(r->id);
		r->id = NULL;
	} else if (rc->seen[RK_ID] && fam != FAM_CONC && !s->reserve) {
		error_at(rc->c, rc->seen[RK_ID], rpath(rc, RK_ID),
		         "not used %s", why);
	}
	switch (fam) {
	case FAM_TOKEN:
		reject_fields(rc, not_token, ARRAY_SIZE(not_token), why);
		if (r->plan == RULE_PLAN_QUOTA)
			error_at(rc->c, rnode(rc, RK_PLAN), rpath(rc, RK_PLAN),
			         "plan: quota needs algorithm fixed-window");
		if (r->plan != RULE_PLAN_NONE) {
			static const int given[] = { RK_RATE, RK_BURST };

			reject_fields(rc, given, ARRAY_SIZE(given),
			              "with plan: (the plan gives it)");
		} else if (!s->rate) {
			error_at(rc->c, rc->node, rpath(rc, RK_RATE),
			         "required for algorithm %s",
			         lim_algo_name(l->algo));
		} else if (rate_of(rc->c, rnode(rc, RK_RATE),
		                   rpath(rc, RK_RATE), s->rate, &l->rate,
		                   &l->period_us, &cal) == 0 &&
		           cal != LIM_CAL_NONE && l->period_us <= 0) {
			l->period_us = 30 * 86400 * SEC;
		}
		l->burst = rc->seen[RK_BURST]
		                   ? s->burst
		                   : (l->algo == LIM_TOKEN_BUCKET && l->rate > 0
		                              ? l->rate
		                              : 1);
		if (s->mode == 1)
			l->max_delay_us = rc->seen[RK_MAXDELAY]
			                          ? s->max_delay_us
			                          : POLICY_DEF_MAX_DELAY;
		else if (rc->seen[RK_MAXDELAY])
			error_at(rc->c, rc->seen[RK_MAXDELAY],
			         rpath(rc, RK_MAXDELAY),
			         "only with mode: delay");
		if (l->max_delay_us > 0 &&
		    l->max_delay_us + rc->c->p->redis_timeout_us >=
		            rc->c->p->processing_timeout_us)
			error_at(
				rc->c, rnode(rc, RK_MAXDELAY),
				rpath(rc, RK_MAXDELAY),
				"max_delay plus redis.timeout must stay below "
				"processing_timeout (HAProxy's timeout processing, %lldms)",
				(long long)(rc->c->p->processing_timeout_us /
			                    1000));
		else if (l->max_delay_us > POLICY_WARN_MAX_DELAY)
			warn_at(rc->c, rnode(rc, RK_MAXDELAY),
			        rpath(rc, RK_MAXDELAY),
			        "over 1s: HAProxy's timeout processing must exceed it");
		break;
	case FAM_WINDOW:
		if (r->plan == RULE_PLAN_QUOTA && l->algo != LIM_FIXED_WINDOW)
			error_at(rc->c, rnode(rc, RK_PLAN), rpath(rc, RK_PLAN),
			         "plan: quota needs algorithm fixed-window");
		if (r->plan != RULE_PLAN_NONE) {
			static const int given[] = { RK_RATE, RK_LIMIT,
				                     RK_WINDOW };

			reject_fields(rc, given, ARRAY_SIZE(given),
			              "with plan: (the plan gives it)");
		} else {
			rule_window(rc);
		}
		if (l->algo == LIM_SLIDING_LOG &&
		    l->rate > POLICY_WARN_LOG_LIMIT)
			warn_at(rc->c, rnode(rc, RK_LIMIT), rpath(rc, RK_LIMIT),
			        "sliding-log keeps one entry per request: limit %lld "
			        "costs O(limit) memory per key; prefer sliding-window",
			        (long long)l->rate);
		break;
	case FAM_CONC:
		reject_fields(rc, not_conc, ARRAY_SIZE(not_conc), why);
		if (!rc->seen[RK_LIMIT])
			error_at(rc->c, rc->node, rpath(rc, RK_LIMIT),
			         "required for algorithm concurrency");
		if (r->count == COUNT_FAILURES)
			error_at(
				rc->c, rnode(rc, RK_COUNT_),
				rpath(rc, RK_COUNT_),
				"count: failures does not apply to concurrency");
		if (r->count == COUNT_RESPONSE)
			error_at(
				rc->c,
				rnode(rc, rc->seen[RK_CHARGE] ? RK_CHARGE
			                                      : RK_COUNT_),
				rpath(rc, rc->seen[RK_CHARGE] ? RK_CHARGE
			                                      : RK_COUNT_),
				"a response's cost "
				"does not apply to concurrency (a slot is held, "
				"not spent): use a rate or window algorithm");
		if (rc->seen[RK_COST] && !r->cost_arg && r->cost > 1)
			warn_at(rc->c, rc->seen[RK_COST], rpath(rc, RK_COST),
			        "a concurrency rule holds one slot per "
			        "request: cost %lld counts as 1 (0 takes none)",
			        (long long)r->cost);
		l->rate = s->limit;
		l->period_us =
			rc->seen[RK_LEASE] ? s->lease_us : POLICY_DEF_LEASE;
		if (!r->id) {
			const char *terr;
			size_t      tpos;

			r->id = keys_compile("{id}", 64, &terr, &tpos);
		}
		if (s->release && r->message &&
		    strcmp(s->release, r->message) == 0)
			/* bound twice, each request would take its slot
			 * and release one in the same call */
			error_at(rc->c, rnode(rc, RK_RELEASE),
			         rpath(rc, RK_RELEASE),
			         "must differ from message");
		else if (s->release)
			r->release = xstrdup(s->release);
		else
			warn_at(rc->c, rc->node, rpath(rc, RK_RELEASE),
			        "none: slots are freed only when their lease expires");
		break;
	}
}

/* The penalty box: block and block_max into r->lim (copied to the plans'
 * limits by build_rule_plans()). Refused on a concurrency rule (a slot is
 * held, not a rate exceeded). store: local and the fail: local fallback
 * keep their blocks in the agent's local tier (local.c). */
static void
rule_block(struct rule_ctx *rc)
{
	struct rule_src *s = rc->s;
	struct rule     *r = rc->r;

	if (!rc->seen[RK_BLOCK]) {
		if (rc->seen[RK_BLOCKMAX])
			error_at(rc->c, rnode(rc, RK_BLOCKMAX),
			         rpath(rc, RK_BLOCKMAX),
			         "needs block: (the first offence's block)");
		return;
	}
	/* each said once: lim_params_init() would say it again */
	if (r->lim.algo == LIM_CONCURRENCY) {
		error_at(rc->c, rnode(rc, RK_BLOCK), rpath(rc, RK_BLOCK),
		         "does not apply to concurrency (a slot is held, "
		         "not a rate exceeded)");
		return;
	}
	if (rc->seen[RK_BLOCKMAX] && s->block_max_us < s->block_us) {
		error_at(rc->c, rnode(rc, RK_BLOCKMAX), rpath(rc, RK_BLOCKMAX),
		         "must be at least block (%llds)",
		         (long long)(s->block_us / SEC));
		return;
	}
	r->lim.block_us = s->block_us;
	r->lim.block_max_us = rc->seen[RK_BLOCKMAX] ? s->block_max_us : 0;
}

/* Sets statuses <lo>..<hi> in <r>'s status_bits. */
static void
status_set(struct rule *r, int lo, int hi)
{
	for (int st = lo; st <= hi; st++)
		r->status_bits[st / 64] |= UINT64_C(1) << (st % 64);
}

/* failure_status / status: into r->failure_status (the exact ones) and
 * r->status_bits (all, classes too); the default when neither is given. */
static void
rule_status_bits(struct rule_ctx *rc)
{
	struct rule_src *s = rc->s;
	struct rule     *r = rc->r;

	if (!rc->seen[RK_STATUS] && !rc->seen[RK_STATUS2]) {
		if (r->count == COUNT_RESPONSE) {
			status_set(r, 100, 599);
			return;
		}
		s->status[0] = 401;
		s->status[1] = 403;
		s->nstatus = 2;
	}
	r->nfailure_status = 0;
	for (int i = 0; i < s->nstatus; i++) {
		int st = s->status[i];

		if (st < 100) {
			status_set(r, st * 100, st * 100 + 99);
			continue;
		}
		status_set(r, st, st);
		r->failure_status[r->nfailure_status++] = st;
	}
}

/* The result message's name: result_message:, else "<message>-result"
 * (count: failures) or POLICY_RESPONSE_MSG (count: response). */
static void
rule_result_message(struct rule_ctx *rc)
{
	struct rule_src *s = rc->s;
	struct rule     *r = rc->r;

	if (s->result_message) {
		r->result_message = xstrdup(s->result_message);
	} else if (r->count == COUNT_RESPONSE) {
		r->result_message = xstrdup(POLICY_RESPONSE_MSG);
	} else if (r->message) {
		r->result_message =
			xmalloc(strlen(r->message) + sizeof("-result"));
		strcpy(r->result_message, r->message);
		strcat(r->result_message, "-result");
	}
	if (r->result_message && r->message &&
	    strcmp(r->result_message, r->message) == 0)
		error_at(rc->c, rnode(rc, RK_RESULT), rpath(rc, RK_RESULT),
		         "must differ from message");
}

/* charge: response is count: response for every status: folded into
 * s->count before anything reads it. */
static void
rule_charge(struct rule_ctx *rc)
{
	struct rule_src *s = rc->s;

	if (s->charge == 0)
		return;
	if (rc->seen[RK_COUNT_] && s->count != COUNT_RESPONSE)
		error_at(rc->c, rc->seen[RK_CHARGE], rpath(rc, RK_CHARGE),
		         "charge: response is count: response; it cannot go "
		         "with count: %s",
		         count_names[s->count]);
	s->count = COUNT_RESPONSE;
}

/* count:, failure_status / status:, result_message. */
static void
rule_count(struct rule_ctx *rc)
{
	struct rule             *r = rc->r;
	static const char *const why = "ignored without count: failures or "
				       "count: response";

	rule_statuses(rc);
	if (r->count == COUNT_ALL) {
		if (rc->seen[RK_STATUS])
			warn_at(rc->c, rc->seen[RK_STATUS],
			        rpath(rc, RK_STATUS), why);
		if (rc->seen[RK_STATUS2])
			warn_at(rc->c, rc->seen[RK_STATUS2],
			        rpath(rc, RK_STATUS2), why);
		if (rc->seen[RK_RESULT])
			warn_at(rc->c, rc->seen[RK_RESULT],
			        rpath(rc, RK_RESULT), why);
		return;
	}
	if (r->count == COUNT_FAILURES && rc->seen[RK_COST])
		warn_at(rc->c, rc->seen[RK_COST], rpath(rc, RK_COST),
		        "ignored by count: failures (each failure costs 1); "
		        "count: response with status: [401, 403] charges a "
		        "cost");
	rule_status_bits(rc);
	rule_result_message(rc);
}

/* 1 if <v>, a missing: value that is not deny or skip, reads as a mode
 * rather than a key: taken as a fallback key, every request without the
 * arg would share one bucket named after it. */
static int
looks_like_mode(const char *v)
{
	static const char *const modes[] = {
		"deny", "skip",   "allow",  "open", "closed", "close", "none",
		"pass", "ignore", "reject", "fail", "block",  "drop",
	};

	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
		if (strcasecmp(v, modes[i]) == 0)
			return 1;
	return 0;
}

/* A count of units given as <src> for keyword <kw>: an integer 0..<max>
 * into <*units>, or one "{arg}" whose name goes to <*arg> (a copy). */
static void
parse_units(struct rule_ctx *rc, int kw, const char *src, int64_t max,
            int64_t *units, char **arg)
{
	struct tmpl *t;
	int64_t      v;

	if (yamlkw_parse_int(src, &v) == 0) {
		if (v < 0)
			error_at(rc->c, rnode(rc, kw), rpath(rc, kw),
			         "%s must be >= 0", rule_kw[kw].name);
		else if (v > max)
			error_at(rc->c, rnode(rc, kw), rpath(rc, kw),
			         "%s must be at most %lld", rule_kw[kw].name,
			         (long long)max);
		*units = v;
		return;
	}
	if (!(t = compile_tmpl(rc, kw, src)))
		return;
	if (keys_is_single_var(t))
		*arg = xstrdup(keys_var(t, 0));
	else
		error_at(rc->c, rnode(rc, kw), rpath(rc, kw),
		         "expected an integer or one \"{arg}\", got \"%s\"",
		         src);
	keys_free(t);
}

/* 1 if some value could make key template <key> expand to a text that
 * fallback template <fb> gives too: neither starts with text the other
 * does not (values may hold any text but "{}%~"). With key "{user}" and
 * missing "{ip}", the user "10.0.0.1" would share, and could spend, the
 * bucket of every request from 10.0.0.1 without a user. */
static int
fallback_overlaps(const char *key, const char *fb)
{
	size_t kl = strcspn(key, "{"), fl = strcspn(fb, "{");

	if (key[kl] == '\0' || (fb[fl] == '\0' && fl <= kl))
		return 0; /* never missing; or shorter than any key */
	return memcmp(key, fb, kl < fl ? kl : fl) == 0;
}

/* missing: and cost:. */
static void
rule_missing_cost(struct rule_ctx *rc)
{
	struct rule_src *s = rc->s;
	struct rule     *r = rc->r;

	if (!s->missing || strcmp(s->missing, "deny") == 0) {
		r->missing = MISSING_DENY;
	} else if (strcmp(s->missing, "skip") == 0) {
		r->missing = MISSING_SKIP;
	} else if (looks_like_mode(s->missing)) {
		error_at(rc->c, rnode(rc, RK_MISSING), rpath(rc, RK_MISSING),
		         "\"%s\" is not a mode: deny, skip, or a fallback key "
		         "such as \"ip:{ip}\"",
		         s->missing);
	} else if (s->key && fallback_overlaps(s->key, s->missing)) {
		error_at(rc->c, rnode(rc, RK_MISSING), rpath(rc, RK_MISSING),
		         "fallback key \"%s\" could be a key of \"%s\": start "
		         "them with different text, such as \"ip:{ip}\"",
		         s->missing, s->key);
	} else if ((r->fallback = compile_tmpl(rc, RK_MISSING, s->missing))) {
		r->missing = MISSING_FALLBACK;
	}
	r->cost = 1;
	if (s->cost)
		parse_units(rc, RK_COST, s->cost, INT64_MAX, &r->cost,
		            &r->cost_arg);
}

/* Why reserve: cannot go with <algo>, or NULL when it can: a settle must
 * give back exactly what a reservation held, and these cannot. */
static const char *
reserve_refused(enum lim_algo algo)
{
	switch (algo) {
	case LIM_GCRA:
	case LIM_TOKEN_BUCKET:
	case LIM_FIXED_WINDOW:
	case LIM_SLIDING_WINDOW:
		return NULL;
	case LIM_LEAKY_BUCKET:
		return "leaky-bucket cannot refund exactly (in delay mode the "
		       "reserved units were already waited for, and a refund "
		       "cannot give the delay back): use gcra, the same meter";
	case LIM_SLIDING_LOG:
		return "sliding-log cannot hold a reservation exactly (a "
		       "reservation of N is N log entries, O(N) memory per "
		       "request, and a refund would remove entries other "
		       "requests' windows count): use sliding-window";
	case LIM_CONCURRENCY:
		return "concurrency holds a slot, not units: there is nothing "
		       "to settle; use a rate or window algorithm";
	default:
		return "unknown algorithm";
	}
}

/* reserve: (a constant or one "{arg}") and its lease:. A reserving rule
 * is settled by its response: count: response (rl-response by default),
 * id "{id}" unless given; with any store (the local tier keeps its own
 * reservation records, local.h). */
static void
rule_reserve(struct rule_ctx *rc)
{
	struct rule_src *s = rc->s;
	struct rule     *r = rc->r;
	const char      *why;

	if (!s->reserve)
		return;
	r->reserves = true;
	if ((why = reserve_refused(r->lim.algo)))
		error_at(rc->c, rnode(rc, RK_RESERVE), rpath(rc, RK_RESERVE),
		         "%s", why);
	if (rc->seen[RK_COUNT_] && s->count == COUNT_FAILURES)
		error_at(rc->c, rnode(rc, RK_RESERVE), rpath(rc, RK_RESERVE),
		         "the response settles a reservation: not with count: "
		         "failures");
	s->count = COUNT_RESPONSE;
	r->count = COUNT_RESPONSE;
	r->lim.reserve_lease_us =
		rc->seen[RK_LEASE] ? s->lease_us : POLICY_DEF_RESERVE_LEASE;
	if (!s->id) {
		const char *terr;
		size_t      tpos;

		r->id = keys_compile("{id}", 64, &terr, &tpos);
	}
	parse_units(rc, RK_RESERVE, s->reserve, LIM_COST_MAX, &r->reserve,
	            &r->reserve_arg);
}

/* The rule's fail mode: its own fail: if it has one; otherwise closed for a
 * login rule (count: failures), where an outage of the store must not
 * become an unlimited guess rate, and open for the others. */
static enum fail_mode
default_fail(const struct rule_ctx *rc)
{
	if (rc->seen[RK_FAIL])
		return (enum fail_mode)rc->s->fail;
	return rc->s->count == COUNT_FAILURES ? FAIL_CLOSED : FAIL_OPEN;
}

/* The GCRA family counts in whole-µs emission intervals: a rate whose
 * interval is not whole (30000/s: 33.3 µs) is enforced a little faster
 * (33 µs: 30303/s). Past 1 %, the operator is told by how much. */
static void
warn_rate_excess(struct ctx *c, const yaml_node_t *n, const char *path,
                 const char *plan, const struct lim_params *l)
{
	double x = lim_rate_excess(l);

	if (x > POLICY_WARN_RATE_EXCESS)
		warn_at(c, n, path,
		        "%s%s%srate %lld per %llds lets %.1f%% more "
		        "through: the emission interval is whole microseconds "
		        "(%lld µs); a rate that divides the period is exact",
		        *plan ? "plan " : "", plan, *plan ? ": " : "",
		        (long long)l->rate,
		        (long long)(l->period_us / LIM_USEC_PER_SEC), x * 100.,
		        (long long)l->ei_us);
}

/* Builds rule <r> from its parsed source: required fields, the algorithm,
 * templates, count, and the limiter's own validation. */
static void
build_rule(struct rule_ctx *rc)
{
	struct ctx      *c = rc->c;
	struct rule_src *s = rc->s;
	struct rule     *r = rc->r;
	struct policy   *p = c->p;
	const char      *lerr;
	int              i, a;

	r->line = (int)rc->node->start_mark.line + 1;
	r->col = (int)rc->node->start_mark.column + 1;
	r->store = (enum store_kind)s->store;
	rule_charge(rc);
	r->count = (enum count_mode)s->count;
	r->fail = default_fail(rc);
	r->plan = (enum rule_plan)s->plan;
	r->shadow = s->shadow;
	r->headers = s->headers;
	r->ipv6_prefix = (int)s->ipv6_prefix;
	if (!s->name) {
		error_at(c, rc->node, rpath(rc, RK_NAME), "required");
	} else if (!valid_name(s->name)) {
		error_at(c, rnode(rc, RK_NAME), rpath(rc, RK_NAME),
		         "must be 1-%d letters, digits, '-', '_' or '.'",
		         POLICY_NAME_MAX);
	} else {
		for (i = 0; i < r->index; i++) {
			if (p->rules[i].name &&
			    strcmp(p->rules[i].name, s->name) == 0) {
				error_at(
					c, rnode(rc, RK_NAME),
					rpath(rc, RK_NAME),
					"duplicate rule name \"%s\" (first at line %d)",
					s->name, p->rules[i].line);
				break;
			}
		}
		r->name = xstrdup(s->name);
		r->key_prefix = xmalloc(strlen(s->name) + 6);
		sprintf(r->key_prefix, "rl:{%s:", s->name);
	}
	if (!s->message || !*s->message)
		error_at(c, rc->node, rpath(rc, RK_MESSAGE), "required");
	else
		r->message = xstrdup(s->message);
	if (!s->key)
		error_at(c, rc->node, rpath(rc, RK_KEY), "required");
	else
		r->key = compile_tmpl(rc, RK_KEY, s->key);
	if (s->id)
		r->id = compile_tmpl(rc, RK_ID, s->id);
	r->lim.algo = r->plan == RULE_PLAN_QUOTA ? LIM_FIXED_WINDOW : LIM_GCRA;
	if (s->algorithm) {
		if ((a = lim_algo_from_name(s->algorithm)) < 0) {
			char   names[200];
			size_t len = 0;

			for (i = 0; i < LIM_ALGO_COUNT; i++)
				len += (size_t)snprintf(names + len,
				                        sizeof(names) - len,
				                        "%s%s", i ? ", " : "",
				                        lim_algo_name(i));
			error_at(c, rnode(rc, RK_ALGO), rpath(rc, RK_ALGO),
			         "unknown algorithm \"%s\" (one of: %s)",
			         s->algorithm, names);
			return;
		}
		r->lim.algo = (enum lim_algo)a;
	}
	if (r->store == STORE_LOCAL && rc->seen[RK_FAIL])
		warn_at(c, rc->seen[RK_FAIL], rpath(rc, RK_FAIL),
		        "has no effect with store: local (nothing to fail over)");
	rule_missing_cost(rc);
	rule_reserve(rc);
	rule_count(rc);
	rule_params(rc);
	rule_block(rc);
	if (r->plan == RULE_PLAN_NONE && r->lim.rate > 0) {
		yaml_node_t *at = rc->seen[RK_RATE] ? rc->seen[RK_RATE]
		                                    : rnode(rc, RK_LIMIT);

		if (lim_params_init(&r->lim, &lerr) == -1)
			error_at(c, at, rc->path, "%s", lerr);
		else
			warn_rate_excess(c, at, rc->path, "", &r->lim);
	}
}

/* Fills rule <r>'s per-plan parameters once the plans are known. */
static void
build_rule_plans(struct ctx *c, struct rule *r, yaml_node_t *node,
                 const char *path)
{
	struct policy *p = c->p;
	const char    *lerr;
	int            i;

	if (p->nplans == 0) {
		error_at(c, node, path, "plan: %s but no plans: are defined",
		         r->plan == RULE_PLAN_RATE ? "rate" : "quota");
		return;
	}
	r->plan_lim = xcalloc((size_t)p->nplans, sizeof(*r->plan_lim));
	for (i = 0; i < p->nplans; i++) {
		const struct plan *pl = &p->plans[i];
		struct lim_params *l = &r->plan_lim[i];

		l->algo = r->lim.algo;
		l->max_delay_us = r->lim.max_delay_us; /* mode: delay */
		l->block_us = r->lim.block_us;
		l->block_max_us = r->lim.block_max_us;
		if (r->plan == RULE_PLAN_RATE && pl->has_rate) {
			l->rate = pl->rate;
			l->period_us = pl->period_us;
			if (l->algo == LIM_FIXED_WINDOW)
				l->calendar = pl->rate_cal;
			if (family(l->algo) == FAM_TOKEN)
				l->burst = pl->burst;
		} else if (r->plan == RULE_PLAN_QUOTA && pl->has_quota) {
			l->rate = pl->quota;
			l->period_us = pl->quota_period_us;
			l->calendar = pl->quota_cal;
		} else {
			continue; /* "none" on this plan: no check */
		}
		if (l->period_us <= 0)
			l->period_us = 30 * 86400 * LIM_USEC_PER_SEC;
		if (lim_params_init(l, &lerr) == -1)
			error_at(c, node, path, "plan %s: %s", pl->name, lerr);
		else
			warn_rate_excess(c, node, path, pl->name, l);
	}
	for (i = 0; i < p->nplans; i++)
		r->plan_lim[i].reserve_lease_us = r->lim.reserve_lease_us;
	if (p->plan_lookup.default_plan >= 0)
		r->lim = r->plan_lim[p->plan_lookup.default_plan];
}

static void
rule_src_free(struct rule_src *s)
{
	free(s->name);
	free(s->message);
	free(s->key);
	free(s->algorithm);
	free(s->rate);
	free(s->window);
	free(s->missing);
	free(s->cost);
	free(s->result_message);
	free(s->release);
	free(s->id);
	free(s->reserve);
}

static void
parse_rules(struct ctx *c, yaml_node_t *n)
{
	struct policy    *p = c->p;
	yaml_node_item_t *it;
	bool              any_plan = false;

	if (n->type != YAML_SEQUENCE_NODE) {
		error_at(c, n, "rules", "expected a list of rules");
		return;
	}
	p->rules = xcalloc((size_t)(n->data.sequence.items.top -
	                            n->data.sequence.items.start) +
	                           1,
	                   sizeof(*p->rules));
	for (it = n->data.sequence.items.start; it < n->data.sequence.items.top;
	     it++) {
		struct rule_src src = { .headers = true, .ipv6_prefix = 64 };
		yaml_node_t    *seen[RK_COUNT] = { 0 };
		struct rule_ctx rc = { .c = c, .s = &src, .seen = seen };

		rc.node = yamlkw_node(&c->y, *it);
		rc.r = &p->rules[p->nrules];
		rc.r->index = p->nrules;
		rc.r->metrics_slot = -1; /* "other" until published */
		snprintf(rc.path, sizeof(rc.path), "rules[%d]", p->nrules);
		p->nrules++;
		if (rc.node->type != YAML_MAPPING_NODE) {
			error_at(c, rc.node, rc.path,
			         "expected a mapping (a rule)");
			rc.r->line = (int)rc.node->start_mark.line + 1;
			continue;
		}
		yamlkw_map(&c->y, rc.node, rc.path, rule_kw, RK_COUNT, &src,
		           seen);
		build_rule(&rc);
		if (seen[RK_ALLOW])
			allow_rule(&c->y, c->allow, seen[RK_ALLOW],
			           rpath(&rc, RK_ALLOW), rc.r);
		if (rc.r->plan != RULE_PLAN_NONE) {
			any_plan = true;
			build_rule_plans(c, rc.r, rnode(&rc, RK_PLAN),
			                 rpath(&rc, RK_PLAN));
		}
		rule_src_free(&src);
	}
	if (any_plan && p->nplans > 0 && !c->plan_default)
		error_at(c, c->plan_default_node, "plan_lookup.default",
		         "required when rules use plan:");
}

/* ---- the file ----------------------------------------------------------- */

static void
parse_root(struct ctx *c, yaml_node_t *root)
{
	yaml_node_t *seen[TK_COUNT] = { 0 };
	const char  *bad;

	if (!root ||
	    (root->type == YAML_SCALAR_NODE && root->data.scalar.length == 0)) {
		warn_at(c, root, "policy", "empty file: defaults and no rules");
	} else if (root->type != YAML_MAPPING_NODE) {
		error_at(c, root, "policy",
		         "expected a mapping at the top level");
		return;
	} else {
		yamlkw_map(&c->y, root, "", top_kw, TK_COUNT, c->p, seen);
	}
	check_listen(c, seen[TK_LISTEN]);
	check_redis_url(c, yamlkw_find(&c->y, seen[TK_REDIS], "url"));
	check_timeouts(c, seen[TK_REDIS], seen[TK_PROCESSING]);
	redis_env(c, seen[TK_REDIS], "password_env", "password",
	          &c->p->redis_password);
	redis_env(c, seen[TK_REDIS], "username_env", "username",
	          &c->p->redis_username);
	if (seen[TK_METRICS])
		parse_metrics(c, seen[TK_METRICS]);
	if (seen[TK_LOG])
		parse_log(c, seen[TK_LOG]);
	if (seen[TK_ADMIN])
		parse_admin(c, seen[TK_ADMIN]);
	if (seen[TK_PLANS])
		parse_plans(c, seen[TK_PLANS]);
	if (seen[TK_TENANTS])
		parse_tenants(c, seen[TK_TENANTS]);
	parse_lookup(c, seen[TK_LOOKUP]);
	c->allow = allow_lists_parse(&c->y, seen[TK_ALLOW]);
	if (seen[TK_RULES])
		parse_rules(c, seen[TK_RULES]);
	allow_lists_done(&c->y, c->allow);
	c->allow = NULL;
	if (!seen[TK_RULES])
		warn_at(c, root, "rules", "no rules: every request is allowed");
	if (c->y.nerr == 0 && policy__index(c->p, &bad) == -1)
		error_at(c, seen[TK_RULES], "rules",
		         "message %s has more than %d rules", bad,
		         POLICY_MAX_CHECKS);
}

/* The line and column (1-based, in bytes) of byte <off> of <f>. */
static void
offset_position(FILE *f, size_t off, int *line, int *col)
{
	size_t i;
	int    ch;

	*line = *col = 1;
	rewind(f);
	for (i = 0; i < off && (ch = getc(f)) != EOF; i++) {
		if (ch == '\n') {
			++*line;
			*col = 1;
		} else {
			++*col;
		}
	}
}

/* Deepest nesting of collections a policy may have (it needs 5). */
#define POLICY_YAML_DEPTH_MAX 64

/* Reads <f>'s events once before it is loaded, and refuses a document
 * nested deeper than POLICY_YAML_DEPTH_MAX: libyaml's scanner checks
 * every open flow level on each token, so "[[[[..." of 100000 levels,
 * 200 kB, took minutes to load (-c and a reload alike). A syntax error is
 * left to the load, which reports it. Returns 0, or -1 reported. */
static int
check_depth(struct ctx *c, FILE *f, const char *path)
{
	yaml_parser_t parser;
	yaml_event_t  ev;
	int           depth = 0, rc = 0, done = 0;

	if (!yaml_parser_initialize(&parser))
		fatal("yaml_parser_initialize: out of memory");
	yaml_parser_set_input_file(&parser, f);
	while (!done && yaml_parser_parse(&parser, &ev)) {
		switch (ev.type) {
		case YAML_SEQUENCE_START_EVENT:
		case YAML_MAPPING_START_EVENT:
			if (++depth > POLICY_YAML_DEPTH_MAX) {
				yamlkw_report(
					&c->y.err, (int)ev.start_mark.line + 1,
					(int)ev.start_mark.column + 1, path,
					"policy: nested deeper than %d levels",
					POLICY_YAML_DEPTH_MAX);
				c->y.nerr++;
				rc = -1;
				done = 1;
			}
			break;
		case YAML_SEQUENCE_END_EVENT:
		case YAML_MAPPING_END_EVENT:
			depth--;
			break;
		case YAML_STREAM_END_EVENT:
			done = 1;
			break;
		default:
			break;
		}
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&parser);
	rewind(f);
	return rc;
}

static void
load_file(struct ctx *c, const char *path)
{
	yaml_parser_t   parser;
	yaml_document_t doc;
	FILE           *f;

	if (!(f = fopen(path, "rb"))) {
		yamlkw_report(&c->y.err, 0, 0, path, "policy: cannot open: %s",
		              strerror(errno));
		c->y.nerr++;
		return;
	}
	if (check_depth(c, f, path) == -1) {
		fclose(f);
		return;
	}
	if (!yaml_parser_initialize(&parser))
		fatal("yaml_parser_initialize: out of memory");
	yaml_parser_set_input_file(&parser, f);
	if (!yaml_parser_load(&parser, &doc)) {
		int line = (int)parser.problem_mark.line + 1;
		int col = (int)parser.problem_mark.column + 1;

		/* libyaml's reader (bad UTF-8, a control character) sets no
		 * mark, only the byte offset: count the lines up to it */
		if (parser.error == YAML_READER_ERROR)
			offset_position(f, parser.problem_offset, &line, &col);
		yamlkw_report(&c->y.err, line, col, path, "yaml: %s%s%s",
		              parser.context ? parser.context : "",
		              parser.context ? ": " : "",
		              parser.problem ? parser.problem : "syntax error");
		c->y.nerr++;
		yaml_parser_delete(&parser);
		fclose(f);
		return;
	}
	c->y.doc = &doc;
	parse_root(c, yaml_document_get_root_node(&doc));
	c->y.doc = NULL;
	yaml_document_delete(&doc);
	yaml_parser_delete(&parser);
	fclose(f);
}

static void
log_lines(char *s)
{
	char *line, *save = NULL;

	for (line = strtok_r(s, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save))
		log_warn("policy_warning", "detail=\"%s\"", line);
}

struct policy *
policy_load_with_warnings(const char *path, char **err, char **warn)
{
	struct ctx c = { .y.file = path };
	char      *w;

	c.p = xcalloc(1, sizeof(*c.p));
	set_defaults(c.p);
	c.p->path = xstrdup(path);
	load_file(&c, path);
	free(c.plan_default);
	w = yamlkw_join(&c.y.warn);
	if (warn) {
		*warn = w;
	} else if (w) {
		log_lines(w);
		free(w);
	}
	*err = yamlkw_join(&c.y.err);
	if (c.y.nerr) {
		policy__free(c.p);
		return NULL;
	}
	return c.p;
}

struct policy *
policy_load(const char *path, char **err)
{
	return policy_load_with_warnings(path, err, NULL);
}
