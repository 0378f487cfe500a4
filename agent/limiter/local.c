/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The local tier's table (local.h gives the concurrency design): S
 * stripes, each a fixed ring of entry slots (the CLOCK) and an
 * open-addressing index (linear probing, power-of-two size at least twice
 * the stripe's share of <max>, backward-shift deletion, no tombstones)
 * from the key hash to a slot, under one rwlock. All are allocated once
 * by local_new(); only entries (one malloc each: header plus key bytes)
 * and the lim_state arrays of sliding-log/concurrency come and go. The
 * hash's top bits choose the stripe, its low bits the index cell.
 *
 * Eviction, when a new key arrives at a full stripe: the hand sweeps the
 * ring; the first entry idle at <now> (its state equals a fresh key's) is
 * taken at once; otherwise the first entry without its reference bit,
 * clearing bits on the way (second chance), with a short lookahead for an
 * idle one. A new entry starts without the bit; any later lookup of a live
 * entry sets it, a denied one too (a flooded key is in use). A lookup that
 * finds an idle entry resets it, freeing arrays.
 *
 * Each entry's <word> is the time its state becomes fresh-equivalent
 * (lim_state_idle_at()). For the GCRA family that time is the TAT itself,
 * so the word is the whole state (0: fresh) and the CAS path needs
 * nothing else. The token bucket's (tokens k in whole units, anchor a) is
 * GCRA with TAT = a + (burst - k) * EI (lim_gcra.c); every (k - j, a - j *
 * EI) gives the same decisions, so the word is turned back into the pair
 * with the anchor nearest to now, and lim__tb_* run unchanged.
 *
 * Nothing here blocks except on the stripe locks, held for one request's
 * evaluation; nothing reads a clock.
 */
#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "local.h"
#include "util.h"

#define LOOKAHEAD       32
#define STRIPES_MAX     64 /* a request's stripes fit a uint64_t mask */
#define STRIPE_MIN_KEYS 1024

struct entry {
	uint64_t         hash;
	_Atomic int64_t  word; /* idle from then; GCRA family: TAT */
	struct lim_state st;   /* the other algorithms' state */
	uint32_t         slot; /* position in the ring */
	uint8_t          algo; /* the state's algorithm */
	_Atomic uint8_t  ref;  /* CLOCK reference bit */
	uint16_t         keylen;
	char             key[];
};

struct stripe {
	pthread_rwlock_t lock;
	size_t           max;
	atomic_size_t    count;
	struct entry   **ring;  /* [0, count) in use */
	uint32_t        *index; /* slot + 1, 0 = empty */
	size_t           mask;
	size_t           hand;
	int64_t          last_us; /* the latest <now> evaluated under the
	                           * write lock: never goes back (below) */
	char             pad[64]; /* no false sharing between locks */
};

/* The penalty box of the local tier's rules with block: (lim_block.c's
 * record per key, by its private hash), LOCAL_BOX_SLOTS of them, made on
 * the first such request. A slot whose record is past its forget time is
 * free; a full probe window gives up the record forgotten soonest. */
#define LOCAL_BOX_SLOTS 16384
#define LOCAL_BOX_PROBE 8

struct box_slot {
	uint64_t         hash;
	struct lim_block b;
};

/* The reservations of the rules with reserve: (limiter.h, "Reserve, then
 * settle"): the record the script keeps at "<base>:r:<request id>", here
 * keyed by the key's private hash and the request id's hash, with the
 * units held, their window index and the end of the lease.
 * LOCAL_RES_SLOTS of them (local.h), made on the first reservation. A
 * slot past its lease is free; a full probe window gives up the record
 * whose lease ends soonest (its settle is then unmatched: the
 * reservation stays charged in full, the safe side). */
struct res_slot {
	uint64_t hash;   /* the key's */
	uint64_t member; /* the request id's */
	int64_t  units;
	int64_t  idx;      /* lim_reserve_index() */
	int64_t  until_us; /* the lease ends; 0: free */
	int32_t  algo;     /* the rule's when it reserved */
};

struct local {
	size_t           nstripes;
	struct stripe   *s;
	pthread_mutex_t  box_lock; /* the box, and requests with block: */
	struct box_slot *box;      /* NULL until a rule with block: runs */
	pthread_mutex_t  res_lock; /* the reservations */
	struct res_slot *res;      /* NULL until a rule reserves */
};

static void
stripe_init(struct stripe *s, size_t max)
{
	pthread_rwlockattr_t a;
	size_t               size = 16;

	pthread_rwlockattr_init(&a);
	/* inserts are not starved by a hot key's stream of CAS readers */
	pthread_rwlockattr_setkind_np(
		&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&s->lock, &a);
	pthread_rwlockattr_destroy(&a);
	while (size < 2 * max)
		size *= 2;
	s->max = max;
	atomic_init(&s->count, 0);
	s->ring = xcalloc(max, sizeof(*s->ring));
	s->index = xcalloc(size, sizeof(*s->index));
	s->mask = size - 1;
}

struct local *
local_new(size_t max_keys)
{
	struct local *l = xcalloc(1, sizeof(*l));
	size_t        n = 1;

	if (max_keys < 1)
		max_keys = 1;
	if (max_keys > UINT32_MAX / 4)
		max_keys = UINT32_MAX / 4;
	while (n < STRIPES_MAX && max_keys / (2 * n) >= STRIPE_MIN_KEYS)
		n *= 2;
	l->nstripes = n;
	l->s = xcalloc(n, sizeof(*l->s));
	pthread_mutex_init(&l->box_lock, NULL);
	pthread_mutex_init(&l->res_lock, NULL);
	for (size_t i = 0; i < n; i++)
		stripe_init(&l->s[i], max_keys / n + (i < max_keys % n));
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
	if (l == NULL)
		return;
	for (size_t i = 0; i < l->nstripes; i++) {
		struct stripe *s = &l->s[i];

		for (size_t j = 0; j < atomic_load(&s->count); j++)
			entry_free(s->ring[j]);
		free(s->ring);
		free(s->index);
		pthread_rwlock_destroy(&s->lock);
	}
	free(l->s);
	free(l->box);
	pthread_mutex_destroy(&l->box_lock);
	free(l->res);
	pthread_mutex_destroy(&l->res_lock);
	free(l);
}

size_t
local_count(const struct local *l)
{
	size_t n = 0;

	for (size_t i = 0; i < l->nstripes; i++)
		n += atomic_load_explicit(&l->s[i].count, memory_order_relaxed);
	return n;
}

size_t
local_bytes_per_key(size_t keylen)
{
	return sizeof(struct entry) + keylen + sizeof(struct entry *) +
	       4 * sizeof(uint32_t);
}

/* ---- one stripe: index and CLOCK (under its lock) ---------------------- */

static size_t
stripe_of(const struct local *l, uint64_t h)
{
	return (size_t)(h >> 58) & (l->nstripes - 1);
}

/* Index position holding <key>, or of the empty cell ending its probe. */
static size_t
probe(const struct stripe *s, uint64_t h, const char *key, size_t len)
{
	size_t        i = h & s->mask;
	struct entry *e;

	while (s->index[i] != 0) {
		e = s->ring[s->index[i] - 1];
		if (e->hash == h && e->keylen == len &&
		    memcmp(e->key, key, len) == 0)
			break;
		i = (i + 1) & s->mask;
	}
	return i;
}

static struct entry *
lookup(const struct stripe *s, uint64_t h, const char *key, size_t len)
{
	size_t i = probe(s, h, key, len);

	return s->index[i] ? s->ring[s->index[i] - 1] : NULL;
}

/* Removes index cell <i>, shifting back the cells of its probe run. */
static void
index_delete(struct stripe *s, size_t i)
{
	size_t j = i, home;

	for (;;) {
		s->index[i] = 0;
		for (;;) {
			j = (j + 1) & s->mask;
			if (s->index[j] == 0)
				return;
			home = s->ring[s->index[j] - 1]->hash & s->mask;
			/* keep j where it is if home lies cyclically in (i, j]
			 */
			if (i <= j ? (i < home && home <= j)
			           : (i < home || home <= j))
				continue;
			break;
		}
		s->index[i] = s->index[j];
		i = j;
	}
}

static int
idle(const struct entry *e, int64_t now)
{
	return atomic_load_explicit(&e->word, memory_order_relaxed) <= now;
}

static size_t
pick_victim(struct stripe *s, int64_t now)
{
	size_t        steps, cand = SIZE_MAX, v;
	struct entry *e;

	for (steps = 0; steps < 2 * s->max + LOOKAHEAD; steps++) {
		v = s->hand;
		s->hand = (s->hand + 1) % s->max;
		e = s->ring[v];
		if (idle(e, now))
			return v;
		if (cand != SIZE_MAX) {
			if (steps >= LOOKAHEAD)
				return cand;
			continue;
		}
		if (atomic_load_explicit(&e->ref, memory_order_relaxed))
			atomic_store_explicit(&e->ref, 0, memory_order_relaxed);
		else
			cand = v;
	}
	return cand != SIZE_MAX ? cand : s->hand;
}

static struct entry *
insert(struct stripe *s, uint64_t h, const char *key, size_t len, int64_t now)
{
	struct entry *e = xmalloc(sizeof(*e) + len);
	size_t        slot,
		count = atomic_load_explicit(&s->count, memory_order_relaxed);

	if (count < s->max) {
		slot = count;
		atomic_store_explicit(&s->count, count + 1,
		                      memory_order_relaxed);
	} else {
		slot = pick_victim(s, now);
		struct entry *old = s->ring[slot];

		index_delete(s, probe(s, old->hash, old->key, old->keylen));
		entry_free(old);
	}
	e->hash = h;
	atomic_init(&e->word, 0);
	lim_state_init(&e->st);
	e->slot = (uint32_t)slot;
	e->algo = 0;
	atomic_init(&e->ref, 0); /* earned by a second use: a flood of
	                          * new keys goes before the keys in use */
	e->keylen = (uint16_t)len;
	memcpy(e->key, key, len);
	s->ring[slot] = e;
	s->index[probe(s, h, key, len)] = (uint32_t)slot + 1;
	return e;
}

/* ---- the state word ------------------------------------------------------ */

/* 1 for the algorithms whose whole state is the TAT word. */
static int
is_tat(int algo)
{
	return algo == LIM_GCRA || algo == LIM_LEAKY_BUCKET ||
	       algo == LIM_TOKEN_BUCKET;
}

/* The lim_state a TAT word <w> stands for at <now> (local.c's comment). */
static void
word_to_state(const struct lim_params *p, int64_t w, int64_t now,
              struct lim_state *st)
{
	int64_t units;

	lim_state_init(st);
	if (p->algo != LIM_TOKEN_BUCKET) {
		st->v[0] = w;
		return;
	}
	if (w <= now)
		return;                              /* a full bucket */
	units = (w - now + p->ei_us - 1) / p->ei_us; /* owed, >= 1 */
	if (units > 2 * p->burst) {
		/* more than a FORCE can owe (tokens >= -full): a word of
		 * other limits (a re-rate, a plan, an override raising the
		 * rate), whose units would pass int64 below; the floor */
		st->v[0] = -p->burst * LIM_MICRO;
		st->v[1] = now;
	} else {
		st->v[0] = (p->burst - units) * LIM_MICRO;
		st->v[1] = w - units * p->ei_us; /* the anchor, <= now */
	}
	st->v[2] = 1;
}

static int64_t
state_to_word(const struct lim_params *p, const struct lim_state *st)
{
	if (p->algo != LIM_TOKEN_BUCKET)
		return st->v[0];
	if (!st->v[2])
		return 0;
	assert(st->v[0] % LIM_MICRO == 0); /* charges are whole units */
	return st->v[1] + (p->burst - st->v[0] / LIM_MICRO) * p->ei_us;
}

static uint64_t
member_of(const struct local_check *c)
{
	return lim_member_hash(c->member ? c->member : "", c->memberlen);
}

/* ---- the CAS path: one check of the GCRA family on a stored key -------- */

/* Evaluates <c> on <e>'s word and, when <commit> and allowed, swaps in the
 * charged word, again from the new word if another thread got there
 * first. Returns 1 if the request passed. */
static int
cas_update(struct entry *e, struct local_check *c, int64_t now, int commit)
{
	const struct lim_params *p = c->params;
	int64_t                  old = atomic_load(&e->word), nw;
	struct lim_state         st;
	int                      veto;

	do {
		word_to_state(p, old, now, &st);
		c->charge =
			lim_eval(p, &st, c->op, c->cost, 0, now, &c->result);
		veto = lim_vetoes(c->op, c->shadow, &c->result);
		if (old > now || (c->charge && !veto))
			atomic_store_explicit(&e->ref, 1, memory_order_relaxed);
		if (!commit || veto || !c->charge)
			return !veto;
		lim_commit(p, &st, c->op, c->cost, 0, now);
		nw = state_to_word(p, &st);
	} while (!atomic_compare_exchange_weak(&e->word, &old, nw));
	return 1;
}

/* The CAS path: returns 1 or 0 as local_eval_request(), or -1 when the
 * key is not stored under this algorithm (the locked path inserts it). */
static int
cas_one(struct local *l, struct local_check *c, int64_t now, int commit)
{
	struct stripe *s = &l->s[stripe_of(l, c->hash)];
	struct entry  *e;
	int            rc = -1;

	pthread_rwlock_rdlock(&s->lock);
	e = lookup(s, c->hash, c->key, c->keylen);
	if (e != NULL && e->algo == (uint8_t)c->params->algo)
		rc = cas_update(e, c, now, commit);
	pthread_rwlock_unlock(&s->lock);
	return rc;
}

/* ---- the locked path ------------------------------------------------------
 */

/* The entry's state, reset when idle or when the rule changed algorithm. */
static void
refresh(struct entry *e, const struct lim_params *p, int64_t now)
{
	if (idle(e, now) || e->algo != (uint8_t)p->algo) {
		lim_state_deinit(&e->st);
		e->algo = (uint8_t)p->algo;
		atomic_store_explicit(&e->word, 0, memory_order_relaxed);
	}
}

/* <e>'s state at <now> as lim_eval() takes it: <tmp> for the word. */
static const struct lim_state *
state_of(const struct entry *e, const struct lim_params *p, int64_t now,
         struct lim_state *tmp)
{
	static const struct lim_state fresh;

	if (e == NULL || idle(e, now) || e->algo != (uint8_t)p->algo)
		return &fresh;
	if (!is_tat(p->algo))
		return &e->st;
	word_to_state(p, atomic_load(&e->word), now, tmp);
	return tmp;
}

/* Evaluates every check against the state now; returns 1 if one vetoes.
 * The caller holds the checks' stripes, read or write. */
static int
eval_all(struct local *l, struct local_check *c, size_t n, int64_t now_us)
{
	struct lim_state tmp;
	struct entry    *e;
	int              veto = 0;

	for (size_t i = 0; i < n; i++) {
		if (c[i].settle)
			continue; /* settled by settle_all(), never vetoes */
		if (c[i].held) { /* the block's result, nothing charged */
			c[i].charge = 0;
			veto |= lim_vetoes(c[i].op, c[i].shadow, &c[i].result);
			continue;
		}
		e = c[i].keylen <= LOCAL_KEY_MAX
		            ? lookup(&l->s[stripe_of(l, c[i].hash)], c[i].hash,
		                     c[i].key, c[i].keylen)
		            : NULL;
		if (e != NULL && !idle(e, now_us) &&
		    e->algo == (uint8_t)c[i].params->algo)
			atomic_store_explicit(&e->ref, 1, memory_order_relaxed);
		/* in use, even if only denied: a flooded key keeps
		 * its second chance */
		c[i].charge = lim_eval(c[i].params,
		                       state_of(e, c[i].params, now_us, &tmp),
		                       c[i].op, c[i].cost, member_of(&c[i]),
		                       now_us, &c[i].result);
		veto |= lim_vetoes(c[i].op, c[i].shadow, &c[i].result);
	}
	return veto;
}

static void
commit_one(struct entry *e, const struct local_check *c, int64_t now)
{
	const struct lim_params *p = c->params;
	struct lim_state         tmp;

	if (is_tat(p->algo)) {
		word_to_state(p, atomic_load(&e->word), now, &tmp);
		lim_commit(p, &tmp, c->op, c->cost, 0, now);
		atomic_store(&e->word, state_to_word(p, &tmp));
		return;
	}
	lim_commit(p, &e->st, c->op, c->cost, member_of(c), now);
	atomic_store(&e->word, lim_state_idle_at(p, &e->st, now));
}

/* Charges the checks eval_all() passed. The caller holds their stripes'
 * write locks. */
static void
commit_all(struct local *l, struct local_check *c, size_t n, int64_t now_us)
{
	struct stripe *s;
	struct entry  *e;

	for (size_t i = 0; i < n; i++) {
		if (!c[i].charge || c[i].keylen > LOCAL_KEY_MAX)
			continue;
		s = &l->s[stripe_of(l, c[i].hash)];
		e = lookup(s, c[i].hash, c[i].key, c[i].keylen);
		if (e == NULL)
			e = insert(s, c[i].hash, c[i].key, c[i].keylen, now_us);
		else
			atomic_store_explicit(&e->ref, 1, memory_order_relaxed);
		refresh(e, c[i].params, now_us);
		commit_one(e, &c[i], now_us);
	}
}

/* Locks the stripes in <set> in ascending order: no two requests wait on
 * each other's. */
static void
lock_set(struct local *l, uint64_t set, int write)
{
	for (size_t i = 0; i < l->nstripes; i++)
		if (set >> i & 1) {
			if (write)
				pthread_rwlock_wrlock(&l->s[i].lock);
			else
				pthread_rwlock_rdlock(&l->s[i].lock);
		}
}

static void
unlock_set(struct local *l, uint64_t set)
{
	for (size_t i = l->nstripes; i-- > 0;)
		if (set >> i & 1)
			pthread_rwlock_unlock(&l->s[i].lock);
}

/* Workers read the clock before they wait for a stripe's lock, so a
 * request stamped earlier may be evaluated after one stamped later: on a
 * window boundary it would see the newer window's state as another
 * window's and overwrite it (fixed and sliding windows). Under the lock,
 * <*now> is raised to the latest time the stripes have seen, as the
 * script has one clock for every call; with <commit> the stripes keep
 * it. A few µs at most between workers. */
static void
stripes_now(struct local *l, uint64_t set, int64_t *now, int commit)
{
	for (size_t i = 0; i < l->nstripes; i++)
		if (set >> i & 1 && l->s[i].last_us > *now)
			*now = l->s[i].last_us;
	for (size_t i = 0; commit && i < l->nstripes; i++)
		if (set >> i & 1)
			l->s[i].last_us = *now;
}

static int
locked(struct local *l, struct local_check *c, size_t n, int64_t *now,
       int commit)
{
	uint64_t set = 0;
	int      veto;

	for (size_t i = 0; i < n; i++)
		if (c[i].keylen <= LOCAL_KEY_MAX)
			set |= (uint64_t)1 << stripe_of(l, c[i].hash);
	lock_set(l, set, commit);
	stripes_now(l, set, now, commit);
	veto = eval_all(l, c, n, *now);
	if (commit && !veto)
		commit_all(l, c, n, *now);
	unlock_set(l, set);
	return !veto;
}

/* ---- the penalty box -------------------------------------------------------
 * Requests with a check of a rule with block: run under box_lock, so that
 * a key's offences are counted one at a time, as the script does; the
 * others never take it. */

/* The slot of <hash> in the box, or NULL; <*victim> where to record it. */
static struct box_slot *
box_find(struct local *l, uint64_t hash, int64_t now, struct box_slot **victim)
{
	size_t at = (size_t)(hash % LOCAL_BOX_SLOTS);

	if (l->box == NULL)
		l->box = xcalloc(LOCAL_BOX_SLOTS, sizeof(*l->box));
	*victim = &l->box[at];
	for (size_t k = 0; k < LOCAL_BOX_PROBE; k++) {
		struct box_slot *b = &l->box[(at + k) % LOCAL_BOX_SLOTS];

		if (b->b.forget_us > now && b->hash == hash)
			return b;
		if (b->b.forget_us < (*victim)->b.forget_us)
			*victim = b;
	}
	return NULL;
}

static int
has_box(const struct local_check *c, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (c[i].params->block_us > 0)
			return 1;
	return 0;
}

/* The record of <c>'s key if it blocks the key at <now>, else NULL. */
static struct box_slot *
box_holding(struct local *l, const struct local_check *c, int64_t now)
{
	struct box_slot *b, *victim;

	if (c->params->block_us <= 0 || c->op == LIM_OP_RELEASE || c->settle)
		return NULL; /* a settle closes what was admitted before */
	b = box_find(l, c->hash, now, &victim);
	return b != NULL && b->b.until_us > now ? b : NULL;
}

/* Marks the checks of <c> whose key is blocked (held): their result is
 * the block's and nothing of them is charged; as in the script, only a
 * held CHECK or PEEK that is not shadow vetoes the request (eval_all(),
 * lim_vetoes()): a held FORCE or shadow check leaves the others alone. */
static void
box_mark(struct local *l, struct local_check *c, size_t n, int64_t now)
{
	struct box_slot *b;

	for (size_t i = 0; i < n; i++) {
		if ((b = box_holding(l, &c[i], now)) == NULL)
			continue;
		c[i].held = 1;
		c[i].charge = 0;
		lim_block_held(&b->b, now, &c[i].result);
	}
}

/* Records the offences among <c>'s results (lim_block_offence()); a key
 * already blocked is not offending again. */
static void
box_offend(struct local *l, struct local_check *c, size_t n, int64_t now)
{
	struct box_slot *b, *victim;

	for (size_t i = 0; i < n; i++) {
		if (!lim_block_offence(c[i].params, c[i].op, &c[i].result) ||
		    box_holding(l, &c[i], now) != NULL)
			continue;
		b = box_find(l, c[i].hash, now, &victim);
		if (b == NULL) {
			b = victim;
			memset(b, 0, sizeof(*b));
			b->hash = c[i].hash;
		}
		lim_block_offend(c[i].params, &b->b, now, &c[i].result);
	}
}

static int run_plain(struct local *l, struct local_check *c, size_t n,
                     int64_t *now, int commit);

/* A request with a boxed check: its blocked keys answer with their
 * block and are charged nothing (a blocked CHECK or PEEK vetoes the
 * request, box_mark()), the rest runs as any request, and the offences
 * among its results start blocks, whatever the request's fate, as in the
 * script (when <commit>, when the peek vetoes, or when <ends>: the peek
 * of a request another check refused; a peek that passes records
 * nothing, its commit will). */
static int
run_boxed(struct local *l, struct local_check *c, size_t n, int64_t *now,
          int commit, int ends)
{
	int rc;

	pthread_mutex_lock(&l->box_lock);
	box_mark(l, c, n, *now);
	rc = run_plain(l, c, n, now, commit);
	/* a peek that vetoes is its request's end (req.c denies it and
	 * never evaluates it again): its offences are the request's */
	if (commit || !rc || ends)
		box_offend(l, c, n, *now);
	pthread_mutex_unlock(&l->box_lock);
	return rc;
}

/* ---- reserve, then settle -------------------------------------------------
 * A check of a reserving rule with a member (the request id) is a
 * reservation when a CHECK, a settle when a FORCE (limiter.h). */

static int
reserving(const struct local_check *c)
{
	return c->params->reserve_lease_us > 0 && c->memberlen > 0 &&
	       lim_reserve_supported(c->params->algo);
}

/* The record of <c> (key and member hashes), or NULL; <*victim> where to
 * write it. The caller holds res_lock. */
static struct res_slot *
res_find(struct local *l, const struct local_check *c, uint64_t member,
         int64_t now, struct res_slot **victim)
{
	uint64_t h = c->hash ^ (member * 0x9e3779b97f4a7c15ULL);
	size_t   at = (size_t)(h % LOCAL_RES_SLOTS);

	if (l->res == NULL)
		l->res = xcalloc(LOCAL_RES_SLOTS, sizeof(*l->res));
	*victim = &l->res[at];
	for (size_t k = 0; k < LOCAL_RES_PROBE; k++) {
		struct res_slot *r = &l->res[(at + k) % LOCAL_RES_SLOTS];

		if (r->until_us > now && r->hash == c->hash &&
		    r->member == member)
			return r;
		if (r->until_us < (*victim)->until_us)
			*victim = r;
	}
	return NULL;
}

/* Records the reservations among the checks of a request that passed:
 * the units each CHECK of a reserving rule was charged, where, until its
 * lease ends (the script's reserve_record()). */
static void
reserve_all(struct local *l, struct local_check *c, size_t n, int64_t now)
{
	struct res_slot *r, *victim;
	uint64_t         m;

	for (size_t i = 0; i < n; i++) {
		if (c[i].op != LIM_OP_CHECK || !reserving(&c[i]) ||
		    c[i].result.allowed != 1)
			continue;
		pthread_mutex_lock(&l->res_lock);
		m = member_of(&c[i]);
		if ((r = res_find(l, &c[i], m, now, &victim)) == NULL)
			r = victim;
		r->hash = c[i].hash;
		r->member = m;
		r->units = c[i].cost > 0 ? c[i].cost : 0;
		r->idx = lim_reserve_index(c[i].params, now);
		r->algo = (int32_t)c[i].params->algo;
		r->until_us = now + c[i].params->reserve_lease_us;
		pthread_mutex_unlock(&l->res_lock);
	}
}

/* The settle <c> (the script's settle()): its record read and, when
 * <commit>, deleted and applied to the key's state. Its result is allowed
 * 1, remaining the units held (-1: no record), the rest 0. */
static void
settle_one(struct local *l, struct local_check *c, int64_t now, int commit)
{
	const struct lim_params *p = c->params;
	struct res_slot         *r, *victim;
	struct stripe           *s;
	struct entry            *e;
	struct lim_state         tmp;
	int64_t                  held, idx;
	int                      algo;

	c->result = (struct lim_result){ .allowed = 1, .remaining = -1 };
	c->charge = 0;
	pthread_mutex_lock(&l->res_lock);
	r = res_find(l, c, member_of(c), now, &victim);
	if (r != NULL) {
		held = r->units;
		idx = r->idx;
		algo = r->algo;
		if (commit)
			memset(r, 0, sizeof(*r));
	}
	pthread_mutex_unlock(&l->res_lock);
	if (r == NULL)
		return;
	c->result.remaining = held;
	if (!commit || c->cost < 0 || c->cost == held ||
	    c->keylen > LOCAL_KEY_MAX)
		return;
	s = &l->s[stripe_of(l, c->hash)];
	pthread_rwlock_wrlock(&s->lock);
	stripes_now(l, (uint64_t)1 << stripe_of(l, c->hash), &now, 1);
	e = lookup(s, c->hash, c->key, c->keylen);
	if (e == NULL && c->cost > held)
		e = insert(s, c->hash, c->key, c->keylen, now);
	if (e != NULL) {
		refresh(e, p, now);
		if (is_tat(p->algo)) {
			word_to_state(p, atomic_load(&e->word), now, &tmp);
			lim_settle(p, &tmp, held, idx, algo, c->cost, now);
			atomic_store(&e->word, state_to_word(p, &tmp));
		} else {
			lim_settle(p, &e->st, held, idx, algo, c->cost,
			           now);
			atomic_store(&e->word,
			             lim_state_idle_at(p, &e->st, now));
		}
	}
	pthread_rwlock_unlock(&s->lock);
}

/* Marks and applies the settles of a request, at once, whatever its
 * other checks say (as the script does). Returns 1 if all its checks
 * are settles. */
static int
settle_all(struct local *l, struct local_check *c, size_t n, int64_t now,
           int commit)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		c[i].settle = c[i].op == LIM_OP_FORCE && reserving(&c[i]);
		if (c[i].settle) {
			settle_one(l, &c[i], now, commit);
			k++;
		}
	}
	return k == n;
}

static int
run(struct local *l, struct local_check *c, size_t n, int64_t now, int commit,
    int ends)
{
	int rc;

	for (size_t i = 0; i < n; i++) {
		c[i].hash = util_hash_private(c[i].key, c[i].keylen);
		c[i].held = 0;
	}
	if (settle_all(l, c, n, now, commit))
		return 1;
	if (has_box(c, n))
		rc = run_boxed(l, c, n, &now, commit, ends);
	else
		rc = run_plain(l, c, n, &now, commit);
	if (commit && rc)
		reserve_all(l, c, n, now);
	return rc;
}

size_t
local_reservations(struct local *l)
{
	size_t n = 0;

	pthread_mutex_lock(&l->res_lock);
	for (size_t i = 0; l->res != NULL && i < LOCAL_RES_SLOTS; i++)
		n += l->res[i].until_us != 0;
	pthread_mutex_unlock(&l->res_lock);
	return n;
}

static int
run_plain(struct local *l, struct local_check *c, size_t n, int64_t *now,
          int commit)
{
	int rc;

	if (n == 1 && !c->settle && !c->held && is_tat(c->params->algo) &&
	    c->keylen <= LOCAL_KEY_MAX &&
	    (rc = cas_one(l, c, *now, commit)) >= 0)
		return rc;
	return locked(l, c, n, now, commit);
}

int
local_eval_request(struct local *l, struct local_check *c, size_t n,
                   int64_t now_us)
{
	return run(l, c, n, now_us, 1, 1);
}

int
local_peek_request(struct local *l, struct local_check *c, size_t n,
                   int64_t now_us)
{
	return run(l, c, n, now_us, 0, 0);
}

int
local_refused_request(struct local *l, struct local_check *c, size_t n,
                      int64_t now_us)
{
	return run(l, c, n, now_us, 0, 1);
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
	const char       *err;
	struct lim_params q = *p;

	if (pool_size <= 1)
		return;
	q.rate = share(q.rate, pool_size);
	if (q.burst > 0)
		q.burst = share(q.burst, pool_size);
	/* the emission interval may grow more than the burst shrinks (3/d
	 * over 2 agents is 1/d): keep the tolerance in range with a smaller
	 * burst, never the whole limit */
	if (lim_params_init(&q, &err) == -1 && q.ei_us >= 1 &&
	    q.burst > LIM_TIME_MAX / q.ei_us)
		q.burst = LIM_TIME_MAX / q.ei_us;
	if (lim_params_init(&q, &err) == 0)
		*p = q;
}
