/* SPDX-License-Identifier: Apache-2.0 */
/*
 * xmalloc and friends, the clocks, the hashes and percent-decoding. OOM is
 * fatal by design; nothing here logs through log.c so that log.c may use it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

int64_t (*util_now_us)(void) = util_clock_us;

void
fatal(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("fatal: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

void *
xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (p == NULL)
		fatal("out of memory allocating %zu bytes", n);
	return p;
}

void *
xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (p == NULL)
		fatal("out of memory allocating %zu x %zu bytes", n, size);
	return p;
}

void *
xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (p == NULL)
		fatal("out of memory reallocating %zu bytes", n);
	return p;
}

char *
xstrndup(const char *s, size_t n)
{
	char *d = xmalloc(n + 1);

	memcpy(d, s, n);
	d[n] = '\0';
	return d;
}

char *
xstrdup(const char *s)
{
	return xstrndup(s, strlen(s));
}

int64_t
util_monotonic_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t        epoch_shift; /* wall - monotonic, at the first read */
static pthread_once_t epoch_once = PTHREAD_ONCE_INIT;

static void
epoch_init(void)
{
	epoch_shift = util_wall_us() - util_monotonic_us();
}

int64_t
util_clock_us(void)
{
	pthread_once(&epoch_once, epoch_init);
	return util_monotonic_us() + epoch_shift;
}

static _Thread_local int64_t loop_us;

int64_t
util_loop_us(void)
{
	return loop_us != 0 ? loop_us : util_now_us();
}

void
util_loop_tick(void)
{
	loop_us = util_now_us();
}

void
util_loop_untick(void)
{
	loop_us = 0;
}

static _Thread_local int64_t redis_shift; /* Redis' clock - ours */

void
util_redis_seen(int64_t redis_us)
{
	redis_shift = redis_us - util_loop_us();
}

int64_t
util_redis_us(void)
{
	return util_loop_us() + redis_shift;
}

int64_t
util_wall_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* "00" to "99": two digits per division. */
static const char digits2[] =
	"00010203040506070809101112131415161718192021222324252627282930313233"
	"34353637383940414243444546474849505152535455565758596061626364656667"
	"6869707172737475767778798081828384858687888990919293949596979899";

char *
util_fmt_int(char *p, int64_t v)
{
	char     tmp[24], *q = tmp + sizeof(tmp);
	uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
	size_t   n;

	if (v < 0)
		*p++ = '-';
	while (u >= 100) {
		unsigned d = (unsigned)(u % 100) * 2;

		u /= 100;
		*--q = digits2[d + 1];
		*--q = digits2[d];
	}
	if (u >= 10) {
		*--q = digits2[u * 2 + 1];
		*--q = digits2[u * 2];
	} else {
		*--q = (char)('0' + u);
	}
	n = (size_t)(tmp + sizeof(tmp) - q);
	memcpy(p, q, n);
	return p + n;
}

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

long
util_pct_decode(const char *s, size_t n, char *out, size_t size)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		int c = (unsigned char)s[i];

		if (c == '%') {
			int hi, lo;

			if (i + 2 >= n)
				return -1;
			hi = hexval(s[i + 1]);
			lo = hexval(s[i + 2]);
			if (hi < 0 || lo < 0 || (c = hi << 4 | lo) == 0)
				return -1;
			i += 2;
		}
		if (o + 1 >= size)
			return -1;
		out[o++] = (char)c;
	}
	if (size == 0)
		return -1;
	out[o] = '\0';
	return (long)o;
}

int
util_drain(int fd, size_t *dropped, size_t max)
{
	char    buf[4096];
	ssize_t n;

	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		*dropped += (size_t)n;
		if (*dropped > max)
			return 1;
	}
	return n == 0 ||
	       (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

uint64_t
util_fnv1a(const char *s, size_t n)
{
	uint64_t h = 14695981039346656037ULL;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
	return h;
}

static uint64_t hash_seed;

__attribute__((constructor)) static void
hash_seed_init(void)
{
	if (getrandom(&hash_seed, sizeof(hash_seed), GRND_NONBLOCK) !=
	    (ssize_t)sizeof(hash_seed))
		hash_seed =
			(uint64_t)util_monotonic_us() * 0x9e3779b97f4a7c15ULL;
}

void
util_hash_seed(uint64_t seed)
{
	hash_seed = seed;
}

uint64_t
util_hash_private(const char *s, size_t n)
{
	uint64_t h = 14695981039346656037ULL ^ hash_seed;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
	h ^= hash_seed;
	h ^= h >> 33; /* spread the low bits for a mask */
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return h;
}
