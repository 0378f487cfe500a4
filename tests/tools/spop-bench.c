/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spop-bench: a SPOP load generator playing HAProxy's side against the
 * agent, for tests/bench/run.sh.
 *
 *   spop-bench [-a ADDR] [-c CONNS] [-P PIPELINE] [-T THREADS] [-d SECS]
 *              [-w WARMUP] [-R RATE] [-k TENANTS] [-o rand|rr|once]
 *              [-f TENANT] [-m MESSAGE] [-H HOLD_SECS] [-t CONNECT_SECS]
 *
 * CONNS connections (spread over THREADS epoll loops) each send a HELLO,
 * then keep up to PIPELINE NOTIFYs in flight. Each NOTIFY carries MESSAGE
 * (rl-request) with tenant=s:tNNNN and ip=4:10.x.y.z derived from the
 * tenant number. Tenants: -o rand picks one of TENANTS at random, -o rr
 * walks them (connection j sends j, j+CONNS, j+2*CONNS, ...), -o once does
 * the same walk but stops each connection at TENANTS, so every tenant is
 * sent exactly once (local-tier memory test); -f sends the one TENANT.
 *
 * Closed loop by default: an ACK frees its slot and the next NOTIFY goes
 * at once. -R RATE is open loop: NOTIFY k is due at start + k/RATE and its
 * latency counts from that due time, so a late agent shows up as latency
 * (no coordinated omission) as long as the pipeline has room.
 *
 * Statistics cover ACKs received between WARMUP and WARMUP+SECS: ACKs/s,
 * latency from send (or due time) to ACK per frame (sid = slot, fid =
 * sequence, matched on return), allowed / denied (txn status 429/503) /
 * degraded, errors (DISCONNECTs, closed connections, unknown ACKs,
 * NOTIFYs unanswered 2 s after the end), and this process's own CPU
 * (getrusage) over the same window.
 *
 * -H HOLD_SECS opens CONNS connections, completes their HELLOs (at most
 * 256 handshakes in progress at once), prints "ready conns=N" and holds
 * them open HOLD_SECS (or until SIGTERM/SIGINT), for the memory test.
 *
 * Output: one line of name=value pairs on stdout. Loopback use only;
 * every phase is bounded in time. Exit status 0 unless nothing worked.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "addr.h"

#include "spop.h"

#define RBUF           (65536 + 16384)
#define WBUF           65536
#define HIST_US        100000 /* exact µs buckets below 100 ms */
#define MAX_PIPE       256
#define MAX_HANDSHAKES 256

enum cstate { C_IDLE = 0, C_CONNECTING, C_HELLO, C_READY, C_DONE, C_DEAD };

struct bconn {
	int                 fd;
	int                 idx;   /* global connection number */
	_Atomic enum cstate state; /* polled by main in phase 1 */
	char                rbuf[RBUF];
	size_t              rlen;
	char                wbuf[WBUF];
	size_t              wlen, woff;
	int                 inflight;
	uint64_t            seq;  /* next frame id - 1 */
	uint64_t            walk; /* tenant walk position (rr, once) */
	int                 free_top;
	uint16_t            free_slots[MAX_PIPE];
	int64_t             slot_t[MAX_PIPE]; /* ns: send (or due) time */
	uint64_t            slot_fid[MAX_PIPE];
	uint8_t             slot_used[MAX_PIPE];
	int                 want_out;
};

struct bthread {
	pthread_t      tid;
	int            id;
	int            ep;
	struct bconn **conns;
	int            nconns;
	double         rate;  /* NOTIFY/s for this thread, 0 = closed loop */
	uint64_t       sched; /* NOTIFYs scheduled so far (rate mode) */
	int            rr;
	uint64_t       rng;
	/* results */
	uint32_t *hist;
	uint64_t  over; /* latencies >= HIST_US */
	uint64_t  acks_all, acks, allowed, denied, degraded, sent;
	uint64_t  errors, disconnects, closed, bad_acks, unanswered;
	uint64_t  connect_fail;
	int       ready;
	int64_t   max_ns;
};

/* options */
static const char *addr = "127.0.0.1:12345";
static const char *message = "rl-request";
static const char *fixed_tenant;
static int         nconns = 16, pipeline = 20, nthreads = 1;
static double      duration = 5, warmup = 1, rate, hold = -1, connect_secs = 20;
static long        ntenants = 10000;
static enum { O_RAND, O_RR, O_ONCE } order = O_RAND;

static struct sockaddr_storage sa;
static socklen_t               sa_len;
static _Atomic int64_t         t0, t_warm, t_end, t_stop;
static atomic_int              stop_flag;
static atomic_int              threads_done;
static atomic_int              handshakes;

static int64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static uint64_t
xorshift(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static void
ep_mod(struct bthread *t, struct bconn *c, int out)
{
	struct epoll_event ev = { .events = EPOLLIN | (out ? EPOLLOUT : 0),
		                  .data.ptr = c };

	if (c->want_out == out)
		return;
	c->want_out = out;
	epoll_ctl(t->ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void
conn_kill(struct bthread *t, struct bconn *c, int counted)
{
	if (c->state == C_DEAD || c->state == C_IDLE)
		return;
	if (c->state == C_CONNECTING || c->state == C_HELLO)
		atomic_fetch_sub(&handshakes, 1);
	if (counted)
		t->closed++;
	epoll_ctl(t->ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	c->state = C_DEAD;
	c->inflight = 0;
}

static int
conn_open(struct bthread *t, struct bconn *c)
{
	int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT, .data.ptr = c };

	if (fd == -1)
		return -1;
	if (sa.ss_family != AF_UNIX)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&sa, sa_len) == -1 &&
	    errno != EINPROGRESS) {
		close(fd);
		return -1;
	}
	c->fd = fd;
	c->state = C_CONNECTING;
	c->want_out = 1;
	atomic_fetch_add(&handshakes, 1);
	epoll_ctl(t->ep, EPOLL_CTL_ADD, fd, &ev);
	return 0;
}

static void
queue_hello(struct bconn *c)
{
	struct spop_writer w;
	int                n;

	spop_w_begin(&w, c->wbuf + c->wlen, WBUF - c->wlen,
	             SPOP_FRM_HAPROXY_HELLO, 0, 0);
	spop_w_kv_str(&w, "supported-versions", "2.0", 3);
	spop_w_kv_uint32(&w, "max-frame-size", SPOP_MAX_FRAME_SIZE);
	spop_w_kv_str(&w, "capabilities", "pipelining", 10);
	n = spop_w_end(&w);
	if (n > 0)
		c->wlen += (size_t)n;
}

/* Queues one NOTIFY due at <due> (ns). Returns 0, -1 when the conn is
 * finished (once mode) or has no room. */
static int
queue_notify(struct bthread *t, struct bconn *c, int64_t due)
{
	struct spop_writer w;
	struct spop_data   d;
	char               tenant[32];
	uint64_t           tn;
	int                slot, n, len;

	if (c->free_top == 0 || WBUF - c->wlen < 256)
		return -1;
	if (fixed_tenant == NULL) {
		if (order == O_RAND) {
			tn = xorshift(&t->rng) % (uint64_t)ntenants;
		} else {
			tn = (uint64_t)c->idx + c->walk * (uint64_t)nconns;
			if (tn >= (uint64_t)ntenants) {
				if (order == O_ONCE)
					return -1;
				c->walk = 0;
				tn = (uint64_t)c->idx % (uint64_t)ntenants;
			}
			c->walk++;
		}
		len = snprintf(tenant, sizeof(tenant), "t%04llu",
		               (unsigned long long)tn);
	} else {
		tn = 0;
		len = snprintf(tenant, sizeof(tenant), "%s", fixed_tenant);
	}
	slot = c->free_slots[--c->free_top];
	c->seq++;
	spop_w_begin(&w, c->wbuf + c->wlen, WBUF - c->wlen, SPOP_FRM_NOTIFY,
	             (uint64_t)slot, c->seq);
	spop_w_message(&w, message, 2);
	spop_w_name(&w, "tenant", 6);
	spop_w_str(&w, tenant, (size_t)len);
	spop_w_name(&w, "ip", 2);
	d.type = SPOP_DATA_IPV4;
	d.v.ipv4[0] = 10;
	d.v.ipv4[1] = (uint8_t)(tn >> 16);
	d.v.ipv4[2] = (uint8_t)(tn >> 8);
	d.v.ipv4[3] = (uint8_t)tn;
	spop_w_data(&w, &d);
	n = spop_w_end(&w);
	if (n < 0) {
		c->free_slots[c->free_top++] = (uint16_t)slot;
		return -1;
	}
	c->wlen += (size_t)n;
	c->slot_t[slot] = due;
	c->slot_fid[slot] = c->seq;
	c->slot_used[slot] = 1;
	c->inflight++;
	t->sent++;
	return 0;
}

static void
conn_flush(struct bthread *t, struct bconn *c)
{
	while (c->woff < c->wlen) {
		ssize_t n = write(c->fd, c->wbuf + c->woff, c->wlen - c->woff);

		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN) {
			ep_mod(t, c, 1);
			return;
		}
		if (n <= 0) {
			t->errors++;
			conn_kill(t, c, 1);
			return;
		}
		c->woff += (size_t)n;
	}
	c->woff = c->wlen = 0;
	if (c->state != C_CONNECTING)
		ep_mod(t, c, 0);
}

static void
record(struct bthread *t, int64_t lat_ns, int64_t now)
{
	int64_t us = lat_ns / 1000;

	if (now < t_warm || now >= t_end)
		return;
	t->acks++;
	if (us < 0)
		us = 0;
	if (us < HIST_US)
		t->hist[us]++;
	else
		t->over++;
	if (lat_ns > t->max_ns)
		t->max_ns = lat_ns;
}

static void
handle_ack(struct bthread *t, struct bconn *c, const struct spop_frame *f,
           int64_t now)
{
	struct spop_iter it = { f->payload, f->payload + f->len };
	struct spop_str  name;
	struct spop_data v;
	int              act, scope, st;
	int64_t          status = 0, degraded = 0;
	uint64_t         slot = f->stream_id;

	if (slot >= MAX_PIPE || !c->slot_used[slot] ||
	    c->slot_fid[slot] != f->frame_id) {
		t->bad_acks++;
		return;
	}
	while (spop_next_action(&it, &act, &scope, &name, &v, &st) == 1) {
		if (v.type != SPOP_DATA_INT64 && v.type != SPOP_DATA_INT32)
			continue;
		if (name.len == 6 && memcmp(name.ptr, "status", 6) == 0)
			status = v.v.i;
		else if (name.len == 8 && memcmp(name.ptr, "degraded", 8) == 0)
			degraded = v.v.i;
	}
	c->slot_used[slot] = 0;
	c->free_slots[c->free_top++] = (uint16_t)slot;
	c->inflight--;
	t->acks_all++;
	if (now >= t_warm && now < t_end) {
		if (status == 0)
			t->allowed++;
		else
			t->denied++;
		if (degraded)
			t->degraded++;
	}
	record(t, now - c->slot_t[slot], now);
}

static void
conn_read(struct bthread *t, struct bconn *c)
{
	for (;;) {
		ssize_t r = read(c->fd, c->rbuf + c->rlen, RBUF - c->rlen);
		struct spop_frame f;
		size_t            off = 0;
		int               n, st;
		int64_t           now;

		if (r == -1 && errno == EINTR)
			continue;
		if (r == -1 && errno == EAGAIN)
			return;
		if (r <= 0) {
			conn_kill(t, c, c->state != C_DONE);
			return;
		}
		c->rlen += (size_t)r;
		now = now_ns();
		while ((n = spop_decode_frame(c->rbuf + off, c->rlen - off,
		                              SPOP_MAX_FRAME_SIZE, &f, &st)) >
		       0) {
			off += (size_t)n;
			if (f.type == SPOP_FRM_ACK) {
				handle_ack(t, c, &f, now);
			} else if (f.type == SPOP_FRM_AGENT_HELLO &&
			           c->state == C_HELLO) {
				c->state = C_READY;
				t->ready++;
				atomic_fetch_sub(&handshakes, 1);
			} else if (f.type == SPOP_FRM_AGENT_DISCONNECT) {
				t->disconnects++;
				conn_kill(t, c, 0);
				return;
			} else {
				t->errors++;
			}
		}
		if (n < 0) {
			t->errors++;
			conn_kill(t, c, 1);
			return;
		}
		memmove(c->rbuf, c->rbuf + off, c->rlen - off);
		c->rlen -= off;
		if (c->state == C_DEAD)
			return;
	}
}

/* Closed loop: fill every ready connection's pipeline. */
static void
fill_closed(struct bthread *t, int64_t now)
{
	for (int i = 0; i < t->nconns; i++) {
		struct bconn *c = t->conns[i];

		if (c->state != C_READY)
			continue;
		while (c->inflight < pipeline && queue_notify(t, c, now) == 0)
			;
		if (order == O_ONCE && c->inflight == 0 &&
		    c->free_top == pipeline && queue_notify(t, c, now) == -1)
			c->state = C_DONE;
	}
}

/* Open loop: send what is due, round-robin over connections with room. */
static void
fill_rate(struct bthread *t, int64_t now)
{
	uint64_t due = (uint64_t)((double)(now - t0) * t->rate / 1e9) +
	               1; /* due <= now */

	while (t->sched < due) {
		int tried = 0, sentone = 0;

		while (tried < t->nconns) {
			struct bconn *c = t->conns[t->rr];

			t->rr = (t->rr + 1) % t->nconns;
			tried++;
			if (c->state == C_READY && c->inflight < pipeline &&
			    queue_notify(t, c,
			                 t0 + (int64_t)((double)t->sched * 1e9 /
			                                t->rate)) == 0) {
				sentone = 1;
				break;
			}
		}
		if (!sentone)
			return; /* no room: the backlog waits, its latency grows
			         */
		t->sched++;
	}
}

/* Waits for events: in rate mode until the next NOTIFY is due (at least
 * 50 µs, so a burst of due NOTIFYs goes out together; their latency still
 * counts from each one's due time), else up to 50 ms. */
static int
bench_wait(struct bthread *t, struct epoll_event *evs, int max, int64_t now)
{
	int64_t wait_ns = 50000000;

	if (rate > 0 && now >= t0 && now < t_end) {
		int64_t next = t0 + (int64_t)((double)t->sched * 1e9 / t->rate);

		wait_ns = next - now;
		if (wait_ns < 50000)
			wait_ns = 50000;
		if (wait_ns > 1000000)
			wait_ns = 1000000;
	}
	struct timespec ts = { wait_ns / 1000000000, wait_ns % 1000000000 };
	int             n = epoll_pwait2(t->ep, evs, max, &ts, NULL);

	if (n == -1 && errno == ENOSYS)
		n = epoll_wait(t->ep, evs, max, (int)(wait_ns / 1000000) + 1);
	return n;
}

static void
start_handshakes(struct bthread *t)
{
	for (int i = 0; i < t->nconns; i++) {
		struct bconn *c = t->conns[i];

		if (c->state != C_IDLE)
			continue;
		if (atomic_load(&handshakes) >= MAX_HANDSHAKES)
			return;
		if (conn_open(t, c) == -1) {
			t->connect_fail++;
			c->state = C_DEAD;
		}
	}
}

static void *
thread_main(void *arg)
{
	struct bthread    *t = arg;
	struct epoll_event evs[256];
	int                draining = 0;

	for (;;) {
		int64_t now = now_ns();
		int     n, live = 0, busy = 0;

		if (atomic_load(&stop_flag))
			break;
		start_handshakes(t);
		if (!draining && now >= t_end && hold < 0)
			draining = 1;
		if (draining || now >= t_stop) {
			for (int i = 0; i < t->nconns; i++)
				busy += t->conns[i]->state >= C_READY &&
				        t->conns[i]->state != C_DEAD &&
				        t->conns[i]->inflight > 0;
			if (busy == 0 || now >= t_stop)
				break;
		} else if (hold < 0 && now >= t0) {
			if (rate > 0)
				fill_rate(t, now);
			else
				fill_closed(t, now);
		}
		for (int i = 0; i < t->nconns; i++) {
			struct bconn *c = t->conns[i];

			if (c->state != C_DEAD && c->state != C_IDLE &&
			    c->state != C_DONE)
				live++;
			if (c->wlen > c->woff && c->state >= C_HELLO &&
			    c->state != C_DEAD)
				conn_flush(t, c);
		}
		if (live == 0 && order == O_ONCE && now >= t0)
			break;
		n = bench_wait(t, evs, 256, now);
		for (int i = 0; i < n; i++) {
			struct bconn *c = evs[i].data.ptr;

			if (c->state == C_DEAD)
				continue;
			if (c->state == C_CONNECTING &&
			    (evs[i].events &
			     (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
				int       err = 0;
				socklen_t l = sizeof(err);

				getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err,
				           &l);
				if (err != 0 ||
				    (evs[i].events & (EPOLLERR | EPOLLHUP))) {
					t->connect_fail++;
					conn_kill(t, c, 0);
					continue;
				}
				c->state = C_HELLO;
				queue_hello(c);
				conn_flush(t, c);
				continue;
			}
			if (evs[i].events & EPOLLOUT)
				conn_flush(t, c);
			if (c->state != C_DEAD &&
			    (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
				conn_read(t, c);
		}
	}
	for (int i = 0; i < t->nconns; i++) {
		struct bconn *c = t->conns[i];

		if (c->state >= C_READY && c->state != C_DEAD)
			t->unanswered += (uint64_t)c->inflight;
		if (c->state != C_DEAD && c->state != C_IDLE)
			conn_kill(t, c, 0);
	}
	atomic_fetch_add(&threads_done, 1);
	return NULL;
}

static void
on_signal(int sig)
{
	atomic_store(&stop_flag, 1);
}

static double
cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static void
sleep_until(int64_t when)
{
	while (!atomic_load(&stop_flag) &&
	       atomic_load(&threads_done) < nthreads) {
		int64_t         d = when - now_ns();
		struct timespec ts;

		if (d <= 0)
			return;
		if (d > 50000000)
			d = 50000000;
		ts.tv_sec = 0;
		ts.tv_nsec = d;
		nanosleep(&ts, NULL);
	}
}

static double
pct(const uint32_t *h, uint64_t over, uint64_t total, double q)
{
	uint64_t want = (uint64_t)((double)total * q), acc = 0;

	if (total == 0)
		return 0;
	if (want >= total)
		want = total - 1;
	for (int i = 0; i < HIST_US; i++) {
		acc += h[i];
		if (acc > want)
			return i;
	}
	(void)over;
	return HIST_US;
}

static void
usage(void)
{
	fprintf(stderr,
	        "usage: spop-bench [-a ADDR] [-c CONNS] [-P PIPELINE] [-T THREADS]"
	        " [-d SECS] [-w WARMUP] [-R RATE] [-k TENANTS] [-o rand|rr|once]"
	        " [-f TENANT] [-m MESSAGE] [-H HOLD_SECS] [-t CONNECT_SECS]\n");
	exit(2);
}

/* Frees what main() allocated (so that a sanitizer build reports no leak
 * and its report does not follow the result line). */
static void
release(struct bthread *th, struct bconn **all)
{
	for (int i = 0; i < nconns; i++) {
		if (all[i] != NULL && all[i]->fd >= 0)
			close(all[i]->fd);
		free(all[i]);
	}
	for (int i = 0; i < nthreads; i++) {
		close(th[i].ep);
		free(th[i].conns);
		free(th[i].hist);
	}
	free(all);
	free(th);
}

int
main(int argc, char **argv)
{
	struct bthread *th;
	struct bconn  **all;
	int             ch, ready = 0;
	double          cpu0 = 0, cpu1 = 0;
	int64_t         tw_real = 0, te_real = 0;

	while ((ch = getopt(argc, argv, "a:c:P:T:d:w:R:k:o:f:m:H:t:")) != -1) {
		switch (ch) {
		case 'a':
			addr = optarg;
			break;
		case 'c':
			nconns = atoi(optarg);
			break;
		case 'P':
			pipeline = atoi(optarg);
			break;
		case 'T':
			nthreads = atoi(optarg);
			break;
		case 'd':
			duration = atof(optarg);
			break;
		case 'w':
			warmup = atof(optarg);
			break;
		case 'R':
			rate = atof(optarg);
			break;
		case 'k':
			ntenants = atol(optarg);
			break;
		case 'o':
			if (strcmp(optarg, "rand") == 0)
				order = O_RAND;
			else if (strcmp(optarg, "rr") == 0)
				order = O_RR;
			else if (strcmp(optarg, "once") == 0)
				order = O_ONCE;
			else
				usage();
			break;
		case 'f':
			fixed_tenant = optarg;
			break;
		case 'm':
			message = optarg;
			break;
		case 'H':
			hold = atof(optarg);
			break;
		case 't':
			connect_secs = atof(optarg);
			break;
		default:
			usage();
		}
	}
	if (nconns < 1 || pipeline < 1 || pipeline > MAX_PIPE || nthreads < 1 ||
	    ntenants < 1 || duration <= 0 || warmup < 0)
		usage();
	if (nthreads > nconns)
		nthreads = nconns;
	if (tool_resolve(addr, &sa, &sa_len) == -1) {
		fprintf(stderr, "spop-bench: cannot resolve %s\n", addr);
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);

	th = calloc((size_t)nthreads, sizeof(*th));
	all = calloc((size_t)nconns, sizeof(*all));
	for (int i = 0; i < nthreads; i++) {
		th[i].id = i;
		th[i].ep = epoll_create1(0);
		th[i].conns = calloc((size_t)nconns / (size_t)nthreads + 1,
		                     sizeof(struct bconn *));
		th[i].hist = calloc(HIST_US, sizeof(uint32_t));
		th[i].rate = rate / nthreads;
		th[i].rng = 0x9E3779B97F4A7C15ULL ^
		            ((uint64_t)i * 0xD1B54A32D192ED03ULL) ^
		            (uint64_t)getpid();
	}
	for (int i = 0; i < nconns; i++) {
		struct bconn   *c = calloc(1, sizeof(*c));
		struct bthread *t = &th[i % nthreads];

		if (c == NULL) {
			fprintf(stderr, "spop-bench: out of memory\n");
			return 1;
		}
		c->idx = i;
		c->fd = -1;
		for (int s = pipeline - 1; s >= 0; s--)
			c->free_slots[c->free_top++] = (uint16_t)s;
		all[i] = c;
		t->conns[t->nconns++] = c;
	}
	/* Phase 1: connect and HELLO, bounded by CONNECT_SECS. The load
	 * starts at t0 (set far away until every connection is ready). */
	int64_t start = now_ns();
	t0 = t_warm = t_end = INT64_MAX / 2;
	t_stop = start + (int64_t)((connect_secs + (hold > 0 ? hold : 0) +
	                            warmup + duration + 2) *
	                           1e9);
	for (int i = 0; i < nthreads; i++)
		pthread_create(&th[i].tid, NULL, thread_main, &th[i]);
	for (;;) {
		int r = 0, dead = 0;

		for (int i = 0; i < nconns; i++) {
			r += all[i]->state == C_READY;
			dead += all[i]->state == C_DEAD;
		}
		ready = r;
		if (r + dead >= nconns ||
		    now_ns() - start > (int64_t)(connect_secs * 1e9) ||
		    atomic_load(&stop_flag))
			break;
		sleep_until(now_ns() + 10000000);
	}
	double connect_s = (double)(now_ns() - start) / 1e9;

	if (hold >= 0) {
		printf("ready conns=%d of=%d connect_s=%.2f\n", ready, nconns,
		       connect_s);
		fflush(stdout);
		sleep_until(now_ns() + (int64_t)(hold * 1e9));
		atomic_store(&stop_flag, 1);
		for (int i = 0; i < nthreads; i++)
			pthread_join(th[i].tid, NULL);
		release(th, all);
		return ready > 0 ? 0 : 1;
	}
	int64_t now = now_ns();
	t_warm = now + (int64_t)(warmup * 1e9);
	t_end = t_warm + (int64_t)(duration * 1e9);
	t_stop = t_end + 2000000000LL;
	t0 = now;
	sleep_until(t_warm);
	cpu0 = cpu_s();
	tw_real = now_ns();
	sleep_until(t_end);
	cpu1 = cpu_s();
	te_real = now_ns();
	for (int i = 0; i < nthreads; i++)
		pthread_join(th[i].tid, NULL);

	uint32_t *h = calloc(HIST_US, sizeof(uint32_t));
	uint64_t  acks_all = 0, acks = 0, over = 0, allowed = 0, denied = 0,
		 degraded = 0, sent = 0;
	uint64_t errors = 0, disc = 0, closed = 0, bad = 0, unans = 0,
		 cfail = 0;
	int64_t max_ns = 0;

	for (int i = 0; i < nthreads; i++) {
		struct bthread *t = &th[i];

		for (int j = 0; j < HIST_US; j++)
			h[j] += t->hist[j];
		acks_all += t->acks_all;
		acks += t->acks;
		over += t->over;
		allowed += t->allowed;
		denied += t->denied;
		degraded += t->degraded;
		sent += t->sent;
		errors += t->errors;
		disc += t->disconnects;
		closed += t->closed;
		bad += t->bad_acks;
		unans += t->unanswered;
		cfail += t->connect_fail;
		if (t->max_ns > max_ns)
			max_ns = t->max_ns;
	}
	double   win = (double)(te_real - tw_real) / 1e9;
	uint64_t total = acks;
	uint64_t errs = errors + disc + closed + bad + unans + cfail;

	if (order == O_ONCE) { /* a count run: every ACK, whole run */
		win = (double)(te_real - t0) / 1e9;
	}
	printf("conns=%d ready=%d threads=%d pipeline=%d rate=%.0f tenants=%ld "
	       "window_s=%.2f sent=%llu acks_total=%llu acks=%llu decisions_per_s=%.0f "
	       "allowed=%llu denied=%llu degraded=%llu "
	       "p50_us=%.0f p90_us=%.0f p99_us=%.0f p999_us=%.0f max_us=%.0f "
	       "errors=%llu disconnects=%llu closed=%llu bad_acks=%llu "
	       "unanswered=%llu connect_fail=%llu self_cpu_s=%.3f "
	       "self_cpu_us_per_dec=%.3f\n",
	       nconns, ready, nthreads, pipeline, rate, ntenants, win,
	       (unsigned long long)sent, (unsigned long long)acks_all,
	       (unsigned long long)total, win > 0 ? (double)total / win : 0,
	       (unsigned long long)allowed, (unsigned long long)denied,
	       (unsigned long long)degraded, pct(h, over, total, 0.50),
	       pct(h, over, total, 0.90), pct(h, over, total, 0.99),
	       pct(h, over, total, 0.999), (double)max_ns / 1000,
	       (unsigned long long)errs, (unsigned long long)disc,
	       (unsigned long long)closed, (unsigned long long)bad,
	       (unsigned long long)unans, (unsigned long long)cfail,
	       cpu1 - cpu0, total ? (cpu1 - cpu0) * 1e6 / (double)total : 0);
	fflush(stdout);
	release(th, all);
	free(h);
	return total > 0 || sent > 0 ? 0 : 1;
}
