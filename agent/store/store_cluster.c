/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store backend for a Redis Cluster, on one worker loop (store_ops.h).
 *
 * Slot map: CLUSTER SLOTS, asked of one node at a time (our own timer
 * bounds each try, as hiredis 0.14 has no timeouts), at start, every few
 * seconds, and soon (rate-limited) after a MOVED or a node error. Slots map
 * to master nodes; a node that left the map and was sent nothing for a
 * refresh period is forgotten (its link closed) before the next refresh,
 * unless it is a seed, so the table holds what the cluster is now, not
 * every address it ever had.
 * Every node has one link (link.h: the same connection, setup, backoff,
 * breaker and stall detection as a single Redis), opened lazily, so
 * commands may be queued on a node still connecting. Calls carry the one
 * input format of the script (batch.h), as on a single Redis.
 *
 * Routing: Redis Cluster refuses a script whose keys are in different slots
 * (CROSSSLOT), even on one node, so the unit of a call is the slot. Each
 * flush groups the queued requests' checks by slot: the checks of one
 * request that share a slot form one "part", evaluated atomically by the
 * script like a whole request on a single Redis, and the parts of all
 * requests on one slot go in one script call (up to STORE_BATCH_MAX parts).
 *
 * A request spanning slots is tracked by an xreq holding a copy of its
 * checks. When every part has answered, if one part vetoed (or failed),
 * the checks the other parts charged are undone with refund.lua, so the
 * request is charged nowhere, as on a single Redis. Sliding-log checks of
 * such requests get a member made here, so the refund knows what was
 * added; the script's reply ends with the TIME it ran at, which names the
 * window the window algorithms charged (a TIME asked before the call named
 * the last window when a boundary passed before the script ran, and the
 * refund gave back a unit of the wrong window).
 *
 * MOVED updates the slot's node, asks for a map refresh and resends; ASK
 * resends with ASKING to the named node (CL_MAX_REDIRECTS in all). Script
 * calls and plan lookups (HGET) alike: during a slot migration the source
 * answers ASK for every key already moved. A node that fails is marked
 * down (its requests get their fail mode) and is retried with backoff.
 * Contexts are freed only from timers or cluster_free(), never inside one
 * of their callbacks.
 *
 * Failures are accounted per node: each has its own cap on calls in
 * flight and its own breaker, so a node that stops answering costs only
 * the parts routed to it (they get STORE_EDOWN, and a request spanning
 * slots then its fail mode and refunds, as for a node that is down), never
 * the requests of the healthy nodes. A node with calls in flight that has
 * not answered for LINK_STALL_S (a SIGSTOP, a black hole: TCP stays up) is
 * dropped from a timer whatever its breaker says: its calls fail now, its
 * breaker opens, and it is reconnected and probed like any node that
 * failed.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "batch.h"
#include "crc16.h"
#include "link.h"
#include "log.h"
#include "metrics.h"
#include "reply.h"
#include "reqq.h"
#include "results.h"
#include "store_cluster.h"
#include "util.h"

#define CL_MAX_NODES       64
#define CL_MAX_QUEUE       4096
#define CL_MAX_INFLIGHT    1024 /* per node: calls sent, not answered */
#define CL_MAX_REDIRECTS   5
#define CL_REFRESH_MIN_S   0.1
#define CL_REFRESH_EVERY_S 5.0
#define CL_REFRESH_RETRY_S 0.5
#define CL_BACKOFF_MAX_US  2000000
#define CL_STUCK_CHECK_S   0.25 /* how often, while calls are in flight */

struct node {
	struct cluster *cl;
	struct link     link;    /* its host, port, state, breaker... */
	int             serving; /* has slots in the map */
};

/* A check of a request that spans slots, copied: the request may be
 * recycled by its caller before the parts answer, and refunds need it. */
struct xcheck {
	char              key[POLICY_KEY_MAX + 1];
	size_t            keylen;
	char              member[POLICY_MEMBER_MAX + 40];
	size_t            memberlen;
	int               algo, op;
	int64_t           cost, p[LIM_SCRIPT_PARAMS];
	unsigned          flags;
	unsigned          slot;
	int               charged;
	int64_t           at; /* TIME its call ran at (its reply's), µs */
	struct lim_result res;
};

struct xreq {
	struct store_req *sr;
	uint32_t          gen;
	int               n;
	int               pending; /* parts not answered */
	int               err;     /* first part error, or 0 */
	int               vetoed;
	struct xcheck     c[POLICY_MAX_CHECKS];
};

struct part {
	struct store_req *sr; /* a whole request; NULL for an xreq part */
	uint32_t          gen;
	struct xreq      *x;
	int               n;
	unsigned char     idx[POLICY_MAX_CHECKS]; /* positions in sr->index */
};

enum call_kind {
	CALL_SCRIPT = 0,
	CALL_REFUND,
};

struct call {
	struct cluster  *cl;
	struct node     *node;
	enum call_kind   kind;
	unsigned         slot;
	int              nparts;
	int              nchecks;
	struct batch_buf buf;
	int64_t          sent_us;
	int              redirects;
	int              retried; /* resent with EVAL (scriptlib_resend) */
	int              fcalled; /* last sent as FCALL */
	int              asking;
	struct part      parts[]; /* CALL_SCRIPT: STORE_BATCH_MAX */
};

struct cluster {
	struct ev_loop        *loop;
	struct metrics_worker *m;
	char                   user[128], pass[256];
	int64_t                timeout_us; /* connect, and a map try */
	int                    nnodes;
	int                    nseeds; /* nodes[0..nseeds): never forgotten */
	struct node           *nodes[CL_MAX_NODES];
	unsigned char          slots[CRC16_SLOTS]; /* node index + 1; 0: none */
	int                    have_map;
	/* map refresh */
	ev_timer  rtimer; /* try timeout, or the next refresh */
	int       refreshing;
	int       rtries;
	int       rnext;
	uintptr_t rseq;
	ev_tstamp last_refresh;
	/* requests */
	struct reqq      q;
	ev_timer         stimer; /* stuck nodes, while calls or HGETs are out */
	struct call    **open;   /* per slot, during a flush */
	unsigned        *touched;
	struct batch_enc enc;
	int              ntripped; /* nodes whose breaker tripped */
	uint64_t         id;       /* member prefix, random per store */
	uint64_t         seq;
	int              closing;
	struct results   res; /* the last reply, decoded */
};

static void refresh_soon(struct cluster *cl);
static int  call_send(struct call *b);

/* ---- breakers, one per node ---------------------------------------------- */

static void
call_failed(struct node *n)
{
	struct cluster *cl = n->cl;

	if (link_failed(&n->link))
		cl->ntripped++;
	assert(cl->ntripped >= 0 && cl->ntripped <= cl->nnodes);
	metrics_circuit(cl->m, cl->ntripped > 0);
}

static void
call_succeeded(struct node *n)
{
	struct cluster *cl = n->cl;

	if (link_succeeded(&n->link))
		cl->ntripped--;
	assert(cl->ntripped >= 0);
	metrics_circuit(cl->m, cl->ntripped > 0);
}

/* Up: the map is known and no node serving slots has its breaker open. */
static int
cluster_up(const void *be)
{
	const struct cluster *cl = be;
	ev_tstamp             now = ev_now(cl->loop);

	if (!cl->have_map)
		return 0;
	for (int i = 0; i < cl->nnodes; i++)
		if (cl->nodes[i]->serving &&
		    breaker_is_open(&cl->nodes[i]->link.br, now))
			return 0;
	return 1;
}

/* ---- nodes -------------------------------------------------------------- */

static void
node_up(struct link *l)
{
}

/* A node lost: the map may have changed. */
static void
node_lost(struct link *l)
{
	struct node *n = l->arg;

	refresh_soon(n->cl);
}

static const struct link_owner node_owner = {
	.up = node_up,
	.down = node_lost,
	.retry = NULL, /* lazy: node_usable() reconnects */
};

/* The node at host:port, added (down) if new; NULL when the table is full. */
static struct node *
node_get(struct cluster *cl, const char *host, size_t hlen, int port)
{
	struct store_addr a = { .port = port };
	struct link_cfg   cfg = {
		  .addr = &a,
		  .connect_timeout_us = cl->timeout_us,
		  .backoff_max_us = CL_BACKOFF_MAX_US,
		  .load_refund = 1,
		  .tag = " cluster=1",
	};
	struct node *n;

	if (hlen >= sizeof(a.host))
		return NULL;
	for (int i = 0; i < cl->nnodes; i++) {
		n = cl->nodes[i];
		if (n->link.addr.port == port &&
		    strlen(n->link.addr.host) == hlen &&
		    memcmp(n->link.addr.host, host, hlen) == 0)
			return n;
	}
	if (cl->nnodes == CL_MAX_NODES) {
		log_warn("cluster_too_many_nodes", "max=%d", CL_MAX_NODES);
		return NULL;
	}
	memcpy(a.host, host, hlen);
	snprintf(a.user, sizeof(a.user), "%s", cl->user);
	snprintf(a.pass, sizeof(a.pass), "%s", cl->pass);
	n = xcalloc(1, sizeof(*n));
	n->cl = cl;
	link_init(&n->link, cl->loop, cl->m, &node_owner, n, &cfg);
	cl->nodes[cl->nnodes++] = n;
	return n;
}

/* 1 if commands can be queued on <n> now, connecting it when it is down
 * and its backoff has passed. */
static int
node_usable(struct node *n)
{
	return link_usable(&n->link);
}

/* 1 if a call may be sent to <n> now: usable, under its cap on calls in
 * flight, and (unless <any>, for refunds) admitted by its breaker (after
 * a cooldown, only one probe at a time). */
static int
node_takes(struct node *n, int any)
{
	return n != NULL && node_usable(n) &&
	       n->link.inflight < CL_MAX_INFLIGHT &&
	       (any || breaker_admit(&n->link.br, ev_now(n->cl->loop)));
}

static struct node *
slot_node(const struct cluster *cl, unsigned slot)
{
	int i = cl->slots[slot];

	return i == 0 ? NULL : cl->nodes[i - 1];
}

static int
node_index(const struct cluster *cl, const struct node *n)
{
	for (int i = 0; i < cl->nnodes; i++)
		if (cl->nodes[i] == n)
			return i;
	return -1;
}

/* ---- slot map ----------------------------------------------------------- */

static void
arm_rtimer(struct cluster *cl, double after)
{
	ev_timer_stop(cl->loop, &cl->rtimer);
	ev_timer_set(&cl->rtimer, after, 0.);
	ev_timer_start(cl->loop, &cl->rtimer);
}

/* Fills <map> from a CLUSTER SLOTS reply asked of <from>. Returns -1 on a
 * bad shape. */
static int
parse_slots(struct cluster *cl, const struct node *from, redisReply *r,
            unsigned char *map)
{
	if (r->type != REDIS_REPLY_ARRAY)
		return -1;
	memset(map, 0, CRC16_SLOTS);
	for (size_t i = 0; i < r->elements; i++) {
		redisReply  *e = r->element[i], *m;
		const char  *host;
		size_t       hlen;
		struct node *n;
		long long    lo, hi;

		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
		    e->element[0]->type != REDIS_REPLY_INTEGER ||
		    e->element[1]->type != REDIS_REPLY_INTEGER ||
		    e->element[2]->type != REDIS_REPLY_ARRAY ||
		    e->element[2]->elements < 2)
			return -1;
		m = e->element[2];
		if (m->element[0]->type != REDIS_REPLY_STRING ||
		    m->element[1]->type != REDIS_REPLY_INTEGER)
			return -1;
		lo = e->element[0]->integer;
		hi = e->element[1]->integer;
		if (lo < 0 || hi >= CRC16_SLOTS || lo > hi)
			return -1;
		host = m->element[0]->str;
		hlen = m->element[0]->len;
		if (hlen == 0 || (hlen == 1 && host[0] == '?')) {
			host = from->link.addr
			               .host; /* "same endpoint as asked" */
			hlen = strlen(host);
		}
		n = node_get(cl, host, hlen, (int)m->element[1]->integer);
		if (n == NULL)
			continue;
		memset(map + lo, node_index(cl, n) + 1, (size_t)(hi - lo + 1));
	}
	return 0;
}

static void
apply_map(struct cluster *cl, const unsigned char *map)
{
	unsigned char used[CL_MAX_NODES] = { 0 };
	int           covered = 0;

	memcpy(cl->slots, map, CRC16_SLOTS);
	for (int s = 0; s < CRC16_SLOTS; s++)
		if (map[s] != 0) {
			used[map[s] - 1] = 1;
			covered++;
		}
	for (int i = 0; i < cl->nnodes; i++) {
		struct node *n = cl->nodes[i];

		n->serving = used[i];
		if (used[i])
			node_usable(n); /* connect eagerly */
		else if (breaker_tripped(&n->link.br))
			call_succeeded(n); /* no calls to come: forget */
	}
	if (!cl->have_map)
		log_info("cluster_map", "nodes=%d slots_covered=%d", cl->nnodes,
		         covered);
	cl->have_map = 1;
}

static void refresh_try(struct cluster *cl);

static void
slots_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct link    *l = ac->data;
	struct node    *n;
	struct cluster *cl;
	redisReply     *reply = r;
	unsigned char   map[CRC16_SLOTS];

	if (l == NULL)
		return; /* context dropped */
	n = l->arg;
	cl = n->cl;
	if (reply != NULL)
		l->last_reply = ev_now(cl->loop); /* it answers */
	if ((uintptr_t)privdata != cl->rseq || !cl->refreshing || cl->closing)
		return; /* an abandoned try */
	if (reply == NULL || reply->type == REDIS_REPLY_ERROR ||
	    parse_slots(cl, n, reply, map) == -1) {
		struct log_text e;

		log_text(&e, reply == NULL                      ? "no reply"
		             : reply->type == REDIS_REPLY_ERROR ? reply->str
		                                                : "bad reply");
		log_warn("cluster_slots_failed", "host=%s port=%d error=\"%s\"%s",
		         n->link.addr.host, n->link.addr.port, e.s,
		         LOG_CUT(e.cut));
		cl->rnext++;
		arm_rtimer(cl, 0.); /* the next node, from the timer */
		return;
	}
	apply_map(cl, map);
	cl->refreshing = 0;
	cl->last_refresh = ev_now(cl->loop);
	arm_rtimer(cl, CL_REFRESH_EVERY_S);
}

/* Asks the next node for the map: up nodes first, then any. */
static void
refresh_try(struct cluster *cl)
{
	struct node *pick = NULL;

	if (cl->rtries++ >= cl->nnodes) {
		cl->refreshing = 0;
		arm_rtimer(cl, CL_REFRESH_RETRY_S);
		return;
	}
	for (int k = 0; k < cl->nnodes && pick == NULL; k++) {
		struct node *n = cl->nodes[(cl->rnext + k) % cl->nnodes];

		if (n->link.state == LINK_UP)
			pick = n;
	}
	for (int k = 0; k < cl->nnodes && pick == NULL; k++) {
		struct node *n = cl->nodes[(cl->rnext + k) % cl->nnodes];

		if (node_usable(n))
			pick = n;
	}
	if (pick == NULL) {
		cl->refreshing = 0;
		arm_rtimer(cl, CL_REFRESH_RETRY_S);
		return;
	}
	cl->rnext = node_index(cl, pick);
	link_busy(&pick->link);
	if (redisAsyncCommand(pick->link.ac, slots_cb, (void *)++cl->rseq,
	                      "CLUSTER SLOTS") != REDIS_OK) {
		cl->rnext++;
		arm_rtimer(cl, 0.);
		return;
	}
	arm_rtimer(cl, (double)cl->timeout_us / 1e6);
}

/* Frees <n>, which serves no slot and has no call out; its link's pending
 * setup commands get NULL replies, which their callbacks ignore. */
static void
node_forget(struct node *n)
{
	struct cluster *cl = n->cl;

	log_info("cluster_node_forgotten", "host=%s port=%d", n->link.addr.host,
	         n->link.addr.port);
	if (breaker_tripped(&n->link.br)) {
		cl->ntripped--;
		metrics_circuit(cl->m, cl->ntripped > 0);
	}
	link_close(&n->link);
	free(n);
}

/* 1 if <n> may be forgotten: not a seed, in no slot (<used>: the map's
 * nodes), and nothing sent to it for a refresh period: no call out, no
 * HGET (not counted in inflight) likely pending, and an ASK target of a
 * slot being migrated, in no slot yet, is kept while it is asked. */
static int
node_forgettable(const struct cluster *cl, int i, const unsigned char *used)
{
	const struct node *n = cl->nodes[i];

	return i >= cl->nseeds && !used[i] && n->link.inflight == 0 &&
	       ev_now(cl->loop) - n->link.last_call >= CL_REFRESH_EVERY_S;
}

/* Forgets the nodes that left the map (node_forgettable) and renumbers
 * the map: addresses come and go (a node restarted elsewhere, a pod with a
 * new IP), and a table that only grew would fill, leaving the slots of the
 * next new node unmapped. The table is made whole first and the nodes
 * freed after: freeing a link fails what is still queued on it (an HGET),
 * and the callbacks that follow may walk the table. From the refresh
 * timer, between refreshes. */
static void
forget_unmapped(struct cluster *cl)
{
	unsigned char used[CL_MAX_NODES] = { 0 }, to[CL_MAX_NODES] = { 0 };
	struct node  *gone[CL_MAX_NODES];
	int           k = 0, ngone = 0;

	for (int s = 0; s < CRC16_SLOTS; s++)
		if (cl->slots[s] != 0)
			used[cl->slots[s] - 1] = 1;
	for (int i = 0; i < cl->nnodes; i++) {
		if (node_forgettable(cl, i, used)) {
			gone[ngone++] = cl->nodes[i];
			continue;
		}
		to[i] = (unsigned char)(k + 1);
		cl->nodes[k++] = cl->nodes[i];
	}
	if (ngone == 0)
		return;
	for (int s = 0; s < CRC16_SLOTS; s++)
		if (cl->slots[s] != 0)
			cl->slots[s] = to[cl->slots[s] - 1];
	cl->nnodes = k;
	cl->rnext = 0;
	for (int i = 0; i < ngone; i++)
		node_forget(gone[i]);
}

static void
rtimer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct cluster *cl = container_of(w, struct cluster, rtimer);

	if (!cl->refreshing) {
		forget_unmapped(cl);
		cl->refreshing = 1;
		cl->rtries = 0;
	} else {
		cl->rseq++; /* a try timed out or failed: drop it */
	}
	refresh_try(cl);
}

static void
refresh_soon(struct cluster *cl)
{
	double d;

	if (cl->refreshing || cl->closing)
		return;
	d = cl->last_refresh + CL_REFRESH_MIN_S - ev_now(cl->loop);
	if (ev_is_active(&cl->rtimer) &&
	    ev_timer_remaining(cl->loop, &cl->rtimer) <= (d > 0 ? d : 0))
		return;
	arm_rtimer(cl, d > 0 ? d : 0.);
}

/* ---- script calls ------------------------------------------------------- */

/* Check <k> of part <p> as it is sent, from a caller's check or an xreq
 * copy. */
static void
part_check(const struct part *p, int k, struct batch_check *v)
{
	if (p->x != NULL) {
		const struct xcheck *c = &p->x->c[p->idx[k]];

		*v = (struct batch_check){
			.key = c->key,
			.keylen = c->keylen,
			.member = c->member,
			.memberlen = c->memberlen,
			.algo = c->algo,
			.op = c->op,
			.flags = c->flags,
			.cost = c->cost,
		};
		memcpy(v->p, c->p, sizeof(v->p));
	} else {
		const struct check *c = &p->sr->checks[p->sr->index[p->idx[k]]];

		v->key = c->key;
		v->keylen = c->keylen;
		v->member = c->member;
		v->memberlen = c->memberlen;
		v->algo = c->lim.algo;
		v->op = c->op;
		v->cost = c->cost;
		lim_script_params(&c->lim, v->p);
		v->flags = c->flags & LIM_FL_SHADOW;
	}
}

/* The script call of <b> into its own buffer (batch.h), every string
 * copied: a resend (NOSCRIPT, MOVED, ASK) must not depend on the callers'
 * memory. */
static void
call_build(struct call *b)
{
	struct batch_check *v = xmalloc((size_t)b->nchecks * sizeof(*v));
	int                 part_n[STORE_BATCH_MAX], j = 0;

	assert(b->kind == CALL_SCRIPT && b->nparts <= STORE_BATCH_MAX);
	for (int i = 0; i < b->nparts; i++) {
		part_n[i] = b->parts[i].n;
		for (int k = 0; k < b->parts[i].n; k++)
			part_check(&b->parts[i], k, &v[j++]);
	}
	assert(j == b->nchecks);
	batch_encode(&b->cl->enc, &b->buf, v, b->nchecks, part_n, b->nparts);
	free(v);
}

static void
call_free(struct call *b)
{
	batch_buf_free(&b->buf);
	free(b);
}

static struct call *
call_new(struct cluster *cl, enum call_kind kind, unsigned slot, struct node *n)
{
	struct call *b = xcalloc(
		1, sizeof(*b) + (kind == CALL_SCRIPT
	                                 ? STORE_BATCH_MAX * sizeof(struct part)
	                                 : 0));

	b->cl = cl;
	b->kind = kind;
	b->slot = slot;
	b->node = n;
	return b;
}

static void x_finish(struct cluster *cl, struct xreq *x);

static void
part_fail(struct cluster *cl, struct part *p, int err)
{
	if (p->x == NULL) {
		reqq_answer(p->sr, p->gen, err);
		return;
	}
	if (p->x->err == 0)
		p->x->err = err;
	if (--p->x->pending == 0)
		x_finish(cl, p->x);
}

static void
call_fail(struct call *b, int err)
{
	for (int i = 0; i < b->nparts; i++)
		part_fail(b->cl, &b->parts[i], err);
}

/* What the script charged for a check of a part that was not vetoed
 * (ratelimit.lua: eval_check and the *_eval functions). Releases are not
 * refunded: a lease cannot be given back with its old expiry. A peek
 * charged nothing: "refunded", it gave back a unit another request had
 * spent (a counted failure, per refused request). */
static int
was_charged(const struct xcheck *c)
{
	if (c->op == LIM_OP_RELEASE || c->op == LIM_OP_PEEK || c->cost <= 0 ||
	    c->cost > LIM_COST_MAX || c->algo < 0 || c->algo >= LIM_ALGO_COUNT)
		return 0;
	/* a settle is applied whatever its request says: never undone */
	if (c->op == LIM_OP_FORCE && c->p[5] > 0 && c->memberlen > 0)
		return 0;
	return c->res.allowed == 1 || c->op == LIM_OP_FORCE;
}

/* The results of part <p>, whose first check is result <k> of the reply
 * decoded in cl->res. The callbacks run here (sr->cb, x_finish) may start
 * requests and send calls, never read a reply, so cl->res holds until
 * the last part is delivered. */
static void
part_deliver(struct call *b, struct part *p, size_t k)
{
	const struct results *rs = &b->cl->res;
	struct xreq          *x = p->x;
	int                   veto = 0;

	if (x == NULL) {
		struct store_req *sr = p->sr;

		if (sr->gen != p->gen)
			return;
		for (int i = 0; i < p->n; i++)
			results_get(rs, k + (size_t)i,
			            &sr->results[sr->index[p->idx[i]]]);
		sr->cb(sr, STORE_OK);
		return;
	}
	for (int i = 0; i < p->n; i++) {
		struct xcheck *c = &x->c[p->idx[i]];

		results_get(rs, k + (size_t)i, &c->res);
		c->at = rs->now_us;
		/* as the script vetoes: a peek that refuses too (count:
		 * response, count: failures), else the other slots kept
		 * the charges, leases and reservations of a refused
		 * request */
		if (lim_vetoes(c->op, (c->flags & LIM_FL_SHADOW) != 0,
		               &c->res))
			veto = 1;
	}
	for (int i = 0; i < p->n && !veto; i++)
		x->c[p->idx[i]].charged = was_charged(&x->c[p->idx[i]]);
	x->vetoed |= veto;
	if (--x->pending == 0)
		x_finish(b->cl, x);
}

static int
call_deliver(struct call *b, redisReply *reply)
{
	size_t k = 0;

	if (reply->type != REDIS_REPLY_STRING ||
	    results_decode(&b->cl->res, reply->str, reply->len,
	                   (size_t)b->nchecks) == -1)
		return -1;
	util_redis_seen(b->cl->res.now_us);
	for (int i = 0; i < b->nparts; i++) {
		part_deliver(b, &b->parts[i], k);
		k += (size_t)b->parts[i].n;
	}
	return 0;
}

/* The node that the redirect <err> (MOVED or ASK) for <slot> names, when
 * it may be sent to now (node_takes, with <any>), else NULL: not a
 * redirect, <redirects> already followed, or the node cannot take it.
 * A MOVED asks for a map refresh, and the node is put in the map for
 * <slot> at once. <*asking>: it was an ASK, whose command goes after
 * ASKING, the map unchanged. */
static struct node *
redirect_to(struct cluster *cl, const char *err, unsigned slot, int redirects,
            int any, int *asking)
{
	const char         *host;
	size_t              hlen;
	int                 port;
	enum reply_redirect kind = reply_redirect(err, &host, &hlen, &port);
	struct node        *n;

	if (kind == REPLY_REDIRECT_NONE)
		return NULL;
	if (kind == REPLY_REDIRECT_MOVED)
		refresh_soon(cl);
	if (cl->closing || redirects >= CL_MAX_REDIRECTS ||
	    (n = node_get(cl, host, hlen, port)) == NULL || !node_takes(n, any))
		return NULL;
	if (kind == REPLY_REDIRECT_MOVED) {
		cl->slots[slot] = (unsigned char)(node_index(cl, n) + 1);
		n->serving = 1;
	}
	*asking = kind == REPLY_REDIRECT_ASK;
	return n;
}

/* Handles MOVED and ASK: 1 when <b> was resent. */
static int
follow_redirect(struct call *b, const char *err)
{
	struct node *n = redirect_to(b->cl, err, b->slot, b->redirects,
	                             b->kind == CALL_REFUND, &b->asking);

	if (n == NULL)
		return 0;
	b->redirects++;
	b->node = n;
	return call_send(b) == 0;
}

static void call_cb(redisAsyncContext *ac, void *r, void *privdata);

/* Something went out on a node: watch the nodes for one that stops. */
static void
watch_stuck(struct cluster *cl)
{
	if (!ev_is_active(&cl->stimer))
		ev_timer_again(cl->loop, &cl->stimer);
}

/* Queues <b> on its node: [ASKING] then the call (link_call:
 * FCALL, EVALSHA, or EVAL before the sha is known or after NOSCRIPT).
 * Returns -1, with nothing queued, if the node cannot take it; the caller
 * then fails and frees <b>. */
static int
call_send(struct call *b)
{
	struct cluster    *cl = b->cl;
	struct node       *n = b->node;
	redisAsyncContext *ac = n->link.ac;

	if (ac == NULL || (ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING)))
		return -1;
	if (b->buf.buf == NULL)
		call_build(b);
	if (b->asking)
		redisAsyncCommand(ac, NULL, NULL, "ASKING");
	if (link_call(&n->link, &b->buf,
	              b->kind == CALL_SCRIPT ? LINK_RATELIMIT : LINK_REFUND,
	              b->retried, call_cb, b, &b->fcalled) == -1)
		return -1;
	b->sent_us = util_monotonic_us();
	watch_stuck(cl);
	return 0;
}

/* ---- refunds ------------------------------------------------------------ */

static void
refund_send(struct cluster *cl, struct xreq *x, unsigned slot,
            unsigned char *done)
{
	struct node *n = slot_node(cl, slot);
	struct call *b = call_new(cl, CALL_REFUND, slot, n);
	int          m = 0;
	int64_t      level[POLICY_MAX_CHECKS];

	for (int j = 0; j < x->n; j++)
		m += x->c[j].charged && x->c[j].slot == slot;
	assert(m > 0);
	batch_buf_reset(&b->buf); /* refund.lua takes plain arguments */
	batch_arg_int(&b->buf, m);
	for (int j = 0; j < x->n; j++)
		if (x->c[j].charged && x->c[j].slot == slot)
			batch_arg_str(&b->buf, x->c[j].key, x->c[j].keylen);
	for (int j = 0; j < x->n; j++) {
		const struct xcheck *c = &x->c[j];

		if (!c->charged || c->slot != slot)
			continue;
		done[j] = 1;
		/* the same key charged earlier in the request: the script
		 * charged this one on top of it */
		level[j] = LIM_LEVEL_NONE;
		for (int i = j - 1; i >= 0; i--) {
			const struct xcheck *e = &x->c[i];

			if (e->charged && e->slot == slot &&
			    e->algo == c->algo && e->keylen == c->keylen &&
			    memcmp(e->key, c->key, c->keylen) == 0 &&
			    memcmp(e->p, c->p, 3 * sizeof(c->p[0])) == 0) {
				level[j] = level[i];
				break;
			}
		}
		batch_arg_int(&b->buf, c->algo);
		batch_arg_int(&b->buf, c->op);
		batch_arg_int(&b->buf, c->cost);
		batch_arg_int(&b->buf, c->p[0]);
		batch_arg_int(&b->buf, c->p[1]);
		batch_arg_int(&b->buf, c->p[2]);
		batch_arg_str(&b->buf, c->member, c->memberlen);
		batch_arg_int(&b->buf, c->at);
		batch_arg_int(&b->buf, lim_charge_taken(c->algo, c->p, c->cost,
		                                        &c->res, &level[j]));
	}
	if (!node_takes(n, 1) || call_send(b) == -1) {
		log_warn("redis_refund_lost",
		         "slot=%u checks=%d error=\"node down\"", slot, m);
		call_free(b);
	}
}

/* One part vetoed or failed: undo what the others charged, per slot. */
static void
refund(struct cluster *cl, struct xreq *x)
{
	unsigned char done[POLICY_MAX_CHECKS] = { 0 };

	for (int j = 0; j < x->n; j++)
		if (x->c[j].charged && !done[j])
			refund_send(cl, x, x->c[j].slot, done);
}

static void
refund_done(struct call *b, redisReply *reply, int resend)
{
	struct log_text e;

	if (reply == NULL) {
		log_warn("redis_refund_lost", "slot=%u error=\"no reply\"",
		         b->slot);
	} else if (reply->type == REDIS_REPLY_ERROR) {
		if (resend && !b->retried && !b->cl->closing) {
			b->retried = 1;
			if (call_send(b) == 0)
				return;
		}
		if (follow_redirect(b, reply->str))
			return;
		log_text(&e, reply->str);
		log_warn("redis_refund_lost", "slot=%u error=\"%s\"%s",
		         b->slot, e.s, LOG_CUT(e.cut));
	}
	call_free(b);
}

static void
x_finish(struct cluster *cl, struct xreq *x)
{
	struct store_req *sr = x->sr;

	if ((x->err != 0 || x->vetoed) && !cl->closing)
		refund(cl, x);
	if (sr->gen == x->gen) {
		if (x->err == 0)
			for (int j = 0; j < x->n; j++)
				sr->results[sr->index[j]] = x->c[j].res;
		sr->cb(sr, x->err != 0 ? x->err : STORE_OK);
	}
	free(x);
}

/* ---- replies ------------------------------------------------------------ */

static void
log_call_error(const struct call *b, const char *err)
{
	struct log_text e;

	log_text(&e, err);
	log_warn("redis_error", "host=%s port=%d error=\"%s\" outage=%d%s",
	         b->node->link.addr.host, b->node->link.addr.port, e.s,
	         link_error_is_outage(err), LOG_CUT(e.cut));
}

static void
call_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct call    *b = privdata;
	struct cluster *cl = b->cl;
	struct node    *n = b->node; /* a resend may change b->node */
	redisReply     *reply = r;
	int             resend = link_answered(&n->link, reply, b->fcalled);

	metrics_redis_latency(cl->m, util_monotonic_us() - b->sent_us);
	if (b->kind == CALL_REFUND) {
		refund_done(b, reply, resend);
		return;
	}
	if (reply == NULL) {
		metrics_redis_error(cl->m, METRICS_REDIS_IO);
		call_failed(n);
		call_fail(b, STORE_EIO);
		call_free(b);
		return;
	}
	if (reply->type == REDIS_REPLY_ERROR) {
		if (resend && !b->retried && !cl->closing) {
			b->retried = 1;
			if (call_send(b) == 0)
				return;
		}
		if (follow_redirect(b, reply->str))
			return;
		log_call_error(b, reply->str);
		if (strncmp(reply->str, "CLUSTERDOWN", 11) == 0)
			refresh_soon(cl);
	}
	if (reply->type == REDIS_REPLY_ERROR || call_deliver(b, reply) == -1) {
		/* a per-key error (WRONGTYPE) shows the node answering: only
		 * one saying it cannot serve feeds the breaker (as
		 * store_single.c) */
		metrics_redis_error(cl->m, METRICS_REDIS_REPLY);
		if (reply->type != REDIS_REPLY_ERROR ||
		    link_error_is_outage(reply->str))
			call_failed(n);
		else
			call_succeeded(n);
		call_fail(b, STORE_EREPLY);
	} else {
		call_succeeded(n);
	}
	call_free(b);
}

/* ---- routing ------------------------------------------------------------ */

static void
flush_one(struct cluster *cl, struct call *b)
{
	if (call_send(b) == -1) {
		call_fail(b, STORE_EDOWN);
		call_free(b);
	}
}

/* Adds part <p> to this flush's call for <slot>; <release>: it only gives
 * leases back, and goes even through an open breaker (reqq_releases_only). */
static void
add_part(struct cluster *cl, unsigned slot, const struct part *p, int *ntouched,
         int release)
{
	struct node *n = slot_node(cl, slot);
	struct call *b;

	if (!node_takes(n, release)) { /* down, stuck or failing: this part
		                        * only gets its fail mode */
		struct part tmp = *p;

		part_fail(cl, &tmp, STORE_EDOWN);
		return;
	}
	b = cl->open[slot];
	if (b != NULL && b->nparts == STORE_BATCH_MAX) {
		flush_one(cl, b);
		b = cl->open[slot] = call_new(cl, CALL_SCRIPT, slot, n);
	} else if (b == NULL) {
		b = cl->open[slot] = call_new(cl, CALL_SCRIPT, slot, n);
		cl->touched[(*ntouched)++] = slot;
	}
	b->parts[b->nparts++] = *p;
	b->nchecks += p->n;
}

/* Copies check <j> of <sr> into <c>; a sliding-log check without a member
 * gets one made here, so that its refund knows the entries it added. */
static void
x_copy(struct cluster *cl, const struct store_req *sr, int j, unsigned slot,
       struct xcheck *c)
{
	const struct check *k = &sr->checks[sr->index[j]];

	memcpy(c->key, k->key, k->keylen);
	c->keylen = k->keylen;
	memcpy(c->member, k->member, k->memberlen);
	c->memberlen = k->memberlen;
	if (k->lim.algo == LIM_SLIDING_LOG && k->memberlen == 0)
		c->memberlen = (size_t)snprintf(c->member, sizeof(c->member),
		                                "x%016llx.%llu",
		                                (unsigned long long)cl->id,
		                                (unsigned long long)++cl->seq);
	c->algo = k->lim.algo;
	c->op = k->op;
	c->cost = k->cost;
	lim_script_params(&k->lim, c->p);
	c->flags = k->flags & LIM_FL_SHADOW;
	c->slot = slot;
}

static void
route(struct cluster *cl, struct store_req *sr, int *ntouched)
{
	unsigned     slot[POLICY_MAX_CHECKS];
	int          nslots = 1, n = sr->n;
	struct part  p = { .sr = sr, .gen = sr->sent_gen };
	int          release = reqq_releases_only(sr);
	struct xreq *x;

	if (n <= 0 || n > POLICY_MAX_CHECKS) {
		reqq_answer(sr, sr->sent_gen, n <= 0 ? STORE_OK : STORE_EREPLY);
		return;
	}
	for (int j = 0; j < n; j++) {
		const struct check *c = &sr->checks[sr->index[j]];

		slot[j] = crc16_key_slot(c->key, c->keylen);
		if (slot[j] != slot[0])
			nslots = 2;
	}
	if (nslots <= 1) { /* one slot: the single-Redis path */
		p.n = n;
		for (int j = 0; j < n; j++)
			p.idx[j] = (unsigned char)j;
		add_part(cl, slot[0], &p, ntouched, release);
		return;
	}
	x = xcalloc(1, sizeof(*x));
	x->sr = sr;
	x->gen = sr->sent_gen;
	x->n = n;
	for (int j = 0; j < n; j++)
		x_copy(cl, sr, j, slot[j], &x->c[j]);
	/* one part per distinct slot; count them first so that a part that
	 * fails at once cannot finish the xreq before the others are added */
	unsigned char seen[POLICY_MAX_CHECKS] = { 0 };
	struct part   parts[POLICY_MAX_CHECKS];
	int           np = 0;

	for (int j = 0; j < n; j++) {
		if (seen[j])
			continue;
		parts[np] = (struct part){ .sr = NULL, .gen = x->gen, .x = x };
		for (int k = j; k < n; k++)
			if (!seen[k] && slot[k] == slot[j]) {
				seen[k] = 1;
				parts[np].idx[parts[np].n++] = (unsigned char)k;
			}
		np++;
	}
	x->pending = np;
	for (int i = 0; i < np; i++)
		add_part(cl, slot[parts[i].idx[0]], &parts[i], ntouched,
		         release);
}

static void
cluster_flush(void *be)
{
	struct cluster *cl = be;
	int             ntouched = 0;

	while (cl->q.head != NULL && ntouched < CRC16_SLOTS - POLICY_MAX_CHECKS)
		route(cl, reqq_pop(&cl->q), &ntouched);
	for (int i = 0; i < ntouched; i++) {
		struct call *b = cl->open[cl->touched[i]];

		cl->open[cl->touched[i]] = NULL;
		flush_one(cl, b);
	}
}

static void
cluster_cancel(void *be, struct store_req *sr)
{
	struct cluster *cl = be;

	reqq_remove(&cl->q, sr);
}

static int
cluster_submit(void *be, struct store_req *sr)
{
	struct cluster *cl = be;

	/* nodes refuse at the flush, part by part (add_part) */
	if (!cl->have_map || cl->closing || cl->q.queued >= CL_MAX_QUEUE)
		return STORE_EDOWN;
	reqq_push(&cl->q, sr);
	return STORE_OK;
}

/* ---- HGET, timeouts ----------------------------------------------------- */

/* An HGET (the plan lookup) in flight, with its own copy of what it
 * asks: a MOVED or an ASK sends it again to the node named, as for a
 * script call, and by then the caller's strings may be gone (a reload
 * frees the policy that named the hash). An ASK comes while the slot
 * migrates and the hash has moved already: failing it would give every
 * tenant not cached its fail mode until the migration ends. */
struct chget {
	struct cluster *cl;
	store_value_cb *cb;
	void           *arg;
	unsigned        slot;
	int             redirects;
	size_t          fieldlen;
	char           *hash;    /* in <field>'s block, after it */
	char            field[]; /* <fieldlen> bytes, then <hash> */
};

/* 1 if an HGET may go to <n> now: not while its breaker is open, but
 * never as the half-open probe either: an HGET's answer does not close
 * the breaker (as on a single Redis). */
static int
hget_takes(const struct cluster *cl, struct node *n)
{
	return node_takes(n, 1) &&
	       !breaker_is_open(&n->link.br, ev_now(cl->loop));
}

static void
chget_done(void *arg, const char *val, size_t len, int err)
{
	struct chget *h = arg;

	h->cb(h->arg, val, len, err);
	free(h);
}

static int chget_redirect(void *arg, const char *err);

/* Sends <h> to <n>; -1 when the node cannot take it (nothing sent). */
static int
chget_send(struct chget *h, struct node *n, int asking)
{
	if (link_hget(&n->link, h->hash, h->field, h->fieldlen, asking,
	              chget_done, h, chget_redirect) == -1)
		return -1;
	watch_stuck(h->cl);
	return 0;
}

/* An error answered <h>: 1 when it was a redirect, followed. */
static int
chget_redirect(void *arg, const char *err)
{
	struct chget *h = arg;
	struct node  *n;
	int           asking = 0;

	n = redirect_to(h->cl, err, h->slot, h->redirects, 1, &asking);
	if (n == NULL || !hget_takes(h->cl, n))
		return 0;
	h->redirects++;
	return chget_send(h, n, asking) == 0;
}

static int
cluster_hget(void *be, const char *hash, const char *field, size_t fieldlen,
             store_value_cb *cb, void *arg)
{
	struct cluster *cl = be;
	size_t          hlen = strlen(hash);
	unsigned        slot = crc16_key_slot(hash, hlen);
	struct node    *n = slot_node(cl, slot);
	struct chget   *h;

	if (!cl->have_map || cl->closing || !hget_takes(cl, n))
		return -1;
	h = xmalloc(sizeof(*h) + fieldlen + hlen + 1);
	*h = (struct chget){ .cl = cl, .cb = cb, .arg = arg, .slot = slot,
		             .fieldlen = fieldlen };
	memcpy(h->field, field, fieldlen);
	h->hash = h->field + fieldlen;
	memcpy(h->hash, hash, hlen + 1);
	if (chget_send(h, n, 0) == -1) {
		free(h);
		return -1;
	}
	return 0;
}

/* Drops every node that has calls or HGETs out and has not answered for
 * LINK_STALL_S: they fail now (a NULL reply each; a call's opens the
 * node's breaker), and it reconnects after its backoff. Being late but
 * answering (overload) is not stuck. From timers only. */
static void
drop_stuck(struct cluster *cl)
{
	for (int i = 0; i < cl->nnodes; i++) {
		struct link *l = &cl->nodes[i]->link;

		/* a link still in its set-up has its connect timer */
		if ((l->inflight > 0 || l->state == LINK_UP) &&
		    link_stalled(l, 0))
			link_drop(l);
	}
}

static void
stimer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct cluster *cl = container_of(w, struct cluster, stimer);

	drop_stuck(cl);
	for (int i = 0; i < cl->nnodes; i++) /* after: drops send refunds */
		if (link_waiting(&cl->nodes[i]->link))
			return;
	ev_timer_stop(loop, w); /* call_send and cluster_hget restart it */
}

/* A request's deadline passed: counted; a stuck node is dropped now
 * rather than at the next stimer tick. The breakers are fed by the calls
 * themselves, per node: a deadline does not say which node was late. */
static void
cluster_note_timeout(void *be)
{
	struct cluster *cl = be;

	metrics_redis_error(cl->m, METRICS_REDIS_TIMEOUT);
	drop_stuck(cl);
}

/* ---- life --------------------------------------------------------------- */

static void
cluster_free(void *be)
{
	struct cluster *cl = be;

	cl->closing = 1;
	ev_timer_stop(cl->loop, &cl->rtimer);
	reqq_fail_all(&cl->q, STORE_EDOWN);
	for (int i = 0; i < cl->nnodes; i++)
		link_close(&cl->nodes[i]->link); /* calls: NULL replies */
	ev_timer_stop(cl->loop, &cl->stimer);
	for (int i = 0; i < cl->nnodes; i++)
		free(cl->nodes[i]);
	free(cl->open);
	free(cl->touched);
	batch_enc_free(&cl->enc);
	results_free(&cl->res);
	free(cl);
}

const struct store_ops store_cluster_ops = {
	.submit = cluster_submit,
	.flush = cluster_flush,
	.hget = cluster_hget,
	.cancel = cluster_cancel,
	.up = cluster_up,
	.note_timeout = cluster_note_timeout,
	.free = cluster_free,
};

void *
store_cluster_new(struct ev_loop *loop, const struct store_topo *t,
                  const char *user, const char *pass,
                  int64_t connect_timeout_us, struct metrics_worker *m)
{
	struct cluster *cl = xcalloc(1, sizeof(*cl));

	results_init(&cl->res);
	cl->loop = loop;
	cl->m = m;
	snprintf(cl->user, sizeof(cl->user), "%s", user);
	snprintf(cl->pass, sizeof(cl->pass), "%s", pass);
	cl->timeout_us = connect_timeout_us;
	cl->open = xcalloc(CRC16_SLOTS, sizeof(*cl->open));
	cl->touched = xcalloc(CRC16_SLOTS, sizeof(*cl->touched));
	cl->id = ((uint64_t)util_wall_us() << 16) ^ (uint64_t)(uintptr_t)cl ^
	         (uint64_t)util_monotonic_us();
	for (int i = 0; i < t->nseeds; i++)
		node_get(cl, t->seeds[i].host, strlen(t->seeds[i].host),
		         t->seeds[i].port);
	cl->nseeds = cl->nnodes; /* duplicates are one node */
	ev_init(&cl->rtimer, rtimer_cb);
	ev_init(&cl->stimer, stimer_cb);
	cl->stimer.repeat = CL_STUCK_CHECK_S;
	arm_rtimer(cl, 0.);
	return cl;
}
