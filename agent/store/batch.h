/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one input format of the script call (agent/limiter/limiter.h has the
 * contract): the keys as bulk strings, then every other argument packed by
 * msgpack-c into one string, which ratelimit.lua unpacks with Redis'
 * cmsgpack. Both backends (store_single.c, store_cluster.c) send it.
 *
 * A call is written as RESP straight into a batch_buf, after BATCH_HEAD
 * spare bytes where the command and its first argument (EVALSHA <sha>,
 * FCALL <name>) go at send time (link.c): the buffer is the call's own copy
 * of all it sends, so a resend (NOSCRIPT, MOVED, ASK) does not read the
 * callers' memory again. The same buffer carries refund.lua's plain
 * arguments (batch_arg_*).
 *
 * Pure: no I/O, no clock. What is not here: which command, the link, the
 * reply (results.h).
 */
#ifndef BATCH_H
#define BATCH_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "limiter.h"

#define BATCH_HEAD                                                             \
	96                 /* room for "*argc $7 EVALSHA $40 <sha>" or         \
	                    * "*argc $5 FCALL $24 <name>" */
#define BATCH_RULE_SCAN 16 /* rule tuples searched for a repeat */

/* A call's RESP arguments after the head room. All zero is empty. */
struct batch_buf {
	char  *buf; /* BATCH_HEAD spare bytes, then the arguments */
	size_t len; /* bytes used, from BATCH_HEAD */
	size_t cap;
	int    argc; /* of the whole command, its head included */
};

/* One check as it is sent: views of the caller's strings, read only by
 * batch_encode(). */
struct batch_check {
	const char *key, *member;
	size_t      keylen, memberlen;
	int         algo, op;
	unsigned    flags; /* LIM_FL_SHADOW counts */
	int64_t     cost;
	int64_t     p[LIM_SCRIPT_PARAMS]; /* lim_script_params() */
};

/* The encoder's scratch, kept across calls. All zero is ready. */
struct batch_enc {
	int64_t (*rules)[LIM_SCRIPT_RULE];
	long long      *codes;
	int             scratch; /* entries of both */
	msgpack_sbuffer packed;
};

void batch_enc_free(struct batch_enc *e);

/* The rule tuples: returns the 1-based index of <algo, p> in <t> (<*n> in
 * use), appending it if it is not among the last BATCH_RULE_SCAN (so a call
 * with many rules may repeat one). <t> must have room for one more. */
int batch_rule(int64_t (*t)[LIM_SCRIPT_RULE], int *n, int algo,
               const int64_t p[LIM_SCRIPT_PARAMS]);

/* Writes the script's arguments into <b> (emptied first): the key count,
 * the <nchecks> keys of <c>, and one msgpack array: <nparts>, the rule
 * tuples, then for each part its check count (<part_n>, summing to
 * <nchecks>) and each check's code [cost] [member]. A "part" is what the
 * script evaluates atomically: a request (single Redis) or the checks of a
 * request that share a slot (Cluster). Sets b->argc for a two-word head. */
void batch_encode(struct batch_enc *e, struct batch_buf *b,
                  const struct batch_check *c, int nchecks, const int *part_n,
                  int nparts);

/* Plain arguments (refund.lua): appends <s> or the decimal <v>, growing
 * the buffer, and counts it in b->argc. */
void batch_arg_str(struct batch_buf *b, const char *s, size_t n);
void batch_arg_int(struct batch_buf *b, int64_t v);

/* Empties <b> (its memory kept) for a call with a two-word head. */
void batch_buf_reset(struct batch_buf *b);
void batch_buf_free(struct batch_buf *b);

/* Writes "<cmd> <name>" and the array header into the head room; returns
 * where the whole command starts, its length in <*len>. */
const char *batch_head(struct batch_buf *b, const char *cmd, const char *name,
                       size_t nlen, size_t *len);

/* The whole command with "<cmd> <text>" as its head, in a new buffer the
 * caller frees (EVAL: the script's text does not fit the head room). */
char *batch_with_text(const struct batch_buf *b, const char *cmd,
                      const char *text, size_t *len);

#endif
