/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reply: the agent's reply objects behind a hiredis reader, as store.c
 * wires them: normal replies parse into hiredis' layout, and sizes a
 * hostile or broken Redis announces fail the reader, never the process.
 */
#include <string.h>

#include <criterion/criterion.h>

#include "reply.h"

static redisReader *rd;

static void
setup(void)
{
	rd = redisReaderCreateWithFunctions(&reply_fns);
	cr_assert_not_null(rd);
}

static void
teardown(void)
{
	redisReaderFree(rd);
}

TestSuite(reply, .init = setup, .fini = teardown);

/* Feeds <s>; returns redisReaderGetReply's status, the reply in <*out>. */
static int
parse(const char *s, redisReply **out)
{
	void *r = NULL;
	int   rc;

	cr_assert_eq(redisReaderFeed(rd, s, strlen(s)), REDIS_OK);
	rc = redisReaderGetReply(rd, &r);
	*out = r;
	return rc;
}

Test(reply, a_nested_array_parses_into_hiredis_layout)
{
	redisReply *r, *in;

	cr_assert_eq(
		parse("*4\r\n:7\r\n$3\r\nabc\r\n*3\r\n$-1\r\n+OK\r\n:-2\r\n"
	              "-ERR no\r\n",
	              &r),
		REDIS_OK);
	cr_assert_not_null(r);
	cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
	cr_assert_eq(r->elements, 4);
	cr_assert_eq(r->element[0]->type, REDIS_REPLY_INTEGER);
	cr_assert_eq(r->element[0]->integer, 7);
	cr_assert_eq(r->element[1]->type, REDIS_REPLY_STRING);
	cr_assert_eq(r->element[1]->len, 3);
	cr_assert_str_eq(r->element[1]->str, "abc");
	in = r->element[2];
	cr_assert_eq(in->type, REDIS_REPLY_ARRAY);
	cr_assert_eq(in->elements, 3);
	cr_assert_eq(in->element[0]->type, REDIS_REPLY_NIL);
	cr_assert_eq(in->element[1]->type, REDIS_REPLY_STATUS);
	cr_assert_str_eq(in->element[1]->str, "OK");
	cr_assert_eq(in->element[2]->integer, -2);
	cr_assert_eq(r->element[3]->type, REDIS_REPLY_ERROR);
	cr_assert_str_eq(r->element[3]->str, "ERR no");
	reply_fns.freeObject(r);
}

Test(reply, an_int_max_array_fails_the_reader_instead_of_exiting)
{
	redisReply *r;

	cr_assert_eq(parse("*2147483647\r\n", &r), REDIS_ERR);
	cr_assert_null(r);
	cr_assert_eq(rd->err, REDIS_ERR_OOM);
}

Test(reply, an_array_past_the_bound_inside_another_fails_the_reader)
{
	char        s[64];
	redisReply *r;

	snprintf(s, sizeof(s), "*2\r\n$2\r\nok\r\n*%d\r\n",
	         REPLY_ARRAY_MAX + 1);
	cr_assert_eq(parse(s, &r), REDIS_ERR);
	cr_assert_null(r);
	cr_assert_eq(rd->err, REDIS_ERR_OOM);
}

Test(reply, an_array_at_the_bound_is_accepted)
{
	char        s[32];
	redisReply *r;

	snprintf(s, sizeof(s), "*%d\r\n", REPLY_ARRAY_MAX);
	cr_assert_eq(parse(s, &r), REDIS_OK);
	cr_assert_null(r, "incomplete: its elements are still to come");
	cr_assert_eq(rd->err, 0);
}

/* A bulk length is only believed once that many bytes have arrived. */
Test(reply, a_huge_bulk_length_allocates_nothing_before_its_bytes)
{
	redisReply *r;

	cr_assert_eq(parse("$2147483647\r\nab", &r), REDIS_OK);
	cr_assert_null(r);
	cr_assert_eq(rd->err, 0);
}

/* TIME's reply, as Redis sends it and as a broken or hostile one might */
static int
time_of(const char *s, int64_t *us)
{
	redisReply *r;
	int         rc;

	cr_assert_eq(parse(s, &r), REDIS_OK);
	rc = reply_time_us(r, us);
	reply_fns.freeObject(r);
	return rc;
}

Test(reply, time_reads_seconds_and_microseconds)
{
	int64_t us = -1;

	cr_assert_eq(time_of("*2\r\n$10\r\n1733500000\r\n$6\r\n123456\r\n", &us),
	             0);
	cr_assert_eq(us, 1733500000123456LL);
	cr_assert_eq(time_of("*2\r\n$1\r\n0\r\n$1\r\n7\r\n", &us), 0);
	cr_assert_eq(us, 7);
}

Test(reply, time_refuses_what_is_not_two_decimals_in_range)
{
	static const char *bad[] = {
		"*2\r\n:1733500000\r\n:0\r\n",            /* integers */
		"*2\r\n$-1\r\n$1\r\n0\r\n",               /* a nil */
		"*1\r\n$1\r\n1\r\n",                      /* one element */
		"*3\r\n$1\r\n1\r\n$1\r\n0\r\n$1\r\n0\r\n", /* three */
		"+OK\r\n",                                /* not an array */
		"*2\r\n$2\r\n-1\r\n$1\r\n0\r\n",          /* negative */
		"*2\r\n$0\r\n\r\n$1\r\n0\r\n",            /* empty */
		"*2\r\n$3\r\n1x1\r\n$1\r\n0\r\n",         /* not a number */
		"*2\r\n$1\r\n1\r\n$7\r\n1000000\r\n",     /* a whole second */
		/* seconds whose µs overflow int64_t */
		"*2\r\n$19\r\n9223372036854775807\r\n$1\r\n0\r\n",
		"*2\r\n$12\r\n100000000000\r\n$1\r\n0\r\n",
	};
	int64_t us = 42;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(time_of(bad[i], &us), -1, "case %zu", i);
	cr_assert_eq(us, 42, "untouched on a refusal");
	cr_assert_eq(reply_time_us(NULL, &us), -1);
}

Test(reply, a_refused_reply_is_not_logged_as_out_of_memory)
{
	cr_assert_str_eq(reply_why(REDIS_ERR_IO, "Connection reset by peer"),
	                 "Connection reset by peer");
	cr_assert_null(strstr(reply_why(REDIS_ERR_OOM, "Out of memory"),
	                      "Out of memory"));
	cr_assert_not_null(strstr(reply_why(REDIS_ERR_OOM, "Out of memory"),
	                          "refused"));
}

Test(reply, redirect_reads_moved_and_ask)
{
	const char *host = NULL;
	size_t      hlen = 0;
	int         port = 0;

	cr_assert_eq(reply_redirect("MOVED 3999 127.0.0.1:6381", &host, &hlen,
	                            &port),
	             REPLY_REDIRECT_MOVED);
	cr_assert_eq(hlen, 9);
	cr_assert_eq(strncmp(host, "127.0.0.1", hlen), 0);
	cr_assert_eq(port, 6381);
	/* an IPv6 address: the port is after the last colon */
	cr_assert_eq(reply_redirect("ASK 5291 ::1:7001", &host, &hlen, &port),
	             REPLY_REDIRECT_ASK);
	cr_assert_eq(hlen, 3);
	cr_assert_eq(strncmp(host, "::1", hlen), 0);
	cr_assert_eq(port, 7001);
}

Test(reply, redirect_refuses_other_errors_and_bad_addresses)
{
	static const char *bad[] = {
		"TRYAGAIN Multiple keys request during rehashing of slot",
		"ERR unknown command",
		"MOVED",                  /* nothing after it */
		"MOVED 3999",             /* no address */
		"ASK 3999 127.0.0.1",     /* no port */
		"ASK 3999 :6379",         /* no host */
		"MOVED 3999 127.0.0.1:",  /* an empty port */
		"MOVED 3999 127.0.0.1:0", /* out of range */
		"MOVED 3999 127.0.0.1:65536",
		"MOVED 3999 127.0.0.1:63x9", /* not a number */
		"MOVEDX 3999 127.0.0.1:6379",
	};
	const char *host = NULL;
	size_t      hlen = 42;
	int         port = 42;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(reply_redirect(bad[i], &host, &hlen, &port),
		             REPLY_REDIRECT_NONE, "case %zu", i);
	cr_assert_null(host, "untouched on a refusal");
	cr_assert_eq(hlen, 42);
	cr_assert_eq(port, 42);
}
