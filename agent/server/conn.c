/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One SPOP connection from HAProxy.
 *
 * Reading takes as many bytes as the kernel has (many frames per read) and
 * decodes every whole frame in the buffer; the buffer never holds more than
 * one maximum-size frame plus its length, and a frame announcing more than
 * the negotiated size is refused before it is buffered. Each NOTIFY becomes
 * a request (req.c) that answers later, in any order (pipelining).
 *
 * Writing appends whole frames to one buffer, flushed once per loop
 * iteration by the owner (on_output): many ACKs per write(2), and no frame of
 * ours is ever interleaved with another. A peer that stops reading its ACKs
 * is no longer read either once CONN_WBUF_HIGH bytes wait for it (TCP then
 * pushes back on its NOTIFYs), until they drop below CONN_WBUF_LOW: its
 * NOTIFYs stay in the kernel, not as ACKs in our memory. Requests in flight
 * still answer; no whole frame arrives meanwhile, so a peer that never
 * reads goes at its idle timeout. CONN_WBUF_MAX is only a backstop.
 *
 * The idle timer counts from the last whole frame, not the last byte: a
 * peer that drips a frame a byte at a time does not hold its socket and
 * its max_conns slot past idle_timeout; what had come by the time the
 * timer fires is read first, so a frame that came in time counts (a late
 * loop runs the timer before that read). Before its HELLO a connection has
 * CONN_HELLO_S at most: HAProxy sends the HELLO at connect and gives up on
 * its own `timeout hello`, so a quiet new connection is no HAProxy.
 *
 * Protocol errors are answered with AGENT-DISCONNECT carrying the SPOP
 * status, then the connection closes; other connections are untouched.
 * Once an AGENT-DISCONNECT is queued (errors, idle timeout, drain) the
 * peer has CONN_CLOSE_S to take it: a peer that never reads does not
 * hold the socket and its max_conns slot past that. Once it is written
 * the agent shuts its side and reads (and drops) what still comes until
 * the peer closes: a close with unread input would send a reset, which
 * can destroy the DISCONNECT before the peer reads it.
 *
 * A drain (SIGTERM) keeps reading and answering: HAProxy 2.6 fails, and
 * never resends, a NOTIFY left unanswered on a connection the agent
 * closes. The DISCONNECT goes once nothing is in flight and nothing waits
 * unread, or, past CONN_DRAIN_READ_S of a connection never quiet, once
 * what had arrived by then is read and answered.
 * Not thread-safe: a conn belongs to one loop. What it asks of its owner
 * (start a request, flush me, I closed) goes through struct conn_cbs:
 * conn.c knows nothing of workers, requests or the server.
 */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn.h"
#include "decide.h"
#include "log.h"
#include "metrics.h"
#include "ratelog.h"
#include "util.h"

#define CONN_RBUF_SIZE    (SPOP_MAX_FRAME_SIZE + 4) /* most a frame can need */
#define CONN_RBUF_MIN     2048 /* what most connections need */
#define CONN_ACK_MAX      (2 * DECIDE_HDR_MAX + 512) /* ACK of any decision */
#define CONN_CLOSE_S      2.0         /* to take our DISCONNECT, then cut */
#define CONN_HELLO_S      5.0         /* from accept to a whole HELLO */
#define CONN_DRAIN_READ_S 1.0         /* a drain answers new NOTIFYs */
#define CONN_LINGER_MAX   (64 * 1024) /* bytes dropped after DISCONNECT */
#define CONN_FULL_LOG_US  (10LL * 1000 * 1000) /* inflight_full lines */
#define CONN_WBUF_HIGH    (64 * 1024) /* unsent output that pauses reads */
#define CONN_WBUF_LOW     (16 * 1024) /* ... and that resumes them */

static void conn_close(struct conn *c);
static void conn_linger(struct conn *c);
static void conn_resume(struct conn *c);
static void conn_settle(struct conn *c);

/* ---- the owner's budget of requests ------------------------------------- */

void
conn_budget_init(struct conn_budget *b, int cap)
{
	assert(cap > 0);
	memset(b, 0, sizeof(*b));
	b->cap = cap;
}

/* Whether <c> may start the request of the NOTIFY it has decoded; if
 * not, <c> stops reading and waits in its budget's list (once). */
static int
budget_room(struct conn *c)
{
	struct conn_budget *b = c->budget;
	int64_t             now;

	/* room left while others wait is theirs, oldest first: only the
	 * one budget_wake resumes may take it */
	if (b->inflight < b->cap && (b->starved == NULL || b->turn == c))
		return 1;
	ev_io_stop(c->loop, &c->rio);
	if (c->starved)
		return 0;
	c->starved = 1;
	c->next_starved = NULL;
	c->prev_starved = b->starved_tail;
	if (b->starved_tail != NULL)
		b->starved_tail->next_starved = c;
	else
		b->starved = c;
	b->starved_tail = c;
	metrics_inflight_full(c->m);
	b->waits++;
	now = util_monotonic_us();
	if (b->logged_us == 0 || now - b->logged_us >= CONN_FULL_LOG_US) {
		log_warn("inflight_full", "max_inflight=%d peer=%s waits=%llu",
		         b->cap, c->peer, (unsigned long long)b->waits);
		b->logged_us = now;
		b->waits = 0;
	}
	return 0;
}

/* Takes <c> off its budget's list. */
static void
budget_forget(struct conn *c)
{
	struct conn_budget *b = c->budget;

	if (!c->starved)
		return;
	if (c->prev_starved != NULL)
		c->prev_starved->next_starved = c->next_starved;
	else
		b->starved = c->next_starved;
	if (c->next_starved != NULL)
		c->next_starved->prev_starved = c->prev_starved;
	else
		b->starved_tail = c->prev_starved;
	c->next_starved = c->prev_starved = NULL;
	c->starved = 0;
}

/* While there is room, the connections that waited for it read again,
 * oldest first. Every one is woken, not one per free slot: one that has
 * nothing to send takes none, and the next must not wait for a request
 * to end that may never come. One that finds no room again goes back to
 * the end of the list, which ends the loop. */
static void
budget_wake(struct conn_budget *b)
{
	if (b->waking)
		return; /* a request ended inside a woken connection's parse */
	b->waking = 1;
	while (b->starved != NULL && b->inflight < b->cap) {
		struct conn *c = b->starved;

		/* it went on the list as its parse ended */
		assert(!c->parsing);
		budget_forget(c);
		conn_ref(c);
		b->turn = c;
		conn_resume(c);
		b->turn = NULL;
		conn_settle(c); /* its parse may have ended what it owed */
		conn_unref(c);
	}
	b->waking = 0;
}

void
conn_budget_set(struct conn_budget *b, int cap)
{
	assert(cap > 0);
	b->cap = cap;
	budget_wake(b);
}

/* ---- output ------------------------------------------------------------- */

/* Returns room for one frame at the end of the write buffer, or NULL when
 * the peer has left too much unread. */
static char *
wbuf_reserve(struct conn *c, size_t need)
{
	if (c->woff == c->wlen)
		c->woff = c->wlen = 0;
	if (c->wcap - c->wlen >= need)
		return c->wbuf + c->wlen;
	if (c->woff > 0) {
		memmove(c->wbuf, c->wbuf + c->woff, c->wlen - c->woff);
		c->wlen -= c->woff;
		c->woff = 0;
	}
	if (c->wcap - c->wlen < need) {
		size_t cap = c->wcap ? c->wcap : 4096;

		while (cap - c->wlen < need)
			cap *= 2;
		if (cap > CONN_WBUF_MAX)
			return NULL;
		c->wbuf = xrealloc(c->wbuf, cap);
		c->wcap = cap;
	}
	return c->wbuf + c->wlen;
}

/* Whether <c> should read: serving, with room for requests, and held back
 * neither by its peer's half-close, a drain's stop nor its unsent output. */
static int
may_read(const struct conn *c)
{
	return c->state == CONN_ST_READY && c->inflight < CONN_MAX_INFLIGHT &&
	       !c->starved && !c->wfull && !c->rd_eof &&
	       (c->draining != CONN_DRAIN_STOPPED || c->drain_owed > 0);
}

/* Past CONN_WBUF_HIGH bytes unsent <c> stops reading: the peer is not
 * taking its ACKs, so its NOTIFYs wait in the kernel, not ours. The frames
 * already in the read buffer are still answered (a bounded amount). */
static void
wbuf_commit(struct conn *c, int len)
{
	assert(len > 0 && (size_t)len <= c->wcap - c->wlen);
	c->wlen += (size_t)len;
	if (!c->wfull && c->wlen - c->woff > CONN_WBUF_HIGH) {
		c->wfull = 1;
		ev_io_stop(c->loop, &c->rio);
	}
	c->cb->on_output(c->arg, c);
}

/* The peer took its output down to CONN_WBUF_LOW: <c> reads again, unless
 * something else holds it back. Only the watcher starts here, no parse:
 * this runs in the owner's flush, where new requests would wait a loop
 * iteration for their Redis write. Nothing whole waits in the read buffer
 * that a parse could take (conn_parse stops only at the caps). */
static void
wbuf_drained(struct conn *c)
{
	if (!c->wfull || c->wlen - c->woff >= CONN_WBUF_LOW)
		return;
	c->wfull = 0;
	if (may_read(c))
		ev_io_start(c->loop, &c->rio);
}

/* (Re)arms <c>'s one timer to fire in <s> seconds: the idle timeout, the
 * drain's reading time or the close deadline, by state. */
static void
idle_in(struct conn *c, ev_tstamp s)
{
	ev_timer_stop(c->loop, &c->idle);
	ev_timer_set(&c->idle, s, 0.);
	ev_timer_start(c->loop, &c->idle);
}

/* Bytes the peer sent that are not read yet, or -1 if unknown. */
static int
socket_unread(const struct conn *c)
{
	int n = 0;

	return ioctl(c->fd, FIONREAD, &n) == -1 ? -1 : n;
}

/* Stops serving <c>: what is queued is written, then it closes. */
static void
close_when_flushed(struct conn *c)
{
	c->state = CONN_ST_CLOSING;
	ev_io_stop(c->loop, &c->rio);
	c->cb->on_output(c->arg, c);
	/* A peer that never reads would keep the write at EAGAIN, and the
	 * socket, forever: the idle timer becomes the close deadline. */
	idle_in(c, CONN_CLOSE_S);
}

static void
send_disconnect(struct conn *c, int status, const char *message)
{
	char *p = wbuf_reserve(c, 512);
	int   n;

	/* not counted in frames_total: it counts the frames received */
	if (p != NULL &&
	    (n = spop_encode_disconnect(p, 512, SPOP_FRM_AGENT_DISCONNECT,
	                                status, message)) > 0)
		wbuf_commit(c, n);
	close_when_flushed(c);
}

/* Whether a line a peer causes by connecting, at <level> for SPOP status
 * <status>, goes out now: at most once per status per RATELOG_INTERVAL_US
 * on this worker (<rl>, the thread's own state, one per kind of line),
 * with <*suppressed> the count of those not logged since. Anything that
 * reaches the port can open connections in a loop. */
static int
peer_log_allow(struct ratelog *rl, int level, int status, uint64_t *suppressed)
{
	return log_level >= level &&
	       ratelog_allow(rl, status, util_now_us(), suppressed);
}

/* A protocol error from the peer: say why (peer_log_allow), then close. */
static void
protocol_error(struct conn *c, int status)
{
	static _Thread_local struct ratelog rl; /* indexed by status */
	uint64_t                            suppressed;

	if (peer_log_allow(&rl, LOG_WARN, status, &suppressed))
		log_warn("spop_error",
		         "peer=%s status=%d reason=\"%s\" suppressed=%llu",
		         c->peer, status, spop_strstatus(status),
		         (unsigned long long)suppressed);
	metrics_spop_error(c->m, status);
	send_disconnect(c, status, spop_strstatus(status));
}

void
conn_send_ack(struct conn *c, uint64_t sid, uint64_t fid,
              const struct decision *d)
{
	struct spop_writer w;
	size_t room = c->max_frame + 4 < CONN_ACK_MAX ? c->max_frame + 4
	                                              : CONN_ACK_MAX;
	char  *p;
	int    n;

	assert(c->inflight > 0); /* an ACK answers a request in flight */
	if (c->state != CONN_ST_READY)
		return;
	if ((p = wbuf_reserve(c, room)) == NULL) {
		log_warn("conn_overflow", "peer=%s unread=%zu", c->peer,
		         c->wlen - c->woff);
		conn_close(c);
		return;
	}
	spop_w_begin(&w, p, room, SPOP_FRM_ACK, sid, fid);
	decide_encode(d, &w);
	if ((n = spop_w_end(&w)) == -1) {
		/* a small negotiated frame size: the variables without the
		 * header strings, else the verdict alone */
		spop_w_begin(&w, p, room, SPOP_FRM_ACK, sid, fid);
		decide_encode_nohdr(d, &w);
		n = spop_w_end(&w);
	}
	if (n == -1) {
		spop_w_begin(&w, p, room, SPOP_FRM_ACK, sid, fid);
		decide_encode_min(d, &w);
		n = spop_w_end(&w);
	}
	wbuf_commit(c, n);
	metrics_frame(c->m, METRICS_FRM_ACK);
}

void
conn_flush(struct conn *c)
{
	ssize_t n;

	if (c->state == CONN_ST_CLOSED)
		return;
	assert(c->woff <= c->wlen && c->wlen <= c->wcap);
	while (c->woff < c->wlen) {
		n = write(c->fd, c->wbuf + c->woff, c->wlen - c->woff);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			ev_io_start(c->loop, &c->wio);
			wbuf_drained(c);
			return;
		}
		if (n == -1) {
			log_debug("conn_write_failed", "peer=%s error=\"%s\"",
			          c->peer, strerror(errno));
			conn_close(c);
			return;
		}
		c->woff += (size_t)n;
	}
	c->woff = c->wlen = 0;
	ev_io_stop(c->loop, &c->wio);
	wbuf_drained(c);
	if (c->state == CONN_ST_CLOSING && c->inflight == 0)
		conn_linger(c);
}

static void
write_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	conn_flush(container_of(w, struct conn, wio));
}

/* ---- frames ------------------------------------------------------------- */

static int
conn_handle_hello(struct conn *c, const struct spop_frame *f)
{
	struct spop_hello h;
	int               status, n;
	char             *p;

	if (spop_decode_hello(f->payload, f->len, &h, &status) == -1) {
		protocol_error(c, status);
		return -1;
	}
	if (h.max_frame_size < SPOP_MIN_FRAME_SIZE) {
		protocol_error(c, SPOP_ST_BAD_FRAME_SIZE);
		return -1;
	}
	c->max_frame = h.max_frame_size < SPOP_MAX_FRAME_SIZE
	                       ? h.max_frame_size
	                       : SPOP_MAX_FRAME_SIZE;
	if ((p = wbuf_reserve(c, 256)) == NULL)
		return -1;
	n = spop_encode_agent_hello(p, 256, c->max_frame, "pipelining");
	wbuf_commit(c, n);
	metrics_frame(c->m, h.healthcheck ? METRICS_FRM_HEALTHCHECK
	                                  : METRICS_FRM_HELLO);
	c->state = CONN_ST_READY;
	if (h.healthcheck)
		log_debug("spop_healthcheck", "peer=%s", c->peer);
	return 0;
}

/* HAProxy's goodbye: logged (peer_log_allow: a peer can connect and say
 * goodbye in a loop), its words escaped and cut at 100 bytes, which the
 * line then says; answered, then the close. */
static int
conn_handle_disconnect(struct conn *c, const struct spop_frame *f)
{
	static _Thread_local struct ratelog rl; /* indexed by status */
	struct spop_str                     msg = { "", 0 };
	int                                 code = 0, status;
	char     text[4 * 100 + 1]; /* the peer's words, escaped */
	int      cut;
	uint64_t suppressed;

	if (spop_decode_disconnect(f->payload, f->len, &code, &msg, &status) ==
	    -1)
		code = -1;
	if (peer_log_allow(&rl, LOG_INFO, code, &suppressed)) {
		cut = log_escape_value(text, sizeof(text), msg.ptr, msg.len,
		                       100);
		log_info("spop_disconnect",
		         "peer=%s status=%d message=\"%s\" suppressed=%llu%s",
		         c->peer, code, text, (unsigned long long)suppressed,
		         LOG_CUT(cut));
	}
	metrics_frame(c->m, METRICS_FRM_DISCONNECT);
	send_disconnect(c, SPOP_ST_NORMAL, "bye");
	return -1;
}

/* Handles one frame. Returns 0 to go on reading, -1 to stop. */
static int
conn_handle_frame(struct conn *c, const struct spop_frame *f)
{
	int status;

	if (spop_check_order(f->type, c->state != CONN_ST_HELLO, &status) ==
	    -1) {
		protocol_error(c, status);
		return -1;
	}
	switch (f->type) {
	case SPOP_FRM_HAPROXY_HELLO:
		return conn_handle_hello(c, f);
	case SPOP_FRM_HAPROXY_DISCONNECT:
		return conn_handle_disconnect(c, f);
	case SPOP_FRM_NOTIFY:
		metrics_frame(c->m, METRICS_FRM_NOTIFY);
		if (c->cb->on_request(c->arg, c, f, &status) == -1) {
			protocol_error(c, status);
			return -1;
		}
		/* conn_parse stops at the cap: one request more at most */
		assert(c->inflight <= CONN_MAX_INFLIGHT);
		if (c->inflight >= CONN_MAX_INFLIGHT)
			ev_io_stop(c->loop, &c->rio);
		return 0;
	default:
		protocol_error(c, SPOP_ST_INVALID);
		return -1;
	}
}

/* Decodes and handles the whole frames in the read buffer, up to
 * CONN_MAX_INFLIGHT NOTIFYs in flight, and while the owner's budget has
 * room: the rest wait there until a request ends (conn_req_done parses
 * again), so the cap bounds the requests, not just the reads (a 16 KB
 * buffer holds hundreds of small NOTIFYs). */
static void
conn_parse(struct conn *c)
{
	struct spop_frame f;
	size_t            off = 0;
	int               n, status;

	c->parsing = 1;
	while ((c->state == CONN_ST_HELLO || c->state == CONN_ST_READY) &&
	       c->inflight < CONN_MAX_INFLIGHT) {
		n = spop_decode_frame(c->rbuf + off, c->rlen - off,
		                      c->max_frame, &f, &status);
		if (n == SPOP_INCOMPLETE)
			break;
		if (n == -1) {
			protocol_error(c, status);
			break;
		}
		if (f.type == SPOP_FRM_NOTIFY && c->state == CONN_ST_READY &&
		    !budget_room(c))
			break; /* it stays in the buffer */
		off += (size_t)n;
		c->last_rx = ev_now(c->loop); /* a whole frame: not idle */
		if (conn_handle_frame(c, &f) == -1)
			break;
	}
	assert(off <= c->rlen);
	memmove(c->rbuf, c->rbuf + off, c->rlen - off);
	c->rlen -= off;
	c->parsing = 0;
}

/* After our DISCONNECT: drops what the peer still sends, and closes at
 * its EOF (or past CONN_LINGER_MAX bytes, or at the close deadline). */
static void
linger_read(struct conn *c)
{
	if (util_drain(c->fd, &c->discarded, CONN_LINGER_MAX))
		conn_close(c);
}

/* The peer shut its side with requests in flight or ACKs not yet
 * written: those ACKs are still sent (a half-closed peer reads them), and
 * the connection closes once the last is written. HAProxy closes, it
 * never half-closes: the ACKs then meet a reset and the close comes
 * sooner. */
static void
peer_shut(struct conn *c)
{
	log_debug("conn_shut_by_peer", "peer=%s inflight=%d unsent=%zu",
	          c->peer, c->inflight, c->wlen - c->woff);
	c->rd_eof = 1;
	ev_io_stop(c->loop, &c->rio);
	if (c->inflight == 0)
		close_when_flushed(c);
}

/* Draining: sends the DISCONNECT if <c> owes no ACK and, while it still
 * reads, has no byte unread, in its buffer or the socket's. Called again
 * when a request ends and after each read. */
static void
drain_try(struct conn *c)
{
	if (c->state != CONN_ST_READY || c->inflight > 0 || c->parsing ||
	    c->starved) /* NOTIFYs wait in rbuf for room: owed */
		return; /* parsing: its caller asks again after */
	if (c->draining == CONN_DRAIN_READING &&
	    (c->rlen > 0 || socket_unread(c) != 0))
		return;
	if (c->draining == CONN_DRAIN_STOPPED && c->drain_owed > 0)
		return;
	send_disconnect(c, SPOP_ST_NORMAL, "agent shutting down");
}

/* Reads what the socket holds, up to its caps, and handles every whole
 * frame of it. The caller holds a reference: <c> may close in here. */
static void
conn_read(struct conn *c)
{
	size_t  room;
	ssize_t n;

	while (c->state <= CONN_ST_READY && ev_is_active(&c->rio)) {
		if (c->rlen == c->rcap) { /* grow to at most one whole frame */
			if (c->rcap == CONN_RBUF_SIZE)
				break;
			c->rcap = c->rcap * 2 < CONN_RBUF_SIZE ? c->rcap * 2
			                                       : CONN_RBUF_SIZE;
			c->rbuf = xrealloc(c->rbuf, c->rcap);
		}
		room = c->rcap - c->rlen;
		if (c->draining == CONN_DRAIN_STOPPED && room > c->drain_owed)
			room = c->drain_owed; /* only what came in time */
		if (room == 0)
			break;
		n = read(c->fd, c->rbuf + c->rlen, room);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n == 0 && c->state == CONN_ST_READY &&
		    (c->inflight > 0 || c->woff < c->wlen)) {
			peer_shut(c); /* the ACKs may still be read */
			break;
		}
		if (n <= 0) { /* EOF or reset: HAProxy went away */
			log_debug("conn_closed_by_peer", "peer=%s", c->peer);
			conn_close(c);
			break;
		}
		c->rlen += (size_t)n;
		if (c->draining == CONN_DRAIN_STOPPED &&
		    (c->drain_owed -= (size_t)n) == 0)
			ev_io_stop(c->loop, &c->rio);
		conn_parse(c);
		/* A short read drained the socket: epoll is level-triggered,
		 * so asking again would only fetch EAGAIN. */
		if ((size_t)n < room)
			break;
	}
}

static void
read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct conn *c = container_of(w, struct conn, rio);

	if (c->lingering) {
		linger_read(c);
		return;
	}
	conn_ref(c);
	conn_read(c);
	if (c->draining)
		drain_try(c);
	conn_unref(c);
}

/* How long <c> may go without a whole frame: idle_timeout, and no more
 * than CONN_HELLO_S before its HELLO. */
static ev_tstamp
idle_limit(const struct conn *c)
{
	if (c->state == CONN_ST_HELLO && c->idle_s > CONN_HELLO_S)
		return CONN_HELLO_S;
	return c->idle_s;
}

/* Before <c> is called idle: what the peer sent by now is read, and a
 * whole frame among it counts. A late loop (a busy worker) has the timer
 * and that read due in the same iteration, and libev runs the timer
 * first: the DISCONNECT then went out over NOTIFYs HAProxy had sent in
 * time, which it fails and never sends again. Bytes that make no whole
 * frame (a peer dripping one) change nothing. Returns 0 if <c> is no
 * longer open or serving (closed, or closing: its timer is the close
 * deadline now). */
static int
read_in_time(struct conn *c)
{
	int open;

	conn_ref(c);
	conn_read(c);
	open = c->state <= CONN_ST_READY;
	conn_unref(c);
	return open;
}

static void
idle_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct conn *c = container_of(w, struct conn, idle);
	ev_tstamp    left = c->last_rx + idle_limit(c) - ev_now(loop);

	if (c->state == CONN_ST_CLOSING) { /* the close deadline */
		if (!c->lingering)
			log_warn("conn_close_timeout", "peer=%s unsent=%zu",
			         c->peer, c->wlen - c->woff);
		conn_close(c);
		return;
	}
	if (c->draining == CONN_DRAIN_READING) { /* never quiet */
		int unread = socket_unread(c);

		c->draining = CONN_DRAIN_STOPPED;
		c->drain_owed = unread > 0 ? (size_t)unread
		                           : 0; /* sent
		                                 * before now: answered */
		if (c->drain_owed == 0)
			ev_io_stop(loop, &c->rio);
		drain_try(c);
		return;
	}
	if (ev_is_active(&c->rio)) {
		if (!read_in_time(c))
			return; /* it closed */
		left = c->last_rx + idle_limit(c) - ev_now(loop);
	}
	/* Frames only note their time: the timer moves here, once per
	 * timeout, not on every frame (the libev manual's ev_timer advice). */
	if (c->inflight > 0 || c->starved || left > 0.) {
		ev_timer_set(w, left > 0. ? left : idle_limit(c), 0.);
		ev_timer_start(loop, w);
		return;
	}
	log_debug("conn_idle_timeout", "peer=%s hello=%d", c->peer,
	          c->state == CONN_ST_HELLO);
	send_disconnect(c, SPOP_ST_TIMEOUT,
	                c->state == CONN_ST_HELLO ? "hello timeout"
	                                          : "idle timeout");
}

/* ---- lifecycle ---------------------------------------------------------- */

struct conn *
conn_new(struct ev_loop *loop, int fd, const struct conn_cbs *cb, void *arg,
         const struct conn_opts *o)
{
	struct conn *c = xcalloc(1, sizeof(*c));

	assert(fd >= 0 && cb != NULL && o != NULL && o->budget != NULL);
	c->cb = cb;
	c->budget = o->budget;
	c->arg = arg;
	c->loop = loop;
	c->m = o->m;
	c->fd = fd;
	c->refs = 1;
	c->state = CONN_ST_HELLO;
	c->max_frame = SPOP_MAX_FRAME_SIZE;
	c->rcap = CONN_RBUF_MIN;
	c->rbuf = xmalloc(c->rcap);
	snprintf(c->peer, sizeof(c->peer), "%s", o->peer);
	ev_io_init(&c->rio, read_cb, fd, EV_READ);
	ev_io_init(&c->wio, write_cb, fd, EV_WRITE);
	c->idle_s = (double)o->idle_us / 1e6;
	c->last_rx = ev_now(loop);
	ev_timer_init(&c->idle, idle_cb, idle_limit(c), 0.);
	ev_io_start(loop, &c->rio);
	ev_timer_start(loop, &c->idle);
	return c;
}

/* Closes the socket now; the memory goes at the last unref. */
static void
conn_close(struct conn *c)
{
	if (c->state == CONN_ST_CLOSED)
		return;
	assert(c->refs > 0 && c->fd >= 0); /* the socket's reference */
	c->state = CONN_ST_CLOSED;
	budget_forget(c);
	ev_io_stop(c->loop, &c->rio);
	ev_io_stop(c->loop, &c->wio);
	ev_timer_stop(c->loop, &c->idle);
	close(c->fd);
	c->fd = -1;
	c->cb->on_close(c->arg, c);
	conn_unref(c);
}

/* Our DISCONNECT is written: shuts our side and reads until the peer
 * closes; the close deadline set with the DISCONNECT still holds. */
static void
conn_linger(struct conn *c)
{
	if (c->lingering)
		return;
	c->lingering = 1;
	if (shutdown(c->fd, SHUT_WR) == -1) {
		conn_close(c);
		return;
	}
	ev_io_start(c->loop, &c->rio);
}

void
conn_ref(struct conn *c)
{
	assert(c->refs > 0); /* not freed */
	c->refs++;
}

void
conn_unref(struct conn *c)
{
	assert(c->refs > 0);
	if (--c->refs > 0)
		return;
	/* the socket's reference goes last at its close; the dirty list
	 * holds one of its own */
	assert(c->state == CONN_ST_CLOSED && !c->dirty && c->inflight == 0);
	free(c->rbuf);
	free(c->wbuf);
	free(c);
}

/* <c> may take requests again: reads resume unless the peer shut its
 * side, a drain stopped them or its output waits unread (may_read), and
 * frames that wait in the buffer (all read before are answered too) are
 * parsed. */
static void
conn_resume(struct conn *c)
{
	int reading;

	if (c->state != CONN_ST_READY || c->inflight >= CONN_MAX_INFLIGHT ||
	    c->parsing) /* the parse under way goes on */
		return;
	reading = may_read(c);
	if (reading && !ev_is_active(&c->rio)) {
		ev_io_start(c->loop, &c->rio);
		conn_parse(c);
	} else if (!reading && c->rlen > 0) {
		conn_parse(c);
	}
}

void
conn_req_begin(struct conn *c)
{
	conn_ref(c);
	c->inflight++;
	c->budget->inflight++;
}

void
conn_req_done(struct conn *c)
{
	assert(c->inflight > 0 && c->refs > 0); /* the request's ref */
	assert(c->budget->inflight > 0);
	c->inflight--;
	c->budget->inflight--;
	if (!c->starved) /* else it waits its turn in budget_wake */
		conn_resume(c);
	conn_settle(c);
	budget_wake(c->budget);
	conn_unref(c);
}

/* After a request ended or a wake parsed: a half-closed peer's conn
 * closes once it owes nothing, a closing one flushes, a drain says
 * goodbye. */
static void
conn_settle(struct conn *c)
{
	if (c->rd_eof && c->inflight == 0 && !c->starved &&
	    c->state == CONN_ST_READY)
		close_when_flushed(c);
	if (c->state == CONN_ST_CLOSING && c->inflight == 0)
		c->cb->on_output(c->arg, c);
	if (c->draining)
		drain_try(c);
}

void
conn_abort(struct conn *c)
{
	conn_close(c);
}

void
conn_set_idle(struct conn *c, int64_t idle_us)
{
	ev_tstamp left;

	c->idle_s = (double)idle_us / 1e6;
	if (c->state == CONN_ST_CLOSING || c->state == CONN_ST_CLOSED ||
	    c->draining)
		return;
	left = c->last_rx + idle_limit(c) - ev_now(c->loop);
	idle_in(c, left > 0. ? left : 0.);
}

void
conn_drain(struct conn *c)
{
	if (c->state == CONN_ST_CLOSED || c->state == CONN_ST_CLOSING)
		return;
	if (c->state == CONN_ST_HELLO) { /* no NOTIFY can be on its way */
		send_disconnect(c, SPOP_ST_NORMAL, "agent shutting down");
		return;
	}
	c->draining = CONN_DRAIN_READING;
	idle_in(c, CONN_DRAIN_READ_S);
	drain_try(c);
}
