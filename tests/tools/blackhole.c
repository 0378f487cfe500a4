/* SPDX-License-Identifier: Apache-2.0 */
/*
 * blackhole: a TCP listener on 127.0.0.1 whose connects never complete,
 * for the integration tests (a Redis host that drops SYNs, as a firewall
 * or a dead host does). It listens with a backlog of 0 and never accepts,
 * fills that backlog with its own connects, so that the kernel drops the
 * SYNs of every later client, prints "ready", and holds on for SECS
 * seconds (or until SIGTERM). With -u it binds a UDP port instead and
 * never reads it: a DNS server that never answers.
 *
 *   blackhole [-u] PORT [SECS]
 *
 * It does not speak any protocol; loopback only.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define FILL 8 /* our own connects: more than any backlog of 0 holds */

static int
loopback(int port, struct sockaddr_in *sa, int type)
{
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)port);
	sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return socket(AF_INET, type, 0);
}

/* -u: a bound UDP socket nobody reads; what is sent to it is lost. */
static int
udp_sink(int port, int secs)
{
	struct sockaddr_in sa;
	int                s = loopback(port, &sa, SOCK_DGRAM);

	if (s == -1 || bind(s, (struct sockaddr *)&sa, sizeof(sa)) == -1) {
		perror("blackhole: udp bind");
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	sleep((unsigned)secs);
	return 0;
}

int
main(int argc, char **argv)
{
	struct sockaddr_in sa;
	int                port, secs, one = 1, l,
			udp = argc > 1 && strcmp(argv[1], "-u") == 0;

	argc -= udp;
	argv += udp;
	if (argc < 2 || (port = atoi(argv[1])) <= 0 || port > 65535) {
		fprintf(stderr, "usage: blackhole [-u] PORT [SECS]\n");
		return 2;
	}
	secs = argc > 2 ? atoi(argv[2]) : 60;
	if (udp)
		return udp_sink(port, secs);
	l = loopback(port, &sa, SOCK_STREAM);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (l == -1 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) == -1 ||
	    listen(l, 0) == -1) {
		perror("blackhole: listen");
		return 1;
	}
	for (int i = 0; i < FILL; i++) {
		int c = loopback(port, &sa, SOCK_STREAM);

		fcntl(c, F_SETFL, O_NONBLOCK);
		connect(c, (struct sockaddr *)&sa,
		        sizeof(sa)); /* EINPROGRESS */
	}
	printf("ready\n");
	fflush(stdout);
	sleep((unsigned)secs);
	return 0;
}
