/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Runtime overrides (issue 18): per rule and key, another limit, "allow"
 * (never limited) or "deny" (always refused), each with an optional
 * expiry, set by an operator with `spoa-ratelimit override` and held in
 * Redis so that the whole pool shares them.
 *
 * In Redis, one hash (OV_HASH, one slot on a Cluster):
 *   "o:<check key>"  one override, its value as ov_format() writes it
 *   "all"            every live override, one "<keylen> <key> <value>\n"
 *                    entry each: what the agents read, in one HGET
 *   "gen"            moved by every change (to Redis' time in µs at least)
 *   "resets"         bumped by every `key reset` (keyop.c): the agents
 *                    poll it and drop their near-cached blocks on a move
 * Both are rewritten together by one script (ovcli.c), so "all" is always
 * the table of the "o:" fields, expired ones dropped.
 *
 * Here: the value format, the table an agent holds (parsed from "all",
 * immutable once built, looked up by the check's key), and what an
 * override does to one check. Not here: fetching it (ovcache.c) or
 * writing it (ovcli.c). No I/O, no clock: callers pass the time.
 */
#ifndef OVERRIDE_H
#define OVERRIDE_H

#include <stddef.h>
#include <stdint.h>

#include "limiter.h"
#include "policy.h"

#define OV_HASH      "rl:{overrides}"
#define OV_RESETS    "resets"   /* field: bumped by every key reset */
#define OV_MAX       10000      /* overrides in the table */
#define OV_ALL_MAX   (4u << 20) /* bytes of "all" */
#define OV_VALUE_MAX 128        /* one value, with its NUL */
#define OV_DENY_RETRY                                                          \
	(60 * LIM_USEC_PER_SEC) /* a deny without expiry:                      \
	                         * Retry-After at least this */

enum ov_kind {
	OV_NONE = 0, /* no override: the policy's limit */
	OV_LIMIT,    /* <lim> instead of the rule's */
	OV_ALLOW,    /* no check at all */
	OV_DENY,     /* refused without Redis */
};

/* One override as stored. For OV_LIMIT, rate/period_us/burst/calendar
 * replace the rule's (the algorithm stays the rule's). */
struct ov_value {
	enum ov_kind      kind;
	int64_t           expires_us; /* wall clock (Redis TIME); 0: never */
	int64_t           rate, period_us, burst;
	enum lim_calendar calendar;
};

/* Writes <v> as text ("limit 0 100 60000000 20 0", "deny 1733400000000000")
 * into <buf> (OV_VALUE_MAX). */
void ov_format(const struct ov_value *v, char *buf, size_t size);

/* Reads a value written by ov_format (<len> bytes). Returns 0 or -1. */
int ov_parse(const char *s, size_t len, struct ov_value *v);

/* <lim> with <v>'s limit in place of the rule's, validated. Returns 0, or
 * -1 with <*err> when the result is not a valid limit for the algorithm. */
int ov_limit(const struct lim_params *lim, const struct ov_value *v,
             struct lim_params *out, const char **err);

struct ov_table;

/* Builds the table from the text of "all" (<len> bytes). Entries that do
 * not read are skipped and counted in <*bad>; past OV_MAX the rest too.
 * Returns a table (never NULL; ov_table_free()). */
struct ov_table *ov_table_parse(const char *s, size_t len, int *bad);
void             ov_table_free(struct ov_table *t);
/* Live and expired entries held. NULL holds none. */
size_t ov_table_count(const struct ov_table *t);

/* What <t> says for <c> at <now_us> (wall clock): OV_NONE when nothing
 * (no entry, an expired one, or one that does not apply: releases are
 * never touched, a deny refuses only a check or a peek). OV_LIMIT
 * has replaced c->lim (a limit invalid for the rule's algorithm is
 * ignored: OV_NONE); OV_DENY fills <res> with the refusal (Retry-After
 * until the expiry, or OV_DENY_RETRY and the rule's window when longer,
 * for one without). Allocation-free; <t> may be NULL. */
enum ov_kind ov_apply(const struct ov_table *t, struct check *c, int64_t now_us,
                      struct lim_result *res);

/* ---- making one (the CLI, the admin API) ------------------------------- */

/* The key of rule <name> of <p> for the args <pairs> ("arg=value", <n> of
 * them: exactly the args the rule's key template names, values as strings,
 * read as the agent reads a string arg, addresses included), built by
 * keys.c as the agent builds it, into <key> (POLICY_KEY_MAX + 1 bytes).
 * Returns the rule, or NULL with a one-line reason in <err>. */
const struct rule *ov_rule_key(const struct policy *p, const char *name,
                               const char *const *pairs, int n, char *key,
                               size_t *keylen, char *err, size_t errsize);

/* What an operator asks for: a kind, and for OV_LIMIT the new limit as
 * the policy writes it (rate "100/min" and burst; or limit and window). */
struct ov_request {
	enum ov_kind kind;
	const char  *rate;   /* gcra, token/leaky bucket */
	int64_t      burst;  /* 0: the rule's */
	int64_t      limit;  /* windows, concurrency */
	const char  *window; /* windows; NULL: the rule's */
	int64_t      ttl_us; /* 0: never expires */
};

/* <q> checked against rule <r> (the fields its algorithm takes, a valid
 * limit) into <v>, expires_us 0 (the store adds the TTL to Redis' clock).
 * Returns 0, or -1 with a static one-line reason in <*err>. */
int ov_make(const struct rule *r, const struct ov_request *q,
            struct ov_value *v, const char **err);

/* The script that sets (ARGV "set", key, value, ttl_us) or deletes
 * (ARGV "del", key) one override and rewrites "all" and "gen" (KEYS[1] =
 * OV_HASH), dropping expired ones: EVAL it with any Redis client. Replies
 * 1, or 0 for a "del" of nothing. */
extern const char ov_script[];

#endif
