/*
 * Plan cache: an open-addressing table (linear probing, power-of-two size,
 * FNV-1a) of tenant -> plan name and expiry. Plan names, not indexes, are
 * kept so that entries survive a policy reload that reorders plans.
 * Refreshes go through store_hget(); the answer lands in the entry found
 * again by tenant, so an entry evicted meanwhile costs nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "plancache.h"
#include "store.h"
#include "util.h"

#define SLOTS (PLANCACHE_MAX * 2)

struct entry {
	uint64_t hash;			/* 0 = empty */
	int64_t  expires_us;
	uint8_t  tlen;
	uint8_t  plen;
	uint8_t  pending;		/* an HGET is in flight */
	uint8_t  known;			/* <plan> holds an answer */
	char     tenant[PLANCACHE_TENANT_MAX + 1];
	char     plan[PLANCACHE_PLAN_MAX + 1];
};

struct plancache {
	struct store *st;
	struct entry *slots;
	size_t        n;
	uint32_t      epoch;		/* bumped when the table is emptied */
};

struct refresh {
	struct plancache *pc;
	uint32_t          epoch;
	int64_t           cache_us;
	uint8_t           tlen;
	char              tenant[PLANCACHE_TENANT_MAX + 1];
};

static uint64_t
fnv1a(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ULL;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
	return h ? h : 1;
}

struct plancache *
plancache_new(struct store *st)
{
	struct plancache *pc = xcalloc(1, sizeof(*pc));

	pc->st = st;
	pc->slots = xcalloc(SLOTS, sizeof(*pc->slots));
	return pc;
}

void
plancache_free(struct plancache *pc)
{
	if (pc == NULL)
		return;
	free(pc->slots);
	free(pc);
}

size_t
plancache_count(const struct plancache *pc)
{
	return pc->n;
}

/* Finds the entry of <tenant>, or the empty slot where it would go. */
static struct entry *
lookup(struct plancache *pc, const char *tenant, size_t len, uint64_t h)
{
	size_t i = (size_t)h & (SLOTS - 1);

	for (;;) {
		struct entry *e = &pc->slots[i];

		if (e->hash == 0 || (e->hash == h && e->tlen == len &&
		                     memcmp(e->tenant, tenant, len) == 0))
			return e;
		i = (i + 1) & (SLOTS - 1);
	}
}

static void
refresh_cb(void *arg, const char *val, size_t len, int err)
{
	struct refresh *r = arg;
	struct plancache *pc = r->pc;
	struct entry *e;

	if (pc != NULL && r->epoch == pc->epoch) {
		e = lookup(pc, r->tenant, r->tlen, fnv1a(r->tenant, r->tlen));
		if (e->hash != 0) {
			e->pending = 0;
			if (err == 0) {
				e->known = val != NULL && len <= PLANCACHE_PLAN_MAX;
				e->plen = e->known ? (uint8_t)len : 0;
				if (e->known)
					memcpy(e->plan, val, len);
				e->expires_us = util_now_us() + r->cache_us;
			}
		}
	}
	free(r);
}

static void
start_refresh(struct plancache *pc, struct entry *e, const struct policy *p)
{
	struct refresh *r = xmalloc(sizeof(*r));

	r->pc = pc;
	r->epoch = pc->epoch;
	r->cache_us = p->plan_lookup.cache_us;
	r->tlen = e->tlen;
	memcpy(r->tenant, e->tenant, e->tlen);
	if (store_hget(pc->st, p->plan_lookup.redis_hash, e->tenant, e->tlen,
	               refresh_cb, r) == 0)
		e->pending = 1;
	else
		free(r);
}

int
plancache_resolve(void *ctx, const struct policy *p, const char *tenant,
                  size_t len)
{
	struct plancache *pc = ctx;
	uint64_t h;
	struct entry *e;

	if (p->plan_lookup.redis_hash == NULL || len == 0 ||
	    len > PLANCACHE_TENANT_MAX)
		return -1;
	h = fnv1a(tenant, len);
	e = lookup(pc, tenant, len, h);
	if (e->hash == 0) {
		if (pc->n >= PLANCACHE_MAX) {
			memset(pc->slots, 0, SLOTS * sizeof(*pc->slots));
			pc->n = 0;
			pc->epoch++;
			e = lookup(pc, tenant, len, h);
		}
		e->hash = h;
		e->tlen = (uint8_t)len;
		memcpy(e->tenant, tenant, len);
		pc->n++;
	}
	if (!e->pending && e->expires_us <= util_now_us())
		start_refresh(pc, e, p);
	return e->known ? policy_plan_index(p, e->plan, e->plen) : -1;
}
