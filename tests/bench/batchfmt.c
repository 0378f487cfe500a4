/* SPDX-License-Identifier: Apache-2.0 */
/*
 * batchfmt: the script's one batch format (msgpack, agent/store/batch.h), with
 * its numbers as msgpack integers against the same numbers as decimal
 * strings (issue 6 measured msgpack against plain ARGV, which the script
 * no longer takes). Side by side on one Redis, the same batches of GCRA
 * decisions go to agent/store/lua/ratelimit.lua as
 *   strings: one msgpack array of decimal strings (nreq nrule rule...
 *            (1 code)...), the shape the naive baseline sends (run.sh:
 *            redis-benchmark cannot send a NUL byte);
 *   msgpack: the same numbers as msgpack integers, what the agent sends
 *            (batch.c).
 * Prints, per format and round, Redis CPU per decision (INFO cpu deltas)
 * and this client's CPU per decision to encode the calls, then the
 * medians. Both formats' answers are compared first.
 *
 *   batchfmt -s agent/store/lua/ratelimit.lua [-p PORT] [-n PER_CALL]
 *            [-c CALLS] [-r ROUNDS] [-k TENANTS]
 *
 * Loopback only (127.0.0.1:PORT, default 6379); FLUSHALLs that Redis.
 * Not part of the agent: a measurement, kept so anyone can rerun it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <msgpack.h>

#include "results.h"

#define MAX_PER_CALL 512
#define PIPE         20

/* one GCRA rule: algo 0, emission interval 1 ms, tolerance 1 s, 0, no
 * reservation lease (LIM_SCRIPT_RULE fields) */
static const long long rule[5] = { 0, 1000, 1000000, 0, 0 };
#define CODE 16 /* rule 1, op CHECK, no shadow, cost 1 */

struct call {
	int         argc;
	const char *argv[3 + 2 * MAX_PER_CALL + 8];
	size_t      len[3 + 2 * MAX_PER_CALL + 8];
	char        keys[MAX_PER_CALL][32];
	char        nums[2 * MAX_PER_CALL + 8][24];
};

static double
cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static char *
slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *s;
	long  n;

	if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0) {
		perror(path);
		exit(1);
	}
	rewind(f);
	s = malloc((size_t)n + 1);
	if (s == NULL || fread(s, 1, (size_t)n, f) != (size_t)n)
		exit(1);
	s[n] = '\0';
	fclose(f);
	return s;
}

static redisReply *
cmd(redisContext *c, const char *fmt, const char *arg)
{
	redisReply *r = redisCommand(c, fmt, arg);

	if (r == NULL || r->type == REDIS_REPLY_ERROR) {
		fprintf(stderr, "batchfmt: %s: %s\n", fmt,
		        r ? r->str : c->errstr);
		exit(1);
	}
	return r;
}

static double
redis_cpu(redisContext *c)
{
	redisReply *r = cmd(c, "INFO %s", "cpu");
	double      sys = 0, user = 0;
	char       *p;

	if ((p = strstr(r->str, "used_cpu_sys:")) != NULL)
		sys = atof(p + 13);
	if ((p = strstr(r->str, "used_cpu_user:")) != NULL)
		user = atof(p + 14);
	freeReplyObject(r);
	return sys + user;
}

static void
put(struct call *k, const char *s, size_t len)
{
	k->argv[k->argc] = s;
	k->len[k->argc++] = len;
}

static void
put_num(struct call *k, int *ni, long long v)
{
	int n = snprintf(k->nums[*ni], sizeof(k->nums[0]), "%lld", v);

	put(k, k->nums[(*ni)++], (size_t)n);
}

/* EVALSHA <sha> N key... then the numbers packed, as integers or as
 * decimal strings. */
static void
build(struct call *k, const char *sha, int per, int tenants, int packed,
      msgpack_sbuffer *sb)
{
	int ni = 0;

	k->argc = 0;
	put(k, "EVALSHA", 7);
	put(k, sha, 40);
	put_num(k, &ni, per);
	for (int i = 0; i < per; i++)
		put(k, k->keys[i],
		    (size_t)snprintf(k->keys[i], sizeof(k->keys[0]),
		                     "rl:{tenant:t%d}", rand() % tenants));
	if (packed) {
		msgpack_packer pk;

		msgpack_sbuffer_clear(sb);
		msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
		msgpack_pack_array(&pk, 7 + 2 * (size_t)per);
		msgpack_pack_int(&pk, per);
		msgpack_pack_int(&pk, 1);
		for (int f = 0; f < 5; f++)
			msgpack_pack_long_long(&pk, rule[f]);
		for (int i = 0; i < per; i++) {
			msgpack_pack_int(&pk, 1);
			msgpack_pack_int(&pk, CODE);
		}
		put(k, sb->data, sb->size);
		return;
	}
	{
		msgpack_packer pk;
		char           num[24];
		long long      v[7] = { per,     1,       rule[0], rule[1],
			                rule[2], rule[3], rule[4] };

		msgpack_sbuffer_clear(sb);
		msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
		msgpack_pack_array(&pk, 7 + 2 * (size_t)per);
		for (int f = 0; f < 7 + 2 * per; f++) {
			int n = snprintf(num, sizeof(num), "%lld",
			                 f < 7              ? v[f]
			                 : (f - 7) % 2 == 0 ? 1LL
			                                    : (long long)CODE);

			msgpack_pack_str(&pk, (size_t)n);
			msgpack_pack_str_body(&pk, num, (size_t)n);
		}
		put(k, sb->data, sb->size);
	}
	(void)ni;
}

/* <calls> calls of <per> decisions, PIPE at a time; returns the Redis and
 * the encoding CPU per decision, in µs. */
static void
run(redisContext *c, const char *sha, int packed, int per, int calls,
    int tenants, double *redis_us, double *enc_us)
{
	static struct call k;
	msgpack_sbuffer    sb;
	double             r0, enc = 0, t;
	redisReply        *r;

	msgpack_sbuffer_init(&sb);
	freeReplyObject(cmd(c, "FLUSHALL%s", ""));
	r0 = redis_cpu(c);
	for (int done = 0; done < calls;) {
		int n = calls - done < PIPE ? calls - done : PIPE;

		for (int j = 0; j < n; j++) {
			t = cpu_now();
			build(&k, sha, per, tenants, packed, &sb);
			redisAppendCommandArgv(c, k.argc, k.argv, k.len);
			enc += cpu_now() - t;
		}
		for (int j = 0; j < n; j++) {
			if (redisGetReply(c, (void **)&r) != REDIS_OK ||
			    r->type != REDIS_REPLY_STRING) {
				fprintf(stderr, "batchfmt: bad reply\n");
				exit(1);
			}
			freeReplyObject(r);
		}
		done += n;
	}
	*redis_us = (redis_cpu(c) - r0) * 1e6 / ((double)calls * per);
	*enc_us = enc * 1e6 / ((double)calls * per);
	msgpack_sbuffer_destroy(&sb);
}

/* Both formats get the same answers to one fresh batch. */
static void
same_answers(redisContext *c, const char *sha, int per)
{
	static struct call k;
	msgpack_sbuffer    sb;
	long long          got[2][2 * MAX_PER_CALL];
	struct results     rs;
	redisReply        *r;

	results_init(&rs);
	msgpack_sbuffer_init(&sb);
	for (int f = 0; f < 2; f++) {
		freeReplyObject(cmd(c, "FLUSHALL%s", ""));
		srand(7);
		build(&k, sha, per, per * 1000, f, &sb);
		r = redisCommandArgv(c, k.argc, k.argv, k.len);
		if (r == NULL || r->type != REDIS_REPLY_STRING ||
		    results_decode(&rs, r->str, r->len, (size_t)per) == -1) {
			fprintf(stderr, "batchfmt: %s: %s\n",
			        f ? "msgpack" : "argv",
			        r && r->type == REDIS_REPLY_ERROR
			                ? r->str
			                : "bad reply");
			exit(1);
		}
		for (int i = 0; i < per; i++) {
			struct lim_result res;

			results_get(&rs, (size_t)i, &res);
			got[f][2 * i] = res.allowed;
			got[f][2 * i + 1] = res.remaining;
		}
		freeReplyObject(r);
	}
	msgpack_sbuffer_destroy(&sb);
	results_free(&rs);
	/* retry/reset values hold the call's own clock: compare allowed and
	 * remaining, the first two of each five */
	for (int i = 0; i < per; i++)
		if (got[0][2 * i] != got[1][2 * i] ||
		    got[0][2 * i + 1] != got[1][2 * i + 1]) {
			fprintf(stderr, "batchfmt: the answers differ at %d\n",
			        i);
			exit(1);
		}
}

static int
cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int
main(int argc, char **argv)
{
	const char *script = NULL, *name[2] = { "strings", "msgpack" };
	int port = 6379, per = 48, calls = 2000, rounds = 3, tenants = 10000, o;
	double        red[2][16], enc[2][16];
	char          sha[41], *src;
	redisContext *c;

	while ((o = getopt(argc, argv, "s:p:n:c:r:k:")) != -1) {
		switch (o) {
		case 's':
			script = optarg;
			break;
		case 'p':
			port = atoi(optarg);
			break;
		case 'n':
			per = atoi(optarg);
			break;
		case 'c':
			calls = atoi(optarg);
			break;
		case 'r':
			rounds = atoi(optarg);
			break;
		case 'k':
			tenants = atoi(optarg);
			break;
		default:
			return 2;
		}
	}
	if (script == NULL || per < 1 || per > MAX_PER_CALL || rounds < 1 ||
	    rounds > 16 || calls < 1 || tenants < 1) {
		fprintf(stderr,
		        "usage: batchfmt -s ratelimit.lua [-p PORT] "
		        "[-n 1..%d] [-c CALLS] [-r 1..16] [-k TENANTS]\n",
		        MAX_PER_CALL);
		return 2;
	}
	c = redisConnect("127.0.0.1", port);
	if (c == NULL || c->err) {
		fprintf(stderr, "batchfmt: connect: %s\n",
		        c ? c->errstr : "oom");
		return 1;
	}
	src = slurp(script);
	{
		redisReply *r = cmd(c, "SCRIPT LOAD %s", src);

		snprintf(sha, sizeof(sha), "%s", r->str);
		freeReplyObject(r);
	}
	same_answers(c, sha, per);
	for (int i = 0; i < rounds; i++)
		for (int f = 0; f < 2; f++) {
			int g = i % 2 ? 1 - f : f; /* alternate the order */

			run(c, sha, g, per, calls, tenants, &red[g][i],
			    &enc[g][i]);
			printf("round %d %-7s redis_us_per_decision=%.3f "
			       "encode_us_per_decision=%.3f\n",
			       i + 1, name[g], red[g][i], enc[g][i]);
		}
	for (int f = 0; f < 2; f++) {
		qsort(red[f], (size_t)rounds, sizeof(double), cmp);
		qsort(enc[f], (size_t)rounds, sizeof(double), cmp);
		printf("median %-7s redis_us_per_decision=%.3f "
		       "encode_us_per_decision=%.3f (%d decisions per call)\n",
		       name[f], red[f][rounds / 2], enc[f][rounds / 2], per);
	}
	redisFree(c);
	free(src);
	return 0;
}
