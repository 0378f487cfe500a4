/*
 * Reply objects for hiredis' reader (reply.h): arrays carry their
 * elements' redisReply structs in the same block.
 */
#include <stdlib.h>
#include <string.h>

#include "reply.h"
#include "util.h"

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

/* A reply for <task>: its parent's slot, or a block of its own. */
static redisReply *
reply_new(const redisReadTask *task, int type)
{
	redisReply *r = slot(task);

	if (r == NULL)
		r = xcalloc(1, sizeof(*r));
	r->type = type;
	return r;
}

static void *
create_string(const redisReadTask *task, char *str, size_t len)
{
	redisReply *r = reply_new(task, task->type);

	r->str = xmalloc(len + 1);
	memcpy(r->str, str, len);
	r->str[len] = '\0';
	r->len = len;
	return r;
}

static void *
create_integer(const redisReadTask *task, long long value)
{
	redisReply *r = reply_new(task, REDIS_REPLY_INTEGER);

	r->integer = value;
	return r;
}

static void *
create_nil(const redisReadTask *task)
{
	return reply_new(task, REDIS_REPLY_NIL);
}

/* An array is never put in a slot: it needs a block for its elements. */
static void *
create_array(const redisReadTask *task, int elements)
{
	size_t n = elements > 0 ? (size_t)elements : 0;
	redisReply *r = xcalloc(1, sizeof(*r) + n * (sizeof(redisReply *) +
	                                              sizeof(redisReply)));

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
