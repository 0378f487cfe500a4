/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis-fake: two loopback ports that play Redis Cluster nodes badly, for
 * the integration tests that need a slot map no real cluster would give.
 *
 *   redis-fake ANSWER_PORT SILENT_PORT MAPFILE SECS
 *
 * ANSWER_PORT speaks just enough RESP: CLUSTER SLOTS answers the map in
 * MAPFILE (read again at every call; one "LO HI HOST PORT" line per
 * range), SCRIPT LOAD a sha of zeros, HGET nil, PING PONG, and anything
 * else an error. SILENT_PORT accepts connections, reads them and never
 * answers: a stopped node whose TCP is still up. Prints "ready", and
 * exits after SECS seconds.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "resp_cmd.h"

#define FAKE_MAX_FDS 128
#define FAKE_BUF     65536

struct client {
	int    silent;
	size_t len;
	char   buf[FAKE_BUF];
};

static const char *mapfile;

static int
listen_on(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int                one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);

	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd == -1 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == -1 ||
	    listen(fd, 64) == -1) {
		perror("redis-fake: listen");
		exit(1);
	}
	return fd;
}

static void
send_str(int fd, const char *s, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, s, n);

		if (w <= 0)
			return;
		s += w;
		n -= (size_t)w;
	}
}

static void
slots_reply(int fd)
{
	char   line[256], host[128], out[8192], row[512];
	long   lo, hi, port;
	int    rows = 0;
	size_t o = 0;
	FILE  *f = fopen(mapfile, "r");

	while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
		if (sscanf(line, "%ld %ld %127s %ld", &lo, &hi, host, &port) !=
		    4)
			continue;
		int n = snprintf(row, sizeof(row),
		                 "*3\r\n:%ld\r\n:%ld\r\n*3\r\n"
		                 "$%zu\r\n%s\r\n:%ld\r\n$4\r\nfake\r\n",
		                 lo, hi, strlen(host), host, port);
		if (o + (size_t)n >= sizeof(out))
			break;
		memcpy(out + o, row, (size_t)n);
		o += (size_t)n;
		rows++;
	}
	if (f != NULL)
		fclose(f);
	snprintf(row, sizeof(row), "*%d\r\n", rows);
	send_str(fd, row, strlen(row));
	send_str(fd, out, o);
}

static void
answer(int fd, int argc, const char **a, const size_t *l)
{
	static const char sha[] =
		"$40\r\n"
		"0000000000000000000000000000000000000000\r\n";

	if (argc == 0)
		send_str(fd, "-ERR fake\r\n", 11);
	else if (argc >= 2 && resp_is(a[0], l[0], "CLUSTER") &&
	         resp_is(a[1], l[1], "SLOTS"))
		slots_reply(fd);
	else if (resp_is(a[0], l[0], "SCRIPT"))
		send_str(fd, sha, sizeof(sha) - 1);
	else if (resp_is(a[0], l[0], "HGET"))
		send_str(fd, "$-1\r\n", 5);
	else if (resp_is(a[0], l[0], "PING"))
		send_str(fd, "+PONG\r\n", 7);
	else
		send_str(fd, "-ERR fake\r\n", 11);
}

/* Reads what <fd> sent and answers every whole command; -1 once closed. */
static int
serve(int fd, struct client *c)
{
	ssize_t     r = read(fd, c->buf + c->len, sizeof(c->buf) - c->len);
	const char *a[2];
	size_t      l[2], off = 0;
	long        used;
	int         argc;

	if (r <= 0)
		return -1;
	if (c->silent)
		return 0;
	c->len += (size_t)r;
	while ((used = resp_cmd(c->buf + off, c->len - off, 2, &argc, a, l)) >
	       0) {
		answer(fd, argc, a, l);
		off += (size_t)used;
	}
	if (used < 0 || (off == 0 && c->len == sizeof(c->buf)))
		return -1;
	memmove(c->buf, c->buf + off, c->len - off);
	c->len -= off;
	return 0;
}

int
main(int argc, char **argv)
{
	static struct pollfd  p[FAKE_MAX_FDS];
	static struct client *cl[FAKE_MAX_FDS];
	time_t                end;
	int                   n = 2;

	if (argc != 5) {
		fprintf(stderr,
		        "usage: redis-fake ANSWER_PORT SILENT_PORT MAPFILE SECS\n");
		return 2;
	}
	mapfile = argv[3];
	end = time(NULL) + atoi(argv[4]);
	p[0].fd = listen_on(atoi(argv[1]));
	p[1].fd = listen_on(atoi(argv[2]));
	p[0].events = p[1].events = POLLIN;
	printf("ready\n");
	fflush(stdout);
	while (time(NULL) < end) {
		if (poll(p, (nfds_t)n, 100) < 0)
			break;
		for (int i = 0; i < 2; i++) {
			int fd;

			if (!(p[i].revents & POLLIN) ||
			    (fd = accept(p[i].fd, NULL, NULL)) == -1)
				continue;
			if (n == FAKE_MAX_FDS) {
				close(fd);
				continue;
			}
			cl[n] = calloc(1, sizeof(*cl[n]));
			cl[n]->silent = i == 1;
			p[n].fd = fd;
			p[n].events = POLLIN;
			p[n].revents = 0;
			n++;
		}
		for (int i = 2; i < n; i++) {
			if (p[i].revents == 0 || serve(p[i].fd, cl[i]) == 0)
				continue;
			close(p[i].fd);
			free(cl[i]);
			n--;
			p[i] = p[n];
			cl[i] = cl[n];
			i--;
		}
	}
	return 0;
}
