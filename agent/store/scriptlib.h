/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The decision script as a Redis 7 FUNCTION library.
 *
 * agent/store/lua/ratelimit.lua ends with the one line that runs it under EVAL;
 * the library is the same text with that line replaced by the function's
 * registration, so its helpers are made once per FUNCTION LOAD instead of
 * on every call. The library and function names carry a hash of the text:
 * agents of different versions sharing one Redis each call their own.
 *
 * What this is not: the loading and the choice between FCALL and EVALSHA
 * (link.c: Redis < 7, or a user without FUNCTION rights, gets
 * EVALSHA).
 */
#ifndef SCRIPTLIB_H
#define SCRIPTLIB_H

#include <stddef.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

/* The library's text and name ("FCALL <name> ..."), built once, on the
 * first use from any thread. */
const char *scriptlib_text(void);
const char *scriptlib_name(void);
size_t      scriptlib_name_len(void);

/* Sends FUNCTION LOAD of the library on <ac>, <cb> getting the reply.
 * Without REPLACE: a library of this name has this text, and Redis answers
 * "already exists" in microseconds where REPLACE compiles it again (1 ms
 * of Redis' time per link, every agent reconnecting after a restart). */
int scriptlib_load(redisAsyncContext *ac, redisCallbackFn *cb, void *privdata);

/* FUNCTION LOAD's <reply> on the link at <where> (its log fields): 1 if
 * the library is there (loaded now or already), else 0, logged at info
 * (Redis < 7 says "unknown command", a user without the right NOPERM). */
int scriptlib_loaded(const redisReply *reply, const char *where);

/* Is <err> the error FCALL gets when the library is missing (a Redis
 * restarted empty, FUNCTION FLUSH, a failover to a node that never got
 * it)? The caller resends with EVAL and loads the library again. */
int scriptlib_missing(const char *err);

/* Would the batch that got <err> do better resent once as EVAL? 0: no.
 * SCRIPTLIB_MISSING: the script (NOSCRIPT) or the library
 * (scriptlib_missing) is not there. SCRIPTLIB_OOM: OOM to an FCALL
 * (<fcalled>): Redis refuses a function that may write, when over
 * maxmemory, before it runs, where a script is refused only at a command
 * that would use memory, so a batch of lease releases (ZREM) still runs
 * as EVAL. */
#define SCRIPTLIB_MISSING 1
#define SCRIPTLIB_OOM     2
int scriptlib_resend(const char *err, int fcalled);

#endif
