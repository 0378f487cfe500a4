/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One NOTIFY, from its messages to its ACK.
 *
 *   req_start: messages -> checks (policy; a tenant whose plan is not
 *              known yet holds the request until its HGET answers, within
 *              redis.timeout: plan_hold) -> missing-key denials,
 *              near-cache hits and local-tier rules decided at once -> the
 *              Redis checks queued on the worker's store with a deadline
 *              (redis.timeout)
 *   store_done_cb / req_deadline_passed: results, or each rule's fail
 *              mode; then the local-tier checks charged, unless Redis
 *              refused
 *   req_finish: decide -> ACK queued on the conn (or held, for a leaky
 *              bucket in delay mode) -> the leases HAProxy will not
 *              release given back (give_back) -> the request goes back to
 *              the pool
 *
 * A denied request is charged nowhere: one denied at once never reaches
 * Redis, and the local-tier checks of a request that goes to Redis are only
 * evaluated (peeked) until Redis has answered without a veto. A lease that
 * Redis took anyway (a late answer, a local veto after Redis) is released
 * by the agent when HAProxy will not.
 *
 * Requests are recycled through their worker's pool (reqpool.c): no
 * allocation per request once the pool is warm. A request holds a reference on
 * its conn and a pin on the policy it was built under, so a reload or a closed
 * connection in the middle changes nothing for it. A request giving leases
 * back (or sending again a release Redis did not answer) drops its conn
 * once the ACK is queued and keeps its pin until Redis has answered the
 * release or it is given up.
 */
#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <ev.h>

#include "conn.h"
#include "deadline.h"
#include "decide.h"
#include "declog.h"
#include "local.h"
#include "log.h"
#include "metrics.h"
#include "nearcache.h"
#include "ovcache.h"
#include "plancache.h"
#include "policy.h"
#include "policy_orphan.h"
#include "ratelog.h"
#include "req.h"
#include "reqpool.h"
#include "store.h"
#include "topk.h"
#include "util.h"

/* A request's checks: those of its messages that fit, and one more standing
 * for those that did not (see note_overflow). */
#define REQ_MAX_CHECKS (POLICY_MAX_CHECKS + 1)
_Static_assert(REQ_MAX_CHECKS <= 32, "plan_lost has a bit per check");

struct req {
	struct req_env    *e;
	struct conn       *c;
	struct policy     *policy; /* pin->p */
	struct policy_pin *pin;
	uint64_t           sid, fid;
	int                n;     /* checks */
	int                spill; /* index of the check standing for
	                           * those that did not fit, or -1 */
	int             nredis;
	int64_t         start_us;    /* when the NOTIFY was read */
	int64_t         sent_us;     /* when the Redis call was queued */
	struct deadline deadline;    /* while Redis has it */
	ev_timer        timer;       /* plan wait, release, ACK delay */
	int64_t         waited_us;   /* on a plan lookup, of the timeout */
	int             plan_wait;   /* a tenant's plan is on its way */
	int             plan_failed; /* ... came too late for Redis */
	int             unconfirmed; /* the call reached Redis, its answer
	                              * did not: Redis may have run it */
	int             local_charged; /* run_local committed: its
	                                * releases are applied */
	uint32_t        plan_lost;   /* checks whose plan could not
	                              * be had (bit i: check i) */
	uint32_t ov_deny;            /* checks a deny override
	                              * refuses (bit i; out[i].res) */
	uint32_t settled;            /* local settles applied (bit i):
	                              * once, whatever the others say */
	struct plancache_waiter pw;
	char                   *held; /* the payload, kept while waiting */
	size_t                  held_len, held_cap;
	struct store_req        sr;
	struct decision         d;
	struct reqpool_item     pi;          /* in its worker's pool */
	int64_t                 retry_until; /* a lost release is sent again
	                                      * until then (release_retry) */
	int               retries;
	int               redis_idx[REQ_MAX_CHECKS];
	struct lim_result results[REQ_MAX_CHECKS];
	struct outcome    out[REQ_MAX_CHECKS];
	struct lim_params
		shares[REQ_MAX_CHECKS]; /* fail: local's limits,
	                                 * for the headers (out.lim) */
	struct check checks[REQ_MAX_CHECKS];
};

/* At most RELEASE_RETRY_REQS requests per worker wait to retry a
 * release (see "leases HAProxy will not release" below). */
#define RELEASE_RETRY_REQS 1024

static void req_finish(struct req *r);

static void req_deadline_passed(struct deadlines *dl, struct deadline *d);

static struct req *
req_alloc(struct req_env *e)
{
	struct reqpool_item *it = reqpool_take(e->pool);
	struct req          *r;

	if (it != NULL)
		return container_of(it, struct req, pi);
	r = xcalloc(1, sizeof(*r));
	r->e = e;
	r->sr.checks = r->checks;   /* the store call's arrays are */
	r->sr.index = r->redis_idx; /* the request's own, for life */
	r->sr.results = r->results;
	reqpool_adopt(e->pool, &r->pi);
	return r;
}

static void
req_release(struct req *r)
{
	struct req_env *e = r->e;

	assert(r->pi.live && r->pin != NULL);
	ev_timer_stop(e->loop, &r->timer);
	reqpool_retry_end(e->pool, &r->pi);
	r->retries = 0;
	deadlines_remove(&r->deadline);
	store_cancel(e->store, &r->sr); /* any late answer is now stale */
	plancache_cancel(&r->pw);
	policy_unpin(r->pin);
	r->pin = NULL;
	r->policy = NULL;
	if (r->c != NULL) /* NULL once answered (give_back) */
		conn_req_done(r->c);
	r->c = NULL;
	reqpool_put(e->pool, &r->pi);
}

static void
pool_release(struct reqpool_item *it)
{
	req_release(container_of(it, struct req, pi));
}

static void
pool_destroy(struct reqpool_item *it)
{
	struct req *r = container_of(it, struct req, pi);

	free(r->held);
	free(r);
}

struct reqpool *
req_pool_new(struct ev_loop *loop, struct metrics_worker *m)
{
	return reqpool_new(loop, m, req_deadline_passed, RELEASE_RETRY_REQS);
}

void
req_pool_free(struct req_env *e)
{
	reqpool_free(e->pool, pool_release, pool_destroy);
	e->pool = NULL;
}

/* ---- fail modes --------------------------------------------------------- */

/* What the fail mode of <c>'s rule answers when the agent cannot evaluate
 * it: fail: local runs it in process when <local> (Redis down or late) and
 * is open otherwise (a check that did not fit in the request). */
static enum outcome_src
fail_src(const struct check *c, int local)
{
	switch (c->rule->fail) {
	case FAIL_CLOSED:
		return SRC_FAIL_CLOSED;
	case FAIL_LOCAL:
		return local ? SRC_FAIL_LOCAL : SRC_FAIL_OPEN;
	case FAIL_OPEN:
	default:
		return SRC_FAIL_OPEN;
	}
}

/* 1 if <c>, decided by its fail mode without <local>, refuses the request. */
static int
fail_refuses(const struct check *c)
{
	return fail_src(c, 0) == SRC_FAIL_CLOSED && !(c->flags & LIM_FL_SHADOW);
}

/* 1 if check <i> is decided in process: a store: local rule, or the
 * fail: local fallback of a Redis rule. The release of a fail: local
 * lease is run in process as well as in Redis, whatever Redis answers: the
 * lease may be in either tier (taken while Redis was down or late), and
 * releasing one that is not there changes nothing. */
static int
is_local(const struct req *r, int i)
{
	const struct check *c = &r->checks[i];

	return c->kind != CHECK_DENY_MISSING && i != r->spill &&
	       !(r->ov_deny & (UINT32_C(1) << i)) &&
	       (c->rule->store == STORE_LOCAL ||
	        r->out[i].src == SRC_FAIL_LOCAL ||
	        (c->op == LIM_OP_RELEASE && c->rule->fail == FAIL_LOCAL));
}

/* 1 if Redis decided check <i> of a Redis rule (a fail: local release
 * run in both tiers keeps the answer of Redis, the shared one). */
static int
redis_answered(const struct req *r, int i)
{
	return r->checks[i].rule->store != STORE_LOCAL &&
	       r->out[i].src == SRC_STORE;
}

/* The in-process checks of a request, for the agent's local tier. */
struct local_part {
	struct local_check lc[POLICY_MAX_CHECKS];
	struct lim_params  lp[POLICY_MAX_CHECKS];
	int                idx[POLICY_MAX_CHECKS];
	size_t             n;
};

static void
local_add(struct local_part *part, const struct req *r, int i)
{
	const struct check *c = &r->checks[i];
	struct lim_params  *lp = &part->lp[part->n];

	assert(part->n < POLICY_MAX_CHECKS && r->policy->pool_size > 0);
	*lp = c->lim;
	if (c->rule->store != STORE_LOCAL) /* fail: local */
		local_share(lp, r->policy->pool_size);
	part->lc[part->n] = (struct local_check){
		.params = lp,
		.key = c->key,
		.keylen = c->keylen,
		/* a settle (a reserving rule's FORCE with the request id)
		 * settles the reservation the local tier recorded (local.h);
		 * one Redis holds is out of reach: it finds none */
		.op = c->op,
		.cost = c->cost,
		.member = c->member,
		.memberlen = c->memberlen,
		.shadow = (c->flags & LIM_FL_SHADOW) != 0,
	};
	part->idx[part->n++] = i;
}

/* Takes the local tier's answer to entry <j> of <part> as its check's
 * outcome, with the limits it was decided under when they are fail:
 * local's share of the rule's (the headers then state that share). */
static void
local_result(struct req *r, const struct local_part *part, size_t j)
{
	int i = part->idx[j];

	assert(i >= 0 && i < r->n && i != r->spill);
	r->out[i].res = part->lc[j].result;
	r->out[i].lim = NULL;
	if (part->lp[j].rate != r->checks[i].lim.rate || /* local_share */
	    part->lp[j].burst != r->checks[i].lim.burst) {
		r->shares[i] = part->lp[j];
		r->out[i].lim = &r->shares[i];
	}
}

/* 1 if <c> settles a reservation (a reserving rule's FORCE with the
 * request id: local.c's reserving()). */
static int
is_settle(const struct check *c)
{
	return c->kind == CHECK_EVAL && c->rule->reserves &&
	       c->op == LIM_OP_FORCE && c->memberlen > 0 &&
	       c->lim.reserve_lease_us > 0 &&
	       lim_reserve_supported(c->lim.algo);
}

/* Evaluates the request's in-process checks as one request of the local
 * tier: charged together, and only when <commit> and none of them vetoes,
 * so that a denied request is charged nowhere. <ends>: they will not be
 * evaluated again (the request is decided), so the offences among them
 * count even uncharged, as the script counts those of a request it
 * refuses. The agent's workers share one local tier, so the fail: local
 * fallback's limits are divided among the pool's agents only: the whole
 * pool then never admits more than the limit. Returns 1 if one of them
 * vetoes. */
static int
run_local(struct req *r, int commit, int ends)
{
	struct local     *l = r->e->local;
	struct local_part part;
	int64_t           now = util_now_us();
	int               pass;

	/* The settles first, applied at once and once, whatever the other
	 * checks say (limiter.h), as the script applies a Redis one: a peek
	 * here, or a veto from Redis, must not leave them unapplied. */
	part.n = 0;
	for (int i = 0; i < r->n; i++)
		if (is_local(r, i) && is_settle(&r->checks[i]) &&
		    !(r->settled & (UINT32_C(1) << i))) {
			r->settled |= UINT32_C(1) << i;
			local_add(&part, r, i);
		}
	if (part.n > 0) {
		local_eval_request(l, part.lc, part.n, now);
		for (size_t j = 0; j < part.n; j++)
			local_result(r, &part, j);
	}
	part.n = 0;
	for (int i = 0; i < r->n; i++)
		if (is_local(r, i) && !(r->settled & (UINT32_C(1) << i)))
			local_add(&part, r, i);
	if (part.n == 0)
		return 0;
	if (commit)
		pass = local_eval_request(l, part.lc, part.n, now);
	else if (ends)
		pass = local_refused_request(l, part.lc, part.n, now);
	else
		pass = local_peek_request(l, part.lc, part.n, now);
	r->local_charged = commit && pass;
	for (size_t j = 0; j < part.n; j++)
		if (r->checks[part.idx[j]].lim.algo != LIM_CONCURRENCY ||
		    !redis_answered(r, part.idx[j]))
			local_result(r, &part, j);
	return !pass;
}

/* 1 if one of the request's in-process checks is of a rule with a
 * penalty box (block:). */
static int
local_boxed(const struct req *r)
{
	for (int i = 0; i < r->n; i++)
		if (is_local(r, i) && r->checks[i].lim.block_us > 0)
			return 1;
	return 0;
}

/* 1 if one of the Redis checks, as answered, vetoes the request. */
static int
redis_vetoed(const struct req *r)
{
	for (int j = 0; j < r->nredis; j++) {
		int                 i = r->redis_idx[j];
		const struct check *c = &r->checks[i];
		int                 shadow = (c->flags & LIM_FL_SHADOW) != 0;

		if (r->out[i].src == SRC_FAIL_CLOSED && !shadow)
			return 1;
		if (r->out[i].src == SRC_STORE &&
		    lim_vetoes(c->op, shadow, &r->out[i].res))
			return 1;
	}
	return 0;
}

/* Redis could not decide: each Redis check follows its rule's fail mode,
 * and the in-process checks (store: local ones, fail: local fallbacks) are
 * then charged together unless a fail: closed rule refuses. <sent>: the
 * call had left for Redis, which may still run it and take its leases
 * (decide_mark_leases). */
static void
apply_fail_modes(struct req *r, int sent)
{
	for (int j = 0; j < r->nredis; j++) {
		int i = r->redis_idx[j];

		ratelog_fail_mode(r->checks[i].rule, r->e->id,
		                  store_up(r->e->store));
		r->out[i].src = fail_src(&r->checks[i], 1);
	}
	if (sent)
		decide_mark_leases(r->checks, r->out, r->redis_idx, r->nredis,
		                   0);
	run_local(r, !redis_vetoed(r), 1);
}

/* ---- Redis -------------------------------------------------------------- */

static void
store_done_cb(struct store_req *sr, int err)
{
	struct req *r = container_of(sr, struct req, sr);

	assert(sr->n == r->nredis && r->c != NULL);
	deadlines_remove(&r->deadline);
	sr->gen++;
	if (err != STORE_OK) {
		r->unconfirmed = err == STORE_EIO; /* lost in flight */
		apply_fail_modes(r, 1);
	} else {
		for (int j = 0; j < r->nredis; j++) {
			int i = r->redis_idx[j];

			r->out[i].src = SRC_STORE;
			r->out[i].res = r->results[i];
			if (nearcache_eligible(&r->checks[i]))
				nearcache_learn(r->e->near, &r->checks[i],
				                &r->results[i], r->sent_us,
				                util_loop_us());
		}
		/* The local checks, peeked so far, are charged now. If another
		 * request took their last unit during the round trip, this one
		 * is refused with Redis already charged: a window of one round
		 * trip, as for a Redis Cluster request refused by another slot.
		 * Its leases and reservations are given back (give_back); other
		 * charges stay. */
		decide_mark_leases(r->checks, r->out, r->redis_idx, r->nredis,
		                   1);
		if (!redis_vetoed(r))
			run_local(r, 1, 1);
		else if (local_boxed(r))
			run_local(r, 0, 1); /* its offences, uncharged */
	}
	req_finish(r);
}

static void
req_deadline_passed(struct deadlines *dl, struct deadline *d)
{
	struct req *r = container_of(d, struct req, deadline);
	int         sent = !r->sr.queued; /* still queued: Redis never saw it */

	assert(r->pi.live && r->c != NULL && r->nredis > 0); /* answering */
	store_cancel(r->e->store, &r->sr);
	r->unconfirmed = sent;
	apply_fail_modes(r, sent);
	store_note_timeout(r->e->store);
	req_finish(r);
}

static void
send_to_store(struct req *r)
{
	assert(r->nredis > 0 && r->nredis <= r->n && !r->plan_wait);
	r->sr.n = r->nredis;
	r->sr.cb = store_done_cb;
	r->sent_us = util_loop_us();
	if (store_submit(r->e->store, &r->sr) != STORE_OK) {
		apply_fail_modes(r, 0);
		req_finish(r);
		return;
	}
	reqpool_deadline(r->e->pool, &r->deadline,
	                 r->sent_us + r->policy->redis_timeout_us -
	                         r->waited_us);
}

/* ---- start and finish --------------------------------------------------- */

/* The names of <f>'s messages, comma-separated and escaped (they are the
 * peer's bytes), into <buf>. Returns 1 when they did not all fit (a name
 * cut, or names left out), 0 when whole. */
static int
message_names(const struct spop_frame *f, char *buf, size_t size)
{
	struct spop_iter    it = { f->payload, f->payload + f->len };
	struct spop_message m;
	size_t              len = 0;
	int                 st, cut = 0;

	while (!cut && spop_next_message(&it, &m, &st) == 1) {
		if (len + 2 >= size) {
			cut = 1;
			break;
		}
		if (len != 0)
			buf[len++] = ',';
		cut = log_put_escaped(buf, size, &len, m.name.ptr, m.name.len) <
		      m.name.len;
	}
	buf[len] = '\0';
	return cut;
}

/* One line per worker per RATELOG_INTERVAL_US at most. */
static void
overflow_log(const struct req *r, const struct spop_frame *f, int dropped)
{
	static _Thread_local struct ratelog rl; /* slot 0: one line for all */
	const struct check                 *c = &r->checks[r->spill];
	uint64_t                            suppressed;
	char                                names[256];
	int                                 cut;

	if (log_level < LOG_WARN ||
	    !ratelog_allow(&rl, 0, util_now_us(), &suppressed))
		return;
	cut = message_names(f, names, sizeof(names));
	log_warn("notify_too_many_checks",
	         "messages=\"%s\" checks=%d limit=%d "
	         "dropped=%d rule=%s answer=%s worker=%d suppressed=%llu "
	         "hint=\"split the spoe-group: one NOTIFY holds %d checks\"%s",
	         names, POLICY_MAX_CHECKS + dropped, POLICY_MAX_CHECKS, dropped,
	         c->rule->name, fail_refuses(c) ? "503" : "degraded", r->e->id,
	         (unsigned long long)suppressed, POLICY_MAX_CHECKS,
	         LOG_CUT(cut));
}

/* The messages of <f> gave more checks than a request holds: the one that
 * weighs most among those left out (policy_build_checks_with_overflow)
 * joins the request as its last check, and decide_at_once answers it by its
 * fail mode, as if the store could not: fail: closed refuses the request
 * (503), open or local (which cannot run it either) leave it to the checks
 * that fit, degraded. */
static void
note_overflow(struct req *r, const struct spop_frame *f,
              const struct policy_overflow *ov)
{
	if (r->n != POLICY_MAX_CHECKS) /* allow overrides made room */
		r->checks[r->n] = *ov->worst;
	r->spill = r->n++;
	metrics_notify_overflow(r->e->m);
	overflow_log(r, f, ov->n);
}

/* The plan of the message whose checks start at <first> could not be had
 * (the lookup failed): its plan rules get their fail modes; its other
 * rules, and other messages', are decided as usual. */
static void
note_plan_lost(struct req *r, int first)
{
	for (int i = first; i < r->n; i++)
		if (r->checks[i].rule->plan != RULE_PLAN_NONE)
			r->plan_lost |= UINT32_C(1) << i;
}

/* The runtime overrides (ovcache.h) on the checks from <first> on: an
 * allow removes its check, a limit replaces its limit, a deny marks it to
 * be refused at once (decide_at_once) with its answer in out[].res. */
static void
apply_overrides(struct req *r, int first)
{
	const struct ov_table *t = ovcache_table(r->e->overrides);
	int64_t                now;
	int                    i, n = first;

	if (ov_table_count(t) == 0)
		return;
	now = util_redis_us(); /* the ends are in Redis' clock */
	for (i = first; i < r->n; i++) {
		enum ov_kind k =
			ov_apply(t, &r->checks[i], now, &r->out[n].res);

		if (k == OV_ALLOW)
			continue;
		if (k == OV_DENY)
			r->ov_deny |= UINT32_C(1) << n;
		if (n != i)
			r->checks[n] = r->checks[i];
		n++;
	}
	r->n = n;
}

/* The response phase of count: response rules, counted once the checks
 * are final: the units each response charges, and the responses whose
 * cost was missing or malformed (no check; logged at most once per 10 s
 * per rule). */
static void
note_response(struct req *r, const struct policy_rejects *rej)
{
	for (int i = 0; i < rej->n; i++) {
		metrics_cost_rejected(r->e->m, rej->rule[i]->metrics_slot);
		ratelog_cost_rejected(rej->rule[i], r->e->id);
	}
	for (int i = 0; i < r->n; i++) {
		const struct check *c = &r->checks[i];

		if (c->kind == CHECK_EVAL && c->op == LIM_OP_FORCE &&
		    c->rule->count == COUNT_RESPONSE && !c->rule->reserves)
			metrics_units_charged(r->e->m, c->rule->metrics_slot,
			                      (uint64_t)c->cost);
	}
}

/* A message no rule took: a settle orphaned by a reload when the policy
 * before it had a reserving rule on that message (policy_orphan.h).
 * Returns its record, or NULL. */
static const struct policy_orphan *
orphan_of(const struct req *r, const struct spop_message *m)
{
	if (r->policy->norphans == 0)
		return NULL;
	return policy_orphan_find(r->policy, m, util_now_us());
}

/* Counts the <n> orphaned settles of a request (<o>: one's record). */
static void
note_orphans(struct req *r, int n, const struct policy_orphan *o)
{
	if (n == 0)
		return;
	metrics_settle_orphaned(r->e->m, n);
	ratelog_settle_orphaned(o->message, o->rules, r->e->id);
}

static int
build_checks(struct req *r, const struct spop_frame *f, int *status)
{
	struct spop_iter       it = { f->payload, f->payload + f->len };
	struct policy_overflow ov = { 0, &r->checks[POLICY_MAX_CHECKS] };
	struct policy_rejects  rej = { 0 };
	struct spop_message    m;
	const struct policy_orphan *orphan = NULL, *o;
	int                    rc, norphans = 0;

	r->n = 0;
	r->spill = -1;
	r->plan_wait = r->plan_failed = 0;
	r->plan_lost = 0;
	r->ov_deny = 0;
	r->settled = 0;
	while ((rc = spop_next_message(&it, &m, status)) == 1) {
		int plan = -1, first = r->n;

		if (policy_needs_plan(r->policy, &m))
			plan = policy_tenant_plan(r->policy, &m,
			                          plancache_resolve, &r->pw);
		r->plan_wait |= plan == POLICY_PLAN_WAIT;
		r->n += policy_build_checks_full(
			r->policy, &m, plan, r->checks + r->n,
			POLICY_MAX_CHECKS - r->n, &ov, &rej);
		apply_overrides(r, first);
		if (r->n == first && (o = orphan_of(r, &m)) != NULL) {
			orphan = o;
			norphans++;
		}
		if (plan == POLICY_PLAN_UNKNOWN)
			note_plan_lost(r, first);
	}
	assert(r->n <= POLICY_MAX_CHECKS); /* the spill comes next */
	if (rc != -1 && ov.n > 0 && !r->plan_wait)
		note_overflow(r, f, &ov);
	if (rc != -1 && !r->plan_wait) {
		note_response(r, &rej);
		note_orphans(r, norphans, orphan);
	}
	return rc;
}

/* Answers a Redis check from the near-cache when its key is known to be
 * denied. Returns 1 on a hit. */
static int
near_hit(struct req *r, int i, int64_t now)
{
	const struct check *c = &r->checks[i];

	if (!nearcache_eligible(c) ||
	    !nearcache_lookup(r->e->near, c, now, &r->out[i].res))
		return 0;
	metrics_near_cache_hit(r->e->m);
	return 1;
}

static uint64_t member_nonce;

static void
member_nonce_init(void)
{
	if (getrandom(&member_nonce, sizeof(member_nonce), 0) !=
	    (ssize_t)sizeof(member_nonce))
		member_nonce =
			(uint64_t)getpid() << 32 ^ (uint64_t)util_now_us();
}

/* A sliding log needs a member unique across the agent pool for each
 * request; the policy gives one only when the rule names an id. The pid
 * is not enough: every container of the pool runs the agent as pid 1, and
 * two agents' members then overwrote each other in the shared log (the
 * pool admitted twice the limit). So: 64 random bits drawn once per
 * process, the worker, a counter. */
static void
unique_member(struct req *r, struct check *c)
{
	static pthread_once_t   once = PTHREAD_ONCE_INIT;
	static _Atomic uint64_t seq;

	pthread_once(&once, member_nonce_init);
	c->memberlen = (size_t)snprintf(c->member, sizeof(c->member),
	                                "%016llx.%d.%llu",
	                                (unsigned long long)member_nonce,
	                                r->e->id, (unsigned long long)++seq);
}

/* Decides the checks that need no Redis. Returns 1 if one of them denies
 * (so nothing is charged anywhere), 0 otherwise. The store: local checks
 * are charged here only when the request has no Redis check; otherwise
 * they are peeked, and charged once Redis has answered without a veto
 * (store_done_cb). */
static int
decide_at_once(struct req *r)
{
	int64_t now = util_loop_us();
	int     denied = 0;

	r->nredis = 0;
	for (int i = 0; i < r->n; i++) {
		const struct check *c = &r->checks[i];

		r->out[i].src = SRC_STORE;
		r->out[i].redis_lease = 0;
		r->out[i].lim = NULL;
		if (i == r->spill) {
			r->out[i].src = fail_src(c, 0);
			denied |= fail_refuses(c);
			continue;
		}
		if (c->lim.algo == LIM_SLIDING_LOG && c->memberlen == 0)
			unique_member(r, &r->checks[i]);
		if (c->kind == CHECK_DENY_MISSING) {
			r->out[i].src = SRC_MISSING;
			denied |= !(c->flags & LIM_FL_SHADOW);
		} else if (r->ov_deny & (UINT32_C(1) << i)) {
			denied |= !(c->flags & LIM_FL_SHADOW); /* out[i].res */
		} else if (c->rule->store == STORE_LOCAL) {
			continue; /* run_local, below */
		} else if (r->plan_lost & (UINT32_C(1) << i)) {
			ratelog_fail_mode(c->rule, r->e->id,
			                  store_up(r->e->store));
			r->out[i].src = fail_src(c, 1);
			denied |= fail_refuses(c);
		} else if (near_hit(r, i, now)) {
			denied = 1;
		} else {
			r->redis_idx[r->nredis++] = i;
		}
	}
	assert(r->nredis <= r->n);
	return run_local(r, !denied && r->nredis == 0,
	                 denied || r->nredis == 0) |
	       denied;
}

/* ---- waiting for a tenant's plan ---------------------------------------- */

/* Decides what needs no Redis (the plan rules of a tenant whose lookup
 * failed among it: note_plan_lost), then sends the rest to Redis; or, when
 * the plan came too late, answers the rest by each rule's fail mode, as if
 * the store could not: the plan lookup is part of the request's round trip
 * and its budget. */
static void
req_go(struct req *r)
{
	if (decide_at_once(r) || r->nredis == 0) {
		int k = 0;

		/* denied: charge nothing; rl-done's releases, and the
		 * settles, applied whatever the other checks say (as the
		 * script applies them), stay listed, unanswered, for
		 * give_back to send after the ACK */
		for (int j = 0; j < r->nredis; j++) {
			int i = r->redis_idx[j];

			r->out[i].src = SRC_NOT_RUN;
			if (r->checks[i].op == LIM_OP_RELEASE ||
			    is_settle(&r->checks[i]))
				r->redis_idx[k++] = i;
		}
		r->nredis = k;
		req_finish(r);
	} else if (r->plan_failed) {
		apply_fail_modes(r, 0); /* nothing left for Redis */
		req_finish(r);
	} else {
		send_to_store(r);
	}
}

/* Builds the checks again from the kept payload, now that a plan lookup
 * has answered, failed (<r>->pw.nowait) or run out of time (<late>), and
 * goes on unless another tenant of the request is still on its way. */
static void
plan_resume(struct req *r, int late)
{
	struct spop_frame f = { .payload = r->held,
		                .len = r->held_len,
		                .stream_id = r->sid,
		                .frame_id = r->fid };
	int               status;

	build_checks(r, &f, &status); /* parsed once already: cannot fail */
	if (r->plan_wait)
		return;
	ev_timer_stop(r->e->loop, &r->timer);
	r->waited_us = util_loop_us() - r->start_us;
	if (late || r->waited_us >= r->policy->redis_timeout_us)
		r->plan_failed = 1; /* no budget left for the checks */
	req_go(r);
}

static void
plan_cb(struct plancache_waiter *pw, int ok)
{
	struct req *r = container_of(pw, struct req, pw);

	r->pw.nowait = !ok;
	plan_resume(r, 0);
}

static void
plan_timeout_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct req *r = container_of(t, struct req, timer);

	plancache_cancel(&r->pw);
	r->pw.nowait = 1;
	store_note_timeout(r->e->store);
	plan_resume(r, 1);
}

/* Holds <r> until its tenants' plans come, within redis.timeout (the
 * checks then get what is left of it). The payload is kept: the conn's
 * read buffer moves on. */
static void
plan_hold(struct req *r, const struct spop_frame *f)
{
	if (r->held_cap < f->len) {
		r->held = xrealloc(r->held, f->len);
		r->held_cap = f->len;
	}
	memcpy(r->held, f->payload, f->len);
	r->held_len = f->len;
	ev_timer_init(&r->timer, plan_timeout_cb,
	              (double)r->policy->redis_timeout_us / 1e6, 0.);
	ev_timer_start(r->e->loop, &r->timer);
}

int
req_start(struct req_env *e, struct conn *c, const struct spop_frame *f,
          int *status)
{
	struct req *r = req_alloc(e);

	assert(c->state == CONN_ST_READY); /* NOTIFYs come after HELLO */
	r->pin = policy_pin(e->pin);
	r->policy = r->pin->p;
	r->waited_us = 0;
	r->unconfirmed = r->local_charged = 0;
	plancache_waiter_init(&r->pw, e->plans, plan_cb);
	if (build_checks(r, f, status) == -1) {
		plancache_cancel(&r->pw);
		policy_unpin(r->pin);
		r->pin = NULL;
		r->policy = NULL;
		reqpool_put(e->pool, &r->pi);
		return -1;
	}
	conn_req_begin(c);
	r->c = c;
	r->sid = f->stream_id;
	r->fid = f->frame_id;
	r->start_us = util_loop_us();
	if (r->plan_wait)
		plan_hold(r, f);
	else
		req_go(r);
	return 0;
}

/* 1 when rule <index> may log one more shadow_deny line at <now> (at
 * most SHADOW_LOG_LINES per RATELOG_INTERVAL_US), with <*suppressed> set
 * to the lines it left out since its last one. Under <s>'s shadow_lock. */
static int
shadow_budget(struct req_shared *s, int index, int64_t now,
              uint64_t *suppressed)
{
	int i = index < 0 || index >= RATELOG_MAX_RULES ? RATELOG_MAX_RULES - 1
	                                                : index;

	if (s->shadow_win_us[i] == 0 ||
	    now - s->shadow_win_us[i] >= RATELOG_INTERVAL_US) {
		s->shadow_win_us[i] = now != 0 ? now : 1;
		s->shadow_lines[i] = 0;
	}
	if (s->shadow_lines[i] >= SHADOW_LOG_LINES) {
		s->shadow_suppressed[i]++;
		return 0;
	}
	s->shadow_lines[i]++;
	*suppressed = s->shadow_suppressed[i];
	s->shadow_suppressed[i] = 0;
	return 1;
}

/* A shadow rule that would have denied: one log line per key per window,
 * so an operator sees who it would hit without a line per request; and
 * at most SHADOW_LOG_LINES per rule per interval, as a client that sends
 * a new key (user name, tenant) each time would get one line per request
 * otherwise. */
static void
shadow_log(struct req *r, int i)
{
	const struct check *c = &r->checks[i];
	struct req_shared  *s = r->e->shared;
	int64_t             now = util_now_us();
	char     key[4 * 120 + 1]; /* 120 key bytes, each at worst \xHH */
	char     more[40] = "";
	uint64_t suppressed = 0;
	int      first, cut;

	if (log_level < LOG_INFO)
		return;
	pthread_mutex_lock(&s->shadow_lock);
	first = nearcache_once(s->shadow_seen, c, now,
	                       now + lim_window_s(&c->lim) * LIM_USEC_PER_SEC) &&
	        shadow_budget(s, c->rule->index, now, &suppressed);
	pthread_mutex_unlock(&s->shadow_lock);
	if (!first)
		return;
	/* the key carries client values: escaped as the decision log's,
	 * a key past 120 bytes cut and the line saying so */
	cut = log_escape_value(key, sizeof(key), c->key, c->keylen, 120);
	if (suppressed != 0)
		snprintf(more, sizeof(more), " suppressed=%llu",
		         (unsigned long long)suppressed);
	log_info("shadow_deny", "rule=%s key=\"%s\" remaining=%lld%s%s",
	         c->rule->name, key, (long long)r->out[i].res.remaining, more,
	         LOG_CUT(cut));
}

/* ---- reserve, then settle: the units held, charged and refunded -------
 *
 * Counted once the outcomes are final: a reservation held when Redis or
 * the local tier (store: local, fail: local) passed its request; a settle
 * by what the tier that answered found (remaining = the units the
 * reservation held, -1 for none). A settle answered by neither (fail:
 * open or closed) found no reservation: nothing was settled, unless the
 * call had reached Redis and only its answer was missing (past
 * redis.timeout, connection lost): then Redis may have settled it, and
 * it is counted as unconfirmed, not unmatched. */
static int
settled_by_tier(const struct outcome *o)
{
	return o->src == SRC_STORE || o->src == SRC_FAIL_LOCAL;
}

static void
note_settle(struct req *r, const struct check *c, const struct outcome *o)
{
	int     slot = c->rule->metrics_slot;
	int64_t held = o->res.remaining;

	if ((!settled_by_tier(o) || held < 0) && r->unconfirmed &&
	    c->rule->store != STORE_LOCAL) {
		metrics_settle_unconfirmed(r->e->m, slot);
		ratelog_settle_unconfirmed(c->rule, r->e->id);
		return;
	}
	if (!settled_by_tier(o) || held < 0) {
		metrics_settle_unmatched(r->e->m, slot);
		ratelog_settle_unmatched(c->rule, r->e->id);
		return;
	}
	if (c->cost > held)
		metrics_units_charged(r->e->m, slot,
		                      (uint64_t)(c->cost - held));
	else if (c->cost >= 0)
		metrics_units_refunded(r->e->m, slot,
		                       (uint64_t)(held - c->cost));
}

static void
note_reservations(struct req *r)
{
	for (int i = 0; i < r->n; i++) {
		const struct check   *c = &r->checks[i];
		const struct outcome *o = &r->out[i];

		if (c->kind != CHECK_EVAL || !c->rule->reserves ||
		    o->src == SRC_NOT_RUN)
			continue;
		if (c->op == LIM_OP_FORCE)
			note_settle(r, c, o);
		else if (c->op == LIM_OP_CHECK && settled_by_tier(o) &&
		         r->d.status == 0 && o->res.allowed == 1 && c->cost > 0)
			metrics_units_reserved(r->e->m, c->rule->metrics_slot,
			                       (uint64_t)c->cost);
	}
}

static void
count_decisions(struct req *r)
{
	for (int i = 0; i < r->n; i++) {
		const struct outcome *o = &r->out[i];
		int slot = r->checks[i].rule->metrics_slot, o_kind;

		if (o->src == SRC_NOT_RUN)
			continue;
		if (o->src == SRC_FAIL_OPEN || o->src == SRC_FAIL_CLOSED ||
		    o->src == SRC_FAIL_LOCAL)
			o_kind = METRICS_DEGRADED;
		else if (o->src == SRC_MISSING || o->res.allowed != 1)
			o_kind = (r->checks[i].flags & LIM_FL_SHADOW)
			                 ? METRICS_SHADOW_DENIED
			                 : METRICS_DENIED;
		else
			o_kind = METRICS_ALLOWED;
		if (o_kind == METRICS_SHADOW_DENIED)
			shadow_log(r, i);
		else if (o_kind == METRICS_DENIED && o->src != SRC_MISSING &&
		         o->res.allowed == -1)
			ratelog_never_fits(r->checks[i].rule, r->e->id,
			                   r->checks[i].cost,
			                   lim_quota(&r->checks[i].lim),
			                   DECIDE_NEVER_FITS_S);
		if (o_kind == METRICS_DENIED && o->src == SRC_STORE &&
		    r->checks[i].lim.block_us > 0 && o->res.allowed == 0 &&
		    !(r->ov_deny & (UINT32_C(1) << i)))
			metrics_blocked(r->e->m, slot);
		if (o_kind == METRICS_DENIED && o->src != SRC_MISSING)
			topk_note(r->e->id, slot, r->checks[i].key,
			          r->checks[i].keylen, util_loop_us());
		metrics_decision_slot(r->e->m, slot, o_kind);
	}
	declog_sample(r->policy, r->checks, r->out, r->n, &r->d);
}

/* ---- leases HAProxy will not release ----------------------------------
 *
 * HAProxy sends a lease's release (rl-done) only when the ACK it used set
 * release. A request refused after Redis took its lease (a late answer
 * followed by fail: closed, a local-tier veto after Redis), or whose ACK
 * HAProxy never used (past its timeout processing, connection gone), would
 * hold that slot for the whole lease. The agent releases those itself,
 * with the same RELEASE op rl-done sends, after the ACK: on a single Redis
 * the release follows the charging call on the same link, so it runs after
 * it even when that call is late. The request then lives on, detached from
 * its connection, until the release is answered or given up. A refused
 * request's reservation (reserve:) is given back the same way, by its
 * settle at 0 (HAProxy sends no rl-response for it either).
 *
 * A release Redis did not answer, the agent's own or rl-done's, is sent
 * again (release_retry). When a stall drops the link, the charges already
 * in its socket still run once Redis wakes up, after the releases that
 * failed on the dropped link: those slots would stay taken for the whole
 * lease. A release of a lease never taken is a no-op, so sending one again
 * is always safe; a retry goes out once a new link is up, after Redis has
 * read what the old one held. Retries back off from RELEASE_RETRY_MIN_US
 * and stop after one lease's length from the first try (the lease may be
 * older: a retry past its end is a no-op), or RELEASE_RETRY_MAX_US; at most
 * RELEASE_RETRY_REQS requests per worker wait to retry, so an outage under
 * load cannot grow the pool without bound. */

#define RELEASE_RETRY_MIN_US 100000
#define RELEASE_RETRY_MAX_US 60000000

static int  release_send(struct req *r);
static void release_again_cb(struct ev_loop *loop, ev_timer *t, int revents);

/* Counts the release call of <r> given up, and each settle_refused() one
 * in it (a release call's only FORCE checks), then logs: one warning line
 * per worker per RATELOG_INTERVAL_US at most. */
static void
release_lost_log(const struct req *r)
{
	static _Thread_local struct ratelog rl;
	uint64_t                            suppressed;

	metrics_release_lost(r->e->m);
	for (int j = 0; j < r->nredis; j++) {
		const struct check *c = &r->checks[r->redis_idx[j]];

		if (c->op == LIM_OP_FORCE)
			metrics_self_settle_lost(r->e->m,
			                         c->rule->metrics_slot);
	}
	if (log_level >= LOG_WARN &&
	    ratelog_allow(&rl, 0, util_now_us(), &suppressed))
		log_warn("lease_release_lost",
		         "worker=%d tries=%d "
		         "suppressed=%llu hint=\"the slot stays taken until "
		         "its lease ends\"",
		         r->e->id, r->retries + 1,
		         (unsigned long long)suppressed);
}

/* The release of <r> was not answered: sends it again later, or gives up. */
static void
release_retry(struct req *r)
{
	int64_t wait = RELEASE_RETRY_MIN_US
	               << (r->retries < 4 ? r->retries : 4);

	assert(r->c == NULL); /* detached since give_back */
	ev_timer_stop(r->e->loop, &r->timer);
	store_cancel(r->e->store, &r->sr);
	if (util_loop_us() + wait >= r->retry_until ||
	    !reqpool_retry_begin(r->e->pool, &r->pi)) {
		release_lost_log(r);
		req_release(r);
		return;
	}
	r->retries++;
	ev_timer_init(&r->timer, release_again_cb, (double)wait / 1e6, 0.);
	ev_timer_start(r->e->loop, &r->timer);
}

static void
release_done_cb(struct store_req *sr, int err)
{
	struct req *r = container_of(sr, struct req, sr);

	assert(r->c == NULL && r->pi.live); /* detached since give_back */
	if (err != STORE_OK) {
		release_retry(r);
		return;
	}
	req_release(r);
}

static void
release_deadline_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	release_retry(container_of(t, struct req, timer));
}

static void
release_again_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct req *r = container_of(t, struct req, timer);

	if (release_send(r))
		log_debug("lease_release_retried", "worker=%d tries=%d",
		          r->e->id, r->retries + 1);
}

/* Puts <r>'s release call on the store, with redis.timeout to answer.
 * Returns 0 if the store refused it: a retry is then set, or <r> was
 * given up and released (release_retry); either way <r> is not the
 * caller's any more. */
static int
release_send(struct req *r)
{
	r->sr.cb = release_done_cb;
	if (store_submit(r->e->store, &r->sr) != STORE_OK) {
		release_retry(r);
		return 0;
	}
	ev_timer_init(&r->timer, release_deadline_cb,
	              (double)r->policy->redis_timeout_us / 1e6, 0.);
	ev_timer_start(r->e->loop, &r->timer);
	return 1;
}

/* Releases the local-tier leases flagged in <orphan>. */
static void
release_local(struct req *r, const int *orphan)
{
	struct local_part part;

	part.n = 0;
	for (int i = 0; i < r->n; i++)
		if (orphan[i] & DECIDE_FREE_LOCAL)
			local_add(&part, r, i);
	if (part.n > 0)
		local_eval_request(r->e->local, part.lc, part.n, util_now_us());
}

/* How long Redis holds what <c> took: a reservation's lease, or a
 * concurrency lease (its period). */
static int64_t
held_us(const struct check *c)
{
	return c->lim.reserve_lease_us > 0 ? c->lim.reserve_lease_us
	                                   : c->lim.period_us;
}

/* Sends the release of the Redis leases flagged in <orphan>. Returns 1 if
 * the request now waits for it. */
static int
release_redis(struct req *r, const int *orphan)
{
	int64_t lease = 0;
	int     n = 0;

	for (int i = 0; i < r->n; i++)
		if (orphan[i] & DECIDE_FREE_REDIS) {
			r->redis_idx[n++] = i;
			if (held_us(&r->checks[i]) > lease)
				lease = held_us(&r->checks[i]);
		}
	if (n == 0)
		return 0;
	assert(n <= r->n && r->c == NULL);
	store_cancel(r->e->store, &r->sr); /* drop the charging call's */
	r->nredis = r->sr.n = n;
	r->retry_until =
		util_loop_us() +
		(lease < RELEASE_RETRY_MAX_US ? lease : RELEASE_RETRY_MAX_US);
	release_send(r);
	return 1;
}

/* Flags in <orphan> the releases of <r> (rl-done's) that Redis did not
 * answer, and the settles of a request refused before Redis (req_go):
 * sent again like the agent's own. Returns how many. */
static int
releases_unanswered(const struct req *r, int *orphan)
{
	int n = 0;

	for (int j = 0; j < r->nredis; j++) {
		int i = r->redis_idx[j];

		/* a vetoed call's releases: the script charges none of its
		 * checks, its releases included. Not d.status: a FORCE over
		 * its limit, or a local veto after Redis, denies the request
		 * after the script applied the release */
		if ((r->checks[i].op == LIM_OP_RELEASE &&
		     (r->out[i].src != SRC_STORE || redis_vetoed(r))) ||
		    (is_settle(&r->checks[i]) &&
		     r->out[i].src == SRC_NOT_RUN)) {
			orphan[i] |= DECIDE_FREE_REDIS;
			n++;
		}
	}
	return n;
}

/* Turns reserving check <i> of refused request <r> into its settle at 0
 * (all given back), sent with the releases: HAProxy sends no rl-response
 * for a refused request, and its reservation would stay charged for the
 * whole lease. Sent again like a release: a settle applies once (the
 * script deletes the record it reads), one that finds none is a no-op. */
static void
settle_refused(struct req *r, int i, int *orphan)
{
	orphan[i] |= DECIDE_FREE_REDIS | DECIDE_SETTLE_REDIS;
	r->checks[i].op = LIM_OP_FORCE;
	r->checks[i].cost = 0;
	metrics_self_settle(r->e->m, r->checks[i].rule->metrics_slot);
}

/* 1 if <orphan>[0..<n>) holds a settle_refused() one. */
static int
refunds(const int *orphan, int n)
{
	for (int i = 0; i < n; i++)
		if (orphan[i] & DECIDE_SETTLE_REDIS)
			return 1;
	return 0;
}

/* After the ACK of <r>: releases the leases HAProxy will not (above), and
 * sends again the releases Redis did not answer. Returns 1 if the request
 * waits for Redis, detached from its connection. */
static int
give_back(struct req *r)
{
	int      orphan[REQ_MAX_CHECKS], lost, again;
	uint64_t n = 0;

	memset(orphan, 0, sizeof(orphan));
	/* rl-done's lost releases, flagged before the orphans below become
	 * releases too: both go in the one call */
	again = releases_unanswered(r, orphan);
	for (int i = 0; !r->local_charged && i < r->n; i++)
		if (r->checks[i].op == LIM_OP_RELEASE && is_local(r, i)) {
			orphan[i] |= DECIDE_FREE_LOCAL; /* vetoed with the rest */
			again++;
		}
	lost = !conn_serving(r->c) ||
	       util_loop_us() - r->start_us >= r->policy->processing_timeout_us;
	if (r->d.status != 0 || (lost && r->d.release)) {
		for (int i = 0; i < r->n; i++) {
			int what = decide_orphan(&r->checks[i], &r->out[i],
			                         r->d.status, lost);

			if (what & DECIDE_SETTLE_REDIS)
				settle_refused(r, i, orphan);
			else if (what != 0) {
				orphan[i] |= what;
				r->checks[i].op = LIM_OP_RELEASE;
				r->checks[i].cost = 0;
				n++;
			}
		}
	}
	if (n == 0 && again == 0 && !refunds(orphan, r->n))
		return 0;
	if (n > 0)
		metrics_self_release(r->e->m, n);
	release_local(r, orphan);
	conn_req_done(r->c);
	r->c = NULL;
	return release_redis(r, orphan);
}

/* Sends the ACK, gives back what HAProxy will not release, and recycles
 * the request (now or once that release is answered). */
static void
req_answer(struct req *r)
{
	assert(r->c != NULL); /* give_back drops it, after this */
	conn_send_ack(r->c, r->sid, r->fid, &r->d);
	if (!give_back(r))
		req_release(r);
}

static void
delay_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	req_answer(container_of(t, struct req, timer));
}

/* Seconds <r>'s ACK may still be held: <delay_us>, or less when draining. */
static double
hold_s(const struct req *r, int64_t delay_us)
{
	int64_t left = r->e->hold_until_us - util_loop_us();

	if (r->e->hold_until_us != 0 && delay_us > left)
		delay_us = left > 0 ? left : 0;
	return (double)delay_us / 1e6;
}

static void
drain_held(struct reqpool_item *it, void *arg)
{
	struct req *r = container_of(it, struct req, pi);
	double      s;

	if (r->c == NULL || !ev_is_active(&r->timer) ||
	    ev_cb(&r->timer) != delay_cb)
		return; /* not an ACK on hold */
	s = hold_s(r, (int64_t)(ev_timer_remaining(r->e->loop, &r->timer) *
	                        1e6));
	ev_timer_stop(r->e->loop, &r->timer);
	ev_timer_set(&r->timer, s, 0.);
	ev_timer_start(r->e->loop, &r->timer);
}

void
req_drain(struct req_env *e, int64_t until_us)
{
	e->hold_until_us = until_us > 0 ? until_us : 1;
	reqpool_each_live(e->pool, drain_held, NULL);
}

static void
req_finish(struct req *r)
{
	assert(r->c != NULL && r->pin != NULL && !r->plan_wait);
	assert(r->n <= REQ_MAX_CHECKS && r->nredis <= r->n);
	decide(r->checks, r->out, r->n, r->policy->headers, &r->d);
	count_decisions(r);
	note_reservations(r);
	if (r->d.delay_us > 0 && r->d.status == 0) {
		ev_timer_init(&r->timer, delay_cb, hold_s(r, r->d.delay_us),
		              0.);
		ev_timer_start(r->e->loop, &r->timer);
		return;
	}
	req_answer(r);
}
