/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The override subcommand (ovcli.h): options, the key, one EVAL of
 * ov_script or one HGETALL, the answer on stdout.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis.h>

#include "limiter.h"
#include "ovcli.h"
#include "override.h"
#include "policy.h"
#include "store.h"

#define PROG "spoa-ratelimit override"

struct ovopts {
	const char       *policy, *url;
	struct ov_request q;
	int               kinds; /* --allow, --deny, a limit: given */
};

/* A usage error: one line saying what; the whole usage only when asked
 * for nothing. Returns 2. */
static int
usage(const char *what)
{
	fprintf(stderr, PROG ": %s\n", what);
	return 2;
}

/* The whole usage, to <out>; returns <rc>. */
static int
usage_full(FILE *out, int rc)
{
	fprintf(out,
	        "usage: " PROG " set -f POLICY RULE ARG=VALUE... "
	        "(--rate N/P [--burst N] | --limit N [--window D] | --allow | "
	        "--deny) [--ttl D]\n"
	        "       " PROG " del -f POLICY RULE ARG=VALUE...\n"
	        "       " PROG " list -f POLICY [RULE]\n"
	        "       (-r URL: another Redis than the policy's redis.url)\n");
	return rc;
}

/* A positive integer option. */
static int
pos_int(const char *s, int64_t *v)
{
	char     *end;
	long long n;

	n = strtoll(s, &end, 10);
	if (*s < '0' || *s > '9' || *end || n <= 0 || n > (1LL << 40))
		return -1;
	*v = n;
	return 0;
}

static int
parse_opt(int ch, struct ovopts *o)
{
	switch (ch) {
	case 'f':
		o->policy = optarg;
		return 0;
	case 'r':
		o->url = optarg;
		return 0;
	case 'R':
		o->q.rate = optarg;
		o->kinds |= 1;
		o->q.kind = OV_LIMIT;
		return 0;
	case 'L':
		if (pos_int(optarg, &o->q.limit) == -1)
			return usage("--limit: want a positive integer");
		o->kinds |= 1;
		o->q.kind = OV_LIMIT;
		return 0;
	case 'B':
		if (pos_int(optarg, &o->q.burst) == -1)
			return usage("--burst: want a positive integer");
		return 0;
	case 'W':
		o->q.window = optarg;
		return 0;
	case 'A':
		o->kinds |= 2;
		o->q.kind = OV_ALLOW;
		return 0;
	case 'D':
		o->kinds |= 4;
		o->q.kind = OV_DENY;
		return 0;
	case 'T':
		if (lim_parse_duration(optarg, &o->q.ttl_us) == -1 ||
		    o->q.ttl_us <= 0)
			return usage(
				"--ttl: want a positive duration (30s, 1h, 7d)");
		return 0;
	default:
		return usage("unknown option");
	}
}

static int
parse_opts(int argc, char **argv, struct ovopts *o)
{
	static const struct option longopts[] = {
		{ "policy", required_argument, NULL, 'f' },
		{ "redis", required_argument, NULL, 'r' },
		{ "rate", required_argument, NULL, 'R' },
		{ "burst", required_argument, NULL, 'B' },
		{ "limit", required_argument, NULL, 'L' },
		{ "window", required_argument, NULL, 'W' },
		{ "allow", no_argument, NULL, 'A' },
		{ "deny", no_argument, NULL, 'D' },
		{ "ttl", required_argument, NULL, 'T' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "f:r:", longopts, NULL)) != -1)
		if (parse_opt(ch, o) != 0)
			return 2;
	if (!o->policy)
		return usage("-f POLICY is required");
	return 0;
}

static redisContext *
connect_redis(const struct policy *p, const char *url)
{
	struct store_addr a;
	struct timeval    tv = { 2, 0 };
	redisContext     *c;
	redisReply       *r;
	const char       *user, *pass;

	if (store_parse_url(url, &a) == -1) {
		fprintf(stderr,
		        PROG ": %s: not a redis:// or unix: URL (Sentinel "
		             "and Cluster: pass -r with one data node)\n",
		        url);
		return NULL;
	}
	c = a.path[0] ? redisConnectUnixWithTimeout(a.path, tv)
	              : redisConnectWithTimeout(a.host, a.port, tv);
	if (!c || c->err) {
		fprintf(stderr, PROG ": %s: %s\n", url,
		        c ? c->errstr : "no memory");
		redisFree(c);
		return NULL;
	}
	redisSetTimeout(c, tv);
	/* the policy's credentials (password_env, ...) win, as for the
	 * agent and `key` (keyop_connect) */
	user = p->redis_username ? p->redis_username : a.user;
	pass = p->redis_password ? p->redis_password : a.pass;
	r = !pass[0]  ? NULL
	    : user[0] ? redisCommand(c, "AUTH %s %s", user, pass)
	              : redisCommand(c, "AUTH %s", pass);
	if (pass[0] && (!r || r->type == REDIS_REPLY_ERROR)) {
		fprintf(stderr, PROG ": %s: AUTH failed\n", url);
		freeReplyObject(r);
		redisFree(c);
		return NULL;
	}
	freeReplyObject(r);
	/* a refused SELECT (no such db, an ACL) must not leave the change
	 * to db 0, which no agent of this URL reads */
	r = a.db ? redisCommand(c, "SELECT %d", a.db) : NULL;
	if (a.db && (!r || r->type == REDIS_REPLY_ERROR)) {
		fprintf(stderr, PROG ": %s: SELECT %d failed: %s\n", url, a.db,
		        r ? r->str : c->errstr);
		freeReplyObject(r);
		redisFree(c);
		return NULL;
	}
	freeReplyObject(r);
	return c;
}

/* One EVAL of ov_script; its integer reply, or -1 (reported). */
static long long
eval(redisContext *c, const char *op, const char *key, size_t keylen,
     const char *val, int64_t ttl_us)
{
	char        ttl[24];
	redisReply *r;
	long long   n = -1;

	snprintf(ttl, sizeof(ttl), "%" PRId64, ttl_us);
	r = redisCommand(c, "EVAL %s 1 %s %s %b %s %s", ov_script, OV_HASH, op,
	                 key, keylen, val ? val : "", ttl);
	if (!r)
		fprintf(stderr, PROG ": redis: %s\n", c->errstr);
	else if (r->type != REDIS_REPLY_INTEGER)
		fprintf(stderr, PROG ": redis: %s\n",
		        r->type == REDIS_REPLY_ERROR ? r->str
		                                     : "unexpected reply");
	else
		n = r->integer;
	freeReplyObject(r);
	return n;
}

/* Prints one override: key, kind, its limit, and the time left. */
static void
print_one(const char *key, size_t keylen, const char *val, size_t len,
          int64_t now_us)
{
	struct ov_value v;

	printf("%.*s ", (int)keylen, key);
	if (ov_parse(val, len, &v) == -1) {
		printf("unreadable \"%.*s\"\n", (int)len, val);
		return;
	}
	if (v.kind == OV_LIMIT)
		printf("limit rate=%" PRId64 " period_us=%" PRId64
		       " burst=%" PRId64,
		       v.rate, v.period_us, v.burst);
	else
		printf("%s", v.kind == OV_ALLOW ? "allow" : "deny");
	if (v.expires_us == 0)
		printf(" expires=never\n");
	else if (v.expires_us <= now_us)
		printf(" expires=expired\n");
	else
		printf(" expires_in=%" PRId64 "s\n",
		       (v.expires_us - now_us + 999999) / 1000000);
}

static int
list(redisContext *c, const char *rule)
{
	char           prefix[POLICY_NAME_MAX + 8];
	redisReply    *r = redisCommand(c, "HGETALL %s", OV_HASH);
	struct timeval tv;
	size_t         plen;

	if (!r || r->type != REDIS_REPLY_ARRAY) {
		fprintf(stderr, PROG ": redis: %s\n",
		        r ? "unexpected reply" : c->errstr);
		freeReplyObject(r);
		return 1;
	}
	plen = (size_t)snprintf(prefix, sizeof(prefix),
	                        "o:rl:{%s:", rule ? rule : "");
	gettimeofday(&tv, NULL);
	for (size_t i = 0; i + 1 < r->elements; i += 2) {
		redisReply *f = r->element[i], *v = r->element[i + 1];

		if (f->len < 2 || memcmp(f->str, prefix, rule ? plen : 2) != 0)
			continue;
		print_one(f->str + 2, f->len - 2, v->str, v->len,
		          (int64_t)tv.tv_sec * 1000000 + tv.tv_usec);
	}
	freeReplyObject(r);
	return 0;
}

/* set / del of the key of RULE ARG=VALUE... (<argv> from the rule on). */
static int
change(redisContext *c, const struct policy *p, const struct ovopts *o, int set,
       int argc, char **argv)
{
	char               key[POLICY_KEY_MAX + 1], err[256], val[OV_VALUE_MAX];
	const struct rule *r;
	const char        *why;
	struct ov_value    v;
	size_t             keylen;
	long long          n;

	if (argc < 1)
		return usage("RULE is required");
	r = ov_rule_key(p, argv[0], (const char *const *)(argv + 1), argc - 1,
	                key, &keylen, err, sizeof(err));
	if (!r)
		return usage(err);
	if (set) {
		if (o->kinds != 1 && o->kinds != 2 && o->kinds != 4)
			return usage(
				"say one of --rate/--limit, --allow, --deny");
		if (ov_make(r, &o->q, &v, &why) == -1)
			return usage(why);
		ov_format(&v, val, sizeof(val));
	} else if (o->kinds || o->q.ttl_us || o->q.burst || o->q.window) {
		return usage("del takes no limit, --burst, --window, --allow, "
		             "--deny or --ttl");
	}
	if (!c)
		return 1;
	n = eval(c, set ? "set" : "del", key, keylen, set ? val : NULL,
	         o->q.ttl_us);
	if (n < 0)
		return 1;
	if (!set && n == 0) {
		fprintf(stderr, PROG ": no override for %s\n", key);
		return 1;
	}
	printf("%s %s%s%s", set ? "set" : "deleted", key, set ? " " : "",
	       set ? val : "");
	if (set && o->q.ttl_us > 0) /* the script put Redis' now + ttl */
		printf(" ttl_s=%" PRId64, (o->q.ttl_us + 999999) / 1000000);
	printf("\n");
	return 0;
}

int
ovcli_main(int argc, char **argv)
{
	struct ovopts  o = { 0 };
	struct policy *p;
	redisContext  *c;
	char          *err = NULL, *warn = NULL;
	const char    *cmd;
	int            rc;

	if (argc < 2)
		return usage_full(stderr, 2);
	cmd = argv[1];
	if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h"))
		return usage_full(stdout, 0);
	if (strcmp(cmd, "set") && strcmp(cmd, "del") && strcmp(cmd, "list"))
		return usage("say set, list or del");
	if (parse_opts(argc - 1, argv + 1, &o) != 0)
		return 2;
	if (!(p = policy_load_with_warnings(o.policy, &err, &warn))) {
		fprintf(stderr, "%s", err ? err : "policy: cannot load\n");
		free(err);
		free(warn);
		return 2;
	}
	free(warn);
	c = connect_redis(p, o.url ? o.url : p->redis_url);
	argc -= optind + 1;
	argv += optind + 1;
	if (strcmp(cmd, "list") == 0)
		rc = argc > 1 ? usage("list takes at most a RULE")
		     : !c     ? 1
		              : list(c, argc ? argv[0] : NULL);
	else
		rc = change(c, p, &o, strcmp(cmd, "set") == 0, argc, argv);
	if (c)
		redisFree(c);
	policy_unref(p);
	return rc;
}
