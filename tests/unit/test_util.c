/* SPDX-License-Identifier: Apache-2.0 */
/*
 * util.c: the integer formatter of the hot path (the script call's
 * arguments, the RateLimit header values) against printf; the loop clock
 * against a fake clock; the agent's clock against the wall clock; the
 * private hash's per-process seed; the percent-decoder; the lingering
 * socket's drain.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

static void
same_as_printf(int64_t v)
{
	char want[32], got[32], *end;

	snprintf(want, sizeof(want), "%" PRId64, v);
	end = util_fmt_int(got, v);
	*end = '\0';
	cr_assert_str_eq(got, want);
}

Test(util, fmt_int_writes_what_printf_writes)
{
	static const int64_t edges[] = { 0,         9,         10,
		                         99,        100,       101,
		                         999,       1000,      4294967296LL,
		                         INT64_MAX, INT64_MIN, INT64_MIN + 1,
		                         -1,        -10,       -100 };
	uint64_t             x = 1;

	for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++)
		same_as_printf(edges[i]);
	for (int64_t v = -1000; v <= 100000; v++)
		same_as_printf(v);
	for (int i = 0; i < 64; i++, x *= 3) { /* every length */
		same_as_printf((int64_t)(x >> 1));
		same_as_printf(-(int64_t)(x >> 1));
	}
}

static int64_t fake_us;

static int64_t
fake_clock(void)
{
	return fake_us;
}

Test(util, loop_clock_holds_the_time_of_the_last_tick)
{
	int64_t (*real)(void) = util_now_us;

	util_now_us = fake_clock;
	fake_us = 1000;
	util_loop_tick();
	fake_us = 1700;
	cr_assert_eq(util_loop_us(), 1000);
	util_loop_tick();
	cr_assert_eq(util_loop_us(), 1700);
	util_loop_untick();
	util_now_us = real;
}

Test(util, loop_clock_reads_the_clock_without_a_tick)
{
	int64_t (*real)(void) = util_now_us;

	util_now_us = fake_clock;
	fake_us = 42;
	cr_assert_eq(util_loop_us(), 42); /* never ticked */
	util_loop_tick();
	util_loop_untick();
	fake_us = 43;
	cr_assert_eq(util_loop_us(), 43); /* ticked, then stopped */
	util_now_us = real;
}

Test(util, redis_clock_is_ours_until_a_reply_then_keeps_its_offset)
{
	int64_t (*real)(void) = util_now_us;

	util_now_us = fake_clock;
	fake_us = 5000000;
	util_loop_tick();
	cr_assert_eq(util_redis_us(), 5000000); /* no reply seen yet */
	util_redis_seen(605000000); /* Redis' host runs 600 s ahead */
	cr_assert_eq(util_redis_us(), 605000000);
	fake_us = 5250000;
	util_loop_tick();
	cr_assert_eq(util_redis_us(), 605250000, "the offset, not the time");
	util_redis_seen(4250000); /* a failover to a host 1 s behind */
	cr_assert_eq(util_redis_us(), 4250000);
	util_loop_untick();
	util_now_us = real;
}

Test(util, clock_counts_from_the_unix_epoch_and_never_steps_back)
{
	int64_t a = util_clock_us(), wall = util_wall_us(), b;

	cr_assert(a - wall < 2000000 && wall - a < 2000000,
	          "within 2 s of the wall clock (%lld against %lld)",
	          (long long)a, (long long)wall);
	for (int i = 0; i < 100000; i++) {
		b = util_clock_us();
		cr_assert(b >= a);
		a = b;
	}
}

/* Names that share the low 10 bits under one seed, found by trying. */
static int
colliding_names(char names[][16], int want)
{
	uint64_t target = util_hash_private("seed-name", 9) & 1023;
	int      n = 0;

	for (int i = 0; n < want && i < 1 << 22; i++) {
		int len = snprintf(names[n], 16, "t%d", i);

		if ((util_hash_private(names[n], (size_t)len) & 1023) == target)
			n++;
	}
	return n;
}

Test(util, private_hash_is_seeded_at_start)
{
	uint64_t h = util_hash_private("acme", 4);

	util_hash_seed(0);
	cr_assert_neq(util_hash_private("acme", 4), h,
	              "the start-up seed is 0, or not used");
}

/* What an attacker finds offline against one seed (names in one probe
 * run of a 1024-slot table) is spread by another. */
Test(util, private_hash_names_crafted_for_one_seed_spread_under_another)
{
	char          names[64][16];
	unsigned char seen[1024] = { 0 };
	int           distinct = 0;

	util_hash_seed(1);
	cr_assert_eq(colliding_names(names, 64), 64);
	util_hash_seed(2);
	for (int i = 0; i < 64; i++) {
		uint64_t b =
			util_hash_private(names[i], strlen(names[i])) & 1023;

		distinct += !seen[b];
		seen[b] = 1;
	}
	cr_assert_geq(distinct, 56, "64 names fell in %d slots", distinct);
}

/* decodes <s> into a buffer of <size> bytes; returns the length, the text
 * in <out> */
static long
pct(const char *s, size_t size, char *out)
{
	return util_pct_decode(s, strlen(s), out, size);
}

Test(util, pct_decode_decodes_escapes_of_either_case)
{
	char out[32];

	cr_assert_eq(pct("a%2fb%2Fc%41%7e+", sizeof(out), out), 8);
	cr_assert_str_eq(out, "a/b/cA~+");
	cr_assert_eq(pct("", sizeof(out), out), 0);
	cr_assert_str_eq(out, "");
	cr_assert_eq(pct("%ff", sizeof(out), out), 1);
	cr_assert_eq((unsigned char)out[0], 0xff);
}

Test(util, pct_decode_refuses_bad_cut_off_and_nul_escapes)
{
	static const char *bad[] = { "%",    "a%",  "a%4",   "%g1", "%1g",
		                     "%%41", "%00", "x%00y", "% 1" };
	char               out[32];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(pct(bad[i], sizeof(out), out), -1, "%s", bad[i]);
}

Test(util, pct_decode_needs_room_for_the_text_and_its_nul)
{
	char out[4] = "zzz";

	cr_assert_eq(pct("abc", 4, out), 3);
	cr_assert_str_eq(out, "abc");
	cr_assert_eq(pct("%41bc", 4, out), 3);
	cr_assert_eq(pct("abcd", 4, out), -1);
	cr_assert_eq(pct("", 0, out), -1);
	cr_assert_eq(util_pct_decode("%41%42", 5, out, 4), -1); /* cut off */
}

/* A non-blocking socket pair: [0] is drained, [1] is the peer. */
static void
drain_pair(int sv[2])
{
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv),
	             0);
}

Test(util, drain_counts_what_it_drops_and_waits_while_the_peer_is_open)
{
	char   junk[10000];
	size_t dropped = 0;
	int    sv[2];

	drain_pair(sv);
	memset(junk, 'x', sizeof(junk));
	cr_assert_eq(write(sv[1], junk, sizeof(junk)), (ssize_t)sizeof(junk));
	cr_assert_eq(util_drain(sv[0], &dropped, 65536), 0);
	cr_assert_eq(dropped, sizeof(junk));
	cr_assert_eq(util_drain(sv[0], &dropped, 65536), 0); /* nothing new */
	cr_assert_eq(dropped, sizeof(junk));
	close(sv[0]);
	close(sv[1]);
}

Test(util, drain_is_done_at_the_peers_eof)
{
	size_t dropped = 0;
	int    sv[2];

	drain_pair(sv);
	cr_assert_eq(write(sv[1], "abc", 3), 3);
	close(sv[1]);
	cr_assert_eq(util_drain(sv[0], &dropped, 65536), 1);
	cr_assert_eq(dropped, 3);
	close(sv[0]);
}

Test(util, drain_is_done_past_its_bound_while_the_peer_still_sends)
{
	char   junk[6000];
	size_t dropped = 4000; /* from an earlier call */
	int    sv[2];

	drain_pair(sv);
	memset(junk, 'x', sizeof(junk));
	cr_assert_eq(write(sv[1], junk, sizeof(junk)), (ssize_t)sizeof(junk));
	cr_assert_eq(util_drain(sv[0], &dropped, 8192), 1);
	cr_assert_gt(dropped, 8192);
	close(sv[0]);
	close(sv[1]);
}
