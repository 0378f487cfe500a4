/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Redis Sentinel client of one worker loop: finds the current master of a
 * named group (SENTINEL get-master-addr-by-name, trying each sentinel in
 * turn, each try bounded by our own timer since hiredis 0.14 async has no
 * timeouts) and follows +switch-master on a subscription held open to one
 * sentinel. It never blocks and never connects to the master itself: the
 * store does that, and verifies the role with ROLE.
 */
#ifndef SENTINEL_H
#define SENTINEL_H

#include <stdint.h>

#include "store_ops.h"

struct ev_loop;
struct sentinel;

/* <host> NULL means no sentinel knew the master (discovery only). <host>
 * is borrowed for the duration of the call. */
typedef void sentinel_addr_cb(void *arg, const char *host, int port);

/* Starts the +switch-master subscription. <t> is copied. <found> answers
 * sentinel_discover(); <switched> runs when a sentinel announces a new
 * master for <t->master>, or when a sentinel newly subscribed to names
 * another master than the last one given (a failover announced while no
 * subscription listened). An address of <t> that is a plain Redis, not a
 * sentinel, is logged as an error and skipped. Returns a new sentinel;
 * free with sentinel_free(). */
struct sentinel *sentinel_new(struct ev_loop *loop, const struct store_topo *t,
                              int64_t timeout_us, sentinel_addr_cb *found,
                              sentinel_addr_cb *switched, void *arg);

/* Asks the sentinels for the master; <found> is called exactly once per
 * discovery, never from inside this call. A call while a discovery is
 * running joins it. */
void sentinel_discover(struct sentinel *s);

/* The master the last discovery found was not one (ROLE said replica, or
 * it could not be reached): the next discovery starts with the next
 * sentinel, not the one that gave it, which may be stale for as long as
 * it likes. Not from inside <found>; a no-op while a discovery runs. */
void sentinel_distrust(struct sentinel *s);

/* Stops everything; no callback runs after it. NULL is a no-op. */
void sentinel_free(struct sentinel *s);

#endif
