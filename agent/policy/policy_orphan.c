/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Settles orphaned by a reload (policy_orphan.h): at a reload, the
 * result messages of the old policy's reserving rules, when the new one
 * binds no rule to them (the rule removed, or kept without reserve:),
 * are recorded in the new policy with the time their reservations can
 * still be settled (the longest lease); the request path looks a
 * message up there only when no rule took it.
 *
 * It does not settle anything: the removed rule's key, parameters and
 * record are gone with the old policy, and its reservations lapse at
 * their lease. It runs on the main thread at reload, on a policy no
 * worker has seen yet; the lookup reads an immutable policy.
 */
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "policy_orphan.h"

/* 1 if some rule of <p> takes message <msg>. */
static int
binds(const struct policy *p, const char *msg)
{
	const struct policy_msg *pm = policy_find_msg(p, msg, strlen(msg));

	return pm != NULL && pm->n > 0;
}

/* <p>'s record for <msg>, added if new; NULL when there is no room. */
static struct policy_orphan *
orphan_slot(struct policy *p, const char *msg)
{
	struct policy_orphan *o;

	for (int i = 0; i < p->norphans; i++)
		if (strcmp(p->orphans[i].message, msg) == 0)
			return &p->orphans[i];
	if (p->norphans == POLICY_MAX_ORPHANS ||
	    strlen(msg) >= sizeof(o->message)) {
		log_warn("settle_orphans_untracked", "message=%s", msg);
		return NULL;
	}
	o = &p->orphans[p->norphans++];
	memset(o, 0, sizeof(*o));
	memcpy(o->message, msg, strlen(msg) + 1);
	return o;
}

/* Adds <rules> (one name, or a list) lasting until <until_us> to <o>. */
static void
orphan_add(struct policy_orphan *o, const char *rules, int64_t until_us)
{
	size_t n = strlen(o->rules);

	if (o->until_us < until_us)
		o->until_us = until_us;
	snprintf(o->rules + n, sizeof(o->rules) - n, "%s%s", n ? "," : "",
	         rules);
}

void
policy_note_orphans(struct policy *p, const struct policy *old, int64_t now_us)
{
	struct policy_orphan *o;

	if (old == NULL)
		return;
	for (int i = 0; i < old->norphans; i++) {
		const struct policy_orphan *prev = &old->orphans[i];

		if (prev->until_us > now_us && !binds(p, prev->message) &&
		    (o = orphan_slot(p, prev->message)) != NULL)
			orphan_add(o, prev->rules, prev->until_us);
	}
	for (int i = 0; i < old->nrules; i++) {
		const struct rule *r = &old->rules[i];

		/* whether <p> still has a rule of that name does not
		 * matter: one that no longer reserves (or settles on
		 * another message) leaves these settles to no rule */
		if (!r->reserves || r->result_message == NULL ||
		    binds(p, r->result_message))
			continue;
		if ((o = orphan_slot(p, r->result_message)) != NULL)
			orphan_add(o, r->name,
			           now_us + r->lim.reserve_lease_us);
	}
}

const struct policy_orphan *
policy_orphan_find(const struct policy *p, const struct spop_message *m,
                   int64_t now_us)
{
	for (int i = 0; i < p->norphans; i++) {
		const struct policy_orphan *o = &p->orphans[i];

		if (strlen(o->message) == m->name.len &&
		    memcmp(o->message, m->name.ptr, m->name.len) == 0 &&
		    now_us < o->until_us)
			return o;
	}
	return NULL;
}
