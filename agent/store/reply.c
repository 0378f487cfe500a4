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
#include <strings.h>

#include <hiredis/async.h>

#include "reply.h"

/* Would hiredis 0.14 assert on this object? The reader's privdata is the
 * async context (link.c, sentinel.c); none: nothing is checked.
 *   - a top-level reply no callback waits for (more replies than
 *     commands) on a context neither subscribed nor monitoring
 *     (redisProcessCallbacks: "must be subscribed"). An error is let
 *     through: hiredis drops the link on it itself, keeping its text
 *     ("max number of clients reached");
 *   - on a subscribed context, a pub/sub message it cannot route
 *     (__redisGetSubscribeCallback): an array of fewer than three
 *     elements, a kind or channel that is not a bulk string, an
 *     unsubscribe (never asked for: its count must be an integer, and it
 *     would leave the subscribed mode, so that the next message asserts).
 * Refusing the object fails the link instead of aborting the agent. */
static int
refused(const redisReadTask *task, int type, int elements)
{
	const redisAsyncContext *ac = task->privdata;
	const redisReply        *top;
	const char              *kind;

	if (ac == NULL || ac->replies.head != NULL)
		return 0; /* no context, or the reply of a command */
	if (!(ac->c.flags & REDIS_SUBSCRIBED))
		return task->parent == NULL && type != REDIS_REPLY_ERROR &&
		       !(ac->c.flags & REDIS_MONITORING);
	if (task->parent == NULL)
		return type == REDIS_REPLY_ARRAY && elements < 3;
	if (task->parent->parent != NULL)
		return 0; /* deeper: hiredis does not read it */
	if (task->idx < 2)
		return type != REDIS_REPLY_STRING;
	top = task->parent->obj;
	kind = top->element[0]->str;
	return task->idx == 2 && (strcasecmp(kind, "unsubscribe") == 0 ||
	                          strcasecmp(kind, "punsubscribe") == 0);
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

	if (refused(task, type, 0))
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

	if (n > REPLY_ARRAY_MAX || refused(task, REDIS_REPLY_ARRAY, elements))
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

const char *
reply_why(int err, const char *errstr)
{
	return err == REDIS_ERR_OOM
	               ? "a reply refused (one no command waits for, a "
	                 "malformed pub/sub message, an array too long) or "
	                 "out of memory"
	               : errstr;
}

/* The decimal string <e> as a number in [0, max], or -1. */
static int64_t
decimal(const redisReply *e, int64_t max)
{
	int64_t v = 0;

	if (e->type != REDIS_REPLY_STRING || e->len == 0 || e->len > 18)
		return -1;
	for (size_t i = 0; i < e->len; i++) {
		if (e->str[i] < '0' || e->str[i] > '9')
			return -1;
		v = v * 10 + (e->str[i] - '0');
	}
	return v <= max ? v : -1;
}

int
reply_time_us(const redisReply *r, int64_t *us)
{
	int64_t s, u;

	if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2)
		return -1;
	/* seconds: up to the year 5138, far inside int64_t once in µs */
	if ((s = decimal(r->element[0], 99999999999)) < 0 ||
	    (u = decimal(r->element[1], 999999)) < 0)
		return -1;
	*us = s * 1000000 + u;
	return 0;
}

enum reply_redirect
reply_redirect(const char *err, const char **host, size_t *hlen, int *port)
{
	enum reply_redirect kind;
	const char         *addr, *colon;
	char               *e;
	long                v;

	if (strncmp(err, "MOVED ", 6) == 0)
		kind = REPLY_REDIRECT_MOVED;
	else if (strncmp(err, "ASK ", 4) == 0)
		kind = REPLY_REDIRECT_ASK;
	else
		return REPLY_REDIRECT_NONE;
	/* after the slot */
	if ((addr = strchr(strchr(err, ' ') + 1, ' ')) == NULL)
		return REPLY_REDIRECT_NONE;
	addr++;
	colon = strrchr(addr, ':');
	if (colon == NULL || colon == addr)
		return REPLY_REDIRECT_NONE;
	v = strtol(colon + 1, &e, 10);
	if (*e != '\0' || e == colon + 1 || v <= 0 || v > 65535)
		return REPLY_REDIRECT_NONE;
	*host = addr;
	*hlen = (size_t)(colon - addr);
	*port = (int)v;
	return kind;
}
