/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of key templates (agent/policy/keys.c): compile errors with their
 * positions, and expansion of every SPOP data type against hand-built
 * messages: IPv4, IPv6 masking (sharing inside a prefix, separation
 * across it), IPv4-mapped IPv6, addresses carried in strings, composite
 * keys, missing args, the hash tail of over-long keys and the escaping
 * that keeps values from breaking the "rl:{...}" hash tag.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "keys.h"

/* ---- helpers ------------------------------------------------------------ */

static struct spop_message msg;

static void
msg_reset(void)
{
	memset(&msg, 0, sizeof(msg));
	msg.name.ptr = "rl-request";
	msg.name.len = strlen(msg.name.ptr);
}

static struct spop_arg *
add(const char *name, enum spop_data_type type)
{
	struct spop_arg *a = &msg.args[msg.nargs++];

	cr_assert_leq(msg.nargs, SPOP_MAX_ARGS);
	a->name.ptr = name;
	a->name.len = strlen(name);
	a->value.type = type;
	msg.nargs_total = msg.nargs;
	return a;
}

static void
add_str(const char *name, const char *v)
{
	struct spop_arg *a = add(name, SPOP_DATA_STRING);

	a->value.v.str.ptr = v;
	a->value.v.str.len = strlen(v);
}

static void
add_ip(const char *name, const char *text)
{
	struct spop_arg *a;

	if (strchr(text, ':')) {
		a = add(name, SPOP_DATA_IPV6);
		cr_assert_eq(inet_pton(AF_INET6, text, a->value.v.ipv6), 1);
	} else {
		a = add(name, SPOP_DATA_IPV4);
		cr_assert_eq(inet_pton(AF_INET, text, a->value.v.ipv4), 1);
	}
}

static struct tmpl *
compile_ok(const char *src)
{
	const char  *err = NULL;
	size_t       pos = 0;
	struct tmpl *t = keys_compile(src, 64, &err, &pos);

	cr_assert_not_null(t, "compile \"%s\": %s at %zu", src, err, pos);
	return t;
}

/* Expands <src> against msg with no prefix and suffix into <out>. */
static int
expand(const char *src, char *out, size_t max)
{
	struct tmpl *t = compile_ok(src);
	size_t       len = 0;
	int          rc = keys_expand(t, &msg, "", "", out, max, &len);

	if (rc == 0)
		cr_assert_eq(len, strlen(out));
	keys_free(t);
	return rc;
}

static void
expect(const char *src, const char *want)
{
	char out[256];

	cr_assert_eq(expand(src, out, 200), 0, "expand %s", src);
	cr_assert_str_eq(out, want);
}

static void
compile_fails(const char *src, size_t want_pos, const char *want_err_part)
{
	const char *err = NULL;
	size_t      pos = 999;

	cr_assert_null(keys_compile(src, 64, &err, &pos), "\"%s\" compiled",
	               src);
	cr_assert_eq(pos, want_pos, "\"%s\": pos %zu, want %zu", src, pos,
	             want_pos);
	cr_assert(strstr(err, want_err_part), "\"%s\": \"%s\" lacks \"%s\"",
	          src, err, want_err_part);
}

/* ---- compile ------------------------------------------------------------ */

Test(keys, compile_counts_vars)
{
	struct tmpl *t = compile_ok("login:{user}:{ip/48}");

	cr_assert_eq(keys_nvars(t), 2);
	cr_assert_str_eq(keys_var(t, 0), "user");
	cr_assert_str_eq(keys_var(t, 1), "ip");
	cr_assert_null(keys_var(t, 2));
	cr_assert_str_eq(keys_source(t), "login:{user}:{ip/48}");
	cr_assert_eq(keys_is_single_var(t), 0);
	keys_free(t);
	t = compile_ok("{size}");
	cr_assert_eq(keys_is_single_var(t), 1);
	keys_free(t);
}

Test(keys, compile_rejects_empty_placeholder)
{
	compile_fails("tenant:{}", 8, "empty placeholder");
}

Test(keys, compile_rejects_unterminated)
{
	compile_fails("tenant:{tenant", 7, "unterminated");
}

Test(keys, compile_rejects_stray_close)
{
	compile_fails("a}b", 1, "unmatched '}'");
}

Test(keys, compile_rejects_nested)
{
	compile_fails("{a{b}}", 2, "nested");
}

Test(keys, compile_rejects_bad_names_and_prefixes)
{
	compile_fails("x:{a b}", 4, "bad character");
	compile_fails("{ip/129}", 4, "0 to 128");
	compile_fails("{ip/}", 4, "missing prefix");
	compile_fails("{ip/6x}", 5, "0 to 128");
	compile_fails("{/64}", 1, "no arg name");
}

/* ---- expansion ---------------------------------------------------------- */

Test(keys, ipv4_whole_address)
{
	msg_reset();
	add_ip("ip", "192.0.2.7");
	expect("ip:{ip}", "ip:192.0.2.7");
	expect("ip:{ip/64}", "ip:192.0.2.7"); /* IPv4 is always /32 */
}

Test(keys, ipv6_same_64_shares_key)
{
	char a[256], b[256];

	msg_reset();
	add_ip("ip", "2001:db8:1:2::1");
	cr_assert_eq(expand("ip:{ip/64}", a, 200), 0);
	msg_reset();
	add_ip("ip", "2001:db8:1:2:ffff:eeee:dddd:9");
	cr_assert_eq(expand("ip:{ip/64}", b, 200), 0);
	cr_assert_str_eq(a, "ip:2001:db8:1:2::/64");
	cr_assert_str_eq(a, b);
}

Test(keys, ipv6_other_64_separates)
{
	char a[256], b[256];

	msg_reset();
	add_ip("ip", "2001:db8:1:2::1");
	cr_assert_eq(expand("ip:{ip/64}", a, 200), 0);
	msg_reset();
	add_ip("ip", "2001:db8:1:3::1");
	cr_assert_eq(expand("ip:{ip/64}", b, 200), 0);
	cr_assert_str_neq(a, b);
	cr_assert_str_eq(b, "ip:2001:db8:1:3::/64");
}

Test(keys, ipv6_default_prefix_and_other_prefixes)
{
	msg_reset();
	add_ip("ip", "2001:db8:abcd:12ff:1:2:3:4");
	expect("{ip}", "2001:db8:abcd:12ff::/64");
	expect("{ip/48}", "2001:db8:abcd::/48");
	expect("{ip/52}", "2001:db8:abcd:1000::/52");
	expect("{ip/128}", "2001:db8:abcd:12ff:1:2:3:4");
	expect("{ip/0}", "::/0");
}

Test(keys, ipv4_mapped_ipv6_is_ipv4)
{
	msg_reset();
	add_ip("ip", "::ffff:192.0.2.7");
	expect("ip:{ip/64}", "ip:192.0.2.7");
}

Test(keys, string_holding_an_address_is_an_address)
{
	msg_reset();
	add_str("xff", "2001:db8:1:2::99");
	add_str("v4", "192.0.2.7");
	add_str("mapped", "::ffff:10.0.0.1");
	add_str("notip", "1.2.3");
	expect("{xff/64}", "2001:db8:1:2::/64");
	expect("{v4}", "192.0.2.7");
	expect("{mapped}", "10.0.0.1");
	expect("{notip}", "1.2.3");
}

Test(keys, composite_key)
{
	msg_reset();
	add_str("user", "alice");
	add_ip("ip", "2001:db8:7:8::1");
	expect("login:{user}:{ip}", "login:alice:2001:db8:7:8::/64");
}

Test(keys, integers_and_other_types)
{
	struct spop_arg *a;

	msg_reset();
	a = add("i32", SPOP_DATA_INT32);
	a->value.v.i = -42;
	a = add("u64", SPOP_DATA_UINT64);
	a->value.v.u = UINT64_MAX;
	a = add("b", SPOP_DATA_BOOL);
	a->value.v.b = true;
	a = add("bin", SPOP_DATA_BINARY);
	a->value.v.str.ptr = "\x01\xab";
	a->value.v.str.len = 2;
	expect("{i32}/{u64}/{b}/{bin}", "-42/18446744073709551615/true/01ab");
}

Test(keys, missing_absent_null_empty)
{
	char out[256];

	msg_reset();
	add_str("empty", "");
	add("null", SPOP_DATA_NULL);
	add_str("ok", "x");
	cr_assert_eq(expand("{ok}:{absent}", out, 200), KEYS_MISSING);
	cr_assert_eq(expand("{ok}:{null}", out, 200), KEYS_MISSING);
	cr_assert_eq(expand("{empty}", out, 200), KEYS_MISSING);
	cr_assert_eq(expand("{ok}", out, 200), 0);
}

Test(keys, braces_in_values_cannot_break_hash_tag)
{
	struct tmpl *t = compile_ok("tenant:{tenant}");
	char         out[256];
	size_t       len;

	msg_reset();
	add_str("tenant", "a}b{c%d");
	cr_assert_eq(keys_expand(t, &msg, "rl:{r:", "}", out, 200, &len), 0);
	cr_assert_str_eq(out, "rl:{r:tenant:a%7Db%7Bc%25d}");
	/* one '{' and one '}' in the whole key: the tag is the whole key */
	cr_assert_eq(strchr(out, '{'), strrchr(out, '{'));
	cr_assert_eq(strchr(out, '}'), out + len - 1);
	/* and percent-encoding stays one-to-one */
	msg_reset();
	add_str("tenant", "a%7Db{c%d");
	{
		char other[256];

		cr_assert_eq(
			keys_expand(t, &msg, "rl:{r:", "}", other, 200, &len),
			0);
		cr_assert_str_neq(out, other);
	}
	keys_free(t);
}

Test(keys, long_values_hashed_distinct_and_bounded)
{
	struct tmpl *t = compile_ok("u:{user}");
	char         v1[600], v2[600], k1[256], k2[256];
	size_t       l1, l2;

	memset(v1, 'a', sizeof(v1) - 1);
	v1[sizeof(v1) - 1] = '\0';
	memcpy(v2, v1, sizeof(v1));
	v2[sizeof(v2) - 2] = 'b'; /* differs in the last byte only */
	msg_reset();
	add_str("user", v1);
	cr_assert_eq(keys_expand(t, &msg, "rl:{login:", "}", k1, 200, &l1), 0);
	msg_reset();
	add_str("user", v2);
	cr_assert_eq(keys_expand(t, &msg, "rl:{login:", "}", k2, 200, &l2), 0);
	cr_assert_eq(l1, 200);
	cr_assert_eq(l2, 200);
	cr_assert_eq(strlen(k1), 200);
	cr_assert_str_neq(k1, k2);
	/* readable prefix kept, "~" + 32 hex digits, then the suffix */
	cr_assert_eq(strncmp(k1, "rl:{login:u:aaaa", 16), 0);
	cr_assert_eq(k1[200 - 1 - KEYS_HASH_LEN], '~');
	cr_assert_eq(strspn(k1 + 200 - KEYS_HASH_LEN, "0123456789abcdef"),
	             KEYS_HASH_LEN - 1);
	cr_assert_eq(k1[199], '}');
	cr_assert_eq(strncmp(k1, k2, 200 - 1 - KEYS_HASH_LEN), 0);
	keys_free(t);
}

/* The digest covers the whole text, prefix included: its first 64 bits
 * are FNV-1a 64 of "rl:{login:u:" + the value, computed here on its own. */
Test(keys, long_key_digest_is_fnv1a_of_the_whole_text)
{
	struct tmpl *t = compile_ok("u:{user}");
	char         v[400], k[256], want[17];
	const char  *text[] = { "rl:{login:u:", v };
	uint64_t     h = 0xcbf29ce484222325ULL;
	size_t       len;

	memset(v, 'q', sizeof(v) - 1);
	v[sizeof(v) - 1] = '\0';
	v[5] = 'Z'; /* in the stored prefix */
	for (int i = 0; i < 2; i++)
		for (const char *p = text[i]; *p; p++)
			h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
	snprintf(want, sizeof(want), "%016llx", (unsigned long long)h);
	msg_reset();
	add_str("user", v);
	cr_assert_eq(keys_expand(t, &msg, "rl:{login:", "}", k, 200, &len), 0);
	cr_assert_eq(strncmp(k + 200 - KEYS_HASH_LEN, want, 16), 0,
	             "digest %.16s, want %s", k + 200 - KEYS_HASH_LEN, want);
	keys_free(t);
}

Test(keys, exact_fit_not_hashed)
{
	struct tmpl *t = compile_ok("{v}");
	char         v[300], out[256];
	size_t       len;

	memset(v, 'x', 199);
	v[199] = '\0';
	msg_reset();
	add_str("v", v);
	cr_assert_eq(keys_expand(t, &msg, "", "}", out, 200, &len), 0);
	cr_assert_eq(len, 200);
	cr_assert_null(strchr(out, '~'));
	keys_free(t);
}

Test(keys, arg_int_parses_ints_and_decimal_strings)
{
	struct spop_arg *a;
	int64_t          v = 0;

	msg_reset();
	a = add("n", SPOP_DATA_INT64);
	a->value.v.i = 1234;
	add_str("s", "567");
	add_str("neg", "-3");
	add_str("bad", "12a");
	add_str("empty", "");
	a = add("big", SPOP_DATA_UINT64);
	a->value.v.u = UINT64_MAX;
	cr_assert_eq(keys_arg_int(&msg, "n", &v), 0);
	cr_assert_eq(v, 1234);
	cr_assert_eq(keys_arg_int(&msg, "s", &v), 0);
	cr_assert_eq(v, 567);
	cr_assert_eq(keys_arg_int(&msg, "neg", &v), 0);
	cr_assert_eq(v, -3);
	cr_assert_eq(keys_arg_int(&msg, "bad", &v), -1);
	cr_assert_eq(keys_arg_int(&msg, "empty", &v), -1);
	cr_assert_eq(keys_arg_int(&msg, "big", &v), KEYS_INT_RANGE,
	             "an integer, past int64: not malformed");
	cr_assert_eq(keys_arg_int(&msg, "absent", &v), -1);
}

/* A hashed key ends with "~" and its digest, which anyone can compute (the
 * hash has no secret): a value spelling out a long value's hashed key
 * must not map to that key, or a client would spend the quota of whoever
 * sends the long value (a long user name, a user agent). */
Test(keys, value_spelling_a_hashed_key_is_another_key)
{
	struct tmpl *t = compile_ok("u:{user}");
	char         v[400], k1[256], k2[256];
	size_t       l1, l2, pre = strlen("rl:{login:u:");

	memset(v, 'a', sizeof(v) - 1);
	v[sizeof(v) - 1] = '\0';
	msg_reset();
	add_str("user", v);
	cr_assert_eq(keys_expand(t, &msg, "rl:{login:", "}", k1, 200, &l1), 0);
	cr_assert_eq(l1, 200);
	/* the value: the hashed key's text between prefix and suffix */
	memcpy(v, k1 + pre, l1 - pre - 1);
	v[l1 - pre - 1] = '\0';
	msg_reset();
	add_str("user", v);
	cr_assert_eq(keys_expand(t, &msg, "rl:{login:", "}", k2, 200, &l2), 0);
	cr_assert_str_neq(k1, k2, "\"%s\" and a 400-byte value share a key",
	                  v);
	keys_free(t);
}
