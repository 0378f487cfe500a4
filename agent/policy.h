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

#define POLICY_KEY_MAX    200	/* longest Redis key; longer ones are hashed */
#define POLICY_MEMBER_MAX 128
#define POLICY_MAX_CHECKS 16	/* rules evaluated for one message */

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

struct tmpl;			/* a compiled key template (policy.c) */

struct rule {
	char             *name;
	char             *message;	/* the SPOE message it applies to */
	struct tmpl      *key;
	struct tmpl      *fallback;	/* missing: <template> */
	struct lim_params lim;
	enum fail_mode    fail;
	enum missing_mode missing;
	enum store_kind   store;
	bool              shadow;
	bool              headers;	/* listed in the RateLimit headers */
	int64_t           cost;		/* when cost_arg is NULL */
	char             *cost_arg;	/* integer message arg giving the cost */
	int               index;	/* position in policy->rules */
	int               line;		/* in the policy file */
};

struct policy {
	char             *path;
	char             *listen;	/* host:port or unix:/path */
	int               workers;
	char             *redis_url;
	int64_t           redis_timeout_us;
	int               pool_size;
	int               max_conns;
	int64_t           idle_timeout_us;
	size_t            local_max_keys;
	enum headers_mode headers;
	bool              shadow_all;	/* global shadow switch */
	struct rule      *rules;
	int               nrules;
	int               refs;		/* atomic; see policy_ref() */
};

/* One limit check for one request, built by policy_build_checks(). */
enum check_kind {
	CHECK_EVAL = 0,			/* evaluate <lim> on <key> */
	CHECK_DENY_MISSING,		/* key arg missing and missing: deny */
};

struct check {
	const struct rule *rule;
	enum check_kind    kind;
	struct lim_params  lim;		/* the rule's, or its tenant plan's */
	int                op;		/* enum lim_op */
	int64_t            cost;
	char               key[POLICY_KEY_MAX + 1];	/* "rl:{rule:key}" */
	size_t             keylen;
	char               member[POLICY_MEMBER_MAX + 1];
	size_t             memberlen;
};

/* Reads and validates <path>. Returns a new policy (refs = 1; release with
 * policy_unref()), or NULL with <*err> set to a malloc'ed text listing every
 * error as "file:line:col: field: message", one per line. */
struct policy *policy_load(const char *path, char **err);

struct policy *policy_ref(struct policy *p);
void policy_unref(struct policy *p);

/* Builds the checks that <m> triggers under <p> into <out> (at most <max>).
 * Rules whose key arg is missing follow their missing: mode (skip: no
 * check; deny: a CHECK_DENY_MISSING check; fallback: the fallback key).
 * Returns the number of checks written. Never fails: a message that names
 * no rule yields 0 checks. */
int policy_build_checks(const struct policy *p, const struct spop_message *m,
                        struct check *out, int max);

#endif
