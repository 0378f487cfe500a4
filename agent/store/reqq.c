/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The request queue shared by both store backends (reqq.h). Callbacks run
 * from reqq_fail_all() and reqq_answer() may push onto the same queue: a
 * request is unlinked before it is answered.
 */
#include <assert.h>
#include <stddef.h>

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
	assert(q->head != NULL && q->queued > 0);
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
	assert(q->queued >= 0 && (q->queued == 0) == (q->head == NULL));
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

/* 1 if <c> only gives back: a lease release, or a settle at 0 (a
 * reserving rule's FORCE with the request id and cost 0), which can only
 * refund its reservation. */
static int
gives_back(const struct check *c)
{
	if (c->op == LIM_OP_RELEASE)
		return 1;
	return c->op == LIM_OP_FORCE && c->cost == 0 && c->memberlen > 0 &&
	       c->lim.reserve_lease_us > 0;
}

int
reqq_releases_only(const struct store_req *sr)
{
	for (int j = 0; j < sr->n; j++)
		if (!gives_back(&sr->checks[sr->index[j]]))
			return 0;
	return sr->n > 0;
}
