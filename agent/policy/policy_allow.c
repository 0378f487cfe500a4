/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading the static allow lists of a policy (policy_allow.h): the named
 * lists of allow_lists:, each rule's allow:, strict validation with one
 * "file:line:col: path: message" per fault. Nothing here matches a
 * request (policy.c does) or knows other policy fields.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cidr.h"
#include "policy_allow.h"
#include "util.h"

struct allow_list {
	char        *name;
	struct cidr *v;
	int          n;
	yaml_node_t *node; /* its name, for the "unused" warning */
	bool         used;
};

struct allow_lists {
	struct allow_list *l;
	int                n;
};

static int
seq_len(const yaml_node_t *n)
{
	return (int)(n->data.sequence.items.top - n->data.sequence.items.start);
}

/* Same alphabet as rule names: letters, digits, '-', '_', '.'. */
static bool
valid_list_name(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > POLICY_NAME_MAX)
		return false;
	return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	                 "0123456789-_.") == n;
}

static struct allow_list *
find_list(struct allow_lists *l, const char *name)
{
	for (int i = 0; i < l->n; i++)
		if (strcmp(l->l[i].name, name) == 0)
			return &l->l[i];
	return NULL;
}

/* Appends range <c> to <*v> (<*n> in use), within POLICY_ALLOW_MAX.
 * Returns 0, or -1 (reported) when full. */
static int
push(struct yamlkw *y, yaml_node_t *at, const char *path, struct cidr **v,
     int *n, const struct cidr *c)
{
	if (*n >= POLICY_ALLOW_MAX) {
		yamlkw_error(y, at, path, "more than %d address ranges",
		             POLICY_ALLOW_MAX);
		return -1;
	}
	*v = xrealloc(*v, (size_t)(*n + 1) * sizeof(**v));
	(*v)[(*n)++] = *c;
	return 0;
}

/* Reads the sequence of ranges <vn> of list <al> at <path>. */
static void
parse_list(struct yamlkw *y, yaml_node_t *vn, const char *path,
           struct allow_list *al)
{
	char ipath[YAMLKW_PATH_MAX + 16];

	if (vn->type != YAML_SEQUENCE_NODE) {
		yamlkw_error(y, vn, path,
		             "expected a list of address ranges "
		             "([10.0.0.0/8, \"2001:db8::/32\"])");
		return;
	}
	if (seq_len(vn) == 0)
		yamlkw_warn(y, vn, path, "empty: allows no one");
	for (int i = 0; i < seq_len(vn); i++) {
		yaml_node_t *it =
			yamlkw_node(y, vn->data.sequence.items.start[i]);
		const char *s, *err;
		struct cidr c;

		snprintf(ipath, sizeof(ipath), "%s[%d]", path, i);
		if (!(s = yamlkw_scalar(y, it, ipath, "an address range")))
			continue;
		if (cidr_parse(s, &c, &err) == -1)
			yamlkw_error(y, it, ipath, "\"%s\": %s", s, err);
		else if (push(y, it, ipath, &al->v, &al->n, &c) == -1)
			return;
	}
}

struct allow_lists *
allow_lists_parse(struct yamlkw *y, yaml_node_t *n)
{
	struct allow_lists *l = xcalloc(1, sizeof(*l));
	yaml_node_pair_t   *pr;
	char                path[YAMLKW_PATH_MAX];

	if (!n)
		return l;
	if (n->type != YAML_MAPPING_NODE) {
		yamlkw_error(y, n, "allow_lists",
		             "expected a mapping name: "
		             "[address ranges]");
		return l;
	}
	l->l = xcalloc((size_t)(n->data.mapping.pairs.top -
	                        n->data.mapping.pairs.start) +
	                       1,
	               sizeof(*l->l));
	for (pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top;
	     pr++) {
		yaml_node_t *kn = yamlkw_node(y, pr->key);
		const char  *name =
			yamlkw_scalar(y, kn, "allow_lists", "a list name");
		struct allow_list *al;

		if (!name)
			continue;
		yamlkw_path(path, "allow_lists", name);
		if (!valid_list_name(name)) {
			yamlkw_error(y, kn, path,
			             "name must be 1-%d letters, digits, "
			             "'-', '_' or '.'",
			             POLICY_NAME_MAX);
			continue;
		}
		if (find_list(l, name)) {
			yamlkw_error(y, kn, path, "duplicate allow list");
			continue;
		}
		al = &l->l[l->n++];
		al->name = xstrdup(name);
		al->node = kn;
		parse_list(y, yamlkw_node(y, pr->value), path, al);
	}
	return l;
}

/* One item <s> of a rule's allow: a list name, else a range. */
static void
allow_item(struct yamlkw *y, struct allow_lists *l, yaml_node_t *it,
           const char *path, const char *s, struct rule *r)
{
	struct allow_list *al = find_list(l, s);
	const char        *err;
	struct cidr        c;

	if (al) {
		al->used = true;
		for (int i = 0; i < al->n; i++)
			if (push(y, it, path, &r->allow, &r->nallow,
			         &al->v[i]) == -1)
				return;
		return;
	}
	if (cidr_parse(s, &c, &err) == 0) {
		push(y, it, path, &r->allow, &r->nallow, &c);
		return;
	}
	if (!valid_list_name(s) || strspn(s, "0123456789.") == strlen(s))
		yamlkw_error(y, it, path, "\"%s\": %s", s, err); /* a range */
	else
		yamlkw_error(y, it, path,
		             "unknown allow list \"%s\" (define it "
		             "under allow_lists:, or write an address range)",
		             s);
}

void
allow_rule(struct yamlkw *y, struct allow_lists *l, yaml_node_t *n,
           const char *path, struct rule *r)
{
	char ipath[YAMLKW_PATH_MAX + 16];

	if (n->type != YAML_SEQUENCE_NODE) {
		yamlkw_error(y, n, path,
		             "expected a list of allow-list names or "
		             "address ranges ([monitoring, 192.0.2.7])");
		return;
	}
	if (seq_len(n) == 0)
		yamlkw_warn(y, n, path, "empty: allows no one");
	for (int i = 0; i < seq_len(n); i++) {
		yaml_node_t *it =
			yamlkw_node(y, n->data.sequence.items.start[i]);
		const char *s;

		snprintf(ipath, sizeof(ipath), "%s[%d]", path, i);
		if ((s = yamlkw_scalar(y, it, ipath,
		                       "a list name or an address "
		                       "range")) != NULL)
			allow_item(y, l, it, ipath, s, r);
	}
}

void
allow_lists_done(struct yamlkw *y, struct allow_lists *l)
{
	char path[YAMLKW_PATH_MAX];

	if (!l)
		return;
	for (int i = 0; i < l->n; i++) {
		if (!l->l[i].used && y->nerr == 0) {
			yamlkw_path(path, "allow_lists", l->l[i].name);
			yamlkw_warn(y, l->l[i].node, path,
			            "no rule uses this list");
		}
		free(l->l[i].name);
		free(l->l[i].v);
	}
	free(l->l);
	free(l);
}
