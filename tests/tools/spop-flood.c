/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spop-flood: resource-bound floods against the agent, for
 * tests/integration/bounds.sh and closing.sh. Plays HAProxy's side of
 * SPOP on loopback; HOST:PORT may also be unix:PATH.
 *
 *   spop-flood -a HOST:PORT conns -n N [-H HOLD_SECS]
 *       Opens N connections (at most 256 handshakes in progress at once),
 *       sends each a HELLO and waits for its AGENT-HELLO, prints
 *       "ready conns=R failed=F ms=T", holds them HOLD_SECS (default 0),
 *       closes them all and prints "closed conns=R".
 *
 *   spop-flood -a HOST:PORT notify -n N [-c CONNS] [-P PIPE] [-k] [-m MSG]
 *                                  [-s [-H HOLD_SECS]]
 *       Sends N NOTIFYs (MSG, default rl-request, with tenant=s:flood and
 *       ip=4:10.0.0.1) over CONNS connections (default 1), at most PIPE in
 *       flight per connection (default: unbounded, i.e. written as fast as
 *       the socket takes them while ACKs are read). -k gives every NOTIFY
 *       its own tenant (k<global index>), for a distinct-key flood. Prints
 *       "notify sent=S acks=A missing=M dup=D allowed=X denied=Y
 *       disconnects=Z max_outstanding=O ms=T": every frame-id is matched to
 *       its ACK. -s is a slow peer: it never reads, writes NOTIFYs until
 *       the socket has taken nothing for 2 s, prints "slow sent=S bytes=B"
 *       and holds the connection HOLD_SECS (-H) before closing it.
 *
 * Every wait is bounded (-t SECS overall, default 60). Exit status 0 when
 * every connection was ready (conns) or every NOTIFY got exactly one ACK
 * (notify).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "addr.h"

#include "spop.h"

#define RBUF   65536
#define WBUF   (1 << 20)
#define MAX_HS 256

struct fc {
	int    fd;
	int    state; /* 0 idle, 1 connecting, 2 hello sent, 3 ready, 4 dead */
	char  *rbuf;
	size_t rlen;
	char  *wbuf;
	size_t wlen, woff;
	uint64_t next;  /* NOTIFYs handed to this connection */
	uint64_t quota; /* NOTIFYs this connection sends */
	uint64_t acked;
	uint8_t *seen; /* per frame id (1-based), notify mode */
};

static struct sockaddr_storage addr; /* -a: IPv4 or unix */
static socklen_t               addrlen;
static int                     ep;
static double                  deadline;

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
hello(char *buf, size_t size)
{
	struct spop_writer w;

	spop_w_begin(&w, buf, size, SPOP_FRM_HAPROXY_HELLO, 0, 0);
	spop_w_kv_str(&w, "supported-versions", "2.0", 3);
	spop_w_kv_uint32(&w, "max-frame-size", 16380);
	spop_w_kv_str(&w, "capabilities", "pipelining", 10);
	return spop_w_end(&w);
}

static int
notify(char *buf, size_t size, const char *msg, uint64_t fid,
       const char *tenant)
{
	struct spop_writer w;
	struct spop_data   d = { .type = SPOP_DATA_STRING };
	struct spop_data   ip = { .type = SPOP_DATA_IPV4 };

	spop_w_begin(&w, buf, size, SPOP_FRM_NOTIFY, 1, fid);
	spop_w_message(&w, msg, 2);
	d.v.str.ptr = tenant;
	d.v.str.len = strlen(tenant);
	spop_w_name(&w, "tenant", 6);
	spop_w_data(&w, &d);
	memcpy(ip.v.ipv4, "\x0a\x00\x00\x01", 4);
	spop_w_name(&w, "ip", 2);
	spop_w_data(&w, &ip);
	return spop_w_end(&w);
}

static int
dial(struct fc *c)
{
	int one = 1;

	c->fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (c->fd < 0)
		return -1;
	if (addr.ss_family != AF_UNIX)
		setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(c->fd, (struct sockaddr *)&addr, addrlen) < 0 &&
	    errno != EINPROGRESS) {
		close(c->fd);
		c->fd = -1;
		return -1;
	}
	struct epoll_event e = { .events = EPOLLIN | EPOLLOUT, .data.ptr = c };
	epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &e);
	c->state = 1;
	return 0;
}

static void
kill_conn(struct fc *c)
{
	if (c->fd >= 0) {
		epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
	}
	c->fd = -1;
	c->state = 4;
}

/* Flushes the write buffer; 0 or -1 on error. */
static int
flush(struct fc *c)
{
	while (c->woff < c->wlen) {
		ssize_t w = write(c->fd, c->wbuf + c->woff, c->wlen - c->woff);

		if (w < 0)
			return errno == EAGAIN ? 0 : -1;
		c->woff += (size_t)w;
	}
	c->woff = c->wlen = 0;
	return 0;
}

static int
usage(void)
{
	fprintf(stderr,
	        "usage: spop-flood -a HOST:PORT conns -n N [-H SECS]\n"
	        "       spop-flood -a HOST:PORT notify -n N [-c CONNS] [-P PIPE] [-k] [-m MSG]\n");
	return 2;
}

static int
run_conns(long n, int hold)
{
	struct fc         *cs = calloc((size_t)n, sizeof(*cs));
	struct epoll_event ev[256];
	char               hb[256];
	int                hl = hello(hb, sizeof(hb));
	long               started = 0, inhs = 0, ready = 0, failed = 0;
	double             t0 = now();

	for (long i = 0; i < n; i++) {
		cs[i].fd = -1;
		cs[i].rbuf = NULL;
	}
	while (ready + failed < n && now() < deadline) {
		while (started < n && inhs < MAX_HS) {
			struct fc *c = &cs[started++];

			c->rbuf = malloc(512);
			if (dial(c) < 0) {
				failed++;
				c->state = 4;
				continue;
			}
			inhs++;
		}
		int k = epoll_wait(ep, ev, 256, 100);

		for (int i = 0; i < k; i++) {
			struct fc *c = ev[i].data.ptr;
			int        err = 0;
			socklen_t  el = sizeof(err);

			if (c->state == 1 &&
			    (ev[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
				getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err,
				           &el);
				if (err != 0 ||
				    write(c->fd, hb, (size_t)hl) != hl) {
					kill_conn(c);
					failed++;
					inhs--;
					continue;
				}
				c->state = 2;
				struct epoll_event e = { .events = EPOLLIN,
					                 .data.ptr = c };
				epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &e);
				continue;
			}
			if (c->state == 2 &&
			    (ev[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))) {
				ssize_t r = read(c->fd, c->rbuf + c->rlen,
				                 512 - c->rlen);
				struct spop_frame f;
				int               st;

				if (r <= 0) {
					kill_conn(c);
					failed++;
					inhs--;
					continue;
				}
				c->rlen += (size_t)r;
				int m = spop_decode_frame(c->rbuf, c->rlen, 512,
				                          &f, &st);
				if (m == 0 || m == SPOP_INCOMPLETE)
					continue;
				if (m < 0 || f.type != SPOP_FRM_AGENT_HELLO) {
					kill_conn(c);
					failed++;
					inhs--;
					continue;
				}
				c->state = 3;
				ready++;
				inhs--;
				epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
				free(c->rbuf);
				c->rbuf = NULL;
			}
		}
	}
	printf("ready conns=%ld failed=%ld ms=%.0f\n", ready,
	       failed + (n - ready - failed), (now() - t0) * 1000);
	fflush(stdout);
	double until = now() + hold;
	while (now() < until && now() < deadline)
		usleep(50000);
	for (long i = 0; i < n; i++) {
		if (cs[i].fd >= 0)
			close(cs[i].fd);
		free(cs[i].rbuf);
	}
	printf("closed conns=%ld\n", ready);
	free(cs);
	return ready == n ? 0 : 1;
}

/* A peer that never reads its ACKs: how much does the agent take? */
static int
run_slow(long n, int hold, const char *msg)
{
	struct fc c = { .fd = -1 };
	char      hb[256], buf[512];
	int       hl = hello(hb, sizeof(hb));
	long      sent = 0, bytes = 0;
	double    last;

	if (dial(&c) < 0)
		return 1;
	epoll_ctl(ep, EPOLL_CTL_DEL, c.fd, NULL);
	int fl = fcntl(c.fd, F_GETFL);
	fcntl(c.fd, F_SETFL, fl & ~O_NONBLOCK); /* connect, then HELLO */
	if (write(c.fd, hb, (size_t)hl) != hl ||
	    read(c.fd, buf, sizeof(buf)) <= 0)
		return 1;
	fcntl(c.fd, F_SETFL, fl | O_NONBLOCK);
	last = now();
	int m = 0, off = 0;
	while (sent < n && now() - last < 2 && now() < deadline) {
		if (off == m) {
			m = notify(buf, sizeof(buf), msg, (uint64_t)sent + 1,
			           "slow");
			off = 0;
		}
		ssize_t w = write(c.fd, buf + off, (size_t)(m - off));
		if (w > 0) {
			off += (int)w;
			bytes += w;
			if (off == m)
				sent++;
			last = now();
		} else if (w < 0 && errno != EAGAIN) {
			break;
		} else {
			usleep(10000);
		}
	}
	printf("slow sent=%ld bytes=%ld\n", sent, bytes);
	fflush(stdout);
	double until = now() + hold;
	while (now() < until && now() < deadline)
		usleep(50000);
	close(c.fd);
	return 0;
}

static int
run_notify(long n, int nconns, long pipe, int distinct, const char *msg)
{
	struct fc         *cs = calloc((size_t)nconns, sizeof(*cs));
	struct epoll_event ev[64];
	char               hb[256], tenant[32];
	int                hl = hello(hb, sizeof(hb));
	long   acks = 0, dup = 0, allowed = 0, denied = 0, disc = 0, maxout = 0;
	long   sent = 0, alive = 0;
	double t0 = now();

	for (int i = 0; i < nconns; i++) {
		struct fc *c = &cs[i];

		c->quota = (uint64_t)(n / nconns + (i < n % nconns));
		c->rbuf = malloc(RBUF);
		c->wbuf = malloc(WBUF);
		c->seen = calloc(c->quota + 1, 1);
		if (dial(c) == 0)
			alive++;
	}
	while (alive > 0 && now() < deadline) {
		int k = epoll_wait(ep, ev, 64, 100);

		for (int i = 0; i < k; i++) {
			struct fc *c = ev[i].data.ptr;
			int        err = 0;
			socklen_t  el = sizeof(err);
			long       idx = c - cs;

			if (c->state == 1) {
				getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err,
				           &el);
				if (err != 0 ||
				    write(c->fd, hb, (size_t)hl) != hl) {
					kill_conn(c);
					alive--;
					continue;
				}
				c->state = 2;
				struct epoll_event e = { .events = EPOLLIN,
					                 .data.ptr = c };
				epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &e);
				continue;
			}
			if (ev[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
				ssize_t r = read(c->fd, c->rbuf + c->rlen,
				                 RBUF - c->rlen);

				if (r == 0 || (r < 0 && errno != EAGAIN)) {
					kill_conn(c);
					alive--;
					continue;
				}
				if (r > 0)
					c->rlen += (size_t)r;
				for (;;) {
					struct spop_frame f;
					int st, m = spop_decode_frame(
							c->rbuf, c->rlen,
							RBUF - 4, &f, &st);

					if (m == 0 || m == SPOP_INCOMPLETE)
						break;
					if (m < 0) {
						kill_conn(c);
						alive--;
						break;
					}
					if (f.type == SPOP_FRM_AGENT_HELLO) {
						c->state = 3;
					} else if (f.type ==
					           SPOP_FRM_AGENT_DISCONNECT) {
						disc++;
						kill_conn(c);
						alive--;
						break;
					} else if (f.type == SPOP_FRM_ACK) {
						struct spop_iter it = {
							f.payload,
							f.payload + f.len
						};
						struct spop_str  name;
						struct spop_data v;
						int              act, scope;

						if (f.frame_id >= 1 &&
						    f.frame_id <= c->quota &&
						    c->seen[f.frame_id]++ ==
						            0) {
							acks++;
							c->acked++;
						} else {
							dup++;
						}
						while (spop_next_action(
							       &it, &act,
							       &scope, &name,
							       &v, &st) == 1)
							if (name.len == 6 &&
							    memcmp(name.ptr,
							           "status",
							           6) == 0) {
								if (v.v.i == 0)
									allowed++;
								else
									denied++;
							}
					}
					memmove(c->rbuf, c->rbuf + m,
					        c->rlen - (size_t)m);
					c->rlen -= (size_t)m;
				}
				if (c->state == 4)
					continue;
				if (c->state == 3 && c->acked == c->quota) {
					kill_conn(c);
					alive--;
					continue;
				}
			}
			if (c->state != 3)
				continue;
			/* queue more NOTIFYs: up to the pipeline, while the
			 * buffer has room */
			while (c->next < c->quota && WBUF - c->wlen > 256 &&
			       (pipe <= 0 ||
			        (long)(c->next - c->acked) < pipe)) {
				uint64_t g = (uint64_t)idx +
				             c->next * (uint64_t)nconns;
				if (distinct)
					snprintf(tenant, sizeof(tenant),
					         "k%llu",
					         (unsigned long long)g);
				else
					snprintf(tenant, sizeof(tenant),
					         "flood");
				int m = notify(c->wbuf + c->wlen,
				               WBUF - c->wlen, msg, ++c->next,
				               tenant);
				if (m < 0) {
					c->next--;
					break;
				}
				c->wlen += (size_t)m;
				sent++;
			}
			if ((long)(c->next - c->acked) > maxout)
				maxout = (long)(c->next - c->acked);
			if (flush(c) < 0) {
				kill_conn(c);
				alive--;
				continue;
			}
			struct epoll_event e = {
				.events =
					EPOLLIN |
					(c->wlen > c->woff || c->next < c->quota
				                 ? EPOLLOUT
				                 : 0),
				.data.ptr = c
			};
			epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &e);
		}
	}
	printf("notify sent=%ld acks=%ld missing=%ld dup=%ld allowed=%ld denied=%ld "
	       "disconnects=%ld max_outstanding=%ld ms=%.0f\n",
	       sent, acks, n - acks, dup, allowed, denied, disc, maxout,
	       (now() - t0) * 1000);
	for (int i = 0; i < nconns; i++) {
		if (cs[i].fd >= 0)
			close(cs[i].fd);
		free(cs[i].rbuf);
		free(cs[i].wbuf);
		free(cs[i].seen);
	}
	free(cs);
	return acks == n && dup == 0 ? 0 : 1;
}

int
main(int argc, char **argv)
{
	const char *a = "127.0.0.1:12345", *msg = "rl-request";
	long        n = 1, pipe = 0;
	int         hold = 0, nconns = 1, distinct = 0, slow = 0, total = 60, o;

	while ((o = getopt(argc, argv, "+a:t:")) != -1) {
		switch (o) {
		case 'a':
			a = optarg;
			break;
		case 't':
			total = atoi(optarg);
			break;
		default:
			return usage();
		}
	}
	if (optind >= argc)
		return usage();
	const char *mode = argv[optind];
	optind++;
	while ((o = getopt(argc, argv, "n:H:c:P:km:s")) != -1) {
		switch (o) {
		case 'n':
			n = atol(optarg);
			break;
		case 'H':
			hold = atoi(optarg);
			break;
		case 'c':
			nconns = atoi(optarg);
			break;
		case 'P':
			pipe = atol(optarg);
			break;
		case 'k':
			distinct = 1;
			break;
		case 's':
			slow = 1;
			break;
		case 'm':
			msg = optarg;
			break;
		default:
			return usage();
		}
	}
	if (n < 1 || nconns < 1 || tool_resolve(a, &addr, &addrlen) == -1)
		return usage();
	ep = epoll_create1(0);
	deadline = now() + total;
	if (strcmp(mode, "conns") == 0)
		return run_conns(n, hold);
	if (strcmp(mode, "notify") == 0 && slow)
		return run_slow(n, hold, msg);
	if (strcmp(mode, "notify") == 0)
		return run_notify(n, nconns, pipe, distinct, msg);
	return usage();
}
