/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The generic keyword layer under the policy parser: walks a libyaml
 * document's mappings against keyword tables and collects every error and
 * warning as "file:line:col: field.path: message", sorted by position.
 * Nothing here knows what a policy is (policy_parse.c does).
 */
#ifndef YAMLKW_H
#define YAMLKW_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#define YAMLKW_PATH_MAX 160 /* a field path ("rules[3].window"), cut */

/* One error or warning; sorted by position before they are joined. */
struct yamlkw_report {
	int   line, col, seq;
	char *text; /* "file:line:col: path: message" */
};

struct yamlkw_reports {
	struct yamlkw_report *v;
	int                   n, cap;
};

/* A document being read and what was found wrong with it. */
struct yamlkw {
	const char           *file;
	yaml_document_t      *doc;
	struct yamlkw_reports err;
	struct yamlkw_reports warn;
	int                   nerr;
};

enum kw_type {
	KW_STR = 0,  /* char *, xstrdup'ed */
	KW_INT,      /* integer of <size> bytes, in [min, max] */
	KW_BOOL,     /* bool */
	KW_DURATION, /* int64_t µs, in [min, max] */
	KW_ENUM,     /* int, the index of the value in <names> */
	KW_SECTION,  /* a nested mapping, same target, table <sub> */
	KW_NODE,     /* only recorded; handled by the caller */
};

/* One keyword of a table: what a key is and where its value goes. */
struct kw {
	const char        *name;
	enum kw_type       type;
	size_t             off;  /* in the target struct */
	size_t             size; /* KW_INT: sizeof the field */
	int64_t            min, max;
	const char *const *names; /* KW_ENUM, NULL-terminated */
	const struct kw   *sub;   /* KW_SECTION */
	size_t             nsub;
	const char        *help;
};

#define FIELD(type, f) .off = offsetof(type, f), .size = sizeof(((type *)0)->f)

/* Adds "file:line:col: message" to <rs>. */
void yamlkw_report(struct yamlkw_reports *rs, int line, int col,
                   const char *file, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
/* Joins <rs> in file order into one malloc'ed text (NULL when empty) and
 * empties it. */
char *yamlkw_join(struct yamlkw_reports *rs);
/* An error (counted in nerr) or a warning at node <n> (NULL: line 1) for
 * field <path> ("" or NULL: "policy"). */
void yamlkw_verror(struct yamlkw *y, const yaml_node_t *n, const char *path,
                   const char *fmt, va_list ap)
	__attribute__((format(printf, 4, 0)));
void yamlkw_vwarn(struct yamlkw *y, const yaml_node_t *n, const char *path,
                  const char *fmt, va_list ap)
	__attribute__((format(printf, 4, 0)));

/* yamlkw_verror() and yamlkw_vwarn() with the arguments inline. */
void yamlkw_error(struct yamlkw *y, const yaml_node_t *n, const char *path,
                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void yamlkw_warn(struct yamlkw *y, const yaml_node_t *n, const char *path,
                 const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* <base>.<key> (or <key> at the top) into <out>, YAMLKW_PATH_MAX bytes. */
const char *yamlkw_path(char *out, const char *base, const char *key);
/* Node <id> of the document. */
yaml_node_t *yamlkw_node(struct yamlkw *y, int id);
/* The text of a scalar node, or NULL (with an error) if <n> is not one;
 * <what> names what was expected. */
const char *yamlkw_scalar(struct yamlkw *y, yaml_node_t *n, const char *path,
                          const char *what);
/* Strict decimal: the whole text, optional '-', no blanks. 0 or -1. */
int yamlkw_parse_int(const char *s, int64_t *v);

/* For each pair i of mapping <map>, the index of the first earlier pair
 * with the same scalar key, or -1: a malloc'ed array (one int per pair),
 * built in O(n log n) so that a mapping of 100000s of keys (tenants:)
 * loads in seconds, not minutes. */
int *yamlkw_dups(struct yamlkw *y, yaml_node_t *map);

/* Walks mapping <map>: each key must be in <tab>, once. Values go to <dst>
 * at each keyword's offset; <seen>, when given, gets the value node of
 * each keyword present, by table index. */
void yamlkw_map(struct yamlkw *y, yaml_node_t *map, const char *path,
                const struct kw *tab, size_t ntab, void *dst,
                yaml_node_t **seen);
/* The value node of <key> in mapping <map>, or <map> itself. */
yaml_node_t *yamlkw_find(struct yamlkw *y, yaml_node_t *map, const char *key);
/* The value node of <key> in mapping <map>, or NULL. */
yaml_node_t *yamlkw_get(struct yamlkw *y, yaml_node_t *map, const char *key);

#endif
