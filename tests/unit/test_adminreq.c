/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The admin API's pure parts: the target decoder refuses what it must
 * with a reason and decodes the rest; the JSON writer escapes; the token
 * compare tells equal from unequal whatever the lengths.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "admin.h"
#include "adminreq.h"

static int
parse(const char *t, struct adminreq *rq, const char **err)
{
	return adminreq_parse(t, strlen(t), rq, err);
}

Test(adminreq, a_key_target_gives_its_rule_and_decoded_args)
{
	static struct adminreq rq;
	const char            *err;

	cr_assert_eq(
		parse("/admin/keys/login?user=al%20ice&ip=10.0.0.1", &rq, &err),
		0);
	cr_assert_eq(rq.route, ADMINREQ_KEYS);
	cr_assert_str_eq(rq.rule, "login");
	cr_assert_eq(rq.nparams, 2);
	cr_assert_str_eq(adminreq_get(&rq, "user")->value, "al ice");
	cr_assert_str_eq(adminreq_get(&rq, "ip")->value, "10.0.0.1");
	cr_assert_eq(parse("/admin/key?key=rl%3A%7Bx%3Ay%7D", &rq, &err), 0);
	cr_assert_eq(rq.route, ADMINREQ_RAWKEY);
	cr_assert_str_eq(adminreq_get(&rq, "key")->value, "rl:{x:y}");
}

Test(adminreq, hostile_targets_are_refused_with_a_reason)
{
	static struct adminreq   rq;
	static const char *const bad[] = {
		"/admin/keys/login?user=%zz",
		"/admin/keys/login?user=%4",
		"/admin/keys/login?user=a%00b",
		"/admin/keys/login?user=a%0ab",
		"/admin/keys/login?=x",
		"/admin/keys/login?a=1&a=2",
		"/admin/keys/a%2Fb",
		"/admin/keys/%zz",
		("/admin/keys/l?a=1&b=1&c=1&d=1&e=1&f=1&g=1&h=1&i=1&j=1&k=1&l=1"
		 "&m=1&n=1&o=1&p=1&q=1"), /* one string: too many args */
	};
	char        big[ADMINREQ_MAX_BYTES + 64];
	const char *err;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err = NULL;
		cr_assert_eq(parse(bad[i], &rq, &err), 400, "%s", bad[i]);
		cr_assert_not_null(err);
	}
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	memcpy(big, "/admin/top?rule=", 16);
	cr_assert_eq(parse(big, &rq, &err), 400);
	cr_assert_eq(parse("/admin/other", &rq, &err), 404);
	cr_assert_eq(parse("/admin/keys/", &rq, &err), 404);
}

Test(adminreq, json_strings_escape_quotes_controls_and_bad_utf8)
{
	struct jsonw w = { 0 };

	jsonw_str(&w, "a\"b\\c\n\x01\xff\xc3\xa9", 10);
	cr_assert_str_eq(w.buf, "\"a\\\"b\\\\c\\u000a\\u0001\\u00ff\xc3\xa9\"");
	free(w.buf);
}

Test(adminreq, the_token_compare_tells_equal_from_unequal)
{
	cr_assert(admin_token_equal("secret-token", 12, "secret-token", 12));
	cr_assert(!admin_token_equal("secret-tokem", 12, "secret-token", 12));
	cr_assert(!admin_token_equal("secret", 6, "secret-token", 12));
	cr_assert(!admin_token_equal("secret-token-x", 14, "secret-token", 12));
	cr_assert(!admin_token_equal("", 0, "secret-token", 12));
}

/* Review: lead bytes 0xf5..0xff never start UTF-8 (RFC 3629); a key
 * holding one (a client's header value, listed by /admin/top) must not
 * reach the JSON raw, or the answer is not UTF-8 and not JSON. */
Test(adminreq, json_strings_escape_lead_bytes_f5_to_ff)
{
	struct jsonw w = { 0 };

	jsonw_str(&w, "\xf5\x80\x80|\xff\x80\x80|\xf8\x88\x80\x80", 12);
	cr_assert_str_eq(w.buf, "\"\\u00f5\\u0080\\u0080|\\u00ff\\u0080\\u0080|"
	                        "\\u00f8\\u0088\\u0080\\u0080\"",
	                 "got %s", w.buf);
	free(w.buf);
}
