/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis-paced: one Redis command per request, sent open loop at a fixed
 * rate, for tests/bench/run.sh. It plays the naive design (one script call
 * per decision) at the moderate rate where the agent is measured paced, so
 * that Redis' CPU per decision is compared at the same rate, not against
 * redis-benchmark's saturated pipeline.
 *
 *   redis-paced -p PORT [-c CONNS] -R RATE [-d SECS] [-k KEYS] -- ARG...
 *
 * Request k is due at start + k/RATE and goes on connection k mod CONNS as
 * soon as it is due; requests due in the same wake-up (at least 50 µs
 * apart, as spop-bench) go in one write per connection, as an agent
 * writes what one loop turn produced. In each ARG, "__rand_int__" is
 * replaced by a random number below KEYS (as redis-benchmark -r does).
 * Replies are parsed with hiredis' reader; latency counts from the due
 * time, so a slow Redis shows up as latency.
 *
 * Output: one line of name=value pairs (sent, replies, errors, skipped,
 * per_s, p50_us, p99_us). Loopback use only; it stops by itself SECS
 * seconds after the start, plus at most 2 s for the last replies. It is
 * not a general client: it counts Redis' error replies and reads nothing
 * else of a reply, and a lost connection ends the run (lost=1).
 */
#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <hiredis/hiredis.h>
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

#define MAXCONNS        256
#define RING            4096 /* due times of the requests in flight */
#define WBUF            (256 * 1024)
#define HIST_US         100000 /* latency histogram: 1 µs buckets to 100 ms */
#define MAXARGS         64
#define ARGMAX          128 /* an arg with the placeholder, once made concrete */
#define PLACEHOLDER     "__rand_int__"
#define PLACEHOLDER_LEN (sizeof(PLACEHOLDER) - 1)

struct pconn {
	int          fd;
	redisReader *rd;
	int64_t      due[RING]; /* FIFO: Redis answers in order */
	unsigned     head, tail;
	char        *wbuf;
	size_t       wlen;
};

static struct pconn conns[MAXCONNS];
static int          nconns = 4, port, nargs, keys = 10000;
static double       rate;
static int          secs = 5;
static char        *args[MAXARGS];
static int          rand_at[MAXARGS]; /* the placeholder's offset, or -1 */
static uint32_t    *hist;
static uint64_t     sent, replies, errors, skipped, rng = 88172645463325252ULL;

static int64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t
xorshift(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static int
conn_open(struct pconn *c, int ep)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
		                  .sin_port = htons((uint16_t)port),
		                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
	int                one = 1;

	c->fd = socket(AF_INET, SOCK_STREAM, 0);
	if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -1;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->rd = redisReaderCreate();
	c->wbuf = malloc(WBUF);
	if (c->rd == NULL || c->wbuf == NULL)
		return -1;
	return epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
}

/* Appends one command, its "__rand_int__" args made concrete. */
static void
queue_cmd(struct pconn *c, int64_t due)
{
	char               bufs[MAXARGS][ARGMAX];
	const char        *argv[MAXARGS];
	char              *cmd;
	long long          len;
	unsigned long long num = xorshift() % (uint64_t)keys;

	for (int i = 0; i < nargs; i++) {
		argv[i] = args[i];
		if (rand_at[i] < 0)
			continue;
		snprintf(bufs[i], sizeof(bufs[i]), "%.*s%llu%s", rand_at[i],
		         args[i], num, args[i] + rand_at[i] + PLACEHOLDER_LEN);
		argv[i] = bufs[i];
	}
	len = redisFormatCommandArgv(&cmd, nargs, argv, NULL);
	if (len < 0 || c->tail - c->head == RING ||
	    c->wlen + (size_t)len > WBUF) {
		skipped++;
		if (len >= 0)
			redisFreeCommand(cmd);
		return;
	}
	memcpy(c->wbuf + c->wlen, cmd, (size_t)len);
	c->wlen += (size_t)len;
	c->due[c->tail++ % RING] = due;
	sent++;
	redisFreeCommand(cmd);
}

static int
conn_flush(struct pconn *c)
{
	size_t off = 0;

	while (off < c->wlen) {
		ssize_t n = write(c->fd, c->wbuf + off, c->wlen - off);

		if (n < 0 && errno == EINTR)
			continue;
		/* a blocking socket: 0 or an error is a lost connection */
		if (n <= 0)
			return -1;
		off += (size_t)n;
	}
	c->wlen = 0;
	return 0;
}

static void
record(int64_t lat_ns)
{
	int64_t us = lat_ns / 1000;

	hist[us < 0 ? 0 : us >= HIST_US ? HIST_US - 1 : us]++;
}

static int
conn_read(struct pconn *c, int64_t now, int64_t t_meas)
{
	char    buf[16384];
	ssize_t n = read(c->fd, buf, sizeof(buf));
	void   *r;

	if (n <= 0)
		return n < 0 && errno == EINTR ? 0 : -1;
	if (redisReaderFeed(c->rd, buf, (size_t)n) != REDIS_OK)
		return -1;
	while (redisReaderGetReply(c->rd, &r) == REDIS_OK && r != NULL) {
		redisReply *rep = r;
		int64_t     due;

		assert(c->head != c->tail);
		due = c->due[c->head++ % RING];
		replies++;
		if (rep->type == REDIS_REPLY_ERROR)
			errors++;
		if (due >= t_meas)
			record(now - due);
		freeReplyObject(rep);
	}
	return 0;
}

static double
pct(double q)
{
	uint64_t total = 0, acc = 0, want;

	for (int i = 0; i < HIST_US; i++)
		total += hist[i];
	if (total == 0)
		return 0;
	want = (uint64_t)((double)total * q);
	for (int i = 0; i < HIST_US; i++) {
		acc += hist[i];
		if (acc > want)
			return i;
	}
	return HIST_US;
}

static void
usage(void)
{
	fprintf(stderr,
	        "usage: redis-paced -p PORT [-c CONNS] -R RATE [-d SECS]"
	        " [-k KEYS] -- ARG...\n");
	exit(2);
}

static void
parse_args(int argc, char **argv)
{
	int ch;

	while ((ch = getopt(argc, argv, "p:c:R:d:k:")) != -1) {
		switch (ch) {
		case 'p':
			port = atoi(optarg);
			break;
		case 'c':
			nconns = atoi(optarg);
			break;
		case 'R':
			rate = atof(optarg);
			break;
		case 'd':
			secs = atoi(optarg);
			break;
		case 'k':
			keys = atoi(optarg);
			break;
		default:
			usage();
		}
	}
	nargs = argc - optind;
	if (port <= 0 || port > 65535 || nconns < 1 || nconns > MAXCONNS ||
	    rate <= 0 || secs < 1 || keys < 1 || nargs < 1 || nargs > MAXARGS)
		usage();
	for (int i = 0; i < nargs; i++) {
		const char *at = strstr(argv[optind + i], PLACEHOLDER);

		args[i] = argv[optind + i];
		rand_at[i] = at == NULL ? -1 : (int)(at - args[i]);
		if (at != NULL && strlen(args[i]) + 20 >= ARGMAX) {
			fprintf(stderr,
			        "redis-paced: an argument with " PLACEHOLDER
			        " is over %d bytes\n",
			        ARGMAX - 21);
			exit(2);
		}
	}
}

/* Sends what is due, round robin, one write per connection. */
static int
send_due(int64_t t0, int64_t now, uint64_t *k)
{
	uint64_t due = (uint64_t)((double)(now - t0) * rate / 1e9) + 1;

	for (; *k < due; (*k)++)
		queue_cmd(&conns[*k % (uint64_t)nconns],
		          t0 + (int64_t)((double)*k * 1e9 / rate));
	for (int i = 0; i < nconns; i++)
		if (conns[i].wlen > 0 && conn_flush(&conns[i]) < 0)
			return -1;
	return 0;
}

static int
in_flight(void)
{
	for (int i = 0; i < nconns; i++)
		if (conns[i].head != conns[i].tail)
			return 1;
	return 0;
}

/* The loop: SECS of paced sending (the first second is a warm-up, not
 * counted), then up to 2 s for the replies still due. */
static int
run(int ep)
{
	struct epoll_event evs[MAXCONNS];
	int64_t            t0 = now_ns(), t_meas = t0 + 1000000000LL;
	int64_t            t_end = t0 + (int64_t)secs * 1000000000LL;
	uint64_t           k = 0;

	for (;;) {
		int64_t now = now_ns(), wait_us;
		int     n;

		/* the last wake-up of the run may come late on a busy host:
		 * what fell due before the end still goes, so that a run
		 * sends exactly RATE x SECS (their latency counts from
		 * their due times) */
		if (send_due(t0, now < t_end ? now : t_end - 1, &k) < 0)
			return -1;
		if (now >= t_end &&
		    (!in_flight() || now >= t_end + 2000000000LL))
			return 0;
		wait_us = now < t_end ? (int64_t)((t0 + (double)k * 1e9 / rate -
		                                   now) /
		                                  1000)
		                      : 1000;
		if (wait_us < 50)
			wait_us = 50;
		if (wait_us > 1000)
			wait_us = 1000;
		struct timespec ts = { 0, wait_us * 1000 };

		n = epoll_pwait2(ep, evs, MAXCONNS, &ts, NULL);
		if (n < 0 && errno == ENOSYS)
			n = epoll_wait(ep, evs, MAXCONNS, 1);
		now = now_ns();
		for (int i = 0; i < n; i++)
			if (conn_read(evs[i].data.ptr, now, t_meas) < 0)
				return -1;
	}
}

int
main(int argc, char **argv)
{
	int ep, rc;

	parse_args(argc, argv);
	hist = calloc(HIST_US, sizeof(*hist));
	ep = epoll_create1(0);
	if (hist == NULL || ep < 0)
		return 1;
	for (int i = 0; i < nconns; i++)
		if (conn_open(&conns[i], ep) < 0) {
			fprintf(stderr, "redis-paced: 127.0.0.1:%d: %s\n", port,
			        strerror(errno));
			return 1;
		}
	rc = run(ep);
	printf("sent=%llu replies=%llu errors=%llu skipped=%llu per_s=%.0f "
	       "p50_us=%.0f p99_us=%.0f%s\n",
	       (unsigned long long)sent, (unsigned long long)replies,
	       (unsigned long long)errors, (unsigned long long)skipped,
	       (double)replies / secs, pct(0.50), pct(0.99),
	       rc < 0 ? " lost=1" : "");
	for (int i = 0; i < nconns; i++) {
		close(conns[i].fd);
		redisReaderFree(conns[i].rd);
		free(conns[i].wbuf);
	}
	free(hist);
	close(ep);
	return rc < 0 || replies == 0;
}
