/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spop-null: the cheapest SPOP agent there can be, for tests/bench/run.sh.
 * It answers every HAPROXY-HELLO with an AGENT-HELLO (version 2.0, the
 * peer's max-frame-size up to ours, "pipelining" when offered), every
 * NOTIFY at once with an empty ACK (no action), and a HAPROXY-DISCONNECT
 * with its own before closing. It decides nothing and sets no variable.
 *
 *   spop-null PORT SECS
 *
 * One thread, one epoll loop, on 127.0.0.1:PORT; prints "ready", exits
 * after SECS seconds or on SIGTERM. The bench paces HAProxy + spop-null
 * exactly as its path (c), so that the latency HAProxy's SPOE hop adds by
 * itself, with an agent that does no work, is measured next to the
 * agent's. It is not an agent for use: a bad frame just closes the
 * connection, and nothing is logged.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "spop.h"

#define BUFSZ (4 * SPOP_MAX_FRAME_SIZE)
#define MAXFD 4096

struct nconn {
	char   rbuf[BUFSZ];
	size_t rlen;
	char   wbuf[BUFSZ];
	size_t wlen;
	int    fd;
	int    hello; /* 1 once the HELLO is answered */
};

static struct nconn         *conns[MAXFD];
static volatile sig_atomic_t stop;

static void
on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static void
nconn_close(int ep, struct nconn *c)
{
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	conns[c->fd] = NULL;
	free(c);
}

/* Appends the answer to one frame; returns -1 to close the connection. */
static int
answer(struct nconn *c, const struct spop_frame *f)
{
	char              *w = c->wbuf + c->wlen;
	size_t             room = sizeof(c->wbuf) - c->wlen;
	struct spop_hello  h;
	struct spop_writer wr;
	int                st, n = -1;

	if (room < SPOP_MAX_FRAME_SIZE)
		return -1; /* the peer does not read its ACKs */
	switch (f->type) {
	case SPOP_FRM_HAPROXY_HELLO:
		if (spop_decode_hello(f->payload, f->len, &h, &st) < 0)
			return -1;
		n = spop_encode_agent_hello(
			w, room,
			h.max_frame_size < SPOP_MAX_FRAME_SIZE
				? h.max_frame_size
				: SPOP_MAX_FRAME_SIZE,
			spop_list_has(h.capabilities, "pipelining")
				? "pipelining"
				: "");
		c->hello = h.healthcheck ? -1 : 1;
		break;
	case SPOP_FRM_NOTIFY:
		if (c->hello != 1)
			return -1;
		spop_w_begin(&wr, w, room, SPOP_FRM_ACK, f->stream_id,
		             f->frame_id);
		n = spop_w_end(&wr);
		break;
	case SPOP_FRM_HAPROXY_DISCONNECT:
		n = spop_encode_disconnect(w, room, SPOP_FRM_AGENT_DISCONNECT,
		                           SPOP_ST_NORMAL, NULL);
		c->hello = -1;
		break;
	}
	if (n < 0)
		return -1;
	c->wlen += (size_t)n;
	return 0;
}

/* Reads what is there, answers every whole frame, writes the answers. */
static void
nconn_io(int ep, struct nconn *c)
{
	struct spop_frame f;
	size_t            off = 0;
	ssize_t           r;
	int               n, st;

	r = read(c->fd, c->rbuf + c->rlen, sizeof(c->rbuf) - c->rlen);
	if (r <= 0) {
		if (r < 0 && errno == EAGAIN)
			return;
		nconn_close(ep, c);
		return;
	}
	c->rlen += (size_t)r;
	while ((n = spop_decode_frame(c->rbuf + off, c->rlen - off,
	                              SPOP_MAX_FRAME_SIZE, &f, &st)) > 0) {
		if (answer(c, &f) < 0) {
			nconn_close(ep, c);
			return;
		}
		off += (size_t)n;
	}
	if (n < 0) {
		nconn_close(ep, c);
		return;
	}
	memmove(c->rbuf, c->rbuf + off, c->rlen - off);
	c->rlen -= off;
	/* Loopback with a reader that keeps up: a short write is not worth
	 * an EPOLLOUT path in a bench tool, so it closes instead. */
	if (c->wlen && write(c->fd, c->wbuf, c->wlen) != (ssize_t)c->wlen) {
		nconn_close(ep, c);
		return;
	}
	c->wlen = 0;
	if (c->hello < 0)
		nconn_close(ep, c);
}

static void
accept_all(int ep, int lfd)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct nconn      *c;
	int                fd, one = 1;

	while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
		if (fd >= MAXFD || !(c = calloc(1, sizeof(*c)))) {
			close(fd);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->fd = fd;
		conns[fd] = c;
		ev.data.fd = fd;
		epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
	}
}

static int
listen_on(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
		                 .sin_port = htons((uint16_t)port),
		                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int                fd, one = 1;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(fd, 1024) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int
main(int argc, char **argv)
{
	struct epoll_event evs[64], ev = { .events = EPOLLIN };
	time_t             end;
	int                ep, lfd, n, i;

	if (argc != 3) {
		fprintf(stderr, "usage: spop-null PORT SECS\n");
		return 2;
	}
	if ((lfd = listen_on(atoi(argv[1]))) < 0) {
		perror("spop-null: listen");
		return 1;
	}
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	signal(SIGPIPE, SIG_IGN);
	end = time(NULL) + atoi(argv[2]);
	ep = epoll_create1(0);
	ev.data.fd = lfd;
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	printf("ready\n");
	fflush(stdout);
	while (!stop && time(NULL) < end) {
		n = epoll_wait(ep, evs, 64, 200);
		for (i = 0; i < n; i++) {
			int fd = evs[i].data.fd;

			if (fd == lfd)
				accept_all(ep, lfd);
			else if (fd < MAXFD && conns[fd])
				nconn_io(ep, conns[fd]);
		}
	}
	for (i = 0; i < MAXFD; i++)
		if (conns[i])
			nconn_close(ep, conns[i]);
	close(ep);
	close(lfd);
	return 0;
}
