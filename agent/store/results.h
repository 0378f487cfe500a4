/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The decision script's reply: one bulk string, a msgpack array of
 * LIM_SCRIPT_RESULT integers per check, then the call's Redis TIME
 * (agent/limiter/limiter.h).
 *
 * Why not the plain array of integers Redis would make of the Lua table:
 * hiredis builds a reply object per integer, which was a sixth of the
 * agent's instructions per decision; Redis' cmsgpack packs the table for
 * what converting it would cost Redis (callgrind), in a third of the bytes.
 *
 * Why not msgpack-c's unpacker: its C API allocates for whatever count a
 * container claims before reading it, with no limit (the fuzz target
 * found a 256 GiB allocation from a 26-byte reply in a second). Only
 * numbers are valid here, and reading those is a switch on the first
 * byte.
 *
 * The script only writes integers, but it computes from what it reads:
 * a key another writer left holding "12.5" makes a result a float, which
 * cmsgpack packs as one. Such a value is read as Redis' conversion of a
 * Lua number to a reply did (truncated toward zero), and every value is
 * clamped to the script's range, +-2^53 (limiter.h): one bad key must
 * not fail the other requests of its batch, nor overflow what decide.c
 * adds to it.
 *
 * What this is not: where the results go (store_single.c,
 * store_cluster.c), and the arguments' packing (batch.c, with msgpack-c).
 */
#ifndef RESULTS_H
#define RESULTS_H

#include <stddef.h>
#include <stdint.h>

#include "limiter.h"

#define RESULTS_MAX ((int64_t)1 << 53)

struct results {
	int64_t *v;     /* the values of the reply being read (after
	                 * a good decode, of that reply) */
	size_t  cap;    /* kept from one reply to the next */
	int64_t now_us; /* the call's Redis TIME, of the last good decode */
};

void results_init(struct results *rs);
void results_free(struct results *rs);

/* Decodes <len> bytes at <buf>: 0 if they are exactly one msgpack array
 * of <nchecks> x LIM_SCRIPT_RESULT numbers (read as above), each check's
 * allowed one of -1, 0, 1, then the call's TIME in µs, at least 0, into
 * rs->now_us; else -1 (a reply of another shape, from another script or
 * a damaged link, is refused whole). Memory is sized by <nchecks>, never
 * by what the reply claims. */
int results_decode(struct results *rs, const char *buf, size_t len,
                   size_t nchecks);

/* The results of check <k> (0-based) of the last good decode. */
void results_get(const struct results *rs, size_t k, struct lim_result *res);

#endif
