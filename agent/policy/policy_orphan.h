/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Settles orphaned by a reload: a reserving rule removed from the policy
 * (or kept under its name without reserve:) leaves reservations in Redis
 * whose settles (its result message, rl-response by default) still come,
 * from requests admitted before the reload. When the new policy binds no
 * rule at all to that message, no rule can take them: the agent counts
 * them (spoa_rl_reserve_settles_orphaned_total) and logs them instead of
 * dropping them silently. The reservations stay charged until their
 * lease ends; nothing here touches Redis.
 *
 * A message the new policy still binds (another rule of it charges or
 * settles on the same message) is not recorded: HAProxy sends it for the
 * new rules' sake too, and the message does not say which rule reserved,
 * so counting it would count requests that reserved nothing.
 */
#ifndef POLICY_ORPHAN_H
#define POLICY_ORPHAN_H

#include <stdint.h>

#include "policy.h"

/* Records in <p> (new, not yet shared with a worker) the result messages
 * of <old>'s reserving rules to which <p> binds no rule (whether or not
 * <p> keeps a rule of that name), each until <now_us> plus the longest
 * lease of those rules; and carries over <old>'s own records still running at
 * <now_us> whose message <p> binds to no rule either. At most
 * POLICY_MAX_ORPHANS messages; more are dropped (logged). <old> NULL: a
 * no-op. */
void policy_note_orphans(struct policy *p, const struct policy *old,
                         int64_t now_us);

/* The record that makes <m> an orphaned settle at <now_us>, or NULL.
 * Allocation-free; safe from any thread (<p> is immutable once shared). */
const struct policy_orphan *policy_orphan_find(const struct policy       *p,
                                               const struct spop_message *m,
                                               int64_t now_us);

#endif
