/*
 * The request queue and circuit breaker shared by the single-Redis store
 * (store.c) and the cluster store (cluster.c), and their HGET.
 *
 * Both stores queue a caller's store_req until the next flush, answer it
 * only while its <gen> is still the one it was queued with, and refuse
 * work for a cooldown after BREAKER_FAILS consecutive failed calls. What
 * each logs and counts stays with the caller: the functions here say when
 * something happened, the caller writes the log line with its own fields.
 */
#ifndef REQQ_H
#define REQQ_H

#include <stdint.h>

#include <hiredis/async.h>

#include "store.h"

#define BREAKER_FAILS    5	/* consecutive failed calls that open it */
#define BREAKER_COOLDOWN 0.5	/* seconds it then refuses work */
#define BREAKER_PROBE_S  1.0	/* a probe with no outcome by then is lost */

/* Requests queued, not sent, linked through store_req.next and .prev (a
 * request given up on leaves from the middle). Embedded in the store; all
 * zero is an empty queue. */
struct reqq {
	struct store_req *head, *tail;
	int               queued;
};

/* Appends <sr>, remembering its current gen as the one to answer. */
void reqq_push(struct reqq *q, struct store_req *sr);

/* Unlinks and returns the oldest request, or NULL when empty. */
struct store_req *reqq_pop(struct reqq *q);

/* Unlinks <sr> if it is queued in <q>; does nothing otherwise. */
void reqq_remove(struct reqq *q, struct store_req *sr);

/* Calls <sr>'s callback with <err> if its gen is still <gen> (the caller
 * has not given up on it meanwhile). */
void reqq_answer(struct store_req *sr, uint32_t gen, int err);

/* Answers everything still queued with <err>, oldest first; each request
 * is unlinked before its callback runs. */
void reqq_fail_all(struct reqq *q, int err);

/* 1 if every check of <sr> is a RELEASE (lease given back). Both stores
 * send those even while a breaker is open, as cluster.c sends its refunds:
 * a release refused there holds its slot for the whole lease (HAProxy
 * sends it once), and it costs Redis one ZREM. */
int reqq_releases_only(const struct store_req *sr);

/* Consecutive failures and, once open, the end of the cooldown. Embedded;
 * all zero is closed. */
struct breaker {
	int    fails;
	double until;		/* ev_tstamp */
	double probe;		/* when the half-open probe was admitted, or 0 */
};

/* 1 while <b> has tripped and <now> is within its cooldown. */
int breaker_is_open(const struct breaker *b, double now);

/* 1 if work may be sent now: always while closed, never while open. Once
 * the cooldown is over (half-open) it admits one probe, and no more until
 * that probe's outcome is counted (breaker_fail, breaker_ok) or
 * BREAKER_PROBE_S have passed: a Redis still stuck makes one request wait
 * its deadline, not every request until the first timeout. */
int breaker_admit(struct breaker *b, double now);

/* 1 once BREAKER_FAILS failures in a row have been counted. */
int breaker_tripped(const struct breaker *b);

/* Counts a failed call at <now>; past the threshold each failure pushes
 * the cooldown on. Returns 1 when this failure opened the breaker. */
int breaker_fail(struct breaker *b, double now);

/* Counts a good call: the failures restart from 0. Returns 1 when the
 * breaker had tripped (it just closed). */
int breaker_ok(struct breaker *b);

/* 1 when the error reply <err> says Redis as a whole cannot serve now
 * (loading, busy with a script, a replica, out of memory, unauthenticated,
 * a cluster without quorum...): that counts against the breaker. Any
 * other error (WRONGTYPE on one key, a script error) is about the request
 * and proves Redis is answering, so it must not open the breaker and
 * turn one bad key into fail modes for every key. */
int reqq_error_is_outage(const char *err);

/* Called when an HGET is answered with a MOVED error, with <arg>. */
typedef void reqq_moved_cb(void *arg);

/* HGET <hash> <field> on <ac>: <cb> gets the value (NULL when the field
 * does not exist) and err 0, or err -1 on no reply or an error reply, and
 * <moved> (may be NULL) runs first when that error is a MOVED. Returns -1,
 * with no call to come, when hiredis refuses the command; 0 otherwise. */
int reqq_hget(redisAsyncContext *ac, const char *hash, const char *field,
              size_t fieldlen, store_value_cb *cb, void *arg,
              reqq_moved_cb *moved, void *moved_arg);

#endif
