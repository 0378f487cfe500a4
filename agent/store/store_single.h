/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store backend for one Redis or a Sentinel group (store_single.c):
 * its operations table and its constructor, for store.c. Not thread-safe:
 * one per worker loop.
 */
#ifndef STORE_SINGLE_H
#define STORE_SINGLE_H

#include <stdint.h>

#include "store_ops.h"

struct ev_loop;
struct metrics_worker;

extern const struct store_ops store_single_ops;

/* Starts connecting to <addr> (copied), or, when <sentinels> is not NULL,
 * to the master they name (<addr> then gives the credentials and db). */
void *store_single_new(struct ev_loop *loop, const struct store_addr *addr,
                       const struct store_topo *sentinels,
                       int64_t connect_timeout_us, struct metrics_worker *m);

#endif
