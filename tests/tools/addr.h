/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The test tools' -a ADDR: host:port (any family getaddrinfo() knows; the
 * port may be a number or a service) or unix:/path, resolved once into a
 * sockaddr for connect(). Header-only: each tool is one .c file. Not a
 * parser for the agent's own listen: addresses (server.c).
 */
#ifndef TOOLS_ADDR_H
#define TOOLS_ADDR_H

#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

/* Fills <ss> and <len> from <a>. Returns 0, or -1 if <a> does not
 * resolve. */
static inline int
tool_resolve(const char *a, struct sockaddr_storage *ss, socklen_t *len)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai;
	const char     *colon = strrchr(a, ':');
	char            host[256];

	memset(ss, 0, sizeof(*ss));
	if (strncmp(a, "unix:", 5) == 0) {
		struct sockaddr_un *sun = (struct sockaddr_un *)ss;

		sun->sun_family = AF_UNIX;
		snprintf(sun->sun_path, sizeof(sun->sun_path), "%s", a + 5);
		*len = sizeof(*sun);
		return 0;
	}
	if (colon == NULL)
		return -1;
	snprintf(host, sizeof(host), "%.*s", (int)(colon - a), a);
	if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
		return -1;
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*len = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

#endif
