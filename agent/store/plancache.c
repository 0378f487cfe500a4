/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Plan cache: a fixed array of entries (tenant, plan name, expiry, CLOCK
 * bit, waiters) and an index over it, an open-addressing table of entry
 * numbers (linear probing, power-of-two size, backward-shift deletion,
 * util_hash_private: seeded per process, so that tenant names crafted
 * offline do not share one probe run). Entries never move, so an HGET in flight
 * and its waiters hold a pointer to theirs; such an entry is not evicted until
 * it is answered and its waiters are gone. Plan names, not indexes, are kept so
 * that entries survive a policy reload that reorders plans; with the time
 * and the hash of each answer, so that the reloaded plan_lookup judges
 * them (stale()).
 *
 * Not here: deadlines (the waiter's owner has them) and the choice of what
 * an unknown plan means (policy_tenant_plan and req.c).
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "plancache.h"
#include "ratelog.h"
#include "store.h"
#include "util.h"

enum {
	ST_UNKNOWN = 0, /* no answer yet */
	ST_PLAN,        /* <plan> is the answer */
	ST_ABSENT,      /* not in the hash */
};

struct entry {
	struct plancache *pc; /* the owner, for fetched_cb */
	uint64_t          hash;
	char             *tenant; /* owned; NULL: entry free */
	size_t            tlen;
	int64_t           answered_us; /* the answer came then */
	uint64_t          source;      /* the hash it came from: entries
	                                * outlive a reload, and one from
	                                * another redis_hash is no answer */
	uint64_t          asked;       /* the hash of the HGET in flight */
	int64_t           retry_us;    /* the last HGET failed: no
	                                * other before then */
	struct plancache_waiter *waiters;
	uint8_t                  state;
	uint8_t                  plen;
	uint8_t                  pending; /* an HGET is in flight */
	uint8_t                  used;    /* CLOCK: looked up lately */
	char                     plan[PLANCACHE_PLAN_MAX + 1];
};

struct plancache {
	plancache_fetch *fetch;
	void            *fetch_ctx;
	struct entry    *ents;  /* <max> */
	uint32_t        *slots; /* <mask> + 1: entry number + 1; 0 empty */
	uint32_t        *freed; /* entries emptied below <hi> */
	size_t           nfreed;
	size_t           hi; /* entries ever used: ents[0, hi) */
	size_t           mask;
	size_t           max, max_bytes;
	size_t           n, bytes;
	size_t           npending; /* entries with an HGET in flight */
	size_t           hand;     /* CLOCK */
};

static int
store_fetch(void *ctx, const char *hash, const char *field, size_t len,
            void (*cb)(void *, const char *, size_t, int), void *arg)
{
	return store_hget(ctx, hash, field, len, cb, arg);
}

struct plancache *
plancache_new(struct store *st)
{
	return plancache_new_fetch(store_fetch, st, PLANCACHE_MAX,
	                           PLANCACHE_BYTES);
}

struct plancache *
plancache_new_fetch(plancache_fetch *fetch, void *ctx, size_t max,
                    size_t max_bytes)
{
	struct plancache *pc = xcalloc(1, sizeof(*pc));
	size_t            slots = 2;

	while (slots < 2 * max)
		slots *= 2;
	pc->fetch = fetch;
	pc->fetch_ctx = ctx;
	pc->max = max;
	pc->max_bytes = max_bytes;
	pc->mask = slots - 1;
	pc->ents = xcalloc(max, sizeof(*pc->ents));
	pc->slots = xcalloc(slots, sizeof(*pc->slots));
	pc->freed = xcalloc(max, sizeof(*pc->freed));
	return pc;
}

void
plancache_free(struct plancache *pc)
{
	if (pc == NULL)
		return;
	for (size_t i = 0; i < pc->hi; i++)
		free(pc->ents[i].tenant);
	free(pc->ents);
	free(pc->slots);
	free(pc->freed);
	free(pc);
}

size_t
plancache_count(const struct plancache *pc)
{
	return pc->n;
}

size_t
plancache_bytes(const struct plancache *pc)
{
	return pc->bytes;
}

size_t
plancache_pending(const struct plancache *pc)
{
	return pc->npending;
}

/* ---- waiters ------------------------------------------------------------ */

void
plancache_waiter_init(struct plancache_waiter *w, struct plancache *pc,
                      void (*cb)(struct plancache_waiter *w, int ok))
{
	*w = (struct plancache_waiter){ .pc = pc, .cb = cb };
}

static void
park(struct plancache_waiter *w, struct plancache_waiter **head)
{
	w->next = *head;
	if (w->next != NULL)
		w->next->pprev = &w->next;
	w->pprev = head;
	*head = w;
}

void
plancache_cancel(struct plancache_waiter *w)
{
	if (w->pprev == NULL)
		return;
	*w->pprev = w->next;
	if (w->next != NULL)
		w->next->pprev = w->pprev;
	w->next = NULL;
	w->pprev = NULL;
}

/* Calls back every waiter of <e>. They are moved to a list of our own
 * first: a callback may resolve again, and so evict <e> and reuse it for
 * another tenant, whose waiters must not be woken with this answer. */
static void
wake(struct entry *e, int ok)
{
	struct plancache_waiter *head = NULL, *w;

	while ((w = e->waiters) != NULL) {
		plancache_cancel(w);
		park(w, &head);
	}
	while ((w = head) != NULL) {
		plancache_cancel(w);
		w->cb(w, ok);
	}
}

/* ---- index -------------------------------------------------------------- */

/* The slot holding <tenant>'s entry number, or the empty slot where it
 * would go. */
static size_t
slot_of(const struct plancache *pc, const char *tenant, size_t len, uint64_t h)
{
	size_t i = (size_t)h & pc->mask;

	for (;;) {
		uint32_t            s = pc->slots[i];
		const struct entry *e;

		if (s == 0)
			return i;
		e = &pc->ents[s - 1];
		if (e->hash == h && e->tlen == len &&
		    memcmp(e->tenant, tenant, len) == 0)
			return i;
		i = (i + 1) & pc->mask;
	}
}

/* Empties slot <i> and moves back the entries of its probe run that it
 * would otherwise cut off from their home slot. */
static void
slot_delete(struct plancache *pc, size_t i)
{
	size_t j = i;

	for (;;) {
		size_t k;

		j = (j + 1) & pc->mask;
		if (pc->slots[j] == 0)
			break;
		k = (size_t)pc->ents[pc->slots[j] - 1].hash & pc->mask;
		/* stays when its home k lies cyclically in (i, j] */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		pc->slots[i] = pc->slots[j];
		i = j;
	}
	pc->slots[i] = 0;
}

/* ---- entries ------------------------------------------------------------ */

static void
evict(struct plancache *pc, struct entry *e)
{
	slot_delete(pc, slot_of(pc, e->tenant, e->tlen, e->hash));
	pc->n--;
	pc->bytes -= e->tlen;
	free(e->tenant);
	memset(e, 0, sizeof(*e));
	pc->freed[pc->nfreed++] = (uint32_t)(e - pc->ents);
}

/* Evicts one entry, CLOCK order: the hand clears the bit of a used entry
 * and takes the first unused one, skipping the busy (HGET in flight; only
 * those have waiters). Returns 0, or -1 when every entry is busy: at
 * once, as a stalled Redis under many new tenants makes every entry
 * pending, and a walk of the whole table per request (65536 entries,
 * twice) would then cost the worker more than the requests do. */
static int
evict_one(struct plancache *pc)
{
	if (pc->npending >= pc->n)
		return -1;
	for (size_t steps = 0; steps < 2 * pc->hi + 1; steps++) {
		struct entry *e = &pc->ents[pc->hand];

		pc->hand = (pc->hand + 1) % pc->hi;
		assert(e->waiters == NULL || e->pending);
		if (e->tenant == NULL || e->pending)
			continue;
		if (e->used) {
			e->used = 0;
			continue;
		}
		evict(pc, e);
		return 0;
	}
	return -1;
}

/* A new, empty entry for <tenant> in slot <i>, or NULL when none can be
 * freed for it. */
static struct entry *
add(struct plancache *pc, const char *tenant, size_t len, uint64_t h, size_t i)
{
	struct entry *e;
	int           evicted = 0;

	if (len > pc->max_bytes)
		return NULL;
	while (pc->n >= pc->max || pc->bytes + len > pc->max_bytes) {
		if (evict_one(pc) == -1)
			return NULL;
		evicted = 1;
	}
	if (evicted) /* the probe run moved */
		i = slot_of(pc, tenant, len, h);
	e = &pc->ents[pc->nfreed > 0 ? pc->freed[--pc->nfreed] : pc->hi++];
	e->pc = pc;
	e->hash = h;
	e->tenant = xmalloc(len);
	memcpy(e->tenant, tenant, len);
	e->tlen = len;
	pc->slots[i] = (uint32_t)(e - pc->ents) + 1;
	pc->n++;
	pc->bytes += len;
	return e;
}

static struct entry *
find_or_add(struct plancache *pc, const char *tenant, size_t len)
{
	uint64_t h = util_hash_private(tenant, len);
	size_t   i = slot_of(pc, tenant, len, h);

	if (pc->slots[i] != 0)
		return &pc->ents[pc->slots[i] - 1];
	return add(pc, tenant, len, h, i);
}

/* ---- HGET --------------------------------------------------------------- */

/* One line per worker per RATELOG_INTERVAL_US at most: the requests that
 * waited have their rules' fail modes applied (and logged as fail_mode),
 * and this line says why. */
static void
log_failed(void)
{
	static _Thread_local struct ratelog rl; /* slot 0: one line for all */
	uint64_t                            suppressed;

	if (log_level < LOG_WARN ||
	    !ratelog_allow(&rl, 0, util_now_us(), &suppressed))
		return;
	log_warn("plan_lookup_failed",
	         "answer=fail_mode suppressed=%llu "
	         "hint=\"HGET on plan_lookup.redis_hash failed: Redis down or "
	         "not a hash\"",
	         (unsigned long long)suppressed);
}

/* An HGET's answer. On failure a known answer is kept, and the tenant is
 * not asked for again before PLANCACHE_RETRY_US; waiters are woken either
 * way. */
static void
fetched_cb(void *arg, const char *val, size_t len, int err)
{
	struct entry *e = arg;
	int64_t       now = util_now_us();

	assert(e->pending && e->pc->npending > 0);
	e->pending = 0;
	e->pc->npending--;
	if (err == 0) {
		e->state = val != NULL && len <= PLANCACHE_PLAN_MAX ? ST_PLAN
		                                                    : ST_ABSENT;
		e->plen = e->state == ST_PLAN ? (uint8_t)len : 0;
		if (e->state == ST_PLAN)
			memcpy(e->plan, val, len);
		e->answered_us = now;
		e->source = e->asked;
		e->retry_us = 0;
	} else {
		e->retry_us = now + PLANCACHE_RETRY_US;
		if (e->waiters != NULL)
			log_failed();
	}
	wake(e, err == 0);
}

/* 1 if <e> needs asking again under <p>: no answer yet, one older than
 * <p>'s cache time (the policy's now, not the one it was asked under: a
 * reload that shortens it applies to the answers held), or one from
 * another hash. */
static int
stale(const struct entry *e, const struct policy *p, int64_t now)
{
	return e->state == ST_UNKNOWN ||
	       now - e->answered_us >= p->plan_lookup.cache_us ||
	       e->source != p->plan_lookup.redis_hash_id;
}

static void
fetch(struct plancache *pc, struct entry *e, const struct policy *p)
{
	e->asked = p->plan_lookup.redis_hash_id;
	e->pending = 1;
	pc->npending++;
	if (pc->fetch(pc->fetch_ctx, p->plan_lookup.redis_hash, e->tenant,
	              e->tlen, fetched_cb, e) == -1) {
		e->pending = 0;
		pc->npending--;
	}
}

int
plancache_resolve(void *ctx, const struct policy *p, const char *tenant,
                  size_t len)
{
	struct plancache_waiter *w = ctx;
	struct entry            *e;

	if (p->plan_lookup.redis_hash == NULL || len == 0)
		return -1;
	if ((e = find_or_add(w->pc, tenant, len)) == NULL)
		return POLICY_PLAN_UNKNOWN;
	e->used = 1;
	if (!e->pending && !w->nowait) {
		int64_t now = util_now_us();

		if (e->retry_us <= now && stale(e, p, now))
			fetch(w->pc, e, p);
	}
	if (e->state == ST_PLAN)
		return policy_plan_index(p, e->plan, e->plen);
	if (e->state == ST_ABSENT)
		return -1;
	if (!e->pending || w->nowait)
		return POLICY_PLAN_UNKNOWN;
	if (w->pprev == NULL)
		park(w, &e->waiters);
	return POLICY_PLAN_WAIT;
}
