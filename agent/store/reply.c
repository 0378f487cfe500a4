/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reply objects for hiredis' reader (reply.h): arrays carry their
 * elements' redisReply structs in the same block.
 *
 * Every size here is chosen by the peer, so nothing may be fatal: an array
 * longer than REPLY_ARRAY_MAX, or an allocation that fails, gives NULL,
 * which hiredis reports as an out-of-memory error on that link (the store
 * drops it and reconnects) instead of the agent exiting.
 */
#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>

#include "reply.h"

/* A top-level reply on an async context that expects none: no callback
 * is waiting for it (its command's reply came, or none was sent) and the
 * context is not subscribed. hiredis 0.14 asserts on such a reply
 * (redisProcessCallbacks), which would abort the agent; refusing it
 * fails the link instead. An error reply is let through: hiredis itself
 * drops the link on an unsolicited one, keeping its text ("max number of
 * clients reached"). The reader's privdata is the context (link.c); none:
 * not checked. */
static int
unsolicited(const redisReadTask *task, int type)
{
	const redisAsyncContext *ac = task->privdata;

	return task->parent == NULL && ac != NULL &&
	       type != REDIS_REPLY_ERROR && ac->replies.head == NULL &&
	       !(ac->c.flags & (REDIS_SUBSCRIBED | REDIS_MONITORING));
}

/* The slot of element <idx> of the array being read, or NULL (top level
 * or a parent of another kind): already linked into the parent. */
static redisReply *
slot(const redisReadTask *task)
{
	redisReply *parent, *slab;

	if (task->parent == NULL)
		return NULL;
	parent = task->parent->obj;
	slab = (redisReply *)(parent->element + parent->elements);
	parent->element[task->idx] = &slab[task->idx];
	return &slab[task->idx];
}

/* Is <r> element <i>'s slot inside <parent>'s block? */
static int
in_slab(const redisReply *parent, size_t i, const redisReply *r)
{
	const redisReply *slab =
		(const redisReply *)(parent->element + parent->elements);

	return r == &slab[i];
}

/* A reply for <task>: its parent's slot, or a block of its own (NULL if
 * that cannot be had). */
static redisReply *
reply_new(const redisReadTask *task, int type)
{
	redisReply *r = slot(task);

	if (unsolicited(task, type))
		return NULL;
	if (r == NULL && (r = calloc(1, sizeof(*r))) == NULL)
		return NULL;
	r->type = type;
	return r;
}

/* hiredis 0.14 calls this only once the whole bulk is in its buffer, so
 * <len> is bounded by what the peer really sent; the copy may still fail. */
static void *
create_string(const redisReadTask *task, char *str, size_t len)
{
	char       *copy = malloc(len + 1);
	redisReply *r;

	if (copy == NULL)
		return NULL;
	if ((r = reply_new(task, task->type)) == NULL) {
		free(copy);
		return NULL;
	}
	memcpy(copy, str, len);
	copy[len] = '\0';
	r->str = copy;
	r->len = len;
	return r;
}

static void *
create_integer(const redisReadTask *task, long long value)
{
	redisReply *r = reply_new(task, REDIS_REPLY_INTEGER);

	if (r != NULL)
		r->integer = value;
	return r;
}

static void *
create_nil(const redisReadTask *task)
{
	return reply_new(task, REDIS_REPLY_NIL);
}

/* An array is never put in a slot: it needs a block for its elements,
 * sized by a count the peer chose (hiredis 0.14 takes up to INT_MAX). */
static void *
create_array(const redisReadTask *task, int elements)
{
	size_t      n = elements > 0 ? (size_t)elements : 0;
	redisReply *r;

	if (n > REPLY_ARRAY_MAX || unsolicited(task, REDIS_REPLY_ARRAY))
		return NULL;
	r = calloc(1, sizeof(*r) +
	                      n * (sizeof(redisReply *) + sizeof(redisReply)));
	if (r == NULL)
		return NULL;
	r->type = REDIS_REPLY_ARRAY;
	r->elements = n;
	r->element = n > 0 ? (redisReply **)(r + 1) : NULL;
	if (task->parent != NULL) {
		redisReply *parent = task->parent->obj;

		parent->element[task->idx] = r;
	}
	return r;
}

static void free_object(void *reply);

/* Frees what <r> owns, not <r> itself. */
static void
free_inner(redisReply *r)
{
	if (r->type == REDIS_REPLY_ARRAY) {
		for (size_t i = 0; i < r->elements; i++) {
			redisReply *e = r->element[i];

			if (e == NULL)
				continue;
			if (in_slab(r, i, e))
				free_inner(e);
			else
				free_object(e);
		}
	} else {
		free(r->str);
	}
}

static void
free_object(void *reply)
{
	if (reply == NULL)
		return;
	free_inner(reply);
	free(reply);
}

redisReplyObjectFunctions reply_fns = {
	create_string, create_array, create_integer, create_nil, free_object,
};
