/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One HAProxy connection: the socket, its read and write buffers, the idle
 * timer and the SPOP state machine (HELLO, NOTIFY, DISCONNECT).
 *
 * A conn is reference counted: the socket holds one reference and every
 * request in flight holds one, so a request answered after HAProxy closed
 * the connection finds a conn marked closed, drops its ACK and lets go.
 * Output is appended to the write buffer and flushed once per loop
 * iteration (the owner's flush), so many ACKs leave in one write(2), and a
 * frame is never split by our own writes.
 */
#ifndef CONN_H
#define CONN_H

#include <stddef.h>
#include <stdint.h>

#include <ev.h>

#include "spop.h"

#define CONN_MAX_INFLIGHT 64 /* NOTIFYs answered at once; then reads pause */
#define CONN_WBUF_MAX     (1 << 20) /* output past which a peer is cut off;
                                     * reads pause long before (conn.c) */

struct conn;
struct decision;
struct metrics_worker;

/* What a connection asks of its owner (the server's worker), with the
 * owner's <arg>. conn.c knows nothing else of it. */
struct conn_cbs {
	/* NOTIFY <f> arrived: starts its request. Returns 0, or -1 with an
	 * SPOP status in <*status> when the payload is malformed. */
	int (*on_request)(void *arg, struct conn *c, const struct spop_frame *f,
	                  int *status);
	/* <c> has output: conn_flush() it before the loop blocks again. */
	void (*on_output)(void *arg, struct conn *c);
	/* <c>'s socket is closed: it leaves the owner's registry and counts
	 * (the memory goes at the last conn_unref). */
	void (*on_close)(void *arg, struct conn *c);
};

/* What one owner's connections share: the requests in flight across all
 * of them, at most <cap>. A request holds about 14 KB, so without this
 * bound max_conns connections of CONN_MAX_INFLIGHT each could hold
 * gigabytes (a flood with a stalled Redis and a long processing_timeout).
 * A connection that finds no room stops reading (TCP pushes back to its
 * peer) and waits in <starved>, oldest first, until a request ends. One
 * loop's: no locks. */
struct conn_budget {
	int          inflight, cap;
	struct conn *starved, *starved_tail;
	int          waking;    /* in conn_budget_wake: no nesting */
	struct conn *turn;      /* the one budget_wake resumes */
	int64_t      logged_us; /* the last inflight_full line */
	uint64_t     waits;     /* connections that waited since that line */
};

void conn_budget_init(struct conn_budget *b, int cap);
/* A new cap (reload): connections waiting for room get it at once. */
void conn_budget_set(struct conn_budget *b, int cap);

/* The rest of what a new connection needs. */
struct conn_opts {
	const char            *peer;    /* for logs */
	int64_t                idle_us; /* idle timeout */
	struct metrics_worker *m;       /* frames, SPOP errors */
	struct conn_budget    *budget;  /* the owner's, shared */
};

/* A drain answers the NOTIFYs that still come, and says goodbye at a
 * moment the connection owes nothing and has nothing unread; past
 * CONN_DRAIN_READ_S it reads only the bytes that had arrived by then,
 * and goes once the last of them is answered. */
enum conn_drain {
	CONN_DRAIN_NO = 0,
	CONN_DRAIN_READING, /* waiting for a quiet moment */
	CONN_DRAIN_STOPPED, /* reading <drain_owed> bytes more, then
	                     * waiting for inflight 0 */
};

enum conn_state {
	CONN_ST_HELLO = 0, /* waiting for HAPROXY-HELLO */
	CONN_ST_READY,     /* serving NOTIFYs */
	CONN_ST_CLOSING,   /* DISCONNECT queued, flushing, then close */
	CONN_ST_CLOSED,    /* socket closed, waiting for the last unref */
};

struct conn {
	const struct conn_cbs *cb;
	void                  *arg; /* the owner's, for <cb> */
	struct ev_loop        *loop;
	struct metrics_worker *m;
	int                    fd;
	enum conn_state        state;
	int                    refs;
	int                    inflight;
	int                    dirty;    /* on the owner's dirty list */
	int                    draining; /* CONN_DRAIN_*: how a drain goes on */
	size_t              drain_owed;  /* CONN_DRAIN_STOPPED: left to read */
	int                 lingering;   /* DISCONNECT sent: reading to EOF */
	int                 starved;     /* waiting for room in <budget> */
	int                 wfull;       /* output unsent past CONN_WBUF_HIGH:
	                                  * not reading until it drains */
	struct conn_budget *budget;
	int                 parsing; /* in conn_parse: a request that ends
	                              * inside it must not parse again */
	int rd_eof;                  /* the peer shut its side: answering
	                              * what is in flight, then closing */
	size_t       discarded;      /* bytes read and dropped meanwhile */
	uint32_t     max_frame;      /* negotiated */
	ev_io        rio, wio;
	ev_timer     idle;    /* idle timeout; CLOSING: close deadline */
	ev_tstamp    idle_s;  /* the idle timeout */
	ev_tstamp    last_rx; /* last whole frame, for the idle timer */
	char        *rbuf;
	size_t       rlen, rcap;
	char        *wbuf;
	size_t       wlen, woff, wcap;
	struct conn *next, *prev;                 /* the owner's registry */
	struct conn *next_dirty;                  /* the owner's dirty list */
	struct conn *next_starved, *prev_starved; /* budget->starved */
	char         peer[64];
};

/* Takes over <fd> (non-blocking, accepted) and starts reading on <loop>;
 * <cb> (called with <arg>) and <o> are the owner's. */
struct conn *conn_new(struct ev_loop *loop, int fd, const struct conn_cbs *cb,
                      void *arg, const struct conn_opts *o);
void         conn_ref(struct conn *c);
void         conn_unref(struct conn *c);

/* Queues the ACK for (<sid>, <fid>) carrying <d>'s variables. Dropped when
 * the conn is no longer serving. */
void conn_send_ack(struct conn *c, uint64_t sid, uint64_t fid,
                   const struct decision *d);
/* 1 while <c> can still deliver an ACK HAProxy will act on: ready, and
 * the peer has not shut its side (HAProxy closes, never half-closes: its
 * requests are then given up, their leases HAProxy's to release no more). */
static inline int
conn_serving(const struct conn *c)
{
	return c->state == CONN_ST_READY && !c->rd_eof;
}

/* A request of <c> has started (it holds a reference to <c>). */
void conn_req_begin(struct conn *c);
/* A request of <c> has finished (its ACK is queued or dropped). */
void conn_req_done(struct conn *c);
/* Writes pending output; called by the owner's flush (on_output). */
void conn_flush(struct conn *c);
/* Starts a graceful close: AGENT-DISCONNECT (status 0) once nothing is in
 * flight and nothing waits unread (enum conn_drain), then close. */
void conn_drain(struct conn *c);
/* Closes the socket now, whatever is in flight. */
void conn_abort(struct conn *c);
/* A reload's idle_timeout for an open connection, counted from its last
 * whole frame; a closing one keeps its close deadline. */
void conn_set_idle(struct conn *c, int64_t idle_us);

#endif
