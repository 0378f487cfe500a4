/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The policy at request time: message name -> bindings (built once at load
 * by policy__index()), tenant plan resolution, and policy_build_checks(),
 * which turns one SPOE message into the limit checks for the store and the
 * local tier. Also the reference count and the workers' pins that let a
 * SIGHUP reload swap the policy while requests still hold the old one.
 *
 * Everything after load is read-only: the request path never allocates,
 * never locks and writes only into the caller's check array, so all worker
 * threads share one struct policy. Loading and validation live in
 * policy_parse.c; templates in keys.c.
 */
#include <assert.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cidr.h"
#include "keys.h"
#include "policy.h"
#include "util.h"

/* ---- lifetime ----------------------------------------------------------- */

struct policy *
policy_ref(struct policy *p)
{
	atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
	return p;
}

void
policy_unref(struct policy *p)
{
	if (!p)
		return;
	/* acq_rel: the last owner must see every other owner's reads done. */
	if (atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) == 1)
		policy__free(p);
}

struct policy_pin *
policy_pin_new(struct policy *p)
{
	struct policy_pin *pin = xcalloc(1, sizeof(*pin));

	pin->p = policy_ref(p);
	return pin;
}

struct policy_pin *
policy_pin(struct policy_pin *pin)
{
	assert(!pin->retired); /* requests pin the current one */
	pin->inflight++;
	return pin;
}

void
policy_unpin(struct policy_pin *pin)
{
	assert(pin->inflight > 0);
	if (--pin->inflight > 0 || !pin->retired)
		return;
	policy_unref(pin->p);
	free(pin);
}

void
policy_pin_retire(struct policy_pin *pin)
{
	assert(!pin->retired);
	pin->retired = 1;
	pin->inflight++;
	policy_unpin(pin);
}

static void
rule_deinit(struct rule *r)
{
	free(r->name);
	free(r->message);
	keys_free(r->key);
	keys_free(r->fallback);
	free(r->cost_arg);
	free(r->reserve_arg);
	free(r->key_prefix);
	free(r->result_message);
	free(r->release);
	keys_free(r->id);
	free(r->plan_lim);
	free(r->allow);
}

void
policy__free(struct policy *p)
{
	int i;

	if (!p)
		return;
	for (i = 0; i < p->nrules; i++)
		rule_deinit(&p->rules[i]);
	free(p->rules);
	for (i = 0; i < p->nplans; i++)
		free(p->plans[i].name);
	free(p->plans);
	for (i = 0; i < p->ntenants; i++)
		free(p->tenants[i].tenant);
	free(p->tenants);
	for (i = 0; i < p->nmsgs; i++) {
		free(p->msgs[i].name);
		free(p->msgs[i].b);
	}
	free(p->msgs);
	free(p->plan_lookup.arg);
	free(p->plan_lookup.tenant_arg);
	free(p->plan_lookup.redis_hash);
	free(p->path);
	free(p->listen);
	free(p->redis_url);
	free(p->redis_username);
	free(p->redis_password);
	if (p->admin_token != NULL)
		explicit_bzero(p->admin_token, strlen(p->admin_token));
	free(p->admin_token);
	free(p);
}

/* ---- the message index -------------------------------------------------- */

static struct policy_msg *
msg_get(struct policy *p, const char *name)
{
	struct policy_msg *pm;
	int                i;

	for (i = 0; i < p->nmsgs; i++)
		if (strcmp(p->msgs[i].name, name) == 0)
			return &p->msgs[i];
	p->msgs = xrealloc(p->msgs, (size_t)(p->nmsgs + 1) * sizeof(*p->msgs));
	pm = &p->msgs[p->nmsgs++];
	memset(pm, 0, sizeof(*pm));
	pm->name = xstrdup(name);
	pm->len = strlen(name);
	pm->b = xcalloc(POLICY_MAX_CHECKS, sizeof(*pm->b));
	return pm;
}

static int
msg_bind(struct policy *p, const char *msg, const struct rule *r,
         enum rule_role role, const char **name)
{
	struct policy_msg *pm = msg_get(p, msg);

	if (pm->n == POLICY_MAX_CHECKS) {
		*name = pm->name;
		return -1;
	}
	pm->b[pm->n].rule = r;
	pm->b[pm->n].role = role;
	pm->n++;
	if (r->plan != RULE_PLAN_NONE)
		pm->needs_plan = true;
	return 0;
}

int
policy__index(struct policy *p, const char **name)
{
	int i;

	for (i = 0; i < p->nrules; i++) {
		const struct rule *r = &p->rules[i];

		if (msg_bind(p, r->message, r, ROLE_REQUEST, name) == -1)
			return -1;
		if (r->count != COUNT_ALL &&
		    msg_bind(p, r->result_message, r, ROLE_RESULT, name) == -1)
			return -1;
		if (r->release &&
		    msg_bind(p, r->release, r, ROLE_RELEASE, name) == -1)
			return -1;
	}
	return 0;
}

const struct policy_msg *
policy_find_msg(const struct policy *p, const char *name, size_t len)
{
	int i;

	for (i = 0; i < p->nmsgs; i++) {
		const struct policy_msg *pm = &p->msgs[i];

		if (pm->len == len && memcmp(pm->name, name, len) == 0)
			return pm;
	}
	return NULL;
}

bool
policy_needs_plan(const struct policy *p, const struct spop_message *m)
{
	const struct policy_msg *pm =
		policy_find_msg(p, m->name.ptr, m->name.len);

	return pm && pm->needs_plan;
}

/* ---- plans -------------------------------------------------------------- */

int
policy_plan_index(const struct policy *p, const char *name, size_t len)
{
	int i;

	for (i = 0; i < p->nplans; i++)
		if (strlen(p->plans[i].name) == len &&
		    memcmp(p->plans[i].name, name, len) == 0)
			return i;
	return -1;
}

static int
tenant_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);

	if (c)
		return c;
	return alen < blen ? -1 : alen > blen;
}

static int
tenant_lookup(const struct policy *p, const char *t, size_t len)
{
	int lo = 0, hi = p->ntenants - 1;

	while (lo <= hi) {
		int                       mid = lo + (hi - lo) / 2;
		const struct tenant_plan *tp = &p->tenants[mid];
		int c = tenant_cmp(t, len, tp->tenant, tp->len);

		if (c == 0)
			return tp->plan;
		if (c < 0)
			hi = mid - 1;
		else
			lo = mid + 1;
	}
	return -1;
}

/* The text of a string or integer arg, into <buf> for integers. */
static int
arg_text(const struct spop_arg *a, char *buf, size_t size, const char **s,
         size_t *len)
{
	const struct spop_data *d = &a->value;
	int                     n;

	switch (d->type) {
	case SPOP_DATA_STRING:
		if (d->v.str.len == 0)
			return -1;
		*s = d->v.str.ptr;
		*len = d->v.str.len;
		return 0;
	case SPOP_DATA_INT32:
	case SPOP_DATA_INT64:
		n = snprintf(buf, size, "%lld", (long long)d->v.i);
		break;
	case SPOP_DATA_UINT32:
	case SPOP_DATA_UINT64:
		n = snprintf(buf, size, "%llu", (unsigned long long)d->v.u);
		break;
	default:
		return -1;
	}
	*s = buf;
	*len = (size_t)n;
	return 0;
}

int
policy_tenant_plan(const struct policy *p, const struct spop_message *m,
                   policy_plan_resolver *resolve, void *ctx)
{
	const struct plan_lookup *pl = &p->plan_lookup;
	const struct spop_arg    *ta = NULL, *pa;
	char                      buf[24];
	const char               *s = NULL;
	size_t                    len = 0;
	int                       plan;

	if (p->nplans == 0)
		return -1;
	if (pl->tenant_arg)
		ta = keys_find_arg(m, pl->tenant_arg, strlen(pl->tenant_arg));
	if (ta && arg_text(ta, buf, sizeof(buf), &s, &len) == 0) {
		if ((plan = tenant_lookup(p, s, len)) >= 0)
			return plan;
	} else {
		ta = NULL;
	}
	pa = pl->arg ? keys_find_arg(m, pl->arg, strlen(pl->arg)) : NULL;
	if (pa && pa->value.type == SPOP_DATA_STRING &&
	    (plan = policy_plan_index(p, pa->value.v.str.ptr,
	                              pa->value.v.str.len)) >= 0)
		return plan;
	if (ta && resolve) {
		plan = resolve(ctx, p, s, len);
		if (plan == POLICY_PLAN_WAIT || plan == POLICY_PLAN_UNKNOWN ||
		    (plan >= 0 && plan < p->nplans))
			return plan;
	}
	return pl->default_plan;
}

/* ---- checks ------------------------------------------------------------- */

bool
policy_status_matches(const struct rule *r, int64_t status)
{
	if (status < 0 || status >= POLICY_STATUS_MAX)
		return false;
	return (r->status_bits[status / 64] >> (status % 64)) & 1;
}

static void
check_missing(struct check *c)
{
	c->kind = CHECK_DENY_MISSING;
	c->key[0] = '\0';
	c->keylen = 0;
	c->member[0] = '\0';
	c->memberlen = 0;
}

/* Expands <r>'s key (or its fallback) into <c>. Returns 1 when <c> is
 * complete (an EVAL, or a DENY_MISSING check), 0 when the rule yields no
 * check. <request> says whether missing: deny may refuse the request. */
static int
build_key(const struct rule *r, const struct spop_message *m, bool request,
          struct check *c)
{
	if (keys_expand(r->key, m, r->key_prefix, "}", c->key, POLICY_KEY_MAX,
	                &c->keylen) == 0)
		return 1;
	switch (r->missing) {
	case MISSING_SKIP:
		return 0;
	case MISSING_FALLBACK:
		if (keys_expand(r->fallback, m, r->key_prefix, "}", c->key,
		                POLICY_KEY_MAX, &c->keylen) == 0)
			return 1;
		break; /* then deny: never silently unlimited */
	case MISSING_DENY:
	default:
		break;
	}
	if (!request)
		return 0;
	check_missing(c);
	return 1;
}

/* Fills <c>'s cost. Returns 1, or 0 for no check (missing: skip), or
 * sets DENY_MISSING and returns 1. An integer past int64 is a cost that
 * can never fit (LIM_COST_MAX + 1), as a smaller huge one is: not
 * malformed, or missing: skip and a fallback's cost 1 would let a client
 * name a huge cost and go uncharged. */
static int
build_cost(const struct rule *r, const struct spop_message *m, struct check *c)
{
	int64_t v;
	int     rc;

	c->cost = r->cost;
	if (!r->cost_arg)
		return 1;
	rc = keys_arg_int(m, r->cost_arg, &v);
	if (rc == KEYS_INT_RANGE) {
		c->cost = LIM_COST_MAX + 1;
		return 1;
	}
	if (rc == 0 && v >= 0) {
		c->cost = v;
		return 1;
	}
	switch (r->missing) {
	case MISSING_SKIP:
		return 0;
	case MISSING_FALLBACK:
		c->cost = 1;
		return 1;
	case MISSING_DENY:
	default:
		check_missing(c);
		return 1;
	}
}

/* Fills <c>'s member from the rule's id: template. Returns 1 or 0. */
static int
build_member(const struct rule *r, const struct spop_message *m, bool request,
             struct check *c)
{
	if (keys_expand(r->id, m, "", "", c->member, POLICY_MEMBER_MAX,
	                &c->memberlen) == 0)
		return 1;
	c->member[0] = '\0';
	c->memberlen = 0;
	if (r->lim.algo == LIM_SLIDING_LOG)
		return 1; /* the store makes a unique member */
	if (!request || r->missing == MISSING_SKIP)
		return 0;
	check_missing(c);
	return 1;
}

/* The lim_params <r> uses for <plan>, or NULL when that plan sets no
 * limit of that kind. */
static const struct lim_params *
rule_lim(const struct policy *p, const struct rule *r, int plan)
{
	if (r->plan == RULE_PLAN_NONE)
		return &r->lim;
	if (plan < 0 || plan >= p->nplans)
		plan = p->plan_lookup.default_plan;
	if (plan < 0 || r->plan_lim[plan].rate == 0)
		return NULL;
	return &r->plan_lim[plan];
}

/* 1 if <m>'s "ip" arg (an address, or a string that reads as one) is in
 * <r>'s allow: ranges. An absent or unreadable ip is in none. */
static bool
allowed_ip(const struct rule *r, const struct spop_message *m)
{
	const struct spop_arg *a;
	uint8_t                addr[16];

	if (r->nallow == 0)
		return false;
	a = keys_find_arg(m, POLICY_ALLOW_ARG, sizeof(POLICY_ALLOW_ARG) - 1);
	if (!a)
		return false;
	switch (a->value.type) {
	case SPOP_DATA_IPV4:
		cidr_addr_v4(a->value.v.ipv4, addr);
		break;
	case SPOP_DATA_IPV6:
		memcpy(addr, a->value.v.ipv6, sizeof(addr));
		break;
	case SPOP_DATA_STRING:
		if (cidr_addr_text(a->value.v.str.ptr, a->value.v.str.len,
		                   addr) == -1)
			return false;
		break;
	default:
		return false;
	}
	return cidr_match_any(r->allow, r->nallow, addr);
}

/* The cost of a result message for <r>: 1 for count: failures; for count:
 * response the rule's cost: (a constant, or the arg it names: an integer,
 * or a string of decimal digits, 0 <= cost <= POLICY_COST_MAX; so never
 * negative, fractional or past what the script's doubles hold). Returns
 * 0, or -1 for a missing or malformed cost, noted in <rej>. */
static int
result_cost(const struct rule *r, const struct spop_message *m,
            struct policy_rejects *rej, int64_t *cost)
{
	*cost = r->count == COUNT_FAILURES ? 1 : r->cost;
	if (r->count == COUNT_FAILURES || !r->cost_arg)
		return 0;
	if (keys_arg_int(m, r->cost_arg, cost) == 0 && *cost >= 0 &&
	    *cost <= POLICY_COST_MAX)
		return 0;
	if (rej && rej->n < POLICY_MAX_CHECKS)
		rej->rule[rej->n++] = r;
	return -1;
}

/* The units a reserving rule holds at the request: reserve: (a constant,
 * or the arg it names: an integer 0..LIM_COST_MAX; missing or malformed,
 * 0: the request is then admitted while the key is not in debt and pays
 * its whole cost at the settle). More than LIM_COST_MAX is sent as it is,
 * past int64 as LIM_COST_MAX + 1: a reservation that can never fit. */
static int64_t
reserve_units(const struct rule *r, const struct spop_message *m)
{
	int64_t v;
	int     rc;

	if (!r->reserve_arg)
		return r->reserve;
	rc = keys_arg_int(m, r->reserve_arg, &v);
	if (rc == KEYS_INT_RANGE)
		return LIM_COST_MAX + 1;
	if (rc == 0 && v >= 0)
		return v;
	return 0;
}

/* The settle of a reserving rule's response (ROLE_RESULT): the actual
 * cost when the status matches, 0 (all refunded) when it does not, -1
 * (the reservation stands) for a missing or malformed cost, noted in
 * <rej>. */
static int64_t
settle_cost(const struct rule *r, const struct spop_message *m,
            struct policy_rejects *rej)
{
	int64_t status, cost;

	if (keys_arg_int(m, "status", &status) == 0 &&
	    !policy_status_matches(r, status))
		return 0;
	if (result_cost(r, m, rej, &cost) == -1)
		return -1;
	return cost;
}

/* Builds the check of one binding into <c>. Returns 1 or 0 (no check). */
static int
build_one(const struct policy *p, const struct policy_binding *b,
          const struct spop_message *m, int plan, struct check *c,
          struct policy_rejects *rej)
{
	const struct rule       *r = b->rule;
	const struct lim_params *lim = rule_lim(p, r, plan);
	bool                     request = b->role == ROLE_REQUEST;
	int64_t                  status;

	if (!lim || allowed_ip(r, m))
		return 0;
	c->rule = r;
	c->kind = CHECK_EVAL;
	c->lim = *lim;
	c->plan = r->plan == RULE_PLAN_NONE
	                  ? -1
	                  : (plan >= 0 && plan < p->nplans
	                             ? plan
	                             : p->plan_lookup.default_plan);
	c->flags = (r->shadow || p->shadow_all) ? LIM_FL_SHADOW : 0;
	c->member[0] = '\0';
	c->memberlen = 0;
	c->op = LIM_OP_CHECK;
	c->cost = r->cost;
	if (b->role == ROLE_RESULT && r->reserves) {
		c->cost = settle_cost(r, m, rej);
		c->op = LIM_OP_FORCE;
	} else if (b->role == ROLE_RESULT) {
		if (keys_arg_int(m, "status", &status) != 0 ||
		    !policy_status_matches(r, status))
			return 0;
		if (result_cost(r, m, rej, &c->cost) == -1)
			return 0;
		c->op = LIM_OP_FORCE;
	}
	if (!build_key(r, m, request, c))
		return 0;
	if (c->kind == CHECK_DENY_MISSING)
		return 1;
	switch (b->role) {
	case ROLE_REQUEST:
		if (r->reserves) { /* held now, settled by the response */
			c->cost = reserve_units(r, m);
			break;
		}
		if (r->count != COUNT_ALL) {
			/* "would one more failure (unit) pass?": refused
			 * once the budget is spent (in debt), never charged
			 * here */
			c->op = LIM_OP_PEEK;
			c->cost = 1;
			break;
		}
		if (!build_cost(r, m, c))
			return 0;
		if (c->kind == CHECK_DENY_MISSING)
			return 1;
		break;
	case ROLE_RELEASE:
		c->op = LIM_OP_RELEASE;
		c->cost = 0;
		break;
	case ROLE_RESULT:
		break;
	}
	if (r->id)
		return build_member(r, m, request, c);
	return 1;
}

/* How much a check left out weighs on the request: a fail: closed rule
 * would refuse it (2), or flag it in shadow (1); the others only make it
 * degraded (0). */
static int
weight(const struct check *c)
{
	if (c->rule->fail != FAIL_CLOSED)
		return 0;
	return (c->flags & LIM_FL_SHADOW) ? 1 : 2;
}

/* Builds the bindings of <pm> from <i> on, which did not fit, one at a
 * time, into <ov>. */
static void
overflow(const struct policy *p, const struct policy_msg *pm, int i,
         const struct spop_message *m, int plan, struct policy_overflow *ov,
         struct policy_rejects *rej)
{
	struct check c;

	for (; i < pm->n; i++) {
		if (!build_one(p, &pm->b[i], m, plan, &c, rej))
			continue;
		if (ov->n++ == 0 || weight(&c) > weight(ov->worst))
			*ov->worst = c;
	}
}

int
policy_build_checks_with_overflow(const struct policy       *p,
                                  const struct spop_message *m, int plan,
                                  struct check *out, int max,
                                  struct policy_overflow *ov)
{
	return policy_build_checks_full(p, m, plan, out, max, ov, NULL);
}

int
policy_build_checks_full(const struct policy *p, const struct spop_message *m,
                         int plan, struct check *out, int max,
                         struct policy_overflow *ov, struct policy_rejects *rej)
{
	const struct policy_msg *pm =
		policy_find_msg(p, m->name.ptr, m->name.len);
	int i, n = 0;

	if (!pm)
		return 0;
	for (i = 0; i < pm->n && n < max; i++)
		n += build_one(p, &pm->b[i], m, plan, &out[n], rej);
	if (ov)
		overflow(p, pm, i, m, plan, ov, rej);
	return n;
}

int
policy_build_checks_in_plan(const struct policy       *p,
                            const struct spop_message *m, int plan,
                            struct check *out, int max)
{
	return policy_build_checks_with_overflow(p, m, plan, out, max, NULL);
}

int
policy_build_checks(const struct policy *p, const struct spop_message *m,
                    struct check *out, int max)
{
	int plan = -1;

	if (policy_needs_plan(p, m))
		plan = policy_tenant_plan(p, m, NULL, NULL);
	return policy_build_checks_in_plan(p, m, plan, out, max);
}
