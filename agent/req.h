/*
 * A request: one NOTIFY, from its messages to its ACK. Builds the checks
 * the policy gives for each message, decides what it can at once (missing
 * keys, local-tier rules), sends the rest to Redis in one script call with
 * a deadline, applies each rule's fail mode when Redis is down or late,
 * and queues the ACK on its connection.
 *
 * Every NOTIFY gets exactly one ACK (or none if the connection is gone),
 * whatever happens: the request ends through req_finish() on every path.
 */
#ifndef REQ_H
#define REQ_H

#include "spop.h"

struct conn;
struct deadline;
struct deadlines;
struct worker;

/* Starts the request for NOTIFY <f> on <c>. Returns 0, or -1 with an SPOP
 * status in <*status> when the payload is malformed (no request made). */
int req_start(struct conn *c, const struct spop_frame *f, int *status);

/* A request's Redis deadline passed (the worker's struct deadlines calls
 * it): its checks get their fail modes. */
void req_deadline_passed(struct deadlines *dl, struct deadline *d);

/* Frees every request of the worker at its exit, with those still waiting
 * (on a timer, or on a store already freed) released first: their conns
 * and policy pins go too. Call before the plan cache and the loop go. */
void req_pool_free(struct worker *w);

#endif
