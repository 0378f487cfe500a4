/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The penalty box: the C twin of the script's block record (lim_block.c),
 * the near-cache's blocks (held to their end while resets are watched,
 * dropped on one), and the policy's block:/block_max: (parse and -c
 * errors). The script itself is tested against a real Redis by
 * tests/integration/block.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "limiter.h"
#include "local.h"
#include "nearcache.h"
#include "policy.h"

#define S LIM_USEC_PER_SEC

static struct lim_params
boxed(int64_t block_s, int64_t block_max_s)
{
	struct lim_params p = { .algo = LIM_GCRA,
		                .rate = 10,
		                .period_us = S,
		                .burst = 5,
		                .block_us = block_s * S,
		                .block_max_us = block_max_s * S };
	const char       *err = NULL;

	cr_assert_eq(lim_params_init(&p, &err), 0, "%s", err ? err : "");
	return p;
}

/* ---- the twin ------------------------------------------------------------ */

Test(block, a_first_offence_blocks_for_the_base_period)
{
	struct lim_params p = boxed(600, 0);
	struct lim_block  b = { 0 };
	struct lim_result r = { 0 };

	lim_block_offend(&p, &b, 1000 * S, &r);
	cr_expect_eq(r.allowed, 0);
	cr_expect_eq(r.remaining, 0);
	cr_expect_eq(r.retry_after_us, 600 * S);
	cr_expect_eq(r.next_us, 600 * S);
	cr_expect_eq(b.until_us, 1600 * S);
	cr_expect_eq(b.offences, 1);
	cr_expect_eq(b.forget_us, 1600 * S, "no escalation: no quiet period");
}

Test(block, retry_after_counts_down_to_the_end_then_releases)
{
	struct lim_params p = boxed(600, 0);
	struct lim_block  b = { 0 };
	struct lim_result r;

	lim_block_offend(&p, &b, 1000 * S, &r);
	cr_assert(lim_block_held(&b, 1001 * S, &r));
	cr_expect_eq(r.retry_after_us, 599 * S);
	cr_assert(lim_block_held(&b, 1599 * S, &r));
	cr_expect_eq(r.retry_after_us, S);
	cr_expect_not(lim_block_held(&b, 1600 * S, &r), "released at its end");
}

Test(block, each_repeat_within_the_quiet_period_doubles_up_to_block_max)
{
	struct lim_params p = boxed(60, 300);
	struct lim_block  b = { 0 };
	struct lim_result r;
	int64_t           now = 1000 * S, want[] = { 60, 120, 240, 300, 300 };

	for (int i = 0; i < 5; i++) {
		lim_block_offend(&p, &b, now, &r);
		cr_expect_eq(r.retry_after_us, want[i] * S, "offence %d: %lld",
		             i + 1, (long long)r.retry_after_us);
		cr_expect_eq(b.offences, i + 1);
		cr_expect_eq(b.forget_us, b.until_us + 300 * S,
		             "forgotten block_max after the block's end");
		now = b.until_us + 299 * S; /* just inside the quiet period */
	}
}

Test(block, past_the_quiet_period_the_offences_are_forgotten)
{
	struct lim_params p = boxed(60, 300);
	struct lim_block  b = { 0 };
	struct lim_result r;

	lim_block_offend(&p, &b, 1000 * S, &r);
	lim_block_offend(&p, &b, b.until_us + S, &r);
	cr_assert_eq(r.retry_after_us, 120 * S);
	lim_block_offend(&p, &b, b.forget_us, &r);
	cr_expect_eq(r.retry_after_us, 60 * S, "back to the base block");
	cr_expect_eq(b.offences, 1);
}

Test(block, without_block_max_a_repeat_is_not_escalated)
{
	struct lim_params p = boxed(60, 0);
	struct lim_block  b = { 0 };
	struct lim_result r;

	lim_block_offend(&p, &b, 1000 * S, &r);
	lim_block_offend(&p, &b, b.until_us, &r);
	cr_expect_eq(r.retry_after_us, 60 * S);
	cr_expect_eq(b.offences, 1);
}

Test(block, the_period_never_overflows_at_the_longest_values)
{
	struct lim_params p = boxed(1, 30 * 86400);

	cr_expect_eq(lim_block_period(&p, 1), S);
	cr_expect_eq(lim_block_period(&p, 2), 2 * S);
	cr_expect_eq(lim_block_period(&p, 1000000), 30 * 86400 * S);
}

Test(block, only_a_denied_check_or_peek_of_a_boxed_rule_offends)
{
	struct lim_params p = boxed(60, 0), plain = boxed(0, 0);
	struct lim_result deny = { .allowed = 0 }, never = { .allowed = -1 },
			  pass = { .allowed = 1 };

	cr_expect(lim_block_offence(&p, LIM_OP_CHECK, &deny));
	cr_expect(lim_block_offence(&p, LIM_OP_PEEK, &deny),
	          "count: failures decides with a peek");
	cr_expect_not(lim_block_offence(&p, LIM_OP_FORCE, &deny),
	              "a forced charge is counted, not decided");
	cr_expect_not(lim_block_offence(&p, LIM_OP_CHECK, &never),
	              "a cost that can never fit is the client's bug");
	cr_expect_not(lim_block_offence(&p, LIM_OP_CHECK, &pass));
	cr_expect_not(lim_block_offence(&plain, LIM_OP_CHECK, &deny));
}

Test(block, bad_parameters_are_refused_with_a_reason)
{
	struct lim_params p = boxed(0, 0);
	const char       *err = NULL;

	p.block_us = 600 * S;
	p.block_max_us = 300 * S;
	cr_expect_eq(lim_params_init(&p, &err), -1);
	cr_expect_str_eq(err, "block_max must be at least block");
	p.block_us = 0;
	cr_expect_eq(lim_params_init(&p, &err), -1);
	cr_expect_str_eq(err, "block_max needs block");
	p.block_us = -1;
	p.block_max_us = 0;
	cr_expect_eq(lim_params_init(&p, &err), -1);
	p.algo = LIM_CONCURRENCY;
	p.block_us = S;
	cr_expect_eq(lim_params_init(&p, &err), -1);
	cr_expect_str_eq(err, "block does not apply to concurrency");
}

/* ---- the near-cache ------------------------------------------------------ */

static struct rule rule = { .name = (char[]){ "r" } };

static struct check
check_of(const struct lim_params *p, enum lim_algo algo, int op, int64_t cost)
{
	struct check c;

	memset(&c, 0, sizeof(c));
	c.rule = &rule;
	c.kind = CHECK_EVAL;
	c.lim = *p;
	c.lim.algo = algo;
	c.op = op;
	c.cost = cost;
	c.keylen = (size_t)snprintf(c.key, sizeof(c.key), "rl:{r:bob}");
	return c;
}

static const struct lim_result blocked600 = { 0, 0, 600 * S, 600 * S, 600 * S };

/* A near-cache that learnt <*c>, a GCRA check blocked for 600 s, from a
 * request sent at 10 s; watching resets if <watch>. */
static struct nearcache *
cache_with_block(int watch, struct check *c)
{
	struct nearcache *nc = nearcache_new();
	struct lim_params p = boxed(600, 0);

	*c = check_of(&p, LIM_GCRA, LIM_OP_CHECK, 1);
	nearcache_watch_resets(nc, watch, 10 * S);
	nearcache_learn(nc, c, &blocked600, 10 * S, 10 * S);
	return nc;
}

Test(block, a_watched_block_is_answered_locally_until_long_after_a_denial)
{
	struct check      c;
	struct nearcache *nc = cache_with_block(1, &c);
	struct lim_result r;

	cr_assert(nearcache_lookup(nc, &c, 40 * S, &r),
	          "held past NEARCACHE_HOLD_US");
	cr_expect_eq(r.retry_after_us, 570 * S, "counting down to the end");
	cr_expect_eq(r.allowed, 0);
	cr_expect_not(
		nearcache_lookup(nc, &c, 10 * S + NEARCACHE_BLOCK_HOLD_US, &r),
		"bounded: asked again after NEARCACHE_BLOCK_HOLD_US");
	nearcache_free(nc);
}

Test(block, an_unwatched_block_is_held_as_briefly_as_any_denial)
{
	struct check      c;
	struct nearcache *nc = cache_with_block(0, &c);
	struct lim_result r;

	cr_expect(nearcache_lookup(nc, &c, 10 * S + NEARCACHE_HOLD_US - 1, &r));
	cr_expect_not(nearcache_lookup(nc, &c, 10 * S + NEARCACHE_HOLD_US, &r),
	              "no reset watch: a reset must still be seen in 1 s");
	nearcache_free(nc);
}

Test(block, a_failed_poll_cuts_held_blocks_to_the_brief_hold)
{
	struct check      c;
	struct nearcache *nc = cache_with_block(1, &c);
	struct lim_result r;

	/* held to 70 s while the poll answered; it fails at 20 s: a reset
	 * it misses must still be seen within a second */
	nearcache_watch_resets(nc, 0, 20 * S);
	cr_expect(nearcache_lookup(nc, &c, 20 * S + NEARCACHE_HOLD_US - 1, &r));
	cr_expect_not(nearcache_lookup(nc, &c, 20 * S + NEARCACHE_HOLD_US, &r),
	              "cut back to NEARCACHE_HOLD_US");
	nearcache_free(nc);
}

Test(block, a_reset_drops_held_blocks_and_late_answers_sent_before_it)
{
	struct check      c;
	struct nearcache *nc = cache_with_block(1, &c);
	struct lim_result r;

	nearcache_drop_blocks(nc, 20 * S);
	cr_expect_not(nearcache_lookup(nc, &c, 20 * S, &r), "dropped");
	/* an answer to a request sent before the reset, arriving after */
	nearcache_learn(nc, &c, &blocked600, 19 * S, 19 * S);
	cr_expect_not(nearcache_lookup(nc, &c, 19 * S + NEARCACHE_HOLD_US, &r),
	              "an answer older than the reset is held briefly only");
	nearcache_learn(nc, &c, &blocked600, 21 * S, 21 * S);
	cr_expect(nearcache_lookup(nc, &c, 60 * S, &r),
	          "a block learnt after the reset is held again");
	nearcache_free(nc);
}

Test(block, every_algorithm_cost_and_peek_of_a_boxed_rule_uses_the_cache)
{
	struct lim_params p = boxed(600, 0), plain = boxed(0, 0);
	struct check sw = check_of(&p, LIM_SLIDING_WINDOW, LIM_OP_CHECK, 1);
	struct check peek = check_of(&p, LIM_SLIDING_LOG, LIM_OP_PEEK, 1);
	struct check force = check_of(&p, LIM_GCRA, LIM_OP_FORCE, 1);
	struct check shadow = check_of(&p, LIM_GCRA, LIM_OP_CHECK, 1);
	struct check nosw =
		check_of(&plain, LIM_SLIDING_WINDOW, LIM_OP_CHECK, 1);
	struct nearcache *nc = nearcache_new();
	struct check      big = check_of(&p, LIM_GCRA, LIM_OP_CHECK, 1000);
	struct lim_result r;

	shadow.flags = LIM_FL_SHADOW;
	cr_expect(nearcache_eligible(&sw));
	cr_expect(nearcache_eligible(&peek));
	cr_expect_not(nearcache_eligible(&force));
	cr_expect_not(nearcache_eligible(&shadow));
	cr_expect_not(nearcache_eligible(&nosw), "without block: as before");
	nearcache_watch_resets(nc, 1, 10 * S);
	nearcache_learn(nc, &big, &blocked600, 10 * S, 10 * S);
	cr_expect(nearcache_lookup(nc, &big, 11 * S, &r),
	          "a block is learnt from any cost (even one above the burst)");
	cr_expect_eq(r.retry_after_us, 599 * S);
	nearcache_free(nc);
}

/* block: 600s with block_max: 600s (no escalation, -c accepts it), then a
 * reload drops block: from the rule: Redis no longer blocks the key (the
 * script does not read its record), so a block the cache held must not
 * answer the rule's checks any more. block ^ block_max was hashed as
 * one, 0 both with and without the box. */
Test(block, a_reload_that_drops_block_is_not_answered_with_a_held_block)
{
	struct lim_params p = boxed(600, 600), plain = boxed(0, 0);
	struct check      was = check_of(&p, LIM_GCRA, LIM_OP_CHECK, 1);
	struct check      now = check_of(&plain, LIM_GCRA, LIM_OP_CHECK, 1);
	struct nearcache *nc = nearcache_new();
	struct lim_result r;

	nearcache_watch_resets(nc, 1, 10 * S);
	nearcache_learn(nc, &was, &blocked600, 10 * S, 10 * S);
	cr_assert(nearcache_lookup(nc, &was, 11 * S, &r), "held");
	cr_expect_not(nearcache_lookup(nc, &now, 11 * S, &r),
	              "the rule without block: is asked of Redis");
	nearcache_free(nc);
}

/* ---- the policy ---------------------------------------------------------- */

static char *
policy_text(const char *rule_tail, char **err, struct policy **out)
{
	char  path[] = "/tmp/test_block.XXXXXX";
	int   fd = mkstemp(path);
	FILE *f = fdopen(fd, "w");
	char *warn = NULL;

	cr_assert_not_null(f);
	fprintf(f,
	        "plans:\n"
	        "  free: { rate: 60/min, burst: 10 }\n"
	        "  pro:  { rate: 600/min, burst: 100 }\n"
	        "plan_lookup: { arg: plan, default: free }\n"
	        "rules:\n"
	        "  - { name: r, message: m, key: \"k:{k}\", %s }\n",
	        rule_tail);
	fclose(f);
	*err = NULL;
	*out = policy_load_with_warnings(path, err, &warn);
	unlink(path);
	return warn;
}

Test(block, block_and_block_max_reach_the_rule_and_every_plan)
{
	struct policy *p;
	char          *err, *warn;

	warn = policy_text("plan: rate, block: 10m, block_max: 24h", &err, &p);
	cr_assert_not_null(p, "%s", err ? err : "");
	cr_expect_eq(p->rules[0].lim.block_us, 600 * S);
	cr_expect_eq(p->rules[0].lim.block_max_us, 86400 * S);
	for (int i = 0; i < p->nplans; i++) {
		cr_expect_eq(p->rules[0].plan_lim[i].block_us, 600 * S);
		cr_expect_eq(p->rules[0].plan_lim[i].block_max_us, 86400 * S);
	}
	free(warn);
	policy_unref(p);
}

static void
refused(const char *tail, const char *want)
{
	struct policy *p;
	char          *err, *warn = policy_text(tail, &err, &p);

	cr_assert_null(p, "%s loaded", tail);
	cr_assert_not_null(err);
	cr_expect(strstr(err, want) != NULL, "%s: got %s", tail, err);
	cr_expect_eq(strchr(err, '\n') == NULL || strchr(err, '\n')[1] == '\0',
	             1, "one line: %s", err);
	free(err);
	free(warn);
}

Test(block, bad_values_are_refused_with_one_clear_line)
{
	refused("rate: 1/s, block: 10m, block_max: 5m",
	        "rules[0].block_max: must be at least block (600s)");
	refused("rate: 1/s, block_max: 1h", "rules[0].block_max: needs block");
	refused("algorithm: concurrency, limit: 2, release: d, block: 1m",
	        "rules[0].block: does not apply to concurrency");
	refused("rate: 1/s, block: 100ms", "rules[0].block: must be between");
	refused("rate: 1/s, block: 31d", "rules[0].block: must be between");
}

Test(block, store_local_and_fail_local_keep_the_box_in_the_local_tier)
{
	struct policy *p;
	char          *err, *warn;

	warn = policy_text("rate: 1/s, block: 10m, store: local", &err, &p);
	cr_assert_not_null(p, "%s", err ? err : "");
	cr_expect_eq(p->rules[0].lim.block_us, 600 * S);
	free(warn);
	policy_unref(p);
	warn = policy_text("rate: 1/s, block: 10m, fail: local", &err, &p);
	cr_assert_not_null(p, "%s", err ? err : "");
	free(warn);
	policy_unref(p);
}

/* ---- the local tier (store: local, fail: local) -------------------------- */

/* One check of <p> on <key>, op CHECK, cost 1. */
static struct local_check
lc(const struct lim_params *p, const char *key)
{
	return (struct local_check){ .params = p,
		                     .key = key,
		                     .keylen = strlen(key),
		                     .op = LIM_OP_CHECK,
		                     .cost = 1 };
}

/* <n> requests of one check of <p> on <key> at <now>: the decisions as
 * "1"/"0", the last result in <*last>. */
static void
requests(struct local *l, const struct lim_params *p, const char *key, int n,
         int64_t now, char *out, struct lim_result *last)
{
	for (int i = 0; i < n; i++) {
		struct local_check c = lc(p, key);

		out[i] = local_eval_request(l, &c, 1, now) ? '1' : '0';
		*last = c.result;
	}
	out[n] = '\0';
}

Test(block, local_tier_a_denial_blocks_the_key_then_releases_it)
{
	struct lim_params p = boxed(60, 0); /* 10/s, burst 5 */
	struct local     *l = local_new(100);
	struct lim_result r;
	char              got[16];

	requests(l, &p, "k", 7, 1000 * S, got, &r);
	cr_expect_str_eq(got, "1111100", "the 6th is the offence");
	cr_expect_eq(r.retry_after_us, 60 * S, "blocked for 60 s");
	requests(l, &p, "k", 1, 1030 * S, got, &r);
	cr_expect_str_eq(got, "0", "still blocked 30 s later");
	cr_expect_eq(r.retry_after_us, 30 * S, "counting down");
	requests(l, &p, "other", 1, 1030 * S, got, &r);
	cr_expect_str_eq(got, "1", "another key passes");
	requests(l, &p, "k", 5, 1060 * S, got, &r);
	cr_expect_str_eq(got, "11111", "released with the full burst");
	local_free(l);
}

Test(block, local_tier_escalates_within_the_quiet_period)
{
	struct lim_params p = boxed(60, 300);
	struct local     *l = local_new(100);
	struct lim_result r;
	char              got[16];
	int64_t           now = 1000 * S, want[] = { 60, 120, 240, 300 };

	for (int i = 0; i < 4; i++) {
		requests(l, &p, "k", 6, now, got, &r);
		cr_expect_str_eq(got, "111110", "offence %d", i + 1);
		cr_expect_eq(r.retry_after_us, want[i] * S, "offence %d: %lld",
		             i + 1, (long long)r.retry_after_us);
		now += want[i] * S;
	}
	requests(l, &p, "k", 6, now + 300 * S, got, &r);
	cr_expect_eq(r.retry_after_us, 60 * S, "forgotten after block_max");
	local_free(l);
}

Test(block, local_tier_a_blocked_key_vetoes_its_request_and_charges_nothing)
{
	struct lim_params  p = boxed(60, 0), plain = boxed(0, 0);
	struct local      *l = local_new(100);
	struct lim_result  r;
	struct local_check c[2];
	char               got[16];

	requests(l, &p, "k", 6, 1000 * S, got, &r);
	c[0] = lc(&plain, "free");
	c[1] = lc(&p, "k");
	cr_expect_eq(local_eval_request(l, c, 2, 1001 * S), 0);
	cr_expect_eq(c[1].result.retry_after_us, 59 * S);
	cr_expect_eq(c[0].result.allowed, 1, "the other check's own result");
	requests(l, &plain, "free", 5, 1001 * S, got, &r);
	cr_expect_str_eq(got, "11111", "the other check was not charged");
	local_free(l);
}

Test(block,
     local_tier_only_a_vetoing_peek_records_its_offence_and_a_shadow_check_never_vetoes)
{
	struct lim_params  p = boxed(60, 0);
	struct local      *l = local_new(100);
	struct lim_result  r;
	struct local_check c = lc(&p, "k");
	char               got[16];

	requests(l, &p, "k", 5, 1000 * S, got, &r);
	/* a peek that vetoes ends its request (req.c never evaluates it
	 * again): its offence is recorded, as the script records it */
	cr_expect_eq(local_peek_request(l, &c, 1, 1000 * S), 0);
	requests(l, &p, "k", 1, 1000 * S + p.ei_us, got, &r);
	cr_expect_str_eq(got, "0", "the vetoing peek's offence blocks");
	cr_expect_eq(r.retry_after_us, 60 * S - p.ei_us);
	/* a peek that passes records nothing: its commit will (a table
	 * of its own: the one above has seen 1000 s + EI already) */
	local_free(l);
	l = local_new(100);
	c = lc(&p, "q");
	c.shadow = 1;
	requests(l, &p, "q", 5, 1000 * S, got, &r);
	cr_expect_eq(local_peek_request(l, &c, 1, 1000 * S), 1);
	requests(l, &p, "q", 1, 1000 * S + p.ei_us, got, &r);
	cr_expect_str_eq(got, "1", "the passing peek recorded no offence");
	c = lc(&p, "s");
	c.shadow = 1;
	requests(l, &p, "s", 6, 1000 * S, got, &r);
	cr_expect_eq(local_eval_request(l, &c, 1, 1001 * S), 1,
	             "a shadow check reports the block, never vetoes");
	cr_expect_eq(c.result.allowed, 0);
	cr_expect_eq(c.result.retry_after_us, 59 * S);
	local_free(l);
}

/* The script (ratelimit.lua, batch()) answers a blocked check with the
 * block and charges nothing of it, and only a blocked CHECK or PEEK that
 * is not shadow vetoes its request (lim_vetoes()): a FORCE on a blocked
 * key (a failure counted by rl-login-result) leaves the request's other
 * charges alone, and a blocked shadow check is never charged. */
Test(block, local_tier_a_blocked_force_does_not_veto_the_other_charges)
{
	struct lim_params  p = boxed(60, 0), plain = boxed(0, 0);
	struct local      *l = local_new(100);
	struct lim_result  r;
	struct local_check c[2];
	char               got[16];

	requests(l, &p, "k", 6, 1000 * S, got, &r); /* k blocked to 1060 */
	c[0] = lc(&p, "k");
	c[0].op = LIM_OP_FORCE;
	c[0].cost = 5;
	c[1] = lc(&plain, "other");
	c[1].op = LIM_OP_FORCE;
	c[1].cost = 5;
	local_eval_request(l, c, 2, 1001 * S);
	cr_expect_eq(c[0].result.allowed, 0, "k reports its block");
	cr_expect_eq(c[0].result.retry_after_us, 59 * S);
	requests(l, &plain, "other", 1, 1001 * S, got, &r);
	cr_expect_str_eq(got, "0",
	                 "the other key's FORCE was charged, as the script "
	                 "charges it");
	local_free(l);
}

Test(block, local_tier_a_blocked_shadow_check_is_not_charged)
{
	struct lim_params  p = boxed(60, 0);
	struct local      *l = local_new(100);
	struct lim_result  r;
	struct local_check c;
	char               got[16];

	requests(l, &p, "s", 6, 1000 * S, got, &r); /* s blocked to 1060 */
	for (int i = 0; i < 5; i++) {
		c = lc(&p, "s");
		c.shadow = 1;
		local_eval_request(l, &c, 1, 1060 * S - S / 10);
		cr_expect_eq(c.result.allowed, 0, "reports the block");
	}
	requests(l, &p, "s", 5, 1060 * S, got, &r);
	cr_expect_str_eq(got, "11111",
	                 "the block's end finds the full burst: nothing was "
	                 "charged while it lasted");
	local_free(l);
}

Test(block, local_tier_an_offence_counts_in_a_request_another_block_vetoes)
{
	struct lim_params  p = boxed(60, 0);
	struct local      *l = local_new(100);
	struct lim_result  r;
	struct local_check c[2];
	char               got[16];

	requests(l, &p, "a", 6, 1000 * S, got, &r); /* a blocked to 1060 */
	requests(l, &p, "b", 5, 1000 * S, got, &r); /* b spent, not blocked */
	c[0] = lc(&p, "a");
	c[1] = lc(&p, "b");
	cr_expect_eq(local_eval_request(l, c, 2, 1000 * S), 0);
	cr_expect_eq(c[1].result.retry_after_us, 60 * S,
	             "b's denial is an offence, as in the script");
	requests(l, &p, "b", 1, 1010 * S, got, &r);
	cr_expect_str_eq(got, "0", "b is blocked");
	local_free(l);
}
