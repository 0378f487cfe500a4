/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Space-Saving summaries of denied keys and their per-worker registry
 * (see topk.h). The hot path is topk_note(): a lock nobody else holds but
 * once a second, a scan of TOPK_K hashes, a copy of the key when it is new.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "topk.h"
#include "util.h"

/* Eight bytes at a time: a 200-byte key is hashed in 25 steps. Only
 * told apart here, compared whole on a match. */
static uint64_t
hash(const char *s, size_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ULL ^ n, v;
	size_t   i = 0;

	for (; i + 8 <= n; i += 8) {
		memcpy(&v, s + i, 8);
		h = (h ^ v) * 0xff51afd7ed558ccdULL;
		h ^= h >> 32;
	}
	v = 0;
	memcpy(&v, s + i, n - i);
	h = (h ^ v) * 0xc4ceb9fe1a85ec53ULL;
	return h ^ (h >> 29);
}

/* The slot of <epoch>, emptied if it held an older one. */
static struct topk_slot *
slot_for(struct topk *t, int64_t epoch)
{
	struct topk_slot *s = &t->s[epoch % TOPK_SLOTS];

	if (s->epoch != epoch) {
		s->epoch = epoch;
		s->total = 0;
		s->n = 0;
	}
	return s;
}

void
topk_add(struct topk *t, const char *key, size_t len, int64_t now_us)
{
	struct topk_slot  *s = slot_for(t, now_us / TOPK_SLOT_US);
	struct topk_entry *e, *min = NULL;
	uint64_t           h;

	if (len > POLICY_KEY_MAX)
		len = POLICY_KEY_MAX; /* keys are never longer (keys.h) */
	h = hash(key, len);
	s->total++;
	for (int i = 0; i < s->n; i++) {
		e = &s->e[i];
		if (e->h == h && e->len == len &&
		    memcmp(e->key, key, len) == 0) {
			e->count++;
			return;
		}
		if (min == NULL || e->count < min->count)
			min = e;
	}
	if (s->n < TOPK_K) {
		e = &s->e[s->n++];
		e->err = 0;
		e->count = 1;
	} else {
		e = min;
		e->err = min->count;
		e->count = min->count + 1;
	}
	e->h = h;
	e->len = len;
	memcpy(e->key, key, len);
}

void
topk_merge_add(struct topk_merge *m, const char *key, size_t len, int64_t count,
               int64_t err)
{
	struct topk_item *it;

	if (m->n == m->cap) {
		m->cap = m->cap ? m->cap * 2 : 64;
		m->v = xrealloc(m->v, (size_t)m->cap * sizeof(*m->v));
	}
	it = &m->v[m->n++];
	it->key = xmalloc(len + 1);
	memcpy(it->key, key, len);
	it->key[len] = '\0';
	it->len = len;
	it->count = count;
	it->err = err;
}

void
topk_merge_summary(struct topk_merge *m, const struct topk *t, int64_t now_us)
{
	int64_t epoch = now_us / TOPK_SLOT_US;

	for (int i = 0; i < TOPK_SLOTS; i++) {
		const struct topk_slot *s = &t->s[i];

		int64_t floor = 0;

		if (s->epoch <= epoch - TOPK_SLOTS || s->epoch > epoch)
			continue;
		m->total += s->total;
		/* full: a key it evicted was denied at most its smallest
		 * count there (Space-Saving's bound), not 0 */
		for (int j = 0; s->n == TOPK_K && j < s->n; j++)
			if (j == 0 || s->e[j].count < floor)
				floor = s->e[j].count;
		m->floor += floor;
		for (int j = 0; j < s->n; j++)
			topk_merge_add(m, s->e[j].key, s->e[j].len,
			               s->e[j].count - floor,
			               s->e[j].err - floor);
	}
}

static int
by_key(const void *a, const void *b)
{
	const struct topk_item *x = a, *y = b;
	size_t                  n = x->len < y->len ? x->len : y->len;
	int                     c = memcmp(x->key, y->key, n);

	return c ? c : (x->len > y->len) - (x->len < y->len);
}

static int
by_count(const void *a, const void *b)
{
	const struct topk_item *x = a, *y = b;

	if (x->count != y->count)
		return x->count < y->count ? 1 : -1;
	return by_key(a, b);
}

void
topk_merge_finish(struct topk_merge *m)
{
	int k = 0;

	m->bound = m->floor;
	if (m->n == 0) {
		m->floor = 0;
		return;
	}
	qsort(m->v, (size_t)m->n, sizeof(*m->v), by_key);
	for (int i = 1; i < m->n; i++) {
		if (by_key(&m->v[k], &m->v[i]) == 0) {
			m->v[k].count += m->v[i].count;
			m->v[k].err += m->v[i].err;
			free(m->v[i].key);
		} else {
			m->v[++k] = m->v[i];
		}
	}
	m->n = k + 1;
	for (int i = 0; i < m->n; i++) { /* each key once: see floor */
		m->v[i].count += m->floor;
		m->v[i].err += m->floor;
	}
	m->floor = 0;
	qsort(m->v, (size_t)m->n, sizeof(*m->v), by_count);
}

void
topk_merge_free(struct topk_merge *m)
{
	for (int i = 0; i < m->n; i++)
		free(m->v[i].key);
	free(m->v);
	memset(m, 0, sizeof(*m));
}

/* ---- registry ----------------------------------------------------------- */

struct topk_worker {
	pthread_mutex_t lock;
	struct topk    *rules[METRICS_MAX_RULES];
};

static struct topk_worker workers[TOPK_MAX_WORKERS];
static pthread_once_t     once = PTHREAD_ONCE_INIT;

static void
init_locks(void)
{
	for (int i = 0; i < TOPK_MAX_WORKERS; i++)
		pthread_mutex_init(&workers[i].lock, NULL);
}

void
topk_note(int worker, int slot, const char *key, size_t len, int64_t now_us)
{
	struct topk_worker *w;

	if (worker < 0 || worker >= TOPK_MAX_WORKERS || slot < 0 ||
	    slot >= METRICS_MAX_RULES)
		return;
	pthread_once(&once, init_locks);
	w = &workers[worker];
	pthread_mutex_lock(&w->lock);
	if (w->rules[slot] == NULL)
		w->rules[slot] = xcalloc(1, sizeof(struct topk));
	topk_add(w->rules[slot], key, len, now_us);
	pthread_mutex_unlock(&w->lock);
}

void
topk_collect(int slot, int64_t now_us, struct topk_merge *m)
{
	if (slot < 0 || slot >= METRICS_MAX_RULES)
		return;
	pthread_once(&once, init_locks);
	for (int i = 0; i < TOPK_MAX_WORKERS; i++) {
		pthread_mutex_lock(&workers[i].lock);
		if (workers[i].rules[slot] != NULL)
			topk_merge_summary(m, workers[i].rules[slot], now_us);
		pthread_mutex_unlock(&workers[i].lock);
	}
}
