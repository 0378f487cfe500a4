/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of agent/override.c: the stored value's text both ways, the
 * table read from "all" (lookup, keys holding spaces and newlines, bad
 * entries skipped), what an override does to a check (limit, allow, deny
 * and its Retry-After, expiry, releases untouched), and ov_make /
 * ov_rule_key as the CLI uses them (the key keys.c builds, bad input).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "override.h"
#include "policy.h"

#define SEC LIM_USEC_PER_SEC

static void
roundtrip(const struct ov_value *v, const char *want)
{
	char            buf[OV_VALUE_MAX];
	struct ov_value back;

	ov_format(v, buf, sizeof(buf));
	cr_assert_str_eq(buf, want);
	cr_assert_eq(ov_parse(buf, strlen(buf), &back), 0);
	cr_assert_eq(back.kind, v->kind);
	cr_assert_eq(back.expires_us, v->expires_us);
	cr_assert_eq(back.rate, v->rate);
	cr_assert_eq(back.period_us, v->period_us);
	cr_assert_eq(back.burst, v->burst);
}

Test(override, values_read_back_as_written)
{
	roundtrip(&(struct ov_value){ .kind = OV_ALLOW }, "allow 0");
	roundtrip(&(struct ov_value){ .kind = OV_DENY, .expires_us = 17 },
	          "deny 17");
	roundtrip(&(struct ov_value){ .kind = OV_LIMIT,
	                              .rate = 100,
	                              .period_us = 60 * SEC,
	                              .burst = 20 },
	          "limit 0 100 60000000 20 0");
}

Test(override, rejects_malformed_values)
{
	static const char *const bad[] = {
		"",
		"allow",
		"allow ",
		"allow -1",
		"allow 1 2",
		"permit 0",
		"deny 1x",
		"limit 0 100",
		"limit 0 0 1 1 0",
		"limit 0 1 1 1 9",
		"limit 0 1 1 1 0 ",
		"deny 99999999999999999999",
		"ALLOW 0",
	};
	struct ov_value v;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(ov_parse(bad[i], strlen(bad[i]), &v), -1, "%s",
		             bad[i]);
}

static struct check
check_of(const char *key, enum lim_algo algo, int op)
{
	struct check c = { .kind = CHECK_EVAL, .op = op, .cost = 1 };
	const char  *err;

	c.lim = (struct lim_params){
		.algo = algo, .rate = 3, .period_us = 3600 * SEC, .burst = 3
	};
	cr_assert_eq(lim_params_init(&c.lim, &err), 0);
	snprintf(c.key, sizeof(c.key), "%s", key);
	c.keylen = strlen(key);
	return c;
}

static struct ov_table *
table(const char *text)
{
	int              bad = -1;
	struct ov_table *t = ov_table_parse(text, strlen(text), &bad);

	cr_assert_eq(bad, 0, "%s", text);
	return t;
}

Test(override, limit_replaces_the_rule_limit_of_that_key_only)
{
	struct ov_table *t = table("9 rl:{t:a}} limit 0 6 0 0 0\n");
	struct check c = check_of("rl:{t:a}}", LIM_FIXED_WINDOW, LIM_OP_CHECK);
	struct check n = check_of("rl:{t:b}}", LIM_FIXED_WINDOW, LIM_OP_CHECK);
	struct lim_result res;

	cr_assert_eq(ov_apply(t, &c, 1, &res), OV_LIMIT);
	cr_assert_eq(c.lim.rate, 6);
	cr_assert_eq(c.lim.period_us, 3600 * SEC); /* the rule's window */
	cr_assert_eq(ov_apply(t, &n, 1, &res), OV_NONE);
	cr_assert_eq(n.lim.rate, 3);
	ov_table_free(t);
}

Test(override, allow_and_deny_and_their_ops)
{
	struct ov_table *t = table("5 rl:{a allow 0\n5 rl:{d deny 0\n");
	struct check     a = check_of("rl:{a", LIM_GCRA, LIM_OP_PEEK);
	struct check     d = check_of("rl:{d", LIM_GCRA, LIM_OP_CHECK);
	struct check     f = check_of("rl:{d", LIM_GCRA, LIM_OP_FORCE);
	struct check     r = check_of("rl:{a", LIM_CONCURRENCY, LIM_OP_RELEASE);
	struct lim_result res;

	cr_assert_eq(ov_apply(t, &a, 1, &res), OV_ALLOW);
	cr_assert_eq(ov_apply(t, &d, 1, &res), OV_DENY);
	cr_assert_eq(res.allowed, 0);
	cr_assert_eq(res.retry_after_us, 3600 * SEC, "the window, over 60 s");
	cr_assert_eq(ov_apply(t, &f, 1, &res), OV_NONE, "failures still count");
	cr_assert_eq(ov_apply(t, &r, 1, &res), OV_NONE, "releases always run");
	ov_table_free(t);
}

/* A settle (a reserving rule's FORCE with the request id) is applied
 * whatever its request says: an allow override on its key must not drop
 * it (the reservation stayed charged once the override was gone); a plain
 * FORCE of that key is allowed away as before. */
Test(override, allow_keeps_a_settle)
{
	struct ov_table  *t = table("5 rl:{a allow 0\n");
	struct check      s = check_of("rl:{a", LIM_GCRA, LIM_OP_FORCE);
	struct check      f = check_of("rl:{a", LIM_GCRA, LIM_OP_FORCE);
	struct lim_result res;

	s.lim.reserve_lease_us = 3600 * SEC;
	s.memberlen = (size_t)snprintf(s.member, sizeof(s.member), "req-1");
	cr_assert_eq(ov_apply(t, &s, 1, &res), OV_NONE, "the settle runs");
	cr_assert_eq(ov_apply(t, &f, 1, &res), OV_ALLOW);
	ov_table_free(t);
}

Test(override, deny_retry_counts_down_to_the_expiry_then_ends)
{
	struct ov_table  *t = table("5 rl:{d deny 100000000\n");
	struct check      d = check_of("rl:{d", LIM_GCRA, LIM_OP_CHECK);
	struct lim_result res;

	cr_assert_eq(ov_apply(t, &d, 40 * SEC, &res), OV_DENY);
	cr_assert_eq(res.retry_after_us, 60 * SEC);
	cr_assert_eq(ov_apply(t, &d, 90 * SEC, &res), OV_DENY);
	cr_assert_eq(res.retry_after_us, 10 * SEC);
	cr_assert_eq(ov_apply(t, &d, 100 * SEC, &res), OV_NONE, "expired");
	ov_table_free(t);
}

Test(override, short_window_deny_says_at_least_a_minute)
{
	struct ov_table  *t = table("5 rl:{d deny 0\n");
	struct check      d = check_of("rl:{d", LIM_GCRA, LIM_OP_CHECK);
	struct lim_result res;
	const char       *err;

	d.lim.period_us = SEC;
	cr_assert_eq(lim_params_init(&d.lim, &err), 0);
	cr_assert_eq(ov_apply(t, &d, 1, &res), OV_DENY);
	cr_assert_eq(res.retry_after_us, OV_DENY_RETRY);
	ov_table_free(t);
}

Test(override, limit_invalid_for_the_algorithm_is_ignored)
{
	/* a burst above 2^53 / EI cannot be a valid GCRA */
	struct ov_table  *t = table("5 rl:{g limit 0 1 1 999999999999999 0\n");
	struct check      g = check_of("rl:{g", LIM_GCRA, LIM_OP_CHECK);
	struct lim_result res;

	cr_assert_eq(ov_apply(t, &g, 1, &res), OV_NONE);
	cr_assert_eq(g.lim.rate, 3);
	ov_table_free(t);
}

Test(override, keys_with_spaces_and_newlines_read_by_length)
{
	const char        text[] = "7 rl:{a\nb deny 0\n7 rl:{a b allow 0\n";
	struct ov_table  *t = table(text);
	struct check      d = check_of("rl:{a\nb", LIM_GCRA, LIM_OP_CHECK);
	struct check      a = check_of("rl:{a b", LIM_GCRA, LIM_OP_CHECK);
	struct lim_result res;

	cr_assert_eq(ov_table_count(t), 2);
	cr_assert_eq(ov_apply(t, &d, 1, &res), OV_DENY);
	cr_assert_eq(ov_apply(t, &a, 1, &res), OV_ALLOW);
	ov_table_free(t);
}

Test(override, bad_entries_are_skipped_and_counted)
{
	const char        text[] = "5 rl:{a allow 0\njunk\n500 rl:{x deny 0\n"
				   "5 rl:{b what 0\n5 rl:{c deny 0\n3 ab";
	int               bad = 0;
	struct ov_table  *t = ov_table_parse(text, strlen(text), &bad);
	struct check      c = check_of("rl:{c", LIM_GCRA, LIM_OP_CHECK);
	struct lim_result res;

	cr_assert_eq(ov_table_count(t), 2);
	cr_assert_eq(bad, 4);
	cr_assert_eq(ov_apply(t, &c, 1, &res), OV_DENY);
	ov_table_free(t);
}

Test(override, empty_or_absent_table_changes_nothing)
{
	struct ov_table  *t = table("");
	struct check      c = check_of("rl:{a", LIM_GCRA, LIM_OP_CHECK);
	struct lim_result res;

	cr_assert_eq(ov_apply(t, &c, 1, &res), OV_NONE);
	cr_assert_eq(ov_apply(NULL, &c, 1, &res), OV_NONE);
	cr_assert_eq(ov_table_count(NULL), 0);
	ov_table_free(t);
}

/* ---- ov_make, ov_rule_key ------------------------------------------------ */

static struct policy *
load(const char *yaml)
{
	static const char path[] = "/tmp/rl-override-unit.yaml";
	char             *err = NULL, *warn = NULL;
	FILE             *f = fopen(path, "w");
	struct policy    *p;

	cr_assert_not_null(f);
	fputs(yaml, f);
	fclose(f);
	p = policy_load_with_warnings(path, &err, &warn);
	cr_assert_not_null(p, "%s", err ? err : "");
	free(warn);
	remove(path);
	return p;
}

static const char policy_text[] =
	"rules:\n"
	"  - { name: t, message: m, key: \"tenant:{tenant}:{ip}\", rate: 5/s }\n"
	"  - { name: w, message: m, key: \"{tenant}\", algorithm: fixed-window,"
	" limit: 3, window: 1h }\n";

Test(override, rule_key_is_the_key_the_agent_builds)
{
	struct policy *p = load(policy_text);
	char           key[POLICY_KEY_MAX + 1], err[200];
	const char    *args[] = { "ip=::ffff:10.0.0.1", "tenant=a{b}" };
	size_t         len;

	cr_assert_not_null(
		ov_rule_key(p, "t", args, 2, key, &len, err, sizeof(err)), "%s",
		err);
	cr_assert_str_eq(key, "rl:{t:tenant:a%7Bb%7D:10.0.0.1}");
	cr_assert_eq(len, strlen(key));
	policy_unref(p);
}

Test(override, rule_key_refuses_unknown_missing_extra_and_malformed)
{
	struct policy *p = load(policy_text);
	char           key[POLICY_KEY_MAX + 1], err[200];
	const char *ok1[] = { "tenant=a" }, *extra[] = { "tenant=a", "user=b" };
	const char *noeq[] = { "tenant" }, *empty[] = { "tenant=" };
	size_t      len;

	cr_assert_null(
		ov_rule_key(p, "nope", ok1, 1, key, &len, err, sizeof(err)));
	cr_assert_str_eq(err, "unknown rule \"nope\"");
	cr_assert_null(
		ov_rule_key(p, "t", ok1, 1, key, &len, err, sizeof(err)));
	cr_assert(strstr(err, "needs every one of its {args}"), "%s", err);
	cr_assert_null(
		ov_rule_key(p, "w", extra, 2, key, &len, err, sizeof(err)));
	cr_assert(strstr(err, "has no {user}"), "%s", err);
	cr_assert_null(
		ov_rule_key(p, "w", noeq, 1, key, &len, err, sizeof(err)));
	cr_assert(strstr(err, "want ARG=VALUE"), "%s", err);
	cr_assert_null(
		ov_rule_key(p, "w", empty, 1, key, &len, err, sizeof(err)));
	policy_unref(p);
}

Test(override, make_checks_the_fields_against_the_algorithm)
{
	struct policy     *p = load(policy_text);
	const struct rule *gcra = &p->rules[0], *win = &p->rules[1];
	struct ov_value    v;
	const char        *err;

	cr_assert_eq(ov_make(gcra,
	                     &(struct ov_request){ .kind = OV_LIMIT,
	                                           .rate = "50/s",
	                                           .burst = 10 },
	                     &v, &err),
	             0);
	cr_assert_eq(v.rate, 50);
	cr_assert_eq(v.burst, 10);
	cr_assert_eq(
		ov_make(gcra,
	                &(struct ov_request){ .kind = OV_LIMIT, .limit = 5 },
	                &v, &err),
		-1);
	cr_assert_eq(ov_make(gcra,
	                     &(struct ov_request){ .kind = OV_LIMIT,
	                                           .rate = "lots" },
	                     &v, &err),
	             -1);
	cr_assert_eq(ov_make(win,
	                     &(struct ov_request){ .kind = OV_LIMIT,
	                                           .limit = 7,
	                                           .window = "1m" },
	                     &v, &err),
	             0);
	cr_assert_eq(v.period_us, 60 * SEC);
	cr_assert_eq(
		ov_make(win,
	                &(struct ov_request){ .kind = OV_LIMIT, .rate = "5/s" },
	                &v, &err),
		-1);
	cr_assert_eq(ov_make(win,
	                     &(struct ov_request){ .kind = OV_LIMIT,
	                                           .limit = 7,
	                                           .window = "soon" },
	                     &v, &err),
	             -1);
	cr_assert_eq(
		ov_make(gcra,
	                &(struct ov_request){ .kind = OV_DENY, .ttl_us = -1 },
	                &v, &err),
		-1);
	cr_assert_eq(ov_make(gcra, &(struct ov_request){ .kind = OV_ALLOW }, &v,
	                     &err),
	             0);
	policy_unref(p);
}

/* `--window 0s` is no window: it was taken, stored as 0 ("the rule's
 * window") and so silently ignored, the command exiting 0. */
Test(override, make_refuses_a_zero_window)
{
	struct policy *p = load(policy_text);
	struct ov_value v;
	const char     *err = NULL;

	cr_assert_eq(ov_make(&p->rules[1],
	                     &(struct ov_request){ .kind = OV_LIMIT,
	                                           .limit = 7,
	                                           .window = "0s" },
	                     &v, &err),
	             -1);
	cr_assert(err && strstr(err, "--window"), "%s", err ? err : "");
	policy_unref(p);
}

/* --allow and --deny take no limit: `--deny --window 1h` or `--allow
 * --burst 3` were taken with the limit dropped, exit 0, where the other
 * combinations of fields and kinds exit 2 (OPERATING.md). */
Test(override, make_refuses_limit_fields_on_allow_and_deny)
{
	struct policy *p = load(policy_text);
	struct ov_value v;
	const char     *err = NULL;

	cr_assert_eq(ov_make(&p->rules[1],
	                     &(struct ov_request){ .kind = OV_DENY,
	                                           .window = "1h" },
	                     &v, &err),
	             -1);
	cr_assert_eq(ov_make(&p->rules[0],
	                     &(struct ov_request){ .kind = OV_ALLOW,
	                                           .burst = 3 },
	                     &v, &err),
	             -1);
	cr_assert_eq(ov_make(&p->rules[1],
	                     &(struct ov_request){ .kind = OV_DENY,
	                                           .limit = 3 },
	                     &v, &err),
	             -1);
	cr_assert_eq(ov_make(&p->rules[0],
	                     &(struct ov_request){ .kind = OV_DENY,
	                                           .ttl_us = SEC },
	                     &v, &err),
	             0);
	policy_unref(p);
}

/* tenant=a tenant=b names two keys: which one the command would change
 * is the reader's guess. An arg given twice is an extra arg: exit 2. */
Test(override, rule_key_refuses_an_arg_given_twice)
{
	struct policy *p = load(policy_text);
	char           key[POLICY_KEY_MAX + 1], err[200];
	const char    *twice[] = { "tenant=a", "tenant=b" };
	size_t         len;

	cr_assert_null(
		ov_rule_key(p, "w", twice, 2, key, &len, err, sizeof(err)),
		"built %s", key);
	cr_assert(strstr(err, "twice"), "%s", err);
	policy_unref(p);
}

/* Not a benchmark: prints the request path's cost per check (a miss in a
 * table of 1000 overrides, and a limit hit) for the record. */
Test(override, prints_the_cost_of_a_lookup)
{
	static char      text[64 * 1000];
	size_t           len = 0;
	struct ov_table *t;
	struct check     c =
		check_of("rl:{t:tenant:nobody}", LIM_GCRA, LIM_OP_CHECK);
	struct check      h;
	struct lim_result res;
	struct timespec   t0, t1, t2;
	int               i, n = 1000000;

	for (i = 0; i < 1000; i++) {
		char key[40];
		int  k = snprintf(key, sizeof(key), "rl:{t:tenant:%d}", i);

		len += (size_t)snprintf(text + len, sizeof(text) - len,
		                        "%d %s limit 0 6 0 0 0\n", k, key);
	}
	t = table(text);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0; i < n; i++)
		cr_assert_eq(ov_apply(t, &c, 1, &res), OV_NONE);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	for (i = 0; i < n; i++) {
		h = check_of("rl:{t:tenant:7}", LIM_GCRA, LIM_OP_CHECK);
		cr_assert_eq(ov_apply(t, &h, 1, &res), OV_LIMIT);
	}
	clock_gettime(CLOCK_MONOTONIC, &t2);
	cr_log_info(
		"ov_apply, 1000 overrides: miss %.1f ns, limit hit "
		"(with the check's setup) %.1f ns",
		((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n,
		((t2.tv_sec - t1.tv_sec) * 1e9 + (t2.tv_nsec - t1.tv_nsec)) /
			n);
	ov_table_free(t);
}
