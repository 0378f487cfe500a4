/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Redis URLs, for the store: one server (redis://, unix:) or a topology
 * (redis+sentinel://, redis+cluster://) given as a list of seed addresses.
 * Pure string work; nothing here touches the network.
 *
 *   redis://[user[:pass]@]host[:port][/db]
 *   unix:/path/to/socket
 *   redis+sentinel://[user[:pass]@]host[:port][,host[:port]...]/master[?db=N]
 *   redis+cluster://[user[:pass]@]host[:port][,host[:port]...][/]
 *
 * Sentinel ports default to 26379, others to 6379. An IPv6 host is written
 * in brackets: [::1]:26379. The userinfo is for the data nodes (master,
 * cluster nodes), not for the sentinels; it is percent-decoded (a password
 * with '@', ':' or '/' is written %40, %3A, %2F), and the last '@' before
 * the path ends it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "util.h"

static int
copy_part(char *dst, size_t size, const char *s, size_t n)
{
	if (n >= size)
		return -1;
	memcpy(dst, s, n);
	dst[n] = '\0';
	return 0;
}

/* copy_part, percent-decoding %XX; -1 on a bad escape or a %00. */
static int
copy_decoded(char *dst, size_t size, const char *s, size_t n)
{
	return util_pct_decode(s, n, dst, size) == -1 ? -1 : 0;
}

static int
parse_userinfo(const char *s, size_t n, char *user, size_t usize, char *pass,
               size_t psize)
{
	const char *colon = memchr(s, ':', n);

	if (colon == NULL)
		return copy_decoded(pass, psize, s, n);
	if (copy_decoded(user, usize, s, colon - s) == -1)
		return -1;
	return copy_decoded(pass, psize, colon + 1, n - (colon - s) - 1);
}

static int
parse_port(const char *s, const char *end, int *port)
{
	char *e;
	long  v;

	if (s == end)
		return -1;
	errno = 0;
	v = strtol(s, &e, 10);
	if (e != end || errno || v <= 0 || v > 65535)
		return -1;
	*port = (int)v;
	return 0;
}

/* host[:port] or [v6]:port in [s, end). */
static int
parse_hostport(const char *s, const char *end, char *host, size_t hsize,
               int *port)
{
	const char *colon;

	if (s < end && *s == '[') {
		const char *rb = memchr(s, ']', end - s);

		if (rb == NULL ||
		    copy_part(host, hsize, s + 1, rb - s - 1) == -1 ||
		    host[0] == '\0')
			return -1;
		if (rb + 1 == end)
			return 0;
		return rb[1] == ':' ? parse_port(rb + 2, end, port) : -1;
	}
	colon = memchr(s, ':', end - s);
	if (copy_part(host, hsize, s, (colon ? colon : end) - s) == -1 ||
	    host[0] == '\0')
		return -1;
	return colon ? parse_port(colon + 1, end, port) : 0;
}

int
store_parse_url(const char *url, struct store_addr *a)
{
	const char *p, *at, *slash, *end;
	char       *e;
	long        v;

	memset(a, 0, sizeof(*a));
	a->port = 6379;
	if (strncmp(url, "unix:", 5) == 0) {
		p = url + 5;
		while (p[0] == '/' && p[1] == '/')
			p++;
		return *p == '\0' ? -1
		                  : copy_part(a->path, sizeof(a->path), p,
		                              strlen(p));
	}
	if (strncmp(url, "redis://", 8) != 0)
		return -1;
	p = url + 8;
	end = p + strlen(p);
	slash = strchr(p, '/');
	if (slash == NULL)
		slash = end;
	at = memrchr(p, '@', slash - p);
	if (at != NULL) {
		if (parse_userinfo(p, at - p, a->user, sizeof(a->user), a->pass,
		                   sizeof(a->pass)) == -1)
			return -1;
		p = at + 1;
	}
	if (parse_hostport(p, slash, a->host, sizeof(a->host), &a->port) == -1)
		return -1;
	if (*slash == '/' && slash[1] != '\0') {
		v = strtol(slash + 1, &e, 10);
		if (*e != '\0' || v < 0 || v > 1000000)
			return -1;
		a->db = (int)v;
	}
	return 0;
}

/* The comma-separated seed list in [p, end). */
static int
parse_seeds(const char *p, const char *end, int defport, struct store_topo *t)
{
	while (p < end) {
		const char        *comma = memchr(p, ',', end - p);
		struct store_seed *s;

		if (comma == NULL)
			comma = end;
		if (t->nseeds == STORE_MAX_SEEDS)
			return -1;
		s = &t->seeds[t->nseeds++];
		s->port = defport;
		if (parse_hostport(p, comma, s->host, sizeof(s->host),
		                   &s->port) == -1)
			return -1;
		p = comma + 1;
		if (comma + 1 == end) /* a trailing comma */
			return -1;
	}
	return t->nseeds > 0 ? 0 : -1;
}

/* "/master[?db=N]" for sentinel; "", "/" or "/0" for cluster. */
static int
parse_tail(const char *p, struct store_topo *t)
{
	const char *q;
	char       *e;
	long        v;

	if (t->kind == STORE_TOPO_CLUSTER)
		return (*p == '\0' || strcmp(p, "/") == 0 ||
		        strcmp(p, "/0") == 0)
		               ? 0
		               : -1;
	if (*p++ != '/')
		return -1;
	q = strchr(p, '?');
	if (copy_part(t->master, sizeof(t->master), p,
	              q ? (size_t)(q - p) : strlen(p)) == -1 ||
	    t->master[0] == '\0' || strchr(t->master, '/') != NULL)
		return -1;
	if (q == NULL)
		return 0;
	if (strncmp(q, "?db=", 4) != 0)
		return -1;
	errno = 0;
	v = strtol(q + 4, &e, 10);
	if (q[4] == '\0' || *e != '\0' || errno || v < 0 || v > 1000000)
		return -1;
	t->db = (int)v;
	return 0;
}

int
store_parse_topo_url(const char *url, struct store_topo *t)
{
	const char *p, *at, *tail;
	int         defport;

	memset(t, 0, sizeof(*t));
	if (strncmp(url, "redis+sentinel://", 17) == 0) {
		t->kind = STORE_TOPO_SENTINEL;
		p = url + 17;
		defport = 26379;
	} else if (strncmp(url, "redis+cluster://", 16) == 0) {
		t->kind = STORE_TOPO_CLUSTER;
		p = url + 16;
		defport = 6379;
	} else {
		return -1;
	}
	tail = p + strcspn(p, "/?");
	at = memrchr(p, '@', tail - p);
	if (at != NULL) {
		if (parse_userinfo(p, at - p, t->user, sizeof(t->user), t->pass,
		                   sizeof(t->pass)) == -1)
			return -1;
		p = at + 1;
	}
	if (parse_seeds(p, tail, defport, t) == -1)
		return -1;
	return parse_tail(tail, t);
}
