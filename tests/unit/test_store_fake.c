/* SPDX-License-Identifier: Apache-2.0 */
/* The store against a Redis played in-process (fake_redis.h) that
 * misbehaves at one exact point. */
#include <criterion/criterion.h>
#include <ev.h>
#include <signal.h>

#include "crc16.h"
#include "fake_redis.h"
#include "metrics.h"
#include "store.h"

/* ---- shared ------------------------------------------------------------- */

/* One store on a fake Redis, both on the test's own loop. */
struct rig {
	struct ev_loop   *loop;
	struct fake_redis fr;
	struct store     *st;
};

/* Starts the fake, answering with <handler> (its state <arg>), and a
 * store on <scheme>://127.0.0.1:<the fake's port><path>. */
static void
rig_open(struct rig *g,
         void (*handler)(struct fake_redis *, struct fake_cli *, int,
                         const char **, const size_t *),
         void *arg, const char *scheme, const char *path)
{
	struct store_cfg cfg = { 0 };
	const char      *err = NULL;
	char             url[96];

	signal(SIGPIPE, SIG_IGN);
	memset(g, 0, sizeof(*g));
	g->loop = ev_loop_new(EVFLAG_AUTO);
	g->fr.handler = handler;
	g->fr.arg = arg;
	fake_start(&g->fr, g->loop);
	snprintf(url, sizeof(url), "%s://127.0.0.1:%d%s", scheme, g->fr.port,
	         path);
	cfg.url = url;
	cfg.connect_timeout_us = 1000000;
	g->st = store_new(g->loop, &cfg, metrics_worker_new(), &err);
	cr_assert_not_null(g->st, "%s", err);
}

/* Turns the loop, for 0.3 s at most, until <done> holds. */
static int
rig_until(struct rig *g, int (*done)(struct rig *))
{
	for (int i = 0; i < 300; i++) {
		ev_run(g->loop, EVRUN_ONCE | EVRUN_NOWAIT);
		usleep(1000);
		if (done(g))
			return 1;
	}
	return 0;
}

static int
rig_up(struct rig *g)
{
	return store_up(g->st);
}

static void
rig_close(struct rig *g)
{
	store_free(g->st);
	fake_stop(&g->fr);
	ev_loop_destroy(g->loop);
}

struct req {
	struct store_req  sr;
	struct check      checks[2];
	int               index[2];
	struct lim_result results[2];
	int               answered, err;
};

static void
req_cb(struct store_req *sr, int err)
{
	struct req *r = (struct req *)sr;

	r->answered++;
	r->err = err;
}

static void
check_set(struct check *c, const char *key)
{
	memset(c, 0, sizeof(*c));
	c->lim.algo = LIM_GCRA;
	c->lim.rate = 100;
	c->lim.period_us = 1000000;
	c->lim.burst = 100;
	c->lim.ei_us = 10000;
	c->lim.dvt_us = 1000000;
	c->op = LIM_OP_CHECK;
	c->cost = 1;
	c->keylen = strlen(key);
	memcpy(c->key, key, c->keylen);
	c->plan = -1;
}

static void
req_init(struct req *r, int n, const char *k0, const char *k1)
{
	memset(r, 0, sizeof(*r));
	check_set(&r->checks[0], k0);
	if (k1 != NULL)
		check_set(&r->checks[1], k1);
	r->index[0] = 0;
	r->index[1] = 1;
	r->sr.checks = r->checks;
	r->sr.index = r->index;
	r->sr.results = r->results;
	r->sr.n = n;
	r->sr.cb = req_cb;
}

/* The script's reply for <n> checks, all allowed: a bulk string holding
 * a msgpack array of n x 5 positive fixints, then the call's clock (a
 * uint 64). */
static void
send_allowed(struct fake_cli *c, int n)
{
	static const char now[] = "\xcf\x00\x06\x62\x0f\x83\xad\x37\xc0";
	char              out[512], *p = out;
	size_t            body = 1 + (size_t)n * 5 + sizeof(now) - 1;

	cr_assert_lt(n * 5 + 1, 16);
	p += sprintf(p, "$%zu\r\n", body);
	*p++ = (char)(0x90 | (n * 5 + 1));
	for (int i = 0; i < n; i++) {
		*p++ = 1; /* allowed */
		*p++ = 9; /* remaining */
		*p++ = 0;
		*p++ = 0;
		*p++ = 0;
	}
	memcpy(p, now, sizeof(now) - 1);
	p += sizeof(now) - 1;
	*p++ = '\r';
	*p++ = '\n';
	fake_send(c, out, (size_t)(p - out));
}

/* The setup commands every link sends. Returns 1 if <argv> was one. */
static int
answer_setup(struct fake_cli *c, int argc, const char **a, const size_t *l)
{
	if (resp_is(a[0], l[0], "SCRIPT")) {
		fake_sends(c, "$40\r\n0000000000000000000000000000000000000000"
		              "\r\n");
		return 1;
	}
	if (resp_is(a[0], l[0], "FUNCTION")) {
		fake_sends(c, "-ERR unknown command 'FUNCTION'\r\n");
		return 1;
	}
	if (resp_is(a[0], l[0], "ASKING") || resp_is(a[0], l[0], "PING")) {
		fake_sends(c, "+OK\r\n");
		return 1;
	}
	return 0;
}

/* CLUSTER SLOTS: every slot on the fake itself. */
static void
send_one_node_map(struct fake_redis *fr, struct fake_cli *c)
{
	char out[256];

	snprintf(out, sizeof(out),
	         "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n"
	         ":%d\r\n",
	         fr->port);
	fake_sends(c, out);
}

static int
is_script(const char *a, size_t l)
{
	return resp_is(a, l, "EVALSHA") || resp_is(a, l, "EVAL") ||
	       resp_is(a, l, "FCALL");
}

/* ---- a Cluster node dropped while a refund is due ----------------------- */

struct cl_state {
	int scripts; /* script calls seen */
	int conns;   /* CLUSTER SLOTS asked */
};

/* One node holding every slot; it answers the first script call and none
 * after: a node that stops answering (SIGSTOP, a partition) between two
 * calls. */
static void
cluster_handler(struct fake_redis *fr, struct fake_cli *c, int argc,
                const char **a, const size_t *l)
{
	struct cl_state *st = fr->arg;

	if (answer_setup(c, argc, a, l))
		return;
	if (resp_is(a[0], l[0], "CLUSTER")) {
		st->conns++;
		send_one_node_map(fr, c);
		return;
	}
	if (is_script(a[0], l[0])) {
		if (st->scripts++ == 0)
			send_allowed(c, (int)strtol(a[2], NULL, 10));
		return; /* the later ones: never */
	}
	fake_sends(c, "-ERR fake\r\n");
}

/* A request whose two checks are in two slots of one node: the first
 * slot's call is answered (charged), the second's never is. The node is
 * dropped as stuck (LINK_STALL_S); the failed part makes the request
 * refund the charged one, to the same node, from inside the NULL replies
 * of the link being freed. The refund must not reconnect the link there:
 * link_drop() then found a context where it had just freed one
 * (assert(l->ac == NULL) in lost(), an abort of the agent). */
Test(store_fake, cluster_refund_while_its_node_is_dropped)
{
	struct rig      g;
	struct cl_state cs = { 0 };
	struct req      r;

	rig_open(&g, cluster_handler, &cs, "redis+cluster", "");
	cr_assert(rig_until(&g, rig_up), "the map came");
	req_init(&r, 2, "rl:{a:1}", "rl:{b:2}");
	cr_assert_neq(crc16_key_slot(r.checks[0].key, r.checks[0].keylen),
	              crc16_key_slot(r.checks[1].key, r.checks[1].keylen));
	cr_assert_eq(store_submit(g.st, &r.sr), STORE_OK);
	store_flush(g.st);
	/* LINK_STALL_S, then a stuck-check tick (CL_STUCK_CHECK_S) */
	fake_run_until(g.loop, &r.answered, 3.0);
	cr_assert_eq(r.answered, 1, "the request is answered");
	cr_assert_eq(r.err, STORE_EIO);
	rig_close(&g);
}

/* ---- a connect that fails at once is counted ---------------------------- */

/* A connect hiredis refuses at once (a unix socket with no Redis behind
 * it, a host name not resolved yet) was logged (redis_connect_failed) but
 * not counted: spoa_rl_redis_errors_total{kind="refused"}, "connect
 * refused or failed", stayed 0 for as long as a Redis on a unix socket
 * was down or its name did not resolve, while every decision was
 * degraded. Only a connect refused later, through hiredis' callback,
 * counted. */
Test(store_fake, a_connect_refused_at_once_is_counted)
{
	struct ev_loop        *loop = ev_loop_new(EVFLAG_AUTO);
	struct metrics_worker *m = metrics_worker_new();
	struct store_cfg       cfg = { .url = "unix:/nonexistent/redis.sock",
		                       .connect_timeout_us = 1000000 };
	const char            *err = NULL;
	struct store          *st = store_new(loop, &cfg, m, &err);
	int                    never = 0;

	cr_assert_not_null(st, "%s", err);
	fake_run_until(loop, &never, 0.3); /* a first retry too */
	cr_assert_geq(atomic_load(&m->redis_errors[METRICS_REDIS_REFUSED]), 2,
	              "the first connect and its retry are counted");
	store_free(st);
	ev_loop_destroy(loop);
}

/* ---- one slot refused: TRYAGAIN, CLUSTERDOWN ---------------------------- */

/* One node holding every slot but the slot of "rl:{a:1}", whose calls it
 * refuses with <slot_error>: migrating (TRYAGAIN: a call holding a key
 * already moved, or one that does not exist, and one not), or no node
 * serving it (cluster-require-full-coverage no). Any other slot's call is
 * answered. */
static const char *slot_error;

static void
slot_error_handler(struct fake_redis *fr, struct fake_cli *c, int argc,
                   const char **a, const size_t *l)
{
	if (answer_setup(c, argc, a, l))
		return;
	if (resp_is(a[0], l[0], "CLUSTER")) {
		send_one_node_map(fr, c);
		return;
	}
	if (is_script(a[0], l[0]) && argc > 3 && l[3] >= 5 &&
	    memcmp(a[3], "rl:{a", 5) == 0)
		fake_sends(c, slot_error);
	else if (is_script(a[0], l[0]))
		send_allowed(c, (int)strtol(a[2], NULL, 10));
	else
		fake_sends(c, "-ERR fake\r\n");
}

/* Submits a one-check request on <key>, flushes, and waits for its
 * answer; returns its error. */
static int
one_call(struct rig *g, const char *key)
{
	struct req r;

	req_init(&r, 1, key, NULL);
	if (store_submit(g->st, &r.sr) != STORE_OK)
		return -1;
	store_flush(g->st);
	fake_run_until(g->loop, &r.answered, 1.0);
	cr_assert_eq(r.answered, 1);
	return r.err;
}

/* Six calls in a row refused on the one slot: the node's breaker stays
 * closed and its other slots are decided by Redis. */
static void
slot_error_leaves_other_slots(const char *err)
{
	struct rig g;

	slot_error = err;
	rig_open(&g, slot_error_handler, NULL, "redis+cluster", "");
	cr_assert(rig_until(&g, rig_up), "the map came");
	for (int i = 0; i < 6; i++)
		cr_assert_eq(one_call(&g, "rl:{a:1}"), STORE_EREPLY,
		             "the refused slot's call %d fails", i);
	cr_assert(store_up(g.st), "the node's breaker stays closed");
	cr_assert_eq(one_call(&g, "rl:{b:2}"), STORE_OK,
	             "another slot of the node is decided by Redis");
	rig_close(&g);
}

/* TRYAGAIN is about the keys of one call in one slot mid-migration, as
 * WRONGTYPE is about one key: the node answers. It was counted as an
 * outage, so a few calls on the migrating slot in a row (a hot tenant's,
 * for as long as its slot moved) opened the node's breaker and every
 * other slot of that node got its fail mode too. */
Test(store_fake, tryagain_on_one_slot_leaves_the_nodes_other_slots_alone)
{
	slot_error_leaves_other_slots("-TRYAGAIN Multiple keys request during "
	                              "rehashing of slot\r\n");
}

/* The same for a slot no node serves: "CLUSTERDOWN Hash slot not served"
 * is about that slot, where "CLUSTERDOWN The cluster is down" is every
 * slot's outage. */
Test(store_fake, an_unserved_slot_leaves_the_nodes_other_slots_alone)
{
	slot_error_leaves_other_slots("-CLUSTERDOWN Hash slot not served\r\n");
}

/* ---- a Cluster node holding only a plan lookup ------------------------- */

/* One node holding every slot, which answers the set-up and never an
 * HGET: stopped (SIGSTOP, a black hole) while only a plan lookup was out
 * on it. */
static void
hget_silent_handler(struct fake_redis *fr, struct fake_cli *c, int argc,
                    const char **a, const size_t *l)
{
	if (answer_setup(c, argc, a, l) || resp_is(a[0], l[0], "HGET"))
		return;
	if (resp_is(a[0], l[0], "CLUSTER")) {
		send_one_node_map(fr, c);
		return;
	}
	fake_sends(c, "-ERR fake\r\n");
}

struct looked {
	int answered, err;
};

static void
looked_cb(void *arg, const char *v, size_t n, int err)
{
	struct looked *lk = arg;

	lk->answered++;
	lk->err = err;
}

/* The node was dropped as stuck only when it had script calls out: an
 * HGET alone on it waited for as long as TCP held, and the tenant's plan
 * with it. It must fail after LINK_STALL_S, like a call. */
Test(store_fake, a_cluster_node_holding_only_an_hget_is_dropped_as_stuck)
{
	struct rig    g;
	struct looked lk = { 0 };

	rig_open(&g, hget_silent_handler, NULL, "redis+cluster", "");
	cr_assert(rig_until(&g, rig_up), "the map came");
	cr_assert_eq(store_hget(g.st, "rl:plans", "acme", 4, looked_cb, &lk),
	             0);
	store_flush(g.st);
	/* LINK_STALL_S, then a stuck-check tick (CL_STUCK_CHECK_S) */
	fake_run_until(g.loop, &lk.answered, 3.0);
	cr_assert_eq(lk.answered, 1, "the lookup is answered");
	cr_assert_eq(lk.err, -1, "as failed");
	rig_close(&g);
}

/* ---- a reply nobody asked for ------------------------------------------- */

struct one_state {
	int scripts;
	int extra; /* what to send after the first script's reply */
	int conns;
};

static void
single_handler(struct fake_redis *fr, struct fake_cli *c, int argc,
               const char **a, const size_t *l)
{
	struct one_state *st = fr->arg;

	if (answer_setup(c, argc, a, l))
		return;
	if (is_script(a[0], l[0])) {
		send_allowed(c, (int)strtol(a[2], NULL, 10));
		if (st->scripts++ == 0 && st->extra)
			fake_sends(c,
			           st->extra == 1 ? "+OK\r\n" : "*1\r\n:1\r\n");
		return;
	}
	fake_sends(c, "-ERR fake\r\n");
}

static int
dropped(struct rig *g)
{
	return g->fr.ncli == 0;
}

/* One more reply than there were commands (a buggy proxy, a hostile
 * server): hiredis 0.14 asserts on it (redisProcessCallbacks: "the
 * context *must* be subscribed or monitoring") and the agent aborted.
 * It must be refused as a bad reply: the link drops and reconnects. */
static void
extra_reply(int kind)
{
	struct rig       g;
	struct one_state os = { .extra = kind };
	struct req       r;

	rig_open(&g, single_handler, &os, "redis", "/0");
	cr_assert(rig_until(&g, rig_up));
	req_init(&r, 1, "rl:{a:1}", NULL);
	cr_assert_eq(store_submit(g.st, &r.sr), STORE_OK);
	store_flush(g.st);
	fake_run_until(g.loop, &r.answered, 2.0);
	cr_assert_eq(r.answered, 1);
	cr_assert_eq(r.err, STORE_OK);
	cr_assert(rig_until(&g, dropped), "the link that got it was dropped");
	rig_close(&g);
}

Test(store_fake, an_unsolicited_status_reply_drops_the_link)
{
	extra_reply(1);
}

Test(store_fake, an_unsolicited_array_reply_drops_the_link)
{
	extra_reply(2);
}

/* ---- a single Redis that stops with its calls at the cap --------------- */

#define AT_CAP 256 /* store_single.c's SINGLE_MAX_INFLIGHT */

/* Answers the set-up (counting the links: one SCRIPT LOAD each), never a
 * script call: a Redis stopped (SIGSTOP) or behind a black hole, whose
 * TCP stays up. */
static void
silent_handler(struct fake_redis *fr, struct fake_cli *c, int argc,
               const char **a, const size_t *l)
{
	int *links = fr->arg;

	if (resp_is(a[0], l[0], "SCRIPT"))
		++*links;
	if (!answer_setup(c, argc, a, l) && !is_script(a[0], l[0]))
		fake_sends(c, "-ERR fake\r\n");
}

/* Under load the calls of one worker reach the cap on calls in flight
 * within a few hundred ms of Redis stopping, each request timing out
 * before Redis has been silent for LINK_STALL_S. From then on every
 * request was refused at once by the cap: no deadline passed, nothing fed
 * the breaker, and the link, silent with its calls out, was never dropped
 * (held as long as TCP held, 15 min against a dead host; the breaker
 * closed all along). The refusals must count as the timeouts do: the
 * link is dropped, and a new one made. */
Test(store_fake, a_single_link_stuck_at_its_cap_on_calls_is_dropped)
{
	static struct req r[AT_CAP];
	struct rig        g;
	struct req        late;
	int               links = 0, never = 0;

	rig_open(&g, silent_handler, &links, "redis", "/0");
	cr_assert(rig_until(&g, rig_up));
	fake_run_until(g.loop, &never, 0.05); /* the set-up answered */
	for (int i = 0; i < AT_CAP; i++) {    /* one call each */
		req_init(&r[i], 1, "rl:{a:1}", NULL);
		cr_assert_eq(store_submit(g.st, &r[i].sr), STORE_OK);
		store_flush(g.st);
	}
	req_init(&late, 1, "rl:{a:1}", NULL);
	cr_assert_eq(store_submit(g.st, &late.sr), STORE_EDOWN, "at the cap");
	for (int i = 0; i < AT_CAP; i++) { /* their deadlines, as req.c */
		store_cancel(g.st, &r[i].sr);
		store_note_timeout(g.st);
	}
	fake_run_until(g.loop, &never, 1.1);         /* LINK_STALL_S */
	for (int i = 0; i < 200 && links < 2; i++) { /* 2 s of requests */
		req_init(&late, 1, "rl:{a:1}", NULL);
		if (store_submit(g.st, &late.sr) == STORE_OK)
			store_cancel(g.st, &late.sr);
		fake_run_until(g.loop, &never, 0.01);
	}
	cr_assert_eq(links, 2, "the stuck link was dropped and made again");
	rig_close(&g);
}

/* ---- toppool: a field whose value is not a string ----------------------- */

#include <pthread.h>

#include <hiredis/hiredis.h>

#include "toppool.h"

struct served {
	struct ev_loop   *loop;
	struct fake_redis fr;
	ev_async          stop;
	pthread_t         t;
};

static void
hgetall_handler(struct fake_redis *fr, struct fake_cli *c, int argc,
                const char **a, const size_t *l)
{
	if (resp_is(a[0], l[0], "HGETALL"))
		/* a field, then an integer, a nil and an array for values */
		fake_sends(c, "*6\r\n$1\r\na\r\n:5\r\n$1\r\nb\r\n$-1\r\n"
		              "$1\r\nc\r\n*0\r\n");
	else
		fake_sends(c, ":0\r\n");
}

static void
stop_cb(struct ev_loop *loop, ev_async *w, int revents)
{
	ev_break(loop, EVBREAK_ALL);
}

static void *
serve_main(void *arg)
{
	struct served *s = arg;

	ev_run(s->loop, 0);
	return NULL;
}

/* Serves the fake with <handler> on a thread of its own (toppool talks
 * blocking hiredis); returns a client of it. */
static redisContext *
serve_start(struct served *s,
            void (*handler)(struct fake_redis *, struct fake_cli *, int,
                            const char **, const size_t *))
{
	struct timeval tv = { 2, 0 };
	redisContext  *c;

	memset(s, 0, sizeof(*s));
	s->loop = ev_loop_new(EVFLAG_AUTO);
	s->fr.handler = handler;
	fake_start(&s->fr, s->loop);
	ev_async_init(&s->stop, stop_cb);
	ev_async_start(s->loop, &s->stop);
	pthread_create(&s->t, NULL, serve_main, s);
	c = redisConnectWithTimeout("127.0.0.1", s->fr.port, tv);
	cr_assert(c != NULL && c->err == 0);
	redisSetTimeout(c, tv);
	return c;
}

static void
serve_stop(struct served *s, redisContext *c)
{
	redisFree(c);
	ev_async_send(s->loop, &s->stop);
	pthread_join(s->t, NULL);
	fake_stop(&s->fr);
	ev_loop_destroy(s->loop);
}

/* A hostile or broken Redis answering HGETALL with values that are not
 * strings: toppool_read() read a NULL str (strtoll(NULL)) and crashed the
 * process serving GET /admin/top or `spoa-ratelimit top`. */
Test(store_fake, toppool_read_skips_values_that_are_not_strings)
{
	struct served     s;
	struct topk_merge m = { 0 };
	redisContext     *c;

	c = serve_start(&s, hgetall_handler);
	cr_assert_eq(toppool_read(&c, "r", 1700000000000, &m), 0,
	             "no agent counted");
	topk_merge_free(&m);
	serve_stop(&s, c);
}

#define TOP_NOW_MS 1700000000000LL

/* Two agents' views of a rule: A lists x only, and may have denied any
 * other key up to 5 times (its bound, beside the views: its view was cut,
 * or its summaries full); B, an agent from before bounds were written,
 * lists y and x. */
static void
two_views_handler(struct fake_redis *fr, struct fake_cli *c, int argc,
                  const char **a, const size_t *l)
{
	static const char va[] = "1699999999900 100\n10 2 1:x\n";
	static const char vb[] = "1699999999900 50\n8 0 1:y\n3 0 1:x\n";
	char              out[256];

	if (!resp_is(a[0], l[0], "HGETALL")) {
		fake_sends(c, ":0\r\n");
		return;
	}
	if (resp_is(a[1], l[1], "rl:top:{r}:b")) {
		fake_sends(c, "*2\r\n$1\r\nA\r\n$1\r\n5\r\n");
		return;
	}
	cr_assert(resp_is(a[1], l[1], "rl:top:{r}"));
	snprintf(out, sizeof(out),
	         "*4\r\n$1\r\nA\r\n$%zu\r\n%s\r\n"
	         "$1\r\nB\r\n$%zu\r\n%s\r\n",
	         sizeof(va) - 1, va, sizeof(vb) - 1, vb);
	fake_sends(c, out);
}

static const struct topk_item *
item(const struct topk_merge *m, const char *key)
{
	for (int i = 0; i < m->n; i++)
		if (strcmp(m->v[i].key, key) == 0)
			return &m->v[i];
	cr_assert_fail("no %s", key);
	return NULL;
}

/* A key an agent does not list was counted 0 there, so y, denied up to
 * 5 times on A besides its 8 on B, came out at 8: too low, against
 * "never too low". It counts A's bound, as its error does. */
Test(store_fake, toppool_read_counts_an_agents_bound_for_keys_it_does_not_list)
{
	struct served     s;
	struct topk_merge m = { 0 };
	redisContext     *c;

	c = serve_start(&s, two_views_handler);
	cr_assert_eq(toppool_read(&c, "r", TOP_NOW_MS, &m), 2);
	cr_assert_eq(m.total, 150);
	cr_assert_eq(m.n, 2);
	cr_assert_eq(item(&m, "x")->count, 13, "10 on A, 3 on B");
	cr_assert_eq(item(&m, "x")->err, 2, "B's bound is 0");
	cr_assert_eq(item(&m, "y")->count, 13, "8 on B, at most 5 on A");
	cr_assert_eq(item(&m, "y")->err, 5);
	topk_merge_free(&m);
	serve_stop(&s, c);
}

static char published[8192]; /* the last HSET's value of the views */
static char published_b[64]; /* of the bounds */

static void
hset_handler(struct fake_redis *fr, struct fake_cli *c, int argc,
             const char **a, const size_t *l)
{
	if (resp_is(a[0], l[0], "HSET") && argc >= 4) {
		int b = resp_is(a[1], l[1], "rl:top:{r}:b");

		cr_assert(b || resp_is(a[1], l[1], "rl:top:{r}"));
		snprintf(b ? published_b : published,
		         b ? sizeof(published_b) : sizeof(published), "%.*s",
		         (int)l[3], a[3]);
	}
	fake_sends(c, ":1\r\n");
}

/* A view of more keys than it lists: what it leaves out was counted at
 * most the last listed count, written beside the views. The view keeps
 * the first line an older reader takes ("ts total"): a view it cannot
 * parse, it counts as none and deletes as stale. */
Test(store_fake, toppool_publish_states_the_bound_of_the_keys_it_cuts)
{
	struct served     s;
	struct topk_merge m = { 0 };
	redisContext     *c;
	char              key[16], want[64];

	for (int i = 0; i < TOPK_K + 8; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		topk_merge_add(&m, key, strlen(key), 1000 - i, 0);
	}
	topk_merge_finish(&m);
	c = serve_start(&s, hset_handler);
	cr_assert_eq(toppool_publish(&c, "r", &m, TOP_NOW_MS), 0);
	snprintf(want, sizeof(want), "%lld %lld\n%d 0 2:k0\n", TOP_NOW_MS,
	         (long long)m.total, 1000);
	cr_assert_eq(strncmp(published, want, strlen(want)), 0, "%s",
	             published);
	snprintf(want, sizeof(want), "%d", 1000 - (TOPK_K - 1));
	cr_assert_str_eq(published_b, want);
	topk_merge_free(&m);
	serve_stop(&s, c);
}

/* ---- a sentinel's bad pub/sub message ----------------------------------- */

struct sen_state {
	const char *bad; /* sent after the subscription's confirmation */
	int         subscribed;
};

static void
sentinel_handler(struct fake_redis *fr, struct fake_cli *c, int argc,
                 const char **a, const size_t *l)
{
	struct sen_state *st = fr->arg;

	if (resp_is(a[0], l[0], "SUBSCRIBE")) {
		fake_sends(c, "*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master"
		              "\r\n:1\r\n");
		fake_sends(c, st->bad);
		st->subscribed++;
		return;
	}
	if (resp_is(a[0], l[0], "SENTINEL")) {
		fake_sends(c, "*-1\r\n"); /* no master known */
		return;
	}
	fake_sends(c, "-ERR fake\r\n");
}

/* hiredis 0.14 asserts on a pub/sub message it cannot route (fewer than
 * two elements, a channel that is not a string, an unsubscribe without
 * its count): one such message from a sentinel aborted the agent. It must
 * only cost that subscription, reopened after SUB_RETRY_S. */
static void
bad_message(const char *bad)
{
	struct rig       g;
	struct sen_state ss = { .bad = bad };
	int              never = 0;

	rig_open(&g, sentinel_handler, &ss, "redis+sentinel", "/mymaster");
	fake_run_until(g.loop, &never, 1.2);
	cr_assert_geq(ss.subscribed, 2, "subscribed, dropped, subscribed");
	rig_close(&g);
}

Test(store_fake, a_sentinel_message_of_one_element)
{
	bad_message("*1\r\n$7\r\nmessage\r\n");
}

Test(store_fake, a_sentinel_message_with_an_integer_channel)
{
	bad_message("*3\r\n$7\r\nmessage\r\n:5\r\n$1\r\nx\r\n");
}

Test(store_fake, a_sentinel_unsubscribe_without_its_count)
{
	bad_message("*3\r\n$11\r\nunsubscribe\r\n$14\r\n+switch-master\r\n"
	            "$1\r\nx\r\n");
}

/* ---- a healthy, idle Cluster node is not dropped as stuck -------------- */

struct slow_slots {
	int              maps;  /* CLUSTER SLOTS asked */
	int              hgets; /* HGETs seen */
	struct fake_cli *held;  /* a CLUSTER SLOTS whose reply is held */
	ev_timer         t;
};

static void
slow_slots_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct slow_slots *ss = w->data;

	if (ss->held != NULL) {
		struct fake_redis *fr = ss->held->fr;
		struct fake_cli   *c = ss->held;

		ss->held = NULL;
		send_one_node_map(fr, c);
		fake_sends(c, "$1\r\nx\r\n"); /* the HGET queued behind it */
	}
}

/* The first CLUSTER SLOTS is answered at once, the periodic ones after
 * 300 ms (a Redis slow for a moment: a fork, a long command of another
 * client), well under LINK_STALL_S. */
static void
slow_slots_handler(struct fake_redis *fr, struct fake_cli *c, int argc,
                   const char **a, const size_t *l)
{
	struct slow_slots *ss = fr->arg;

	if (answer_setup(c, argc, a, l))
		return;
	if (resp_is(a[0], l[0], "CLUSTER")) {
		if (ss->maps++ == 0) {
			send_one_node_map(fr, c);
			return;
		}
		ss->held = c;
		ev_timer_init(&ss->t, slow_slots_cb, 0.3, 0.);
		ss->t.data = ss;
		ev_timer_start(fr->loop, &ss->t);
		return;
	}
	if (resp_is(a[0], l[0], "HGET")) {
		ss->hgets++;
		if (ss->held == NULL)
			fake_sends(c, "$1\r\nx\r\n");
		return; /* else answered in order, after the map */
	}
	fake_sends(c, "-ERR fake\r\n");
}

/* The node is idle for CL_REFRESH_EVERY_S; its periodic CLUSTER SLOTS
 * goes out and a plan lookup follows it. Both are answered 300 ms
 * later. The node has not been silent for LINK_STALL_S while anything
 * waited, so it must not be dropped, and the lookup must succeed. The
 * stuck check counted its silence from its last call before the idle
 * time, and dropped it. */
Test(store_fake, an_idle_cluster_node_is_not_dropped_by_its_map_refresh)
{
	struct rig        g;
	struct slow_slots ss = { 0 };
	struct looked     lk = { 0 };
	int               never = 0;

	rig_open(&g, slow_slots_handler, &ss, "redis+cluster", "");
	cr_assert(rig_until(&g, rig_up), "the map came");
	/* up to the periodic refresh (5 s), then the lookup right behind it */
	for (int i = 0; i < 7000 && ss.held == NULL; i++) {
		ev_run(g.loop, EVRUN_ONCE | EVRUN_NOWAIT);
		usleep(1000);
	}
	cr_assert_not_null(ss.held, "the periodic CLUSTER SLOTS came");
	cr_assert_eq(store_hget(g.st, "rl:plans", "acme", 4, looked_cb, &lk),
	             0);
	store_flush(g.st);
	fake_run_until(g.loop, &lk.answered, 1.0);
	cr_assert_eq(lk.answered, 1, "the lookup is answered");
	cr_assert_eq(lk.err, 0, "with the node's value, not as failed");
	fake_run_until(g.loop, &never, 0.2);
	cr_assert_eq(g.fr.ncli, 1, "the link was never dropped");
	rig_close(&g);
}

/* ---- a hostile view whose counts stay under COUNT_MAX ------------------ */

#define DUPS 10000

static void
dup_lines_handler(struct fake_redis *fr, struct fake_cli *c, int argc,
                  const char **a, const size_t *l)
{
	static const char head[] = "1699999999900 1000000000000000\n";
	static const char line[] = "1000000000000000 0 1:x\n";
	size_t            vlen = sizeof(head) - 1 + DUPS * (sizeof(line) - 1);
	char              hdr[64];

	if (!resp_is(a[0], l[0], "HGETALL")) {
		fake_sends(c, ":0\r\n");
		return;
	}
	snprintf(hdr, sizeof(hdr), "*2\r\n$1\r\nA\r\n$%zu\r\n", vlen);
	fake_sends(c, hdr);
	fake_sends(c, head);
	for (int i = 0; i < DUPS; i++)
		fake_sends(c, line);
	fake_sends(c, "\r\n");
}

/* Every count is at most 10^15, but one view listing a key 10000 times
 * summed past INT64_MAX: a view lists a key once, TOPK_K keys at most,
 * and at most VIEWS_MAX views are summed. */
Test(store_fake, no_sum_of_a_views_counts_overflows)
{
	struct served     s;
	struct topk_merge m = { 0 };
	redisContext     *c;

	c = serve_start(&s, dup_lines_handler);
	cr_assert_geq(toppool_read(&c, "r", TOP_NOW_MS, &m), 0);
	for (int i = 0; i < m.n; i++) /* refused, or summed right */
		cr_expect_geq(m.v[i].count, 0, "count %lld",
		              (long long)m.v[i].count);
	topk_merge_free(&m);
	serve_stop(&s, c);
}

/* ---- toppool on a Cluster node that does not hold the rule's slot ------ */

#include "keyop.h"

static int owner_port;

/* A Cluster node without slot {r}: it refuses every keyed command with a
 * MOVED to the owner, before running it (in a MULTI too: EXECABORT). */
static void
wrong_node_handler(struct fake_redis *fr, struct fake_cli *c, int argc,
                   const char **a, const size_t *l)
{
	char out[96];

	snprintf(out, sizeof(out), "-MOVED 5061 127.0.0.1:%d\r\n", owner_port);
	fake_refuse(c, out);
}

static void
owner_handler(struct fake_redis *fr, struct fake_cli *c, int argc,
              const char **a, const size_t *l)
{
	if (resp_is(a[0], l[0], "HGETALL"))
		two_views_handler(fr, c, argc, a, l);
	else
		hset_handler(fr, c, argc, a, l);
}

/* admin.c and `top` talk to the first seed of a redis+cluster:// URL (or
 * to whichever node a key show was last redirected to); the rule's slot
 * is most often elsewhere. keyop follows one MOVED; toppool did not, so
 * on a Cluster publish failed (and with it every rule after it, for
 * ADMIN_BACKOFF_S) and GET /admin/top answered 503. */
Test(store_fake, toppool_follows_a_cluster_redirect)
{
	struct served     owner, wrong;
	struct policy     p = { 0 };
	struct topk_merge m = { 0 }, pub = { 0 };
	redisContext     *c, *oc;
	char              url[64], err[KEYOP_ERR_MAX];

	oc = serve_start(&owner, owner_handler);
	owner_port = owner.fr.port;
	redisFree(serve_start(&wrong, wrong_node_handler));
	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", wrong.fr.port);
	c = keyop_connect(&p, url, 1000000, err);
	cr_assert_not_null(c, "%s", err);
	topk_merge_add(&pub, "x", 1, 5, 0);
	topk_merge_finish(&pub);
	published[0] = '\0';
	cr_expect_eq(toppool_publish(&c, "r", &pub, TOP_NOW_MS), 0,
	             "published on the slot's node");
	cr_expect_neq(published[0], '\0');
	cr_expect_eq(toppool_read(&c, "r", TOP_NOW_MS, &m), 2,
	             "read from the slot's node");
	topk_merge_free(&pub);
	topk_merge_free(&m);
	serve_stop(&wrong, c);
	serve_stop(&owner, oc);
}

/* ---- a bound left without its view ------------------------------------- */

static char hdel_b[64]; /* the field last HDEL'ed from the bounds */

/* Agent A's view was deleted as stale by a reader that knows no bounds
 * (an older agent, during the upgrade), or the reader's second HDEL was
 * lost: the bound stays. */
static void
orphan_bound_handler(struct fake_redis *fr, struct fake_cli *c, int argc,
                     const char **a, const size_t *l)
{
	if (resp_is(a[0], l[0], "HGETALL"))
		fake_sends(c, resp_is(a[1], l[1], "rl:top:{r}:b")
		                      ? "*2\r\n$1\r\nA\r\n$1\r\n5\r\n"
		                      : "*0\r\n");
	else {
		if (resp_is(a[0], l[0], "HDEL") &&
		    resp_is(a[1], l[1], "rl:top:{r}:b"))
			snprintf(hdel_b, sizeof(hdel_b), "%.*s", (int)l[2],
			         a[2]);
		fake_sends(c, ":1\r\n");
	}
}

/* Publishers keep rl:top:{r}:b from expiring: a bound whose view is gone
 * was kept for ever. */
Test(store_fake, toppool_read_deletes_a_bound_without_its_view)
{
	struct served     s;
	struct topk_merge m = { 0 };
	redisContext     *c;

	c = serve_start(&s, orphan_bound_handler);
	cr_assert_eq(toppool_read(&c, "r", TOP_NOW_MS, &m), 0);
	cr_expect_str_eq(hdel_b, "A");
	topk_merge_free(&m);
	serve_stop(&s, c);
}
