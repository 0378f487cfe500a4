/*
 * The Redis Cluster side of the store (store.c dispatches to it for a
 * redis+cluster:// URL): the slot map of one worker, one hiredis async
 * context per node, per-slot script calls, MOVED/ASK, and refunds for
 * requests whose checks span slots. The contract seen by callers is
 * store.h's; these are its cluster twins. Not thread-safe: one per loop.
 */
#ifndef CLUSTER_H
#define CLUSTER_H

#include "store.h"

struct ev_loop;
struct cluster;
struct metrics_worker;

/* Starts fetching the slot map from the seeds in <t> (copied). <user> and
 * <pass> authenticate to every node (empty: none). */
struct cluster *cluster_new(struct ev_loop *loop, const struct store_topo *t,
                            const char *user, const char *pass,
                            int64_t connect_timeout_us,
                            struct metrics_worker *m);
/* Pending requests get STORE_EIO; no refund is sent. NULL is a no-op. */
void cluster_free(struct cluster *cl);

int  cluster_submit(struct cluster *cl, struct store_req *sr);
void cluster_flush(struct cluster *cl);
/* The map is known and no node serving slots has its breaker open. */
int  cluster_up(const struct cluster *cl);
/* A deadline passed: counts it, and drops the nodes that have calls in
 * flight and have stopped answering (as a timer does every 0.25 s). */
void cluster_note_timeout(struct cluster *cl);
/* store_cancel() for a cluster: <sr> leaves the queue if still there. */
void cluster_cancel(struct cluster *cl, struct store_req *sr);
int  cluster_hget(struct cluster *cl, const char *hash, const char *field,
                  size_t fieldlen, store_value_cb *cb, void *arg);

#endif
