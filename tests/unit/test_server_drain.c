/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The server's drain (server_stop) with a request held by a leaky bucket
 * in delay mode whose delay outlasts the drain deadline (SERVER_DRAIN_S,
 * 5 s): a real server with one worker on a unix socket, a client that
 * plays HAProxy on a blocking socket. No Redis: the rule is store: local.
 *
 * HAProxy fails, and never resends, a NOTIFY left unanswered on a
 * connection the agent closes (conn.c's header): every NOTIFY sent before
 * the drain must have its ACK before the connection closes.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "policy.h"
#include "server.h"
#include "spop.h"
#include "util.h"

#define NOTIFYS 8 /* one slot a second: held 0, 1, ... 7 s */

static char sock_path[64];

static struct policy *
load(const char *yaml)
{
	char           path[] = "/tmp/test_server_drain.XXXXXX";
	char          *err = NULL, *warn = NULL;
	struct policy *p;
	int            fd = mkstemp(path);
	FILE          *fp;

	cr_assert(fd >= 0);
	fp = fdopen(fd, "w");
	fputs(yaml, fp);
	fclose(fp);
	p = policy_load_with_warnings(path, &err, &warn);
	unlink(path);
	cr_assert_not_null(p, "policy: %s", err ? err : "");
	free(warn);
	return p;
}

static void
send_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);

		cr_assert(n > 0 || errno == EINTR, "write: %s",
		          strerror(errno));
		if (n > 0) {
			buf += n;
			len -= (size_t)n;
		}
	}
}

static char   in[1 << 16];
static size_t inlen;

/* The next frame from the agent within <until_us> (util_clock_us):
 * its size, 0 at EOF or past the time. */
static int
next_frame(int fd, struct spop_frame *f, int64_t until_us)
{
	for (;;) {
		int           status, n;
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int64_t       left = until_us - util_clock_us();
		ssize_t       got;

		n = spop_decode_frame(in, inlen, 1 << 16, f, &status);
		cr_assert_neq(n, -1, "a bad frame from the agent");
		if (n > 0)
			return n;
		if (left <= 0 || poll(&pfd, 1, (int)(left / 1000) + 1) <= 0)
			return 0;
		got = read(fd, in + inlen, sizeof(in) - inlen);
		if (got <= 0)
			return 0; /* EOF (or reset) */
		inlen += (size_t)got;
	}
}

static void
drop(int n)
{
	memmove(in, in + n, inlen - (size_t)n);
	inlen -= (size_t)n;
}

static void *
stop_thread(void *arg)
{
	server_stop(arg);
	return NULL;
}

static void
cleanup(void)
{
	unlink(sock_path);
}

TestSuite(server_drain, .fini = cleanup, .timeout = 40);

/* A server of one worker on a unix socket, its one rule a local leaky
 * bucket in delay mode at one slot a second; a client connected to it,
 * past the HELLOs, that has sent NOTIFYs 1..<n> to one key and read the
 * first's ACK (not held). */
static struct server *
serve_and_send(int n, int *fdp)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct spop_writer w;
	struct spop_frame  f;
	struct server     *s;
	struct policy     *p;
	char               buf[1024], listen_on[80], *err = NULL;
	int                fd, len;

	log_level = LOG_ERROR;
	signal(SIGPIPE, SIG_IGN);
	snprintf(sock_path, sizeof(sock_path), "/tmp/test_drain.%d.sock",
	         (int)getpid());
	snprintf(listen_on, sizeof(listen_on), "unix:%s", sock_path);
	p = load("redis: { url: \"redis://127.0.0.1:1/0\", timeout: 100ms }\n"
	         "processing_timeout: 30s\n"
	         "rules:\n"
	         "  - { name: slow, message: rl-slow, key: \"slow:{t}\", "
	         "algorithm: leaky-bucket, mode: delay, rate: 1/s, burst: 1, "
	         "max_delay: 20s, store: local }\n");
	s = server_new(p, listen_on, 1, NULL, &err);
	cr_assert_not_null(s, "server_new: %s", err ? err : "");
	policy_unref(p);
	server_start(s);

	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	strcpy(sun.sun_path, sock_path);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_HAPROXY_HELLO, 0, 0);
	spop_w_kv_str(&w, "supported-versions", "2.0", 3);
	spop_w_kv_uint32(&w, "max-frame-size", 16380);
	spop_w_kv_str(&w, "capabilities", "pipelining", 10);
	len = spop_w_end(&w);
	send_all(fd, buf, (size_t)len);
	len = next_frame(fd, &f, util_clock_us() + 3000000);
	cr_assert(len > 0 && f.type == SPOP_FRM_AGENT_HELLO, "no AGENT-HELLO");
	drop(len);
	for (int i = 1; i <= n; i++) {
		spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_NOTIFY, 1,
		             (uint64_t)i);
		spop_w_message(&w, "rl-slow", 1);
		spop_w_name(&w, "t", 1);
		spop_w_str(&w, "k", 1);
		len = spop_w_end(&w);
		send_all(fd, buf, (size_t)len);
	}
	len = next_frame(fd, &f, util_clock_us() + 3000000);
	cr_assert(len > 0 && f.type == SPOP_FRM_ACK && f.frame_id == 1,
	          "the first, not held, is answered at once");
	drop(len);
	*fdp = fd;
	return s;
}

struct drained {
	int    acks;       /* after the drain began */
	int    disconnect; /* the agent's DISCONNECT came */
	double last_ack_s; /* into the drain */
};

/* Stops <s> (as SIGTERM does) and reads what it sends on <fd> until its
 * DISCONNECT, EOF or <within_s>. */
static struct drained
drain(struct server *s, int fd, double within_s)
{
	struct drained    d = { 0 };
	struct spop_frame f;
	pthread_t         stopper;
	int64_t           t0 = util_clock_us();
	int               n;

	cr_assert_eq(pthread_create(&stopper, NULL, stop_thread, s), 0);
	while (!d.disconnect &&
	       (n = next_frame(fd, &f, t0 + (int64_t)(within_s * 1e6))) > 0) {
		if (f.type == SPOP_FRM_ACK) {
			d.acks++;
			d.last_ack_s = (double)(util_clock_us() - t0) / 1e6;
		} else if (f.type == SPOP_FRM_AGENT_DISCONNECT) {
			d.disconnect = 1;
		}
		drop(n);
	}
	close(fd); /* the agent lingers until the peer closes */
	pthread_join(stopper, NULL);
	return d;
}

/* Held 5, 6 and 7 s at SIGTERM: past the 5 s drain deadline. */
Test(server_drain, a_notify_held_past_the_drain_deadline_is_still_answered)
{
	int            fd;
	struct server *s = serve_and_send(NOTIFYS, &fd);
	struct drained d = drain(s, fd, 15.0);

	cr_assert_eq(d.acks, NOTIFYS - 1,
	             "every NOTIFY sent before the drain is answered: %d of "
	             "%d ACKs (last %.2f s into the drain), DISCONNECT %s",
	             d.acks + 1, NOTIFYS, d.last_ack_s,
	             d.disconnect ? "sent" : "never sent");
	cr_assert(d.disconnect, "then the normal DISCONNECT");
	cr_assert_lt(d.last_ack_s, 5.0, "within the drain deadline: %.2f s",
	             d.last_ack_s);
}

/* The drain still waits for a held ACK due before its deadline: the
 * delay is kept when it fits (here 1 and 2 s). */
Test(server_drain, a_notify_held_within_the_drain_deadline_keeps_its_delay)
{
	int            fd;
	struct server *s = serve_and_send(3, &fd);
	struct drained d = drain(s, fd, 10.0);

	cr_assert_eq(d.acks, 2, "%d ACKs", d.acks + 1);
	cr_assert(d.disconnect);
	cr_assert_gt(d.last_ack_s, 1.5, "the 2 s delay was kept: %.2f s",
	             d.last_ack_s);
}
