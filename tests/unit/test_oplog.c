/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of the operations logs: the sampled decision log
 * (agent/decision/declog.c: the line's format and escaping, the sampling rate,
 * one branch when off) and the rate-limited fail-mode log
 * (agent/decision/ratelog.c: once per rule per interval, the suppressed count,
 * its line); log_msg() itself (agent/ops/log.c: a line longer than its
 * buffer stays one line, no escape cut in two, its quote closed and a mark
 * saying it was cut). Log lines are read back from a redirected stderr;
 * the clock is util_now_us, replaced by a fake one.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "declog.h"
#include "log.h"
#include "ratelog.h"
#include "util.h"

/* ---- helpers ------------------------------------------------------------ */

static struct rule rules[3] = {
	{ .name = (char *)"tenant", .index = 0, .fail = FAIL_OPEN },
	{ .name = (char *)"login", .index = 1, .fail = FAIL_CLOSED },
	{ .name = (char *)"ip", .index = 2, .fail = FAIL_LOCAL },
};

static void
set_check(struct check *c, int rule, const char *key, unsigned flags)
{
	memset(c, 0, sizeof(*c));
	c->rule = &rules[rule];
	c->keylen = strlen(key);
	memcpy(c->key, key, c->keylen + 1);
	c->flags = flags;
}

/* Everything the test wrote to stderr (the redirect closes it). */
static char *
read_stderr(void)
{
	static char buf[16384];
	FILE       *f = cr_get_redirected_stderr();
	size_t      n = fread(buf, 1, sizeof(buf) - 1, f);

	buf[n] = '\0';
	return buf;
}

static int
count_str(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

static int64_t fake_now;

static int64_t
fake_clock(void)
{
	return fake_now;
}

/* ---- the decision line -------------------------------------------------- */

Test(declog, formats_an_allowed_request)
{
	struct check   c[1];
	struct outcome o[1] = { { .src = SRC_STORE, .res = { .allowed = 1 } } };
	struct decision d = { .status = 0,
		              .policy = "tenant",
		              .has_limits = 1,
		              .limit = 5,
		              .remaining = 4 };
	char            buf[512];

	set_check(&c[0], 0, "rl:{tenant:acme}", 0);
	declog_format(buf, sizeof(buf), c, o, 1, &d);
	cr_assert_str_eq(
		buf, "status=0 policy=tenant limit=5 remaining=4 degraded=0 "
		     "shadow=0 checks=\"tenant:allowed:rl:{tenant:acme}\"");
}

Test(declog, formats_every_outcome_and_escapes_keys)
{
	struct check   c[5];
	struct outcome o[5] = {
		{ .src = SRC_STORE, .res = { .allowed = 0 } },
		{ .src = SRC_NOT_RUN },
		{ .src = SRC_FAIL_CLOSED },
		{ .src = SRC_STORE, .res = { .allowed = 0 } },
		{ .src = SRC_MISSING },
	};
	struct decision d = { .status = 429,
		              .policy = "tenant",
		              .retry_after = 12,
		              .degraded = 1,
		              .shadow = 1 };
	char            buf[512];

	set_check(&c[0], 0, "rl:{tenant:a c\"\\\n\x7f}", 0);
	set_check(&c[1], 1, "rl:{login:bob}", 0);
	set_check(&c[2], 1, "rl:{login:eve}", 0);
	set_check(&c[3], 2, "rl:{ip:10.0.0.1}", LIM_FL_SHADOW);
	set_check(&c[4], 0, "", 0);
	declog_format(buf, sizeof(buf), c, o, 5, &d);
	cr_assert_str_eq(
		buf,
		"status=429 policy=tenant retry_after=12 degraded=1 "
		"shadow=1 checks=\"tenant:denied:rl:{tenant:a\\x20c\\x22\\x5c"
		"\\x0a\\x7f} login:not_run:rl:{login:bob} "
		"login:degraded:rl:{login:eve} ip:shadow_denied:rl:{ip:10.0.0.1} "
		"tenant:denied:\"");
}

Test(declog, a_cut_line_says_so)
{
	struct check   c[1];
	struct outcome o[1] = { { .src = SRC_STORE, .res = { .allowed = 1 } } };
	struct decision d = { 0 };
	char            buf[48];
	size_t          n;

	set_check(&c[0], 0, "rl:{tenant:a-rather-long-tenant-name-here}", 0);
	n = declog_format(buf, sizeof(buf), c, o, 1, &d);
	cr_assert_lt(n, sizeof(buf));
	cr_assert_eq(strlen(buf), n);
	cr_assert_str_eq(buf + n - 12, " truncated=1", "%s", buf);
	cr_assert_eq(declog_format(buf, 1, c, o, 1, &d), 0);
	cr_assert_eq(buf[0], '\0');
	cr_assert_eq(declog_format(buf, 0, c, o, 1, &d), 0);
}

/* ---- sampling ------------------------------------------------------------ */

Test(declog, draw_zero_never_and_one_always)
{
	declog_seed(42);
	for (int i = 0; i < 100000; i++) {
		cr_assert_eq(declog_draw(0), 0);
		cr_assert_eq(declog_draw(1ULL << 32), 1);
	}
}

Test(declog, draw_rate_follows_the_threshold)
{
	static const double rates[] = { 0.01, 0.25, 0.5 };

	declog_seed(7);
	for (size_t k = 0; k < sizeof(rates) / sizeof(rates[0]); k++) {
		uint64_t thresh = (uint64_t)(rates[k] * 4294967296.0);
		int      hits = 0, n = 200000;

		for (int i = 0; i < n; i++)
			hits += declog_draw(thresh);
		/* 200k draws: the standard deviation is under 0.0012. */
		cr_assert(hits > (rates[k] - 0.006) * n &&
		                  hits < (rates[k] + 0.006) * n,
		          "rate %.2f gave %d of %d", rates[k], hits, n);
	}
}

Test(declog, sample_off_logs_nothing, .init = cr_redirect_stderr)
{
	struct policy  p = { .log_sample_thresh = 0 };
	struct check   c[1];
	struct outcome o[1] = { { .src = SRC_STORE, .res = { .allowed = 1 } } };
	struct decision d = { 0 };

	log_level = LOG_DEBUG;
	set_check(&c[0], 0, "rl:{tenant:acme}", 0);
	for (int i = 0; i < 1000; i++)
		declog_sample(&p, c, o, 1, &d);
	cr_assert_str_eq(read_stderr(), "");
}

Test(declog, sample_all_logs_each_decision_once, .init = cr_redirect_stderr)
{
	struct policy  p = { .log_sample = 1, .log_sample_thresh = 1ULL << 32 };
	struct check   c[1];
	struct outcome o[1] = { { .src = SRC_STORE, .res = { .allowed = 0 } } };
	struct decision d = { .status = 429,
		              .policy = "tenant",
		              .retry_after = 3 };
	const char     *out;

	log_level = LOG_INFO;
	set_check(&c[0], 0, "rl:{tenant:acme}", 0);
	for (int i = 0; i < 3; i++)
		declog_sample(&p, c, o, 1, &d);
	out = read_stderr();
	cr_assert_eq(count_str(out, "\n"), 3, "%s", out);
	cr_assert_eq(
		count_str(out,
	                  " level=info msg=decision status=429 policy=tenant "
	                  "retry_after=3 degraded=0 shadow=0 "
	                  "checks=\"tenant:denied:rl:{tenant:acme}\"\n"),
		3, "%s", out);
}

Test(declog, sample_needs_level_info, .init = cr_redirect_stderr)
{
	struct policy  p = { .log_sample = 1, .log_sample_thresh = 1ULL << 32 };
	struct check   c[1];
	struct outcome o[1] = { { .src = SRC_STORE, .res = { .allowed = 1 } } };
	struct decision d = { 0 };

	log_level = LOG_WARN;
	set_check(&c[0], 0, "rl:{tenant:acme}", 0);
	declog_sample(&p, c, o, 1, &d);
	cr_assert_str_eq(read_stderr(), "");
}

/* ---- rate-limited fail-mode log ----------------------------------------- */

Test(ratelog, once_per_interval_per_rule)
{
	struct ratelog rl = { 0 };
	uint64_t       sup = 99;
	int64_t        t0 = 5 * RATELOG_INTERVAL_US;

	cr_assert_eq(ratelog_allow(&rl, 0, t0, &sup), 1);
	cr_assert_eq(sup, 0);
	for (int i = 1; i <= 4; i++)
		cr_assert_eq(ratelog_allow(&rl, 0, t0 + i * 1000000, &sup), 0);
	/* another rule is not held back by the first */
	cr_assert_eq(ratelog_allow(&rl, 1, t0 + 1, &sup), 1);
	cr_assert_eq(sup, 0);
	cr_assert_eq(ratelog_allow(&rl, 0, t0 + RATELOG_INTERVAL_US - 1, &sup),
	             0);
	cr_assert_eq(ratelog_allow(&rl, 0, t0 + RATELOG_INTERVAL_US, &sup), 1);
	cr_assert_eq(sup, 5, "5 calls refused since the last line, got %llu",
	             (unsigned long long)sup);
	cr_assert_eq(ratelog_allow(&rl, 0, t0 + RATELOG_INTERVAL_US + 1, &sup),
	             0);
	cr_assert_eq(ratelog_allow(&rl, 0, t0 + 3 * RATELOG_INTERVAL_US, &sup),
	             1);
	cr_assert_eq(sup, 1);
}

Test(ratelog, clock_zero_and_indexes_out_of_range)
{
	struct ratelog rl = { 0 };
	uint64_t       sup;

	cr_assert_eq(ratelog_allow(&rl, 3, 0, &sup), 1);
	cr_assert_eq(ratelog_allow(&rl, 3, 1, &sup), 0, "t=0 counts as logged");
	cr_assert_eq(ratelog_allow(&rl, RATELOG_MAX_RULES + 5, 100, &sup), 1);
	cr_assert_eq(ratelog_allow(&rl, -1, 200, &sup), 0,
	             "shares the last slot");
	cr_assert_eq(ratelog_allow(&rl, RATELOG_MAX_RULES - 1, 300, &sup), 0);
}

/* ---- one interval per key for the whole process ------------------------- */

Test(ratelog, shared_once_per_interval_per_key)
{
	static struct ratelog_shared rl = RATELOG_SHARED_INIT;
	uint64_t                     sup = 99;
	int64_t                      t0 = 5 * RATELOG_INTERVAL_US;

	cr_assert_eq(ratelog_shared_allow(&rl, "127.0.0.1:26379", t0, &sup), 1);
	cr_assert_eq(sup, 0);
	for (int i = 1; i <= 3; i++)
		cr_assert_eq(ratelog_shared_allow(&rl, "127.0.0.1:26379",
		                                  t0 + i * 1000000, &sup),
		             0);
	/* another address is not held back by the first */
	cr_assert_eq(ratelog_shared_allow(&rl, "127.0.0.1:26380", t0 + 1, &sup),
	             1);
	cr_assert_eq(ratelog_shared_allow(&rl, "127.0.0.1:26379",
	                                  t0 + RATELOG_INTERVAL_US - 1, &sup),
	             0);
	cr_assert_eq(ratelog_shared_allow(&rl, "127.0.0.1:26379",
	                                  t0 + RATELOG_INTERVAL_US, &sup),
	             1);
	cr_assert_eq(sup, 4, "4 calls refused since the last line, got %llu",
	             (unsigned long long)sup);
}

#define SHARED_THREADS 8
#define SHARED_CALLS   2000

Test(ratelog, addr_keys_host_and_port_together)
{
	static struct ratelog_shared rl = RATELOG_SHARED_INIT;
	uint64_t                     sup = 0;
	int64_t                      t0 = 3 * RATELOG_INTERVAL_US;

	cr_assert_eq(ratelog_addr_allow(&rl, "10.0.0.1", 6379, t0, &sup), 1);
	/* the same address from another caller is the same line's interval */
	cr_assert_eq(ratelog_shared_allow(&rl, "10.0.0.1:6379", t0 + 1, &sup), 0);
	cr_assert_eq(ratelog_addr_allow(&rl, "10.0.0.1", 6380, t0 + 2, &sup), 1);
	cr_assert_eq(ratelog_addr_allow(&rl, "10.0.0.2", 6379, t0 + 3, &sup), 1);
	cr_assert_eq(ratelog_addr_allow(&rl, "10.0.0.1", 6379,
	                                t0 + RATELOG_INTERVAL_US, &sup),
	             1);
	cr_assert_eq(sup, 1);
}

static struct ratelog_shared shared_rl = RATELOG_SHARED_INIT;

/* SHARED_CALLS asks for one key at one instant; returns how many got 1. */
static void *
shared_asker(void *arg)
{
	uint64_t  sup;
	uintptr_t allowed = 0;

	(void)arg;
	for (int i = 0; i < SHARED_CALLS; i++)
		allowed += (uintptr_t)ratelog_shared_allow(
			&shared_rl, "sentinel:26379", RATELOG_INTERVAL_US, &sup);
	return (void *)allowed;
}

Test(ratelog, shared_one_line_for_all_threads)
{
	pthread_t th[SHARED_THREADS];
	uintptr_t allowed = 0;
	uint64_t  sup = 0;

	for (int i = 0; i < SHARED_THREADS; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, shared_asker, NULL), 0);
	for (int i = 0; i < SHARED_THREADS; i++) {
		void *n;

		pthread_join(th[i], &n);
		allowed += (uintptr_t)n;
	}
	cr_assert_eq(allowed, 1, "%ju lines allowed in one interval",
	             (uintmax_t)allowed);
	cr_assert_eq(ratelog_shared_allow(&shared_rl, "sentinel:26379",
	                                  2 * RATELOG_INTERVAL_US, &sup),
	             1);
	cr_assert_eq(sup, SHARED_THREADS * SHARED_CALLS - 1,
	             "every refused call counted once, got %llu",
	             (unsigned long long)sup);
}

Test(ratelog, shared_keys_past_capacity_or_length_share_a_slot)
{
	static struct ratelog_shared rl = RATELOG_SHARED_INIT;
	char                         key[32], longkey[2 * RATELOG_SHARED_KEY_MAX];
	uint64_t                     sup;

	memset(longkey, 'x', sizeof(longkey) - 1);
	longkey[sizeof(longkey) - 1] = '\0';
	cr_assert_eq(ratelog_shared_allow(&rl, longkey, 100, &sup), 1);
	longkey[sizeof(longkey) - 2] = 'y';
	cr_assert_eq(ratelog_shared_allow(&rl, longkey, 100, &sup), 0,
	             "keys that differ past the cut share a slot");
	for (int i = 1; i < RATELOG_SHARED_KEYS; i++) {
		snprintf(key, sizeof(key), "h%d:1", i);
		cr_assert_eq(ratelog_shared_allow(&rl, key, 100, &sup), 1);
	}
	cr_assert_eq(ratelog_shared_allow(&rl, "one-more:1", 200, &sup), 0,
	             "held back with the last slot's key");
	snprintf(key, sizeof(key), "h%d:1", RATELOG_SHARED_KEYS - 2);
	cr_assert_eq(ratelog_shared_allow(&rl, key, 300, &sup), 0,
	             "a known key keeps its own slot");
	cr_assert_eq(ratelog_shared_allow(&rl, "h1:1", RATELOG_INTERVAL_US + 100,
	                                  &sup),
	             1);
}

Test(ratelog, fail_mode_line, .init = cr_redirect_stderr)
{
	int64_t (*saved)(void) = util_now_us;
	const char *out;

	util_now_us = fake_clock;
	log_level = LOG_INFO;
	fake_now = 1000 * RATELOG_INTERVAL_US;
	cr_assert_eq(ratelog_fail_mode(&rules[1], 3, 0), 1);
	cr_assert_eq(ratelog_fail_mode(&rules[1], 3, 0), 0);
	cr_assert_eq(ratelog_fail_mode(&rules[1], 3, 1), 0);
	cr_assert_eq(ratelog_fail_mode(&rules[0], 3, 1), 1);
	fake_now += RATELOG_INTERVAL_US;
	cr_assert_eq(ratelog_fail_mode(&rules[1], 3, 1), 1);
	cr_assert_eq(ratelog_fail_mode(&rules[2], 0, 0), 1);
	log_level = LOG_ERROR;
	fake_now += RATELOG_INTERVAL_US;
	cr_assert_eq(ratelog_fail_mode(&rules[2], 0, 0), 0,
	             "warn lines are off at -q");
	util_now_us = saved;
	out = read_stderr();
	cr_assert_eq(count_str(out, "\n"), 4, "%s", out);
	cr_assert(strstr(out,
	                 " level=warn msg=fail_mode rule=login mode=closed "
	                 "reason=redis_down worker=3 suppressed=0\n"),
	          "%s", out);
	cr_assert(
		strstr(out,
	               " level=warn msg=fail_mode rule=tenant mode=open "
	               "reason=redis_timeout_or_error worker=3 suppressed=0\n"),
		"%s", out);
	cr_assert(
		strstr(out,
	               " level=warn msg=fail_mode rule=login mode=closed "
	               "reason=redis_timeout_or_error worker=3 suppressed=2\n"),
		"%s", out);
	cr_assert(strstr(out, " level=warn msg=fail_mode rule=ip mode=local "
	                      "reason=redis_down worker=0 suppressed=0\n"),
	          "%s", out);
}

/* ---- a cut decision line -------------------------------------------------- */

/* 1 when <s> (one line, no newline) holds only whole \xHH escapes. */
static int
escapes_whole(const char *s)
{
	for (; *s != '\0'; s++) {
		if (*s != '\\')
			continue;
		if (s[1] != 'x' || !strchr("0123456789abcdef", s[2]) ||
		    s[2] == '\0' || !strchr("0123456789abcdef", s[3]) ||
		    s[3] == '\0')
			return 0;
		s += 3;
	}
	return 1;
}

Test(declog, a_cut_line_never_cuts_an_escape_and_says_it_was_cut)
{
	struct check    c[1];
	struct outcome  o[1] = { { .src = SRC_STORE, .res = { .allowed = 0 } } };
	struct decision d = { .status = 429, .policy = "tenant" };
	char            key[200], buf[160];

	memset(key, ' ', sizeof(key) - 1);
	key[sizeof(key) - 1] = '\0';
	set_check(&c[0], 0, key, 0);
	for (size_t size = 100; size <= sizeof(buf); size++) {
		size_t n = declog_format(buf, size, c, o, 1, &d);

		cr_assert_eq(strlen(buf), n);
		cr_assert_lt(n, size);
		cr_assert(escapes_whole(buf), "size %zu: %s", size, buf);
		cr_assert(strstr(buf, "\" truncated=1") != NULL &&
		                  buf[n - 1] == '1',
		          "size %zu: the cut is marked: %s", size, buf);
	}
}

/* ---- log_msg ------------------------------------------------------------ */

Test(log, a_line_too_long_is_cut_with_a_marker_and_its_quote_closed,
     .init = cr_redirect_stderr)
{
	static char big[10240], esc[4 * 10240 + 1];
	size_t      off = 0;
	const char *out;
	int         quotes = 0;

	log_level = LOG_INFO;
	memset(big, ' ', sizeof(big) - 1); /* each one \x20 */
	log_put_escaped(esc, sizeof(esc), &off, big, sizeof(big) - 1);
	esc[off] = '\0';
	for (int shift = 0; shift < 4; shift++)
		log_msg(LOG_INFO, "admin", "%.*saction=x key=\"%s\" status=200",
		        shift, "abc", esc);
	out = read_stderr();
	cr_assert_eq(count_str(out, "\n"), 4, "%s", out);
	cr_assert_eq(count_str(out, " truncated=1\n"), 4,
	             "a cut line says so: %s", out);
	for (const char *p = out; *p; p++)
		quotes += *p == '"';
	cr_assert_eq(quotes % 2, 0, "an opened quote is closed: %s", out);
	cr_assert(escapes_whole(out), "no escape is cut in two: %s", out);
}

Test(log, put_escaped_returns_the_bytes_written_whole)
{
	char   buf[4 * 3 + 1];
	size_t off = 0;

	cr_assert_eq(log_put_escaped(buf, sizeof(buf), &off, "a b", 3), 3);
	cr_assert_eq(off, 6);
	off = 0;
	/* three escapes take 12 bytes and the NUL one more: all fit */
	cr_assert_eq(log_put_escaped(buf, sizeof(buf), &off, "   ", 3), 3);
	off = 0;
	/* a fourth does not: the caller learns it cut the value */
	cr_assert_eq(log_put_escaped(buf, sizeof(buf), &off, "    x", 5), 3);
	cr_assert_eq(off, 12);
	off = 0;
	cr_assert_eq(log_put_escaped(buf, sizeof(buf), &off, "abcdefghijklmn",
	                             14),
	             12);
}

Test(log, escape_value_says_when_it_cut_the_value)
{
	char buf[4 * 3 + 1];

	/* whole: escaped, NUL-terminated, no mark */
	cr_assert_eq(log_escape_value(buf, sizeof(buf), "a b", 3, 8), 0);
	cr_assert_str_eq(buf, "a\\x20b");
	cr_assert_str_eq(LOG_CUT(0), "");
	/* past <max>: the first <max> bytes, cut */
	cr_assert_eq(log_escape_value(buf, sizeof(buf), "abcdef", 6, 4), 1);
	cr_assert_str_eq(buf, "abcd");
	/* <max> bytes exactly: whole */
	cr_assert_eq(log_escape_value(buf, sizeof(buf), "abcd", 4, 4), 0);
	/* within <max> but past <size> once escaped: cut at a whole escape */
	cr_assert_eq(log_escape_value(buf, sizeof(buf), "    ", 4, 100), 1);
	cr_assert_str_eq(buf, "\\x20\\x20\\x20");
	cr_assert_str_eq(LOG_CUT(1), " truncated=1");
	/* empty */
	cr_assert_eq(log_escape_value(buf, sizeof(buf), "", 0, 100), 0);
	cr_assert_str_eq(buf, "");
}

Test(log, text_keeps_spaces_and_escapes_what_could_end_the_value)
{
	struct log_text t;

	cr_assert_str_eq(log_text(&t, "ERR unknown command 'FUNCTION'"),
	                 "ERR unknown command 'FUNCTION'");
	cr_assert_eq(t.cut, 0);
	/* a server's quote, newline or backslash cannot end the quoted value
	 * or start a line of its own */
	cr_assert_str_eq(log_text(&t, "ERR a\"b\nlevel=error c\\d\x01"),
	                 "ERR a\\x22b\\x0alevel=error c\\x5cd\\x01");
	cr_assert_eq(t.cut, 0);
}

Test(log, text_longer_than_its_limit_is_cut_and_says_so)
{
	static char     big[LOG_TEXT_MAX + 2];
	struct log_text t;

	memset(big, 'x', LOG_TEXT_MAX);
	cr_assert_eq(strlen(log_text(&t, big)), LOG_TEXT_MAX);
	cr_assert_eq(t.cut, 0, "exactly the limit is whole");
	big[LOG_TEXT_MAX] = 'y';
	cr_assert_eq(strlen(log_text(&t, big)), LOG_TEXT_MAX);
	cr_assert_eq(t.cut, 1, "one byte over is cut");
	memset(big, '\n', LOG_TEXT_MAX + 1);
	cr_assert_eq(strlen(log_text(&t, big)), 4 * LOG_TEXT_MAX,
	             "every byte escaped still fits");
	cr_assert_eq(t.cut, 1);
}
