/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Small helpers every module uses: allocation that cannot fail (OOM is
 * fatal: a limiter that limps on after OOM is worse than one that
 * restarts), clocks, hashes, percent-decoding, draining a socket that
 * lingers, and container_of.
 */
#ifndef UTIL_H
#define UTIL_H

#include <stddef.h>
#include <stdint.h>

#define container_of(ptr, type, member)                                        \
	((type *)(void *)((char *)(ptr)-offsetof(type, member)))
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* Prints "fatal: ..." to stderr and exits 1. */
void fatal(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));

/* Writes the decimal <v> at <p> (at most 20 bytes, no NUL); returns the
 * end. A hot-path replacement for snprintf("%lld"). */
char *util_fmt_int(char *p, int64_t v);

/* Percent-decodes <s,n> (%XX, either case) into <out>, which has room for
 * <size> bytes, and NUL-terminates it. Returns the decoded length, or -1
 * on a bad or cut-off escape, a %00, or too little room. Nothing else is
 * checked: what a caller refuses besides is the caller's. */
long util_pct_decode(const char *s, size_t n, char *out, size_t size);

/* Reads and drops what the non-blocking <fd> holds, adding the count to
 * *<dropped>. Returns 1 once the caller is done with <fd>: the peer's EOF,
 * a read error, or more than <max> bytes dropped in all; 0 while the peer
 * may still send (EAGAIN). For a connection that has answered and now
 * reads to the peer's EOF, so that its close does not reset the answer
 * away. */
int util_drain(int fd, size_t *dropped, size_t max);

/* FNV-1a, 64 bits, of <n> bytes at <s>: for in-memory tables and names,
 * not against an adversary who picks the keys. */
uint64_t util_fnv1a(const char *s, size_t n);

/* A hash of <n> bytes at <s> for the in-memory tables indexed by client
 * values (tenants, local-tier keys): FNV-1a from a basis drawn at random
 * per process, then mixed, so that names crafted offline do not pile up
 * in one probe run. Differs from one run to the next: never stored, never
 * sent. */
uint64_t util_hash_private(const char *s, size_t n);
/* Replaces the seed drawn at start (tests). */
void util_hash_seed(uint64_t seed);

/* The agent's clock in µs: util_clock_us() unless a test replaces it.
 * util_clock_us() is the monotonic clock moved onto the Unix epoch once,
 * at its first read: it never steps back, and the local tier's windows
 * (epoch-aligned, the UTC day, the calendar month: lim_window_bounds)
 * fall where Redis' TIME puts them, give or take the wall clock's drift
 * since the agent started. */
extern int64_t (*util_now_us)(void);
int64_t util_clock_us(void);
int64_t util_monotonic_us(void);
/* The calling thread's util_now_us() as of its last util_loop_tick(): a
 * worker ticks once per loop iteration, after the poll, so a request's
 * time stamps cost one clock read per wake-up instead of four per request
 * (clock_gettime was 5 % of a worker's CPU under load). It lags the clock
 * by at most the iteration's own work. A thread that never ticked (or
 * after util_loop_untick()) reads the clock itself. */
int64_t util_loop_us(void);
void    util_loop_tick(void);
void    util_loop_untick(void);
/* Redis' clock as the calling thread last saw it. util_redis_seen() takes
 * the time (µs) a decision script reported for its call, with
 * util_loop_us() as the moment its reply came; util_redis_us() is
 * util_loop_us() moved by that offset, util_loop_us() itself before any.
 * It runs behind Redis by the reply's time in transit (a round trip at
 * most), and follows a host whose wall clock differs from Redis' host's
 * or was stepped since the agent started: what a time Redis wrote (an
 * override's end) is compared with. */
void    util_redis_seen(int64_t redis_us);
int64_t util_redis_us(void);
/* Wall-clock time in µs since the epoch. */
int64_t util_wall_us(void);

#endif
