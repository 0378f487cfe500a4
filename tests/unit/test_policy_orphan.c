/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of the settles a reload orphans (agent/policy/policy_orphan.c):
 * which result messages a reload records (those of the removed reserving
 * rules that no rule of the new policy takes), for how long (the longest
 * lease), across a second reload, and the lookup by message name. The
 * fixtures are tests/unit/data/reserve.yaml (two reserving rules settled
 * by rl-response) and orphan-*.yaml (what a reload replaced it with).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "policy_orphan.h"

static struct policy *
load(const char *name)
{
	char           path[512], *err = NULL, *warn = NULL;
	const char    *root = getenv("TEST_ROOT");
	struct policy *p;

	snprintf(path, sizeof(path), "%s%stests/unit/data/%s", root ? root : "",
	         root ? "/" : "", name);
	p = policy_load_with_warnings(path, &err, &warn);
	cr_assert_not_null(p, "%s: %s", name, err ? err : "");
	free(warn);
	return p;
}

static const struct policy_orphan *
find(const struct policy *p, const char *name, int64_t now)
{
	struct spop_message m = { .name = { name, strlen(name) } };

	return policy_orphan_find(p, &m, now);
}

#define NOW     (1000 * LIM_USEC_PER_SEC)
#define LEASE_S 600 /* reserve.yaml: tokens 10m (the default), fixed 30s */

Test(policy_orphan, removed_rules_message_is_recorded_for_the_longest_lease)
{
	struct policy *old = load("reserve.yaml"),
		      *p = load("orphan-none.yaml");
	const struct policy_orphan *o;

	policy_note_orphans(p, old, NOW);
	cr_assert_eq(p->norphans, 1);
	cr_assert_not_null(o = find(p, "rl-response", NOW + 1));
	cr_assert_str_eq(o->message, "rl-response");
	cr_assert_str_eq(o->rules, "tokens,fixed");
	cr_assert_eq(o->until_us, NOW + LEASE_S * LIM_USEC_PER_SEC);
	cr_assert_null(find(p, "rl-response", o->until_us),
	               "not after the lease: the reservations are gone");
	cr_assert_null(find(p, "rl-request", NOW + 1), "another message");
	policy_unref(old);
	policy_unref(p);
}

Test(policy_orphan, message_a_rule_still_takes_is_not_recorded)
{
	struct policy *old = load("reserve.yaml"),
		      *p = load("orphan-keeps.yaml");

	policy_note_orphans(p, old, NOW);
	cr_assert_eq(p->norphans, 0,
	             "fixed still settles on rl-response: the message does "
	             "not say whether tokens reserved");
	cr_assert_null(find(p, "rl-response", NOW + 1));
	policy_unref(old);
	policy_unref(p);
}

Test(policy_orphan, reload_keeping_the_rules_records_nothing)
{
	struct policy *old = load("reserve.yaml"), *p = load("reserve.yaml");

	policy_note_orphans(p, old, NOW);
	cr_assert_eq(p->norphans, 0);
	policy_note_orphans(p, NULL, NOW);
	cr_assert_eq(p->norphans, 0, "no policy before: nothing");
	policy_unref(old);
	policy_unref(p);
}

Test(policy_orphan, record_survives_a_second_reload_until_its_lease_ends)
{
	struct policy *a = load("reserve.yaml"), *b = load("orphan-none.yaml");
	struct policy *c = load("orphan-none.yaml"),
		      *d = load("orphan-none.yaml");
	const struct policy_orphan *o;
	int64_t                     later = NOW + 60 * LIM_USEC_PER_SEC;

	policy_note_orphans(b, a, NOW);
	policy_note_orphans(c, b, later);
	cr_assert_not_null(o = find(c, "rl-response", later));
	cr_assert_str_eq(o->rules, "tokens,fixed");
	cr_assert_eq(o->until_us, NOW + LEASE_S * LIM_USEC_PER_SEC,
	             "the lease runs from the first reload");
	policy_note_orphans(d, c, o->until_us);
	cr_assert_eq(d->norphans, 0, "a record past its lease is dropped");
	policy_unref(a);
	policy_unref(b);
	policy_unref(c);
	policy_unref(d);
}
