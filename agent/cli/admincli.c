/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The operator's subcommands (see admincli.h): argument parsing, the
 * policy load, and printing. The key is keyop.c's, the top list topk.c's.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admincli.h"
#include "adminreq.h"
#include "keyop.h"
#include "log.h"
#include "policy.h"
#include "toppool.h"
#include "util.h"

#define CLI_TIMEOUT_US 2000000
#define CLI_DEF_POLICY "/etc/spoa-ratelimit/policy.yaml"

struct cli {
	const char *path, *url, *verb;
	int         json, n;
};

int
admincli_is(const char *cmd)
{
	return strcmp(cmd, "key") == 0 || strcmp(cmd, "top") == 0;
}

static int
usage(const char *why)
{
	fprintf(stderr,
	        "spoa-ratelimit: %s\n"
	        "Usage: spoa-ratelimit key show|reset [-f POLICY] [-r URL] "
	        "[--json] RULE ARG=VALUE... | RAWKEY\n"
	        "       spoa-ratelimit top [-f POLICY] [-r URL] [--json] "
	        "[-n N] RULE\n",
	        why);
	return 2;
}

static int
parse_opts(int argc, char **argv, struct cli *o)
{
	static const struct option lo[] = {
		{ "policy", required_argument, NULL, 'f' },
		{ "redis", required_argument, NULL, 'r' },
		{ "json", no_argument, NULL, 'j' },
		{ "count", required_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	o->path = CLI_DEF_POLICY;
	o->n = 20;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "+f:r:jn:", lo, NULL)) != -1) {
		switch (ch) {
		case 'f':
			o->path = optarg;
			break;
		case 'r':
			o->url = optarg;
			break;
		case 'j':
			o->json = 1;
			break;
		case 'n': { /* whole: "5x" is no count */
			char *end;
			long  n = strtol(optarg, &end, 10);

			if (end == optarg || *end != '\0' || n < 1 || n > 1000)
				return -1;
			o->n = (int)n;
			break;
		}
		default:
			return -1;
		}
	}
	return 0;
}

static struct policy *
load(const char *path)
{
	char          *err = NULL;
	struct policy *p = policy_load(path, &err);

	if (p == NULL)
		fprintf(stderr, "%s", err ? err : "policy: cannot load\n");
	free(err);
	return p;
}

/* The check of "RULE ARG=VALUE..." or "RAWKEY" in <argv>. */
static int
cli_check(const struct policy *p, int argc, char **argv, struct check *ck,
          char *err)
{
	const char *names[SPOP_MAX_ARGS], *values[SPOP_MAX_ARGS];
	char       *eq;
	int         n = 0;

	if (argc == 1 && strncmp(argv[0], "rl:{", 4) == 0)
		return keyop_from_raw(p, argv[0], ck, err);
	for (int i = 1; i < argc; i++) {
		if ((eq = strchr(argv[i], '=')) == NULL || eq == argv[i] ||
		    n == SPOP_MAX_ARGS) {
			snprintf(err, KEYOP_ERR_MAX,
			         "want ARG=VALUE, got '%.64s'", argv[i]);
			return -1;
		}
		*eq = '\0';
		names[n] = argv[i];
		values[n++] = eq + 1;
	}
	return keyop_from_args(p, argv[0], names, values, n, ck, err);
}

static int
key_cmd(struct cli *o, struct policy *p, int argc, char **argv)
{
	static struct check ck;
	struct keyop_state  st;
	struct jsonw        w = { 0 };
	char                err[KEYOP_ERR_MAX];
	redisContext       *c;
	long long           n = 0;
	int                 reset = strcmp(o->verb, "reset") == 0, rc;

	if (argc < 1)
		return usage("key: which rule?");
	if (cli_check(p, argc, argv, &ck, err) == -1) {
		fprintf(stderr, "spoa-ratelimit: %s\n", err);
		return 2;
	}
	if ((c = keyop_connect(p, o->url, CLI_TIMEOUT_US, err)) == NULL) {
		fprintf(stderr, "spoa-ratelimit: %s\n", err);
		return 1;
	}
	rc = reset ? keyop_reset(&c, &ck, &n, err)
	           : keyop_show(&c, &ck, p->overrides, &st, err);
	redisFree(c);
	if (rc == -1) {
		fprintf(stderr, "spoa-ratelimit: %s\n", err);
		return 1;
	}
	if (reset && o->json) {
		jsonw_open(&w, '{');
		jsonw_kstr(&w, "rule", ck.rule->name);
		jsonw_key(&w, "key");
		jsonw_str(&w, ck.key, ck.keylen);
		jsonw_kint(&w, "deleted", n);
		jsonw_close(&w, '}');
	} else if (reset) {
		printf("%s %.*s: %s\n", ck.rule->name, (int)ck.keylen, ck.key,
		       n ? "reset" : "no state (nothing to reset)");
	} else if (o->json) {
		keyop_json(&w, &ck, &st);
	} else {
		keyop_text(stdout, &ck, &st);
	}
	if (w.buf != NULL)
		printf("%s\n", w.buf);
	free(w.buf);
	if (!reset)
		free(st.raw.buf);
	return 0;
}

static int
topcli(struct cli *o, struct policy *p, int argc, char **argv)
{
	struct topk_merge m = { 0 };
	struct jsonw      w = { 0 };
	char              err[KEYOP_ERR_MAX];
	redisContext     *c;
	int               agents, known = 0;

	if (argc != 1)
		return usage("top: which rule?");
	for (int i = 0; i < p->nrules; i++)
		known |= strcmp(p->rules[i].name, argv[0]) == 0;
	if (!known) {
		fprintf(stderr, "spoa-ratelimit: unknown rule '%.64s'\n",
		        argv[0]);
		return 2;
	}
	if ((c = keyop_connect(p, o->url, CLI_TIMEOUT_US, err)) == NULL) {
		fprintf(stderr, "spoa-ratelimit: %s\n", err);
		return 1;
	}
	agents = toppool_read(&c, argv[0], util_wall_us() / 1000, &m);
	redisFree(c);
	if (agents < 0) {
		fprintf(stderr,
		        "spoa-ratelimit: redis: cannot read the top lists\n");
		return 1;
	}
	if (o->json) {
		toppool_json(&w, argv[0], &m, agents, o->n);
		printf("%s\n", w.buf);
		free(w.buf);
	} else {
		printf("rule %s: %lld denied in the last minute, %d agents\n",
		       argv[0], (long long)m.total, agents);
		for (int i = 0; i < m.n && i < o->n; i++) {
			/* client bytes: escaped as the logs do */
			char   k[4 * POLICY_KEY_MAX + 1];
			size_t off = 0;

			log_put_escaped(k, sizeof(k), &off, m.v[i].key,
			                (size_t)m.v[i].len);
			k[off] = '\0';
			printf("%10lld  %s\n", (long long)m.v[i].count, k);
		}
	}
	topk_merge_free(&m);
	return 0;
}

int
admincli_main(int argc, char **argv)
{
	struct cli     o = { 0 };
	struct policy *p;
	int            rc, top = strcmp(argv[1], "top") == 0;

	argc--;
	argv++; /* argv[0] is now the subcommand */
	if (!top) {
		if (argc < 2 ||
		    (strcmp(argv[1], "show") && strcmp(argv[1], "reset")))
			return usage("key: show or reset?");
		o.verb = argv[1];
		argc--;
		argv++;
	}
	log_level = LOG_ERROR;
	if (parse_opts(argc, argv, &o) == -1)
		return usage("bad option");
	if ((p = load(o.path)) == NULL)
		return 2;
	rc = top ? topcli(&o, p, argc - optind, argv + optind)
	         : key_cmd(&o, p, argc - optind, argv + optind);
	policy_unref(p);
	return rc;
}
