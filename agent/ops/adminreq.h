/* SPDX-License-Identifier: Apache-2.0 */
/*
 * adminreq: the pure parts of the admin API (admin.c), kept apart so a
 * fuzz target can feed them anything: the decoder of a request target
 * ("/admin/keys/login?user=alice") and a small bounded JSON writer.
 *
 * Targets (query values percent-decoded; '+' is a plus, not a space):
 *   /admin/keys/RULE?ARG=VALUE&...   one key, from the rule's template args
 *   /admin/key?key=RAWKEY            one key, exactly as logs print it
 *   /admin/top?rule=NAME&n=N         the most denied keys
 * Bounded: a target of at most ADMINREQ_MAX_BYTES bytes, at most
 * ADMINREQ_MAX_PARAMS parameters; a repeated or empty name, a bad %XX, a
 * decoded NUL or control byte is refused with a one-line reason.
 *
 * Not here: authentication, what a route does (admin.c), HTTP (httpd.c).
 */
#ifndef ADMINREQ_H
#define ADMINREQ_H

#include <stddef.h>
#include <stdint.h>

#define ADMINREQ_MAX_BYTES  2048
#define ADMINREQ_MAX_PARAMS 16
#define JSONW_MAX           (1 << 20) /* a reply's largest size */

enum adminreq_route {
	ADMINREQ_KEYS = 1, /* /admin/keys/RULE */
	ADMINREQ_RAWKEY,   /* /admin/key */
	ADMINREQ_TOP,      /* /admin/top */
};

struct adminreq_param {
	const char *name, *value; /* NUL-terminated, in <buf> */
	size_t      nlen, vlen;
};

struct adminreq {
	enum adminreq_route   route;
	const char           *rule; /* ADMINREQ_KEYS: in <buf> */
	int                   nparams;
	struct adminreq_param params[ADMINREQ_MAX_PARAMS];
	char buf[ADMINREQ_MAX_BYTES + ADMINREQ_MAX_PARAMS * 2 + 2];
};

/* Decodes <target,len> (path and query, as on the request line) into
 * <rq>. Returns 0, 404 for a path that is no admin route, or 400; on
 * error <*err> is a static one-line reason. */
int adminreq_parse(const char *target, size_t len, struct adminreq *rq,
                   const char **err);

/* The value of parameter <name>, or NULL. */
const struct adminreq_param *adminreq_get(const struct adminreq *rq,
                                          const char            *name);

/* A JSON text being written: appends fail softly (sticky <err>) past
 * JSONW_MAX bytes, so a writer never grows without bound. */
struct jsonw {
	char  *buf; /* NUL-terminated; free() it */
	size_t len, cap;
	int    err;
	int    comma; /* a value was written at this level */
};

void jsonw_raw(struct jsonw *w, const char *s, size_t n);
/* "name": as the next member (a comma first when needed). */
void jsonw_key(struct jsonw *w, const char *name);
/* A JSON string of <n> bytes: quotes, backslashes and control bytes
 * escaped, invalid UTF-8 bytes written as \u00XX. */
void jsonw_str(struct jsonw *w, const char *s, size_t n);
void jsonw_int(struct jsonw *w, int64_t v);
void jsonw_open(struct jsonw *w, char c); /* '{' or '[' */
void jsonw_close(struct jsonw *w, char c);
/* A member "name": "<s>" / "name": <v>. */
void jsonw_kstr(struct jsonw *w, const char *name, const char *s);
void jsonw_kint(struct jsonw *w, const char *name, int64_t v);
/* Before an array element: a comma when one came before. */
void jsonw_elem(struct jsonw *w);

#endif
