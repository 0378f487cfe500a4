/* SPDX-License-Identifier: Apache-2.0 */
/*
 * decide: most restrictive wins, fail-mode outcomes, the IETF field values
 * and the ACK variables.
 */
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "decide.h"

static struct rule    rules[3];
static struct check   checks[3];
static struct outcome out[3];

static void
setup(void)
{
	static char names[3][8] = { "ip", "tenant", "login" };

	memset(rules, 0, sizeof(rules));
	memset(checks, 0, sizeof(checks));
	memset(out, 0, sizeof(out));
	for (int i = 0; i < 3; i++) {
		const char *err;

		rules[i].name = names[i];
		rules[i].headers = true;
		rules[i].index = i;
		checks[i].rule = &rules[i];
		checks[i].lim.algo = LIM_GCRA;
		checks[i].lim.rate = 60;
		checks[i].lim.period_us = 60 * LIM_USEC_PER_SEC;
		checks[i].lim.burst = 10;
		cr_assert_eq(lim_params_init(&checks[i].lim, &err), 0);
		out[i].src = SRC_STORE;
		out[i].res.allowed = 1;
		out[i].res.remaining = 5;
		out[i].res.next_us = 1000000;
	}
}

static struct lim_result
res(int allowed, int64_t remaining, int64_t retry_us, int64_t next_us)
{
	return (struct lim_result){ allowed, remaining, retry_us, next_us,
		                    next_us };
}

TestSuite(decide, .init = setup);

/* Checks 0 (ip) and 1 (tenant) are CHECKs of cost 1, and ip denies: the
 * request is vetoed, and tenant's allowed answer was never charged. */
static void
ip_vetoes(void)
{
	checks[0].op = checks[1].op = LIM_OP_CHECK;
	checks[0].cost = checks[1].cost = 1;
	out[0].res = res(0, 0, 2000000, 2000000);
}

Test(decide, all_allowed_reports_smallest_remaining)
{
	struct decision d;

	out[0].res = res(1, 7, 0, 1000000);
	out[1].res = res(1, 2, 0, 2500000);
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_eq(d.status, 0);
	cr_assert_eq(d.remaining, 2);
	cr_assert_eq(d.reset, 3);
	cr_assert_str_eq(d.policy, "tenant");
	cr_assert_str_eq(d.ratelimit, "\"ip\";r=7;t=1, \"tenant\";r=2;t=3");
	cr_assert_str_eq(d.ratelimit_policy,
	                 "\"ip\";q=10;w=10, \"tenant\";q=10;w=10");
}

Test(decide, policy_header_states_a_fast_rate_in_whole_seconds)
{
	struct decision d;
	const char     *err;

	checks[0].lim.rate = 100; /* 100/s, burst 1 */
	checks[0].lim.period_us = LIM_USEC_PER_SEC;
	checks[0].lim.burst = 1;
	cr_assert_eq(lim_params_init(&checks[0].lim, &err), 0);
	out[0].res.remaining = 0; /* ip decides */
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_str_eq(d.ratelimit_policy,
	                 "\"ip\";q=100;w=1, \"tenant\";q=10;w=10");
	cr_assert_str_eq(d.policy, "ip");
	cr_assert_eq(d.limit, 1, "the limit variable stays the burst");
}

Test(decide, one_denial_denies_with_largest_retry)
{
	struct decision d;

	out[0].res = res(0, 0, 4200000, 4200000);
	out[1].res = res(0, 0, 9000001, 9000001);
	out[2].res = res(1, 3, 0, 1);
	decide(checks, out, 3, HEADERS_IETF, &d);
	cr_assert_eq(d.status, 429);
	cr_assert_eq(d.retry_after, 10);
	cr_assert_eq(d.remaining, 0);
	cr_assert(d.retry_after >= d.reset);
	cr_assert_str_eq(d.policy, "tenant");
}

Test(decide, shadow_denial_reports_but_allows)
{
	struct decision d;

	checks[0].flags = LIM_FL_SHADOW;
	out[0].res = res(0, 0, 5000000, 5000000);
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_eq(d.status, 0);
	cr_assert_eq(d.shadow, 1);
	cr_assert_str_eq(d.policy, "tenant");
	/* reported to the operator, not to the client (the legacy fields
	 * come from tenant too) */
	cr_assert_str_eq(d.ratelimit, "\"tenant\";r=5;t=1");
	cr_assert_str_eq(d.ratelimit_policy, "\"tenant\";q=10;w=10");
}

/* A leaky bucket in delay mode allowed with a slot 150 ms ahead: the ACK
 * waits, unless the rule is a shadow one (it must not touch traffic). */
static void
leaky_delay_slot(int i)
{
	const char *err;

	checks[i].lim.algo = LIM_LEAKY_BUCKET;
	checks[i].lim.rate = 10;
	checks[i].lim.period_us = LIM_USEC_PER_SEC;
	checks[i].lim.burst = 1;
	checks[i].lim.max_delay_us = 200000;
	cr_assert_eq(lim_params_init(&checks[i].lim, &err), 0);
	out[i].res = res(1, 0, 0, 100000);
	out[i].res.full_us = checks[i].lim.dvt_us + 150000;
}

Test(decide, leaky_delay_mode_holds_the_ack_until_the_slot)
{
	struct decision d;

	leaky_delay_slot(0);
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_eq(d.status, 0);
	cr_assert_eq(d.delay_us, 150000);
}

Test(decide, shadow_leaky_delay_rule_does_not_hold_the_ack)
{
	struct decision d;

	leaky_delay_slot(0);
	checks[0].flags = LIM_FL_SHADOW;
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_eq(d.status, 0);
	cr_assert_eq(d.delay_us, 0);
}

Test(decide, fail_closed_gives_503_and_degraded)
{
	struct decision d;

	out[1].src = SRC_FAIL_CLOSED;
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_eq(d.status, 503);
	cr_assert_eq(d.degraded, 1);
	cr_assert(d.retry_after >= 1);
}

Test(decide, fail_open_skips_the_rule_and_sets_degraded)
{
	struct decision d;

	out[1].src = SRC_FAIL_OPEN;
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_eq(d.status, 0);
	cr_assert_eq(d.degraded, 1);
	cr_assert_str_eq(d.ratelimit, "\"ip\";r=5;t=1");
}

Test(decide, over_limit_wins_over_store_down)
{
	struct decision d;

	out[0].src = SRC_FAIL_CLOSED;
	out[1].res = res(0, 0, 3000000, 3000000);
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_eq(d.status, 429);
	cr_assert_eq(d.retry_after, 3);
}

Test(decide, missing_key_denies)
{
	struct decision d;

	out[1].src = SRC_MISSING;
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_eq(d.status, 429);
	cr_assert_eq(d.degraded, 0);
	cr_assert_str_eq(d.policy, "tenant");
}

Test(decide, headers_off_per_rule_and_globally)
{
	struct decision d;

	rules[0].headers = false;
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_str_eq(d.ratelimit, "\"tenant\";r=5;t=1");
	decide(checks, out, 2, HEADERS_NONE, &d);
	cr_assert_str_eq(d.ratelimit, "");
	cr_assert_eq(d.has_limits, 1);
}

Test(decide, not_run_checks_are_ignored)
{
	struct decision d;

	out[0].src = SRC_NOT_RUN;
	out[0].res = res(0, 0, 99000000, 0);
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_eq(d.status, 0);
	cr_assert_str_eq(d.ratelimit, "\"tenant\";r=5;t=1");
}

Test(decide, ceil_seconds_rounds_up)
{
	cr_assert_eq(decide_ceil_s(0), 0);
	cr_assert_eq(decide_ceil_s(-5), 0);
	cr_assert_eq(decide_ceil_s(1), 1);
	cr_assert_eq(decide_ceil_s(1000000), 1);
	cr_assert_eq(decide_ceil_s(1000001), 2);
}

/* The ACK's set-var actions, as "name=value" lines ("name=\"str\"" for
 * strings), in the order sent. */
static void
ack_vars(const struct decision *d, char *txt, size_t cap)
{
	struct spop_writer w;
	struct spop_frame  f;
	struct spop_str    name;
	struct spop_data   v;
	char               buf[4096];
	int                n, st, act, scope;
	size_t             len = 0;

	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_ACK, 7, 9);
	decide_encode(d, &w);
	n = spop_w_end(&w);
	cr_assert_gt(n, 0);
	cr_assert_eq(spop_decode_frame(buf, (size_t)n, 16380, &f, &st), n);
	struct spop_iter it = { f.payload, f.payload + f.len };
	txt[0] = '\0';
	while (spop_next_action(&it, &act, &scope, &name, &v, &st) == 1) {
		cr_assert_eq(act, SPOP_ACT_SET_VAR);
		cr_assert_eq(scope, SPOP_SCOPE_TXN);
		if (v.type == SPOP_DATA_STRING)
			len += (size_t)snprintf(txt + len, cap - len,
			                        "%.*s=\"%.*s\"\n",
			                        (int)name.len, name.ptr,
			                        (int)v.v.str.len, v.v.str.ptr);
		else
			len += (size_t)snprintf(txt + len, cap - len,
			                        "%.*s=%lld\n", (int)name.len,
			                        name.ptr, (long long)v.v.i);
		cr_assert_lt(len, cap);
	}
}

Test(decide, encode_sets_the_contract_vars)
{
	struct decision d;
	char            txt[4096];

	out[1].res = res(0, 0, 12000000, 12000000);
	decide(checks, out, 2, HEADERS_IETF, &d);
	ack_vars(&d, txt, sizeof(txt));
	cr_assert_str_eq(
		txt,
		"status=429\n"
		"retry_after=12\n"
		"limit=10\n"
		"remaining=0\n"
		"reset=12\n"
		"policy=\"tenant\"\n"
		"ratelimit=\"\"ip\";r=5;t=1, \"tenant\";r=0;t=12\"\n"
		"ratelimit_policy=\"\"ip\";q=10;w=10, \"tenant\";q=10;w=10\"\n"
		"degraded=0\n"
		"shadow=0\n");
}

Test(decide, legacy_mode_asks_for_x_ratelimit_and_no_ietf_fields)
{
	struct decision d;
	char            txt[4096];

	out[1].res = res(1, 2, 0, 2500000);
	decide(checks, out, 2, HEADERS_LEGACY, &d);
	ack_vars(&d, txt, sizeof(txt));
	cr_assert_str_eq(txt, "status=0\n"
	                      "limit=10\n"
	                      "remaining=2\n"
	                      "reset=3\n"
	                      "policy=\"tenant\"\n"
	                      "legacy=1\n"
	                      "degraded=0\n"
	                      "shadow=0\n");
}

Test(decide, both_mode_sends_ietf_fields_and_legacy)
{
	struct decision d;

	decide(checks, out, 2, HEADERS_BOTH, &d);
	cr_assert_eq(d.legacy, 1);
	cr_assert_str_eq(d.ratelimit, "\"ip\";r=5;t=1, \"tenant\";r=5;t=1");
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_eq(d.legacy, 0);
	decide(checks, out, 2, HEADERS_NONE, &d);
	cr_assert_eq(d.legacy, 0);
	cr_assert_str_eq(d.ratelimit, "");
}

/* The legacy fields describe the deciding rule: one kept out of the
 * headers gives none. */
Test(decide, legacy_follows_the_deciding_rules_header_switch)
{
	struct decision d;

	out[0].res = res(1, 1, 0, 1000000); /* ip decides */
	rules[0].headers = false;
	decide(checks, out, 2, HEADERS_LEGACY, &d);
	cr_assert_str_eq(d.policy, "ip");
	cr_assert_eq(d.legacy, 0);
	rules[0].headers = true;
	decide(checks, out, 2, HEADERS_LEGACY, &d);
	cr_assert_eq(d.legacy, 1);
}

Test(decide, header_lists_that_would_overflow_drop_whole_members)
{
	static char           names[POLICY_MAX_CHECKS][64];
	static struct rule    many[POLICY_MAX_CHECKS];
	static struct check   mc[POLICY_MAX_CHECKS];
	static struct outcome mo[POLICY_MAX_CHECKS];
	struct decision       d;

	for (int i = 0; i < POLICY_MAX_CHECKS; i++) {
		memset(names[i], 'a' + i, 60);
		many[i] = rules[0];
		many[i].name = names[i];
		mc[i] = checks[0];
		mc[i].rule = &many[i];
		mo[i] = out[0];
		mo[i].res = res(1, 1234567, 0, 999999999);
	}
	decide(mc, mo, POLICY_MAX_CHECKS, HEADERS_IETF, &d);
	cr_assert_lt(d.ratelimit_len, (size_t)DECIDE_HDR_MAX);
	cr_assert_eq(d.ratelimit_len, strlen(d.ratelimit));
	cr_assert_eq(strcmp(d.ratelimit + d.ratelimit_len - 7, ";t=1000"), 0,
	             "ends with a whole member");
	cr_assert_eq(strncmp(d.ratelimit, "\"aaaa", 5), 0);
	cr_assert_null(strstr(d.ratelimit, ", ,"));
}

/* A request denied by one rule is charged to none: the others' remaining
 * is what they had, not what they would have had after this request. */
Test(decide, a_vetoed_request_reports_the_others_uncharged)
{
	struct decision d;

	ip_vetoes();
	out[1].res = res(1, 6, 0, 1000000); /* tenant: 6 after a charge */
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_eq(d.status, 429);
	cr_assert_str_eq(d.ratelimit, "\"ip\";r=0;t=2, \"tenant\";r=7;t=1");
}

/* Given back to a full budget, a rule has nothing to wait for: its t is
 * 0 ("0 when the budget is full"), not the charge's refill time. */
Test(decide, a_vetoed_request_given_back_to_a_full_budget_waits_nothing)
{
	struct decision d;

	ip_vetoes();
	out[1].res = res(1, 9, 0, 6000000); /* tenant (q 10): 9 after */
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_str_eq(d.ratelimit, "\"ip\";r=0;t=2, \"tenant\";r=10;t=0");
}

/* A fixed window's t is the end of its window, full or not. */
Test(decide, a_vetoed_request_keeps_a_fixed_windows_end)
{
	struct decision d;
	const char     *err;

	ip_vetoes();
	checks[1].lim.algo = LIM_FIXED_WINDOW;
	checks[1].lim.rate = 10;
	checks[1].lim.burst = 0;
	cr_assert_eq(lim_params_init(&checks[1].lim, &err), 0);
	out[1].res = res(1, 9, 0, 42000000);
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_str_eq(d.ratelimit, "\"ip\";r=0;t=2, \"tenant\";r=10;t=42");
}

/* The deciding rule's reset follows the same give-back: here a rule that
 * fails closed (Redis down) vetoes, and tenant is the only rule left to
 * report. */
Test(decide, a_vetoed_request_resets_the_reported_rule_when_full)
{
	struct decision d;

	checks[0].op = checks[1].op = LIM_OP_CHECK;
	checks[0].cost = checks[1].cost = 1;
	out[0].src = SRC_FAIL_CLOSED;
	out[1].res = res(1, 9, 0, 6000000);
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_eq(d.status, 503);
	cr_assert_str_eq(d.policy, "ip");
	cr_assert_eq(d.remaining, 10);
	cr_assert_eq(d.reset, 0, "reset %lld", (long long)d.reset);
}

/* Under fail: local a rule runs on its share of the pool: the limit and
 * the RateLimit-Policy quota must be that share, which remaining counts
 * down from, not the rule's whole limit. */
Test(decide, fail_local_states_the_share_it_enforces)
{
	struct lim_params share = checks[1].lim;
	struct decision   d;
	const char       *err;

	share.rate = 20; /* 60/min over pool_size 3 */
	share.burst = 3;
	cr_assert_eq(lim_params_init(&share, &err), 0);
	out[1].src = SRC_FAIL_LOCAL;
	out[1].lim = &share;
	out[1].res = res(1, 2, 0, 3000000);
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_eq(d.degraded, 1);
	cr_assert_eq(d.remaining, 2);
	cr_assert_eq(d.limit, 3, "limit %lld, not the rule's 10",
	             (long long)d.limit);
	cr_assert_str_eq(d.ratelimit_policy,
	                 "\"ip\";q=10;w=10, \"tenant\";q=3;w=9");
}

/* A delay-mode leaky bucket under fail: local is held by its share's
 * pace: the first request into an empty bucket of the share (10/s over 3:
 * 3/s, burst 1) waits nothing; the rule's own pace said 233 ms. */
Test(decide, fail_local_delays_by_the_share)
{
	struct lim_params share;
	struct decision   d;
	const char       *err;

	checks[1].lim.algo = LIM_LEAKY_BUCKET;
	checks[1].lim.rate = 10;
	checks[1].lim.period_us = LIM_USEC_PER_SEC;
	checks[1].lim.burst = 1;
	checks[1].lim.max_delay_us = LIM_USEC_PER_SEC;
	cr_assert_eq(lim_params_init(&checks[1].lim, &err), 0);
	share = checks[1].lim;
	share.rate = 3;
	cr_assert_eq(lim_params_init(&share, &err), 0);
	out[1].src = SRC_FAIL_LOCAL;
	out[1].lim = &share;
	out[1].res = (struct lim_result){ 1, 0, 0, 333333, 333333 };
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_eq(d.status, 0);
	cr_assert_eq(d.delay_us, 0, "held %lld us", (long long)d.delay_us);
	out[1].res.full_us = 666666; /* the next: one slot ahead */
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_eq(d.delay_us, 333333);
}

/* A concurrency check holds one lease per request whatever its cost: a
 * veto by another rule gives back one, not the cost. */
Test(decide, a_vetoed_request_gives_back_one_lease_not_its_cost)
{
	struct decision d;
	const char     *err;

	ip_vetoes();
	checks[1].lim.algo = LIM_CONCURRENCY;
	checks[1].lim.rate = 3;
	checks[1].lim.burst = 0;
	cr_assert_eq(lim_params_init(&checks[1].lim, &err), 0);
	checks[1].cost = 5;
	out[1].res = res(1, 1, 0, 1000000); /* 1 other + this one */
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_str_eq(d.ratelimit, "\"ip\";r=0;t=2, \"tenant\";r=2;t=1");
}

/* A delayed leaky-bucket slot had nothing left before it (its remaining
 * is held at 0): a veto gives nothing back. */
Test(decide, a_vetoed_request_gives_nothing_back_to_a_delayed_slot)
{
	struct decision d;

	ip_vetoes();
	leaky_delay_slot(1);
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_eq(d.status, 429);
	cr_assert_str_eq(d.ratelimit, "\"ip\";r=0;t=2, \"tenant\";r=0;t=1");
}

/* Makes check <i> a concurrency CHECK allowed with source <src>. */
static void
lease(int i, enum outcome_src src)
{
	const char *err;

	checks[i].lim.algo = LIM_CONCURRENCY;
	checks[i].lim.rate = 2;
	checks[i].lim.burst = 0;
	cr_assert_eq(lim_params_init(&checks[i].lim, &err), 0);
	checks[i].op = LIM_OP_CHECK;
	checks[i].cost = 1;
	out[i].src = src;
	out[i].res = res(1, 1, 0, 1000000);
}

/* Is release set when check 1 is that lease, decided with source <src>? */
static int
release_asked(enum outcome_src src)
{
	struct decision d;

	lease(1, src);
	decide(checks, out, 2, HEADERS_IETF, &d);
	return d.release;
}

Test(decide, a_lease_from_redis_or_store_local_asks_for_its_release)
{
	cr_assert_eq(release_asked(SRC_STORE), 1);
}

/* Redis down, fail: local: the local tier handed out the lease, and
 * HAProxy sends rl-done only when release is set. */
Test(decide, a_lease_from_the_fail_local_fallback_asks_for_its_release)
{
	cr_assert_eq(release_asked(SRC_FAIL_LOCAL), 1);
}

Test(decide, no_lease_no_release)
{
	cr_assert_eq(release_asked(SRC_FAIL_OPEN), 0);
	out[0].res = res(0, 0, 2000000, 2000000); /* ip denies: no lease */
	cr_assert_eq(release_asked(SRC_FAIL_LOCAL), 0);
	cr_assert_eq(release_asked(SRC_STORE), 0);
}

/* Check 1 is a lease sent to Redis whose answer was lost, then decided by
 * the fail mode <src>; fills <d>. */
static void
lost_answer(enum outcome_src src, struct decision *d)
{
	int idx[] = { 1 };

	lease(1, src);
	decide_mark_leases(checks, out, idx, 1, 0);
	cr_assert_eq(out[1].redis_lease, 1);
	decide(checks, out, 2, HEADERS_IETF, d);
}

/* The lease's answer was lost (deadline, link failure) after its call had
 * left: Redis may run the script late and take it. Before the fix the
 * fail mode answered without release, HAProxy sent no rl-done, and the
 * slot stayed taken for the whole lease. */
Test(decide, a_lease_whose_answer_was_lost_asks_for_its_release)
{
	struct decision d;

	lost_answer(SRC_FAIL_OPEN, &d);
	cr_assert_eq(d.status, 0);
	cr_assert_eq(d.release, 1);
	cr_assert_eq(decide_orphan(&checks[1], &out[1], d.status, 0), 0,
	             "HAProxy's rl-done covers it");
}

Test(decide, only_concurrency_checks_may_hold_a_lost_lease)
{
	int idx[] = { 0, 1 };

	lease(1, SRC_FAIL_OPEN);
	checks[1].op = LIM_OP_RELEASE; /* an rl-done: takes nothing */
	out[0].src = SRC_FAIL_OPEN;    /* check 0 is a GCRA */
	decide_mark_leases(checks, out, idx, 2, 0);
	cr_assert_eq(out[0].redis_lease, 0);
	cr_assert_eq(out[1].redis_lease, 0);
}

/* fail: closed answered 503 while the script may still take the lease:
 * HAProxy sends no rl-done for a refused request, the agent must. */
Test(decide, a_refused_request_leaves_its_redis_lease_to_the_agent)
{
	struct decision d;

	lost_answer(SRC_FAIL_CLOSED, &d);
	cr_assert_eq(d.status, 503);
	cr_assert_eq(d.release, 0);
	cr_assert_eq(decide_orphan(&checks[1], &out[1], d.status, 0),
	             DECIDE_FREE_REDIS);
}

/* Redis granted the lease, then a store: local check (check 0) refused
 * the request: Redis holds a lease nobody will release but the agent. */
Test(decide, a_local_veto_after_redis_leaves_the_lease_to_the_agent)
{
	int             idx[] = { 1 };
	struct decision d;

	lease(1, SRC_STORE);
	decide_mark_leases(checks, out, idx, 1, 1);
	cr_assert_eq(out[1].redis_lease, 1);
	rules[0].store = STORE_LOCAL;
	out[0].res = res(0, 0, 2000000, 2000000);
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_eq(d.status, 429);
	cr_assert_eq(decide_orphan(&checks[1], &out[1], d.status, 0),
	             DECIDE_FREE_REDIS);
	cr_assert_eq(decide_orphan(&checks[0], &out[0], d.status, 0), 0);
}

/* Redis refused the call itself (check 0 denied in the same script): the
 * script charged nothing, so there is no lease to give back. */
Test(decide, a_call_vetoed_in_redis_holds_no_lease)
{
	int idx[] = { 0, 1 };

	lease(1, SRC_STORE);
	out[0].res = res(0, 0, 2000000, 2000000);
	decide_mark_leases(checks, out, idx, 2, 1);
	cr_assert_eq(out[1].redis_lease, 0);
	checks[1].flags = LIM_FL_SHADOW; /* a shadow lease: denied, not held */
	out[0].res = res(1, 5, 0, 1000000);
	out[1].res = res(0, 0, 1000000, 1000000);
	decide_mark_leases(checks, out, idx, 2, 1);
	cr_assert_eq(out[1].redis_lease, 0);
}

/* The ACK came after HAProxy's timeout processing (or its connection is
 * gone): HAProxy uses none of it, so no rl-done comes for any lease the
 * request took, in Redis or in the local tier. */
Test(decide, a_lost_ack_leaves_every_lease_to_the_agent)
{
	int idx[] = { 1 };

	lease(1, SRC_STORE);
	decide_mark_leases(checks, out, idx, 1, 1);
	cr_assert_eq(decide_orphan(&checks[1], &out[1], 0, 1),
	             DECIDE_FREE_REDIS);
	lease(1, SRC_FAIL_LOCAL);
	decide_mark_leases(checks, out, idx, 1, 0); /* Redis late, too */
	cr_assert_eq(decide_orphan(&checks[1], &out[1], 0, 1),
	             DECIDE_FREE_REDIS | DECIDE_FREE_LOCAL);
	lease(1, SRC_STORE);
	out[1].redis_lease = 0;
	rules[1].store = STORE_LOCAL;
	cr_assert_eq(decide_orphan(&checks[1], &out[1], 0, 1),
	             DECIDE_FREE_LOCAL);
	/* refused: the local tier charged nothing */
	cr_assert_eq(decide_orphan(&checks[1], &out[1], 429, 1), 0);
}

/* Check 1 a reservation of 300 (reserve:, request id "r1") that Redis
 * granted; check 0 a store: local rule deciding with <local_allowed>;
 * fills <d>. */
static void
reserved_then(int local_allowed, struct decision *d)
{
	int idx[] = { 1 };

	rules[1].reserves = true;
	rules[1].count = COUNT_RESPONSE;
	checks[1].lim.reserve_lease_us = 3600 * LIM_USEC_PER_SEC;
	checks[1].op = LIM_OP_CHECK;
	checks[1].cost = 300;
	memcpy(checks[1].member, "r1", 3);
	checks[1].memberlen = 2;
	out[1].src = SRC_STORE;
	out[1].res = res(1, 700, 0, 1000000);
	decide_mark_leases(checks, out, idx, 1, 1);
	rules[0].store = STORE_LOCAL;
	checks[0].op = LIM_OP_CHECK;
	checks[0].cost = 1;
	out[0].src = SRC_STORE;
	out[0].res = local_allowed ? res(1, 5, 0, 1000000)
	                           : res(0, 0, 2000000, 2000000);
	decide(checks, out, 2, HEADERS_IETF, d);
}

/* Redis reserved, then a store: local check refused the request: HAProxy
 * sends no rl-response for it, so the agent settles the reservation at 0
 * itself. It stayed charged for the whole lease before. */
Test(decide, a_refused_request_leaves_its_reservation_to_the_agent)
{
	struct decision d;

	reserved_then(0, &d);
	cr_assert_eq(d.status, 429);
	cr_assert_eq(decide_orphan(&checks[1], &out[1], d.status, 0),
	             DECIDE_SETTLE_REDIS);
	cr_assert_eq(decide_orphan(&checks[1], &out[1], d.status, 1), 0,
	             "an ACK HAProxy did not use: it may serve the request");
	reserved_then(1, &d);
	cr_assert_eq(d.status, 0);
	cr_assert_eq(d.response, 1);
	cr_assert_eq(decide_orphan(&checks[1], &out[1], d.status, 0), 0,
	             "allowed: HAProxy's rl-response settles it");
}

/* ALGORITHMS.md: a cost that can never fit (allowed -1, retry_after 0) is
 * denied with no finite retry. The answer is 429 with Retry-After
 * DECIDE_NEVER_FITS_S, not 1 (an invitation to loop), and the rule's t and
 * reset say the same. Here gcra 1/s burst 5, a fresh key, cost 6. */
Test(decide, a_cost_that_never_fits_is_not_retried_soon)
{
	struct decision d;
	const char     *err;

	checks[0].lim.rate = 1;
	checks[0].lim.period_us = LIM_USEC_PER_SEC;
	checks[0].lim.burst = 5;
	cr_assert_eq(lim_params_init(&checks[0].lim, &err), 0);
	checks[0].cost = 6;
	out[0].res = (struct lim_result){ -1, 5, 0, 0, 0 };
	decide(checks, out, 1, HEADERS_BOTH, &d);
	cr_assert_eq(d.status, 429);
	cr_assert_eq(d.retry_after, DECIDE_NEVER_FITS_S);
	cr_assert_gt(DECIDE_NEVER_FITS_S, 60, "not soon");
	cr_assert_eq(d.reset, DECIDE_NEVER_FITS_S);
	cr_assert_eq(d.remaining, 5);
	cr_assert_str_eq(d.policy, "ip");
	{
		char want[64];

		snprintf(want, sizeof(want), "\"ip\";r=5;t=%d",
		         DECIDE_NEVER_FITS_S);
		cr_assert_str_eq(d.ratelimit, want);
	}
}

/* Next to an ordinary denial the never-fits one still sets Retry-After,
 * and the ordinary rule's own t is untouched. */
Test(decide, a_never_fitting_cost_next_to_an_ordinary_denial)
{
	struct decision d;
	char            want[96];

	out[0].res = res(0, 0, 4200000, 4200000);
	out[1].res = (struct lim_result){ -1, 3, 0, 1000000, 2000000 };
	decide(checks, out, 2, HEADERS_IETF, &d);
	cr_assert_eq(d.status, 429);
	cr_assert_eq(d.retry_after, DECIDE_NEVER_FITS_S);
	cr_assert(d.retry_after >= d.reset);
	snprintf(want, sizeof(want), "\"ip\";r=0;t=5, \"tenant\";r=3;t=%d",
	         DECIDE_NEVER_FITS_S);
	cr_assert_str_eq(d.ratelimit, want);
}
