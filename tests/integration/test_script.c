/* SPDX-License-Identifier: Apache-2.0 */
/*
 * agent/store/lua/ratelimit.lua against its C twins on a real redis-server
 * (127.0.0.1:$REDIS_PORT, started by script.sh), through hiredis' sync API.
 *
 * The script takes its time from Redis TIME, which the test cannot set, so
 * each step reads TIME just before and just after the call: the reply must
 * equal the C twin's exactly at one µs of that span, from a twin state
 * that gave every reply before it (cands_step), at every step. A run with
 * a call stalled too long to search is recorded again (compare_from).
 * Long periods (an hour or more) pin the decisions; the time-passing
 * tests use 100 ms to 1 s periods with waits far from any edge.
 * Window tests first wait out a boundary that is too close.
 *
 * Also: a denied check vetoes its request's other checks, a shadow check
 * does not, several requests in one call, every written key has a TTL,
 * and 8 processes hammering one key are allowed exactly the limit.
 *
 * Every call sends its ARGV packed into one msgpack array, the script's
 * one input format (batch.h). With SCRIPT_FCALL=1 every call is an FCALL
 * of the script's FUNCTION library (scriptlib.h), as the agent's calls are
 * on Redis 7: the library keeps its tables from call to call, so a call
 * that leaked state into the next would show here. script.sh runs the
 * suite both ways.
 */
#include <criterion/criterion.h>
#include <hiredis.h>
#include <inttypes.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "batch.h"
#include "lim_mk.h"
#include "limiter.h"
#include "local.h"
#include "results.h"
#include "scriptlib.h"
#include "store.h"

#define S            LIM_USEC_PER_SEC
#define HOUR         (3600 * S)
#define ARRAY_LEN(a) ((int)(sizeof(a) / sizeof((a)[0])))

static char sha[64];

static int
env_is(const char *name)
{
	const char *v = getenv(name);

	return v != NULL && strcmp(v, "1") == 0;
}

static redisContext *
connect_redis(void)
{
	const char   *port = getenv("REDIS_PORT");
	redisContext *c;

	cr_assert_not_null(port, "REDIS_PORT is not set");
	c = redisConnect("127.0.0.1", atoi(port));
	cr_assert(c != NULL && !c->err, "connect: %s", c ? c->errstr : "oom");
	return c;
}

static redisContext *
setup(void)
{
	redisContext *c = connect_redis();
	redisReply   *r = redisCommand(c, "SCRIPT LOAD %s", lua_ratelimit);

	cr_assert(r && r->type == REDIS_REPLY_STRING, "SCRIPT LOAD: %s",
	          r && r->type == REDIS_REPLY_ERROR ? r->str : "?");
	snprintf(sha, sizeof(sha), "%s", r->str);
	freeReplyObject(r);
	if (env_is("SCRIPT_FCALL")) {
		r = redisCommand(c, "FUNCTION LOAD REPLACE %s",
		                 scriptlib_text());
		cr_assert(r && r->type == REDIS_REPLY_STRING &&
		                  strcmp(r->str, scriptlib_name()) == 0,
		          "FUNCTION LOAD: %s",
		          r && r->type == REDIS_REPLY_ERROR ? r->str : "?");
		freeReplyObject(r);
	}
	return c;
}

static int64_t
redis_time(redisContext *c)
{
	redisReply *r = redisCommand(c, "TIME");
	int64_t     t;

	cr_assert(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
	t = atoll(r->element[0]->str) * S + atoll(r->element[1]->str);
	freeReplyObject(r);
	return t;
}

/* ---- building a script call --------------------------------------------- */

struct chk {
	const struct lim_params *p;
	const char              *key;
	int                      op;
	int64_t                  cost;
	int                      flags;
	const char              *member;
};

#define MAXARG 512

struct call {
	int     argc;
	char   *argv[MAXARG];
	char   *keys[64];
	int     nkeys;
	char   *args[MAXARG];
	char    is_str[MAXARG]; /* args[i] is a member, not a number */
	int     nargs;
	int     nreq;
	int64_t rules[64][LIM_SCRIPT_RULE]; /* the call's rule tuples */
	int     nrules;
};

static void
add_arg(struct call *k, const char *unused, long long v, const char *s)
{
	char buf[64];

	cr_assert(k->nargs < MAXARG - 80);
	k->is_str[k->nargs] = s != NULL;
	if (s != NULL)
		k->args[k->nargs++] = strdup(s);
	else {
		snprintf(buf, sizeof(buf), "%lld", v);
		k->args[k->nargs++] = strdup(buf);
	}
}

static void
call_begin(struct call *k, int nreq)
{
	memset(k, 0, sizeof(*k));
	k->nreq = nreq;
}

/* Queues a request's checks: their keys, rule tuples and codes. */
static void
call_request(struct call *k, const struct chk *c, int n)
{
	int64_t   pp[LIM_SCRIPT_PARAMS];
	long long code;
	int       i, rule;

	add_arg(k, "%lld", n, NULL);
	for (i = 0; i < n; i++) {
		k->keys[k->nkeys++] = strdup(c[i].key);
		lim_script_params(c[i].p, pp);
		cr_assert(k->nrules < 64);
		rule = batch_rule(k->rules, &k->nrules, c[i].p->algo, pp);
		code = lim_script_code(rule, c[i].op, c[i].flags, c[i].cost);
		add_arg(k, "%lld", code, NULL);
		if (lim_script_has_cost(code))
			add_arg(k, "%lld", c[i].cost, NULL);
		if (lim_script_sends_member(c[i].p->algo, pp))
			add_arg(k, NULL, 0, c[i].member ? c[i].member : "");
	}
}

/* The call's ARGV as one msgpack array into <sb>, as the agent packs it. */
static void
pack_argv(const struct call *k, msgpack_sbuffer *sb)
{
	msgpack_packer pk;
	int            i;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 2 + (size_t)k->nrules * LIM_SCRIPT_RULE +
	                                (size_t)k->nargs);
	msgpack_pack_int64(&pk, k->nreq);
	msgpack_pack_int64(&pk, k->nrules);
	for (i = 0; i < k->nrules * LIM_SCRIPT_RULE; i++)
		msgpack_pack_int64(
			&pk,
			k->rules[i / LIM_SCRIPT_RULE][i % LIM_SCRIPT_RULE]);
	for (i = 0; i < k->nargs; i++) {
		if (k->is_str[i]) {
			msgpack_pack_str(&pk, strlen(k->args[i]));
			msgpack_pack_str_body(&pk, k->args[i],
			                      strlen(k->args[i]));
		} else {
			msgpack_pack_int64(&pk, strtoll(k->args[i], NULL, 10));
		}
	}
}

/* The TIME the last call ran at: the last value of its reply. */
static int64_t last_now;

/* The calls go to an older script, whose reply has no clock. */
static int older_script;

/* <r>, an older script's reply of at most 2 checks (a fixarray), into
 * <buf> as this script's, with a clock of 0. Returns its length. */
static size_t
add_clock(const redisReply *r, char *buf, size_t size)
{
	cr_assert(r->len >= 1 && r->len + 1 <= size &&
	          ((unsigned char)r->str[0] & 0xf0) == 0x90 &&
	          ((unsigned char)r->str[0] & 0x0f) < 15);
	memcpy(buf, r->str, r->len);
	buf[0] = (char)(buf[0] + 1);
	buf[r->len] = 0;
	return r->len + 1;
}

/* Sends the call; fills <out> (LIM_SCRIPT_RESULT per check) and last_now.
 * Returns the number of checks answered. */
static int
call_send(redisContext *c, struct call *k, struct lim_result *out, int max)
{
	const char     *argv[MAXARG + 70 + 2 + 64 * LIM_SCRIPT_RULE];
	size_t          argvlen[MAXARG + 70 + 2 + 64 * LIM_SCRIPT_RULE];
	char            nk[16];
	msgpack_sbuffer sb;
	struct results  rs;
	redisReply     *r;
	int             argc = 0, i, n;
	char            older[256];
	const char     *reply;
	size_t          len;

	msgpack_sbuffer_init(&sb);
	argv[argc++] = env_is("SCRIPT_FCALL") ? "FCALL" : "EVALSHA";
	argv[argc++] = env_is("SCRIPT_FCALL") ? scriptlib_name() : sha;
	snprintf(nk, sizeof(nk), "%d", k->nkeys);
	argv[argc++] = nk;
	for (i = 0; i < k->nkeys; i++)
		argv[argc++] = k->keys[i];
	pack_argv(k, &sb); /* the script's one format (batch.h) */
	argv[argc++] = sb.data;
	for (i = 0; i < argc; i++)
		argvlen[i] = argv[i] == sb.data && sb.data != NULL
		                     ? sb.size
		                     : strlen(argv[i]);
	r = redisCommandArgv(c, argc, argv, argvlen);
	msgpack_sbuffer_destroy(&sb);
	cr_assert(r != NULL, "%s: %s", argv[0], c->errstr);
	cr_assert(r->type == REDIS_REPLY_STRING, "%s: %s", argv[0],
	          r->type == REDIS_REPLY_ERROR ? r->str : "not a string");
	n = k->nkeys; /* one key per check */
	cr_assert(n <= max);
	reply = r->str;
	len = r->len;
	if (older_script) {
		len = add_clock(r, older, sizeof(older));
		reply = older;
	}
	results_init(&rs);
	cr_assert_eq(results_decode(&rs, reply, len, (size_t)n), 0,
	             "%s: not %d checks' results", argv[0], n);
	for (i = 0; i < n; i++)
		results_get(&rs, (size_t)i, &out[i]);
	last_now = rs.now_us;
	results_free(&rs);
	freeReplyObject(r);
	for (i = 0; i < k->nkeys; i++)
		free(k->keys[i]);
	for (i = 0; i < k->nargs; i++)
		free(k->args[i]);
	return n;
}

static struct lim_result
script_one(redisContext *c, const struct chk *ck)
{
	struct call       k;
	struct lim_result r;

	call_begin(&k, 1);
	call_request(&k, ck, 1);
	cr_assert_eq(call_send(c, &k, &r, 1), 1);
	return r;
}

static void
unique_key(char *buf, size_t n, const char *what)
{
	static unsigned seq;

	snprintf(buf, n, "rl:{test:%s:%d:%u:%ld}", what, (int)getpid(), seq++,
	         random());
}

/* ---- twin comparison ---------------------------------------------------- */

struct step {
	int         op;
	int64_t     cost;
	const char *member;
	int         wait_ms; /* sleep this long before the step */
};

#define near(a, b, tol) ((a) - (b) <= (tol) && (b) - (a) <= (tol))

/* Waits until the window holding now is at least 30 s from its end. */
static void
avoid_boundary(redisContext *c, const struct lim_params *p)
{
	int64_t now = redis_time(c), st, en;

	lim_window_bounds(p, now, &st, &en);
	if (en - now < 30 * S)
		usleep((useconds_t)(en - now + 100000));
}

/* Short windows (under a minute): waits until 10 ms into the next one, so
 * the steps' waits land at known points of the windows. */
static void
align_window(redisContext *c, const struct lim_params *p)
{
	int64_t now = redis_time(c), st, en;

	lim_window_bounds(p, now, &st, &en);
	usleep((useconds_t)(en - now + 10000));
}

/* ---- exact twin states ----------------------------------------------------
 * The script's clock lies somewhere in [t1, t2] (TIME read just before and
 * after the call), and a charge at different instants leaves different
 * states (a TAT, a log entry, a lease expiry, a refill anchor). So the test
 * keeps every C twin state, one per distinct state, that gave exactly the
 * script's five values at some instant of every call so far: a reply must
 * equal the twin's at one µs of its span, from one of those states.
 *
 * That is the only sound check when the clock is known to a span alone: a
 * twin charged at one guessed instant (t1, say) keeps a refill anchor or a
 * TAT up to a span off the script's, and wherever a decision edge falls
 * within that (the token bucket's 8.64 ms unit in tb-big, a stall on a
 * loaded box), it decides otherwise than the script although both are
 * right. The search costs (states) x (span) evaluations: a call that
 * stalled for ms while the states were many (a fresh bucket charged leaves
 * one per µs of the span) would cost too much, and that run is recorded
 * again on a fresh key (compare_from) rather than checked any less. */

#define MAXCAND        16384
#define EXACT_WORK_MAX (8LL << 20) /* lim_eval() calls for one step */
#define EXACT_TRIES    20

enum cands_ret {
	CANDS_NONE = 0, /* no twin state gives the reply: they disagree */
	CANDS_OK,       /* the states that give it replace the old ones */
	CANDS_TOO_WIDE, /* too many states or too long a span to search */
};

struct cands {
	struct lim_state s[MAXCAND];
	int              n;
};

/* Copies <s> into <d>. Only concurrency keeps ids (lim_log.c grows ts
 * alone for sliding-log), so they are copied, and sized to the whole
 * capacity, for it alone. */
static void
state_copy(struct lim_state *d, const struct lim_state *s, int ids)
{
	uint32_t cap = s->n > 4 ? s->n : 4;

	if (d->cap < cap) {
		d->ts = realloc(d->ts, cap * sizeof(*d->ts));
		cr_assert(d->ts != NULL);
		d->cap = cap;
	}
	if (ids) {
		d->ids = realloc(d->ids, d->cap * sizeof(*d->ids));
		cr_assert(d->ids != NULL);
	}
	memcpy(d->v, s->v, sizeof(d->v));
	d->n = s->n;
	if (s->n > 0)
		memcpy(d->ts, s->ts, s->n * sizeof(*d->ts));
	if (s->n > 0 && ids)
		memcpy(d->ids, s->ids, s->n * sizeof(*d->ids));
}

static int
state_eq(const struct lim_state *a, const struct lim_state *b)
{
	return memcmp(a->v, b->v, sizeof(a->v)) == 0 && a->n == b->n &&
	       (a->n == 0 ||
	        memcmp(a->ts, b->ts, a->n * sizeof(*a->ts)) == 0) &&
	       (a->n == 0 || a->ids == NULL || b->ids == NULL ||
	        memcmp(a->ids, b->ids, a->n * sizeof(*a->ids)) == 0);
}

static int
same_result(const struct lim_result *a, const struct lim_result *b)
{
	return a->allowed == b->allowed && a->remaining == b->remaining &&
	       a->retry_after_us == b->retry_after_us &&
	       a->next_us == b->next_us && a->full_us == b->full_us;
}

/* Replaces <cs> with the states that give <rs> at some t in [t1, t2],
 * charged at that t: CANDS_OK. Otherwise <cs> is kept, and the search
 * found none (CANDS_NONE) or gave up before its end (CANDS_TOO_WIDE:
 * more than EXACT_WORK_MAX evaluations or MAXCAND states). */
static enum cands_ret
cands_step(struct cands *cs, const struct lim_params *p, int op, int64_t cost,
           uint64_t h, int64_t t1, int64_t t2, const struct lim_result *rs)
{
	static struct cands next;
	struct lim_state    tmp;
	struct lim_result   r;
	int64_t             t;
	int                 i, j, charge, ids = p->algo == LIM_CONCURRENCY;
	enum cands_ret      ret = CANDS_OK;

	if ((int64_t)cs->n * (t2 - t1 + 1) > EXACT_WORK_MAX)
		return CANDS_TOO_WIDE;
	lim_state_init(&tmp);
	next.n = 0;
	for (i = 0; i < cs->n && ret == CANDS_OK; i++)
		for (t = t1; t <= t2; t++) {
			charge = lim_eval(p, &cs->s[i], op, cost, h, t, &r);
			if (!same_result(&r, rs))
				continue;
			state_copy(&tmp, &cs->s[i], ids);
			if (charge && !lim_vetoes(op, 0, &r))
				lim_commit(p, &tmp, op, cost, h, t);
			/* newest first: a state's instants mostly leave one */
			for (j = next.n - 1;
			     j >= 0 && !state_eq(&next.s[j], &tmp); j--)
				;
			if (j >= 0)
				continue;
			if (next.n == MAXCAND) {
				ret = CANDS_TOO_WIDE;
				break;
			}
			lim_state_init(&next.s[next.n]);
			state_copy(&next.s[next.n++], &tmp, ids);
		}
	lim_state_deinit(&tmp);
	if (next.n == 0 || ret != CANDS_OK) {
		for (i = 0; i < next.n; i++)
			lim_state_deinit(&next.s[i]);
		next.n = 0;
		return ret == CANDS_OK ? CANDS_NONE : ret;
	}
	for (i = 0; i < cs->n; i++)
		lim_state_deinit(&cs->s[i]);
	for (i = 0; i < next.n; i++)
		cs->s[i] = next.s[i];
	cs->n = next.n;
	return CANDS_OK;
}

#define MAXSTEPS 64

/* A sliding window's key starting with <prev> in the window before the
 * one holding now: the hash field the script reads, and the twin's state
 * <s> (lim_window.c). */
static void
seed_prev(redisContext *c, const char *key, const struct lim_params *p,
          int64_t prev, struct lim_state *s)
{
	int64_t     st, en, idx = lim_window_bounds(p, redis_time(c), &st, &en);
	redisReply *r;

	r = redisCommand(c, "HSET %s %lld %lld", key, (long long)(idx - 1),
	                 (long long)prev);
	cr_assert(r != NULL && r->type == REDIS_REPLY_INTEGER);
	freeReplyObject(r);
	r = redisCommand(c, "PEXPIRE %s 60000", key);
	cr_assert(r != NULL && r->type == REDIS_REPLY_INTEGER);
	freeReplyObject(r);
	s->v[0] = idx - 1;
	s->v[1] = prev;
	s->n = 1;
	/* n = 1 only says "set" here, but state_copy() copies n entries */
	s->ts = calloc(4, sizeof(*s->ts));
	cr_assert(s->ts != NULL);
	s->cap = 4;
}

/* One run of a sequence: the key, the twin's state before the first step,
 * and each step's reply with the TIME span around its call. */
struct run {
	char              key[128];
	struct lim_state  init;
	struct lim_result rs[MAXSTEPS];
	int64_t           t1[MAXSTEPS], t2[MAXSTEPS];
};

/* Calls the script for each of <steps> on a fresh key, at the times the
 * steps ask for, into <run> (whose <init> the caller deinits). Nothing is
 * checked here: checking as it went made the steps' timing depend on the
 * checks' speed (under ASan the exact twin search took long enough to
 * move a wait past its edge). */
static void
run_record(redisContext *c, const struct lim_params *p, int64_t prev,
           const struct step *steps, int n, const char *name, struct run *run)
{
	int i;

	unique_key(run->key, sizeof(run->key), name);
	if ((p->algo == LIM_FIXED_WINDOW || p->algo == LIM_SLIDING_WINDOW) &&
	    p->period_us < 60 * S)
		align_window(c, p);
	else if (p->algo == LIM_FIXED_WINDOW || p->algo == LIM_SLIDING_WINDOW)
		avoid_boundary(c, p);
	lim_state_init(&run->init);
	if (prev != 0) {
		cr_assert_eq(p->algo, LIM_SLIDING_WINDOW);
		seed_prev(c, run->key, p, prev, &run->init);
	}
	for (i = 0; i < n; i++) {
		const char *m = steps[i].member ? steps[i].member : "";
		struct chk  ck = {
			 p, run->key, steps[i].op, steps[i].cost, 0, m
		};

		if (steps[i].wait_ms > 0)
			usleep((useconds_t)steps[i].wait_ms * 1000);
		run->t1[i] = redis_time(c);
		run->rs[i] = script_one(c, &ck);
		run->t2[i] = redis_time(c);
	}
}

/* Matches each reply of <run> with the twin (cands_step), from the first
 * step on. Returns CANDS_OK when every one matched; CANDS_NONE, with the
 * test failed, at the first that no twin state gives; CANDS_TOO_WIDE when
 * a step could not be searched (the run proves nothing either way). */
static enum cands_ret
run_check(const struct lim_params *p, const struct step *steps, int n,
          const char *name, const struct run *run)
{
	static struct cands cs;
	enum cands_ret      ret = CANDS_OK;
	int                 i;

	cs.n = 1;
	lim_state_init(&cs.s[0]);
	state_copy(&cs.s[0], &run->init, 0);
	for (i = 0; i < n && ret == CANDS_OK; i++) {
		const char *m = steps[i].member ? steps[i].member : "";
		const struct lim_result *rs = &run->rs[i];

		ret = cands_step(&cs, p, steps[i].op, steps[i].cost,
		                 lim_member_hash(m, strlen(m)), run->t1[i],
		                 run->t2[i], rs);
		if (ret == CANDS_TOO_WIDE)
			cr_log_info(
				"%s step %d: from %d twin states, a span of %lld "
				"µs: too many to search",
				name, i, cs.n,
				(long long)(run->t2[i] - run->t1[i]));
		cr_expect(ret != CANDS_NONE,
		          "%s step %d: no twin state gives %d %lld %lld %lld "
		          "%lld in [%lld, %lld]",
		          name, i, rs->allowed, (long long)rs->remaining,
		          (long long)rs->retry_after_us, (long long)rs->next_us,
		          (long long)rs->full_us, (long long)run->t1[i],
		          (long long)run->t2[i]);
	}
	for (i = 0; i < cs.n; i++)
		lim_state_deinit(&cs.s[i]);
	return ret;
}

/* Runs <steps> through the script and the C twin; <got>, if not NULL,
 * receives the script's decisions, one character each ('1', '0', 'x' for
 * -1), so a test can check that its waits did what they meant to. Every
 * reply must match the twin exactly at one instant of its TIME span, from
 * a twin state that matched every reply before it (run_check). A run in
 * which some step was too wide to search is recorded again, EXACT_TRIES
 * times at most, and the test fails if none could be searched to its
 * end. A sliding window starts from <prev> in the last window (seed_prev)
 * when that is not 0. */
static void
compare_from(const struct lim_params *p, int64_t prev, const struct step *steps,
             int n, const char *name, char *got)
{
	redisContext     *c = setup();
	static struct run run;
	enum cands_ret    ret;
	int               i, try;

	cr_assert_leq(n, MAXSTEPS);
	for (try = 1;; try++) {
		run_record(c, p, prev, steps, n, name, &run);
		ret = run_check(p, steps, n, name, &run);
		lim_state_deinit(&run.init);
		if (ret != CANDS_TOO_WIDE)
			break;
		cr_assert_lt(try, EXACT_TRIES,
		             "%s: %d runs, none whose every reply could be "
		             "searched for its twin state (calls stalled for "
		             "ms: an overloaded host?)",
		             name, try);
		cr_log_info("%s: run %d not searched to its end, again", name,
		            try);
	}
	for (i = 0; got != NULL && i < n; i++)
		got[i] = run.rs[i].allowed == 1   ? '1'
		         : run.rs[i].allowed == 0 ? '0'
		                                  : 'x';
	if (got != NULL)
		got[n] = '\0';
	redisFree(c);
}

static void
compare(const struct lim_params *p, const struct step *steps, int n,
        const char *name, char *got)
{
	compare_from(p, 0, steps, n, name, got);
}

/* compare(), and the script's decisions must be <want> (as <got> there). */
static void
compare_want(const struct lim_params *p, const struct step *steps, int n,
             const char *name, const char *want)
{
	char got[MAXSTEPS + 1];

	compare(p, steps, n, name, got);
	cr_expect_str_eq(got, want, "%s: decisions %s", name, got);
}

#define C(n)                                                                   \
	{                                                                      \
		LIM_OP_CHECK, n, NULL, 0                                       \
	}
#define F(n)                                                                   \
	{                                                                      \
		LIM_OP_FORCE, n, NULL, 0                                       \
	}

static const struct step bucket_steps[] = {
	C(6),
	C(1),
	C(1),
	C(1),
	C(0),
	C(2),
	C(1),
	C(1),
	C(0),
	C(2),
	F(1),
	C(1),
	C(0),
	F(3),
	C(7),
	C(0),
	C(5000000000LL),
};

Test(script, gcra_matches_c)
{
	struct lim_params p = mk(LIM_GCRA, 1, HOUR, 5);

	compare(&p, bucket_steps, ARRAY_LEN(bucket_steps), "gcra", NULL);
}

Test(script, gcra_per_day_with_big_burst_matches_c)
{
	struct lim_params        p = mk(LIM_GCRA, 1000, 86400 * S, 1000);
	static const struct step steps[] = {
		C(999), C(1), C(1), C(0), C(1001), F(5), C(1), C(0),
	};

	compare(&p, steps, ARRAY_LEN(steps), "gcra-day", NULL);
}

Test(script, leaky_meter_matches_c)
{
	struct lim_params p = mk(LIM_LEAKY_BUCKET, 1, HOUR, 5);

	compare(&p, bucket_steps, ARRAY_LEN(bucket_steps), "leaky", NULL);
}

Test(script, leaky_delay_matches_c)
{
	struct lim_params        p;
	const char              *err;
	static const struct step steps[] = {
		C(1), C(1), C(1), C(1), C(1), C(1), C(0), C(4), C(5),
	};

	memset(&p, 0, sizeof(p));
	p.algo = LIM_LEAKY_BUCKET;
	p.rate = 1;
	p.period_us = HOUR;
	p.burst = 2;
	p.max_delay_us = 3 * HOUR;
	cr_assert_eq(lim_params_init(&p, &err), 0);
	compare(&p, steps, ARRAY_LEN(steps), "leaky-delay", NULL);
}

Test(script, token_bucket_matches_c)
{
	struct lim_params p = mk(LIM_TOKEN_BUCKET, 1, HOUR, 5);

	compare(&p, bucket_steps, ARRAY_LEN(bucket_steps), "tb", NULL);
}

Test(script, token_bucket_big_numbers_match_c)
{
	struct lim_params p =
		mk(LIM_TOKEN_BUCKET, 10000000, 86400 * S, 1000000);
	static const struct step steps[] = {
		C(999999), C(2), C(1), C(0), C(1000001), F(3000000), C(1),
	};

	compare(&p, steps, ARRAY_LEN(steps), "tb-big", NULL);
}

static const struct step window_steps[] = {
	C(2), C(2), C(2), C(1), C(0), C(1), C(6), F(3), C(0), C(1),
};

Test(script, fixed_window_matches_c)
{
	struct lim_params p = mk(LIM_FIXED_WINDOW, 5, HOUR, 0);

	compare(&p, window_steps, ARRAY_LEN(window_steps), "fw", NULL);
}

/* window_steps on the UTC calendar window <cal>, limit 5. */
static void
compare_calendar(enum lim_calendar cal, const char *name)
{
	struct lim_params p;
	const char       *err;

	memset(&p, 0, sizeof(p));
	p.algo = LIM_FIXED_WINDOW;
	p.rate = 5;
	p.calendar = cal;
	cr_assert_eq(lim_params_init(&p, &err), 0);
	compare(&p, window_steps, ARRAY_LEN(window_steps), name, NULL);
}

Test(script, fixed_window_calendar_month_matches_c)
{
	compare_calendar(LIM_CAL_MONTH, "fw-month");
}

Test(script, sliding_window_matches_c)
{
	struct lim_params p = mk(LIM_SLIDING_WINDOW, 5, HOUR, 0);

	compare(&p, window_steps, ARRAY_LEN(window_steps), "sw", NULL);
}

Test(script, sliding_log_matches_c)
{
	struct lim_params        p = mk(LIM_SLIDING_LOG, 5, HOUR, 0);
	static const struct step steps[] = {
		{ LIM_OP_CHECK, 1, "r1", 0 }, { LIM_OP_CHECK, 2, "r2", 0 },
		{ LIM_OP_CHECK, 3, "r3", 0 }, { LIM_OP_CHECK, 1, "r4", 0 },
		{ LIM_OP_CHECK, 0, "r5", 0 }, { LIM_OP_CHECK, 6, "r6", 0 },
		{ LIM_OP_CHECK, 2, "r7", 0 }, { LIM_OP_FORCE, 4, "r8", 0 },
		{ LIM_OP_CHECK, 1, "r9", 0 }, { LIM_OP_CHECK, 0, "", 0 },
	};

	compare(&p, steps, ARRAY_LEN(steps), "log", NULL);
}

Test(script, concurrency_matches_c)
{
	struct lim_params        p = mk(LIM_CONCURRENCY, 2, HOUR, 0);
	static const struct step steps[] = {
		{ LIM_OP_CHECK, 1, "a", 0 },
		{ LIM_OP_CHECK, 1, "b", 0 },
		{ LIM_OP_CHECK, 1, "c", 0 },
		{ LIM_OP_CHECK, 1, "a", 0 },
		{ LIM_OP_RELEASE, 1, "a", 0 },
		{ LIM_OP_CHECK, 0, "z", 0 },
		{ LIM_OP_CHECK, 1, "c", 0 },
		{ LIM_OP_RELEASE, 1, "nobody", 0 },
		{ LIM_OP_FORCE, 1, "d", 0 },
		{ LIM_OP_CHECK, 1, "e", 0 },
		{ LIM_OP_RELEASE, 1, "d", 0 },
		{ LIM_OP_CHECK, 1, "e", 0 },
	};

	compare(&p, steps, ARRAY_LEN(steps), "conc", NULL);
}

/* ---- twins with time passing ---------------------------------------------
 * Short periods (EI 200 ms, windows of 200-400 ms, leases of 200 ms) and
 * waits that leave 50 ms or more between every wait's end and the nearest
 * instant where a decision would change: refill, window rollover, the
 * previous window's weight, log entries and leases that expire. compare()
 * still takes the twin at both ends of each call's TIME span, so jitter
 * can fail only the decision strings below, never the twin comparison. */

#define CW(ms, n)                                                              \
	{                                                                      \
		LIM_OP_CHECK, n, NULL, ms                                      \
	}
#define FW_(ms, n)                                                             \
	{                                                                      \
		LIM_OP_FORCE, n, NULL, ms                                      \
	}
#define MW(ms, op, n, m)                                                       \
	{                                                                      \
		op, n, m, ms                                                   \
	}

/* 5/s burst 2: EI = 200 ms, DVT = 400 ms. Back to back, 2 pass and the
 * 3rd is refused (it would need 200 ms). 700 ms later the TAT is past:
 * C(2) takes the burst (TAT now + 400), C(1) would need 200 ms. 300 ms
 * later TAT - now = 100: one more fits (it needed 200 ms), a peek passes,
 * the next needs TAT + 200 - 400 = now + 100 more. FORCE 2 reports 0 and
 * pushes TAT to now + 700 (below the clamp now + 800); 900 ms later it is
 * spent. Every wait ends 100 ms or more from the edge it is meant for. */
static const struct step refill_steps[] = {
	CW(0, 1), CW(0, 1), CW(0, 1),  CW(700, 2), CW(0, 1), CW(300, 1),
	CW(0, 0), CW(0, 1), FW_(0, 2), CW(900, 2), CW(0, 1),
};
static const char refill_want[] = "11010110010";

static void
compare_refill(enum lim_algo a, const char *name)
{
	struct lim_params p = mk(a, 5, S, 2);
	char              got[32];

	compare(&p, refill_steps, ARRAY_LEN(refill_steps), name, got);
	cr_expect_str_eq(got, refill_want, "%s: decisions %s", name, got);
}

Test(script, gcra_refill_over_time_matches_c)
{
	compare_refill(LIM_GCRA, "gcra-time");
}

Test(script, leaky_meter_refill_over_time_matches_c)
{
	compare_refill(LIM_LEAKY_BUCKET, "leaky-time");
}

Test(script, token_bucket_refill_over_time_matches_c)
{
	compare_refill(LIM_TOKEN_BUCKET, "tb-time");
}

/* 3/s: EI = 333333 µs, as GCRA's, in the script too. After a burst of 3,
 * 400 ms give back exactly one unit; the exact twin check pins the times. */
Test(script, token_bucket_3_per_second_matches_c)
{
	struct lim_params        p = mk(LIM_TOKEN_BUCKET, 3, S, 3);
	static const struct step steps[] = {
		CW(0, 3), CW(0, 1), CW(400, 1), CW(0, 1), CW(0, 0),
	};
	char got[8];

	compare(&p, steps, ARRAY_LEN(steps), "tb-3s", got);
	cr_expect_str_eq(got, "10101");
}

/* L = 2 per 200 ms window, starting 10 ms into one: 2 pass, 1 is refused;
 * 200 ms later (the next window, ~15 ms in) 2 pass again and the FORCEd 2
 * make it 4, so even a peek is refused; the window after admits 2. */
Test(script, fixed_window_rollover_matches_c)
{
	struct lim_params        p = mk(LIM_FIXED_WINDOW, 2, 200000, 0);
	static const struct step steps[] = {
		CW(0, 2), CW(0, 1),  CW(200, 1), CW(0, 1),
		CW(0, 1), FW_(0, 2), CW(0, 0),   CW(200, 2),
	};
	char got[16];

	compare(&p, steps, ARRAY_LEN(steps), "fw-time", got);
	cr_expect_str_eq(got, "10110001");
}

Test(script, fixed_window_calendar_day_matches_c)
{
	compare_calendar(LIM_CAL_DAY, "fw-day");
}

/* L = 4, W = 400 ms, from ~10 ms into window k: 4 pass. 540 ms later it
 * is ~150 ms into k + 1, where prev = 4 weighs 4 * (W - e) / W, 2.5 (in
 * (2, 3) for any e in (100, 200) ms), never rounded down: a cost 2 is
 * refused, 1 passes, the next 1 is refused. 400 ms later, ~150 ms into k
 * + 2: prev = 1 weighs under 1, so 3 pass, 1 is refused, and a peek at
 * an estimate under 4 is allowed. */
Test(script, sliding_window_weighs_the_previous_window_like_c)
{
	struct lim_params        p = mk(LIM_SLIDING_WINDOW, 4, 400000, 0);
	static const struct step steps[] = {
		CW(0, 4), CW(0, 1),   CW(540, 2), CW(0, 1),
		CW(0, 1), CW(400, 3), CW(0, 1),   CW(0, 0),
	};

	compare_want(&p, steps, ARRAY_LEN(steps), "sw-time", "10010101");
}

/* The acceptance test of the exact window (issue 17), through the script:
 * L = 3, W = 1 s, from ~10 ms into a window. 3 pass ~910 ms in; ~60 ms
 * into the next window they weigh 3 * (W - e) / W > 2 until e = W / 3,
 * so 1 more is refused (a floored weight, 2, let it in). ~560 ms in, 1
 * passes; the next needs e >= 2 W / 3 and is refused. Every wait ends 90
 * ms or more from its edge. */
Test(script, sliding_window_limit_spent_before_a_boundary_like_c)
{
	struct lim_params        p = mk(LIM_SLIDING_WINDOW, 3, S, 0);
	static const struct step steps[] = {
		CW(900, 3),
		CW(150, 1),
		CW(500, 1),
		CW(0, 1),
	};

	compare_want(&p, steps, ARRAY_LEN(steps), "sw-edge", "1010");
}

/* ALGORITHMS.md's vector, limit 3 per hour on a fresh key: three pass,
 * the fourth is refused with retry (W - e) + W / 3 (the twin's, pinned in
 * tests/unit/test_limiter.c). Then from the state the boundary leaves, 3
 * in the last window, at whatever e the clock gives: 3 * (W - e) / W + 1
 * <= 3 from e = 1200 s. */
Test(script, sliding_window_algorithms_md_vector_like_c)
{
	struct lim_params        p = mk(LIM_SLIDING_WINDOW, 3, HOUR, 0);
	static const struct step steps[] = {
		C(1), C(1), C(1), C(1), C(0),
	};

	compare_want(&p, steps, ARRAY_LEN(steps), "sw-vector", "11101");
	compare_from(&p, 3, steps, ARRAY_LEN(steps), "sw-vector-prev", NULL);
}

/* The largest sliding window spoa-ratelimit -c accepts (cli.sh): limit
 * 2^32, window 2^48 µs, starting from a full last window. prev * (W - e)
 * is about 2^80, far past 2^53: the script's muldiv must split it and
 * still give the twin's exact answer (__int128), where the estimate is L
 * - e / 2^16, a fraction at almost every µs. */
Test(script, sliding_window_largest_limit_and_window_match_c)
{
	struct lim_params p =
		mk(LIM_SLIDING_WINDOW, LIM_COST_MAX, LIM_TIME_MAX, 0);
	static const struct step steps[] = {
		C(0),
		C(1),
		C(100000000),
		C(0),
		C(LIM_COST_MAX / 2),
		C(LIM_COST_MAX),
		F(1),
		C(0),
	};

	compare_from(&p, LIM_COST_MAX, steps, ARRAY_LEN(steps), "sw-max", NULL);
	compare_from(&p, LIM_COST_MAX - 1, steps, ARRAY_LEN(steps), "sw-max-1",
	             NULL);
}

/* L = 2, W = 200 ms: a at 0, b at 100 ms, c refused; at ~250 ms a has
 * expired (ts <= now - W) and b has not (until 300 ms): d passes, e does
 * not; 300 ms later the log is empty: cost 2 passes, then 1 is refused
 * and a peek is allowed. */
Test(script, sliding_log_entries_expire_like_c)
{
	struct lim_params        p = mk(LIM_SLIDING_LOG, 2, 200000, 0);
	static const struct step steps[] = {
		MW(0, LIM_OP_CHECK, 1, "a"), MW(100, LIM_OP_CHECK, 1, "b"),
		MW(0, LIM_OP_CHECK, 1, "c"), MW(150, LIM_OP_CHECK, 1, "d"),
		MW(0, LIM_OP_CHECK, 1, "e"), MW(300, LIM_OP_CHECK, 2, "f"),
		MW(0, LIM_OP_CHECK, 1, "g"), MW(0, LIM_OP_CHECK, 0, "h"),
	};
	char got[16];

	compare(&p, steps, ARRAY_LEN(steps), "log-time", got);
	cr_expect_str_eq(got, "11010101");
}

/* L = 2, lease 200 ms, releases lost: c waits until a's and b's leases
 * run out (the script's ZREMRANGEBYSCORE), then c and d hold the slots; a
 * release frees one for e; 100 ms later f is refused, 250 ms later d's
 * and e's leases are gone and f and g pass. */
Test(script, concurrency_leases_expire_like_c)
{
	struct lim_params        p = mk(LIM_CONCURRENCY, 2, 200000, 0);
	static const struct step steps[] = {
		MW(0, LIM_OP_CHECK, 1, "a"),   MW(0, LIM_OP_CHECK, 1, "b"),
		MW(0, LIM_OP_CHECK, 1, "c"),   MW(300, LIM_OP_CHECK, 1, "c"),
		MW(0, LIM_OP_CHECK, 1, "d"),   MW(0, LIM_OP_CHECK, 1, "e"),
		MW(0, LIM_OP_RELEASE, 1, "c"), MW(0, LIM_OP_CHECK, 1, "e"),
		MW(100, LIM_OP_CHECK, 1, "f"), MW(150, LIM_OP_CHECK, 1, "f"),
		MW(0, LIM_OP_CHECK, 1, "g"),   MW(0, LIM_OP_CHECK, 1, "h"),
	};
	char got[16];

	compare(&p, steps, ARRAY_LEN(steps), "conc-time", got);
	cr_expect_str_eq(got, "110110110110");
}

/* ---- two-phase, shadow, batches, TTLs ------------------------------------ */

static redisReply *
cmd(redisContext *c, const char *fmt, const char *key)
{
	redisReply *r = redisCommand(c, fmt, key);

	cr_assert_not_null(r);
	return r;
}

/* A window's hash holding a later window's count (Redis TIME stepped back
 * across a boundary since it was written: a failover to a node whose
 * clock is behind) keeps it until that window ends: a charge in the
 * earlier window that set the TTL to its own window's end dropped the
 * later count one margin into its window, and let a whole limit more in.
 * Fixed and sliding window, W = 60 s: the TTL after a charge covers the
 * next window (and, sliding, the one after, where it is the previous). */
static void
later_window_kept(enum lim_algo a, int wins, const char *name)
{
	redisContext     *c = setup();
	struct lim_params p = mk(a, 5, 60 * S, 0);
	char              k[128], f[32];
	int64_t           st, en, idx;
	redisReply       *r;
	struct chk        ck = { &p, k, LIM_OP_CHECK, 1, 0, "m" };

	unique_key(k, sizeof(k), name);
	avoid_boundary(c, &p);
	idx = lim_window_bounds(&p, redis_time(c), &st, &en);
	snprintf(f, sizeof(f), "%lld", (long long)(idx + 1));
	r = redisCommand(c, "HSET %s %s 5", k, f);
	cr_assert(r != NULL && r->type == REDIS_REPLY_INTEGER);
	freeReplyObject(r);
	freeReplyObject(cmd(c, "PEXPIRE %s 600000", k));
	cr_assert_eq(script_one(c, &ck).allowed, 1);
	r = cmd(c, "PTTL %s", k);
	cr_expect_geq(r->integer * 1000, en + wins * p.period_us - redis_time(c),
	              "%s: the TTL, %lld ms, ends before the later window",
	              name, r->integer);
	freeReplyObject(r);
	redisFree(c);
}

Test(script, fixed_window_keeps_a_later_windows_count_alive)
{
	later_window_kept(LIM_FIXED_WINDOW, 1, "fw-later");
}

Test(script, sliding_window_keeps_a_later_windows_count_alive)
{
	later_window_kept(LIM_SLIDING_WINDOW, 2, "sw-later");
}

/* One CHECK of cost 1 on <key> per member in <ids> (one letter each), the
 * i-th under <p[i]>, with a pause of <ms> before the <at>-th; the
 * decisions into <got> ('1' allowed, '0' not). */
static void
check_ids(redisContext *c, const char *key, const struct lim_params *const *p,
          const char *ids, int at, int ms, char *got)
{
	int i;

	for (i = 0; ids[i] != '\0'; i++) {
		char       m[2] = { ids[i], '\0' };
		struct chk ck = { p[i], key, LIM_OP_CHECK, 1, 0, m };

		if (i == at)
			usleep((useconds_t)ms * 1000);
		got[i] = script_one(c, &ck).allowed == 1 ? '1' : '0';
	}
	got[i] = '\0';
}

/* A lease taken under a longer lease (a reload shortened the rule's
 * lease, or Redis TIME stepped back since it was taken) is live until its
 * own expiry, as in the C twin, which counts every lease whose expiry is
 * ahead (lim_log.c). An acquire that set the key's TTL to its own,
 * shorter lease dropped the longer one with the key, and let a request
 * more than the limit in. L = 2: a holds 60 s, b 200 ms; 400 ms later c
 * takes b's slot and d must wait for a. */
Test(script, concurrency_a_shorter_lease_keeps_the_longer_leases_alive)
{
	redisContext            *c = setup();
	struct lim_params        lng = mk(LIM_CONCURRENCY, 2, 60 * S, 0);
	struct lim_params        sht = mk(LIM_CONCURRENCY, 2, 200000, 0);
	const struct lim_params *p[] = { &lng, &sht, &sht, &sht };
	char                     k[128], got[8];

	unique_key(k, sizeof(k), "conc-lease-cut");
	check_ids(c, k, p, "abcd", 2, 400, got);
	cr_expect_str_eq(got, "1110", "decisions %s", got);
	redisFree(c);
}

/* An entry stamped ahead of TIME (Redis TIME stepped back since it was
 * written: a failover to a node whose clock is behind) stays live until
 * its own stamp + W, as in the C twin. A charge that set the key's TTL
 * to W from now dropped it with the key. L = 2, W = 300 ms, an entry 2 s
 * ahead: a passes; 500 ms later a is gone, the entry is not: b passes, c
 * does not. */
Test(script, sliding_log_keeps_an_entry_stamped_ahead_of_time)
{
	redisContext            *c = setup();
	struct lim_params        lg = mk(LIM_SLIDING_LOG, 2, 300000, 0);
	const struct lim_params *p[] = { &lg, &lg, &lg };
	char                     k[128], got[8];
	redisReply              *r;

	unique_key(k, sizeof(k), "log-ahead");
	r = redisCommand(c, "ZADD %s %lld ahead", k,
	                 (long long)(redis_time(c) + 2 * S));
	cr_assert(r != NULL && r->type == REDIS_REPLY_INTEGER);
	freeReplyObject(r);
	freeReplyObject(cmd(c, "PEXPIRE %s 10000", k));
	check_ids(c, k, p, "abc", 1, 500, got);
	cr_expect_str_eq(got, "110", "decisions %s", got);
	redisFree(c);
}

Test(script, denied_check_vetoes_the_others)
{
	redisContext     *c = setup();
	struct lim_params g = mk(LIM_GCRA, 1, HOUR, 5);
	struct lim_params w = mk(LIM_SLIDING_LOG, 1, HOUR, 0);
	char              kg[128], kw[128];
	struct chk        ck[2] = {
		       { &g, kg, LIM_OP_CHECK, 1, 0, "m1" },
		       { &w, kw, LIM_OP_CHECK, 1, 0, "m1" },
	};
	struct lim_result r[2];
	struct call       k;
	redisReply       *rep;

	unique_key(kg, sizeof(kg), "veto-g");
	unique_key(kw, sizeof(kw), "veto-w");
	call_begin(&k, 1);
	call_request(&k, ck, 2);
	call_send(c, &k, r, 2);
	cr_expect(r[0].allowed == 1 && r[1].allowed == 1);
	ck[1].member = "m2";
	call_begin(&k, 1);
	call_request(&k, ck, 2);
	call_send(c, &k, r, 2);
	cr_expect_eq(r[0].allowed, 1);
	cr_expect_eq(r[0].remaining, 3); /* reported as if charged */
	cr_expect_eq(r[1].allowed, 0);
	/* the gcra key kept the TAT of the first request only */
	ck[0].cost = 0;
	r[0] = script_one(c, &ck[0]);
	cr_expect_eq(r[0].remaining, 4);
	rep = cmd(c, "ZCARD %s", kw);
	cr_expect_eq(rep->integer, 1);
	freeReplyObject(rep);
	redisFree(c);
}

Test(script, shadow_check_is_reported_not_charged_and_does_not_veto)
{
	redisContext     *c = setup();
	struct lim_params g = mk(LIM_GCRA, 1, HOUR, 5);
	struct lim_params w = mk(LIM_FIXED_WINDOW, 1, 86400 * S, 0);
	char              kg[128], kw[128];
	struct chk        ck[2] = {
		       { &g, kg, LIM_OP_CHECK, 1, 0, "" },
		       { &w, kw, LIM_OP_CHECK, 2, LIM_FL_SHADOW, "" },
	};
	struct lim_result r[2];
	struct call       k;

	unique_key(kg, sizeof(kg), "shadow-g");
	unique_key(kw, sizeof(kw), "shadow-w");
	avoid_boundary(c, &w);
	call_begin(&k, 1);
	call_request(&k, ck, 2);
	call_send(c, &k, r, 2);
	cr_expect_eq(r[0].allowed, 1);
	cr_expect_eq(r[1].allowed, -1);
	ck[1].cost = 1;
	call_begin(&k, 1);
	call_request(&k, ck, 2);
	call_send(c, &k, r, 2);
	cr_expect_eq(r[0].allowed, 1);
	cr_expect_eq(r[0].remaining, 3);
	cr_expect_eq(r[1].allowed, 1); /* allowed shadow: charged */
	call_begin(&k, 1);
	call_request(&k, ck, 2);
	call_send(c, &k, r, 2);
	cr_expect_eq(r[0].allowed, 1);
	cr_expect_eq(r[0].remaining, 2);
	cr_expect_eq(r[1].allowed, 0); /* denied shadow: no veto */
	cr_expect_eq(r[1].remaining, 0);
	redisFree(c);
}

Test(script, several_requests_in_one_call)
{
	redisContext     *c = setup();
	struct lim_params w = mk(LIM_FIXED_WINDOW, 2, 86400 * S, 0);
	struct lim_params g = mk(LIM_GCRA, 1, HOUR, 10);
	char              kw[128], kg[128];
	struct chk        a[2] = {
		       { &w, kw, LIM_OP_CHECK, 1, 0, "" },
		       { &g, kg, LIM_OP_CHECK, 1, 0, "" },
	};
	struct lim_result r[8];
	struct call       k;
	int               i;

	unique_key(kw, sizeof(kw), "batch-w");
	unique_key(kg, sizeof(kg), "batch-g");
	avoid_boundary(c, &w);
	call_begin(&k, 3);
	for (i = 0; i < 3; i++)
		call_request(&k, a, 2);
	cr_assert_eq(call_send(c, &k, r, 8), 6);
	cr_expect(r[0].allowed == 1 && r[0].remaining == 1);
	cr_expect(r[1].allowed == 1 && r[1].remaining == 9);
	cr_expect(r[2].allowed == 1 && r[2].remaining == 0);
	cr_expect(r[3].allowed == 1 && r[3].remaining == 8);
	cr_expect(r[4].allowed == 0 && r[4].remaining == 0);
	cr_expect(r[5].allowed == 1 && r[5].remaining == 7);
	/* the third request was vetoed: gcra charged twice only */
	a[1].cost = 0;
	r[0] = script_one(c, &a[1]);
	cr_expect_eq(r[0].remaining, 8);
	redisFree(c);
}

/* A key another writer left holding a fraction ("<tat>.5"): the script
 * computes with it and cmsgpack packs those results as floats. The reply
 * still decodes (the float truncated, as Redis' own conversion of a Lua
 * number did), so the other request of the call is decided as usual. */
Test(script, a_fractional_value_in_redis_fails_no_other_request)
{
	redisContext     *c = setup();
	struct lim_params g = mk(LIM_GCRA, 1, HOUR, 10);
	char              ka[128], kb[128];
	struct chk        a = { &g, ka, LIM_OP_CHECK, 1, 0, "" };
	struct chk        b = { &g, kb, LIM_OP_CHECK, 1, 0, "" };
	struct lim_result r[2];
	struct call       k;
	redisReply       *set;

	unique_key(ka, sizeof(ka), "frac-a");
	unique_key(kb, sizeof(kb), "frac-b");
	set = redisCommand(c, "SET %s %lld.5", kb,
	                   (long long)redis_time(c) + 500000);
	cr_assert(set != NULL && set->type == REDIS_REPLY_STATUS);
	freeReplyObject(set);
	call_begin(&k, 2);
	call_request(&k, &a, 1);
	call_request(&k, &b, 1);
	cr_assert_eq(call_send(c, &k, r, 2), 2);
	cr_expect(r[0].allowed == 1 && r[0].remaining == 9,
	          "the other key: allowed, 9 left (%d, %lld)", r[0].allowed,
	          (long long)r[0].remaining);
	cr_expect_eq(r[1].allowed, 1, "the fractional key: still decided");
	redisFree(c);
}

/* The same key twice in one request (one rule bound by two messages of a
 * NOTIFY): both checks are decided on the state before the request, as
 * local_eval_request() does, and both charges land, one after the other. */
static void
same_key_twice(enum lim_algo algo, const char *name)
{
	redisContext     *c = setup();
	struct lim_params p = mk(algo, 1, HOUR, 10);
	char              key[128];
	struct chk        ck[2] = {
		       { &p, key, LIM_OP_CHECK, 1, 0, "" },
		       { &p, key, LIM_OP_CHECK, 2, 0, "" },
	};
	struct lim_result r[2];
	struct call       k;

	unique_key(key, sizeof(key), name);
	call_begin(&k, 1);
	call_request(&k, ck, 2);
	call_send(c, &k, r, 2);
	cr_expect(r[0].allowed == 1 && r[1].allowed == 1);
	ck[0].cost = 0;
	r[0] = script_one(c, &ck[0]);
	cr_expect_eq(r[0].remaining, 7, "%s: both charges count (1 + 2 of 10)",
	             name);
	redisFree(c);
}

Test(script, gcra_same_key_twice_in_a_request_charges_both)
{
	same_key_twice(LIM_GCRA, "twice-gcra");
}

Test(script, token_bucket_same_key_twice_in_a_request_charges_both)
{
	same_key_twice(LIM_TOKEN_BUCKET, "twice-tb");
}

Test(script, every_written_key_has_a_ttl)
{
	redisContext     *c = setup();
	struct lim_params ps[LIM_ALGO_COUNT];
	char              key[128], pat[160];
	redisReply       *r, *t;
	size_t            i;
	int               a;

	ps[LIM_GCRA] = mk(LIM_GCRA, 1, HOUR, 5);
	ps[LIM_TOKEN_BUCKET] = mk(LIM_TOKEN_BUCKET, 1, HOUR, 5);
	ps[LIM_LEAKY_BUCKET] = mk(LIM_LEAKY_BUCKET, 1, HOUR, 5);
	ps[LIM_FIXED_WINDOW] = mk(LIM_FIXED_WINDOW, 5, HOUR, 0);
	ps[LIM_SLIDING_WINDOW] = mk(LIM_SLIDING_WINDOW, 5, HOUR, 0);
	ps[LIM_SLIDING_LOG] = mk(LIM_SLIDING_LOG, 5, HOUR, 0);
	ps[LIM_CONCURRENCY] = mk(LIM_CONCURRENCY, 5, HOUR, 0);
	for (a = 0; a < LIM_ALGO_COUNT; a++) {
		struct chk ck = { &ps[a], key, LIM_OP_CHECK, 1, 0, "id1" };
		int64_t    max =
			(a == LIM_SLIDING_WINDOW ? 2 : 1) * HOUR / 1000 + 2000;

		unique_key(key, sizeof(key), lim_algo_name(a));
		cr_expect_eq(script_one(c, &ck).allowed, 1);
		snprintf(pat, sizeof(pat), "%.*s*", (int)strlen(key) - 1, key);
		r = redisCommand(c, "KEYS %s", pat);
		cr_assert(r && r->type == REDIS_REPLY_ARRAY);
		cr_expect(r->elements >= 1, "%s wrote no key",
		          lim_algo_name(a));
		for (i = 0; i < r->elements; i++) {
			t = cmd(c, "PTTL %s", r->element[i]->str);
			cr_expect(t->integer > 0 && t->integer <= max,
			          "%s: %s has PTTL %lld", lim_algo_name(a),
			          r->element[i]->str, (long long)t->integer);
			freeReplyObject(t);
		}
		freeReplyObject(r);
	}
	redisFree(c);
}

Test(script, impossible_cost_is_minus_one_and_writes_nothing)
{
	redisContext     *c = setup();
	struct lim_params g = mk(LIM_GCRA, 1, HOUR, 5);
	char              key[128];
	struct chk        ck = { &g, key, LIM_OP_CHECK, 6, 0, "" };
	struct lim_result r;
	redisReply       *rep;

	unique_key(key, sizeof(key), "never");
	r = script_one(c, &ck);
	cr_expect_eq(r.allowed, -1);
	cr_expect_eq(r.remaining, 5);
	cr_expect_eq(r.retry_after_us, 0);
	rep = cmd(c, "EXISTS %s", key);
	cr_expect_eq(rep->integer, 0);
	freeReplyObject(rep);
	redisFree(c);
}

/* ---- charged after the response (issue 19) -------------------------------
 *
 * What the agent sends for charge: response / count: response: a PEEK of
 * one unit when the request comes ("is a unit left?"), a FORCE of the
 * response's cost when it returns. Limit 5; responses of 3, 3, 2 and an
 * impossible 10 take the key into debt, and every request in debt is
 * refused with the twin's retry. Decisions: P F P F P F P F P. */
#define P(n)                                                                   \
	{                                                                      \
		LIM_OP_PEEK, n, NULL, 0                                        \
	}

static const struct step response_steps[] = {
	P(1), F(3), P(1), F(3), P(1), F(2), P(1), F(10), P(1),
};
static const char response_want[] = "1110000x0";

static void
compare_response(struct lim_params p, const char *name)
{
	compare_want(&p, response_steps, ARRAY_LEN(response_steps), name,
	             response_want);
}

Test(script, gcra_charged_after_the_response_matches_c)
{
	compare_response(mk(LIM_GCRA, 1, HOUR, 5), "gcra-response");
}

Test(script, token_bucket_charged_after_the_response_matches_c)
{
	compare_response(mk(LIM_TOKEN_BUCKET, 1, HOUR, 5), "tb-response");
}

Test(script, fixed_window_charged_after_the_response_matches_c)
{
	compare_response(mk(LIM_FIXED_WINDOW, 5, HOUR, 0), "fw-response");
}

Test(script, sliding_window_charged_after_the_response_matches_c)
{
	compare_response(mk(LIM_SLIDING_WINDOW, 5, HOUR, 0), "sw-response");
}

Test(script, sliding_log_charged_after_the_response_matches_c)
{
	compare_response(mk(LIM_SLIDING_LOG, 5, HOUR, 0), "log-response");
}

/* ---- atomicity ------------------------------------------------------------
 */

#define PROCS 8
#define CALLS 200

Test(script, concurrent_callers_get_exactly_the_limit, .timeout = 120)
{
	redisContext     *c = setup();
	struct lim_params ps[4];
	char              keys[4][128];
	int               fds[2], i, a, status, totals[4] = { 0 };
	pid_t             pid;

	ps[0] = mk(LIM_GCRA, 1, HOUR, 100);
	ps[1] = mk(LIM_FIXED_WINDOW, 100, HOUR, 0);
	ps[2] = mk(LIM_SLIDING_LOG, 100, HOUR, 0);
	ps[3] = mk(LIM_CONCURRENCY, 100, HOUR, 0);
	for (a = 0; a < 4; a++)
		unique_key(keys[a], sizeof(keys[a]), "race");
	avoid_boundary(c, &ps[1]);
	cr_assert_eq(pipe(fds), 0);
	for (i = 0; i < PROCS; i++) {
		pid = fork();
		cr_assert(pid >= 0);
		if (pid == 0) {
			redisContext *cc = connect_redis();
			int           got[4] = { 0 }, n;
			char          member[64];

			for (n = 0; n < CALLS; n++)
				for (a = 0; a < 4; a++) {
					struct chk ck = {
						&ps[a], keys[a], LIM_OP_CHECK,
						1,      0,       member
					};

					snprintf(member, sizeof(member),
					         "p%d-%d", i, n);
					got[a] += script_one(cc, &ck).allowed ==
					          1;
				}
			if (write(fds[1], got, sizeof(got)) != sizeof(got))
				_exit(2);
			_exit(0);
		}
	}
	close(fds[1]);
	for (i = 0; i < PROCS; i++) {
		int got[4];

		cr_assert_eq(read(fds[0], got, sizeof(got)), sizeof(got));
		for (a = 0; a < 4; a++)
			totals[a] += got[a];
	}
	for (i = 0; i < PROCS; i++) {
		wait(&status);
		cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	for (a = 0; a < 4; a++)
		cr_expect_eq(totals[a], 100, "%s: %d allowed",
		             lim_algo_name(ps[a].algo), totals[a]);
	redisFree(c);
}

/* ---- reserve, then settle (issue 19, item 3) ------------------------------
 * The vectors, ALGORITHMS.md style, for every algorithm that takes
 * reserve: a budget of 1000 (per day, or a 1d window), a lease of 1 h. A
 * CHECK with a member reserves; a FORCE with one settles (remaining = the
 * reservation found, -1 for none); a CHECK of 0 without one peeks.
 *
 * | step | op     | cost | id    | allowed | remaining             |
 * |------|--------|------|-------|---------|-----------------------|
 * | 1-3  | CHECK  | 300  | r1-r3 | 1       | 700, 400, 100         |
 * | 4    | CHECK  | 300  | r4    | 0       | 100 (900 held)        |
 * | 5    | FORCE  | 100  | r1    | 1       | 300 (held; 200 back)  |
 * | 6    | peek   |      |       | 1       | 300                   |
 * | 7    | FORCE  | 0    | r2    | 1       | 300 (all 300 back)    |
 * | 8    | peek   |      |       | 1       | 600                   |
 * | 9    | FORCE  | 450  | r3    | 1       | 300 (150 charged)     |
 * | 10   | peek   |      |       | 1       | 450                   |
 * | 11   | FORCE  | 450  | r3    | 1       | -1 (repeat: nothing)  |
 * | 12   | FORCE  | 10   | never | 1       | -1                    |
 * | 13   | peek   |      |       | 1       | 450                   |
 * | 14   | CHECK  | 10   | r5    | 1       | 440                   |
 * | 15   | FORCE  | -1   | r5    | 1       | 10 (bad cost: stands) |
 * | 16   | peek   |      |       | 1       | 440                   |
 * | 17   | FORCE  | 0    | r5    | 1       | -1                    |
 */
struct rstep {
	int         op;
	int64_t     cost;
	const char *id;
	int         allowed;
	int64_t     remaining;
};

static const struct rstep reserve_vectors[] = {
	{ LIM_OP_CHECK, 300, "r1", 1, 700 },
	{ LIM_OP_CHECK, 300, "r2", 1, 400 },
	{ LIM_OP_CHECK, 300, "r3", 1, 100 },
	{ LIM_OP_CHECK, 300, "r4", 0, 100 },
	{ LIM_OP_FORCE, 100, "r1", 1, 300 },
	{ LIM_OP_CHECK, 0, NULL, 1, 300 },
	{ LIM_OP_FORCE, 0, "r2", 1, 300 },
	{ LIM_OP_CHECK, 0, NULL, 1, 600 },
	{ LIM_OP_FORCE, 450, "r3", 1, 300 },
	{ LIM_OP_CHECK, 0, NULL, 1, 450 },
	{ LIM_OP_FORCE, 450, "r3", 1, -1 },
	{ LIM_OP_FORCE, 10, "never", 1, -1 },
	{ LIM_OP_CHECK, 0, NULL, 1, 450 },
	{ LIM_OP_CHECK, 10, "r5", 1, 440 },
	{ LIM_OP_FORCE, -1, "r5", 1, 10 },
	{ LIM_OP_CHECK, 0, NULL, 1, 440 },
	{ LIM_OP_FORCE, 0, "r5", 1, -1 },
};

/* One check of <ck> in the local tier <l> at <now> (the C twin of the
 * script's reserve and settle: local.c, lim_reserve.c). */
static struct lim_result
local_one(struct local *l, const struct chk *ck, int64_t now)
{
	struct local_check lc;

	memset(&lc, 0, sizeof(lc));
	lc.params = ck->p;
	lc.key = ck->key;
	lc.keylen = strlen(ck->key);
	lc.op = ck->op;
	lc.cost = ck->cost;
	lc.member = ck->member;
	lc.memberlen = ck->member ? strlen(ck->member) : 0;
	local_eval_request(l, &lc, 1, now);
	return lc.result;
}

/* The vectors through the script and, at the script's TIME, the local
 * tier: both must give the table's results, and the same five. */
static void
reserve_run(struct lim_params p, const char *name)
{
	redisContext *c = setup();
	struct local *l = local_new(16);
	char          key[96];
	int64_t       t1, t2, tol = 1;

	p.reserve_lease_us = HOUR;
	unique_key(key, sizeof(key), name);
	if (p.algo == LIM_FIXED_WINDOW || p.algo == LIM_SLIDING_WINDOW)
		avoid_boundary(c, &p);
	for (int i = 0; i < ARRAY_LEN(reserve_vectors); i++) {
		const struct rstep *v = &reserve_vectors[i];
		struct chk          ck = { &p, key, v->op, v->cost, 0, v->id };
		struct lim_result   r, tw;

		t1 = redis_time(c);
		r = script_one(c, &ck);
		t2 = redis_time(c);
		tol += t2 - t1;
		tw = local_one(l, &ck, t1);
		cr_expect_eq(r.allowed, v->allowed, "%s step %d: allowed %d",
		             name, i + 1, r.allowed);
		cr_expect_eq(r.remaining, v->remaining,
		             "%s step %d: remaining %" PRId64 ", want %" PRId64,
		             name, i + 1, r.remaining, v->remaining);
		cr_expect_eq(tw.allowed, r.allowed,
		             "%s step %d: local tier allowed %d, script %d",
		             name, i + 1, tw.allowed, r.allowed);
		cr_expect_eq(tw.remaining, r.remaining,
		             "%s step %d: local tier remaining %" PRId64
		             ", script %" PRId64,
		             name, i + 1, tw.remaining, r.remaining);
		cr_expect(near(tw.retry_after_us, r.retry_after_us, tol) &&
		                  near(tw.next_us, r.next_us, tol) &&
		                  near(tw.full_us, r.full_us, tol),
		          "%s step %d: local tier times %" PRId64 " %" PRId64
		          " %" PRId64 ", script %" PRId64 " %" PRId64
		          " %" PRId64,
		          name, i + 1, tw.retry_after_us, tw.next_us,
		          tw.full_us, r.retry_after_us, r.next_us, r.full_us);
	}
	local_free(l);
	redisFree(c);
}

Test(script, reserve_settle_vectors_gcra)
{
	reserve_run(mk(LIM_GCRA, 1000, 86400 * S, 1000), "rsv-gcra");
}

Test(script, reserve_settle_vectors_token_bucket)
{
	reserve_run(mk(LIM_TOKEN_BUCKET, 1000, 86400 * S, 1000), "rsv-tb");
}

Test(script, reserve_settle_vectors_fixed_window)
{
	reserve_run(mk(LIM_FIXED_WINDOW, 1000, 86400 * S, 0), "rsv-fw");
}

Test(script, reserve_settle_vectors_sliding_window)
{
	reserve_run(mk(LIM_SLIDING_WINDOW, 1000, 86400 * S, 0), "rsv-sw");
}

/* A reservation in a request that another check vetoes is neither charged
 * nor recorded: its settle finds nothing. */
Test(script, a_vetoed_reservation_leaves_no_record)
{
	redisContext     *c = setup();
	struct lim_params p = mk(LIM_GCRA, 1000, 86400 * S, 1000);
	struct lim_params q = mk(LIM_GCRA, 1, 86400 * S, 1);
	char              a[96], b[96];
	struct chk        req[2] = { { &p, a, LIM_OP_CHECK, 300, 0, "v1" },
		                     { &q, b, LIM_OP_CHECK, 2, 0, NULL } };
	struct call       k;
	struct lim_result out[2];

	p.reserve_lease_us = HOUR;
	unique_key(a, sizeof(a), "rsv-veto-a");
	unique_key(b, sizeof(b), "rsv-veto-b");
	call_begin(&k, 1);
	call_request(&k, req, 2);
	cr_assert_eq(call_send(c, &k, out, 2), 2);
	cr_assert_eq(out[0].allowed, 1);
	cr_assert_neq(out[1].allowed, 1, "the second check vetoes");
	{
		struct chk        settle = { &p, a, LIM_OP_FORCE, 0, 0, "v1" };
		struct chk        peek = { &p, a, LIM_OP_CHECK, 0, 0, NULL };
		struct lim_result r = script_one(c, &settle);

		cr_expect_eq(r.remaining, -1, "no record");
		r = script_one(c, &peek);
		cr_expect_eq(r.remaining, 1000, "nothing charged");
	}
	{ /* the local tier, the same request: the same */
		struct local      *l = local_new(16);
		struct local_check lc[2];
		int64_t            now = redis_time(c);
		struct chk         settle = { &p, a, LIM_OP_FORCE, 0, 0, "v1" };
		struct chk         peek = { &p, a, LIM_OP_CHECK, 0, 0, NULL };

		memset(lc, 0, sizeof(lc));
		for (int i = 0; i < 2; i++) {
			lc[i].params = req[i].p;
			lc[i].key = req[i].key;
			lc[i].keylen = strlen(req[i].key);
			lc[i].op = req[i].op;
			lc[i].cost = req[i].cost;
			lc[i].member = req[i].member;
			lc[i].memberlen =
				req[i].member ? strlen(req[i].member) : 0;
		}
		cr_expect_eq(local_eval_request(l, lc, 2, now), 0);
		cr_expect_eq(lc[0].result.allowed, out[0].allowed);
		cr_expect_eq(lc[1].result.allowed, out[1].allowed);
		cr_expect_eq(local_one(l, &settle, now).remaining, -1,
		             "local tier: no record");
		cr_expect_eq(local_one(l, &peek, now).remaining, 1000,
		             "local tier: nothing charged");
		local_free(l);
	}
	redisFree(c);
}

/* A settle after the rule's limit changed (reload, override) gives back
 * what its reservation took from the state, not its units re-priced at
 * the new limit; after an algorithm change (same rule, same key), nothing:
 * the units went to state the new algorithm does not keep. The script and
 * the local tier alike. */
static void
settle_after_change(const struct lim_params *p1, const struct lim_params *p2,
                    int64_t held, int64_t other, int64_t want)
{
	redisContext *c = setup();
	struct local *l = local_new(16);
	char          key[96];
	struct chk    res = { p1, key, LIM_OP_CHECK, held, 0, "c1" };
	struct chk    chg = { p2, key, LIM_OP_CHECK, other, 0, NULL };
	struct chk    settle = { p2, key, LIM_OP_FORCE, 0, 0, "c1" };
	struct chk    peek = { p2, key, LIM_OP_CHECK, 0, 0, NULL };
	int64_t       now = redis_time(c);

	unique_key(key, sizeof(key), "rsv-change");
	cr_assert_eq(script_one(c, &res).allowed, 1);
	cr_assert_eq(script_one(c, &chg).allowed, 1);
	cr_assert_eq(script_one(c, &settle).remaining, held);
	cr_expect_eq(script_one(c, &peek).remaining, want,
	             "script: %" PRId64 " left, want %" PRId64,
	             script_one(c, &peek).remaining, want);
	cr_assert_eq(local_one(l, &res, now).allowed, 1);
	cr_assert_eq(local_one(l, &chg, now).allowed, 1);
	cr_assert_eq(local_one(l, &settle, now).remaining, held);
	cr_expect_eq(local_one(l, &peek, now).remaining, want,
	             "local tier: %" PRId64 " left, want %" PRId64,
	             local_one(l, &peek, now).remaining, want);
	local_free(l);
	redisFree(c);
}

Test(script, a_settle_after_a_rate_cut_gives_back_only_what_was_held)
{
	struct lim_params g1 = mk(LIM_GCRA, 1000, 86400 * S, 1000);
	struct lim_params g2 = mk(LIM_GCRA, 100, 86400 * S, 100);

	g1.reserve_lease_us = g2.reserve_lease_us = HOUR;
	/* 10 x 86.4 s held = 1 unit of 100/d; 1 more charged; 0 spent */
	settle_after_change(&g1, &g2, 10, 1, 99);
}

Test(script, a_settle_after_an_algorithm_change_gives_back_nothing)
{
	struct lim_params t = mk(LIM_TOKEN_BUCKET, 10, 86400 * S, 10);
	struct lim_params g = mk(LIM_GCRA, 10, 86400 * S, 10);

	t.reserve_lease_us = g.reserve_lease_us = HOUR;
	settle_after_change(&t, &g, 10, 5, 5);
}

/* ---- the penalty box: the script and the local tier agree ----------------
 * A blocked key answers with its block and is charged nothing; only a
 * blocked CHECK or PEEK that is not shadow vetoes its request (a FORCE,
 * a failure counted by a response message, does not), and an offence
 * counts in a request that another blocked key vetoes. Each request goes
 * to the script and to a local tier at the script's TIME. */

/* One request of <n> checks through the script and the local tier <l>;
 * the decisions must agree. */
static void
box_both(redisContext *c, struct local *l, struct chk *ck, int n,
         struct lim_result *rs, struct lim_result *rl)
{
	struct local_check lc[4];
	struct call        k;
	int64_t            t;

	cr_assert_leq(n, 4);
	t = redis_time(c);
	call_begin(&k, 1);
	call_request(&k, ck, n);
	call_send(c, &k, rs, n);
	for (int i = 0; i < n; i++) {
		memset(&lc[i], 0, sizeof(lc[i]));
		lc[i].params = ck[i].p;
		lc[i].key = ck[i].key;
		lc[i].keylen = strlen(ck[i].key);
		lc[i].op = ck[i].op;
		lc[i].cost = ck[i].cost;
		lc[i].shadow = (ck[i].flags & LIM_FL_SHADOW) != 0;
	}
	local_eval_request(l, lc, (size_t)n, t);
	for (int i = 0; i < n; i++) {
		rl[i] = lc[i].result;
		cr_expect_eq(rs[i].allowed, rl[i].allowed,
		             "%s: script %d, local tier %d", ck[i].key,
		             rs[i].allowed, rl[i].allowed);
	}
}

Test(script, blocked_keys_charge_nothing_and_veto_as_the_local_tier)
{
	redisContext     *c = setup();
	struct local     *l = local_new(100);
	struct lim_params p = mk(LIM_GCRA, 10, S, 5);
	struct lim_params plain = mk(LIM_GCRA, 1, HOUR, 5);
	char              kk[128], ko[128], kb[128], bk[160];
	struct lim_result rs[2], rl[2];
	redisReply       *rep;

	p.block_us = HOUR;
	unique_key(kk, sizeof(kk), "box-k");
	unique_key(ko, sizeof(ko), "box-o");
	unique_key(kb, sizeof(kb), "box-b");
	for (int i = 0; i < 6; i++) { /* the 6th is k's offence */
		struct chk ck = { &p, kk, LIM_OP_CHECK, 1, 0, "" };

		box_both(c, l, &ck, 1, rs, rl);
	}
	cr_expect_eq(rs[0].retry_after_us, HOUR, "k blocked for the hour");
	{ /* a failure counted on blocked k, and one on o */
		struct chk ck[2] = { { &p, kk, LIM_OP_FORCE, 5, 0, "" },
			             { &plain, ko, LIM_OP_FORCE, 5, 0, "" } };

		box_both(c, l, ck, 2, rs, rl);
		cr_expect_eq(rs[0].allowed, 0, "k answers with its block");
	}
	{
		struct chk ck = { &plain, ko, LIM_OP_CHECK, 1, 0, "" };

		box_both(c, l, &ck, 1, rs, rl);
		cr_expect_eq(rs[0].allowed, 0,
		             "o's FORCE was charged: a blocked FORCE vetoes "
		             "nothing");
	}
	for (int i = 0; i < 5; i++) { /* b spent, not blocked */
		struct chk ck = { &p, kb, LIM_OP_CHECK, 1, 0, "" };

		box_both(c, l, &ck, 1, rs, rl);
	}
	{
		struct chk ck[2] = { { &p, kk, LIM_OP_CHECK, 1, 0, "" },
			             { &p, kb, LIM_OP_CHECK, 1, 0, "" } };

		box_both(c, l, ck, 2, rs, rl);
		cr_expect_eq(rs[1].retry_after_us, HOUR,
		             "script: b's denial is an offence");
		cr_expect_eq(rl[1].retry_after_us, HOUR,
		             "local tier: b's denial is an offence");
	}
	/* a shadow check on blocked k, once its rate has refilled: reported
	 * blocked, charged nothing */
	usleep(600000);
	for (int i = 0; i < 5; i++) {
		struct chk ck = { &p, kk, LIM_OP_CHECK, 1, LIM_FL_SHADOW, "" };

		box_both(c, l, &ck, 1, rs, rl);
		cr_expect_eq(rs[0].allowed, 0);
	}
	rep = cmd(c, "EXISTS %s", kk);
	cr_expect_eq(rep->integer, 0, "the script charged no shadow check");
	freeReplyObject(rep);
	snprintf(bk, sizeof(bk), "%s!b", kb);
	rep = cmd(c, "EXISTS %s", bk);
	cr_expect_eq(rep->integer, 1, "b's block record");
	freeReplyObject(rep);
	local_free(l);
	redisFree(c);
}

/* ---- refund.lua: a refund gives back what the charge took ----------------
 * On Redis Cluster a request whose checks span several slots is charged
 * per slot, and a slot's veto refunds the others (store_cluster.c). A
 * FORCE on a key past its burst is capped (GCRA: a TAT at most now + 2
 * tolerance; token bucket: at most -burst tokens): the refund must take
 * back only what the capped charge added, or the key comes back fresher
 * than before the vetoed request. */

extern const char lua_refund[];

/* refund.lua on the <n> checks <ck> of one request, charged with the
 * replies <r> by a call that ran at <at>, as refund_send() builds it (one
 * slot). */
static void
refund_n(redisContext *c, const struct chk *ck, const struct lim_result *r,
         int n, int64_t at)
{
	int64_t     pp[LIM_SCRIPT_PARAMS], level[4];
	char        a[4][9][32];
	const char *argv[4 + 4 + 4 * 9];
	int         argc = 0;
	redisReply *rep;

	cr_assert(n <= 4);
	argv[argc++] = "EVAL";
	argv[argc++] = lua_refund;
	argv[argc++] = n == 1 ? "1" : n == 2 ? "2" : n == 3 ? "3" : "4";
	for (int j = 0; j < n; j++)
		argv[argc++] = ck[j].key;
	for (int j = 0; j < n; j++) {
		lim_script_params(ck[j].p, pp);
		level[j] = LIM_LEVEL_NONE; /* the same key earlier: its level */
		for (int i = j - 1; i >= 0; i--)
			if (strcmp(ck[i].key, ck[j].key) == 0) {
				level[j] = level[i];
				break;
			}
		snprintf(a[j][0], 32, "%d", (int)ck[j].p->algo);
		snprintf(a[j][1], 32, "%d", ck[j].op);
		snprintf(a[j][2], 32, "%" PRId64, ck[j].cost);
		snprintf(a[j][3], 32, "%" PRId64, pp[0]);
		snprintf(a[j][4], 32, "%" PRId64, pp[1]);
		snprintf(a[j][5], 32, "%" PRId64, pp[2]);
		snprintf(a[j][6], 32, "%s", ck[j].member ? ck[j].member : "");
		snprintf(a[j][7], 32, "%" PRId64, at);
		snprintf(a[j][8], 32, "%" PRId64,
		         lim_charge_taken(ck[j].p->algo, pp, ck[j].cost, &r[j],
		                          &level[j]));
		for (int i = 0; i < 9; i++)
			argv[argc++] = a[j][i];
	}
	rep = redisCommandArgv(c, argc, argv, NULL);
	cr_assert(rep && rep->type == REDIS_REPLY_INTEGER, "refund: %s",
	          rep && rep->type == REDIS_REPLY_ERROR ? rep->str : "?");
	cr_assert_eq(rep->integer, n);
	freeReplyObject(rep);
}

static void
refund_one(redisContext *c, const struct chk *ck, const struct lim_result *r,
           int64_t at)
{
	refund_n(c, ck, r, 1, at);
}

static void
refund_restores(enum lim_algo algo, int64_t spent, int64_t force,
                const char *name)
{
	redisContext     *c = setup();
	struct lim_params p = mk(algo, 1, HOUR, 5);
	char              key[128];
	struct chk        spend = { &p, key, LIM_OP_CHECK, spent, 0, "" };
	struct chk        ck = { &p, key, LIM_OP_FORCE, force, 0, "" };
	struct chk        peek = { &p, key, LIM_OP_CHECK, 0, 0, "" };
	struct lim_result r;
	int64_t           before, at;

	unique_key(key, sizeof(key), name);
	if (spent > 0)
		cr_assert_eq(script_one(c, &spend).allowed, 1);
	before = script_one(c, &peek).remaining;
	cr_assert_eq(before, 5 - spent);
	r = script_one(c, &ck); /* charged (FORCE), then vetoed elsewhere */
	at = last_now;
	cr_expect_eq(script_one(c, &peek).remaining, 0, "%s: charged", name);
	refund_one(c, &ck, &r, at);
	cr_expect_eq(
		script_one(c, &peek).remaining, before,
		"%s: FORCE %" PRId64 " after %" PRId64
		" spent, refunded: want remaining %" PRId64 ", got %" PRId64,
		name, force, spent, before, script_one(c, &peek).remaining);
	redisFree(c);
}

Test(script, refund_of_a_capped_gcra_force_restores_the_key)
{
	refund_restores(LIM_GCRA, 5, 20, "refund-gcra-full");
	refund_restores(LIM_GCRA, 3, 20, "refund-gcra-3");
	refund_restores(LIM_GCRA, 0, 20, "refund-gcra-fresh");
	refund_restores(LIM_GCRA, 2, 3, "refund-gcra-uncapped");
}

Test(script, refund_of_a_capped_leaky_force_restores_the_key)
{
	refund_restores(LIM_LEAKY_BUCKET, 5, 20, "refund-leaky-full");
	refund_restores(LIM_LEAKY_BUCKET, 0, 20, "refund-leaky-fresh");
}

Test(script, refund_of_a_capped_token_bucket_force_restores_the_key)
{
	refund_restores(LIM_TOKEN_BUCKET, 5, 20, "refund-tb-full");
	refund_restores(LIM_TOKEN_BUCKET, 3, 20, "refund-tb-3");
	refund_restores(LIM_TOKEN_BUCKET, 0, 20, "refund-tb-fresh");
	refund_restores(LIM_TOKEN_BUCKET, 2, 3, "refund-tb-uncapped");
}

/* Two FORCEs of one key in one request (2 of 5 spent, then 3 and 20):
 * the script charges the second on top of the first, capped at 5 more
 * (GCRA: TAT now+10h; token bucket: -5 tokens): the refund gives back
 * 3 then 5, not 3 then 8, which would leave the key fresh. */
static void
refund_same_key_twice(enum lim_algo algo, const char *name)
{
	redisContext     *c = setup();
	struct lim_params p = mk(algo, 1, HOUR, 5);
	char              key[128];
	struct chk        spend = { &p, key, LIM_OP_CHECK, 2, 0, "" };
	struct chk        ck[2] = { { &p, key, LIM_OP_FORCE, 3, 0, "" },
		                    { &p, key, LIM_OP_FORCE, 20, 0, "" } };
	struct chk        peek = { &p, key, LIM_OP_CHECK, 0, 0, "" };
	struct lim_result r[2];
	struct call       k;

	unique_key(key, sizeof(key), name);
	cr_assert_eq(script_one(c, &spend).allowed, 1);
	call_begin(&k, 1);
	call_request(&k, ck, 2);
	cr_assert_eq(call_send(c, &k, r, 2), 2);
	refund_n(c, ck, r, 2, last_now);
	cr_expect_eq(script_one(c, &peek).remaining, 3,
	             "%s: both refunded back to 3 left, got %" PRId64, name,
	             script_one(c, &peek).remaining);
	redisFree(c);
}

Test(script, refund_of_the_same_key_twice_restores_the_key)
{
	refund_same_key_twice(LIM_GCRA, "refund-twice-gcra");
	refund_same_key_twice(LIM_TOKEN_BUCKET, "refund-twice-tb");
}

/* The reply ends with the TIME the call ran at: the instant that named
 * every window it charged, which a Cluster refund undoes (store_cluster.c
 * sends it as refund.lua's <at>; a TIME read before the call named the
 * last window when a boundary passed before the script ran). W = 1 s, so
 * the instant must be the script's own to name the window exactly. */
static void
reply_names_the_window(enum lim_algo a, const char *name)
{
	redisContext     *c = setup();
	struct lim_params p = mk(a, 5, S, 0);
	char              key[96];
	struct chk        ck = { &p, key, LIM_OP_CHECK, 1, 0, "" };
	int64_t           t1, t2, st, en;
	redisReply       *r;

	unique_key(key, sizeof(key), name);
	t1 = redis_time(c);
	cr_assert_eq(script_one(c, &ck).allowed, 1);
	t2 = redis_time(c);
	cr_expect(t1 <= last_now && last_now <= t2,
	          "%s: the reply's clock %" PRId64 " is in [%" PRId64
	          ", %" PRId64 "]",
	          name, last_now, t1, t2);
	r = redisCommand(c, "HGET %s %lld", key,
	                 (long long)lim_window_bounds(&p, last_now, &st, &en));
	cr_assert_not_null(r);
	cr_expect(r->type == REDIS_REPLY_STRING && strcmp(r->str, "1") == 0,
	          "%s: the window of the reply's clock holds the charge", name);
	freeReplyObject(r);
	redisFree(c);
}

Test(script, the_reply_ends_with_the_time_that_named_the_windows)
{
	reply_names_the_window(LIM_FIXED_WINDOW, "clock-fw");
	reply_names_the_window(LIM_SLIDING_WINDOW, "clock-sw");
}

/* ---- review: reservation records across versions and malformed ones -----
 * A settle never fails its whole batch: not on a record an older (or
 * newer) script wrote, not on one another algorithm's state holds the key
 * of, not on a record it cannot parse. */

static void
set_raw(redisContext *c, const char *k, const char *v)
{
	redisReply *r = redisCommand(c, "SET %s %s PX 60000", k, v);

	cr_assert(r && r->type == REDIS_REPLY_STATUS);
	freeReplyObject(r);
}

static char *
get_raw(redisContext *c, const char *k)
{
	redisReply *r = redisCommand(c, "GET %s", k);
	char *s = r && r->type == REDIS_REPLY_STRING ? strdup(r->str) : NULL;

	freeReplyObject(r);
	return s;
}

/* An older agent's script (d5d43a2^, OLD_RATELIMIT_LUA) settles, after a
 * reload turned a token bucket into a fixed window (same rule, same key),
 * a reservation this script recorded: "<units>:0:1". */
Test(script, an_older_script_settles_a_new_token_bucket_record)
{
	const char       *path = getenv("OLD_RATELIMIT_LUA");
	struct lim_params t = mk(LIM_TOKEN_BUCKET, 10, 86400 * S, 10);
	struct lim_params f = mk(LIM_FIXED_WINDOW, 10, 86400 * S, 0);
	redisContext     *c;
	char              key[96], rk[128], newsha[64], *text, *rec;
	struct chk        res = { &t, key, LIM_OP_CHECK, 10, 0, "m1" };
	struct chk        settle = { &f, key, LIM_OP_FORCE, 0, 0, "m1" };
	struct call       k;
	struct lim_result out;
	redisReply       *r;
	FILE             *fp;
	long              n;

	if (path == NULL || env_is("SCRIPT_FCALL"))
		cr_skip_test("OLD_RATELIMIT_LUA not set (or FCALL run)");
	t.reserve_lease_us = f.reserve_lease_us = HOUR;
	c = setup();
	unique_key(key, sizeof(key), "rsv-old");
	snprintf(rk, sizeof(rk), "%s:r:m1", key);
	cr_assert_eq(script_one(c, &res).allowed, 1);
	rec = get_raw(c, rk);
	cr_log_info("record: %s", rec ? rec : "(none)");
	free(rec);
	fp = fopen(path, "r");
	cr_assert_not_null(fp);
	fseek(fp, 0, SEEK_END);
	n = ftell(fp);
	rewind(fp);
	text = calloc(1, (size_t)n + 1);
	cr_assert_eq(fread(text, 1, (size_t)n, fp), (size_t)n);
	fclose(fp);
	r = redisCommand(c, "SCRIPT LOAD %s", text);
	free(text);
	cr_assert(r && r->type == REDIS_REPLY_STRING);
	snprintf(newsha, sizeof(newsha), "%s", sha);
	snprintf(sha, sizeof(sha), "%s", r->str); /* the older script */
	freeReplyObject(r);
	call_begin(&k, 1);
	call_request(&k, &settle, 1);
	older_script = 1;
	call_send(c, &k, &out, 1); /* asserts a reply, not an error */
	older_script = 0;
	snprintf(sha, sizeof(sha), "%s", newsha);
	cr_expect_eq(out.remaining, 10, "the older script found the record");
	redisFree(c);
}

/* A settle whose record this script cannot read answers "no record" and
 * leaves the other requests of its call alone. */
static void
settle_malformed(const char *v)
{
	struct lim_params g = mk(LIM_GCRA, 10, 86400 * S, 10);
	redisContext     *c = setup();
	char              key[96], rk[128];
	struct chk        settle = { &g, key, LIM_OP_FORCE, 0, 0, "m1" };
	struct chk        other = { &g, key, LIM_OP_CHECK, 1, 0, NULL };
	struct call       k;
	struct lim_result out[2];

	g.reserve_lease_us = HOUR;
	settle.p = other.p = &g;
	unique_key(key, sizeof(key), "rsv-bad");
	snprintf(rk, sizeof(rk), "%s:r:m1", key);
	set_raw(c, rk, v);
	call_begin(&k, 2);
	call_request(&k, &settle, 1);
	call_request(&k, &other, 1);
	call_send(c, &k, out, 2); /* asserts a reply, not an error */
	cr_expect_eq(out[1].allowed, 1, "the other request is decided");
	redisFree(c);
}

Test(script, a_record_with_an_empty_index_fails_no_batch)
{
	settle_malformed("5:");
}

Test(script, a_record_with_a_word_for_index_fails_no_batch)
{
	settle_malformed("5:x");
}

/* An older agent's gcra reservation ("<units>:0", its TAT a string key),
 * settled by this script after a reload made the rule a token bucket or
 * a fixed window, before any check of the new algorithm touched the key:
 * the refund must not read the string as a hash (WRONGTYPE fails the
 * whole call). */
static void
legacy_gcra_then(enum lim_algo a)
{
	struct lim_params g = mk(LIM_GCRA, 10, 86400 * S, 10);
	struct lim_params n =
		mk(a, 10, 86400 * S, a == LIM_TOKEN_BUCKET ? 10 : 0);
	redisContext     *c = setup();
	char              key[96], rk[128];
	struct chk        charge = { &g, key, LIM_OP_CHECK, 5, 0, NULL };
	struct chk        settle = { &n, key, LIM_OP_FORCE, 0, 0, "m1" };
	struct lim_result r;

	g.reserve_lease_us = n.reserve_lease_us = HOUR;
	unique_key(key, sizeof(key), "rsv-legacy");
	snprintf(rk, sizeof(rk), "%s:r:m1", key);
	cr_assert_eq(script_one(c, &charge).allowed, 1); /* the TAT string */
	set_raw(c, rk, "5:0");                           /* older form */
	r = script_one(c, &settle); /* asserts a reply, not an error */
	cr_expect_eq(r.remaining, 5);
	redisFree(c);
}

Test(script, a_legacy_gcra_record_settled_as_a_token_bucket)
{
	legacy_gcra_then(LIM_TOKEN_BUCKET);
}

Test(script, a_legacy_gcra_record_settled_as_a_fixed_window)
{
	legacy_gcra_then(LIM_FIXED_WINDOW);
}

/* ---- a rate change (b1551ca): the units a key spent, kept -------------- */

/* A key charged 20 units at 1 ms each (1000/s burst 100: its TAT 20 ms
 * ahead), read under 1/min burst 1 (a deleted override, a lowered plan):
 * 20 units of 60 s, capped at twice the tolerance, 120 s. The denial
 * must hold after the 20 ms: read again, the key may not be fresh because
 * its TAT, kept at 1 ms, ran out at the old rate. */
Test(script, a_lowered_rate_keeps_the_units_through_denials)
{
	struct lim_params hi = mk(LIM_GCRA, 1000, S, 100);
	struct lim_params lo = mk(LIM_GCRA, 1, 60 * S, 1);
	redisContext     *c = setup();
	char              key[96];
	struct chk        spend = { &hi, key, LIM_OP_CHECK, 20, 0, NULL };
	struct chk        one = { &lo, key, LIM_OP_CHECK, 1, 0, NULL };
	struct lim_result r;

	unique_key(key, sizeof(key), "rate-lowered");
	cr_assert_eq(script_one(c, &spend).allowed, 1);
	r = script_one(c, &one);
	cr_assert_eq(r.allowed, 0, "20 units of 60 s: denied");
	cr_expect_gt(r.retry_after_us, 50 * S, "retry %" PRId64,
	             r.retry_after_us);
	usleep(60000); /* past the TAT at 1 ms a unit */
	r = script_one(c, &one);
	cr_expect_eq(r.allowed, 0, "still denied 60 ms on (retry %" PRId64 ")",
	             r.retry_after_us);
	cr_expect_gt(r.retry_after_us, 50 * S);
	redisFree(c);
}

/* The same through peeks: a rule that counts failures asks "would one
 * more pass?" with a PEEK on each request and charges only the response
 * of a failure (policy.c), so a key it denies sees nothing but peeks. */
Test(script, a_lowered_rate_keeps_the_units_through_peeks)
{
	struct lim_params hi = mk(LIM_GCRA, 1000, S, 100);
	struct lim_params lo = mk(LIM_GCRA, 1, 60 * S, 1);
	redisContext     *c = setup();
	char              key[96];
	struct chk        spend = { &hi, key, LIM_OP_FORCE, 20, 0, NULL };
	struct chk        one = { &lo, key, LIM_OP_PEEK, 1, 0, NULL };
	struct lim_result r;

	unique_key(key, sizeof(key), "rate-lowered-peek");
	script_one(c, &spend);
	r = script_one(c, &one);
	cr_assert_eq(r.allowed, 0, "20 units of 60 s: denied");
	usleep(60000); /* past the TAT at 1 ms a unit */
	r = script_one(c, &one);
	cr_expect_eq(r.allowed, 0, "still denied 60 ms on (retry %" PRId64 ")",
	             r.retry_after_us);
	cr_expect_gt(r.retry_after_us, 50 * S);
	redisFree(c);
}

/* A key FORCEd to twice the tolerance at 1/s burst 10 (20 units: TAT
 * 20 s ahead), read under 10/s burst 1: 20 units of 100 ms, capped at
 * 200 ms. Denied for 200 ms, then allowed: the spent units run out at
 * the new rate, not the old one (20 s). */
Test(script, a_raised_rate_drains_the_units_at_the_new_rate)
{
	struct lim_params slow = mk(LIM_GCRA, 1, S, 10);
	struct lim_params fast = mk(LIM_GCRA, 10, S, 1);
	redisContext     *c = setup();
	char              key[96];
	struct chk        force = { &slow, key, LIM_OP_FORCE, 20, 0, NULL };
	struct chk        one = { &fast, key, LIM_OP_CHECK, 1, 0, NULL };
	struct lim_result r;

	unique_key(key, sizeof(key), "rate-raised");
	script_one(c, &force);
	r = script_one(c, &one);
	cr_assert_eq(r.allowed, 0, "20 units of 100 ms, capped at 200 ms");
	cr_expect_leq(r.retry_after_us, 200000, "retry %" PRId64,
	              r.retry_after_us);
	usleep(400000);
	r = script_one(c, &one);
	cr_expect_eq(r.allowed, 1, "allowed 400 ms on (retry %" PRId64 ")",
	             r.retry_after_us);
	redisFree(c);
}

/* A GCRA value that is no TAT below 2^53 (an operator's SET of "inf",
 * "nan", "1e300", in either form, or an interval of "nan"): the key is
 * read as fresh, as a word is, and the call is answered. Read as a
 * number, a FORCE (a CHECK, for nan) wrote it back with a PX Redis
 * refuses, and the error failed every request of the call. */
Test(script, a_gcra_value_that_is_no_tat_fails_no_batch)
{
	struct lim_params g = mk(LIM_GCRA, 10, S, 10); /* EI 100 ms */
	redisContext     *c = setup();
	char              key[96], k2[96], v[64], w[64];
	const char       *bad[] = { "inf", "nan", "1e300", "inf.0100000",
		                    "nan.0100000", "1e300.0100000", v, w };
	int               ops[] = { LIM_OP_CHECK, LIM_OP_FORCE };
	struct call       k;
	struct lim_result out[2];

	snprintf(v, sizeof(v), "%" PRId64 ".0nan",
	         (int64_t)(redis_time(c) + HOUR));
	snprintf(w, sizeof(w), "%" PRId64 ".0inf",
	         (int64_t)(redis_time(c) + HOUR));
	for (int i = 0; i < ARRAY_LEN(bad); i++)
		for (int j = 0; j < ARRAY_LEN(ops); j++) {
			struct chk a = { &g, key, ops[j], 3, 0, NULL };
			struct chk b = { &g, k2, LIM_OP_CHECK, 1, 0, NULL };

			unique_key(key, sizeof(key), "no-tat");
			unique_key(k2, sizeof(k2), "no-tat-other");
			set_raw(c, key, bad[i]);
			cr_log_info("%s, op %d", bad[i], ops[j]);
			call_begin(&k, 2);
			call_request(&k, &a, 1);
			call_request(&k, &b, 1);
			call_send(c, &k, out, 2); /* asserts a reply */
			cr_expect_eq(out[0].allowed, 1, "%s: read as fresh", bad[i]);
			cr_expect_eq(out[1].allowed, 1, "the other request");
		}
	redisFree(c);
}

/* refund.lua on such a value: the refund is answered. */
Test(script, a_refund_on_a_gcra_value_that_is_no_tat_is_answered)
{
	struct lim_params g = mk(LIM_GCRA, 10, S, 10);
	redisContext     *c = setup();
	char              key[96];
	char              v[64];
	const char       *bad[] = { "inf", "nan", "inf.0100000", "nan.0100000",
		                    "5.0nan", v };
	struct chk        ck = { &g, key, LIM_OP_CHECK, 1, 0, "" };
	struct lim_result r = { .allowed = 1, .full_us = 100000 };

	snprintf(v, sizeof(v), "%" PRId64 ".0inf",
	         (int64_t)(redis_time(c) + HOUR));
	for (int i = 0; i < ARRAY_LEN(bad); i++) {
		unique_key(key, sizeof(key), "no-tat-refund");
		set_raw(c, key, bad[i]);
		cr_log_info("%s", bad[i]);
		/* asserts an integer reply */
		refund_one(c, &ck, &r, redis_time(c));
	}
	redisFree(c);
}

/* refund.lua on a TAT kept at another interval (another agent's rate in
 * between) gives back the units taken at that interval, rounded down:
 * 23452 µs taken at 166 µs a unit is 122063421686746.98 µs at 10 days a
 * unit, and floor(23452 / 166 * 864000000000) in doubles is one more. */
Test(script, a_refund_at_another_interval_rounds_down)
{
	struct lim_params g = mk(LIM_GCRA, 6000, S, 10); /* EI 166 µs */
	redisContext     *c = setup();
	char              key[96], v[64], tat[32], want[64], *got;
	int64_t           pp[LIM_SCRIPT_PARAMS], t;
	char              a[6][32];
	const char       *argv[3 + 1 + 9];
	redisReply       *rep;

	lim_script_params(&g, pp);
	cr_assert_eq(pp[0], 166);
	unique_key(key, sizeof(key), "refund-ei");
	t = redis_time(c) + 200000000000000LL; /* 2e14 µs ahead */
	snprintf(tat, sizeof(tat), "%" PRId64, t);
	snprintf(v, sizeof(v), "%s.0864000000000", tat);
	set_raw(c, key, v);
	snprintf(a[0], 32, "%d", (int)LIM_GCRA);
	snprintf(a[1], 32, "%" PRId64, pp[0]);
	snprintf(a[2], 32, "%" PRId64, pp[1]);
	snprintf(a[3], 32, "%" PRId64, pp[2]);
	snprintf(a[4], 32, "%" PRId64, redis_time(c));
	snprintf(a[5], 32, "%d", 23452);
	argv[0] = "EVAL";
	argv[1] = lua_refund;
	argv[2] = "1";
	argv[3] = key;
	argv[4] = a[0];
	argv[5] = "0"; /* CHECK */
	argv[6] = "142";
	argv[7] = a[1];
	argv[8] = a[2];
	argv[9] = a[3];
	argv[10] = "";
	argv[11] = a[4];
	argv[12] = a[5];
	rep = redisCommandArgv(c, 13, argv, NULL);
	cr_assert(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1,
	          "refund: %s",
	          rep && rep->type == REDIS_REPLY_ERROR ? rep->str : "?");
	freeReplyObject(rep);
	snprintf(want, sizeof(want), "%" PRId64 ".0864000000000",
	         (int64_t)(t - 122063421686746LL));
	got = get_raw(c, key);
	cr_expect_str_eq(got ? got : "(none)", want);
	free(got);
	redisFree(c);
}

/* Two requests of one key in one call under two rates (a plan, an
 * override or a reload changed it between them: the agent batches
 * requests, each with its own rule): the second reads the TAT the first
 * wrote in this call at the first's interval, as it would read it from
 * Redis. 20 units at 1 ms, read under 1/min, are 120 s owed (capped). */
Test(script, a_second_rate_in_one_call_reads_the_units_the_first_charged)
{
	struct lim_params hi = mk(LIM_GCRA, 1000, S, 100);
	struct lim_params lo = mk(LIM_GCRA, 1, 60 * S, 1);
	redisContext     *c = setup();
	char              key[96];
	struct chk        spend = { &hi, key, LIM_OP_CHECK, 20, 0, NULL };
	struct chk        one = { &lo, key, LIM_OP_CHECK, 1, 0, NULL };
	struct call       k;
	struct lim_result out[2];

	unique_key(key, sizeof(key), "rate-in-call");
	call_begin(&k, 2);
	call_request(&k, &spend, 1);
	call_request(&k, &one, 1);
	call_send(c, &k, out, 2);
	cr_assert_eq(out[0].allowed, 1);
	cr_expect_eq(out[1].allowed, 0, "20 units of 60 s: denied");
	cr_expect_gt(out[1].retry_after_us, 50 * S, "retry %" PRId64,
	             out[1].retry_after_us);
	/* and the other way: 20 units at 1 ms each read as 20 ms */
	unique_key(key, sizeof(key), "rate-in-call-back");
	one.op = LIM_OP_FORCE;
	spend.op = LIM_OP_CHECK;
	spend.cost = 1;
	call_begin(&k, 2);
	call_request(&k, &one, 1);
	call_request(&k, &spend, 1);
	call_send(c, &k, out, 2);
	cr_expect_eq(out[1].allowed, 1, "one unit of 60 s is 1 ms at 1000/s");
	cr_expect_eq(out[1].remaining, 98, "remaining %" PRId64,
	             out[1].remaining);
	redisFree(c);
}

/* On Redis Cluster a reservation charged in one slot of a request whose
 * other slot failed is undone by refund.lua (store_cluster.c); the same
 * request may also be settled, at 0 by the agent when it refused it, or
 * by HAProxy's settle when a fail: open rule let it pass: whichever comes
 * first gives the units back, the other must not give them again. The
 * settle deletes the record; refund.lua used to refund the charge anyway,
 * and the key came back fresher than before the request (a tenant could
 * spend its reservation twice). Here 200 spent, 300 reserved, the settle
 * at 0, then refund.lua: 800 left, not 1000. */
static void
settled_then_refunded(struct lim_params p, const char *name)
{
	redisContext     *c = setup();
	char              key[96];
	struct chk        spend = { &p, key, LIM_OP_CHECK, 200, 0, NULL };
	struct chk        rsv = { &p, key, LIM_OP_CHECK, 300, 0, "d1" };
	struct chk        settle = { &p, key, LIM_OP_FORCE, 0, 0, "d1" };
	struct chk        peek = { &p, key, LIM_OP_CHECK, 0, 0, NULL };
	struct lim_result r;
	int64_t           at;

	p.reserve_lease_us = HOUR;
	unique_key(key, sizeof(key), name);
	cr_assert_eq(script_one(c, &spend).allowed, 1);
	r = script_one(c, &rsv);
	at = last_now;
	cr_assert_eq(r.allowed, 1);
	cr_assert_eq(script_one(c, &settle).remaining, 300, "%s: held", name);
	cr_assert_eq(script_one(c, &peek).remaining, 800, "%s: settled", name);
	refund_one(c, &rsv, &r, at);
	cr_expect_eq(script_one(c, &peek).remaining, 800,
	             "%s: refunded once, not twice", name);
	redisFree(c);
}

Test(script, a_settled_reservation_is_not_refunded_again)
{
	settled_then_refunded(mk(LIM_GCRA, 1000, 86400 * S, 1000), "sr-gcra");
	settled_then_refunded(mk(LIM_TOKEN_BUCKET, 1000, 86400 * S, 1000),
	                      "sr-tb");
	settled_then_refunded(mk(LIM_FIXED_WINDOW, 1000, 86400 * S, 0),
	                      "sr-fw");
	settled_then_refunded(mk(LIM_SLIDING_WINDOW, 1000, 86400 * S, 0),
	                      "sr-sw");
}
