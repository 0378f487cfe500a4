/* SPDX-License-Identifier: Apache-2.0 */
/* batch.h: the script's one input format, decoded back with msgpack. */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <msgpack.h>

#include "batch.h"

/* The arguments after the head: "$<n>\r\n<bytes>\r\n" each. */
static const char *
next_bulk(const char *p, size_t *n)
{
	cr_assert_eq(*p, '$');
	*n = strtoul(p + 1, NULL, 10);
	return strstr(p, "\r\n") + 2;
}

Test(batch, keys_go_plain_and_the_rest_as_one_msgpack_array)
{
	struct batch_enc   e = { 0 };
	struct batch_buf   b = { 0 };
	struct batch_check c[3] = {
		{ .key = "rl:{a}",
		  .keylen = 6,
		  .algo = LIM_GCRA,
		  .op = LIM_OP_CHECK,
		  .cost = 1,
		  .p = { 1000, 1000000, 0 } },
		{ .key = "rl:{b}",
		  .keylen = 6,
		  .algo = LIM_SLIDING_LOG,
		  .op = LIM_OP_CHECK,
		  .cost = 3,
		  .member = "m1",
		  .memberlen = 2,
		  .p = { 10, 60000000, 0 } },
		{ .key = "rl:{c}",
		  .keylen = 6,
		  .algo = LIM_GCRA,
		  .op = LIM_OP_CHECK,
		  .flags = LIM_FL_SHADOW,
		  .cost = 1,
		  .p = { 1000, 1000000, 0 } },
	};
	int                   parts[2] = { 2, 1 };
	const char           *p;
	size_t                n;
	msgpack_unpacked      u;
	msgpack_object_array *a;

	batch_encode(&e, &b, c, 3, parts, 2);
	cr_assert_eq(b.argc, 2 + 1 + 3 + 1, "head, key count, keys, ARGV");
	p = next_bulk(b.buf + BATCH_HEAD, &n);
	cr_assert_eq(strncmp(p, "3", n), 0, "three keys");
	p += n + 2;
	for (int i = 0; i < 3; i++) {
		p = next_bulk(p, &n);
		cr_assert_eq(n, 6);
		cr_assert_eq(memcmp(p, c[i].key, 6), 0);
		p += n + 2;
	}
	p = next_bulk(p, &n);
	msgpack_unpacked_init(&u);
	cr_assert_eq(msgpack_unpack_next(&u, p, n, NULL),
	             MSGPACK_UNPACK_SUCCESS);
	cr_assert_eq(u.data.type, MSGPACK_OBJECT_ARRAY);
	a = &u.data.via.array;
	/* 2 parts, 2 rules (the third check repeats the first's), the rules,
	 * then 2, code, code cost member, then 1, code */
	enum { R0 = 2 + 2 * LIM_SCRIPT_RULE }; /* where the parts start */
	cr_assert_eq(a->size, R0 + 1 + 1 + 3 + 1 + 1);
	cr_assert_eq(a->ptr[0].via.u64, 2);
	cr_assert_eq(a->ptr[1].via.u64, 2);
	cr_assert_eq(a->ptr[2].via.u64, LIM_GCRA);
	cr_assert_eq(a->ptr[3].via.u64, 1000);
	cr_assert_eq(a->ptr[4].via.u64, 1000000);
	cr_assert_eq(a->ptr[6].via.u64, 0, "no penalty box: block 0");
	cr_assert_eq(a->ptr[7].via.u64, 0, "and block_max 0");
	cr_assert_eq(a->ptr[8].via.u64, 0, "no reservation lease");
	cr_assert_eq(a->ptr[2 + LIM_SCRIPT_RULE].via.u64, LIM_SLIDING_LOG);
	cr_assert_eq(a->ptr[R0].via.u64, 2, "the first part's check count");
	cr_assert_eq(a->ptr[R0 + 1].via.u64,
	             (uint64_t)lim_script_code(1, LIM_OP_CHECK, 0, 1));
	cr_assert_eq(a->ptr[R0 + 2].via.u64,
	             (uint64_t)lim_script_code(2, LIM_OP_CHECK, 0, 3));
	cr_assert_eq(a->ptr[R0 + 3].via.u64, 3, "a cost other than 1 is sent");
	cr_assert_eq(a->ptr[R0 + 4].type, MSGPACK_OBJECT_STR);
	cr_assert_eq(memcmp(a->ptr[R0 + 4].via.str.ptr, "m1", 2), 0);
	cr_assert_eq(a->ptr[R0 + 5].via.u64, 1, "the second part");
	cr_assert_eq(
		a->ptr[R0 + 6].via.u64,
		(uint64_t)lim_script_code(1, LIM_OP_CHECK, LIM_FL_SHADOW, 1),
		"the repeated rule, shadow");
	msgpack_unpacked_destroy(&u);
	batch_buf_free(&b);
	batch_enc_free(&e);
}

Test(batch, the_head_is_written_in_front_of_the_arguments)
{
	struct batch_buf b = { 0 };
	const char      *cmd;
	size_t           len;

	batch_buf_reset(&b);
	batch_arg_int(&b, 0);
	cmd = batch_head(&b, "FCALL", "lib", 3, &len);
	cr_assert_eq(len,
	             strlen("*3\r\n$5\r\nFCALL\r\n$3\r\nlib\r\n$1\r\n0\r\n"));
	cr_assert_eq(memcmp(cmd,
	                    "*3\r\n$5\r\nFCALL\r\n$3\r\nlib\r\n$1\r\n0\r\n",
	                    len),
	             0);
	free(batch_with_text(&b, "EVAL", "return 1", &len));
	batch_buf_free(&b);
}

Test(batch, a_rule_repeated_within_the_scan_is_sent_once)
{
	int64_t t[4][LIM_SCRIPT_RULE];
	int     n = 0;
	int64_t p[LIM_SCRIPT_PARAMS] = { 1, 2, 3 },
		q[LIM_SCRIPT_PARAMS] = { 1, 2, 4 },
		b[LIM_SCRIPT_PARAMS] = { 1, 2, 3, 600000000, 0 };

	cr_assert_eq(batch_rule(t, &n, 0, p), 1);
	cr_assert_eq(batch_rule(t, &n, 0, q), 2);
	cr_assert_eq(batch_rule(t, &n, 0, p), 1);
	cr_assert_eq(batch_rule(t, &n, 1, p), 3, "another algorithm");
	cr_assert_eq(batch_rule(t, &n, 0, b), 4, "another penalty box");
	cr_assert_eq(n, 4);
}

/* reserve: a GCRA rule with a reservation lease sends it as the tuple's
 * last field, and its checks (reservation, settle) carry the request id. */
Test(batch, a_reserving_rule_sends_its_lease_and_the_request_id)
{
	struct batch_enc   e = { 0 };
	struct batch_buf   b = { 0 };
	struct batch_check c[1] = {
		{ .key = "rl:{r}",
		  .keylen = 6,
		  .algo = LIM_GCRA,
		  .op = LIM_OP_FORCE,
		  .cost = 7,
		  .member = "id1",
		  .memberlen = 3,
		  .p = { 1000, 1000000, 0, 0, 0, 600000000 } },
	};
	int                   parts[1] = { 1 };
	const char           *p;
	size_t                n;
	msgpack_unpacked      u;
	msgpack_object_array *a;

	batch_encode(&e, &b, c, 1, parts, 1);
	p = next_bulk(b.buf + BATCH_HEAD, &n);
	p += n + 2;
	p = next_bulk(p, &n);
	p += n + 2;
	p = next_bulk(p, &n);
	msgpack_unpacked_init(&u);
	cr_assert_eq(msgpack_unpack_next(&u, p, n, NULL),
	             MSGPACK_UNPACK_SUCCESS);
	a = &u.data.via.array;
	cr_assert_eq(a->size, 2 + LIM_SCRIPT_RULE + 1 + 3);
	cr_assert_eq(a->ptr[2 + LIM_SCRIPT_RULE - 1].via.u64, 600000000,
	             "the lease, last in the rule tuple");
	cr_assert_eq(a->ptr[2 + LIM_SCRIPT_RULE + 2].via.u64, 7, "the cost");
	cr_assert_eq(a->ptr[2 + LIM_SCRIPT_RULE + 3].type, MSGPACK_OBJECT_STR);
	cr_assert_eq(
		memcmp(a->ptr[2 + LIM_SCRIPT_RULE + 3].via.str.ptr, "id1", 3),
		0, "the request id");
	msgpack_unpacked_destroy(&u);
	batch_buf_free(&b);
	batch_enc_free(&e);
}
