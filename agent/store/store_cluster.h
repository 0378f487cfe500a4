/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store backend for a Redis Cluster (store_cluster.c): its operations
 * table and its constructor, for store.c. Not thread-safe: one per loop.
 */
#ifndef STORE_CLUSTER_H
#define STORE_CLUSTER_H

#include <stdint.h>

#include "store_ops.h"

struct ev_loop;
struct metrics_worker;

extern const struct store_ops store_cluster_ops;

/* Starts fetching the slot map from the seeds in <t> (copied). <user> and
 * <pass> authenticate to every node (empty: none). */
void *store_cluster_new(struct ev_loop *loop, const struct store_topo *t,
                        const char *user, const char *pass,
                        int64_t connect_timeout_us, struct metrics_worker *m);

#endif
