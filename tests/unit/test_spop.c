/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of the SPOP codec (agent/codec/spop.c), on bytes alone.
 *
 * Covers the varint vectors of SPOP.md 1.2 both ways, every typed data
 * type, the LAB HELLO/NOTIFY captures of SPOP.md 1.10 byte for byte, a
 * round trip of every frame type, every strict prefix of valid frames
 * (SPOP_INCOMPLETE, picohttpparser "partial"), and each malformed input
 * with the exact DISCONNECT status it must give. No sockets, no HAProxy:
 * the end-to-end behaviour is tested under tests/integration and docker/.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "spop.h"

/* ---- helpers ----------------------------------------------------------- */

#define BYTES(lit) (lit), (sizeof(lit) - 1)
#define S(lit)                                                                 \
	{                                                                      \
		(lit), sizeof(lit) - 1                                         \
	}

/* HAProxy 2.6.12 HAPROXY-HELLO as captured in SPOP.md 1.10 (129 bytes
 * after the length prefix). */
static const char lab_hello[] = "\x00\x00\x00\x81"
				"\x01"
				"\x00\x00\x00\x01"
				"\x00"
				"\x00"
				"\x12"
				"supported-versions"
				"\x08\x03"
				"2.0"
				"\x0e"
				"max-frame-size"
				"\x03\xfc\xf0\x06"
				"\x0c"
				"capabilities"
				"\x08\x10"
				"pipelining,async"
				"\x09"
				"engine-id"
				"\x08\x24"
				"3e4f9c2a-1b7d-4c85-9a0e-6f2d8b1c5e73";

/* The health-check HELLO of `option spop-check` (78 bytes): empty
 * capabilities, healthcheck true, no engine-id. */
static const char lab_hc_hello[] = "\x00\x00\x00\x4e"
				   "\x01"
				   "\x00\x00\x00\x01"
				   "\x00"
				   "\x00"
				   "\x12"
				   "supported-versions"
				   "\x08\x03"
				   "2.0"
				   "\x0e"
				   "max-frame-size"
				   "\x03\xfc\xf0\x06"
				   "\x0c"
				   "capabilities"
				   "\x08\x00"
				   "\x0b"
				   "healthcheck"
				   "\x11";

/* The LAB NOTIFY: sid 0, fid 1, message rl-quota with 5 args. */
static const char lab_notify[] = "\x00\x00\x00\x4b"
				 "\x03"
				 "\x00\x00\x00\x01"
				 "\x00"
				 "\x01"
				 "\x08"
				 "rl-quota"
				 "\x05"
				 "\x06"
				 "tenant"
				 "\x08\x04"
				 "acme"
				 "\x04"
				 "plan"
				 "\x08\x04"
				 "gold"
				 "\x05"
				 "route"
				 "\x08\x06"
				 "/api/x"
				 "\x06"
				 "method"
				 "\x08\x03"
				 "GET"
				 "\x02"
				 "ip"
				 "\x06\x7f\x00\x00\x01";

/* An empty ACK (spoa-mirror #17): 67 00000001 02 01. */
static const char empty_ack[] = "\x00\x00\x00\x07"
				"\x67"
				"\x00\x00\x00\x01"
				"\x02"
				"\x01";

static bool
str_is(struct spop_str s, const char *want)
{
	return s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0;
}

static void
writer_raw(struct spop_writer *w, char *buf, size_t size)
{
	w->buf = w->p = buf;
	w->end = buf + size;
	w->err = false;
}

/* Decodes one complete frame and checks it used all of <len>. */
static void
decode_ok(const char *buf, size_t len, struct spop_frame *f)
{
	int st = -1;
	int n = spop_decode_frame(buf, len, SPOP_MAX_FRAME_SIZE, f, &st);

	cr_assert_eq(n, (int)len, "decode_frame gave %d (status %d), want %zu",
	             n, st, len);
}

static void
assert_all_prefixes_incomplete(const char *buf, size_t len)
{
	struct spop_frame f;
	int               st = -1;

	for (size_t k = 0; k < len; k++) {
		int n = spop_decode_frame(buf, k, SPOP_MAX_FRAME_SIZE, &f, &st);

		cr_assert_eq(n, SPOP_INCOMPLETE, "prefix %zu of %zu gave %d", k,
		             len, n);
	}
	cr_assert_eq(spop_decode_frame(buf, len, SPOP_MAX_FRAME_SIZE, &f, &st),
	             (int)len);
}

static int
decode_status(const char *buf, size_t len, uint32_t max)
{
	struct spop_frame f;
	int               st = -1;

	cr_assert_eq(spop_decode_frame(buf, len, max, &f, &st), -1);
	return st;
}

/* ---- varint ------------------------------------------------------------ */

static const struct {
	uint64_t    v;
	const char *bytes;
	size_t      len;
} varint_vectors[] = {
	{ 0, "\x00", 1 },
	{ 239, "\xef", 1 },
	{ 240, "\xf0\x00", 2 },
	{ 300, "\xfc\x03", 2 },
	{ 2287, "\xff\x7f", 2 },
	{ 2288, "\xf0\x80\x00", 3 },
	{ 16380, "\xfc\xf0\x06", 3 },
	{ 264432, "\xf0\x80\x80\x00", 4 },
	{ UINT64_MAX, "\xff\xf0\xfe\xfe\xfe\xfe\xfe\xfe\xfe\x0e", 10 },
};

Test(spop, varint_vectors_encode)
{
	for (size_t i = 0;
	     i < sizeof(varint_vectors) / sizeof(varint_vectors[0]); i++) {
		char buf[16], *p = buf;
		int  n = spop_encode_varint(&p, buf + sizeof(buf),
		                            varint_vectors[i].v);

		cr_assert_eq(n, (int)varint_vectors[i].len, "vector %zu", i);
		cr_assert_eq(p, buf + n);
		cr_assert(memcmp(buf, varint_vectors[i].bytes, (size_t)n) == 0,
		          "bytes of %llu",
		          (unsigned long long)varint_vectors[i].v);
	}
}

Test(spop, varint_vectors_decode)
{
	for (size_t i = 0;
	     i < sizeof(varint_vectors) / sizeof(varint_vectors[0]); i++) {
		const char *p = varint_vectors[i].bytes;
		uint64_t    v = 12345;
		int n = spop_decode_varint(&p, p + varint_vectors[i].len, &v);

		cr_assert_eq(n, (int)varint_vectors[i].len, "vector %zu", i);
		cr_assert_eq(v, varint_vectors[i].v, "vector %zu", i);
		cr_assert_eq(p, varint_vectors[i].bytes + n);
	}
}

Test(spop, varint_round_trips_at_every_size_boundary)
{
	uint64_t vals[80];
	size_t   nv = 0;

	for (int s = 0; s < 64; s++)
		vals[nv++] = (uint64_t)1 << s;
	vals[nv++] = 264431;
	vals[nv++] = 264431 + 1;
	vals[nv++] = UINT64_MAX - 1;
	vals[nv++] = (uint64_t)-42; /* a negative int64 */
	for (size_t i = 0; i < nv; i++) {
		for (int d = -1; d <= 1; d++) {
			char        buf[10], *w = buf;
			const char *r = buf;
			uint64_t    in = vals[i] + (uint64_t)(int64_t)d, out;
			int n = spop_encode_varint(&w, buf + sizeof(buf), in);

			cr_assert(n >= 1 && n <= 10);
			cr_assert_eq(spop_decode_varint(&r, buf + n, &out), n);
			cr_assert_eq(out, in);
		}
	}
}

Test(spop, varint_eleven_continuation_bytes_is_error)
{
	static const char b[] =
		"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00";
	const char *p = b;
	uint64_t    v = 7;

	cr_assert_eq(spop_decode_varint(&p, p + sizeof(b) - 1, &v), -1);
	cr_assert_eq(p, b, "cursor must not move on error");
	cr_assert_eq(v, 7);
}

Test(spop, varint_ten_bytes_still_continuing_is_error)
{
	/* The 10th byte has bit 7 set: an 11th would follow. Refused even
	 * before the 11th byte arrives. */
	static const char b[] = "\xf0\x80\x80\x80\x80\x80\x80\x80\x80\x80";
	const char       *p = b;
	uint64_t          v;

	cr_assert_eq(spop_decode_varint(&p, p + 10, &v), -1);
}

Test(spop, varint_overflow_of_64_bits_is_error)
{
	/* 2^64-1 with its last byte bumped: the sum wraps. */
	static const char wrap[] = "\xff\xf0\xfe\xfe\xfe\xfe\xfe\xfe\xfe\x0f";
	/* A last byte whose bits land above bit 63. */
	static const char high[] = "\xf0\x80\x80\x80\x80\x80\x80\x80\x80\x10";
	const char       *p = wrap;
	uint64_t          v;

	cr_assert_eq(spop_decode_varint(&p, p + 10, &v), -1);
	p = high;
	cr_assert_eq(spop_decode_varint(&p, p + 10, &v), -1);
}

Test(spop, varint_truncated_is_incomplete)
{
	const char *b = "\xff\xf0\xfe\xfe\xfe\xfe\xfe\xfe\xfe\x0e";

	for (size_t k = 0; k < 10; k++) {
		const char *p = b;
		uint64_t    v;

		cr_assert_eq(spop_decode_varint(&p, b + k, &v), SPOP_INCOMPLETE,
		             "prefix %zu", k);
		cr_assert_eq(p, b);
	}
}

Test(spop, varint_encode_without_room_fails)
{
	char buf[3], *p = buf;

	cr_assert_eq(spop_encode_varint(&p, buf + 2, 2288), -1);
	cr_assert_eq(p, buf);
	cr_assert_eq(spop_encode_varint(&p, buf + 3, 2288), 3);
}

/* ---- typed data -------------------------------------------------------- */

Test(spop, data_every_type_round_trips)
{
	struct spop_data   in[10];
	char               buf[256];
	struct spop_writer w;
	const char        *p;

	memset(in, 0, sizeof(in));
	in[0].type = SPOP_DATA_NULL;
	in[1].type = SPOP_DATA_BOOL;
	in[1].v.b = true;
	in[2].type = SPOP_DATA_INT32;
	in[2].v.i = -5;
	in[3].type = SPOP_DATA_UINT32;
	in[3].v.u = 4000000000u;
	in[4].type = SPOP_DATA_INT64;
	in[4].v.i = INT64_MIN;
	in[5].type = SPOP_DATA_UINT64;
	in[5].v.u = UINT64_MAX;
	in[6].type = SPOP_DATA_IPV4;
	memcpy(in[6].v.ipv4, "\xc0\xa8\x00\x01", 4);
	in[7].type = SPOP_DATA_IPV6;
	memcpy(in[7].v.ipv6,
	       "\x20\x01\x0d\xb8\x00\x00\x00\x00"
	       "\x00\x00\x00\x00\x00\x00\x00\x01",
	       16);
	in[8].type = SPOP_DATA_STRING;
	in[8].v.str.ptr = "hello";
	in[8].v.str.len = 5;
	in[9].type = SPOP_DATA_BINARY;
	in[9].v.str.ptr = "\x00\xff\x00";
	in[9].v.str.len = 3;

	writer_raw(&w, buf, sizeof(buf));
	for (int i = 0; i < 10; i++)
		spop_w_data(&w, &in[i]);
	cr_assert(!w.err);
	p = buf;
	for (int i = 0; i < 10; i++) {
		struct spop_data out;

		cr_assert_gt(spop_decode_data(&p, w.p, &out), 0, "type %d", i);
		cr_assert_eq(out.type, in[i].type);
		switch (out.type) {
		case SPOP_DATA_NULL:
			break;
		case SPOP_DATA_BOOL:
			cr_assert_eq(out.v.b, in[i].v.b);
			break;
		case SPOP_DATA_INT32:
		case SPOP_DATA_INT64:
			cr_assert_eq(out.v.i, in[i].v.i);
			break;
		case SPOP_DATA_UINT32:
		case SPOP_DATA_UINT64:
			cr_assert_eq(out.v.u, in[i].v.u);
			break;
		case SPOP_DATA_IPV4:
			cr_assert(memcmp(out.v.ipv4, in[i].v.ipv4, 4) == 0);
			break;
		case SPOP_DATA_IPV6:
			cr_assert(memcmp(out.v.ipv6, in[i].v.ipv6, 16) == 0);
			break;
		default:
			cr_assert_eq(out.v.str.len, in[i].v.str.len);
			cr_assert(memcmp(out.v.str.ptr, in[i].v.str.ptr,
			                 out.v.str.len) == 0);
			cr_assert(out.v.str.ptr >= buf && out.v.str.ptr < w.p,
			          "strings are slices of the input");
			break;
		}
	}
	cr_assert_eq(p, w.p);
}

Test(spop, bool_false_encodes_as_0x01_and_true_as_0x11)
{
	char               buf[8];
	struct spop_writer w;
	struct spop_data   f = { .type = SPOP_DATA_BOOL, .v.b = false };
	struct spop_data   t = { .type = SPOP_DATA_BOOL, .v.b = true };

	writer_raw(&w, buf, sizeof(buf));
	spop_w_bool(&w, false);
	spop_w_bool(&w, true);
	spop_w_data(&w, &f);
	spop_w_data(&w, &t);
	cr_assert(!w.err);
	cr_assert_eq(w.p - buf, 4);
	cr_assert(memcmp(buf, "\x01\x11\x01\x11", 4) == 0,
	          "got %02x %02x %02x %02x", (unsigned char)buf[0],
	          (unsigned char)buf[1], (unsigned char)buf[2],
	          (unsigned char)buf[3]);
}

Test(spop, bool_decodes_from_flag_0x10)
{
	struct spop_data d;
	const char      *p;

	p = "\x01";
	cr_assert_eq(spop_decode_data(&p, p + 1, &d), 1);
	cr_assert_eq(d.type, SPOP_DATA_BOOL);
	cr_assert_eq(d.v.b, false);
	p = "\x11";
	cr_assert_eq(spop_decode_data(&p, p + 1, &d), 1);
	cr_assert_eq(d.type, SPOP_DATA_BOOL);
	cr_assert_eq(d.v.b, true);
	p = "\x10"; /* negasus's old "false": type NULL, not BOOL */
	cr_assert_eq(spop_decode_data(&p, p + 1, &d), 1);
	cr_assert_eq(d.type, SPOP_DATA_NULL);
}

Test(spop, reserved_data_types_are_rejected)
{
	for (int t = 10; t <= 15; t++) {
		char             b[2] = { (char)t, 0 };
		const char      *p = b;
		struct spop_data d;

		cr_assert_eq(spop_decode_data(&p, b + 2, &d), -1, "type %d", t);
		cr_assert_eq(p, b);
	}
}

Test(spop, reserved_data_type_in_notify_is_invalid)
{
	static const char   frame[] = "\x00\x00\x00\x0e"
				      "\x03"
				      "\x00\x00\x00\x01"
				      "\x01"
				      "\x01"
				      "\x01"
				      "m"
				      "\x01"
				      "\x01"
				      "a"
				      "\x0c"
				      "\x00";
	struct spop_frame   f;
	struct spop_iter    it;
	struct spop_message m;
	int                 st = -1;

	decode_ok(BYTES(frame), &f);
	it.p = f.payload;
	it.end = f.payload + f.len;
	cr_assert_eq(spop_next_message(&it, &m, &st), -1);
	cr_assert_eq(st, SPOP_ST_INVALID);
}

Test(spop, truncated_data_is_incomplete)
{
	static const struct {
		const char *b;
		size_t      len;
	} whole[] = {
		{ "\x03\xfc\xf0\x06", 4 },
		{ "\x06\x7f\x00\x00\x01", 5 },
		{ "\x07"
		  "0123456789abcdef",
		  17 },
		{ "\x08\x03"
		  "GET",
		  5 },
		{ "\x09\xf0\x00", 3 }, /* claims 240 bytes */
	};

	for (size_t i = 0; i < sizeof(whole) / sizeof(whole[0]); i++) {
		for (size_t k = 0; k < whole[i].len; k++) {
			const char      *p = whole[i].b;
			struct spop_data d;

			cr_assert_eq(spop_decode_data(&p, p + k, &d),
			             SPOP_INCOMPLETE, "vector %zu prefix %zu",
			             i, k);
		}
	}
}

/* ---- LAB byte vectors (SPOP.md 1.10) ----------------------------------- */

Test(spop, lab_haproxy_hello_decodes)
{
	struct spop_frame f;
	struct spop_hello h;
	int               st = -1;

	cr_assert_eq(sizeof(lab_hello) - 1, 4 + 129);
	decode_ok(BYTES(lab_hello), &f);
	cr_assert_eq(f.type, SPOP_FRM_HAPROXY_HELLO);
	cr_assert_eq(f.flags, SPOP_FL_FIN);
	cr_assert_eq(f.stream_id, 0);
	cr_assert_eq(f.frame_id, 0);
	cr_assert_eq(f.payload, lab_hello + 11);
	cr_assert_eq(f.len, 129 - 7);
	cr_assert_eq(spop_check_order(f.type, false, &st), 0);
	cr_assert_eq(spop_decode_hello(f.payload, f.len, &h, &st), 0,
	             "status %d", st);
	cr_assert(h.has_versions && str_is(h.versions, "2.0"));
	cr_assert(h.has_max_frame_size);
	cr_assert_eq(h.max_frame_size, 16380);
	cr_assert(h.has_capabilities);
	cr_assert(str_is(h.capabilities, "pipelining,async"));
	cr_assert(spop_list_has(h.capabilities, "pipelining"));
	cr_assert(spop_list_has(h.capabilities, "async"));
	cr_assert(!spop_list_has(h.capabilities, "fragmentation"));
	cr_assert(str_is(h.engine_id, "3e4f9c2a-1b7d-4c85-9a0e-6f2d8b1c5e73"));
	cr_assert(!h.healthcheck);
}

Test(spop, healthcheck_hello_decodes)
{
	struct spop_frame f;
	struct spop_hello h;
	int               st = -1;

	cr_assert_eq(sizeof(lab_hc_hello) - 1, 4 + 78);
	decode_ok(BYTES(lab_hc_hello), &f);
	cr_assert_eq(spop_decode_hello(f.payload, f.len, &h, &st), 0,
	             "status %d", st);
	cr_assert(h.healthcheck);
	cr_assert(h.has_capabilities);
	cr_assert_eq(h.capabilities.len, 0);
	cr_assert(!spop_list_has(h.capabilities, "pipelining"));
	cr_assert_eq(h.engine_id.len, 0, "no engine-id in a health check");
	cr_assert_eq(h.max_frame_size, 16380);
}

Test(spop, lab_notify_decodes)
{
	struct spop_frame      f;
	struct spop_iter       it;
	struct spop_message    m;
	const struct spop_arg *a;
	int                    st = -1;

	decode_ok(BYTES(lab_notify), &f);
	cr_assert_eq(f.type, SPOP_FRM_NOTIFY);
	cr_assert_eq(f.stream_id, 0, "sid 0 is legal in 2.6");
	cr_assert_eq(f.frame_id, 1);
	it.p = f.payload;
	it.end = f.payload + f.len;
	cr_assert_eq(spop_next_message(&it, &m, &st), 1);
	cr_assert(str_is(m.name, "rl-quota"));
	cr_assert_eq(m.nargs, 5);
	cr_assert_eq(m.nargs_total, 5);
	cr_assert(str_is(m.args[0].name, "tenant"));
	cr_assert_eq(m.args[0].value.type, SPOP_DATA_STRING);
	cr_assert(str_is(m.args[0].value.v.str, "acme"));
	cr_assert(str_is(m.args[1].value.v.str, "gold"));
	cr_assert(str_is(m.args[2].value.v.str, "/api/x"));
	cr_assert(str_is(m.args[3].name, "method"));
	cr_assert(str_is(m.args[3].value.v.str, "GET"));
	a = spop_find_arg(&m, "ip", 2);
	cr_assert_not_null(a);
	cr_assert_eq(a->value.type, SPOP_DATA_IPV4);
	cr_assert(memcmp(a->value.v.ipv4, "\x7f\x00\x00\x01", 4) == 0);
	cr_assert_null(spop_find_arg(&m, "i", 1));
	cr_assert_null(spop_find_arg(&m, "user", 4));
	cr_assert_eq(spop_next_message(&it, &m, &st), 0, "one message only");
}

Test(spop, lab_vectors_are_rebuilt_byte_for_byte_by_the_writer)
{
	char                 buf[256];
	struct spop_writer   w;
	static const uint8_t ip[4] = { 127, 0, 0, 1 };
	struct spop_data     d = { .type = SPOP_DATA_IPV4 };
	int                  n;

	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_HAPROXY_HELLO, 0, 0);
	spop_w_kv_str(&w, "supported-versions", "2.0", 3);
	spop_w_kv_uint32(&w, "max-frame-size", 16380);
	spop_w_kv_str(&w, "capabilities", "pipelining,async", 16);
	spop_w_kv_str(&w, "engine-id", "3e4f9c2a-1b7d-4c85-9a0e-6f2d8b1c5e73",
	              36);
	n = spop_w_end(&w);
	cr_assert_eq(n, (int)sizeof(lab_hello) - 1);
	cr_assert(memcmp(buf, lab_hello, (size_t)n) == 0);

	memcpy(d.v.ipv4, ip, 4);
	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_NOTIFY, 0, 1);
	spop_w_message(&w, "rl-quota", 5);
	spop_w_kv_str(&w, "tenant", "acme", 4);
	spop_w_kv_str(&w, "plan", "gold", 4);
	spop_w_kv_str(&w, "route", "/api/x", 6);
	spop_w_kv_str(&w, "method", "GET", 3);
	spop_w_name(&w, "ip", 2);
	spop_w_data(&w, &d);
	n = spop_w_end(&w);
	cr_assert_eq(n, (int)sizeof(lab_notify) - 1);
	cr_assert(memcmp(buf, lab_notify, (size_t)n) == 0);
}

/* ---- prefixes ---------------------------------------------------------- */

Test(spop, every_strict_prefix_of_hello_is_incomplete)
{
	assert_all_prefixes_incomplete(BYTES(lab_hello));
	assert_all_prefixes_incomplete(BYTES(lab_hc_hello));
}

Test(spop, every_strict_prefix_of_notify_is_incomplete)
{
	assert_all_prefixes_incomplete(BYTES(lab_notify));
}

Test(spop, every_strict_prefix_of_ack_and_disconnect_is_incomplete)
{
	char               buf[512];
	struct spop_writer w;
	int                n;

	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_ACK, 264432, 2288);
	spop_w_set_var_int(&w, SPOP_SCOPE_TXN, "remaining", 41);
	spop_w_unset_var(&w, SPOP_SCOPE_TXN, "reset");
	n = spop_w_end(&w);
	cr_assert_gt(n, 0);
	assert_all_prefixes_incomplete(buf, (size_t)n);

	n = spop_encode_disconnect(buf, sizeof(buf), SPOP_FRM_AGENT_DISCONNECT,
	                           SPOP_ST_NORMAL, NULL);
	cr_assert_gt(n, 0);
	assert_all_prefixes_incomplete(buf, (size_t)n);
	assert_all_prefixes_incomplete(BYTES(empty_ack));
}

/* ---- malformed frames -------------------------------------------------- */

Test(spop, frame_length_zero_is_invalid)
{
	cr_assert_eq(decode_status("\x00\x00\x00\x00", 4, SPOP_MAX_FRAME_SIZE),
	             SPOP_ST_INVALID);
}

Test(spop, frame_length_too_short_for_a_header_is_invalid)
{
	cr_assert_eq(decode_status("\x00\x00\x00\x06", 4, SPOP_MAX_FRAME_SIZE),
	             SPOP_ST_INVALID);
}

Test(spop, frame_over_max_size_is_refused_from_the_length_alone)
{
	struct spop_frame f;
	int               st = -1;

	/* 16381 > 16380, with only the 4 length bytes in. */
	cr_assert_eq(decode_status("\x00\x00\x3f\xfd", 4, 16380),
	             SPOP_ST_TOO_BIG);
	cr_assert_eq(decode_status("\xff\xff\xff\xff", 4, 16380),
	             SPOP_ST_TOO_BIG);
	/* The same LAB HELLO (129) against a small negotiated size. */
	cr_assert_eq(decode_status(lab_hello, 4, 128), SPOP_ST_TOO_BIG);
	cr_assert_eq(spop_decode_frame(BYTES(lab_hello), 129, &f, &st),
	             (int)sizeof(lab_hello) - 1, "length == max is fine");
	/* 16380 itself is only incomplete. */
	cr_assert_eq(
		spop_decode_frame("\x00\x00\x3f\xfc\x03", 5, 16380, &f, &st),
		SPOP_INCOMPLETE);
}

Test(spop, frame_with_fin_clear_is_fragmentation)
{
	static const char frame[] = "\x00\x00\x00\x07"
				    "\x03"
				    "\x00\x00\x00\x00"
				    "\x01"
				    "\x01";
	static const char abort_only[] = "\x00\x00\x00\x07"
					 "\x03"
					 "\x00\x00\x00\x02"
					 "\x01"
					 "\x01";

	cr_assert_eq(decode_status(BYTES(frame), SPOP_MAX_FRAME_SIZE),
	             SPOP_ST_FRAG_NOT_SUPPORTED);
	cr_assert_eq(decode_status(BYTES(abort_only), SPOP_MAX_FRAME_SIZE),
	             SPOP_ST_FRAG_NOT_SUPPORTED);
}

Test(spop, frame_flags_are_big_endian)
{
	/* FIN sent host-endian on a little-endian box (SPOP 1.0 bug). */
	static const char frame[] = "\x00\x00\x00\x07"
				    "\x03"
				    "\x01\x00\x00\x00"
				    "\x01"
				    "\x01";

	cr_assert_eq(decode_status(BYTES(frame), SPOP_MAX_FRAME_SIZE),
	             SPOP_ST_FRAG_NOT_SUPPORTED);
}

Test(spop, frame_of_unknown_type_is_invalid)
{
	static const uint8_t types[] = { 4, 5, 100, 104, 255 };

	for (size_t i = 0; i < sizeof(types); i++) {
		char frame[] = "\x00\x00\x00\x07"
			       "\x00"
			       "\x00\x00\x00\x01"
			       "\x00"
			       "\x00";

		frame[4] = (char)types[i];
		cr_assert_eq(decode_status(frame, 11, SPOP_MAX_FRAME_SIZE),
		             SPOP_ST_INVALID, "type %u", types[i]);
	}
}

Test(spop, frame_ids_must_fit_in_the_frame)
{
	/* sid f0 needs one more byte, but the frame ends after the fid. */
	static const char sid_cut[] =
		"\x00\x00\x00\x07"
		"\x03"
		"\x00\x00\x00\x01"
		"\xf0"
		"\xf0"
		"\x00\x00"; /* bytes of the next frame, not of this one */
	/* A sid of 11 varint bytes. */
	static const char sid_long[] =
		"\x00\x00\x00\x12"
		"\x03"
		"\x00\x00\x00\x01"
		"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00"
		"\x01";

	cr_assert_eq(decode_status(BYTES(sid_cut), SPOP_MAX_FRAME_SIZE),
	             SPOP_ST_INVALID);
	cr_assert_eq(decode_status(BYTES(sid_long), SPOP_MAX_FRAME_SIZE),
	             SPOP_ST_INVALID);
}

Test(spop, frames_are_cut_one_by_one_from_a_stream)
{
	char              buf[512];
	size_t            len = 0, off = 0;
	struct spop_frame f;
	int               st, n, count = 0;
	uint8_t           want[] = { SPOP_FRM_HAPROXY_HELLO, SPOP_FRM_NOTIFY,
		                     SPOP_FRM_ACK };

	memcpy(buf + len, BYTES(lab_hello));
	len += sizeof(lab_hello) - 1;
	memcpy(buf + len, BYTES(lab_notify));
	len += sizeof(lab_notify) - 1;
	memcpy(buf + len, BYTES(empty_ack));
	len += sizeof(empty_ack) - 1;
	while ((n = spop_decode_frame(buf + off, len - off, SPOP_MAX_FRAME_SIZE,
	                              &f, &st)) > 0) {
		cr_assert_eq(f.type, want[count]);
		count++;
		off += (size_t)n;
	}
	cr_assert_eq(n, SPOP_INCOMPLETE);
	cr_assert_eq(count, 3);
	cr_assert_eq(off, len);
}

Test(spop, notify_before_hello_is_invalid)
{
	struct spop_frame f;
	int               st = -1;

	decode_ok(BYTES(lab_notify), &f);
	cr_assert_eq(spop_check_order(f.type, false, &st), -1);
	cr_assert_eq(st, SPOP_ST_INVALID);
	st = -1;
	cr_assert_eq(spop_check_order(SPOP_FRM_HAPROXY_DISCONNECT, false, &st),
	             -1);
	cr_assert_eq(st, SPOP_ST_INVALID);
	cr_assert_eq(spop_check_order(SPOP_FRM_HAPROXY_HELLO, false, &st), 0);
}

Test(spop, frame_order_after_hello)
{
	int st;

	cr_assert_eq(spop_check_order(SPOP_FRM_NOTIFY, true, &st), 0);
	cr_assert_eq(spop_check_order(SPOP_FRM_HAPROXY_DISCONNECT, true, &st),
	             0);
	st = -1;
	cr_assert_eq(spop_check_order(SPOP_FRM_HAPROXY_HELLO, true, &st), -1);
	cr_assert_eq(st, SPOP_ST_INVALID);
	st = -1;
	cr_assert_eq(spop_check_order(SPOP_FRM_ACK, true, &st), -1);
	cr_assert_eq(st, SPOP_ST_INVALID);
	st = -1;
	cr_assert_eq(spop_check_order(SPOP_FRM_AGENT_HELLO, false, &st), -1);
	cr_assert_eq(st, SPOP_ST_INVALID);
}

Test(spop, unset_frames_are_fragmentation)
{
	static const char unset[] = "\x00\x00\x00\x07"
				    "\x00"
				    "\x00\x00\x00\x01"
				    "\x01"
				    "\x01";
	struct spop_frame f;
	int               st = -1;

	decode_ok(BYTES(unset), &f);
	cr_assert_eq(spop_check_order(f.type, true, &st), -1);
	cr_assert_eq(st, SPOP_ST_FRAG_NOT_SUPPORTED);
	st = -1;
	cr_assert_eq(spop_check_order(f.type, false, &st), -1);
	cr_assert_eq(st, SPOP_ST_FRAG_NOT_SUPPORTED);
}

Test(spop, truncated_typed_data_inside_complete_frame_is_invalid)
{
	/* The arg claims an 8-byte string; the frame ends after 3. */
	static const char frame[] = "\x00\x00\x00\x11"
				    "\x03"
				    "\x00\x00\x00\x01"
				    "\x01"
				    "\x01"
				    "\x01"
				    "m"
				    "\x01"
				    "\x01"
				    "a"
				    "\x08\x08"
				    "abc";
	/* An IPv4 cut after 2 bytes. */
	static const char ip_cut[] = "\x00\x00\x00\x0e"
				     "\x03"
				     "\x00\x00\x00\x01"
				     "\x01"
				     "\x01"
				     "\x01"
				     "m"
				     "\x01"
				     "\x00"
				     "\x06\x7f\x00";
	/* The message name runs past the end. */
	static const char name_cut[] = "\x00\x00\x00\x0b"
				       "\x03"
				       "\x00\x00\x00\x01"
				       "\x01"
				       "\x01"
				       "\x09"
				       "rl"
				       "\x00";
	/* NB-ARGS missing. */
	static const char nb_cut[] = "\x00\x00\x00\x09"
				     "\x03"
				     "\x00\x00\x00\x01"
				     "\x01"
				     "\x01"
				     "\x01"
				     "m";
	const char       *frames[] = { frame, ip_cut, name_cut, nb_cut };
	size_t            lens[] = { sizeof(frame) - 1, sizeof(ip_cut) - 1,
		                     sizeof(name_cut) - 1, sizeof(nb_cut) - 1 };

	for (size_t i = 0; i < 4; i++) {
		struct spop_frame   f;
		struct spop_iter    it;
		struct spop_message m;
		int                 st = -1;

		decode_ok(frames[i], lens[i], &f);
		it.p = f.payload;
		it.end = f.payload + f.len;
		cr_assert_eq(spop_next_message(&it, &m, &st), -1, "frame %zu",
		             i);
		cr_assert_eq(st, SPOP_ST_INVALID);
		cr_assert_eq(it.p, f.payload, "cursor stays put on error");
	}
}

Test(spop, truncated_kv_is_invalid)
{
	struct spop_iter it;
	struct spop_str  k;
	struct spop_data v;
	int              st = -1;

	it.p = "\x03"
	       "key"
	       "\x03\xfc";
	it.end = it.p + 6;
	cr_assert_eq(spop_next_kv(&it, &k, &v, &st), -1);
	cr_assert_eq(st, SPOP_ST_INVALID);
}

/* ---- HELLO validation -------------------------------------------------- */

static int
hello_status(void (*fill)(struct spop_writer *), struct spop_hello *h)
{
	char               buf[512];
	struct spop_writer w;
	struct spop_frame  f;
	int                st = -1, n;

	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_HAPROXY_HELLO, 0, 0);
	fill(&w);
	n = spop_w_end(&w);
	cr_assert_gt(n, 0);
	decode_ok(buf, (size_t)n, &f);
	if (spop_decode_hello(f.payload, f.len, h, &st) == 0)
		return 0;
	return st;
}

static void
fill_no_version(struct spop_writer *w)
{
	spop_w_kv_uint32(w, "max-frame-size", 16380);
	spop_w_kv_str(w, "capabilities", "", 0);
}

static void
fill_bad_version(struct spop_writer *w)
{
	spop_w_kv_str(w, "supported-versions", "1.0, 2.1", 8);
	spop_w_kv_uint32(w, "max-frame-size", 16380);
}

static void
fill_spaced_versions(struct spop_writer *w)
{
	spop_w_kv_str(w, "supported-versions", " 1.0 , 2.0 ", 11);
	spop_w_kv_uint32(w, "max-frame-size", 16380);
}

static void
fill_no_frame_size(struct spop_writer *w)
{
	spop_w_kv_str(w, "supported-versions", "2.0", 3);
	spop_w_kv_str(w, "capabilities", "pipelining", 10);
}

static void
fill_small_frame_size(struct spop_writer *w)
{
	spop_w_kv_str(w, "supported-versions", "2.0", 3);
	spop_w_kv_uint32(w, "max-frame-size", 255);
}

static void
fill_negative_frame_size(struct spop_writer *w)
{
	struct spop_data d = { .type = SPOP_DATA_INT32, .v.i = -16380 };

	spop_w_kv_str(w, "supported-versions", "2.0", 3);
	spop_w_name(w, "max-frame-size", 14);
	spop_w_data(w, &d);
}

static void
fill_string_frame_size(struct spop_writer *w)
{
	spop_w_kv_str(w, "supported-versions", "2.0", 3);
	spop_w_kv_str(w, "max-frame-size", "16380", 5);
}

static void
fill_unknown_keys(struct spop_writer *w)
{
	spop_w_kv_uint32(w, "future-key", 1);
	spop_w_kv_str(w, "supported-versions", "2.0", 3);
	spop_w_kv_bool(w, "another", false);
	spop_w_kv_uint32(w, "max-frame-size", 4096);
	/* Prefixes of known keys are not those keys (unlike HAProxy). */
	spop_w_kv_str(w, "max-frame-size-x", "junk", 4);
}

Test(spop, hello_without_version_is_status_5)
{
	struct spop_hello h;

	cr_assert_eq(hello_status(fill_no_version, &h), SPOP_ST_NO_VSN);
}

Test(spop, hello_without_2_0_is_status_8)
{
	struct spop_hello h;

	cr_assert_eq(hello_status(fill_bad_version, &h), SPOP_ST_BAD_VSN);
	cr_assert_eq(hello_status(fill_spaced_versions, &h), 0);
}

Test(spop, hello_without_max_frame_size_is_status_6)
{
	struct spop_hello h;

	cr_assert_eq(hello_status(fill_no_frame_size, &h),
	             SPOP_ST_NO_FRAME_SIZE);
}

Test(spop, hello_max_frame_size_out_of_range_is_status_9)
{
	struct spop_hello h;

	cr_assert_eq(hello_status(fill_small_frame_size, &h),
	             SPOP_ST_BAD_FRAME_SIZE);
	cr_assert_eq(hello_status(fill_negative_frame_size, &h),
	             SPOP_ST_BAD_FRAME_SIZE);
	cr_assert_eq(hello_status(fill_string_frame_size, &h), SPOP_ST_INVALID);
}

Test(spop, hello_max_frame_size_as_any_integer_type)
{
	static const enum spop_data_type types[] = {
		SPOP_DATA_INT32,
		SPOP_DATA_UINT32,
		SPOP_DATA_INT64,
		SPOP_DATA_UINT64,
	};

	for (size_t i = 0; i < 4; i++) {
		char               buf[128];
		struct spop_writer w;
		struct spop_data   d = { .type = types[i] };
		struct spop_hello  h;
		int                st = -1, n;

		if (types[i] == SPOP_DATA_INT32 || types[i] == SPOP_DATA_INT64)
			d.v.i = 9000;
		else
			d.v.u = 9000;
		writer_raw(&w, buf, sizeof(buf));
		spop_w_kv_str(&w, "supported-versions", "2.0", 3);
		spop_w_name(&w, "max-frame-size", 14);
		spop_w_data(&w, &d);
		n = (int)(w.p - buf);
		cr_assert_eq(spop_decode_hello(buf, (size_t)n, &h, &st), 0,
		             "type %d status %d", types[i], st);
		cr_assert_eq(h.max_frame_size, 9000);
	}
}

Test(spop, hello_unknown_keys_are_skipped)
{
	struct spop_hello h;

	cr_assert_eq(hello_status(fill_unknown_keys, &h), 0);
	cr_assert_eq(h.max_frame_size, 4096);
	cr_assert(!h.has_capabilities);
}

/* ---- lists and args ---------------------------------------------------- */

Test(spop, list_has_ignores_spaces)
{
	struct spop_str l = S(" pipelining ,\tasync,fragmentation ");
	struct spop_str one = S("pipelining");
	struct spop_str empty = S("");

	cr_assert(spop_list_has(l, "pipelining"));
	cr_assert(spop_list_has(l, "async"));
	cr_assert(spop_list_has(l, "fragmentation"));
	cr_assert(!spop_list_has(l, "pipe"));
	cr_assert(!spop_list_has(l, "lining"));
	cr_assert(!spop_list_has(l, "pipelining ,"));
	cr_assert(!spop_list_has(l, ""));
	cr_assert(spop_list_has(one, "pipelining"));
	cr_assert(!spop_list_has(one, "pipelining2"));
	cr_assert(!spop_list_has(empty, "pipelining"));
	l = (struct spop_str)S(",, ,async,");
	cr_assert(spop_list_has(l, "async"));
}

Test(spop, every_arg_of_a_message_is_kept)
{
	char                buf[8192], name[8];
	struct spop_writer  w;
	struct spop_frame   f;
	struct spop_iter    it;
	struct spop_message m;
	int                 st = -1, n;

	/* NB-ARGS is one byte: 255 is the most HAProxy can send */
	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_NOTIFY, 1, 1);
	spop_w_message(&w, "many", 255);
	for (int i = 0; i < 255; i++) {
		snprintf(name, sizeof(name), "a%d", i);
		spop_w_name(&w, name, strlen(name));
		spop_w_int(&w, i);
	}
	spop_w_message(&w, "next", 1);
	spop_w_kv_str(&w, "x", "y", 1);
	n = spop_w_end(&w);
	cr_assert_gt(n, 0);
	decode_ok(buf, (size_t)n, &f);
	it.p = f.payload;
	it.end = f.payload + f.len;
	cr_assert_eq(spop_next_message(&it, &m, &st), 1);
	cr_assert_eq(m.nargs, 255);
	cr_assert_eq(m.nargs_total, 255);
	cr_assert(str_is(m.args[254].name, "a254"));
	cr_assert_eq(m.args[254].value.v.i, 254);
	cr_assert_not_null(spop_find_arg(&m, "a200", 4), "every arg is kept");
	cr_assert_eq(spop_next_message(&it, &m, &st), 1);
	cr_assert(str_is(m.name, "next"));
	cr_assert_eq(spop_next_message(&it, &m, &st), 0);

	/* A reserved type in the last arg still fails the message. */
	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_NOTIFY, 1, 1);
	spop_w_message(&w, "many", 255);
	for (int i = 0; i < 254; i++) {
		spop_w_name(&w, "", 0);
		spop_w_bool(&w, true);
	}
	spop_w_name(&w, "", 0);
	spop_w_u8(&w, 0x0d);
	n = spop_w_end(&w);
	decode_ok(buf, (size_t)n, &f);
	it.p = f.payload;
	it.end = f.payload + f.len;
	cr_assert_eq(spop_next_message(&it, &m, &st), -1);
	cr_assert_eq(st, SPOP_ST_INVALID);
}

/* ---- round trips of every frame type ----------------------------------- */

Test(spop, haproxy_hello_round_trips)
{
	char               buf[256];
	struct spop_writer w;
	struct spop_frame  f;
	struct spop_hello  h;
	int                st = -1, n;

	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_HAPROXY_HELLO, 0, 0);
	spop_w_kv_str(&w, "supported-versions", "2.0", 3);
	spop_w_kv_uint32(&w, "max-frame-size", 8188);
	spop_w_kv_str(&w, "capabilities", "pipelining", 10);
	spop_w_kv_str(&w, "engine-id", "e1", 2);
	spop_w_kv_bool(&w, "healthcheck", false);
	n = spop_w_end(&w);
	decode_ok(buf, (size_t)n, &f);
	cr_assert_eq(f.type, SPOP_FRM_HAPROXY_HELLO);
	cr_assert_eq(spop_decode_hello(f.payload, f.len, &h, &st), 0);
	cr_assert_eq(h.max_frame_size, 8188);
	cr_assert(str_is(h.capabilities, "pipelining"));
	cr_assert(str_is(h.engine_id, "e1"));
	cr_assert(!h.healthcheck);
}

Test(spop, agent_hello_round_trips)
{
	char              buf[256];
	struct spop_frame f;
	struct spop_hello h;
	struct spop_iter  it;
	struct spop_str   k;
	struct spop_data  v;
	int               st = -1, n;

	n = spop_encode_agent_hello(buf, sizeof(buf), 16380, "pipelining");
	cr_assert_gt(n, 0);
	decode_ok(buf, (size_t)n, &f);
	cr_assert_eq(f.type, SPOP_FRM_AGENT_HELLO);
	cr_assert_eq(f.stream_id, 0);
	cr_assert_eq(f.frame_id, 0);
	cr_assert_eq(spop_decode_hello(f.payload, f.len, &h, &st), 0);
	cr_assert(str_is(h.versions, "2.0"));
	cr_assert_eq(h.max_frame_size, 16380);
	cr_assert(str_is(h.capabilities, "pipelining"));
	/* The wire form: version STRING, max-frame-size UINT32. */
	it.p = f.payload;
	it.end = f.payload + f.len;
	cr_assert_eq(spop_next_kv(&it, &k, &v, &st), 1);
	cr_assert(str_is(k, "version"));
	cr_assert_eq(spop_next_kv(&it, &k, &v, &st), 1);
	cr_assert(str_is(k, "max-frame-size"));
	cr_assert_eq(v.type, SPOP_DATA_UINT32);
	cr_assert_eq(spop_next_kv(&it, &k, &v, &st), 1);
	cr_assert(str_is(k, "capabilities"));
	cr_assert_eq(v.type, SPOP_DATA_STRING);
	cr_assert_eq(spop_next_kv(&it, &k, &v, &st), 0);
	cr_assert_eq(spop_encode_agent_hello(buf, 20, 16380, "pipelining"), -1);
}

Test(spop, notify_round_trips)
{
	char                buf[512];
	struct spop_writer  w;
	struct spop_frame   f;
	struct spop_iter    it;
	struct spop_message m;
	int                 st = -1, n;

	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_NOTIFY, 7, 3);
	spop_w_message(&w, "rl-login", 3);
	spop_w_kv_str(&w, "user", "bob", 3);
	spop_w_name(&w, "", 0);
	spop_w_uint32(&w, 80);
	spop_w_kv_bool(&w, "admin", false);
	spop_w_message(&w, "empty", 0);
	n = spop_w_end(&w);
	decode_ok(buf, (size_t)n, &f);
	cr_assert_eq(f.type, SPOP_FRM_NOTIFY);
	cr_assert_eq(f.stream_id, 7);
	cr_assert_eq(f.frame_id, 3);
	it.p = f.payload;
	it.end = f.payload + f.len;
	cr_assert_eq(spop_next_message(&it, &m, &st), 1);
	cr_assert(str_is(m.name, "rl-login"));
	cr_assert_eq(m.nargs, 3);
	cr_assert(str_is(m.args[0].value.v.str, "bob"));
	cr_assert_eq(m.args[1].name.len, 0, "unnamed arg");
	cr_assert_eq(m.args[1].value.v.u, 80);
	cr_assert_eq(m.args[2].value.type, SPOP_DATA_BOOL);
	cr_assert_eq(m.args[2].value.v.b, false);
	cr_assert_eq(spop_next_message(&it, &m, &st), 1);
	cr_assert(str_is(m.name, "empty"));
	cr_assert_eq(m.nargs, 0);
	cr_assert_eq(spop_next_message(&it, &m, &st), 0);
}

Test(spop, ack_with_set_var_of_every_type_and_unset_var_round_trips)
{
	char               buf[1024];
	struct spop_writer w;
	struct spop_frame  f;
	struct spop_iter   it;
	struct spop_data   vals[10], v;
	struct spop_str    name;
	int                st = -1, n, act, scope;

	memset(vals, 0, sizeof(vals));
	for (int t = 0; t < 10; t++)
		vals[t].type = (enum spop_data_type)t;
	vals[1].v.b = false;
	vals[2].v.i = -1;
	vals[3].v.u = 7;
	vals[4].v.i = INT64_MAX;
	vals[5].v.u = 1ull << 40;
	memcpy(vals[6].v.ipv4, "\x0a\x00\x00\x01", 4);
	memset(vals[7].v.ipv6, 0xab, 16);
	vals[8].v.str.ptr = "deny";
	vals[8].v.str.len = 4;
	vals[9].v.str.ptr = "\x00\x01";
	vals[9].v.str.len = 2;

	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_ACK, 2288, 16380);
	for (int t = 0; t < 10; t++)
		spop_w_set_var(&w, t % 5, "v", 1, &vals[t]);
	spop_w_set_var_int(&w, SPOP_SCOPE_TXN, "remaining", -3);
	spop_w_set_var_str(&w, SPOP_SCOPE_SESS, "action", "allow", 5);
	spop_w_unset_var(&w, SPOP_SCOPE_REQ, "reset");
	n = spop_w_end(&w);
	cr_assert_gt(n, 0);
	decode_ok(buf, (size_t)n, &f);
	cr_assert_eq(f.type, SPOP_FRM_ACK);
	cr_assert_eq(f.stream_id, 2288);
	cr_assert_eq(f.frame_id, 16380);
	it.p = f.payload;
	it.end = f.payload + f.len;
	for (int t = 0; t < 10; t++) {
		cr_assert_eq(
			spop_next_action(&it, &act, &scope, &name, &v, &st), 1);
		cr_assert_eq(act, SPOP_ACT_SET_VAR);
		cr_assert_eq(scope, t % 5);
		cr_assert(str_is(name, "v"));
		cr_assert_eq(v.type, vals[t].type, "type %d", t);
		cr_assert(v.type != SPOP_DATA_STRING ||
		          str_is(v.v.str, "deny"));
		cr_assert(v.type != SPOP_DATA_IPV6 || v.v.ipv6[15] == 0xab);
		cr_assert(v.type != SPOP_DATA_INT64 || v.v.i == INT64_MAX);
		cr_assert(v.type != SPOP_DATA_INT32 || v.v.i == -1);
		cr_assert(v.type != SPOP_DATA_UINT64 || v.v.u == 1ull << 40);
	}
	cr_assert_eq(spop_next_action(&it, &act, &scope, &name, &v, &st), 1);
	cr_assert(str_is(name, "remaining"));
	cr_assert_eq(v.type, SPOP_DATA_INT64);
	cr_assert_eq(v.v.i, -3);
	cr_assert_eq(spop_next_action(&it, &act, &scope, &name, &v, &st), 1);
	cr_assert_eq(scope, SPOP_SCOPE_SESS);
	cr_assert(str_is(v.v.str, "allow"));
	cr_assert_eq(spop_next_action(&it, &act, &scope, &name, &v, &st), 1);
	cr_assert_eq(act, SPOP_ACT_UNSET_VAR);
	cr_assert_eq(scope, SPOP_SCOPE_REQ);
	cr_assert(str_is(name, "reset"));
	cr_assert_eq(v.type, SPOP_DATA_NULL);
	cr_assert_eq(spop_next_action(&it, &act, &scope, &name, &v, &st), 0);
}

/* A name of 240 bytes or more takes a two-byte length varint. */
Test(spop, set_var_with_a_long_name_round_trips)
{
	char               buf[1024], longname[300];
	struct spop_writer w;
	struct spop_frame  f;
	struct spop_iter   it;
	struct spop_data   v;
	struct spop_str    name;
	int                st = -1, n, act, scope;

	memset(longname, 'n', sizeof(longname));
	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_ACK, 1, 1);
	spop_w_set_var_str(&w, SPOP_SCOPE_TXN, "policy", "p", 1);
	v.type = SPOP_DATA_INT64;
	v.v.i = 5;
	spop_w_set_var(&w, SPOP_SCOPE_TXN, longname, sizeof(longname), &v);
	n = spop_w_end(&w);
	cr_assert_gt(n, 0);
	decode_ok(buf, (size_t)n, &f);
	it.p = f.payload;
	it.end = f.payload + f.len;
	cr_assert_eq(spop_next_action(&it, &act, &scope, &name, &v, &st), 1);
	cr_assert(str_is(name, "policy"));
	cr_assert(str_is(v.v.str, "p"));
	cr_assert_eq(spop_next_action(&it, &act, &scope, &name, &v, &st), 1);
	cr_assert_eq(act, SPOP_ACT_SET_VAR);
	cr_assert_eq(name.len, sizeof(longname));
	cr_assert_eq(memcmp(name.ptr, longname, sizeof(longname)), 0);
	cr_assert_eq(v.v.i, 5);
	cr_assert_eq(spop_next_action(&it, &act, &scope, &name, &v, &st), 0);
}

Test(spop, action_bytes_match_the_spec)
{
	char               buf[64];
	struct spop_writer w;

	writer_raw(&w, buf, sizeof(buf));
	spop_w_set_var_int(&w, SPOP_SCOPE_TXN, "limit", 100);
	spop_w_unset_var(&w, SPOP_SCOPE_TXN, "reset");
	cr_assert(!w.err);
	cr_assert_eq(w.p - buf, 11 + 9);
	cr_assert(memcmp(buf,
	                 "\x01\x03\x02\x05"
	                 "limit"
	                 "\x04\x64"
	                 "\x02\x02\x02\x05"
	                 "reset",
	                 20) == 0);
}

Test(spop, empty_ack_is_seven_bytes)
{
	char               buf[16];
	struct spop_writer w;
	struct spop_frame  f;
	struct spop_iter   it;
	struct spop_str    name;
	struct spop_data   v;
	int                st, act, scope;

	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_ACK, 2, 1);
	cr_assert_eq(spop_w_end(&w), 11);
	cr_assert(memcmp(buf, BYTES(empty_ack)) == 0);
	decode_ok(BYTES(empty_ack), &f);
	it.p = f.payload;
	it.end = f.payload + f.len;
	cr_assert_eq(spop_next_action(&it, &act, &scope, &name, &v, &st), 0);
}

Test(spop, bad_actions_are_invalid)
{
	static const struct {
		const char *b;
		size_t      len;
	} bad[] = {
		{ "\x03\x03\x02\x01"
		  "v"
		  "\x00",
		  6 }, /* unknown action */
		{ "\x01\x02\x02\x01"
		  "v"
		  "\x00",
		  6 }, /* set-var with 2 args */
		{ "\x02\x03\x02\x01"
		  "v",
		  5 }, /* unset-var with 3 */
		{ "\x01\x03\x05\x01"
		  "v"
		  "\x00",
		  6 },             /* scope 5 */
		{ "\x01\x03", 2 }, /* cut header */
		{ "\x01\x03\x02\x01"
		  "v",
		  5 }, /* set-var without value */
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct spop_iter it = { bad[i].b, bad[i].b + bad[i].len };
		struct spop_str  name;
		struct spop_data v;
		int              st = -1, act, scope;

		cr_assert_eq(
			spop_next_action(&it, &act, &scope, &name, &v, &st), -1,
			"vector %zu", i);
		cr_assert_eq(st, SPOP_ST_INVALID);
	}
}

Test(spop, disconnects_round_trip_both_ways)
{
	static const uint8_t types[] = {
		SPOP_FRM_AGENT_DISCONNECT,
		SPOP_FRM_HAPROXY_DISCONNECT,
	};

	for (size_t i = 0; i < 2; i++) {
		char              buf[512];
		struct spop_frame f;
		struct spop_str   msg;
		int               st = -1, code = -1, n;

		n = spop_encode_disconnect(buf, sizeof(buf), types[i],
		                           SPOP_ST_TIMEOUT, "idle timeout");
		cr_assert_gt(n, 0);
		decode_ok(buf, (size_t)n, &f);
		cr_assert_eq(f.type, types[i]);
		cr_assert_eq(spop_decode_disconnect(f.payload, f.len, &code,
		                                    &msg, &st),
		             0);
		cr_assert_eq(code, SPOP_ST_TIMEOUT);
		cr_assert(str_is(msg, "idle timeout"));

		n = spop_encode_disconnect(buf, sizeof(buf), types[i], 42,
		                           NULL);
		decode_ok(buf, (size_t)n, &f);
		cr_assert_eq(spop_decode_disconnect(f.payload, f.len, &code,
		                                    &msg, &st),
		             0);
		cr_assert_eq(code, 42, "unassigned codes go through");
		cr_assert(str_is(msg, spop_strstatus(42)));
	}
	cr_assert_eq(spop_encode_disconnect((char[64]){ 0 }, 64, SPOP_FRM_ACK,
	                                    0, "x"),
	             -1);
}

Test(spop, disconnect_message_is_cut_to_255_bytes)
{
	char              msg[400], buf[512];
	struct spop_frame f;
	struct spop_str   m;
	int               st, code, n;

	memset(msg, 'x', sizeof(msg) - 1);
	msg[sizeof(msg) - 1] = '\0';
	n = spop_encode_disconnect(buf, sizeof(buf), SPOP_FRM_AGENT_DISCONNECT,
	                           SPOP_ST_INVALID, msg);
	decode_ok(buf, (size_t)n, &f);
	cr_assert_eq(spop_decode_disconnect(f.payload, f.len, &code, &m, &st),
	             0);
	cr_assert_eq(code, SPOP_ST_INVALID);
	cr_assert_eq(m.len, 255);
}

Test(spop, disconnect_without_status_code_is_unknown)
{
	struct spop_str m;
	int             st, code;

	cr_assert_eq(spop_decode_disconnect("", 0, &code, &m, &st), 0);
	cr_assert_eq(code, SPOP_ST_UNKNOWN);
	cr_assert_eq(m.len, 0);
	st = -1;
	cr_assert_eq(spop_decode_disconnect(BYTES("\x0b"
	                                          "status-code"
	                                          "\x08\x01"
	                                          "3"),
	                                    &code, &m, &st),
	             -1);
	cr_assert_eq(st, SPOP_ST_INVALID);
}

/* ---- writer ------------------------------------------------------------ */

Test(spop, writer_header_bytes)
{
	char               buf[32];
	struct spop_writer w;

	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_ACK, 300, 2);
	cr_assert_eq(spop_w_end(&w), 4 + 1 + 4 + 2 + 1);
	cr_assert(memcmp(buf,
	                 "\x00\x00\x00\x08"
	                 "\x67"
	                 "\x00\x00\x00\x01"
	                 "\xfc\x03"
	                 "\x02",
	                 12) == 0);
}

Test(spop, writer_error_is_sticky)
{
	char               buf[16];
	struct spop_writer w;
	char              *stop;

	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_ACK, 1, 1);
	cr_assert(!w.err);
	spop_w_set_var_str(&w, SPOP_SCOPE_TXN, "much-too-long-a-name", "v", 1);
	cr_assert(w.err);
	stop = w.p;
	spop_w_u8(&w, 1); /* would fit, but the frame is already lost */
	cr_assert_eq(w.p, stop);
	cr_assert_eq(spop_w_end(&w), -1);

	spop_w_begin(&w, buf, 3, SPOP_FRM_ACK, 1, 1);
	cr_assert_eq(spop_w_end(&w), -1, "no room for the length");
	spop_w_begin(&w, NULL, 0, SPOP_FRM_ACK, 1, 1);
	cr_assert_eq(spop_w_end(&w), -1);
	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_ACK, 1, 1);
	spop_w_unset_var(&w, 9, "x");
	cr_assert_eq(spop_w_end(&w), -1, "scope 9 does not exist");
	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_NOTIFY, 1, 1);
	spop_w_message(&w, "m", 256);
	cr_assert_eq(spop_w_end(&w), -1, "NB-ARGS is one byte");
}

Test(spop, writer_exact_fit_succeeds)
{
	char               buf[11];
	struct spop_writer w;

	spop_w_begin(&w, buf, sizeof(buf), SPOP_FRM_ACK, 2, 1);
	cr_assert_eq(spop_w_end(&w), 11);
	spop_w_begin(&w, buf, 10, SPOP_FRM_ACK, 2, 1);
	cr_assert_eq(spop_w_end(&w), -1);
}

Test(spop, strstatus_has_a_text_for_every_status)
{
	static const int codes[] = {
		0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 99,
	};

	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		const char *s = spop_strstatus(codes[i]);

		cr_assert_not_null(s);
		cr_assert_gt(strlen(s), 0);
		for (size_t j = 0; j < i && codes[i] != 99; j++)
			cr_assert_str_neq(s, spop_strstatus(codes[j]));
	}
	cr_assert_str_eq(spop_strstatus(SPOP_ST_TOO_BIG), "frame is too big");
	cr_assert_str_eq(spop_strstatus(SPOP_ST_FRAG_NOT_SUPPORTED),
	                 "fragmentation not supported");
	cr_assert_not_null(spop_strstatus(-1));
	cr_assert_not_null(spop_strstatus(1000));
}

/* The ACK's set-var shortcut (one write of the action, scope, name and
 * type when the room is known) gives the bytes of the general encoder,
 * for every varint length, and the same verdict at the edge of the room:
 * a value that fits exactly is written, one byte less is an error. */
Test(writer, set_var_shortcut_writes_what_the_general_encoder_writes)
{
	static const int64_t ints[] = {
		0, 1, 239, 240, 2287, 2288, 264431, -1, INT64_MIN, INT64_MAX
	};
	char               big[300], a[512], b[512];
	struct spop_writer wa, wb;

	memset(big, 'x', sizeof(big));
	for (size_t k = 0; k < sizeof(ints) / sizeof(ints[0]) + 3; k++) {
		struct spop_data d = { .type = SPOP_DATA_INT64 };
		size_t           slen = k == 10 ? 0 : k == 11 ? 5 : sizeof(big);
		int              is_str = k >= 10;

		if (is_str) {
			d.type = SPOP_DATA_STRING;
			d.v.str.ptr = big;
			d.v.str.len = slen;
		} else {
			d.v.i = ints[k];
		}
		for (size_t room = 8; room <= sizeof(a); room++) {
			int na, nb;

			spop_w_begin(&wa, a, room, SPOP_FRM_ACK, 1, 1);
			spop_w_begin(&wb, b, room, SPOP_FRM_ACK, 1, 1);
			spop_w_set_var(&wa, SPOP_SCOPE_TXN, "remaining", 9, &d);
			if (is_str)
				spop_w_set_var_str(&wb, SPOP_SCOPE_TXN,
				                   "remaining", big, slen);
			else
				spop_w_set_var_int(&wb, SPOP_SCOPE_TXN,
				                   "remaining", ints[k]);
			na = spop_w_end(&wa);
			nb = spop_w_end(&wb);
			cr_assert_eq(na, nb, "value %zu, room %zu", k, room);
			cr_assert(na == -1 || memcmp(a, b, (size_t)na) == 0,
			          "value %zu, room %zu", k, room);
		}
	}
}
