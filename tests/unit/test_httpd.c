/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The metrics/admin HTTP responder's pure parts (agent/ops/httpd.c): where
 * a request head ends, whatever its line ends (CRLF, bare LF, mixed), and
 * which heads are refused for their syntax or framing (RFC 9112 2.2, 5,
 * 6): no Transfer-Encoding, no body, one valid Content-Length at most.
 * The socket side is tests/integration/admin_framing.sh's.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "httpd.h"

/* The offset of the head's end in <s>, or -1. */
static long
end_of(const char *s)
{
	const char *e = httpd_head_end(s, strlen(s));

	return e ? e - s : -1;
}

static int
check(const char *head, int http10)
{
	const char *why = NULL;
	int         st = httpd_check_head(head, strlen(head), http10, &why);

	if (st != 0)
		cr_assert(why != NULL && why[strlen(why) - 1] == '\n');
	return st;
}

Test(httpd, a_head_ends_at_its_first_empty_line_whatever_the_line_ends)
{
	cr_assert_eq(end_of("GET / HTTP/1.1\r\nA: b\r\n\r\n"), 22);
	cr_assert_eq(end_of("GET / HTTP/1.1\nA: b\n\n"), 20);
	cr_assert_eq(end_of("GET / HTTP/1.1\nA: b\n\r\n"), 20);
	cr_assert_eq(end_of("GET / HTTP/1.1\r\nA: b\r\n\n"), 22);
	cr_assert_eq(end_of("GET / HTTP/1.1\n\r\n"), 15);
	cr_assert_eq(end_of("GET / HTTP/1.1\r\n\r\n"), 16);
	/* the first empty line, not the last "\r\n\r\n" of the buffer */
	cr_assert_eq(end_of("GET / HTTP/1.1\nA: b\n\nC: d\r\n\r\n"), 20);
}

Test(httpd, a_head_not_ended_yet_has_no_end)
{
	cr_assert_eq(end_of(""), -1);
	cr_assert_eq(end_of("GET / HTTP/1.1"), -1);
	cr_assert_eq(end_of("GET / HTTP/1.1\r\n"), -1);
	cr_assert_eq(end_of("GET / HTTP/1.1\r\nA: b\r\n\r"), -1);
	cr_assert_eq(end_of("GET / HTTP/1.1\r\nA: b\r\n \r\n"), -1);
	/* an empty first line is the request line's problem, not an end */
	cr_assert_eq(end_of("\r\nA: b\r\n"), -1);
}

Test(httpd, heads_without_a_body_are_served)
{
	cr_assert_eq(check("", 0), 0);
	cr_assert_eq(check("Host: x\r\nAuthorization: Bearer t\r\n", 0), 0);
	cr_assert_eq(check("Host: x\nAccept: */*\n", 1), 0);
	cr_assert_eq(check("Content-Length: 0\r\n", 0), 0);
	cr_assert_eq(check("content-length:\t00 \r\n", 0), 0);
	cr_assert_eq(check("X-Empty:\r\n", 0), 0);
	cr_assert_eq(
		check("Content-Lengths: 5\r\nTransfer-Encodings: x\r\n", 0), 0);
}

Test(httpd, transfer_encoding_is_501_or_400_when_framing_is_ambiguous)
{
	cr_assert_eq(check("Transfer-Encoding: chunked\r\n", 0), 501);
	cr_assert_eq(check("transfer-encoding: gzip, chunked\r\n", 0), 501);
	cr_assert_eq(check("Transfer-Encoding:\r\n", 0), 501);
	cr_assert_eq(check("Transfer-Encoding: chunked\r\n", 1), 400);
	cr_assert_eq(
		check("Content-Length: 0\r\nTransfer-Encoding: chunked\r\n", 0),
		400);
	cr_assert_eq(
		check("Transfer-Encoding: chunked\r\nContent-Length: x\r\n", 0),
		400);
}

Test(httpd, a_bad_or_repeated_content_length_is_400)
{
	static const char *const bad[] = {
		"Content-Length: \r\n",
		"Content-Length: abc\r\n",
		"Content-Length: -1\r\n",
		"Content-Length: +1\r\n",
		"Content-Length: 1.0\r\n",
		"Content-Length: 0x10\r\n",
		"Content-Length: 1 2\r\n",
		"Content-Length: 5, 5\r\n",
		"Content-Length: 18446744073709551616\r\n", /* 2^64 */
		"Content-Length: 99999999999999999999999\r\n",
		"Content-Length: 0\r\nContent-Length: 0\r\n",
		"Content-Length: 0\r\ncontent-length: 7\r\n",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(check(bad[i], 0), 400, "%s", bad[i]);
}

Test(httpd, a_body_is_413_at_any_length)
{
	cr_assert_eq(check("Content-Length: 1\r\n", 0), 413);
	cr_assert_eq(check("Content-Length: 18446744073709551615\r\n", 0), 413);
	cr_assert_eq(check("Content-Length: 5\n", 1), 413);
}

Test(httpd, malformed_header_lines_are_400)
{
	static const char *const bad[] = {
		"Content-Length : 0\r\n", /* blank before the colon */
		"Host: x\r\n Transfer-Encoding: chunked\r\n", /* obs-fold */
		"Host: x\r\n\tmore\r\n",
		"Host: x\rContent-Length: 5\r\n", /* a bare CR */
		"Host: x\r\r\n",
		"no colon here\r\n",
		": no name\r\n",
		"Ho\"st: x\r\n",
		"Host x\r\n",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(check(bad[i], 0), 400, "%s", bad[i]);
	cr_assert_eq(
		httpd_check_head("A: b\0c\r\n", 8, 0, &(const char *){ 0 }),
		400, "a NUL");
}
