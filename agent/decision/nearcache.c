/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Near-cache table: NEARCACHE_SETS x NEARCACHE_WAYS entries of (two key
 * hashes, deny-until, held-until). The set comes from the first hash; both
 * must match for a hit, so a false hit needs a 128-bit collision. An entry
 * is live until held-until (<= deny-until); its answers count to
 * deny-until. Not here: which requests may use it (req.c asks eligible()).
 */
#include <stdlib.h>
#include <string.h>

#include "nearcache.h"
#include "util.h"

struct nc_entry {
	uint64_t h1, h2;
	int64_t  until_us; /* the denial ends */
	int64_t  hold_us;  /* the entry ends; 0 = empty */
	int64_t  late_us;  /* the round trip it was learnt over: added to
	                    * the times answered (nearcache_learn()) */
	int      block;    /* a penalty box: any cost is denied until then */
};

/* docs/OPERATING.md promises a reset is seen by the pool within 1 s */
_Static_assert(NEARCACHE_HOLD_US < 1000000, "a held denial outlives a reset");

struct nearcache {
	struct nc_entry e[NEARCACHE_SETS][NEARCACHE_WAYS];
	int64_t         dropped_us; /* the last nearcache_drop_blocks() */
	int             watched;    /* nearcache_watch_resets() */
};

static void
mix(uint64_t *a, uint64_t *b, uint64_t v)
{
	*a = (*a ^ v) * 0x9fb21c651e98df25ULL;
	*a ^= *a >> 32;
	*b = (*b + v) * 0xff51afd7ed558ccdULL;
	*b ^= *b >> 29;
}

/* Hashes the key, eight bytes at a time, and the limits it was decided
 * under (algorithm and every parameter of it): a tenant whose plan
 * changes, or a rule reloaded with another algorithm for the same key,
 * gets a fresh entry, not the old limits' denial. Op, cost and shadow need
 * no mixing: nearcache_eligible() admits CHECKs with cost >= 1 on
 * non-shadow rules only, a cost-1 denial holds for any such cost, and
 * denial() works out the later end of a larger one. */
static void
key_hashes(const struct check *c, uint64_t *h1, uint64_t *h2)
{
	uint64_t a = 1469598103934665603ULL, b = 0x9e3779b97f4a7c15ULL, v;
	size_t   i = 0;

	for (; i + 8 <= c->keylen; i += 8) {
		memcpy(&v, c->key + i, 8);
		mix(&a, &b, v);
	}
	v = 0;
	memcpy(&v, c->key + i, c->keylen - i);
	mix(&a, &b, v ^ ((uint64_t)c->keylen << 56));
	mix(&a, &b, (uint64_t)c->lim.algo);
	mix(&a, &b, (uint64_t)c->lim.rate);
	mix(&a, &b, (uint64_t)c->lim.period_us);
	mix(&a, &b, (uint64_t)c->lim.burst);
	mix(&a, &b, (uint64_t)c->lim.calendar);
	mix(&a, &b, (uint64_t)c->lim.max_delay_us);
	/* each on its own: block ^ block_max is 0 both for block: N,
	 * block_max: N and for no box at all */
	mix(&a, &b, (uint64_t)c->lim.block_us);
	mix(&a, &b, (uint64_t)c->lim.block_max_us);
	*h1 = a;
	*h2 = b;
}

struct nearcache *
nearcache_new(void)
{
	return xcalloc(1, sizeof(struct nearcache));
}

void
nearcache_free(struct nearcache *nc)
{
	free(nc);
}

/* A rule with a penalty box: every denial it answers is a block (the
 * script denies only by blocking), exact for any algorithm and any cost
 * until its end, so CHECKs and PEEKs (count: failures) of every algorithm
 * may use it. */
static int
block_eligible(const struct check *c)
{
	return c->kind == CHECK_EVAL &&
	       (c->op == LIM_OP_CHECK || c->op == LIM_OP_PEEK) &&
	       c->cost >= 1 && !(c->flags & LIM_FL_SHADOW);
}

int
nearcache_eligible(const struct check *c)
{
	if (c->lim.block_us > 0)
		return block_eligible(c);
	if (c->kind != CHECK_EVAL || c->op != LIM_OP_CHECK || c->cost < 1 ||
	    (c->flags & LIM_FL_SHADOW))
		return 0;
	/* a settle's refund moves the state back: "denied until T" no
	 * longer holds for a key whose rule reserves */
	if (c->lim.reserve_lease_us > 0)
		return 0;
	switch (c->lim.algo) {
	case LIM_GCRA:
	case LIM_TOKEN_BUCKET:
	case LIM_FIXED_WINDOW:
		return 1;
	case LIM_LEAKY_BUCKET:
		return c->lim.max_delay_us == 0;
	default:
		return 0;
	}
}

/* Fills <out> with what Redis answers a request of <c>'s cost on a key
 * denied to cost 1 for <left> µs more: in the GCRA family each unit more
 * is one emission interval later, a fixed window lets any cost within its
 * limit through at its end. 0 for a cost that can never fit: Redis says
 * so (allowed -1), the cache cannot. */
static int
denial(const struct check *c, int64_t left, struct lim_result *out)
{
	const struct lim_params *p = &c->lim;
	int64_t                  extra = 0;

	if (p->ei_us > 0) {
		if (c->cost > p->burst)
			return 0;
		extra = (c->cost - 1) * p->ei_us;
	} else if (c->cost > p->rate) {
		return 0;
	}
	out->allowed = 0;
	out->remaining = 0;
	out->retry_after_us = left + extra;
	out->next_us = left;
	out->full_us = left;
	return 1;
}

int
nearcache_lookup(struct nearcache *nc, const struct check *c, int64_t now_us,
                 struct lim_result *out)
{
	uint64_t         h1, h2;
	struct nc_entry *set;

	key_hashes(c, &h1, &h2);
	set = nc->e[h1 % NEARCACHE_SETS];
	for (int i = 0; i < NEARCACHE_WAYS; i++) {
		if (set[i].h1 != h1 || set[i].h2 != h2 ||
		    set[i].hold_us <= now_us)
			continue;
		if (set[i].block)
			return lim_block_held(
				&(struct lim_block){ .until_us =
			                                     set[i].until_us +
			                                     set[i].late_us },
				now_us, out);
		return denial(c, set[i].until_us + set[i].late_us - now_us,
		              out);
	}
	return 0;
}

/* Remembers <c>'s key, denied until <until_us>, held until <hold_us>,
 * answered <late_us> later, in its set: in the key's own way, else an
 * empty or expired one, else the one expiring soonest. */
static void
remember(struct nearcache *nc, const struct check *c, int64_t until_us,
         int64_t hold_us, int64_t late_us, int block)
{
	uint64_t         h1, h2;
	struct nc_entry *set, *victim;

	key_hashes(c, &h1, &h2);
	set = nc->e[h1 % NEARCACHE_SETS];
	victim = &set[0];
	for (int i = 0; i < NEARCACHE_WAYS; i++) {
		if (set[i].h1 == h1 && set[i].h2 == h2) {
			victim = &set[i];
			break;
		}
		if (set[i].hold_us < victim->hold_us)
			victim = &set[i];
	}
	victim->h1 = h1;
	victim->h2 = h2;
	victim->until_us = until_us;
	victim->hold_us = hold_us;
	victim->late_us = late_us;
	victim->block = block;
}

/* How long a block learnt from a request sent at <sent_us> is held: to
 * its end (at most NEARCACHE_BLOCK_HOLD_US) while resets are watched and
 * none came after the request left, else as any denial. */
static int64_t
block_hold(const struct nearcache *nc, int64_t left, int64_t sent_us)
{
	int64_t cap = nc->watched && sent_us >= nc->dropped_us
	                      ? NEARCACHE_BLOCK_HOLD_US
	                      : NEARCACHE_HOLD_US;

	return left < cap ? left : cap;
}

void
nearcache_learn(struct nearcache *nc, const struct check *c,
                const struct lim_result *r, int64_t sent_us, int64_t recv_us)
{
	int64_t hold, late = recv_us > sent_us ? recv_us - sent_us : 0;

	if (c->lim.block_us > 0) {
		if (r->allowed == 0 && r->retry_after_us > 0)
			remember(nc, c, sent_us + r->retry_after_us,
			         sent_us + block_hold(nc, r->retry_after_us,
			                              sent_us),
			         late, 1);
		return;
	}
	if (r->allowed != 0 || c->cost != 1 || r->retry_after_us <= 0)
		return;
	hold = r->retry_after_us < NEARCACHE_HOLD_US ? r->retry_after_us
	                                             : NEARCACHE_HOLD_US;
	remember(nc, c, sent_us + r->retry_after_us, sent_us + hold, late, 0);
}

void
nearcache_watch_resets(struct nearcache *nc, int on, int64_t now_us)
{
	nc->watched = on;
	if (on)
		return;
	for (int s = 0; s < NEARCACHE_SETS; s++)
		for (int i = 0; i < NEARCACHE_WAYS; i++)
			if (nc->e[s][i].block &&
			    nc->e[s][i].hold_us > now_us + NEARCACHE_HOLD_US)
				nc->e[s][i].hold_us = now_us + NEARCACHE_HOLD_US;
}

void
nearcache_drop_blocks(struct nearcache *nc, int64_t now_us)
{
	nc->dropped_us = now_us;
	for (int s = 0; s < NEARCACHE_SETS; s++)
		for (int i = 0; i < NEARCACHE_WAYS; i++)
			if (nc->e[s][i].block)
				nc->e[s][i].hold_us = 0;
}

int
nearcache_once(struct nearcache *nc, const struct check *c, int64_t now_us,
               int64_t until_us)
{
	struct lim_result ignored;

	if (nearcache_lookup(nc, c, now_us, &ignored))
		return 0;
	remember(nc, c, until_us, until_us, 0, 0);
	return 1;
}

size_t
nearcache_count(const struct nearcache *nc, int64_t now_us)
{
	size_t n = 0;

	for (int s = 0; s < NEARCACHE_SETS; s++)
		for (int i = 0; i < NEARCACHE_WAYS; i++)
			n += nc->e[s][i].hold_us > now_us;
	return n;
}
