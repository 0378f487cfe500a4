/*
 * Request queue, circuit breaker and HGET shared by store.c and cluster.c.
 *
 * Nothing here logs, counts metrics or reads a clock: callers pass <now>
 * (ev_now of their loop) and act on the return values, so each store keeps
 * its own log fields. Callbacks run from reqq_fail_all() and reqq_answer()
 * may push onto the same queue: a request is unlinked before it is
 * answered. Single-threaded, like the loop that owns the store.
 */
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "reqq.h"
#include "util.h"

void
reqq_push(struct reqq *q, struct store_req *sr)
{
	sr->sent_gen = sr->gen;
	sr->next = NULL;
	sr->prev = q->tail;
	if (q->tail != NULL)
		q->tail->next = sr;
	else
		q->head = sr;
	q->tail = sr;
	sr->queued = 1;
	q->queued++;
}

void
reqq_remove(struct reqq *q, struct store_req *sr)
{
	if (!sr->queued)
		return;
	if (sr->prev != NULL)
		sr->prev->next = sr->next;
	else
		q->head = sr->next;
	if (sr->next != NULL)
		sr->next->prev = sr->prev;
	else
		q->tail = sr->prev;
	sr->next = sr->prev = NULL;
	sr->queued = 0;
	q->queued--;
}

struct store_req *
reqq_pop(struct reqq *q)
{
	struct store_req *sr = q->head;

	if (sr != NULL)
		reqq_remove(q, sr);
	return sr;
}

void
reqq_answer(struct store_req *sr, uint32_t gen, int err)
{
	if (sr->gen == gen)
		sr->cb(sr, err);
}

void
reqq_fail_all(struct reqq *q, int err)
{
	struct store_req *sr;

	while ((sr = reqq_pop(q)) != NULL)
		reqq_answer(sr, sr->sent_gen, err);
}

int
reqq_releases_only(const struct store_req *sr)
{
	for (int j = 0; j < sr->n; j++)
		if (sr->checks[sr->index[j]].op != LIM_OP_RELEASE)
			return 0;
	return sr->n > 0;
}

/* ---- breaker ------------------------------------------------------------ */

int
breaker_is_open(const struct breaker *b, double now)
{
	return breaker_tripped(b) && now < b->until;
}

int
breaker_admit(struct breaker *b, double now)
{
	if (!breaker_tripped(b))
		return 1;
	if (now < b->until || (b->probe != 0 && now < b->probe + BREAKER_PROBE_S))
		return 0;
	b->probe = now;
	return 1;
}

int
breaker_tripped(const struct breaker *b)
{
	return b->fails >= BREAKER_FAILS;
}

int
breaker_fail(struct breaker *b, double now)
{
	int opened = ++b->fails == BREAKER_FAILS;

	if (breaker_tripped(b))
		b->until = now + BREAKER_COOLDOWN;
	b->probe = 0;
	return opened;
}

int
breaker_ok(struct breaker *b)
{
	int closed = breaker_tripped(b);

	b->fails = 0;
	b->probe = 0;
	return closed;
}

int
reqq_error_is_outage(const char *err)
{
	static const char *const codes[] = {
		"LOADING", "BUSY", "MASTERDOWN", "READONLY", "NOAUTH", "NOPERM",
		"WRONGPASS", "OOM", "MISCONF", "CLUSTERDOWN", "TRYAGAIN",
		"NOREPLICAS",
	};
	size_t n = strcspn(err, " ");

	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		if (strlen(codes[i]) == n && strncmp(err, codes[i], n) == 0)
			return 1;
	return 0;
}

/* ---- HGET --------------------------------------------------------------- */

struct hget {
	store_value_cb *cb;
	void           *arg;
	reqq_moved_cb  *moved;
	void           *moved_arg;
};

static void
hget_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct hget *h = privdata;
	redisReply *reply = r;

	if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
		if (reply != NULL && h->moved != NULL &&
		    strncmp(reply->str, "MOVED ", 6) == 0)
			h->moved(h->moved_arg);
		h->cb(h->arg, NULL, 0, -1);
	} else if (reply->type == REDIS_REPLY_STRING) {
		h->cb(h->arg, reply->str, reply->len, 0);
	} else {
		h->cb(h->arg, NULL, 0, 0);
	}
	free(h);
}

int
reqq_hget(redisAsyncContext *ac, const char *hash, const char *field,
          size_t fieldlen, store_value_cb *cb, void *arg,
          reqq_moved_cb *moved, void *moved_arg)
{
	struct hget *h = xmalloc(sizeof(*h));

	*h = (struct hget){ cb, arg, moved, moved_arg };
	if (redisAsyncCommand(ac, hget_cb, h, "HGET %s %b", hash, field,
	                      fieldlen) != REDIS_OK) {
		free(h);
		return -1;
	}
	return 0;
}
