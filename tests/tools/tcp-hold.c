/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tcp-hold: a slowloris, for the integration tests. It keeps N
 * connections open to ADDR and sends nothing on them; whenever the server
 * closes one, it connects again at once. Prints "ready" once N are open,
 * then "reconnects=R" when SECS have passed.
 *
 *   tcp-hold ADDR N SECS
 *
 * Blocking connects, one poll() over all of them; loopback only.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "addr.h"

#define HOLD_MAX 1000

static struct sockaddr_storage ss;
static socklen_t               sslen;

static int
open_one(void)
{
	int fd = socket(ss.ss_family, SOCK_STREAM, 0);

	if (fd != -1 && connect(fd, (struct sockaddr *)&ss, sslen) == -1) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int
main(int argc, char **argv)
{
	static struct pollfd p[HOLD_MAX];
	long                 reconnects = 0;
	double               end;
	int                  n;

	if (argc != 4 || tool_resolve(argv[1], &ss, &sslen) == -1 ||
	    (n = atoi(argv[2])) < 1 || n > HOLD_MAX) {
		fprintf(stderr, "usage: tcp-hold ADDR N SECS (N <= %d)\n",
		        HOLD_MAX);
		return 2;
	}
	end = now_s() + atof(argv[3]);
	for (int i = 0; i < n; i++) {
		p[i].fd = open_one();
		p[i].events = POLLIN;
	}
	printf("ready\n");
	fflush(stdout);
	while (now_s() < end) {
		if (poll(p, (nfds_t)n, 100) < 0)
			break;
		for (int i = 0; i < n; i++) {
			char b[256];

			if (p[i].fd != -1 && p[i].revents == 0)
				continue;
			if (p[i].fd != -1 && read(p[i].fd, b, sizeof(b)) > 0)
				continue; /* the server said something: fine */
			if (p[i].fd != -1)
				close(p[i].fd);
			p[i].fd = open_one(); /* closed, or never opened */
			reconnects++;
		}
	}
	printf("reconnects=%ld\n", reconnects);
	return 0;
}
