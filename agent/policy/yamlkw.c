/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The generic keyword layer under the policy parser: a libyaml document's
 * mappings walked against keyword tables (name, type, bounds, where the
 * value goes in the target struct), and the errors and warnings found, each
 * as "file:line:col: field.path: message", collected and sorted by
 * position rather than stopping at the first.
 *
 * It knows the YAML node tree and the keyword tables, nothing of what a
 * policy means: the cross-field checks and the sections that need more
 * than a table are policy_parse.c's. Not thread-safe per document.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "limiter.h"
#include "util.h"
#include "yamlkw.h"

/* ---- reporting ---------------------------------------------------------- */

static char *__attribute__((format(printf, 1, 0)))
xvasprintf(const char *fmt, va_list ap)
{
	va_list aq;
	char   *out;
	int     n;

	va_copy(aq, ap);
	n = vsnprintf(NULL, 0, fmt, aq);
	va_end(aq);
	if (n < 0)
		n = 0;
	out = xmalloc((size_t)n + 1);
	vsnprintf(out, (size_t)n + 1, fmt, ap);
	return out;
}

void
yamlkw_report(struct yamlkw_reports *rs, int line, int col, const char *file,
              const char *fmt, ...)
{
	struct yamlkw_report *r;
	va_list               ap;
	char                 *msg;

	va_start(ap, fmt);
	msg = xvasprintf(fmt, ap);
	va_end(ap);
	if (rs->n == rs->cap) {
		rs->cap = rs->cap ? rs->cap * 2 : 16;
		rs->v = xrealloc(rs->v, (size_t)rs->cap * sizeof(*rs->v));
	}
	r = &rs->v[rs->n];
	r->line = line;
	r->col = col;
	r->seq = rs->n++;
	r->text = xmalloc(strlen(file) + strlen(msg) + 32);
	sprintf(r->text, "%s:%d:%d: %s\n", file, line, col, msg);
	free(msg);
}

static int
report_cmp(const void *a, const void *b)
{
	const struct yamlkw_report *x = a, *y = b;

	if (x->line != y->line)
		return x->line < y->line ? -1 : 1;
	if (x->col != y->col)
		return x->col < y->col ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Joins <rs> in file order into one malloc'ed text (NULL when empty) and
 * empties it. */
char *
yamlkw_join(struct yamlkw_reports *rs)
{
	size_t len = 0, off = 0;
	char  *out = NULL;
	int    i;

	if (rs->n)
		qsort(rs->v, (size_t)rs->n, sizeof(*rs->v), report_cmp);
	for (i = 0; i < rs->n; i++)
		len += strlen(rs->v[i].text);
	if (rs->n)
		out = xmalloc(len + 1);
	for (i = 0; i < rs->n; i++) {
		size_t k = strlen(rs->v[i].text);

		memcpy(out + off, rs->v[i].text, k);
		off += k;
		free(rs->v[i].text);
	}
	if (out)
		out[off] = '\0';
	free(rs->v);
	rs->v = NULL;
	rs->n = rs->cap = 0;
	return out;
}

static void __attribute__((format(printf, 5, 0)))
vreport(struct yamlkw *c, struct yamlkw_reports *rs, const yaml_node_t *n,
        const char *path, const char *fmt, va_list ap)
{
	int   line = n ? (int)n->start_mark.line + 1 : 1;
	int   col = n ? (int)n->start_mark.column + 1 : 1;
	char *msg = xvasprintf(fmt, ap);

	yamlkw_report(rs, line, col, c->file, "%s: %s",
	              path && *path ? path : "policy", msg);
	free(msg);
}

void
yamlkw_verror(struct yamlkw *c, const yaml_node_t *n, const char *path,
              const char *fmt, va_list ap)
{
	vreport(c, &c->err, n, path, fmt, ap);
	c->nerr++;
}

void
yamlkw_vwarn(struct yamlkw *c, const yaml_node_t *n, const char *path,
             const char *fmt, va_list ap)
{
	vreport(c, &c->warn, n, path, fmt, ap);
}

void
yamlkw_error(struct yamlkw *c, const yaml_node_t *n, const char *path,
             const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	yamlkw_verror(c, n, path, fmt, ap);
	va_end(ap);
}

void
yamlkw_warn(struct yamlkw *c, const yaml_node_t *n, const char *path,
            const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	yamlkw_vwarn(c, n, path, fmt, ap);
	va_end(ap);
}

/* <base>.<key> (or <key> at the top) into <out>. */
const char *
yamlkw_path(char *out, const char *base, const char *key)
{
	size_t n = 0, k;

	/* By hand: the paths are bounded in practice, cut when they are not. */
	k = strlen(base);
	k = k < YAMLKW_PATH_MAX - 1 ? k : YAMLKW_PATH_MAX - 1;
	memmove(out, base, k);
	n = k;
	if (n && n < YAMLKW_PATH_MAX - 1)
		out[n++] = '.';
	k = strlen(key);
	k = k < YAMLKW_PATH_MAX - 1 - n ? k : YAMLKW_PATH_MAX - 1 - n;
	memcpy(out + n, key, k);
	out[n + k] = '\0';
	return out;
}

/* ---- scalars ------------------------------------------------------------ */

yaml_node_t *
yamlkw_node(struct yamlkw *c, int id)
{
	return yaml_document_get_node(c->doc, id);
}

/* YAML's null, written plain: ~, null, Null or NULL. Taken as its text it
 * would make `key: null` one key shared by every request. */
static int
is_null(const yaml_node_t *n)
{
	static const char *const nulls[] = { "~", "null", "Null", "NULL" };
	const char              *s = (const char *)n->data.scalar.value;

	if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return 0;
	for (size_t i = 0; i < ARRAY_SIZE(nulls); i++)
		if (strcmp(s, nulls[i]) == 0)
			return 1;
	return 0;
}

/* The text of a scalar node, or NULL (with an error) if <n> is not one,
 * or is a null. */
const char *
yamlkw_scalar(struct yamlkw *c, yaml_node_t *n, const char *path,
              const char *what)
{
	if (n->type != YAML_SCALAR_NODE) {
		yamlkw_error(c, n, path, "expected %s, got a %s", what,
		             n->type == YAML_MAPPING_NODE ? "mapping" : "list");
		return NULL;
	}
	if (strlen((const char *)n->data.scalar.value) !=
	    n->data.scalar.length) {
		yamlkw_error(c, n, path, "NUL byte in value");
		return NULL;
	}
	if (is_null(n)) {
		yamlkw_error(
			c, n, path,
			"expected %s, got null (quote \"%s\" for the text)",
			what, (const char *)n->data.scalar.value);
		return NULL;
	}
	return (const char *)n->data.scalar.value;
}

/* Strict decimal: the whole text, optional '-', no blanks. */
int
yamlkw_parse_int(const char *s, int64_t *v)
{
	char     *end;
	long long x;

	if (!*s || (*s != '-' && (*s < '0' || *s > '9')))
		return -1;
	errno = 0;
	x = strtoll(s, &end, 10);
	if (errno || *end)
		return -1;
	*v = x;
	return 0;
}

static int
parse_bool(const char *s, bool *v)
{
	static const char *const yes[] = { "true", "True", "TRUE", "yes",
		                           "Yes",  "on",   "On",   NULL };
	static const char *const no[] = { "false", "False", "FALSE", "no",
		                          "No",    "off",   "Off",   NULL };
	int                      i;

	for (i = 0; yes[i]; i++)
		if (strcmp(s, yes[i]) == 0)
			return *v = true, 0;
	for (i = 0; no[i]; i++)
		if (strcmp(s, no[i]) == 0)
			return *v = false, 0;
	return -1;
}

static void
store_int(void *dst, size_t size, int64_t v)
{
	switch (size) {
	case sizeof(int32_t): {
		int32_t x = (int32_t)v;

		memcpy(dst, &x, sizeof(x));
		break;
	}
	case sizeof(int64_t):
		memcpy(dst, &v, sizeof(v));
		break;
	default:
		fatal("yamlkw: keyword field of size %zu", size);
	}
}

static void
enum_choices(char *out, size_t size, const char *const *names)
{
	size_t len = 0;
	int    i;

	out[0] = '\0';
	for (i = 0; names[i] && len < size; i++)
		len += (size_t)snprintf(out + len, size - len, "%s%s",
		                        i ? ", " : "", names[i]);
}

/* ---- the generic walker ------------------------------------------------- */

static const char *
kw_what(const struct kw *k)
{
	switch (k->type) {
	case KW_INT:
		return "an integer";
	case KW_BOOL:
		return "true or false";
	case KW_DURATION:
		return "a duration";
	case KW_ENUM:
		return "a name";
	default:
		return "a string";
	}
}

/* Stores the value <n> of keyword <k> into <dst>. */
static void
parse_value(struct yamlkw *c, const struct kw *k, yaml_node_t *n,
            const char *path, void *base)
{
	char       *dst = (char *)base + k->off;
	const char *s;
	char        choices[160];
	int64_t     v;
	bool        b;
	int         i;

	if (k->type == KW_NODE)
		return;
	if (k->type == KW_SECTION) {
		if (n->type != YAML_MAPPING_NODE) {
			yamlkw_error(c, n, path, "expected a mapping");
			return;
		}
		yamlkw_map(c, n, path, k->sub, k->nsub, base, NULL);
		return;
	}
	if (!(s = yamlkw_scalar(c, n, path, kw_what(k))))
		return;
	switch (k->type) {
	case KW_STR:
		free(*(char **)(void *)dst);
		*(char **)(void *)dst = xstrdup(s);
		break;
	case KW_INT:
		if (yamlkw_parse_int(s, &v) == -1) {
			yamlkw_error(c, n, path,
			             "expected an integer, got \"%s\"", s);
		} else if (v < k->min || v > k->max) {
			yamlkw_error(c, n, path,
			             "must be between %lld and %lld",
			             (long long)k->min, (long long)k->max);
		} else {
			store_int(dst, k->size, v);
		}
		break;
	case KW_BOOL:
		if (parse_bool(s, &b) == -1)
			yamlkw_error(c, n, path,
			             "expected true or false, got \"%s\"", s);
		else
			*(bool *)(void *)dst = b;
		break;
	case KW_DURATION:
		if (lim_parse_duration(s, &v) == -1) {
			yamlkw_error(c, n, path,
			             "expected a duration such as 250us, "
			             "5ms, 30s, 15m, 1h, 1d, got \"%s\"",
			             s);
		} else if (v < k->min || v > k->max) {
			yamlkw_error(c, n, path,
			             "must be between %lldus and %lldus",
			             (long long)k->min, (long long)k->max);
		} else {
			memcpy(dst, &v, sizeof(v));
		}
		break;
	case KW_ENUM:
		for (i = 0; k->names[i]; i++) {
			if (strcmp(s, k->names[i]) == 0) {
				*(int *)(void *)dst = i;
				return;
			}
		}
		enum_choices(choices, sizeof(choices), k->names);
		yamlkw_error(c, n, path, "unknown %s \"%s\" (one of: %s)",
		             k->name, s, choices);
		break;
	default:
		break;
	}
}

struct dup_key {
	const char *key;
	int         i;
};

static int
dup_cmp(const void *a, const void *b)
{
	const struct dup_key *x = a, *y = b;
	int                   r = strcmp(x->key, y->key);

	return r ? r : (x->i > y->i) - (x->i < y->i);
}

int *
yamlkw_dups(struct yamlkw *c, yaml_node_t *map)
{
	yaml_node_pair_t *start = map->data.mapping.pairs.start;
	int               n = (int)(map->data.mapping.pairs.top - start), k = 0;
	int              *first = xmalloc(((size_t)n + 1) * sizeof(*first));
	struct dup_key   *v = xmalloc(((size_t)n + 1) * sizeof(*v));

	for (int i = 0; i < n; i++) {
		yaml_node_t *kn = yamlkw_node(c, start[i].key);

		first[i] = -1;
		if (kn->type == YAML_SCALAR_NODE)
			v[k++] = (struct dup_key){
				(const char *)kn->data.scalar.value, i
			};
	}
	qsort(v, (size_t)k, sizeof(*v), dup_cmp);
	for (int j = 1, head = 0; j < k; j++) {
		if (strcmp(v[j].key, v[head].key) == 0)
			first[v[j].i] = v[head].i;
		else
			head = j;
	}
	free(v);
	return first;
}

/* Walks mapping <map>: each key must be in <tab>, once. Values go to <dst>
 * (see parse_value); <seen>, when given, gets the value node of each
 * keyword present, by table index. */
void
yamlkw_map(struct yamlkw *c, yaml_node_t *map, const char *path,
           const struct kw *tab, size_t ntab, void *dst, yaml_node_t **seen)
{
	yaml_node_pair_t *pr;
	char              sub[YAMLKW_PATH_MAX];
	int              *first = yamlkw_dups(c, map);

	for (pr = map->data.mapping.pairs.start;
	     pr < map->data.mapping.pairs.top; pr++) {
		yaml_node_t *kn = yamlkw_node(c, pr->key),
			    *vn = yamlkw_node(c, pr->value);
		const char *key;
		size_t      i;
		int         f;

		if (!(key = yamlkw_scalar(c, kn, path, "a key")))
			continue;
		yamlkw_path(sub, path, key);
		if ((f = first[pr - map->data.mapping.pairs.start]) >= 0) {
			yaml_node_pair_t *q = &map->data.mapping.pairs.start[f];

			yamlkw_error(
				c, kn, sub, "duplicate key (first at line %d)",
				(int)yamlkw_node(c, q->key)->start_mark.line +
					1);
			continue;
		}
		for (i = 0; i < ntab; i++)
			if (tab[i].name && strcmp(tab[i].name, key) == 0)
				break;
		if (i == ntab) {
			yamlkw_error(c, kn, sub, "unknown key");
			continue;
		}
		if (seen)
			seen[i] = vn;
		parse_value(c, &tab[i], vn, sub, dst);
	}
	free(first);
}

/* ---- lookups ------------------------------------------------------------ */

yaml_node_t *
yamlkw_find(struct yamlkw *c, yaml_node_t *map, const char *key)
{
	yaml_node_pair_t *pr;

	if (!map || map->type != YAML_MAPPING_NODE)
		return map;
	for (pr = map->data.mapping.pairs.start;
	     pr < map->data.mapping.pairs.top; pr++) {
		yaml_node_t *kn = yamlkw_node(c, pr->key);

		if (kn->type == YAML_SCALAR_NODE &&
		    strcmp((const char *)kn->data.scalar.value, key) == 0)
			return yamlkw_node(c, pr->value);
	}
	return map;
}

yaml_node_t *
yamlkw_get(struct yamlkw *c, yaml_node_t *map, const char *key)
{
	yaml_node_t *v;

	if (!map || map->type != YAML_MAPPING_NODE)
		return NULL;
	v = yamlkw_find(c, map, key);
	return v == map ? NULL : v;
}
