/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of agent/cidr.c: strict parsing of address ranges (prefix
 * bounds per family, host bits, junk), matching at the edges (/0, /32,
 * /128, odd prefixes, IPv4-mapped IPv6), formatting back, and a rough
 * cost per match printed for the record (never asserted: timings on a
 * shared machine are noise).
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cidr.h"

static struct cidr
ok(const char *s)
{
	struct cidr c;
	const char *err = NULL;

	cr_assert_eq(cidr_parse(s, &c, &err), 0, "%s: %s", s, err);
	return c;
}

static const char *
bad(const char *s)
{
	struct cidr c;
	const char *err = NULL;

	cr_assert_eq(cidr_parse(s, &c, &err), -1, "%s parsed", s);
	cr_assert_not_null(err);
	return err;
}

static bool
in(const char *range, const char *addr)
{
	struct cidr c = ok(range);
	uint8_t     a[16];

	cr_assert_eq(cidr_addr_text(addr, strlen(addr), a), 0, "%s", addr);
	return cidr_match(&c, a);
}

static void
text_is(const char *s, const char *want)
{
	struct cidr c = ok(s);
	char        buf[CIDR_TEXT_MAX];

	cidr_format(&c, buf, sizeof(buf));
	cr_assert_str_eq(buf, want);
}

Test(cidr, bare_address_is_the_whole_host)
{
	cr_assert_eq(ok("192.0.2.7").prefix, 96 + 32);
	cr_assert_eq(ok("2001:db8::1").prefix, 128);
	cr_assert(in("192.0.2.7", "192.0.2.7"));
	cr_assert(!in("192.0.2.7", "192.0.2.6"));
	cr_assert(in("2001:db8::1", "2001:db8::1"));
	cr_assert(!in("2001:db8::1", "2001:db8::2"));
}

Test(cidr, slash_32_and_128_match_one_address)
{
	cr_assert(in("192.0.2.7/32", "192.0.2.7"));
	cr_assert(!in("192.0.2.7/32", "192.0.2.8"));
	cr_assert(in("2001:db8::1/128", "2001:db8::1"));
	cr_assert(!in("2001:db8::1/128", "2001:db8::3"));
}

Test(cidr, v4_slash_0_is_every_ipv4_and_no_ipv6)
{
	cr_assert(in("0.0.0.0/0", "0.0.0.0"));
	cr_assert(in("0.0.0.0/0", "255.255.255.255"));
	cr_assert(!in("0.0.0.0/0", "2001:db8::1"));
	cr_assert(!in("0.0.0.0/0", "::"));
}

Test(cidr, v6_slash_0_is_every_address)
{
	cr_assert(in("::/0", "2001:db8::1"));
	cr_assert(in("::/0", "10.1.2.3"));
	cr_assert(in("::/0", "::"));
}

Test(cidr, odd_prefixes_cut_inside_a_byte)
{
	cr_assert(in("10.0.0.0/9", "10.127.255.255"));
	cr_assert(!in("10.0.0.0/9", "10.128.0.0"));
	cr_assert(in("2001:db8:40::/42", "2001:db8:7f::1"));
	cr_assert(!in("2001:db8:40::/42", "2001:db8:80::"));
	cr_assert(in("192.0.2.6/31", "192.0.2.7"));
	cr_assert(!in("192.0.2.6/31", "192.0.2.8"));
}

Test(cidr, v4_mapped_ipv6_client_matches_the_v4_range)
{
	cr_assert(in("10.0.0.0/8", "::ffff:10.9.8.7"));
	cr_assert(!in("10.0.0.0/8", "::ffff:11.0.0.1"));
	/* and a v4-mapped range written in IPv6 is the same range */
	cr_assert(in("::ffff:10.0.0.0/104", "10.9.8.7"));
	text_is("::ffff:10.0.0.0/104", "10.0.0.0/8");
	/* but not the IPv4-compatible ::a.b.c.d or NAT64 forms */
	cr_assert(!in("10.0.0.0/8", "::10.9.8.7"));
	cr_assert(!in("10.0.0.0/8", "64:ff9b::10.9.8.7"));
}

Test(cidr, rejects_host_bits_past_the_prefix)
{
	cr_assert(strstr(bad("10.0.0.1/8"), "host bits"));
	cr_assert(strstr(bad("2001:db8::1/64"), "host bits"));
	cr_assert(strstr(bad("0.0.0.1/0"), "host bits"));
	ok("10.0.0.0/8");
	ok("10.0.0.1/32");
}

Test(cidr, rejects_prefixes_out_of_range_or_not_plain_decimal)
{
	cr_assert(strstr(bad("10.0.0.0/33"), "0..32"));
	cr_assert(strstr(bad("::/129"), "0..128"));
	bad("10.0.0.0/");
	bad("10.0.0.0/-1");
	bad("10.0.0.0/+8");
	bad("10.0.0.0/08");
	bad("10.0.0.0/8 ");
	bad("10.0.0.0/8/8");
	bad("10.0.0.0/0x8");
	bad("10.0.0.0/99999999999999999999");
}

Test(cidr, rejects_what_is_not_an_address)
{
	bad("");
	bad("/8");
	bad("localhost");
	bad("10.0.0");
	bad("256.0.0.0");
	bad(" 10.0.0.0");
	bad("10.0.0.0 /8");
	bad("2001:db8:::1");
	bad("fe80::1%eth0");
	cr_assert(strstr(bad("1111:2222:3333:4444:5555:6666:7777:8888:9999:0000"
	                     ":1111:2222:3333/64"),
	                 "too long"));
}

Test(cidr, address_text_rejects_junk_and_overlong_input)
{
	uint8_t a[16];
	char    big[200];

	cr_assert_eq(cidr_addr_text("", 0, a), -1);
	cr_assert_eq(cidr_addr_text("10.0.0.1x", 9, a), -1);
	cr_assert_eq(cidr_addr_text("10.0.0.1/8", 10, a), -1);
	memset(big, '1', sizeof(big));
	cr_assert_eq(cidr_addr_text(big, sizeof(big), a), -1);
	/* <len> bounds the read: "10.0.0.1" inside a longer buffer */
	cr_assert_eq(cidr_addr_text("10.0.0.1junk", 8, a), 0);
}

Test(cidr, formats_back_to_canonical_text)
{
	text_is("10.0.0.0/8", "10.0.0.0/8");
	text_is("192.0.2.7", "192.0.2.7/32");
	text_is("2001:DB8:0:0::/32", "2001:db8::/32");
	text_is("::/0", "::/0");
}

Test(cidr, match_any_scans_the_whole_list)
{
	struct cidr v[3] = { ok("10.0.0.0/8"), ok("192.0.2.7"),
		             ok("2001:db8::/32") };
	uint8_t     a[16];

	cr_assert_eq(cidr_addr_text("2001:db8::5", 11, a), 0);
	cr_assert(cidr_match_any(v, 3, a));
	cr_assert(!cidr_match_any(v, 2, a));
	cr_assert(!cidr_match_any(v, 0, a));
}

/* Not a benchmark: prints the cost of a miss against a list of 64 ranges
 * (the worst case, all scanned) for the record. */
Test(cidr, prints_the_cost_of_a_full_scan)
{
	struct cidr     v[64];
	uint8_t         a[16];
	struct timespec t0, t1;
	volatile int    hits = 0;
	char            s[32];
	int             i, n = 1000000;

	for (i = 0; i < 64; i++) {
		snprintf(s, sizeof(s), "10.%d.0.0/16", i);
		v[i] = ok(s);
	}
	cr_assert_eq(cidr_addr_text("192.0.2.1", 9, a), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0; i < n; i++)
		hits += cidr_match_any(v, 64, a);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	cr_assert_eq(hits, 0);
	cr_log_info(
		"cidr_match_any, 64 ranges, miss: %.1f ns",
		((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) /
			n);
}
