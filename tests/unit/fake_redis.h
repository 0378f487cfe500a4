/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A Redis played in the test's own process, on the test's libev loop: a
 * loopback listener whose commands go to the test's handler, which
 * answers them (fake_send), or not. For the store tests that need a Redis
 * misbehaving at one exact point (one reply held, one extra reply sent).
 * It plays MULTI/EXEC itself: between them each command's reply (one per
 * command, from the handler) is queued, and EXEC sends them as one array.
 * Header-only: each suite including it gets its own copy.
 */
#ifndef FAKE_REDIS_H
#define FAKE_REDIS_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <ev.h>

#include "../tools/resp_cmd.h"

#define FAKE_ARGS    64
#define FAKE_BUF     (1 << 16)
#define FAKE_CLIENTS 16

struct fake_cli {
	ev_io              w;
	int                fd;
	size_t             len;
	char               buf[FAKE_BUF];
	struct fake_redis *fr;
	int                tx;      /* in MULTI: replies are queued */
	int                ntx;     /* commands queued */
	int                dirty;   /* a command refused in the MULTI */
	int                refused; /* the handler refused this command */
	char              *txbuf;
	size_t             txlen, txcap;
};

struct fake_redis {
	struct ev_loop  *loop;
	int              lfd, port;
	ev_io            accept_w;
	struct fake_cli *cli[FAKE_CLIENTS];
	int              ncli;
	/* the test's: one whole command, argv not NUL-terminated */
	void (*handler)(struct fake_redis *fr, struct fake_cli *c, int argc,
	                const char **argv, const size_t *argl);
	void *arg;
};

static inline void
fake_write(int fd, const char *s, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, s, n);

		if (w <= 0)
			return;
		s += w;
		n -= (size_t)w;
	}
}

/* Sends <s,n> to <c>, or queues it in a MULTI. */
static inline void
fake_send(struct fake_cli *c, const char *s, size_t n)
{
	if (!c->tx) {
		fake_write(c->fd, s, n);
		return;
	}
	if (c->txlen + n > c->txcap) { /* doubling: big replies come in bits */
		while (c->txlen + n > c->txcap)
			c->txcap = c->txcap ? 2 * c->txcap : 4096;
		c->txbuf = realloc(c->txbuf, c->txcap);
		cr_assert_not_null(c->txbuf);
	}
	memcpy(c->txbuf + c->txlen, s, n);
	c->txlen += n;
}

static inline void
fake_sends(struct fake_cli *c, const char *s)
{
	fake_send(c, s, strlen(s));
}

/* Refuses the command now, as Redis does before running one (a Cluster
 * node's MOVED, an unknown command): even in a MULTI, whose EXEC then
 * fails with EXECABORT. */
static inline void
fake_refuse(struct fake_cli *c, const char *s)
{
	c->dirty |= c->tx;
	c->refused = 1;
	fake_write(c->fd, s, strlen(s));
}

static inline void
fake_cli_close(struct fake_cli *c)
{
	struct fake_redis *fr = c->fr;

	ev_io_stop(fr->loop, &c->w);
	close(c->fd);
	for (int i = 0; i < fr->ncli; i++)
		if (fr->cli[i] == c)
			fr->cli[i] = fr->cli[--fr->ncli];
	free(c->txbuf);
	free(c);
}

/* One command of <c>: MULTI and EXEC are played here, the rest goes to
 * the test's handler. */
static inline void
fake_command(struct fake_cli *c, int argc, const char **a, const size_t *l)
{
	char head[32];

	if (argc > 0 && resp_is(a[0], l[0], "MULTI")) {
		fake_sends(c, "+OK\r\n");
		c->tx = 1;
		c->ntx = 0;
		c->txlen = 0;
		c->dirty = 0;
	} else if (argc > 0 && resp_is(a[0], l[0], "EXEC") && c->tx) {
		c->tx = 0;
		if (c->dirty) {
			fake_sends(c, "-EXECABORT Transaction discarded "
			              "because of previous errors.\r\n");
			return;
		}
		snprintf(head, sizeof(head), "*%d\r\n", c->ntx);
		fake_sends(c, head);
		fake_write(c->fd, c->txbuf, c->txlen);
	} else if (c->tx) {
		c->refused = 0;
		c->fr->handler(c->fr, c, argc, a, l);
		if (c->refused)
			return;
		c->ntx++;
		c->tx = 0;
		fake_sends(c, "+QUEUED\r\n");
		c->tx = 1;
	} else {
		c->fr->handler(c->fr, c, argc, a, l);
	}
}

static inline void
fake_read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct fake_cli *c = w->data;
	ssize_t          r = read(c->fd, c->buf + c->len, FAKE_BUF - c->len);
	const char      *a[FAKE_ARGS];
	size_t           l[FAKE_ARGS], off = 0;
	int              argc;
	long             used;

	if (r <= 0) {
		fake_cli_close(c);
		return;
	}
	c->len += (size_t)r;
	while ((used = resp_cmd(c->buf + off, c->len - off, FAKE_ARGS, &argc, a,
	                        l)) > 0) {
		fake_command(c, argc, a, l);
		off += (size_t)used;
	}
	cr_assert_geq(used, 0, "fake redis: not RESP");
	memmove(c->buf, c->buf + off, c->len - off);
	c->len -= off;
}

static inline void
fake_accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct fake_redis *fr = w->data;
	int                fd = accept(fr->lfd, NULL, NULL);
	struct fake_cli   *c;

	if (fd == -1)
		return;
	cr_assert_lt(fr->ncli, FAKE_CLIENTS);
	c = calloc(1, sizeof(*c));
	c->fd = fd;
	c->fr = fr;
	ev_io_init(&c->w, fake_read_cb, fd, EV_READ);
	c->w.data = c;
	ev_io_start(loop, &c->w);
	fr->cli[fr->ncli++] = c;
}

/* Listens on 127.0.0.1, an ephemeral port (fr->port). */
static inline void
fake_start(struct fake_redis *fr, struct ev_loop *loop)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t          sl = sizeof(sa);

	fr->loop = loop;
	fr->lfd = socket(AF_INET, SOCK_STREAM, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert(fr->lfd >= 0 &&
	          bind(fr->lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	          listen(fr->lfd, 16) == 0 &&
	          getsockname(fr->lfd, (struct sockaddr *)&sa, &sl) == 0);
	fr->port = ntohs(sa.sin_port);
	ev_io_init(&fr->accept_w, fake_accept_cb, fr->lfd, EV_READ);
	fr->accept_w.data = fr;
	ev_io_start(loop, &fr->accept_w);
}

static inline void
fake_stop(struct fake_redis *fr)
{
	while (fr->ncli > 0)
		fake_cli_close(fr->cli[0]);
	ev_io_stop(fr->loop, &fr->accept_w);
	close(fr->lfd);
}

/* Runs <loop> until *<flag> is set or <secs> have passed; returns *flag. */
static inline int
fake_run_until(struct ev_loop *loop, const int *flag, double secs)
{
	ev_tstamp end;

	ev_now_update(loop);
	end = ev_now(loop) + secs;
	while (!*flag && ev_now(loop) < end) {
		ev_run(loop, EVRUN_ONCE | EVRUN_NOWAIT);
		usleep(1000);
		ev_now_update(loop);
	}
	return *flag;
}

#endif
