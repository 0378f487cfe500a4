/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The decision script as a Redis 7 FUNCTION library (scriptlib.h): the
 * library text and the function's name, built from the embedded
 * ratelimit.lua once per process.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "scriptlib.h"
#include "util.h"

extern const char lua_ratelimit[];

/* The line that ends ratelimit.lua: its EVAL entry point. */
#define EVAL_TAIL "return batch(KEYS, ARGV)\n"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char          *text;
static char           name[32]; /* "spoa_rl_" and 16 hex digits */
static size_t         name_len; /* read on every FCALL */

static void
build(void)
{
	size_t len = strlen(lua_ratelimit), tail = strlen(EVAL_TAIL);
	size_t body, cap;

	if (len < tail || strcmp(lua_ratelimit + len - tail, EVAL_TAIL) != 0)
		fatal("ratelimit.lua does not end with its EVAL entry point");
	body = len - tail;
	name_len = (size_t)snprintf(
		name, sizeof(name), "spoa_rl_%016llx",
		(unsigned long long)util_fnv1a(lua_ratelimit, len));
	cap = body + 2 * sizeof(name) + 64;
	text = xmalloc(cap);
	snprintf(text, cap,
	         "#!lua name=%s\n%.*s"
	         "redis.register_function('%s', batch)\n",
	         name, (int)body, lua_ratelimit, name);
}

const char *
scriptlib_text(void)
{
	pthread_once(&once, build);
	return text;
}

const char *
scriptlib_name(void)
{
	pthread_once(&once, build);
	return name;
}

size_t
scriptlib_name_len(void)
{
	pthread_once(&once, build);
	return name_len;
}

int
scriptlib_load(redisAsyncContext *ac, redisCallbackFn *cb, void *privdata)
{
	return redisAsyncCommand(ac, cb, privdata, "FUNCTION LOAD %s",
	                         scriptlib_text());
}

int
scriptlib_loaded(const redisReply *reply, const char *where)
{
	if (reply->type == REDIS_REPLY_STRING ||
	    (reply->type == REDIS_REPLY_ERROR &&
	     strstr(reply->str, "already exists") != NULL))
		return 1;
	struct log_text e;

	log_text(&e, reply->type == REDIS_REPLY_ERROR ? reply->str : "bad reply");
	log_info("redis_functions_unavailable", "%s error=\"%s\"%s", where,
	         e.s, LOG_CUT(e.cut));
	return 0;
}

int
scriptlib_missing(const char *err)
{
	return err != NULL && strstr(err, "Function not found") != NULL;
}

int
scriptlib_resend(const char *err, int fcalled)
{
	if (strncmp(err, "NOSCRIPT", 8) == 0 || scriptlib_missing(err))
		return SCRIPTLIB_MISSING;
	if (fcalled && strncmp(err, "OOM", 3) == 0)
		return SCRIPTLIB_OOM;
	return 0;
}
