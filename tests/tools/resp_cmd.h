/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The test fakes' RESP command reader: one "*N\r\n$L\r\n...\r\n" command,
 * as a client sends it, cut into its first arguments. Header-only, shared
 * by the stand-alone redis-fake tool and the unit tests' in-process fake
 * (tests/unit/fake_redis.h). Not a RESP parser for replies, and not the
 * agent's: the agent reads replies only, through hiredis.
 */
#ifndef TOOLS_RESP_CMD_H
#define TOOLS_RESP_CMD_H

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Reads one command at <p> (<n> bytes): returns its size, 0 if it is
 * incomplete, -1 if it is not RESP. Its first <max> arguments go to
 * <a>,<l>, and *<argc> says how many of them there are. */
static inline long
resp_cmd(const char *p, size_t n, int max, int *argc, const char **a, size_t *l)
{
	const char *end = p + n, *q = p, *e;
	long        k;

	*argc = 0;
	if (n == 0)
		return 0;
	if (*q != '*')
		return -1;
	if ((e = memchr(q, '\n', (size_t)(end - q))) == NULL)
		return 0;
	k = strtol(q + 1, NULL, 10);
	q = e + 1;
	for (long i = 0; i < k; i++) {
		long len;

		if (q >= end)
			return 0;
		if (*q != '$')
			return -1;
		if ((e = memchr(q, '\n', (size_t)(end - q))) == NULL)
			return 0;
		len = strtol(q + 1, NULL, 10);
		q = e + 1;
		if (len < 0)
			return -1;
		if (end - q < len + 2)
			return 0;
		if (i < max) {
			a[i] = q;
			l[i] = (size_t)len;
			*argc = (int)i + 1;
		}
		q += len + 2;
	}
	return q - p;
}

/* Whether the argument <a,l> is <word>, in any case. */
static inline int
resp_is(const char *a, size_t l, const char *word)
{
	return l == strlen(word) && strncasecmp(a, word, l) == 0;
}

#endif
