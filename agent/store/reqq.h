/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The queue of store requests waiting for the next flush, shared by both
 * backends (store_single.c, store_cluster.c): a request is answered only
 * while its <gen> is still the one it was queued with. Nothing here logs,
 * reads a clock or talks to Redis (link.h does). Single-threaded.
 */
#ifndef REQQ_H
#define REQQ_H

#include <stdint.h>

#include "store_ops.h"

/* Requests queued, not sent, linked through store_req.next and .prev (a
 * request given up on leaves from the middle). Embedded in the store; all
 * zero is an empty queue. */
struct reqq {
	struct store_req *head, *tail;
	int               queued;
};

/* Appends <sr>, remembering its current gen as the one to answer. */
void reqq_push(struct reqq *q, struct store_req *sr);

/* Unlinks and returns the oldest request, or NULL when empty. */
struct store_req *reqq_pop(struct reqq *q);

/* Unlinks <sr> if it is queued in <q>; does nothing otherwise. */
void reqq_remove(struct reqq *q, struct store_req *sr);

/* Calls <sr>'s callback with <err> if its gen is still <gen> (the caller
 * has not given up on it meanwhile). */
void reqq_answer(struct store_req *sr, uint32_t gen, int err);

/* Answers everything still queued with <err>, oldest first; each request
 * is unlinked before its callback runs. */
void reqq_fail_all(struct reqq *q, int err);

/* 1 if every check of <sr> is a RELEASE (lease given back) or a settle at
 * 0 (a reservation given back: the agent's own for a refused request).
 * Both stores send those even while a breaker is open, as store_cluster.c
 * sends its refunds: a release refused there holds its slot for the whole
 * lease (HAProxy sends it once), and it costs Redis one ZREM. */
int reqq_releases_only(const struct store_req *sr);

#endif
