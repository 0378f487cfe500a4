/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The request path (req.c, with reqpool, decide, the near-cache and the
 * local tier) against a fake store plugged in through the operations table
 * (store_new_with_ops): a HELLO and NOTIFYs go in at one end of a socket
 * pair, through a real conn, and the ACK's variables come out at the
 * other. The fake answers each call allowed, denied, with an error, late,
 * or never, or is down; it answers from a timer, as a link would.
 *
 * Not here: the script and Redis (tests/integration), HAProxy
 * (tests/e2e), the server's workers and accept loop.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ev.h>

#include "conn.h"
#include "local.h"
#include "log.h"
#include "metrics.h"
#include "nearcache.h"
#include "plancache.h"
#include "policy.h"
#include "req.h"
#include "reqpool.h"
#include "store.h"
#include "util.h"

/* ---- the fake store ----------------------------------------------------- */

enum fake_mode {
	FAKE_ANSWER = 0, /* every check answered (see fake_result) */
	FAKE_ERROR,      /* every call fails (STORE_EIO) */
	FAKE_NEVER,      /* calls are taken, never answered */
	FAKE_DOWN,       /* submit refuses (STORE_EDOWN) */
};

#define FAKE_MAX 64

struct fake_call {
	struct store_req *sr;
	uint32_t          gen; /* as queued: a later one is stale */
	ev_timer          timer;
	struct fake      *f;
};

struct fake {
	struct ev_loop *loop;
	enum fake_mode  mode;
	double          delay_s; /* from the flush to the answer */
	struct {
		const char       *in_key; /* keys holding this */
		struct lim_result res;    /* are answered this */
	} says[4];
	int               nsays;
	int               submits, releases, flushes, cancels, timeouts;
	const char       *rel_key;   /* releases of keys holding this */
	int               rel_key_n; /* ... counted here */
	int               answered, stale;
	int               nqueued, ncalls;
	struct store_req *queued[FAKE_MAX];
	struct fake_call  calls[FAKE_MAX];
};

/* The answer to <c>: the first of says[] whose text its key holds, or
 * allowed with 5 left and 1 s to the next unit. */
static struct lim_result
fake_result(const struct fake *f, const struct check *c)
{
	for (int i = 0; i < f->nsays; i++)
		if (memmem(c->key, c->keylen, f->says[i].in_key,
		           strlen(f->says[i].in_key)) != NULL)
			return f->says[i].res;
	return (struct lim_result){ 1, 5, 0, 1000000, 1000000 };
}

static void
fake_answer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct fake_call *call =
		(struct fake_call *)((char *)t -
	                             offsetof(struct fake_call, timer));
	struct store_req *sr = call->sr;
	struct fake      *f = call->f;

	call->sr = NULL;
	if (sr->gen != call->gen) { /* given up on: dropped, as reqq does */
		f->stale++;
		return;
	}
	f->answered++;
	if (f->mode == FAKE_ERROR) {
		sr->cb(sr, STORE_EIO);
		return;
	}
	for (int j = 0; j < sr->n; j++) {
		int i = sr->index[j];

		sr->results[i] = fake_result(f, &sr->checks[i]);
	}
	sr->cb(sr, STORE_OK);
}

static int
f_submit(void *be, struct store_req *sr)
{
	struct fake *f = be;

	f->submits++;
	for (int j = 0; j < sr->n; j++) {
		const struct check *c = &sr->checks[sr->index[j]];

		f->releases += c->op == LIM_OP_RELEASE;
		if (c->op == LIM_OP_RELEASE && f->rel_key != NULL &&
		    memmem(c->key, c->keylen, f->rel_key, strlen(f->rel_key)) !=
		            NULL)
			f->rel_key_n++;
	}
	if (f->mode == FAKE_DOWN)
		return STORE_EDOWN;
	cr_assert_lt(f->nqueued, FAKE_MAX);
	f->queued[f->nqueued++] = sr;
	return STORE_OK;
}

static void
f_flush(void *be)
{
	struct fake *f = be;

	f->flushes++;
	for (int i = 0; i < f->nqueued; i++) {
		struct fake_call *call;

		if (f->mode == FAKE_NEVER)
			continue;
		cr_assert_lt(f->ncalls, FAKE_MAX);
		call = &f->calls[f->ncalls++];
		call->sr = f->queued[i];
		call->gen = f->queued[i]->gen;
		call->f = f;
		ev_timer_init(&call->timer, fake_answer_cb, f->delay_s, 0.);
		ev_timer_start(f->loop, &call->timer);
	}
	f->nqueued = 0;
}

static int
f_hget(void *be, const char *hash, const char *field, size_t len,
       store_value_cb *cb, void *arg)
{
	cb(arg, NULL, 0, 0);
	return 0;
}

static void
f_cancel(void *be, struct store_req *sr)
{
	struct fake *f = be;

	f->cancels++;
	for (int i = 0; i < f->nqueued; i++)
		if (f->queued[i] == sr)
			f->queued[i--] = f->queued[--f->nqueued];
}

static int
f_up(const void *be)
{
	return ((const struct fake *)be)->mode != FAKE_DOWN;
}

static void
f_timeout(void *be)
{
	((struct fake *)be)->timeouts++;
}

static void
f_free(void *be)
{
	struct fake *f = be;

	for (int i = 0; i < f->ncalls; i++)
		ev_timer_stop(f->loop, &f->calls[i].timer);
}

static const struct store_ops fake_ops = {
	.submit = f_submit,
	.flush = f_flush,
	.hget = f_hget,
	.cancel = f_cancel,
	.up = f_up,
	.note_timeout = f_timeout,
	.free = f_free,
};

/* ---- the worker around the request path --------------------------------- */

static struct {
	struct ev_loop    *loop;
	ev_prepare         flush;
	struct fake        fake;
	struct req_env     env;
	struct req_shared  shared;
	struct conn       *c;
	struct conn_budget budget; /* the worker's */
	struct conn       *c2;     /* a second conn of the worker, or NULL */
	int                peer2;
	int                dirty;
	int                peer; /* HAProxy's end of the socket pair */
	uint64_t           fid;
	char               in[1 << 16]; /* read from the agent, unparsed */
	size_t             inlen;
} h;

static int
on_request(void *arg, struct conn *c, const struct spop_frame *f, int *status)
{
	return req_start(&h.env, c, f, status);
}

static void
on_output(void *arg, struct conn *c)
{
	if (c->dirty)
		return;
	c->dirty = 1;
	conn_ref(c);
}

static void
on_close(void *arg, struct conn *c)
{
}

static const struct conn_cbs cbs = {
	.on_request = on_request,
	.on_output = on_output,
	.on_close = on_close,
};

/* The server's flush_cb: the store's queue, then the conn's output. */
static void
flush_cb(struct ev_loop *loop, ev_prepare *p, int revents)
{
	store_flush(h.env.store);
	if (h.c->dirty) {
		h.c->dirty = 0;
		conn_flush(h.c);
		conn_unref(h.c);
	}
	if (h.c2 != NULL && h.c2->dirty) {
		h.c2->dirty = 0;
		conn_flush(h.c2);
		conn_unref(h.c2);
	}
}

static void
write_all(const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(h.peer, buf, len);

		cr_assert(n > 0 || errno == EINTR, "write: %s",
		          strerror(errno));
		if (n > 0) {
			buf += n;
			len -= (size_t)n;
		}
	}
}

/* Runs the loop until a whole frame has come from the agent, or 3 s.
 * Returns its size (into h.in), or 0. */
static int
next_frame(struct spop_frame *f, double wait_s)
{
	int64_t until = util_clock_us() + (int64_t)(wait_s * 1e6);
	int     status;

	for (;;) {
		int n = spop_decode_frame(h.in, h.inlen, 1 << 16, f, &status);
		ssize_t got;

		cr_assert_neq(n, -1, "a bad frame from the agent");
		if (n > 0)
			return n;
		if (util_clock_us() >= until)
			return 0;
		ev_run(h.loop, EVRUN_NOWAIT);
		got = read(h.peer, h.in + h.inlen, sizeof(h.in) - h.inlen);
		if (got > 0)
			h.inlen += (size_t)got;
		else
			usleep(200);
	}
}

static void
drop_frame(int n)
{
	memmove(h.in, h.in + n, h.inlen - (size_t)n);
	h.inlen -= (size_t)n;
}

/* The max-frame-size the next start() announces; 0: HAProxy's 16380. */
static uint32_t hello_frame;

static void
hello(void)
{
	char               buf[256];
	struct spop_writer w;
	struct spop_frame  f;
	int                n;

	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_HAPROXY_HELLO, 0, 0);
	spop_w_kv_str(&w, "supported-versions", "2.0", 3);
	spop_w_kv_uint32(&w, "max-frame-size",
	                 hello_frame ? hello_frame : 16380);
	spop_w_kv_str(&w, "capabilities", "pipelining", 10);
	n = spop_w_end(&w);
	cr_assert_gt(n, 0);
	write_all(buf, (size_t)n);
	n = next_frame(&f, 3.);
	cr_assert_gt(n, 0, "no AGENT-HELLO");
	cr_assert_eq(f.type, SPOP_FRM_AGENT_HELLO);
	drop_frame(n);
	cr_assert_eq(h.c->state, CONN_ST_READY);
}

static char policy_path[64];

static struct policy *
load_policy(const char *yaml)
{
	char          *err = NULL, *warn = NULL;
	struct policy *p;
	FILE          *fp;
	int            fd;

	snprintf(policy_path, sizeof(policy_path), "/tmp/test_req.XXXXXX");
	fd = mkstemp(policy_path);
	cr_assert(fd >= 0);
	fp = fdopen(fd, "w");
	fputs("processing_timeout: 3s\n", fp); /* HAProxy's, above redis's */
	fputs(yaml, fp);
	fclose(fp);
	p = policy_load_with_warnings(policy_path, &err, &warn);
	unlink(policy_path);
	cr_assert_not_null(p, "policy:\n%s", err ? err : "");
	free(warn);
	return p;
}

/* A worker with <yaml>'s policy, the fake store and one ready conn. */
static void
start(const char *yaml)
{
	struct conn_opts o = { .peer = "test", .idle_us = 30000000 };
	struct policy   *p = load_policy(yaml);
	int              sv[2];

	log_level = LOG_ERROR;
	signal(SIGPIPE, SIG_IGN); /* as main.c: a peer gone is EPIPE */
	memset(&h, 0, sizeof(h));
	h.loop = ev_loop_new(EVFLAG_AUTO);
	h.fake.loop = h.loop;
	pthread_mutex_init(&h.shared.shadow_lock, NULL);
	h.shared.shadow_seen = nearcache_new();
	h.env.loop = h.loop;
	h.env.m = metrics_worker_new();
	h.env.store = store_new_with_ops(&fake_ops, &h.fake);
	h.env.plans = plancache_new(h.env.store);
	h.env.near = nearcache_new();
	h.env.local = local_new(p->local_max_keys);
	h.env.shared = &h.shared;
	h.env.pin = policy_pin_new(p);
	conn_budget_init(&h.budget, p->max_inflight);
	policy_unref(p);
	h.env.pool = req_pool_new(h.loop, h.env.m);
	ev_prepare_init(&h.flush, flush_cb);
	ev_prepare_start(h.loop, &h.flush);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv),
	             0);
	h.peer = sv[1];
	o.m = h.env.m;
	o.budget = &h.budget;
	h.c = conn_new(h.loop, sv[0], &cbs, NULL, &o);
	conn_ref(h.c); /* the harness's, as the server's registry: h.c
	                * outlives a close by the peer until stop() */
	hello();
}

/* The ACK's variables; -1 for those absent. */
struct ack {
	int64_t status, retry_after, limit, remaining, reset;
	int64_t degraded, shadow, release;
	char    policy[POLICY_NAME_MAX + 1];
	char    ratelimit[256];
	double  after_s; /* from the NOTIFY */
};

static void
ack_var(struct ack *a, const struct spop_str *name, const struct spop_data *v)
{
	static const char *ints[] = { "status",    "retry_after", "limit",
		                      "remaining", "reset",       "degraded",
		                      "shadow",    "release" };
	int64_t           *dst[] = { &a->status,    &a->retry_after, &a->limit,
		                     &a->remaining, &a->reset,       &a->degraded,
		                     &a->shadow,    &a->release };
	char              *s = NULL;

	for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
		if (name->len == strlen(ints[i]) &&
		    memcmp(name->ptr, ints[i], name->len) == 0)
			*dst[i] = v->v.i;
	if (name->len == 6 && memcmp(name->ptr, "policy", 6) == 0)
		s = a->policy;
	if (name->len == 9 && memcmp(name->ptr, "ratelimit", 9) == 0)
		s = a->ratelimit;
	if (s != NULL) {
		cr_assert_lt(v->v.str.len, s == a->policy
		                                   ? sizeof(a->policy)
		                                   : sizeof(a->ratelimit));
		memcpy(s, v->v.str.ptr, v->v.str.len);
		s[v->v.str.len] = '\0';
	}
}

static void
ack_decode(const struct spop_frame *f, struct ack *a)
{
	struct spop_iter it = { f->payload, f->payload + f->len };
	struct spop_str  name;
	struct spop_data v;
	int              action, scope, status, rc;

	memset(a, 0, sizeof(*a));
	a->status = a->retry_after = a->limit = a->remaining = -1;
	a->reset = a->degraded = a->shadow = a->release = -1;
	while ((rc = spop_next_action(&it, &action, &scope, &name, &v,
	                              &status)) == 1)
		ack_var(a, &name, &v);
	cr_assert_eq(rc, 0, "a bad ACK");
}

/* Sends the NOTIFY of message <msg> with string args (name, value pairs,
 * NULL-terminated). */
static uint64_t
notify(const char *msg, ...)
{
	const char        *args[2 * SPOP_MAX_ARGS];
	char               buf[1024];
	struct spop_writer w;
	va_list            ap;
	int                n = 0, len;

	va_start(ap, msg);
	while ((args[n] = va_arg(ap, const char *)) != NULL)
		n++;
	va_end(ap);
	cr_assert_eq(n % 2, 0);
	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_NOTIFY, 1, ++h.fid);
	spop_w_message(&w, msg, n / 2);
	for (int i = 0; i < n; i += 2) {
		spop_w_name(&w, args[i], strlen(args[i]));
		spop_w_str(&w, args[i + 1], strlen(args[i + 1]));
	}
	len = spop_w_end(&w);
	cr_assert_gt(len, 0);
	write_all(buf, (size_t)len);
	return h.fid;
}

/* The ACK of frame <fid>, within <wait_s>. */
static struct ack
ack_within(uint64_t fid, double wait_s)
{
	int64_t           t0 = util_clock_us();
	struct spop_frame f;
	struct ack        a;
	int               n = next_frame(&f, wait_s);

	cr_assert_gt(n, 0, "no ACK within %.1f s", wait_s);
	cr_assert_eq(f.type, SPOP_FRM_ACK);
	cr_assert_eq(f.frame_id, fid, "the ACK answers its NOTIFY");
	ack_decode(&f, &a);
	a.after_s = (double)(util_clock_us() - t0) / 1e6;
	drop_frame(n);
	return a;
}

/* Sends a NOTIFY and waits for its ACK. */
#define ASK(...) ack_within(notify(__VA_ARGS__, NULL), 3.)

static void
no_more_frames(double wait_s)
{
	struct spop_frame f;

	cr_assert_eq(next_frame(&f, wait_s), 0, "one ACK per NOTIFY");
}

/* Runs the loop for <s> seconds, reading nothing. */
static void
run_for(double s)
{
	int64_t until = util_clock_us() + (int64_t)(s * 1e6);

	while (util_clock_us() < until) {
		ev_run(h.loop, EVRUN_NOWAIT);
		usleep(200);
	}
}

static void
stop(void)
{
	struct conn *c = h.c;

	if (c == NULL)
		return;
	if (h.c2 != NULL) {
		if (h.c2->dirty) {
			h.c2->dirty = 0;
			conn_unref(h.c2);
		}
		conn_abort(h.c2);
		conn_unref(h.c2);
		close(h.peer2);
		h.c2 = NULL;
	}
	if (c->dirty) {
		c->dirty = 0;
		conn_unref(c);
	}
	conn_abort(c);
	conn_unref(c);           /* the harness's reference (start()) */
	store_free(h.env.store); /* as worker_deinit does */
	h.env.store = NULL;
	reqpool_stop(h.env.pool);
	req_pool_free(&h.env);
	plancache_free(h.env.plans);
	nearcache_free(h.env.near);
	local_free(h.env.local);
	policy_pin_retire(h.env.pin);
	nearcache_free(h.shared.shadow_seen);
	pthread_mutex_destroy(&h.shared.shadow_lock);
	if (h.peer >= 0)
		close(h.peer);
	ev_loop_destroy(h.loop);
	h.c = NULL;
}

/* Keys holding <in_key> are answered <res> from now on. */
static void
fake_says(const char *in_key, int allowed, int64_t remaining, int64_t retry_us,
          int64_t next_us)
{
	cr_assert_lt(h.fake.nsays, 4);
	h.fake.says[h.fake.nsays].in_key = in_key;
	h.fake.says[h.fake.nsays++].res =
		(struct lim_result){ allowed, remaining, retry_us, next_us,
		                     next_us };
}

static void
fake_denies(const char *in_key, int64_t retry_us)
{
	fake_says(in_key, 0, 0, retry_us, retry_us);
}

TestSuite(req, .fini = stop, .timeout = 30);

/* Two Redis rules on one message, both GCRA burst 10, fail: <fail>. */
#define TWO_RULES(fail, timeout)                                               \
	"redis: { url: \"redis://127.0.0.1:1/0\", timeout: " timeout " }\n"    \
	"pool_size: 2\n"                                                       \
	"rules:\n"                                                             \
	"  - { name: a, message: rl-request, key: \"a:{user}\", "              \
	"rate: 60/min, burst: 10, fail: " fail " }\n"                          \
	"  - { name: b, message: rl-request, key: \"b:{user}\", "              \
	"rate: 60/min, burst: 10, fail: " fail " }\n"

/* ---- most restrictive wins ---------------------------------------------- */

Test(req, allowed_checks_state_the_rule_with_the_least_left)
{
	struct ack a;

	start(TWO_RULES("open", "200ms"));
	fake_says("a:", 1, 7, 0, 1000000);
	fake_says("b:", 1, 2, 0, 2500000);
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 0);
	cr_assert_str_eq(a.policy, "b");
	cr_assert_eq(a.remaining, 2);
	cr_assert_eq(h.fake.submits, 1, "one store call for both checks");
}

Test(req, one_denied_check_denies_the_request)
{
	struct ack a;

	start(TWO_RULES("open", "200ms"));
	fake_denies("b:", 2500000);
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 429);
	cr_assert_str_eq(a.policy, "b");
	cr_assert_eq(a.retry_after, 3, "2.5 s rounded up");
	cr_assert_eq(a.degraded, 0);
}

Test(req, the_longest_wait_wins_among_denials)
{
	struct ack a;

	start(TWO_RULES("open", "200ms"));
	fake_denies("a:", 7000000);
	fake_denies("b:", 2000000);
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 429);
	cr_assert_str_eq(a.policy, "a");
	cr_assert_eq(a.retry_after, 7);
}

Test(req, a_missing_key_denies_without_asking_the_store)
{
	struct ack a;

	start("rules:\n"
	      "  - { name: m, message: rl-request, key: \"m:{user}\", "
	      "rate: 60/min, burst: 10, missing: deny }\n");
	a = ASK("rl-request", "other", "x");
	cr_assert_eq(a.status, 429);
	cr_assert_str_eq(a.policy, "m");
	cr_assert_eq(h.fake.submits, 0);
}

/* ---- header values ------------------------------------------------------ */

Test(req, the_ack_states_limit_remaining_and_reset_of_the_deciding_rule)
{
	struct ack a;

	start(TWO_RULES("open", "200ms"));
	fake_says("a:", 1, 7, 0, 2500000);
	fake_says("b:", 1, 9, 0, 1000000);
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 0);
	cr_assert_eq(a.limit, 10, "the burst");
	cr_assert_eq(a.remaining, 7);
	cr_assert_eq(a.reset, 3, "2.5 s rounded up");
	cr_assert_eq(a.retry_after, -1, "only on a denial");
	cr_assert(strstr(a.ratelimit, "\"a\";r=7;t=3") != NULL, "%s",
	          a.ratelimit);
}

Test(req, a_denial_rounds_retry_after_up_to_whole_seconds)
{
	struct ack a;

	start(TWO_RULES("open", "200ms"));
	fake_denies("a:", 1200000);
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 429);
	cr_assert_eq(a.retry_after, 2);
	cr_assert_eq(a.remaining, 0);
}

/* ---- fail modes --------------------------------------------------------- */

Test(req, store_down_fail_open_allows_degraded)
{
	struct ack a;

	start(TWO_RULES("open", "200ms"));
	h.fake.mode = FAKE_DOWN;
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 0);
	cr_assert_eq(a.degraded, 1);
}

Test(req, store_down_fail_closed_refuses_with_503)
{
	struct ack a;

	start(TWO_RULES("closed", "200ms"));
	h.fake.mode = FAKE_DOWN;
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 503);
	cr_assert_eq(a.degraded, 1);
	cr_assert_gt(a.retry_after, 0, "a 503 says when to come back");
}

Test(req, store_down_fail_local_enforces_the_pool_share)
{
	struct ack a;

	start(TWO_RULES("local", "200ms")); /* burst 10 over 2 agents */
	h.fake.mode = FAKE_DOWN;
	for (int i = 0; i < 5; i++) {
		a = ASK("rl-request", "user", "u1");
		cr_assert_eq(a.status, 0, "request %d of the share of 5",
		             i + 1);
		cr_assert_eq(a.degraded, 1);
		cr_assert_eq(a.limit, 5, "the header states the share");
	}
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 429, "the 6th is over the share");
	cr_assert_eq(a.degraded, 1);
	a = ASK("rl-request", "user", "u2");
	cr_assert_eq(a.status, 0, "another key has its own share");
}

Test(req, a_store_error_applies_the_fail_mode)
{
	struct ack a;

	start(TWO_RULES("closed", "200ms"));
	h.fake.mode = FAKE_ERROR;
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 503);
	cr_assert_eq(a.degraded, 1);
	cr_assert_eq(h.fake.answered, 1, "the store did answer, with an error");
}

Test(req, each_rule_follows_its_own_fail_mode)
{
	struct ack a;

	start("redis: { url: \"redis://127.0.0.1:1/0\", timeout: 200ms }\n"
	      "rules:\n"
	      "  - { name: o, message: rl-request, key: \"o:{user}\", "
	      "rate: 60/min, burst: 10, fail: open }\n"
	      "  - { name: c, message: rl-other, key: \"c:{user}\", "
	      "rate: 60/min, burst: 10, fail: closed }\n");
	h.fake.mode = FAKE_DOWN;
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 0, "the open rule's message");
	a = ASK("rl-other", "user", "u1");
	cr_assert_eq(a.status, 503, "the closed rule's message");
}

/* ---- deadlines ---------------------------------------------------------- */

Test(req, a_call_never_answered_gets_the_fail_mode_by_its_deadline)
{
	struct ack a;

	start(TWO_RULES("closed", "100ms"));
	h.fake.mode = FAKE_NEVER;
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 503);
	cr_assert_eq(a.degraded, 1);
	cr_assert_geq(a.after_s, 0.09, "not before redis.timeout: %.3f s",
	              a.after_s);
	cr_assert_lt(a.after_s, 2., "by its deadline: %.3f s", a.after_s);
	cr_assert_eq(h.fake.timeouts, 1, "the store hears of the timeout");
	cr_assert_geq(h.fake.cancels, 1, "and that the call is given up");
}

/* ---- the worker's budget of requests in flight -------------------------- */

#define CAPPED(n)                                                              \
	"max_inflight: " #n "\n"                                               \
	"redis: { url: \"redis://127.0.0.1:1/0\", timeout: 2s }\n"             \
	"rules:\n"                                                             \
	"  - { name: a, message: rl-request, key: \"a:{user}\", "              \
	"rate: 60/min, burst: 10 }\n"

Test(req, past_max_inflight_a_notify_waits_unread_until_a_request_ends)
{
	uint64_t f1, f2, f3;

	start(CAPPED(2));
	h.fake.delay_s = 0.3;
	f1 = notify("rl-request", "user", "u1", NULL);
	f2 = notify("rl-request", "user", "u2", NULL);
	f3 = notify("rl-request", "user", "u3", NULL);
	run_for(0.1);
	cr_assert_eq(h.fake.submits, 2, "two requests, the cap: %d",
	             h.fake.submits);
	cr_assert_eq(h.budget.inflight, 2);
	cr_assert(h.c->starved, "the connection waits for room");
	cr_assert(!ev_is_active(&h.c->rio), "reading nothing meanwhile");
	cr_assert_eq(h.env.m->inflight_full, 1, "counted once");
	cr_assert_eq(ack_within(f1, 3.).status, 0);
	cr_assert_eq(ack_within(f2, 3.).status, 0);
	cr_assert_eq(ack_within(f3, 3.).status, 0, "the third, after them");
	cr_assert_eq(h.fake.submits, 3);
	cr_assert(!h.c->starved);
	cr_assert_eq(h.budget.inflight, 0);
}

/* A second ready conn on the same budget (HAProxy's end in h.peer2);
 * its output is left unread in the socket. */
static void
open_c2(void)
{
	struct conn_opts o = { .peer = "test2", .idle_us = 30000000 };
	int              sv[2], save = h.peer;
	struct conn     *save_c = h.c;

	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv),
	             0);
	h.peer2 = sv[1];
	o.m = h.env.m;
	o.budget = &h.budget;
	h.c2 = conn_new(h.loop, sv[0], &cbs, NULL, &o);
	conn_ref(h.c2);
	h.peer = h.peer2; /* hello() talks to h.peer and checks h.c */
	h.c = h.c2;
	hello();
	h.peer = save;
	h.c = save_c;
}

static uint64_t
notify_c2(const char *user)
{
	int      save = h.peer;
	uint64_t fid;

	h.peer = h.peer2;
	fid = notify("rl-request", "user", user, NULL);
	h.peer = save;
	return fid;
}

/* A waiting conn whose own request ends is resumed from the budget's
 * list, in its turn, and leaves it. When the NOTIFY it then parses is
 * decided at once (here: the store down, fail open), the nested end of
 * that request must not find it, mid-parse, still listed: it resumed
 * itself and stayed listed before, and assert(!c->parsing) aborted. */
Test(req, a_starved_conn_resumed_by_its_own_request_leaves_the_list)
{
	uint64_t f1, f2, f3;

	start(CAPPED(1));
	h.fake.delay_s = 0.3;
	f1 = notify("rl-request", "user", "u1", NULL);
	f2 = notify("rl-request", "user", "u2", NULL);
	f3 = notify("rl-request", "user", "u3", NULL);
	run_for(0.1);
	cr_assert(h.c->starved);
	h.fake.mode = FAKE_DOWN; /* what f1's end lets in is decided at once */
	cr_assert_eq(ack_within(f1, 3.).status, 0);
	cr_assert_eq(ack_within(f2, 3.).status, 0);
	cr_assert_eq(ack_within(f3, 3.).status, 0);
	cr_assert(!h.c->starved);
}

/* The same through the near-cache, the store up: f1 is denied by Redis,
 * so f2 (same key), parsed when f1 ends, is denied at once. */
Test(req, a_starved_conn_resumed_into_a_near_cache_hit_does_not_abort)
{
	uint64_t f1, f2;

	start(CAPPED(1));
	h.fake.delay_s = 0.3;
	fake_denies("u1", 10000000);
	f1 = notify("rl-request", "user", "u1", NULL);
	f2 = notify("rl-request", "user", "u1", NULL);
	notify("rl-request", "user", "u2", NULL);
	run_for(0.1);
	cr_assert(h.c->starved);
	cr_assert_eq(ack_within(f1, 3.).status, 429);
	cr_assert_eq(ack_within(f2, 3.).status, 429, "from the near-cache");
}

/* The same without a crash: once a conn reads again, it is not listed
 * as waiting for room. */
Test(req, a_conn_reading_again_is_not_listed_as_waiting)
{
	uint64_t f1;

	start(CAPPED(1));
	h.fake.delay_s = 0.3;
	f1 = notify("rl-request", "user", "u1", NULL);
	notify("rl-request", "user", "u2", NULL);
	run_for(0.1);
	cr_assert(h.c->starved);
	h.fake.delay_s = 30; /* u2 stays in flight (2 s deadline) */
	cr_assert_eq(ack_within(f1, 3.).status, 0);
	run_for(0.05);
	cr_assert_eq(h.budget.inflight, 1, "f2 in flight");
	cr_assert(ev_is_active(&h.c->rio), "reading again");
	cr_assert(!h.c->starved, "so not waiting for room");
}

/* A drain answers every NOTIFY that arrived before it stopped reading
 * (conn.c's header), those waiting unread for room included: a conn
 * with none of its own in flight was sent the DISCONNECT at the drain's
 * 1 s, its NOTIFYs never answered. */
Test(req, a_drain_answers_a_notify_that_waited_for_room)
{
	uint64_t          f2;
	struct spop_frame f;
	int               n;

	start(CAPPED(1));
	open_c2();
	h.fake.delay_s = 1.5; /* c2's request holds the budget 1.5 s */
	notify_c2("u1");
	run_for(0.1);
	cr_assert_eq(h.budget.inflight, 1);
	f2 = notify("rl-request", "user", "u2", NULL);
	run_for(0.1);
	cr_assert(h.c->starved, "u2 waits for room");
	cr_assert_eq(h.c->inflight, 0);
	conn_drain(h.c);
	n = next_frame(&f, 4.);
	cr_assert_gt(n, 0, "no frame");
	cr_assert_eq(f.type, SPOP_FRM_ACK,
	             "u2 (frame %llu) answered before the goodbye, got frame "
	             "type %d (AGENT-DISCONNECT is %d)",
	             (unsigned long long)f2, f.type, SPOP_FRM_AGENT_DISCONNECT);
	cr_assert_eq(f.frame_id, f2);
}

/* Waiters get room oldest first (conn.h). c2 waits first, h.c after it;
 * when h.c's own request ends, the slot is c2's. Before, h.c took it:
 * a conn with a steady backlog held the budget, and the others waited
 * for HAProxy's timeout processing. */
Test(req, the_oldest_waiter_gets_the_room_a_request_leaves)
{
	uint64_t f1;

	start(CAPPED(1));
	open_c2();
	h.fake.delay_s = 0.3;
	f1 = notify("rl-request", "user", "u1", NULL);
	run_for(0.05);
	notify_c2("v1"); /* c2 waits first */
	run_for(0.05);
	cr_assert(h.c2->starved);
	for (int i = 2; i <= 4; i++) { /* h.c has a backlog */
		char u[8];

		snprintf(u, sizeof(u), "u%d", i);
		notify("rl-request", "user", u, NULL);
	}
	run_for(0.05);
	cr_assert(h.c->starved, "h.c waits after c2");
	cr_assert_eq(ack_within(f1, 3.).status, 0);
	run_for(0.05);
	cr_assert_eq(h.c2->inflight, 1,
	             "c2, waiting longest, has the slot (h.c has %d, c2 "
	             "starved %d)",
	             h.c->inflight, h.c2->starved);
}

/* Sends the NOTIFYs of users u<from>.. u<from + n - 1> in one write, so
 * that one read takes them all. */
static void
write_notifies(int from, int n)
{
	char               buf[8192];
	size_t             len = 0;
	struct spop_writer w;

	for (int i = from; i < from + n; i++) {
		char u[16];
		int  k;

		snprintf(u, sizeof(u), "u%d", i);
		spop_w_begin(&w, buf + len, sizeof(buf) - len, SPOP_FRM_NOTIFY,
		             1, ++h.fid);
		spop_w_message(&w, "rl-request", 1);
		spop_w_name(&w, "user", 4);
		spop_w_str(&w, u, strlen(u));
		k = spop_w_end(&w);
		cr_assert_gt(k, 0);
		len += (size_t)k;
	}
	write_all(buf, len);
}

/* A conn stopped at its own CONN_MAX_INFLIGHT is not on the budget's
 * list; when one of its requests ends, the NOTIFYs left in its buffer
 * wait behind c2, which waited longest. Before, it parsed them before
 * budget_wake ran and took every slot it freed. */
Test(req, a_conn_at_its_own_cap_does_not_pass_an_older_waiter)
{
	uint64_t f1;

	start(CAPPED(64));
	open_c2();
	h.fake.mode = FAKE_NEVER; /* each request ends at its 2 s deadline */
	f1 = h.fid + 1;
	for (int i = 0; i < CONN_MAX_INFLIGHT - 1; i++) { /* ends spread */
		write_notifies(i, 1);
		run_for(0.01);
	}
	write_notifies(100, 11); /* the 64th and 10 more, read at once */
	run_for(0.05);
	cr_assert_eq(h.c->inflight, CONN_MAX_INFLIGHT);
	cr_assert_gt(h.c->rlen, 0, "NOTIFYs wait in h.c's buffer");
	cr_assert(!h.c->starved, "stopped at its own cap, not listed");
	notify_c2("v1");
	run_for(0.05);
	cr_assert(h.c2->starved, "c2 waits for room");
	cr_assert_eq(ack_within(f1, 3.).status, 0); /* one slot is free */
	cr_assert(!h.c2->starved,
	          "c2, the oldest waiter, has the slot (h.c has %d in "
	          "flight, c2 %d)",
	          h.c->inflight, h.c2->inflight);
}

Test(req, a_raised_max_inflight_lets_the_waiting_notify_start_at_once)
{
	uint64_t f2;

	start(CAPPED(1));
	h.fake.delay_s = 1.0;
	notify("rl-request", "user", "u1", NULL);
	f2 = notify("rl-request", "user", "u2", NULL);
	run_for(0.1);
	cr_assert_eq(h.fake.submits, 1);
	conn_budget_set(&h.budget, 2); /* a reload's */
	run_for(0.05);
	cr_assert_eq(h.fake.submits, 2, "started before the first ended");
	cr_assert(!h.c->starved);
	cr_assert_eq(ack_within(f2 - 1, 3.).status, 0);
	cr_assert_eq(ack_within(f2, 3.).status, 0);
}

/* ---- settles Redis may or may not have applied --------------------------- */

#define RESERVING                                                              \
	"redis: { url: \"redis://127.0.0.1:1/0\", timeout: 50ms }\n"           \
	"rules:\n"                                                             \
	"  - { name: t, message: rl-request, key: \"t:{user}\", "              \
	"rate: 1000/d, burst: 1000, reserve: \"{max_tokens}\", "               \
	"cost: \"{cost}\", fail: open }\n"

static uint64_t
sum_slots(_Atomic uint64_t *a)
{
	uint64_t n = 0;

	for (int i = 0; i <= METRICS_MAX_RULES; i++)
		n += a[i];
	return n;
}

/* Sends one settle of rule t (rl-response) with the store in <mode>;
 * its ACK must come, fail: open. */
static void
settle_with_store(int mode)
{
	struct ack a;

	start(RESERVING);
	h.fake.mode = mode;
	a = ASK("rl-response", "user", "u1", "id", "r1", "status", "200",
	        "cost", "0");
	cr_assert_eq(a.status, 0);
}

Test(req, a_settle_redis_never_answered_is_unconfirmed_not_unmatched)
{
	settle_with_store(FAKE_NEVER);
	cr_assert_eq(sum_slots(h.env.m->settles_unconfirmed), 1,
	             "sent, no answer by redis.timeout: Redis may apply it");
	cr_assert_eq(sum_slots(h.env.m->settles_unmatched), 0);
}

Test(req, a_settle_lost_with_its_connection_is_unconfirmed)
{
	settle_with_store(FAKE_ERROR); /* STORE_EIO: lost in flight */
	cr_assert_eq(sum_slots(h.env.m->settles_unconfirmed), 1);
	cr_assert_eq(sum_slots(h.env.m->settles_unmatched), 0);
}

Test(req, a_settle_the_store_never_took_is_unmatched)
{
	settle_with_store(FAKE_DOWN); /* Redis never saw it */
	cr_assert_eq(sum_slots(h.env.m->settles_unmatched), 1);
	cr_assert_eq(sum_slots(h.env.m->settles_unconfirmed), 0);
}

/* ---- the agent's own settles at 0 --------------------------------------- */

/* A refused request whose reservation Redis may hold (its call never
 * answered): the agent settles it at 0 itself, and counts it. Lease 1 s,
 * so the settle, never answered either, is given up within a second. */
Test(req, a_refused_requests_reservation_is_settled_at_0_and_counted)
{
	struct ack a;

	start("redis: { url: \"redis://127.0.0.1:1/0\", timeout: 50ms }\n"
	      "rules:\n"
	      "  - { name: t, message: rl-request, key: \"t:{user}\", "
	      "rate: 1000/d, burst: 1000, reserve: \"{max_tokens}\", "
	      "cost: \"{cost}\", lease: 1s, fail: closed }\n");
	h.fake.mode = FAKE_NEVER;
	a = ASK("rl-request", "user", "u1", "id", "r1", "max_tokens", "300");
	cr_assert_eq(a.status, 503);
	no_more_frames(0.05);
	cr_assert_eq(h.fake.submits, 2, "the charge, then the settle at 0");
	cr_assert_eq(sum_slots(h.env.m->self_settles), 1);
	cr_assert_eq(sum_slots(h.env.m->self_settles_lost), 0,
	             "still retried");
	run_for(1.5);
	cr_assert_eq(sum_slots(h.env.m->self_settles), 1,
	             "counted once, whatever its retries (%d calls)",
	             h.fake.submits);
	cr_assert_eq(sum_slots(h.env.m->self_settles_lost), 1,
	             "given up at the lease's end");
	cr_assert_eq(h.env.m->releases_lost, 1);
	cr_assert_eq(sum_slots(h.env.m->settles_unmatched) +
	                     sum_slots(h.env.m->settles_unconfirmed),
	             0, "not a settle from HAProxy");
}

Test(req, a_late_answer_is_dropped_once_the_deadline_answered)
{
	struct ack a;

	start(TWO_RULES("open", "50ms"));
	h.fake.delay_s = 0.3;
	fake_denies("a:", 5000000);
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 0, "fail: open, not the late denial");
	cr_assert_eq(a.degraded, 1);
	no_more_frames(0.5);
	cr_assert_eq(h.fake.stale, 1, "the late answer came, and was stale");
	cr_assert_eq(h.fake.answered, 0);
}

Test(req, an_answer_within_the_deadline_decides)
{
	struct ack a;

	start(TWO_RULES("closed", "500ms"));
	h.fake.delay_s = 0.03;
	fake_denies("a:", 5000000);
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 429);
	cr_assert_eq(a.degraded, 0);
	cr_assert_eq(h.fake.timeouts, 0);
}

/* ---- near-cache --------------------------------------------------------- */

#define ONE_RULE                                                               \
	"redis: { url: \"redis://127.0.0.1:1/0\", timeout: 200ms }\n"          \
	"rules:\n"                                                             \
	"  - { name: a, message: rl-request, key: \"a:{user}\", "              \
	"rate: 60/min, burst: 10 }\n"

Test(req, a_key_redis_denied_is_denied_again_without_a_store_call)
{
	struct ack a;

	start(ONE_RULE);
	fake_denies("a:", 1500000);
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 429);
	cr_assert_eq(h.fake.submits, 1);
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 429, "from the near-cache");
	cr_assert_eq(a.retry_after, 2);
	cr_assert_eq(h.fake.submits, 1, "no second store call");
	a = ASK("rl-request", "user", "u2");
	cr_assert_eq(h.fake.submits, 2, "another key asks the store");
}

Test(req, an_allowed_key_is_asked_of_the_store_every_time)
{
	start(ONE_RULE);
	ASK("rl-request", "user", "u1");
	ASK("rl-request", "user", "u1");
	cr_assert_eq(h.fake.submits, 2);
}

/* ---- shadow rules ------------------------------------------------------- */

#define SHADOW_RULES(fail)                                                     \
	"redis: { url: \"redis://127.0.0.1:1/0\", timeout: 200ms }\n"          \
	"rules:\n"                                                             \
	"  - { name: s, message: rl-request, key: \"s:{user}\", "              \
	"rate: 60/min, burst: 10, shadow: true, fail: " fail " }\n"            \
	"  - { name: r, message: rl-request, key: \"r:{user}\", "              \
	"rate: 60/min, burst: 10 }\n"

Test(req, a_shadow_denial_allows_and_says_so)
{
	struct ack a;

	start(SHADOW_RULES("open"));
	fake_denies("s:", 3000000);
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 0);
	cr_assert_eq(a.shadow, 1);
}

Test(req, a_shadow_denial_is_asked_of_the_store_every_time)
{
	start(SHADOW_RULES("open"));
	fake_denies("s:", 3000000);
	ASK("rl-request", "user", "u1");
	ASK("rl-request", "user", "u1");
	cr_assert_eq(h.fake.submits, 2, "no near-cache for shadow rules");
}

Test(req, a_shadow_rule_does_not_hide_a_real_denial)
{
	struct ack a;

	start(SHADOW_RULES("open"));
	fake_denies("s:", 3000000);
	fake_denies("r:", 2000000);
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 429);
	cr_assert_str_eq(a.policy, "r");
}

Test(req, a_shadow_fail_closed_rule_never_refuses)
{
	struct ack a;

	start(SHADOW_RULES("closed"));
	h.fake.mode = FAKE_DOWN;
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 0);
	cr_assert_eq(a.degraded, 1);
}

/* ---- concurrency -------------------------------------------------------- */

#define CONC_RULE(store, extra)                                                \
	"redis: { url: \"redis://127.0.0.1:1/0\", timeout: 200ms }\n"          \
	"rules:\n"                                                             \
	"  - { name: x, message: rl-request, key: \"x:{user}\", "              \
	"algorithm: concurrency, limit: 1, lease: 10m, id: \"{id}\", "         \
	"release: rl-done, store: " store " }\n" extra

Test(req, a_released_local_lease_frees_its_slot)
{
	struct ack a;

	start(CONC_RULE("local", ""));
	a = ASK("rl-request", "user", "u1", "id", "r1");
	cr_assert_eq(a.status, 0);
	cr_assert_eq(a.release, 1, "HAProxy is asked for the release");
	a = ASK("rl-request", "user", "u1", "id", "r2");
	cr_assert_eq(a.status, 429, "the one slot is taken");
	ASK("rl-done", "user", "u1", "id", "r1");
	a = ASK("rl-request", "user", "u1", "id", "r2");
	cr_assert_eq(a.status, 0, "the release freed it");
	cr_assert_eq(h.fake.submits, 0, "store: local never asks Redis");
}

Test(req, an_allowed_redis_lease_is_left_to_haproxy_to_release)
{
	struct ack a;

	start(CONC_RULE("redis", ""));
	a = ASK("rl-request", "user", "u1", "id", "r1");
	cr_assert_eq(a.status, 0);
	cr_assert_eq(a.release, 1);
	no_more_frames(0.05);
	cr_assert_eq(h.fake.releases, 0, "the agent releases nothing itself");
	ASK("rl-done", "user", "u1", "id", "r1");
	cr_assert_eq(h.fake.releases, 1, "rl-done's release reaches Redis");
}

Test(req, a_lease_whose_answer_was_lost_is_given_back_on_a_refusal)
{
	struct ack a;

	start(CONC_RULE("redis, fail: closed", ""));
	h.fake.mode = FAKE_NEVER;
	a = ASK("rl-request", "user", "u1", "id", "r1");
	cr_assert_eq(a.status, 503);
	cr_assert_neq(a.release, 1, "HAProxy will not release it");
	no_more_frames(0.05);
	cr_assert_eq(h.fake.submits, 2, "the charge, then the release");
	cr_assert_eq(h.fake.releases, 1, "Redis may have taken the lease");
}

/* Both requests pass the local rule's peek; the first answered takes its
 * one unit, so the second is vetoed after Redis took its lease. */
Test(req, a_local_veto_after_redis_gives_the_redis_lease_back)
{
	struct ack a1, a2;
	uint64_t   f1, f2;

	start(CONC_RULE(
		"redis",
		"  - { name: l, message: rl-request, key: \"l:{user}\", "
		"rate: 1/h, burst: 1, store: local }\n"));
	h.fake.delay_s = 0.02;
	f1 = notify("rl-request", "user", "u1", "id", "r1", NULL);
	f2 = notify("rl-request", "user", "u1", "id", "r2", NULL);
	a1 = ack_within(f1, 3.);
	a2 = ack_within(f2, 3.);
	cr_assert_eq(a1.status, 0);
	cr_assert_eq(a2.status, 429);
	cr_assert_str_eq(a2.policy, "l");
	no_more_frames(0.1);
	cr_assert_eq(h.fake.submits, 3, "two charges, one release");
	cr_assert_eq(h.fake.releases, 1, "the vetoed one's lease");
}

/* HAProxy closed the connection while Redis had the request: the lease
 * Redis grants is one HAProxy will never release. */
Test(req, a_lease_granted_after_haproxy_left_is_given_back)
{
	start(CONC_RULE("redis", ""));
	h.fake.delay_s = 0.05;
	notify("rl-request", "user", "u1", "id", "r1", NULL);
	run_for(0.01);
	cr_assert_eq(h.fake.submits, 1, "the charge is on its way");
	close(h.peer);
	h.peer = -1;
	run_for(0.2);
	cr_assert_eq(h.fake.answered, 2, "the charge, then the release");
	cr_assert_eq(h.fake.releases, 1);
}

/* HAProxy's max-frame-size is as low as 256 (spoe-agent max-frame-size):
 * an ACK whose header values do not fit falls back to the verdict alone,
 * which must still ask for the release of the lease the request took,
 * or HAProxy never sends it and the slot stays taken for the whole
 * lease. */
#define LONG_NAME                                                              \
	"a-concurrency-rule-whose-name-is-long-enough-to-fill-the-frame"

Test(req, a_small_frame_still_asks_for_the_release_of_a_lease)
{
	struct ack a;

	hello_frame = 256;
	start("redis: { url: \"redis://127.0.0.1:1/0\", timeout: 200ms }\n"
	      "rules:\n"
	      "  - { name: " LONG_NAME ", message: rl-request, "
	      "key: \"x:{user}\", algorithm: concurrency, limit: 1, "
	      "lease: 10m, id: \"{id}\", release: rl-done }\n"
	      "  - { name: " LONG_NAME "-2, message: rl-request, "
	      "key: \"y:{user}\", rate: 60/min, burst: 10 }\n");
	hello_frame = 0;
	a = ASK("rl-request", "user", "u1", "id", "r1");
	cr_assert_eq(a.status, 0);
	cr_assert_eq(a.release, 1, "HAProxy is asked for the release");
	cr_assert_neq(a.limit, -1, "the deciding rule's limit still fits");
	cr_assert_eq(strncmp(a.policy, LONG_NAME, strlen(LONG_NAME)), 0,
	             "the deciding rule still fits");
	no_more_frames(0.05);
	cr_assert_eq(h.fake.releases, 0, "HAProxy's to release, not ours");
}

/* One NOTIFY of two messages: rl-request for <user> with request id
 * <id>, and rl-done releasing u2's lease r0 (taken by an earlier
 * request). Returns its ACK. */
static struct ack
ask_with_done(const char *user, const char *id)
{
	char               buf[1024];
	struct spop_writer w;
	uint64_t           fid = ++h.fid;
	int                len;

	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_NOTIFY, 1, fid);
	spop_w_message(&w, "rl-request", 2);
	spop_w_name(&w, "user", 4);
	spop_w_str(&w, user, strlen(user));
	spop_w_name(&w, "id", 2);
	spop_w_str(&w, id, strlen(id));
	spop_w_message(&w, "rl-done", 2);
	spop_w_name(&w, "user", 4);
	spop_w_str(&w, "u2", 2);
	spop_w_name(&w, "id", 2);
	spop_w_str(&w, "r0", 2);
	len = spop_w_end(&w);
	cr_assert_gt(len, 0);
	write_all(buf, (size_t)len);
	return ack_within(fid, 3.);
}

/* One NOTIFY of two messages: rl-request (a concurrency CHECK, u1) and
 * rl-done (the release of u2's lease, from an earlier request). Redis
 * never answers the call: fail: closed refuses (503), the CHECK's lease
 * is an orphan Redis may hold (give_back sends its release), and the
 * rl-done release was lost with the call: it must be sent again too, as
 * it is when the NOTIFY carries rl-done alone (releases_unanswered), or
 * u2's slot stays taken for the whole lease (10 min). */
Test(req, a_lost_rl_done_release_is_sent_again_beside_an_orphan_lease)
{
	struct ack a;

	start(CONC_RULE("redis, fail: closed", ""));
	h.fake.mode = FAKE_NEVER;
	h.fake.rel_key = "u2";
	a = ask_with_done("u1", "r1");
	cr_assert_eq(a.status, 503);
	cr_assert_geq(h.fake.rel_key_n, 1, "rl-done's release, in the call");
	h.fake.mode = FAKE_ANSWER; /* Redis is back for the retries */
	run_for(1.0);
	cr_assert_geq(h.fake.releases, 3,
	              "u1's orphan lease was given back: releases %d",
	              h.fake.releases);
	cr_assert_geq(h.fake.rel_key_n, 2,
	              "the lost rl-done release of u2 is sent again (u2 "
	              "releases sent: %d, all releases: %d)",
	              h.fake.rel_key_n, h.fake.releases);
}

/* The control: rl-done alone, its call lost, is sent again. */
Test(req, a_lost_rl_done_release_alone_is_sent_again)
{
	struct ack a;

	start(CONC_RULE("redis, fail: closed", ""));
	h.fake.mode = FAKE_NEVER;
	h.fake.rel_key = "u2";
	a = ASK("rl-done", "user", "u2", "id", "r0");
	cr_assert_eq(a.status, 503);
	h.fake.mode = FAKE_ANSWER;
	run_for(1.0);
	cr_assert_geq(h.fake.rel_key_n, 2, "sent again: %d", h.fake.rel_key_n);
}

/* ---- the local tier: its penalty box and its largest limit ------------- */

#define BOXED_LOCAL(extra)                                                     \
	"redis: { url: \"redis://127.0.0.1:1/0\", timeout: 200ms }\n"          \
	"rules:\n"                                                             \
	"  - { name: l, message: rl-request, key: \"l:{user}\", "              \
	"rate: 1/min, burst: 1, block: 1h, store: local }\n" extra

/* Control: alone on its message, the local rule's denial is an offence
 * and blocks the key for block: (1 h). */
Test(req, a_local_rule_denial_blocks_the_key)
{
	struct ack a;

	start(BOXED_LOCAL(""));
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 0);
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 429);
	cr_expect_eq(a.retry_after, 3600, "blocked 1 h: %lld",
	             (long long)a.retry_after);
}

/* The same rule beside a Redis rule on the same message: the local
 * checks are only peeked before Redis is asked, and a vetoing peek ends
 * the request. That peek's offence must still start the block; when a
 * peek recorded none, the abuser was only rate limited (60 s), whatever
 * block: said. */
Test(req, a_local_rule_denial_blocks_the_key_beside_a_redis_rule)
{
	struct ack a;

	start(BOXED_LOCAL("  - { name: r, message: rl-request, "
	                  "key: \"r:{user}\", rate: 60/min, burst: 10 }\n"));
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 0);
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 429);
	cr_assert_str_eq(a.policy, "l");
	cr_expect_eq(a.retry_after, 3600, "blocked 1 h, got retry_after %lld",
	             (long long)a.retry_after);
	a = ASK("rl-request", "user", "u1");
	cr_expect_eq(a.retry_after, 3600, "still blocked: %lld",
	             (long long)a.retry_after);
}

/* A shadow local rule with block: beside a Redis rule that refuses the
 * request. The script records an offence of a check it denies whatever
 * the request's fate, shadow or not (limiter.h, "Penalty box"), and the
 * local tier does so for a request of its own; the local checks of a
 * request Redis vetoed are only peeked, and a shadow denial does not veto
 * the peek: its offence was lost, and the block started only with the
 * next request Redis let through. */
Test(req, a_shadow_local_offence_counts_when_redis_vetoes_the_request)
{
	struct ack a;

	start("redis: { url: \"redis://127.0.0.1:1/0\", timeout: 200ms }\n"
	      "rules:\n"
	      "  - { name: l, message: rl-request, key: \"l:{user}\", "
	      "rate: 1/s, burst: 1, block: 1h, store: local, "
	      "shadow: true }\n"
	      "  - { name: r, message: rl-request, key: \"r:{user}\", "
	      "rate: 60/min, burst: 10 }\n");
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 0);
	cr_assert_eq(a.shadow, 0);
	fake_denies("r:", 5000000);
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 429);
	cr_assert_str_eq(a.policy, "r");
	cr_assert_eq(a.shadow, 1, "l would have denied");
	h.fake.nsays = 0; /* Redis allows again */
	run_for(1.2); /* past the near-cache's hold of r's denial, and l
	               * has its unit back unless it is blocked */
	a = ASK("rl-request", "user", "u1");
	cr_assert_eq(a.status, 0);
	/* the second request's offence blocked l's key for 1h (without it,
	 * l would pass now: shadow 0) */
	cr_expect_eq(a.shadow, 1, "l's key is blocked since the second request");
}

/* limit: 4294967296 passes policy_load (and -c): the first lease of a
 * store: local concurrency rule must not bring the agent down. */
Test(req, a_local_concurrency_limit_of_two_to_the_32_takes_leases)
{
	struct ack a;

	start("rules:\n"
	      "  - { name: x, message: rl-request, key: \"x:{user}\", "
	      "algorithm: concurrency, limit: 4294967296, lease: 10m, "
	      "id: \"{id}\", release: rl-done, store: local }\n");
	a = ASK("rl-request", "user", "u1", "id", "r1");
	cr_assert_eq(a.status, 0);
	a = ASK("rl-request", "user", "u1", "id", "r2");
	cr_assert_eq(a.status, 0);
	cr_expect_eq(a.remaining, 4294967294LL, "two leases held: %lld",
	             (long long)a.remaining);
}

/* The same NOTIFY, its rl-request denied at once in process (a store:
 * local rule's unit is spent): no Redis call is made for the request,
 * and rl-done's release of u2's lease must still reach Redis. */
Test(req, an_rl_done_release_beside_a_request_denied_at_once_reaches_redis)
{
	struct ack a;

	start(CONC_RULE("redis", "  - { name: loc, message: rl-request, "
	                         "key: \"l:{user}\", algorithm: gcra, rate: "
	                         "1/h, burst: 1, store: local }\n"));
	h.fake.rel_key = "u2";
	a = ASK("rl-request", "user", "u9", "id", "r9");
	cr_assert_eq(a.status, 0);
	a = ask_with_done("u9", "r1"); /* loc's one unit is spent */
	cr_assert_eq(a.status, 429);
	run_for(0.5);
	cr_assert_geq(h.fake.rel_key_n, 1,
	              "u2's release never reached Redis (releases sent: %d)",
	              h.fake.releases);
}

/* The same with store: local leases: rl-done's release of u2's local
 * lease, in a NOTIFY whose rl-request is denied, frees u2's slot. */
Test(req, an_rl_done_release_beside_a_denied_request_frees_a_local_lease)
{
	struct ack a;

	start(CONC_RULE("local", "  - { name: loc, message: rl-request, "
	                         "key: \"l:{id}\", algorithm: gcra, rate: "
	                         "1/h, burst: 1, store: local }\n"));
	a = ASK("rl-request", "user", "u2", "id", "r0");
	cr_assert_eq(a.status, 0, "u2 takes its one slot");
	a = ASK("rl-request", "user", "u9", "id", "r1");
	cr_assert_eq(a.status, 0, "r1 spends loc's unit");
	a = ask_with_done("u8", "r1"); /* loc's l:r1 is spent */
	cr_assert_eq(a.status, 429);
	a = ASK("rl-request", "user", "u2", "id", "r5");
	cr_assert_eq(a.status, 0, "u2's slot was released (status %d)",
	             (int)a.status);
}

/* rl-response carries a count: response charge (a FORCE) and the release
 * of the request's lease (release: rl-response). The FORCE over its limit
 * reports allowed 0, so decide answers 429; but a FORCE never vetoes
 * (lim_vetoes, the script): Redis answered and applied the release in the
 * call, which is not to be sent again after the ACK. */
Test(req, a_release_redis_applied_beside_a_denied_force_is_not_sent_again)
{
	struct ack a;

	start("redis: { url: \"redis://127.0.0.1:1/0\", timeout: 200ms }\n"
	      "rules:\n"
	      "  - { name: x, message: rl-request, key: \"x:{user}\", "
	      "algorithm: concurrency, limit: 5, lease: 10m, id: \"{id}\", "
	      "release: rl-response }\n"
	      "  - { name: e, message: rl-request, key: \"e:{user}\", "
	      "rate: 10/min, burst: 10, count: response, status: 5xx }\n");
	h.fake.nsays = 1;
	h.fake.says[0].in_key = "e:";
	h.fake.says[0].res =
		(struct lim_result){ 0, 0, 6000000, 6000000, 60000000 };
	a = ASK("rl-response", "user", "u1", "id", "r1", "status", "503");
	cr_assert_eq(a.status, 429, "the FORCE over its limit: %d",
	             (int)a.status);
	run_for(0.2);
	cr_expect_eq(h.fake.submits, 1, "calls: %d", h.fake.submits);
	cr_expect_eq(h.fake.releases, 1,
	             "the release went %d times; Redis applied it in the "
	             "first call (no check vetoed)",
	             h.fake.releases);
}

/* Control: the script vetoes the call (g is spent): rl-done's release in
 * it was not applied and goes again after the ACK. */
Test(req, a_release_in_a_call_redis_vetoed_is_sent_again)
{
	struct ack a;

	start(CONC_RULE("redis", "  - { name: g, message: rl-request, "
	                         "key: \"g:{user}\", rate: 1/h, burst: 1 }\n"));
	h.fake.rel_key = "u2";
	h.fake.nsays = 1;
	h.fake.says[0].in_key = "g:";
	h.fake.says[0].res =
		(struct lim_result){ 0, 0, 6000000, 6000000, 60000000 };
	a = ask_with_done("u1", "r1");
	cr_assert_eq(a.status, 429);
	run_for(0.2);
	cr_expect_eq(h.fake.rel_key_n, 2, "in the call, then again: %d",
	             h.fake.rel_key_n);
}

/* ---- a message with many args ------------------------------------------- */

/* NB-ARGS is one byte: HAProxy sends up to 255 args per message (a
 * spoe-message "args" line of any length). The rule's key arg is the
 * 40th: it is present, so the request is checked against the store, not
 * denied as if the arg were missing. */
Test(req, a_key_arg_past_the_32nd_is_found)
{
	char               buf[4096], name[8];
	struct spop_writer w;
	struct ack         a;
	int                len;

	start("rules:\n"
	      "  - { name: m, message: rl-request, key: \"m:{user}\", "
	      "rate: 60/min, burst: 10, missing: deny }\n");
	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_NOTIFY, 1, ++h.fid);
	spop_w_message(&w, "rl-request", 40);
	for (int i = 0; i < 39; i++) {
		snprintf(name, sizeof(name), "a%d", i);
		spop_w_name(&w, name, strlen(name));
		spop_w_str(&w, "v", 1);
	}
	spop_w_name(&w, "user", 4);
	spop_w_str(&w, "u1", 2);
	len = spop_w_end(&w);
	cr_assert_gt(len, 0);
	write_all(buf, (size_t)len);
	a = ack_within(h.fid, 3.);
	cr_assert_eq(a.status, 0, "the 40th arg is the key: allowed, got %lld",
	             (long long)a.status);
	cr_assert_eq(h.fake.submits, 1, "checked in the store");
}

/* ---- the idle timeout --------------------------------------------------- */

/* A NOTIFY already in the socket when the idle timer fires is read and
 * answered, not left behind an idle DISCONNECT. The loop ran late (a busy
 * worker), so the timer and the NOTIFY's read came due in the same loop
 * iteration, and libev runs the timer first: the DISCONNECT went out over
 * a NOTIFY HAProxy had sent in time, which it then fails and never sends
 * again (conn.c's header). A drain already waits for such bytes. */
Test(req, a_notify_come_when_the_idle_timer_fires_is_answered)
{
	struct spop_frame f;
	struct ack        a;
	uint64_t          fid;

	start("rules:\n"
	      "  - { name: l, message: rl-request, key: \"l:{user}\", "
	      "rate: 10/s, burst: 10, store: local }\n");
	conn_set_idle(h.c, 100000); /* 100 ms from the HELLO */
	usleep(300000);             /* the loop is busy elsewhere */
	fid = notify("rl-request", "user", "u1", NULL);
	a = ack_within(fid, 3.);
	cr_assert_eq(a.status, 0);
	cr_assert_eq(h.c->state, CONN_ST_READY, "still serving after it");
	/* then, with nothing more sent, the idle DISCONNECT (status 2) */
	cr_assert_gt(next_frame(&f, 3.), 0, "no idle DISCONNECT");
	cr_assert_eq(f.type, SPOP_FRM_AGENT_DISCONNECT);
}
