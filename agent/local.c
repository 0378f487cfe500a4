/*
 * The local tier's table: a fixed ring of <max> entry slots (the CLOCK)
 * and an open-addressing index (linear probing, power-of-two size at
 * least twice <max>, backward-shift deletion, no tombstones) from the key
 * hash to a slot. Both are allocated once by local_new(); only entries
 * (one malloc each: header plus key bytes) and the lim_state arrays of
 * sliding-log/concurrency come and go.
 *
 * Eviction, when a new key arrives at a full table: the hand sweeps the
 * ring; the first entry idle at <now> (its state equals a fresh key's) is
 * taken at once; otherwise the first entry without its reference bit,
 * clearing bits on the way (second chance), with a short lookahead for an
 * idle one. A new entry starts without the bit; any later lookup of a live
 * entry sets it, a denied one too (a flooded key is in use). A lookup that finds an idle entry resets it, freeing arrays.
 *
 * Single-threaded by design (one table per worker); nothing here blocks.
 */
#include <stdlib.h>
#include <string.h>

#include "local.h"
#include "util.h"

#define LOOKAHEAD 32

struct entry {
	uint64_t         hash;
	int64_t          idle_at;	/* state is fresh-equivalent from then */
	struct lim_state st;
	uint32_t         slot;		/* position in the ring */
	uint8_t          algo;		/* the state's algorithm */
	uint8_t          ref;		/* CLOCK reference bit */
	uint16_t         keylen;
	char             key[];
};

struct local {
	size_t         max;
	size_t         count;
	struct entry **ring;		/* [0, count) in use */
	uint32_t      *index;		/* slot + 1, 0 = empty */
	size_t         mask;
	size_t         hand;
};

struct local *
local_new(size_t max_keys)
{
	struct local *l = xcalloc(1, sizeof(*l));
	size_t size = 16;

	if (max_keys < 1)
		max_keys = 1;
	if (max_keys > UINT32_MAX / 4)
		max_keys = UINT32_MAX / 4;
	while (size < 2 * max_keys)
		size *= 2;
	l->max = max_keys;
	l->ring = xcalloc(max_keys, sizeof(*l->ring));
	l->index = xcalloc(size, sizeof(*l->index));
	l->mask = size - 1;
	return l;
}

static void
entry_free(struct entry *e)
{
	lim_state_deinit(&e->st);
	free(e);
}

void
local_free(struct local *l)
{
	size_t i;

	if (l == NULL)
		return;
	for (i = 0; i < l->count; i++)
		entry_free(l->ring[i]);
	free(l->ring);
	free(l->index);
	free(l);
}

size_t
local_count(const struct local *l)
{
	return l->count;
}

size_t
local_bytes_per_key(size_t keylen)
{
	return sizeof(struct entry) + keylen + sizeof(struct entry *) +
	       4 * sizeof(uint32_t);
}

/* Index position holding <key>, or of the empty cell ending its probe. */
static size_t
probe(const struct local *l, uint64_t h, const char *key, size_t len)
{
	size_t i = h & l->mask;
	struct entry *e;

	while (l->index[i] != 0) {
		e = l->ring[l->index[i] - 1];
		if (e->hash == h && e->keylen == len &&
		    memcmp(e->key, key, len) == 0)
			break;
		i = (i + 1) & l->mask;
	}
	return i;
}

static struct entry *
lookup(const struct local *l, uint64_t h, const char *key, size_t len)
{
	size_t i = probe(l, h, key, len);

	return l->index[i] ? l->ring[l->index[i] - 1] : NULL;
}

/* Removes index cell <i>, shifting back the cells of its probe run. */
static void
index_delete(struct local *l, size_t i)
{
	size_t j = i, home;

	for (;;) {
		l->index[i] = 0;
		for (;;) {
			j = (j + 1) & l->mask;
			if (l->index[j] == 0)
				return;
			home = l->ring[l->index[j] - 1]->hash & l->mask;
			/* keep j where it is if home lies cyclically in (i, j] */
			if (i <= j ? (i < home && home <= j)
			           : (i < home || home <= j))
				continue;
			break;
		}
		l->index[i] = l->index[j];
		i = j;
	}
}

static size_t
pick_victim(struct local *l, int64_t now)
{
	size_t steps, cand = SIZE_MAX, v;
	struct entry *e;

	for (steps = 0; steps < 2 * l->max + LOOKAHEAD; steps++) {
		v = l->hand;
		l->hand = (l->hand + 1) % l->max;
		e = l->ring[v];
		if (e->idle_at <= now)
			return v;
		if (cand != SIZE_MAX) {
			if (steps >= LOOKAHEAD)
				return cand;
			continue;
		}
		if (e->ref)
			e->ref = 0;
		else
			cand = v;
	}
	return cand != SIZE_MAX ? cand : l->hand;
}

static struct entry *
insert(struct local *l, uint64_t h, const char *key, size_t len, int64_t now)
{
	struct entry *e = xmalloc(sizeof(*e) + len);
	size_t slot, i;

	if (l->count < l->max) {
		slot = l->count++;
	} else {
		slot = pick_victim(l, now);
		struct entry *old = l->ring[slot];

		index_delete(l, probe(l, old->hash, old->key, old->keylen));
		entry_free(old);
	}
	e->hash = h;
	e->idle_at = now;
	lim_state_init(&e->st);
	e->slot = (uint32_t)slot;
	e->algo = 0;
	e->ref = 0;		/* earned by a second use: a flood of new
				 * keys goes before the keys in use */
	e->keylen = (uint16_t)len;
	memcpy(e->key, key, len);
	l->ring[slot] = e;
	i = probe(l, h, key, len);
	l->index[i] = (uint32_t)slot + 1;
	return e;
}

/* The entry's state, reset when idle or when the rule changed algorithm. */
static void
refresh(struct entry *e, const struct lim_params *p, int64_t now)
{
	if (e->idle_at <= now || e->algo != (uint8_t)p->algo) {
		lim_state_deinit(&e->st);
		e->algo = (uint8_t)p->algo;
		e->idle_at = now;
	}
}

/* Evaluates every check against the state now; returns 1 if one vetoes. */
static int
eval_all(struct local *l, struct local_check *c, size_t n, int64_t now_us)
{
	static const struct lim_state fresh;
	const struct lim_state *st;
	struct entry *e;
	uint64_t h, m;
	int veto = 0;

	for (size_t i = 0; i < n; i++) {
		h = util_hash_private(c[i].key, c[i].keylen);
		e = c[i].keylen <= LOCAL_KEY_MAX ?
		    lookup(l, h, c[i].key, c[i].keylen) : NULL;
		st = &fresh;
		if (e != NULL && e->idle_at > now_us &&
		    e->algo == (uint8_t)c[i].params->algo) {
			st = &e->st;
			e->ref = 1;	/* in use, even if only denied: a
					 * flooded key keeps its second chance */
		}
		m = lim_member_hash(c[i].member ? c[i].member : "",
		                    c[i].memberlen);
		c[i].charge = lim_eval(c[i].params, st, c[i].op, c[i].cost, m,
		                       now_us, &c[i].result);
		veto |= lim_vetoes(c[i].op, c[i].shadow, &c[i].result);
	}
	return veto;
}

static void
commit_all(struct local *l, struct local_check *c, size_t n, int64_t now_us)
{
	struct entry *e;
	uint64_t h, m;

	for (size_t i = 0; i < n; i++) {
		if (!c[i].charge || c[i].keylen > LOCAL_KEY_MAX)
			continue;
		h = util_hash_private(c[i].key, c[i].keylen);
		e = lookup(l, h, c[i].key, c[i].keylen);
		if (e == NULL)
			e = insert(l, h, c[i].key, c[i].keylen, now_us);
		else
			e->ref = 1;
		refresh(e, c[i].params, now_us);
		m = lim_member_hash(c[i].member ? c[i].member : "",
		                    c[i].memberlen);
		lim_commit(c[i].params, &e->st, c[i].op, c[i].cost, m, now_us);
		e->idle_at = lim_state_idle_at(c[i].params, &e->st, now_us);
	}
}

int
local_eval_request(struct local *l, struct local_check *c, size_t n,
                   int64_t now_us)
{
	if (eval_all(l, c, n, now_us))
		return 0;
	commit_all(l, c, n, now_us);
	return 1;
}

int
local_peek_request(struct local *l, struct local_check *c, size_t n,
                   int64_t now_us)
{
	return !eval_all(l, c, n, now_us);
}

void
local_commit_request(struct local *l, struct local_check *c, size_t n,
                     int64_t now_us)
{
	commit_all(l, c, n, now_us);
}

/* One agent's part of <v>: rounded down, so that the pool together never
 * allows more than <v> (100 over 3 agents: 33 each, 99 in all). At least
 * 1, since 0 would deny everything: a pool larger than the limit allows
 * one per agent. */
static int64_t
share(int64_t v, int pool)
{
	v /= pool;
	return v < 1 ? 1 : v;
}

void
local_share(struct lim_params *p, int pool_size)
{
	const char *err;
	struct lim_params q = *p;

	if (pool_size <= 1)
		return;
	q.rate = share(q.rate, pool_size);
	if (q.burst > 0)
		q.burst = share(q.burst, pool_size);
	if (lim_params_init(&q, &err) == 0)
		*p = q;
}
