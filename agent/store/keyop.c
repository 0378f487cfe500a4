/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One key for an operator: built as the agent builds it, shown through the
 * decision script's PEEK sent as a read-only view, reset with DEL (see
 * keyop.h). Blocking hiredis: never on a worker's loop.
 *
 * On a Cluster each command follows MOVED (the context moves to the node
 * named) and ASK (ASKING and the command on a connection of its own to
 * the node named, closed after it: mid-migration, the slot stays its
 * owner's), KEYOP_MAX_REDIRECTS in all; the redirect is read by
 * reply_redirect(), as the workers read it. No slot map is kept: a
 * command goes where the last MOVED led.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "batch.h"
#include "cidr.h"
#include "keyop.h"
#include "keys.h"
#include "override.h"
#include "reply.h"
#include "resolve.h"
#include "results.h"
#include "store.h"
#include "util.h"

/* Cluster redirects followed per command at most, as the workers' */
#define KEYOP_MAX_REDIRECTS 5

static int __attribute__((format(printf, 2, 3)))
fail(char *err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, KEYOP_ERR_MAX, fmt, ap);
	va_end(ap);
	return -1;
}

static const struct rule *
find_rule(const struct policy *p, const char *name, char *err)
{
	for (int i = 0; i < p->nrules; i++)
		if (strcmp(p->rules[i].name, name) == 0) {
			if (p->rules[i].store == STORE_LOCAL) {
				fail(err,
				     "rule %s counts in each agent "
				     "(store: local): nothing in Redis",
				     name);
				return NULL;
			}
			return &p->rules[i];
		}
	fail(err, "unknown rule '%.64s'", name);
	return NULL;
}

static int
tmpl_has(const struct tmpl *t, const char *name)
{
	for (int i = 0; t != NULL && i < keys_nvars(t); i++)
		if (strcmp(keys_var(t, i), name) == 0)
			return 1;
	return 0;
}

/* Adds a string arg <name>=<value> to <m>. */
static void
add_arg(struct spop_message *m, const char *name, const char *value)
{
	struct spop_arg *a = &m->args[m->nargs++];

	a->name.ptr = name;
	a->name.len = strlen(name);
	a->value.type = SPOP_DATA_STRING;
	a->value.v.str.ptr = value;
	a->value.v.str.len = strlen(value);
	m->nargs_total = m->nargs;
}

/* The args the operator did not give but the check needs: a member id
 * and a cost, neither part of the key. */
static void
add_filler(struct spop_message *m, const struct rule *r)
{
	for (int i = 0; r->id != NULL && i < keys_nvars(r->id); i++)
		if (spop_find_arg(m, keys_var(r->id, i),
		                  strlen(keys_var(r->id, i))) == NULL &&
		    m->nargs < SPOP_MAX_ARGS)
			add_arg(m, keys_var(r->id, i), "-");
	if (r->cost_arg != NULL && m->nargs < SPOP_MAX_ARGS &&
	    spop_find_arg(m, r->cost_arg, strlen(r->cost_arg)) == NULL)
		add_arg(m, r->cost_arg, "1");
}

static int
check_args(const struct rule *r, const char *const *names, int n, char *err)
{
	if (n > SPOP_MAX_ARGS - 2)
		return fail(err, "too many args (%d)", n);
	for (int i = 0; i < n; i++) {
		if (!tmpl_has(r->key, names[i]) &&
		    !tmpl_has(r->fallback, names[i]))
			return fail(err,
			            "rule %s has no arg '%.64s' in its key "
			            "(%s)",
			            r->name, names[i], keys_source(r->key));
		for (int j = 0; j < i; j++)
			if (strcmp(names[i], names[j]) == 0)
				return fail(err, "arg '%.64s' given twice",
				            names[i]);
	}
	return 0;
}

/* The value of the allow: arg among <names>/<values> when it reads as an
 * address in <r>'s allow: ranges (policy.c builds no check for it), or
 * NULL. */
static const char *
allow_listed(const struct rule *r, const char *const *names,
             const char *const *values, int n)
{
	uint8_t addr[16];

	for (int i = 0; r->nallow > 0 && i < n; i++)
		if (strcmp(names[i], POLICY_ALLOW_ARG) == 0 &&
		    cidr_addr_text(values[i], strlen(values[i]), addr) == 0 &&
		    cidr_match_any(r->allow, r->nallow, addr))
			return values[i];
	return NULL;
}

int
keyop_from_args(const struct policy *p, const char *rule,
                const char *const *names, const char *const *values, int n,
                struct check *out, char *err)
{
	static _Thread_local struct check cks[POLICY_MAX_CHECKS];
	struct spop_message               m = { 0 };
	const struct rule                *r = find_rule(p, rule, err);
	const char                       *ip;
	int                               k;

	if (r == NULL || check_args(r, names, n, err) == -1)
		return -1;
	m.name.ptr = r->message;
	m.name.len = strlen(r->message);
	for (int i = 0; i < n; i++)
		add_arg(&m, names[i], values[i]);
	add_filler(&m, r);
	if ((ip = allow_listed(r, names, values, n)) != NULL)
		return fail(err,
		            "%s=%.64s is in rule %s's allow: list: the agents "
		            "never check it, so it has no key",
		            POLICY_ALLOW_ARG, ip, r->name);
	k = policy_build_checks(p, &m, cks, POLICY_MAX_CHECKS);
	for (int i = 0; i < k; i++) {
		if (cks[i].rule != r || cks[i].op == LIM_OP_RELEASE)
			continue;
		if (cks[i].kind != CHECK_EVAL)
			return fail(err,
			            "missing arg: the key of rule %s is %s",
			            r->name, keys_source(r->key));
		*out = cks[i];
		return 0;
	}
	return fail(err, "missing arg: the key of rule %s is %s", r->name,
	            keys_source(r->key));
}

/* Undoes log_put_escaped(): \xHH back to its byte. Returns the length,
 * or -1 for a bad escape or a key too long. */
static long
unescape(const char *s, char *o, size_t max)
{
	size_t   k = 0;
	unsigned v;

	for (; *s != '\0'; s++) {
		if (k == max)
			return -1;
		if (*s != '\\') {
			o[k++] = *s;
			continue;
		}
		if (s[1] != 'x' || sscanf(s + 2, "%2x", &v) != 1 ||
		    strspn(s + 2, "0123456789abcdefABCDEF") < 2)
			return -1;
		o[k++] = (char)v;
		s += 3;
	}
	o[k] = '\0';
	return (long)k;
}

int
keyop_from_raw(const struct policy *p, const char *raw, struct check *out,
               char *err)
{
	const struct rule *r = NULL;
	long               len;

	memset(out, 0, sizeof(*out));
	len = unescape(raw, out->key, POLICY_KEY_MAX);
	if (len <= 0)
		return fail(err,
		            "not a key: want rl:{RULE:...} as logs print it");
	for (int i = 0; i < p->nrules && r == NULL; i++)
		if (strncmp(out->key, p->rules[i].key_prefix,
		            strlen(p->rules[i].key_prefix)) == 0)
			r = &p->rules[i];
	if (r == NULL || out->key[len - 1] != '}')
		return fail(err, "no rule of the policy makes this key "
		                 "(want rl:{RULE:...})");
	if (find_rule(p, r->name, err) == NULL)
		return -1;
	out->keylen = (size_t)len;
	out->rule = r;
	out->kind = CHECK_EVAL;
	out->op = LIM_OP_PEEK;
	out->cost = 1;
	out->plan = -1;
	out->lim = r->plan != RULE_PLAN_NONE && r->plan_lim != NULL &&
	                           p->plan_lookup.default_plan >= 0
	                   ? r->plan_lim[p->plan_lookup.default_plan]
	                   : r->lim;
	return 0;
}

/* ---- Redis -------------------------------------------------------------- */

static int dns_cached;

void
keyop_dns_cached(int on)
{
	dns_cached = on;
}

static redisContext *
connect_to(const char *host, int port, const char *path, int64_t tmo, char *err)
{
	struct timeval tv = { tmo / 1000000, tmo % 1000000 };
	char           buf[RESOLVE_ADDR_MAX];
	const char    *addr = host, *why = NULL;
	redisContext  *c;

	if (dns_cached && (path == NULL || path[0] == '\0') &&
	    (addr = resolve_addr(host, buf, &why)) == NULL) {
		fail(err, "redis %s:%d: %s", host, port,
		     why ? why : "resolving the host name");
		return NULL;
	}
	c = path != NULL && path[0] != '\0'
	            ? redisConnectUnixWithTimeout(path, tv)
	            : redisConnectWithTimeout(addr, port, tv);

	if (c == NULL || c->err) {
		fail(err, "redis %s:%d: %s", path && *path ? path : host, port,
		     c ? c->errstr : "out of memory");
		redisFree(c);
		return NULL;
	}
	redisSetTimeout(c, tv);
	return c;
}

/* <r>, the reply on <c>, unless it is missing or an error (then NULL
 * with <err>, and <r> freed). */
static redisReply *
checked(redisContext *c, redisReply *r, char *err)
{
	if (r == NULL) {
		fail(err, "redis: %s", c->errstr[0] ? c->errstr : "no reply");
		return NULL;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		fail(err, "redis: %.200s", r->str);
		freeReplyObject(r);
		return NULL;
	}
	return r;
}

/* Runs <fmt> and checks the reply is not an error. Returns the reply or
 * NULL with <err>. */
static redisReply *
cmd(redisContext *c, char *err, const char *fmt, ...)
{
	redisReply *r;
	va_list     ap;

	va_start(ap, fmt);
	r = redisvCommand(c, fmt, ap);
	va_end(ap);
	return checked(c, r, err);
}

/* AUTH and SELECT on a fresh connection. */
static int
login(redisContext *c, const char *user, const char *pass, int db, char *err)
{
	redisReply *r = NULL;

	if (pass != NULL && *pass != '\0')
		r = user != NULL && *user != '\0'
		            ? cmd(c, err, "AUTH %s %s", user, pass)
		            : cmd(c, err, "AUTH %s", pass);
	if (pass != NULL && *pass != '\0' && r == NULL)
		return -1;
	freeReplyObject(r);
	if (db > 0) {
		if ((r = cmd(c, err, "SELECT %d", db)) == NULL)
			return -1;
		freeReplyObject(r);
	}
	return 0;
}

struct conninfo {
	const char *user, *pass;
	int64_t     tmo;
};

static _Thread_local struct conninfo cinfo;

/* A Sentinel group's master, from the first sentinel that knows it. */
static int
sentinel_master(const struct store_topo *t, char *host, int *port, char *err)
{
	redisContext *s;
	redisReply   *r;

	for (int i = 0; i < t->nseeds; i++) {
		s = connect_to(t->seeds[i].host, t->seeds[i].port, NULL,
		               cinfo.tmo, err);
		if (s == NULL)
			continue;
		r = cmd(s, err, "SENTINEL get-master-addr-by-name %s",
		        t->master);
		if (r != NULL && r->type == REDIS_REPLY_ARRAY &&
		    r->elements == 2 &&
		    r->element[0]->type == REDIS_REPLY_STRING &&
		    r->element[1]->type == REDIS_REPLY_STRING) {
			snprintf(host, 256, "%s", r->element[0]->str);
			*port = atoi(r->element[1]->str);
			freeReplyObject(r);
			redisFree(s);
			return 0;
		}
		freeReplyObject(r);
		redisFree(s);
	}
	return fail(err, "no sentinel knows master %s", t->master);
}

/* The first seed of Cluster <t> that answers (a MOVED leads from it to
 * the key's node): any seed may be down, as for the workers. */
static redisContext *
cluster_seed(const struct policy *p, const struct store_topo *t, char *err)
{
	redisContext *c;

	fail(err, "redis: no cluster seed"); /* each try says its own */
	if (p->redis_username != NULL)
		cinfo.user = p->redis_username;
	if (p->redis_password != NULL)
		cinfo.pass = p->redis_password;
	for (int i = 0; i < t->nseeds; i++) {
		c = connect_to(t->seeds[i].host, t->seeds[i].port, NULL,
		               cinfo.tmo, err);
		if (c != NULL && login(c, cinfo.user, cinfo.pass, 0, err) == 0)
			return c;
		redisFree(c);
	}
	return NULL;
}

redisContext *
keyop_connect(const struct policy *p, const char *url, int64_t tmo, char *err)
{
	static _Thread_local struct store_addr a;
	static _Thread_local struct store_topo t;
	char                                   host[256];
	int                                    port = 0, db = 0;
	const char                            *path = NULL;
	redisContext                          *c;

	url = url != NULL ? url : p->redis_url;
	memset(&t, 0, sizeof(t));
	cinfo.tmo = tmo;
	if (store_parse_topo_url(url, &t) == 0 && t.kind != STORE_TOPO_SINGLE) {
		cinfo.user = t.user;
		cinfo.pass = t.pass;
		if (t.kind == STORE_TOPO_SENTINEL) {
			if (sentinel_master(&t, host, &port, err) == -1)
				return NULL;
			db = t.db;
		} else {
			return cluster_seed(p, &t, err);
		}
	} else if (store_parse_url(url, &a) == 0) {
		snprintf(host, sizeof(host), "%s", a.host);
		port = a.port;
		path = a.path;
		db = a.db;
		cinfo.user = a.user;
		cinfo.pass = a.pass;
	} else {
		fail(err, "bad redis url");
		return NULL;
	}
	if (p->redis_username != NULL)
		cinfo.user = p->redis_username;
	if (p->redis_password != NULL)
		cinfo.pass = p->redis_password;
	if ((c = connect_to(host, port, path, tmo, err)) == NULL)
		return NULL;
	if (login(c, cinfo.user, cinfo.pass, db, err) == -1) {
		redisFree(c);
		return NULL;
	}
	return c;
}

/* A connection to the Cluster node <host> (<hlen> bytes) <port>, logged
 * in as keyop_connect()'s. NULL with <err>. */
static redisContext *
node_connect(const char *host, size_t hlen, int port, char *err)
{
	char          name[256];
	redisContext *n;

	if (hlen >= sizeof(name)) {
		fail(err, "redis: a redirect to a host name too long");
		return NULL;
	}
	memcpy(name, host, hlen);
	name[hlen] = '\0';
	n = connect_to(name, port, NULL, cinfo.tmo, err);
	if (n != NULL && login(n, cinfo.user, cinfo.pass, 0, err) == -1) {
		redisFree(n);
		return NULL;
	}
	return n;
}

/* Goes where a redirect of <kind> to <host> (<hlen> bytes) <port> points:
 * <*to> is where its command goes again. A MOVED makes that <*c>,
 * reconnected to the node named (the slot is that node's now). An ASK
 * makes it a new context on the node named with ASKING sent, which holds
 * for the next command only: the caller frees it after that command, and
 * <*c> stays on the slot's owner, which keeps the keys not moved yet.
 * Returns 1, or -1 with <err> when the node cannot be had. */
static int
go(redisContext **c, enum reply_redirect kind, const char *host, size_t hlen,
   int port, redisContext **to, char *err)
{
	redisReply *asking;

	assert(kind != REPLY_REDIRECT_NONE);
	if ((*to = node_connect(host, hlen, port, err)) == NULL)
		return -1;
	if (kind == REPLY_REDIRECT_MOVED) {
		redisFree(*c);
		*c = *to;
		return 1;
	}
	if ((asking = cmd(*to, err, "ASKING")) == NULL) {
		redisFree(*to);
		return -1;
	}
	freeReplyObject(asking);
	return 1;
}

/* The redirect <r> is, or REPLY_REDIRECT_NONE; its target in the rest. */
static enum reply_redirect
redirect_of(const redisReply *r, const char **host, size_t *hlen, int *port)
{
	if (r == NULL || r->type != REDIS_REPLY_ERROR)
		return REPLY_REDIRECT_NONE;
	return reply_redirect(r->str, host, hlen, port);
}

/* Follows <r> if it is a Cluster redirect (go()). Returns 1 when
 * followed, 0 when <r> is no redirect, -1 with <err> when the node cannot
 * be had. */
static int
follow(redisContext **c, const redisReply *r, redisContext **to, char *err)
{
	const char         *host;
	size_t              hlen;
	int                 port;
	enum reply_redirect kind = redirect_of(r, &host, &hlen, &port);

	if (kind == REPLY_REDIRECT_NONE)
		return 0;
	return go(c, kind, host, hlen, port, to, err);
}

int
keyop_follow_moved(redisContext **c, const redisReply *r, char *err)
{
	const char   *host;
	size_t        hlen;
	int           port;
	redisContext *to;

	return redirect_of(r, &host, &hlen, &port) == REPLY_REDIRECT_MOVED &&
	       go(c, REPLY_REDIRECT_MOVED, host, hlen, port, &to, err) == 1;
}

/* <argv> on <c>: its reply, or NULL with <err> when none came. */
static redisReply *
sent(redisContext *c, int argc, const char **argv, const size_t *lens,
     char *err)
{
	redisReply *r = redisCommandArgv(c, argc, argv, lens);

	if (r == NULL)
		fail(err, "redis: %s", c->errstr[0] ? c->errstr : "no reply");
	return r;
}

/* <argv> on <*c>, sent again where a Cluster's MOVED or ASK points,
 * KEYOP_MAX_REDIRECTS times at most (two nodes may send a key to each
 * other while its slot moves). Returns the last reply, an error included
 * (a redirect, once that many were followed), or NULL with <err>. */
static redisReply *
routed(redisContext **c, int argc, const char **argv, const size_t *lens,
       char *err)
{
	redisReply   *r = sent(*c, argc, argv, lens, err);
	redisContext *to;
	int           rc;

	for (int i = 0; r != NULL && i < KEYOP_MAX_REDIRECTS; i++) {
		if ((rc = follow(c, r, &to, err)) == 0)
			break;
		freeReplyObject(r);
		if (rc == -1)
			return NULL;
		r = sent(to, argc, argv, lens, err);
		if (to != *c)
			redisFree(to); /* an ASK's: that command only */
	}
	return r;
}

/* routed(), its error reply failing it (NULL with <err>). */
static redisReply *
argv_cmd(redisContext **c, int argc, const char **argv, const size_t *lens,
         char *err)
{
	redisReply *r = routed(c, argc, argv, lens, err);

	return r != NULL ? checked(*c, r, err) : NULL;
}

static redisReply *
key_cmd(redisContext **c, const char *verb, const struct check *ck, char *err)
{
	const char *argv[2] = { verb, ck->key };
	size_t      lens[2] = { strlen(verb), ck->keylen };

	return argv_cmd(c, 2, argv, lens, err);
}

/* The last bulk string of the RESP arguments <buf,len> ("$n\r\n...\r\n"
 * each): batch_encode()'s packed array. */
static const char *
last_bulk(const char *buf, size_t len, size_t *blen)
{
	const char *p = buf, *end = buf + len, *last = NULL;
	char       *num_end;
	size_t      n;

	while (p < end && *p == '$') {
		n = strtoul(p + 1, &num_end, 10);
		last = num_end + 2;
		*blen = n;
		p = last + n + 2;
	}
	assert(last != NULL && p == end);
	return last;
}

/* The decision script's PEEK of cost 1 on <ck>'s key, as a view: it
 * writes nothing (limiter.h). */
static int
peek(redisContext **c, const struct check *ck, struct lim_result *res,
     char *err)
{
	struct batch_enc   enc = { 0 };
	struct batch_buf   b = { 0 };
	struct batch_check v = { .key = ck->key,
		                 .keylen = ck->keylen,
		                 .member = "",
		                 .algo = ck->lim.algo,
		                 .op = LIM_OP_PEEK,
		                 .cost = 1 };
	struct results     rs;
	redisReply        *r;
	const char        *argv[6];
	size_t             lens[6];
	int                part = 1, rc = -1;

	lim_script_params(&ck->lim, v.p);
	v.p[3] = v.p[4] = 0; /* no penalty box: a PEEK that denies would
	                      * be an offence; block_state() reads it */
	batch_encode(&enc, &b, &v, 1, &part, 1);
	/* after the head room: "$1 1", the key, the packed array (RESP) */
	argv[0] = "EVAL";
	argv[1] = lua_ratelimit;
	argv[2] = "1";
	argv[3] = ck->key;
	lens[0] = 4;
	lens[1] = strlen(lua_ratelimit);
	lens[2] = 1;
	lens[3] = ck->keylen;
	argv[4] = last_bulk(b.buf + BATCH_HEAD, b.len, &lens[4]);
	/* read-only: a policy of another rate than the agents' must not
	 * rescale the key and write it back (limiter.h) */
	argv[5] = "view";
	lens[5] = 4;
	results_init(&rs);
	r = argv_cmd(c, 6, argv, lens, err);
	if (r != NULL && r->type == REDIS_REPLY_STRING &&
	    results_decode(&rs, r->str, r->len, 1) == 0) {
		results_get(&rs, 0, res);
		rc = 0;
	} else if (r != NULL) {
		fail(err, "redis: unexpected reply to the script");
	}
	freeReplyObject(r);
	results_free(&rs);
	free(b.buf);
	batch_enc_free(&enc);
	return rc;
}

/* The value of <ck>'s key as a JSON value, by its type. */
static int
raw_value(redisContext **c, const struct check *ck, struct keyop_state *st,
          char *err)
{
	const char *verb = strcmp(st->type, "string") == 0 ? "GET"
	                   : strcmp(st->type, "hash") == 0 ? "HGETALL"
	                   : strcmp(st->type, "zset") == 0 ? "ZCARD"
	                                                   : NULL;
	redisReply *r;

	if (verb == NULL) {
		jsonw_raw(&st->raw, "null", 4);
		return 0;
	}
	if ((r = key_cmd(c, verb, ck, err)) == NULL)
		return -1;
	if (r->type == REDIS_REPLY_STRING) {
		jsonw_str(&st->raw, r->str, r->len);
	} else if (r->type == REDIS_REPLY_INTEGER) {
		jsonw_open(&st->raw, '{');
		jsonw_kint(&st->raw, "members", r->integer);
		jsonw_close(&st->raw, '}');
	} else if (r->type == REDIS_REPLY_ARRAY) {
		jsonw_open(&st->raw, '{');
		for (size_t i = 0; i + 1 < r->elements; i += 2) {
			if (r->element[i]->type != REDIS_REPLY_STRING ||
			    r->element[i + 1]->type != REDIS_REPLY_STRING)
				continue; /* not a hash's: no text to show */
			jsonw_key(&st->raw, r->element[i]->str);
			jsonw_str(&st->raw, r->element[i + 1]->str,
			          r->element[i + 1]->len);
		}
		jsonw_close(&st->raw, '}');
	} else {
		jsonw_raw(&st->raw, "null", 4);
	}
	freeReplyObject(r);
	return 0;
}

/* <ck>'s block record name, "<key>!b" (limiter.h, penalty box). */
static size_t
block_key(const struct check *ck, char *out)
{
	memcpy(out, ck->key, ck->keylen);
	memcpy(out + ck->keylen, "!b", 3);
	return ck->keylen + 2;
}

/* Redis TIME in µs. */
static int
redis_now(redisContext **c, int64_t *now, char *err)
{
	const char *argv[1] = { "TIME" };
	size_t      lens[1] = { 4 };
	redisReply *r = argv_cmd(c, 1, argv, lens, err);

	if (r == NULL)
		return -1;
	if (reply_time_us(r, now) == -1) {
		freeReplyObject(r);
		return fail(err, "redis: unexpected reply to TIME");
	}
	freeReplyObject(r);
	return 0;
}

/* The penalty box of <ck> into <st> (rules with block: only): the record
 * the script keeps, and, while it blocks, the result as the script
 * answers it. */
static int
block_state(redisContext **c, const struct check *ck, struct keyop_state *st,
            char *err)
{
	char             bkey[POLICY_KEY_MAX + 3];
	const char      *argv[2] = { "GET", bkey };
	size_t           lens[2] = { 3, block_key(ck, bkey) };
	struct lim_block b = { 0 };
	redisReply      *r;
	int64_t          now = 0;

	if (ck->lim.block_us <= 0)
		return 0;
	st->has_block = 1;
	if (redis_now(c, &now, err) == -1 ||
	    (r = argv_cmd(c, 2, argv, lens, err)) == NULL)
		return -1;
	if (r->type == REDIS_REPLY_STRING)
		sscanf(r->str, "%" SCNd64 " %" SCNd64, &b.until_us,
		       &b.offences);
	freeReplyObject(r);
	argv[0] = "PTTL";
	lens[0] = 4;
	if ((r = argv_cmd(c, 2, argv, lens, err)) == NULL)
		return -1;
	st->block_forget_ms = r->type == REDIS_REPLY_INTEGER ? r->integer : -2;
	freeReplyObject(r);
	st->block_offences = b.offences;
	if (lim_block_held(&b, now, &st->res))
		st->block_left_us = b.until_us - now;
	return 0;
}

/* The override of <ck>'s key, if one is live, applied as the agents do
 * (ov_apply() on a one-entry table): st->ov_kind, <ck>'s limit replaced
 * for OV_LIMIT, <*deny> filled for OV_DENY. */
static int
override_state(redisContext **c, struct check *ck, struct keyop_state *st,
               struct lim_result *deny, char *err)
{
	char             field[POLICY_KEY_MAX + 3], *line;
	const char      *argv[3] = { "HGET", OV_HASH, field };
	size_t           lens[3] = { 4, strlen(OV_HASH), ck->keylen + 2 };
	struct check     probe = *ck;
	struct ov_table *t;
	redisReply      *r;
	int64_t          now;
	int              bad, n;

	memcpy(field, "o:", 2);
	memcpy(field + 2, ck->key, ck->keylen);
	if ((r = argv_cmd(c, 3, argv, lens, err)) == NULL)
		return -1;
	if (r->type != REDIS_REPLY_STRING || r->len >= OV_VALUE_MAX) {
		freeReplyObject(r);
		return 0;
	}
	line = xmalloc(ck->keylen + r->len + 32);
	n = sprintf(line, "%zu ", ck->keylen);
	memcpy(line + n, ck->key, ck->keylen);
	n += (int)ck->keylen;
	line[n++] = ' ';
	memcpy(line + n, r->str, r->len);
	n += (int)r->len;
	line[n++] = '\n';
	freeReplyObject(r);
	t = ov_table_parse(line, (size_t)n, &bad);
	free(line);
	if (redis_now(c, &now, err) == -1) {
		ov_table_free(t);
		return -1;
	}
	probe.op = LIM_OP_PEEK;
	st->ov_kind = (int)ov_apply(t, &probe, now, deny);
	ov_table_free(t);
	if (st->ov_kind == OV_LIMIT)
		ck->lim = probe.lim;
	return 0;
}

int
keyop_show(redisContext **c, struct check *ck, int overrides,
           struct keyop_state *st, char *err)
{
	struct lim_result deny;
	redisReply       *r;

	memset(st, 0, sizeof(*st));
	if ((overrides && override_state(c, ck, st, &deny, err) == -1) ||
	    peek(c, ck, &st->res, err) == -1 ||
	    block_state(c, ck, st, err) == -1)
		return -1;
	if (st->ov_kind == OV_DENY)
		st->res = deny;
	/* PEEK says what is left after one more request: the key has one
	 * more than that now, when one more would pass */
	st->res.remaining = st->res.allowed == 1 ? st->res.remaining + 1 : 0;
	/* an allow passes every request and charges nothing: the key keeps
	 * what it holds (remaining, reset), and holds it again at the
	 * override's end; no full budget is made up */
	if (st->ov_kind == OV_ALLOW) {
		st->res.allowed = 1;
		st->res.retry_after_us = 0;
	}
	if ((r = key_cmd(c, "TYPE", ck, err)) == NULL)
		return -1;
	snprintf(st->type, sizeof(st->type), "%s",
	         r->type == REDIS_REPLY_STATUS ? r->str : "?");
	freeReplyObject(r);
	if ((r = key_cmd(c, "PTTL", ck, err)) == NULL)
		return -1;
	st->pttl_ms = r->type == REDIS_REPLY_INTEGER ? r->integer : -2;
	freeReplyObject(r);
	return raw_value(c, ck, st, err);
}

/* Tells the pool a key was reset: every agent drops its near-cached
 * blocks when it sees the counter move (ovcache.c). */
static int
bump_resets(redisContext **c, char *err)
{
	const char *argv[4] = { "HINCRBY", OV_HASH, OV_RESETS, "1" };
	size_t      lens[4] = { 7, strlen(OV_HASH), strlen(OV_RESETS), 1 };
	redisReply *r = argv_cmd(c, 4, argv, lens, err);

	if (r == NULL)
		return -1;
	freeReplyObject(r);
	return 0;
}

/* DEL of <argv> (the verb, then the keys) on <*c>, how many existed added
 * to <*deleted>. While their slot migrates, a node holding some of the
 * keys and not all answers TRYAGAIN: no one command reaches both nodes,
 * so they go one by one then (each redirected on its own). */
static int
del_keys(redisContext **c, int argc, const char **argv, const size_t *lens,
         long long *deleted, char *err)
{
	redisReply *r = routed(c, argc, argv, lens, err);

	if (r != NULL && argc > 2 && r->type == REDIS_REPLY_ERROR &&
	    strncmp(r->str, "TRYAGAIN", 8) == 0) {
		freeReplyObject(r);
		for (int i = 1; i < argc; i++) {
			const char *one[2] = { argv[0], argv[i] };
			size_t      onelens[2] = { lens[0], lens[i] };

			if (del_keys(c, 2, one, onelens, deleted, err) == -1)
				return -1;
		}
		return 0;
	}
	if (r == NULL || (r = checked(*c, r, err)) == NULL)
		return -1;
	if (r->type == REDIS_REPLY_INTEGER)
		*deleted += r->integer;
	freeReplyObject(r);
	return 0;
}

int
keyop_reset(redisContext **c, const struct check *ck, long long *deleted,
            char *err)
{
	char        bkey[POLICY_KEY_MAX + 3];
	const char *argv[3] = { "DEL", ck->key, bkey };
	size_t      lens[3] = { 3, ck->keylen, block_key(ck, bkey) };

	*deleted = 0;
	if (del_keys(c, 3, argv, lens, deleted, err) == -1)
		return -1;
	return bump_resets(c, err);
}

/* ---- output ------------------------------------------------------------- */

static const char *
ov_kind_name(int k)
{
	return k == OV_LIMIT ? "limit" : k == OV_ALLOW ? "allow" : "deny";
}

static int64_t
ms_up(int64_t us)
{
	return (us + 999) / 1000;
}

void
keyop_json(struct jsonw *w, const struct check *ck,
           const struct keyop_state *st)
{
	jsonw_open(w, '{');
	jsonw_kstr(w, "rule", ck->rule->name);
	jsonw_key(w, "key");
	jsonw_str(w, ck->key, ck->keylen);
	jsonw_kstr(w, "algorithm", lim_algo_name(ck->lim.algo));
	jsonw_kint(w, "limit", lim_quota(&ck->lim));
	jsonw_kint(w, "window_s", lim_window_s(&ck->lim));
	jsonw_kint(w, "remaining", st->res.remaining);
	jsonw_key(w, "allowed");
	jsonw_raw(w, st->res.allowed == 1 ? "true" : "false",
	          st->res.allowed == 1 ? 4 : 5);
	jsonw_kint(w, "reset_ms", ms_up(st->res.full_us));
	jsonw_kint(w, "retry_after_ms", ms_up(st->res.retry_after_us));
	jsonw_key(w, "override");
	if (st->ov_kind == OV_NONE)
		jsonw_raw(w, "null", 4);
	else
		jsonw_str(w, ov_kind_name(st->ov_kind),
		          strlen(ov_kind_name(st->ov_kind)));
	jsonw_key(w, "block");
	if (st->has_block) {
		jsonw_open(w, '{');
		jsonw_key(w, "blocked");
		jsonw_raw(w, st->block_left_us > 0 ? "true" : "false",
		          st->block_left_us > 0 ? 4 : 5);
		jsonw_kint(w, "left_ms", ms_up(st->block_left_us));
		jsonw_kint(w, "offences", st->block_offences);
		jsonw_kint(w, "forget_ms", st->block_forget_ms);
		jsonw_close(w, '}');
	} else {
		jsonw_raw(w, "null", 4);
	}
	jsonw_key(w, "raw");
	jsonw_open(w, '{');
	jsonw_kstr(w, "type", st->type);
	jsonw_kint(w, "pttl_ms", st->pttl_ms);
	jsonw_key(w, "value");
	jsonw_raw(w, st->raw.buf ? st->raw.buf : "null",
	          st->raw.buf ? st->raw.len : 4);
	jsonw_close(w, '}');
	jsonw_close(w, '}');
}

void
keyop_text(FILE *f, const struct check *ck, const struct keyop_state *st)
{
	fprintf(f, "rule:        %s\n", ck->rule->name);
	fprintf(f, "key:         %.*s\n", (int)ck->keylen, ck->key);
	fprintf(f, "algorithm:   %s\n", lim_algo_name(ck->lim.algo));
	fprintf(f, "limit:       %lld per %llds\n",
	        (long long)lim_quota(&ck->lim),
	        (long long)lim_window_s(&ck->lim));
	fprintf(f, "remaining:   %lld%s\n", (long long)st->res.remaining,
	        st->ov_kind == OV_ALLOW
	                ? " (the allow override passes every request; the key "
	                  "holds this again when it ends)"
	        : st->res.allowed == 1 ? ""
	                               : " (the next request is denied)");
	fprintf(f, "reset:       %.3fs\n", ms_up(st->res.full_us) / 1000.0);
	fprintf(f, "retry_after: %.3fs\n",
	        ms_up(st->res.retry_after_us) / 1000.0);
	if (st->ov_kind != OV_NONE)
		fprintf(f, "override:    %s (spoa-ratelimit override list)\n",
		        ov_kind_name(st->ov_kind));
	if (st->has_block && st->block_left_us > 0)
		fprintf(f,
		        "block:       blocked for %.3fs more (offence %lld; "
		        "forgotten in %.3fs)\n",
		        ms_up(st->block_left_us) / 1000.0, st->block_offences,
		        st->block_forget_ms / 1000.0);
	else if (st->has_block && st->block_offences > 0)
		fprintf(f,
		        "block:       not blocked (offences %lld, forgotten in "
		        "%.3fs)\n",
		        st->block_offences, st->block_forget_ms / 1000.0);
	else if (st->has_block)
		fprintf(f, "block:       not blocked\n");
	fprintf(f, "raw:         type=%s pttl_ms=%lld value=%s\n", st->type,
	        st->pttl_ms, st->raw.buf ? st->raw.buf : "null");
}
