/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of the policy (agent/policy/policy.c,
 * agent/policy/policy_parse.c): loading the YAML fixtures of tests/unit/data
 * (every field, the defaults, each kind of error with its line, column and
 * field path, several errors in one file, warnings), the example policies of
 * policies/, tenant plan resolution, and policy_build_checks() on hand-built
 * SPOE messages: keys, missing: modes, cost args, failure counting, concurrency
 * release.
 *
 * Paths are relative to the repository root (make runs the tests there);
 * TEST_ROOT overrides it.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "keys.h"
#include "policy.h"
#include "util.h"

/* ---- helpers ------------------------------------------------------------ */

static char path_buf[512];

static const char *
data(const char *name)
{
	const char *root = getenv("TEST_ROOT");

	snprintf(path_buf, sizeof(path_buf), "%s%stests/unit/data/%s",
	         root ? root : "", root ? "/" : "", name);
	return path_buf;
}

static struct policy *
load_ok(const char *file)
{
	char          *err = NULL, *warn = NULL;
	struct policy *p = policy_load_with_warnings(file, &err, &warn);

	cr_assert_not_null(p, "%s failed to load:\n%s", file, err ? err : "");
	cr_assert_null(err);
	free(warn);
	return p;
}

/* Loads <name>, which must fail; returns the error text (caller frees). */
static char *
load_fails(const char *name)
{
	char          *err = NULL, *warn = NULL;
	struct policy *p = policy_load_with_warnings(data(name), &err, &warn);

	cr_assert_null(p, "%s loaded", name);
	cr_assert_not_null(err);
	free(warn);
	return err;
}

static int
count_lines(const char *s)
{
	int n = 0;

	for (; s && *s; s++)
		n += *s == '\n';
	return n;
}

/* Asserts that <err> has the exact line "<file>:<where>: <what>". */
static void
has_line(const char *err, const char *file, const char *where, const char *what)
{
	char        want[1200];
	const char *p;
	size_t      n;

	n = (size_t)snprintf(want, sizeof(want), "%s:%s: %s", data(file), where,
	                     what);
	for (p = err; (p = strstr(p, want)); p++)
		if ((p == err || p[-1] == '\n') &&
		    (p[n] == '\n' || p[n] == '\0'))
			return;
	cr_assert_fail("missing line \"%s\" in:\n%s", want, err);
}

/* Asserts that <err> has a line starting "<file>:<where>: <path>: " and
 * containing <part>. */
static void
has_error(const char *err, const char *file, const char *where,
          const char *path, const char *part)
{
	char        head[1200];
	const char *p;

	snprintf(head, sizeof(head), "%s:%s: %s: ", data(file), where, path);
	for (p = err; (p = strstr(p, head)); p++) {
		const char *eol = strchr(p, '\n');
		const char *hit = strstr(p, part);

		if ((p == err || p[-1] == '\n') && hit && (!eol || hit < eol))
			return;
	}
	cr_assert_fail("no \"%s...%s\" in:\n%s", head, part, err);
}

static struct spop_message msg;

static void
msg_reset(const char *name)
{
	memset(&msg, 0, sizeof(msg));
	msg.name.ptr = name;
	msg.name.len = strlen(name);
}

static struct spop_arg *
add(const char *name, enum spop_data_type type)
{
	struct spop_arg *a = &msg.args[msg.nargs++];

	a->name.ptr = name;
	a->name.len = strlen(name);
	a->value.type = type;
	msg.nargs_total = msg.nargs;
	return a;
}

static void
add_str(const char *name, const char *v)
{
	struct spop_arg *a = add(name, SPOP_DATA_STRING);

	a->value.v.str.ptr = v;
	a->value.v.str.len = strlen(v);
}

static void
add_int(const char *name, int64_t v)
{
	add(name, SPOP_DATA_INT32)->value.v.i = v;
}

static void
add_ip(const char *name, const char *text)
{
	struct spop_arg *a;

	if (strchr(text, ':')) {
		a = add(name, SPOP_DATA_IPV6);
		cr_assert_eq(inet_pton(AF_INET6, text, a->value.v.ipv6), 1);
	} else {
		a = add(name, SPOP_DATA_IPV4);
		cr_assert_eq(inet_pton(AF_INET, text, a->value.v.ipv4), 1);
	}
}

static struct check checks[POLICY_MAX_CHECKS];

/* The check of rule <name> among the first <n>, or NULL. */
static const struct check *
find(int n, const char *name)
{
	int i;

	for (i = 0; i < n; i++)
		if (strcmp(checks[i].rule->name, name) == 0)
			return &checks[i];
	return NULL;
}

static const struct rule *
rule_named(const struct policy *p, const char *name)
{
	int i;

	for (i = 0; i < p->nrules; i++)
		if (strcmp(p->rules[i].name, name) == 0)
			return &p->rules[i];
	cr_assert_fail("no rule %s", name);
	return NULL;
}

/* ---- loading: values ---------------------------------------------------- */

Test(policy, parses_every_top_level_field)
{
	struct policy *p = load_ok(data("full.yaml"));

	cr_assert_str_eq(p->listen, "unix:/run/rl.sock");
	cr_assert_eq(p->workers, 4);
	cr_assert_str_eq(p->redis_url, "redis+sentinel://s1:26379/mymaster");
	cr_assert_eq(p->redis_timeout_us, 7000);
	cr_assert_str_eq(p->redis_password, "s3cret");
	cr_assert_str_eq(p->redis_username, "agent");
	cr_assert_eq(p->pool_size, 3);
	cr_assert_eq(p->max_conns, 500);
	cr_assert_eq(p->max_inflight, 300);
	cr_assert_eq(p->idle_timeout_us, 45 * LIM_USEC_PER_SEC);
	cr_assert_eq(p->headers, HEADERS_BOTH);
	cr_assert_eq(p->shadow_all, true);
	cr_assert_eq(p->local_max_keys, 5000);
	cr_assert_eq(p->nrules, 9);
	cr_assert_eq(p->refs, 1);
	policy_unref(p);
}

Test(policy, parses_plans_tenants_and_lookup)
{
	struct policy *p = load_ok(data("full.yaml"));
	int            free_i = policy_plan_index(p, "free", 4);
	int            pro_i = policy_plan_index(p, "pro", 3);
	int            ent_i = policy_plan_index(p, "enterprise", 10);

	cr_assert_eq(p->nplans, 3);
	cr_assert(free_i >= 0 && pro_i >= 0 && ent_i >= 0);
	cr_assert_eq(p->plans[pro_i].has_rate, true);
	cr_assert_eq(p->plans[pro_i].rate, 600);
	cr_assert_eq(p->plans[pro_i].period_us, 60 * LIM_USEC_PER_SEC);
	cr_assert_eq(p->plans[pro_i].burst, 100);
	cr_assert_eq(p->plans[pro_i].has_quota, true);
	cr_assert_eq(p->plans[pro_i].quota, 1000000);
	cr_assert_eq(p->plans[pro_i].quota_cal, LIM_CAL_MONTH);
	cr_assert_eq(p->plans[ent_i].has_quota, false); /* quota: none */
	cr_assert_eq(p->plans[ent_i].burst, 1);         /* default */
	cr_assert_eq(p->ntenants, 2);
	cr_assert_str_eq(p->tenants[0].tenant, "acme"); /* sorted */
	cr_assert_eq(p->tenants[0].plan, pro_i);
	cr_assert_eq(p->tenants[1].plan, ent_i);
	cr_assert_str_eq(p->plan_lookup.arg, "plan");
	cr_assert_str_eq(p->plan_lookup.tenant_arg, "org");
	cr_assert_str_eq(p->plan_lookup.redis_hash, "plans");
	cr_assert_eq(p->plan_lookup.redis_hash_id, util_fnv1a("plans", 5),
	             "the hash's identity is computed at load");
	cr_assert_eq(p->plan_lookup.default_plan, free_i);
	cr_assert_eq(p->plan_lookup.cache_us, 60 * LIM_USEC_PER_SEC);
	cr_assert_eq(policy_plan_index(p, "gold", 4), -1);
	policy_unref(p);
}

Test(policy, parses_token_rule_fields)
{
	struct policy     *p = load_ok(data("full.yaml"));
	const struct rule *r = rule_named(p, "ip");

	cr_assert_str_eq(r->message, "rl-request");
	cr_assert_str_eq(keys_source(r->key), "ip:{ip}");
	cr_assert_str_eq(r->key_prefix, "rl:{ip:");
	cr_assert_eq(r->lim.algo, LIM_GCRA);
	cr_assert_eq(r->lim.rate, 100);
	cr_assert_eq(r->lim.period_us, LIM_USEC_PER_SEC);
	cr_assert_eq(r->lim.burst, 200);
	cr_assert_eq(r->lim.ei_us, 10000); /* lim_params_init ran */
	cr_assert_eq(r->fail, FAIL_LOCAL);
	cr_assert_eq(r->store, STORE_LOCAL);
	cr_assert_eq(r->ipv6_prefix, 56);
	cr_assert_eq(r->headers, false);
	cr_assert_eq(r->missing, MISSING_SKIP);
	cr_assert_eq(r->shadow, false);
	cr_assert_eq(r->cost, 1);
	cr_assert_null(r->cost_arg);
	cr_assert_eq(r->index, 0);
	cr_assert_eq(r->line, 24);
	cr_assert_eq(r->col, 5);

	cr_assert_eq(p->processing_timeout_us, 3000000);
	r = rule_named(p, "smooth");
	cr_assert_eq(r->lim.algo, LIM_LEAKY_BUCKET);
	cr_assert_eq(r->lim.max_delay_us, 500000);
	cr_assert_eq(r->lim.burst, 5);
	cr_assert_eq(r->cost, 2);

	r = rule_named(p, "bytes");
	cr_assert_eq(r->lim.algo, LIM_TOKEN_BUCKET);
	cr_assert_eq(r->lim.rate, 10000000);
	cr_assert_eq(r->lim.period_us, 86400 * LIM_USEC_PER_SEC);
	cr_assert_eq(r->lim.burst, 1000000);
	cr_assert_str_eq(r->cost_arg, "size");
	policy_unref(p);
}

Test(policy, parses_window_login_and_concurrency_fields)
{
	struct policy     *p = load_ok(data("full.yaml"));
	const struct rule *r = rule_named(p, "login-account");

	cr_assert_eq(r->lim.algo, LIM_SLIDING_LOG);
	cr_assert_eq(r->lim.rate, 5);
	cr_assert_eq(r->lim.period_us, 15 * 60 * LIM_USEC_PER_SEC);
	cr_assert_eq(r->count, COUNT_FAILURES);
	cr_assert_eq(r->nfailure_status, 3);
	cr_assert_eq(r->failure_status[2], 429);
	cr_assert_str_eq(r->result_message, "rl-login-done");
	cr_assert_eq(r->fail, FAIL_CLOSED);
	cr_assert_eq(r->missing, MISSING_FALLBACK);
	cr_assert_str_eq(keys_source(r->fallback), "login:ip:{ip/64}");

	r = rule_named(p, "login-ip");
	cr_assert_eq(r->lim.algo, LIM_SLIDING_WINDOW);
	cr_assert_eq(r->lim.rate, 100);
	cr_assert_eq(r->shadow, true);
	cr_assert_eq(r->count, COUNT_ALL);

	r = rule_named(p, "exports");
	cr_assert_eq(r->lim.algo, LIM_CONCURRENCY);
	cr_assert_eq(r->lim.rate, 2);
	cr_assert_eq(r->lim.period_us, 5 * 60 * LIM_USEC_PER_SEC);
	cr_assert_str_eq(keys_source(r->id), "{id}");
	cr_assert_str_eq(r->release, "rl-done");

	r = rule_named(p, "daily");
	cr_assert_eq(r->lim.algo, LIM_FIXED_WINDOW);
	cr_assert_eq(r->lim.calendar, LIM_CAL_DAY);
	cr_assert_eq(r->lim.rate, 1000);
	policy_unref(p);
}

Test(policy, parses_plan_rules)
{
	struct policy     *p = load_ok(data("full.yaml"));
	const struct rule *r = rule_named(p, "tenant");
	int                pro = policy_plan_index(p, "pro", 3);
	int                ent = policy_plan_index(p, "enterprise", 10);

	cr_assert_eq(r->plan, RULE_PLAN_RATE);
	cr_assert_eq(r->lim.algo, LIM_GCRA);
	cr_assert_eq(r->lim.rate, 60); /* the default plan's */
	cr_assert_eq(r->plan_lim[pro].rate, 600);
	cr_assert_eq(r->plan_lim[pro].burst, 100);

	r = rule_named(p, "tenant-monthly");
	cr_assert_eq(r->plan, RULE_PLAN_QUOTA);
	cr_assert_eq(r->plan_lim[pro].algo, LIM_FIXED_WINDOW);
	cr_assert_eq(r->plan_lim[pro].rate, 1000000);
	cr_assert_eq(r->plan_lim[pro].calendar, LIM_CAL_MONTH);
	cr_assert_eq(r->plan_lim[ent].rate, 0); /* quota: none */
	policy_unref(p);
}

Test(policy, applies_defaults)
{
	struct policy     *p = load_ok(data("defaults.yaml"));
	const struct rule *r = &p->rules[0];

	cr_assert_str_eq(p->listen, "127.0.0.1:12345");
	cr_assert_eq(p->workers, 2);
	cr_assert_str_eq(p->redis_url, "redis://127.0.0.1:6379/0");
	cr_assert_eq(p->redis_timeout_us, 10000);
	cr_assert_null(p->redis_password);
	cr_assert_eq(p->pool_size, 1);
	cr_assert_eq(p->max_conns, 10000);
	cr_assert_eq(p->max_inflight, 4096);
	cr_assert_eq(p->idle_timeout_us, 120 * LIM_USEC_PER_SEC);
	cr_assert_eq(p->headers, HEADERS_IETF);
	cr_assert_eq(p->shadow_all, false);
	cr_assert_eq(p->nplans, 0);
	cr_assert_eq(p->plan_lookup.default_plan, -1);
	cr_assert_eq(r->lim.algo, LIM_GCRA);
	cr_assert_eq(r->lim.burst, 1);
	cr_assert_eq(r->fail, FAIL_OPEN);
	cr_assert_eq(r->missing, MISSING_DENY);
	cr_assert_eq(r->store, STORE_REDIS);
	cr_assert_eq(r->cost, 1);
	cr_assert_eq(r->headers, true);
	cr_assert_eq(r->count, COUNT_ALL);
	cr_assert_eq(r->ipv6_prefix, 64);
	policy_unref(p);
}

/* A login rule (count: failures) fails closed unless it says otherwise: an
 * outage of the store must not become an unlimited guess rate. */
Test(policy, failures_rule_without_fail_is_closed)
{
	struct policy *p = load_ok(data("fail-defaults.yaml"));

	cr_assert_eq(rule_named(p, "login-default")->fail, FAIL_CLOSED);
	policy_unref(p);
}

Test(policy, failures_rule_with_explicit_fail_keeps_it)
{
	struct policy *p = load_ok(data("fail-defaults.yaml"));

	cr_assert_eq(rule_named(p, "login-open")->fail, FAIL_OPEN);
	cr_assert_eq(rule_named(p, "login-local")->fail, FAIL_LOCAL);
	policy_unref(p);
}

Test(policy, ordinary_rule_without_fail_stays_open)
{
	struct policy *p = load_ok(data("fail-defaults.yaml"));

	cr_assert_eq(rule_named(p, "plain")->fail, FAIL_OPEN);
	cr_assert_eq(rule_named(p, "plain-count-all")->fail, FAIL_OPEN);
	policy_unref(p);
}

/* ---- loading: errors ---------------------------------------------------- */

Test(policy, reports_every_error_in_file_order)
{
	char *err = load_fails("errors.yaml");
	char *p;
	int   prev = 0;

	/* 30 errors, one per line, sorted by line */
	cr_assert_eq(count_lines(err), 30, "got:\n%s", err);
	for (p = err; *p; p = strchr(p, '\n') + 1) {
		int line = atoi(strchr(p, ':') + 1);

		cr_assert_geq(line, prev);
		prev = line;
	}
	free(err);
}

Test(policy, reports_top_level_value_errors)
{
	char *err = load_fails("errors.yaml");

	has_error(err, "errors.yaml", "1:9", "listen", "expected host:port");
	has_line(err, "errors.yaml", "2:10",
	         "workers: must be between 1 and 256");
	has_error(err, "errors.yaml", "4:8", "redis.url", "expected redis://");
	has_error(err, "errors.yaml", "5:12", "redis.timeout",
	          "expected a duration");
	has_error(err, "errors.yaml", "7:10", "headers",
	          "unknown headers \"fancy\"");
	has_error(err, "errors.yaml", "8:9", "shadow",
	          "expected true or false");
	free(err);
}

Test(policy, reports_unknown_keys_at_the_key)
{
	char *err = load_fails("errors.yaml");

	has_line(err, "errors.yaml", "6:3", "redis.colour: unknown key");
	has_line(err, "errors.yaml", "38:5", "rules[4].rat: unknown key");
	has_line(err, "errors.yaml", "41:5", "rules[4].workers: unknown key");
	free(err);
}

Test(policy, reports_impossible_rates_and_bursts)
{
	char *err = load_fails("errors.yaml");

	has_line(err, "errors.yaml", "16:11",
	         "rules[0].rate: rate must be > 0");
	has_line(err, "errors.yaml", "10:17",
	         "plans.free.rate: rate must be > 0");
	has_error(err, "errors.yaml", "10:31", "plans.free.burst",
	          "must be between 1");
	has_error(err, "errors.yaml", "24:12", "rules[2].burst",
	          "must be between 1");
	has_error(err, "errors.yaml", "30:12", "rules[3].limit",
	          "must be between 1");
	has_line(err, "errors.yaml", "37:11",
	         "rules[4].cost: cost must be >= 0");
	free(err);
}

Test(policy, reports_unknown_enum_values)
{
	char *err = load_fails("errors.yaml");

	has_error(err, "errors.yaml", "20:16", "rules[1].algorithm",
	          "unknown algorithm \"quantum\"");
	has_error(err, "errors.yaml", "25:11", "rules[2].fail",
	          "unknown fail \"sometimes\"");
	has_error(err, "errors.yaml", "39:12", "rules[4].count",
	          "unknown count \"some\"");
	has_error(err, "errors.yaml", "31:13", "rules[3].window",
	          "\"1fortnight\"");
	has_error(err, "errors.yaml", "40:22", "rules[4].failure_status[0]",
	          "\"abc\"");
	has_error(err, "errors.yaml", "40:27", "rules[4].failure_status[1]",
	          "\"99\"");
	free(err);
}

Test(policy, reports_bad_templates)
{
	char *err = load_fails("errors.yaml");

	has_error(err, "errors.yaml", "15:10", "rules[0].key",
	          "empty placeholder {}");
	has_error(err, "errors.yaml", "19:10", "rules[1].key",
	          "unterminated '{'");
	has_error(err, "errors.yaml", "26:14", "rules[2].missing",
	          "unterminated '{'");
	free(err);
}

Test(policy, reports_missing_required_and_duplicate_names)
{
	char *err = load_fails("errors.yaml");

	has_line(err, "errors.yaml", "21:5", "rules[2].name: required");
	has_line(err, "errors.yaml", "27:5", "rules[3].message: required");
	has_line(err, "errors.yaml", "42:5", "rules[5].key: required");
	has_line(err, "errors.yaml", "17:11",
	         "rules[1].name: duplicate rule name \"a\" (first at line 13)");
	free(err);
}

Test(policy, reports_unknown_plan_names)
{
	char *err = load_fails("errors.yaml");

	has_line(err, "errors.yaml", "11:18",
	         "tenants.acme: unknown plan \"gold\"");
	free(err);
	err = load_fails("plan-errors.yaml");
	has_line(err, "plan-errors.yaml", "3:25",
	         "plan_lookup.default: unknown plan \"platinum\"");
	has_error(err, "plan-errors.yaml", "9:11", "rules[0].rate",
	          "not used with plan:");
	has_error(err, "plan-errors.yaml", "14:11", "rules[1].plan",
	          "needs algorithm fixed-window");
	cr_assert_eq(count_lines(err), 3, "got:\n%s", err);
	free(err);
	err = load_fails("noplans.yaml");
	has_error(err, "noplans.yaml", "5:11", "rules[0].plan",
	          "no plans: are defined");
	free(err);
}

/* A missing: value that reads as a mode (misspelt, or one that does not
 * exist) is refused, not taken as a constant fallback key shared by every
 * request without the arg; a constant key chosen as such still loads. */
Test(policy, reports_a_missing_mode_that_does_not_exist)
{
	char *err = load_fails("missing-modes.yaml");

	has_error(err, "missing-modes.yaml", "6:14", "rules[0].missing",
	          "\"allow\" is not a mode: deny, skip, or a fallback key");
	has_error(err, "missing-modes.yaml", "11:14", "rules[1].missing",
	          "\"Deny\" is not a mode");
	cr_assert_eq(count_lines(err), 2, "got:\n%s", err);
	free(err);
}

/* A fallback key (missing:) that a key value could spell is refused: with
 * key "{user}" and missing "{ip}", the user "10.0.0.1" shared the bucket of
 * every request from 10.0.0.1 without a user, and so could spend it. The
 * key and its fallback must start with different text. */
Test(policy, refuses_a_fallback_key_a_key_could_equal)
{
	char *err = load_fails("missing-overlap.yaml");

	has_error(err, "missing-overlap.yaml", "6:14", "rules[0].missing",
	          "could be a key of \"{user}\"");
	has_error(err, "missing-overlap.yaml", "11:14", "rules[1].missing",
	          "could be a key of \"u{user}\"");
	cr_assert_eq(count_lines(err), 2, "got:\n%s", err);
	free(err);
}

Test(policy, reports_fields_meaningless_for_the_algorithm)
{
	char *err = load_fails("errors.yaml");

	has_line(err, "errors.yaml", "32:12",
	         "rules[3].burst: not used by algorithm fixed-window");
	free(err);
}

Test(policy, reports_wrong_types)
{
	char *err = load_fails("types.yaml");

	has_line(err, "types.yaml", "1:10",
	         "workers: expected an integer, got a list");
	has_line(err, "types.yaml", "2:8", "redis: expected a mapping");
	has_line(err, "types.yaml", "4:3", "rules: expected a list of rules");
	cr_assert_eq(count_lines(err), 3, "got:\n%s", err);
	free(err);
}

Test(policy, reports_yaml_syntax_errors_with_position)
{
	char *err = load_fails("syntax.yaml");

	has_error(err, "syntax.yaml", "5:1", "yaml", "did not find expected");
	cr_assert_eq(count_lines(err), 1);
	free(err);
}

Test(policy, reports_unreadable_file)
{
	char *err = load_fails("does-not-exist.yaml");

	cr_assert(strstr(err, "cannot open"), "%s", err);
	free(err);
}

Test(policy, refuses_more_rules_per_message_than_checks)
{
	char *err = load_fails("too-many.yaml");

	has_error(err, "too-many.yaml", "3:3", "rules",
	          "rl-request has more than 16 rules");
	free(err);
}

/* A held ACK that HAProxy stops waiting for fails open after a stall:
 * max_delay plus the Redis budget must fit in timeout processing. */
Test(policy, max_delay_over_the_processing_budget_is_an_error)
{
	char *err = load_fails("max_delay.yaml");

	has_error(err, "max_delay.yaml", "9:16", "rules[0].max_delay",
	          "processing_timeout");
	free(err);
}

/* Past redis.timeout the rule's fail mode answers; HAProxy stops waiting
 * at its timeout processing. At or above it, HAProxy gives up first and
 * the fail modes never apply, whatever the rules' algorithms. */
Test(policy, redis_timeout_at_or_over_processing_timeout_is_an_error)
{
	char *err = load_fails("redis_timeout.yaml");

	has_error(err, "redis_timeout.yaml", "1:52", "redis.timeout",
	          "below processing_timeout");
	free(err);
	err = load_fails("processing_timeout.yaml");
	has_error(err, "processing_timeout.yaml", "1:21", "processing_timeout",
	          "redis.timeout (10ms) must stay below processing_timeout");
	free(err);
}

/* The check parses the URL as the store will: a URL the agent could not
 * start with is a policy error (before: -c passed it, the start failed).
 * The error does not quote the URL, which holds the password. */
Test(policy, a_redis_url_the_store_cannot_parse_is_an_error)
{
	char *err = load_fails("url-escape.yaml");

	has_error(err, "url-escape.yaml", "1:15", "redis.url",
	          "expected redis+cluster://");
	cr_assert_null(strstr(err, "hunter2"), "got:\n%s", err);
	free(err);
}

Test(policy, warns_without_failing)
{
	char          *err = NULL, *warn = NULL;
	struct policy *p =
		policy_load_with_warnings(data("warnings.yaml"), &err, &warn);

	cr_assert_not_null(p, "%s", err ? err : "");
	cr_assert_not_null(warn);
	has_error(warn, "warnings.yaml", "6:12", "rules[0].limit",
	          "sliding-log");
	has_error(warn, "warnings.yaml", "14:16", "rules[1].max_delay",
	          "over 1s");
	has_error(warn, "warnings.yaml", "15:5", "rules[2].release",
	          "lease expires");
	/* 30000/s: a 33 µs interval, 30303/s; 7000/s (142 µs) is 0.6 % off */
	has_error(warn, "warnings.yaml", "20:65", "rules[3]",
	          "1.0% more through");
	cr_assert_eq(count_lines(warn), 4, "got:\n%s", warn);
	free(warn);
	policy_unref(p);
}

Test(policy, example_policies_validate)
{
	static const char *const files[] = {
		"policies/example.yaml",       "policies/api-plans.yaml",
		"policies/login.yaml",         "policies/flood-guard.yaml",
		"policies/monthly-quota.yaml",
	};
	const char *root = getenv("TEST_ROOT");
	char        path[512];
	size_t      i;

	for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		char          *err = NULL, *warn = NULL;
		struct policy *p;

		snprintf(path, sizeof(path), "%s%s%s", root ? root : "",
		         root ? "/" : "", files[i]);
		p = policy_load_with_warnings(path, &err, &warn);
		cr_expect_not_null(p, "%s:\n%s", files[i], err ? err : "");
		cr_expect_null(warn, "%s warns:\n%s", files[i],
		               warn ? warn : "");
		free(err);
		free(warn);
		policy_unref(p);
	}
}

/* ---- references --------------------------------------------------------- */

Test(policy, ref_and_unref_count)
{
	struct policy *p = load_ok(data("defaults.yaml"));

	cr_assert_eq(policy_ref(p), p);
	cr_assert_eq(p->refs, 2);
	policy_unref(p);
	cr_assert_eq(p->refs, 1);
	policy_unref(p); /* frees: ASan would catch a leak or reuse */
	policy_unref(NULL);
}

/* ---- checks ------------------------------------------------------------- */

Test(policy, builds_hash_tagged_keys)
{
	struct policy      *p = load_ok(data("checks.yaml"));
	const struct check *c;
	int                 n;

	msg_reset("rl-request");
	add_str("tenant", "globex");
	add_ip("ip", "192.0.2.7");
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	cr_assert_eq(n, 3); /* ip, tenant, tenant-monthly; no id */
	c = find(n, "ip");
	cr_assert_str_eq(c->key, "rl:{ip:ip:192.0.2.7}");
	cr_assert_eq(c->keylen, strlen(c->key));
	cr_assert_eq(c->kind, CHECK_EVAL);
	cr_assert_eq(c->op, LIM_OP_CHECK);
	cr_assert_eq(c->cost, 1);
	cr_assert_eq(c->lim.rate, 100);
	cr_assert_eq(c->flags, 0);
	cr_assert_eq(c->plan, -1);
	cr_assert_str_eq(find(n, "tenant")->key, "rl:{tenant:tenant:globex}");
	policy_unref(p);
}

Test(policy, unknown_message_yields_no_checks)
{
	struct policy *p = load_ok(data("checks.yaml"));

	msg_reset("rl-nothing");
	add_str("tenant", "acme");
	cr_assert_eq(policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS),
	             0);
	msg_reset("rl-request");
	add_str("tenant", "acme");
	cr_assert_eq(policy_build_checks(p, &msg, checks, 1),
	             1); /* <max> holds */
	policy_unref(p);
}

/* A NOTIFY of several messages shares one array of checks: what does not
 * fit is counted (checks, not bindings), and the one that weighs most on
 * the request is kept: fail: closed, then fail: closed in shadow. */
Test(policy, reports_checks_that_do_not_fit)
{
	struct policy         *p = load_ok(data("checks.yaml"));
	struct check           worst;
	struct policy_overflow ov = { 0, &worst };

	msg_reset("rl-request"); /* ip (no arg: skip), tenant,
	                          * tenant-monthly, exports (no id: skip) */
	add_str("tenant", "acme");
	cr_assert_eq(
		policy_build_checks_with_overflow(p, &msg, -1, checks, 2, &ov),
		2);
	cr_assert_eq(ov.n, 0, "2 checks fit in 2");
	cr_assert_eq(
		policy_build_checks_with_overflow(p, &msg, -1, checks, 1, &ov),
		1);
	cr_assert_eq(ov.n, 1, "the skipped bindings are no overflow");
	cr_assert_str_eq(worst.rule->name, "tenant-monthly");

	msg_reset("rl-login"); /* login-account (closed), login-ip
	                        * (closed, shadow) */
	add_str("user", "bob");
	add_ip("ip", "192.0.2.7");
	cr_assert_eq(
		policy_build_checks_with_overflow(p, &msg, -1, checks, 1, &ov),
		1);
	cr_assert_eq(ov.n, 2);
	cr_assert_str_eq(worst.rule->name, "login-ip", "shadow closed > open");
	cr_assert(worst.flags & LIM_FL_SHADOW);
	cr_assert_eq(
		policy_build_checks_with_overflow(p, &msg, -1, checks, 0, &ov),
		0);
	cr_assert_eq(ov.n, 4, "counted across messages");
	cr_assert_str_eq(worst.rule->name, "login-account", "closed > shadow");
	cr_assert_str_eq(worst.key, "rl:{login-account:login:user:bob}");
	cr_assert_eq(
		policy_build_checks_with_overflow(p, &msg, -1, checks, 0, NULL),
		0);
	policy_unref(p);
}

Test(policy, missing_deny_gives_deny_check)
{
	struct policy      *p = load_ok(data("checks.yaml"));
	const struct check *c;
	int                 n;

	msg_reset("rl-request");
	add_ip("ip", "192.0.2.7");
	add_str("tenant", ""); /* empty = missing */
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	c = find(n, "tenant");
	cr_assert_not_null(c);
	cr_assert_eq(c->kind, CHECK_DENY_MISSING);
	cr_assert_eq(c->keylen, 0);
	cr_assert_eq(find(n, "ip")->kind, CHECK_EVAL);
	policy_unref(p);
}

Test(policy, missing_skip_gives_no_check)
{
	struct policy *p = load_ok(data("checks.yaml"));
	int            n;

	msg_reset("rl-request");
	add_str("tenant", "acme");
	add("ip", SPOP_DATA_NULL);
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	cr_assert_null(find(n, "ip"));
	cr_assert_eq(n, 2);
	policy_unref(p);
}

Test(policy, missing_fallback_uses_fallback_key)
{
	struct policy      *p = load_ok(data("checks.yaml"));
	const struct check *c;
	int                 n;

	msg_reset("rl-login");
	add_ip("ip", "2001:db8:5:6::7");
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	c = find(n, "login-account");
	cr_assert_not_null(c);
	cr_assert_eq(c->kind, CHECK_EVAL);
	cr_assert_str_eq(c->key,
	                 "rl:{login-account:login:ip:2001:db8:5:6::/64}");
	/* fallback missing too: denied, never silently unlimited */
	msg_reset("rl-login");
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	cr_assert_eq(find(n, "login-account")->kind, CHECK_DENY_MISSING);
	policy_unref(p);
}

Test(policy, long_values_keep_keys_bounded_and_distinct)
{
	struct policy *p = load_ok(data("checks.yaml"));
	char           v1[500], v2[500], k1[POLICY_KEY_MAX + 1];
	int            n;

	memset(v1, 't', sizeof(v1) - 1);
	v1[sizeof(v1) - 1] = '\0';
	memcpy(v2, v1, sizeof(v1));
	v2[300] = 'u';
	msg_reset("rl-request");
	add_str("tenant", v1);
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	cr_assert_eq(find(n, "tenant")->keylen, POLICY_KEY_MAX);
	strcpy(k1, find(n, "tenant")->key);
	msg_reset("rl-request");
	add_str("tenant", v2);
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	cr_assert_leq(strlen(find(n, "tenant")->key), POLICY_KEY_MAX);
	cr_assert_str_neq(k1, find(n, "tenant")->key);
	cr_assert_eq(strncmp(k1, "rl:{tenant:tenant:ttt", 21), 0);
	cr_assert_eq(k1[POLICY_KEY_MAX - 1], '}');
	policy_unref(p);
}

Test(policy, hash_tag_survives_braces_in_values)
{
	struct policy      *p = load_ok(data("checks.yaml"));
	const struct check *c;
	int                 n;

	msg_reset("rl-request");
	add_str("tenant", "x}{y");
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	c = find(n, "tenant");
	cr_assert_str_eq(c->key, "rl:{tenant:tenant:x%7D%7By}");
	policy_unref(p);
}

Test(policy, cost_from_arg)
{
	struct policy *p = load_ok(data("checks.yaml"));
	int            n;

	msg_reset("rl-upload");
	add_str("tenant", "acme");
	add_int("size", 4096);
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	cr_assert_eq(n, 2);
	cr_assert_eq(find(n, "bytes")->cost, 4096);
	cr_assert_eq(find(n, "bytes-skip")->cost, 4096);
	msg_reset("rl-upload");
	add_str("tenant", "acme");
	add_str("size", "123");
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	cr_assert_eq(find(n, "bytes")->cost, 123);
	policy_unref(p);
}

Test(policy, bad_cost_arg_follows_missing_mode)
{
	struct policy *p = load_ok(data("checks.yaml"));
	int            n;

	msg_reset("rl-upload");
	add_str("tenant", "acme");
	add_int("size", -5);
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	cr_assert_eq(n, 1); /* bytes-skip: missing: skip */
	cr_assert_eq(find(n, "bytes")->kind, CHECK_DENY_MISSING);
	msg_reset("rl-upload");
	add_str("tenant", "acme");
	add_str("size", "lots");
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	cr_assert_eq(n, 1);
	cr_assert_eq(find(n, "bytes")->kind, CHECK_DENY_MISSING);
	policy_unref(p);
}

Test(policy, failures_rule_peeks_at_request_time)
{
	struct policy      *p = load_ok(data("checks.yaml"));
	const struct check *c;
	int                 n;

	msg_reset("rl-login");
	add_str("user", "alice");
	add_ip("ip", "192.0.2.9");
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	cr_assert_eq(n, 2);
	c = find(n, "login-account");
	/* a cost-0 peek passes at exactly the limit (L+1 failures): ask
	 * "would one more pass?" instead */
	cr_assert_eq(c->op, LIM_OP_PEEK);
	cr_assert_eq(c->cost, 1);
	cr_assert_str_eq(c->key, "rl:{login-account:login:user:alice}");
	c = find(n, "login-ip");
	cr_assert_eq(c->op, LIM_OP_CHECK);
	cr_assert_eq(c->cost, 1);
	cr_assert_eq(c->flags, LIM_FL_SHADOW);
	policy_unref(p);
}

Test(policy, failure_status_401_forces_a_charge)
{
	struct policy      *p = load_ok(data("checks.yaml"));
	const struct check *c;
	int                 n;

	msg_reset("rl-login-result");
	add_str("user", "alice");
	add_ip("ip", "192.0.2.9");
	add_int("status", 401);
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	cr_assert_eq(n, 1);
	c = &checks[0];
	cr_assert_str_eq(c->rule->name, "login-account");
	cr_assert_eq(c->kind, CHECK_EVAL);
	cr_assert_eq(c->op, LIM_OP_FORCE);
	cr_assert_eq(c->cost, 1);
	cr_assert_str_eq(c->key, "rl:{login-account:login:user:alice}");
	policy_unref(p);
}

Test(policy, success_status_200_gives_no_check)
{
	struct policy *p = load_ok(data("checks.yaml"));

	msg_reset("rl-login-result");
	add_str("user", "alice");
	add_int("status", 200);
	cr_assert_eq(policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS),
	             0);
	msg_reset("rl-login-result");
	add_str("user", "alice"); /* no status at all */
	cr_assert_eq(policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS),
	             0);
	msg_reset("rl-login-result");
	add_str("user", "alice");
	add_str("status", "403"); /* decimal string counts */
	cr_assert_eq(policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS),
	             1);
	policy_unref(p);
}

Test(policy, custom_failure_statuses_and_result_message)
{
	struct policy *p = load_ok(data("full.yaml"));
	int            n;

	msg_reset("rl-login-done");
	add_str("user", "bob");
	add_int("status", 429);
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	cr_assert_eq(n, 1);
	cr_assert_eq(checks[0].op, LIM_OP_FORCE);
	cr_assert_eq(checks[0].flags, LIM_FL_SHADOW); /* global shadow: true */
	msg_reset("rl-login-result"); /* not the configured name */
	add_str("user", "bob");
	add_int("status", 401);
	cr_assert_eq(policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS),
	             0);
	policy_unref(p);
}

Test(policy, concurrency_acquire_and_release_share_key_and_member)
{
	struct policy      *p = load_ok(data("checks.yaml"));
	const struct check *c;
	char                key[POLICY_KEY_MAX + 1];
	int                 n;

	msg_reset("rl-request");
	add_str("tenant", "acme");
	add_str("id", "req-0001");
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	c = find(n, "exports");
	cr_assert_not_null(c);
	cr_assert_eq(c->op, LIM_OP_CHECK);
	cr_assert_eq(c->cost, 1);
	cr_assert_str_eq(c->member, "req-0001");
	cr_assert_eq(c->memberlen, 8);
	cr_assert_eq(c->lim.rate, 2);
	strcpy(key, c->key);

	msg_reset("rl-done");
	add_str("id", "req-0001");
	add_str("tenant", "acme");
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	cr_assert_eq(n, 1);
	c = &checks[0];
	cr_assert_eq(c->op, LIM_OP_RELEASE);
	cr_assert_eq(c->cost, 0);
	cr_assert_str_eq(c->key, key);
	cr_assert_str_eq(c->member, "req-0001");

	{
		char id1[400], id2[400], m1[POLICY_MEMBER_MAX + 1];

		memset(id1, 'i', sizeof(id1) - 1);
		id1[sizeof(id1) - 1] = '\0';
		memcpy(id2, id1, sizeof(id1));
		id2[350] = 'j';
		msg_reset("rl-done");
		add_str("id", id1);
		add_str("tenant", "acme");
		cr_assert_eq(
			policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS),
			1);
		cr_assert_eq(checks[0].memberlen, POLICY_MEMBER_MAX);
		strcpy(m1, checks[0].member);
		msg_reset("rl-done");
		add_str("id", id2);
		add_str("tenant", "acme");
		cr_assert_eq(
			policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS),
			1);
		cr_assert_str_neq(checks[0].member,
		                  m1); /* long ids hashed apart */
	}

	msg_reset("rl-done"); /* no id: nothing to release */
	add_str("tenant", "acme");
	cr_assert_eq(policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS),
	             0);
	policy_unref(p);
}

/* ---- plans -------------------------------------------------------------- */

static int
resolver_pro(void *ctx, const struct policy *p, const char *tenant, size_t len)
{
	*(int *)ctx += 1;
	if (len == 6 && memcmp(tenant, "hooli1", 6) == 0)
		return policy_plan_index(p, "pro", 3);
	return -1;
}

Test(policy, tenant_plan_resolution_order)
{
	struct policy *p = load_ok(data("checks.yaml"));
	int            pro = policy_plan_index(p, "pro", 3);
	int            ent = policy_plan_index(p, "enterprise", 10);
	int            fre = policy_plan_index(p, "free", 4);
	int            calls = 0;

	msg_reset("rl-request");
	add_str("tenant", "acme");
	add_str("plan", "enterprise"); /* the static override wins */
	cr_assert_eq(policy_tenant_plan(p, &msg, NULL, NULL), pro);
	msg_reset("rl-request");
	add_str("tenant", "globex");
	add_str("plan", "enterprise");
	cr_assert_eq(policy_tenant_plan(p, &msg, NULL, NULL), ent);
	msg_reset("rl-request");
	add_str("tenant", "globex");
	add_str("plan", "bogus"); /* unknown plan name: default */
	cr_assert_eq(policy_tenant_plan(p, &msg, NULL, NULL), fre);
	msg_reset("rl-request");
	add_str("tenant", "hooli1");
	cr_assert_eq(policy_tenant_plan(p, &msg, resolver_pro, &calls), pro);
	cr_assert_eq(calls, 1);
	msg_reset("rl-request");
	add_str("tenant", "acme"); /* static: the resolver is not asked */
	cr_assert_eq(policy_tenant_plan(p, &msg, resolver_pro, &calls), pro);
	cr_assert_eq(calls, 1);
	msg_reset("rl-request");
	add_str("tenant", "other");
	cr_assert_eq(policy_tenant_plan(p, &msg, resolver_pro, &calls), fre);
	policy_unref(p);
}

static int
resolver_says(void *ctx, const struct policy *p, const char *tenant, size_t len)
{
	return *(int *)ctx;
}

/* The plan cache's "wait" and "unknown" reach the caller (which holds the
 * request, or applies the fail modes): they are not the default plan. */
Test(policy, tenant_plan_passes_on_wait_and_unknown)
{
	struct policy *p = load_ok(data("checks.yaml"));
	int            pro = policy_plan_index(p, "pro", 3);
	int            says = POLICY_PLAN_WAIT;

	msg_reset("rl-request");
	add_str("tenant", "hooli1");
	cr_assert_eq(policy_tenant_plan(p, &msg, resolver_says, &says),
	             POLICY_PLAN_WAIT);
	says = POLICY_PLAN_UNKNOWN;
	cr_assert_eq(policy_tenant_plan(p, &msg, resolver_says, &says),
	             POLICY_PLAN_UNKNOWN);
	says = 99; /* not an index: the default */
	cr_assert_eq(policy_tenant_plan(p, &msg, resolver_says, &says),
	             p->plan_lookup.default_plan);
	msg_reset("rl-request");
	add_str("tenant", "acme"); /* static: never waits */
	says = POLICY_PLAN_WAIT;
	cr_assert_eq(policy_tenant_plan(p, &msg, resolver_says, &says), pro);
	policy_unref(p);
}

Test(policy, plan_rate_rules_take_the_plan_limits)
{
	struct policy      *p = load_ok(data("checks.yaml"));
	const struct check *c;
	int                 n;

	msg_reset("rl-request");
	add_str("tenant", "acme"); /* pro */
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	c = find(n, "tenant");
	cr_assert_eq(c->lim.algo, LIM_GCRA);
	cr_assert_eq(c->lim.rate, 600);
	cr_assert_eq(c->lim.period_us, 60 * LIM_USEC_PER_SEC);
	cr_assert_eq(c->lim.burst, 100);
	cr_assert_eq(c->plan, policy_plan_index(p, "pro", 3));
	c = find(n, "tenant-monthly");
	cr_assert_eq(c->lim.algo, LIM_FIXED_WINDOW);
	cr_assert_eq(c->lim.rate, 1000000);
	cr_assert_eq(c->lim.calendar, LIM_CAL_MONTH);
	cr_assert_str_eq(c->key, "rl:{tenant-monthly:tenant:acme}");

	msg_reset("rl-request");
	add_str("tenant", "nobody"); /* default: free */
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	cr_assert_eq(find(n, "tenant")->lim.rate, 60);
	cr_assert_eq(find(n, "tenant-monthly")->lim.rate, 10000);
	policy_unref(p);
}

Test(policy, plan_quota_none_gives_no_check)
{
	struct policy *p = load_ok(data("checks.yaml"));
	int            n;

	msg_reset("rl-request");
	add_str("tenant", "initech"); /* enterprise: quota none */
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	cr_assert_null(find(n, "tenant-monthly"));
	cr_assert_eq(find(n, "tenant")->lim.rate, 6000);
	/* an explicit plan index overrides the lookup */
	n = policy_build_checks_in_plan(p, &msg,
	                                policy_plan_index(p, "free", 4), checks,
	                                POLICY_MAX_CHECKS);
	cr_assert_eq(find(n, "tenant-monthly")->lim.rate, 10000);
	cr_assert(policy_needs_plan(p, &msg));
	msg_reset("rl-login");
	cr_assert(!policy_needs_plan(p, &msg));
	policy_unref(p);
}

/* ---- allow lists (issue 18) --------------------------------------------- */

/* The rules of allow.yaml that check a request from <ip> (an address, or
 * a string arg when <as_string>), as "name,name," in rule order. */
static const char *
allow_checked(struct policy *p, const char *ip, bool as_string)
{
	static char names[256];
	size_t      len = 0;
	int         i, n;

	msg_reset("rl-request");
	if (ip && as_string)
		add_str("ip", ip);
	else if (ip)
		add_ip("ip", ip);
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	names[0] = '\0';
	for (i = 0; i < n; i++)
		len += (size_t)snprintf(names + len, sizeof(names) - len, "%s,",
		                        checks[i].rule->name);
	return names;
}

Test(policy, allow_list_skips_the_rule_for_listed_addresses)
{
	struct policy *p = load_ok(data("allow.yaml"));

	cr_assert_eq(rule_named(p, "per-ip")->nallow, 4); /* lists expanded */
	cr_assert_eq(rule_named(p, "everyone")->nallow, 0);
	cr_assert_str_eq(allow_checked(p, "10.20.3.4", false), "everyone,");
	cr_assert_str_eq(allow_checked(p, "192.0.2.7", false), "everyone,");
	cr_assert_str_eq(allow_checked(p, "198.51.100.255", false),
	                 "everyone,");
	cr_assert_str_eq(allow_checked(p, "2001:db8:42:ffff::1", false),
	                 "everyone,v4-all,");
	policy_unref(p);
}

Test(policy, allow_list_limits_addresses_just_outside)
{
	struct policy *p = load_ok(data("allow.yaml"));

	cr_assert_str_eq(allow_checked(p, "10.21.0.0", false),
	                 "per-ip,everyone,");
	cr_assert_str_eq(allow_checked(p, "192.0.2.8", false), /* a /32 */
	                 "per-ip,everyone,");
	cr_assert_str_eq(allow_checked(p, "2001:db8:43::", false),
	                 "per-ip,everyone,v4-all,");
	policy_unref(p);
}

Test(policy, allow_list_matches_v4_mapped_and_string_addresses)
{
	struct policy *p = load_ok(data("allow.yaml"));

	/* a dual-stack listener's ::ffff:a.b.c.d is the IPv4 client */
	cr_assert_str_eq(allow_checked(p, "::ffff:10.20.0.1", false),
	                 "everyone,");
	/* an address from a header, as a string */
	cr_assert_str_eq(allow_checked(p, "10.20.0.1", true), "everyone,");
	cr_assert_str_eq(allow_checked(p, "2001:db8:42::9", true),
	                 "everyone,v4-all,");
	policy_unref(p);
}

Test(policy, allow_list_never_matches_a_missing_or_unreadable_ip)
{
	struct policy *p = load_ok(data("allow.yaml"));

	cr_assert_str_eq(allow_checked(p, NULL, false),
	                 "per-ip,everyone,anyone,v4-all,");
	cr_assert_str_eq(allow_checked(p, "not-an-address", true),
	                 "per-ip,everyone,anyone,v4-all,");
	cr_assert_str_eq(allow_checked(p, "10.20.0.1 ", true),
	                 "per-ip,everyone,anyone,v4-all,");
	policy_unref(p);
}

Test(policy, allow_list_errors_name_the_item)
{
	char       *err = load_fails("allow-errors.yaml");
	const char *f = "allow-errors.yaml";

	has_line(err, f, "2:30",
	         "allow_lists.monitoring[1]: \"10.0.0.1/8\": "
	         "host bits set past the prefix length (a typo? write the "
	         "network address, or the address alone)");
	has_line(err, f, "2:42",
	         "allow_lists.monitoring[2]: \"::/129\": "
	         "prefix length must be a decimal 0..128");
	has_line(err, f, "2:52",
	         "allow_lists.monitoring[3]: \"nonsense\": "
	         "not an IPv4 or IPv6 address (want 10.0.0.0/8, 2001:db8::/32 "
	         "or a single address)");
	has_line(err, f, "4:3",
	         "allow_lists.bad name!: name must be 1-64 "
	         "letters, digits, '-', '_' or '.'");
	has_line(err, f, "5:11",
	         "allow_lists.scalar: expected a list of "
	         "address ranges ([10.0.0.0/8, \"2001:db8::/32\"])");
	has_line(err, f, "11:25",
	         "rules[0].allow[1]: unknown allow list "
	         "\"officee\" (define it under allow_lists:, or write an "
	         "address range)");
	has_line(err, f, "11:34",
	         "rules[0].allow[2]: \"1.2.3\": not an IPv4 "
	         "or IPv6 address (want 10.0.0.0/8, 2001:db8::/32 or a single "
	         "address)");
	has_line(err, f, "11:43",
	         "rules[0].allow[3]: \"10.0.0.0/33\": prefix "
	         "length must be a decimal 0..32");
	has_line(
		err, f, "16:12",
		"rules[1].allow: expected a list of "
		"allow-list names or address ranges ([monitoring, 192.0.2.7])");
	cr_assert_eq(count_lines(err), 9, "%s", err);
	free(err);
}

Test(policy, unused_allow_list_warns)
{
	char          *err = NULL, *warn = NULL;
	struct policy *p;
	FILE          *f = fopen("/tmp/rl-allow-unused.yaml", "w");

	cr_assert_not_null(f);
	fputs("allow_lists:\n  spare: [192.0.2.0/24]\nrules:\n"
	      "  - { name: r, message: m, key: \"{ip}\", rate: 1/s }\n",
	      f);
	fclose(f);
	p = policy_load_with_warnings("/tmp/rl-allow-unused.yaml", &err, &warn);
	cr_assert_not_null(p, "%s", err ? err : "");
	cr_assert_not_null(warn);
	cr_assert(strstr(warn, "allow_lists.spare: no rule uses this list"),
	          "%s", warn);
	free(warn);
	policy_unref(p);
	unlink("/tmp/rl-allow-unused.yaml");
}

/* ---- the response phase (issue 19) -------------------------------------
 *
 * count: response with a status condition (a list, a class such as 5xx),
 * charge: response (every status, the response's cost), count: failures
 * kept as its alias with its old meaning, what is refused at load, and the
 * strict reading of a cost a response reports. The C twins and the script
 * charge these checks as any FORCE (tests/integration/test_script.c). */

/* A response of tenant acme from 192.0.2.9 with <status> and, unless
 * NULL, the cost header <cost>. */
static int
response(const struct policy *p, int64_t status, const char *cost,
         struct policy_rejects *rej)
{
	msg_reset(POLICY_RESPONSE_MSG);
	add_str("tenant", "acme");
	add_str("ip", "192.0.2.9");
	add_int("status", status);
	if (cost)
		add_str("cost", cost);
	return policy_build_checks_full(p, &msg, -1, checks, POLICY_MAX_CHECKS,
	                                NULL, rej);
}

Test(policy, response_request_phase_peeks_one_unit_and_charges_nothing)
{
	struct policy      *p = load_ok(data("response.yaml"));
	const struct check *c;
	int                 n;

	msg_reset("rl-request");
	add_str("tenant", "acme");
	add_str("ip", "192.0.2.9");
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	cr_assert_eq(n, 3);
	for (int i = 0; i < n; i++) {
		cr_assert_eq(checks[i].op, LIM_OP_PEEK, "%s",
		             checks[i].rule->name);
		cr_assert_eq(checks[i].cost, 1);
	}
	c = find(n, "tokens");
	cr_assert_str_eq(c->key, "rl:{tokens:tenant:acme}");
	policy_unref(p);
}

Test(policy, response_charge_response_forces_the_reported_cost_on_any_status)
{
	struct policy      *p = load_ok(data("response.yaml"));
	const struct check *c;
	int                 n;

	n = response(p, 200, "300", NULL);
	cr_assert_eq(n, 1);
	c = find(n, "tokens");
	cr_assert_not_null(c);
	cr_assert_eq(c->op, LIM_OP_FORCE);
	cr_assert_eq(c->cost, 300);
	cr_assert_str_eq(c->key, "rl:{tokens:tenant:acme}");
	n = response(p, 404, "7", NULL);
	cr_assert_not_null(c = find(n, "tokens"));
	cr_assert_eq(c->cost, 7);
	policy_unref(p);
}

Test(policy, response_status_class_5xx_counts_only_5xx)
{
	struct policy      *p = load_ok(data("response.yaml"));
	const struct check *c;
	int                 n;

	n = response(p, 503, "1", NULL);
	c = find(n, "errors-5xx");
	cr_assert_not_null(c);
	cr_assert_eq(c->op, LIM_OP_FORCE);
	cr_assert_eq(c->cost, 1, "a constant cost: the header is not read");
	cr_assert_str_eq(c->key, "rl:{errors-5xx:ip:192.0.2.9}");
	cr_assert_not_null(find(response(p, 500, "1", NULL), "errors-5xx"));
	cr_assert_not_null(find(response(p, 599, "1", NULL), "errors-5xx"));
	cr_assert_null(find(response(p, 200, "1", NULL), "errors-5xx"));
	cr_assert_null(find(response(p, 499, "1", NULL), "errors-5xx"));
	cr_assert_null(find(response(p, 404, "1", NULL), "errors-5xx"));
	policy_unref(p);
}

Test(policy, response_status_list_counts_only_its_statuses)
{
	struct policy *p = load_ok(data("response.yaml"));

	cr_assert_not_null(find(response(p, 401, "1", NULL), "denied"));
	cr_assert_not_null(find(response(p, 429, "1", NULL), "denied"));
	cr_assert_null(find(response(p, 402, "1", NULL), "denied"));
	cr_assert_null(find(response(p, 500, "1", NULL), "denied"));
	policy_unref(p);
}

Test(policy, response_count_failures_keeps_its_meaning)
{
	struct policy     *p = load_ok(data("response.yaml"));
	const struct rule *r = &p->rules[3];
	int                n;

	cr_assert_eq(r->count, COUNT_FAILURES);
	cr_assert_str_eq(r->result_message, "rl-login-result");
	cr_assert_eq(r->nfailure_status, 2);
	cr_assert_eq(r->fail, FAIL_CLOSED);
	cr_assert_eq(p->rules[0].fail, FAIL_OPEN);
	msg_reset("rl-login-result");
	add_str("user", "alice");
	add_int("status", 403);
	add_str("cost", "50"); /* not read: a failure costs 1 */
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	cr_assert_eq(n, 1);
	cr_assert_eq(checks[0].op, LIM_OP_FORCE);
	cr_assert_eq(checks[0].cost, 1);
	msg_reset("rl-login-result");
	add_str("user", "alice");
	add_int("status", 500);
	cr_assert_eq(policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS),
	             0);
	policy_unref(p);
}

Test(policy, response_malformed_costs_charge_nothing_and_are_reported)
{
	static const char *const bad[] = {
		"-5",
		"12.5",
		"abc",
		"",
		" 3",
		"3 ",
		"+3",
		"1e3",
		"0x10",
		"9007199254740993",
		"99999999999999999999999",
		"18446744073709551617",
		"-0x1",
	};
	struct policy *p = load_ok(data("response.yaml"));

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct policy_rejects rej = { 0 };
		int                   n = response(p, 200, bad[i], &rej);

		cr_assert_null(find(n, "tokens"), "cost \"%s\" charged",
		               bad[i]);
		cr_assert_eq(rej.n, 1, "cost \"%s\"", bad[i]);
		cr_assert_str_eq(rej.rule[0]->name, "tokens");
	}
	{
		struct policy_rejects rej = { 0 };
		int                   n;

		msg_reset(POLICY_RESPONSE_MSG); /* an integer arg, negative */
		add_str("tenant", "acme");
		add_int("status", 200);
		add_int("cost", -3);
		n = policy_build_checks_full(p, &msg, -1, checks,
		                             POLICY_MAX_CHECKS, NULL, &rej);
		cr_assert_null(find(n, "tokens"));
		cr_assert_eq(rej.n, 1);
	}
	{
		struct policy_rejects rej = { 0 };
		int n = response(p, 200, NULL, &rej); /* no header at all */

		cr_assert_null(find(n, "tokens"));
		cr_assert_eq(rej.n, 1);
	}
	{
		struct policy_rejects rej = { 0 };
		const struct check   *c;
		int n = response(p, 200, "9007199254740992", &rej);

		cr_assert_eq(rej.n, 0, "2^53 itself is a cost");
		cr_assert_not_null(c = find(n, "tokens"));
		cr_assert_eq(c->cost, INT64_C(9007199254740992));
	}
	policy_unref(p);
}

Test(policy, response_refused_at_load_with_clear_errors)
{
	char          *err = NULL, *warn = NULL;
	struct policy *p = policy_load_with_warnings(
		data("response-errors.yaml"), &err, &warn);

	cr_assert_null(p);
	cr_assert_not_null(err);
	cr_assert_not_null(strstr(err,
	                          "rules[0].charge: a response's cost does "
	                          "not apply to concurrency"),
	                   "%s", err);
	cr_assert_not_null(strstr(err,
	                          "rules[1].charge: charge: response is "
	                          "count: response; it cannot go with count: "
	                          "failures"),
	                   "%s", err);
	cr_assert_not_null(strstr(err, "rules[2].status[0]: expected an HTTP "
	                               "status 100-599 or a class 1xx-5xx, got "
	                               "\"6xx\""),
	                   "%s", err);
	cr_assert_not_null(strstr(err, "rules[2].status[1]:"), "%s", err);
	cr_assert_not_null(strstr(err, "rules[3].status: give status or "
	                               "failure_status, not both"),
	                   "%s", err);
	free(err);
	free(warn);
}

/* ---- reserve, then settle (issue 19, item 3) ------------------------------
 * The request phase holds reserve: units with a CHECK that carries the
 * request id; the response settles with a FORCE of the actual cost and the
 * same id (the script's contract, limiter.h). */

static int
reserve_request(const struct policy *p, const char *max_tokens)
{
	msg_reset("rl-request");
	add_str("tenant", "acme");
	add_str("id", "req-1");
	if (max_tokens)
		add_str("max_tokens", max_tokens);
	return policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
}

Test(policy, reserve_holds_the_arg_at_the_request_with_the_id)
{
	struct policy      *p = load_ok(data("reserve.yaml"));
	const struct check *c;
	int                 n;

	cr_assert(p->rules[0].reserves);
	cr_assert_eq(p->rules[0].count, COUNT_RESPONSE);
	cr_assert_str_eq(p->rules[0].result_message, POLICY_RESPONSE_MSG);
	cr_assert_eq(p->rules[0].lim.reserve_lease_us, POLICY_DEF_RESERVE_LEASE,
	             "10m by default");
	cr_assert_eq(p->rules[1].lim.reserve_lease_us, 30 * LIM_USEC_PER_SEC);
	n = reserve_request(p, "300");
	cr_assert_not_null(c = find(n, "tokens"));
	cr_assert_eq(c->op, LIM_OP_CHECK);
	cr_assert_eq(c->cost, 300);
	cr_assert_eq(c->memberlen, 5);
	cr_assert_str_eq(c->member, "req-1");
	cr_assert_not_null(c = find(n, "fixed"));
	cr_assert_eq(c->cost, 100, "a constant reservation");
	{
		int64_t pp[LIM_SCRIPT_PARAMS];

		lim_script_params(&c->lim, pp);
		cr_assert_eq(pp[5], 30 * LIM_USEC_PER_SEC,
		             "the lease goes to the script");
		cr_assert(lim_script_sends_member(c->lim.algo, pp));
	}
	policy_unref(p);
}

Test(policy, reserve_missing_or_malformed_holds_nothing)
{
	struct policy *p = load_ok(data("reserve.yaml"));
	const char    *bad[] = { NULL, "-3", "abc", "1.5" };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const struct check *c =
			find(reserve_request(p, bad[i]), "tokens");

		cr_assert_not_null(c, "max_tokens %s",
		                   bad[i] ? bad[i] : "none");
		cr_assert_eq(c->op, LIM_OP_CHECK);
		cr_assert_eq(c->cost, 0);
	}
	policy_unref(p);
}

/* X-Max-Tokens is the client's: a number past int64 is not malformed but
 * larger than any budget, and never fits (it reserved 0 before, and the
 * request was admitted with nothing held); leading zeros change nothing. */
Test(policy, reserve_past_int64_never_fits)
{
	struct policy      *p = load_ok(data("reserve.yaml"));
	const struct check *c;

	c = find(reserve_request(p, "99999999999999999999"), "tokens");
	cr_assert_not_null(c);
	cr_assert_gt(c->cost, LIM_COST_MAX);
	c = find(reserve_request(p, "0000000000000000000300"), "tokens");
	cr_assert_not_null(c);
	cr_assert_eq(c->cost, 300);
	c = find(reserve_request(p, "-99999999999999999999"), "tokens");
	cr_assert_not_null(c);
	cr_assert_eq(c->cost, 0, "negative: malformed, as -3");
	policy_unref(p);
}

/* A response of request req-1 of tenant acme. */
static int
settle_msg(const struct policy *p, int64_t status, const char *cost,
           struct policy_rejects *rej)
{
	msg_reset(POLICY_RESPONSE_MSG);
	add_str("tenant", "acme");
	add_str("id", "req-1");
	add_int("status", status);
	add_str("cost", cost);
	return policy_build_checks_full(p, &msg, -1, checks, POLICY_MAX_CHECKS,
	                                NULL, rej);
}

/* The settle: the actual cost on a matching status, 0 (all refunded) on
 * another, -1 (the reservation stands) for a malformed cost; no id, no
 * settle. */
Test(policy, reserve_settles_with_the_actual_cost_and_the_id)
{
	struct policy        *p = load_ok(data("reserve.yaml"));
	struct policy_rejects rej = { 0 };
	const struct check   *c;

	c = find(settle_msg(p, 200, "120", &rej), "tokens");
	cr_assert_not_null(c);
	cr_assert_eq(c->op, LIM_OP_FORCE);
	cr_assert_eq(c->cost, 120);
	cr_assert_str_eq(c->member, "req-1");
	cr_assert_not_null(c = find(settle_msg(p, 500, "120", NULL), "tokens"),
	                   "another status still settles");
	cr_assert_eq(c->cost, 0, "at 0: the whole reservation refunded");
	rej.n = 0;
	cr_assert_not_null(c = find(settle_msg(p, 200, "-4", &rej), "tokens"));
	cr_assert_eq(c->cost, -1, "the reservation stands");
	cr_assert_eq(rej.n, 2, "and the cost is reported (both rules)");
	cr_assert_null(find(response(p, 200, "120", NULL), "tokens"),
	               "no id: nothing to settle");
	policy_unref(p);
}

Test(policy, reserve_refused_at_load_with_clear_errors)
{
	char *err = load_fails("reserve-errors.yaml");

	cr_assert_not_null(strstr(err, "rules[0].reserve: concurrency holds "
	                               "a slot, not units"),
	                   "%s", err);
	cr_assert_not_null(strstr(err, "rules[1].reserve: sliding-log cannot "
	                               "hold a reservation exactly"),
	                   "%s", err);
	cr_assert_not_null(strstr(err, "rules[2].reserve: leaky-bucket cannot "
	                               "refund exactly"),
	                   "%s", err);
	/* store: local reserves (local.h); its algorithm is still refused
	 * as the script's is */
	cr_assert_not_null(strstr(err, "rules[3].reserve: sliding-log cannot "
	                               "hold a reservation exactly"),
	                   "%s", err);
	cr_assert_null(strstr(err, "not with store: local"), "%s", err);
	cr_assert_not_null(strstr(err, "rules[4].reserve: the response "
	                               "settles a reservation: not with "
	                               "count: failures"),
	                   "%s", err);
	cr_assert_not_null(strstr(err, "rules[5].reserve: expected an integer "
	                               "or one \"{arg}\""),
	                   "%s", err);
	cr_assert_not_null(strstr(err, "rules[6].reserve: reserve must be at "
	                               "most 4294967296"),
	                   "%s", err);
	free(err);
}

/* ---- hostile files --------------------------------------------------------
 */

/* Writes <len> bytes of <text> to a fresh file; returns its path. */
static const char *
write_tmp(const char *text, size_t len)
{
	static char tmp[64];
	FILE       *f;
	int         fd;

	snprintf(tmp, sizeof(tmp), "/tmp/rl-policy-XXXXXX");
	fd = mkstemp(tmp);
	cr_assert_geq(fd, 0);
	f = fdopen(fd, "w");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(text, 1, len, f), len);
	fclose(f);
	return tmp;
}

/* Loads <len> bytes of <text> from a file, which must fail. Returns the
 * error (to free) with the file's name cut out, so that its lines start
 * at ":LINE:COL:". */
static char *
load_text_fails(const char *text, size_t len)
{
	const char    *path = write_tmp(text, len);
	char          *err = NULL, *warn = NULL, *out, *o;
	const char    *e, *hit;
	struct policy *p = policy_load_with_warnings(path, &err, &warn);
	size_t         plen = strlen(path);

	cr_assert_null(p, "loaded:\n%.200s", text);
	cr_assert_not_null(err);
	o = out = malloc(strlen(err) + 1);
	cr_assert_not_null(out);
	for (e = err; (hit = strstr(e, path)) != NULL; e = hit + plen) {
		memcpy(o, e, (size_t)(hit - e));
		o += hit - e;
	}
	strcpy(o, e);
	unlink(path);
	free(err);
	free(warn);
	return out;
}

/* A sliding-log limit past LIM_LOG_MAX is an error at its rule, which
 * names the way out. */
Test(policy, a_sliding_log_limit_past_the_cap_is_refused)
{
	static const char text[] =
		"rules:\n"
		"  - { name: a, message: m, key: \"{ip}\", "
		"algorithm: sliding-log, limit: 1000001, window: 1h }\n";
	char *err = load_text_fails(text, sizeof(text) - 1);

	cr_assert(strstr(err, ":2:") && strstr(err, "sliding-window"), "%s",
	          err);
	free(err);
}

/* libyaml's reader errors (bad UTF-8, control characters) carry a byte
 * offset, not a mark: the error must still name the line they are on,
 * not 1:1. */
Test(policy, bad_utf8_and_control_bytes_name_their_line)
{
	static const char *const bad[] = { "\xc3\x28", "\x01", "\xff" };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char text[512], *err;
		int  n;

		n = snprintf(
			text, sizeof(text),
			"rules:\n"
			"  - { name: a, message: m, key: \"{ip}\", rate: 1/s }\n"
			"  - { name: b, message: m, key: \"x%s{ip}\", rate: 1/s }\n",
			bad[i]);
		err = load_text_fails(text, (size_t)n);
		cr_assert(strncmp(err, ":3:", 3) == 0,
		          "want \":3:...\", got: %s", err);
		free(err);
	}
}

/* 100000 nested flow sequences (200 kB): libyaml's scanner is quadratic
 * in the flow depth and took minutes; the file is refused at once, with
 * its line. */
Test(policy, deep_nesting_is_refused_quickly)
{
	enum { DEPTH = 100000 };
	char          *text = malloc(2 * DEPTH + 16), *err = NULL, *warn = NULL;
	const char    *path;
	struct policy *p;
	size_t         n = 0;

	alarm(20); /* a quadratic load takes minutes: SIGALRM fails it */
	cr_assert_not_null(text);
	n += (size_t)sprintf(text, "x:\n  y: ");
	memset(text + n, '[', DEPTH);
	n += DEPTH;
	memset(text + n, ']', DEPTH);
	n += DEPTH;
	text[n++] = '\n';
	path = write_tmp(text, n);
	free(text);
	p = policy_load_with_warnings(path, &err, &warn);
	cr_assert_null(p);
	cr_assert_not_null(err);
	cr_assert(strstr(err, ":2:") && strstr(err, "nested deeper than"), "%s",
	          err);
	unlink(path);
	free(err);
	free(warn);
}

/* A static tenants: map of 200000 entries (4.5 MB): the duplicate checks
 * compared each key with every earlier one (quadratic: minutes for -c and
 * for a reload, which blocks the main loop); now it loads in about a
 * second, and a repeated tenant or key is still refused with its line. */
Test(policy, big_tenants_map_loads_quickly)
{
	enum { N = 200000 };
	size_t         cap = (size_t)N * 32 + 512, n = 0;
	char          *text = malloc(cap), *err = NULL, *warn = NULL;
	char           tmp[] = "/tmp/rl-policy-XXXXXX";
	struct policy *p;
	FILE          *f;
	int            fd;

	alarm(30); /* a quadratic load takes minutes: SIGALRM fails it */
	cr_assert_not_null(text);
	n += (size_t)snprintf(text + n, cap - n,
	                      "plans:\n  free: { rate: 60/min }\n"
	                      "plan_lookup: { default: free }\ntenants:\n");
	for (int i = 0; i < N; i++)
		n += (size_t)snprintf(text + n, cap - n,
		                      "  tenant-%08d: free\n", i);
	n += (size_t)snprintf(text + n, cap - n,
	                      "rules:\n  - { name: t, message: m, "
	                      "key: \"{tenant}\", plan: rate }\n");
	fd = mkstemp(tmp);
	cr_assert_geq(fd, 0);
	f = fdopen(fd, "w");
	cr_assert_eq(fwrite(text, 1, n, f), n);
	fclose(f);
	p = policy_load_with_warnings(tmp, &err, &warn);
	cr_assert_not_null(p, "%s", err ? err : "");
	cr_assert_eq(p->ntenants, N);
	policy_unref(p);
	free(warn);
	warn = NULL;

	/* the same with a top-level key given twice at the end */
	f = fopen(tmp, "w");
	cr_assert_not_null(f);
	fwrite(text, 1, n, f);
	fputs("tenants2: 1\ntenants2: 2\n", f);
	fclose(f);
	free(text);
	p = policy_load_with_warnings(tmp, &err, &warn);
	cr_assert_null(p);
	cr_assert(strstr(err, ":200008:1: tenants2: duplicate key "
	                      "(first at line 200007)"),
	          "%s", err);
	free(err);
	free(warn);
	unlink(tmp);
}

Test(policy, repeated_tenant_is_refused)
{
	static const char text[] =
		"plans:\n  free: { rate: 60/min }\n  pro: { rate: 600/min }\n"
		"plan_lookup: { default: free }\n"
		"tenants:\n  acme: pro\n  beta: free\n  acme: free\nrules: []\n";
	char           tmp[] = "/tmp/rl-policy-XXXXXX", *err = NULL;
	struct policy *p;
	FILE          *f;
	int            fd = mkstemp(tmp);

	cr_assert_geq(fd, 0);
	f = fdopen(fd, "w");
	fputs(text, f);
	fclose(f);
	p = policy_load(tmp, &err);
	cr_assert_null(p);
	cr_assert(strstr(err, ":8:3: tenants.acme: duplicate tenant"), "%s",
	          err);
	cr_assert_eq(count_lines(err), 1, "%s", err);
	free(err);
	unlink(tmp);
}

/* A plain YAML null (key: null, message: ~) was taken as its text: every
 * request of `key: null` shared one key, a global limit where a per-client
 * one was meant. It is an error at its place; quoted, it is the text. */
Test(policy, a_plain_yaml_null_is_an_error_at_its_place)
{
	static const char *const nulls[] = { "null", "~", "Null", "NULL" };

	for (size_t i = 0; i < sizeof(nulls) / sizeof(nulls[0]); i++) {
		char text[256], *err;
		int  n;

		n = snprintf(
			text, sizeof(text),
			"rules:\n"
			"  - { name: a, message: m, key: %s, rate: 1/s }\n",
			nulls[i]);
		err = load_text_fails(text, (size_t)n);
		cr_assert(strstr(err, ":2:33: rules[0].key: expected a string, "
		                      "got null") != NULL,
		          "%s: got: %s", nulls[i], err);
		free(err);
	}
}

Test(policy, a_quoted_null_is_the_text)
{
	static const char text[] =
		"rules:\n"
		"  - { name: a, message: m, key: \"null\", rate: 1/s }\n";
	const char    *path = write_tmp(text, sizeof(text) - 1);
	char          *err = NULL, *warn = NULL;
	struct policy *p = policy_load_with_warnings(path, &err, &warn);

	cr_assert_not_null(p, "%s", err);
	cr_assert_eq(p->nrules, 1);
	policy_unref(p);
	free(warn);
	unlink(path);
}

/* Loads <text> from a file, which must load; the caller unrefs it. */
static struct policy *
load_text_ok(const char *text)
{
	const char    *path = write_tmp(text, strlen(text));
	struct policy *p = load_ok(path);

	unlink(path);
	return p;
}

/* Asserts that <text> fails to load with the one error line <line>
 * (":LINE:COL: path: message", the file's name cut). */
static void
fails_with_only(const char *text, const char *line)
{
	char *err = load_text_fails(text, strlen(text)), want[256];

	snprintf(want, sizeof(want), "%s\n", line);
	cr_assert(strstr(err, want), "want %s, got:\n%s", line, err);
	cr_assert_eq(count_lines(err), 1, "got:\n%s", err);
	free(err);
}

/* A plan gives a plan: rate rule its rate and burst, nothing more: the
 * rule's own mode: delay (and max_delay) stay the rule's. They were lost
 * (plan_lim built from the plan alone): a delaying leaky bucket became a
 * meter, answering 429 where the policy said to hold the request. */
Test(policy, plan_rate_keeps_the_rules_delay_mode)
{
	struct policy *p = load_text_ok(
		"plans:\n  free: { rate: 10/s, burst: 2 }\n"
		"  pro: { rate: 100/s, burst: 20 }\n"
		"plan_lookup: { default: free }\n"
		"tenants: { acme: pro }\n"
		"rules:\n  - { name: lb, message: m, key: \"{tenant}\", "
		"algorithm: leaky-bucket, mode: delay, max_delay: 40ms, "
		"plan: rate }\n");
	const char *tenants[] = { "acme", "nobody" };

	for (int i = 0; i < 2; i++) {
		msg_reset("m");
		add_str("tenant", tenants[i]);
		cr_assert_eq(policy_build_checks(p, &msg, checks,
		                                 POLICY_MAX_CHECKS),
		             1);
		cr_assert_eq(checks[0].lim.algo, LIM_LEAKY_BUCKET);
		cr_assert_eq(checks[0].lim.rate, i == 0 ? 100 : 10);
		cr_assert_eq(checks[0].lim.max_delay_us, 40000,
		             "tenant %s: max_delay %lld", tenants[i],
		             (long long)checks[0].lim.max_delay_us);
	}
	cr_assert_eq(p->rules[0].lim.max_delay_us, 40000);
	policy_unref(p);
}

/* "N/month" is a calendar month (UTC) on a fixed window, whether the rule
 * gives the rate or takes it from its plan (plan: rate); a plan's rate
 * made 30-day windows from the epoch, out of step with the months. */
Test(policy, plan_rate_per_month_is_a_calendar_month)
{
	struct policy *p = load_text_ok(
		"plans:\n  free: { rate: 1000/month }\n"
		"  pro: { rate: 600/min }\n"
		"plan_lookup: { default: free }\n"
		"tenants: { acme: pro }\n"
		"rules:\n  - { name: own, message: m, key: \"{tenant}\", "
		"algorithm: fixed-window, rate: 1000/month }\n"
		"  - { name: fw, message: m, key: \"{tenant}\", "
		"algorithm: fixed-window, plan: rate }\n"
		"  - { name: g, message: m, key: \"{tenant}\", plan: rate }\n");
	int n;

	msg_reset("m");
	add_str("tenant", "nobody");
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	cr_assert_eq(n, 3);
	cr_assert_eq(find(n, "own")->lim.calendar, LIM_CAL_MONTH);
	cr_assert_eq(find(n, "fw")->lim.calendar, LIM_CAL_MONTH);
	cr_assert_eq(find(n, "fw")->lim.rate, 1000);
	cr_assert_eq(find(n, "g")->lim.calendar, LIM_CAL_NONE);
	msg_reset("m");
	add_str("tenant", "acme");
	n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
	cr_assert_eq(find(n, "fw")->lim.calendar, LIM_CAL_NONE);
	cr_assert_eq(find(n, "fw")->lim.period_us, 60 * LIM_USEC_PER_SEC);
	policy_unref(p);
}

/* plan: rate takes rate and burst from the plan: a rule's own burst: would
 * be ignored, so it is refused as its rate: is, naming the line. */
Test(policy, burst_with_plan_rate_is_refused)
{
	static const char text[] =
		"plans:\n  free: { rate: 60/min, burst: 10 }\n"
		"plan_lookup: { default: free }\n"
		"rules:\n  - name: t\n    message: m\n    key: \"{tenant}\"\n"
		"    plan: rate\n    burst: 500\n";

	fails_with_only(text, ":9:12: rules[0].burst: not used with plan: "
	                      "(the plan gives it)");
}

/* A cost arg that is an integer too large for int64 (20 digits, or a
 * uint64 past INT64_MAX) is a cost that can never fit, as one of 18
 * digits is, not a malformed one: it followed missing:, so a rule with
 * missing: skip (or a fallback: cost 1) let a client name a huge cost and
 * be charged nothing (or one unit). */
Test(policy, cost_too_large_for_int64_never_fits)
{
	struct policy *p = load_ok(data("checks.yaml"));
	const char    *sizes[] = { "999999999999999999",
		                   "99999999999999999999" };
	struct spop_arg *a;
	int              n;

	for (int i = 0; i < 3; i++) {
		msg_reset("rl-upload");
		add_str("tenant", "acme");
		if (i < 2) {
			add_str("size", sizes[i]);
		} else {
			a = add("size", SPOP_DATA_UINT64);
			a->value.v.u = UINT64_MAX;
		}
		n = policy_build_checks(p, &msg, checks, POLICY_MAX_CHECKS);
		cr_assert_eq(n, 2, "case %d: %d checks", i, n);
		cr_assert_eq(find(n, "bytes")->kind, CHECK_EVAL);
		cr_assert_eq(find(n, "bytes-skip")->kind, CHECK_EVAL);
		cr_assert_gt(find(n, "bytes")->cost, LIM_COST_MAX);
		cr_assert_gt(find(n, "bytes-skip")->cost, LIM_COST_MAX);
	}
	policy_unref(p);
}

/* A concurrency rule whose release: is its own message bound both roles
 * to every request: each one took a slot and, in the same call, released
 * it (or another request's of the same id), and the RateLimit headers
 * listed the rule twice. Refused, as result_message: equal to message is. */
Test(policy, release_equal_to_message_is_refused)
{
	static const char text[] =
		"rules:\n  - name: exports\n    message: rl-request\n"
		"    key: \"e:{tenant}\"\n    algorithm: concurrency\n"
		"    limit: 2\n    release: rl-request\n";

	fails_with_only(text, ":7:14: rules[0].release: must differ from "
	                      "message");
}

/* Asserts that <text> loads with one warning, which holds <part>
 * (":LINE:COL: path: message" or its start, the file's name cut). */
static void
loads_with_one_warning(const char *text, const char *part)
{
	const char    *path = write_tmp(text, strlen(text));
	char          *err = NULL, *warn = NULL;
	struct policy *p = policy_load_with_warnings(path, &err, &warn);

	unlink(path);
	cr_assert_not_null(p, "%s", err ? err : "");
	cr_assert_not_null(warn, "no warning");
	cr_assert(strstr(warn, part), "want %s, got:\n%s", part, warn);
	cr_assert_eq(count_lines(warn), 1, "got:\n%s", warn);
	free(warn);
	policy_unref(p);
}

/* count: failures charges 1 per failure whatever cost: says (README: "its
 * older form: 401/403, cost 1"): a cost: there was dropped without a
 * word, so a login rule meant to weigh each failure 5 counted 1. It loads
 * (older files keep working) with a warning naming the line. */
Test(policy, cost_with_count_failures_is_warned_ignored)
{
	static const char text[] =
		"rules:\n  - name: login\n    message: rl-login\n"
		"    key: \"u:{user}\"\n    algorithm: sliding-window\n"
		"    limit: 5\n    window: 15m\n    count: failures\n"
		"    cost: 5\n";

	loads_with_one_warning(text, ":9:11: rules[0].cost: ignored by count: "
	                             "failures");
}

/* A concurrency rule holds one slot per request whatever its cost (0
 * takes none): cost: 5 was taken silently as 1. It loads with a warning
 * naming the line; cost: "{arg}" (0 or more per request) does not warn. */
Test(policy, constant_cost_above_one_on_concurrency_is_warned)
{
	static const char text[] =
		"rules:\n  - name: exports\n    message: rl-request\n"
		"    key: \"e:{tenant}\"\n    algorithm: concurrency\n"
		"    limit: 2\n    release: rl-done\n    cost: 5\n"
		"  - { name: heavy, message: rl-request, key: \"h:{tenant}\", "
		"algorithm: concurrency, limit: 2, release: rl-done, "
		"cost: \"{heavy}\" }\n";

	loads_with_one_warning(text, ":8:11: rules[0].cost: a concurrency "
	                             "rule holds one slot");
}
