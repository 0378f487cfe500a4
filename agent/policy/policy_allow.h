/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The policy's static allow lists (issue 18): the top-level
 *
 *   allow_lists:
 *     monitoring: [10.20.0.0/16, "2001:db8:42::/48"]
 *
 * and each rule's "allow: [monitoring, 192.0.2.7]" (list names or ranges),
 * read into rule->allow. A request whose "ip" arg is in one of a rule's
 * ranges gets no check of that rule (policy_build_checks): no Redis, no
 * local tier, no near-cache.
 *
 * Between policy_parse.c and this file only; the matching is policy.c's
 * (allowed_ip) over cidr.h.
 */
#ifndef POLICY_ALLOW_H
#define POLICY_ALLOW_H

#include <yaml.h>

#include "policy.h"
#include "yamlkw.h"

struct allow_lists;

/* Reads the allow_lists: mapping <n> (NULL: none), reporting into <y>.
 * Returns the lists (never NULL; free with allow_lists_done()). */
struct allow_lists *allow_lists_parse(struct yamlkw *y, yaml_node_t *n);

/* Reads rule <r>'s allow: value <n> at <path> into r->allow / r->nallow. */
void allow_rule(struct yamlkw *y, struct allow_lists *l, yaml_node_t *n,
                const char *path, struct rule *r);

/* Warns of lists no rule uses, then frees <l>. NULL is a no-op. */
void allow_lists_done(struct yamlkw *y, struct allow_lists *l);

#endif
